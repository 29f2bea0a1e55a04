/*
 * tests/cluster/test_cluster_runstate.c - the run state machine on a real
 * Redis Cluster: claims, heartbeats and terminal lines of runs spread over
 * every primary, the leases index kept beside the single-slot scripts, the
 * lost sweep, an index that fell behind (repaired, never a run ended
 * early), and a SIGKILLed primary under live runs: every run still ends
 * with exactly one terminal line, last.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rcluster.h"
#include "common/runstate.h"
#include "tests/support/harness.h"

#define P    "rt"
#define NRUN 30

static th_cluster_t cl;
static rn_rcluster_t *rc;

static const char *run_name(int i)
{
	return th_strf("run-%d", i);
}

static long long zscore(const char *run)
{
	redisReply *r = rn_rcluster_command(rc, RN_RCLUSTER_IDEMPOTENT, "ZSCORE %s %s", P ":leases", run);
	long long v = r && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
	if (r)
		freeReplyObject(r);
	return v;
}

static const char *status_of(const char *run)
{
	static char buf[64];
	char err[256];
	if (rn_runstate_get(rc, P, run, "status", buf, sizeof(buf), err, sizeof(err)) < 0)
		snprintf(buf, sizeof(buf), "(error: %s)", err);
	return buf;
}

/* The "line" fields of a run's stream, through the router. */
static char **lines_of(const char *run, size_t *n)
{
	const char *key = th_strf(P ":{%s}:out", run);
	char err[128];
	redisContext *c = rn_rcluster_slot_context(rc, rn_rcluster_key_slot(key, strlen(key)), err, sizeof(err));
	char **lines = NULL;
	*n = 0;
	if (!c || th_stream_read_all(c, key, &lines, NULL, n) < 0)
		return NULL;
	return lines;
}

/* Exactly one terminal line, the last one; its code ("" for a result). */
static const char *one_terminal(const char *run)
{
	static char code[64];
	size_t n;
	char **l = lines_of(run, &n);
	size_t terminals = th_lines_count(l, n, "result", NULL) + th_lines_count(l, n, "error", NULL);
	char type[32] = "";
	code[0] = '\0';
	if (n > 0)
		th_line_type(l[n - 1], type, sizeof(type), code, sizeof(code));
	if (terminals != 1 || (strcmp(type, "result") && strcmp(type, "error")))
		snprintf(code, sizeof(code), "(%zu terminal lines, last %s)", terminals, type);
	th_strv_free(l, n);
	return code;
}

static void on_lost(const char *run_id, void *arg)
{
	(*(int *)arg)++;
	(void)run_id;
}

static void test_lifecycle(void)
{
	char err[256];
	int nodes_used[TH_CLUSTER_MAX_NODES] = { 0 };
	for (int i = 0; i < NRUN; i++) {
		const char *run = run_name(i);
		rn_claim_t c;
		TH_CHECK(rn_runstate_claim(rc, P, run, "w1", 10000, 0, 600, &c, err, sizeof(err)) == 0 &&
		                 c.status == RN_CLAIM_OK,
		         "claim %s: %s", run, err);
		TH_CHECK(rn_runstate_start(rc, P, run, "w1", err, sizeof(err)) == 1, "start %s", run);
		long long s = zscore(run);
		TH_CHECK(s >= c.now_ms + 10000 && s < c.now_ms + 20000, "%s: the index holds its lease (%lld)", run, s);
		const char *key = th_strf(P ":{%s}:state", run);
		int p = th_cluster_primary_of(&cl, (int)rn_rcluster_key_slot(key, strlen(key)));
		if (p >= 0)
			nodes_used[p] = 1;
	}
	int used = 0;
	for (int i = 0; i < cl.n; i++)
		used += nodes_used[i];
	TH_CHECK(used == 3, "runs on all three primaries (%d)", used);

	/* One heartbeat for all: one pipeline over the primaries, one ZADD. */
	const char *ids[NRUN];
	int owned[NRUN];
	for (int i = 0; i < NRUN; i++)
		ids[i] = run_name(i);
	long long before = zscore(ids[0]);
	TH_CHECK(rn_runstate_heartbeat(rc, P, ids, NRUN, "w1", 30000, owned, err, sizeof(err)) == 0, "heartbeat: %s",
	         err);
	int all = 1;
	for (int i = 0; i < NRUN; i++)
		all &= owned[i] == 1;
	TH_CHECK(all, "every run still ours");
	TH_CHECK(zscore(ids[0]) > before + 15000, "the index follows the heartbeat");
	TH_CHECK(rn_runstate_heartbeat(rc, P, ids, 2, "w2", 30000, owned, err, sizeof(err)) == 0 && owned[0] == 0 &&
	                 owned[1] == 0,
	         "another worker's heartbeat is refused");

	for (int i = 0; i < NRUN; i++) {
		const char *run = run_name(i);
		const char *line = "{\"type\":\"result\",\"message\":\"ok\",\"ts\":1}";
		TH_CHECK(rn_runstate_finish(rc, P, run, line, strlen(line), "succeeded", "", 600, err, sizeof(err)) == 1,
		         "finish %s: %s", run, err);
		TH_CHECK(rn_runstate_finish(rc, P, run, line, strlen(line), "failed", "x", 600, err, sizeof(err)) == 0,
		         "a second finish of %s writes nothing", run);
		TH_CHECK(strcmp(one_terminal(run), "") == 0, "%s: one result, last", run);
		TH_CHECK(zscore(run) == -1, "%s: gone from the index", run);
		TH_CHECK(strcmp(status_of(run), "succeeded") == 0, "%s succeeded", run);
	}
}

static void test_sweep(void)
{
	char err[256];
	rn_claim_t c;
	/* A worker that claimed and died: lease 200 ms, never renewed. */
	TH_REQUIRE(rn_runstate_claim(rc, P, "dead-1", "w-gone", 200, 0, 600, &c, err, sizeof(err)) == 0, "%s", err);
	TH_REQUIRE(rn_runstate_start(rc, P, "dead-1", "w-gone", err, sizeof(err)) == 1, "start");
	/* A live run whose index entry fell behind (a lost ZADD): score 1. */
	TH_REQUIRE(rn_runstate_claim(rc, P, "alive-1", "w1", 60000, 0, 600, &c, err, sizeof(err)) == 0, "%s", err);
	redisReply *z = rn_rcluster_command(rc, 0, "ZADD %s 1 %s", P ":leases", "alive-1");
	TH_CHECK(z && z->type == REDIS_REPLY_INTEGER, "index pushed back");
	if (z)
		freeReplyObject(z);
	/* A stray entry for a run that never existed. */
	z = rn_rcluster_command(rc, 0, "ZADD %s 1 %s", P ":leases", "never-1");
	if (z)
		freeReplyObject(z);
	int64_t until = th_now_ms() + 10000;
	int lost = 0;
	while (lost == 0 && th_now_ms() < until) {
		int n = rn_runstate_sweep(rc, P, 600, 0, on_lost, &lost, err, sizeof(err));
		TH_CHECK(n >= 0, "sweep: %s", err);
		if (lost == 0) {
			struct timespec ts = { 0, 50000000 };
			nanosleep(&ts, NULL);
		}
	}
	TH_CHECK(lost == 1, "the dead worker's run was swept (%d)", lost);
	TH_CHECK(strcmp(one_terminal("dead-1"), "worker_lost") == 0, "dead-1 ended worker_lost: %s",
	         one_terminal("dead-1"));
	TH_CHECK(strcmp(status_of("dead-1"), "lost") == 0, "dead-1 is lost");
	TH_CHECK(zscore("dead-1") == -1 && zscore("never-1") == -1, "ended and stray entries dropped");
	TH_CHECK(strcmp(status_of("alive-1"), "claimed") == 0, "the live run was not ended");
	TH_CHECK(zscore("alive-1") > c.now_ms + 50000, "its index entry repaired (%lld)", zscore("alive-1"));
}

/* Live runs on one primary; SIGKILL it.  Heartbeats fail, then succeed on
 * the promoted replica; every run ends once, its line last. */
static void test_failover(void)
{
	char err[256];
	const char *key = P ":{fo-0}:state";
	int victim = th_cluster_primary_of(&cl, (int)rn_rcluster_key_slot(key, strlen(key)));
	TH_REQUIRE(victim >= 0, "victim");
	/* Runs whose slots the victim serves, and runs elsewhere. */
	const char *runs[12];
	int n = 0;
	for (int i = 0; n < 12; i++) {
		const char *run = th_strf("fo-%d", i);
		const char *k = th_strf(P ":{%s}:state", run);
		int p = th_cluster_primary_of(&cl, (int)rn_rcluster_key_slot(k, strlen(k)));
		if ((n < 8) == (p == victim))
			runs[n++] = run;
	}
	for (int i = 0; i < n; i++) {
		rn_claim_t c;
		TH_REQUIRE(rn_runstate_claim(rc, P, runs[i], "w1", 30000, 0, 600, &c, err, sizeof(err)) == 0 &&
		                   c.status == RN_CLAIM_OK,
		           "claim %s: %s", runs[i], err);
		TH_REQUIRE(rn_runstate_start(rc, P, runs[i], "w1", err, sizeof(err)) == 1, "start %s", runs[i]);
	}
	redisReply *w = rn_rcluster_command(rc, 0, "WAIT 1 2000");
	if (w)
		freeReplyObject(w);
	TH_REQUIRE(th_cluster_kill(&cl, victim) == 0, "SIGKILL primary %d", victim);
	int owned[12];
	int64_t t0 = th_now_ms(), until = t0 + 30000;
	int ok = 0, failures = 0;
	while (!ok && th_now_ms() < until) {
		if (rn_runstate_heartbeat(rc, P, runs, (size_t)n, "w1", 30000, owned, err, sizeof(err)) == 0) {
			ok = 1;
			for (int i = 0; i < n; i++)
				ok &= owned[i] == 1;
		} else {
			failures++;
		}
	}
	fprintf(stderr, "# heartbeats back %lld ms after the kill (%d failed calls)\n", (long long)(th_now_ms() - t0),
	        failures);
	TH_CHECK(ok, "heartbeats of every run renewed after the failover");
	for (int i = 0; i < n; i++) {
		const char *line = "{\"type\":\"result\",\"message\":\"ok\",\"ts\":1}";
		int r = -1;
		for (int tries = 0; r < 0 && tries < 20; tries++)
			r = rn_runstate_finish(rc, P, runs[i], line, strlen(line), "succeeded", "", 600, err, sizeof(err));
		TH_CHECK(r == 1, "finish %s after the failover: %d %s", runs[i], r, err);
		TH_CHECK(strcmp(one_terminal(runs[i]), "") == 0, "%s: one result, last", runs[i]);
	}
	TH_CHECK(th_cluster_wait_ok(&cl, 20000), "cluster ok with five nodes");
}

int main(void)
{
	th_init("cluster_runstate");
	TH_REQUIRE(th_cluster_start(&cl, 3, 1, NULL) == 0, "start a 3+3 cluster");
	rc = th_rcluster_open(cl.url);
	TH_REQUIRE(rc && rn_rcluster_is_cluster(rc), "cluster handle");
	test_lifecycle();
	test_sweep();
	test_failover();
	rn_rcluster_stats_t s;
	rn_rcluster_stats(rc, &s);
	fprintf(stderr, "# %lu commands, %lu MOVED, %lu retries, %lu map reads\n", s.commands, s.moved, s.retries,
	        s.refreshes);
	rn_rcluster_free(rc);
	return th_done();
}
