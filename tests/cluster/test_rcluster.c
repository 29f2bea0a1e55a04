/*
 * tests/cluster/test_rcluster.c - common/rcluster on a real Redis Cluster
 * (3 primaries + 3 replicas, a password) and on a standalone server:
 * detection, routing by slot, ASK during a slot migration, MOVED after it,
 * redis-cli --cluster reshard under load, a graceful CLUSTER FAILOVER, a
 * SIGKILLed primary, and the configurations refused at open.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/rcluster.h"
#include "tests/support/harness.h"

#define PASS "cluster-pass-7f3a"

static th_cluster_t cl;

static rn_rcluster_t *open_url(const char *url, char *err, size_t errsz)
{
	rn_redis_url_t u;
	if (rn_redis_url_parse(url, &u, err, errsz) < 0)
		return NULL;
	rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;
	o.retry_budget_ms = 15000;
	return rn_rcluster_open(&u, &o, err, errsz);
}

static int is_status(const redisReply *r, const char *s)
{
	return r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, s) == 0;
}

/* SET key value through rc: 1 when the reply was OK. */
static int set_ok(rn_rcluster_t *rc, const char *key, const char *value)
{
	redisReply *r = rn_rcluster_command(rc, 0, "SET %s %s", key, value);
	int ok = is_status(r, "OK");
	if (!ok)
		fprintf(stderr, "# SET %s: %s\n", key,
		        r ? (r->type == REDIS_REPLY_ERROR ? r->str : "odd reply") : rn_rcluster_errstr(rc));
	if (r)
		freeReplyObject(r);
	return ok;
}

/* GET key through rc equals want. */
static int get_is(rn_rcluster_t *rc, int flags, const char *key, const char *want)
{
	redisReply *r = rn_rcluster_command(rc, flags, "GET %s", key);
	int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, want) == 0;
	if (!ok)
		fprintf(stderr, "# GET %s: %s\n", key,
		        r ? (r->type == REDIS_REPLY_STRING ? r->str : r->type == REDIS_REPLY_ERROR ? r->str
		                                                                                   : "nil")
		          : rn_rcluster_errstr(rc));
	if (r)
		freeReplyObject(r);
	return ok;
}

/* A pipeline of n SETs then n GETs over keys of every slot: every reply in
 * order.  1 when all were right. */
static int pipeline_ok(rn_rcluster_t *rc, const char *tag, int n)
{
	int bad = 0;
	for (int i = 0; i < n; i++) {
		const char *k = th_strf("%s:%d", tag, i), *v = th_strf("%d", i * 3);
		const char *argv[] = { "SET", k, v };
		if (rn_rcluster_append_argv(rc, 0, 3, argv, NULL) < 0)
			bad++;
	}
	for (int i = 0; i < n; i++) {
		const char *argv[] = { "GET", th_strf("%s:%d", tag, i) };
		if (rn_rcluster_append_argv(rc, RN_RCLUSTER_IDEMPOTENT, 2, argv, NULL) < 0)
			bad++;
	}
	for (int i = 0; i < 2 * n; i++) {
		redisReply *r = NULL;
		int rc2 = rn_rcluster_get_reply(rc, &r);
		int ok = rc2 == 0 &&
		        (i < n ? is_status(r, "OK")
		               : r->type == REDIS_REPLY_STRING && strcmp(r->str, th_strf("%d", (i - n) * 3)) == 0);
		if (!ok && bad++ < 3)
			fprintf(stderr, "# pipeline reply %d: %s\n", i,
			        rc2 < 0 ? rn_rcluster_errstr(rc) : r->type == REDIS_REPLY_ERROR ? r->str
			                                                                        : "wrong");
		if (r)
			freeReplyObject(r);
	}
	redisReply *extra = NULL;
	if (rn_rcluster_get_reply(rc, &extra) == 0)
		bad++;
	return bad == 0;
}

static char *node_id(int i)
{
	redisContext *c = th_cluster_connect(&cl, i);
	if (!c)
		return NULL;
	redisReply *r = redisCommand(c, "CLUSTER MYID");
	char *id = r && r->type == REDIS_REPLY_STRING ? th_strf("%s", r->str) : NULL;
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return id;
}

/* Runs a command on node i directly; 1 when it was not an error. */
static int node_cmd(int i, const char *fmt, const char *a, const char *b, const char *c3)
{
	redisContext *c = th_cluster_connect(&cl, i);
	if (!c)
		return 0;
	redisReply *r = redisCommand(c, fmt, a, b, c3);
	int ok = r && r->type != REDIS_REPLY_ERROR;
	if (!ok)
		fprintf(stderr, "# node %d: %s: %s\n", i, fmt, r ? r->str : c->errstr);
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return ok;
}

static void test_detect(void)
{
	char err[256];
	for (int i = 0; i < cl.n; i++) {
		/* Any node will do, a replica too. */
		rn_rcluster_t *rc = open_url(cl.node[i].url, err, sizeof(err));
		TH_CHECK(rc, "open node %d: %s", i, rc ? "" : err);
		if (!rc)
			continue;
		TH_CHECK(rn_rcluster_is_cluster(rc) == 1, "node %d: cluster mode detected", i);
		rn_rcluster_free(rc);
	}
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, NULL) == 0, "standalone redis");
	rn_rcluster_t *rc = open_url(r.url, err, sizeof(err));
	TH_REQUIRE(rc, "open standalone: %s", err);
	TH_CHECK(rn_rcluster_is_cluster(rc) == 0, "standalone detected");
	TH_CHECK(set_ok(rc, "foo", "1") && set_ok(rc, "bar", "2"), "standalone SET on keys of any slot");
	const char *del[] = { "DEL", "foo", "bar" };
	redisReply *d = rn_rcluster_argv(rc, 0, 3, del, NULL);
	TH_CHECK(d && d->type == REDIS_REPLY_INTEGER && d->integer == 2, "standalone multi-key DEL as before");
	if (d)
		freeReplyObject(d);
	TH_CHECK(pipeline_ok(rc, "sp", 50), "standalone pipeline");
	/* Standalone: a lost server is reported at once (the caller's own
	 * loop decides), and the next call after it is back reconnects. */
	th_redis_kill(&r);
	redisReply *x = rn_rcluster_command(rc, 0, "PING");
	TH_CHECK(!x, "standalone down: no reply");
	TH_CHECK(strstr(rn_rcluster_errstr(rc), "connection lost") || strstr(rn_rcluster_errstr(rc), "refused"),
	         "standalone down: %s", rn_rcluster_errstr(rc));
	if (x)
		freeReplyObject(x);
	TH_REQUIRE(th_redis_restart(&r) == 0, "standalone restart");
	TH_CHECK(set_ok(rc, "back", "1"), "standalone: reconnects on the next call");
	rn_rcluster_free(rc);
	th_redis_stop(&r);
}

static void test_routing(rn_rcluster_t *rc)
{
	/* Our slot function against the server's. */
	redisContext *c = th_cluster_connect(&cl, 0);
	TH_REQUIRE(c, "connect node 0");
	for (int i = 0; i < 300; i++) {
		char key[64];
		snprintf(key, sizeof(key), i % 3 ? "k:%d:%x" : "runnel:{run-%d}:out%x", i, i * 2654435761u);
		redisReply *r = redisCommand(c, "CLUSTER KEYSLOT %s", key);
		TH_CHECK(r && r->type == REDIS_REPLY_INTEGER &&
		                 r->integer == (long long)rn_rcluster_key_slot(key, strlen(key)),
		         "slot of %s", key);
		if (r)
			freeReplyObject(r);
	}
	redisFree(c);

	/* 600 keys over all slots land on all three primaries. */
	for (int i = 0; i < 600; i++) {
		char key[32], val[32];
		snprintf(key, sizeof(key), "spread:%d", i);
		snprintf(val, sizeof(val), "v%d", i);
		if (!set_ok(rc, key, val)) {
			TH_CHECK(0, "SET spread:%d", i);
			break;
		}
	}
	long long total = 0;
	int primaries = 0;
	for (int i = 0; i < cl.n; i++) {
		redisContext *n = th_cluster_connect(&cl, i);
		if (!n)
			continue;
		redisReply *role = redisCommand(n, "ROLE");
		int primary = role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
		        strcmp(role->element[0]->str, "master") == 0;
		if (role)
			freeReplyObject(role);
		if (primary) {
			long long k = th_redis_int(n, -1, "DBSIZE");
			TH_CHECK(k > 100, "primary %d holds %lld keys", i, k);
			total += k;
			primaries++;
		}
		redisFree(n);
	}
	TH_CHECK(primaries == 3 && total == 600, "3 primaries hold the 600 keys: %d, %lld", primaries, total);
	for (int i = 0; i < 600; i += 37) {
		char key[32], val[32];
		snprintf(key, sizeof(key), "spread:%d", i);
		snprintf(val, sizeof(val), "v%d", i);
		TH_CHECK(get_is(rc, 0, key, val), "GET spread:%d", i);
	}

	/* A script on one run's keys runs; one across slots is refused before
	 * it is sent, with the reason. */
	const char *ev[] = { "EVAL", "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])",
		             "2", "runnel:{r1}:state", "runnel:{r1}:n", "x" };
	redisReply *r = rn_rcluster_argv(rc, 0, 6, ev, NULL);
	TH_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1, "EVAL on one tag");
	if (r)
		freeReplyObject(r);
	const char *evx[] = { "EVAL", "return 1", "2", "runnel:{r1}:state", "runnel:leases" };
	r = rn_rcluster_argv(rc, 0, 5, evx, NULL);
	TH_CHECK(!r && strstr(rn_rcluster_errstr(rc), "CROSSSLOT"), "cross-slot EVAL refused: %s",
	         rn_rcluster_errstr(rc));
	if (r)
		freeReplyObject(r);
	r = rn_rcluster_command(rc, 0, "MGET %s %s", "foo", "bar");
	TH_CHECK(!r && strstr(rn_rcluster_errstr(rc), "CROSSSLOT"), "cross-slot MGET refused");
	if (r)
		freeReplyObject(r);
	/* Streams: XADD then XREAD routed to the stream's node. */
	r = rn_rcluster_command(rc, 0, "XADD %s * line %s", "runnel:{r2}:out", "hello");
	TH_CHECK(r && r->type == REDIS_REPLY_STRING, "XADD");
	if (r)
		freeReplyObject(r);
	r = rn_rcluster_command(rc, 0, "XREAD COUNT 10 STREAMS %s %s", "runnel:{r2}:out", "0-0");
	TH_CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1, "XREAD on its node");
	if (r)
		freeReplyObject(r);
	/* WAIT goes where the last write went. */
	TH_CHECK(set_ok(rc, "waited", "1"), "SET before WAIT");
	r = rn_rcluster_command(rc, 0, "WAIT 1 2000");
	TH_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1, "WAIT counts the slot's replica");
	if (r)
		freeReplyObject(r);
	TH_CHECK(pipeline_ok(rc, "pipe", 200), "pipeline over all primaries");
	rn_redis_url_t su;
	char serr[128];
	TH_CHECK(rn_rcluster_slot_url(rc, 12182, 0, &su, serr, sizeof(serr)) == 0 &&
	                 su.port == cl.node[th_cluster_primary_of(&cl, 12182)].port && strcmp(su.password, PASS) == 0,
	         "slot_url: the slot's primary, with the password");
	/* Every primary, once. */
	const char *dbsize[] = { "DBSIZE" };
	int replied = rn_rcluster_each_primary(rc, 1, dbsize, NULL, NULL, NULL);
	TH_CHECK(replied == 3, "each_primary reaches 3 primaries: %d", replied);
}

/* A slot half-migrated: ASK from the source, ASKING on the target; then
 * the slot moved: MOVED, and the map follows. */
static void test_ask_moved(rn_rcluster_t *rc)
{
	const char *key = "runnel:{ask-run}:state";
	int slot = (int)rn_rcluster_key_slot(key, strlen(key));
	int src = th_cluster_primary_of(&cl, slot);
	int dst = -1;
	for (int s = 0; s < 16384 && dst < 0; s += 97) {
		int p = th_cluster_primary_of(&cl, s);
		if (p >= 0 && p != src)
			dst = p;
	}
	TH_REQUIRE(src >= 0 && dst >= 0, "source and target primaries");
	char *src_id = node_id(src), *dst_id = node_id(dst);
	TH_REQUIRE(src_id && dst_id, "node ids");
	char slotstr[16];
	snprintf(slotstr, sizeof(slotstr), "%d", slot);
	TH_REQUIRE(node_cmd(dst, "CLUSTER SETSLOT %s IMPORTING %s", slotstr, src_id, NULL), "importing");
	TH_REQUIRE(node_cmd(src, "CLUSTER SETSLOT %s MIGRATING %s", slotstr, dst_id, NULL), "migrating");

	rn_rcluster_stats_t before, after;
	rn_rcluster_stats(rc, &before);
	/* The key is not on the source: it answers ASK; the write lands on
	 * the target. */
	TH_CHECK(set_ok(rc, key, "asked"), "SET during migration");
	rn_rcluster_stats(rc, &after);
	TH_CHECK(after.ask == before.ask + 1, "one ASK followed (%lu)", after.ask - before.ask);
	redisContext *d = th_cluster_connect(&cl, dst);
	TH_REQUIRE(d, "connect target");
	redisReply *r = redisCommand(d, "ASKING");
	if (r)
		freeReplyObject(r);
	r = redisCommand(d, "GET %s", key);
	TH_CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "asked") == 0, "the value is on the target");
	if (r)
		freeReplyObject(r);
	redisFree(d);
	/* The map still says source: ASK does not move the slot. */
	TH_CHECK(strstr(rn_rcluster_node_of(rc, (unsigned)slot), th_strf(":%d", cl.node[src].port)),
	         "ASK leaves the map alone");

	/* Finish the migration on both, then tell everyone. */
	for (int i = 0; i < cl.n; i++) {
		if (cl.node[i].pid <= 0)
			continue;
		redisContext *n = th_cluster_connect(&cl, i);
		redisReply *role = n ? redisCommand(n, "ROLE") : NULL;
		int primary = role && role->type == REDIS_REPLY_ARRAY && strcmp(role->element[0]->str, "master") == 0;
		if (role)
			freeReplyObject(role);
		if (n)
			redisFree(n);
		if (primary)
			node_cmd(i, "CLUSTER SETSLOT %s NODE %s", slotstr, dst_id, NULL);
	}
	TH_CHECK(th_cluster_wait_ok(&cl, 20000), "cluster settles after the move");
	rn_rcluster_stats(rc, &before);
	TH_CHECK(get_is(rc, 0, key, "asked"), "GET after the move");
	rn_rcluster_stats(rc, &after);
	TH_CHECK(after.moved == before.moved + 1, "one MOVED followed (%lu)", after.moved - before.moved);
	TH_CHECK(strstr(rn_rcluster_node_of(rc, (unsigned)slot), th_strf(":%d", cl.node[dst].port)),
	         "the map follows MOVED: %s", rn_rcluster_node_of(rc, (unsigned)slot));
	TH_CHECK(get_is(rc, 0, key, "asked"), "GET again");
	rn_rcluster_stats(rc, &before);
	TH_CHECK(before.moved == after.moved, "no second MOVED");
}

/* redis-cli --cluster reshard moves 500 slots (and their keys) while
 * this thread keeps writing and reading: nothing fails, nothing is lost. */
static void test_reshard(rn_rcluster_t *rc)
{
	int from = th_cluster_primary_of(&cl, 0), to = -1;
	for (int s = 0; s < 16384 && to < 0; s += 97) {
		int p = th_cluster_primary_of(&cl, s);
		if (p >= 0 && p != from)
			to = p;
	}
	char *from_id = node_id(from), *to_id = node_id(to);
	TH_REQUIRE(from_id && to_id, "reshard ids");
	/* 400 keys in the first 500 slots (slot 0's owner gives those up
	 * first), so that keys move while they are counted. */
	static char keys[400][32];
	for (int i = 0, n = 0; n < 400; i++) {
		snprintf(keys[n], sizeof(keys[n]), "rs:%d", i);
		if (rn_rcluster_key_slot(keys[n], strlen(keys[n])) < 500)
			n++;
	}
	for (int i = 0; i < 400; i++)
		TH_CHECK(set_ok(rc, keys[i], "0"), "seed %s", keys[i]);
	const char *log = th_strf("%s/reshard.log", th_tmpdir());
	const char *env[] = { th_strf("REDISCLI_AUTH=%s", PASS), NULL };
	char *argv[] = { "redis-cli",
		         "--cluster",
		         "reshard",
		         th_strf("127.0.0.1:%d", cl.node[from].port),
		         "--cluster-from",
		         from_id,
		         "--cluster-to",
		         to_id,
		         "--cluster-slots",
		         "500",
		         "--cluster-yes",
		         "--cluster-pipeline",
		         "5",
		         NULL };
	pid_t pid = th_spawn(argv, env, log);
	TH_REQUIRE(pid > 0, "spawn reshard");
	rn_rcluster_stats_t before, after;
	rn_rcluster_stats(rc, &before);
	long rounds = 0, failed = 0;
	int st = -1;
	for (;;) {
		for (int i = 0; i < 400; i++) {
			const char *key = keys[i];
			redisReply *r = rn_rcluster_command(rc, 0, "INCR %s", key);
			if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != rounds + 1) {
				if (failed++ < 5)
					fprintf(stderr, "# INCR %s in round %ld: %s\n", key, rounds,
					        r ? (r->type == REDIS_REPLY_ERROR ? r->str : "wrong count")
					          : rn_rcluster_errstr(rc));
			}
			if (r)
				freeReplyObject(r);
		}
		rounds++;
		if (th_wait_exit(pid, 0, &st) == 0)
			break;
		if (rounds > 100000)
			break;
	}
	rn_rcluster_stats(rc, &after);
	TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reshard exited %d", st);
	TH_CHECK(failed == 0, "no command failed during the reshard (%ld of %ld)", failed, rounds * 400);
	fprintf(stderr, "# reshard: %ld rounds of 400 INCR, %lu MOVED, %lu ASK, %lu retries, %lu map reads\n",
	        rounds, after.moved - before.moved, after.ask - before.ask, after.retries - before.retries,
	        after.refreshes - before.refreshes);
	TH_CHECK(after.moved > before.moved, "slots moved under us were followed");
	int owner = th_cluster_primary_of(&cl, 0);
	TH_CHECK(owner == to, "slot 0 moved: %d (want %d)", owner, to);
	for (int i = 0; i < 400; i++) {
		char want[32];
		snprintf(want, sizeof(want), "%ld", rounds);
		TH_CHECK(get_is(rc, 0, keys[i], want), "%s counted every INCR", keys[i]);
	}
}

/* A replica takes over gracefully (CLUSTER FAILOVER): the old primary
 * answers MOVED and the router follows. */
static void test_graceful_failover(rn_rcluster_t *rc)
{
	char err[256];
	rn_rcluster_t *behind = open_url(cl.url, err, sizeof(err));
	TH_REQUIRE(behind, "second handle: %s", err);
	const char *key = "runnel:{gf}:state";
	int slot = (int)rn_rcluster_key_slot(key, strlen(key));
	TH_REQUIRE(set_ok(rc, key, "before"), "SET before failover");
	int p = th_cluster_primary_of(&cl, slot);
	int rep = th_cluster_replica_of(&cl, p);
	TH_REQUIRE(p >= 0 && rep >= 0, "primary %d and its replica %d", p, rep);
	TH_REQUIRE(node_cmd(rep, "CLUSTER FAILOVER", NULL, NULL, NULL), "CLUSTER FAILOVER");
	/* Commands while it happens. */
	long failed = 0;
	int64_t until = th_now_ms() + 20000;
	while (th_cluster_primary_of(&cl, slot) != rep && th_now_ms() < until) {
		if (!get_is(rc, 0, key, "before"))
			failed++;
	}
	TH_CHECK(th_cluster_primary_of(&cl, slot) == rep, "the replica serves the slot");
	TH_CHECK(failed == 0, "no read failed during the failover (%ld)", failed);
	/* The old primary resyncs as a replica: slow on a loaded machine.
	 * Without a settled cluster the rest would only pile up waits. */
	TH_REQUIRE(th_cluster_wait_ok(&cl, 60000), "cluster ok after the failover");
	TH_CHECK(set_ok(rc, key, "after"), "SET after failover");
	TH_CHECK(strstr(rn_rcluster_node_of(rc, (unsigned)slot), th_strf(":%d", cl.node[rep].port)),
	         "routed to the new primary: %s", rn_rcluster_node_of(rc, (unsigned)slot));
	/* A handle whose map predates the failover: its pipeline meets MOVED
	 * on the old primary's slots and still answers every command. */
	rn_rcluster_stats_t st;
	TH_CHECK(pipeline_ok(behind, "behind", 300), "pipeline with a map from before the failover");
	rn_rcluster_stats(behind, &st);
	TH_CHECK(st.moved > 0, "the stale pipeline followed MOVED (%lu)", st.moved);
	rn_rcluster_free(behind);
}

/* SIGKILL the primary: the call in flight fails ("connection lost", it may
 * have run), the next ones wait out the failover and land on the promoted
 * replica; an idempotent read retries by itself. */
static void test_kill_primary(rn_rcluster_t *rc)
{
	const char *key = "runnel:{kill}:state";
	int slot = (int)rn_rcluster_key_slot(key, strlen(key));
	TH_REQUIRE(set_ok(rc, key, "kept"), "SET before the kill");
	redisReply *w = rn_rcluster_command(rc, 0, "WAIT 1 5000");
	TH_CHECK(w && w->type == REDIS_REPLY_INTEGER && w->integer == 1, "replicated before the kill");
	if (w)
		freeReplyObject(w);
	int p = th_cluster_primary_of(&cl, slot);
	int rep = th_cluster_replica_of(&cl, p);
	TH_REQUIRE(p >= 0 && rep >= 0, "primary %d and replica %d", p, rep);
	TH_REQUIRE(th_cluster_kill(&cl, p) == 0, "SIGKILL primary %d", p);
	int64_t t0 = th_now_ms();
	/* The existing connection breaks: a non-idempotent command is not
	 * retried blindly. */
	redisReply *r = rn_rcluster_command(rc, 0, "INCR %s", "runnel:{kill}:n");
	TH_CHECK(!r && strstr(rn_rcluster_errstr(rc), "connection lost"),
	         "INCR in flight: %s", r ? "a reply" : rn_rcluster_errstr(rc));
	if (r)
		freeReplyObject(r);
	/* A keyless command does not stick to the dead node it went to last. */
	r = rn_rcluster_command(rc, RN_RCLUSTER_IDEMPOTENT, "PING");
	TH_CHECK(is_status(r, "PONG"), "PING after the kill: %s", r ? "odd reply" : rn_rcluster_errstr(rc));
	if (r)
		freeReplyObject(r);
	/* An idempotent read waits out the failover. */
	TH_CHECK(get_is(rc, RN_RCLUSTER_IDEMPOTENT, key, "kept"), "GET after failover");
	int64_t took = th_now_ms() - t0;
	fprintf(stderr, "# kill -9 primary: routing back after %lld ms\n", (long long)took);
	TH_CHECK(strstr(rn_rcluster_node_of(rc, (unsigned)slot), th_strf(":%d", cl.node[rep].port)),
	         "routed to the promoted replica: %s", rn_rcluster_node_of(rc, (unsigned)slot));
	TH_CHECK(set_ok(rc, key, "written-after"), "writes go on");
	TH_CHECK(th_cluster_wait_ok(&cl, 20000), "cluster ok with 5 nodes");
	/* Slots of other primaries were never affected. */
	for (int i = 0; i < 600; i += 61) {
		char k[32], v[32];
		snprintf(k, sizeof(k), "spread:%d", i);
		snprintf(v, sizeof(v), "v%d", i);
		TH_CHECK(get_is(rc, 0, k, v), "spread:%d survived", i);
	}
}

/* A TCP server that answers anything with an HTTP error, like a
 * load balancer's health port named by mistake. */
static void *http_once(void *arg)
{
	int fd = *(int *)arg;
	for (int n = 0; n < 2; n++) {
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			break;
		char buf[512];
		(void)!read(c, buf, sizeof(buf));
		const char resp[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
		th_send_all(c, resp, sizeof(resp) - 1);
		close(c);
	}
	return NULL;
}

static void test_bad_config(void)
{
	char err[256];
	/* Wrong password, and none, on a cluster node: said at open, and the
	 * password never in the message. */
	rn_rcluster_t *rc = open_url(th_strf("redis://:wrong-secret-99@127.0.0.1:%d", cl.node[1].port), err, sizeof(err));
	TH_CHECK(!rc && strcmp(err, "authentication failed") == 0, "wrong password: %s", rc ? "opened" : err);
	TH_CHECK(!strstr(err, "wrong-secret-99") && !strstr(err, PASS), "no password in the error");
	rn_rcluster_free(rc);
	rc = open_url(th_strf("redis://127.0.0.1:%d", cl.node[1].port), err, sizeof(err));
	TH_CHECK(!rc && strstr(err, "authentication required"), "no password: %s", rc ? "opened" : err);
	rn_rcluster_free(rc);

	/* Not Redis at all. */
	int port = 0;
	int fd = th_listen_loopback(4, &port);
	TH_REQUIRE(fd >= 0, "listen");
	pthread_t t;
	pthread_create(&t, NULL, http_once, &fd);
	int64_t t0 = th_now_ms();
	rc = open_url(th_strf("redis://127.0.0.1:%d", port), err, sizeof(err));
	TH_CHECK(!rc && strstr(err, "not a Redis server") && strstr(err, "Protocol error"),
	         "HTTP port: %s", rc ? "opened" : err);
	TH_CHECK(th_now_ms() - t0 < 3000, "refused at once, no retry loop");
	rn_rcluster_free(rc);
	shutdown(fd, SHUT_RDWR);
	pthread_join(t, NULL);
	close(fd);

	/* Nothing listening. */
	int closed = th_free_port();
	rc = open_url(th_strf("redis://127.0.0.1:%d", closed), err, sizeof(err));
	TH_CHECK(!rc && strstr(err, "refused"), "closed port: %s", rc ? "opened" : err);
	rn_rcluster_free(rc);

	/* A cluster node that serves no slot, then one that serves half. */
	th_redis_t lone;
	TH_REQUIRE(th_redis_start(&lone, th_strf("cluster-enabled yes\ncluster-port %d\n", th_free_port())) == 0,
	           "lone cluster node");
	rc = open_url(lone.url, err, sizeof(err));
	TH_CHECK(!rc && strcmp(err, "cluster has 16384 of 16384 slots unserved (first: 0)") == 0,
	         "no slots: %s", rc ? "opened" : err);
	rn_rcluster_free(rc);
	redisContext *c = th_redis_connect(&lone);
	TH_REQUIRE(c, "connect lone");
	redisReply *r = redisCommand(c, "CLUSTER ADDSLOTSRANGE 0 8191");
	TH_CHECK(r && r->type == REDIS_REPLY_STATUS, "ADDSLOTSRANGE");
	if (r)
		freeReplyObject(r);
	redisFree(c);
	rc = open_url(lone.url, err, sizeof(err));
	TH_CHECK(!rc && strcmp(err, "cluster has 8192 of 16384 slots unserved (first: 8192)") == 0,
	         "half the slots: %s", rc ? "opened" : err);
	rn_rcluster_free(rc);
	/* A database other than 0 does not exist on a cluster. */
	rc = open_url(th_strf("redis://:%s@127.0.0.1:%d/2", PASS, cl.node[0].port), err, sizeof(err));
	TH_CHECK(!rc && strstr(err, "SELECT 2 failed"), "db 2 on a cluster: %s", rc ? "opened" : err);
	rn_rcluster_free(rc);
	th_redis_stop(&lone);
}

int main(void)
{
	th_init("rcluster_routing");
	signal(SIGPIPE, SIG_IGN);
	int64_t t0 = th_now_ms();
	TH_REQUIRE(th_cluster_start(&cl, 3, 1, "requirepass " PASS "\n") == 0, "start a 3+3 cluster");
	fprintf(stderr, "# cluster of %d nodes ready in %lld ms\n", cl.n, (long long)(th_now_ms() - t0));
	test_detect();
	char err[256];
	rn_rcluster_t *rc = open_url(cl.url, err, sizeof(err));
	TH_REQUIRE(rc, "open %s: %s", cl.url, err);
	test_routing(rc);
	test_ask_moved(rc);
	test_reshard(rc);
	test_graceful_failover(rc);
	test_bad_config();
	test_kill_primary(rc);
	rn_rcluster_stats_t s;
	rn_rcluster_stats(rc, &s);
	fprintf(stderr, "# totals: %lu commands, %lu MOVED, %lu ASK, %lu retries, %lu map reads, %lu reconnects\n",
	        s.commands, s.moved, s.ask, s.retries, s.refreshes, s.reconnects);
	rn_rcluster_free(rc);
	return th_done();
}
