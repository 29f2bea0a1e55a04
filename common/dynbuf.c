/*
 * common/dynbuf.c - the capped growable buffer and the HTTP body on top of
 * it (see dynbuf.h).
 */
#include "common/dynbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first allocation; small buffers are the common case. */
#define DYNBUF_MIN 64

void rn_dynbuf_init(rn_dynbuf_t *b, size_t max)
{
	b->p = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

int rn_dynbuf_reserve(rn_dynbuf_t *b, size_t n)
{
	if (n > b->max - b->len)
		return RN_DYNBUF_TOO_BIG;
	size_t need = b->len + n + 1;
	if (need <= b->cap)
		return 0;
	/* Doubling, but never past what max allows (need <= limit here). */
	size_t limit = b->max + 1;
	size_t cap = b->cap ? b->cap : DYNBUF_MIN;
	while (cap < need)
		cap = cap > limit / 2 ? limit : cap * 2;
	if (cap > limit)
		cap = limit;
	char *p = realloc(b->p, cap);
	if (!p)
		return RN_DYNBUF_OOM;
	if (!b->p)
		p[0] = '\0';
	b->p = p;
	b->cap = cap;
	return 0;
}

int rn_dynbuf_add(rn_dynbuf_t *b, const void *data, size_t n)
{
	int rc = rn_dynbuf_reserve(b, n);
	if (rc < 0)
		return rc;
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int rn_dynbuf_adds(rn_dynbuf_t *b, const char *s)
{
	return rn_dynbuf_add(b, s, strlen(s));
}

int rn_dynbuf_vaddf(rn_dynbuf_t *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return RN_DYNBUF_OOM;
	int rc = rn_dynbuf_reserve(b, (size_t)n);
	if (rc < 0)
		return rc;
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int rn_dynbuf_addf(rn_dynbuf_t *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = rn_dynbuf_vaddf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void rn_dynbuf_consume(rn_dynbuf_t *b, size_t n)
{
	if (n >= b->len) {
		rn_dynbuf_reset(b);
		return;
	}
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
	b->p[b->len] = '\0';
}

void rn_dynbuf_reset(rn_dynbuf_t *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

void rn_dynbuf_free(rn_dynbuf_t *b)
{
	free(b->p);
	rn_dynbuf_init(b, b->max);
}

char *rn_dynbuf_take(rn_dynbuf_t *b, size_t *lenp)
{
	char *p = b->p ? b->p : strdup("");
	if (lenp)
		*lenp = b->p ? b->len : 0;
	rn_dynbuf_init(b, b->max);
	return p;
}

void rn_body_init(rn_body_t *b, size_t max, int keep_head)
{
	rn_dynbuf_init(&b->buf, max);
	b->keep_head = keep_head;
	b->too_big = 0;
	b->oom = 0;
}

size_t rn_body_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	rn_body_t *b = userdata;
	size_t n = size * nmemb;
	size_t keep = n;
	if (n > b->buf.max - b->buf.len) {
		b->too_big = 1;
		if (!b->keep_head)
			return 0; /* stops the transfer with CURLE_WRITE_ERROR */
		keep = b->buf.max - b->buf.len;
	}
	if (rn_dynbuf_add(&b->buf, ptr, keep) < 0) {
		b->oom = 1;
		return 0;
	}
	return n;
}

void rn_body_free(rn_body_t *b)
{
	rn_dynbuf_free(&b->buf);
}
