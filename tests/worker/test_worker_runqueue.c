/*
 * tests/worker/test_worker_runqueue.c - the run-time queue's Lua scripts
 * (common/runqueue.c) against a real redis-server: idempotent push, the
 * queued state mark, round robin between tenants, per-tenant caps (also
 * freed by a lapsed lease), an inflight run put back when its taker died,
 * ack/release, the depth list KEDA reads, stats, the wake list, and every
 * key carrying the {q} hash tag.
 */
#include "common/runqueue.h"
#include "tests/support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static redisContext *c;
static char err[256];

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void push(const char *run, const char *tenant)
{
	char entry[64];
	snprintf(entry, sizeof(entry), "entry-of-%s", run);
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rq", run, tenant, 5, entry, strlen(entry), err, sizeof(err)) == 1,
	         "push %s: %s", run, err);
}

/* Takes one run; returns its id in a static buffer ("" when none). */
static const char *take(const rn_tenant_caps_t *caps, int64_t inflight_ms, int64_t lease_ms)
{
	static char id[80];
	rn_queue_item_t it;
	int r = rn_runqueue_take(th_rc_for(c), "rq", caps, inflight_ms, lease_ms, &it, err, sizeof(err));
	TH_CHECK(r >= 0, "take: %s", err);
	id[0] = '\0';
	if (r == 1) {
		char want[16 + sizeof(it.run_id)];
		snprintf(want, sizeof(want), "entry-of-%s", it.run_id);
		TH_CHECK(it.len == strlen(want) && !memcmp(it.entry, want, it.len), "entry of %s", it.run_id);
		TH_CHECK(it.queued_ms > 0 && it.now_ms >= it.queued_ms, "queued_ms");
		snprintf(id, sizeof(id), "%s", it.run_id);
	}
	rn_queue_item_clear(&it);
	return id;
}

static long long llen(const char *key)
{
	return th_redis_int(c, -1, "LLEN %s", key);
}

int main(void)
{
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, NULL) == 0);
	c = th_redis_connect(&r);
	TH_REQUIRE(c);

	/* The state mark: queued + tenant, and never over a later status. */
	TH_CHECK(rn_runqueue_mark(th_rc_for(c), "rq", "run_m", "acme", 1700000000000LL, 60, NULL, err, sizeof(err)) == 0, "%s", err);
	redisReply *h = redisCommand(c, "HMGET rq:{run_m}:state status tenant enqueued_at");
	TH_REQUIRE(h && h->type == REDIS_REPLY_ARRAY && h->elements == 3);
	TH_CHECK(th_streq(h->element[0]->str, "queued") && th_streq(h->element[1]->str, "acme") &&
	                 th_streq(h->element[2]->str, "1700000000000"),
	         "mark fields");
	freeReplyObject(h);
	freeReplyObject(redisCommand(c, "HSET rq:{run_m}:state status running"));
	TH_CHECK(rn_runqueue_mark(th_rc_for(c), "rq", "run_m", "acme", 0, 60, NULL, err, sizeof(err)) == 0);
	h = redisCommand(c, "HGET rq:{run_m}:state status");
	TH_CHECK(h && th_streq(h->str, "running"), "mark leaves a running run alone");
	freeReplyObject(h);

	/* Idempotent push. */
	push("run_a1", "a");
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rq", "run_a1", "a", 5, "x", 1, err, sizeof(err)) == 0, "second push is a no-op");
	push("run_a2", "a");
	push("run_a3", "a");
	push("run_b1", "b");
	push("run_c1", "c");
	TH_CHECK(llen("rq:{q}:depth") == 5, "depth list = 5");
	rn_queue_stats_t st;
	TH_CHECK(rn_runqueue_stats(th_rc_for(c), "rq", 2, &st, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(st.depth == 5 && st.ntenants == 3 && st.nlisted == 2, "stats %lld %zu %zu",
	         (long long)st.depth, st.ntenants, st.nlisted);
	TH_CHECK(st.nlisted == 2 && th_streq(st.tenants[0].name, "a") && st.tenants[0].queued == 3,
	         "deepest first");
	rn_queue_stats_clear(&st);

	/* Round robin: a, b, c, a, a (order of first arrival, then in turn). */
	const char *want[] = { "run_a1", "run_b1", "run_c1", "run_a2", "run_a3", "" };
	for (size_t i = 0; i < 6; i++) {
		const char *got = take(NULL, 60000, 60000);
		TH_CHECK(th_streq(got, want[i]), "take %zu: %s, want %s", i, got, want[i]);
		if (got[0])
			TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", got, got[4] == 'a' ? "a" : got[4] == 'b' ? "b"
			                                                                                      : "c",
			                         0,
			                         err, sizeof(err)) == 0,
			         "%s", err);
	}
	TH_CHECK(llen("rq:{q}:depth") == 0, "depth list empty");
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rq", "run_a1", "a", 5, "entry-of-run_a1", 15, err, sizeof(err)) == 1,
	         "after the ack the same run may be queued again (a redelivery; the claim skips it)");
	TH_CHECK(th_streq(take(NULL, 60000, 60000), "run_a1"));
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", "run_a1", "a", 0, err, sizeof(err)) == 0);

	/* A burst of tenant "big" and one run of "small": small is next but one. */
	for (int i = 0; i < 50; i++) {
		char id[32];
		snprintf(id, sizeof(id), "run_big%d", i);
		push(id, "big");
	}
	TH_CHECK(th_streq(take(NULL, 60000, 60000), "run_big0"));
	push("run_small", "small");
	TH_CHECK(th_streq(take(NULL, 60000, 60000), "run_big1"), "big's turn");
	TH_CHECK(th_streq(take(NULL, 60000, 60000), "run_small"), "then small at once");

	/* Caps: big capped at 3 running (3 taken and kept above, minus none acked). */
	const char *names[] = { "big" };
	long capv[] = { 3 };
	rn_tenant_caps_t caps = { .def = 0, .n = 1, .names = names, .caps = capv };
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", "run_big0", "big", 1, err, sizeof(err)) == 0);
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", "run_big1", "big", 1, err, sizeof(err)) == 0);
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", "run_small", "small", 1, err, sizeof(err)) == 0);
	TH_CHECK(th_streq(take(&caps, 60000, 60000), "run_big2"), "third of big");
	TH_CHECK(th_streq(take(&caps, 60000, 60000), ""), "big at its cap of 3");
	TH_CHECK(rn_runqueue_stats(th_rc_for(c), "rq", 10, &st, err, sizeof(err)) == 0);
	TH_CHECK(st.nlisted == 1 && st.tenants[0].running == 3, "running of big: %lld",
	         st.nlisted ? (long long)st.tenants[0].running : -1LL);
	rn_queue_stats_clear(&st);
	TH_CHECK(rn_runqueue_release(th_rc_for(c), "rq", "run_big0", "big", err, sizeof(err)) == 0);
	TH_CHECK(th_streq(take(&caps, 60000, 60000), "run_big3"), "a release frees the cap");
	rn_tenant_caps_t def = { .def = 2 };
	TH_CHECK(th_streq(take(&def, 60000, 60000), ""), "default cap 2 also holds big back");

	/* A lapsed running lease (dead worker) frees its place under the cap. */
	const char *ids[] = { "run_big1" };
	const char *tens[] = { "big" };
	TH_CHECK(rn_runqueue_touch(th_rc_for(c), "rq", ids, tens, 1, 100, err, sizeof(err)) == 0, "%s", err);
	sleep_ms(150);
	/* big now: run_big2, run_big3 inflight (live), run_big1 lapsed -> 2 live + ... */
	rn_tenant_caps_t cap4 = { .def = 4 };
	TH_CHECK(th_streq(take(&cap4, 60000, 60000), "run_big4"), "cap 4: big2 big3 live, big1 lapsed");

	/* A taker that dies between take and claim: the run comes back first. */
	TH_CHECK(th_streq(take(NULL, 100, 60000), "run_big5"));
	sleep_ms(150);
	TH_CHECK(th_streq(take(NULL, 60000, 60000), "run_big5"), "inflight past its deadline comes back in front");

	/* Hourly token budgets: a tenant whose count of this hour reached its
	 * budget waits; another tenant goes first; a budget of 0 is none. */
	push("run_tok1", "tok");
	push("run_tok2", "other");
	long long hour = (long long)(time(NULL) / 3600);
	char tk[128];
	snprintf(tk, sizeof(tk), RN_RUNQUEUE_TOKENS_FMT, "rq", "tok", hour);
	freeReplyObject(redisCommand(c, "SET %s 300", tk));
	const char *tnames[] = { "tok" };
	int64_t tbud[] = { 300 };
	/* (big, still queued, is held at its cap meanwhile) */
	long cap1[] = { 1 };
	rn_tenant_caps_t tcap = { .n = 1, .names = names, .caps = cap1, .ntok = 1, .tok_names = tnames, .toks = tbud };
	const char *got = take(&tcap, 60000, 60000);
	TH_CHECK(th_streq(got, "run_tok2"), "tok is over its hour's budget: took %s (%s)", got, err);
	TH_CHECK(th_streq(take(&tcap, 60000, 60000), ""), "tok waits");
	rn_tenant_caps_t tdef = { .n = 1, .names = names, .caps = cap1, .tok_def = 1000 };
	TH_CHECK(th_streq(take(&tdef, 60000, 60000), "run_tok1"), "within a larger default budget");
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", "run_tok1", "tok", 1, err, sizeof(err)) == 0);
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rq", "run_tok2", "other", 1, err, sizeof(err)) == 0);
	freeReplyObject(redisCommand(c, "DEL %s", tk));

	/* The wake list: a push leaves a token, a wait takes it, then times out. */
	freeReplyObject(redisCommand(c, "DEL rq:{q}:wake"));
	push("run_w", "w");
	TH_CHECK(rn_runqueue_wait(th_rc_for(c), "rq", 500, err, sizeof(err)) == 1, "woken by the push");
	int64_t t0 = th_now_ms();
	TH_CHECK(rn_runqueue_wait(th_rc_for(c), "rq", 300, err, sizeof(err)) == 0, "nothing: timeout");
	TH_CHECK(th_now_ms() - t0 >= 250, "blocked for the timeout");

	char dk[128];
	TH_CHECK(rn_runqueue_depth_key("rq", dk, sizeof(dk)) == 0 && th_streq(dk, "rq:{q}:depth"));

	/* Every queue key carries the {q} hash tag (one cluster slot). */
	redisReply *k = redisCommand(c, "KEYS rq:*");
	TH_REQUIRE(k && k->type == REDIS_REPLY_ARRAY);
	size_t nq = 0;
	for (size_t i = 0; i < k->elements; i++) {
		const char *name = k->element[i]->str;
		if (strstr(name, ":state"))
			continue; /* run keys: {RUN} */
		nq++;
		TH_CHECK(!strncmp(name, "rq:{q}:", 7), "queue key without the {q} tag: %s", name);
	}
	TH_CHECK(nq >= 6, "%zu queue keys", nq);
	freeReplyObject(k);

	/* Bad input. */
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rq", "", "a", 5, "x", 1, err, sizeof(err)) == -1 &&
	                 th_streq(err, "invalid run id or tenant"),
	         "%s", err);

	redisFree(c);
	th_redis_stop(&r);
	return th_done();
}
