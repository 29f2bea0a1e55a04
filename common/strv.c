/*
 * common/strv.c - string vectors (see strv.h).
 */
#include "common/strv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends owned (NULL: out of memory), keeping the NULL terminator. */
static int take(rn_strv_t *s, char *owned)
{
	if (!owned || s->oom) {
		free(owned);
		s->oom = 1;
		return -1;
	}
	if (s->n + 2 > s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 16;
		char **nv = realloc(s->v, nc * sizeof(*nv));
		if (!nv) {
			free(owned);
			s->oom = 1;
			return -1;
		}
		s->v = nv;
		s->cap = nc;
	}
	s->v[s->n++] = owned;
	s->v[s->n] = NULL;
	return 0;
}

int rn_strv_add(rn_strv_t *s, const char *str)
{
	return take(s, strdup(str));
}

int rn_strv_addf(rn_strv_t *s, const char *fmt, ...)
{
	va_list ap;
	char *p = NULL;

	va_start(ap, fmt);
	if (vasprintf(&p, fmt, ap) < 0)
		p = NULL;
	va_end(ap);
	return take(s, p);
}

int rn_strv_setenv(rn_strv_t *s, const char *name, const char *value)
{
	size_t nl = strlen(name);

	for (size_t i = 0; i < s->n; i++) {
		if (!strncmp(s->v[i], name, nl) && s->v[i][nl] == '=') {
			char *nv = NULL;
			if (asprintf(&nv, "%s=%s", name, value) < 0) {
				s->oom = 1;
				return -1;
			}
			explicit_bzero(s->v[i], strlen(s->v[i]));
			free(s->v[i]);
			s->v[i] = nv;
			return 0;
		}
	}
	return rn_strv_addf(s, "%s=%s", name, value);
}

void rn_strv_free(rn_strv_t *s)
{
	for (size_t i = 0; i < s->n; i++) {
		explicit_bzero(s->v[i], strlen(s->v[i]));
		free(s->v[i]);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}
