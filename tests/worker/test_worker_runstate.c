/*
 * tests/worker/test_worker_runstate.c - the run state machine's Lua
 * scripts (common/runstate.c) against a real redis-server: every claim
 * outcome, the running mark, heartbeats, the single terminal line, a stale
 * writer refused after it, retention expiry and the lost sweep.
 */
#include "common/runstate.h"
#include "tests/support/harness.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static redisContext *c;
static char err[256];

static long long ttl_of(const char *key)
{
	return th_redis_int(c, -3, "TTL %s", key);
}

static long long xlen(const char *key)
{
	return th_redis_int(c, -1, "XLEN %s", key);
}

static const char *get(const char *run, const char *field)
{
	static char buf[128];
	TH_CHECK(rn_runstate_get(th_rc_for(c), "rt", run, field, buf, sizeof(buf), err, sizeof(err)) >= 0, "%s", err);
	return buf;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int lost_calls;
static void on_lost(const char *run_id, void *arg)
{
	lost_calls++;
	TH_CHECK(th_streq(run_id, "run_b"), "swept %s", run_id);
}

int main(void)
{
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, NULL) == 0);
	c = th_redis_connect(&r);
	TH_REQUIRE(c);
	rn_claim_t cl;

	/* A fresh run (no state hash: produced straight to Kafka). */
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_a", "w1", 10000, 1234, 500, &cl, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(cl.status == RN_CLAIM_OK && cl.seq_base > 0 && cl.seq_base == cl.now_ms);
	TH_CHECK(th_streq(get("run_a", "status"), "claimed"));
	TH_CHECK(th_streq(get("run_a", "worker"), "w1"));
	TH_CHECK(th_streq(get("run_a", "enqueued_at"), "1234"));
	TH_CHECK(ttl_of("rt:{run_a}:state") > 400, "state expires while live");
	/* Redelivered while w1 holds it. */
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_a", "w2", 10000, 0, 500, &cl, err, sizeof(err)) == 0);
	TH_CHECK(cl.status == RN_CLAIM_HELD && th_streq(cl.detail, "w1"), "held by %s", cl.detail);
	/* Only the owner marks it running; twice is fine. */
	TH_CHECK(rn_runstate_start(th_rc_for(c), "rt", "run_a", "w2", err, sizeof(err)) == 0);
	TH_CHECK(rn_runstate_start(th_rc_for(c), "rt", "run_a", "w1", err, sizeof(err)) == 1);
	TH_CHECK(rn_runstate_start(th_rc_for(c), "rt", "run_a", "w1", err, sizeof(err)) == 1);
	TH_CHECK(th_streq(get("run_a", "status"), "running"));
	/* Heartbeat: ours renewed, not theirs. */
	const char *ids[] = { "run_a" };
	int owned[1] = { -1 };
	TH_CHECK(rn_runstate_heartbeat(th_rc_for(c), "rt", ids, 1, "w2", 10000, owned, err, sizeof(err)) == 0 && owned[0] == 0);
	TH_CHECK(rn_runstate_heartbeat(th_rc_for(c), "rt", ids, 1, "w1", 10000, owned, err, sizeof(err)) == 0 && owned[0] == 1);
	/* Lines with explicit ids; a retry of one is refused as already written. */
	char id[64];
	snprintf(id, sizeof(id), "%lld-1", (long long)cl.seq_base);
	redisReply *x = redisCommand(c, "XADD rt:{run_a}:out %s line {}", id);
	TH_CHECK(x && x->type == REDIS_REPLY_STRING);
	freeReplyObject(x);
	x = redisCommand(c, "XADD rt:{run_a}:out %s line {}", id);
	TH_CHECK(x && x->type == REDIS_REPLY_ERROR && strstr(x->str, "equal or smaller than the target stream top item"),
	         "retry refused: %s", x ? x->str : "");
	freeReplyObject(x);
	/* One terminal line, once. */
	TH_CHECK(rn_runstate_finish(th_rc_for(c), "rt", "run_a", "{\"type\":\"result\"}", 17, "succeeded", "", 100, err, sizeof(err)) == 1);
	TH_CHECK(rn_runstate_finish(th_rc_for(c), "rt", "run_a", "{\"type\":\"error\"}", 16, "failed", "x", 100, err, sizeof(err)) == 0);
	TH_CHECK(xlen("rt:{run_a}:out") == 2);
	TH_CHECK(th_streq(get("run_a", "status"), "succeeded") && th_streq(get("run_a", "code"), ""));
	TH_CHECK(ttl_of("rt:{run_a}:state") <= 100 && ttl_of("rt:{run_a}:out") <= 100 && ttl_of("rt:{run_a}:out") > 0,
	         "retention expiry");
	/* A stale writer's next line is refused: the terminal stays last. */
	snprintf(id, sizeof(id), "%lld-2", (long long)cl.seq_base);
	x = redisCommand(c, "XADD rt:{run_a}:out %s line {}", id);
	TH_CHECK(x && x->type == REDIS_REPLY_ERROR, "stale XADD refused");
	freeReplyObject(x);
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_a", "w2", 10000, 0, 500, &cl, err, sizeof(err)) == 0);
	TH_CHECK(cl.status == RN_CLAIM_DONE && th_streq(cl.detail, "succeeded"));

	/* A cancel already on :ctl (after an unparsable message). */
	freeReplyObject(redisCommand(c, "XADD rt:{run_c}:ctl * msg %s", "not json"));
	freeReplyObject(redisCommand(c, "XADD rt:{run_c}:ctl * msg %s", "{\"type\":\"cancel\",\"reason\":\"user\"}"));
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_c", "w1", 10000, 0, 500, &cl, err, sizeof(err)) == 0);
	TH_CHECK(cl.status == RN_CLAIM_CANCEL && th_streq(cl.detail, "user"), "cancel: %d %s", cl.status, cl.detail);
	TH_CHECK(rn_runstate_finish(th_rc_for(c), "rt", "run_c", "{}", 2, "cancelled", "cancelled", 100, err, sizeof(err)) == 1);
	TH_CHECK(ttl_of("rt:{run_c}:ctl") > 0, "ctl expires too");

	/* Running with an expired lease: worker_lost at claim, never restarted. */
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_d", "w1", 100, 0, 500, &cl, err, sizeof(err)) == 0 && cl.status == RN_CLAIM_OK);
	TH_CHECK(rn_runstate_start(th_rc_for(c), "rt", "run_d", "w1", err, sizeof(err)) == 1);
	sleep_ms(150);
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_d", "w2", 10000, 0, 500, &cl, err, sizeof(err)) == 0);
	TH_CHECK(cl.status == RN_CLAIM_LOST);
	TH_CHECK(th_streq(get("run_d", "status"), "lost") && th_streq(get("run_d", "code"), "worker_lost"));
	char **lines = NULL;
	size_t n = 0;
	TH_CHECK(th_stream_read_all(c, "rt:{run_d}:out", &lines, NULL, &n) == 0 && n == 1);
	if (n == 1)
		TH_CHECK(strstr(lines[0], "\"code\":\"worker_lost\",\"message\":\"" RN_RUNSTATE_LOST_MESSAGE "\",\"ts\":"),
		         "%s", lines[0]);
	th_strv_free(lines, n);

	/* Claimed (OTPs unused) with an expired lease: may be claimed again. */
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_e", "w1", 100, 0, 500, &cl, err, sizeof(err)) == 0 && cl.status == RN_CLAIM_OK);
	sleep_ms(150);
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_e", "w2", 10000, 0, 500, &cl, err, sizeof(err)) == 0 && cl.status == RN_CLAIM_OK);
	TH_CHECK(th_streq(get("run_e", "worker"), "w2"));

	/* The sweep: only expired leases, re-checked; renewals survive. */
	TH_CHECK(rn_runstate_claim(th_rc_for(c), "rt", "run_b", "w1", 100, 0, 500, &cl, err, sizeof(err)) == 0);
	TH_CHECK(rn_runstate_start(th_rc_for(c), "rt", "run_b", "w1", err, sizeof(err)) == 1);
	freeReplyObject(redisCommand(c, "ZADD rt:leases 1 run_gone"));
	sleep_ms(150);
	int swept = rn_runstate_sweep(th_rc_for(c), "rt", 100, 0, on_lost, NULL, err, sizeof(err));
	TH_CHECK(swept == 1 && lost_calls == 1, "swept %d: %s", swept, err);
	TH_CHECK(th_streq(get("run_b", "status"), "lost"));
	TH_CHECK(th_streq(get("run_e", "status"), "claimed"), "live lease untouched");
	redisReply *z = redisCommand(c, "ZRANGE rt:leases 0 -1");
	TH_CHECK(z && z->elements == 1 && th_streq(z->element[0]->str, "run_e"), "leases: only run_e left");
	freeReplyObject(z);
	TH_CHECK(rn_runstate_sweep(th_rc_for(c), "rt", 100, 0, on_lost, NULL, err, sizeof(err)) == 0);
	TH_CHECK(xlen("rt:{run_b}:out") == 1);

	redisFree(c);
	th_redis_stop(&r);
	return th_done();
}
