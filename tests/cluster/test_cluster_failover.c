/*
 * tests/cluster/test_cluster_failover.c - a worker's live runs while the
 * cluster under them changes, mid-output:
 *   1. redis-cli --cluster reshard moves the slots of six live runs to
 *      another primary, then that primary's replica takes over gracefully
 *      (CLUSTER FAILOVER): nothing may be lost;
 *   2. the primary serving six live runs is SIGKILLed and its replica
 *      takes over: lines acknowledged before the kill that the replica
 *      never received (replication is asynchronous) show up as gaps,
 *      counted and printed, not failed.
 * Either way every run ends with exactly one terminal line, last; its
 * lines stay in order with none duplicated; no run starts twice; no run is
 * left without an end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/worker/wtest.h"

#define NRUNS  8
#define NLINES 300

static wt_t T;

/* An agent that prints NLINES numbered lines, 20 ms apart, then a result. */
static const char *agent_json(void)
{
	return th_strf("{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	               "\"read t; i=1; while [ $i -le %d ]; do "
	               "echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"n='$i'\\\"}'; "
	               "i=$((i+1)); sleep 0.02; done; "
	               "echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"done\\\"}'\"]}",
	               NLINES);
}

static int slot_primary(const char *run)
{
	const char *key = th_strf("runnel:{%s}:out", run);
	return th_cluster_primary_of(T.cluster, (int)rn_rcluster_key_slot(key, strlen(key)));
}

typedef struct {
	const char *run;
	size_t before; /* lines in the stream just before the kill */
} fo_run_t;

static int all_mid_output(void *arg)
{
	fo_run_t *r = arg;
	for (int i = 0; i < NRUNS; i++) {
		size_t n;
		char **l = wt_lines(&T, r[i].run, &n);
		th_strv_free(l, n);
		if (n < 30)
			return 0;
	}
	return 1;
}

/* Submits NRUNS runs named <prefix>-N: six whose slots pick() accepts,
 * two others, and waits until each is printing. */
static void submit(const char *prefix, int (*pick)(const char *run, void *arg), void *arg, fo_run_t *runs)
{
	int n = 0;
	for (int i = 0; n < NRUNS && i < 100000; i++) {
		const char *run = th_strf("%s-%d", prefix, i);
		if ((n < 6) == (pick(run, arg) != 0))
			runs[n++] = (fo_run_t){ run, 0 };
	}
	TH_REQUIRE(n == NRUNS, "%s: runs to pick", prefix);
	for (int i = 0; i < NRUNS; i++)
		wt_submit_agent(&T, runs[i].run, agent_json(), "hello", 0, 0, NULL);
	TH_REQUIRE(th_wait_until(all_mid_output, runs, 60000), "%s: every run is printing", prefix);
	for (int i = 0; i < NRUNS; i++) {
		char **l = wt_lines(&T, runs[i].run, &runs[i].before);
		th_strv_free(l, runs[i].before);
	}
}

/* Every run's end, order, duplicates and starts; the lines lost. */
static long check_runs(const char *what, fo_run_t *runs)
{
	long lost_total = 0, acked_total = 0;
	char *log = NULL;
	for (int i = 0; i < NRUNS; i++) {
		char msg[256];
		const char *code = wt_ended(&T, runs[i].run, 120000, msg, sizeof(msg));
		TH_CHECK(strcmp(code, "(no terminal line)") != 0, "%s: %s has an end", what, runs[i].run);
		size_t nl;
		char **l = wt_lines(&T, runs[i].run, &nl);
		/* wt_check_terminal: exactly one terminal line, the last. */
		const char *tc = wt_check_terminal(l, nl);
		TH_CHECK(strcmp(tc, "") == 0, "%s: %s ended with its result (%s)", what, runs[i].run, tc);
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
		TH_CHECK(dups == 0, "%s: %s: lines in order, none twice (%ld out of order)", what, runs[i].run, dups);
		TH_CHECK(last == NLINES, "%s: %s: the agent ran to its last line", what, runs[i].run);
		lost_total += gaps;
		acked_total += (long)runs[i].before;
		TH_NOTE("%s: %s: %zu lines before, %ld lost", what, runs[i].run, runs[i].before, gaps);
		th_strv_free(l, nl);
	}
	TH_NOTE("%s: lines acknowledged before: %ld; lost: %ld", what, acked_total, lost_total);
	/* Started once: one agent_started line for the run in the log. */
	log = th_file_read(wt_log_path(&T, "w1"), NULL);
	for (int i = 0; i < NRUNS && log; i++) {
		int starts = 0;
		const char *needle = th_strf("\"run_id\":\"%s\"", runs[i].run);
		for (const char *p = log; p && *p;) {
			const char *eol = strchr(p, '\n');
			size_t len = eol ? (size_t)(eol - p) : strlen(p);
			char *line = th_memdup0(p, len);
			if (line && strstr(line, "\"event\":\"agent_started\"") && strstr(line, needle))
				starts++;
			free(line);
			p = eol ? eol + 1 : NULL;
		}
		TH_CHECK(starts == 1, "%s: %s started once (%d)", what, runs[i].run, starts);
	}
	free(log);
	return lost_total;
}

static int on_primary(const char *run, void *arg)
{
	return slot_primary(run) == *(int *)arg;
}

/* Runs whose slots are among the lowest 300 of primary *arg's, the ones
 * redis-cli --cluster reshard --cluster-slots 300 moves first. */
typedef struct {
	int primary;
	int lowest[300];
	int n;
} low_slots_t;

static int in_low_slots(const char *run, void *arg)
{
	low_slots_t *ls = arg;
	const char *key = th_strf("runnel:{%s}:out", run);
	int s = (int)rn_rcluster_key_slot(key, strlen(key));
	for (int i = 0; i < ls->n; i++)
		if (ls->lowest[i] == s)
			return 1;
	return 0;
}

static char *node_id(int i)
{
	redisContext *c = th_cluster_connect(T.cluster, i);
	redisReply *r = c ? redisCommand(c, "CLUSTER MYID") : NULL;
	char *id = r && r->type == REDIS_REPLY_STRING ? th_strf("%s", r->str) : NULL;
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return id;
}

typedef struct {
	const char *run;
	int node;
} took_over_t;

static int took_over(void *arg)
{
	took_over_t *tk = arg;
	return slot_primary(tk->run) == tk->node;
}

static void phase_reshard(void)
{
	low_slots_t ls = { .primary = slot_primary("rs-0") };
	TH_REQUIRE(ls.primary >= 0, "source primary");
	for (int s = 0; s < 16384 && ls.n < 300; s++)
		if (th_cluster_primary_of(T.cluster, s) == ls.primary)
			ls.lowest[ls.n++] = s;
	int to = -1;
	for (int s = 0; s < 16384 && to < 0; s += 101) {
		int p = th_cluster_primary_of(T.cluster, s);
		if (p >= 0 && p != ls.primary)
			to = p;
	}
	fo_run_t runs[NRUNS];
	submit("rs", in_low_slots, &ls, runs);
	char *from_id = node_id(ls.primary), *to_id = node_id(to);
	TH_REQUIRE(from_id && to_id, "node ids");
	int st = th_cluster_cli(T.cluster, th_strf("%s/reshard.log", T.dir), 120000, "--cluster", "reshard",
	                        th_strf("127.0.0.1:%d", T.cluster->node[ls.primary].port), "--cluster-from", from_id,
	                        "--cluster-to", to_id, "--cluster-slots", "300", "--cluster-yes", NULL);
	TH_CHECK(st == 0, "reshard of 300 slots under live runs: exit %d", st);
	TH_CHECK(slot_primary(runs[0].run) == to, "the runs' slots moved");
	/* Then the new owner's replica takes over, gracefully. */
	int rep = th_cluster_replica_of(T.cluster, to);
	redisContext *c = th_cluster_connect(T.cluster, rep);
	redisReply *r = c ? redisCommand(c, "CLUSTER FAILOVER") : NULL;
	TH_CHECK(r && r->type == REDIS_REPLY_STATUS, "CLUSTER FAILOVER on %d", rep);
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	took_over_t tk = { runs[0].run, rep };
	TH_CHECK(th_wait_until(took_over, &tk, 20000), "the replica took over");
	long lost = check_runs("reshard+failover", runs);
	TH_CHECK(lost == 0, "nothing lost in a reshard and a graceful failover (%ld)", lost);
}

static void phase_kill(void)
{
	int victim = slot_primary("fo-0");
	TH_REQUIRE(victim >= 0, "victim primary");
	fo_run_t runs[NRUNS];
	submit("fo", on_primary, &victim, runs);
	TH_REQUIRE(th_cluster_kill(T.cluster, victim) == 0, "SIGKILL primary %d", victim);
	int64_t t0 = th_now_ms();
	TH_CHECK(th_cluster_wait_ok(T.cluster, 30000), "a replica promoted");
	TH_NOTE("kill -9: cluster ok %lld ms after the kill", (long long)(th_now_ms() - t0));
	check_runs("kill -9", runs);
}

int main(void)
{
	th_init("cluster_failover");
	setenv("RUNNEL_TEST_REDIS", "cluster", 1);
	wt_setup(&T, NULL, 1);
	const char *env[] = { "RUNNEL_SLOTS=8", NULL };
	pid_t w = wt_worker(&T, "w1", env);
	wt_warmup(&T);
	phase_reshard();
	phase_kill();
	wt_stop_worker(w, 30000, "w1");
	wt_teardown(&T);
	return th_done();
}
