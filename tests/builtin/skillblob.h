/*
 * tests/builtin/skillblob.h - a skill zip served by the worker fixture's
 * workspace stub, for the builtin worker tests (the run's config names it
 * by URL in "skills").
 */
#ifndef RUNNEL_TESTS_BUILTIN_SKILLBLOB_H
#define RUNNEL_TESTS_BUILTIN_SKILLBLOB_H

#include <stddef.h>

#include "tests/worker/wtest.h"

typedef struct skill_file {
	const char *name; /* path inside the zip */
	const char *data; /* a C string */
	int mode;         /* 0644, 0755 */
} skill_file_t;

/* Writes files into T->dir/<name> as a zip, serves it from T's workspace
 * stub as blob name and puts the blob's URL into url.  Ends the test when
 * any step fails. */
void skill_blob(wt_t *T, const char *name, const skill_file_t *files, size_t n, char *url, size_t url_size);

#endif
