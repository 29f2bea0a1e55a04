/*
 * tests/acp/test_acp_claude.c - Claude Code through ACP, end to end: the
 * real runnel-worker runs {"kind":"acp","preset":"claude"} in bwrap against
 * the fake Anthropic provider.
 *   - a Bash tool call creates assets/out.txt: a step running, then
 *     succeeded with durationMs; the result text; the file uploaded by the
 *     writeback; state succeeded;
 *   - bad --acp-prefix / --node: the worker exits 2 saying why;
 *   - the same adapter by raw argv; bad acp configs (exact bootstrap_failed);
 *   - the provider answers 500: one error line (agent_error) naming the
 *     provider failure; the API key never in Redis, its AOF or the log;
 *   - secrecy with an ACP agent in the sandbox: a tool call dumps the
 *     environments it can see into assets/; no OTP, worker setting or
 *     prompt in them, and the fake got the API key only as a header.
 */
#include "tests/acp/acptest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static at_t T;

static void test_happy(void)
{
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo hello > assets/out.txt", .final = "Created assets/out.txt." });
	dev_stub_otps_t o;
	at_submit(&T, "run_claude_ok", "{\"kind\":\"acp\",\"preset\":\"claude\"}", NULL, "make the file", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_claude_ok", 90000), "the run ended");
	size_t n;
	char **l = wt_lines(&T.w, "run_claude_ok", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "ended with a result");
	long r = th_lines_find(l, n, 0, "step", "running");
	long s = th_lines_find(l, n, 0, "step", "succeeded");
	TH_CHECK(r >= 0 && s > r, "step running (%ld) then succeeded (%ld)", r, s);
	if (r >= 0 && s >= 0) {
		TH_CHECK(th_streq(wt_field(l[r], "name"), "Bash"), "step name %s", wt_field(l[r], "name"));
		TH_CHECK(th_streq(wt_field(l[r], "id"), wt_field(l[s], "id")), "one step id");
		TH_CHECK(strstr(l[s], "\"durationMs\":"), "durationMs on the succeeded step");
	}
	TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "Created assets/out.txt."), "result text: %s", l[n - 1]);
	th_strv_free(l, n);
	TH_CHECK(th_streq(at_upload(&T, &o, "out.txt"), "hello\n"), "assets/out.txt uploaded by the writeback");
	TH_CHECK(th_streq(wt_state(&T.w, "run_claude_ok", "status"), "succeeded"), "state succeeded");
}

/* A raw argv: the same adapter as any ACP agent (no preset, no mode call);
 * its permission requests are allowed by permission_mode bypass. */
static void test_raw_argv(void)
{
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo raw > assets/out.txt", .final = "Raw done." });
	dev_stub_otps_t o;
	at_submit(&T, "run_claude_raw",
	          "{\"kind\":\"acp\",\"argv\":[\"/run/runnel/node\","
	          "\"/run/runnel/agents/node_modules/@zed-industries/claude-agent-acp/dist/index.js\"]}",
	          NULL, "raw", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_claude_raw", 90000), "the run ended");
	size_t n;
	char **l = wt_lines(&T.w, "run_claude_raw", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "ended with a result: %s", n ? l[n - 1] : "");
	TH_CHECK(th_lines_find(l, n, 0, "step", "succeeded") >= 0, "the tool ran");
	TH_CHECK(th_lines_find(l, n, 0, "ask", NULL) < 0, "no ask");
	TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), "Raw done."), "result text");
	th_strv_free(l, n);
	TH_CHECK(th_streq(at_upload(&T, &o, "out.txt"), "raw\n"), "assets/out.txt uploaded");
}

/* Bad acp configs end bootstrap_failed with the reason. */
static void test_bad_configs(void)
{
	static const char *const cases[][2] = {
		{ "{\"kind\":\"acp\"}",
		  "The agent cannot be started: an acp agent needs exactly one of agent.preset (claude, codex) or agent.argv" },
		{ "{\"kind\":\"acp\",\"preset\":\"gemini\"}",
		  "The agent cannot be started: agent.preset \"gemini\" is not known (claude, codex)" },
		{ "{\"kind\":\"acp\",\"argv\":[]}",
		  "The agent cannot be started: agent.argv must be a non-empty array of strings" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *id = th_strf("run_acp_bad%zu", i);
		dev_stub_otps_t o;
		at_submit(&T, id, cases[i][0], NULL, "bad", &o);
		TH_REQUIRE(wt_wait_terminal(&T.w, id, 30000), "%s ended", id);
		size_t n;
		char **l = wt_lines(&T.w, id, &n);
		TH_CHECK(th_streq(wt_check_terminal(l, n), "bootstrap_failed"), "%s: bootstrap_failed", id);
		TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), cases[i][1]), "%s: %s", id, n ? l[n - 1] : "");
		th_strv_free(l, n);
	}
}

static void test_provider_500(void)
{
	fp_set(T.anthropic, &(fp_script_t){ .status = 500 });
	dev_stub_otps_t o;
	at_submit(&T, "run_claude_500", "{\"kind\":\"acp\",\"preset\":\"claude\"}", NULL, "fail", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_claude_500", 90000), "the run ended");
	size_t n;
	char **l = wt_lines(&T.w, "run_claude_500", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "agent_error"), "code agent_error: %s", n ? l[n - 1] : "");
	TH_CHECK(th_lines_count(l, n, "error", NULL) == 1, "one error line");
	const char *msg = n ? wt_field(l[n - 1], "message") : "";
	TH_CHECK(strstr(msg, "API Error: 500") && strstr(msg, "fake provider failure"),
	         "the error names the provider failure: %s", msg);
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T.w, "run_claude_500", "status"), "failed"), "state failed");
	TH_CHECK(th_streq(wt_state(&T.w, "run_claude_500", "code"), "agent_error"), "state code");
}

static int has(const char *data, size_t len, const char *needle)
{
	return data && memmem(data, len, needle, strlen(needle));
}

static void test_secrets(void)
{
	char *prompt = th_strf("acp-prompt-secret-%ld", (long)getpid());
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets; env > assets/env.txt;"
	                                           " for p in /proc/[0-9]*; do cat $p/environ; echo; cat $p/cmdline; echo; done > assets/all.txt 2>/dev/null;"
	                                           " ls -a /root /tmp > assets/ls.txt;"
	                                           " (touch /run/runnel/agents/pwn || touch /run/runnel/node) 2>/dev/null && echo writable > assets/ro.txt || echo read-only > assets/ro.txt;"
	                                           " ls /proc | grep -c '^[0-9]' > assets/nproc.txt;"
	                                           " grep -rIl acp-tes[t]-key /root /tmp /run 2>/dev/null > assets/found.txt; echo end >> assets/found.txt",
	                                    .final = "Dumped." });
	dev_stub_otps_t o;
	int calls0 = fp_calls(T.anthropic);
	at_submit(&T, "run_claude_secret", "{\"kind\":\"acp\",\"preset\":\"claude\"}", NULL, prompt, &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_claude_secret", 90000), "the run ended");
	size_t n;
	char **l = wt_lines(&T.w, "run_claude_secret", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "succeeded");
	th_strv_free(l, n);
	const char *otps[] = { o.otp_setup, o.otp_run, o.otp_upload };
	static const char *const files[] = { "env.txt", "all.txt" };
	for (size_t f = 0; f < 2; f++) {
		char *data = NULL;
		size_t len = 0;
		TH_CHECK(dev_stub_file_get(T.w.stub, o.session, files[f], &data, &len) == 1, "uploaded %s", files[f]);
		for (size_t i = 0; i < 3; i++)
			TH_CHECK(!has(data, len, otps[i]), "OTP visible to the agent in %s", files[f]);
		TH_CHECK(!has(data, len, "RUNNEL_REDIS_URL") && !has(data, len, "RUNNEL_KAFKA"),
		         "worker settings visible in %s", files[f]);
		TH_CHECK(!has(data, len, T.w.redis.url), "redis url visible in %s", files[f]);
		TH_CHECK(!has(data, len, prompt), "the prompt in an environment or command line (%s)", files[f]);
		/* Provider keys: placeholders only (the model gateway). */
		TH_CHECK(!has(data, len, AT_ANTHROPIC_KEY) && !has(data, len, AT_OPENAI_KEY), "a provider key in %s", files[f]);
		if (f == 0) {
			TH_CHECK(has(data, len, "ANTHROPIC_API_KEY=rgw-") && has(data, len, "ANTHROPIC_BASE_URL=http://"),
			         "the gateway's placeholder and address");
			TH_CHECK(has(data, len, "RUNNEL_RUN_ID=run_claude_secret"), "RUNNEL_RUN_ID set");
			TH_CHECK(has(data, len, "IS_SANDBOX=1") && has(data, len, "DISABLE_TELEMETRY=1"), "preset env");
			TH_CHECK(has(data, len, "HOME=/root"), "HOME is the run's /root");
		}
		free(data);
	}
	const char *ro = at_upload(&T, &o, "ro.txt");
	TH_CHECK(th_streq(ro, "read-only\n"), "the agents' prefix and node are read-only in the sandbox (%s)",
	         ro ? ro : "missing");
	TH_CHECK(access(th_strf("%s/pwn", T.prefix), F_OK) != 0, "nothing written into the prefix");
	const char *np = at_upload(&T, &o, "nproc.txt");
	TH_CHECK(np && strtol(np, NULL, 10) < 40, "the sandbox sees only its own processes (%s)", np ? np : "missing");
	TH_CHECK(fp_seen(T.anthropic, AT_ANTHROPIC_KEY), "the provider got the key");
	const char *found = at_upload(&T, &o, "found.txt");
	TH_CHECK(th_streq(found, "end\n"), "no file of the sandbox holds a key: %s", found ? found : "missing");
	/* The usage the fake reported (100 in, 20 out a call), summed. */
	int calls = fp_calls(T.anthropic) - calls0;
	json_t *u = json_loads(wt_state(&T.w, "run_claude_secret", "usage"), 0, NULL);
	TH_CHECK(calls > 0 && json_integer_value(json_object_get(u, "requests")) == calls &&
	                 json_integer_value(json_object_get(u, "input_tokens")) == 100 * calls &&
	                 json_integer_value(json_object_get(u, "output_tokens")) == 20 * calls,
	         "usage of %d calls: %s", calls, wt_state(&T.w, "run_claude_secret", "usage"));
	json_decref(u);
	for (size_t i = 0; i < 3; i++) {
		TH_CHECK(th_redis_scan_contains(T.w.rc, otps[i]) == 0, "OTP in Redis");
		TH_CHECK(!wt_log_has(&T.w, "wa", otps[i]), "OTP in the worker log");
	}
	TH_CHECK(th_redis_scan_contains(T.w.rc, prompt) == 0, "prompt in Redis");
	TH_CHECK(th_dir_contains(T.w.redis.dir, prompt, strlen(prompt)) == 0, "prompt in the AOF");
	TH_CHECK(!wt_log_has(&T.w, "wa", prompt), "prompt in the worker log");
}

int main(int argc, char **argv)
{
	th_init("acp_claude");
	if (at_setup(&T, argc, argv, "appendonly yes\nappendfsync always\n") == 77)
		return 77;
	/* Bad ACP settings stop the worker at start, exit 2, with the reason. */
	static const char *const bad[][2] = {
		{ "RUNNEL_ACP_PREFIX=agents", "RUNNEL_ACP_PREFIX/--acp-prefix: agents is not an absolute directory with node_modules (run agents/install.sh)" },
		{ "RUNNEL_NODE=/nonexistent/node", "RUNNEL_NODE/--node: /nonexistent/node is not an executable file" },
	};
	for (size_t i = 0; i < 2; i++) {
		const char *env[] = { bad[i][0], NULL };
		char *name = th_strf("bad%zu", i);
		pid_t p = wt_worker(&T.w, name, env);
		int st = 0;
		TH_CHECK(th_wait_exit(p, 10000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: exit 2", bad[i][0]);
		TH_CHECK(wt_log_has(&T.w, name, bad[i][1]), "%s: the log says why", bad[i][0]);
	}
	pid_t w = at_worker(&T, "wa", NULL);
	wt_warmup(&T.w);
	test_happy();
	test_raw_argv();
	test_bad_configs();
	test_provider_500();
	test_secrets();
	/* The API key: never in Redis (values and the AOF's history) or the log. */
	TH_CHECK(th_redis_scan_contains(T.w.rc, AT_ANTHROPIC_KEY) == 0, "API key in Redis");
	TH_CHECK(th_dir_contains(T.w.redis.dir, AT_ANTHROPIC_KEY, strlen(AT_ANTHROPIC_KEY)) == 0, "API key in the AOF");
	TH_CHECK(!wt_log_has(&T.w, "wa", AT_ANTHROPIC_KEY), "API key in the worker log");
	int st = th_stop(w, 10000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker exit status %d", st);
	at_teardown(&T);
	return th_done();
}
