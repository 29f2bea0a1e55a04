/*
 * common/runstate.h - the run state machine in Redis, shared by the worker,
 * the dispatcher and the CLI: claim, the running mark, lease heartbeats,
 * the single terminal line and the lost sweep, each one atomic Lua script.
 *
 * Keys (same text as proto/keys.h builds; the leases set is fleet-wide):
 *   <prefix>:{RUN}:state  hash: status queued|claimed|running|succeeded|
 *                         failed|cancelled|lost, worker, lease_until (ms),
 *                         enqueued_at, started_at, ended_at (ms), code,
 *                         out_seq_base (T)
 *   <prefix>:{RUN}:out    stream, field "line"
 *   <prefix>:{RUN}:ctl    stream, field "msg"
 *   <prefix>:leases       sorted set, member run_id, score lease_until (ms)
 *
 * Life cycle:
 *
 *   (none|queued) --claim--> claimed --start--> running --finish--> terminal
 *   claimed|running --lease expires--> sweep/claim --finish--> lost
 *
 * Every time in these scripts is the Redis server's clock (TIME), so that
 * leases compare across hosts whose clocks disagree.
 *
 * Output lines are XADDed by their writer with explicit ids "<T>-<n>"
 * (T = out_seq_base from the claim, n = 1, 2, ...).  A retried XADD that
 * Redis refuses with "equal or smaller than the target stream top item" was
 * already written.  The terminal line is always XADDed by rn_runstate_finish()
 * with an automatic id, which is larger than every "<T>-<n>" written before
 * it; a stale writer's later "<T>-<n>" is therefore refused, and the terminal
 * line stays last and unique.
 *
 * All functions use a synchronous hiredis context owned by the caller, are
 * safe to call from any thread that owns its context, and never log.  The
 * error text never contains a line's content (lines may carry user data).
 */
#ifndef RUNNEL_COMMON_RUNSTATE_H
#define RUNNEL_COMMON_RUNSTATE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "common/rcluster.h"

#define RN_RUNSTATE_DETAIL_MAX 160

typedef enum {
	RN_CLAIM_OK = 0, /* claimed: status=claimed, lease set; seq_base valid */
	RN_CLAIM_DONE,   /* already terminal: skip (detail = its status) */
	RN_CLAIM_HELD,   /* claimed/running under a live lease: skip (detail = holder) */
	RN_CLAIM_LOST,   /* running with an expired lease: OTPs may be spent.  The
	                      script wrote the worker_lost terminal line (status
	                      lost); never start it. */
	RN_CLAIM_CANCEL, /* claimed by us, but a cancel is already on :ctl
	                      (detail = its reason, "" when none).  The caller ends
	                      it "cancelled" without any OTP call. */
} rn_claim_status_t;

typedef struct rn_claim {
	rn_claim_status_t status;
	int64_t seq_base; /* T for "<T>-<n>" ids (OK and CANCEL) */
	int64_t now_ms;   /* the server's clock at claim time */
	char detail[RN_RUNSTATE_DETAIL_MAX];
} rn_claim_t;

/*
 * Claims run_id for worker_id with a lease of lease_ms.  enqueued_at (ms, 0 =
 * unknown) is recorded when the hash has none.  ttl_sec is the expiry given
 * to the state hash while the run is live (choose max runtime + retention).
 * 0 with *out filled, or -1 with errstr (Redis error or unreachable).
 */
int rn_runstate_claim(rn_rcluster_t *c, const char *prefix, const char *run_id,
                      const char *worker_id, int64_t lease_ms, int64_t enqueued_at,
                      int64_t ttl_sec, rn_claim_t *out,
                      char *errstr, size_t errstr_size);

/*
 * Marks a claimed run running (status=running, started_at) before the first
 * OTP is redeemed.  1 when done, 0 when the run is not ours or not "claimed"
 * any more (do not redeem anything), -1 on a Redis error.  Idempotent: a
 * retry after a lost reply answers 1 when the run is already running for us.
 */
int rn_runstate_start(rn_rcluster_t *c, const char *prefix, const char *run_id,
                      const char *worker_id, char *errstr, size_t errstr_size);

/*
 * Renews the lease (lease_until = now + lease_ms, and the leases score) of
 * each run in run_ids[0..n) that worker_id still owns, in one pipeline.
 * owned[i] is set to 1 when renewed, 0 when the run is terminal or not ours
 * (someone wrote worker_lost: stop it).  0, or -1 on a Redis error.
 */
int rn_runstate_heartbeat(rn_rcluster_t *c, const char *prefix,
                          const char *const *run_ids, size_t n,
                          const char *worker_id, int64_t lease_ms, int *owned,
                          char *errstr, size_t errstr_size);

/*
 * Writes the one terminal line of a run, atomically, when it has none yet:
 * XADD <out> * line <line>, HSET status/ended_at/code, ZREM leases, EXPIRE
 * state, out and ctl retention_sec.  status is "succeeded", "failed",
 * "cancelled" or "lost"; code is the error code ("" for a result).  line is
 * the full JSON envelope (built with proto_env_make_error() or the agent's
 * result line).  1 when written, 0 when the run already had a terminal line
 * (nothing written), -1 on a Redis error.  Safe to retry.  With
 * RUNNEL_REDIS_WAIT_REPLICAS set, -2 when the line was written but the
 * replicas' WAIT got no answer: call again, and a 0 then means this
 * caller's own line survived (a lost one is written again: 1).
 */
int rn_runstate_finish(rn_rcluster_t *c, const char *prefix, const char *run_id,
                       const char *line, size_t len, const char *status,
                       const char *code, int64_t retention_sec,
                       char *errstr, size_t errstr_size);

/* rn_runstate_finish that also sets the state hash's `usage` field (the
 * SPEC §4 object as JSON text) in the same script; usage NULL or "": none. */
int rn_runstate_finish_usage(rn_rcluster_t *c, const char *prefix, const char *run_id, const char *line, size_t len,
                             const char *status, const char *code, int64_t retention_sec, const char *usage,
                             char *errstr, size_t errstr_size);

/*
 * Ends every run whose lease expired (at most max per call, 0 = 100):
 * ZRANGEBYSCORE leases -inf now, then for each one a script that re-checks
 * the lease under the script's atomicity (a heartbeat may have renewed it
 * since) and writes
 *   {"type":"error","code":"worker_lost","message":"The worker running this run stopped responding.","ts":N}
 * with status "lost".  Members whose state hash is gone or already terminal
 * are removed from the set.  on_lost (may be NULL) is called for each run
 * this call ended.  Returns the number ended, or -1 on a Redis error.
 */
int rn_runstate_sweep(rn_rcluster_t *c, const char *prefix, int64_t retention_sec,
                      size_t max, void (*on_lost)(const char *run_id, void *arg),
                      void *arg, char *errstr, size_t errstr_size);

/*
 * Completion webhooks (worker/webhook.h): the outbox "<prefix>:{wh}:outbox",
 * a sorted set run_id -> due ms.  rn_webhook_arm adds a run (ZADD NX) at
 * intake; finish, the sweep and a claim that ends a run lost make its entry
 * due at once (ZADD XX 0), after their script wrote the terminal line.
 * The terminal scripts also set the state hash's webhook_state "pending"
 * for a run with a webhook, and put "trace_id" (from the hash's
 * traceparent) on the terminal line.
 */
int rn_webhook_outbox_key(const char *prefix, char *buf, size_t size);
int rn_webhook_arm(rn_rcluster_t *c, const char *prefix, const char *run_id, int64_t due_ms,
                   char *errstr, size_t errstr_size);

/* The message of the worker_lost line the sweep and a claim write. */
#define RN_RUNSTATE_LOST_MESSAGE "The worker running this run stopped responding."

/*
 * Reads the state hash field (e.g. "status") into buf.  1 when present, 0
 * when absent, -1 on error.  For tests and the CLI.
 */
int rn_runstate_get(rn_rcluster_t *c, const char *prefix, const char *run_id,
                    const char *field, char *buf, size_t size,
                    char *errstr, size_t errstr_size);

#endif
