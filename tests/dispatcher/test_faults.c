/*
 * tests/dispatcher/test_faults.c - the dispatcher when its dependencies
 * fail: Kafka down (readyz names it, enqueue answers 503 in bounded time
 * and leaves no queued run behind), Redis down and back (readyz, 503,
 * tails resume), the lost-lease sweep ending a run with no worker alive,
 * a dispatcher started while Redis is down, and a /stream caller who
 * leaves before Kafka confirmed the job.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/runstate.h"
#include "tests/dispatcher/dtest.h"

static dt_disp_t D;
static redisContext *C;
static th_redis_t RED;

static const char *const JSON_CT[] = { "Content-Type: application/json", NULL };

static char *url(const char *path)
{
	return th_strf("%s%s", D.base, path);
}

static int ctl_has(void *arg)
{
	return th_redis_int(C, 0, "XLEN runnel:{%s}:ctl", (const char *)arg) > 0;
}

static int state_exists(void *arg)
{
	return th_redis_int(C, 0, "EXISTS runnel:{%s}:state", (const char *)arg) == 1;
}

static void test_kafka_down(th_kafka_t *k)
{
	dt_resp_t r;
	int64_t t0;

	TH_REQUIRE(th_kafka_broker_down(k, 1) == 0);
	TH_CHECK(dt_wait_ready(&D, 503, 10000), "readyz still 200 with Kafka down");
	TH_CHECK(dt_http(&r, "GET", url("/readyz"), NULL, NULL, 0, 5000) == 0);
	TH_CHECK(strcmp(r.body, "{\"status\":\"unavailable\",\"kafka\":\"down\",\"redis\":\"ok\"}\n") == 0, "%s", r.body);
	dt_resp_free(&r);

	t0 = th_now_ms();
	TH_CHECK(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("kd_1", NULL), -1, 20000) == 0);
	TH_CHECK(r.status == 503, "%ld %s", r.status, r.body);
	TH_CHECK(strstr(r.body, "{\"error\":{\"code\":\"kafka_unavailable\",\"message\":\"kafka: the job queue did not take the job") == r.body,
	         "%s", r.body);
	TH_NOTE("enqueue with Kafka down answered %ld in %lld ms", r.status, (long long)(th_now_ms() - t0));
	TH_CHECK(th_now_ms() - t0 < 8000, "not bounded: %lld ms", (long long)(th_now_ms() - t0));
	dt_resp_free(&r);
	/* Kafka certainly does not have it: the queued state is gone, so the
	 * caller may retry with the same id. */
	TH_CHECK(!state_exists("kd_1"), "a queued state hash was left behind");

	TH_REQUIRE(th_kafka_broker_up(k, 1) == 0);
	TH_CHECK(dt_wait_ready(&D, 200, 15000), "readyz not back");
	TH_CHECK(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("kd_1", NULL), -1, 20000) == 0 &&
	                 r.status == 202,
	         "retry: %ld %s", r.status, r.body);
	dt_resp_free(&r);
}

/* With the broker down, opens a request that submits run on m (started
 * here) and waits up to 5 s until the run's state exists.  1 when it does. */
static int post_while_broker_down(th_kafka_t *k, dt_multi_t *m, dt_stream_t *s, const char *path, const char *run)
{
	TH_REQUIRE(dt_multi_init(m) == 0);
	TH_REQUIRE(th_kafka_broker_down(k, 1) == 0);
	TH_REQUIRE(dt_stream_open(m, s, url(path), JSON_CT, dt_job_body(run, NULL)) == 0);
	for (int64_t end = th_now_ms() + 5000; th_now_ms() < end && !state_exists((void *)run);)
		dt_multi_pump(m, 20);
	return state_exists((void *)run);
}

/* A /stream caller leaves while Kafka is slow: once the job is delivered,
 * the run is cancelled (nobody will watch it). */
static void test_leave_before_delivery(th_kafka_t *k)
{
	dt_multi_t m;
	dt_stream_t s;

	TH_CHECK(post_while_broker_down(k, &m, &s, "/stream", "kd_left"));
	dt_stream_close(&m, &s);
	dt_multi_cleanup(&m);
	TH_REQUIRE(th_kafka_broker_up(k, 1) == 0);
	TH_CHECK(th_wait_until(ctl_has, "kd_left", 15000), "no client_closed cancel after a late delivery");
	{
		redisReply *r = redisCommand(C, "XRANGE runnel:{kd_left}:ctl - +");

		TH_CHECK(r && r->elements == 1 &&
		         strcmp(r->element[0]->element[1]->element[1]->str,
		                "{\"type\":\"cancel\",\"reason\":\"client_closed\"}") == 0);
		if (r)
			freeReplyObject(r);
	}
}

static void test_redis_down(void)
{
	dt_resp_t r;
	dt_multi_t m;
	dt_stream_t s;
	int64_t end;

	dt_stream_t left;

	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("rd_1", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);
	/* A /stream caller that leaves while Redis is down: its client_closed
	 * cancel is kept and written once Redis is back. */
	TH_REQUIRE(dt_multi_init(&m) == 0);
	TH_REQUIRE(dt_stream_open(&m, &left, url("/stream"), JSON_CT, dt_job_body("rd_left", NULL)) == 0);
	for (end = th_now_ms() + 10000; th_now_ms() < end && !dt_stream_started(&left);)
		dt_multi_pump(&m, 20);
	TH_REQUIRE(dt_stream_started(&left) && left.status == 200, "%ld", left.status);
	redisFree(C);
	C = NULL;
	TH_REQUIRE(th_redis_stop(&RED) == 0);
	TH_CHECK(dt_wait_ready(&D, 503, 10000));
	dt_stream_close(&m, &left);
	dt_multi_cleanup(&m);
	TH_CHECK(dt_wait_ready(&D, 503, 10000));
	TH_CHECK(dt_http(&r, "GET", url("/readyz"), NULL, NULL, 0, 5000) == 0);
	TH_CHECK(strcmp(r.body, "{\"status\":\"unavailable\",\"kafka\":\"ok\",\"redis\":\"down\"}\n") == 0, "%s", r.body);
	dt_resp_free(&r);
	TH_CHECK(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("rd_2", NULL), -1, 15000) == 0);
	TH_CHECK(r.status == 503 && strcmp(r.body, "{\"error\":{\"code\":\"redis_unavailable\",\"message\":\"redis: not connected\"}}\n") == 0,
	         "%ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_CHECK(dt_http(&r, "GET", url("/v1/runs/rd_1"), NULL, NULL, 0, 5000) == 0 && r.status == 503);
	dt_resp_free(&r);

	TH_REQUIRE(th_redis_restart(&RED) == 0);
	C = th_redis_connect(&RED);
	TH_REQUIRE(C);
	TH_CHECK(dt_wait_ready(&D, 200, 15000), "readyz not back after Redis returned");
	TH_CHECK(th_wait_until(ctl_has, "rd_left", 5000), "the cancel of a caller who left while Redis was down is lost");
	{
		redisReply *x = redisCommand(C, "XRANGE runnel:{rd_left}:ctl - +");

		TH_CHECK(x && x->type == REDIS_REPLY_ARRAY && x->elements == 1 &&
		                 strcmp(x->element[0]->element[1]->element[1]->str,
		                        "{\"type\":\"cancel\",\"reason\":\"client_closed\"}") == 0,
		         "not exactly one cancel");
		if (x)
			freeReplyObject(x);
	}
	/* Redis came back empty (no persistence): tail a fresh run. */
	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("rd_3", NULL), -1, 15000) == 0);
	TH_CHECK(r.status == 202, "%ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_REQUIRE(dt_multi_init(&m) == 0);
	TH_REQUIRE(dt_stream_open(&m, &s, url("/v1/runs/rd_3/events"), NULL, NULL) == 0);
	dt_multi_pump(&m, 200);
	free(dt_xadd_line(C, "runnel:{rd_3}:out", "{\"type\":\"result\",\"message\":\"ok\",\"ts\":1}"));
	for (end = th_now_ms() + 10000; th_now_ms() < end && !s.done;)
		dt_multi_pump(&m, 20);
	TH_CHECK(s.done && strcmp(s.rx.body, "{\"type\":\"result\",\"message\":\"ok\",\"ts\":1}\n") == 0, "%s", s.rx.body);
	dt_stream_close(&m, &s);
	dt_multi_cleanup(&m);
}

/* Started while Redis is down: once it answers, the dispatcher finds out
 * it is a standalone server (the tails ask CLUSTER SLOTS first) and
 * tails two runs on its blocking pool as usual. */
static void test_redis_late(th_kafka_t *k)
{
	dt_disp_t d2;
	dt_resp_t r;
	dt_multi_t m;
	dt_stream_t s[2];
	int64_t end;

	redisFree(C);
	C = NULL;
	TH_REQUIRE(th_redis_stop(&RED) == 0);
	TH_REQUIRE(dt_disp_start(&d2, &RED, k, NULL) == 0, "a dispatcher while Redis is down");
	TH_CHECK(dt_wait_ready(&d2, 503, 10000));
	TH_REQUIRE(th_redis_restart(&RED) == 0);
	C = th_redis_connect(&RED);
	TH_REQUIRE(C);
	TH_CHECK(dt_wait_ready(&d2, 200, 15000), "ready once Redis answers (see %s)", d2.log);
	TH_REQUIRE(dt_multi_init(&m) == 0);
	memset(s, 0, sizeof(s));
	for (int i = 0; i < 2; i++) {
		const char *run = th_strf("late_%d", i);

		TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", d2.base), JSON_CT, dt_job_body(run, NULL), -1,
		                   15000) == 0 &&
		           r.status == 202);
		dt_resp_free(&r);
		TH_REQUIRE(dt_stream_open(&m, &s[i], th_strf("%s/v1/runs/%s/events", d2.base, run), NULL, NULL) == 0);
	}
	dt_multi_pump(&m, 200);
	for (int i = 0; i < 2; i++)
		free(dt_xadd_line(C, th_strf("runnel:{late_%d}:out", i), "{\"type\":\"result\",\"message\":\"ok\",\"ts\":1}"));
	for (end = th_now_ms() + 10000; th_now_ms() < end && !(s[0].done && s[1].done);)
		dt_multi_pump(&m, 20);
	for (int i = 0; i < 2; i++) {
		TH_CHECK(s[i].done && strcmp(s[i].rx.body, "{\"type\":\"result\",\"message\":\"ok\",\"ts\":1}\n") == 0,
		         "late_%d: %s", i, s[i].rx.body ? s[i].rx.body : "");
		dt_stream_close(&m, &s[i]);
	}
	dt_multi_cleanup(&m);
	TH_CHECK(!th_file_contains(d2.log, "tail_read_failed") && !th_file_contains(d2.log, "is a cluster"),
	         "taken for what it is: a standalone server (see %s)", d2.log);
	TH_CHECK(dt_disp_stop(&d2), "clean exit (see %s)", d2.log);
}

static void test_lost_sweep(void)
{
	rn_claim_t cl;
	char err[256], **lines = NULL, type[16], code[32];
	size_t n = 0;

	TH_REQUIRE(rn_runstate_claim(th_rc_for(C), "runnel", "lost_1", "w-gone", 300, 0, 3600, &cl, err, sizeof(err)) == 0, "%s", err);
	TH_REQUIRE(cl.status == RN_CLAIM_OK);
	TH_REQUIRE(rn_runstate_start(th_rc_for(C), "runnel", "lost_1", "w-gone", err, sizeof(err)) == 1, "%s", err);
	/* No worker renews the lease: the dispatcher's sweep ends the run. */
	TH_CHECK(th_wait_stream_terminal(C, "runnel:{lost_1}:out", 8000), "run not ended by the sweep");
	TH_REQUIRE(th_stream_read_all(C, "runnel:{lost_1}:out", &lines, NULL, &n) == 0 && n == 1);
	TH_CHECK(th_line_type(lines[0], type, sizeof(type), code, sizeof(code)) == 0 &&
	                 strcmp(type, "error") == 0 && strcmp(code, "worker_lost") == 0,
	         "%s", lines[0]);
	th_strv_free(lines, n);
	TH_CHECK(rn_runstate_get(th_rc_for(C), "runnel", "lost_1", "status", type, sizeof(type), err, sizeof(err)) == 1 &&
	                 strcmp(type, "lost") == 0,
	         "%s", type);
}

/*
 * SIGTERM while an enqueue waits on Kafka: the dispatcher stops taking new
 * connections but keeps running until the delivery report is in, so the
 * caller gets the real answer (202: the job is on Kafka) rather than a
 * dropped connection it would retry into a duplicate run.
 */
static int stream_done(void *arg)
{
	return ((dt_stream_t *)arg)->done;
}

static void test_shutdown_answers(th_kafka_t *k)
{
	dt_multi_t m;
	dt_stream_t s;
	dt_resp_t r;
	int st = -1;

	TH_REQUIRE(post_while_broker_down(k, &m, &s, "/v1/runs", "kd_term"));
	TH_REQUIRE(kill(D.pid, SIGTERM) == 0);
	dt_multi_pump(&m, 300);
	/* Draining: new connections are no longer taken. */
	memset(&r, 0, sizeof(r));
	TH_CHECK(dt_http(&r, "GET", url("/healthz"), NULL, NULL, 0, 1000) == -1,
	         "a new connection during the drain was answered %ld", r.status);
	dt_resp_free(&r);
	TH_REQUIRE(th_kafka_broker_up(k, 1) == 0);
	TH_CHECK(dt_multi_until(&m, stream_done, &s, 10000), "no answer after SIGTERM");
	TH_CHECK(s.rc == CURLE_OK && s.status == 202, "rc %d status %ld body %s", s.rc, s.status,
	         s.rx.body ? s.rx.body : "");
	dt_stream_close(&m, &s);
	dt_multi_cleanup(&m);
	TH_CHECK(th_wait_exit(D.pid, 10000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	         "exit status %d (see %s)", st, D.log);
	D.pid = 0;
}

int main(void)
{
	th_kafka_t k;
	dt_resp_t r;

	dt_servers_start("dispatcher_faults", &RED, &k, 1, &C);
	TH_REQUIRE(dt_disp_start(&D, &RED, &k, (const char *const[]){ "RUNNEL_ENQUEUE_TIMEOUT_MS=3000", "RUNNEL_SWEEP_MS=200", "RUNNEL_KAFKA_PROPERTIES=reconnect.backoff.max.ms=200", NULL }) == 0);
	TH_REQUIRE(dt_wait_ready(&D, 200, 10000));
	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("warm", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);

	test_lost_sweep();
	test_kafka_down(&k);
	test_leave_before_delivery(&k);
	test_redis_down();
	test_redis_late(&k);
	/* Last: it stops the dispatcher (and checks its exit status). */
	test_shutdown_answers(&k);

	if (D.pid > 0)
		TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	dt_servers_stop(C, &k);
	return th_done();
}
