/*
 * dispatcher/dispatcher.h - the dispatcher process as one object: the event
 * loop and everything attached to it (HTTP server, Kafka producer, Redis
 * command connection, tail pool, janitor thread, metrics), plus the helpers
 * the route handlers share to answer requests.
 *
 *   http.c     server, routing, auth, CORS, JSON replies, request metrics
 *   runs.c     the /v1/runs and /stream handlers (enqueue, get, cancel, events)
 *   feed.c     a streaming answer (NDJSON or SSE) fed by the tail pool
 *   janitor.c  background thread: lost-lease sweep, Kafka readiness probe
 *   recent.c   the recent-runs index and GET /v1/runs
 *   conns.c    the open connections: the cap and the request-head deadline
 *   ui.c       the /ui/ viewer's embedded files
 *
 * @locality main (loop) thread unless a function says otherwise.
 */
#ifndef RUNNEL_DISPATCHER_DISPATCHER_H
#define RUNNEL_DISPATCHER_DISPATCHER_H

#include <stdarg.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "common/metrics.h"
#include "dispatcher/config.h"
#include "dispatcher/producer.h"
#include "dispatcher/store.h"
#include "dispatcher/tail.h"

/* Routes, as metric labels. */
typedef enum {
	DISPATCHER_ROUTE_STREAM = 0,
	DISPATCHER_ROUTE_RUNS, /* POST /v1/runs */
	DISPATCHER_ROUTE_RUN,  /* GET /v1/runs/{id} */
	DISPATCHER_ROUTE_EVENTS,
	DISPATCHER_ROUTE_CANCEL,
	DISPATCHER_ROUTE_REPLY, /* POST /v1/runs/{id}/replies/{ask_id} */
	DISPATCHER_ROUTE_HEALTHZ,
	DISPATCHER_ROUTE_READYZ,
	DISPATCHER_ROUTE_METRICS,
	DISPATCHER_ROUTE_RUNS_LIST, /* GET /v1/runs (recent.c) */
	DISPATCHER_ROUTE_UI,        /* GET /ui/... (ui.c) */
	DISPATCHER_ROUTE_OPENAPI,   /* GET /openapi.json */
	DISPATCHER_ROUTE_OTHER,     /* unknown routes, preflights, 413 */
	DISPATCHER_ROUTE_COUNT
} dispatcher_route_t;

#define DISPATCHER_NSTATUS 15

typedef struct dispatcher_janitor dispatcher_janitor_t;
typedef struct dispatcher_feed dispatcher_feed_t;
typedef struct dispatcher_enqueue dispatcher_enqueue_t;
typedef struct dispatcher_conns dispatcher_conns_t;

typedef struct dispatcher {
	struct event_base *base;
	struct evdns_base *dns; /* webhook hosts' addresses; made on first use */
	const dispatcher_config_t *cfg;
	rn_redis_url_t redis_url;
	struct evhttp *http;
	dispatcher_producer_t *producer;
	dispatcher_store_t *store;
	dispatcher_tail_t *tail;
	dispatcher_janitor_t *janitor;
	rn_metrics_t *metrics;
	rn_counter_t *c_requests[DISPATCHER_ROUTE_COUNT][DISPATCHER_NSTATUS];
	rn_gauge_t *g_streams;
	rn_hist_t *h_enqueue;
	rn_counter_t *c_enqueued;
	rn_counter_t *c_enqueue_failed;
	rn_counter_t *c_enqueue_repeats; /* answered with the run of an idempotency key */
	rn_counter_t *c_cancels;
	rn_counter_t *c_lost;
	rn_counter_t *c_pauses;
	rn_gauge_t *g_conns;
	rn_counter_t *c_conns_refused;   /* over the cap, all busy: 503 */
	rn_counter_t *c_conns_evicted;   /* over the cap: the oldest idle one closed */
	rn_counter_t *c_conns_timed_out; /* no whole request within the head deadline */
	dispatcher_conns_t *conns;
	dispatcher_feed_t *feeds;         /* streaming answers in progress */
	dispatcher_enqueue_t *enqueues;   /* enqueues waiting on Redis/Kafka */
	struct evhttp_bound_socket *sock; /* the listener (NULL once draining) */
	struct event *ev_drain;
	int draining; /* 0, 1 waiting on enqueues, 2 ending */
	int64_t drain_until_ms;
	char bound[80]; /* "host:port" actually listened on */
} dispatcher_t;

/* ---- start, drain, stop (lifecycle.c) ---- */

/* Sets up everything on base.  0 or -1 with errstr. */
int dispatcher_init(dispatcher_t *d, struct event_base *base, const dispatcher_config_t *cfg,
                    char *errstr, size_t errstr_size);
/*
 * The graceful stop (SIGTERM): closes the listener, lets the enqueues in
 * flight get their Kafka delivery report (up to flush_ms) so that their
 * callers get the real answer, then ends the open streams, answers what is
 * left 503 and breaks the loop once those answers had time to be written.
 * A second call breaks the loop at once.
 */
void dispatcher_drain(dispatcher_t *d, int flush_ms);
/* Ends every open stream, flushes Kafka (up to flush_ms) and frees all. */
void dispatcher_fini(dispatcher_t *d, int flush_ms);

/* ---- connections (conns.c) ---- */

/* Puts every connection of d->http in the table (cap, head deadline).
 * 0, or -1 (out of memory). */
int dispatcher_conns_init(dispatcher_t *d);
/* After evhttp_free. */
void dispatcher_conns_fini(dispatcher_t *d);
/* A request reached the handlers: its connection is busy, out of the
 * head deadline, until the answer is complete. */
void dispatcher_conns_request(dispatcher_t *d, struct evhttp_request *req);
/* evhttp_connection_set_closecb for handlers: evhttp keeps one close
 * callback per connection and the table needs it, so it calls cb (NULL:
 * none) before forgetting the connection. */
void dispatcher_conn_on_close(dispatcher_t *d, struct evhttp_connection *evcon,
                              void (*cb)(struct evhttp_connection *, void *), void *arg);

/* ---- answering (http.c) ---- */

/* Registers the request, stream, enqueue and sweep metrics on d->metrics. */
void dispatcher_http_metrics(dispatcher_t *d);
/* Creates the HTTP server on d->base and binds host:port (d->bound says
 * the port actually bound).  0 or -1 with errstr. */
int dispatcher_http_listen(dispatcher_t *d, const char *host, unsigned short port,
                           char *errstr, size_t errstr_size);

/* Counts one answer for /metrics. */
void dispatcher_count(dispatcher_t *d, dispatcher_route_t route, int status);
/* Adds the CORS headers an allowed Origin gets (nothing otherwise). */
void dispatcher_cors(dispatcher_t *d, struct evhttp_request *req);
/* Sends status with the len bytes at body (none when len is 0) and counts
 * it; the headers are the caller's. */
void dispatcher_send(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route, int status,
                     const void *body, size_t len);
/* Sends body (stolen; compact JSON + "\n") with status. */
void dispatcher_reply_json(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                           int status, json_t *body);
/* Sends {"error":{"code":code,"message":...}}. */
void dispatcher_reply_error(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                            int status, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));

/* ---- handlers (runs.c) ---- */
void dispatcher_runs_create(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route);
void dispatcher_runs_get(dispatcher_t *d, struct evhttp_request *req, const char *run_id);
void dispatcher_runs_events(dispatcher_t *d, struct evhttp_request *req, const char *run_id);
void dispatcher_runs_cancel(dispatcher_t *d, struct evhttp_request *req, const char *run_id);
/* POST /v1/runs/{id}/replies/{ask_id}: answers an open ask (SPEC §7). */
void dispatcher_runs_reply(dispatcher_t *d, struct evhttp_request *req, const char *run_id,
                           const char *ask_id);
/* Forgets the enqueues in flight (their requests are answered 503). */
void dispatcher_runs_abort_all(dispatcher_t *d);
/*
 * For connection close callbacks: the caller left.  evhttp detaches a
 * request it has not seen answered from its connection and leaves it to us
 * (it is freed here); a request still attached is evhttp's to free.
 */
void dispatcher_request_abandon(struct evhttp_request *req);
/* The request body as a pointer into evhttp's buffer (NUL not guaranteed). */
const char *dispatcher_body(struct evhttp_request *req, size_t *len);
/*
 * The parameters of the request URL's query into q (empty without one; the
 * caller clears it with evhttp_clear_headers).  0, or -1 after answering
 * 400 "query: not a valid query string" or, for a parameter given twice,
 * "<name>: given more than once" (q is then already cleared).
 */
int dispatcher_query(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                     struct evkeyvalq *q);

/* ---- recent runs (recent.c) and the viewer (ui.c) ---- */

/*
 * Adds run_id to the recent-runs index <prefix>:{runs}:recent (a sorted set
 * scored by enqueue time, one key, so it is Redis Cluster safe): trimmed to
 * cfg->recent_runs entries and to the runs' own lifetime (max runtime +
 * retention), and it expires with them.  Fire and forget.
 */
void dispatcher_recent_add(dispatcher_t *d, const char *run_id, int64_t enqueued_at_ms);
/* GET /v1/runs?limit=N: the newest runs of the index with their state. */
void dispatcher_runs_list(dispatcher_t *d, struct evhttp_request *req);
/* GET /ui, /ui/, /ui/<file>, /ui/config.json. */
void dispatcher_ui_serve(dispatcher_t *d, struct evhttp_request *req, const char *path);

/* ---- streaming answers (feed.c) ---- */

/*
 * Starts a 200 streaming answer on req (NDJSON, or SSE when sse) of run_id's
 * entries after `after`, ending after the terminal line; with
 * ended_already the answer is closed at once (the caller knows nothing
 * follows).  cancel_on_close: the caller closing early writes a cancel
 * (reason client_closed).  Takes over req.
 */
void dispatcher_feed_start(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                           const char *run_id, dispatcher_sid_t after, int sse,
                           int cancel_on_close, int ended_already);
/* Ends every stream (server shutdown; no cancel is written). */
void dispatcher_feed_end_all(dispatcher_t *d);

/* ---- janitor (janitor.c) ---- */

/* Starts the background thread (own synchronous Redis connection). */
dispatcher_janitor_t *dispatcher_janitor_start(dispatcher_t *d, char *errstr, size_t errstr_size);
/* 1 when the last Kafka metadata probe succeeded.  Any thread. */
int dispatcher_janitor_kafka_ok(dispatcher_janitor_t *j);
void dispatcher_janitor_stop(dispatcher_janitor_t *j);

#endif
