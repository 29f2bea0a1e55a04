/*
 * dispatcher/conns.c - the table of open HTTP connections: the connection
 * cap and the request-head deadline (SPEC §7), which evhttp 2.1 has
 * neither of.
 *
 * evhttp's idle timeout restarts with every byte, so a caller trickling a
 * request head one byte at a time holds its connection (and a file
 * descriptor) for ever; thousands of those held the dispatcher.  Here each
 * connection is known from its accept: one that has not delivered a
 * whole request (head and capped body) within --head-timeout-ms of its
 * accept, or of its previous answer on a kept-alive connection, is closed.
 * A connection whose request is being answered (a stream may last hours)
 * is busy and never timed out here; evhttp's write timeout still covers a
 * caller that stops reading.
 *
 * The cap: at --max-connections open connections, a new one first evicts
 * the oldest connection that is not being answered (a half-sent head is
 * what an attacker holds, so a real request still gets in); when every
 * connection is busy, the new one gets a 503 and is closed.
 *
 * How the table learns of connections without evhttp's help: evhttp asks
 * us for each new connection's bufferevent (evhttp_set_bevcb), and its
 * callbacks carry the evhttp_connection, read right after the accept (an
 * active event runs before the loop polls again, so the connection cannot
 * be gone yet).  Its close callback is then ours; the handlers that want
 * to hear of a close register through dispatcher_conn_on_close, which
 * chains them.
 *
 * @locality main (loop) thread.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "dispatcher/dispatcher.h"

typedef struct conn {
	struct conn *prev, *next;
	struct bufferevent *bev;                        /* until adopted (a reference held) */
	struct evhttp_connection *evcon;                /* NULL until adopted */
	int64_t since_ms;                               /* accepted, or last answer finished */
	int busy;                                       /* a request is being answered */
	int refuse;                                     /* over the cap: 503 and close */
	void (*cb)(struct evhttp_connection *, void *); /* a handler's close callback */
	void *cb_arg;
} conn_t;

struct dispatcher_conns {
	dispatcher_t *d;
	conn_t *list; /* newest first */
	long n;
	int unadopted; /* connections waiting for adopt() */
	struct event *ev_adopt;
	struct event *ev_sweep;
};

static void conn_drop(dispatcher_conns_t *t, conn_t *c)
{
	RN_LIST_UNLINK(t->list, c);
	t->n--;
	rn_gauge_add(t->d->g_conns, -1);
	free(c);
}

static conn_t *find(dispatcher_conns_t *t, const struct evhttp_connection *evcon)
{
	for (conn_t *c = t->list; c; c = c->next)
		if (c->evcon == evcon)
			return c;
	return NULL;
}

/* evhttp frees a connection: a handler's callback first, then the entry. */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
	dispatcher_conns_t *t = arg;
	conn_t *c = find(t, evcon);

	if (!c)
		return;
	if (c->cb)
		c->cb(evcon, c->cb_arg);
	conn_drop(t, c);
}

/* Closes a connection that is not being answered; on_close drops it. */
static void conn_close(struct evhttp_connection *evcon)
{
	evhttp_connection_free(evcon);
}

static const char REFUSED[] = "HTTP/1.1 503 Service Unavailable\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 86\r\n"
                              "Connection: close\r\n"
                              "\r\n"
                              "{\"error\":{\"code\":\"overloaded\",\"message\":\"too many connections; retry shortly\"}}\n";

/* Right after the accepts: learn each new connection's evhttp_connection. */
static void adopt(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_conns_t *t = arg;
	conn_t *c, *next;

	(void)fd;
	(void)what;
	for (c = t->list; c && t->unadopted > 0; c = next) {
		bufferevent_data_cb rcb = NULL, wcb = NULL;
		bufferevent_event_cb ecb = NULL;
		void *cbarg = NULL;
		struct bufferevent *bev = c->bev;

		next = c->next;
		if (!bev)
			continue;
		t->unadopted--;
		c->bev = NULL;
		bufferevent_getcb(bev, &rcb, &wcb, &ecb, &cbarg);
		bufferevent_decref(bev);
		if (!rcb && !ecb) {
			/* evhttp gave up on it already (out of memory): it is gone. */
			conn_drop(t, c);
			continue;
		}
		c->evcon = cbarg;
		evhttp_connection_set_closecb(c->evcon, on_close, t);
		if (c->refuse) {
			evutil_socket_t s = bufferevent_getfd(evhttp_connection_get_bufferevent(c->evcon));

			if (s >= 0 && send(s, REFUSED, sizeof(REFUSED) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
				rn_log_debug(NULL, "connection_refused", "could not say so before closing");
			conn_close(c->evcon);
		}
	}
}

/* The oldest connection not being answered, or NULL. */
static conn_t *oldest_idle(dispatcher_conns_t *t)
{
	conn_t *best = NULL;

	for (conn_t *c = t->list; c; c = c->next)
		if (c->evcon && !c->busy && !c->refuse)
			best = c; /* newest first: the last one seen is the oldest */
	return best;
}

/* evhttp's bevcb: a new connection was accepted. */
static struct bufferevent *new_bev(struct event_base *base, void *arg)
{
	dispatcher_conns_t *t = arg;
	dispatcher_t *d = t->d;
	struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
	conn_t *c;

	if (!bev)
		return NULL; /* evhttp makes one itself; the table misses this one */
	c = calloc(1, sizeof(*c));
	if (!c)
		return bev;
	if (t->n >= d->cfg->max_connections) {
		conn_t *victim;

		/* Connections accepted earlier in this same batch are complete
		 * (evhttp set each up before accepting the next) but not adopted
		 * yet: adopt them now, so that they can make room too. */
		if (t->unadopted > 0)
			adopt(-1, 0, t);
		victim = oldest_idle(t);

		if (victim) {
			rn_counter_add(d->c_conns_evicted, 1);
			conn_close(victim->evcon);
		} else {
			c->refuse = 1;
			rn_counter_add(d->c_conns_refused, 1);
		}
	}
	bufferevent_incref(bev);
	c->bev = bev;
	c->since_ms = rn_mono_ms();
	RN_LIST_PUSH(t->list, c);
	t->n++;
	t->unadopted++;
	rn_gauge_add(d->g_conns, 1);
	event_active(t->ev_adopt, EV_TIMEOUT, 0);
	return bev;
}

/* Closes every connection past its head deadline. */
static void sweep(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_conns_t *t = arg;
	int64_t cutoff = rn_mono_ms() - t->d->cfg->head_timeout_ms;
	struct evhttp_connection *late[256];
	size_t nlate;

	(void)fd;
	(void)what;
	do {
		/* Closing calls on_close, which edits the list: collect, then close. */
		nlate = 0;
		for (conn_t *c = t->list; c && nlate < sizeof(late) / sizeof(late[0]); c = c->next)
			if (c->evcon && !c->busy && !c->refuse && c->since_ms <= cutoff)
				late[nlate++] = c->evcon;
		for (size_t i = 0; i < nlate; i++) {
			rn_counter_add(t->d->c_conns_timed_out, 1);
			conn_close(late[i]);
		}
	} while (nlate == sizeof(late) / sizeof(late[0]));
}

int dispatcher_conns_init(dispatcher_t *d)
{
	dispatcher_conns_t *t = calloc(1, sizeof(*t));
	long ms = d->cfg->head_timeout_ms / 4;

	if (!t)
		return -1;
	t->d = d;
	d->conns = t;
	t->ev_adopt = event_new(d->base, -1, 0, adopt, t);
	t->ev_sweep = event_new(d->base, -1, EV_PERSIST, sweep, t);
	if (ms < 20)
		ms = 20;
	if (ms > 1000)
		ms = 1000;
	if (!t->ev_adopt || !t->ev_sweep ||
	    event_add(t->ev_sweep, &(struct timeval){ ms / 1000, (ms % 1000) * 1000 }) < 0)
		return -1;
	evhttp_set_bevcb(d->http, new_bev, t);
	return 0;
}

void dispatcher_conns_fini(dispatcher_t *d)
{
	dispatcher_conns_t *t = d->conns;

	if (!t)
		return;
	/* evhttp_free closed every connection (on_close emptied the list);
	 * what is left was never adopted. */
	while (t->list) {
		conn_t *c = t->list;

		if (c->bev)
			bufferevent_decref(c->bev);
		conn_drop(t, c);
	}
	if (t->ev_adopt)
		event_free(t->ev_adopt);
	if (t->ev_sweep)
		event_free(t->ev_sweep);
	free(t);
	d->conns = NULL;
}

/* The answer went out: the connection may carry the next request, which
 * has the head deadline again. */
static void on_complete(struct evhttp_request *req, void *arg)
{
	dispatcher_t *d = arg;
	conn_t *c = d->conns ? find(d->conns, evhttp_request_get_connection(req)) : NULL;

	if (c) {
		c->busy = 0;
		c->since_ms = rn_mono_ms();
	}
}

void dispatcher_conns_request(dispatcher_t *d, struct evhttp_request *req)
{
	conn_t *c = d->conns ? find(d->conns, evhttp_request_get_connection(req)) : NULL;

	if (!c)
		return;
	c->busy = 1;
	evhttp_request_set_on_complete_cb(req, on_complete, d);
}

void dispatcher_conn_on_close(dispatcher_t *d, struct evhttp_connection *evcon,
                              void (*cb)(struct evhttp_connection *, void *), void *arg)
{
	conn_t *c = d->conns ? find(d->conns, evcon) : NULL;

	if (!c) {
		/* Not in the table (it could not be added): evhttp's own slot. */
		evhttp_connection_set_closecb(evcon, cb, arg);
		return;
	}
	c->cb = cb;
	c->cb_arg = arg;
}
