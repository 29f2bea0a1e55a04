/*
 * tests/worker/test_worker_asks.c - asks and replies through one worker
 * (SPEC §3, §4): the mock "ask" script under permission_mode ask, replies
 * written with XADD on the control stream (allow, reject, text), a reply to
 * an unknown or settled ask ignored and logged, a cancel with an open ask,
 * the modes bypass and deny, the job's permission_mode, and a bad
 * permission_mode value.  Ask expiry is in test_worker_askexpiry.c (it
 * needs a short worker timeout).
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static wt_t T;

static void submit_ask(const char *run_id, const char *mode)
{
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"ask\"}");
	if (mode)
		json_object_set_new(run.config, "permission_mode", json_string(mode));
	wt_submit(&T, run_id, &run, "make assets", 0, 0, &o);
	json_decref(run.config);
}

typedef struct {
	const char *run_id;
	const char *status;
	int count; /* how many ask lines with that status */
} ask_wait_t;

static int ask_seen(void *arg)
{
	ask_wait_t *w = arg;
	size_t n;
	char **l = wt_lines(&T, w->run_id, &n);
	int c = 0;
	for (size_t i = 0; i < n; i++)
		if (th_streq(wt_field(l[i], "type"), "ask") && th_streq(wt_field(l[i], "status"), w->status))
			c++;
	th_strv_free(l, n);
	return c >= w->count;
}

/* Starts the mock "ask" script under permission_mode ask and waits for its
 * open ask line. */
static void open_ask(const char *run_id)
{
	submit_ask(run_id, "ask");
	ask_wait_t w = { run_id, "open", 1 };
	TH_REQUIRE(th_wait_until(ask_seen, &w, 20000), "the ask line appeared");
}

/* Opens an ask, sends msg on the control stream and returns the run's
 * lines once it ended. */
static char **reply_and_end(const char *run_id, const char *msg, size_t *n)
{
	open_ask(run_id);
	wt_ctl(&T, run_id, msg);
	return wt_ended_lines(&T, run_id, 20000, n);
}

/* Allowed: log, step running, ask open, ask answered, step succeeded, result. */
static void test_allow(void)
{
	size_t n;
	char **l = reply_and_end("run_allow", "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}", &n);
	TH_CHECK(n == 6, "%zu lines", n);
	if (n == 6) {
		TH_CHECK(th_streq(wt_field(l[1], "status"), "running"), "%s", l[1]);
		TH_CHECK(th_streq(wt_field(l[2], "type"), "ask") && th_streq(wt_field(l[2], "id"), "ask_1") &&
		                 th_streq(wt_field(l[2], "kind"), "permission") && th_streq(wt_field(l[2], "status"), "open") &&
		                 th_streq(wt_field(l[2], "title"), "Run: mkdir -p assets"),
		         "%s", l[2]);
		TH_CHECK(th_streq(wt_field(l[3], "type"), "ask") && th_streq(wt_field(l[3], "id"), "ask_1") &&
		                 th_streq(wt_field(l[3], "status"), "answered") &&
		                 th_streq(wt_field(l[3], "option"), "allow_once"),
		         "%s", l[3]);
		TH_CHECK(th_streq(wt_field(l[4], "status"), "succeeded"), "%s", l[4]);
		TH_CHECK(th_streq(wt_field(l[5], "message"), "Done: make assets"), "%s", l[5]);
	}
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_allow", "status"), "succeeded"));
}

/* Rejected: the step fails and the agent still ends with its result. */
static void test_reject(const char *run_id, const char *reply, const char *status,
                        const char *field, const char *value, const char *step_error)
{
	size_t n;
	char **l = reply_and_end(run_id, reply, &n);
	int a = (int)th_lines_find(l, n, 0, "ask", status);
	TH_CHECK(a >= 0, "%s: ask %s", run_id, status);
	if (a >= 0 && field)
		TH_CHECK(th_streq(wt_field(l[a], field), value), "%s", l[a]);
	int f = (int)th_lines_find(l, n, 0, "step", "failed");
	TH_CHECK(f > a, "%s: step failed after the settlement", run_id);
	if (f >= 0)
		TH_CHECK(th_streq(wt_field(l[f], "error"), step_error), "%s", l[f]);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "Finished without running the tool"), "%s", l[n - 1]);
	th_strv_free(l, n);
}

/* Replies to an unknown ask, a settled ask, and with a foreign option are
 * ignored and logged; the run goes on. */
static void test_ignored(void)
{
	open_ask("run_ign");
	wt_ctl(&T, "run_ign", "{\"type\":\"reply\",\"id\":\"ask_404\",\"option\":\"allow_once\"}");
	wt_ctl(&T, "run_ign", "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"always\"}");
	wt_ctl(&T, "run_ign", "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\",\"reject\":true}");
	wt_ctl(&T, "run_ign", "{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true}");
	wt_ctl(&T, "run_ign", "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}");
	size_t n;
	char **l = wt_ended_lines(&T, "run_ign", 20000, &n);
	int asks = 0;
	for (size_t i = 0; i < n; i++)
		if (th_streq(wt_field(l[i], "type"), "ask"))
			asks++;
	TH_CHECK(asks == 2, "one open and one settlement line (%d)", asks);
	TH_CHECK((int)th_lines_find(l, n, 0, "ask", "rejected") >= 0, "settled by the first valid reply");
	th_strv_free(l, n);
	TH_CHECK(wt_log_has(&T, "w1", "a reply to ask ask_404 was ignored: no such ask"), "unknown logged");
	TH_CHECK(wt_log_has(&T, "w1", "a reply to ask ask_1 was ignored: option always is not one of its options"),
	         "foreign option logged");
	TH_CHECK(wt_log_has(&T, "w1", "ignored a control message: reply: give exactly one of option, text, reject"),
	         "two answers logged");
	TH_CHECK(wt_log_has(&T, "w1", "a reply to ask ask_1 was ignored: already settled"), "settled logged");
}

/* A cancel while the ask is open: ask rejected, step failed, then cancelled. */
static void test_cancel_open(void)
{
	size_t n;
	char **l = reply_and_end("run_cask", "{\"type\":\"cancel\",\"reason\":\"user\"}", &n);
	TH_CHECK(n == 6, "%zu lines", n);
	if (n == 6) {
		TH_CHECK(th_streq(wt_field(l[3], "type"), "ask") && th_streq(wt_field(l[3], "status"), "rejected") &&
		                 th_streq(wt_field(l[3], "id"), "ask_1"),
		         "%s", l[3]);
		TH_CHECK(th_streq(wt_field(l[4], "type"), "step") && th_streq(wt_field(l[4], "status"), "failed"), "%s", l[4]);
	}
	TH_CHECK(th_streq(wt_check_terminal(l, n), "cancelled"));
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_cask", "status"), "cancelled"));
}

/* bypass (the default) never asks; deny refuses without asking. */
static void test_modes(void)
{
	submit_ask("run_bypass", NULL);
	size_t n;
	char **l = wt_ended_lines(&T, "run_bypass", 20000, &n);
	TH_CHECK((int)th_lines_find(l, n, 0, "ask", NULL) < 0, "no ask under bypass");
	TH_CHECK((int)th_lines_find(l, n, 0, "step", "succeeded") >= 0, "tool ran under bypass");
	th_strv_free(l, n);

	submit_ask("run_deny", "deny");
	l = wt_ended_lines(&T, "run_deny", 20000, &n);
	TH_CHECK((int)th_lines_find(l, n, 0, "ask", NULL) < 0, "no ask under deny");
	int f = (int)th_lines_find(l, n, 0, "step", "failed");
	TH_CHECK(f >= 0 && th_streq(wt_field(l[f], "error"), "permission_mode deny refuses tool calls"), "deny");
	th_strv_free(l, n);

	/* An agent printing an ask outside permission_mode ask: a warn line. */
	wt_submit_agent(&T, "run_askbypass",
	                "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	                "\"read t; echo '{\\\"type\\\":\\\"ask\\\",\\\"id\\\":\\\"a\\\",\\\"kind\\\":\\\"question\\\",\\\"question\\\":\\\"q\\\",\\\"status\\\":\\\"open\\\"}';"
	                " echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"ok\\\"}'\"]}",
	                "p", 0, 0, NULL);
	l = wt_ended_lines(&T, "run_askbypass", 20000, &n);
	TH_CHECK(n == 2, "%zu lines", n);
	if (n == 2)
		TH_CHECK(th_streq(wt_field(l[0], "message"),
		                  "invalid agent output: ask: the run's permission_mode is not ask: "
		                  "{\"type\":\"ask\",\"id\":\"a\",\"kind\":\"question\",\"question\":\"q\",\"status\""),
		         "%s", l[0]);
	th_strv_free(l, n);
}

/* The job's permission_mode applies when the config has none; the turn
 * line carries it and the ask timeout. */
static void test_job_mode_and_turn(void)
{
	dev_stub_otps_t o;
	wt_add_agent_run(&T,
	                 "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	                 "\"read t; printf '%s' \\\"$t\\\" | grep -q '\\\"permission_mode\\\":\\\"deny\\\",\\\"ask_timeout_sec\\\":600'"
	                 " && echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"turn ok\\\"}'\"]}",
	                 &o);
	json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s}", "v", 1, "run_id", "run_jobmode",
	                      "agent_url", o.agent_url, "otp_setup", o.otp_setup, "otp_run", o.otp_run,
	                      "prompt", "p", "permission_mode", "deny");
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	wt_produce_raw(&T, "run_jobmode", s, strlen(s));
	free(s);
	TH_REQUIRE(wt_wait_terminal(&T, "run_jobmode", 20000), "ended");
	TH_CHECK(th_streq(wt_run_code(&T, "run_jobmode", NULL), ""), "the turn had the job's mode");
}

/* A bad value: the run ends bootstrap_failed naming the field; a bad job
 * value goes to the DLQ with the exact reason (tests/proto covers it). */
static void test_bad_mode(void)
{
	submit_ask("run_badmode", "sometimes");
	size_t n;
	char **l = wt_ended_lines(&T, "run_badmode", 20000, &n);
	TH_CHECK(n == 1, "%zu lines", n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "bootstrap_failed"));
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"),
		                  "The agent cannot be started: permission_mode must be bypass, ask or deny (got \"sometimes\")"),
		         "%s", l[n - 1]);
	th_strv_free(l, n);
}

int main(void)
{
	pid_t w = wt_start(&T, "worker_asks", 2, "w1", NULL);
	test_allow();
	test_reject("run_rej", "{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true}", "rejected", NULL, NULL,
	            "the user rejected the tool call");
	test_reject("run_rejopt", "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"reject_once\"}", "answered",
	            "option", "reject_once", "the user rejected the tool call");
	test_reject("run_text", "{\"type\":\"reply\",\"id\":\"ask_1\",\"text\":\"use rm instead\"}", "answered",
	            "text", "use rm instead", "the user answered instead: use rm instead");
	test_ignored();
	test_cancel_open();
	test_modes();
	test_job_mode_and_turn();
	test_bad_mode();
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
