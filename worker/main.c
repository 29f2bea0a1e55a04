/*
 * worker/main.c - runnel-worker: the main thread's event loop.  It polls the
 * Kafka consumer, claims jobs in Redis, hands each claimed run to its own
 * thread (run.c), renews leases, sweeps the leases of dead workers, serves
 * /healthz and /metrics, and drains on SIGTERM.
 *
 * The main thread owns the slot table; run threads only report "done"
 * through a libevent user event, and the control thread only signals runs
 * under the table's mutex.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "common/log.h"
#include "common/runstate.h"
#include "common/util.h"
#include "proto/envelope.h"
#include "proto/job.h"
#include "worker/config.h"
#include "worker/consumer.h"
#include "worker/control.h"
#include "worker/metrics.h"
#include "worker/publish.h"
#include "worker/run.h"
#include "worker/warm.h"
#include "worker/sandbox.h"

#define PENDING_MAX      16
#define KAFKA_TICK_MS    100

typedef struct worker {
	worker_config_t    cfg;
	worker_metrics_t   m;
	worker_ctx_t       ctx;
	struct event_base *base;
	worker_consumer_t *consumer;
	worker_control_t  *control;
	worker_http_t     *http;
	redisContext      *rc;            /* main thread's Redis: claim, heartbeat, sweep */
	int64_t            rc_retry_at;   /* mono ms: do not reconnect before */
	unsigned           rc_attempt;

	pthread_mutex_t    mu;            /* guards runs[] for the control thread, done[] */
	worker_run_t     **runs;          /* cfg.slots entries, NULL = free */
	size_t             busy;
	worker_run_t     **done;          /* runs whose thread finished */
	size_t             ndone;

	rd_kafka_message_t *pending[PENDING_MAX];
	size_t             npending;

	struct event *ev_kafka, *ev_tick, *ev_done, *ev_hb, *ev_sweep;
	struct event *ev_term, *ev_int, *ev_drain, *ev_hard;
	int                draining;
	int                drain_expired;
	int64_t            hb_next_ms;    /* mono ms the next heartbeat is due */
} worker_t;

static void pump(worker_t *w);

/* ------------------------------------------------------------------------
 * The main Redis connection
 * ------------------------------------------------------------------------ */

static redisContext *main_redis(worker_t *w)
{
	if (w->rc)
		return w->rc;
	int64_t now = rn_mono_ms();
	if (now < w->rc_retry_at)
		return NULL;
	char err[256];
	w->rc = worker_redis_connect(&w->cfg.redis, 500, err, sizeof(err));
	if (!w->rc) {
		long back = 50L << (w->rc_attempt < 5 ? w->rc_attempt : 5);
		if (back > 2000)
			back = 2000;
		w->rc_attempt++;
		w->rc_retry_at = now + back;
		if (w->rc_attempt == 1 || w->rc_attempt % 20 == 0)
			rn_log_warn(NULL, "redis_unreachable", "%s; retrying", err);
		return NULL;
	}
	struct timeval tv = { 5, 0 };
	redisSetTimeout(w->rc, tv);
	if (w->rc_attempt)
		rn_log_info(NULL, "redis_reconnected", "connected to Redis again");
	w->rc_attempt = 0;
	return w->rc;
}

static void main_redis_failed(worker_t *w, const char *what, const char *err)
{
	rn_log_warn(NULL, "redis_error", "%s: %s", what, err);
	if (w->rc) {
		redisFree(w->rc);
		w->rc = NULL;
	}
	w->rc_retry_at = rn_mono_ms() + 100;
}

/* ------------------------------------------------------------------------
 * Slots
 * ------------------------------------------------------------------------ */

/*
 * Pauses every assigned partition while the slots are full (or draining)
 * and resumes when one frees: a job stays in Kafka, where another worker can
 * take it, until this worker has a slot for it.
 */
static void update_pause(worker_t *w)
{
	int full = w->draining || w->busy >= (size_t)w->cfg.slots;
	if (w->consumer)
		worker_consumer_set_paused(w->consumer, full);
	rn_gauge_set(w->m.slots_busy, (int64_t)w->busy);
}

static int run_active(worker_t *w, const char *run_id)
{
	for (long i = 0; i < w->cfg.slots; i++)
		if (w->runs[i] && !strcmp(w->runs[i]->run_id, run_id))
			return 1;
	return 0;
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
	worker_run_t *list[256];
	size_t n;

	pthread_mutex_lock(&w->mu);
	n = w->ndone;
	memcpy(list, w->done, n * sizeof(*list));
	w->ndone = 0;
	for (size_t i = 0; i < n; i++)
		for (long s = 0; s < w->cfg.slots; s++)
			if (w->runs[s] == list[i])
				w->runs[s] = NULL;
	pthread_mutex_unlock(&w->mu);

	for (size_t i = 0; i < n; i++) {
		worker_run_t *run = list[i];
		worker_run_join(run);
		worker_control_unwatch(w->control, run->run_id);
		worker_run_free(run);
		w->busy--;
	}
	update_pause(w);
	if (w->draining && w->busy == 0) {
		event_base_loopbreak(w->base);
		return;
	}
	pump(w);
}

/* ------------------------------------------------------------------------
 * Jobs: decode, claim, start
 * ------------------------------------------------------------------------ */

static void heartbeat_cb(evutil_socket_t fd, short what, void *arg);

/* While the main thread waits on something slow, leases are still renewed. */
static void heartbeat_if_due(void *arg)
{
	worker_t *w = arg;
	if (rn_mono_ms() >= w->hb_next_ms)
		heartbeat_cb(-1, 0, w);
}

static void dlq(worker_t *w, const rd_kafka_message_t *m, const char *reason)
{
	char err[256];
	rn_log_warn(NULL, "job_rejected", "partition %d offset %lld: %s",
	            (int)m->partition, (long long)m->offset, reason);
	if (worker_consumer_dlq(w->consumer, m, reason, 10000, heartbeat_if_due, w,
	                        err, sizeof(err)) < 0)
		rn_log_error(NULL, "dlq_failed", "%s", err);
	else
		rn_counter_add(w->m.jobs_dlq, 1);
}

/*
 * Handles the first pending message.  Returns 1 when it was consumed, 0 when
 * it must wait (Redis unreachable).
 */
static int handle_message(worker_t *w, rd_kafka_message_t *m)
{
	proto_job_t job;
	char err[256];

	if (!m->payload || m->len == 0) {
		dlq(w, m, "empty message");
		worker_consumer_store(w->consumer, m);
		return 1;
	}
	if (proto_job_parse(m->payload, m->len, w->cfg.have_job_key ? w->cfg.job_key : NULL,
	                    w->cfg.require_sealed, &job, err, sizeof(err)) < 0) {
		dlq(w, m, err);
		worker_consumer_store(w->consumer, m);
		return 1;
	}
	if (run_active(w, job.run_id)) {
		rn_log_info(job.run_id, "job_skipped", "redelivered while this worker runs it");
		rn_counter_add(w->m.jobs_skipped, 1);
		worker_consumer_store(w->consumer, m);
		proto_job_clear(&job);
		return 1;
	}
	redisContext *c = main_redis(w);
	if (!c) {
		proto_job_clear(&job);
		return 0;
	}
	int64_t ttl = w->cfg.max_runtime_sec + w->cfg.retention_sec;
	rn_claim_t cl;
	if (rn_runstate_claim(c, w->cfg.key_prefix, job.run_id, w->cfg.worker_id,
	                      w->cfg.lease_sec * 1000, job.enqueued_at, ttl, &cl,
	                      err, sizeof(err)) < 0) {
		main_redis_failed(w, "claim", err);
		proto_job_clear(&job);
		return 0;
	}
	if (job.enqueued_at > 0 && cl.now_ms >= job.enqueued_at)
		rn_hist_observe(w->m.queue_wait, (double)(cl.now_ms - job.enqueued_at) / 1000.0);

	switch (cl.status) {
	case RN_CLAIM_DONE:
		rn_log_info(job.run_id, "job_skipped", "the run already ended (%s)", cl.detail);
		rn_counter_add(w->m.jobs_skipped, 1);
		break;
	case RN_CLAIM_HELD:
		rn_log_info(job.run_id, "job_skipped", "held by live worker %s", cl.detail);
		rn_counter_add(w->m.jobs_skipped, 1);
		break;
	case RN_CLAIM_LOST:
		rn_log_warn(job.run_id, "run_lost", "redelivered after its worker died mid-run: ended worker_lost");
		rn_counter_add(w->m.runs_swept, 1);
		break;
	case RN_CLAIM_OK:
	case RN_CLAIM_CANCEL: {
		worker_run_t *run = worker_run_new(&w->ctx, &job, &cl);
		if (!run) {
			rn_log_error(job.run_id, "run_internal", "out of memory");
			proto_job_clear(&job);
			return 0;
		}
		if (cl.status == RN_CLAIM_CANCEL)
			worker_run_stop(run, WORKER_STOP_CANCEL, cl.detail);
		long slot = -1;
		for (long i = 0; i < w->cfg.slots; i++)
			if (!w->runs[i]) {
				slot = i;
				break;
			}
		pthread_mutex_lock(&w->mu);
		w->runs[slot] = run;
		pthread_mutex_unlock(&w->mu);
		w->busy++;
		worker_control_watch(w->control, run->run_id);
		rn_log_info(run->run_id, "run_claimed", "slot %ld, partition %d offset %lld%s", slot,
		            (int)m->partition, (long long)m->offset,
		            cl.status == RN_CLAIM_CANCEL ? " (cancelled before start)" : "");
		if (worker_run_start(run) < 0) {
			/* No thread: end it now with an internal error from here. */
			pthread_mutex_lock(&w->mu);
			w->runs[slot] = NULL;
			pthread_mutex_unlock(&w->mu);
			w->busy--;
			worker_control_unwatch(w->control, run->run_id);
			size_t len = 0;
			char *line = proto_env_make_error(PROTO_ERR_INTERNAL, "The worker could not start the run.",
			                                  rn_now_ms(), &len);
			if (line) {
				rn_runstate_finish(c, w->cfg.key_prefix, run->run_id, line, len, "failed",
				                   PROTO_ERR_INTERNAL, w->cfg.retention_sec, err, sizeof(err));
				free(line);
			}
			worker_run_free(run);
		}
		update_pause(w);
		break;
	}
	}
	worker_consumer_store(w->consumer, m);
	proto_job_clear(&job);
	return 1;
}

/*
 * Takes messages while slots are free.  While full it keeps polling (that
 * serves rebalances and keeps max.poll.interval.ms satisfied through long
 * runs): the partitions are paused then, so polling returns events, not
 * jobs (a job fetched before the pause took effect waits here, in order).
 */
static void pump(worker_t *w)
{
	if (!w->consumer)
		return;
	for (;;) {
		while (w->npending > 0 && !w->draining && w->busy < (size_t)w->cfg.slots) {
			if (!handle_message(w, w->pending[0]))
				break;
			rd_kafka_message_destroy(w->pending[0]);
			memmove(w->pending, w->pending + 1, (w->npending - 1) * sizeof(w->pending[0]));
			w->npending--;
		}
		update_pause(w);
		if (w->npending > 0 && !w->draining && w->busy < (size_t)w->cfg.slots)
			break; /* waiting for Redis */
		if (w->npending >= PENDING_MAX)
			break; /* cannot happen while paused; never drop a job */
		rd_kafka_message_t *m = worker_consumer_poll(w->consumer);
		if (!m)
			break;
		if (w->draining) {
			/* Not stored: it goes back to the group when we leave. */
			rd_kafka_message_destroy(m);
			continue;
		}
		w->pending[w->npending++] = m;
	}
	update_pause(w);
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

static void heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	const char *ids[256];
	worker_run_t *runs[256];
	int owned[256];
	size_t n = 0;

	w->hb_next_ms = rn_mono_ms() + w->cfg.lease_sec * 1000 / 3;
	for (long i = 0; i < w->cfg.slots && n < 256; i++)
		if (w->runs[i]) {
			runs[n] = w->runs[i];
			ids[n++] = w->runs[i]->run_id;
		}
	if (n == 0)
		return;
	redisContext *c = main_redis(w);
	if (!c)
		return;
	char err[256];
	if (rn_runstate_heartbeat(c, w->cfg.key_prefix, ids, n, w->cfg.worker_id,
	                          w->cfg.lease_sec * 1000, owned, err, sizeof(err)) < 0) {
		main_redis_failed(w, "heartbeat", err);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (!owned[i] && atomic_load(&runs[i]->stop) != WORKER_STOP_LOST) {
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
	redisContext *c = main_redis(w);
	if (!c)
		return;
	char err[256];
	if (rn_runstate_sweep(c, w->cfg.key_prefix, w->cfg.retention_sec, 100, on_swept, w,
	                      err, sizeof(err)) < 0)
		main_redis_failed(w, "sweep", err);
}

/* ------------------------------------------------------------------------
 * Control and drain
 * ------------------------------------------------------------------------ */

static void on_control(const char *run_id, const proto_ctl_t *ctl, void *arg)
{
	worker_t *w = arg;
	if (ctl->type != PROTO_CTL_CANCEL)
		return;
	pthread_mutex_lock(&w->mu);
	for (long i = 0; i < w->cfg.slots; i++) {
		worker_run_t *run = w->runs[i];
		if (run && !strcmp(run->run_id, run_id)) {
			rn_log_info(run_id, "run_cancel", "cancel requested (%s)", ctl->reason[0] ? ctl->reason : "no reason");
			worker_run_stop(run, WORKER_STOP_CANCEL, ctl->reason);
		}
	}
	pthread_mutex_unlock(&w->mu);
}

static void hard_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_t *w = arg;
	rn_log_error(NULL, "drain_abandon", "%zu run(s) could not finish; leaving them to the lost sweep", w->busy);
	w->ctx.give_up = 1;
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

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	worker_t *w = arg;
	if (w->draining) {
		rn_log_info(NULL, "drain_now", "second signal: ending runs now");
		drain_expired(w);
		return;
	}
	w->draining = 1;
	worker_warm_pool_drain(w->ctx.warm);   /* warm: shrink to zero */
	worker_http_set_draining(w->http);
	rn_log_info(NULL, "drain_start", "signal %d: taking no more jobs; %zu run(s) active, %ld s to finish",
	            (int)sig, w->busy, w->cfg.drain_sec);
	/* Jobs fetched but not claimed go back to Kafka (their offsets are not stored). */
	for (size_t i = 0; i < w->npending; i++)
		rd_kafka_message_destroy(w->pending[i]);
	w->npending = 0;
	update_pause(w);
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

int main(int argc, char **argv)
{
	static worker_t W;
	worker_t *w = &W;
	char err[512];
	int rc = 0;

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

	if (worker_sandbox_probe(w->cfg.driver, w->cfg.bwrap_path, err, sizeof(err)) < 0) {
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
	curl_global_init(CURL_GLOBAL_DEFAULT);
	evthread_use_pthreads();
	if (mkdir(w->cfg.work_dir, 0700) < 0 && errno != EEXIST) {
		rn_log_error(NULL, "config", "RUNNEL_WORK_DIR %s: %s", w->cfg.work_dir, strerror(errno));
		return 2;
	}

	if (worker_metrics_init(&w->m) < 0) {
		rn_log_error(NULL, "startup", "out of memory");
		return 1;
	}
	rn_gauge_set(w->m.slots_total, w->cfg.slots);
	pthread_mutex_init(&w->mu, NULL);
	w->runs = calloc((size_t)w->cfg.slots, sizeof(*w->runs));
	w->done = calloc((size_t)w->cfg.slots, sizeof(*w->done));
	w->ctx.cfg = &w->cfg;
	w->ctx.m = &w->m;
	w->ctx.on_done = on_run_done;
	w->ctx.arg = w;
	w->base = event_base_new();
	if (!w->runs || !w->done || !w->base) {
		rn_log_error(NULL, "startup", "out of memory");
		return 1;
	}

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
	w->consumer = worker_consumer_new(&w->cfg, err, sizeof(err));
	if (!w->consumer) {
		rn_log_error(NULL, "config", "%s", err);
		worker_control_stop(w->control);
		return 2;
	}

	w->ev_kafka = event_new(w->base, worker_consumer_fd(w->consumer), EV_READ | EV_PERSIST, kafka_cb, w);
	w->ev_tick = event_new(w->base, -1, EV_PERSIST, tick_cb, w);
	w->ev_done = event_new(w->base, -1, EV_PERSIST, done_cb, w);
	w->ev_hb = event_new(w->base, -1, EV_PERSIST, heartbeat_cb, w);
	w->ev_sweep = event_new(w->base, -1, EV_PERSIST, sweep_cb, w);
	w->ev_term = evsignal_new(w->base, SIGTERM, signal_cb, w);
	w->ev_int = evsignal_new(w->base, SIGINT, signal_cb, w);
	w->ev_drain = evtimer_new(w->base, drain_cb, w);
	w->ev_hard = evtimer_new(w->base, hard_cb, w);
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
	event_add(w->ev_term, NULL);
	event_add(w->ev_int, NULL);

	/* warm: sandboxes started ahead of need (worker/warm.h). */
	if (w->cfg.warm > 0) {
		char *mock_bind = NULL;
		if (w->cfg.mock_agent_path[0] &&
		    asprintf(&mock_bind, "%s:%s", w->cfg.mock_agent_path, WORKER_MOCK_AGENT_IN_SANDBOX) < 0)
			mock_bind = NULL;
		char *binds[] = { mock_bind, NULL };
		worker_warm_pool_opts_t wo = {
			.size = (size_t)w->cfg.warm, .init_path = w->cfg.warm_init_path,
			.work_dir = w->cfg.work_dir, .bwrap_path = w->cfg.bwrap_path,
			.rootfs = w->cfg.rootfs, .ro_binds = binds, .share_net = w->cfg.share_net,
			.rlimit_nofile = WORKER_RUN_RLIMIT_NOFILE,
		};
		w->ctx.warm = worker_warm_pool_new(&wo, err, sizeof(err));
		free(mock_bind);
		if (!w->ctx.warm)
			rn_log_warn(NULL, "warm_start", "no warm sandboxes: %s", err);
	}

	rn_log_info(NULL, "worker_started",
	            "worker %s: topic %s, group %s, %ld slot(s), sandbox %s, lease %ld s, metrics %s:%d",
	            w->cfg.worker_id, w->cfg.jobs_topic, w->cfg.group, w->cfg.slots, w->cfg.sandbox,
	            w->cfg.lease_sec, w->cfg.metrics_host[0] ? w->cfg.metrics_host : "off", mport);

	event_base_dispatch(w->base);

	/* Drained (or gave up): leave the group, committing stored offsets. */
	if (w->ctx.give_up) {
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
	worker_control_stop(w->control);
	worker_http_stop(w->http);
	event_free(w->ev_tick);
	event_free(w->ev_done);
	event_free(w->ev_hb);
	event_free(w->ev_sweep);
	event_free(w->ev_term);
	event_free(w->ev_int);
	event_free(w->ev_drain);
	event_free(w->ev_hard);
	event_base_free(w->base);
	if (w->ctx.warm) {
		unsigned long taken, missed, started;
		worker_warm_pool_stats(w->ctx.warm, &taken, &missed, &started);
		rn_log_info(NULL, "warm_stats", "warm sandboxes: %lu started, %lu taken, %lu runs found none ready",
		            started, taken, missed);
		worker_warm_pool_free(w->ctx.warm);   /* after every run ended */
		w->ctx.warm = NULL;
	}
	if (w->rc)
		redisFree(w->rc);
	free(w->runs);
	free(w->done);
	worker_metrics_free(&w->m);
	curl_global_cleanup();
	rn_log_info(NULL, "worker_stopped", "drained; exiting");
	worker_config_free(&w->cfg);
	return rc;
}
