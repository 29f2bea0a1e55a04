/*
 * common/dynbuf.h - the one growable byte buffer (after curl's dynbuf):
 * its maximum is given at init and enforced on every add, so no buffer
 * grows without a cap.  The bytes are always NUL-terminated once anything
 * was added (the NUL is not counted in len nor in the cap).  Also an HTTP
 * answer body on top of it, libcurl's write callback for the programs
 * that fetch (worker stages, runnel-agent, the CLI, the stub).
 *
 * Not thread-safe: a buffer belongs to whoever fills it.  It never wipes:
 * a buffer that may hold a secret is wiped by its owner before free, and
 * grows by realloc, so such an owner sizes it once (rn_dynbuf_reserve).
 */
#ifndef RUNNEL_COMMON_DYNBUF_H
#define RUNNEL_COMMON_DYNBUF_H

#include <stdarg.h>
#include <stddef.h>

#define RN_DYNBUF_OOM     (-1) /* out of memory: the buffer is unchanged */
#define RN_DYNBUF_TOO_BIG (-2) /* the add would pass the maximum: unchanged */

typedef struct rn_dynbuf {
	char *p;    /* malloc'd, NUL-terminated; NULL until the first add */
	size_t len; /* bytes in p, at most max */
	size_t cap; /* bytes allocated in p (len + 1 at least) */
	size_t max; /* the cap on len, from init */
} rn_dynbuf_t;

/* An empty buffer that will never hold more than max bytes (max below
 * SIZE_MAX / 2). */
void rn_dynbuf_init(rn_dynbuf_t *b, size_t max);
/* Appends n bytes.  0, RN_DYNBUF_TOO_BIG or RN_DYNBUF_OOM. */
int rn_dynbuf_add(rn_dynbuf_t *b, const void *data, size_t n);
/* Appends a NUL-terminated string.  Same returns. */
int rn_dynbuf_adds(rn_dynbuf_t *b, const char *s);
/* Appends printf output.  Same returns (RN_DYNBUF_OOM also for a format
 * error). */
int rn_dynbuf_addf(rn_dynbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rn_dynbuf_vaddf(rn_dynbuf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Makes room for len + n bytes without adding any (p is then not NULL).
 * Same returns. */
int rn_dynbuf_reserve(rn_dynbuf_t *b, size_t n);
/* Drops the first n bytes (all of them when n >= len), keeping the rest
 * NUL-terminated and the memory. */
void rn_dynbuf_consume(rn_dynbuf_t *b, size_t n);
/* Empties the buffer, keeping its memory. */
void rn_dynbuf_reset(rn_dynbuf_t *b);
/* Frees the memory; the buffer is empty again (same max). */
void rn_dynbuf_free(rn_dynbuf_t *b);
/* Hands over the bytes (malloc'd, NUL-terminated, "" when empty; NULL out
 * of memory) with their length in *lenp; the buffer is empty again. */
char *rn_dynbuf_take(rn_dynbuf_t *b, size_t *lenp);

/* An HTTP answer body kept in memory. */
typedef struct rn_body {
	rn_dynbuf_t buf;
	int keep_head; /* past the cap: 1 keeps the first max bytes and reads on,
	                * 0 stops the transfer (CURLE_WRITE_ERROR) */
	int too_big;   /* the answer went over the cap */
	int oom;
} rn_body_t;

void rn_body_init(rn_body_t *b, size_t max, int keep_head);
/* CURLOPT_WRITEFUNCTION for a rn_body_t (CURLOPT_WRITEDATA). */
size_t rn_body_write(char *ptr, size_t size, size_t nmemb, void *userdata);
void rn_body_free(rn_body_t *b);

#endif
