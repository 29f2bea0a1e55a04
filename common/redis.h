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
