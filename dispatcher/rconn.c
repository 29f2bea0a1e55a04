/*
 * dispatcher/rconn.c - a self-healing async hiredis connection (see rconn.h).
 */
#include "dispatcher/rconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "common/log.h"
#include "common/redis.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000

struct dispatcher_rconn {
	struct event_base *base;
	rn_redis_url_t url;
	const char *name;
	dispatcher_rconn_state_cb state_cb;
	void *arg;
	redisAsyncContext *ac;
	struct event *ev_retry;
	int up;
	unsigned attempt; /* reconnects since the last success */
	int freeing;
	int logged_down;
};

typedef struct pending {
	dispatcher_rconn_reply_cb cb;
	void *arg;
} pending_t;

static void connect_now(dispatcher_rconn_t *c);

static void schedule_retry(dispatcher_rconn_t *c)
{
	struct timeval tv;

	if (c->freeing)
		return;
	long ms = rn_backoff_ms(c->attempt++, BACKOFF_MIN_MS, BACKOFF_MAX_MS);

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	event_add(c->ev_retry, &tv);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	connect_now(arg);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	dispatcher_rconn_t *c = ac->data;

	if (status != REDIS_OK) {
		/* hiredis frees the context after this callback. */
		if (!c->logged_down)
			rn_log_warn(NULL, "redis_connect_failed", "%s: %s", c->name, ac->errstr);
		c->logged_down = 1;
		c->ac = NULL;
		schedule_retry(c);
		return;
	}
	c->up = 1;
	c->attempt = 0;
	if (c->logged_down)
		rn_log_info(NULL, "redis_connected", "%s: connected again", c->name);
	c->logged_down = 0;
	if (c->state_cb)
		c->state_cb(c, 1, c->arg);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	dispatcher_rconn_t *c = ac->data;
	int was_up = c->up;

	c->ac = NULL;
	c->up = 0;
	if (c->freeing)
		return;
	if (status != REDIS_OK)
		rn_log_warn(NULL, "redis_disconnected", "%s: %s", c->name, ac->errstr);
	c->logged_down = 1;
	if (was_up && c->state_cb)
		c->state_cb(c, 0, c->arg);
	schedule_retry(c);
}

/* AUTH / SELECT failures leave the connection useless: drop it and retry. */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;

	(void)priv;
	if (reply && reply->type == REDIS_REPLY_ERROR) {
		dispatcher_rconn_t *c = ac->data;

		rn_log_error(NULL, "redis_setup_failed", "%s: %.200s", c->name, reply->str);
		redisAsyncDisconnect(ac);
	}
}

static void connect_now(dispatcher_rconn_t *c)
{
	redisAsyncContext *ac;

	if (c->freeing || c->ac)
		return;
	ac = redisAsyncConnect(c->url.host, c->url.port);
	if (!ac) {
		schedule_retry(c);
		return;
	}
	if (ac->err) {
		if (!c->logged_down)
			rn_log_warn(NULL, "redis_connect_failed", "%s: %s", c->name, ac->errstr);
		c->logged_down = 1;
		redisAsyncFree(ac);
		schedule_retry(c);
		return;
	}
	ac->data = c;
	c->ac = ac;
	redisLibeventAttach(ac, c->base);
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	/* Queued ahead of everything else; written once the socket connects. */
	if (c->url.password[0] != '\0')
		redisAsyncCommand(ac, on_setup_reply, NULL, "AUTH %s", c->url.password);
	if (c->url.db != 0)
		redisAsyncCommand(ac, on_setup_reply, NULL, "SELECT %d", c->url.db);
	redisAsyncCommand(ac, on_setup_reply, NULL, "CLIENT SETNAME %s", c->name);
}

dispatcher_rconn_t *dispatcher_rconn_new(struct event_base *base, const rn_redis_url_t *url,
                                         const char *name, dispatcher_rconn_state_cb state_cb,
                                         void *arg)
{
	dispatcher_rconn_t *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->base = base;
	c->url = *url;
	c->name = name;
	c->state_cb = state_cb;
	c->arg = arg;
	c->attempt = 0;
	c->ev_retry = evtimer_new(base, on_retry, c);
	if (!c->ev_retry) {
		free(c);
		return NULL;
	}
	connect_now(c);
	return c;
}

int dispatcher_rconn_up(const dispatcher_rconn_t *c)
{
	return c->up;
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
	pending_t *p = priv;

	(void)ac;
	if (p->cb)
		p->cb(r, p->arg);
	free(p);
}

int dispatcher_rconn_cmd(dispatcher_rconn_t *c, dispatcher_rconn_reply_cb cb, void *arg,
                         int argc, const char **argv, const size_t *argvlen)
{
	pending_t *p;

	if (!c->up || !c->ac)
		return -1;
	p = malloc(sizeof(*p));
	if (!p)
		return -1;
	p->cb = cb;
	p->arg = arg;
	if (redisAsyncCommandArgv(c->ac, on_reply, p, argc, argv, argvlen) != REDIS_OK) {
		free(p);
		return -1;
	}
	return 0;
}

void dispatcher_rconn_free(dispatcher_rconn_t *c)
{
	if (!c)
		return;
	c->freeing = 1;
	if (c->ac) {
		redisAsyncContext *ac = c->ac;

		c->ac = NULL;
		c->up = 0;
		/* Runs every pending callback with a NULL reply. */
		redisAsyncFree(ac);
	}
	event_free(c->ev_retry);
	free(c);
}
