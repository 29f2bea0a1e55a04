/*
 * tests/dispatcher/test_fanout.c - 200 concurrent /stream callers (one
 * curl multi handle), each on its own run, plus extra callers sharing one
 * run: every caller receives exactly its own run's lines, in order, and the
 * dispatcher holds at most 4 Redis connections the whole time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/dispatcher/dtest.h"

#define NSTREAMS 200
#define NLINES   10
#define NSHARED  3

static dt_disp_t D;
static redisContext *C;
static dt_stream_t S[NSTREAMS + NSHARED];

static int all_started(void *arg)
{
	(void)arg;
	for (int i = 0; i < NSTREAMS; i++)
		if (!dt_stream_started(&S[i]))
			return 0;
	return 1;
}

static int all_done(void *arg)
{
	(void)arg;
	for (int i = 0; i < NSTREAMS + NSHARED; i++)
		if (!S[i].done)
			return 0;
	return 1;
}

static int tails_attached(void *arg)
{
	dt_resp_t r;
	char *want = th_strf("runnel_dispatcher_tail_callers %d\n", *(int *)arg);
	int ok = dt_http(&r, "GET", th_strf("%s/metrics", D.base), NULL, NULL, 0, 5000) == 0 &&
	        !!strstr(r.body, want);

	dt_resp_free(&r);
	return ok;
}

/* Connections the dispatcher holds (every one but ours). */
static int dispatcher_conns(void)
{
	int n = th_redis_clients(C, NULL);
	return n < 0 ? n : n - 1;
}

static char *line(int run, int i)
{
	if (i == NLINES)
		return th_strf("{\"type\":\"result\",\"message\":\"run %d done\",\"ts\":%d}", run, i);
	return th_strf("{\"type\":\"log\",\"level\":\"info\",\"message\":\"run %d line %d\",\"ts\":%d}", run, i, i);
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	dt_multi_t m;
	const char *const ct[] = { "Content-Type: application/json", NULL };
	int max_conns = 0, n, want_tails = NSTREAMS + NSHARED;
	int64_t t0;

	dt_servers_start("dispatcher_fanout", &red, &k, 0, &C);
	TH_REQUIRE(dt_disp_start(&D, &red, &k, NULL) == 0);
	TH_REQUIRE(dt_multi_init(&m) == 0);

	t0 = th_now_ms();
	for (int i = 0; i < NSTREAMS; i++)
		TH_REQUIRE(dt_stream_open(&m, &S[i], th_strf("%s/stream", D.base), ct,
		                          dt_job_body(th_strf("fan_%03d", i), NULL)) == 0);
	TH_REQUIRE(dt_multi_until(&m, all_started, NULL, 60000), "not every stream started");
	TH_NOTE("%d streams enqueued and started in %lld ms", NSTREAMS, (long long)(th_now_ms() - t0));
	for (int i = 0; i < NSTREAMS; i++)
		TH_CHECK(S[i].status == 200, "stream %d: %ld", i, S[i].status);
	/* More callers on run fan_000 (events tails share its XREAD entry). */
	for (int i = 0; i < NSHARED; i++)
		TH_REQUIRE(dt_stream_open(&m, &S[NSTREAMS + i], th_strf("%s/v1/runs/fan_000/events", D.base),
		                          NULL, NULL) == 0);
	TH_CHECK(dt_multi_until(&m, tails_attached, &want_tails, 20000), "tails not attached");
	n = dispatcher_conns();
	max_conns = n > max_conns ? n : max_conns;

	/* Play the workers: interleave every run's lines. */
	for (int l = 1; l <= NLINES; l++) {
		for (int i = 0; i < NSTREAMS; i++)
			redisAppendCommand(C, "XADD runnel:{fan_%03d}:out * line %s", i, line(i, l));
		for (int i = 0; i < NSTREAMS; i++) {
			redisReply *r = NULL;

			TH_REQUIRE(redisGetReply(C, (void **)&r) == REDIS_OK && r->type == REDIS_REPLY_STRING);
			freeReplyObject(r);
		}
		dt_multi_pump(&m, 5);
		n = dispatcher_conns();
		max_conns = n > max_conns ? n : max_conns;
	}
	TH_CHECK(dt_multi_until(&m, all_done, NULL, 60000), "not every stream ended");
	for (int i = 0; i < NSTREAMS + NSHARED; i++) {
		int run = i < NSTREAMS ? i : 0;
		char *want = th_strf("%s", "");

		for (int l = 1; l <= NLINES; l++)
			want = th_strf("%s%s\n", want, line(run, l));
		TH_CHECK(S[i].rc == CURLE_OK && S[i].rx.body && strcmp(S[i].rx.body, want) == 0,
		         "caller %d got %.200s", i, S[i].rx.body ? S[i].rx.body : "(null)");
	}
	TH_NOTE("the dispatcher used at most %d Redis connections", max_conns);
	TH_CHECK(max_conns >= 1 && max_conns <= 4, "%d Redis connections", max_conns);
	for (int i = 0; i < NSTREAMS + NSHARED; i++)
		dt_stream_close(&m, &S[i]);
	dt_multi_cleanup(&m);
	{
		int zero = 0;

		TH_CHECK(th_wait_until(tails_attached, &zero, 5000), "tails left over");
	}
	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	dt_servers_stop(C, &k);
	return th_done();
}
