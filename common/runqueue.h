/*
 * common/runqueue.h - the run-time queue in Redis: where a job waits
 * between Kafka and a free slot anywhere in the fleet.  Shared by the
 * worker (enqueue, claim, ack, release, heartbeats), the CLI (status) and
 * tests.  Each operation is one Lua script; all times are the Redis
 * server's clock (TIME).
 *
 * Keys, all with the hash tag {q} so that Redis Cluster keeps them in one
 * slot and a script may touch any of them (per-tenant keys are named in
 * the script from the same tag, so they land in that slot too):
 *
 *   <prefix>:{q}:jobs        hash   run_id -> queue entry (opaque to this
 *                                   file: the worker stores a sealed job
 *                                   or a Kafka reference, never plaintext)
 *   <prefix>:{q}:tenant      hash   run_id -> tenant
 *   <prefix>:{q}:t:<tenant>  list   the tenant's queued run ids of priority 5
 *                                   (the default), FIFO
 *   <prefix>:{q}:t:<tenant>:<p> list the same for priority p (0-9, not 5):
 *                                   the take serves a tenant's highest
 *                                   non-empty list first
 *   <prefix>:{q}:prio        hash   run_id -> priority, when not 5
 *   <prefix>:{q}:ring        list   tenants with queued runs, served in turn
 *   <prefix>:{q}:age         zset   run_id -> queued-at ms (oldest age)
 *   <prefix>:{q}:inflight    zset   run_id -> deadline ms: taken from the
 *                                   queue, not yet claimed in its state
 *                                   hash; put back when the deadline passes
 *   <prefix>:{q}:run:<tenant> zset  run_id -> lease ms: the tenant's
 *                                   claimed/running runs (the cap counts
 *                                   live members only)
 *   <prefix>:{q}:depth       list   one element per queued run, so its
 *                                   LLEN is the queue depth (KEDA's Redis
 *                                   scaler reads list lengths)
 *   <prefix>:{q}:wake        list   tokens that wake blocked claimers
 *
 * A run's state hash (<prefix>:{RUN}:state) lives in another slot; it gets
 * status "queued" and "tenant" from rn_runqueue_mark() before the entry is
 * queued, and everything after that from common/runstate.h.
 *
 * All functions use a synchronous hiredis context owned by the caller,
 * never log, and their errors never contain an entry's content.
 */
#ifndef RUNNEL_COMMON_RUNQUEUE_H
#define RUNNEL_COMMON_RUNQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "common/rcluster.h"

#define RN_TENANT_MAX 64

/* What the state hash learns at intake besides status and tenant (SPEC
 * §2; any may be NULL or "" when the job has none). */
typedef struct rn_queue_fields {
	int priority;            /* 0-9 */
	const char *traceparent; /* normalised W3C traceparent */
	const char *webhook;     /* the URL; the delivery reads it from here */
	const char *idem_key;    /* the idempotency key, for status displays */
} rn_queue_fields_t;

/*
 * Marks the run queued in its state hash: status "queued", "tenant",
 * "enqueued_at" (when > 0), the fields of f (may be NULL) and an expiry of
 * ttl_sec, unless the hash already has a status other than queued (then
 * nothing changes but a missing tenant field).  0 or -1.
 */
int rn_runqueue_mark(rn_rcluster_t *c, const char *prefix, const char *run_id,
                     const char *tenant, int64_t enqueued_at, int64_t ttl_sec,
                     const rn_queue_fields_t *f, char *errstr, size_t errstr_size);

/*
 * Idempotent enqueue: claims the idempotency record idem_rkey (see
 * proto_idem_redis_key) for run_id with SET NX and an expiry of ttl_sec,
 * atomically.  KEYS: record.  ARGV: run_id ttl_sec.  Answers {owner,
 * fresh}: the run id that owns the key (run_id itself when it is new or
 * already ours, the first run's id otherwise) and 1 when this call set it.
 * The dispatcher runs the same script on its async connection.
 */
extern const char rn_idem_claim_lua[];
/* Deletes the record if run_id still owns it (an enqueue that failed).
 * KEYS: record.  ARGV: run_id. */
extern const char rn_idem_release_lua[];

/* rn_idem_claim_lua on a synchronous connection: the owner goes to owner
 * (65 bytes).  1 when run_id owns the key, 0 when another run does, -1 on
 * error. */
int rn_idem_claim(rn_rcluster_t *c, const char *idem_rkey, const char *run_id, int64_t ttl_sec,
                  char owner[65], char *errstr, size_t errstr_size);

/*
 * Queues run_id for tenant with entry (len bytes).  Idempotent on run_id:
 * a run already queued or taken but not yet acknowledged is not queued
 * twice.  1 queued, 0 already there, -1 on error.  When this returns >= 0
 * the write is as durable as the Redis server makes writes.
 */
int rn_runqueue_push(rn_rcluster_t *c, const char *prefix, const char *run_id,
                     const char *tenant, int priority, const void *entry, size_t len,
                     char *errstr, size_t errstr_size);

/* Per-tenant caps on claimed+running runs; 0 = no cap.  And per-tenant
 * hourly token budgets (the model gateway's, worker/gateway.h): a tenant
 * whose count for the current hour (RN_RUNQUEUE_TOKENS_FMT) reached its
 * budget starts no run until the hour turns; 0 = no budget. */
typedef struct rn_tenant_caps {
	long def; /* for tenants not listed */
	size_t n;
	const char *const *names;
	const long *caps;
	long long tok_def;
	size_t ntok;
	const char *const *tok_names;
	const int64_t *toks;
} rn_tenant_caps_t;

/* The tenant's token count of an hour (ms since the epoch / 3600000):
 * "<prefix>:{q}:tok:<tenant>:<hour>", in the queue's hash slot, so the
 * take script reads it. */
#define RN_RUNQUEUE_TOKENS_FMT "%s:{q}:tok:%s:%lld"

/* Each worker's warm agents (worker/warm_agent.h), for `runnel status`: a
 * hash "<prefix>:warm_agents", field the worker id, value
 * {"at":ms,"agents":{"claude":{"ready":N,"wanted":N},...}}, written with
 * every heartbeat tick and removed when the worker exits; an entry older
 * than RN_WARM_AGENTS_STALE_MS is a worker gone without saying so. */
#define RN_WARM_AGENTS_FMT      "%s:warm_agents"
#define RN_WARM_AGENTS_STALE_MS 60000

typedef struct rn_queue_item {
	char run_id[65];
	char tenant[RN_TENANT_MAX + 1];
	char *entry; /* malloc'd (the caller frees; may hold a sealed job) */
	size_t len;
	int64_t queued_ms; /* when it was queued (server clock), 0 unknown */
	int64_t now_ms;    /* server clock at the take */
} rn_queue_item_t;

/*
 * Takes the next run, serving the tenants with queued runs in turn (round
 * robin) and skipping tenants at their cap.  The run moves to "inflight"
 * (deadline now + inflight_ms) and to the tenant's running set (lease
 * now + lease_ms) until rn_runqueue_ack().  Inflight runs whose deadline
 * passed (a worker died between take and claim) go back to the front of
 * their tenant's queue first.  1 with *it filled, 0 when nothing can be
 * taken, -1 on error.
 */
int rn_runqueue_take(rn_rcluster_t *c, const char *prefix, const rn_tenant_caps_t *caps,
                     int64_t inflight_ms, int64_t lease_ms, rn_queue_item_t *it,
                     char *errstr, size_t errstr_size);

/* Frees and wipes it->entry. */
void rn_queue_item_clear(rn_queue_item_t *it);

/*
 * After the state-hash claim: removes the entry for good.  running != 0
 * keeps the run in its tenant's running set (it counts against the cap
 * until rn_runqueue_release); 0 removes it (the claim skipped it) and wakes
 * a claimer.  0 or -1.
 */
int rn_runqueue_ack(rn_rcluster_t *c, const char *prefix, const char *run_id,
                    const char *tenant, int running, char *errstr, size_t errstr_size);

/* A run ended: out of its tenant's running set; wakes a claimer.  0 or -1. */
int rn_runqueue_release(rn_rcluster_t *c, const char *prefix, const char *run_id,
                        const char *tenant, char *errstr, size_t errstr_size);

/* Renews (or restores) the running-set leases of n runs this worker is
 * running (pipelined).  0 or -1. */
int rn_runqueue_touch(rn_rcluster_t *c, const char *prefix, const char *const *run_ids,
                      const char *const *tenants, size_t n, int64_t lease_ms,
                      char *errstr, size_t errstr_size);

/*
 * Blocks up to timeout_ms for a wake token (something was queued or a cap
 * freed).  1 woken, 0 timed out, -1 on error.  The context's own timeout
 * must be longer than timeout_ms.
 */
int rn_runqueue_wait(rn_rcluster_t *c, const char *prefix, int timeout_ms,
                     char *errstr, size_t errstr_size);

typedef struct rn_queue_tenant {
	char name[RN_TENANT_MAX + 1];
	int64_t queued;
	int64_t running;   /* live members of its running set */
	int64_t oldest_ms; /* age of its oldest queued run */
} rn_queue_tenant_t;

typedef struct rn_queue_stats {
	int64_t depth;           /* queued runs, all tenants */
	int64_t by_priority[10]; /* queued runs per priority (scanned tenants) */
	int64_t inflight;
	int64_t oldest_ms;          /* age of the oldest queued run, 0 when empty */
	size_t ntenants;            /* tenants with queued runs (all of them) */
	size_t nscanned;            /* tenants looked at (the ring's first 1000) */
	rn_queue_tenant_t *tenants; /* the scanned ones, deepest first, malloc'd */
	size_t nlisted;             /* min(nscanned, max_tenants) */
} rn_queue_stats_t;

/* Reads the queue's depth and its tenants (the ring's first 1000 looked
 * at; at most max_tenants listed, the deepest first).  0 or -1.  Free with
 * rn_queue_stats_clear. */
int rn_runqueue_stats(rn_rcluster_t *c, const char *prefix, size_t max_tenants,
                      rn_queue_stats_t *st, char *errstr, size_t errstr_size);
void rn_queue_stats_clear(rn_queue_stats_t *st);

/* "<prefix>:{q}:depth" (the key KEDA watches) into buf.  0 or -1. */
int rn_runqueue_depth_key(const char *prefix, char *buf, size_t size);

#endif
