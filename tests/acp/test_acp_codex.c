/*
 * tests/acp/test_acp_codex.c - Codex through ACP, end to end: the real
 * runnel-worker runs {"kind":"acp","preset":"codex"} in bwrap against the
 * fake OpenAI Responses provider (given as OPENAI_BASE_URL in /env).
 *   - an exec_command call creates assets/out.txt: step running, then
 *     succeeded; the result; the file uploaded; state succeeded;
 *   - a command that exits 3: the step fails naming the status, and the
 *     run still ends with the agent's result.
 */
#include "tests/acp/acptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static at_t T;

static void run_codex(const char *run_id, const char *cmd, int fails, dev_stub_otps_t *o)
{
	fp_set(T.openai, &(fp_script_t){ .cmd = cmd, .final = "Codex is done." });
	at_submit(&T, run_id, "{\"kind\":\"acp\",\"preset\":\"codex\"}", NULL, "do it", o);
	TH_REQUIRE(wt_wait_terminal(&T.w, run_id, 90000), "%s ended", run_id);
	size_t n;
	char **l = wt_lines(&T.w, run_id, &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "%s ended with a result", run_id);
	long r = th_lines_find(l, n, 0, "step", "running");
	long s = th_lines_find(l, n, 0, "step", fails ? "failed" : "succeeded");
	TH_CHECK(r >= 0 && s > r, "%s: step running (%ld) then %s (%ld)", run_id, r, fails ? "failed" : "succeeded", s);
	if (!(r >= 0 && s > r))
		for (size_t i = 0; i < n; i++)
			TH_NOTE("%s line %zu: %.300s", run_id, i, l[i]);
	if (s >= 0) {
		TH_CHECK(strstr(l[s], "\"durationMs\":"), "durationMs");
		if (fails)
			TH_CHECK(th_streq(wt_field(l[s], "error"), "the command exited with status 3"), "error: %s",
			         wt_field(l[s], "error"));
	}
	TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), "Codex is done."), "result text: %s", n ? l[n - 1] : "");
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T.w, run_id, "status"), "succeeded"), "state succeeded");
}

int main(int argc, char **argv)
{
	th_init("acp_codex");
	if (at_setup(&T, argc, argv, NULL) == 77)
		return 77;
	pid_t w = at_worker(&T, "wc", NULL);
	wt_warmup(&T.w);
	dev_stub_otps_t o;
	run_codex("run_codex_ok", "mkdir -p assets && echo codex > assets/out.txt", 0, &o);
	TH_CHECK(th_streq(at_upload(&T, &o, "out.txt"), "codex\n"), "assets/out.txt uploaded");
	TH_CHECK(fp_seen(T.openai, "You run inside runnel's tests."), "the system prompt reached the model");
	run_codex("run_codex_fail", "echo partial; exit 3", 1, &o);
	/* Key custody: the sandbox holds the gateway's placeholder only; the
	 * provider got the real key; usage is what the fake reported. */
	int calls0 = fp_calls(T.openai);
	run_codex("run_codex_dump",
	          "mkdir -p assets; { env; for p in /proc/[0-9]*; do cat $p/environ; echo; cat $p/cmdline; echo; done; "
	          "grep -rIl acp-tes[t]-key /root /tmp /run | sed s/^/FOUND$((1+1)):/; } > assets/dump.txt 2>/dev/null",
	          0, &o);
	const char *dump = at_upload(&T, &o, "dump.txt");
	TH_CHECK(dump && strstr(dump, "OPENAI_API_KEY=rgw-") && !strstr(dump, AT_OPENAI_KEY) &&
	                 !strstr(dump, AT_ANTHROPIC_KEY) && !strstr(dump, "FOUND2:"),
	         "placeholders only in the sandbox");
	TH_CHECK(fp_seen(T.openai, "Bearer " AT_OPENAI_KEY), "the provider got the real key");
	int calls = fp_calls(T.openai) - calls0;
	json_t *u = json_loads(wt_state(&T.w, "run_codex_dump", "usage"), 0, NULL);
	TH_CHECK(calls > 0 && json_integer_value(json_object_get(u, "requests")) == calls &&
	                 json_integer_value(json_object_get(u, "input_tokens")) == 100 * calls &&
	                 json_integer_value(json_object_get(u, "output_tokens")) == 20 * calls,
	         "usage of %d calls: %s", calls, wt_state(&T.w, "run_codex_dump", "usage"));
	json_decref(u);
	TH_CHECK(th_redis_scan_contains(T.w.rc, AT_OPENAI_KEY) == 0, "API key in Redis");
	TH_CHECK(!wt_log_has(&T.w, "wc", AT_OPENAI_KEY), "API key in the worker log");
	int st = th_stop(w, 10000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker exit status %d", st);

	/* The process driver: host paths instead of binds, the host workspace
	 * as the session's cwd. */
	const char *proc_env[] = { "RUNNEL_SANDBOX=process", NULL };
	w = at_worker(&T, "wp", proc_env);
	run_codex("run_codex_process", "mkdir -p assets && echo process > assets/out.txt", 0, &o);
	TH_CHECK(th_streq(at_upload(&T, &o, "out.txt"), "process\n"), "process driver: assets/out.txt uploaded");
	st = th_stop(w, 10000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker exit status %d", st);
	at_teardown(&T);
	return th_done();
}
