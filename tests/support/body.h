/*
 * tests/support/body.h - the one HTTP body sink of the tests: a growable,
 * NUL-terminated buffer with a cap and an explicit policy for what happens
 * past it, and a write callback with libcurl's signature (curl itself is not
 * needed to include this).
 *
 * Cap policies:
 *   TH_BODY_FAIL      a body over max stops the transfer (the callback
 *                     returns 0, curl reports CURLE_WRITE_ERROR); what came
 *                     before stays in the buffer.  For tests, where a body
 *                     that large is a bug in the program under test.
 *   TH_BODY_TRUNCATE  bytes past max are dropped and counted in
 *                     `truncated`; the transfer goes on (a streaming answer
 *                     the test only reads the start of).
 * TH_BODY_MAX (64 MiB) is the cap every test helper uses unless it says
 * otherwise.  The production sinks keep their own caps: cli/http.c
 * truncates at CLI_HTTP_BODY_MAX, runnel-workspace-stub's mint verb fails
 * over 1 MiB.
 */
#ifndef RUNNEL_TESTS_SUPPORT_BODY_H
#define RUNNEL_TESTS_SUPPORT_BODY_H

#include <stddef.h>

#define TH_BODY_MAX ((size_t)64 << 20)

typedef enum th_body_policy {
	TH_BODY_FAIL,
	TH_BODY_TRUNCATE,
} th_body_policy_t;

typedef struct th_body {
	char *body; /* NUL-terminated once anything arrived; malloc'd */
	size_t len;
	size_t cap; /* allocated bytes */
	size_t max; /* 0: TH_BODY_MAX */
	th_body_policy_t policy;
	size_t truncated; /* bytes dropped (TH_BODY_TRUNCATE) */
	int over;         /* 1 once a write went past max */
} th_body_t;

/* A zeroed th_body_t is a valid empty body with the FAIL policy at
 * TH_BODY_MAX; this sets another cap or policy. */
void th_body_init(th_body_t *b, size_t max, th_body_policy_t policy);

/* Appends n bytes under b's policy.  Returns n when accepted (kept or
 * dropped by TRUNCATE), 0 when FAIL refused them or memory ran out. */
size_t th_body_add(th_body_t *b, const char *p, size_t n);

/* libcurl CURLOPT_WRITEFUNCTION / HEADERFUNCTION with a th_body_t * as data. */
size_t th_body_sink(char *p, size_t size, size_t nmemb, void *arg);

/* Hands over the buffer (never NULL: "" when nothing arrived; caller frees)
 * and empties b; *len (may be NULL) gets its length. */
char *th_body_take(th_body_t *b, size_t *len);

void th_body_free(th_body_t *b);

#endif
