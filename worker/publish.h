/*
 * worker/publish.h - writing one run's lines to <prefix>:{RUN}:out exactly
 * once and in order, across Redis reconnects.
 *
 * Each line gets the explicit stream id "<T>-<n>" (T = out_seq_base from the
 * claim, n = 1, 2, ...) when it is added, so a retry of a batch after a
 * reconnect writes nothing twice: Redis refuses an id "equal or smaller than
 * the target stream top item", which means that line is already there.
 * Lines are batched and pipelined, one batch in flight while the next one
 * is read and validated; a flush blocks (retrying with backoff) until Redis
 * took every line, which is the backpressure: while it blocks, the run
 * stops reading the agent's stdout.
 *
 * Also home of the worker's Redis connection helper.
 *
 * @locality one thread per publisher (the run's thread).
 */
#ifndef RUNNEL_WORKER_PUBLISH_H
#define RUNNEL_WORKER_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "common/rcluster.h"
#include "common/util.h"
#include "proto/job.h"
#include "proto/keys.h"
#include "worker/stop.h"

/* Connects to a standalone Redis or any node of a Redis Cluster (with
 * AUTH and SELECT), commands answered within command_timeout_ms.  A
 * cluster's failover is waited out for a few seconds inside a call, then
 * the call fails and the caller's own retry loop goes on.  NULL with
 * errstr (never quoting the password). */
rn_rcluster_t *worker_redis_open(const rn_redis_url_t *url, int timeout_ms, int command_timeout_ms,
                                 char *errstr, size_t errstr_size);

/*
 * Acknowledged writes (RUNNEL_REDIS_WAIT_REPLICAS): every handle
 * worker_redis_open() opens afterwards asks for replicas (0: off), so each
 * batch of lines ends with WAIT replicas timeout_ms and counts as
 * published once it was answered, and the terminal line's script is
 * followed by the same WAIT (common/runstate.c).
 * @locality main thread, before any run starts.
 */
void worker_pub_set_wait(int replicas, int timeout_ms);

/*
 * Idle publishing connections (handles, with their node connections) kept
 * between runs, so that a run's first Redis call does not pay for a
 * connect, AUTH, SELECT, the cluster detection and the LOADING check.  A connection goes back only when nothing is pending on it; one
 * the server closed meanwhile (a restart) is noticed when taken and
 * dropped.  Thread-safe.
 */
typedef struct worker_pub_pool worker_pub_pool_t;

/* NULL on allocation failure.  cap: connections kept at most. */
worker_pub_pool_t *worker_pub_pool_new(size_t cap);
/* Closes every idle connection; call after every run ended. */
void worker_pub_pool_free(worker_pub_pool_t *pool);

#define WORKER_PUB_BATCH_LINES 2048
#define WORKER_PUB_BATCH_BYTES (128 * 1024)

typedef struct worker_pub {
	const rn_redis_url_t *url; /* borrowed */
	rn_rcluster_t *rc;         /* owned; NULL while disconnected */
	redisContext *c;           /* rc's connection to the node of key's slot, or NULL */
	unsigned slot;             /* key's hash slot */
	char key[PROTO_KEY_MAX];
	int64_t seq_base;
	uint64_t next_n; /* id sequence of the next line added */
	/* The batch: lines laid end to end in buf. */
	char *buf;
	size_t len, cap;
	uint32_t *lens;
	size_t n;
	size_t inflight;     /* lines [0, inflight) sent, replies not read */
	int inflight_wait;   /* the batch in flight ends with WAIT <this> */
	int inflight_wake;   /* the batch in flight ends with SPUBLISH <prefix>:{RUN}:wake */
	uint64_t wait_short; /* batches WAIT answered short of replicas */
	uint64_t first_n;    /* sequence of lens[0] */
	uint64_t published;  /* lines Redis holds */
	uint64_t retries;
	uint64_t dropped;              /* lines refused after giving up on Redis */
	const worker_stopword_t *stop; /* given up: a failing call stops retrying */
	char run_id[PROTO_RUN_ID_MAX + 1];
	worker_pub_pool_t *pool; /* borrowed; connections come from and return to it, or NULL */
} worker_pub_t;

/* Prepares a publisher (no connection yet).  0 or -1 (out of memory). */
int worker_pub_init(worker_pub_t *p, const rn_redis_url_t *url, const char *prefix,
                    const char *run_id, int64_t seq_base, const worker_stopword_t *stop);
void worker_pub_free(worker_pub_t *p);

/* Copies a line into the batch.  Returns 1 when the batch should be flushed
 * now (full), 0 otherwise.  A full batch is flushed first; when that fails
 * (only after giving up on Redis) the line is dropped and counted. */
int worker_pub_add(worker_pub_t *p, const char *line, size_t len);

/* Lines waiting in the batch. */
static inline size_t worker_pub_pending(const worker_pub_t *p)
{
	return p->n;
}

/*
 * Writes the batch, retrying with backoff (50 ms doubling to 2 s, jittered) across
 * disconnects and transient errors (LOADING, ...).  0 when Redis holds
 * every line; -1 only when the stop word gave up first.
 */
int worker_pub_flush(worker_pub_t *p);

/*
 * Overlaps Redis with the caller: reads the replies of the batch in flight
 * (if any), then sends the lines added since without waiting for their
 * replies.  Falls back to worker_pub_flush() on any failure.  0, or -1 when
 * the stop word gave up.
 */
int worker_pub_pump(worker_pub_t *p);

/* The socket to poll for POLLIN while a batch is in flight, else -1. */
int worker_pub_wait_fd(const worker_pub_t *p);

/*
 * A connected handle for one-off calls (state updates), reconnecting with
 * the same backoff; NULL only when the stop word gave up.  After a
 * failing call, call worker_pub_reset() so the next use reconnects.
 */
rn_rcluster_t *worker_pub_ctx(worker_pub_t *p);
void worker_pub_reset(worker_pub_t *p);

/* Sleeps the retry backoff for attempt (0, 1, 2, ...), in slices that
 * notice the stop word giving up. */
void worker_pub_backoff(worker_pub_t *p, unsigned attempt);

#endif
