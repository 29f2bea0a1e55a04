/*
 * worker/claim.c - queue entries, the claimer thread, and the hand-over of
 * claimed runs to the main thread's loop (see claim.h).
 */
#include "worker/claim.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "common/bg.h"
#include "common/log.h"
#include "common/redis.h"
#include "common/runqueue.h"
#include "common/runstate.h"
#include "common/util.h"
#include "proto/envelope.h"
#include "proto/keys.h"
#include "proto/queueentry.h"
#include "worker/consumer.h"
#include "worker/publish.h"
#include "worker/webhook.h"

#define WAIT_MS  1000  /* one BLPOP on the wake list */
#define FETCH_MS 10000 /* reading a referenced record back */
/* Records remembered for this worker's own claims (reference mode). */
#define RECENT_MAX   64
#define RECENT_BYTES (4u << 20)

char *worker_queue_entry(const worker_config_t *cfg, const proto_job_t *job,
                         const rd_kafka_message_t *m, size_t *len,
                         char *errstr, size_t errstr_size)
{
	if (cfg->have_job_key) {
		char *sealed = proto_job_serialize(job, cfg->job_key, len, errstr, errstr_size);
		if (sealed)
			return sealed;
		/* Sealing grows a job (base64); one that no longer fits the job
		 * size cap is queued by reference instead of being stuck. */
	}
	/* The topic too: workers of other topics may share the Redis prefix. */
	proto_queue_ref_t ref = { .partition = m->partition, .offset = m->offset };
	snprintf(ref.topic, sizeof(ref.topic), "%s", rd_kafka_topic_name(m->rkt));
	char *s = proto_queue_ref_write(&ref, len);
	if (!s)
		snprintf(errstr, errstr_size, "out of memory");
	return s;
}

worker_queue_push_t worker_queue_push(rn_rcluster_t *c, const worker_config_t *cfg,
                                      const proto_job_t *job, const rd_kafka_message_t *m,
                                      int *already, char *errstr, size_t errstr_size)
{
	size_t len = 0;
	*already = 0;
	char *entry = worker_queue_entry(cfg, job, m, &len, errstr, errstr_size);
	if (!entry)
		return WORKER_QUEUE_NO_ENTRY; /* a reference is the fallback: only memory fails */
	const char *tenant = proto_job_tenant(job);
	int64_t ttl = cfg->max_runtime_sec + cfg->retention_sec;
	int pushed = -1;
	if (job->idempotency_key[0]) {
		/* Before the state hash: a duplicate leaves no trace of its own. */
		char rkey[PROTO_IDEM_REDIS_KEY_MAX], owner[65];
		int own = -1;
		if (proto_idem_redis_key(rkey, sizeof(rkey), cfg->key_prefix, tenant, job->idempotency_key) < 0)
			snprintf(errstr, errstr_size, "idempotency key: cannot name its record");
		else
			own = rn_idem_claim(c, rkey, job->run_id, ttl, owner, errstr, errstr_size);
		if (own <= 0) {
			sodium_memzero(entry, len);
			free(entry);
			if (own == 0) {
				snprintf(errstr, errstr_size, "%s", owner);
				return WORKER_QUEUE_DUPLICATE;
			}
			return WORKER_QUEUE_REDIS;
		}
	}
	rn_queue_fields_t f = { .priority = proto_job_priority(job),
		                .traceparent = job->traceparent,
		                .webhook = job->webhook,
		                .idem_key = job->idempotency_key };
	/* The webhook's outbox entry exists before the run can end (see
	 * worker/webhook.h), so no terminal writer can lose it. */
	if (rn_runqueue_mark(c, cfg->key_prefix, job->run_id, tenant, job->enqueued_at, ttl, &f,
	                     errstr, errstr_size) == 0 &&
	    (!job->webhook ||
	     rn_webhook_arm(c, cfg->key_prefix, job->run_id, rn_now_ms() + WORKER_WEBHOOK_POLL_MS, errstr,
	                    errstr_size) == 0))
		pushed = rn_runqueue_push(c, cfg->key_prefix, job->run_id, tenant, f.priority, entry, len,
		                          errstr, errstr_size);
	sodium_memzero(entry, len);
	free(entry);
	if (pushed < 0)
		return WORKER_QUEUE_REDIS;
	*already = pushed == 0;
	if (cfg->queue_wait_replicas > 0) {
		/* Keyless: it goes to the node the push went to, the queue's. */
		redisReply *r = rn_rcluster_command(c, 0, "WAIT %ld %d", cfg->queue_wait_replicas, 1000);
		long long got = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
		if (r)
			freeReplyObject(r);
		if (got < 0) {
			snprintf(errstr, errstr_size, "no answer to WAIT");
			return WORKER_QUEUE_WAIT_FAILED;
		}
		if (got < cfg->queue_wait_replicas) {
			snprintf(errstr, errstr_size, "%lld of %ld replica(s) have the queued job", got,
			         cfg->queue_wait_replicas);
			return WORKER_QUEUE_REPLICAS_SHORT;
		}
	}
	return WORKER_QUEUE_PUSHED;
}

struct worker_claimer {
	const worker_config_t *cfg;
	worker_metrics_t *m;
	long slots;
	worker_claim_cb cb;
	void *arg;
	rn_bg_t bg;       /* the claimer thread; mu guards what follows */
	long outstanding; /* handed out, not done */
	int paused;
	rn_redis_conn_t rc;
	worker_fetcher_t *fetcher; /* reference mode, created on first use */
	/* Reference mode: the records this worker queued itself, so that its
	 * own claims need no read back from Kafka.  A ring under recent_mu
	 * (main thread puts, claimer takes); wiped when taken or dropped. */
	pthread_mutex_t recent_mu;
	struct recent {
		char *topic, *buf;
		int32_t partition;
		int64_t offset;
		size_t len;
	} recent[RECENT_MAX];
	size_t recent_next, recent_bytes;
	/* The hand-over: the claimer thread appends under mu, the loop's
	 * ev_ready takes them.  At most slots entries (outstanding bounds them). */
	struct event *ev_ready;
	worker_claimed_t **ready;
	size_t nready;
	worker_claimed_t **batch; /* main thread's copy of ready */
	rn_tenant_caps_t caps;
	const char **cap_names;
};

void worker_claimed_raw_clear(char **raw, size_t *raw_len)
{
	if (*raw) {
		sodium_memzero(*raw, *raw_len);
		free(*raw);
	}
	*raw = NULL;
	*raw_len = 0;
}

static void recent_drop(worker_claimer_t *cl, struct recent *r)
{
	if (r->buf) {
		sodium_memzero(r->buf, r->len);
		cl->recent_bytes -= r->len;
	}
	free(r->buf);
	free(r->topic);
	memset(r, 0, sizeof(*r));
}

void worker_claimer_remember(worker_claimer_t *cl, const rd_kafka_message_t *m)
{
	if (!m->payload || m->len > RECENT_BYTES / 4)
		return;
	struct recent n = {
		.topic = strdup(rd_kafka_topic_name(m->rkt)),
		.buf = malloc(m->len),
		.partition = m->partition,
		.offset = m->offset,
		.len = m->len,
	};
	if (!n.topic || !n.buf) {
		free(n.topic);
		free(n.buf);
		return; /* the claim reads it back from Kafka */
	}
	memcpy(n.buf, m->payload, m->len);
	pthread_mutex_lock(&cl->recent_mu);
	/* recent_next is the oldest slot: it is reused, and the ones after it
	 * are dropped while the bytes would exceed the cap. */
	recent_drop(cl, &cl->recent[cl->recent_next]);
	for (size_t k = 1; k < RECENT_MAX && cl->recent_bytes + n.len > RECENT_BYTES; k++)
		recent_drop(cl, &cl->recent[(cl->recent_next + k) % RECENT_MAX]);
	cl->recent[cl->recent_next] = n;
	cl->recent_bytes += n.len;
	cl->recent_next = (cl->recent_next + 1) % RECENT_MAX;
	pthread_mutex_unlock(&cl->recent_mu);
}

/* The remembered record, taken out (the caller wipes and frees it), or NULL. */
static char *recent_take(worker_claimer_t *cl, const char *topic, int32_t partition, int64_t offset,
                         size_t *len)
{
	char *buf = NULL;
	pthread_mutex_lock(&cl->recent_mu);
	for (size_t i = 0; i < RECENT_MAX; i++) {
		struct recent *r = &cl->recent[i];
		if (r->buf && r->partition == partition && r->offset == offset && !strcmp(r->topic, topic)) {
			buf = r->buf;
			*len = r->len;
			cl->recent_bytes -= r->len;
			r->buf = NULL;
			recent_drop(cl, r);
			break;
		}
	}
	pthread_mutex_unlock(&cl->recent_mu);
	return buf;
}

/* Sleeps up to ms unless stopped. */
static void nap(worker_claimer_t *cl, long ms)
{
	pthread_mutex_lock(&cl->bg.mu);
	rn_bg_wait_ms(&cl->bg, ms);
	pthread_mutex_unlock(&cl->bg.mu);
}

/* The claimer's connection; while Redis is down, naps until the next try
 * (a stop cuts the nap short). */
static rn_rcluster_t *conn(worker_claimer_t *cl)
{
	long wait = 0;
	rn_rcluster_t *c = rn_redis_conn_get(&cl->rc, &wait);
	if (!c)
		nap(cl, wait);
	return c;
}

static void failed(worker_claimer_t *cl, const char *what, const char *err)
{
	rn_redis_conn_failed(&cl->rc, what, err);
}

/* Keeps a copy of the bytes of a job with a webhook (see worker_claimed_t). */
static void keep_raw(const proto_job_t *job, const char *buf, size_t len, char **raw, size_t *raw_len)
{
	if (!job->webhook || !(*raw = malloc(len ? len : 1)))
		return;
	memcpy(*raw, buf, len);
	*raw_len = len;
}

/* Opens a queue entry into *job (and *raw, see keep_raw).  0, or -1 with
 * errstr, or -2 with errstr when the referenced Kafka record could not be
 * read now (try later). */
static int open_entry(worker_claimer_t *cl, const rn_queue_item_t *it, proto_job_t *job,
                      char **raw, size_t *raw_len, char *errstr, size_t errstr_size)
{
	const worker_config_t *cfg = cl->cfg;
	const uint8_t *key = cfg->have_job_key ? cfg->job_key : NULL;
	proto_queue_ref_t ref;
	int isref = proto_queue_ref_parse(it->entry, it->len, &ref, errstr, errstr_size);
	if (isref < 0)
		return -1;
	if (!isref) {
		if (proto_job_parse(it->entry, it->len, key, cfg->require_sealed, job, errstr, errstr_size) < 0)
			return -1;
		keep_raw(job, it->entry, it->len, raw, raw_len);
		return 0;
	}
	const char *topic = ref.topic[0] ? ref.topic : cfg->jobs_topic;
	int32_t p = ref.partition;
	int64_t o = ref.offset;
	size_t len = 0;
	char *buf = recent_take(cl, topic, (int32_t)p, (int64_t)o, &len);
	if (!buf) {
		if (!cl->fetcher && !(cl->fetcher = worker_fetcher_new(cfg, errstr, errstr_size)))
			return -1;
		int got = worker_fetcher_get(cl->fetcher, topic, (int32_t)p, (int64_t)o, FETCH_MS, &buf, &len,
		                             errstr, errstr_size);
		if (got < 0)
			return got;
	}
	int rc = proto_job_parse(buf, len, key, cfg->require_sealed, job, errstr, errstr_size);
	if (rc == 0 && strcmp(job->run_id, it->run_id) != 0) {
		proto_job_clear(job);
		snprintf(errstr, errstr_size, "the referenced record holds another run");
		rc = -1;
	}
	if (rc == 0)
		keep_raw(job, buf, len, raw, raw_len);
	sodium_memzero(buf, len);
	free(buf);
	return rc;
}

/* A run whose entry cannot be opened can never start: end it. */
static void end_unopenable(worker_claimer_t *cl, rn_rcluster_t *c, const rn_queue_item_t *it,
                           const char *why)
{
	char err[256];
	rn_log_error(it->run_id, "queue_entry_bad", "cannot open the queued job: %s", why);
	size_t len = 0;
	char *line = proto_env_make_error(PROTO_ERR_INTERNAL, "The worker could not read the queued job.",
	                                  rn_now_ms(), &len);
	if (line) {
		if (rn_runstate_finish(c, cl->cfg->key_prefix, it->run_id, line, len, "failed",
		                       PROTO_ERR_INTERNAL, cl->cfg->retention_sec, err, sizeof(err)) < 0)
			rn_log_warn(it->run_id, "redis_error", "%s", err);
		free(line);
	}
	if (rn_runqueue_ack(c, cl->cfg->key_prefix, it->run_id, it->tenant, 0, err, sizeof(err)) < 0)
		rn_log_warn(it->run_id, "redis_error", "%s", err);
}

/* One take.  1 when something was taken (try again at once), 0 when the
 * queue had nothing for us, -1 on a Redis error (already handled). */
static int take_one(worker_claimer_t *cl, rn_rcluster_t *c)
{
	const worker_config_t *cfg = cl->cfg;
	char err[256];
	rn_queue_item_t it;
	int64_t lease_ms = cfg->lease_sec * 1000;
	int r = rn_runqueue_take(c, cfg->key_prefix, &cl->caps, lease_ms, lease_ms, &it, err, sizeof(err));
	if (r < 0) {
		failed(cl, "take", err);
		return -1;
	}
	if (r == 0)
		return 0;
	rn_counter_add(cl->m->queue_claims, 1);

	proto_job_t job;
	char *raw = NULL;
	size_t raw_len = 0;
	int opened = open_entry(cl, &it, &job, &raw, &raw_len, err, sizeof(err));
	if (opened == -2) {
		/* Kafka is away (a broker restart): the run is not broken.  The
		 * entry stays inflight and returns to the queue at its deadline. */
		rn_log_warn(it.run_id, "queue_entry_retry", "cannot read the queued job now: %s", err);
		rn_queue_item_clear(&it);
		nap(cl, 1000);
		return 0;
	}
	if (opened < 0) {
		end_unopenable(cl, c, &it, err);
		rn_queue_item_clear(&it);
		return 1;
	}
	rn_claim_t st;
	int64_t ttl = cfg->max_runtime_sec + cfg->retention_sec;
	if (rn_runstate_claim(c, cfg->key_prefix, job.run_id, cfg->worker_id, lease_ms,
	                      job.enqueued_at, ttl, &st, err, sizeof(err)) < 0) {
		/* Still inflight: it goes back to the queue when its deadline passes. */
		proto_job_clear(&job);
		worker_claimed_raw_clear(&raw, &raw_len);
		rn_queue_item_clear(&it);
		failed(cl, "claim", err);
		return -1;
	}
	int running = st.status == RN_CLAIM_OK || st.status == RN_CLAIM_CANCEL;
	if (rn_runqueue_ack(c, cfg->key_prefix, it.run_id, it.tenant, running, err, sizeof(err)) < 0)
		rn_log_warn(it.run_id, "redis_error", "queue ack: %s (the entry returns and is skipped)", err);
	if (job.enqueued_at > 0 && st.now_ms >= job.enqueued_at)
		rn_hist_observe(cl->m->queue_wait, (double)(st.now_ms - job.enqueued_at) / 1000.0);

	switch (st.status) {
	case RN_CLAIM_DONE:
		rn_log_info(job.run_id, "job_skipped", "the run already ended (%s)", st.detail);
		rn_counter_add(cl->m->jobs_skipped, 1);
		break;
	case RN_CLAIM_HELD:
		rn_log_info(job.run_id, "job_skipped", "held by live worker %s", st.detail);
		rn_counter_add(cl->m->jobs_skipped, 1);
		break;
	case RN_CLAIM_LOST:
		rn_log_warn(job.run_id, "run_lost", "queued again after its worker died mid-run: ended worker_lost");
		rn_counter_add(cl->m->runs_swept, 1);
		break;
	case RN_CLAIM_OK:
	case RN_CLAIM_CANCEL: {
		worker_claimed_t *wc = calloc(1, sizeof(*wc));
		if (!wc) {
			/* Claimed but cannot run: the lease lapses and the sweep ends it. */
			rn_log_error(job.run_id, "run_internal", "out of memory");
			break;
		}
		wc->job = job;
		memset(&job, 0, sizeof(job));
		wc->claim = st;
		wc->queued_ms = it.queued_ms;
		wc->raw = raw;
		wc->raw_len = raw_len;
		raw = NULL;
		rn_log_debug(wc->job.run_id, "run_taken", "tenant %s, %lld ms in the queue", it.tenant,
		             (long long)(it.queued_ms > 0 ? it.now_ms - it.queued_ms : 0));
		pthread_mutex_lock(&cl->bg.mu);
		cl->outstanding++;
		cl->ready[cl->nready++] = wc;
		pthread_mutex_unlock(&cl->bg.mu);
		event_active(cl->ev_ready, EV_READ, 0);
		break;
	}
	}
	proto_job_clear(&job);
	worker_claimed_raw_clear(&raw, &raw_len);
	rn_queue_item_clear(&it);
	return 1;
}

static void *claimer_main(void *arg)
{
	worker_claimer_t *cl = arg;
	char err[256];
	for (;;) {
		pthread_mutex_lock(&cl->bg.mu);
		while (!cl->bg.stop && (cl->paused || cl->outstanding >= cl->slots))
			pthread_cond_wait(&cl->bg.cv, &cl->bg.mu);
		int stop = cl->bg.stop;
		pthread_mutex_unlock(&cl->bg.mu);
		if (stop)
			break;
		rn_rcluster_t *c = conn(cl);
		if (!c)
			continue;
		int r = take_one(cl, c);
		if (r != 0)
			continue;
		int w = rn_runqueue_wait(c, cl->cfg->key_prefix, WAIT_MS, err, sizeof(err));
		if (w < 0)
			failed(cl, "wait", err);
	}
	return NULL;
}

/* Main thread: starts the runs the claimer handed over. */
static void ready_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_claimer_t *cl = arg;
	(void)fd;
	(void)what;
	pthread_mutex_lock(&cl->bg.mu);
	size_t n = cl->nready;
	memcpy(cl->batch, cl->ready, n * sizeof(*cl->batch));
	cl->nready = 0;
	pthread_mutex_unlock(&cl->bg.mu);
	for (size_t i = 0; i < n; i++) {
		cl->cb(cl->batch[i], cl->arg);
		free(cl->batch[i]);
	}
}

static void claimer_free(worker_claimer_t *cl)
{
	for (size_t i = 0; i < RECENT_MAX; i++)
		recent_drop(cl, &cl->recent[i]);
	pthread_mutex_destroy(&cl->recent_mu);
	rn_bg_destroy(&cl->bg);
	if (cl->ev_ready)
		event_free(cl->ev_ready);
	free(cl->ready);
	free(cl->batch);
	free(cl->cap_names);
	free(cl);
}

worker_claimer_t *worker_claimer_start(struct event_base *base, const worker_config_t *cfg,
                                       worker_metrics_t *m, long slots, worker_claim_cb cb,
                                       void *arg, char *errstr, size_t errstr_size)
{
	worker_claimer_t *cl = calloc(1, sizeof(*cl));
	if (!cl) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	rn_bg_init(&cl->bg);
	rn_redis_conn_init(&cl->rc, &cfg->redis, "claimer", NULL, 1000);
	pthread_mutex_init(&cl->recent_mu, NULL);
	cl->ready = calloc((size_t)slots, sizeof(*cl->ready));
	cl->batch = calloc((size_t)slots, sizeof(*cl->batch));
	cl->ev_ready = event_new(base, -1, EV_PERSIST, ready_cb, cl);
	if (!cl->ready || !cl->batch || !cl->ev_ready || event_add(cl->ev_ready, NULL) < 0) {
		claimer_free(cl);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	cl->cfg = cfg;
	cl->m = m;
	cl->slots = slots;
	cl->cb = cb;
	cl->arg = arg;
	cl->caps.def = cfg->tenant_max_runs;
	cl->caps.n = cfg->n_tenant_caps;
	cl->cap_names = calloc(cfg->n_tenant_caps + 1, sizeof(*cl->cap_names));
	if (!cl->cap_names) {
		claimer_free(cl);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_tenant_caps; i++)
		cl->cap_names[i] = cfg->tenant_cap_names[i];
	cl->caps.names = cl->cap_names;
	cl->caps.caps = cfg->tenant_caps;
	/* Tenants over their hourly token budget wait (worker/gateway.h). */
	cl->caps.tok_def = cfg->tenant_tokens_per_hour;
	cl->caps.ntok = cfg->n_tenant_tokens;
	cl->caps.tok_names = (const char *const *)cfg->tenant_token_ptrs;
	cl->caps.toks = cfg->tenant_tokens;
	int e = rn_bg_start(&cl->bg, "runnel-claim", 0, claimer_main, cl);
	if (e) {
		snprintf(errstr, errstr_size, "claimer thread: %s", strerror(e));
		claimer_free(cl);
		return NULL;
	}
	return cl;
}

void worker_claimer_done(worker_claimer_t *cl)
{
	/* After worker_claimer_stop (runs that end after the loop, when the
	 * drain gave up) there is nobody to tell. */
	if (!cl)
		return;
	pthread_mutex_lock(&cl->bg.mu);
	if (cl->outstanding > 0)
		cl->outstanding--;
	pthread_cond_broadcast(&cl->bg.cv);
	pthread_mutex_unlock(&cl->bg.mu);
}

void worker_claimer_pause(worker_claimer_t *cl)
{
	pthread_mutex_lock(&cl->bg.mu);
	cl->paused = 1;
	pthread_cond_broadcast(&cl->bg.cv);
	pthread_mutex_unlock(&cl->bg.mu);
}

void worker_claimer_stop(worker_claimer_t *cl)
{
	if (!cl)
		return;
	rn_bg_stop(&cl->bg, NULL, NULL, NULL);
	/* A claim that was in flight when the drain began and arrived after
	 * the loop ended is claimed in Redis under our name: end it
	 * worker_shutdown rather than leave it to the lost sweep (one try to
	 * connect now, whatever the backoff said). */
	cl->rc.retry_at = 0;
	for (size_t i = 0; i < cl->nready; i++) {
		worker_claimed_t *wc = cl->ready[i];
		char err[256];
		rn_rcluster_t *c = conn(cl);
		size_t len = 0;
		char *line = proto_env_make_error(PROTO_ERR_WORKER_SHUTDOWN,
		                                  "The worker shut down before the run could start.",
		                                  rn_now_ms(), &len);
		if (line && c &&
		    rn_runstate_finish(c, cl->cfg->key_prefix, wc->job.run_id, line, len, "failed",
		                       PROTO_ERR_WORKER_SHUTDOWN, cl->cfg->retention_sec, err, sizeof(err)) >= 0)
			rn_runqueue_release(c, cl->cfg->key_prefix, wc->job.run_id,
			                    proto_job_tenant(&wc->job), err, sizeof(err));
		free(line);
		proto_job_clear(&wc->job);
		worker_claimed_raw_clear(&wc->raw, &wc->raw_len);
		free(wc);
	}
	cl->nready = 0;
	rn_redis_conn_close(&cl->rc);
	worker_fetcher_free(cl->fetcher);
	claimer_free(cl);
}
