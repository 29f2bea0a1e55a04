/*
 * common/redis.h - the one way runnel's programs open a blocking Redis
 * connection (connect with a timeout, command timeout, keepalive, AUTH,
 * SELECT) and the one reconnect backoff (doubling, capped, with jitter so
 * a fleet that lost Redis together does not come back in step).  The
 * dispatcher's async connection (dispatcher/rconn.c) sends its AUTH and
 * SELECT through libevent but takes its delays from rn_backoff_ms() too.
 * Any thread; a context belongs to the thread that uses it.
 */
#ifndef RUNNEL_COMMON_REDIS_H
#define RUNNEL_COMMON_REDIS_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include <stdint.h>

#include "common/util.h"

/*
 * Connects to url within connect_timeout_ms, sets the command timeout to
 * command_timeout_ms (so a dead server cannot hang the caller), enables TCP
 * keepalive, then AUTH (when the URL has a password) and SELECT (when db is
 * not 0).  Returns a context the caller frees with redisFree(), or NULL
 * with errstr set to the reason alone, for the caller to prefix with where:
 * hiredis' connect error, "out of memory", "authentication failed" or
 * "SELECT N failed" (never the password, never the server's AUTH reply).
 */
redisContext *rn_redis_connect(const rn_redis_url_t *url, int connect_timeout_ms,
                               int command_timeout_ms, char *errstr, size_t errstr_size);

/*
 * The delay before retry number attempt (0, 1, 2, ...): min_ms doubled per
 * attempt up to max_ms, then jittered to a value in [d/2, d] (equal
 * jitter).  Thread-safe.
 */
long rn_backoff_ms(unsigned attempt, long min_ms, long max_ms);

/*
 * 1 while the server is still loading its dataset, 0 when it serves, -1
 * when the connection failed.  Redis accepts connections while it replays
 * its AOF and refuses most commands with LOADING meanwhile; INFO is
 * allowed.
 */
int rn_redis_loading(redisContext *c);

/*
 * A blocking connection that reconnects itself, for the threads that talk
 * to Redis all their life (the worker's main loop, claimer and control
 * reader, the dispatcher's janitor).  It holds a common/rcluster router,
 * so a standalone server or any node of a Redis Cluster will do: one backoff (rn_backoff_ms from
 * RN_REDIS_BACKOFF_MIN_MS to RN_REDIS_BACKOFF_MAX_MS), one command timeout,
 * one log event for each change ("redis_unreachable" when it goes down,
 * again every 20 failed connects; "redis_reconnected" when it is back), and
 * a server (or any primary of a cluster) still loading its data (LOADING)
 * counted as down.
 * @locality the thread that owns it.
 */
#define RN_REDIS_BACKOFF_MIN_MS     50
#define RN_REDIS_BACKOFF_MAX_MS     2000
#define RN_REDIS_COMMAND_TIMEOUT_MS 5000 /* above any BLOCK these threads send */

struct rn_rcluster; /* common/rcluster.h */

typedef struct rn_redis_conn {
	const rn_redis_url_t *url; /* borrowed */
	char who[32];              /* names the owner in its log lines */
	char client_name[48];      /* CLIENT SETNAME after each connect; "" none */
	int connect_timeout_ms;
	struct rn_rcluster *c; /* the router; NULL while down */
	unsigned attempt;      /* failed connects since the last success */
	int64_t retry_at;      /* monotonic ms: no connect before */
	int down;              /* it failed since the last success */
} rn_redis_conn_t;

void rn_redis_conn_init(rn_redis_conn_t *rc, const rn_redis_url_t *url, const char *who,
                        const char *client_name, int connect_timeout_ms);
/* The router, connecting first when there is none and the backoff has
 * passed; NULL while Redis is down, with *wait_ms (when not NULL) how long
 * until the next try is worth it. */
struct rn_rcluster *rn_redis_conn_get(rn_redis_conn_t *rc, long *wait_ms);
/* A command on the router failed (err in words): logged as redis_error,
 * the router is dropped and the next connect waits for the backoff. */
void rn_redis_conn_failed(rn_redis_conn_t *rc, const char *what, const char *err);
/* Frees the router (the connection may be used again). */
void rn_redis_conn_close(rn_redis_conn_t *rc);

/* Turns a missing reply (the context's error, else "connection lost") or an
 * error reply into errstr as "redis WHAT: REASON"; 0 when r is usable.
 * Does not free r. */
int rn_redis_reply_check(const redisContext *c, const redisReply *r, const char *what,
                         char *errstr, size_t errstr_size);

/* An integer reply, or a decimal string reply (what Lua's tostring gives),
 * as a number; 0 for any other reply. */
long long rn_redis_reply_ll(const redisReply *r);

/* Runs one command (redisCommandArgv) whose reply is a number (an EVAL
 * returning an integer): the number, or -1 with errstr as
 * rn_redis_reply_check words it. */
long long rn_redis_command_ll(redisContext *c, int argc, const char **argv, const size_t *lens,
                              const char *what, char *errstr, size_t errstr_size);

#endif
