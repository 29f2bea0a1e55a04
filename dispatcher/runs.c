/*
 * dispatcher/runs.c - the run routes: enqueue (POST /v1/runs and the first
 * half of POST /stream), GET /v1/runs/{id}, the events tail and cancel.
 *
 * Enqueue, step by step, each step asynchronous on the loop:
 *   body -> job (request.c, 400 on any fault)
 *   -> create the state hash unless the id is taken (409)      [Redis]
 *   -> serialize (sealed with the job key) and produce         [Kafka]
 *   -> delivery report: 202, or the stream starts; a failure is a 503 and
 *      the queued state hash is removed again when Kafka certainly does
 *      not have the job.
 * A caller that leaves meanwhile is remembered: a /stream whose job was
 * delivered after its caller left gets a cancel (client_closed).
 */
#include "dispatcher/dispatcher.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/keyvalq_struct.h>
#include <sodium.h>

#include "common/list.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/webhook_url.h"
#include "dispatcher/request.h"
#include "proto/control.h"
#include "proto/keys.h"
#include "proto/webhook.h"

struct dispatcher_enqueue {
	dispatcher_enqueue_t *next, *prev;
	dispatcher_t *d;
	struct evhttp_request *req; /* NULL once the caller left */
	struct evhttp_connection *evcon;
	dispatcher_route_t route;
	int sse;
	proto_job_t job; /* holds the secrets until produced */
	char run_id[PROTO_RUN_ID_MAX + 1];
	/* The idempotency key this enqueue owns ("" none): freed again when
	 * the job certainly did not reach Kafka. */
	char idem_tenant[PROTO_TENANT_MAX + 1];
	char idem_key[PROTO_IDEM_KEY_MAX + 1];
	int idem_fresh; /* this enqueue took the key (else it was ours already) */
	int64_t t0_us;
};

static int wants_sse(struct evhttp_request *req)
{
	const char *a = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");

	return a && strcasestr(a, "text/event-stream");
}

static int64_t state_ttl(const dispatcher_t *d, int64_t max_runtime)
{
	return (max_runtime > 0 ? max_runtime : d->cfg->max_runtime_sec) + d->cfg->retention_sec;
}

static void enqueue_unlink(dispatcher_enqueue_t *e)
{
	dispatcher_t *d = e->d;

	RN_LIST_UNLINK(d->enqueues, e);
}

static void enqueue_free(dispatcher_enqueue_t *e)
{
	enqueue_unlink(e);
	if (e->req)
		dispatcher_conn_on_close(e->d, e->evcon, NULL, NULL);
	proto_job_clear(&e->job);
	free(e);
}

/* Hands the request back: the closecb must not outlive our interest. */
static struct evhttp_request *enqueue_take_req(dispatcher_enqueue_t *e)
{
	struct evhttp_request *req = e->req;

	if (req)
		dispatcher_conn_on_close(e->d, e->evcon, NULL, NULL);
	e->req = NULL;
	return req;
}

/* The run will not start: its state hash and idempotency key go again. */
static void enqueue_undo(dispatcher_enqueue_t *e)
{
	dispatcher_t *d = e->d;

	if (!d->store)
		return;
	dispatcher_store_uncreate(d->store, e->run_id);
	if (e->idem_fresh)
		dispatcher_store_idem_release(d->store, e->idem_tenant, e->idem_key, e->run_id);
}

static void on_enqueue_close(struct evhttp_connection *evcon, void *arg)
{
	dispatcher_enqueue_t *e = arg;

	(void)evcon;
	dispatcher_request_abandon(e->req);
	e->req = NULL;
	rn_log_info(e->run_id, "caller_left", "the caller closed the connection before the job was enqueued");
}

/* The 202 body (and Location) of an enqueue; 200 for an idempotent repeat. */
static void reply_enqueued(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                           const char *run_id, int code)
{
	char out[PROTO_KEY_MAX], ctl[PROTO_KEY_MAX], loc[128];

	proto_key(out, sizeof(out), d->cfg->key_prefix, run_id, PROTO_KEY_OUT);
	proto_key(ctl, sizeof(ctl), d->cfg->key_prefix, run_id, PROTO_KEY_CTL);
	snprintf(loc, sizeof(loc), "/v1/runs/%s", run_id);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Location", loc);
	dispatcher_reply_json(d, req, route, code,
	                      json_pack("{s:s,s:s,s:s}", "run_id", run_id, "stream", out, "control", ctl));
}

static void on_delivery(void *arg, int ok, int maybe_persisted, const char *err)
{
	dispatcher_enqueue_t *e = arg;
	dispatcher_t *d = e->d;
	struct evhttp_request *req = enqueue_take_req(e);

	rn_hist_observe(d->h_enqueue, (double)(rn_mono_us() - e->t0_us) / 1e6);
	if (!ok) {
		rn_counter_add(d->c_enqueue_failed, 1);
		rn_log_error(e->run_id, "enqueue_failed", "Kafka did not take the job: %s%s", err,
		             maybe_persisted ? " (it may still have been written)" : "");
		if (!maybe_persisted)
			enqueue_undo(e);
		if (req)
			dispatcher_reply_error(d, req, e->route, 503, "kafka_unavailable",
			                       "kafka: the job queue did not take the job (%s)%s", err,
			                       maybe_persisted ? "; it may still run" : "");
		enqueue_free(e);
		return;
	}
	rn_counter_add(d->c_enqueued, 1);
	rn_log_info(e->run_id, "enqueued", "job delivered to Kafka");
	dispatcher_recent_add(d, e->run_id, rn_now_ms());
	if (e->route == DISPATCHER_ROUTE_STREAM) {
		if (req) {
			dispatcher_sid_t zero = { 0, 0 };

			dispatcher_feed_start(d, req, e->route, e->run_id, zero, e->sse, 1, 0);
		} else if (d->store &&
		           dispatcher_store_cancel(d->store, e->run_id, "client_closed", 0,
		                                   state_ttl(d, e->job.max_runtime_sec), NULL, NULL) == 0) {
			rn_counter_add(d->c_cancels, 1);
		}
	} else if (req) {
		reply_enqueued(d, req, e->route, e->run_id, 202);
	}
	enqueue_free(e);
}

static void on_created(int rc, void *arg)
{
	dispatcher_enqueue_t *e = arg;
	dispatcher_t *d = e->d;
	const uint8_t *key = d->cfg->sealed ? d->cfg->job_key : NULL;
	char err[256];
	size_t len = 0;
	char *value;

	if (rc != DISPATCHER_STORE_OK) {
		struct evhttp_request *req = enqueue_take_req(e);

		if (rc == DISPATCHER_STORE_ABSENT && e->idem_key[0] && !e->idem_fresh) {
			/* The same run_id and key again: a retry of the same
			 * enqueue, answered like any repeat (the key stays).  A
			 * key taken just now for a run_id in use is a 409. */
			if (req) {
				dispatcher_sid_t zero = { 0, 0 };

				rn_counter_add(d->c_enqueue_repeats, 1);
				if (e->route == DISPATCHER_ROUTE_STREAM)
					dispatcher_feed_start(d, req, e->route, e->run_id, zero, e->sse, 0, 0);
				else
					reply_enqueued(d, req, e->route, e->run_id, 200);
			}
			enqueue_free(e);
			return;
		}
		if (e->idem_fresh && d->store)
			dispatcher_store_idem_release(d->store, e->idem_tenant, e->idem_key, e->run_id);
		if (req && rc == DISPATCHER_STORE_ABSENT)
			dispatcher_reply_error(d, req, e->route, 409, "conflict", "run_id: already exists");
		else if (req)
			dispatcher_reply_error(d, req, e->route, 503, "redis_unavailable",
			                       "redis: cannot record the run");
		enqueue_free(e);
		return;
	}
	if (!e->req) {
		/* Nobody waits for it: do not start a run nobody will see. */
		enqueue_undo(e);
		enqueue_free(e);
		return;
	}
	value = proto_job_serialize(&e->job, key, &len, err, sizeof(err));
	/* The OTPs are in value (or sealed in it) now; drop our copy at once. */
	proto_job_clear(&e->job);
	if (!value) {
		enqueue_undo(e);
		/* A body under the HTTP cap can still make a job over Kafka's
		 * message cap (sealing adds a third to the secrets). */
		if (strncmp(err, "job: too large", 14) == 0)
			dispatcher_reply_error(d, enqueue_take_req(e), e->route, 413, "payload_too_large", "%s", err);
		else
			dispatcher_reply_error(d, enqueue_take_req(e), e->route, 500, "internal", "%s", err);
		enqueue_free(e);
		return;
	}
	if (dispatcher_producer_send(d->producer, e->run_id, value, len, on_delivery, e,
	                             err, sizeof(err)) < 0) {
		sodium_memzero(value, len);
		free(value);
		rn_counter_add(d->c_enqueue_failed, 1);
		enqueue_undo(e);
		dispatcher_reply_error(d, enqueue_take_req(e), e->route, 503, "kafka_unavailable",
		                       "kafka: the job queue did not take the job (%s)", err);
		enqueue_free(e);
		return;
	}
	sodium_memzero(value, len);
	free(value);
}

/*
 * The idempotency key is claimed: ours goes on to create the run; another
 * run's makes this request a repeat, answered with that run (200, or the
 * /stream tail of it).  The repeat's job is dropped here, its OTPs never
 * leave the dispatcher; closing a repeat's /stream does not cancel the
 * first run, which the repeat did not start.
 */
static void on_idem_claimed(int rc, const char *owner, int fresh, void *arg)
{
	dispatcher_enqueue_t *e = arg;
	dispatcher_t *d = e->d;
	struct evhttp_request *req;

	if (rc == DISPATCHER_STORE_OK && strcmp(owner, e->run_id) == 0) {
		e->idem_fresh = fresh;
		if (!e->req) {
			/* Nobody waits: give the key back, nothing else was made. */
			if (fresh)
				dispatcher_store_idem_release(d->store, e->idem_tenant, e->idem_key, e->run_id);
			enqueue_free(e);
			return;
		}
		if (dispatcher_store_create(d->store, e->run_id, e->job.enqueued_at,
		                            state_ttl(d, e->job.max_runtime_sec), on_created, e) < 0) {
			if (fresh)
				dispatcher_store_idem_release(d->store, e->idem_tenant, e->idem_key, e->run_id);
			dispatcher_reply_error(d, enqueue_take_req(e), e->route, 503, "redis_unavailable",
			                       "redis: not connected");
			enqueue_free(e);
		}
		return;
	}
	req = enqueue_take_req(e);
	if (rc != DISPATCHER_STORE_OK) {
		if (req)
			dispatcher_reply_error(d, req, e->route, 503, "redis_unavailable",
			                       "redis: cannot record the idempotency key");
		enqueue_free(e);
		return;
	}
	rn_log_info(owner, "enqueue_repeat", "tenant %s: idempotency key already used; answered with this run",
	            e->idem_tenant);
	rn_counter_add(d->c_enqueue_repeats, 1);
	if (req) {
		if (e->route == DISPATCHER_ROUTE_STREAM) {
			dispatcher_sid_t zero = { 0, 0 };

			dispatcher_feed_start(d, req, e->route, owner, zero, e->sse, 0, 0);
		} else {
			reply_enqueued(d, req, e->route, owner, 200);
		}
	}
	enqueue_free(e);
}

/* Claims the idempotency key (if any), then creates the run.  Answers 503
 * and frees e when Redis is down. */
static void enqueue_claim(dispatcher_enqueue_t *e)
{
	dispatcher_t *d = e->d;
	int rc;

	if (e->idem_key[0])
		rc = dispatcher_store_idem_claim(d->store, e->idem_tenant, e->idem_key, e->run_id,
		                                 state_ttl(d, e->job.max_runtime_sec), on_idem_claimed, e);
	else
		rc = dispatcher_store_create(d->store, e->run_id, e->job.enqueued_at,
		                             state_ttl(d, e->job.max_runtime_sec), on_created, e);
	if (rc < 0) {
		struct evhttp_request *req = enqueue_take_req(e);

		if (req)
			dispatcher_reply_error(d, req, e->route, 503, "redis_unavailable", "redis: not connected");
		enqueue_free(e);
	}
}

/*
 * A webhook's host name resolved (asynchronously, on the loop): any address
 * the SSRF rules forbid is a 400.  A name that does not resolve here is let
 * through: the worker judges every address again when it connects.
 */
static void on_webhook_resolved(int err, struct evutil_addrinfo *ai, void *arg)
{
	dispatcher_enqueue_t *e = arg;
	const char *why = NULL;

	for (struct evutil_addrinfo *p = err == 0 ? ai : NULL; p && !why; p = p->ai_next) {
		rn_addr_class_t c = rn_netaddr_classify(p->ai_addr);

		if (c != RN_ADDR_PUBLIC)
			why = rn_netaddr_class_text(c);
	}
	if (ai)
		evutil_freeaddrinfo(ai);
	if (!e->req || err == EVUTIL_EAI_CANCEL) {
		enqueue_free(e);
		return;
	}
	if (why) {
		dispatcher_reply_error(e->d, enqueue_take_req(e), e->route, 400, "bad_request",
		                       "webhook: resolves to %s, which is not allowed", why);
		enqueue_free(e);
		return;
	}
	enqueue_claim(e);
}

/* Starts resolving the webhook's host when it is a name.  0 when the
 * answer will come to on_webhook_resolved (which may have run already:
 * e must not be touched then), -1 when there is nothing to resolve. */
static int webhook_resolve(dispatcher_enqueue_t *e)
{
	dispatcher_t *d = e->d;
	struct evutil_addrinfo hints;
	char host[256];
	int literal = 1;

	if (proto_webhook_host(e->job.webhook, host, sizeof(host), &literal) < 0 || literal)
		return -1;
	if (!d->dns) {
		d->dns = evdns_base_new(d->base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
		if (!d->dns) {
			rn_log_warn(NULL, "webhook_dns", "no resolver: webhook hosts are checked by the workers only");
			return -1;
		}
		/* Bounded: an enqueue waits at most about 2 x 2 s for its answer. */
		evdns_base_set_option(d->dns, "timeout:", "2");
		evdns_base_set_option(d->dns, "attempts:", "2");
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	evdns_getaddrinfo(d->dns, host, NULL, &hints, on_webhook_resolved, e);
	return 0;
}

void dispatcher_runs_create(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route)
{
	dispatcher_enqueue_t *e = calloc(1, sizeof(*e));
	char err[256];
	size_t len;
	const char *body = dispatcher_body(req, &len);
	int rc;

	if (!e) {
		dispatcher_reply_error(d, req, route, 500, "internal", "out of memory");
		return;
	}
	e->t0_us = rn_mono_us();
	rc = dispatcher_request_parse(body, len,
	                              route == DISPATCHER_ROUTE_STREAM ? DISPATCHER_REQ_LENIENT : DISPATCHER_REQ_STRICT,
	                              d->cfg->max_runtime_sec, rn_now_ms(), &e->job, err, sizeof(err));
	/* The body holds the OTPs: wipe evhttp's copy, good or bad. */
	if (len > 0)
		sodium_memzero((void *)body, len);
	if (rc < 0) {
		proto_job_clear(&e->job);
		free(e);
		dispatcher_reply_error(d, req, route, 400, "bad_request", "%s", err);
		return;
	}
	/* The request's traceparent header, when the body carries none.  A
	 * header is often set by a proxy or a tracing library, not the caller:
	 * a bad one is dropped with a log line, never a 400. */
	if (e->job.traceparent[0] == '\0') {
		const char *tp = evhttp_find_header(evhttp_request_get_input_headers(req), "traceparent");

		if (tp && proto_traceparent_parse(tp, e->job.traceparent) != 0) {
			e->job.traceparent[0] = '\0';
			rn_log_warn(e->job.run_id, "traceparent_dropped",
			            "the request's traceparent header is not W3C Trace Context; ignored");
		}
	}
	if (e->job.webhook &&
	    rn_webhook_url_check(e->job.webhook,
	                         (d->cfg->webhook_allow_http ? PROTO_WEBHOOK_ALLOW_HTTP : 0) |
	                                 (d->cfg->webhook_allow_private ? PROTO_WEBHOOK_ALLOW_PRIVATE : 0),
	                         err, sizeof(err)) < 0) {
		proto_job_clear(&e->job);
		free(e);
		dispatcher_reply_error(d, req, route, 400, "bad_request", "%s", err);
		return;
	}
	e->d = d;
	e->req = req;
	e->evcon = evhttp_request_get_connection(req);
	e->route = route;
	e->sse = wants_sse(req);
	snprintf(e->run_id, sizeof(e->run_id), "%s", e->job.run_id);
	if (e->job.idempotency_key[0]) {
		snprintf(e->idem_tenant, sizeof(e->idem_tenant), "%s", proto_job_tenant(&e->job));
		snprintf(e->idem_key, sizeof(e->idem_key), "%s", e->job.idempotency_key);
	}
	dispatcher_conn_on_close(d, e->evcon, on_enqueue_close, e);
	RN_LIST_PUSH(d->enqueues, e);
	if (e->job.webhook && !d->cfg->webhook_allow_private && webhook_resolve(e) == 0)
		return; /* on_webhook_resolved goes on */
	enqueue_claim(e);
}

void dispatcher_runs_abort_all(dispatcher_t *d)
{
	/* Waiting on Kafka: the delivery callback still owns e (it runs during
	 * the producer's flush or purge).  Only answer the callers now. */
	for (dispatcher_enqueue_t *e = d->enqueues; e; e = e->next) {
		struct evhttp_request *req = enqueue_take_req(e);

		if (req)
			dispatcher_reply_error(d, req, e->route, 503, "shutting_down", "server: shutting down");
	}
}

/* ---- GET /v1/runs/{id} ---- */

typedef struct simple_op {
	dispatcher_t *d;
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	dispatcher_route_t route;
	char run_id[PROTO_RUN_ID_MAX + 1];
	dispatcher_sid_t after;
	int sse;
} simple_op_t;

static void op_close(struct evhttp_connection *evcon, void *arg)
{
	simple_op_t *op = arg;

	(void)evcon;
	dispatcher_request_abandon(op->req);
	op->req = NULL;
}

static simple_op_t *op_new(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                           const char *run_id)
{
	simple_op_t *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->d = d;
	op->req = req;
	op->evcon = evhttp_request_get_connection(req);
	op->route = route;
	snprintf(op->run_id, sizeof(op->run_id), "%s", run_id);
	dispatcher_conn_on_close(d, op->evcon, op_close, op);
	return op;
}

/* The request, if its caller is still there; the op is freed, its run id
 * copied to run_id first (when not NULL: PROTO_RUN_ID_MAX + 1 bytes). */
static struct evhttp_request *op_finish(simple_op_t *op, char *run_id)
{
	struct evhttp_request *req = op->req;

	if (run_id)
		memcpy(run_id, op->run_id, sizeof(op->run_id));
	if (req)
		dispatcher_conn_on_close(op->d, op->evcon, NULL, NULL);
	free(op);
	return req;
}

static void on_get(int rc, json_t *state, void *arg)
{
	simple_op_t *op = arg;
	dispatcher_t *d = op->d;
	char run_id[PROTO_RUN_ID_MAX + 1];
	struct evhttp_request *req;

	req = op_finish(op, run_id);
	if (!req) {
		json_decref(state);
		return;
	}
	if (rc == DISPATCHER_STORE_OK) {
		json_object_set_new(state, "run_id", json_string(run_id));
		dispatcher_reply_json(d, req, DISPATCHER_ROUTE_RUN, 200, state);
	} else if (rc == DISPATCHER_STORE_ABSENT) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUN, 404, "not_found", "run_id: no such run");
	} else {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUN, 503, "redis_unavailable", "redis: cannot read the run");
	}
}

void dispatcher_runs_get(dispatcher_t *d, struct evhttp_request *req, const char *run_id)
{
	simple_op_t *op = op_new(d, req, DISPATCHER_ROUTE_RUN, run_id);

	if (!op) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUN, 500, "internal", "out of memory");
		return;
	}
	if (dispatcher_store_get(d->store, run_id, on_get, op) < 0) {
		op_finish(op, NULL);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUN, 503, "redis_unavailable", "redis: not connected");
	}
}

/* ---- GET /v1/runs/{id}/events ---- */

static void on_probe(int rc, const char *last_id, const char *last_line, size_t last_len, void *arg)
{
	simple_op_t *op = arg;
	dispatcher_t *d = op->d;
	char run_id[PROTO_RUN_ID_MAX + 1];
	dispatcher_sid_t after = op->after, last;
	int sse = op->sse, ended = 0;
	struct evhttp_request *req;

	req = op_finish(op, run_id);
	if (!req)
		return;
	if (rc == DISPATCHER_STORE_ABSENT) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_EVENTS, 404, "not_found", "run_id: no such run");
		return;
	}
	if (rc != DISPATCHER_STORE_OK) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_EVENTS, 503, "redis_unavailable",
		                       "redis: cannot read the run");
		return;
	}
	if (last_id[0] == '\0' || dispatcher_sid_parse(last_id, &last) < 0)
		last = (dispatcher_sid_t){ 0, 0 };
	/* Resuming at or after the terminal line: nothing will ever follow. */
	if (last_id[0] != '\0' && dispatcher_sid_cmp(last, after) <= 0 && last_len > 0) {
		json_t *o = json_loadb(last_line, last_len, 0, NULL);
		const char *type = json_string_value(json_object_get(o, "type"));

		ended = type && (strcmp(type, "result") == 0 || strcmp(type, "error") == 0);
		json_decref(o);
	}
	/* A cursor past the stream's last entry was never sent by this stream
	 * (a cursor is the id of an entry the caller got).  Taken as it is,
	 * every line still to come would sort before it, the terminal line
	 * included, and the caller would wait forever: read it as "from the
	 * end of the stream". */
	if (dispatcher_sid_cmp(after, last) > 0)
		after = last;
	dispatcher_feed_start(d, req, DISPATCHER_ROUTE_EVENTS, run_id, after, sse, 0, ended);
}

/*
 * A cursor from the caller: a stream id whose parts have at most 19
 * digits, so that every id the document's pattern admits also fits 64 bits
 * (real ids have 13-digit times).  0 or -1.
 */
static int cursor_parse(const char *s, dispatcher_sid_t *out)
{
	size_t ms = strspn(s, "0123456789");

	if (ms > 19 || (s[ms] == '-' && strspn(s + ms + 1, "0123456789") > 19))
		return -1;
	return dispatcher_sid_parse(s, out);
}

void dispatcher_runs_events(dispatcher_t *d, struct evhttp_request *req, const char *run_id)
{
	const char *last_event = evhttp_find_header(evhttp_request_get_input_headers(req), "Last-Event-ID");
	dispatcher_sid_t after = { 0, 0 };
	int sse = wants_sse(req);
	struct evkeyvalq q;
	const char *a;
	simple_op_t *op;

	if (dispatcher_query(d, req, DISPATCHER_ROUTE_EVENTS, &q) < 0)
		return;
	a = evhttp_find_header(&q, "after");
	if (a && cursor_parse(a, &after) < 0) {
		evhttp_clear_headers(&q);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_EVENTS, 400, "bad_request",
		                       "after: must be a stream id <ms>-<seq> (at most 19 digits each)");
		return;
	}
	evhttp_clear_headers(&q);
	/* An EventSource reconnecting says where it stopped; that wins over
	 * the after= of the URL it was first opened with.  It is checked even
	 * when the answer is NDJSON (which ignores it): a malformed header is
	 * the caller's bug either way.  Empty means none, as in SSE. */
	if (last_event && last_event[0] != '\0') {
		dispatcher_sid_t le;

		if (cursor_parse(last_event, &le) < 0) {
			dispatcher_reply_error(d, req, DISPATCHER_ROUTE_EVENTS, 400, "bad_request",
			                       "last-event-id: must be a stream id <ms>-<seq> (at most 19 digits each)");
			return;
		}
		if (sse)
			after = le;
	}
	op = op_new(d, req, DISPATCHER_ROUTE_EVENTS, run_id);
	if (!op) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_EVENTS, 500, "internal", "out of memory");
		return;
	}
	op->after = after;
	op->sse = sse;
	if (dispatcher_store_probe(d->store, run_id, on_probe, op) < 0) {
		op_finish(op, NULL);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_EVENTS, 503, "redis_unavailable", "redis: not connected");
	}
}

/* ---- POST /v1/runs/{id}/cancel ---- */

static void on_cancel(int rc, const char *status, void *arg)
{
	simple_op_t *op = arg;
	dispatcher_t *d = op->d;
	char run_id[PROTO_RUN_ID_MAX + 1];
	struct evhttp_request *req;

	req = op_finish(op, run_id);
	if (rc == DISPATCHER_STORE_OK) {
		rn_counter_add(d->c_cancels, 1);
		rn_log_info(run_id, "cancel_requested", "cancel written to the control stream");
	}
	if (!req)
		return;
	if (rc == DISPATCHER_STORE_OK)
		dispatcher_reply_json(d, req, DISPATCHER_ROUTE_CANCEL, 202,
		                      json_pack("{s:s,s:s,s:s}", "run_id", run_id, "cancel", "requested",
		                                "status", status));
	else if (rc == DISPATCHER_STORE_ABSENT)
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 404, "not_found", "run_id: no such run");
	else
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 503, "redis_unavailable",
		                       "redis: cannot write the cancel");
}

void dispatcher_runs_cancel(dispatcher_t *d, struct evhttp_request *req, const char *run_id)
{
	size_t len;
	const char *body = dispatcher_body(req, &len);
	char reason[PROTO_CTL_REASON_MAX + 1] = "api";
	simple_op_t *op;

	if (len > 0) {
		json_error_t jerr;
		json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr), *r;
		const char *k;
		json_t *v;

		if (!root || !json_is_object(root)) {
			json_decref(root);
			dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 400, "bad_request",
			                       "body: must be a JSON object");
			return;
		}
		json_object_foreach(root, k, v)
		{
			if (strcmp(k, "reason") != 0) {
				json_decref(root);
				dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 400, "bad_request",
				                       "body: only \"reason\" is accepted");
				return;
			}
		}
		r = json_object_get(root, "reason");
		if (r && !json_is_null(r)) {
			if (!json_is_string(r) || json_string_length(r) == 0 ||
			    json_string_length(r) > PROTO_CTL_REASON_MAX) {
				json_decref(root);
				dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 400, "bad_request",
				                       "reason: must be a string of 1..%d bytes", PROTO_CTL_REASON_MAX);
				return;
			}
			snprintf(reason, sizeof(reason), "%s", json_string_value(r));
		}
		json_decref(root);
	}
	op = op_new(d, req, DISPATCHER_ROUTE_CANCEL, run_id);
	if (!op) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 500, "internal", "out of memory");
		return;
	}
	if (dispatcher_store_cancel(d->store, run_id, reason, 1, state_ttl(d, 0), on_cancel, op) < 0) {
		op_finish(op, NULL);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_CANCEL, 503, "redis_unavailable", "redis: not connected");
	}
}

/* ---- POST /v1/runs/{id}/replies/{ask_id} ---- */

typedef struct reply_op {
	simple_op_t *op;
	char ask_id[PROTO_CTL_ID_MAX + 1];
} reply_op_t;

static void on_reply(int rc, const char *what, const char *options, void *arg)
{
	reply_op_t *ro = arg;
	dispatcher_t *d = ro->op->d;
	char run_id[PROTO_RUN_ID_MAX + 1], ask_id[PROTO_CTL_ID_MAX + 1];
	struct evhttp_request *req;

	snprintf(ask_id, sizeof(ask_id), "%s", ro->ask_id);
	req = op_finish(ro->op, run_id);
	free(ro);
	if (rc == DISPATCHER_STORE_OK && strcmp(what, "written") == 0)
		rn_log_info(run_id, "reply_requested", "reply to ask %s written to the control stream", ask_id);
	if (!req)
		return;
	if (rc == DISPATCHER_STORE_ABSENT)
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 404, "not_found", "run_id: no such run");
	else if (rc != DISPATCHER_STORE_OK)
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 503, "redis_unavailable",
		                       "redis: cannot write the reply");
	else if (strcmp(what, "written") == 0)
		dispatcher_reply_json(d, req, DISPATCHER_ROUTE_REPLY, 202,
		                      json_pack("{s:s,s:s,s:s}", "run_id", run_id, "ask_id", ask_id,
		                                "reply", "requested"));
	else if (strcmp(what, "unknown") == 0)
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 404, "not_found", "ask_id: no such ask");
	else if (strcmp(what, "settled") == 0)
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 409, "conflict",
		                       "ask_id: the ask is already settled");
	else
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request",
		                       "option: not one of the ask's options (%.200s)", options);
}

void dispatcher_runs_reply(dispatcher_t *d, struct evhttp_request *req, const char *run_id,
                           const char *ask_id)
{
	size_t len;
	const char *body = dispatcher_body(req, &len);
	json_error_t jerr;
	json_t *root, *v, *opt, *text, *rej;
	const char *k;
	proto_ctl_t *ctl;
	char msg[PROTO_CTL_MAX_BYTES + 1], err[128];
	reply_op_t *ro;

	root = len > 0 ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
	if (!root || !json_is_object(root)) {
		json_decref(root);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request",
		                       "body: must be a JSON object with option, text or reject");
		return;
	}
	json_object_foreach(root, k, v)
	{
		if (strcmp(k, "option") != 0 && strcmp(k, "text") != 0 && strcmp(k, "reject") != 0) {
			json_decref(root);
			dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request",
			                       "body: only \"option\", \"text\" or \"reject\" is accepted");
			return;
		}
	}
	opt = json_object_get(root, "option");
	text = json_object_get(root, "text");
	rej = json_object_get(root, "reject");
	if ((opt && !json_is_string(opt)) || (text && !json_is_string(text)) ||
	    (rej && !json_is_true(rej))) {
		const char *field = opt && !json_is_string(opt) ? "option" : text && !json_is_string(text) ? "text"
		                                                                                           : "reject";
		json_decref(root);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request", "%s: %s", field,
		                       strcmp(field, "reject") == 0 ? "must be true" : "not a string");
		return;
	}
	if (text && memchr(json_string_value(text), '\0', json_string_length(text))) {
		json_decref(root);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request", "text: contains a NUL character");
		return;
	}
	ctl = malloc(sizeof(*ctl));
	if (!ctl) {
		json_decref(root);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 500, "internal", "out of memory");
		return;
	}
	if (proto_ctl_reply_set(ctl, ask_id, opt ? json_string_value(opt) : NULL,
	                        text ? json_string_value(text) : NULL, !!rej,
	                        err, sizeof(err)) < 0) {
		json_decref(root);
		free(ctl);
		/* "reply: ..." is about the body as a whole. */
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request", "%s%s",
		                       strncmp(err, "reply:", 6) == 0 ? "body:" : "",
		                       strncmp(err, "reply:", 6) == 0 ? err + 6 : err);
		return;
	}
	json_decref(root);
	if (proto_ctl_serialize(ctl, msg, sizeof(msg)) < 0 || strlen(msg) > PROTO_CTL_MAX_BYTES) {
		free(ctl);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 400, "bad_request",
		                       "text: too long once encoded (over %d bytes)", PROTO_CTL_MAX_BYTES);
		return;
	}
	ro = calloc(1, sizeof(*ro));
	if (ro)
		ro->op = op_new(d, req, DISPATCHER_ROUTE_REPLY, run_id);
	if (!ro || !ro->op) {
		free(ro);
		free(ctl);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 500, "internal", "out of memory");
		return;
	}
	snprintf(ro->ask_id, sizeof(ro->ask_id), "%s", ask_id);
	if (dispatcher_store_reply(d->store, run_id, ask_id, msg,
	                           ctl->reply == PROTO_REPLY_OPTION ? ctl->option : NULL,
	                           state_ttl(d, 0), on_reply, ro) < 0) {
		op_finish(ro->op, NULL);
		free(ro);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_REPLY, 503, "redis_unavailable", "redis: not connected");
	}
	free(ctl);
}
