/*
 * cli/rconn.c - connecting to Redis the way every verb needs it.
 */
#include "rconn.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "common/util.h"
#include "proto/keys.h"

void cli_rconn_error(redisContext *c, const redisReply *r, char *errstr, size_t errstr_size)
{
	if (r && r->type == REDIS_REPLY_ERROR)
		snprintf(errstr, errstr_size, "Redis: %.200s", r->str);
	else if (c && c->err)
		snprintf(errstr, errstr_size, "Redis: %.200s", c->errstr);
	else
		snprintf(errstr, errstr_size, "Redis: unexpected reply");
}

redisContext *cli_rconn_open(const char *url, char *errstr, size_t errstr_size)
{
	rn_redis_url_t u;
	char err[256];

	if (rn_redis_url_parse(url, &u, err, sizeof(err)) < 0) {
		snprintf(errstr, errstr_size, "%s", err);
		return NULL;
	}
	struct timeval tv = { .tv_sec = 3, .tv_usec = 0 };
	redisContext *c = redisConnectWithTimeout(u.host, u.port, tv);
	if (!c || c->err) {
		snprintf(errstr, errstr_size, "cannot reach Redis at %s:%d: %s", u.host, u.port,
		         c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	/* Commands (XREAD BLOCK included) answer well within this. */
	struct timeval ctv = { .tv_sec = 10, .tv_usec = 0 };
	redisSetTimeout(c, ctv);

	redisReply *r;
	if (u.password[0]) {
		r = redisCommand(c, "AUTH %s", u.password);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			/* The reply names no secret, but say only what failed. */
			snprintf(errstr, errstr_size, "cannot reach Redis at %s:%d: authentication failed",
			         u.host, u.port);
			goto fail;
		}
		freeReplyObject(r);
	}
	if (u.db) {
		r = redisCommand(c, "SELECT %d", u.db);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			snprintf(errstr, errstr_size, "cannot reach Redis at %s:%d: SELECT %d failed",
			         u.host, u.port, u.db);
			goto fail;
		}
		freeReplyObject(r);
	}
	memset(u.password, 0, sizeof(u.password));
	return c;
fail:
	memset(u.password, 0, sizeof(u.password));
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return NULL;
}

int cli_rconn_run_exists(redisContext *c, const char *prefix, const char *run_id,
                         char *errstr, size_t errstr_size)
{
	char kstate[PROTO_KEY_MAX], kout[PROTO_KEY_MAX];

	if (proto_key(kstate, sizeof(kstate), prefix, run_id, PROTO_KEY_STATE) < 0 ||
	    proto_key(kout, sizeof(kout), prefix, run_id, PROTO_KEY_OUT) < 0) {
		snprintf(errstr, errstr_size, "invalid run id or key prefix");
		return -1;
	}
	redisReply *r = redisCommand(c, "EXISTS %s %s", kstate, kout);
	if (!r || r->type != REDIS_REPLY_INTEGER) {
		cli_rconn_error(c, r, errstr, errstr_size);
		if (r)
			freeReplyObject(r);
		return -1;
	}
	int found = r->integer > 0;
	freeReplyObject(r);
	return found;
}
