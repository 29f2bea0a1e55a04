/*
 * tests/builtin/test_agent_model.c - runnel-agent against a scripted fake
 * Chat Completions server: streamed text, tool-call argument deltas split
 * across chunks, two calls in one answer, 429 with Retry-After, 500, a
 * stalled stream, a malformed SSE frame, a model that never stops calling
 * tools, and what the request carries (order of messages, tools, the key
 * only in the Authorization header and never in the output).
 *
 *   test_agent_model RUNNEL_AGENT
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <jansson.h>

#include "tests/builtin/agentproc.h"
#include "tests/builtin/fakechat.h"
#include "tests/support/harness.h"

#define KEY "sk-test-9f8e7d6c5b4a"

static const char *agent_bin;

static const char *turn_json(const char *prompt)
{
	static char buf[4096];
	snprintf(buf, sizeof(buf),
	         "{\"run_id\":\"r1\",\"prompt\":\"%s\",\"system_prompt\":\"You are terse.\",\"model\":\"fake-model\","
	         "\"skills\":[],\"mcp_servers\":[],\"history\":[{\"role\":\"user\",\"content\":\"earlier q\"},"
	         "{\"role\":\"assistant\",\"content\":\"earlier a\"}],\"permission_mode\":\"bypass\","
	         "\"ask_timeout_sec\":600}",
	         prompt);
	return buf;
}

/* Runs the agent against f with extra flags; fills a (ap_free by caller). */
static void run(ap_t *a, fakechat_t *f, const char *ws, const char *const *flags, const char *turn)
{
	char base[128];
	snprintf(base, sizeof(base), "OPENAI_BASE_URL=%s", f->base_url);
	const char *env[] = { base, "OPENAI_API_KEY=" KEY, NULL };
	const char *args[32];
	int n = 0;
	args[n++] = "--workspace";
	args[n++] = ws;
	args[n++] = "--skills-dir";
	args[n++] = th_strf("%s/no-skills", ws);
	args[n++] = "--backoff-ms";
	args[n++] = "20";
	for (int i = 0; flags && flags[i] && n < 30; i++)
		args[n++] = flags[i];
	args[n] = NULL;
	TH_REQUIRE(ap_start(a, agent_bin, args, env, turn ? turn : turn_json("Say hello")) == 0, "start agent");
	TH_CHECK(ap_finish(a, 20000) == 0, "agent ended");
	TH_CHECK(!strstr(a->out ? a->out : "", KEY), "the key is not in the output");
}

static json_t *last_line(const ap_t *a)
{
	json_t *arr = ap_lines(a);
	json_t *l = json_incref(json_array_get(arr, json_array_size(arr) - 1));
	json_decref(arr);
	return l;
}

static void expect_last(const ap_t *a, const char *type, const char *code, const char *message)
{
	json_t *l = last_line(a);
	const char *t = json_string_value(json_object_get(l, "type"));
	const char *c = json_string_value(json_object_get(l, "code"));
	const char *m = json_string_value(json_object_get(l, "message"));
	TH_CHECK(th_streq(t, type), "type %s, want %s; output:\n%s", t ? t : "-", type, a->out ? a->out : "");
	if (code)
		TH_CHECK(th_streq(c, code), "code %s, want %s", c ? c : "-", code);
	if (message)
		TH_CHECK(th_streq(m, message), "message \"%s\", want \"%s\"", m ? m : "-", message);
	json_decref(l);
}

/* The steps of the output with the given status. */
static int count_steps(const ap_t *a, const char *status)
{
	json_t *arr = ap_lines(a);
	size_t i;
	json_t *l;
	int n = 0;
	json_array_foreach(arr, i, l) if (th_streq(json_string_value(json_object_get(l, "type")), "step") &&
	                                  th_streq(json_string_value(json_object_get(l, "status")), status))
	        n++;
	json_decref(arr);
	return n;
}

/*
 * One scripted exchange: the fake server plays script, the agent runs with
 * flags and turn (NULL: the default turn), and its last line must be
 * type/code/message.  requests: how many requests the server must have had
 * (ANY: not checked); succeeded: when above 0, how many steps must have
 * succeeded; max_ms: the run's time limit (0: none); absent: a string the
 * output must not hold (NULL: none); check: the case's own further checks
 * (NULL: none).
 */
typedef struct model_case {
	const char *name;
	const fc_resp_t *script;
	int nscript;
	const char *const *flags;
	const char *turn;
	const char *type, *code, *message;
	int requests, succeeded;
	int64_t max_ms;
	const char *absent;
	void (*check)(const char *ws, fakechat_t *f, ap_t *a); /* further checks, or NULL */
} model_case_t;

#define SCRIPT(...) \
	.script = (const fc_resp_t[]){ __VA_ARGS__ }, \
	.nscript = (int)(sizeof((const fc_resp_t[]){ __VA_ARGS__ }) / sizeof(fc_resp_t))
#define SCRIPT_OF(a) .script = (a), .nscript = (int)(sizeof(a) / sizeof((a)[0]))
#define ANY          -1
#define FLAGS(...) \
	.flags = (const char *const[]) \
	{ \
		__VA_ARGS__, NULL \
	}

/* Runs case c and checks what it states. */
static void play_case(const char *ws, const model_case_t *c)
{
	fakechat_t fs, *f = &fs;
	ap_t as, *a = &as;
	TH_NOTE("%s", c->name);
	TH_REQUIRE(fakechat_start(f, c->script, c->nscript) == 0, "%s: fake server", c->name);
	int64_t t0 = th_now_ms();
	run(a, f, ws, c->flags, c->turn);
	int64_t took = th_now_ms() - t0;
	expect_last(a, c->type, c->code, c->message);
	if (c->requests >= 0)
		TH_REQUIRE(fakechat_requests(f) == c->requests, "%s: %d requests, want %d", c->name,
		           fakechat_requests(f), c->requests);
	if (c->succeeded > 0)
		TH_CHECK(count_steps(a, "succeeded") == c->succeeded, "%s: %s", c->name, a->out);
	if (c->max_ms)
		TH_CHECK(took < c->max_ms, "%s: took %lld ms", c->name, (long long)took);
	if (c->absent)
		TH_CHECK(!strstr(a->out ? a->out : "", c->absent), "%s: output holds %s: %s", c->name, c->absent,
		         a->out);
	if (c->check)
		c->check(ws, f, a);
	ap_free(a);
	fakechat_stop(f);
}

static const fc_resp_t text_deltas_script[] = { {
	.body = FC_TEXT("Hel") "\x1e" FC_TEXT("lo, ") "\x1e"
	                                              "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"wor\x1e"
	                                              "ld\"}}]}\r\n\r\n"
	                                              ": keep-alive\n\n" FC_STOP "\x1e" FC_DONE,
} };

static void text_deltas(const char *ws, fakechat_t *f, ap_t *a)
{
	(void)ws;
	TH_CHECK(WIFEXITED(a->status) && WEXITSTATUS(a->status) == 0);
	TH_CHECK(th_streq(f->auth[0], "Bearer " KEY), "auth %s", f->auth[0] ? f->auth[0] : "-");
	json_t *req = json_loads(f->bodies[0], 0, NULL);
	TH_CHECK(th_streq(json_string_value(json_object_get(req, "model")), "fake-model"));
	TH_CHECK(json_is_true(json_object_get(req, "stream")));
	TH_CHECK(th_streq(json_string_value(json_object_get(req, "tool_choice")), "auto"));
	json_t *msgs = json_object_get(req, "messages");
	const char *want_roles[] = { "system", "user", "assistant", "user" };
	const char *want_content[] = { "You are terse.", "earlier q", "earlier a", "Say hello" };
	TH_CHECK(json_array_size(msgs) == 4, "%zu messages", json_array_size(msgs));
	for (size_t i = 0; i < 4 && i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);
		TH_CHECK(th_streq(json_string_value(json_object_get(m, "role")), want_roles[i]), "role %zu", i);
		TH_CHECK(th_streq(json_string_value(json_object_get(m, "content")), want_content[i]), "content %zu", i);
	}
	size_t i;
	json_t *t;
	int have_bash = 0, have_read = 0, have_write = 0, have_list = 0;
	json_array_foreach(json_object_get(req, "tools"), i, t)
	{
		const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
		have_bash |= th_streq(n, "bash");
		have_read |= th_streq(n, "read_file");
		have_write |= th_streq(n, "write_file");
		have_list |= th_streq(n, "list_files");
	}
	TH_CHECK(have_bash && have_read && have_write && have_list, "built-in tools offered");
	TH_CHECK(!strstr(f->bodies[0], KEY), "the key is not in the request body");
	json_decref(req);
}

/* write_file's arguments arrive in four pieces, frames cut mid-way. */
static const fc_resp_t split_tool_args_script[] = {
	{ .body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,"
	          "\"id\":\"call_w\",\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"arguments\":\"\"}}]}}]}\n\n"
	          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
	          "\"{\\\"pa\"}}]}}]}\n\n\x1e"
	          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"argu\x1e"
	          "ments\":\"th\\\":\\\"assets/out.txt\\\",\"}}]}}]}\n\n"
	          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
	          "\"\\\"content\\\":\\\"hi \\\\u00e9\"}}]}}]}\n\n"
	          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
	          "\"\\\"}\"}}]}}]}\n\n" FC_CALLS FC_DONE },
	{ .body = FC_TEXT("Wrote it.") FC_STOP FC_DONE },
};

static void split_tool_args(const char *ws, fakechat_t *f, ap_t *a)
{
	TH_CHECK(count_steps(a, "running") == 1 && count_steps(a, "succeeded") == 1, "%s", a->out);
	TH_CHECK(strstr(a->out, "\"args\":{\"path\":\"assets/out.txt\",\"content\":\"hi \xc3\xa9\"}"),
	         "step args: %s", a->out);
	TH_CHECK(strstr(a->out, "\"durationMs\":"));
	char *content = th_file_read(th_strf("%s/assets/out.txt", ws), NULL);
	TH_CHECK(th_streq(content, "hi \xc3\xa9"), "file: %s", content ? content : "-");
	free(content);
	json_t *req = json_loads(f->bodies[1], 0, NULL);
	json_t *msgs = json_object_get(req, "messages");
	json_t *asst = json_array_get(msgs, json_array_size(msgs) - 2);
	json_t *tool = json_array_get(msgs, json_array_size(msgs) - 1);
	TH_CHECK(th_streq(json_string_value(json_object_get(asst, "role")), "assistant"));
	json_t *call = json_array_get(json_object_get(asst, "tool_calls"), 0);
	TH_CHECK(th_streq(json_string_value(json_object_get(call, "id")), "call_w"));
	TH_CHECK(th_streq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
	                  "{\"path\":\"assets/out.txt\",\"content\":\"hi \\u00e9\"}"));
	TH_CHECK(th_streq(json_string_value(json_object_get(tool, "role")), "tool"));
	TH_CHECK(th_streq(json_string_value(json_object_get(tool, "tool_call_id")), "call_w"));
	json_decref(req);
}

/* Two calls, their deltas interleaved by index. */
static const fc_resp_t two_calls_script[] = {
	{ .body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":["
	          "{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"comm\"}},"
	          "{\"index\":1,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"list_files\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n"
	          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"th\\\":\\\".\\\"}\"}}]}}]}\n\n"
	          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"and\\\":\\\"echo one; touch made\\\"}\"}}]}}]}\n\n" FC_CALLS FC_DONE },
	{ .body = FC_TEXT("Both done.") FC_STOP FC_DONE },
};

static void two_calls(const char *ws, fakechat_t *f, ap_t *a)
{
	(void)ws;
	TH_CHECK(strstr(a->out, "\"name\":\"bash\"") && strstr(a->out, "\"name\":\"list_files\""));
	TH_CHECK(strstr(a->out, "\"exitCode\":0,\"output\":\"one\\n\""), "%s", a->out);
	json_t *req = json_loads(f->bodies[1], 0, NULL);
	json_t *msgs = json_object_get(req, "messages");
	size_t n = json_array_size(msgs);
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, n - 2), "tool_call_id")), "c1"));
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, n - 1), "tool_call_id")), "c2"));
	TH_CHECK(strstr(json_string_value(json_object_get(json_array_get(msgs, n - 1), "content")), "made"),
	         "list_files ran after bash made the file");
	json_decref(req);
}

static const fc_resp_t retry_after_script[] = {
	{ .status = 429, .content_type = "application/json", .headers = "Retry-After: 1\r\n", .body = "{\"error\":{\"message\":\"Rate limit reached\"}}" },
	{ .body = FC_TEXT("after the wait") FC_STOP FC_DONE },
};

static void retry_after(const char *ws, fakechat_t *f, ap_t *a)
{
	(void)ws;
	TH_CHECK(strstr(a->out, "The model provider answered HTTP 429: Rate limit reached; retrying in 1.0 s (1 of 3)"),
	         "%s", a->out);
	long long gap = (f->at_us[1] - f->at_us[0]) / 1000;
	TH_CHECK(gap >= 900, "Retry-After honoured: %lld ms between requests", gap);
}

static void test_unreachable(const char *ws)
{
	int port = th_free_port();
	ap_t a;
	char base[128];
	snprintf(base, sizeof(base), "OPENAI_BASE_URL=http://127.0.0.1:%d/v1", port);
	const char *env[] = { base, NULL };
	const char *args[] = { "--workspace", ws, "--retries", "1", "--backoff-ms", "10", NULL };
	TH_REQUIRE(ap_start(&a, agent_bin, args, env, turn_json("x")) == 0);
	TH_CHECK(ap_finish(&a, 20000) == 0);
	json_t *l = last_line(&a);
	const char *m = json_string_value(json_object_get(l, "message"));
	TH_CHECK(th_streq(json_string_value(json_object_get(l, "code")), "model_error"));
	TH_CHECK(m && !strncmp(m, "The model provider could not be reached: ", 41), "%s", m ? m : "-");
	json_decref(l);
	ap_free(&a);
}

/* No key and no base URL of its own: one error at once, no request to the
 * default provider (and so no retries of it). */
static void test_no_key(const char *ws)
{
	ap_t a;
	const char *env[] = { "OPENAI_API_KEY=", NULL };
	const char *args[] = { "--workspace", ws, "--retries", "3", "--backoff-ms", "5000", NULL };
	int64_t t0 = th_now_ms();
	TH_REQUIRE(ap_start(&a, agent_bin, args, env, turn_json("x")) == 0);
	TH_CHECK(ap_finish(&a, 20000) == 0);
	TH_CHECK(th_now_ms() - t0 < 4000, "ended before a first backoff could pass");
	json_t *arr = ap_lines(&a);
	TH_CHECK(json_array_size(arr) == 1, "one line: %s", a.out ? a.out : "");
	json_decref(arr);
	json_t *l = last_line(&a);
	TH_CHECK(th_streq(json_string_value(json_object_get(l, "type")), "error"));
	TH_CHECK(th_streq(json_string_value(json_object_get(l, "code")), "model_error"));
	TH_CHECK(th_streq(json_string_value(json_object_get(l, "message")),
	                  "runnel-agent has no model key configured: the run's environment sets neither "
	                  "OPENAI_API_KEY nor OPENAI_BASE_URL"),
	         "%s", a.out ? a.out : "");
	TH_CHECK(!strstr(a.out ? a.out : "", "retrying"), "no retries");
	json_decref(l);
	ap_free(&a);
}

/* The key is for the provider only: bash does not inherit it. */
static const fc_resp_t key_not_in_tools_script[] = {
	{ .body = FC_CALL(0, "c", "bash", "{\\\"command\\\":\\\"env; echo key=[$OPENAI_API_KEY]\\\"}") FC_CALLS FC_DONE },
	{ .body = FC_TEXT("done") FC_STOP FC_DONE },
};

static void key_not_in_tools(const char *ws, fakechat_t *f, ap_t *a)
{
	(void)ws;
	TH_CHECK(strstr(a->out, "key=[]"), "%s", a->out);
	TH_CHECK(!strstr(a->out, "OPENAI_API_KEY="));
	TH_CHECK(!strstr(f->bodies[1], KEY), "the tool result sent back has no key");
}

/* Every scripted exchange, in the order they run. */
static const model_case_t cases[] = {
	{ .name = "text deltas",
	  SCRIPT_OF(text_deltas_script),
	  .type = "result",
	  .message = "Hello, world",
	  .requests = 1,
	  .check = text_deltas },
	{ .name = "split tool arguments",
	  SCRIPT_OF(split_tool_args_script),
	  .type = "result",
	  .message = "Wrote it.",
	  .requests = 2,
	  .check = split_tool_args },
	{ .name = "two calls",
	  SCRIPT_OF(two_calls_script),
	  .type = "result",
	  .message = "Both done.",
	  .requests = 2,
	  .succeeded = 2,
	  .check = two_calls },
	{ .name = "429",
	  SCRIPT_OF(retry_after_script),
	  .type = "result",
	  .message = "after the wait",
	  .requests = 2,
	  .check = retry_after },
	{ .name = "key not in tools",
	  SCRIPT_OF(key_not_in_tools_script),
	  .type = "result",
	  .message = "done",
	  .requests = 2,
	  .check = key_not_in_tools },
	{ .name = "500 retried, then given up",
	  SCRIPT({ .status = 500, .content_type = "application/json", .body = "{\"error\":{\"message\":\"upstream exploded (key " KEY ")\"}}" }),
	  FLAGS("--retries", "2"),
	  .type = "error",
	  .code = "model_error",
	  .message = "The model provider answered HTTP 500: upstream exploded (key [redacted])",
	  .requests = 3 /* 1 + 2 retries */ },
	{ .name = "400 not retried",
	  SCRIPT({ .status = 400, .content_type = "application/json", .body = "{\"error\":{\"message\":\"The model `fake-model` does not exist\"}}" }),
	  .type = "error",
	  .code = "model_error",
	  .message = "The model provider answered HTTP 400: The model `fake-model` does not exist",
	  .requests = 1 },
	{ .name = "stalled stream",
	  SCRIPT({ .body = FC_TEXT("partial"), .stall = 1 }),
	  FLAGS("--request-timeout-sec", "1"),
	  .type = "error",
	  .code = "model_timeout",
	  .message = "The model sent nothing for 1 s",
	  .requests = ANY,
	  .max_ms = 5000 },
	{ .name = "malformed frame",
	  SCRIPT({ .body = FC_TEXT("ok so far") "data: {\"choices\":[{\"delta\":\n\n" FC_DONE }),
	  .type = "error",
	  .code = "model_error",
	  .message = "the model provider sent a malformed stream event",
	  .requests = ANY },
	{ .name = "max steps",
	  SCRIPT({ .body = FC_CALL(0, "c", "bash", "{\\\"command\\\":\\\"true\\\"}") FC_CALLS FC_DONE }),
	  FLAGS("--max-steps", "3"),
	  .type = "error",
	  .code = "max_steps",
	  .message = "The model was still calling tools after 3 steps (the limit)",
	  .requests = 3,
	  .succeeded = 3 },
	{ .name = "no model",
	  SCRIPT({ .body = FC_DONE }),
	  .turn = "{\"run_id\":\"r\",\"prompt\":\"x\",\"model\":null}",
	  .type = "error",
	  .code = "model_error",
	  .message = "The config names no model (set \"model\" in the workspace config)",
	  .requests = 0 },
	/* A turn line that is not JSON: the error says so without quoting it
	 * (it holds the prompt). */
	{ .name = "turn not JSON",
	  SCRIPT({ .body = FC_DONE }),
	  .turn = "{\"run_id\":\"r\",\"prompt\":secret-prompt-words}",
	  .type = "error",
	  .code = "model_error",
	  .message = "runnel-agent could not read its turn line: not valid JSON",
	  .requests = 0,
	  .absent = "secret-prompt-words" },
	{ .name = "turn not an object",
	  SCRIPT({ .body = FC_DONE }),
	  .turn = "[\"secret-prompt-words\"]",
	  .type = "error",
	  .code = "model_error",
	  .message = "runnel-agent could not read its turn line: not a JSON object",
	  .requests = 0 },
	{ .name = "error event in the stream",
	  SCRIPT({ .body = FC_TEXT("partial") "data: {\"error\":{\"message\":\"Overloaded, try later\",\"type\":\"server_error\"}}\n\n" }),
	  .type = "error",
	  .code = "model_error",
	  .message = "Overloaded, try later",
	  .requests = 1 },
	{ .name = "stream cut",
	  SCRIPT({ .body = FC_TEXT("cut off mid-answer") }),
	  .type = "error",
	  .code = "model_error",
	  .message = "The model stream ended before the answer was complete",
	  .requests = 1 },
	{ .name = "whole JSON answer",
	  SCRIPT({ .content_type = "application/json",
	           .body = "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"whole answer\"},\"finish_reason\":\"stop\"}]}" }),
	  .type = "result",
	  .message = "whole answer",
	  .requests = 1 },
	{ .name = "Retry-After past --retry-max-sec gives up at once",
	  SCRIPT({ .status = 503, .content_type = "application/json", .headers = "Retry-After: 3600\r\n", .body = "{\"error\":{\"message\":\"Service unavailable\"}}" }),
	  FLAGS("--retry-max-sec", "5"),
	  .type = "error",
	  .code = "model_error",
	  .message = "The model provider answered HTTP 503: Service unavailable",
	  .requests = 1,
	  .max_ms = 3000 },
};

int main(int argc, char **argv)
{
	th_init("agent_model");
	TH_REQUIRE(argc == 2, "usage: test_agent_model RUNNEL_AGENT");
	agent_bin = argv[1];
	const char *ws = th_tmpdir();
	TH_REQUIRE(ws);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		play_case(ws, &cases[i]);
	test_unreachable(ws);
	test_no_key(ws);
	return th_done();
}
