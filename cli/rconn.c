/*
 * cli/rconn.c - connecting to Redis the way every verb needs it.
 */
#include "rconn.h"

#include <stdio.h>
#include <string.h>

#include "common/redis.h"
#include "common/util.h"
#include "proto/keys.h"

void cli_rconn_error(rn_rcluster_t *c, const redisReply *r, char *errstr, size_t errstr_size)
{
	if (r && r->type == REDIS_REPLY_ERROR)
		snprintf(errstr, errstr_size, "Redis: %.200s", r->str);
	else if (c && !r && rn_rcluster_errstr(c)[0])
		snprintf(errstr, errstr_size, "Redis: %.200s", rn_rcluster_errstr(c));
	else
		snprintf(errstr, errstr_size, "Redis: unexpected reply");
}

rn_rcluster_t *cli_rconn_open(const char *url, char *errstr, size_t errstr_size)
{
	rn_redis_url_t u;
	char err[256];

	if (rn_redis_url_parse(url, &u, err, sizeof(err)) < 0) {
		snprintf(errstr, errstr_size, "%s", err);
		return NULL;
	}
	/* Commands (XREAD BLOCK included) answer well within 10 s.  A
	 * standalone server or any node of a cluster (common/rcluster). */
	char why[256];
	rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;
	o.connect_timeout_ms = 3000;
	o.command_timeout_ms = 10000;
	rn_rcluster_t *c = rn_rcluster_open(&u, &o, why, sizeof(why));
	if (!c)
		snprintf(errstr, errstr_size, "cannot reach Redis at %s:%d: %s", u.host, u.port, why);
	memset(u.password, 0, sizeof(u.password));
	return c;
}

int cli_rconn_run_exists(rn_rcluster_t *c, const char *prefix, const char *run_id,
                         char *errstr, size_t errstr_size)
{
	char kstate[PROTO_KEY_MAX], kout[PROTO_KEY_MAX];

	if (proto_key(kstate, sizeof(kstate), prefix, run_id, PROTO_KEY_STATE) < 0 ||
	    proto_key(kout, sizeof(kout), prefix, run_id, PROTO_KEY_OUT) < 0) {
		snprintf(errstr, errstr_size, "invalid run id or key prefix");
		return -1;
	}
	redisReply *r = rn_rcluster_command(c, 0, "EXISTS %s %s", kstate, kout);
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
