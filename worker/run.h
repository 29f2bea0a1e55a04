/*
 * worker/run.h - one run, from a successful claim to its terminal line:
 * the running mark, bootstrap, workspace, sandbox, agent I/O, publishing,
 * control, the runtime cap, writeback and the single terminal line.
 *
 * Each run has its own thread (blocking stages are blocking by design), its
 * own Redis connection for publishing (kept for the slot's next run) and a
 * poll() loop over the agent's
 * stdout and stderr and an eventfd that wakes it for cancel, shutdown and
 * lease loss.
 *
 * Ownership: worker_run_new() takes the parsed job (the caller's struct is
 * cleared); the main thread owns the worker_run_t and frees it with
 * worker_run_free() after the done callback fired and worker_run_join().
 *
 * @locality new/start/join/free: the main thread.  worker_run_stop,
 * worker_run_give_up and worker_run_control: any thread (the main thread's
 * heartbeat and drain, the control thread's callback, under the slot
 * table's mutex); they only touch the stop word, the inbox and the wake
 * eventfd.  Everything else in the struct belongs to the run's thread
 * between start and the done callback.
 */
#ifndef RUNNEL_WORKER_RUN_H
#define RUNNEL_WORKER_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/sandbox_layout.h"
#include "common/runstate.h"
#include "proto/control.h"
#include "proto/job.h"
#include "worker/config.h"
#include "worker/metrics.h"
#include "worker/stop.h"

typedef struct worker_run worker_run_t;

/* The runs' open-files limit (shared with the warm pool, whose sandboxes
 * must match it). */
#define WORKER_RUN_RLIMIT_NOFILE 4096

/* What a run shares with the whole worker (outlives every run). */
typedef struct worker_ctx {
	const worker_config_t *cfg;
	worker_metrics_t *m;
	/* Called on the run's thread as its last act. */
	void (*on_done)(worker_run_t *run, void *arg);
	void *arg;
	/* Warm sandboxes started ahead of need, or NULL (worker/warm.h). */
	struct worker_warm_pool *warm;
	/* Agents started ahead of need, handshake done, or NULL
	 * (worker/warm_agent.h, RUNNEL_WARM_AGENTS). */
	struct worker_warm_agents *warm_agents;
	/* Publishing connections kept between runs, or NULL (worker/publish.h). */
	struct worker_pub_pool *pub_pool;
	/* Removes finished runs' cgroups and directories, or NULL: the run's
	 * thread does (worker/reaper.h). */
	struct worker_reaper *reaper;
	/* The DLQ for jobs refused at boot, or NULL: none (worker/consumer.h). */
	struct worker_dlq *dlq;
} worker_ctx_t;

struct worker_run {
	char run_id[PROTO_RUN_ID_MAX + 1];
	proto_job_t job; /* owned; secrets wiped by worker_run_free */
	rn_claim_t claim;
	int64_t claimed_mono_ms;
	worker_ctx_t *ctx;
	pthread_t thread;
	int started;
	int wake_fd;                /* eventfd */
	worker_stopword_t stop;     /* why it must stop (worker/stop.h) */
	struct worker_inbox *inbox; /* control messages for the agent loop */
	char cancel_reason[PROTO_CTL_REASON_MAX + 1];
	char outcome[32]; /* metric outcome, set at the end */
	/* The record's bytes as fetched, for the DLQ should the boot refuse
	 * the job (worker_claimed_t.raw; moved in after worker_run_new), or
	 * NULL.  Wiped once the boot judged the webhook, or by worker_run_free. */
	char *raw;
	size_t raw_len;
};

/* NULL on allocation failure (the job is then left with the caller). */
worker_run_t *worker_run_new(worker_ctx_t *ctx, proto_job_t *job, const rn_claim_t *claim);

/* Starts the run's thread.  0, or -1 (the run never started; free it). */
int worker_run_start(worker_run_t *run);

/* Asks the run to stop (any thread).  reason is for CANCEL (may be NULL). */
void worker_run_stop(worker_run_t *run, worker_stop_t why, const char *reason);

/* The drain's hard deadline passed: the run stops retrying Redis (any
 * thread). */
void worker_run_give_up(worker_run_t *run);

/* A control message for the run (the control thread): a cancel stops it
 * (worker_run_stop), a reply goes to its inbox for the agent loop; other
 * types are ignored. */
void worker_run_control(worker_run_t *run, const proto_ctl_t *ctl);

void worker_run_join(worker_run_t *run);
void worker_run_free(worker_run_t *run);

/*
 * Builds the cancel terminal line's message into buf:
 * "The run was cancelled (client_closed)." or "The run was cancelled.".
 */
void worker_run_cancel_message(const char *reason, char *buf, size_t size);

#endif
