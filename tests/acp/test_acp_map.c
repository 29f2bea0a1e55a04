/*
 * tests/acp/test_acp_map.c - the ACP session's mapping, fed scripted agent
 * lines (no agent, no sandbox): what runnel writes back on stdin and which
 * envelope lines it emits for each case the real agents showed, and for
 * bad input.
 *   - the handshake and setup calls, in order, per preset and mode;
 *   - Claude's tool announced without input, enriched, completed;
 *   - Codex's permission request before its tool call; a reject;
 *   - stop reasons and JSON-RPC errors -> exact error codes and messages;
 *   - non-JSON lines, unknown requests (-32601), a second reply;
 *   - fs requests: served beneath the workspace, refused for "..", a
 *     symlink out, and paths outside /root/workspace;
 *   - an API key quoted by the agent is redacted;
 *   - mcp_servers in ACP's shape, history as the prompt's first block;
 *   - a warm session stops at session/new; a run resumes it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/support/harness.h"
#include "worker/agent_acp.h"

#define KEY "sk-ant-map-secret-key-123456"

typedef struct rec {
	char **emitted;
	size_t ne;
	char **written;
	size_t nw;
} rec_t;

static void emit_cb(void *loop, const char *line, size_t len)
{
	rec_t *r = loop;
	r->emitted = realloc(r->emitted, (r->ne + 1) * sizeof(char *));
	r->emitted[r->ne++] = th_memdup0(line, len);
}

static int write_cb(void *loop, const char *buf, size_t len)
{
	rec_t *r = loop;
	TH_CHECK(len > 0 && buf[len - 1] == '\n', "stdin writes are whole lines");
	r->written = realloc(r->written, (r->nw + 1) * sizeof(char *));
	r->written[r->nw++] = th_memdup0(buf, len - 1);
	return 0;
}

static void rec_free(rec_t *r)
{
	th_strv_free(r->emitted, r->ne);
	th_strv_free(r->written, r->nw);
	memset(r, 0, sizeof(*r));
}

static const char *str_at(const char *line, const char *path1, const char *path2)
{
	return th_line_field(line, path1, path2);
}

static const char *last_written(rec_t *r)
{
	return r->nw ? r->written[r->nw - 1] : "";
}

static const char *last_emitted(rec_t *r)
{
	return r->ne ? r->emitted[r->ne - 1] : "";
}

static void feed(worker_acp_t *s, const worker_agent_io_t *io, const char *line)
{
	worker_acp_on_line(s, line, strlen(line), io);
}

static worker_acp_t *session(worker_acp_preset_t preset, worker_acp_perm_t perm, const char *ws, json_t *vars)
{
	worker_acp_opts_t o = { 0 };
	char err[128];
	o.preset = preset;
	o.perm = perm;
	o.run_id = "run_map";
	o.prompt = "the prompt";
	o.system_prompt = "sys";
	o.model = "haiku";
	o.variables = vars;
	/* The run keeps its workspace descriptor open for the session (leaked here). */
	o.workspace_fd = ws ? open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	worker_acp_t *s = worker_acp_new(&o, err, sizeof(err));
	TH_REQUIRE(s, "%s", err);
	return s;
}

/* Drives initialize and session/new (modes offered: bypass + default). */
static void handshake(worker_acp_t *s, const worker_agent_io_t *io, rec_t *r, const char *modes)
{
	TH_REQUIRE(worker_acp_start(s, io) == 0);
	TH_CHECK(th_streq(str_at(last_written(r), "method", NULL), "initialize"), "initialize first");
	feed(s, io, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1,\"agentInfo\":{\"name\":\"fake\",\"version\":\"9\"}}}");
	TH_CHECK(th_streq(str_at(last_written(r), "method", NULL), "session/new"), "then session/new");
	TH_CHECK(th_streq(str_at(last_written(r), "params", "cwd"), "/root/workspace"), "cwd");
	char *resp = th_strf("{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"S1\",\"modes\":{\"currentModeId\":\"default\",\"availableModes\":%s}}}",
	                     modes);
	feed(s, io, resp);
}

static void test_claude_flow(void)
{
	rec_t r = { 0 };
	worker_agent_io_t io = { emit_cb, write_cb, &r };
	json_t *vars = json_pack("{s:s,s:s}", "ANTHROPIC_API_KEY", KEY, "SHORT_KEY", "abc");
	worker_acp_t *s = session(WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, NULL, vars);
	handshake(s, &io, &r, "[{\"id\":\"default\"},{\"id\":\"bypassPermissions\"}]");
	TH_CHECK(strstr(r.written[1], "\"_meta\":{\"systemPrompt\":{\"append\":\"sys\"}}"),
	         "system prompt appended: %s", r.written[1]);
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/set_mode") &&
	                 th_streq(str_at(last_written(&r), "params", "modeId"), "bypassPermissions"),
	         "bypass mode");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/set_model") &&
	                 th_streq(str_at(last_written(&r), "params", "modelId"), "haiku"),
	         "set_model");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32602,\"message\":\"no such model\"}}");
	TH_CHECK(strstr(last_emitted(&r), "the agent refused session/set_model: no such model"),
	         "a refused setup call is a warn log: %s", last_emitted(&r));
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/prompt"), "then the prompt");
	TH_CHECK(strstr(last_written(&r), "the prompt"), "prompt text sent");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"Looking.\"}}}}");
	size_t before = r.ne;
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t1\",\"status\":\"pending\",\"title\":\"Terminal\",\"kind\":\"execute\",\"rawInput\":{},\"_meta\":{\"claudeCode\":{\"toolName\":\"Bash\"}}}}}");
	TH_CHECK(r.ne == before, "no running line before the input is known");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\",\"title\":\"ls\",\"rawInput\":{\"command\":\"ls\"}}}}");
	TH_CHECK(th_streq(last_emitted(&r), "{\"type\":\"step\",\"id\":\"t1\",\"name\":\"Bash\",\"status\":\"running\",\"args\":{\"command\":\"ls\"}}"),
	         "running: %s", last_emitted(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\",\"status\":\"completed\",\"rawOutput\":\"file.txt\"}}}");
	TH_CHECK(th_streq(str_at(last_emitted(&r), "status", NULL), "succeeded") &&
	                 th_streq(str_at(last_emitted(&r), "result", NULL), "file.txt") &&
	                 !!strstr(last_emitted(&r), "\"durationMs\":"),
	         "succeeded: %s", last_emitted(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\",\"status\":\"failed\"}}}");
	TH_CHECK(th_streq(str_at(last_emitted(&r), "status", NULL), "succeeded"), "a finished step is not finished twice");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\",\"text\":\"hmm\"}}}}");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"plan\",\"entries\":[{\"content\":\"look\",\"status\":\"pending\"}]}}}");
	TH_CHECK(r.ne >= 2 && th_streq(r.emitted[r.ne - 2], "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"thinking: hmm\"}"),
	         "thought as debug log");
	TH_CHECK(th_streq(last_emitted(&r), "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"plan: [pending] look\"}"),
	         "plan as debug log: %s", last_emitted(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"Key is " KEY ", \"}}}}");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"done.\"}}}}");
	feed(s, &io, "not json at all");
	TH_CHECK(th_streq(last_emitted(&r), "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"the agent printed a line that is not a JSON-RPC message (15 bytes)\"}"),
	         "non-JSON line: %s", last_emitted(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"terminal/create\",\"params\":{}}");
	TH_CHECK(th_streq(last_written(&r), "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}"),
	         "unknown request: %s", last_written(&r));
	TH_CHECK(!worker_acp_done(s), "not done before the prompt's answer");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"stopReason\":\"end_turn\"}}");
	TH_CHECK(th_streq(last_emitted(&r), "{\"type\":\"result\",\"message\":\"Looking.\\n\\nKey is [redacted], done.\"}"),
	         "result, key redacted: %s", last_emitted(&r));
	TH_CHECK(worker_acp_done(s), "done");
	size_t ne = r.ne;
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"S1\",\"update\":{\"sessionUpdate\":\"available_commands_update\"}}}");
	TH_CHECK(r.ne == ne, "nothing after the end");
	for (size_t i = 0; i < r.ne; i++)
		TH_CHECK(!strstr(r.emitted[i], KEY), "key in an emitted line");
	worker_acp_free(s);
	rec_free(&r);

	/* A 200 KiB tool input and output are cut to 64 KiB strings. */
	s = session(WORKER_ACP_PRESET_NONE, WORKER_ACP_PERM_BYPASS, NULL, vars);
	handshake(s, &io, &r, "[]");
	size_t big = 200 * 1024;
	char *blob = malloc(big + 1);
	for (size_t i = 0; i < big; i += 2)
		memcpy(blob + i, "\xc3\xa9", 2); /* é: a cut may fall inside it */
	blob[big] = '\0';
	json_t *u = json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s,s:s,s:{s:s},s:s}}}", "jsonrpc", "2.0", "method", "session/update",
	                      "params", "sessionId", "S1", "update", "sessionUpdate", "tool_call", "toolCallId", "big",
	                      "status", "in_progress", "rawInput", "content", blob, "title", "Write");
	char *text = json_dumps(u, JSON_COMPACT);
	feed(s, &io, text);
	free(text);
	TH_CHECK(strlen(last_emitted(&r)) < WORKER_ACP_RESULT_MAX + 1024 &&
	                 th_streq(str_at(last_emitted(&r), "status", NULL), "running"),
	         "big input cut (%zu bytes)", strlen(last_emitted(&r)));
	json_object_set_new(json_object_get(json_object_get(u, "params"), "update"), "sessionUpdate", json_string("tool_call_update"));
	json_object_set_new(json_object_get(json_object_get(u, "params"), "update"), "status", json_string("completed"));
	json_object_set_new(json_object_get(json_object_get(u, "params"), "update"), "rawOutput", json_string(blob));
	text = json_dumps(u, JSON_COMPACT);
	feed(s, &io, text);
	free(text);
	json_decref(u);
	free(blob);
	TH_CHECK(strlen(last_emitted(&r)) < 2 * WORKER_ACP_RESULT_MAX + 1024 &&
	                 th_streq(str_at(last_emitted(&r), "status", NULL), "succeeded"),
	         "big output cut (%zu bytes)", strlen(last_emitted(&r)));
	worker_acp_free(s);
	json_decref(vars);
	rec_free(&r);
}

static void test_codex_permission(void)
{
	rec_t r = { 0 };
	worker_agent_io_t io = { emit_cb, write_cb, &r };
	worker_acp_t *s = session(WORKER_ACP_PRESET_CODEX, WORKER_ACP_PERM_ASK, NULL, NULL);
	handshake(s, &io, &r, "[{\"id\":\"read-only\"},{\"id\":\"auto\"},{\"id\":\"full-access\"}]");
	TH_CHECK(th_streq(str_at(last_written(&r), "params", "modeId"), "auto"), "codex ask -> auto");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/prompt"), "codex: no set_model call");
	/* Codex asks before it announces the tool. */
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":\"u-1\",\"method\":\"session/request_permission\",\"params\":{\"sessionId\":\"S1\",\"toolCall\":{\"toolCallId\":\"c1\",\"kind\":\"execute\",\"status\":\"pending\",\"title\":\"rm -rf x\",\"rawInput\":{\"command\":[\"bash\",\"-lc\",\"rm -rf x\"]}},\"options\":[{\"optionId\":\"approved\",\"name\":\"Yes\",\"kind\":\"allow_once\"},{\"optionId\":\"abort\",\"name\":\"No\",\"kind\":\"reject_once\"}]}}");
	TH_CHECK(r.ne >= 2 && th_streq(str_at(r.emitted[r.ne - 2], "status", NULL), "running"), "the step opens with the ask");
	const char *ask = last_emitted(&r);
	TH_CHECK(th_streq(str_at(ask, "type", NULL), "ask") && th_streq(str_at(ask, "id", NULL), "ask_1") &&
	                 th_streq(str_at(ask, "status", NULL), "open") && th_streq(str_at(ask, "step", NULL), "c1") &&
	                 th_streq(str_at(ask, "options", NULL),
	                          "[{\"id\":\"approved\",\"label\":\"Yes\",\"kind\":\"allow_once\"},{\"id\":\"abort\",\"label\":\"No\",\"kind\":\"reject_once\"}]"),
	         "ask: %s", ask);
	TH_CHECK(worker_acp_on_reply(s, "ask_9", "approved", NULL, 0, &io) == -1, "unknown ask");
	TH_CHECK(worker_acp_on_reply(s, "ask_1", "reject_once", NULL, 0, &io) == 0, "reply by kind");
	TH_CHECK(th_streq(last_written(&r), "{\"jsonrpc\":\"2.0\",\"id\":\"u-1\",\"result\":{\"outcome\":{\"outcome\":\"selected\",\"optionId\":\"abort\"}}}"),
	         "string id echoed, reject option: %s", last_written(&r));
	TH_CHECK(worker_acp_on_reply(s, "ask_1", "approved", NULL, 0, &io) == -1, "a second reply is refused");
	/* A reject ends a Codex turn "cancelled", which runnel did not ask for. */
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"stopReason\":\"cancelled\"}}");
	TH_CHECK(r.ne >= 2 && th_streq(str_at(r.emitted[r.ne - 2], "status", NULL), "failed"), "open step closed failed");
	TH_CHECK(th_streq(last_emitted(&r), "{\"type\":\"error\",\"code\":\"agent_cancelled\",\"message\":\"The agent stopped its turn (cancelled).\"}"),
	         "error: %s", last_emitted(&r));
	worker_acp_free(s);
	rec_free(&r);
}

/* Sessions that end in one answer: what the agent sends after the start
 * (or after a handshake), and the one line runnel then emits (or writes to
 * the agent). */
static const struct one_answer {
	const char *name;
	worker_acp_perm_t perm;
	int handshake;
	const char *feed[2];
	int written;
	const char *want;
} one_answer[] = {
	{ "version", WORKER_ACP_PERM_BYPASS, 0, { "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":2}}" }, 0, "{\"type\":\"error\",\"code\":\"agent_error\",\"message\":\"The agent speaks ACP version 2; runnel speaks version 1.\"}" },
	{ "session/new", WORKER_ACP_PERM_BYPASS, 0, { "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1}}", "{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32000,\"message\":\"Authentication required\"}}" }, 0, "{\"type\":\"error\",\"code\":\"agent_error\",\"message\":\"The agent could not start a session: Authentication required\"}" },
	{ "deny", WORKER_ACP_PERM_DENY, 1, { "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"session/request_permission\",\"params\":{\"toolCall\":{\"toolCallId\":\"x\"},\"options\":[{\"optionId\":\"a\",\"kind\":\"allow_always\"},{\"optionId\":\"r\",\"kind\":\"reject_always\"}]}}" }, 1, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"outcome\":{\"outcome\":\"selected\",\"optionId\":\"r\"}}}" },
};

static void test_ends(void)
{
	static const struct {
		const char *resp, *want;
	} cases[] = {
		{ "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"stopReason\":\"max_tokens\"}}",
		  "{\"type\":\"error\",\"code\":\"max_tokens\",\"message\":\"The agent stopped its turn (max_tokens).\"}" },
		{ "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"stopReason\":\"refusal\"}}",
		  "{\"type\":\"error\",\"code\":\"agent_refused\",\"message\":\"The agent stopped its turn (refusal).\"}" },
		{ "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}",
		  "{\"type\":\"error\",\"code\":\"agent_stopped\",\"message\":\"The agent stopped its turn (no stop reason).\"}" },
		{ "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32603,\"message\":\"Internal error: API Error: 500 {\\\"message\\\":\\\"boom\\\"}\"}}",
		  "{\"type\":\"error\",\"code\":\"agent_error\",\"message\":\"The agent failed: Internal error: API Error: 500 {\\\"message\\\":\\\"boom\\\"}\"}" },
		{ "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32603,\"message\":\"Internal error\",\"data\":{\"message\":\"high demand\",\"codex_error_info\":\"internal_server_error\"}}}",
		  "{\"type\":\"error\",\"code\":\"agent_error\",\"message\":\"The agent failed: Internal error: high demand\"}" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rec_t r = { 0 };
		worker_agent_io_t io = { emit_cb, write_cb, &r };
		worker_acp_t *s = session(WORKER_ACP_PRESET_NONE, WORKER_ACP_PERM_BYPASS, NULL, NULL);
		handshake(s, &io, &r, "[]");
		TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/prompt"), "raw argv: straight to the prompt");
		TH_CHECK(!strstr(r.written[1], "_meta"), "raw argv: no Claude _meta");
		feed(s, &io, cases[i].resp);
		TH_CHECK(th_streq(last_emitted(&r), cases[i].want), "case %zu: %s", i, last_emitted(&r));
		TH_CHECK(worker_acp_done(s), "done");
		worker_acp_free(s);
		rec_free(&r);
	}
	/* Handshake failures, and deny answering at once. */
	for (size_t i = 0; i < sizeof(one_answer) / sizeof(one_answer[0]); i++) {
		const struct one_answer *c = &one_answer[i];
		rec_t r = { 0 };
		worker_agent_io_t io = { emit_cb, write_cb, &r };
		worker_acp_t *s = session(WORKER_ACP_PRESET_NONE, c->perm, NULL, NULL);
		if (c->handshake)
			handshake(s, &io, &r, "[]");
		else
			worker_acp_start(s, &io);
		for (size_t f = 0; f < 2 && c->feed[f]; f++)
			feed(s, &io, c->feed[f]);
		const char *got = c->written ? last_written(&r) : last_emitted(&r);
		TH_CHECK(th_streq(got, c->want), "%s: %s", c->name, got);
		worker_acp_free(s);
		rec_free(&r);
	}
	/* In ask mode a cancel answers the open asks. */
	rec_t r = { 0 };
	worker_agent_io_t io = { emit_cb, write_cb, &r };
	worker_acp_t *s = session(WORKER_ACP_PRESET_NONE, WORKER_ACP_PERM_ASK, NULL, NULL);
	handshake(s, &io, &r, "[]");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"session/request_permission\",\"params\":{\"toolCall\":{\"toolCallId\":\"x\",\"rawInput\":{\"a\":1}},\"options\":[{\"optionId\":\"a\",\"kind\":\"allow_once\"}]}}");
	TH_CHECK(th_streq(str_at(last_emitted(&r), "type", NULL), "ask"), "ask");
	worker_acp_on_cancel(s, &io);
	TH_CHECK(r.nw >= 2 && th_streq(r.written[r.nw - 2], "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"outcome\":{\"outcome\":\"cancelled\"}}}"),
	         "open request answered cancelled");
	TH_CHECK(th_streq(last_written(&r), "{\"jsonrpc\":\"2.0\",\"method\":\"session/cancel\",\"params\":{\"sessionId\":\"S1\"}}"),
	         "session/cancel: %s", last_written(&r));
	TH_CHECK(worker_acp_on_reply(s, "ask_1", "a", NULL, 0, &io) == -1, "the ask is closed");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"stopReason\":\"cancelled\"}}");
	TH_CHECK(worker_acp_done(s) && th_streq(str_at(last_emitted(&r), "status", NULL), "failed") &&
	                 th_streq(str_at(last_emitted(&r), "error", NULL), "the run was cancelled"),
	         "a cancel we asked for: the step closed, no terminal line: %s", last_emitted(&r));
	worker_acp_free(s);
	rec_free(&r);
	TH_CHECK(worker_acp_perm_parse("sometimes", &(worker_acp_perm_t){ 0 }) == -1, "bad permission mode");
}

/* mcp_servers in ACP's shape; history first in the prompt. */
static void test_mcp_history(void)
{
	rec_t r = { 0 };
	worker_agent_io_t io = { emit_cb, write_cb, &r };
	json_t *mcp = json_loads("[{\"name\":\"fs\",\"command\":\"/bin/fs\",\"args\":[\"-r\"],\"env\":{\"K\":\"V\"}},"
	                         "{\"name\":\"docs\",\"url\":\"https://docs.example/mcp\",\"headers\":{\"H\":\"v\"}},"
	                         "{\"name\":\"broken\"}]",
	                         0, NULL);
	json_t *hist = json_loads("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"}]", 0, NULL);
	worker_acp_opts_t o = { 0 };
	char err[128];
	o.prompt = "now this";
	o.mcp_servers = mcp;
	o.history = hist;
	worker_acp_t *s = worker_acp_new(&o, err, sizeof(err));
	TH_REQUIRE(s);
	worker_acp_start(s, &io);
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "params", "mcpServers"),
	                  "[{\"name\":\"fs\",\"command\":\"/bin/fs\",\"args\":[\"-r\"],\"env\":[{\"name\":\"K\",\"value\":\"V\"}]},"
	                  "{\"name\":\"docs\",\"type\":\"http\",\"url\":\"https://docs.example/mcp\",\"headers\":[{\"name\":\"H\",\"value\":\"v\"}]}]"),
	         "mcpServers: %s", str_at(last_written(&r), "params", "mcpServers"));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"S9\"}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "params", "prompt"),
	                  "[{\"type\":\"text\",\"text\":\"Earlier turns of this conversation, oldest first (JSON):\\n"
	                  "[{\\\"role\\\":\\\"user\\\",\\\"content\\\":\\\"hi\\\"},{\\\"role\\\":\\\"assistant\\\",\\\"content\\\":\\\"hello\\\"}]\"},"
	                  "{\"type\":\"text\",\"text\":\"now this\"}]"),
	         "prompt blocks: %s", str_at(last_written(&r), "params", "prompt"));
	worker_acp_free(s);
	json_decref(mcp);
	json_decref(hist);
	rec_free(&r);
}

static void test_fs(void)
{
	const char *ws = th_tmpdir();
	const char *outside = th_tmpdir();
	TH_REQUIRE(th_file_write(th_strf("%s/secret.txt", outside), "outside\n", 8) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/in.txt", ws), "one\ntwo\nthree\n", 14) == 0);
	TH_REQUIRE(symlink(th_strf("%s/secret.txt", outside), th_strf("%s/link.txt", ws)) == 0);
	rec_t r = { 0 };
	worker_agent_io_t io = { emit_cb, write_cb, &r };
	worker_acp_t *s = session(WORKER_ACP_PRESET_NONE, WORKER_ACP_PERM_BYPASS, ws, NULL);
	TH_REQUIRE(worker_acp_start(s, &io) == 0);
	TH_CHECK(th_streq(str_at(last_written(&r), "params", "clientCapabilities"),
	                  "{\"fs\":{\"readTextFile\":true,\"writeTextFile\":true},\"terminal\":false}"),
	         "capabilities: %s", str_at(last_written(&r), "params", "clientCapabilities"));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"fs/read_text_file\",\"params\":{\"sessionId\":\"S1\",\"path\":\"/root/workspace/in.txt\",\"line\":2,\"limit\":1}}");
	TH_CHECK(th_streq(last_written(&r), "{\"jsonrpc\":\"2.0\",\"id\":10,\"result\":{\"content\":\"two\\n\"}}"),
	         "read lines: %s", last_written(&r));
	static const char *const bad[] = {
		"/root/workspace/../../etc/passwd",
		"/etc/passwd",
		"/root/workspacex/in.txt",
		"/root/workspace/link.txt",
	};
	for (size_t i = 0; i < 4; i++) {
		feed(s, &io, th_strf("{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"fs/read_text_file\",\"params\":{\"path\":\"%s\"}}", bad[i]));
		TH_CHECK(strstr(last_written(&r), "\"error\"") && !strstr(last_written(&r), "outside"),
		         "refused %s: %s", bad[i], last_written(&r));
	}
	TH_CHECK(strstr(last_written(&r), "Too many levels of symbolic links"), "symlink refused: %s", last_written(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"fs/write_text_file\",\"params\":{\"path\":\"/root/workspace/new.txt\",\"content\":\"hi\"}}");
	TH_CHECK(th_streq(last_written(&r), "{\"jsonrpc\":\"2.0\",\"id\":12,\"result\":null}"), "write: %s", last_written(&r));
	char *d = th_file_read(th_strf("%s/new.txt", ws), NULL);
	TH_CHECK(th_streq(d, "hi"), "written beneath the workspace");
	free(d);
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"fs/write_text_file\",\"params\":{\"path\":\"/root/workspace/link.txt\",\"content\":\"pwned\"}}");
	d = th_file_read(th_strf("%s/secret.txt", outside), NULL);
	TH_CHECK(th_streq(d, "outside\n") && strstr(last_written(&r), "\"error\""), "no write through a symlink");
	free(d);
	worker_acp_free(s);
	rec_free(&r);
	/* A file the worker creates for the agent belongs to the sandbox's ids
	 * (a root worker's sandbox is not root: it could not change it). */
	worker_acp_opts_t oc = { 0 };
	char cerr[128];
	oc.run_id = "run_map";
	oc.prompt = "the prompt";
	oc.workspace_fd = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC); /* leaked, as session() does */
	oc.chown_files = geteuid() == 0;                              /* only root may give files away */
	oc.file_uid = 65534;
	oc.file_gid = 65534;
	s = worker_acp_new(&oc, cerr, sizeof(cerr));
	TH_REQUIRE(s, "%s", cerr);
	TH_REQUIRE(worker_acp_start(s, &io) == 0);
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"fs/write_text_file\",\"params\":{\"path\":\"/root/workspace/owned.txt\",\"content\":\"x\"}}");
	struct stat st;
	TH_CHECK(stat(th_strf("%s/owned.txt", ws), &st) == 0 && (geteuid() != 0 || (st.st_uid == 65534 && st.st_gid == 65534)),
	         "owner %ld: %s", (long)st.st_uid, last_written(&r));
	worker_acp_free(s);
	/* Without a workspace no fs capability is declared and requests fail. */
	s = session(WORKER_ACP_PRESET_NONE, WORKER_ACP_PERM_BYPASS, NULL, NULL);
	worker_acp_start(s, &io);
	TH_CHECK(strstr(last_written(&r), "\"readTextFile\":false"), "no fs capability");
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"fs/read_text_file\",\"params\":{\"path\":\"/root/workspace/in.txt\"}}");
	TH_CHECK(strstr(last_written(&r), "-32601"), "fs refused: %s", last_written(&r));
	worker_acp_free(s);
	rec_free(&r);
}

/* What the fuzzer found: a repeated response restarted a phase (leaking the
 * first session), and an option id a reply cannot name made the whole ask
 * line invalid, so the agent waited for an ask nobody saw. */
static void test_agent_oddities(void)
{
	rec_t r = { 0 };
	worker_agent_io_t io = { emit_cb, write_cb, &r };
	worker_acp_t *s = session(WORKER_ACP_PRESET_CODEX, WORKER_ACP_PERM_ASK, NULL, NULL);
	handshake(s, &io, &r, "[{\"id\":\"auto\"}]");
	size_t nw = r.nw;
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"S2\"}}");
	TH_CHECK(r.nw == nw, "a second session/new answer writes nothing");
	TH_CHECK(strstr(last_emitted(&r), "the agent answered request 2, which is not waiting for an answer"),
	         "a second answer is a warn log: %s", last_emitted(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}");
	TH_CHECK(strstr(last_emitted(&r), "the agent answered request 99, which is not waiting"),
	         "an unasked answer is a warn log: %s", last_emitted(&r));
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/prompt"), "the turn goes on");
	TH_CHECK(strstr(last_written(&r), "\"S1\""), "with the first session: %s", last_written(&r));

	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":\"p1\",\"method\":\"session/request_permission\",\"params\":{\"toolCall\":{\"toolCallId\":\"c1\",\"title\":\"ls\"},\"options\":[{\"optionId\":\"ok%d\",\"name\":\"Yes\",\"kind\":\"allow_once\"},{\"optionId\":\"no\",\"name\":\"No\",\"kind\":\"reject_once\"}]}}");
	const char *ask = last_emitted(&r);
	TH_CHECK(th_streq(str_at(ask, "type", NULL), "ask") &&
	                 th_streq(str_at(ask, "options", NULL), "[{\"id\":\"no\",\"label\":\"No\",\"kind\":\"reject_once\"}]"),
	         "the unnameable option is left out: %s", ask);
	nw = r.nw;
	feed(s, &io, "{\"jsonrpc\":\"2.0\",\"id\":\"p2\",\"method\":\"session/request_permission\",\"params\":{\"toolCall\":{\"toolCallId\":\"c2\",\"title\":\"ls\"},\"options\":[{\"optionId\":\"a b\",\"name\":\"Yes\",\"kind\":\"allow_once\"},{\"optionId\":\"\",\"name\":\"No\",\"kind\":\"reject_once\"}]}}");
	TH_CHECK(strstr(last_emitted(&r), "refused ls: the agent offered no option a reply can name"),
	         "no nameable option: refused with a warn log: %s", last_emitted(&r));
	TH_CHECK(r.nw == nw + 1 && th_streq(last_written(&r), "{\"jsonrpc\":\"2.0\",\"id\":\"p2\",\"result\":{\"outcome\":{\"outcome\":\"selected\",\"optionId\":\"\"}}}"),
	         "answered at once with the agent's reject option: %s", last_written(&r));
	worker_acp_free(s);
	rec_free(&r);
}

/* A warm session: the handshake stops at session/new (ready, nothing
 * more written); the run's session resumes it: the same log lines as a
 * cold start, then set_mode, set_model and the prompt, nothing resent. */
static void test_warm_resume(void)
{
	rec_t w = { 0 }, r = { 0 };
	worker_agent_io_t wio = { emit_cb, write_cb, &w }, rio = { emit_cb, write_cb, &r };
	worker_acp_opts_t o = { 0 };
	char err[128];
	o.preset = WORKER_ACP_PRESET_CLAUDE;
	o.run_id = "warm";
	o.workspace_fd = -1;
	o.warm = 1;
	worker_acp_t *warm = worker_acp_new(&o, err, sizeof(err));
	TH_REQUIRE(warm, "%s", err);
	TH_REQUIRE(worker_acp_start(warm, &wio) == 0);
	TH_CHECK(strstr(w.written[0], "\"readTextFile\":true"), "a warm agent is offered the fs methods: %s", w.written[0]);
	TH_CHECK(!worker_acp_ready(warm), "not ready before session/new");
	feed(warm, &wio, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1,\"agentInfo\":{\"name\":\"fake\",\"version\":\"9\"}}}");
	TH_CHECK(!strstr(w.written[1], "_meta"), "no system prompt in a warm session/new: %s", w.written[1]);
	TH_CHECK(strstr(w.written[1], "\"mcpServers\":[]"), "no MCP servers: %s", w.written[1]);
	feed(warm, &wio, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"SW\",\"modes\":{\"currentModeId\":\"default\",\"availableModes\":[{\"id\":\"default\"},{\"id\":\"bypassPermissions\"}]}}}");
	TH_CHECK(worker_acp_ready(warm) && w.nw == 2, "ready after session/new, nothing more sent (%zu)", w.nw);

	worker_acp_t *s = session(WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, NULL, NULL);
	TH_REQUIRE(worker_acp_resume(s, warm, &rio) == 0);
	TH_CHECK(r.ne == 2 && strstr(r.emitted[0], "ACP agent fake 9") && strstr(r.emitted[1], "ACP session SW, mode default"),
	         "the cold start's log lines");
	TH_CHECK(r.nw == 1 && th_streq(str_at(r.written[0], "method", NULL), "session/set_mode") &&
	                 th_streq(str_at(r.written[0], "params", "sessionId"), "SW"),
	         "set_mode on the warm session first");
	feed(s, &rio, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/set_model"), "then set_model");
	feed(s, &rio, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}");
	TH_CHECK(th_streq(str_at(last_written(&r), "method", NULL), "session/prompt"), "then the prompt");
	/* A session that is not ready cannot be resumed. */
	worker_acp_t *cold = session(WORKER_ACP_PRESET_CLAUDE, WORKER_ACP_PERM_BYPASS, NULL, NULL);
	TH_CHECK(worker_acp_resume(cold, s, &rio) == -1, "only a ready warm session resumes");
	worker_acp_free(cold);
	worker_acp_free(s);
	worker_acp_free(warm);
	rec_free(&w);
	rec_free(&r);
}

int main(void)
{
	th_init("acp_map");
	test_agent_oddities();
	test_claude_flow();
	test_codex_permission();
	test_ends();
	test_mcp_history();
	test_fs();
	test_warm_resume();
	return th_done();
}
