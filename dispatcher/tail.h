/*
 * dispatcher/tail.h - the tail pool: every caller following a run's out
 * stream is served by a fixed set of Redis connections
 * (RUNNEL_TAIL_CONNECTIONS), each running one
 *   XREAD COUNT n BLOCK ms STREAMS k1..kn id1..idn
 * over all the runs it serves.  Callers of the same run share one entry in
 * that command; each caller keeps its own cursor, so callers that joined at
 * different points (a reconnect with Last-Event-ID) each get every entry
 * after their cursor exactly once, in order.  A new run (or a caller asking
 * for older entries) interrupts the blocked read with CLIENT UNBLOCK from
 * the command connection so that it is served at once.
 *
 * @locality main (loop) thread.
 */
#ifndef RUNNEL_DISPATCHER_TAIL_H
#define RUNNEL_DISPATCHER_TAIL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "common/metrics.h"
#include "common/util.h"
#include "dispatcher/store.h"

typedef struct dispatcher_tail dispatcher_tail_t;
typedef struct dispatcher_tail_sub dispatcher_tail_sub_t;

/* A stream entry id "<ms>-<seq>". */
typedef struct dispatcher_sid {
	uint64_t ms, seq;
} dispatcher_sid_t;

/* Parses "<ms>-<seq>" or "<ms>" (= "<ms>-0").  0 or -1. */
int dispatcher_sid_parse(const char *s, dispatcher_sid_t *out);
int dispatcher_sid_cmp(dispatcher_sid_t a, dispatcher_sid_t b);

/*
 * One entry for one caller: id is its stream id text, line the "line"
 * field, terminal = 1 for the run's result/error line (the last one the
 * caller will get).  The callback may call dispatcher_tail_detach() or
 * dispatcher_tail_pause() on its own subscription.
 */
typedef void (*dispatcher_tail_entry_cb)(void *arg, const char *id, const char *line,
                                         size_t len, int terminal);

/* How often a cluster's tails read every run they follow, woken or not
 * (a wake-up lost in a failover or a reshard is late by this much). */
#define DISPATCHER_TAIL_POLL_MS 1000

/* cluster = 1: a Redis Cluster (rn_rcluster_probe): no blocking pool;
 * each run is read on its own when woken through sharded pub/sub
 * (dispatcher/wake.h) and every DISPATCHER_TAIL_POLL_MS; nconns and
 * block_ms are unused then.  0: a standalone server.  -1: not known yet
 * (nothing answered at start): the pool's first connection asks CLUSTER
 * SLOTS before any read and switches to the cluster's way if it is one. */
dispatcher_tail_t *dispatcher_tail_new(struct event_base *base, const rn_redis_url_t *url, int cluster,
                                       const char *prefix, int nconns, long block_ms,
                                       long batch, dispatcher_store_t *store,
                                       rn_metrics_t *metrics);
void dispatcher_tail_free(dispatcher_tail_t *t);

/* Follows run_id from after (exclusive).  NULL on bad input / no memory. */
dispatcher_tail_sub_t *dispatcher_tail_attach(dispatcher_tail_t *t, const char *run_id,
                                              dispatcher_sid_t after,
                                              dispatcher_tail_entry_cb cb, void *arg);

/* Stops delivery at once and frees the subscription. */
void dispatcher_tail_detach(dispatcher_tail_sub_t *s);

/* A paused caller gets nothing and holds nothing back; on resume it catches
 * up from its cursor (a slow client must not stall the others). */
void dispatcher_tail_pause(dispatcher_tail_sub_t *s, int paused);

/* Callers attached now (for metrics and tests). */
size_t dispatcher_tail_count(const dispatcher_tail_t *t);

#endif
