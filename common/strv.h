/*
 * common/strv.h - the one growable, NULL-terminated string vector (argv,
 * environments, bind lists, directory listings).  Strings are copies the
 * vector owns; they are wiped on free, because an environment may hold
 * /env secrets.  Out of memory is sticky: after one failed add, every
 * later add fails too, so a builder may check once at the end.  Not
 * thread-safe; a vector belongs to whoever builds it.
 */
#ifndef RUNNEL_COMMON_STRV_H
#define RUNNEL_COMMON_STRV_H

#include <stddef.h>

typedef struct rn_strv {
	char **v;   /* NULL-terminated (NULL while empty) */
	size_t n;   /* strings in v */
	size_t cap; /* slots allocated in v */
	int oom;    /* an add failed: the vector is incomplete */
} rn_strv_t;

/* Adds a copy of str.  0, or -1 out of memory (then and later). */
int rn_strv_add(rn_strv_t *s, const char *str);
/* Adds printf output.  0, or -1 out of memory. */
int rn_strv_addf(rn_strv_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets NAME=value, replacing an earlier NAME.  0, or -1 out of memory. */
int rn_strv_setenv(rn_strv_t *s, const char *name, const char *value);
/* Wipes and frees every string and the array; s is empty again. */
void rn_strv_free(rn_strv_t *s);

#endif
