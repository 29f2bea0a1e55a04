/*
 * dispatcher/wake.h - wake-ups for the tails on a Redis Cluster: one
 * sharded pub/sub connection (SSUBSCRIBE) per primary, subscribed to the
 * <prefix>:{RUN}:wake channel of every run the dispatcher tails.  The
 * worker SPUBLISHes on it in each batch of lines (worker/publish.c), so a
 * message means "the run's out stream has new entries".
 *
 * A sharded channel lives on the primary serving its slot: the channel
 * list is laid over the slot map of a dispatcher_rroute and re-laid when
 * the map changes (dispatcher_wake_sync), when a connection is lost (a
 * failover) and when the server drops a channel itself (its slot was
 * migrated: an unasked "sunsubscribe") or refuses it with MOVED.  Every
 * (re)subscription is confirmed with a wake-up too, so the caller reads
 * once after each gap; wake-ups lost in between are the caller's slow
 * poll's to cover.
 *
 * @locality main (loop) thread.
 */
#ifndef RUNNEL_DISPATCHER_WAKE_H
#define RUNNEL_DISPATCHER_WAKE_H

#include <stddef.h>

#include <event2/event.h>

#include "common/metrics.h"
#include "common/util.h"
#include "dispatcher/rroute.h"

typedef struct dispatcher_wake dispatcher_wake_t;
typedef struct dispatcher_wake_chan dispatcher_wake_chan_t;

/* url gives the password; rr the slot map (borrowed, outlives w);
 * g_conns (may be NULL) counts the connections open. */
dispatcher_wake_t *dispatcher_wake_new(struct event_base *base, const rn_redis_url_t *url,
                                       dispatcher_rroute_t *rr, rn_gauge_t *g_conns);
void dispatcher_wake_free(dispatcher_wake_t *w);

/* Subscribes channel (copied); cb(arg) runs on each message and after
 * each confirmed (re)subscription.  NULL when out of memory. */
dispatcher_wake_chan_t *dispatcher_wake_add(dispatcher_wake_t *w, const char *channel, void (*cb)(void *arg),
                                            void *arg);
/* Unsubscribes and frees the channel; cb will not run again. */
void dispatcher_wake_remove(dispatcher_wake_chan_t *ch);

/* Lays the channels over the current map: (re)subscribes every channel
 * that is not subscribed on its slot's primary.  Cheap when nothing
 * changed. */
void dispatcher_wake_sync(dispatcher_wake_t *w);

/* Counters: messages received, subscriptions sent, connections opened. */
typedef struct dispatcher_wake_stats {
	unsigned long messages, subscribes, connects, dropped;
} dispatcher_wake_stats_t;
void dispatcher_wake_stats(const dispatcher_wake_t *w, dispatcher_wake_stats_t *out);

#endif
