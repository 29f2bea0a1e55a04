/*
 * dispatcher/rconn.h - one asynchronous Redis connection on the loop
 * (hiredis 0.14 + its libevent adapter) that reconnects by itself with a
 * capped backoff and authenticates / selects the database first.
 *
 * @locality main (loop) thread.
 */
#ifndef RUNNEL_DISPATCHER_RCONN_H
#define RUNNEL_DISPATCHER_RCONN_H

#include <stddef.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "common/util.h"

typedef struct dispatcher_rconn dispatcher_rconn_t;

/* r is NULL when the command failed to complete (connection lost or freed);
 * hiredis owns r and frees it after the callback returns. */
typedef void (*dispatcher_rconn_reply_cb)(redisReply *r, void *arg);

/* Called with up = 1 once connected (commands may be sent), up = 0 after the
 * connection was lost (every pending reply callback has run with NULL). */
typedef void (*dispatcher_rconn_state_cb)(dispatcher_rconn_t *c, int up, void *arg);

/* name is kept by reference (a literal) and names the connection in logs and
 * in CLIENT SETNAME.  Connecting starts at once. */
dispatcher_rconn_t *dispatcher_rconn_new(struct event_base *base, const rn_redis_url_t *url,
                                         const char *name, dispatcher_rconn_state_cb state_cb,
                                         void *arg);

int dispatcher_rconn_up(const dispatcher_rconn_t *c);

/*
 * Sends one command (argv copied).  cb may be NULL.  0 when queued (cb will
 * run exactly once), -1 when the connection is down (cb will not run).
 */
int dispatcher_rconn_cmd(dispatcher_rconn_t *c, dispatcher_rconn_reply_cb cb, void *arg,
                         int argc, const char **argv, const size_t *argvlen);

/* Disconnects (pending callbacks run with NULL) and frees.  NULL ok. */
void dispatcher_rconn_free(dispatcher_rconn_t *c);

#endif
