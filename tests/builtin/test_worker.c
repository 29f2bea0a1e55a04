/*
 * tests/builtin/test_worker.c - the builtin agent kind through the
 * real runnel-worker in bwrap: /config names a model (the fake Chat
 * Completions server on loopback, reached over the host network), a skill
 * bundle from the stub (zip: SKILL.md, a script, a small stdio MCP server in
 * JavaScript run with the host's node) and two MCP servers (that stdio one
 * inside the sandbox, npm's server-everything over streamable HTTP on the
 * host).  The run's stream holds the steps and the result, assets/ is
 * written back, and the provider key is in neither Redis nor the worker's
 * log.  Also: a config without `agent` runs the builtin kind, permission_mode
 * ask answered on the control stream, a bad agent field, a cancel while the
 * model thinks.
 *
 *   test_builtin_worker MCP_DIR
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/builtin/fakechat.h"
#include "tests/builtin/skillblob.h"
#include "tests/worker/wtest.h"

#define KEY "sk-worker-test-5a4b3c2d1e"

static wt_t T;

static const char skill_md[] = "---\nname: tables\ndescription: Make table reports\n---\nRun run.sh.\n";
static const char skill_sh[] = "echo rows: 3 > assets/report.txt; echo skill-ran\n";
static const char skill_mcp[] =
        "const rl = require('readline').createInterface({ input: process.stdin });\n"
        "const send = (o) => process.stdout.write(JSON.stringify(o) + '\\n');\n"
        "rl.on('line', (line) => {\n"
        "  const m = JSON.parse(line);\n"
        "  if (m.id === undefined) return;\n"
        "  let r;\n"
        "  if (m.method === 'initialize')\n"
        "    r = { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'js', version: '1' } };\n"
        "  else if (m.method === 'tools/list')\n"
        "    r = { tools: [{ name: 'shout', description: 'Upper-cases text', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } }] };\n"
        "  else if (m.method === 'tools/call')\n"
        "    r = { content: [{ type: 'text', text: m.params.arguments.text.toUpperCase() }] };\n"
        "  else return send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no' } });\n"
        "  send({ jsonrpc: '2.0', id: m.id, result: r });\n"
        "});\n";

static const char *find_step(char **l, size_t n, const char *name, const char *status)
{
	for (size_t i = 0; i < n; i++)
		if (th_streq(wt_field(l[i], "type"), "step") && th_streq(wt_field(l[i], "name"), name) &&
		    th_streq(wt_field(l[i], "status"), status))
			return l[i];
	return NULL;
}

static int ask_open(void *arg)
{
	size_t n;
	char **l = wt_lines(&T, arg, &n);
	int seen = 0;
	for (size_t i = 0; i < n; i++)
		if (th_streq(wt_field(l[i], "type"), "ask") && th_streq(wt_field(l[i], "status"), "open"))
			seen = 1;
	th_strv_free(l, n);
	return seen;
}

/* permission_mode ask: the ask line, a reply on the control stream, the
 * worker's settlement, then the tool runs. */
static void test_ask(fakechat_t *f)
{
	dev_stub_run_t run = { 0 };
	dev_stub_otps_t o;
	run.env = json_pack("{s:{s:s,s:s},s:n}", "variables", "OPENAI_BASE_URL", f->base_url, "OPENAI_API_KEY", KEY,
	                    "setup_script");
	run.config = json_pack("{s:s,s:{s:s},s:s}", "model", "fake-model", "agent", "kind", "builtin", "permission_mode",
	                       "ask");
	wt_submit(&T, "run_ask", &run, "make a file", 0, 0, &o);
	json_decref(run.env);
	json_decref(run.config);
	TH_REQUIRE(th_wait_until(ask_open, "run_ask", 30000), "the ask line appeared");
	redisReply *r = redisCommand(T.rc, "XADD runnel:{run_ask}:ctl * msg %s",
	                             "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}");
	TH_CHECK(r && r->type == REDIS_REPLY_STRING, "XADD reply");
	freeReplyObject(r);
	TH_CHECK(wt_wait_terminal(&T, "run_ask", 30000), "ask run ended");
	size_t n;
	char **l = wt_lines(&T, "run_ask", &n);
	int answered = 0;
	for (size_t i = 0; i < n; i++)
		if (th_streq(wt_field(l[i], "type"), "ask") && th_streq(wt_field(l[i], "status"), "answered"))
			answered = 1;
	TH_CHECK(answered, "the worker settled the ask");
	const char *s = find_step(l, n, "bash", "succeeded");
	TH_CHECK(s && strstr(s, "asked-and-ran"), "%s", s ? s : "-");
	TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), "Allowed and done."), "%s", n ? l[n - 1] : "-");
	th_strv_free(l, n);
}

/* A bad agent field fails the bootstrap naming it. */
static void test_bad_field(fakechat_t *f)
{
	dev_stub_run_t run = { 0 };
	dev_stub_otps_t o;
	run.config = json_pack("{s:s,s:{s:s,s:i}}", "model", "m", "agent", "kind", "builtin", "max_steps", 0);
	wt_submit(&T, "run_badfield", &run, "x", 0, 0, &o);
	json_decref(run.config);
	TH_CHECK(wt_wait_terminal(&T, "run_badfield", 30000));
	size_t n;
	char **l = wt_lines(&T, "run_badfield", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "bootstrap_failed"));
	TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), "The agent cannot be started: agent.max_steps must be an integer from 1 to 10000"),
	         "%s", n ? l[n - 1] : "-");
	th_strv_free(l, n);
}

static int model_asked(void *arg)
{
	fakechat_t *f = arg;
	return fakechat_requests(f) >= 6;
}

/* A cancel while the model is thinking ends the run at once. */
static void test_cancel(fakechat_t *f)
{
	dev_stub_run_t run = { 0 };
	dev_stub_otps_t o;
	run.env = json_pack("{s:{s:s,s:s},s:n}", "variables", "OPENAI_BASE_URL", f->base_url, "OPENAI_API_KEY", KEY,
	                    "setup_script");
	run.config = json_pack("{s:s,s:{s:s}}", "model", "m", "agent", "kind", "builtin");
	wt_submit(&T, "run_cancel", &run, "think long", 0, 0, &o);
	json_decref(run.env);
	json_decref(run.config);
	TH_REQUIRE(th_wait_until(model_asked, f, 30000), "the model request arrived");
	int64_t t0 = th_now_ms();
	redisReply *r = redisCommand(T.rc, "XADD runnel:{run_cancel}:ctl * msg %s",
	                             "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
	freeReplyObject(r);
	TH_CHECK(wt_wait_terminal(&T, "run_cancel", 20000));
	TH_CHECK(th_now_ms() - t0 < 5000, "cancelled in %lld ms (the stream would stall 30 s)", (long long)(th_now_ms() - t0));
	size_t n;
	char **l = wt_lines(&T, "run_cancel", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "cancelled"));
	th_strv_free(l, n);
}

int main(int argc, char **argv)
{
	th_init("builtin_worker");
	TH_REQUIRE(argc == 2, "usage: test_builtin_worker MCP_DIR");
	char mcp[4096];
	TH_REQUIRE(realpath(argv[1], mcp));
	const char *ev_js = th_strf("%s/node_modules/@modelcontextprotocol/server-everything/dist/index.js", mcp);
	TH_REQUIRE(access(ev_js, R_OK) == 0, "MCP servers installed in %s", mcp);

	wt_setup(&T, NULL, 1);
	int port = -1;
	char *av[] = { "node", (char *)ev_js, "streamableHttp", NULL };
	pid_t http = th_spawn_port(av, NULL, "PORT", th_strf("%s/http-mcp.log", T.dir), 15000, &port);
	TH_REQUIRE(http > 0, "streamable HTTP MCP server listening");

	static const fc_resp_t base_script[] = {
		{ .body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":["
		          "{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"command\\\":\\\"mkdir -p assets && sh /root/skills/tables/run.sh\\\"}\"}},"
		          "{\"index\":1,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"py__shout\",\"arguments\":\"{\\\"text\\\":\\\"quiet\\\"}\"}},"
		          "{\"index\":2,\"id\":\"c3\",\"type\":\"function\",\"function\":{\"name\":\"web__echo\",\"arguments\":\"{\\\"message\\\":\\\"from the sandbox\\\"}\"}}"
		          "]}}]}\n\n" FC_CALLS FC_DONE },
		{ .body = FC_TEXT("Report written.") FC_STOP FC_DONE },
		/* The run without an agent object. */
		{ .body = FC_TEXT("Default kind.") FC_STOP FC_DONE },
		/* The run in ask mode. */
		{ .body = FC_CALL(0, "a1", "bash", "{\\\"command\\\":\\\"echo asked-and-ran\\\"}") FC_CALLS FC_DONE },
		{ .body = FC_TEXT("Allowed and done.") FC_STOP FC_DONE },
		/* The run that is cancelled while the model thinks. */
		{ .body = FC_TEXT("thinking"), .stall = 1 },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, base_script, 6) == 0);

	/* The HTTP MCP server is neither the model nor the workspace API: under
	 * the allowlist egress policy the operator lists it.  The fake model is
	 * a loopback server: the run's base URL reaches it only because the
	 * operator's list names it exactly too. */
	const char *wenv[] = { th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,127.0.0.1:%d,127.0.0.1:%d", port, f.port),
		               NULL };
	pid_t w = wt_worker(&T, "w1", wenv);
	wt_warmup(&T);

	const skill_file_t tables[] = {
		{ "SKILL.md", skill_md, 0644 },
		{ "run.sh", skill_sh, 0755 },
		{ "mcp.js", skill_mcp, 0644 },
	};
	char surl[256];
	skill_blob(&T, "tables.zip", tables, 3, surl, sizeof(surl));

	dev_stub_run_t run = { 0 };
	run.env = json_pack("{s:{s:s,s:s},s:n}", "variables", "OPENAI_BASE_URL", f.base_url, "OPENAI_API_KEY", KEY,
	                    "setup_script");
	run.config = json_pack("{s:s,s:s,s:{s:s,s:i},s:[{s:s,s:s}],s:[{s:s,s:s,s:[s]},{s:s,s:s}],s:[{s:s,s:s}]}",
	                       "model", "fake-model", "system_prompt", "You write reports.", "agent", "kind", "builtin",
	                       "max_steps", 5, "skills", "name", "tables", "zip_url", surl, "mcp_servers", "name", "py",
	                       "command", "node", "args", "/root/skills/tables/mcp.js", "name", "web", "url",
	                       th_strf("http://127.0.0.1:%d/mcp", port), "history", "role", "user", "content",
	                       "earlier question");
	dev_stub_otps_t o;
	wt_submit(&T, "run_builtin", &run, "write the report", 1, 0, &o);
	json_decref(run.env);
	json_decref(run.config);
	TH_CHECK(wt_wait_terminal(&T, "run_builtin", 60000), "run ended");
	size_t n;
	char **l = wt_lines(&T, "run_builtin", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "ends with a result");
	TH_CHECK(n > 0 && th_streq(wt_field(l[n - 1], "message"), "Report written."), "%s", n ? l[n - 1] : "-");
	int loaded = 0;
	for (size_t i = 0; i < n; i++)
		if (strstr(l[i], "\"message\":\"Loaded 1 skill, ") && strstr(l[i], " MCP tools\""))
			loaded = 1;
	TH_CHECK(loaded, "Loaded 1 skill line");
	const char *s1 = find_step(l, n, "bash", "succeeded");
	const char *s2 = find_step(l, n, "py__shout", "succeeded");
	const char *s3 = find_step(l, n, "web__echo", "succeeded");
	TH_CHECK(s1 && strstr(s1, "skill-ran") && strstr(s1, "\"durationMs\""), "bash step: %s", s1 ? s1 : "-");
	TH_CHECK(s2 && strstr(s2, "\"result\":{\"content\":\"QUIET\"}"), "stdio MCP step: %s", s2 ? s2 : "-");
	TH_CHECK(s3 && strstr(s3, "Echo: from the sandbox"), "HTTP MCP step: %s", s3 ? s3 : "-");
	for (size_t i = 0; i < n; i++)
		TH_CHECK(!strstr(l[i], KEY), "line %zu has no key", i);
	th_strv_free(l, n);

	/* Writeback: assets/report.txt reached /results. */
	size_t nf = 0;
	char **files = dev_stub_file_names(T.stub, o.session, &nf);
	TH_CHECK(nf == 1 && files && th_streq(files[0], "report.txt"), "%zu files", nf);
	for (size_t i = 0; i < nf; i++)
		free(files[i]);
	free(files);

	/* What the model saw: system prompt with the skill, history, prompt. */
	TH_REQUIRE(fakechat_requests(&f) >= 2);
	json_t *req = json_loads(f.bodies[0], 0, NULL);
	json_t *msgs = json_object_get(req, "messages");
	const char *sys = json_string_value(json_object_get(json_array_get(msgs, 0), "content"));
	TH_CHECK(sys && !strncmp(sys, "You write reports.\n\n", 20) &&
	                 strstr(sys, "- tables: Make table reports (/root/skills/tables/SKILL.md)"),
	         "%s", sys ? sys : "-");
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "earlier question"));
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, 2), "content")), "write the report"));
	TH_CHECK(th_streq(f.auth[0], "Bearer " KEY));
	json_decref(req);

	/* No agent object: the builtin kind. */
	dev_stub_run_t run2 = { 0 };
	run2.env = json_pack("{s:{s:s,s:s},s:n}", "variables", "OPENAI_BASE_URL", f.base_url, "OPENAI_API_KEY", KEY,
	                     "setup_script");
	run2.config_json = "{\"model\":\"fake-model\",\"system_prompt\":null,\"skills\":[],\"mcp_servers\":[]}";
	wt_submit(&T, "run_default", &run2, "hi", 0, 0, &o);
	json_decref(run2.env);
	TH_CHECK(wt_wait_terminal(&T, "run_default", 30000), "default run ended");
	l = wt_lines(&T, "run_default", &n);
	TH_CHECK(n >= 1 && th_streq(wt_field(l[n - 1], "message"), "Default kind."), "%s", n ? l[n - 1] : "-");
	th_strv_free(l, n);

	test_ask(&f);
	test_bad_field(&f);
	test_cancel(&f);

	/* The key is nowhere in Redis or the worker's log. */
	TH_CHECK(th_redis_scan_contains(T.rc, KEY) == 0, "key not in Redis");
	TH_CHECK(!wt_log_has(&T, "w1", KEY), "key not in the worker log");

	th_stop(w, 10000);
	th_stop(http, 5000);
	fakechat_stop(&f);
	wt_teardown(&T);
	return th_done();
}
