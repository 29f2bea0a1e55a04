/*
 * tests/worker/test_worker_priority.c - priorities in the run-time queue
 * (common/runqueue.c) against a real redis-server: within one tenant the
 * higher priority is taken first and one priority is FIFO; tenants are
 * still served in turn (a tenant's priority-9 burst gets only its share);
 * a run put back after its taker died keeps its priority; stats count
 * queued runs per priority; priority 5 keeps the queue's old list name.
 */
#include "common/runqueue.h"
#include "tests/support/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static redisContext *c;
static char err[256];

static void push(const char *run, const char *tenant, int prio)
{
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rp", run, tenant, prio, "e", 1, err, sizeof(err)) == 1, "push %s: %s", run, err);
}

static const char *take(int64_t inflight_ms)
{
	static char id[80];
	rn_queue_item_t it;
	int r = rn_runqueue_take(th_rc_for(c), "rp", NULL, inflight_ms, 60000, &it, err, sizeof(err));
	TH_CHECK(r >= 0, "take: %s", err);
	id[0] = '\0';
	if (r == 1)
		snprintf(id, sizeof(id), "%s", it.run_id);
	rn_queue_item_clear(&it);
	return id;
}

static void ack(const char *run, const char *tenant)
{
	TH_CHECK(rn_runqueue_ack(th_rc_for(c), "rp", run, tenant, 0, err, sizeof(err)) == 0, "ack %s: %s", run, err);
}

int main(void)
{
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, NULL) == 0);
	c = th_redis_connect(&r);
	TH_REQUIRE(c);

	/* Two tenants; A first, so A is served first and then in turn. */
	push("a_p1", "a", 1);
	push("a_p9a", "a", 9);
	push("a_p5", "a", 5);
	push("a_p9b", "a", 9);
	push("a_p0", "a", 0);
	push("b_1", "b", 5);
	push("b_2", "b", 5);
	push("b_p9", "b", 9);
	TH_CHECK(th_redis_int(c, -1, "LLEN rp:{q}:t:a") == 1, "priority 5 keeps the list name t:<tenant>");
	TH_CHECK(th_redis_int(c, -1, "LLEN rp:{q}:t:a:9") == 2, "priority 9 has its own list");

	rn_queue_stats_t st;
	TH_CHECK(rn_runqueue_stats(th_rc_for(c), "rp", 10, &st, err, sizeof(err)) == 0, "stats: %s", err);
	TH_CHECK(st.depth == 8 && st.by_priority[9] == 3 && st.by_priority[5] == 3 && st.by_priority[1] == 1 &&
	                 st.by_priority[0] == 1,
	         "stats by priority 9:%lld 5:%lld 1:%lld 0:%lld", (long long)st.by_priority[9],
	         (long long)st.by_priority[5], (long long)st.by_priority[1], (long long)st.by_priority[0]);
	TH_CHECK(st.nlisted == 2 && st.tenants[0].queued == 5, "tenant a has 5 queued");
	rn_queue_stats_clear(&st);

	const char *want[] = { "a_p9a", "b_p9", "a_p9b", "b_1", "a_p5", "b_2", "a_p1", "a_p0", "" };
	const char *tenant_of[] = { "a", "b", "a", "b", "a", "b", "a", "a" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const char *got = take(60000);
		TH_CHECK(th_streq(got, want[i]), "take %zu: got \"%s\", want \"%s\"", i, got, want[i]);
		if (*got)
			ack(got, tenant_of[i]);
	}
	TH_CHECK(th_redis_int(c, -1, "LLEN rp:{q}:depth") == 0, "depth back to 0");
	TH_CHECK(th_redis_int(c, -1, "HLEN rp:{q}:prio") == 0, "priorities forgotten after the ack");

	/* A priority-9 burst of one tenant still gets only its share. */
	for (int i = 0; i < 20; i++) {
		char id[32];
		snprintf(id, sizeof(id), "burst_%d", i);
		push(id, "hot", 9);
	}
	push("cold_0", "cold", 0);
	int cold_at = -1;
	for (int i = 0; i < 21; i++) {
		const char *got = take(60000);
		if (th_streq(got, "cold_0"))
			cold_at = i;
		if (*got)
			ack(got, th_streq(got, "cold_0") ? "cold" : "hot");
	}
	TH_CHECK(cold_at >= 0 && cold_at <= 1, "the other tenant's priority-0 run is taken at once (at %d)", cold_at);

	/* A run whose taker died goes back in front of its own priority. */
	push("x_p2", "x", 2);
	push("x_p7a", "x", 7);
	TH_CHECK(th_streq(take(1), "x_p7a"), "x_p7a taken first");
	push("x_p7b", "x", 7);
	struct timespec ts = { 0, 20 * 1000000L };
	nanosleep(&ts, NULL);
	TH_CHECK(th_streq(take(60000), "x_p7a"), "the lapsed run is taken again before x_p7b");
	ack("x_p7a", "x");
	TH_CHECK(th_streq(take(60000), "x_p7b"), "then x_p7b");
	ack("x_p7b", "x");
	TH_CHECK(th_streq(take(60000), "x_p2"), "then x_p2");
	ack("x_p2", "x");

	/* Out of range. */
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rp", "bad", "x", 10, "e", 1, err, sizeof(err)) == -1 &&
	                 th_streq(err, "invalid priority"),
	         "priority 10 refused: %s", err);
	TH_CHECK(rn_runqueue_push(th_rc_for(c), "rp", "bad", "x", -1, "e", 1, err, sizeof(err)) == -1, "priority -1 refused");

	redisFree(c);
	return th_done();
}
