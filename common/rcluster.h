/*
 * common/rcluster.h - a blocking Redis connection that works the same on a
 * standalone server and on a Redis Cluster: it finds out which one the URL
 * names, and in a cluster routes every command to the primary serving its
 * keys' hash slot, following MOVED (and refreshing the slot map) and ASK
 * (with ASKING), and waiting out TRYAGAIN, CLUSTERDOWN and a primary's
 * failover with rn_backoff_ms() inside a retry budget.  Debian 12's
 * hiredis 0.14 has no cluster support and Debian ships no C cluster
 * client for it, hence this module (docs/architecture.md).
 *
 * The map: CLUSTER SLOTS asked of any known node (the URL's first), each
 * of the 16384 slots pointing at one node's host:port.  Node connections
 * are opened lazily with rn_redis_connect() (same timeouts, AUTH) and
 * dropped when they fail; a dropped one is opened again on its next use.
 * A standalone server is the same object with one node and no map, so the
 * caller's code does not branch.
 *
 * What is retried, and why it is safe: a redirect (MOVED, ASK), TRYAGAIN,
 * CLUSTERDOWN, LOADING and MASTERDOWN mean the command did not run, and a
 * connect that fails never sent it; those are retried within the budget.
 * A connection lost after the command was sent may or may not have run
 * it, so it is the caller's to decide: the call fails ("connection lost"),
 * the map is marked stale, and the next call goes to whoever serves the
 * slot by then (RN_RCLUSTER_IDEMPOTENT asks to retry it anyway).
 *
 * @locality any thread; one rn_rcluster_t belongs to the thread using it.
 */
#ifndef RUNNEL_COMMON_RCLUSTER_H
#define RUNNEL_COMMON_RCLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "common/util.h"

#define RN_RCLUSTER_SLOTS 16384

/* Hash slot of a key: CRC16 (XMODEM) of the key, or of its hash tag (the
 * bytes between the first '{' and the next '}', when not empty), mod
 * 16384 - Redis Cluster's rule, so "{RUN}:out" and "{RUN}:state" share a
 * slot. */
unsigned rn_rcluster_key_slot(const void *key, size_t len);

/*
 * The slot a command's keys hash to, from its arguments: EVAL/EVALSHA/
 * FCALL's numkeys keys, XREAD/XREADGROUP's streams, the key of XGROUP,
 * XINFO, OBJECT and MEMORY subcommands, every argument of DEL, UNLINK,
 * EXISTS, MGET, TOUCH and WATCH, else argv[1].  -1 for a command with no
 * key (PING, INFO, SCRIPT, CLUSTER, CLIENT, TIME, WAIT, PUBLISH, ...):
 * any node will do.  -2 when the keys hash to different slots (the
 * command would fail with CROSSSLOT on a cluster).
 */
int rn_rcluster_command_slot(int argc, const char **argv, const size_t *lens);

/*
 * Parses an error reply "MOVED <slot> <host>:<port>" or "ASK <slot>
 * <host>:<port>" (the host may be an IPv6 address: the port follows the
 * last ':').  Returns 1 for MOVED, 2 for ASK, 0 for any other text (then
 * the outputs are untouched).  The reply comes from the server: every
 * field is checked (slot < 16384, port 1..65535, host fits host_size).
 */
int rn_rcluster_parse_redirect(const char *err, size_t len, int *slot, char *host, size_t host_size,
                               int *port);

/*
 * Reads a CLUSTER SLOTS reply r into map (RN_RCLUSTER_SLOTS entries):
 * each served slot gets node_index(arg, host, port) of its primary (an
 * empty host is the address the reply came from, asked_host), an
 * unserved one (or one whose primary's address is "?") gets
 * RN_RCLUSTER_UNSERVED.  0, or -1 when r is not a slot table or
 * node_index failed (< 0).  For the routers over other connection kinds
 * (the dispatcher's asynchronous one).
 */
#define RN_RCLUSTER_UNSERVED 0xFFFFu
int rn_rcluster_parse_slots(const redisReply *r, const char *asked_host,
                            int (*node_index)(void *arg, const char *host, int port), void *arg, uint16_t *map);

/* 1 when err (an error reply's text) means the command did not run and
 * the cluster is settling: TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN. */
int rn_rcluster_transient_error(const char *err);

typedef struct rn_rcluster rn_rcluster_t;

typedef struct rn_rcluster_opts {
	int connect_timeout_ms; /* per node connect */
	int command_timeout_ms; /* per reply: above any BLOCK the caller uses */
	int retry_budget_ms;    /* how long one call may wait out a failover */
	int backoff_min_ms;     /* first retry delay (doubling, jittered) */
	int backoff_max_ms;
	/* Acknowledged writes (rn_rcluster_wait): the replicas a writer asks
	 * to have its writes before it counts them, 0 off (the default), and
	 * how long one WAIT may take (keep it below command_timeout_ms). */
	int wait_replicas;
	int wait_timeout_ms;
} rn_rcluster_opts_t;

/* 2 s connect, 5 s per reply, 20 s budget (a failover with the default
 * cluster-node-timeout 15 s takes ~16-18 s), backoff 20 ms .. 1 s, no
 * WAIT. */
#define RN_RCLUSTER_OPTS_INIT \
	{ \
		2000, 5000, 20000, 20, 1000, 0, 1000 \
	}

/*
 * Connects to the URL's node and finds out what it is (INFO cluster).  A
 * cluster node: reads the slot map and requires every slot to be served
 * (a cluster with uncovered slots is refused, as is a db other than 0).
 * Returns the handle the caller frees with rn_rcluster_free(), or NULL
 * with errstr set to the reason alone (never the password): the connect
 * error of rn_redis_connect() ("authentication failed", ...), "not a Redis
 * server (...)" when the first reply is not Redis's, "cluster has N of
 * 16384 slots unserved (first: S)", "a cluster has only database 0",
 * "the Redis user may not run INFO (its ACL needs +info)".
 * opts may be NULL (RN_RCLUSTER_OPTS_INIT).
 */
rn_rcluster_t *rn_rcluster_open(const rn_redis_url_t *url, const rn_rcluster_opts_t *opts, char *errstr,
                                size_t errstr_size);

/*
 * What the URL names, for a program's start: 1 a cluster (every slot
 * served), 0 a standalone server, -1 a configuration to refuse now
 * (errstr: the password refused or missing, not Redis at all, a cluster
 * with unserved slots, a db on a cluster, SELECT refused, an ACL without
 * INFO), -2 nothing
 * answers yet (errstr: the connect error; the program's reconnect loop
 * may wait for it).  connect_timeout_ms bounds the connect and each reply.
 */
int rn_rcluster_probe(const rn_redis_url_t *url, int connect_timeout_ms, char *errstr, size_t errstr_size);

void rn_rcluster_free(rn_rcluster_t *rc);

/* 1 on a cluster, 0 on a standalone server. */
int rn_rcluster_is_cluster(const rn_rcluster_t *rc);

/* Retry a command whose connection was lost after sending (it must be
 * safe to run twice: a read, or a script that checks before it writes). */
#define RN_RCLUSTER_IDEMPOTENT 0x1

/*
 * Runs one command, routed by its keys (rn_rcluster_command_slot) in a
 * cluster.  Returns the reply (the caller frees it with freeReplyObject;
 * an error reply is a reply: check its type) or NULL with the reason in
 * rn_rcluster_errstr(): "connection lost" (after sending: may have run),
 * "CROSSSLOT: keys in different slots" (not sent), "no node reachable for
 * slot S within N ms", "too many redirects for slot S".
 */
redisReply *rn_rcluster_argv(rn_rcluster_t *rc, int flags, int argc, const char **argv, const size_t *lens);

/* The same with a redisCommand() format (%s, %b, %d, ...). */
redisReply *rn_rcluster_command(rn_rcluster_t *rc, int flags, const char *fmt, ...);

/* Runs a keyless command on every primary (SCRIPT LOAD, FLUSHALL, a
 * per-node sweep), or on the one server: fn gets each node's host:port
 * and reply (NULL on a node that failed; the reply is freed when fn
 * returns; fn may be NULL) and returns non-zero to stop.  No retries: a sweep comes back
 * later.  The number of primaries that replied without error. */
int rn_rcluster_each_primary(rn_rcluster_t *rc, int argc, const char **argv, const size_t *lens,
                             int (*fn)(void *arg, const char *node, redisReply *r), void *arg);

/*
 * A pipeline: commands queued with rn_rcluster_append_argv are sent when
 * the first reply is asked for, one batch per node (in queue order within
 * a node), and rn_rcluster_get_reply returns the replies in queue order.
 * A command answered with a redirect or a transient error is run again on
 * its own as rn_rcluster_argv would, after the batch.  A standalone server
 * gets hiredis's own pipeline, unchanged.  append: 0, or -1 with errstr
 * (CROSSSLOT, out of memory, standalone connect failure).  get_reply: 0
 * with *out set, or -1 when that command has no reply (errstr; a lost
 * connection: it may have run).  Read every reply of a pipeline before
 * starting the next one.
 */
int rn_rcluster_append_argv(rn_rcluster_t *rc, int flags, int argc, const char **argv, const size_t *lens);
int rn_rcluster_get_reply(rn_rcluster_t *rc, redisReply **out);

/*
 * For a caller with its own fast path on a raw connection (the worker's
 * line publisher): the URL (the handle's password, db 0) of the primary
 * serving slot now, or of the one server when standalone.  With stale set
 * (the caller saw MOVED or lost its connection) the map is read again
 * first.  0, or -1 with errstr ("slot S is not served", "cannot read the
 * slot map: ...") for the caller's own retry loop.
 */
int rn_rcluster_slot_url(rn_rcluster_t *rc, unsigned slot, int stale, rn_redis_url_t *out, char *errstr,
                         size_t errstr_size);

/*
 * The handle's own connection to the primary serving slot (the one
 * server when standalone), opened when needed, for a caller with its own
 * fast path on it (the line publisher's MULTI/EXEC batches).  Owned by rc:
 * never freed by the caller.  NULL with errstr when the slot is not served
 * or its node cannot be reached (no waiting: the caller retries).  After a
 * failure on it, or a MOVED/ASK/CLUSTERDOWN the caller saw, call
 * rn_rcluster_reset_slot: the connection is dropped and the map is read
 * again before the next use.
 */
redisContext *rn_rcluster_slot_context(rn_rcluster_t *rc, unsigned slot, char *errstr, size_t errstr_size);
void rn_rcluster_reset_slot(rn_rcluster_t *rc, unsigned slot);

/* For a pool of idle handles: drops every node connection the server has
 * closed meanwhile (Redis never writes to an idle client, so anything
 * readable is the close).  1 when the handle still has an open one. */
int rn_rcluster_idle_check(rn_rcluster_t *rc);

/* rn_redis_reply_check for a handle: a missing reply (the handle's error)
 * or an error reply as "redis WHAT: REASON" in errstr; 0 when r is usable.
 * Does not free r. */
int rn_rcluster_reply_check(const rn_rcluster_t *rc, const redisReply *r, const char *what, char *errstr,
                            size_t errstr_size);

/* rn_redis_command_ll for a handle: the number a command answers, or -1
 * with errstr. */
long long rn_rcluster_command_ll(rn_rcluster_t *rc, int flags, int argc, const char **argv, const size_t *lens,
                                 const char *what, char *errstr, size_t errstr_size);

/* Why the last call returned NULL.  Owned by rc, valid until the next call. */
const char *rn_rcluster_errstr(const rn_rcluster_t *rc);

/* opts.wait_replicas of the handle (0: off), and its timeout in
 * *timeout_ms when not NULL. */
int rn_rcluster_wait_replicas(const rn_rcluster_t *rc, int *timeout_ms);

/*
 * With opts.wait_replicas set: WAIT <replicas> <timeout> on the node the
 * last command went to (so call it right after the write it covers), and
 * the number of replicas that acknowledged every write of that connection
 * so far - fewer than asked when the timeout ran out (stats.wait_short
 * counts those).  0 at once when off.  -1 with rn_rcluster_errstr() when
 * there is no answer ("connection lost": the write may not have reached
 * any replica) or an error reply.  Never retried here.
 */
long long rn_rcluster_wait(rn_rcluster_t *rc);

/* Counters since open, for tests, logs and bench. */
typedef struct rn_rcluster_stats {
	unsigned long commands;   /* calls */
	unsigned long moved;      /* MOVED replies followed */
	unsigned long ask;        /* ASK replies followed */
	unsigned long retries;    /* TRYAGAIN/CLUSTERDOWN/unreachable waits */
	unsigned long refreshes;  /* slot map reads */
	unsigned long reconnects; /* node connections opened after the first */
	unsigned long wait_short; /* rn_rcluster_wait answers below wait_replicas */
} rn_rcluster_stats_t;

void rn_rcluster_stats(const rn_rcluster_t *rc, rn_rcluster_stats_t *out);

/* host:port of the node serving slot now ("" standalone or unknown).
 * Owned by rc, valid until the next call. */
const char *rn_rcluster_node_of(const rn_rcluster_t *rc, unsigned slot);

#endif
