/*
 * common/redis.c - blocking Redis connect and reconnect backoff (see redis.h).
 */
#include "common/redis.h"
#include "common/log.h"
#include "common/rcluster.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void rn_redis_conn_init(rn_redis_conn_t *rc, const rn_redis_url_t *url, const char *who,
                        const char *client_name, int connect_timeout_ms)
{
	memset(rc, 0, sizeof(*rc));
	rc->url = url;
	snprintf(rc->who, sizeof(rc->who), "%s", who);
	snprintf(rc->client_name, sizeof(rc->client_name), "%s", client_name ? client_name : "");
	rc->connect_timeout_ms = connect_timeout_ms;
}

int rn_redis_loading(redisContext *c)
{
	redisReply *r = redisCommand(c, "INFO persistence");
	if (!r)
		return -1;
	int loading = r->type == REDIS_REPLY_STRING && strstr(r->str, "loading:1");
	if (r->type == REDIS_REPLY_ERROR)
		loading = !strncmp(r->str, "LOADING", 7);
	freeReplyObject(r);
	return loading;
}

static void conn_down(rn_redis_conn_t *rc, const char *why)
{
	long back = rn_backoff_ms(rc->attempt, RN_REDIS_BACKOFF_MIN_MS, RN_REDIS_BACKOFF_MAX_MS);
	if (rc->attempt % 20 == 0)
		rn_log_warn(NULL, "redis_unreachable", "%s: redis %s:%d: %s; retrying", rc->who, rc->url->host,
		            rc->url->port, why);
	rc->attempt++;
	rc->down = 1;
	rc->retry_at = rn_mono_ms() + back;
}

/* rn_redis_conn_get's LOADING check over every primary: a server still
 * loading its data, or (standalone) no answer at all. */
struct loading_check {
	int loading;
	int replies;
};

static int loading_reply(void *arg, const char *node, redisReply *r)
{
	struct loading_check *lc = arg;
	(void)node;
	if (!r)
		return 0;
	lc->replies++;
	if ((r->type == REDIS_REPLY_STRING && strstr(r->str, "loading:1")) ||
	    (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "LOADING", 7)))
		lc->loading = 1;
	return 0;
}

rn_rcluster_t *rn_redis_conn_get(rn_redis_conn_t *rc, long *wait_ms)
{
	if (rc->c)
		return rc->c;
	int64_t now = rn_mono_ms();
	if (now < rc->retry_at) {
		if (wait_ms)
			*wait_ms = (long)(rc->retry_at - now);
		return NULL;
	}
	char why[256];
	rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;
	o.connect_timeout_ms = rc->connect_timeout_ms;
	o.command_timeout_ms = RN_REDIS_COMMAND_TIMEOUT_MS;
	/* The owners retry with this backoff: a call waits out a short
	 * cluster hiccup, not a whole failover. */
	o.retry_budget_ms = 3000;
	rc->c = rn_rcluster_open(rc->url, &o, why, sizeof(why));
	if (rc->c) {
		static const char *argv[] = { "INFO", "persistence" };
		struct loading_check lc = { 0, 0 };
		rn_rcluster_each_primary(rc->c, 2, argv, NULL, loading_reply, &lc);
		if (lc.loading || !lc.replies) {
			rn_rcluster_free(rc->c);
			rc->c = NULL;
			snprintf(why, sizeof(why), "%s",
			         lc.loading ? "Redis is loading its dataset" : "connection lost while checking Redis");
		}
	}
	if (!rc->c) {
		conn_down(rc, why);
		if (wait_ms)
			*wait_ms = (long)(rc->retry_at - rn_mono_ms());
		return NULL;
	}
	if (rc->client_name[0]) {
		redisReply *r = rn_rcluster_command(rc->c, 0, "CLIENT SETNAME %s", rc->client_name);
		if (r)
			freeReplyObject(r);
	}
	if (rc->down)
		rn_log_info(NULL, "redis_reconnected", "%s: connected to Redis again", rc->who);
	rc->down = 0;
	rc->attempt = 0;
	return rc->c;
}

void rn_redis_conn_failed(rn_redis_conn_t *rc, const char *what, const char *err)
{
	rn_log_warn(NULL, "redis_error", "%s %s: %s", rc->who, what, err);
	rn_redis_conn_close(rc);
	rc->down = 1;
	rc->retry_at = rn_mono_ms() + rn_backoff_ms(rc->attempt, RN_REDIS_BACKOFF_MIN_MS, RN_REDIS_BACKOFF_MAX_MS);
}

void rn_redis_conn_close(rn_redis_conn_t *rc)
{
	if (rc->c)
		rn_rcluster_free(rc->c);
	rc->c = NULL;
}
