/*
 * tests/cli/cliredis.c - the CLI tests' Redis start and stream reading (see
 * cliredis.h).
 */
#include "tests/cli/cliredis.h"

void cli_redis_start(cli_redis_t *t, int argc, char **argv, const char *name)
{
	TH_REQUIRE(argc == 2, "usage: %s RUNNEL_BINARY", name);
	t->bin = argv[1];
	TH_REQUIRE(th_redis_start(&t->r, NULL) == 0, "redis");
	t->c = th_redis_connect(&t->r);
	TH_REQUIRE(t->c);
	t->env_url = th_strf("RUNNEL_REDIS_URL=%s", t->r.url);
}

char *cli_stream_text(redisContext *c, const char *key, int names)
{
	redisReply *r = redisCommand(c, "XRANGE %s - +", key);
	char *s = th_strf("%s", "");
	for (size_t i = 0; r && i < r->elements; i++) {
		redisReply *f = r->element[i]->element[1];
		for (size_t k = 0; k + 1 < f->elements; k += 2)
			s = names ? th_strf("%s%s=%s\n", s, f->element[k]->str, f->element[k + 1]->str)
			          : th_strf("%s%s\n", s, f->element[k + 1]->str);
	}
	if (r)
		freeReplyObject(r);
	return s;
}
