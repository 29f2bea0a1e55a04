/*
 * tests/acp/test_acp_session.c - the ACP client session (worker/agent_acp.c)
 * against the real Claude Code and Codex ACP adapters (installed by
 * agents/install.sh) in a real bwrap sandbox, talking to the scripted fake
 * providers on loopback.  No Redis, Kafka or worker: the session's emitted
 * envelope lines are collected and checked here.
 *
 *   test_acp_session PREFIX
 *
 * Cases: Claude bypass (tool step with duration, result, the file), a slow
 * provider, Claude with a provider 500 (one agent_error naming it, no API key), Claude ask
 * allow / reject, deny, cancel during a tool call; Codex bypass and a
 * failing command.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/acp/fakeprov.h"
#include "tests/support/harness.h"
#include "worker/agent_acp.h"
#include "worker/sandbox.h"

#define API_KEY "sk-ant-test-secret-0123456789"
#define OAI_KEY "sk-oai-test-secret-0123456789"

static const char *prefix;
static char node[4096];
static fp_t *anthropic, *openai;

typedef enum { ASK_NONE = 0,
	       ASK_ALLOW,
	       ASK_REJECT } ask_policy_t;

typedef struct sess {
	worker_acp_t *s;
	worker_sandbox_t sb;
	char **lines;
	size_t n;
	ask_policy_t policy;
	int cancel_on_step; /* cancel once a step runs */
	int cancelled;
	char pending_ask[32];
} sess_t;

static void emit_cb(void *loop, const char *line, size_t len)
{
	sess_t *t = loop;
	t->lines = realloc(t->lines, (t->n + 1) * sizeof(char *));
	t->lines[t->n++] = th_memdup0(line, len);
	if (getenv("ACP_TEST_VERBOSE"))
		fprintf(stderr, "# emit %.*s\n", (int)(len > 300 ? 300 : len), line);
	json_t *j = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	if (type && !strcmp(type, "ask") && t->policy != ASK_NONE)
		snprintf(t->pending_ask, sizeof(t->pending_ask), "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
}

static int write_cb(void *loop, const char *buf, size_t len)
{
	sess_t *t = loop;
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(t->sb.stdin_fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

static const char *field(sess_t *t, long i, const char *name)
{
	return i < 0 ? "" : th_line_field(t->lines[i], name, NULL);
}

static int any_line_has(sess_t *t, const char *needle)
{
	for (size_t i = 0; i < t->n; i++)
		if (strstr(t->lines[i], needle))
			return 1;
	return 0;
}

/* Runs one session to its end; ws is the host workspace. */
static int run(sess_t *t, worker_acp_preset_t preset, worker_acp_perm_t perm, const char *ws,
               const char *prompt, int timeout_ms)
{
	char err[512];
	char *argv[8] = { 0 };
	char a0[4200], a1[4200];
	char *envp[24] = { 0 };
	int ne = 0;
	envp[ne++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	envp[ne++] = "HOME=/root";
	envp[ne++] = "TMPDIR=/tmp";
	json_t *vars = json_object();
	if (preset == WORKER_ACP_PRESET_CLAUDE) {
		snprintf(a0, sizeof(a0), "%s", WORKER_ACP_NODE_IN_SANDBOX);
		snprintf(a1, sizeof(a1), "%s/node_modules/@zed-industries/claude-agent-acp/dist/index.js",
		         WORKER_ACP_PREFIX_IN_SANDBOX);
		argv[0] = a0;
		argv[1] = a1;
		envp[ne++] = th_strf("ANTHROPIC_BASE_URL=%s", fp_url(anthropic));
		envp[ne++] = "ANTHROPIC_API_KEY=" API_KEY;
		envp[ne++] = "DISABLE_AUTOUPDATER=1";
		envp[ne++] = "DISABLE_TELEMETRY=1";
		envp[ne++] = "DISABLE_ERROR_REPORTING=1";
		envp[ne++] = "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1";
		envp[ne++] = "IS_SANDBOX=1";
		envp[ne++] = "CLAUDE_CODE_MAX_RETRIES=0";
		json_object_set_new(vars, "ANTHROPIC_API_KEY", json_string(API_KEY));
	} else {
		snprintf(a0, sizeof(a0), "%s/node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp",
		         WORKER_ACP_PREFIX_IN_SANDBOX);
		argv[0] = a0;
		argv[1] = "-c";
		argv[2] = "model_provider=\"runnel\"";
		argv[3] = "-c";
		argv[4] = th_strf("model_providers.runnel={name=\"runnel\",base_url=\"%s/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}",
		                  fp_url(openai));
		argv[5] = "-c";
		argv[6] = "analytics.enabled=false";
		envp[ne++] = "OPENAI_API_KEY=" OAI_KEY;
		envp[ne++] = "RUST_LOG=error";
		envp[ne++] = "NO_COLOR=1";
		json_object_set_new(vars, "OPENAI_API_KEY", json_string(OAI_KEY));
	}
	char *binds[3] = { th_strf("%s:%s", prefix, WORKER_ACP_PREFIX_IN_SANDBOX),
		           th_strf("%s:%s", node, WORKER_ACP_NODE_IN_SANDBOX), NULL };
	worker_sandbox_spec_t spec = { 0 };
	spec.driver = WORKER_SANDBOX_BWRAP;
	spec.init_path = RUNNEL_TEST_SANDBOX_INIT;
	spec.workspace_dir = ws;
	spec.argv = argv;
	spec.envp = envp;
	spec.ro_binds = binds;
	spec.share_net = 1;
	spec.rlimit_nofile = 4096;

	worker_acp_opts_t o = { 0 };
	o.preset = preset;
	o.perm = perm;
	o.run_id = "run_test";
	o.prompt = prompt;
	o.system_prompt = "You are tested.";
	o.variables = vars;
	/* The run keeps its workspace descriptor open for the session (leaked here). */
	o.workspace_fd = ws ? open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	t->s = worker_acp_new(&o, err, sizeof(err));
	TH_REQUIRE(t->s, "session: %s", err);
	TH_REQUIRE(worker_sandbox_spawn(&spec, &t->sb, err, sizeof(err)) == 0, "spawn: %s", err);
	worker_agent_io_t io = { emit_cb, write_cb, t };
	int fl = fcntl(t->sb.stdin_fd, F_GETFL);
	fcntl(t->sb.stdin_fd, F_SETFL, fl & ~O_NONBLOCK);
	TH_REQUIRE(worker_acp_start(t->s, &io) == 0);

	char buf[65536];
	char *acc = NULL;
	size_t acc_len = 0;
	int64_t deadline = th_now_ms() + timeout_ms;
	int out_open = 1;
	while (out_open && !worker_acp_done(t->s) && th_now_ms() < deadline) {
		struct pollfd pf[2] = { { t->sb.stdout_fd, POLLIN, 0 }, { t->sb.stderr_fd, POLLIN, 0 } };
		if (poll(pf, 2, 100) <= 0)
			goto after_read;
		if (pf[1].revents) {
			ssize_t r = read(t->sb.stderr_fd, buf, sizeof(buf));
			if (r > 0 && getenv("ACP_TEST_VERBOSE"))
				fprintf(stderr, "# stderr %.*s", (int)r, buf);
		}
		if (pf[0].revents) {
			ssize_t r = read(t->sb.stdout_fd, buf, sizeof(buf));
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				out_open = 0;
			} else if (r > 0) {
				acc = realloc(acc, acc_len + (size_t)r + 1);
				memcpy(acc + acc_len, buf, (size_t)r);
				acc_len += (size_t)r;
				char *nl;
				while ((nl = memchr(acc, '\n', acc_len))) {
					size_t ll = (size_t)(nl - acc);
					worker_acp_on_line(t->s, acc, ll, &io);
					memmove(acc, nl + 1, acc_len - ll - 1);
					acc_len -= ll + 1;
				}
			}
		}
	after_read:
		if (t->pending_ask[0]) {
			char id[32];
			snprintf(id, sizeof(id), "%s", t->pending_ask);
			t->pending_ask[0] = '\0';
			TH_CHECK(worker_acp_on_reply(t->s, id, t->policy == ASK_ALLOW ? "allow_once" : NULL, NULL,
			                             t->policy == ASK_REJECT, &io) == 0,
			         "reply to %s", id);
			TH_CHECK(worker_acp_on_reply(t->s, id, "allow_once", NULL, 0, &io) == -1, "a second reply is refused");
		}
		if (t->cancel_on_step && !t->cancelled && th_lines_find(t->lines, t->n, 0, "step", "running") >= 0) {
			t->cancelled = 1;
			worker_acp_on_cancel(t->s, &io);
		}
	}
	if (!worker_acp_done(t->s))
		worker_acp_on_eof(t->s, &io);
	free(acc);
	int ended = th_now_ms() < deadline;
	worker_sandbox_kill(&t->sb, SIGTERM);
	for (int i = 0; i < 200 && worker_sandbox_reap(&t->sb) == 0; i++)
		usleep(10000);
	worker_sandbox_destroy(&t->sb);
	worker_acp_free(t->s);
	json_decref(vars);
	return ended;
}

static void sess_free(sess_t *t)
{
	th_strv_free(t->lines, t->n);
	memset(t, 0, sizeof(*t));
}

static int file_is(const char *path, const char *want)
{
	char *d = th_file_read(path, NULL);
	int ok = d && !strcmp(d, want);
	free(d);
	return ok;
}

static void test_claude_bypass(void)
{
	const char *ws = th_tmpdir();
	fp_set(anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo hello > assets/out.txt", .final = "Created assets/out.txt." });
	sess_t t = { 0 };
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, ws, "make the file", 60000), "ended in time");
	long r = th_lines_find(t.lines, t.n, 0, "step", "running");
	long s = th_lines_find(t.lines, t.n, 0, "step", "succeeded");
	long res = th_lines_find(t.lines, t.n, 0, "result", NULL);
	TH_CHECK(r >= 0 && s > r, "step running (%ld) then succeeded (%ld)", r, s);
	TH_CHECK(th_streq(field(&t, r, "name"), "Bash"), "step name %s", field(&t, r, "name"));
	TH_CHECK(strstr(field(&t, r, "args"), "assets/out.txt"), "args %s", field(&t, r, "args"));
	TH_CHECK(th_streq(field(&t, s, "id"), field(&t, r, "id")), "same step id");
	TH_CHECK(strtol(field(&t, s, "durationMs"), NULL, 10) > 0 || th_streq(field(&t, s, "durationMs"), "0"), "durationMs");
	TH_CHECK(strlen(field(&t, s, "durationMs")) > 0, "durationMs present");
	TH_CHECK(res > s && th_streq(field(&t, res, "message"), "Created assets/out.txt."), "result %s",
	         field(&t, res, "message"));
	TH_CHECK(th_lines_find(t.lines, t.n, 0, "ask", NULL) < 0, "no ask in bypass mode");
	TH_CHECK(file_is(th_strf("%s/assets/out.txt", ws), "hello\n"), "the tool wrote the file");
	TH_CHECK(fp_seen(anthropic, "You are tested."), "the system prompt reached the model");
	TH_CHECK(!any_line_has(&t, API_KEY), "no API key in the lines");
	sess_free(&t);
}

/* A slow provider: the session waits for it (no timeout of its own). */
static void test_claude_slow(void)
{
	const char *ws = th_tmpdir();
	fp_set(anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo slow > assets/out.txt", .final = "Slowly done.", .delay_ms = 1200 });
	sess_t t = { 0 };
	int calls = fp_calls(anthropic);
	int64_t t0 = th_now_ms();
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, ws, "take your time", 60000), "ended in time");
	TH_CHECK(th_now_ms() - t0 >= 2400, "two slow model calls were waited for (%lld ms)", (long long)(th_now_ms() - t0));
	TH_CHECK(fp_calls(anthropic) - calls >= 2, "the provider answered the tool call and the text");
	long res = th_lines_find(t.lines, t.n, 0, "result", NULL);
	TH_CHECK(res >= 0 && th_streq(field(&t, res, "message"), "Slowly done."), "result %s", field(&t, res, "message"));
	TH_CHECK(file_is(th_strf("%s/assets/out.txt", ws), "slow\n"), "the tool ran");
	sess_free(&t);
}

static void test_claude_500(void)
{
	const char *ws = th_tmpdir();
	fp_set(anthropic, &(fp_script_t){ .status = 500 });
	sess_t t = { 0 };
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, ws, "fail please", 60000), "ended in time");
	long e = th_lines_find(t.lines, t.n, 0, "error", NULL);
	TH_CHECK(e >= 0 && th_lines_find(t.lines, t.n, (size_t)e + 1, "error", NULL) < 0, "exactly one error line");
	TH_CHECK(th_streq(field(&t, e, "code"), "agent_error"), "code %s", field(&t, e, "code"));
	TH_CHECK(strstr(field(&t, e, "message"), "500") && strstr(field(&t, e, "message"), "fake provider failure"),
	         "message names the provider failure: %s", field(&t, e, "message"));
	TH_CHECK(th_lines_find(t.lines, t.n, 0, "result", NULL) < 0, "no result");
	TH_CHECK(!any_line_has(&t, API_KEY), "no API key in the lines");
	sess_free(&t);
}

static void test_claude_ask(ask_policy_t policy)
{
	const char *ws = th_tmpdir();
	fp_set(anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo asked > assets/out.txt", .final = "Finished." });
	sess_t t = { 0 };
	t.policy = policy;
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_ASK, ws, "ask first", 60000), "ended in time");
	long a = th_lines_find(t.lines, t.n, 0, "ask", "open");
	TH_CHECK(a >= 0, "an ask line");
	TH_CHECK(th_streq(field(&t, a, "kind"), "permission") && th_streq(field(&t, a, "tool"), "Bash"),
	         "ask kind/tool %s", t.n > 0 && a >= 0 ? t.lines[a] : "");
	TH_CHECK(strstr(field(&t, a, "options"), "\"allow\"") && strstr(field(&t, a, "options"), "\"reject\""),
	         "ask options %s", field(&t, a, "options"));
	long r = th_lines_find(t.lines, t.n, 0, "step", "running");
	TH_CHECK(r >= 0 && r < a, "the step runs before the ask");
	if (policy == ASK_ALLOW) {
		TH_CHECK(th_lines_find(t.lines, t.n, 0, "step", "succeeded") > a, "allowed: the step succeeded");
		TH_CHECK(file_is(th_strf("%s/assets/out.txt", ws), "asked\n"), "the tool ran");
	} else {
		long f = th_lines_find(t.lines, t.n, 0, "step", "failed");
		TH_CHECK(f > a, "rejected: the step failed");
		TH_CHECK(strlen(field(&t, f, "error")) > 0, "failed step has an error: %s", field(&t, f, "error"));
		TH_CHECK(access(th_strf("%s/assets/out.txt", ws), F_OK) != 0, "the tool did not run");
	}
	long res = th_lines_find(t.lines, t.n, 0, "result", NULL);
	TH_CHECK(res >= 0 && th_streq(field(&t, res, "message"), "Finished."), "the agent went on to its result");
	sess_free(&t);
}

static void test_claude_deny(void)
{
	const char *ws = th_tmpdir();
	fp_set(anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && echo denied > assets/out.txt", .final = "Could not." });
	sess_t t = { 0 };
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_DENY, ws, "deny it", 60000), "ended in time");
	TH_CHECK(th_lines_find(t.lines, t.n, 0, "ask", NULL) < 0, "no ask in deny mode");
	TH_CHECK(th_lines_find(t.lines, t.n, 0, "step", "failed") >= 0, "the step failed");
	TH_CHECK(th_lines_find(t.lines, t.n, 0, "result", NULL) >= 0, "result");
	TH_CHECK(access(th_strf("%s/assets/out.txt", ws), F_OK) != 0, "the tool did not run");
	sess_free(&t);
}

static void test_claude_cancel(void)
{
	const char *ws = th_tmpdir();
	fp_set(anthropic, &(fp_script_t){ .cmd = "sleep 30; echo late > assets/late.txt", .final = "Slept." });
	sess_t t = { 0 };
	t.cancel_on_step = 1;
	int64_t t0 = th_now_ms();
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, ws, "sleep", 60000), "ended in time");
	TH_CHECK(th_now_ms() - t0 < 25000, "the cancel ended the turn before the tool");
	long f = th_lines_find(t.lines, t.n, 0, "step", "failed");
	TH_CHECK(f >= 0 && strstr(field(&t, f, "error"), "cancelled"), "the open step was closed: %s",
	         f >= 0 ? t.lines[f] : "none");
	TH_CHECK(th_lines_find(t.lines, t.n, 0, "result", NULL) < 0 && th_lines_find(t.lines, t.n, 0, "error", NULL) < 0,
	         "no terminal line from the session (the worker writes cancelled)");
	sess_free(&t);
}

static void test_codex(const char *cmd, int fails, worker_acp_perm_t perm)
{
	const char *ws = th_tmpdir();
	fp_set(openai, &(fp_script_t){ .cmd = cmd, .final = "Codex is done." });
	sess_t t = { 0 };
	TH_CHECK(run(&t, WORKER_ACP_PRESET_CODEX, perm, ws, "do it", 60000), "ended in time");
	long r = th_lines_find(t.lines, t.n, 0, "step", "running");
	long s = th_lines_find(t.lines, t.n, 0, "step", fails ? "failed" : "succeeded");
	TH_CHECK(r >= 0 && s > r, "codex step running (%ld) then %s (%ld)", r, fails ? "failed" : "succeeded", s);
	if (fails)
		TH_CHECK(strstr(field(&t, s, "error"), "status 3"), "error names the exit status: %s",
		         field(&t, s, "error"));
	else
		TH_CHECK(file_is(th_strf("%s/assets/out.txt", ws), "codex\n"), "codex wrote the file");
	long res = th_lines_find(t.lines, t.n, 0, "result", NULL);
	TH_CHECK(res > s && th_streq(field(&t, res, "message"), "Codex is done."), "result %s", field(&t, res, "message"));
	TH_CHECK(!any_line_has(&t, OAI_KEY), "no API key in the lines");
	sess_free(&t);
}

int main(int argc, char **argv)
{
	th_init("acp_session");
	TH_REQUIRE(argc >= 3, "usage: test_acp_session PREFIX NODE");
	prefix = argv[1];
	TH_REQUIRE(realpath(argv[2], node), "node at %s", argv[2]);
	TH_REQUIRE(access(th_strf("%s/node_modules/@zed-industries/claude-agent-acp/dist/index.js", prefix), R_OK) == 0,
	           "agents installed in %s (agents/install.sh)", prefix);
	char err[256];
	if (worker_sandbox_probe(WORKER_SANDBOX_BWRAP, NULL, err, sizeof(err)) < 0) {
		printf("SKIP acp_session: %s\n", err);
		return 77;
	}
	anthropic = fp_start(FP_ANTHROPIC);
	openai = fp_start(FP_OPENAI);
	TH_REQUIRE(anthropic && openai);
	const char *only = getenv("ACP_TEST_ONLY");
	if (!only || strstr(only, "bypass"))
		test_claude_bypass();
	if (!only || strstr(only, "slow"))
		test_claude_slow();
	if (!only || strstr(only, "500"))
		test_claude_500();
	if (!only || strstr(only, "allow"))
		test_claude_ask(ASK_ALLOW);
	if (!only || strstr(only, "reject"))
		test_claude_ask(ASK_REJECT);
	if (!only || strstr(only, "deny"))
		test_claude_deny();
	if (!only || strstr(only, "cancel"))
		test_claude_cancel();
	if (!only || strstr(only, "codex"))
		test_codex("mkdir -p assets && echo codex > assets/out.txt", 0, WORKER_ACP_PERM_BYPASS);
	if (!only || strstr(only, "codexfail"))
		test_codex("echo partial; exit 3", 1, WORKER_ACP_PERM_BYPASS);
	TH_CHECK(!fp_seen(anthropic, OAI_KEY) && !fp_seen(openai, API_KEY), "each key went to its own provider");
	fp_stop(anthropic);
	fp_stop(openai);
	return th_done();
}
