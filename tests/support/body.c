/*
 * tests/support/body.c - the capped body buffer behind body.h.
 */
#include "tests/support/body.h"

#include <stdlib.h>
#include <string.h>

void th_body_init(th_body_t *b, size_t max, th_body_policy_t policy)
{
	memset(b, 0, sizeof(*b));
	b->max = max;
	b->policy = policy;
}

size_t th_body_add(th_body_t *b, const char *p, size_t n)
{
	size_t max = b->max ? b->max : TH_BODY_MAX;
	size_t keep = n;
	if (b->len + n > max) {
		b->over = 1;
		if (b->policy == TH_BODY_FAIL)
			return 0;
		keep = max - b->len;
		b->truncated += n - keep;
	}
	if (b->len + keep + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + keep + 1)
			cap *= 2;
		char *nb = realloc(b->body, cap);
		if (!nb)
			return 0;
		b->body = nb;
		b->cap = cap;
	}
	memcpy(b->body + b->len, p, keep);
	b->len += keep;
	b->body[b->len] = '\0';
	return n;
}

size_t th_body_sink(char *p, size_t size, size_t nmemb, void *arg)
{
	return th_body_add(arg, p, size * nmemb);
}

char *th_body_take(th_body_t *b, size_t *len)
{
	char *s = b->body ? b->body : strdup("");
	if (len)
		*len = b->len;
	b->body = NULL;
	b->len = b->cap = 0;
	b->truncated = 0;
	b->over = 0;
	return s;
}

void th_body_free(th_body_t *b)
{
	free(b->body);
	b->body = NULL;
	b->len = b->cap = 0;
}
