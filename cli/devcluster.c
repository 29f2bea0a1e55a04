/*
 * cli/devcluster.c - the local Redis Cluster of `runnel dev --redis-cluster
 * N` (see devcluster.h).
 */
#include "devcluster.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#include "common/util.h"

/* A second node per primary: the replica a failover promotes. */
#define DEV_CLUSTER_REPLICAS 1

int dev_cluster_parse_n(const char *text, int *n, char *errstr, size_t errstr_size)
{
	char *end = NULL;
	long v = strtol(text ? text : "", &end, 10);
	if (!text || !*text || end == text || *end != '\0') {
		snprintf(errstr, errstr_size, "--redis-cluster: \"%.32s\" is not a number of primaries",
		         text ? text : "");
		return -1;
	}
	if (v < DEV_CLUSTER_MIN) {
		snprintf(errstr, errstr_size,
		         "--redis-cluster: %ld primaries is not a cluster: Redis Cluster needs at least %d", v,
		         DEV_CLUSTER_MIN);
		return -1;
	}
	if (v > DEV_CLUSTER_MAX) {
		snprintf(errstr, errstr_size, "--redis-cluster: %ld primaries is more than runnel dev starts (at most %d)",
		         v, DEV_CLUSTER_MAX);
		return -1;
	}
	*n = (int)v;
	return 0;
}

static void dc_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* One command on a fresh connection to 127.0.0.1:port; the reply (the
 * caller frees it) or NULL when the node does not answer. */
static redisReply *dc_ask(int port, const char *cmd)
{
	struct timeval tv = { 1, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	redisReply *r = redisCommand(c, cmd);
	redisFree(c);
	return r;
}

/* 1 when the reply is the text kind and holds needle. */
static int dc_reply_has(int port, const char *cmd, const char *needle)
{
	redisReply *r = dc_ask(port, cmd);
	int ok = r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && strstr(r->str, needle);
	if (r)
		freeReplyObject(r);
	return ok;
}

/*
 * Node i: its config in dir/<i>/redis.conf, on a free port with a free bus
 * port (given explicitly: the default port + 10000 does not fit above
 * 55535), then PING.  A node that dies at once most likely lost one of
 * its ports to someone else meanwhile: tried again with others.
 */
static int dc_start_node(dev_cluster_t *cl, int i, const char *bin, const char *dir, const char *logdir,
                         int64_t deadline, int (*interrupted)(void), char *errstr, size_t errstr_size)
{
	char ndir[PATH_MAX], conf[PATH_MAX + 16], log[PATH_MAX], name[32];
	cli_proc_t *p = &cl->node[i];

	snprintf(ndir, sizeof(ndir), "%s/%d", dir, i);
	snprintf(conf, sizeof(conf), "%s/redis.conf", ndir);
	snprintf(log, sizeof(log), "%s/redis-node-%d.log", logdir, i);
	snprintf(name, sizeof(name), "redis-node-%d", i);
	if (mkdir(ndir, 0700) < 0 && errno != EEXIST) {
		snprintf(errstr, errstr_size, "cannot create %s: %s", ndir, strerror(errno));
		return -1;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		int port = cli_free_port(), bus = cli_free_port();
		FILE *f = port > 0 && bus > 0 && port != bus ? fopen(conf, "w") : NULL;
		if (!f) {
			snprintf(errstr, errstr_size, "cannot write %s", conf);
			return -1;
		}
		/* Like the single dev Redis (nothing kept), plus cluster mode with
		 * a short node timeout so that a killed primary is replaced
		 * within seconds. */
		fprintf(f,
		        "port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\ndaemonize no\n"
		        "protected-mode yes\nlogfile \"\"\ncluster-enabled yes\ncluster-port %d\n"
		        "cluster-config-file nodes.conf\ncluster-node-timeout 2000\n",
		        port, ndir, bus);
		fclose(f);
		char *argv[] = { (char *)bin, conf, NULL };
		char **env = cli_env_build(NULL);
		int rc = cli_proc_spawn(p, name, argv, env, log, errstr, errstr_size);
		cli_env_free(env);
		if (rc < 0)
			return -1;
		cl->port[i] = port;
		while (rn_mono_ms() < deadline && cli_proc_alive(p) && !interrupted()) {
			if (dc_reply_has(port, "PING", "PONG"))
				return 0;
			dc_sleep_ms(20);
		}
		if (interrupted()) {
			snprintf(errstr, errstr_size, "interrupted");
			return -1;
		}
		if (cli_proc_alive(p)) {
			snprintf(errstr, errstr_size, "%s did not answer PING in time (see %s)", name, log);
			return -1;
		}
	}
	snprintf(errstr, errstr_size, "%s did not start (see %s)", name, log);
	return -1;
}

/* redis-cli --cluster create over every node; 0 once it exited 0. */
static int dc_create(dev_cluster_t *cl, const char *redis_cli, const char *logdir, int64_t deadline,
                     int (*interrupted)(void), char *errstr, size_t errstr_size)
{
	char *argv[2 * DEV_CLUSTER_MAX + 8], addr[2 * DEV_CLUSTER_MAX][32], log[PATH_MAX], reps[8];
	int a = 0;
	cli_proc_t p;

	argv[a++] = (char *)redis_cli;
	argv[a++] = "--cluster";
	argv[a++] = "create";
	for (int i = 0; i < cl->n; i++) {
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", cl->port[i]);
		argv[a++] = addr[i];
	}
	snprintf(reps, sizeof(reps), "%d", DEV_CLUSTER_REPLICAS);
	argv[a++] = "--cluster-replicas";
	argv[a++] = reps;
	argv[a++] = "--cluster-yes";
	argv[a] = NULL;
	snprintf(log, sizeof(log), "%s/redis-cluster-create.log", logdir);
	char **env = cli_env_build(NULL);
	int rc = cli_proc_spawn(&p, "redis-cli", argv, env, log, errstr, errstr_size);
	cli_env_free(env);
	if (rc < 0)
		return -1;
	while (cli_proc_alive(&p) && rn_mono_ms() < deadline && !interrupted())
		dc_sleep_ms(50);
	if (p.pid > 0) {
		cli_proc_stop(&p, SIGKILL, 0);
		snprintf(errstr, errstr_size, "%s", interrupted() ? "interrupted" : "redis-cli --cluster create timed out");
		return -1;
	}
	if (!WIFEXITED(p.status) || WEXITSTATUS(p.status) != 0) {
		char how[32];
		cli_proc_describe(p.status, how, sizeof(how));
		snprintf(errstr, errstr_size, "redis-cli --cluster create failed (%s; see %s)", how, log);
		return -1;
	}
	return 0;
}

/* Every node up and saying cluster_state:ok, with all 2N nodes known, and
 * every replica's link to its primary up (a primary without its replica
 * would stop its runs at its first failure). */
static int dc_all_ok(const dev_cluster_t *cl)
{
	char known[48], slaves[48];
	snprintf(known, sizeof(known), "cluster_known_nodes:%d\r", cl->n);
	snprintf(slaves, sizeof(slaves), "connected_slaves:%d\r", DEV_CLUSTER_REPLICAS);
	for (int i = 0; i < cl->n; i++) {
		if (!dc_reply_has(cl->port[i], "CLUSTER INFO", "cluster_state:ok\r") ||
		    !dc_reply_has(cl->port[i], "CLUSTER INFO", known))
			return 0;
		if (dc_reply_has(cl->port[i], "INFO replication", "role:master\r") ? !dc_reply_has(cl->port[i], "INFO replication", slaves) : !dc_reply_has(cl->port[i], "INFO replication", "master_link_status:up\r"))
			return 0;
	}
	return 1;
}

int dev_cluster_start(dev_cluster_t *cl, int primaries, const char *bin, const char *redis_cli, const char *dir,
                      const char *logdir, int timeout_ms, int (*interrupted)(void), char *errstr,
                      size_t errstr_size)
{
	int64_t deadline = rn_mono_ms() + timeout_ms;

	memset(cl, 0, sizeof(*cl));
	if (primaries < DEV_CLUSTER_MIN || primaries > DEV_CLUSTER_MAX) {
		snprintf(errstr, errstr_size, "a cluster of %d primaries is not started here", primaries);
		return -1;
	}
	cl->primaries = primaries;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(errstr, errstr_size, "cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < primaries * (1 + DEV_CLUSTER_REPLICAS); i++) {
		if (dc_start_node(cl, i, bin, dir, logdir, deadline, interrupted, errstr, errstr_size) < 0)
			return -1;
		cl->n = i + 1;
	}
	snprintf(cl->url, sizeof(cl->url), "redis://127.0.0.1:%d", cl->port[0]);
	if (dc_create(cl, redis_cli, logdir, deadline, interrupted, errstr, errstr_size) < 0)
		return -1;
	/* redis-cli waits for the nodes to agree on the configuration; each
	 * one serves only once it has seen every slot covered itself. */
	for (long step = 20; !dc_all_ok(cl); step = step * 2 > 200 ? 200 : step * 2) {
		if (interrupted()) {
			snprintf(errstr, errstr_size, "interrupted");
			return -1;
		}
		if (rn_mono_ms() > deadline) {
			snprintf(errstr, errstr_size, "the cluster was not ok on every node within %d s",
			         timeout_ms / 1000);
			return -1;
		}
		dc_sleep_ms(step);
	}
	return 0;
}

cli_proc_t *dev_cluster_died(dev_cluster_t *cl)
{
	for (int i = 0; i < cl->n; i++) {
		cli_proc_t *p = &cl->node[i];
		if (p->name[0] && !cli_proc_alive(p))
			return p;
	}
	return NULL;
}

void dev_cluster_stop(dev_cluster_t *cl, int grace_ms)
{
	/* Primaries and replicas alike: SIGTERM to all first, so no primary
	 * waits out a failover of the others, then each is reaped. */
	for (int i = 0; i < cl->n; i++)
		if (cl->node[i].pid > 0)
			kill(-cl->node[i].pid, SIGTERM);
	for (int i = 0; i < cl->n; i++)
		cli_proc_stop(&cl->node[i], SIGTERM, grace_ms);
}
