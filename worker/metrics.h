/*
 * worker/metrics.h - runnel-worker's Prometheus series and the small HTTP
 * server (evhttp on the main event loop) that serves /healthz, /readyz and
 * /metrics.
 *
 * The handles are created once at start, before any other thread exists,
 * and freed after every thread was joined; in between, updates are atomic
 * (common/metrics.h), so any thread may update them.  Who does, today
 * (docs/architecture.md, "Threads"):
 *   main thread   jobs_queued, jobs_dlq, runs_swept, slots_busy,
 *                 slots_total, queue_depth, queue_oldest_ms, queue_tenants,
 *                 the per-tenant text (under tenant_mu; /metrics reads it)
 *   claimer       queue_claims, queue_wait, jobs_skipped, runs_swept (a run
 *                 found lost on claim)
 *   main thread   jobs_duplicate, queue_by_priority
 *   webhook       webhooks_delivered, webhooks_retried, webhooks_dropped,
 *                 webhook_latency
 *   run threads   runs_<outcome>, lines_published, lines_dropped,
 *                 lines_invalid, redis_retries, sandbox_start, first_line,
 *                 limit_hits, jobs_dlq (a job refused at boot)
 */
#ifndef RUNNEL_WORKER_METRICS_H
#define RUNNEL_WORKER_METRICS_H

#include <pthread.h>

#include <event2/event.h>

#include "common/metrics.h"

/* Entries of limit_hits: WORKER_LIMIT_COUNT (checked in metrics.c; the
 * limits header is not pulled in here). */
#define WORKER_METRICS_LIMITS 5

/* Run outcomes counted in runnel_worker_runs_total{outcome=...}. */
/* clang-format off */
#define WORKER_OUTCOMES(X) \
	X(succeeded) X(agent_error) X(cancelled) X(runtime_cap) X(worker_lost) \
	X(worker_shutdown) X(bootstrap_failed) X(bag_rejected) X(agent_exit) \
	X(writeback_failed) X(internal) X(resource_limit) X(budget_exceeded)
/* clang-format on */

typedef struct worker_metrics {
	rn_metrics_t *reg;
#define X(name) rn_counter_t *runs_##name;
	WORKER_OUTCOMES(X)
#undef X
	rn_counter_t *jobs_skipped; /* claim said done/held */
	rn_counter_t *jobs_dlq;
	rn_counter_t *runs_swept; /* worker_lost written by this worker's sweep */
	rn_gauge_t *slots_busy;
	rn_gauge_t *slots_total;
	rn_counter_t *lines_published;
	rn_counter_t *lines_dropped;
	rn_counter_t *lines_invalid;
	rn_counter_t *redis_retries;
	rn_hist_t *queue_wait;
	rn_hist_t *sandbox_start;
	rn_hist_t *first_line;
	/* queue */
	rn_counter_t *jobs_queued;   /* Kafka records moved into the run-time queue */
	rn_counter_t *queue_claims;  /* runs this worker took from the queue */
	rn_gauge_t *queue_depth;     /* queued runs, fleet-wide (last poll) */
	rn_gauge_t *queue_oldest_ms; /* age of the oldest queued run */
	rn_gauge_t *queue_tenants;   /* tenants with queued runs */
	pthread_mutex_t tenant_mu;
	char *tenant_text; /* per-tenant series, rendered by the poll */
	/* runnel_worker_limit_hits_total{limit=...}, by worker_limit_t
	 * ([0], no limit, is never counted). */
	rn_counter_t *limit_hits[WORKER_METRICS_LIMITS];
	/* Backends (SPEC §2): idempotent enqueue, priorities, webhooks. */
	rn_counter_t *jobs_duplicate;      /* a job whose idempotency key another run owns */
	rn_gauge_t *queue_by_priority[10]; /* queued runs per priority (last poll) */
	rn_counter_t *webhooks_delivered;  /* a 2xx answer */
	rn_counter_t *webhooks_retried;    /* an attempt failed, another is scheduled */
	rn_counter_t *webhooks_dropped;    /* given up (give-up horizon, run expired) */
	rn_hist_t *webhook_latency;        /* from the run's end to the delivery */
	                                   /* Warm agents (worker/warm_agent.h), per warm name, label agent="NAME";
	 * the pool's thread and the run threads update them. */
#define WORKER_METRICS_WARM_AGENTS 8
	size_t nwarm_agents;
	struct worker_metrics_warm {
		char name[32];
		rn_gauge_t *ready;       /* started, handshake done, waiting for a run */
		rn_counter_t *started;   /* handshakes completed */
		rn_counter_t *taken;     /* runs that started on one */
		rn_counter_t *discarded; /* died idle, did not fit the run that took it, drained */
		rn_counter_t *missed;    /* runs that asked for one and found none ready */
		rn_hist_t *age;          /* from ready to taken */
	} warm_agents[WORKER_METRICS_WARM_AGENTS];
} worker_metrics_t;

/* The warm agent series for names[0..n) (RUNNEL_WARM_AGENTS); before any
 * thread starts.  0, or -1 out of memory. */
int worker_metrics_warm_agents(worker_metrics_t *m, const char (*names)[32], size_t n);

/* The series of warm name, or NULL. */
struct worker_metrics_warm *worker_metrics_warm(worker_metrics_t *m, const char *name);

/* Per-tenant series shown at most (the deepest first; the rest are summed
 * under tenant="_other"), so the label's cardinality stays bounded. */
#define WORKER_METRICS_TENANTS_MAX 20

/* Replaces the per-tenant text appended to /metrics (takes ownership).
 * @locality main thread (the /metrics handler reads it under tenant_mu). */
void worker_metrics_set_tenant_text(worker_metrics_t *m, char *text);

/* Registers every series.  0 or -1 (out of memory). */
int worker_metrics_init(worker_metrics_t *m);
void worker_metrics_free(worker_metrics_t *m);

/* The counter of an outcome name ("succeeded", "cancelled", ...); the
 * "internal" counter for an unknown name. */
rn_counter_t *worker_metrics_outcome(worker_metrics_t *m, const char *outcome);

typedef struct worker_http worker_http_t;

/*
 * Serves GET /healthz, /readyz and /metrics on host:port (port 0 = any free
 * port; the bound port is written to *bound_port).  NULL with errstr.
 * @locality main thread.
 */
worker_http_t *worker_http_start(struct event_base *base, worker_metrics_t *m,
                                 const char *host, int port, int *bound_port,
                                 char *errstr, size_t errstr_size);
/* Marks the process draining: /readyz then answers 503 "draining" (it takes
 * no new job) and /healthz 200 "draining" (alive: no restart mid-drain).
 * @locality main thread, like worker_http_stop. */
void worker_http_set_draining(worker_http_t *h);
void worker_http_stop(worker_http_t *h);

#endif
