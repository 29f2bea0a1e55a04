/*
 * dispatcher/feed.c - one streaming answer: a run's entries from the tail
 * pool written as NDJSON (one envelope line per line) or as Server-Sent
 * Events (id = stream entry id, event = line type, data = the line, a
 * heartbeat comment every RUNNEL_HEARTBEAT_SEC), until the terminal line.
 *
 * A caller that reads slower than the run writes is paused in the tail
 * pool once its unsent output passes FEED_HIGH_WATER and resumed (from its
 * cursor, nothing lost) when its socket has drained.
 */
#include "dispatcher/dispatcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "common/list.h"
#include "common/log.h"
#include "proto/keys.h"

#define FEED_HIGH_WATER (1u << 20)

struct dispatcher_feed {
	dispatcher_feed_t *next, *prev;
	dispatcher_t *d;
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	dispatcher_route_t route;
	char run_id[PROTO_RUN_ID_MAX + 1];
	int sse;
	int cancel_on_close;
	int paused;
	dispatcher_tail_sub_t *sub;
	struct event *ev_heartbeat;
	struct evbuffer *chunk;
	uint64_t lines;
};

/*
 * While an answer streams, evhttp keeps reading the socket (to notice a
 * close) but hands the bytes to nobody: a caller that keeps sending after
 * its request would make the connection's input buffer grow without bound.
 * Such bytes are discarded as they arrive; the answer carries
 * "Connection: close", so nothing pipelined behind a stream is lost silently.
 */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	(void)arg;
	if (info->n_added > 0)
		evbuffer_drain(buf, evbuffer_get_length(buf));
}

static void feed_free(dispatcher_feed_t *f)
{
	dispatcher_t *d = f->d;

	/* The input callback stays: it uses nothing of f, and the connection
	 * (closed after this answer) may still flush the last chunk for a
	 * while, during which the caller could go on sending. */
	dispatcher_tail_detach(f->sub);
	f->sub = NULL;
	if (f->ev_heartbeat)
		event_free(f->ev_heartbeat);
	if (f->chunk)
		evbuffer_free(f->chunk);
	RN_LIST_UNLINK(d->feeds, f);
	rn_gauge_add(d->g_streams, -1);
	free(f);
}

/* The normal end: after the terminal line (or at once when nothing follows). */
static void feed_end(dispatcher_feed_t *f)
{
	dispatcher_conn_on_close(f->d, f->evcon, NULL, NULL);
	evhttp_send_reply_end(f->req);
	rn_log_debug(f->run_id, "stream_ended", "%llu lines sent", (unsigned long long)f->lines);
	feed_free(f);
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
	dispatcher_feed_t *f = arg;
	dispatcher_t *d = f->d;

	(void)evcon;
	rn_log_info(f->run_id, "caller_left", "the caller closed the stream before the terminal line%s",
	            f->cancel_on_close ? ": cancelling the run" : "");
	if (f->cancel_on_close &&
	    dispatcher_store_cancel(d->store, f->run_id, "client_closed", 0,
	                            d->cfg->max_runtime_sec + d->cfg->retention_sec, NULL, NULL) == 0)
		rn_counter_add(d->c_cancels, 1);
	else if (f->cancel_on_close)
		rn_log_error(f->run_id, "cancel_failed", "Redis is down: the client_closed cancel was not written");
	dispatcher_request_abandon(f->req);
	f->req = NULL;
	feed_free(f);
}

static void on_drained(struct evhttp_connection *evcon, void *arg)
{
	dispatcher_feed_t *f = arg;

	(void)evcon;
	if (f->paused) {
		f->paused = 0;
		dispatcher_tail_pause(f->sub, 0);
	}
}

/*
 * Writes what evhttp queued at once instead of on the next loop iteration.
 * evhttp enabled the socket's write event to flush it later; when our write
 * emptied the buffer, disabling it again cancels that pending change (the
 * loop uses epoll's changelist), so a streamed line costs one writev and no
 * epoll_ctl.  Only for plain chunks: a chunk sent with a drain callback
 * needs the write event to call it.  Partial writes and errors leave the
 * event on: evhttp then flushes or fails the connection as usual.
 */
static void flush_now(struct bufferevent *bev)
{
	struct evbuffer *out;

	if (!bev)
		return;
	out = bufferevent_get_output(bev);
	if (evbuffer_get_length(out) == 0)
		return;
	if (evbuffer_write(out, bufferevent_getfd(bev)) > 0 && evbuffer_get_length(out) == 0)
		bufferevent_disable(bev, EV_WRITE);
}

static void send_chunk(dispatcher_feed_t *f)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(f->evcon);
	size_t pending = bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;

	if (pending + evbuffer_get_length(f->chunk) > FEED_HIGH_WATER) {
		/* Called back once everything queued so far reached the socket. */
		f->paused = 1;
		rn_counter_add(f->d->c_pauses, 1);
		dispatcher_tail_pause(f->sub, 1);
		evhttp_send_reply_chunk_with_cb(f->req, f->chunk, on_drained, f);
	} else {
		evhttp_send_reply_chunk(f->req, f->chunk);
		flush_now(bev);
	}
}

static void add_sse(struct evbuffer *b, const char *id, const char *line, size_t len)
{
	json_t *o = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(o, "type"));
	const char *p = line, *end = line + len;

	evbuffer_add_printf(b, "id: %s\n", id);
	/* The type is one of a few fixed words; anything else is not echoed. */
	if (type && strspn(type, "abcdefghijklmnopqrstuvwxyz_") == strlen(type) && strlen(type) < 32)
		evbuffer_add_printf(b, "event: %s\n", type);
	json_decref(o);
	/* A JSON text may hold raw CR or LF as whitespace between tokens, and
	 * SSE ends a field line at CR, LF or CRLF: each piece gets its own
	 * data: line (the client joins them with LF, still the same JSON). */
	while (p < end) {
		size_t n = 0;

		while (p + n < end && p[n] != '\n' && p[n] != '\r')
			n++;
		evbuffer_add(b, "data: ", 6);
		evbuffer_add(b, p, n);
		evbuffer_add(b, "\n", 1);
		p += n;
		if (p < end && *p == '\r') {
			p++;
			if (p < end && *p == '\n')
				p++;
		} else if (p < end) {
			p++; /* LF */
		}
	}
	evbuffer_add(b, "\n", 1);
}

static void on_entry(void *arg, const char *id, const char *line, size_t len, int terminal)
{
	dispatcher_feed_t *f = arg;

	if (f->sse) {
		add_sse(f->chunk, id, line, len);
	} else {
		evbuffer_add(f->chunk, line, len);
		evbuffer_add(f->chunk, "\n", 1);
	}
	f->lines++;
	if (terminal) {
		evhttp_send_reply_chunk(f->req, f->chunk);
		feed_end(f);
		return;
	}
	send_chunk(f);
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_feed_t *f = arg;

	(void)fd;
	(void)what;
	/* A paused caller has unsent bytes already; a write now would also
	 * replace the drain callback that resumes it. */
	if (f->paused)
		return;
	evbuffer_add(f->chunk, ": heartbeat\n\n", 13);
	evhttp_send_reply_chunk(f->req, f->chunk);
}

void dispatcher_feed_start(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                           const char *run_id, dispatcher_sid_t after, int sse,
                           int cancel_on_close, int ended_already)
{
	dispatcher_feed_t *f = calloc(1, sizeof(*f));
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);

	if (!f || !(f->chunk = evbuffer_new())) {
		free(f);
		dispatcher_reply_error(d, req, route, 500, "internal", "out of memory");
		return;
	}
	f->d = d;
	f->req = req;
	f->evcon = evhttp_request_get_connection(req);
	f->route = route;
	f->sse = sse;
	f->cancel_on_close = cancel_on_close;
	snprintf(f->run_id, sizeof(f->run_id), "%s", run_id);
	RN_LIST_PUSH(d->feeds, f);
	rn_gauge_add(d->g_streams, 1);

	evhttp_add_header(out, "Content-Type", sse ? "text/event-stream" : "application/x-ndjson");
	evhttp_add_header(out, "Cache-Control", "no-cache");
	evhttp_add_header(out, "X-Accel-Buffering", "no");
	evhttp_add_header(out, "X-Runnel-Run-Id", run_id);
	evhttp_add_header(out, "Connection", "close");
	dispatcher_cors(d, req);
	dispatcher_count(d, route, 200);
	evhttp_send_reply_start(req, 200, "OK");
	if (ended_already) {
		feed_end(f);
		return;
	}
	dispatcher_conn_on_close(f->d, f->evcon, on_close, f);
	{
		/* evhttp's idle timeout also covers reading, and a streaming caller
		 * sends nothing after its request: keep only the write timeout (a
		 * caller that stops reading altogether is still dropped). */
		struct bufferevent *bev = evhttp_connection_get_bufferevent(f->evcon);
		struct timeval wtv = { d->cfg->http_timeout_sec, 0 };

		int one = 1;

		if (bev) {
			struct evbuffer *in = bufferevent_get_input(bev);

			evbuffer_drain(in, evbuffer_get_length(in));
			evbuffer_add_cb(in, on_input, NULL);
			bufferevent_set_timeouts(bev, NULL, &wtv);
			/* Lines are small and must not wait for the previous
			 * segment's ACK (Nagle + delayed ACK = 40 ms stalls). */
			setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		}
	}
	if (sse) {
		struct timeval tv = { d->cfg->heartbeat_sec, 0 };

		f->ev_heartbeat = event_new(d->base, -1, EV_PERSIST, on_heartbeat, f);
		if (f->ev_heartbeat)
			event_add(f->ev_heartbeat, &tv);
	}
	f->sub = dispatcher_tail_attach(d->tail, run_id, after, on_entry, f);
	if (!f->sub) {
		rn_log_error(run_id, "tail_failed", "cannot follow the run (out of memory)");
		feed_end(f);
	}
}

void dispatcher_feed_end_all(dispatcher_t *d)
{
	while (d->feeds)
		feed_end(d->feeds);
}
