/*
 * tests/worker/test_worker_redis.c - Redis restarted while a "flood" agent
 * prints 100000 lines (AOF on): the stream holds every line exactly once,
 * in order, then the result; and a job that arrives while Redis is away
 * waits and runs when it is back (and the webhook sender, which lost
 * Redis too, reconnects).
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#define FLOOD 100000

static wt_t T;

static int stream_len_at_least(void *arg)
{
	long want = *(long *)arg;
	return th_redis_int(T.rc, 0, "XLEN runnel:{run_flood}:out") >= want;
}

int main(void)
{
	th_init("worker_redis");
	/* A restart is a clean SIGTERM: the AOF is flushed then. */
	wt_setup(&T, "appendonly yes\nappendfsync everysec\n", 1);
	pid_t w = wt_worker(&T, "wr", NULL);
	wt_warmup(&T);

	char *agent = th_strf("{\"kind\":\"mock\",\"script\":\"flood %d\"}", FLOOD);
	wt_submit_agent(&T, "run_flood", agent, "hello", 0, 0, NULL);
	long at = 5000;
	TH_REQUIRE(th_wait_until(stream_len_at_least, &at, 30000), "flood started");
	int64_t t0 = th_now_ms();
	redisReply *xl = redisCommand(T.rc, "XLEN runnel:{run_flood}:out");
	TH_CHECK(xl && xl->type == REDIS_REPLY_INTEGER && xl->integer < FLOOD / 2,
	         "restart happens mid-flood (%lld lines in)", xl ? (long long)xl->integer : -1LL);
	if (xl)
		freeReplyObject(xl);
	wt_redis_restart(&T, "redis restarted");
	/* A second outage, a little later. */
	at = 30000;
	if (th_wait_until(stream_len_at_least, &at, 30000))
		wt_redis_restart(&T, "redis restarted again");
	TH_REQUIRE(wt_wait_terminal(&T, "run_flood", 90000), "flood ended");
	TH_NOTE("flood with two restarts: %lld ms", (long long)(th_now_ms() - t0));
	redisReply *r = redisCommand(T.rc, "INFO persistence");
	TH_CHECK(r && r->type == REDIS_REPLY_STRING && strstr(r->str, "aof_enabled:1"), "AOF on");
	if (r)
		freeReplyObject(r);

	size_t n;
	char **ids = NULL;
	char **l = NULL;
	TH_CHECK(th_stream_read_all(T.rc, "runnel:{run_flood}:out", &l, &ids, &n) == 0);
	TH_CHECK(n == FLOOD + 1, "%zu lines, want %d", n, FLOOD + 1);
	size_t bad = 0;
	for (size_t i = 0; i + 1 < n && i < FLOOD; i++) {
		char want[64];
		snprintf(want, sizeof(want), "\"message\":\"line %zu\"", i);
		if (!strstr(l[i], want)) {
			if (bad++ < 5) {
				TH_CHECK(0, "line %zu (id %s): %s", i, ids[i], l[i]);
				if (i > 0)
					TH_NOTE("before it: id %s: %s", ids[i - 1], l[i - 1]);
			}
		}
	}
	TH_CHECK(bad == 0, "%zu lines out of place", bad);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "flood done"), "%s", l[n - 1]);
	th_strv_free(l, n);
	th_strv_free(ids, n);
	TH_CHECK(th_streq(wt_state(&T, "run_flood", "status"), "succeeded"));

	/* Redis away when a job arrives: the job waits (not claimed, not
	 * committed) and runs once Redis is back. */
	redisFree(T.rc);
	T.rc = NULL;
	TH_REQUIRE(th_redis_stop(&T.redis) == 0, "redis stopped");
	wt_submit_agent(&T, "run_wait_redis", "{\"kind\":\"mock\",\"script\":\"echo\"}", "patience", 0, 0, NULL);
	int64_t t1 = th_now_ms();
	while (th_now_ms() - t1 < 2000) {
		struct timespec ts = { 0, 50 * 1000000L };
		nanosleep(&ts, NULL);
	}
	TH_REQUIRE(th_redis_restart(&T.redis) == 0, "redis back");
	T.rc = th_redis_connect(&T.redis);
	TH_REQUIRE(T.rc);
	TH_CHECK(wt_wait_terminal(&T, "run_wait_redis", 20000), "job run after Redis came back");
	l = wt_lines(&T, "run_wait_redis", &n);
	TH_CHECK(n == 1 && th_streq(wt_field(l[0], "message"), "patience"), "%zu lines", n);
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_wait_redis", "status"), "succeeded"));
	TH_CHECK(wt_log_has(&T, "wr", "\"redis_unreachable\""), "the outage was logged");
	/* The webhook sender looks at its outbox all the time: it lost Redis
	 * too and comes back through the same reconnecting connection. */
	TH_CHECK(wt_wait_log(&T, "wr", "webhook: connected to Redis again", 10000),
	         "the webhook sender reconnected");

	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
