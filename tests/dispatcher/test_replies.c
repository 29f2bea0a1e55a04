/*
 * tests/dispatcher/test_replies.c - asks answered through the whole stack:
 * runs enqueued with POST /v1/runs (permission_mode ask, the mock "ask"
 * script) on the real worker; replies by POST /v1/runs/{id}/replies/{ask}
 * (202, then 409 for the settled ask, 404 for an unknown run or ask, 400
 * with the exact message for bad bodies), by `runnel reply --via
 * dispatcher` and by `runnel reply` straight to Redis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "dev/stub.h"
#include "tests/dispatcher/dtest.h"

#ifndef WORKER_BIN
#error WORKER_BIN must name runnel-worker
#endif
#ifndef RUNNEL_BIN
#error RUNNEL_BIN must name runnel
#endif

static dt_disp_t D;
static redisContext *C;
static dev_stub_t *S;
static const char *TMP; /* one scratch dir (th_tmpdir makes a new one each call) */
static const char *const CT[] = { "Content-Type: application/json", NULL };

static const char *url(const char *path)
{
	return th_strf("%s%s", D.base, path);
}

/* Enqueues a mock "ask" run with POST /v1/runs (the job's permission_mode). */
static void start_run(const char *run_id, const char *mode)
{
	dev_stub_otps_t o;
	dev_stub_run_t run;
	dt_resp_t r;

	memset(&run, 0, sizeof(run));
	run.config = json_pack("{s:{s:s,s:s}}", "agent", "kind", "mock", "script", "ask");
	TH_REQUIRE(dev_stub_add_run(S, &run, &o) == 0);
	json_decref(run.config);
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "agent_url", o.agent_url, "otp_setup", o.otp_setup,
	                      "otp_run", o.otp_run, "prompt", "make assets", "run_id", run_id,
	                      "permission_mode", mode);
	char *body = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), CT, body, -1, 15000) == 0 && r.status == 202,
	           "enqueue %s: %ld %s", run_id, r.status, r.body);
	dt_resp_free(&r);
	free(body);
}

static int has_open_ask(void *arg)
{
	char **lines = NULL;
	size_t n = 0;
	int found = 0;
	if (th_stream_read_all(C, th_strf("runnel:{%s}:out", (const char *)arg), &lines, NULL, &n) != 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (strstr(lines[i], "\"type\":\"ask\"") && strstr(lines[i], "\"status\":\"open\""))
			found = 1;
	th_strv_free(lines, n);
	return found;
}

/* The run's lines once it ended; checks the ask was settled as want and
 * the step and the result followed. */
static void check_settled(const char *run_id, const char *status, const char *step)
{
	char **lines = NULL;
	size_t n = 0;
	int ask = -1, st = -1;
	TH_CHECK(th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", run_id), 30000), "%s ended", run_id);
	TH_REQUIRE(th_stream_read_all(C, th_strf("runnel:{%s}:out", run_id), &lines, NULL, &n) == 0);
	for (size_t i = 0; i < n; i++) {
		if (strstr(lines[i], "\"type\":\"ask\"") && strstr(lines[i], th_strf("\"status\":\"%s\"", status)))
			ask = (int)i;
		if (strstr(lines[i], "\"type\":\"step\"") && strstr(lines[i], th_strf("\"status\":\"%s\"", step)))
			st = (int)i;
	}
	TH_CHECK(ask >= 0 && st > ask, "%s: ask %s at %d, step %s at %d", run_id, status, ask, step, st);
	TH_CHECK(n > 0 && strstr(lines[n - 1], "\"type\":\"result\""), "%s: %s", run_id, n ? lines[n - 1] : "");
	th_strv_free(lines, n);
}

static void expect(const char *path, const char *body, long status, const char *message)
{
	dt_resp_t r;
	TH_REQUIRE(dt_http(&r, "POST", url(path), CT, body, -1, 15000) == 0);
	TH_CHECK(r.status == status, "%s %s: %ld %s", path, body, r.status, r.body);
	if (message) {
		json_t *j = json_loads(r.body, 0, NULL);
		const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
		TH_CHECK(m && strcmp(m, message) == 0, "%s %s: %s", path, body, r.body);
		json_decref(j);
	}
	dt_resp_free(&r);
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	char err[256];
	pid_t worker;

	dt_servers_start("dispatcher_replies", &red, &k, 1, &C);
	TMP = th_tmpdir();
	TH_REQUIRE(TMP);
	S = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(S, "stub: %s", err);
	TH_REQUIRE(dt_disp_start(&D, &red, &k, NULL) == 0);
	worker = dt_worker_start(WORKER_BIN, &red, &k, TMP, "w-replies", 4);

	/* 1. HTTP: allow, then the settled ask answers 409. */
	start_run("rp_http", "ask");
	TH_REQUIRE(th_wait_until(has_open_ask, "rp_http", 60000), "no ask from rp_http");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"option\":\"sometimes\"}", 400,
	       "option: not one of the ask's options (allow_once, reject_once)");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"option\":\"allow_once\"}", 202, NULL);
	check_settled("rp_http", "answered", "succeeded");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"reject\":true}", 409, "ask_id: the ask is already settled");
	expect("/v1/runs/rp_http/replies/ask_7", "{\"reject\":true}", 404, "ask_id: no such ask");
	expect("/v1/runs/rp_nosuch/replies/ask_1", "{\"reject\":true}", 404, "run_id: no such run");

	/* Bad requests name the field. */
	expect("/v1/runs/rp_http/replies/ask_1", "{}", 400, "body: give exactly one of option, text, reject");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"option\":\"a\",\"reject\":true}", 400,
	       "body: give exactly one of option, text, reject");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"option\":1}", 400, "option: not a string");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"reject\":false}", 400, "reject: must be true");
	expect("/v1/runs/rp_http/replies/ask_1", "{\"text\":\"x\",\"colour\":1}", 400,
	       "body: only \"option\", \"text\" or \"reject\" is accepted");
	expect("/v1/runs/rp_http/replies/ask_1", "[1]", 400, "body: must be a JSON object with option, text or reject");
	expect("/v1/runs/rp_http/replies/bad%20id", "{\"reject\":true}", 400,
	       "ask_id: must be 1-128 characters of A-Z a-z 0-9 _ . : -");
	expect("/v1/runs/bad.id/replies/ask_1", "{\"reject\":true}", 400, NULL);

	/* 2. HTTP reject: the step fails, the run still ends with its result. */
	start_run("rp_rej", "ask");
	TH_REQUIRE(th_wait_until(has_open_ask, "rp_rej", 60000), "no ask from rp_rej");
	expect("/v1/runs/rp_rej/replies/ask_1", "{\"reject\":true}", 202, NULL);
	check_settled("rp_rej", "rejected", "failed");

	/* 3. The CLI through the dispatcher, and straight to Redis. */
	start_run("rp_cli", "ask");
	start_run("rp_cli2", "ask");
	TH_REQUIRE(th_wait_until(has_open_ask, "rp_cli", 60000), "no ask from rp_cli");
	TH_REQUIRE(th_wait_until(has_open_ask, "rp_cli2", 60000), "no ask from rp_cli2");
	{
		char *a1[] = { RUNNEL_BIN, "reply", "rp_cli", "ask_1", "allow_once", "--via", "dispatcher", NULL };
		const char *e1[] = { th_strf("RUNNEL_DISPATCHER_URL=%s", D.base), NULL };
		int st = th_run(a1, e1, th_strf("%s/cli1.log", TMP), 20000);
		TH_CHECK(st == 0, "runnel reply --via dispatcher: %d", st);
		char *a2[] = { RUNNEL_BIN, "reply", "rp_cli2", "ask_1", "--reject", NULL };
		const char *e2[] = { th_strf("RUNNEL_REDIS_URL=%s", red.url), NULL };
		st = th_run(a2, e2, th_strf("%s/cli2.log", TMP), 20000);
		TH_CHECK(st == 0, "runnel reply (redis): %d", st);
		/* Again: settled, exit 1. */
		char *a3[] = { RUNNEL_BIN, "reply", "rp_cli", "ask_1", "allow_once", "--via", "dispatcher", NULL };
		check_settled("rp_cli", "answered", "succeeded");
		st = th_run(a3, e1, th_strf("%s/cli3.log", TMP), 20000);
		TH_CHECK(st == 1, "settled via the dispatcher: %d", st);
		TH_CHECK(th_file_contains(th_strf("%s/cli3.log", TMP),
		                          "runnel reply: the dispatcher answered 409: conflict: ask_id: the ask is already settled"),
		         "cli3 message: %s", th_file_read(th_strf("%s/cli3.log", TMP), NULL));
	}
	check_settled("rp_cli2", "rejected", "failed");

	th_stop(worker, 30000);
	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	dev_stub_stop(S);
	dt_servers_stop(C, &k);
	return th_done();
}
