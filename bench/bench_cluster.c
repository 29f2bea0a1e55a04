/*
 * bench/bench_cluster.c - the Redis side of runnel on one standalone server
 * and on a 3-primary cluster (3 replicas, AOF on both), on this machine:
 *   lines/s  the publisher's batches (MULTI, 64 XADDs of 200 bytes with
 *            explicit ids, EXEC) to each run's node, THREADS runs at once;
 *   runs/s   the control plane of a run (claim, start, one heartbeat,
 *            finish) through common/runstate, THREADS at once;
 *   queued   the same run entering through the run-time queue first (push,
 *            take, ack, and release at its end: common/runqueue, whose
 *            keys all share the {q} slot), each thread its own tenant;
 * with the commands each primary served (INFO commandstats), the share of
 * a core it used meanwhile (INFO cpu) and the commands one run costs; then both again on the cluster with
 * acknowledged writes (RUNNEL_REDIS_WAIT_REPLICAS=1: WAIT 1 after each
 * batch and after the finish script).  Prints figures, asserts nothing.
 *
 *   bench_cluster [seconds per figure = 5] [threads = 4]
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rcluster.h"
#include "common/runqueue.h"
#include "common/runstate.h"
#include "tests/support/harness.h"

#define BATCH     64
#define LINE_SIZE 200

static int seconds = 5, threads = 4;
static const char *url;
static int mode_tag;      /* keeps the two modes' keys apart */
static int wait_replicas; /* WAIT after each batch and finish (0: off) */

/* th_rcluster_open with the acknowledged-writes setting. */
static rn_rcluster_t *bench_open(void)
{
	rn_redis_url_t u;
	rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;
	char err[256];
	o.wait_replicas = wait_replicas;
	o.wait_timeout_ms = 1000;
	if (rn_redis_url_parse(url, &u, err, sizeof(err)) < 0)
		return NULL;
	rn_rcluster_t *rc = rn_rcluster_open(&u, &o, err, sizeof(err));
	if (!rc)
		fprintf(stderr, "bench_cluster: %s\n", err);
	return rc;
}

typedef struct {
	int id;
	long done;     /* lines or runs */
	long commands; /* as counted by the handle */
	int failed;
} worker_arg_t;

static int64_t deadline_ms;

static void *lines_thread(void *p)
{
	worker_arg_t *a = p;
	rn_rcluster_t *rc = bench_open();
	if (!rc) {
		a->failed = 1;
		return NULL;
	}
	char line[LINE_SIZE + 1];
	memset(line, 'x', LINE_SIZE);
	line[LINE_SIZE] = '\0';
	for (int run = 0; th_now_ms() < deadline_ms; run++) {
		char key[96];
		snprintf(key, sizeof(key), "bench:{m%d-t%d-r%d}:out", mode_tag, a->id, run);
		char err[128];
		redisContext *c = rn_rcluster_slot_context(rc, rn_rcluster_key_slot(key, strlen(key)), err, sizeof(err));
		if (!c) {
			a->failed = 1;
			break;
		}
		/* 20 batches per run, as a run of 1,280 lines. */
		for (int b = 0; b < 20 && th_now_ms() < deadline_ms; b++) {
			redisAppendCommand(c, "MULTI");
			for (int i = 0; i < BATCH; i++)
				redisAppendCommand(c, "XADD %s 1-%d line %s", key, b * BATCH + i + 1, line);
			redisAppendCommand(c, "EXEC");
			if (wait_replicas)
				redisAppendCommand(c, "WAIT %d 1000", wait_replicas);
			for (int i = 0; i < BATCH + 2 + (wait_replicas > 0); i++) {
				redisReply *r = NULL;
				if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
					a->failed = 1;
					return NULL;
				}
				freeReplyObject(r);
			}
			a->done += BATCH;
			a->commands += BATCH + 2 + (wait_replicas > 0);
		}
	}
	rn_rcluster_free(rc);
	return NULL;
}

static int with_queue; /* runs_thread: through the run-time queue too */

/* The run-time queue's part of one run: push, take, ack.  0 or -1. */
static int queue_in(rn_rcluster_t *rc, const char *id, const char *tenant, char *err, size_t err_size)
{
	static const rn_tenant_caps_t caps = { 0 };
	rn_queue_item_t it;
	if (rn_runqueue_push(rc, "bench", id, tenant, 5, "{}", 2, err, err_size) != 1 ||
	    rn_runqueue_take(rc, "bench", &caps, 30000, 30000, &it, err, err_size) != 1)
		return -1;
	int rc_ack = rn_runqueue_ack(rc, "bench", it.run_id, it.tenant, 1, err, err_size);
	rn_queue_item_clear(&it);
	return rc_ack;
}

static void *runs_thread(void *p)
{
	worker_arg_t *a = p;
	rn_rcluster_t *rc = bench_open();
	if (!rc) {
		a->failed = 1;
		return NULL;
	}
	char err[256], tenant[32];
	const char *line = "{\"type\":\"result\",\"message\":\"done\",\"ts\":1}";
	snprintf(tenant, sizeof(tenant), "t%d", a->id);
	for (int run = 0; th_now_ms() < deadline_ms; run++) {
		char id[64];
		snprintf(id, sizeof(id), "m%d-t%d-r%d", mode_tag, a->id, run);
		if (with_queue && queue_in(rc, id, tenant, err, sizeof(err)) < 0) {
			fprintf(stderr, "queued runs: %s\n", err);
			a->failed = 1;
			break;
		}
		rn_claim_t cl;
		const char *ids[] = { id };
		int owned[1];
		if (rn_runstate_claim(rc, "bench", id, "w", 30000, 0, 600, &cl, err, sizeof(err)) < 0 ||
		    rn_runstate_start(rc, "bench", id, "w", err, sizeof(err)) != 1 ||
		    rn_runstate_heartbeat(rc, "bench", ids, 1, "w", 30000, owned, err, sizeof(err)) < 0 ||
		    rn_runstate_finish(rc, "bench", id, line, strlen(line), "succeeded", "", 600, err, sizeof(err)) != 1 ||
		    (with_queue && rn_runqueue_release(rc, "bench", id, tenant, err, sizeof(err)) < 0)) {
			fprintf(stderr, "runs: %s\n", err);
			a->failed = 1;
			break;
		}
		a->done++;
	}
	rn_rcluster_stats_t s;
	rn_rcluster_stats(rc, &s);
	a->commands = (long)s.commands;
	rn_rcluster_free(rc);
	return NULL;
}

/* Commands served so far by each listed node (sum of cmdstat calls), and
 * the CPU seconds it used (used_cpu_sys + used_cpu_user). */
static void node_calls(th_redis_t *nodes, int n, long long *out, double *cpu)
{
	for (int i = 0; i < n; i++) {
		out[i] = -1;
		cpu[i] = 0;
		if (nodes[i].pid <= 0)
			continue;
		redisContext *c = th_redis_connect(&nodes[i]);
		if (!c)
			continue;
		redisReply *r = redisCommand(c, "INFO commandstats");
		if (r && r->type == REDIS_REPLY_STRING) {
			out[i] = 0;
			for (const char *p = r->str; (p = strstr(p, "calls=")); p += 6)
				out[i] += strtoll(p + 6, NULL, 10);
		}
		if (r)
			freeReplyObject(r);
		r = redisCommand(c, "INFO cpu");
		const char *f;
		if (r && r->type == REDIS_REPLY_STRING) {
			if ((f = strstr(r->str, "used_cpu_sys:")))
				cpu[i] += strtod(f + 13, NULL);
			if ((f = strstr(r->str, "used_cpu_user:")))
				cpu[i] += strtod(f + 14, NULL);
		}
		if (r)
			freeReplyObject(r);
		redisFree(c);
	}
}

static int is_primary(th_redis_t *node)
{
	redisContext *c = th_redis_connect(node);
	if (!c)
		return 0;
	redisReply *r = redisCommand(c, "ROLE");
	int p = r && r->type == REDIS_REPLY_ARRAY && r->elements && strcmp(r->element[0]->str, "master") == 0;
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return p;
}

static void figure(const char *what, void *(*fn)(void *), th_redis_t *nodes, int n, const char *unit)
{
	long long before[TH_CLUSTER_MAX_NODES], after[TH_CLUSTER_MAX_NODES];
	double cpu0[TH_CLUSTER_MAX_NODES], cpu1[TH_CLUSTER_MAX_NODES];
	worker_arg_t args[64];
	pthread_t t[64];
	node_calls(nodes, n, before, cpu0);
	deadline_ms = th_now_ms() + seconds * 1000;
	int64_t t0 = th_now_ms();
	for (int i = 0; i < threads; i++) {
		args[i] = (worker_arg_t){ .id = i };
		pthread_create(&t[i], NULL, fn, &args[i]);
	}
	long done = 0, cmds = 0;
	int failed = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		done += args[i].done;
		cmds += args[i].commands;
		failed |= args[i].failed;
	}
	double secs = (double)(th_now_ms() - t0) / 1000.0;
	node_calls(nodes, n, after, cpu1);
	printf("  %-8s %10.0f %s/s%s", what, (double)done / secs, unit, failed ? "  (FAILED)" : "");
	if (fn == runs_thread && done > 0)
		printf("   %.1f commands per run", (double)cmds / (double)done);
	printf("\n    commands served per primary (scripts' own calls included), and its CPU:");
	long long total = 0;
	for (int i = 0; i < n; i++)
		if (after[i] >= 0 && before[i] >= 0 && is_primary(&nodes[i]))
			total += after[i] - before[i];
	for (int i = 0; i < n; i++) {
		if (after[i] < 0 || before[i] < 0 || !is_primary(&nodes[i]))
			continue;
		long long d = after[i] - before[i];
		printf(" :%d %lld (%.0f%%, cpu %.0f%%)", nodes[i].port, d, total ? 100.0 * (double)d / (double)total : 0.0,
		       100.0 * (cpu1[i] - cpu0[i]) / secs);
	}
	printf("\n");
	mode_tag++;
}

static int arg_int(const char *s, int lo, int hi)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	return (int)v;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = arg_int(argv[1], 1, 600);
	if (argc > 2)
		threads = arg_int(argv[2], 1, 64);
	if (seconds < 0 || threads < 0) {
		fprintf(stderr, "usage: bench_cluster [seconds 1..600] [threads 1..64]\n");
		return 2;
	}
	th_init("bench_cluster");
	static th_redis_t one;
	static th_cluster_t cl;
	if (th_redis_start(&one, "appendonly yes\n") < 0 || th_cluster_start(&cl, 3, 1, NULL) < 0) {
		fprintf(stderr, "bench_cluster: could not start Redis\n");
		return 1;
	}
	printf("bench_cluster: %d s per figure, %d threads, batches of %d lines of %d bytes, AOF everysec\n",
	       seconds, threads, BATCH, LINE_SIZE);
	printf("standalone (1 server):\n");
	url = one.url;
	figure("lines", lines_thread, &one, 1, "lines");
	figure("runs", runs_thread, &one, 1, "runs");
	with_queue = 1;
	figure("queued", runs_thread, &one, 1, "runs");
	with_queue = 0;
	printf("cluster (3 primaries + 3 replicas):\n");
	url = cl.url;
	figure("lines", lines_thread, cl.node, cl.n, "lines");
	figure("runs", runs_thread, cl.node, cl.n, "runs");
	with_queue = 1;
	figure("queued", runs_thread, cl.node, cl.n, "runs");
	with_queue = 0;
	printf("cluster, RUNNEL_REDIS_WAIT_REPLICAS=1:\n");
	wait_replicas = 1;
	figure("lines", lines_thread, cl.node, cl.n, "lines");
	figure("runs", runs_thread, cl.node, cl.n, "runs");
	return 0;
}
