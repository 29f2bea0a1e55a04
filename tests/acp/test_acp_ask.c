/*
 * tests/acp/test_acp_ask.c - permission_mode "ask" with Claude Code through
 * ACP, end to end (real worker, dispatcher and CLI), and cancels:
 *   - an ask line; allowed through the dispatcher's
 *     POST /v1/runs/{id}/replies/{ask_id} (202; a second reply 409): the
 *     ask settled answered, the tool runs, the file is uploaded;
 *   - rejected through `runnel reply RUN ASK --reject`: settled rejected,
 *     the step fails, the agent goes on to its result;
 *   - no reply: settled expired after the (shortened) ask timeout, the
 *     step fails, the agent goes on to its result;
 *   - a cancel during a tool call: cancelled, the step closed failed, no
 *     process of the run left;
 *   - a cancel while an ask is open: the ask settled rejected before the
 *     cancelled line, the step closed.
 */
#include "tests/acp/acptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/dispatcher/dtest.h"

static at_t T;
static dt_disp_t D;

#define ASK_TIMEOUT_SEC 4

static const char *cli_env[4];
static const char *const json_hdr[] = { "Content-Type: application/json", NULL };

static void lines_of(const char *run_id, char ***l, size_t *n)
{
	*l = wt_lines(&T.w, run_id, n);
}

/* The ask's settlement: the second ask line with the same id. */
static const char *settlement(char **l, size_t n, const char *ask_id)
{
	static char status[32];
	status[0] = '\0';
	int seen = 0;
	for (size_t i = 0; i < n; i++) {
		if (!th_streq(wt_field(l[i], "type"), "ask") || !th_streq(wt_field(l[i], "id"), ask_id))
			continue;
		if (seen++ == 1)
			snprintf(status, sizeof(status), "%s", wt_field(l[i], "status"));
	}
	return status;
}

static void check_after_ask(const char *run_id, const char *want_settle, int tool_ran, dev_stub_otps_t *o)
{
	size_t n;
	char **l;
	lines_of(run_id, &l, &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "%s ended with a result", run_id);
	long a = th_lines_find(l, n, 0, "ask", "open");
	TH_CHECK(a >= 0, "%s: an open ask", run_id);
	if (a >= 0) {
		TH_CHECK(th_streq(wt_field(l[a], "kind"), "permission") && th_streq(wt_field(l[a], "tool"), "Bash"),
		         "ask: %s", l[a]);
		TH_CHECK(th_streq(settlement(l, n, wt_field(l[a], "id")), want_settle), "%s: settled %s, want %s",
		         run_id, settlement(l, n, wt_field(l[a], "id")), want_settle);
	}
	TH_CHECK(th_lines_find(l, n, 0, "step", tool_ran ? "succeeded" : "failed") > a, "%s: the step %s", run_id,
	         tool_ran ? "succeeded" : "failed");
	TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), "Finished."), "%s: the agent went on to its result", run_id);
	th_strv_free(l, n);
	TH_CHECK(!!at_upload(&T, o, "out.txt") == tool_ran, "%s: the tool %s", run_id,
	         tool_ran ? "ran" : "did not run");
}

static void test_allow_http(void)
{
	dev_stub_otps_t o;
	at_submit(&T, "run_ask_http", "{\"kind\":\"acp\",\"preset\":\"claude\"}", "ask", "ask me", &o);
	long a = at_wait_line(&T, "run_ask_http", "ask", "open", 60000);
	TH_REQUIRE(a >= 0, "an ask line");
	dt_resp_t r;
	const char *url = th_strf("%s/v1/runs/run_ask_http/replies/ask_1", D.base);
	TH_CHECK(dt_http(&r, "POST", url, json_hdr, "{\"option\":\"allow\"}", -1, 10000) == 0 && r.status == 202,
	         "reply 202 (got %ld %s)", r.status, r.body ? r.body : "");
	dt_resp_free(&r);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_ask_http", 60000), "the run ended");
	TH_CHECK(dt_http(&r, "POST", url, json_hdr, "{\"option\":\"allow\"}", -1, 10000) == 0 && r.status == 409,
	         "a second reply 409 (got %ld)", r.status);
	dt_resp_free(&r);
	check_after_ask("run_ask_http", "answered", 1, &o);
}

static void test_reject_cli(void)
{
	dev_stub_otps_t o;
	at_submit(&T, "run_ask_cli", "{\"kind\":\"acp\",\"preset\":\"claude\"}", "ask", "ask me", &o);
	TH_REQUIRE(at_wait_line(&T, "run_ask_cli", "ask", "open", 60000) >= 0, "an ask line");
	char *argv[] = { CLI_BIN, "reply", "run_ask_cli", "ask_1", "--reject", NULL };
	const char *log = th_strf("%s/reply.log", T.w.dir);
	int st = th_run(argv, cli_env, log, 20000);
	TH_CHECK(st == 0, "runnel reply exits 0 (status %d)", st);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_ask_cli", 60000), "the run ended");
	check_after_ask("run_ask_cli", "rejected", 0, &o);
}

static void test_expired(void)
{
	dev_stub_otps_t o;
	at_submit(&T, "run_ask_expire", "{\"kind\":\"acp\",\"preset\":\"claude\"}", "ask", "ask me", &o);
	TH_REQUIRE(at_wait_line(&T, "run_ask_expire", "ask", "open", 60000) >= 0, "an ask line");
	int64_t t0 = th_now_ms();
	TH_REQUIRE(at_wait_line(&T, "run_ask_expire", "ask", "expired", (ASK_TIMEOUT_SEC + 20) * 1000) >= 0,
	           "the ask expired");
	TH_CHECK(th_now_ms() - t0 >= (ASK_TIMEOUT_SEC - 1) * 1000, "not before the timeout");
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_ask_expire", 60000), "the run ended");
	check_after_ask("run_ask_expire", "expired", 0, &o);
}

static int no_marker_process(void *arg)
{
	return !at_process_with(arg);
}

static int marker_process(void *arg)
{
	return at_process_with(arg);
}

static void test_cancel_tool(void)
{
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "sleep 29.25; echo late > assets/late.txt", .final = "Slept." });
	dev_stub_otps_t o;
	at_submit(&T, "run_acp_cancel", "{\"kind\":\"acp\",\"preset\":\"claude\"}", NULL, "sleep", &o);
	TH_REQUIRE(at_wait_line(&T, "run_acp_cancel", "step", "running", 60000) >= 0, "the tool runs");
	TH_REQUIRE(th_wait_until(marker_process, "sleep 29.25", 20000), "the tool's process is there");
	dt_resp_t r;
	TH_CHECK(dt_http(&r, "POST", th_strf("%s/v1/runs/run_acp_cancel/cancel", D.base), json_hdr, "{}", -1, 10000) == 0 &&
	                 r.status == 202,
	         "cancel 202 (%ld)", r.status);
	dt_resp_free(&r);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_acp_cancel", 30000), "the run ended");
	size_t n;
	char **l = wt_lines(&T.w, "run_acp_cancel", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "cancelled"), "cancelled");
	long f = th_lines_find(l, n, 0, "step", "failed");
	TH_CHECK(f >= 0 && (size_t)f < n - 1, "the open step was closed failed before the terminal line");
	TH_CHECK(th_lines_find(l, n, 0, "result", NULL) < 0, "no result");
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T.w, "run_acp_cancel", "status"), "cancelled"), "state cancelled");
	TH_CHECK(th_wait_until(no_marker_process, "sleep 29.25", 10000), "no process of the run is left");
	TH_CHECK(!at_upload(&T, &o, "late.txt"), "nothing uploaded after a cancel");
}

static void test_cancel_ask(void)
{
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo asked > assets/out.txt", .final = "Finished." });
	dev_stub_otps_t o;
	at_submit(&T, "run_ask_cancel", "{\"kind\":\"acp\",\"preset\":\"claude\"}", "ask", "ask me", &o);
	TH_REQUIRE(at_wait_line(&T, "run_ask_cancel", "ask", "open", 60000) >= 0, "an ask line");
	redisReply *rr = redisCommand(T.w.rc, "XADD runnel:{run_ask_cancel}:ctl * msg %s",
	                              "{\"type\":\"cancel\",\"reason\":\"test\"}");
	TH_CHECK(rr && rr->type == REDIS_REPLY_STRING, "XADD cancel");
	freeReplyObject(rr);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_ask_cancel", 30000), "the run ended");
	size_t n;
	char **l = wt_lines(&T.w, "run_ask_cancel", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "cancelled"), "cancelled");
	TH_CHECK(th_streq(settlement(l, n, "ask_1"), "rejected"), "the open ask settled rejected: %s",
	         settlement(l, n, "ask_1"));
	TH_CHECK(th_lines_find(l, n, 0, "step", "failed") >= 0, "the step closed");
	th_strv_free(l, n);
}

int main(int argc, char **argv)
{
	th_init("acp_ask");
	if (at_setup(&T, argc, argv, NULL) == 77)
		return 77;
	TH_REQUIRE(dt_disp_start(&D, &T.w.redis, &T.w.kafka, (const char *const[]){ th_strf("RUNNEL_JOBS_TOPIC=%s", T.w.topic), NULL }) == 0, "dispatcher");
	cli_env[0] = th_strf("RUNNEL_REDIS_URL=%s", T.w.redis.url);
	cli_env[1] = th_strf("RUNNEL_DISPATCHER_URL=%s", D.base);
	cli_env[2] = NULL;
	const char *extra[] = { th_strf("RUNNEL_ASK_TIMEOUT_SEC=%d", ASK_TIMEOUT_SEC), NULL };
	pid_t w = at_worker(&T, "wk", extra);
	wt_warmup(&T.w);
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo asked > assets/out.txt", .final = "Finished." });
	test_allow_http();
	test_reject_cli();
	test_expired();
	test_cancel_tool();
	test_cancel_ask();
	int st = th_stop(w, 10000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker exit status %d", st);
	dt_disp_stop(&D);
	at_teardown(&T);
	return th_done();
}
