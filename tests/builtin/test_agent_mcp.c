/*
 * tests/builtin/test_agent_mcp.c - runnel-agent with real MCP servers from
 * npm (tests/builtin/mcp/package.json): @modelcontextprotocol/server-filesystem
 * and server-everything over stdio, server-everything over streamable HTTP,
 * and a server that cannot start.  Their tools are offered as
 * <server>__<tool>, called through tools/call, and their results land in
 * steps and in the next request.
 *
 *   test_agent_mcp RUNNEL_AGENT MCP_DIR
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/builtin/agentproc.h"
#include "tests/builtin/fakechat.h"
#include "tests/support/harness.h"

/* Processes running server-everything over stdio (not the HTTP one). */
static int stdio_servers(const char *js)
{
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		size_t len = 0;
		char *cmd = th_file_read(th_strf("/proc/%s/cmdline", e->d_name), &len);
		if (cmd && len > strlen(js) && memmem(cmd, len, js, strlen(js)) && memmem(cmd, len, "stdio", 6))
			n++;
		free(cmd);
	}
	if (d)
		closedir(d);
	return n;
}

static int has_tool(const json_t *req, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(req, "tools"), i, t) if (th_streq(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name)) return 1;
	return 0;
}

int main(int argc, char **argv)
{
	th_init("agent_mcp");
	TH_REQUIRE(argc == 3, "usage: test_agent_mcp RUNNEL_AGENT MCP_DIR");
	const char *agent = argv[1];
	char mcp[4096];
	TH_REQUIRE(realpath(argv[2], mcp), "%s", argv[2]);
	const char *fs_js = th_strf("%s/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", mcp);
	const char *ev_js = th_strf("%s/node_modules/@modelcontextprotocol/server-everything/dist/index.js", mcp);
	TH_REQUIRE(access(fs_js, R_OK) == 0 && access(ev_js, R_OK) == 0, "MCP servers installed in %s", mcp);

	const char *ws = th_tmpdir();
	TH_REQUIRE(th_file_write(th_strf("%s/hello.txt", ws), "hello from the workspace", strlen("hello from the workspace")) == 0);

	/* server-everything over streamable HTTP on a free port. */
	int port = -1;
	char *av[] = { "node", (char *)ev_js, "streamableHttp", NULL };
	pid_t http = th_spawn_port(av, NULL, "PORT", th_strf("%s/../http-mcp.log", ws), 15000, &port);
	TH_REQUIRE(http > 0, "streamable HTTP MCP server listening");

	fc_resp_t script[2] = {
		{ .body = NULL },
		{ .body = FC_TEXT("All three answered.") FC_STOP FC_DONE },
	};
	script[0].body = th_strf(
	        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":["
	        "{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"fs__read_text_file\",\"arguments\":\"{\\\"path\\\":\\\"%s/hello.txt\\\"}\"}},"
	        "{\"index\":1,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"everything__echo\",\"arguments\":\"{\\\"message\\\":\\\"over stdio\\\"}\"}},"
	        "{\"index\":2,\"id\":\"c3\",\"type\":\"function\",\"function\":{\"name\":\"web__get-sum\",\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\"}}"
	        ",{\"index\":3,\"id\":\"c4\",\"type\":\"function\",\"function\":{\"name\":\"everything__get-env\",\"arguments\":\"{}\"}}"
	        "]}}]}\n\n" FC_CALLS FC_DONE,
	        ws);
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 2) == 0);

	json_t *turn = json_pack(
	        "{s:s,s:s,s:s,s:[],s:[],s:s,s:[{s:s,s:s,s:[s,s]},{s:s,s:s,s:[s,s],s:{s:s}},{s:s,s:s,s:{s:s}},{s:s,s:s},{s:s,s:s}]}",
	        "run_id", "r", "prompt", "use the tools", "model", "m", "skills", "history", "permission_mode", "bypass",
	        "mcp_servers", "name", "fs", "command", "node", "args", fs_js, ws, "name", "everything", "command", "node",
	        "args", ev_js, "stdio", "env", "EVERYTHING_TEST", "1", "name", "web", "url",
	        th_strf("http://127.0.0.1:%d/mcp", port), "headers", "X-Test", "yes", "name", "broken", "command",
	        "/nonexistent/mcp-server", "name", "fs", "command", "/bin/false");
	char *turn_s = json_dumps(turn, JSON_COMPACT);
	json_decref(turn);
	char base[128];
	snprintf(base, sizeof(base), "OPENAI_BASE_URL=%s", f.base_url);
	const char *env[] = { base, "OPENAI_API_KEY=sk-mcp-test", NULL };
	const char *args[] = { "--workspace", ws, "--skills-dir", th_strf("%s/none", ws), NULL };
	ap_t a;
	int64_t t0 = th_now_ms();
	TH_REQUIRE(ap_start(&a, agent, args, env, turn_s) == 0);
	free(turn_s);
	TH_CHECK(ap_finish(&a, 60000) == 0, "agent ended");
	TH_NOTE("agent run took %lld ms", (long long)(th_now_ms() - t0));
	const char *out = a.out ? a.out : "";

	TH_CHECK(strstr(out, "\"level\":\"warn\",\"message\":\"MCP server \\\"broken\\\" did not start: "
	                     "/nonexistent/mcp-server: No such file or directory\""),
	         "%s", out);
	TH_CHECK(strstr(out, "\"message\":\"Loaded 0 skills, "), "%s", out);
	TH_CHECK(strstr(out, "\"type\":\"result\",\"message\":\"All three answered.\""), "%s", out);
	TH_CHECK(strstr(out, "\"name\":\"fs__read_text_file\",\"status\":\"succeeded\""), "%s", out);
	TH_CHECK(strstr(out, "\"name\":\"everything__echo\",\"status\":\"succeeded\""), "%s", out);
	TH_CHECK(strstr(out, "\"name\":\"web__get-sum\",\"status\":\"succeeded\""), "%s", out);
	TH_CHECK(strstr(out, "\"result\":{\"content\":\"hello from the workspace\"}"), "%s", out);
	TH_CHECK(strstr(out, "Echo: over stdio"), "%s", out);
	TH_CHECK(strstr(out, "The sum of 2 and 3 is 5"), "%s", out);
	TH_CHECK(strstr(out, "\"name\":\"everything__get-env\",\"status\":\"succeeded\""), "%s", out);
	TH_CHECK(strstr(out, "EVERYTHING_TEST"), "the server's env reached it: %s", out);
	TH_CHECK(!strstr(out, "sk-mcp-test"), "the provider key is not in a server's env");
	TH_CHECK(strstr(out, "\"MCP server \\\"fs\\\" skipped: another server has that name\""), "%s", out);

	TH_REQUIRE(fakechat_requests(&f) == 2);
	json_t *req = json_loads(f.bodies[0], 0, NULL);
	TH_CHECK(has_tool(req, "fs__read_text_file") && has_tool(req, "fs__list_directory"));
	TH_CHECK(has_tool(req, "everything__echo") && has_tool(req, "web__get-sum"));
	TH_CHECK(has_tool(req, "bash"), "built-in tools stay");
	json_decref(req);
	req = json_loads(f.bodies[1], 0, NULL);
	json_t *msgs = json_object_get(req, "messages");
	size_t n = json_array_size(msgs);
	TH_CHECK(n >= 4 && th_streq(json_string_value(json_object_get(json_array_get(msgs, n - 1), "tool_call_id")), "c4"));
	json_decref(req);

	ap_free(&a);
	fakechat_stop(&f);

	/* permission_mode deny refuses MCP tools (they may change things). */
	static const fc_resp_t deny_call[] = {
		{ .body = FC_CALL(0, "d1", "web__echo", "{\\\"message\\\":\\\"x\\\"}") FC_CALLS FC_DONE },
		{ .body = FC_TEXT("refused, fine") FC_STOP FC_DONE },
	};
	TH_REQUIRE(fakechat_start(&f, deny_call, 2) == 0);
	snprintf(base, sizeof(base), "OPENAI_BASE_URL=%s", f.base_url);
	json_t *tdeny = json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:s}]}", "run_id", "r1", "prompt", "p", "model", "m",
	                          "permission_mode", "deny", "mcp_servers", "name", "web", "url",
	                          th_strf("http://127.0.0.1:%d/mcp", port));
	turn_s = json_dumps(tdeny, JSON_COMPACT);
	json_decref(tdeny);
	TH_REQUIRE(ap_start(&a, agent, args, env, turn_s) == 0);
	free(turn_s);
	TH_CHECK(ap_finish(&a, 30000) == 0);
	TH_CHECK(a.out && strstr(a.out, "\"name\":\"web__echo\",\"status\":\"failed\"") &&
	                 strstr(a.out, "refused: the run's permission mode is deny"),
	         "%s", a.out ? a.out : "-");
	ap_free(&a);
	fakechat_stop(&f);

	/* SIGTERM during a long MCP call: the agent and its stdio server are
	 * gone at once. */
	static const fc_resp_t long_call[] = {
		{ .body = FC_CALL(0, "l1", "everything__trigger-long-running-operation",
		                  "{\\\"duration\\\":30,\\\"steps\\\":3}") FC_CALLS FC_DONE },
	};
	TH_REQUIRE(fakechat_start(&f, long_call, 1) == 0);
	snprintf(base, sizeof(base), "OPENAI_BASE_URL=%s", f.base_url);
	json_t *t2 = json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:s,s:[s,s]}]}", "run_id", "r2", "prompt", "wait", "model", "m",
	                       "permission_mode", "bypass", "mcp_servers", "name", "everything", "command", "node",
	                       "args", ev_js, "stdio");
	turn_s = json_dumps(t2, JSON_COMPACT);
	json_decref(t2);
	TH_REQUIRE(ap_start(&a, agent, args, env, turn_s) == 0);
	free(turn_s);
	TH_CHECK(ap_wait_for(&a, "\"status\":\"running\"", 30000), "the long call started");
	int64_t t1 = th_now_ms();
	kill(a.pid, SIGTERM);
	TH_CHECK(ap_finish(&a, 5000) == 0);
	/* "At once": far below the 30 s call; the margin covers a sanitizer
	 * build exiting on a loaded machine. */
	TH_CHECK(th_now_ms() - t1 < 2000, "stopped in %lld ms", (long long)(th_now_ms() - t1));
	TH_CHECK(stdio_servers(ev_js) == 0, "the stdio MCP server is gone");
	ap_free(&a);
	fakechat_stop(&f);
	th_stop(http, 5000);
	return th_done();
}
