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

static void test_text_deltas(const char *ws)
{
	static const fc_resp_t script[] = { {
		.body = FC_TEXT("Hel") "\x1e" FC_TEXT("lo, ") "\x1e"
		                                              "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"wor\x1e"
		                                              "ld\"}}]}\r\n\r\n"
		                                              ": keep-alive\n\n" FC_STOP "\x1e" FC_DONE,
	} };
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "result", NULL, "Hello, world");
	TH_CHECK(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0);
	TH_REQUIRE(fakechat_requests(&f) == 1);
	TH_CHECK(th_streq(f.auth[0], "Bearer " KEY), "auth %s", f.auth[0] ? f.auth[0] : "-");
	json_t *req = json_loads(f.bodies[0], 0, NULL);
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
	TH_CHECK(!strstr(f.bodies[0], KEY), "the key is not in the request body");
	json_decref(req);
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_split_tool_args(const char *ws)
{
	/* write_file's arguments arrive in four pieces, frames cut mid-way. */
	static const fc_resp_t script[] = {
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
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 2) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "result", NULL, "Wrote it.");
	TH_CHECK(count_steps(&a, "running") == 1 && count_steps(&a, "succeeded") == 1, "%s", a.out);
	TH_CHECK(strstr(a.out, "\"args\":{\"path\":\"assets/out.txt\",\"content\":\"hi \xc3\xa9\"}") != NULL,
	         "step args: %s", a.out);
	TH_CHECK(strstr(a.out, "\"durationMs\":") != NULL);
	char *content = th_file_read(th_strf("%s/assets/out.txt", ws), NULL);
	TH_CHECK(th_streq(content, "hi \xc3\xa9"), "file: %s", content ? content : "-");
	free(content);
	TH_REQUIRE(fakechat_requests(&f) == 2);
	json_t *req = json_loads(f.bodies[1], 0, NULL);
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
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_two_calls(const char *ws)
{
	/* Two calls, their deltas interleaved by index. */
	static const fc_resp_t script[] = {
		{ .body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":["
		          "{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"comm\"}},"
		          "{\"index\":1,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"list_files\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n"
		          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"th\\\":\\\".\\\"}\"}}]}}]}\n\n"
		          "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"and\\\":\\\"echo one; touch made\\\"}\"}}]}}]}\n\n" FC_CALLS FC_DONE },
		{ .body = FC_TEXT("Both done.") FC_STOP FC_DONE },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 2) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "result", NULL, "Both done.");
	TH_CHECK(count_steps(&a, "succeeded") == 2, "%s", a.out);
	TH_CHECK(strstr(a.out, "\"name\":\"bash\"") && strstr(a.out, "\"name\":\"list_files\""));
	TH_CHECK(strstr(a.out, "\"exitCode\":0,\"output\":\"one\\n\"") != NULL, "%s", a.out);
	TH_REQUIRE(fakechat_requests(&f) == 2);
	json_t *req = json_loads(f.bodies[1], 0, NULL);
	json_t *msgs = json_object_get(req, "messages");
	size_t n = json_array_size(msgs);
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, n - 2), "tool_call_id")), "c1"));
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, n - 1), "tool_call_id")), "c2"));
	TH_CHECK(strstr(json_string_value(json_object_get(json_array_get(msgs, n - 1), "content")), "made") != NULL,
	         "list_files ran after bash made the file");
	json_decref(req);
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_429(const char *ws)
{
	static const fc_resp_t script[] = {
		{ .status = 429, .content_type = "application/json", .headers = "Retry-After: 1\r\n", .body = "{\"error\":{\"message\":\"Rate limit reached\"}}" },
		{ .body = FC_TEXT("after the wait") FC_STOP FC_DONE },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 2) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "result", NULL, "after the wait");
	TH_CHECK(strstr(a.out, "The model provider answered HTTP 429: Rate limit reached; retrying in 1.0 s (1 of 3)") != NULL,
	         "%s", a.out);
	TH_REQUIRE(fakechat_requests(&f) == 2);
	long long gap = (f.at_us[1] - f.at_us[0]) / 1000;
	TH_CHECK(gap >= 900, "Retry-After honoured: %lld ms between requests", gap);
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_500(const char *ws)
{
	static const fc_resp_t script[] = {
		{ .status = 500, .content_type = "application/json", .body = "{\"error\":{\"message\":\"upstream exploded (key " KEY ")\"}}" },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	const char *flags[] = { "--retries", "2", NULL };
	run(&a, &f, ws, flags, NULL);
	expect_last(&a, "error", "model_error", "The model provider answered HTTP 500: upstream exploded (key [redacted])");
	TH_CHECK(fakechat_requests(&f) == 3, "1 + 2 retries: %d", fakechat_requests(&f));
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_400(const char *ws)
{
	static const fc_resp_t script[] = {
		{ .status = 400, .content_type = "application/json", .body = "{\"error\":{\"message\":\"The model `fake-model` does not exist\"}}" },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "error", "model_error", "The model provider answered HTTP 400: The model `fake-model` does not exist");
	TH_CHECK(fakechat_requests(&f) == 1, "a 400 is not retried");
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_stall(const char *ws)
{
	static const fc_resp_t script[] = { { .body = FC_TEXT("partial"), .stall = 1 } };
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	const char *flags[] = { "--request-timeout-sec", "1", NULL };
	int64_t t0 = th_now_ms();
	run(&a, &f, ws, flags, NULL);
	int64_t took = th_now_ms() - t0;
	expect_last(&a, "error", "model_timeout", "The model sent nothing for 1 s");
	TH_CHECK(took < 5000, "timed out in %lld ms", (long long)took);
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_malformed(const char *ws)
{
	static const fc_resp_t script[] = { { .body = FC_TEXT("ok so far") "data: {\"choices\":[{\"delta\":\n\n" FC_DONE } };
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "error", "model_error", "the model provider sent a malformed stream event");
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_max_steps(const char *ws)
{
	static const fc_resp_t script[] = { { .body = FC_CALL(0, "c", "bash", "{\\\"command\\\":\\\"true\\\"}") FC_CALLS FC_DONE } };
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	const char *flags[] = { "--max-steps", "3", NULL };
	run(&a, &f, ws, flags, NULL);
	expect_last(&a, "error", "max_steps", "The model was still calling tools after 3 steps (the limit)");
	TH_CHECK(fakechat_requests(&f) == 3);
	TH_CHECK(count_steps(&a, "succeeded") == 3);
	ap_free(&a);
	fakechat_stop(&f);
}

static void test_no_model(const char *ws)
{
	static const fc_resp_t script[] = { { .body = FC_DONE } };
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, "{\"run_id\":\"r\",\"prompt\":\"x\",\"model\":null}");
	expect_last(&a, "error", "model_error", "The config names no model (set \"model\" in the workspace config)");
	TH_CHECK(fakechat_requests(&f) == 0);
	ap_free(&a);
	fakechat_stop(&f);
}

/* A turn line that is not JSON: the error says so without quoting it (it
 * holds the prompt). */
static void test_bad_turn(const char *ws)
{
	static const fc_resp_t script[] = { { .body = FC_DONE } };
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, "{\"run_id\":\"r\",\"prompt\":secret-prompt-words}");
	expect_last(&a, "error", "model_error", "runnel-agent could not read its turn line: not valid JSON");
	TH_CHECK(!strstr(a.out ? a.out : "", "secret-prompt-words"), "the prompt is quoted: %s", a.out);
	ap_free(&a);
	run(&a, &f, ws, NULL, "[\"secret-prompt-words\"]");
	expect_last(&a, "error", "model_error", "runnel-agent could not read its turn line: not a JSON object");
	TH_CHECK(fakechat_requests(&f) == 0);
	ap_free(&a);
	fakechat_stop(&f);
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


static void test_stream_error_and_cut(const char *ws)
{
	static const fc_resp_t s1[] = { { .body = FC_TEXT("partial") "data: {\"error\":{\"message\":\"Overloaded, try later\",\"type\":\"server_error\"}}\n\n" } };
	static const fc_resp_t s2[] = { { .body = FC_TEXT("cut off mid-answer") } };
	static const fc_resp_t s3[] = { { .content_type = "application/json",
		                          .body = "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"whole answer\"},\"finish_reason\":\"stop\"}]}" } };
	const fc_resp_t *scripts[] = { s1, s2, s3 };
	const char *type[] = { "error", "error", "result" };
	const char *code[] = { "model_error", "model_error", NULL };
	const char *msg[] = { "Overloaded, try later", "The model stream ended before the answer was complete", "whole answer" };
	for (int i = 0; i < 3; i++) {
		fakechat_t f;
		TH_REQUIRE(fakechat_start(&f, scripts[i], 1) == 0);
		ap_t a;
		run(&a, &f, ws, NULL, NULL);
		expect_last(&a, type[i], code[i], msg[i]);
		TH_CHECK(fakechat_requests(&f) == 1);
		ap_free(&a);
		fakechat_stop(&f);
	}
}

static void test_retry_after_too_long(const char *ws)
{
	static const fc_resp_t script[] = {
		{ .status = 503, .content_type = "application/json", .headers = "Retry-After: 3600\r\n", .body = "{\"error\":{\"message\":\"Service unavailable\"}}" },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 1) == 0);
	ap_t a;
	int64_t t0 = th_now_ms();
	const char *flags[] = { "--retry-max-sec", "5", NULL };
	run(&a, &f, ws, flags, NULL);
	expect_last(&a, "error", "model_error", "The model provider answered HTTP 503: Service unavailable");
	TH_CHECK(fakechat_requests(&f) == 1, "a Retry-After past --retry-max-sec gives up at once");
	TH_CHECK(th_now_ms() - t0 < 3000);
	ap_free(&a);
	fakechat_stop(&f);
}

/* The key is for the provider only: bash does not inherit it. */
static void test_key_not_in_tools(const char *ws)
{
	static const fc_resp_t script[] = {
		{ .body = FC_CALL(0, "c", "bash", "{\\\"command\\\":\\\"env; echo key=[$OPENAI_API_KEY]\\\"}") FC_CALLS FC_DONE },
		{ .body = FC_TEXT("done") FC_STOP FC_DONE },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 2) == 0);
	ap_t a;
	run(&a, &f, ws, NULL, NULL);
	expect_last(&a, "result", NULL, "done");
	TH_CHECK(strstr(a.out, "key=[]") != NULL, "%s", a.out);
	TH_CHECK(!strstr(a.out, "OPENAI_API_KEY="));
	TH_REQUIRE(fakechat_requests(&f) == 2);
	TH_CHECK(!strstr(f.bodies[1], KEY), "the tool result sent back has no key");
	ap_free(&a);
	fakechat_stop(&f);
}

int main(int argc, char **argv)
{
	th_init("agent_model");
	TH_REQUIRE(argc == 2, "usage: test_agent_model RUNNEL_AGENT");
	agent_bin = argv[1];
	const char *ws = th_tmpdir();
	TH_REQUIRE(ws != NULL);
	test_text_deltas(ws);
	test_split_tool_args(ws);
	test_two_calls(ws);
	test_429(ws);
	test_500(ws);
	test_400(ws);
	test_stall(ws);
	test_malformed(ws);
	test_max_steps(ws);
	test_no_model(ws);
	test_bad_turn(ws);
	test_unreachable(ws);
	test_stream_error_and_cut(ws);
	test_retry_after_too_long(ws);
	test_key_not_in_tools(ws);
	return th_done();
}
