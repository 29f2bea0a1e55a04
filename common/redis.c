/*
 * common/redis.c - blocking Redis connect and reconnect backoff (see redis.h).
 */
#include "common/redis.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

/* A setup command's reply: 0 unless it failed (the reply is freed). */
static int setup_ok(redisReply *r)
{
	int ok = r && r->type != REDIS_REPLY_ERROR;

	if (r)
		freeReplyObject(r);
	return ok;
}

redisContext *rn_redis_connect(const rn_redis_url_t *url, int connect_timeout_ms,
                               int command_timeout_ms, char *errstr, size_t errstr_size)
{
	struct timeval tv = { connect_timeout_ms / 1000, (connect_timeout_ms % 1000) * 1000 };
	struct timeval ctv = { command_timeout_ms / 1000, (command_timeout_ms % 1000) * 1000 };
	redisContext *c = redisConnectWithTimeout(url->host, url->port, tv);

	if (!c) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	if (c->err) {
		snprintf(errstr, errstr_size, "%s", c->errstr);
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, ctv);
	redisEnableKeepAlive(c);
	/* The AUTH reply is not quoted: say only what failed. */
	if (url->password[0] != '\0' && !setup_ok(redisCommand(c, "AUTH %s", url->password))) {
		snprintf(errstr, errstr_size, "authentication failed");
		redisFree(c);
		return NULL;
	}
	if (url->db != 0 && !setup_ok(redisCommand(c, "SELECT %d", url->db))) {
		snprintf(errstr, errstr_size, "SELECT %d failed", url->db);
		redisFree(c);
		return NULL;
	}
	return c;
}

long rn_backoff_ms(unsigned attempt, long min_ms, long max_ms)
{
	static _Thread_local uint64_t state;
	long d = min_ms > 0 ? min_ms : 1;

	for (unsigned i = 0; i < attempt && d < max_ms; i++)
		d *= 2;
	if (d > max_ms)
		d = max_ms;
	if (state == 0)
		state = (uint64_t)rn_mono_us() ^ ((uint64_t)(uintptr_t)pthread_self() << 1) ^ 1;
	/* xorshift64: cheap, per thread, good enough to spread retries. */
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	long half = d / 2;
	return d - half + (half > 0 ? (long)(state % (uint64_t)(half + 1)) : 0);
}

int rn_redis_reply_check(const redisContext *c, const redisReply *r, const char *what,
                         char *errstr, size_t errstr_size)
{
	if (!r) {
		snprintf(errstr, errstr_size, "redis %s: %s", what,
		         c->errstr[0] != '\0' ? c->errstr : "connection lost");
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		snprintf(errstr, errstr_size, "redis %s: %.160s", what, r->str);
		return -1;
	}
	return 0;
}

long long rn_redis_reply_ll(const redisReply *r)
{
	if (r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r->type == REDIS_REPLY_STRING)
		return strtoll(r->str, NULL, 10);
	return 0;
}

long long rn_redis_command_ll(redisContext *c, int argc, const char **argv, const size_t *lens,
                              const char *what, char *errstr, size_t errstr_size)
{
	redisReply *r = redisCommandArgv(c, argc, argv, lens);
	long long v = -1;

	if (rn_redis_reply_check(c, r, what, errstr, errstr_size) == 0)
		v = rn_redis_reply_ll(r);
	if (r)
		freeReplyObject(r);
	return v;
}
