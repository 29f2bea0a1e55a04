/*
 * worker/metrics.c - the worker's metric series and its /healthz, /readyz, /metrics
 * HTTP endpoint.
 */
#include "worker/metrics.h"

#include "worker/limits.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

/* The unlabelled series, in the order /metrics shows them. */
static const rn_metric_def_t plain_series[] = {
	{ offsetof(worker_metrics_t, jobs_skipped), RN_METRIC_COUNTER, "runnel_worker_jobs_skipped_total",
	  "Jobs not run: already done or held by a live worker" },
	{ offsetof(worker_metrics_t, jobs_dlq), RN_METRIC_COUNTER, "runnel_worker_jobs_dlq_total",
	  "Undecodable jobs sent to the dead-letter topic" },
	{ offsetof(worker_metrics_t, runs_swept), RN_METRIC_COUNTER, "runnel_worker_runs_swept_total",
	  "Runs of dead workers this worker ended worker_lost" },
	{ offsetof(worker_metrics_t, slots_busy), RN_METRIC_GAUGE, "runnel_worker_slots_busy",
	  "Slots running a run" },
	{ offsetof(worker_metrics_t, slots_total), RN_METRIC_GAUGE, "runnel_worker_slots_total",
	  "Slots of this worker" },
	{ offsetof(worker_metrics_t, lines_published), RN_METRIC_COUNTER, "runnel_worker_lines_published_total",
	  "Envelope lines written to run streams" },
	{ offsetof(worker_metrics_t, lines_dropped), RN_METRIC_COUNTER, "runnel_worker_lines_dropped_total",
	  "Agent lines dropped after the terminal line" },
	{ offsetof(worker_metrics_t, lines_invalid), RN_METRIC_COUNTER, "runnel_worker_lines_invalid_total",
	  "Agent lines replaced by a warning (invalid envelope)" },
	{ offsetof(worker_metrics_t, redis_retries), RN_METRIC_COUNTER, "runnel_worker_redis_retries_total",
	  "Redis writes retried after an error or reconnect" },
	{ offsetof(worker_metrics_t, queue_wait), RN_METRIC_LATENCY, "runnel_worker_queue_wait_seconds",
	  "From enqueued_at to the claim" },
	{ offsetof(worker_metrics_t, sandbox_start), RN_METRIC_LATENCY, "runnel_worker_sandbox_start_seconds",
	  "Time to spawn the sandbox" },
	{ offsetof(worker_metrics_t, first_line), RN_METRIC_LATENCY, "runnel_worker_first_line_seconds",
	  "From the claim to the first line in the stream" },
	{ offsetof(worker_metrics_t, jobs_queued), RN_METRIC_COUNTER, "runnel_worker_jobs_queued_total",
	  "Kafka records this worker moved into the run-time queue" },
	{ offsetof(worker_metrics_t, queue_claims), RN_METRIC_COUNTER, "runnel_worker_queue_claims_total",
	  "Runs this worker took from the run-time queue" },
	{ offsetof(worker_metrics_t, queue_depth), RN_METRIC_GAUGE, "runnel_queue_depth",
	  "Runs waiting in the run-time queue (fleet-wide)" },
	{ offsetof(worker_metrics_t, queue_oldest_ms), RN_METRIC_GAUGE, "runnel_queue_oldest_age_ms",
	  "Age of the oldest queued run in ms (fleet-wide)" },
	{ offsetof(worker_metrics_t, queue_tenants), RN_METRIC_GAUGE, "runnel_queue_tenants",
	  "Tenants with queued runs (fleet-wide)" },
	{ offsetof(worker_metrics_t, jobs_duplicate), RN_METRIC_COUNTER, "runnel_worker_jobs_duplicate_total",
	  "Jobs not queued: another run owns their idempotency key" },
	{ offsetof(worker_metrics_t, webhooks_delivered), RN_METRIC_COUNTER, "runnel_webhooks_delivered_total",
	  "Completion webhooks answered 2xx" },
	{ offsetof(worker_metrics_t, webhooks_retried), RN_METRIC_COUNTER, "runnel_webhooks_retried_total",
	  "Completion webhook attempts that failed and were scheduled again" },
	{ offsetof(worker_metrics_t, webhooks_dropped), RN_METRIC_COUNTER, "runnel_webhooks_dropped_total",
	  "Completion webhooks given up on" },
	{ offsetof(worker_metrics_t, webhook_latency), RN_METRIC_LATENCY, "runnel_webhook_delivery_seconds",
	  "From the run's end to its webhook's delivery" },
};

int worker_metrics_init(worker_metrics_t *m)
{
	memset(m, 0, sizeof(*m));
	m->reg = rn_metrics_new();
	if (!m->reg)
		return -1;
#define X(name) m->runs_##name = rn_metrics_counter(m->reg, "runnel_worker_runs_total", \
	                                            "Runs this worker ended, by outcome", "outcome=\"" #name "\"");
	WORKER_OUTCOMES(X)
#undef X
	rn_metrics_register(m->reg, m, plain_series, sizeof(plain_series) / sizeof(plain_series[0]));
	pthread_mutex_init(&m->tenant_mu, NULL);
	for (int p = 0; p < 10; p++) {
		char labels[32];
		snprintf(labels, sizeof(labels), "priority=\"%d\"", p);
		m->queue_by_priority[p] = rn_metrics_gauge(m->reg, "runnel_queue_priority_queued",
		                                           "Queued runs per priority (fleet-wide, the first 1000 tenants)", labels);
		if (!m->queue_by_priority[p])
			return -1;
	}
	/* Indexed by worker_limit_t; [0] (no limit) is never counted. */
	_Static_assert(WORKER_METRICS_LIMITS == WORKER_LIMIT_COUNT, "limit_hits is indexed by worker_limit_t");
	for (int i = 1; i < WORKER_METRICS_LIMITS; i++) {
		char labels[64];
		snprintf(labels, sizeof(labels), "limit=\"%s\"", worker_limit_name((worker_limit_t)i));
		m->limit_hits[i] = rn_metrics_counter(m->reg, "runnel_worker_limit_hits_total",
		                                      "Runs ended resource_limit, by the limit they hit", labels);
		if (!m->limit_hits[i])
			return -1;
	}
	if (!m->slots_busy || !m->first_line || !m->runs_internal || !m->queue_tenants)
		return -1;
	return 0;
}

int worker_metrics_warm_agents(worker_metrics_t *m, const char (*names)[32], size_t n)
{
	for (size_t i = 0; i < n && m->nwarm_agents < WORKER_METRICS_WARM_AGENTS; i++) {
		struct worker_metrics_warm *w = &m->warm_agents[m->nwarm_agents++];
		char labels[64];
		snprintf(w->name, sizeof(w->name), "%s", names[i]);
		snprintf(labels, sizeof(labels), "agent=\"%s\"", names[i]);
		w->ready = rn_metrics_gauge(m->reg, "runnel_worker_warm_agents",
		                            "Warm agents started, handshake done, waiting for a run", labels);
		w->started = rn_metrics_counter(m->reg, "runnel_worker_warm_agents_started_total",
		                                "Warm agents that finished their handshake", labels);
		w->taken = rn_metrics_counter(m->reg, "runnel_worker_warm_agents_taken_total",
		                              "Runs that started on a warm agent", labels);
		w->discarded = rn_metrics_counter(m->reg, "runnel_worker_warm_agents_discarded_total",
		                                  "Warm agents thrown away unused (died idle, did not fit their run, drained)",
		                                  labels);
		w->missed = rn_metrics_counter(m->reg, "runnel_worker_warm_agents_missed_total",
		                               "Runs that could use a warm agent and found none ready", labels);
		w->age = rn_metrics_histogram(m->reg, "runnel_worker_warm_agent_age_seconds",
		                              "How long a warm agent waited, ready, for the run that took it", labels,
		                              rn_metrics_latency_bounds, rn_metrics_latency_nbounds);
		if (!w->ready || !w->started || !w->taken || !w->discarded || !w->missed || !w->age)
			return -1;
	}
	return 0;
}

struct worker_metrics_warm *worker_metrics_warm(worker_metrics_t *m, const char *name)
{
	for (size_t i = 0; m && name && i < m->nwarm_agents; i++)
		if (!strcmp(m->warm_agents[i].name, name))
			return &m->warm_agents[i];
	return NULL;
}

void worker_metrics_set_tenant_text(worker_metrics_t *m, char *text)
{
	pthread_mutex_lock(&m->tenant_mu);
	free(m->tenant_text);
	m->tenant_text = text;
	pthread_mutex_unlock(&m->tenant_mu);
}

void worker_metrics_free(worker_metrics_t *m)
{
	if (m->reg)
		pthread_mutex_destroy(&m->tenant_mu);
	free(m->tenant_text);
	rn_metrics_free(m->reg);
	memset(m, 0, sizeof(*m));
}

rn_counter_t *worker_metrics_outcome(worker_metrics_t *m, const char *outcome)
{
#define X(name) \
	if (!strcmp(outcome, #name)) \
		return m->runs_##name;
	WORKER_OUTCOMES(X)
#undef X
	return m->runs_internal;
}

struct worker_http {
	struct evhttp *http;
	worker_metrics_t *m;
	int draining;
};

static void http_cb(struct evhttp_request *req, void *arg)
{
	worker_http_t *h = arg;
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *out = evbuffer_new();
	if (!out) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		evhttp_send_error(req, 405, NULL);
	} else if (!strcmp(uri, "/healthz")) {
		/* Liveness: a draining worker is alive and must not be restarted
		 * in the middle of letting its runs finish. */
		evhttp_add_header(hdr, "Content-Type", "text/plain");
		evbuffer_add_printf(out, "%s\n", h->draining ? "draining" : "ok");
		evhttp_send_reply(req, 200, "OK", out);
	} else if (!strcmp(uri, "/readyz")) {
		/* Readiness: a draining worker takes no new job. */
		evhttp_add_header(hdr, "Content-Type", "text/plain");
		evbuffer_add_printf(out, "%s\n", h->draining ? "draining" : "ok");
		evhttp_send_reply(req, h->draining ? 503 : 200, h->draining ? "Draining" : "OK", out);
	} else if (!strcmp(uri, "/metrics")) {
		size_t len = 0;
		char *text = rn_metrics_render(h->m->reg, &len);
		if (!text) {
			evhttp_send_error(req, 500, NULL);
		} else {
			evhttp_add_header(hdr, "Content-Type", "text/plain; version=0.0.4");
			evbuffer_add(out, text, len);
			free(text);
			pthread_mutex_lock(&h->m->tenant_mu);
			if (h->m->tenant_text)
				evbuffer_add(out, h->m->tenant_text, strlen(h->m->tenant_text));
			pthread_mutex_unlock(&h->m->tenant_mu);
			evhttp_send_reply(req, 200, "OK", out);
		}
	} else {
		evhttp_send_error(req, 404, NULL);
	}
	evbuffer_free(out);
}

worker_http_t *worker_http_start(struct event_base *base, worker_metrics_t *m,
                                 const char *host, int port, int *bound_port,
                                 char *errstr, size_t errstr_size)
{
	worker_http_t *h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	h->m = m;
	h->http = evhttp_new(base);
	if (!h->http) {
		free(h);
		snprintf(errstr, errstr_size, "evhttp_new failed");
		return NULL;
	}
	evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET);
	evhttp_set_gencb(h->http, http_cb, h);
	struct evhttp_bound_socket *s = evhttp_bind_socket_with_handle(h->http, host, (ev_uint16_t)port);
	if (!s) {
		snprintf(errstr, errstr_size, "metrics: cannot listen on %s:%d", host, port);
		evhttp_free(h->http);
		free(h);
		return NULL;
	}
	*bound_port = port;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(evhttp_bound_socket_get_fd(s), (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			*bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			*bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return h;
}

void worker_http_set_draining(worker_http_t *h)
{
	if (h)
		h->draining = 1;
}

void worker_http_stop(worker_http_t *h)
{
	if (!h)
		return;
	evhttp_free(h->http);
	free(h);
}
