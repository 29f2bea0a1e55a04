/*
 * dispatcher/wake.c - sharded pub/sub wake-ups (see wake.h).
 *
 * hiredis 0.14's asynchronous API knows SUBSCRIBE and PSUBSCRIBE but not
 * SSUBSCRIBE (it asserts on a push it did not expect), so a subscriber
 * connection here is a non-blocking redisContext driven by two libevent
 * events, hiredis parsing the replies.  What a connection was asked is
 * kept in a queue (AUTH, then one SSUBSCRIBE per channel) so that an
 * error reply (MOVED, TRYAGAIN, ...) is matched with its channel.
 */
#include "dispatcher/wake.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "common/list.h"
#include "common/log.h"
#include "common/rcluster.h"
#include "common/redis.h"

#define WAKE_BUCKETS       4096
#define WAKE_RESYNC_MS     100
#define WAKE_RESYNC_MAX_MS 2000

typedef struct wconn wconn_t;

struct dispatcher_wake_chan {
	dispatcher_wake_t *w;
	char *name;
	size_t len;
	unsigned slot;
	unsigned bucket;
	void (*cb)(void *arg);
	void *arg;
	wconn_t *conn; /* subscribed or asked on, or NULL */
	dispatcher_wake_chan_t *hnext;
	dispatcher_wake_chan_t *next, *prev;
};

struct wconn {
	dispatcher_wake_t *w;
	char host[256];
	int port;
	redisContext *c;
	struct event *ev_read, *ev_write;
	char **fifo; /* what was asked, in order: NULL for AUTH and SETNAME, else the channel */
	size_t fhead, ftail, fcap;
	int used; /* set during a pass when a channel is on it */
	wconn_t *next, *prev;
};

struct dispatcher_wake {
	struct event_base *base;
	rn_redis_url_t url;
	dispatcher_rroute_t *rr;
	dispatcher_wake_chan_t *buckets[WAKE_BUCKETS];
	dispatcher_wake_chan_t *chans;
	wconn_t *conns;
	unsigned long version;
	int dirty;
	struct event *ev_sync;
	unsigned attempt; /* resyncs since a connection last worked */
	char down[280];   /* the node whose failure was logged last */
	rn_gauge_t *g_conns;
	dispatcher_wake_stats_t stats;
};

static unsigned wake_hash(const char *s, size_t len)
{
	unsigned h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h % WAKE_BUCKETS;
}

static dispatcher_wake_chan_t *chan_find(dispatcher_wake_t *w, const char *name, size_t len)
{
	for (dispatcher_wake_chan_t *ch = w->buckets[wake_hash(name, len)]; ch; ch = ch->hnext)
		if (ch->len == len && memcmp(ch->name, name, len) == 0)
			return ch;
	return NULL;
}

static void resync_soon(dispatcher_wake_t *w)
{
	long ms = rn_backoff_ms(w->attempt++, WAKE_RESYNC_MS, WAKE_RESYNC_MAX_MS);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	w->dirty = 1;
	if (!event_pending(w->ev_sync, EV_TIMEOUT, NULL))
		event_add(w->ev_sync, &tv);
}

static void wc_free(wconn_t *wc)
{
	RN_LIST_UNLINK(wc->w->conns, wc);
	rn_gauge_add(wc->w->g_conns, -1);
	event_free(wc->ev_read);
	event_free(wc->ev_write);
	redisFree(wc->c);
	for (size_t i = wc->fhead; i < wc->ftail; i++)
		free(wc->fifo[i]);
	free(wc->fifo);
	free(wc);
}

static void wc_close(wconn_t *wc, const char *why)
{
	dispatcher_wake_t *w = wc->w;

	char node[sizeof(w->down)];

	/* Once per node and outage: a dead primary refuses every retry. */
	snprintf(node, sizeof(node), "%s:%d", wc->host, wc->port);
	if (why && strcmp(node, w->down) != 0)
		rn_log_warn(NULL, "redis_wake_lost", "sharded pub/sub %s: %s", node, why);
	snprintf(w->down, sizeof(w->down), "%s", node);
	for (dispatcher_wake_chan_t *ch = w->chans; ch; ch = ch->next)
		if (ch->conn == wc)
			ch->conn = NULL;
	wc_free(wc);
	dispatcher_rroute_stale(w->rr);
	resync_soon(w);
}

/* Writes what hiredis holds; -1 when the connection was closed. */
static int wc_flush(wconn_t *wc)
{
	int done = 0;

	if (redisBufferWrite(wc->c, &done) != REDIS_OK) {
		wc_close(wc, wc->c->errstr[0] ? wc->c->errstr : "write failed");
		return -1;
	}
	if (!done)
		event_add(wc->ev_write, NULL);
	return 0;
}

static int fifo_push(wconn_t *wc, const char *name, size_t len)
{
	char *copy = NULL;

	if (wc->ftail == wc->fcap) {
		if (wc->fhead > 0) {
			memmove(wc->fifo, wc->fifo + wc->fhead, (wc->ftail - wc->fhead) * sizeof(*wc->fifo));
			wc->ftail -= wc->fhead;
			wc->fhead = 0;
		}
		if (wc->ftail == wc->fcap) {
			size_t cap = wc->fcap ? wc->fcap * 2 : 16;
			char **g = realloc(wc->fifo, cap * sizeof(*g));

			if (!g)
				return -1;
			wc->fifo = g;
			wc->fcap = cap;
		}
	}
	if (name) {
		copy = malloc(len + 1);
		if (!copy)
			return -1;
		memcpy(copy, name, len);
		copy[len] = '\0';
	}
	wc->fifo[wc->ftail++] = copy;
	return 0;
}

/* 0, or -1 when the connection was closed. */
static int wc_subscribe(wconn_t *wc, dispatcher_wake_chan_t *ch)
{
	const char *argv[] = { "SSUBSCRIBE", ch->name };
	size_t lens[] = { 10, ch->len };

	if (fifo_push(wc, ch->name, ch->len) < 0)
		return 0; /* out of memory: left unsubscribed, the poll covers it */
	redisAppendCommandArgv(wc->c, 2, argv, lens);
	ch->conn = wc;
	wc->w->stats.subscribes++;
	return wc_flush(wc);
}

static void wc_unsubscribe(wconn_t *wc, const dispatcher_wake_chan_t *ch)
{
	const char *argv[] = { "SUNSUBSCRIBE", ch->name };
	size_t lens[] = { 12, ch->len };

	redisAppendCommandArgv(wc->c, 2, argv, lens);
	wc_flush(wc);
}

static void wc_asked(wconn_t *wc, const redisReply *r)
{
	dispatcher_wake_t *w = wc->w;
	char *name;
	dispatcher_wake_chan_t *ch;

	if (wc->fhead == wc->ftail)
		return;
	name = wc->fifo[wc->fhead++];
	ch = name ? chan_find(w, name, strlen(name)) : NULL;
	free(name);
	if (r->type != REDIS_REPLY_ERROR) {
		w->attempt = 0;
		w->down[0] = '\0';
		if (ch && ch->conn == wc)
			ch->cb(ch->arg); /* subscribed: read once to cover the gap */
		return;
	}
	if (!name) {
		wc_close(wc, r->str);
		return;
	}
	/* MOVED, TRYAGAIN, CLUSTERDOWN: subscribe again once the map is read. */
	rn_log_debug(NULL, "redis_wake_refused", "SSUBSCRIBE on %s:%d: %.120s", wc->host, wc->port, r->str);
	if (ch && ch->conn == wc) {
		ch->conn = NULL;
		w->stats.dropped++;
	}
	dispatcher_rroute_stale(w->rr);
	resync_soon(w);
}

/* May close wc (AUTH refused): the caller checks before going on. */
static void wc_reply(wconn_t *wc, const redisReply *r)
{
	dispatcher_wake_t *w = wc->w;
	dispatcher_wake_chan_t *ch;
	const redisReply *kind, *name;

	if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING) {
		wc_asked(wc, r);
		return;
	}
	kind = r->element[0];
	name = r->element[1];
	if (strcmp(kind->str, "ssubscribe") == 0) {
		wc_asked(wc, r);
		return;
	}
	ch = chan_find(w, name->str, name->len);
	if (!ch || ch->conn != wc)
		return;
	if (strcmp(kind->str, "smessage") == 0) {
		w->stats.messages++;
		ch->cb(ch->arg);
	} else if (strcmp(kind->str, "sunsubscribe") == 0) {
		/* Not asked for (a removed channel is no longer found): the
		 * slot left this node.  Find where it went. */
		rn_log_debug(NULL, "redis_wake_moved", "%s:%d dropped a channel of slot %u", wc->host, wc->port,
		             ch->slot);
		ch->conn = NULL;
		w->stats.dropped++;
		dispatcher_rroute_stale(w->rr);
		resync_soon(w);
	}
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	wconn_t *wc = arg;
	void *r = NULL;

	(void)fd;
	(void)what;
	if (redisBufferRead(wc->c) != REDIS_OK) {
		wc_close(wc, wc->c->errstr[0] ? wc->c->errstr : "connection lost");
		return;
	}
	for (;;) {
		r = NULL;
		if (redisGetReply(wc->c, &r) != REDIS_OK) {
			wc_close(wc, "protocol error");
			return;
		}
		if (!r)
			return;
		/* AUTH refused closes the connection: stop reading it. */
		int auth_refused = ((redisReply *)r)->type == REDIS_REPLY_ERROR && wc->fhead < wc->ftail &&
		        !wc->fifo[wc->fhead];

		wc_reply(wc, r);
		freeReplyObject(r);
		if (auth_refused)
			return;
	}
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	wc_flush(arg);
}

static wconn_t *wc_get(dispatcher_wake_t *w, const char *host, int port)
{
	wconn_t *wc;

	for (wc = w->conns; wc; wc = wc->next)
		if (wc->port == port && strcmp(wc->host, host) == 0)
			return wc;
	wc = calloc(1, sizeof(*wc));
	if (!wc)
		return NULL;
	wc->w = w;
	snprintf(wc->host, sizeof(wc->host), "%s", host);
	wc->port = port;
	wc->c = redisConnectNonBlock(host, port);
	if (!wc->c || wc->c->err) {
		rn_log_warn(NULL, "redis_wake_connect", "sharded pub/sub %s:%d: %s", host, port,
		            wc->c ? wc->c->errstr : "out of memory");
		if (wc->c)
			redisFree(wc->c);
		free(wc);
		resync_soon(w);
		return NULL;
	}
	wc->ev_read = event_new(w->base, wc->c->fd, EV_READ | EV_PERSIST, on_read, wc);
	wc->ev_write = event_new(w->base, wc->c->fd, EV_WRITE, on_write, wc);
	if (!wc->ev_read || !wc->ev_write) {
		if (wc->ev_read)
			event_free(wc->ev_read);
		if (wc->ev_write)
			event_free(wc->ev_write);
		redisFree(wc->c);
		free(wc);
		return NULL;
	}
	event_add(wc->ev_read, NULL);
	RN_LIST_PUSH(w->conns, wc);
	rn_gauge_add(w->g_conns, 1);
	w->stats.connects++;
	if (w->url.password[0] != '\0') {
		const char *argv[] = { "AUTH", w->url.password };

		fifo_push(wc, NULL, 0);
		redisAppendCommandArgv(wc->c, 2, argv, NULL);
	}
	{
		const char *argv[] = { "CLIENT", "SETNAME", "runnel-dispatcher-wake" };

		fifo_push(wc, NULL, 0);
		redisAppendCommandArgv(wc->c, 3, argv, NULL);
	}
	if (wc_flush(wc) < 0)
		return NULL;
	return wc;
}

/* Nodes that failed to connect during one pass: not tried again in it. */
#define WAKE_FAILED_MAX 8
typedef struct {
	char host[WAKE_FAILED_MAX][256];
	int port[WAKE_FAILED_MAX];
	int n;
} failed_t;

static int failed_has(const failed_t *f, const char *host, int port)
{
	for (int i = 0; i < f->n; i++)
		if (f->port[i] == port && strcmp(f->host[i], host) == 0)
			return 1;
	return 0;
}

/* Puts ch on its slot's primary.  0, or -1 when it could not be (yet). */
static int place(dispatcher_wake_t *w, dispatcher_wake_chan_t *ch, failed_t *f)
{
	char host[256];
	int port;
	wconn_t *wc;

	if (dispatcher_rroute_slot_node(w->rr, ch->slot, host, sizeof(host), &port) < 0)
		return -1;
	if (ch->conn && ch->conn->port == port && strcmp(ch->conn->host, host) == 0)
		return 0;
	if (ch->conn) {
		wc_unsubscribe(ch->conn, ch);
		ch->conn = NULL;
	}
	if (failed_has(f, host, port))
		return -1;
	wc = wc_get(w, host, port);
	/* A closed connection re-marks w dirty; the caller goes on. */
	if (wc && wc_subscribe(wc, ch) == 0)
		return 0;
	if (f->n < WAKE_FAILED_MAX) {
		snprintf(f->host[f->n], sizeof(f->host[0]), "%s", host);
		f->port[f->n++] = port;
	}
	return -1;
}

void dispatcher_wake_sync(dispatcher_wake_t *w)
{
	unsigned long v = dispatcher_rroute_map_version(w->rr);
	failed_t f = { .n = 0 };
	int missing = 0;

	if (v == w->version && !w->dirty)
		return;
	w->version = v;
	w->dirty = 0;
	for (dispatcher_wake_chan_t *ch = w->chans; ch; ch = ch->next)
		if (place(w, ch, &f) < 0)
			missing = 1;
	if (missing)
		w->dirty = 1;
	/* A node that serves none of them any more (a demoted primary, a
	 * node whose slots all moved) loses its connection. */
	for (wconn_t *wc = w->conns; wc; wc = wc->next)
		wc->used = 0;
	for (dispatcher_wake_chan_t *ch = w->chans; ch; ch = ch->next)
		if (ch->conn)
			ch->conn->used = 1;
	for (wconn_t *wc = w->conns, *next; wc; wc = next) {
		next = wc->next;
		if (!wc->used && wc->fhead == wc->ftail)
			wc_free(wc);
	}
}

static void on_sync(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	dispatcher_wake_sync(arg);
}

dispatcher_wake_t *dispatcher_wake_new(struct event_base *base, const rn_redis_url_t *url,
                                       dispatcher_rroute_t *rr, rn_gauge_t *g_conns)
{
	dispatcher_wake_t *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->base = base;
	w->url = *url;
	w->rr = rr;
	w->g_conns = g_conns;
	w->ev_sync = evtimer_new(base, on_sync, w);
	if (!w->ev_sync) {
		free(w);
		return NULL;
	}
	return w;
}

void dispatcher_wake_free(dispatcher_wake_t *w)
{
	if (!w)
		return;
	while (w->chans)
		dispatcher_wake_remove(w->chans);
	while (w->conns)
		wc_free(w->conns);
	event_free(w->ev_sync);
	explicit_bzero(&w->url, sizeof(w->url));
	free(w);
}

dispatcher_wake_chan_t *dispatcher_wake_add(dispatcher_wake_t *w, const char *channel, void (*cb)(void *arg),
                                            void *arg)
{
	dispatcher_wake_chan_t *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->len = strlen(channel);
	ch->name = malloc(ch->len + 1);
	if (!ch->name) {
		free(ch);
		return NULL;
	}
	memcpy(ch->name, channel, ch->len + 1);
	ch->w = w;
	ch->slot = rn_rcluster_key_slot(channel, ch->len);
	ch->bucket = wake_hash(channel, ch->len);
	ch->cb = cb;
	ch->arg = arg;
	ch->hnext = w->buckets[ch->bucket];
	w->buckets[ch->bucket] = ch;
	RN_LIST_PUSH(w->chans, ch);
	/* Only this one, unless the others need a pass too (the map moved). */
	if (w->dirty || w->version != dispatcher_rroute_map_version(w->rr)) {
		dispatcher_wake_sync(w);
	} else {
		failed_t f = { .n = 0 };

		if (place(w, ch, &f) < 0)
			resync_soon(w);
	}
	return ch;
}

void dispatcher_wake_remove(dispatcher_wake_chan_t *ch)
{
	dispatcher_wake_t *w;
	dispatcher_wake_chan_t **pp;

	if (!ch)
		return;
	w = ch->w;
	if (ch->conn)
		wc_unsubscribe(ch->conn, ch);
	for (pp = &w->buckets[ch->bucket]; *pp; pp = &(*pp)->hnext)
		if (*pp == ch) {
			*pp = ch->hnext;
			break;
		}
	RN_LIST_UNLINK(w->chans, ch);
	free(ch->name);
	free(ch);
}

void dispatcher_wake_stats(const dispatcher_wake_t *w, dispatcher_wake_stats_t *out)
{
	*out = w->stats;
}
