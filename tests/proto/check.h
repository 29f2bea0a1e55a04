/*
 * tests/proto/check.h - the few checks the pure proto/ unit tests need:
 * failures are counted and printed with their location, and check_done()
 * turns the count into the exit status.
 */
#ifndef RUNNEL_TESTS_PROTO_CHECK_H
#define RUNNEL_TESTS_PROTO_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond, ...) do {                                            \
	check_count++;                                                   \
	if (!(cond)) {                                                   \
		check_failures++;                                        \
		fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__);                            \
		fputc('\n', stderr);                                     \
	}                                                                \
} while (0)

/* Compares a (pointer, length) string with an expected C string. */
#define CHECK_MEM(name, got, got_len, want) do {                          \
	const char *g_ = (got);                                           \
	size_t gl_ = (got_len);                                           \
	const char *w_ = (want);                                          \
	CHECK(g_ != NULL && gl_ == strlen(w_) && memcmp(g_, w_, gl_) == 0, \
	      "%s:\n   got  %.*s\n   want %s", (name), g_ ? (int)gl_ : 6,   \
	      g_ ? g_ : "(null)", w_);                                    \
} while (0)

#define CHECK_STR(name, got, want) do {                                   \
	const char *gs_ = (got);                                          \
	CHECK_MEM(name, gs_, gs_ ? strlen(gs_) : 0, want);                \
} while (0)

static inline int check_done(const char *what)
{
	if (check_failures != 0) {
		fprintf(stderr, "%s: %d of %d checks failed\n", what, check_failures, check_count);
		return 1;
	}
	printf("%s: all %d checks passed\n", what, check_count);
	return 0;
}

#endif
