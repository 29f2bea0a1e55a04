/*
 * tests/support/check.c - the counters and printing behind check.h.
 */
#include "tests/support/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char th_name[128];
static atomic_int th_nchecks;
static atomic_int th_nfailed;

void th_check_name(const char *test_name)
{
	snprintf(th_name, sizeof(th_name), "%s",
	         test_name && *test_name ? test_name : program_invocation_short_name);
}

static const char *th_test_name(void)
{
	if (!th_name[0])
		th_check_name(NULL);
	return th_name;
}

void th_count_check(void)
{
	atomic_fetch_add(&th_nchecks, 1);
}

void th_check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&th_nfailed, 1);
	fprintf(stderr, "# FAIL %s:%d: %s:%s\n", file, line, cond, msg);
	fflush(stderr);
}

void th_note(const char *file, int line, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *base = strrchr(file, '/');
	fprintf(stderr, "# %s:%d: %s\n", base ? base + 1 : file, line, msg);
	fflush(stderr);
}

void th_abort_test(void)
{
	fprintf(stdout, "FAIL %s: stopped at a failed requirement (%d of %d checks failed)\n",
	        th_test_name(), atomic_load(&th_nfailed), atomic_load(&th_nchecks));
	fflush(stdout);
	exit(1);
}

int th_streq(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

int th_memeq(const char *got, size_t got_len, const char *want)
{
	return got && want && got_len == strlen(want) && memcmp(got, want, got_len) == 0;
}

size_t th_strlen0(const char *s)
{
	return s ? strlen(s) : 0;
}

int th_failures(void)
{
	return atomic_load(&th_nfailed);
}

int th_done(void)
{
	int f = atomic_load(&th_nfailed), n = atomic_load(&th_nchecks);
	if (f == 0)
		fprintf(stdout, "PASS %s: %d checks\n", th_test_name(), n);
	else
		fprintf(stdout, "FAIL %s: %d of %d checks failed\n", th_test_name(), f, n);
	fflush(stdout);
	return f == 0 ? 0 : 1;
}
