/*
 * tests/cluster/test_cluster_wait.c - RUNNEL_REDIS_WAIT_REPLICAS through a
 * primary's SIGKILL.  Twice, each time on a primary that has a replica:
 * six runs whose slots it serves print lines as fast as the shell can;
 * mid-output the replica falls behind (it drops its link to the primary
 * and sleeps a second: on loopback a replica is never more than a moment
 * behind, and what the primary sent sits in the replica's socket even
 * while it sleeps; a busy or distant one is behind), and once every run
 * wrote more lines, the primary is killed and the replica takes over.  Every run must still end with exactly one terminal
 * line, last, its lines in order with none twice.  The lines the promoted
 * replica never had show up as gaps:
 *   1. RUNNEL_REDIS_WAIT_REPLICAS=0 (asynchronous replication): counted
 *      and printed, not failed;
 *   2. RUNNEL_REDIS_WAIT_REPLICAS=1: none may be missing (a batch counts
 *      only once the replica has it; one the kill cut off is sent again
 *      to the promoted replica).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/worker/wtest.h"

#define NRUNS  6
#define NLINES 6000

static wt_t T;

/* NLINES numbered lines, a 20 ms pause every 20 (about 1,000 lines/s),
 * then a result. */
static const char *agent_json(void)
{
	return th_strf("{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	               "\"read t; i=1; while [ $i -le %d ]; do "
	               "echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"n='$i'\\\"}'; "
	               "[ $((i %% 20)) -eq 0 ] && sleep 0.02; i=$((i+1)); done; "
	               "echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"done\\\"}'\"]}",
	               NLINES);
}

static int slot_primary(const char *run)
{
	const char *key = th_strf("runnel:{%s}:out", run);
	return th_cluster_primary_of(T.cluster, (int)rn_rcluster_key_slot(key, strlen(key)));
}

/* A primary with a live replica, neither excluded nor node 0 (the URL
 * every program is given: a program starts only while that node answers);
 * -1. */
static int primary_with_replica(int excluded)
{
	for (int s = 0; s < 16384; s += 97) {
		int p = th_cluster_primary_of(T.cluster, s);
		if (p > 0 && p != excluded && th_cluster_replica_of(T.cluster, p) >= 0)
			return p;
	}
	return -1;
}

typedef struct {
	const char *run[NRUNS];
} wset_t;

/* Entries in the run's stream (XLEN: one command, so the checks around
 * the kill take milliseconds, not a read of every line); 0 on error. */
static size_t xlen(const char *run)
{
	redisReply *r = rn_rcluster_command(T.rcl, 0, "XLEN runnel:{%s}:out", run);
	size_t n = r && r->type == REDIS_REPLY_INTEGER && r->integer > 0 ? (size_t)r->integer : 0;
	if (r)
		freeReplyObject(r);
	return n;
}

typedef struct {
	wset_t *set;
	size_t at[NRUNS];
} grown_t;

/* Every run has more lines than at[]. */
static int all_grown(void *arg)
{
	grown_t *g = arg;
	for (int i = 0; i < NRUNS; i++)
		if (xlen(g->set->run[i]) <= g->at[i])
			return 0;
	return 1;
}

/* The replica of primary v drops its link to v and stops for a second
 * (CLIENT KILL TYPE master, DEBUG SLEEP 1, sent without waiting for the
 * answers): what v writes meanwhile reaches no replica.  The connection,
 * for the caller to free. */
static redisContext *freeze_replica_of(int v)
{
	int r = th_cluster_replica_of(T.cluster, v);
	TH_REQUIRE(r >= 0, "primary %d has a replica", v);
	redisContext *c = th_cluster_connect(T.cluster, r);
	TH_REQUIRE(c, "replica %d", r);
	int done = 0;
	TH_REQUIRE(redisAppendCommand(c, "CLIENT KILL TYPE master") == REDIS_OK &&
	           redisAppendCommand(c, "DEBUG SLEEP 1") == REDIS_OK);
	while (!done)
		TH_REQUIRE(redisBufferWrite(c, &done) == REDIS_OK, "DEBUG SLEEP to replica %d", r);
	return c;
}

static int all_mid_output(void *arg)
{
	wset_t *w = arg;
	for (int i = 0; i < NRUNS; i++)
		if (xlen(w->run[i]) < 1000)
			return 0;
	return 1;
}

/* Order, duplicates and the end of every run; the lines missing. */
static long check_runs(const char *what, wset_t *w, const size_t *before)
{
	long lost_total = 0, before_total = 0;
	for (int i = 0; i < NRUNS; i++) {
		char msg[256];
		const char *code = wt_ended(&T, w->run[i], 180000, msg, sizeof(msg));
		TH_CHECK(strcmp(code, "(no terminal line)") != 0, "%s: %s has an end", what, w->run[i]);
		size_t nl;
		char **l = wt_lines(&T, w->run[i], &nl);
		const char *tc = wt_check_terminal(l, nl);
		TH_CHECK(strcmp(tc, "") == 0, "%s: %s ended with its result (%s)", what, w->run[i], tc);
		long last = 0, gaps = 0, dups = 0;
		for (size_t k = 0; k < nl; k++) {
			const char *m = th_line_field(l[k], "message", NULL);
			if (strncmp(m, "n=", 2) != 0)
				continue;
			long v = strtol(m + 2, NULL, 10);
			if (v <= last)
				dups++;
			else
				gaps += v - last - 1;
			last = v > last ? v : last;
		}
		TH_CHECK(dups == 0, "%s: %s: lines in order, none twice (%ld out of order)", what, w->run[i], dups);
		TH_CHECK(last == NLINES, "%s: %s: the agent ran to its last line (%ld)", what, w->run[i], last);
		TH_NOTE("%s: %s: %zu lines in the stream at the kill, %ld missing at the end", what, w->run[i],
		        before[i], gaps);
		lost_total += gaps;
		before_total += (long)before[i];
		th_strv_free(l, nl);
	}
	TH_NOTE("%s: lines in the streams at the kill: %ld; missing at the end: %ld", what, before_total, lost_total);
	return lost_total;
}

/* Six runs on a primary with a replica, that primary killed mid-output;
 * returns the lines lost.  *victim: the primary killed. */
static long kill_phase(const char *tag, const char *const *env, int excluded, int *victim)
{
	pid_t w = wt_worker(&T, tag, env);
	wt_warmup(&T);
	int v = primary_with_replica(excluded);
	TH_REQUIRE(v >= 0, "%s: a primary with a replica", tag);
	*victim = v;
	wset_t set;
	int n = 0;
	for (int i = 0; n < NRUNS && i < 100000; i++) {
		const char *run = th_strf("%s-%d", tag, i);
		if (slot_primary(run) == v)
			set.run[n++] = run;
	}
	TH_REQUIRE(n == NRUNS, "%s: runs on primary %d", tag, v);
	for (int i = 0; i < NRUNS; i++)
		wt_submit_agent(&T, set.run[i], agent_json(), "hello", 0, 0, NULL);
	TH_REQUIRE(th_wait_until(all_mid_output, &set, 120000), "%s: every run is printing", tag);
	grown_t g = { .set = &set };
	for (int i = 0; i < NRUNS; i++)
		g.at[i] = xlen(set.run[i]);
	redisContext *frozen = freeze_replica_of(v);
	TH_CHECK(th_wait_until(all_grown, &g, 900), "%s: every run wrote lines while the replica slept", tag);
	size_t before[NRUNS];
	for (int i = 0; i < NRUNS; i++)
		before[i] = xlen(set.run[i]);
	TH_REQUIRE(th_cluster_kill(T.cluster, v) == 0, "%s: SIGKILL primary %d", tag, v);
	redisFree(frozen);
	for (int i = 0; i < NRUNS; i++)
		TH_CHECK(before[i] < NLINES, "%s: %s was still printing at the kill (%zu lines)", tag, set.run[i], before[i]);
	int64_t t0 = th_now_ms();
	TH_CHECK(th_cluster_wait_ok(T.cluster, 30000), "%s: a replica promoted", tag);
	TH_NOTE("%s: cluster ok %lld ms after the kill", tag, (long long)(th_now_ms() - t0));
	long lost = check_runs(tag, &set, before);
	wt_stop_worker(w, 60000, tag);
	return lost;
}

int main(void)
{
	th_init("cluster_wait");
	setenv("RUNNEL_TEST_REDIS", "cluster", 1);
	wt_setup(&T, "enable-debug-command yes\n", 1);
	const char *off[] = { "RUNNEL_SLOTS=8", NULL };
	/* 5 s: longer than the replica sleeps.  After the kill the promoted
	 * replica has no replica of its own, so each batch on it waits that
	 * long (and warns). */
	const char *on[] = { "RUNNEL_SLOTS=8", "RUNNEL_REDIS_WAIT_REPLICAS=1", "RUNNEL_REDIS_WAIT_TIMEOUT_MS=5000",
		             NULL };
	int first = -1, second = -1;
	long lost_off = kill_phase("async", off, -1, &first);
	long lost_on = kill_phase("wait1", on, first, &second);
	TH_NOTE("lines missing after a primary's SIGKILL: %ld with WAIT off, %ld with WAIT 1", lost_off, lost_on);
	TH_CHECK(lost_on == 0, "RUNNEL_REDIS_WAIT_REPLICAS=1: no line lost in the failover (%ld)", lost_on);
	TH_CHECK(wt_log_has(&T, "wait1", "\"event\":\"redis_wait_short\""),
	         "the batches on the promoted replica (no replica of its own) warned");
	wt_teardown(&T);
	return th_done();
}
