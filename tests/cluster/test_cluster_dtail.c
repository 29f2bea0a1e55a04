/*
 * tests/cluster/test_cluster_dtail.c - the dispatcher's tails on a real
 * Redis Cluster while the cluster changes under them.  The test plays the
 * worker (XADD with explicit ids and the SPUBLISH wake-up, as
 * worker/publish.c does on a cluster) and follows the run through
 * runnel-dispatcher with several callers:
 *   1. the primary holding the run's slot is SIGKILLed mid-output: its
 *      replica takes over; callers that were attached before, and one that
 *      resumes with events?after= during the failover, each get every line
 *      once, in order, the result last, and none is left waiting;
 *   2. the run's slot is migrated to another primary mid-output (IMPORTING/
 *      MIGRATING, MIGRATE of the key, SETSLOT NODE, as redis-cli --cluster
 *      reshard does slot by slot): the same, and a read and a cancel
 *      through the dispatcher while the slot is half moved are answered;
 *   3. a graceful CLUSTER FAILOVER of the run's primary mid-output: the
 *      same;
 *   4. a dispatcher started while its node is down finds out that it is a
 *      cluster node once it answers, and its tails work.
 * Lines are written with WAIT 1 before the kill so that none acknowledged
 * is lost to asynchronous replication (what the run loses then is the
 * worker's business, tests/cluster/test_cluster_failover.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rcluster.h"
#include "tests/dispatcher/dtest.h"

#define NCALLERS 3

static const char *const JSON_CT[] = { "Content-Type: application/json", NULL };

static dt_disp_t D;
static redisContext *C;
static th_cluster_t *CL;
static rn_rcluster_t *RC;

static char *line_of(int i, int terminal)
{
	if (terminal)
		return th_strf("{\"type\":\"result\",\"message\":\"done\",\"seq\":%d,\"ts\":1}", i);
	return th_strf("{\"type\":\"log\",\"level\":\"info\",\"message\":\"line %d\",\"seq\":%d,\"ts\":1}", i, i);
}

/* Writes line i as entry 1-i of the run's stream, retrying through a
 * failover; an id already there was written before a lost reply. */
static void write_line(const char *run, int i, int terminal, int wait_replica)
{
	const char *key = th_strf("runnel:{%s}:out", run);
	int64_t deadline = th_now_ms() + 40000;
	int ok = 0;

	while (!ok && th_now_ms() < deadline) {
		redisReply *r = rn_rcluster_command(RC, 0, "XADD %s 1-%d line %s", key, i, line_of(i, terminal));

		ok = r && (r->type == REDIS_REPLY_STRING || (r->type == REDIS_REPLY_ERROR && strstr(r->str, "equal or smaller")));
		if (r)
			freeReplyObject(r);
		/* No reply: rcluster waited out what it could (its own backoff). */
	}
	TH_REQUIRE(ok, "line %d of %s written: %s", i, run, rn_rcluster_errstr(RC));
	if (wait_replica) {
		redisReply *w = rn_rcluster_command(RC, 0, "WAIT 1 2000");

		if (w)
			freeReplyObject(w);
	}
	redisReply *p = rn_rcluster_command(RC, 0, "SPUBLISH runnel:{%s}:wake 1", run);

	if (p)
		freeReplyObject(p);
}

typedef struct {
	dt_stream_t *s;
	int n;
	size_t lines;
} many_t;

static int all_have(void *arg)
{
	many_t *a = arg;

	for (int i = 0; i < a->n; i++)
		if (!a->s[i].done && dt_stream_lines(&a->s[i]) < a->lines)
			return 0;
	return 1;
}

static int all_done(void *arg)
{
	many_t *a = arg;

	for (int i = 0; i < a->n; i++)
		if (!a->s[i].done)
			return 0;
	return 1;
}

/* The run's lines from first (1-based) on, each with its '\n'. */
static char *expected(const char *run, size_t first, size_t *total)
{
	char **lines = NULL;
	size_t n = 0;
	th_body_t b = { 0 };

	TH_REQUIRE(th_stream_read_all(C, th_strf("runnel:{%s}:out", run), &lines, NULL, &n) == 0, "read %s", run);
	for (size_t i = first - 1; i < n; i++) {
		th_body_sink(lines[i], 1, strlen(lines[i]), &b);
		th_body_sink((char *)"\n", 1, 1, &b);
	}
	*total = n;
	th_strv_free(lines, n);
	char *s = th_body_take(&b, NULL);
	return s ? s : th_strf("%s", "");
}

static void check_callers(const char *what, const char *run, dt_stream_t *s, int n, size_t resumed_from,
                          int resumed)
{
	size_t total = 0;
	char *all = expected(run, 1, &total);
	char *tail = expected(run, resumed_from + 1, &total);

	for (int i = 0; i < n; i++) {
		const char *want = (i == resumed) ? tail : all;

		TH_CHECK(s[i].done && s[i].rc == CURLE_OK && s[i].status == 200, "%s: caller %d ended (%d %ld)", what, i,
		         s[i].rc, s[i].status);
		TH_CHECK(s[i].rx.body && strcmp(s[i].rx.body, want) == 0,
		         "%s: caller %d got every line once, in order, the result last (%zu of %zu lines; see %s)", what,
		         i, dt_stream_lines(&s[i]), total, D.log);
	}
	free(all);
	free(tail);
}

static void phase_kill(dt_multi_t *m)
{
	const char *run = "dk-run";
	const char *key = "runnel:{dk-run}:out";
	int victim = th_cluster_primary_of(CL, (int)rn_rcluster_key_slot(key, strlen(key)));
	dt_stream_t s[NCALLERS + 1];
	many_t before = { s, NCALLERS, 50 }, every = { s, NCALLERS + 1, 0 };

	TH_REQUIRE(victim >= 0, "the run's primary");
	memset(s, 0, sizeof(s));
	write_line(run, 1, 0, 1);
	for (int i = 0; i < NCALLERS; i++)
		TH_REQUIRE(dt_stream_open(m, &s[i], th_strf("%s/v1/runs/%s/events", D.base, run), NULL, NULL) == 0);
	for (int i = 2; i <= 50; i++) {
		write_line(run, i, 0, 1);
		dt_multi_pump(m, 2);
	}
	TH_CHECK(dt_multi_until(m, all_have, &before, 15000), "callers have the first 50 lines");
	TH_REQUIRE(th_cluster_kill(CL, victim) == 0, "SIGKILL primary %d", victim);
	int64_t t0 = th_now_ms();
	for (int i = 51; i <= 150; i++) {
		write_line(run, i, 0, 0);
		if (i == 51)
			TH_NOTE("kill -9: the first write after the kill landed %lld ms later",
			        (long long)(th_now_ms() - t0));
		if (i == 60) /* resumes from line 40 while the cluster settles */
			TH_REQUIRE(dt_stream_open(m, &s[NCALLERS], th_strf("%s/v1/runs/%s/events?after=1-40", D.base, run),
			                          NULL, NULL) == 0);
		dt_multi_pump(m, 2);
	}
	write_line(run, 151, 1, 0);
	TH_CHECK(dt_multi_until(m, all_done, &every, 30000), "every caller's stream ended after the failover (see %s)",
	         D.log);
	check_callers("kill -9", run, s, NCALLERS + 1, 40, NCALLERS);
	for (int i = 0; i <= NCALLERS; i++)
		dt_stream_close(m, &s[i]);
	TH_CHECK(th_cluster_wait_ok(CL, 30000), "the cluster is ok again");
}

static char *node_id(int i)
{
	redisContext *c = th_cluster_connect(CL, i);
	redisReply *r = c ? redisCommand(c, "CLUSTER MYID") : NULL;
	char *id = r && r->type == REDIS_REPLY_STRING ? th_strf("%s", r->str) : NULL;

	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return id;
}

/* Runs a command on node i, its arguments split on spaces ("" is an
 * empty one); 1 when it was not an error. */
static int node_cmd(int i, const char *cmd)
{
	redisContext *c = th_cluster_connect(CL, i);
	char *copy = th_strf("%s", cmd), *save = NULL;
	const char *argv[16];
	int argc = 0;

	for (char *w = strtok_r(copy, " ", &save); w && argc < 16; w = strtok_r(NULL, " ", &save))
		argv[argc++] = strcmp(w, "\"\"") == 0 ? "" : w;
	redisReply *r = c ? redisCommandArgv(c, argc, argv, NULL) : NULL;
	int ok = r && r->type != REDIS_REPLY_ERROR;

	if (!ok)
		fprintf(stderr, "# node %d: %s: %s\n", i, cmd, r ? r->str : "no connection");
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return ok;
}

static int is_primary(int i)
{
	redisContext *c = th_cluster_connect(CL, i);
	redisReply *r = c ? redisCommand(c, "ROLE") : NULL;
	int p = r && r->type == REDIS_REPLY_ARRAY && strcmp(r->element[0]->str, "master") == 0;

	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return p;
}

static void phase_reshard(dt_multi_t *m)
{
	const char *run = "dr-run";
	const char *key = "runnel:{dr-run}:out";
	int slot = (int)rn_rcluster_key_slot(key, strlen(key));
	int src = th_cluster_primary_of(CL, slot), dst = -1;
	dt_stream_t s[NCALLERS];
	many_t first = { s, NCALLERS, 40 }, every = { s, NCALLERS, 0 };

	for (int i = 0; i < CL->n && dst < 0; i++)
		if (i != src && is_primary(i))
			dst = i;
	TH_REQUIRE(src >= 0 && dst >= 0, "source and target primaries");
	char *src_id = node_id(src), *dst_id = node_id(dst);

	TH_REQUIRE(src_id && dst_id, "node ids");
	memset(s, 0, sizeof(s));
	redisReply *hs = rn_rcluster_command(RC, 0, "HSET runnel:{%s}:state status running enqueued_at 1", run);
	TH_REQUIRE(hs && hs->type == REDIS_REPLY_INTEGER, "state hash");
	freeReplyObject(hs);
	write_line(run, 1, 0, 0);
	for (int i = 0; i < NCALLERS; i++)
		TH_REQUIRE(dt_stream_open(m, &s[i], th_strf("%s/v1/runs/%s/events", D.base, run), NULL, NULL) == 0);
	for (int i = 2; i <= 40; i++) {
		write_line(run, i, 0, 0);
		dt_multi_pump(m, 2);
	}
	TH_CHECK(dt_multi_until(m, all_have, &first, 15000), "callers have the first 40 lines");
	TH_REQUIRE(node_cmd(dst, th_strf("CLUSTER SETSLOT %d IMPORTING %s", slot, src_id)), "importing");
	TH_REQUIRE(node_cmd(src, th_strf("CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id)), "migrating");
	for (int i = 41; i <= 60; i++) { /* the key is still on the source */
		write_line(run, i, 0, 0);
		dt_multi_pump(m, 2);
	}
	TH_REQUIRE(node_cmd(src, th_strf("MIGRATE 127.0.0.1 %d \"\" 0 5000 KEYS %s runnel:{%s}:state", CL->node[dst].port, key, run)),
	           "MIGRATE");
	/* The request router: a read of a moved key follows ASK; the cancel
	 * script (state, out and a ctl that does not exist yet) is refused
	 * with TRYAGAIN while the slot is half moved, and waits it out. */
	dt_resp_t r;
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/v1/runs/%s", D.base, run), NULL, NULL, 0, 10000) == 0 &&
	                 r.status == 200 && r.body && strstr(r.body, "\"running\""),
	         "GET during the migration: %ld %s", r.status, r.body ? r.body : "");
	dt_resp_free(&r);
	dt_stream_t cx;
	memset(&cx, 0, sizeof(cx));
	TH_REQUIRE(dt_stream_open(m, &cx, th_strf("%s/v1/runs/%s/cancel", D.base, run), JSON_CT, "{}") == 0);
	for (int i = 61; i <= 80; i++) { /* on the target: ASK */
		write_line(run, i, 0, 0);
		dt_multi_pump(m, 2);
	}
	TH_CHECK(!cx.done, "the cancel waits while the slot is half moved");
	for (int i = 0; i < CL->n; i++)
		if (is_primary(i))
			node_cmd(i, th_strf("CLUSTER SETSLOT %d NODE %s", slot, dst_id));
	for (int i = 81; i <= 120; i++) { /* moved: MOVED, then the new map */
		write_line(run, i, 0, 0);
		dt_multi_pump(m, 2);
	}
	many_t cxm = { &cx, 1, 0 };
	TH_CHECK(dt_multi_until(m, all_done, &cxm, 25000) && cx.status == 202,
	         "the cancel is written once the slot has moved: %ld %s", cx.status, cx.rx.body ? cx.rx.body : "");
	dt_stream_close(m, &cx);
	TH_CHECK(th_redis_int(C, -1, "XLEN runnel:{%s}:ctl", run) == 1, "one cancel message on the new primary");
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/v1/runs/%s", D.base, run), NULL, NULL, 0, 10000) == 0 &&
	                 r.status == 200 && r.body && strstr(r.body, "\"running\""),
	         "GET after the move (MOVED): %ld", r.status);
	dt_resp_free(&r);
	write_line(run, 121, 1, 0);
	TH_CHECK(dt_multi_until(m, all_done, &every, 30000), "every caller's stream ended after the reshard (see %s)",
	         D.log);
	check_callers("reshard", run, s, NCALLERS, 0, -1);
	for (int i = 0; i < NCALLERS; i++)
		dt_stream_close(m, &s[i]);
	TH_CHECK(th_cluster_primary_of(CL, slot) == dst, "the slot moved");
}

typedef struct {
	int slot, node;
} owner_t;

static int owned_by(void *arg)
{
	owner_t *o = arg;

	return th_cluster_primary_of(CL, o->slot) == o->node;
}

/* A graceful CLUSTER FAILOVER of the run's primary mid-output. */
static void phase_graceful(dt_multi_t *m)
{
	const char *run = "dg-run";
	const char *key = "runnel:{dg-run}:out";
	int slot = (int)rn_rcluster_key_slot(key, strlen(key));
	int primary = th_cluster_primary_of(CL, slot);
	int replica = primary >= 0 ? th_cluster_replica_of(CL, primary) : -1;
	dt_stream_t s[NCALLERS];
	many_t first = { s, NCALLERS, 30 }, every = { s, NCALLERS, 0 };

	TH_REQUIRE(replica >= 0, "the run's primary and its replica");
	memset(s, 0, sizeof(s));
	write_line(run, 1, 0, 1);
	for (int i = 0; i < NCALLERS; i++)
		TH_REQUIRE(dt_stream_open(m, &s[i], th_strf("%s/v1/runs/%s/events", D.base, run), NULL, NULL) == 0);
	for (int i = 2; i <= 30; i++) {
		write_line(run, i, 0, 1);
		dt_multi_pump(m, 2);
	}
	TH_CHECK(dt_multi_until(m, all_have, &first, 15000), "callers have the first 30 lines");
	TH_REQUIRE(node_cmd(replica, "CLUSTER FAILOVER"), "CLUSTER FAILOVER on node %d", replica);
	owner_t o = { slot, replica };
	for (int i = 31; i <= 90; i++) {
		write_line(run, i, 0, 0);
		dt_multi_pump(m, 2);
	}
	TH_CHECK(th_wait_until(owned_by, &o, 20000), "the replica took over");
	write_line(run, 91, 1, 0);
	TH_CHECK(dt_multi_until(m, all_done, &every, 30000),
	         "every caller's stream ended after the graceful failover (see %s)", D.log);
	check_callers("CLUSTER FAILOVER", run, s, NCALLERS, 0, -1);
	for (int i = 0; i < NCALLERS; i++)
		dt_stream_close(m, &s[i]);
	TH_CHECK(th_cluster_wait_ok(CL, 30000), "the cluster is ok again");
}

/* A dispatcher started while its node does not answer yet finds out that
 * it is a cluster node once it does, tails included. */
static void phase_late_node(dt_multi_t *m, th_kafka_t *k)
{
	const char *run = "dl-run";
	int rep = -1;
	dt_disp_t d2;
	dt_stream_t s[2];
	many_t every = { s, 2, 0 }, first = { s, 2, 10 };

	for (int i = 0; i < CL->n && rep < 0; i++)
		if (CL->node[i].pid > 0 && !is_primary(i))
			rep = i;
	TH_REQUIRE(rep >= 0, "a replica");
	TH_REQUIRE(th_cluster_kill(CL, rep) == 0, "SIGKILL replica %d", rep);
	TH_REQUIRE(dt_disp_start(&d2, &CL->node[rep], k, NULL) == 0, "a dispatcher whose node is down");
	TH_REQUIRE(th_redis_restart(&CL->node[rep]) == 0, "the replica back");
	TH_CHECK(th_cluster_wait_ok(CL, 30000), "the cluster is ok again");
	TH_CHECK(dt_wait_ready(&d2, 200, 20000), "ready once its node answers (see %s)", d2.log);
	memset(s, 0, sizeof(s));
	write_line(run, 1, 0, 0);
	for (int i = 0; i < 2; i++)
		TH_REQUIRE(dt_stream_open(m, &s[i], th_strf("%s/v1/runs/%s/events", d2.base, run), NULL, NULL) == 0);
	for (int i = 2; i <= 10; i++) {
		write_line(run, i, 0, 0);
		dt_multi_pump(m, 2);
	}
	TH_CHECK(dt_multi_until(m, all_have, &first, 15000), "callers have the first 10 lines");
	write_line(run, 11, 1, 0);
	TH_CHECK(dt_multi_until(m, all_done, &every, 15000), "both streams ended (see %s)", d2.log);
	check_callers("late node", run, s, 2, 0, -1);
	for (int i = 0; i < 2; i++)
		dt_stream_close(m, &s[i]);
	TH_CHECK(th_file_contains(d2.log, "the tails' Redis is a cluster"), "the tails switched to the cluster's way");
	TH_CHECK(dt_disp_stop(&d2), "clean exit (see %s)", d2.log);
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	dt_multi_t m;
	dt_resp_t r;

	setenv("RUNNEL_TEST_REDIS", "cluster", 1);
	dt_servers_start("cluster_dtail", &red, &k, 1, &C);
	CL = dt_cluster();
	TH_REQUIRE(CL, "a cluster");
	RC = th_rc_for(C);
	TH_REQUIRE(dt_disp_start(&D, &red, &k, NULL) == 0);
	TH_REQUIRE(dt_multi_init(&m) == 0);
	phase_reshard(&m);
	phase_graceful(&m);
	phase_kill(&m);
	phase_late_node(&m, &k);
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/metrics", D.base), NULL, NULL, 0, 5000) == 0 && r.status == 200);
	TH_CHECK(r.body && !strstr(r.body, "runnel_dispatcher_tail_wakeups_total 0\n"), "the tails were woken");
	dt_resp_free(&r);
	dt_multi_cleanup(&m);
	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	dt_servers_stop(C, &k);
	return th_done();
}
