/*
 * tests/cli/cliredis.h - the start the CLI tests that run `runnel` against
 * Redis share: the binary from argv, a redis-server of the test's own, a
 * connection to it and the RUNNEL_REDIS_URL the runs get; and reading a
 * stream back as text.
 */
#ifndef RUNNEL_TESTS_CLI_CLIREDIS_H
#define RUNNEL_TESTS_CLI_CLIREDIS_H

#include "tests/support/harness.h"

typedef struct cli_redis {
	const char *bin; /* the runnel binary (argv[1]) */
	th_redis_t r;
	redisContext *c;
	char *env_url; /* "RUNNEL_REDIS_URL=<r.url>", harness-owned */
} cli_redis_t;

/* Takes the binary from argv (ends the test with "usage: NAME
 * RUNNEL_BINARY" when argv is not just that), starts Redis and connects;
 * ends the test when either fails. */
void cli_redis_start(cli_redis_t *t, int argc, char **argv, const char *name);

/* The fields of every entry of stream key, one line each: "value", or
 * "name=value" when names is set.  Harness-owned; "" for no entries. */
char *cli_stream_text(redisContext *c, const char *key, int names);

#endif
