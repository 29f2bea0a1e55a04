/*
 * cli/devcluster.h - `runnel dev --redis-cluster N`: a throwaway Redis
 * Cluster of N primaries with one replica each, started in place of the
 * single redis-server (every node a cli_proc_t child: its own process
 * group, PR_SET_PDEATHSIG, its log under logs/), joined with
 * `redis-cli --cluster create --cluster-replicas 1 --cluster-yes`, and
 * ready once every node says cluster_state:ok.
 *
 * @locality main thread (the children's PDEATHSIG, as in devproc.h).
 */
#ifndef RUNNEL_CLI_DEVCLUSTER_H
#define RUNNEL_CLI_DEVCLUSTER_H

#include <stddef.h>

#include "devproc.h"

/* Redis Cluster wants 3 primaries at least; more than 16 (32 servers)
 * on one machine is not a development stack. */
#define DEV_CLUSTER_MIN 3
#define DEV_CLUSTER_MAX 16

typedef struct dev_cluster {
	int primaries;                        /* N */
	int n;                                /* nodes started so far (2N when up) */
	cli_proc_t node[2 * DEV_CLUSTER_MAX]; /* name "redis-node-I" */
	int port[2 * DEV_CLUSTER_MAX];        /* client ports */
	char url[64];                         /* redis://127.0.0.1:<node 0's port> */
} dev_cluster_t;

/*
 * The value of --redis-cluster as a number of primaries.  0 with *n set,
 * or -1 with the reason in errstr (the usage error's text):
 *   "--redis-cluster: \"X\" is not a number of primaries"
 *   "--redis-cluster: N primaries is not a cluster: Redis Cluster needs at least 3"
 *   "--redis-cluster: N primaries is more than runnel dev starts (at most 16)"
 */
int dev_cluster_parse_n(const char *text, int *n, char *errstr, size_t errstr_size);

/*
 * Starts 2N redis-server nodes (bin) with cluster-enabled on free loopback
 * ports (and cluster bus ports below 65535), each in dir/<I>/ with its log
 * in logdir/redis-node-I.log, creates the cluster with redis_cli (its
 * output in logdir/redis-cluster-create.log) and waits until every node
 * answers cluster_state:ok, all within timeout_ms.  Gives up early when
 * interrupted() returns non-zero.  0, or -1 with the reason in errstr
 * (the nodes started so far keep running: dev_cluster_stop() them).
 */
int dev_cluster_start(dev_cluster_t *cl, int primaries, const char *bin, const char *redis_cli, const char *dir,
                      const char *logdir, int timeout_ms, int (*interrupted)(void), char *errstr,
                      size_t errstr_size);

/* The first node that exited on its own (reaped, its status kept), or
 * NULL.  A node reported once is not reported again. */
cli_proc_t *dev_cluster_died(dev_cluster_t *cl);

/* Stops every node (SIGTERM, then SIGKILL after grace_ms each). */
void dev_cluster_stop(dev_cluster_t *cl, int grace_ms);

#endif
