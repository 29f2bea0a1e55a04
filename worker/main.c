/*
 * worker/main.c - runnel-worker: the main thread's event loop.  It polls the
 * Kafka consumer and moves every job into the run-time queue in Redis
 * (intake: never waiting for a slot), starts each run the claimer thread
 * (claim.c) took from the queue on its own thread (run.c), renews leases,
 * sweeps the leases of dead workers, publishes the queue's gauges, serves
 * /healthz and /metrics, and drains on SIGTERM.
 *
 * The main thread owns the slot table; run threads only report "done"
 * and the claimer only hands runs over (claim.c) through libevent user
 * events, and the control thread only signals runs under the table's
 * mutex.  docs/architecture.md "Threads" has the whole contract.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>
#include <jansson.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "common/log.h"
#include "common/redis.h"
#include "common/runqueue.h"
#include "common/runstate.h"
#include "common/strv.h"
#include "common/util.h"
#include "proto/envelope.h"
#include "proto/job.h"
#include "worker/agent.h"
#include "worker/claim.h"
#include "worker/config.h"
#include "worker/consumer.h"
#include "worker/control.h"
#include "worker/metrics.h"
#include "worker/publish.h"
#include "worker/reaper.h"
#include "worker/run.h"
#include "worker/warm.h"
#include "worker/warm_agent.h"
#include "worker/webhook.h"
#include "worker/sandbox.h"
#include "worker/workspace.h"

#define PENDING_MAX   64
#define KAFKA_TICK_MS 100
#define IDLE_TRIM_MS  1000  /* after the last run ended: malloc_trim */
#define MALLOC_ARENAS 2     /* see main() */
#define STATS_MS      2000  /* queue gauges */
#define DLQ_WAIT_MS   10000 /* a DLQ delivery report, at most */

typedef struct worker {
	worker_config_t cfg;
	worker_metrics_t m;
	worker_ctx_t ctx;
	struct event_base *base;
	worker_consumer_t *consumer;
	worker_control_t *control;
	worker_webhook_t *webhook; /* the completion webhooks' delivery thread */
	worker_claimer_t *claimer;
	worker_http_t *http;
	int redis_kind;     /* rn_rcluster_probe at start: 1 cluster, 0 standalone, -2 not answering */
	rn_redis_conn_t rc; /* main thread's Redis: claim, heartbeat, sweep */

	pthread_mutex_t mu;                    /* guards runs[] for the control thread, done[] */
	worker_run_t **runs;                   /* cfg.slots entries, NULL = free */
	char (*tenants)[PROTO_TENANT_MAX + 1]; /* the tenant of runs[i] */
	size_t busy;
	worker_run_t **done; /* runs whose thread finished */
	size_t ndone;

	/* Main thread's scratch, cfg.slots entries each: the done batch and
	 * the heartbeat's lists (no fixed cap on the slot count; the two
	 * callbacks never nest). */
	worker_run_t **s_runs;
	char (*s_tenants)[PROTO_TENANT_MAX + 1];
	const char **s_ids;
	const char **s_tenant_ptrs;
	int *s_owned;

	rd_kafka_message_t *pending[PENDING_MAX];
	size_t npending;

	struct event *ev_kafka, *ev_tick, *ev_done, *ev_hb, *ev_sweep, *ev_stats;
	struct event *ev_term, *ev_int, *ev_drain, *ev_hard;
	struct event *ev_trim; /* an idle worker hands its free heap back */
	int draining;
	int drain_expired;
	int gave_up;             /* the drain's hard deadline passed */
	int64_t hb_next_ms;      /* mono ms the next heartbeat is due */
	int64_t intake_retry_at; /* mono ms: replicas were short, wait */
	int dlq_inflight;        /* pending[0]'s DLQ delivery is awaited */
} worker_t;

static void pump(worker_t *w);

/* ------------------------------------------------------------------------
 * The main Redis connection
 * ------------------------------------------------------------------------ */

static rn_rcluster_t *main_redis(worker_t *w)
{
	return rn_redis_conn_get(&w->rc, NULL);
}

static void main_redis_failed(worker_t *w, const char *what, const char *err)
{
	rn_redis_conn_failed(&w->rc, what, err);
}

/* ------------------------------------------------------------------------
 * Slots
 * ------------------------------------------------------------------------ */

static void update_busy(worker_t *w)
{
	rn_gauge_set(w->m.slots_busy, (int64_t)w->busy);
	/* A refill yields to the runs in flight, and only to them. */
	worker_warm_agents_busy(w->ctx.warm_agents, w->busy);
}

/* A run ended: its tenant's running set and the claimer get the slot back. */
static void release_slot(worker_t *w, const char *run_id, const char *tenant)
{
	char err[256];
	rn_rcluster_t *c = main_redis(w);
	/* Unreachable Redis: the running-set lease lapses by itself. */
	if (c && rn_runqueue_release(c, w->cfg.key_prefix, run_id, tenant, err, sizeof(err)) < 0)
		main_redis_failed(w, "queue release", err);
	worker_claimer_done(w->claimer);
	rn_log_trace_clear(run_id);
}

static void on_run_done(worker_run_t *run, void *arg)
{
	worker_t *w = arg;
	pthread_mutex_lock(&w->mu);
	w->done[w->ndone++] = run;
	pthread_mutex_unlock(&w->mu);
	event_active(w->ev_done, EV_READ, 0);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	worker_run_t **list = w->s_runs;
	char(*tenant)[PROTO_TENANT_MAX + 1] = w->s_tenants;
	size_t n;

	pthread_mutex_lock(&w->mu);
	n = w->ndone;
	memcpy(list, w->done, n * sizeof(*list));
	w->ndone = 0;
	for (size_t i = 0; i < n; i++) {
		snprintf(tenant[i], sizeof(tenant[i]), "%s", PROTO_TENANT_DEFAULT);
		for (long s = 0; s < w->cfg.slots; s++)
			if (w->runs[s] == list[i]) {
				w->runs[s] = NULL;
				memcpy(tenant[i], w->tenants[s], sizeof(tenant[i]));
			}
	}
	pthread_mutex_unlock(&w->mu);

	for (size_t i = 0; i < n; i++) {
		worker_run_t *run = list[i];
		worker_run_join(run);
		worker_control_unwatch(w->control, run->run_id);
		release_slot(w, run->run_id, tenant[i]);
		worker_run_free(run);
		w->busy--;
	}
	update_busy(w);
	if (w->draining && w->busy == 0)
		event_base_loopbreak(w->base);
	if (w->busy == 0 && n > 0) {
		struct timeval tv = { IDLE_TRIM_MS / 1000, (IDLE_TRIM_MS % 1000) * 1000 };
		evtimer_add(w->ev_trim, &tv); /* from the last run's end */
	}
}

/*
 * A second after the last run ended: the heap memory the runs freed goes
 * back to the system.  Each run thread may have used a malloc arena of its
 * own, and freed chunks stay mapped until trimmed (several MB of an idle
 * worker's RSS after a busy spell).
 */
static void trim_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	if (w->busy == 0)
		malloc_trim(0);
}

/* ------------------------------------------------------------------------
 * Jobs: decode, claim, start
 * ------------------------------------------------------------------------ */

/*
 * The DLQ delivery of pending[0], awaited on the loop: the loop goes on
 * renewing leases, starting claimed runs and serving control meanwhile,
 * and comes back here when the report wakes the consumer's fd (or on the
 * tick).  The offset is stored once the report came or the wait timed out,
 * never before (offsets are stored in order).  1 when done with the
 * record, 0 while waiting.
 */
static int dlq_wait(worker_t *w, const rd_kafka_message_t *m)
{
	char err[256];
	int r = worker_consumer_dlq_result(w->consumer, err, sizeof(err));
	if (r == 0)
		return 0;
	w->dlq_inflight = 0;
	if (r < 0)
		rn_log_error(NULL, "dlq_failed", "%s", err);
	else
		rn_counter_add(w->m.jobs_dlq, 1);
	worker_consumer_store(w->consumer, m);
	return 1;
}

/* A record that can never become a run goes to the DLQ. */
static int dlq(worker_t *w, const rd_kafka_message_t *m, const char *reason)
{
	char err[256];
	rn_log_warn(NULL, "job_rejected", "partition %d offset %lld: %s",
	            (int)m->partition, (long long)m->offset, reason);
	if (worker_consumer_dlq_send(w->consumer, m, reason, DLQ_WAIT_MS, err, sizeof(err)) < 0) {
		rn_log_error(NULL, "dlq_failed", "%s", err);
		worker_consumer_store(w->consumer, m);
		return 1;
	}
	w->dlq_inflight = 1;
	return dlq_wait(w, m);
}

/* From here on every log line naming the run carries its trace id. */
static void log_trace_set(const proto_job_t *job, const char *run_id)
{
	char tid[33];
	if (!job->traceparent[0])
		return;
	proto_traceparent_trace_id(job->traceparent, tid);
	rn_log_trace_set(run_id, tid);
}

/*
 * Moves the first pending record into the run-time queue
 * (worker_queue_push: the run's state hash says "queued" with its tenant,
 * the entry is queued), and only then is the offset stored.  Returns 1
 * when the record is done with, 0 when it must wait (Redis unreachable,
 * replicas short, or its DLQ delivery still awaited).
 */
static int intake(worker_t *w, rd_kafka_message_t *m)
{
	proto_job_t job;
	char err[256];

	if (w->dlq_inflight)
		return dlq_wait(w, m);
	if (!m->payload || m->len == 0)
		return dlq(w, m, "empty message");
	if (proto_job_parse(m->payload, m->len, w->cfg.have_job_key ? w->cfg.job_key : NULL,
	                    w->cfg.require_sealed, &job, err, sizeof(err)) < 0)
		return dlq(w, m, err);
	if (worker_webhook_job_check(&w->cfg, &job, err, sizeof(err)) < 0) {
		proto_job_clear(&job);
		return dlq(w, m, err);
	}
	if (job.traceparent_dropped)
		rn_log_warn(job.run_id, "traceparent_dropped", "the job's traceparent is not W3C Trace Context; the run "
		                                               "starts a trace of its own");
	rn_rcluster_t *c = main_redis(w);
	if (!c) {
		proto_job_clear(&job);
		return 0;
	}
	int already = 0;
	/* Reference mode: this worker's own claim of it needs no read back. */
	if (!w->cfg.have_job_key)
		worker_claimer_remember(w->claimer, m);
	int q = worker_queue_push(c, &w->cfg, &job, m, &already, err, sizeof(err));
	if (q == WORKER_QUEUE_DUPLICATE) {
		/* Acknowledged, never queued: its OTPs are never redeemed. */
		rn_log_info(job.run_id, "run_duplicate", "tenant %s: idempotency key already used by run %s; not started",
		            proto_job_tenant(&job), err);
		rn_counter_add(w->m.jobs_duplicate, 1);
		worker_consumer_store(w->consumer, m);
		proto_job_clear(&job);
		return 1;
	}
	if (q != WORKER_QUEUE_PUSHED) {
		if (q == WORKER_QUEUE_NO_ENTRY)
			rn_log_error(job.run_id, "queue_entry", "%s", err);
		else if (q == WORKER_QUEUE_REDIS)
			main_redis_failed(w, "queue push", err);
		else if (q == WORKER_QUEUE_WAIT_FAILED)
			main_redis_failed(w, "queue wait", err);
		else
			rn_log_warn(job.run_id, "queue_wait", "%s; retrying", err);
		/* WAIT blocked the loop for its timeout: give it a second. */
		if (q == WORKER_QUEUE_WAIT_FAILED || q == WORKER_QUEUE_REPLICAS_SHORT)
			w->intake_retry_at = rn_mono_ms() + 1000;
		proto_job_clear(&job);
		return 0;
	}
	char tid[33] = "";
	if (job.traceparent[0])
		proto_traceparent_trace_id(job.traceparent, tid);
	rn_log_traced(RN_LOG_INFO, job.run_id, tid, "run_queued", "tenant %s, priority %d, partition %d offset %lld%s",
	              proto_job_tenant(&job), proto_job_priority(&job), (int)m->partition, (long long)m->offset,
	              already ? " (already queued)" : "");
	rn_counter_add(w->m.jobs_queued, 1);
	worker_consumer_store(w->consumer, m);
	proto_job_clear(&job);
	return 1;
}

/* Starts a run the claimer took (main thread, from the claimer's
 * hand-over event). */
static void start_claimed(worker_claimed_t *wc, void *arg)
{
	worker_t *w = arg;
	char err[256];
	rn_claim_t cl = wc->claim;
	char tenant[PROTO_TENANT_MAX + 1];
	snprintf(tenant, sizeof(tenant), "%s", proto_job_tenant(&wc->job));
	worker_run_t *run = worker_run_new(&w->ctx, &wc->job, &cl);
	if (!run) {
		rn_log_error(wc->job.run_id, "run_internal", "out of memory");
		proto_job_clear(&wc->job);
		worker_claimed_raw_clear(&wc->raw, &wc->raw_len);
		worker_claimer_done(w->claimer);
		return;
	}
	run->raw = wc->raw;
	run->raw_len = wc->raw_len;
	wc->raw = NULL;
	wc->raw_len = 0;
	if (cl.status == RN_CLAIM_CANCEL)
		worker_run_stop(run, WORKER_STOP_CANCEL, cl.detail);
	long slot = -1;
	for (long i = 0; i < w->cfg.slots; i++)
		if (!w->runs[i]) {
			slot = i;
			break;
		}
	if (slot < 0) {
		/* The claimer never hands out more runs than slots; if it ever did,
		 * the run's lease lapses and the sweep ends it worker_lost. */
		rn_log_error(run->run_id, "run_internal", "claimed with no free slot");
		worker_run_free(run);
		worker_claimer_done(w->claimer);
		return;
	}
	pthread_mutex_lock(&w->mu);
	w->runs[slot] = run;
	memcpy(w->tenants[slot], tenant, sizeof(tenant));
	pthread_mutex_unlock(&w->mu);
	w->busy++;
	worker_control_watch(w->control, run->run_id);
	log_trace_set(&run->job, run->run_id);
	rn_log_info(run->run_id, "run_claimed", "slot %ld, tenant %s%s", slot, tenant,
	            cl.status == RN_CLAIM_CANCEL ? " (cancelled before start)" : "");
	if (worker_run_start(run) < 0) {
		/* No thread: end it now with an internal error from here. */
		pthread_mutex_lock(&w->mu);
		w->runs[slot] = NULL;
		pthread_mutex_unlock(&w->mu);
		w->busy--;
		worker_control_unwatch(w->control, run->run_id);
		rn_rcluster_t *c = main_redis(w);
		size_t len = 0;
		char *line = proto_env_make_error(PROTO_ERR_INTERNAL, "The worker could not start the run.",
		                                  rn_now_ms(), &len);
		if (line && c)
			rn_runstate_finish(c, w->cfg.key_prefix, run->run_id, line, len, "failed",
			                   PROTO_ERR_INTERNAL, w->cfg.retention_sec, err, sizeof(err));
		free(line);
		release_slot(w, run->run_id, tenant);
		worker_run_free(run);
	}
	update_busy(w);
}

/*
 * Moves records into the queue as fast as they come; slots play no part.
 * Only an unreachable Redis holds records back (in order, offsets not
 * stored), and then polling stops at PENDING_MAX records.
 */
static void pump(worker_t *w)
{
	if (!w->consumer || w->draining || rn_mono_ms() < w->intake_retry_at)
		return;
	for (;;) {
		while (w->npending > 0) {
			if (!intake(w, w->pending[0]))
				break;
			rd_kafka_message_destroy(w->pending[0]);
			memmove(w->pending, w->pending + 1, (w->npending - 1) * sizeof(w->pending[0]));
			w->npending--;
		}
		if (w->npending >= PENDING_MAX)
			break; /* waiting for Redis; never drop a job */
		rd_kafka_message_t *m = worker_consumer_poll(w->consumer);
		if (!m)
			break;
		w->pending[w->npending++] = m;
	}
}

static void kafka_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	worker_consumer_ack_fd(w->consumer);
	pump(w);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	pump(arg);
}

/* ------------------------------------------------------------------------
 * Leases and the lost sweep
 * ------------------------------------------------------------------------ */

/* This worker's warm agents, ready and wanted, for `runnel status`
 * (RN_WARM_AGENTS_FMT); del: the worker leaves. */
static void warm_agents_publish(worker_t *w, int del)
{
	if (!w->ctx.warm_agents)
		return;
	rn_rcluster_t *c = main_redis(w);
	if (!c)
		return;
	char key[300];
	snprintf(key, sizeof(key), RN_WARM_AGENTS_FMT, w->cfg.key_prefix);
	redisReply *r = NULL;
	if (del) {
		r = rn_rcluster_command(c, 0, "HDEL %s %s", key, w->cfg.worker_id);
	} else {
		size_t ready[WORKER_WARM_AGENT_KINDS], wanted[WORKER_WARM_AGENT_KINDS];
		size_t n = worker_warm_agents_count(w->ctx.warm_agents, ready, wanted);
		json_t *agents = json_object();
		for (size_t i = 0; i < n; i++)
			json_object_set_new(agents, w->cfg.warm_agent_names[i],
			                    json_pack("{s:I,s:I}", "ready", (json_int_t)ready[i], "wanted", (json_int_t)wanted[i]));
		json_t *o = json_pack("{s:I,s:o}", "at", (json_int_t)rn_now_ms(), "agents", agents);
		char *v = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		if (v)
			r = rn_rcluster_command(c, 0, "HSET %s %s %s", key, w->cfg.worker_id, v);
		free(v);
	}
	/* Best effort: the runs' own state does not depend on it. */
	if (r)
		freeReplyObject(r);
}

static void heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	const char **ids = w->s_ids, **tenants = w->s_tenant_ptrs;
	worker_run_t **runs = w->s_runs;
	int *owned = w->s_owned;
	size_t n = 0;

	w->hb_next_ms = rn_mono_ms() + w->cfg.lease_sec * 1000 / 3;
	warm_agents_publish(w, 0);
	for (long i = 0; i < w->cfg.slots; i++)
		if (w->runs[i]) {
			runs[n] = w->runs[i];
			tenants[n] = w->tenants[i];
			ids[n++] = w->runs[i]->run_id;
		}
	if (n == 0)
		return;
	rn_rcluster_t *c = main_redis(w);
	if (!c)
		return;
	char err[256];
	if (rn_runstate_heartbeat(c, w->cfg.key_prefix, ids, n, w->cfg.worker_id,
	                          w->cfg.lease_sec * 1000, owned, err, sizeof(err)) < 0) {
		main_redis_failed(w, "heartbeat", err);
		return;
	}
	/* The tenant caps count live members of the running sets. */
	if (rn_runqueue_touch(c, w->cfg.key_prefix, ids, tenants, n, w->cfg.lease_sec * 1000,
	                      err, sizeof(err)) < 0) {
		main_redis_failed(w, "queue touch", err);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (!owned[i] && worker_stopword_reason(&runs[i]->stop) != WORKER_STOP_LOST) {
			rn_log_debug(runs[i]->run_id, "lease_not_ours", "the run is not ours any more");
			worker_run_stop(runs[i], WORKER_STOP_LOST, NULL);
		}
}

static void on_swept(const char *run_id, void *arg)
{
	worker_t *w = arg;
	rn_counter_add(w->m.runs_swept, 1);
	rn_log_warn(run_id, "run_lost", "lease expired: ended worker_lost");
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	/* Renew our own leases first: after a Redis outage longer than a lease
	 * this worker's live runs would otherwise look dead to its own sweep. */
	heartbeat_cb(fd, what, arg);
	rn_rcluster_t *c = main_redis(w);
	if (!c)
		return;
	char err[256];
	if (rn_runstate_sweep(c, w->cfg.key_prefix, w->cfg.retention_sec, 100, on_swept, w,
	                      err, sizeof(err)) < 0)
		main_redis_failed(w, "sweep", err);
}

/* One per-tenant gauge into text at o: HELP, TYPE, a line per listed
 * tenant (field 0 queued, 1 running, 2 oldest age), and tenant="_other"
 * with other when some were not listed (other < 0: no such line).
 * Returns the new offset (never past cap). */
static size_t tenant_series(char *text, size_t cap, size_t o, const rn_queue_stats_t *st, int field,
                            const char *name, const char *help, int64_t other)
{
	int n = snprintf(text + o, cap - o, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
	o += n > 0 ? (size_t)n : 0;
	for (size_t i = 0; i < st->nlisted && o < cap; i++) {
		const rn_queue_tenant_t *t = &st->tenants[i];
		int64_t v = field == 0 ? t->queued : field == 1 ? t->running
		                                                : t->oldest_ms;
		n = snprintf(text + o, cap - o, "%s{tenant=\"%s\"} %lld\n", name, t->name, (long long)v);
		o += n > 0 ? (size_t)n : 0;
	}
	if (other >= 0 && st->ntenants > st->nlisted && o < cap) {
		n = snprintf(text + o, cap - o, "%s{tenant=\"_other\"} %lld\n", name, (long long)other);
		o += n > 0 ? (size_t)n : 0;
	}
	return o < cap ? o : cap - 1;
}

/*
 * The queue's gauges: depth, oldest age, tenants, and per-tenant series for
 * the deepest WORKER_METRICS_TENANTS_MAX tenants (the rest summed as
 * tenant="_other", so a burst of new tenant names cannot blow up the
 * series count).  Tenant names are [A-Za-z0-9_.-], safe in a label.
 */
static void stats_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	/* A sandbox init still exiting when its run was cleaned up. */
	worker_sandbox_reap_orphans();
	rn_rcluster_t *c = main_redis(w);
	if (!c)
		return;
	char err[256];
	rn_queue_stats_t st;
	if (rn_runqueue_stats(c, w->cfg.key_prefix, WORKER_METRICS_TENANTS_MAX, &st, err, sizeof(err)) < 0) {
		main_redis_failed(w, "queue stats", err);
		return;
	}
	rn_gauge_set(w->m.queue_depth, st.depth);
	rn_gauge_set(w->m.queue_oldest_ms, st.oldest_ms);
	rn_gauge_set(w->m.queue_tenants, (int64_t)st.ntenants);
	for (int p = 0; p < 10; p++)
		rn_gauge_set(w->m.queue_by_priority[p], st.by_priority[p]);
	size_t cap = 512 + (st.nlisted + 1) * 3 * 160;
	char *text = malloc(cap);
	if (text) {
		char help_queued[96];
		snprintf(help_queued, sizeof(help_queued), "Queued runs per tenant (the %d deepest; the rest as _other)",
		         WORKER_METRICS_TENANTS_MAX);
		size_t o = 0;
		/* _other: every queued run not listed (also of tenants past the
		 * scan); running only of the scanned ones. */
		int64_t other_q = st.depth, other_r = 0;
		for (size_t i = 0; i < st.nlisted; i++)
			other_q -= st.tenants[i].queued;
		for (size_t i = st.nlisted; i < st.nscanned; i++)
			other_r += st.tenants[i].running;
		if (other_q < 0)
			other_q = 0;
		o = tenant_series(text, cap, o, &st, 0, "runnel_queue_tenant_queued", help_queued, other_q);
		o = tenant_series(text, cap, o, &st, 1, "runnel_queue_tenant_running",
		                  "Claimed or running runs per queued tenant", other_r);
		tenant_series(text, cap, o, &st, 2, "runnel_queue_tenant_oldest_age_ms",
		              "Age of the tenant's oldest queued run", -1);
		worker_metrics_set_tenant_text(&w->m, text);
	}
	rn_queue_stats_clear(&st);
}

/* ------------------------------------------------------------------------
 * Control and drain
 * ------------------------------------------------------------------------ */

static void on_control(const char *run_id, const proto_ctl_t *ctl, void *arg)
{
	worker_t *w = arg;
	if (ctl->type != PROTO_CTL_CANCEL && ctl->type != PROTO_CTL_REPLY)
		return;
	pthread_mutex_lock(&w->mu);
	for (long i = 0; i < w->cfg.slots; i++) {
		worker_run_t *run = w->runs[i];
		if (run && !strcmp(run->run_id, run_id)) {
			if (ctl->type == PROTO_CTL_CANCEL)
				rn_log_info(run_id, "run_cancel", "cancel requested (%s)", ctl->reason[0] ? ctl->reason : "no reason");
			else
				rn_log_info(run_id, "run_reply", "reply to ask %s received", ctl->id);
			worker_run_control(run, ctl);
		}
	}
	pthread_mutex_unlock(&w->mu);
}

static void hard_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	rn_log_error(NULL, "drain_abandon", "%zu run(s) could not finish; leaving them to the lost sweep", w->busy);
	w->gave_up = 1;
	pthread_mutex_lock(&w->mu);
	for (long i = 0; i < w->cfg.slots; i++)
		if (w->runs[i])
			worker_run_give_up(w->runs[i]);
	pthread_mutex_unlock(&w->mu);
	event_base_loopbreak(w->base);
}

static void drain_expired(worker_t *w)
{
	if (w->drain_expired)
		return;
	w->drain_expired = 1;
	pthread_mutex_lock(&w->mu);
	for (long i = 0; i < w->cfg.slots; i++)
		if (w->runs[i])
			worker_run_stop(w->runs[i], WORKER_STOP_SHUTDOWN, NULL);
	pthread_mutex_unlock(&w->mu);
	if (w->busy) {
		rn_log_info(NULL, "drain_timeout", "ending %zu run(s) worker_shutdown", w->busy);
		/* Runs need the kill grace and a little Redis time; then give up. */
		struct timeval tv = { (w->cfg.kill_grace_ms / 1000) + 10, 0 };
		evtimer_add(w->ev_hard, &tv);
	}
}

static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
	drain_expired(arg);
}

/* SIGTERM or SIGINT before the loop's own handlers are armed (the
 * threads start, and Kafka is joined, before that): remembered here and
 * acted on once they are, so a stop during the start drains too. */
static volatile sig_atomic_t early_signal;

static void early_signal_cb(int sig)
{
	early_signal = sig;
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	worker_t *w = arg;
	if (w->draining) {
		rn_log_info(NULL, "drain_now", "second signal: ending runs now");
		drain_expired(w);
		return;
	}
	w->draining = 1;
	worker_warm_pool_drain(w->ctx.warm); /* warm: shrink to zero */
	worker_warm_agents_drain(w->ctx.warm_agents);
	worker_http_set_draining(w->http);
	rn_log_info(NULL, "drain_start", "signal %d: taking no more runs; %zu run(s) active, %ld s to finish",
	            (int)sig, w->busy, w->cfg.drain_sec);
	/* Queued runs stay in the queue for the other workers. */
	worker_claimer_pause(w->claimer);
	/* A record whose DLQ delivery is still awaited is done with as if the
	 * wait had timed out: its offset is stored, and the message itself
	 * goes out with the producer's flush when the consumer closes. */
	if (w->dlq_inflight && w->npending > 0) {
		char err[256];
		int r = worker_consumer_dlq_result(w->consumer, err, sizeof(err));
		if (r > 0)
			rn_counter_add(w->m.jobs_dlq, 1);
		else if (r < 0)
			rn_log_error(NULL, "dlq_failed", "%s", err);
		else
			rn_log_warn(NULL, "dlq_pending", "partition %d offset %lld: DLQ delivery not confirmed yet; flushed at close",
			            (int)w->pending[0]->partition, (long long)w->pending[0]->offset);
		worker_consumer_store(w->consumer, w->pending[0]);
		w->dlq_inflight = 0;
	}
	/* Records fetched but not queued go back to Kafka (their offsets are not
	 * stored), and leaving the group now hands our partitions to the others
	 * instead of holding them through the drain. */
	for (size_t i = 0; i < w->npending; i++)
		rd_kafka_message_destroy(w->pending[i]);
	w->npending = 0;
	if (w->consumer) {
		event_del(w->ev_kafka);
		worker_consumer_close(w->consumer);
		w->consumer = NULL;
		rn_log_info(NULL, "drain_left_group", "left the consumer group");
	}
	if (w->busy == 0) {
		event_base_loopbreak(w->base);
		return;
	}
	struct timeval tv = { w->cfg.drain_sec, 0 };
	evtimer_add(w->ev_drain, &tv);
}

/* ------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------ */

/* The limits the worker found at start, and a warning per degraded one. */
static void log_limits(const worker_config_t *cfg, char *warn)
{
	for (char *line = warn, *nl; *line; line = nl + 1) {
		if (!(nl = strchr(line, '\n')))
			nl = line + strlen(line) - 1;
		else
			*nl = '\0';
		rn_log_warn(NULL, "limits_degraded", "%s", line);
	}
	const worker_limits_env_t *le = &cfg->limits;
	rn_log_info(NULL, "limits", "cgroup %s, disk %s; per run: memory %ld MiB, pids %ld, cpus %s, disk %ld MiB, /tmp %ld MiB; egress %s",
	            worker_cgroup_mode_name(le->cgroup.mode),
	            le->disk_mode == WORKER_DISK_WATCH ? "watch" : le->mount_ns == 2 ? "tmpfs (own user and mount namespace)"
	                    : le->mount_ns == 1                                      ? "tmpfs (private mount namespace)"
	                                                                             : "tmpfs",
	            le->max.memory_mb, le->max.pids, cfg->run_cpus, le->max.disk_mb, le->max.tmp_mb,
	            worker_egress_mode_name(le->egress));
}

/*
 * 1 (with errstr) when a root worker's sandbox uid cannot search every
 * directory down to RUNNEL_WORK_DIR: bwrap runs as that uid and binds each
 * run's workspace from there, so every run would fail with bwrap's
 * "Permission denied".  Checked once, from the mode bits.
 */
static int work_dir_unreachable(const worker_config_t *cfg, char *errstr, size_t errstr_size)
{
	worker_sandbox_spec_t ids_of = { .driver = cfg->driver, .uid = cfg->sandbox_uid, .gid = cfg->sandbox_gid };
	uid_t uid;
	gid_t gid;
	if (!worker_sandbox_ids(&ids_of, &uid, &gid) || cfg->work_dir[0] != '/')
		return 0;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", cfg->work_dir);
	for (char *slash = path;; slash = strchr(slash + 1, '/')) {
		char keep = slash ? slash[1] : '\0';
		if (slash)
			slash[1] = '\0';
		struct stat st;
		int ok = stat(path, &st) != 0 || (st.st_mode & S_IXOTH) ||
		        (st.st_uid == uid && (st.st_mode & S_IXUSR)) || (st.st_gid == gid && (st.st_mode & S_IXGRP));
		if (!ok) {
			snprintf(errstr, errstr_size,
			         "RUNNEL_WORK_DIR: %.300s is not searchable by uid %ld (RUNNEL_SANDBOX_UID), "
			         "which the sandboxes run as: give it o+x",
			         path, (long)uid);
			return 1;
		}
		if (!slash)
			return 0;
		slash[1] = keep;
		if (!keep)
			return 0;
	}
}

/*
 * The worker's start, step by step, then its loop and its stop: main()
 * below reads as that list (the way nsjail chains its steps).
 */

/* The configuration, the sandbox probe, the work directory and the limits'
 * probes.  -1 to go on, else main's exit status. */
static int worker_setup(worker_t *w, int argc, char **argv, char *limits_warn, size_t warn_size)
{
	char err[512];
	int lr = worker_config_load(&w->cfg, argc, argv, err, sizeof(err));
	if (lr == 1) {
		worker_config_free(&w->cfg);
		return 0;
	}
	rn_log_init("worker", lr == 0 ? (rn_log_level_t)w->cfg.log_level_num : RN_LOG_INFO);
	if (lr < 0) {
		rn_log_error(NULL, "config", "%s", err);
		worker_config_free(&w->cfg);
		return 2;
	}
	/* Secrets in our own environment are not needed past this point. */
	worker_config_wipe_env("RUNNEL_REDIS_URL");
	worker_config_wipe_env("RUNNEL_KAFKA_PROPERTIES");
	/* A wrong Redis (a password it refuses, not Redis at all, a cluster
	 * with unserved slots) is refused now with the reason rather than
	 * retried forever; one that does not answer yet is waited for by the
	 * reconnect loops, as before. */
	int kind = rn_rcluster_probe(&w->cfg.redis, 2000, err, sizeof(err));
	if (kind == -1) {
		rn_log_error(NULL, "config", "RUNNEL_REDIS_URL: %s", err);
		worker_config_free(&w->cfg);
		return 2;
	}
	w->redis_kind = kind;
	worker_pub_set_wait((int)w->cfg.redis_wait_replicas, (int)w->cfg.redis_wait_timeout_ms);

	/* Each sandbox's init comes back here when bwrap exits, and is reaped
	 * (worker/sandbox.h), as it would be were this a container's pid 1. */
	if (w->cfg.driver == WORKER_SANDBOX_BWRAP && worker_sandbox_adopt_orphans() < 0)
		rn_log_warn(NULL, "subreaper", "cannot become a child subreaper (%s): the sandboxes' "
		                               "inits are reaped by this process's parent",
		            strerror(errno));
	worker_sandbox_spec_t probe_ids = { .driver = w->cfg.driver, .uid = w->cfg.sandbox_uid, .gid = w->cfg.sandbox_gid };
	if (worker_sandbox_probe_as(w->cfg.driver, w->cfg.bwrap_path, &probe_ids, err, sizeof(err)) < 0) {
		rn_log_error(NULL, "config", "RUNNEL_SANDBOX=%s cannot run here: %s", w->cfg.sandbox, err);
		worker_config_free(&w->cfg);
		return 2;
	}
	if (w->cfg.driver == WORKER_SANDBOX_PROCESS)
		rn_log_warn(NULL, "sandbox_unsafe",
		            "RUNNEL_SANDBOX=process ISOLATES NOTHING: agents run as this user with this host's "
		            "files and network. Use it only for development.");
	if (proto_sodium_init() < 0) {
		rn_log_error(NULL, "config", "libsodium failed to initialise");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, early_signal_cb);
	signal(SIGINT, early_signal_cb);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	evthread_use_pthreads();
	if (worker_ws_root(w->cfg.work_dir, err, sizeof(err)) < 0) {
		rn_log_error(NULL, "config", "RUNNEL_WORK_DIR: %s", err);
		return 2;
	}
	if (w->cfg.driver == WORKER_SANDBOX_BWRAP && work_dir_unreachable(&w->cfg, err, sizeof(err))) {
		rn_log_error(NULL, "config", "%s", err);
		return 2;
	}
	/* Per-run limits and egress: probe cgroups and mounts once, while
	 * single-threaded (reported once the worker has started). */
	if (worker_config_limits(&w->cfg, limits_warn, warn_size, err, sizeof(err)) < 0) {
		rn_log_error(NULL, "config", "%s", err);
		return 2;
	}
	return -1;
}

/* The metrics, the slot tables, the run context and the event base.  0, or
 * -1 (out of memory, logged). */
static int worker_alloc(worker_t *w)
{
	char err[512];
	if (worker_metrics_init(&w->m) < 0) {
		rn_log_error(NULL, "startup", "out of memory");
		return -1;
	}
	rn_gauge_set(w->m.slots_total, w->cfg.slots);
	if (worker_metrics_warm_agents(&w->m, w->cfg.warm_agent_names, w->cfg.n_warm_agents) < 0) {
		rn_log_error(NULL, "startup", "out of memory");
		return -1;
	}
	/* The gateway's view of the allowlist (worker_config_limits probed it
	 * before) and its series. */
	w->cfg.gateway.allow = w->cfg.limits.egress_allow;
	w->cfg.gateway.nallow = w->cfg.limits.egress_nallow;
	w->cfg.gateway.own = &w->cfg.limits.own;
	w->cfg.gateway.metrics = w->m.reg;
	pthread_mutex_init(&w->mu, NULL);
	w->runs = calloc((size_t)w->cfg.slots, sizeof(*w->runs));
	w->done = calloc((size_t)w->cfg.slots, sizeof(*w->done));
	w->tenants = calloc((size_t)w->cfg.slots, sizeof(*w->tenants));
	w->s_runs = calloc((size_t)w->cfg.slots, sizeof(*w->s_runs));
	w->s_tenants = calloc((size_t)w->cfg.slots, sizeof(*w->s_tenants));
	w->s_ids = calloc((size_t)w->cfg.slots, sizeof(*w->s_ids));
	w->s_tenant_ptrs = calloc((size_t)w->cfg.slots, sizeof(*w->s_tenant_ptrs));
	w->s_owned = calloc((size_t)w->cfg.slots, sizeof(*w->s_owned));
	w->ctx.cfg = &w->cfg;
	w->ctx.m = &w->m;
	w->ctx.on_done = on_run_done;
	w->ctx.arg = w;
	w->ctx.pub_pool = worker_pub_pool_new((size_t)w->cfg.slots);
	w->ctx.dlq = worker_dlq_new(&w->cfg);
	rn_redis_conn_init(&w->rc, &w->cfg.redis, "main", NULL, 500);
	w->ctx.reaper = worker_reaper_new((size_t)w->cfg.slots, (size_t)w->cfg.slots, err, sizeof(err));
	w->base = event_base_new();
	if (!w->runs || !w->done || !w->tenants || !w->s_runs || !w->s_tenants || !w->s_ids ||
	    !w->s_tenant_ptrs || !w->s_owned || !w->ctx.pub_pool || !w->ctx.dlq || !w->ctx.reaper || !w->base) {
		rn_log_error(NULL, "startup", "out of memory");
		return -1;
	}
	return 0;
}

/* The timers and signals of the main loop. */
static void worker_arm(worker_t *w)
{
	w->ev_kafka = event_new(w->base, worker_consumer_fd(w->consumer), EV_READ | EV_PERSIST, kafka_cb, w);
	w->ev_tick = event_new(w->base, -1, EV_PERSIST, tick_cb, w);
	w->ev_done = event_new(w->base, -1, EV_PERSIST, done_cb, w);
	w->ev_hb = event_new(w->base, -1, EV_PERSIST, heartbeat_cb, w);
	w->ev_sweep = event_new(w->base, -1, EV_PERSIST, sweep_cb, w);
	w->ev_term = evsignal_new(w->base, SIGTERM, signal_cb, w);
	w->ev_int = evsignal_new(w->base, SIGINT, signal_cb, w);
	w->ev_drain = evtimer_new(w->base, drain_cb, w);
	w->ev_hard = evtimer_new(w->base, hard_cb, w);
	w->ev_trim = evtimer_new(w->base, trim_cb, w);
	struct timeval tick = { 0, KAFKA_TICK_MS * 1000 };
	long hb_ms = w->cfg.lease_sec * 1000 / 3;
	struct timeval hb = { hb_ms / 1000, (hb_ms % 1000) * 1000 };
	/* The sweep runs about twice per lease on every worker, a little apart. */
	long sw_ms = w->cfg.lease_sec * 500 + (long)(getpid() % 250);
	struct timeval sw = { sw_ms / 1000, (sw_ms % 1000) * 1000 };
	event_add(w->ev_kafka, NULL);
	event_add(w->ev_tick, &tick);
	event_add(w->ev_done, NULL);
	event_add(w->ev_hb, &hb);
	event_add(w->ev_sweep, &sw);
	struct timeval stv = { STATS_MS / 1000, (STATS_MS % 1000) * 1000 };
	event_add(w->ev_stats, &stv);
	event_add(w->ev_term, NULL);
	event_add(w->ev_int, NULL);
	if (early_signal)
		signal_cb(early_signal, EV_SIGNAL, w);
}

/* After the loop: take nothing more, wait for the runs when the drain gave
 * up, then stop every thread and free everything, in that order. */
static void worker_stop(worker_t *w)
{
	warm_agents_publish(w, 1);
	/* Take nothing more; a claim that arrived after the loop ended is
	 * ended worker_shutdown there (claim.h). */
	worker_claimer_stop(w->claimer);
	w->claimer = NULL;
	/* Drained (or gave up): leave the group, committing stored offsets. */
	if (w->gave_up) {
		/* Runs still stuck on Redis: they stop retrying now; wait for them. */
		for (long i = 0; i < w->cfg.slots; i++)
			if (w->runs[i])
				worker_run_stop(w->runs[i], WORKER_STOP_LOST, NULL);
		while (w->busy > 0) {
			struct timespec ts = { 0, 20 * 1000000L };
			nanosleep(&ts, NULL);
			done_cb(-1, 0, w);
		}
	}
	for (size_t i = 0; i < w->npending; i++)
		rd_kafka_message_destroy(w->pending[i]);
	w->npending = 0;
	event_free(w->ev_kafka);
	worker_consumer_close(w->consumer);
	w->consumer = NULL;
	event_free(w->ev_stats);
	worker_control_stop(w->control);
	worker_webhook_stop(w->webhook);
	worker_http_stop(w->http);
	event_free(w->ev_tick);
	event_free(w->ev_done);
	event_free(w->ev_hb);
	event_free(w->ev_sweep);
	event_free(w->ev_term);
	event_free(w->ev_int);
	event_free(w->ev_drain);
	event_free(w->ev_hard);
	event_free(w->ev_trim);
	event_base_free(w->base);
	if (w->ctx.warm) {
		unsigned long taken, missed, started;
		worker_warm_pool_stats(w->ctx.warm, &taken, &missed, &started);
		rn_log_info(NULL, "warm_stats", "warm sandboxes: %lu started, %lu taken, %lu runs found none ready",
		            started, taken, missed);
		worker_warm_pool_free(w->ctx.warm); /* after every run ended */
		w->ctx.warm = NULL;
	}
	worker_warm_agents_free(w->ctx.warm_agents); /* after every run ended */
	w->ctx.warm_agents = NULL;
	worker_reaper_free(w->ctx.reaper); /* after every run ended */
	worker_ws_recycle_drain();
	w->ctx.reaper = NULL;
	worker_pub_pool_free(w->ctx.pub_pool); /* after every run ended */
	w->ctx.pub_pool = NULL;
	worker_dlq_free(w->ctx.dlq); /* after every run ended */
	w->ctx.dlq = NULL;
	rn_redis_conn_close(&w->rc);
	free(w->runs);
	free(w->done);
	free(w->s_runs);
	free(w->s_tenants);
	free(w->s_ids);
	free(w->s_tenant_ptrs);
	free(w->s_owned);
	free(w->tenants);
	worker_metrics_free(&w->m);
	curl_global_cleanup();
}

int main(int argc, char **argv)
{
	static worker_t W;
	worker_t *w = &W;
	char err[512];
	int rc = 0;

	/*
	 * Every run has a thread of its own, and glibc gives threads malloc
	 * arenas of their own (up to 8 per CPU): each active run then touched
	 * pages of a fresh arena.  A few shared arenas bound what a run adds
	 * to the worker's memory; runs allocate little, so they hardly contend.
	 */
	mallopt(M_ARENA_MAX, MALLOC_ARENAS);

	static char limits_warn[2048];
	int src = worker_setup(w, argc, argv, limits_warn, sizeof(limits_warn));
	if (src >= 0)
		return src;

	if (worker_alloc(w) < 0)
		return 1;

	int mport = 0;
	if (w->cfg.metrics_host[0]) {
		w->http = worker_http_start(w->base, &w->m, w->cfg.metrics_host, w->cfg.metrics_port,
		                            &mport, err, sizeof(err));
		if (!w->http) {
			rn_log_error(NULL, "config", "RUNNEL_METRICS_LISTEN: %s", err);
			return 2;
		}
	}
	w->control = worker_control_start(&w->cfg, (size_t)w->cfg.slots, on_control, w, err, sizeof(err));
	if (!w->control) {
		rn_log_error(NULL, "startup", "%s", err);
		return 1;
	}
	w->webhook = worker_webhook_start(&w->cfg, &w->m, err, sizeof(err));
	if (!w->webhook) {
		rn_log_error(NULL, "startup", "%s", err);
		worker_control_stop(w->control);
		return 1;
	}
	w->consumer = worker_consumer_new(&w->cfg, err, sizeof(err));
	if (!w->consumer) {
		rn_log_error(NULL, "config", "%s", err);
		worker_webhook_stop(w->webhook);
		worker_control_stop(w->control);
		return 2;
	}

	w->ev_stats = event_new(w->base, -1, EV_PERSIST, stats_cb, w);
	/* Warm agents (worker/warm_agent.h): started before the first claim;
	 * a worker that cannot start the agents it was asked for says so. */
	if (w->cfg.n_warm_agents) {
		w->ctx.warm_agents = worker_warm_agents_new(&w->cfg, &w->m, err, sizeof(err));
		if (!w->ctx.warm_agents) {
			rn_log_error(NULL, "startup", "%s", err);
			return 2;
		}
	}
	w->claimer = worker_claimer_start(w->base, &w->cfg, &w->m, w->cfg.slots, start_claimed, w,
	                                  err, sizeof(err));
	if (!w->claimer) {
		rn_log_error(NULL, "startup", "%s", err);
		return 1;
	}
	worker_arm(w);

	/* warm: sandboxes started ahead of need (worker/warm.h). */
	if (w->cfg.warm > 0) {
		/* Each kind's own binds, so that its runs fit these sandboxes. */
		rn_strv_t binds = { 0 };
		if (worker_agent_warm_binds(&w->cfg, &binds) < 0)
			rn_strv_free(&binds);
		worker_warm_pool_opts_t wo = {
			.size = (size_t)w->cfg.warm,
			.init_path = w->cfg.warm_init_path,
			.work_dir = w->cfg.work_dir,
			.bwrap_path = w->cfg.bwrap_path,
			.rootfs = w->cfg.rootfs,
			.ro_binds = binds.n ? binds.v : NULL,
			.share_net = w->cfg.share_net,
			.rlimit_nofile = WORKER_RUN_RLIMIT_NOFILE,
			.tmp_mb = w->cfg.run_tmp_mb,
			.uid = w->cfg.sandbox_uid,
			.gid = w->cfg.sandbox_gid,
			.limits = &w->cfg.limits,
		};
		w->ctx.warm = worker_warm_pool_new(&wo, err, sizeof(err));
		rn_strv_free(&binds);
		if (!w->ctx.warm)
			rn_log_warn(NULL, "warm_start", "no warm sandboxes: %s", err);
	}

	rn_log_info(NULL, "worker_started",
	            "worker %s: topic %s, group %s, %ld slot(s), sandbox %s, lease %ld s, metrics %s:%d, redis %s",
	            w->cfg.worker_id, w->cfg.jobs_topic, w->cfg.group, w->cfg.slots, w->cfg.sandbox,
	            w->cfg.lease_sec, w->cfg.metrics_host[0] ? w->cfg.metrics_host : "off", mport,
	            w->redis_kind == 1           ? "cluster (commands routed by slot)"
	                    : w->redis_kind == 0 ? "standalone"
	                                         : "not answering yet");
	log_limits(&w->cfg, limits_warn);

	event_base_dispatch(w->base);

	worker_stop(w);
	rn_log_info(NULL, "worker_stopped", "drained; exiting");
	worker_config_free(&w->cfg);
	return rc;
}
