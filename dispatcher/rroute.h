/*
 * dispatcher/rroute.h - the dispatcher's asynchronous Redis, routed by
 * hash slot on a Redis Cluster.  On a standalone server it is one
 * dispatcher_rconn and a command is handed to it as it is (same
 * connection, same round trips).  On a cluster it holds one
 * dispatcher_rconn per primary, a slot map read with CLUSTER SLOTS and
 * parsed by common/rcluster (as are the slots of a command's keys and
 * the MOVED/ASK replies), and it:
 *   - sends a command to the primary serving its keys' slot (a keyless
 *     one to any node that is up);
 *   - follows MOVED (updates that slot at once, re-reads the whole map)
 *     and ASK (ASKING + the command on the importing node);
 *   - waits out TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN and a slot
 *     whose node is down or unknown with rn_backoff_ms() within a retry
 *     budget, re-reading the map before each try;
 *   - fails a command whose connection was lost after it was sent (it may
 *     have run: the reply callback gets NULL, as with a standalone
 *     server) and re-reads the map, so the next one goes to the promoted
 *     replica.
 *
 * @locality main (loop) thread.
 */
#ifndef RUNNEL_DISPATCHER_RROUTE_H
#define RUNNEL_DISPATCHER_RROUTE_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "common/util.h"
#include "dispatcher/rconn.h"

typedef struct dispatcher_rroute dispatcher_rroute_t;

/* up = 1 once commands may be sent, 0 when none can (standalone: the
 * connection was lost; cluster: no slot map or no node up). */
typedef void (*dispatcher_rroute_state_cb)(int up, void *arg);

/*
 * cluster: 1 a cluster, 0 a standalone server (as rn_rcluster_probe found
 * at start), -1 not known yet (nothing answered at start): asked with
 * CLUSTER SLOTS once the URL's node answers.  name (a literal) names the
 * connections.  Connecting starts at once.
 */
dispatcher_rroute_t *dispatcher_rroute_new(struct event_base *base, const rn_redis_url_t *url, int cluster,
                                           const char *name, dispatcher_rroute_state_cb state_cb, void *arg);
void dispatcher_rroute_free(dispatcher_rroute_t *rr);

int dispatcher_rroute_up(const dispatcher_rroute_t *rr);

/* 1 on a cluster (known), 0 otherwise. */
int dispatcher_rroute_is_cluster(const dispatcher_rroute_t *rr);

/*
 * Sends one command (argv copied; argvlen may be NULL for C strings),
 * routed by its keys.  cb may be NULL.  0 when taken (cb runs exactly
 * once: with the reply, an error reply the cluster kept giving, or NULL
 * when the connection was lost after sending, the retry budget ran out or
 * the router is freed), -1 when Redis is down or the keys span slots (cb
 * will not run).
 */
int dispatcher_rroute_cmd(dispatcher_rroute_t *rr, dispatcher_rconn_reply_cb cb, void *arg, int argc,
                          const char **argv, const size_t *argvlen);

/*
 * For the sharded pub/sub connections (dispatcher/wake.c): host:port of
 * the primary serving slot now into host/port; 0, or -1 when unknown or
 * standalone.  The map's version increases each time the map changes.
 */
int dispatcher_rroute_slot_node(const dispatcher_rroute_t *rr, unsigned slot, char *host, size_t host_size,
                                int *port);
unsigned long dispatcher_rroute_map_version(const dispatcher_rroute_t *rr);

/* Re-reads the slot map soon (a sharded channel was refused or dropped). */
void dispatcher_rroute_stale(dispatcher_rroute_t *rr);

/* Counters since start (for tests, logs and bench). */
typedef struct dispatcher_rroute_stats {
	unsigned long commands;  /* commands taken */
	unsigned long sent;      /* commands written to a connection, resends included */
	unsigned long moved;     /* MOVED followed */
	unsigned long ask;       /* ASK followed */
	unsigned long retries;   /* waits on a transient error or a node down */
	unsigned long refreshes; /* slot map reads */
} dispatcher_rroute_stats_t;
void dispatcher_rroute_stats(const dispatcher_rroute_t *rr, dispatcher_rroute_stats_t *out);

#endif
