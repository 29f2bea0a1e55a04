/*
 * tests/support/check.h - the one assertion core of runnel's tests: checks
 * that count, print their location on failure and go on (TH_CHECK), or end
 * the test (TH_REQUIRE), and the summary that turns the count into the exit
 * status (th_done).  Pure unit tests (tests/proto) link only this
 * (runnel_testcheck); harness.h includes it for everyone else.
 *
 * Output: a failure prints "# FAIL file:line: cond: message" on stderr;
 * th_done prints "PASS <test>: N checks" or "FAIL <test>: F of N checks
 * failed" on stdout.  The test's name is the program's unless
 * th_check_name() (or th_init) set another.
 *
 * @locality any thread may check; th_done and TH_REQUIRE from the main one.
 */
#ifndef RUNNEL_TESTS_SUPPORT_CHECK_H
#define RUNNEL_TESTS_SUPPORT_CHECK_H

#include <stddef.h>

/*
 * TH_CHECK(cond, fmt, ...): when cond is false, prints the failure and marks
 * the test failed; the test goes on.  The message is optional:
 * TH_CHECK(x == 1) is fine.
 * TH_REQUIRE(cond, fmt, ...): the same, then ends the test at once with exit
 * code 1 (atexit cleanup still runs).  Use it when later steps make no sense
 * without cond (a server that did not start).
 * Both evaluate cond exactly once and yield nothing (statements).
 */
#define TH_CHECK(cond, ...) \
	do { \
		th_count_check(); \
		if (!(cond)) \
			th_check_failed(__FILE__, __LINE__, #cond, " " __VA_ARGS__); \
	} while (0)

#define TH_REQUIRE(cond, ...) \
	do { \
		th_count_check(); \
		if (!(cond)) { \
			th_check_failed(__FILE__, __LINE__, #cond, " " __VA_ARGS__); \
			th_abort_test(); \
		} \
	} while (0)

/*
 * TH_CHECK_MEM(name, got, got_len, want): a (pointer, length) string equals
 * the C string want; on failure prints both.  TH_CHECK_STR(name, got, want):
 * the same for a C string got (NULL never equals).
 */
#define TH_CHECK_MEM(name, got, got_len, want) \
	do { \
		const char *thg_ = (got); \
		size_t thgl_ = (got_len); \
		th_count_check(); \
		if (!th_memeq(thg_, thgl_, (want))) \
			th_check_failed(__FILE__, __LINE__, #got, " %s:\n   got  %.*s\n   want %s", (name), \
			                thg_ ? (int)thgl_ : 6, thg_ ? thg_ : "(null)", (want)); \
	} while (0)

#define TH_CHECK_STR(name, got, want) \
	do { \
		const char *ths_ = (got); \
		TH_CHECK_MEM(name, ths_, th_strlen0(ths_), want); \
	} while (0)

/* Prints "# file:line: message" without failing (progress notes). */
#define TH_NOTE(...) th_note(__FILE__, __LINE__, __VA_ARGS__)

/* Names the test in the summary (NULL or "": the program's name). */
void th_check_name(const char *test_name);

/* Prints the summary line and returns the exit code (0 or 1) for main. */
int th_done(void);

/* Number of failed checks so far (any thread may call). */
int th_failures(void);

/* String equality that accepts NULL (NULL equals only NULL).  1 or 0. */
int th_streq(const char *a, const char *b);

/* 1 when (got, got_len) is non-NULL and equals the C string want, else 0. */
int th_memeq(const char *got, size_t got_len, const char *want);

/* strlen that takes NULL (0). */
size_t th_strlen0(const char *s);

/* Implementation of the macros above; call them through the macros. */
void th_count_check(void);
void th_check_failed(const char *file, int line, const char *cond,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void th_note(const char *file, int line, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void th_abort_test(void) __attribute__((noreturn));

#endif
