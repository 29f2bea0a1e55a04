/*
 * tests/proto/test_usage.c - the usage parser against the answers of the
 * three provider APIs (streamed and whole), fed whole and one byte at a
 * time; events split across reads, cut streams, over-cap events, garbage,
 * and the sum's JSON shape (SPEC §4).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/usage.h"
#include "tests/support/check.h"

typedef struct {
	const char *what;
	proto_usage_api_t api;
	int sse;
	const char *body;
	int rc;
	proto_usage_t want;
	const char *model;
} usage_case_t;

static const usage_case_t cases[] = {
	{ "anthropic json", PROTO_USAGE_ANTHROPIC, 0, "{\"id\":\"msg_1\",\"type\":\"message\",\"model\":\"claude-x\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],"
	                                              "\"usage\":{\"input_tokens\":120,\"output_tokens\":7,\"cache_read_input_tokens\":30,\"cache_creation_input_tokens\":5}}",
	  1,
	  { 1, 120, 7, 30, 5 },
	  "claude-x" },
	{ "anthropic sse", PROTO_USAGE_ANTHROPIC, 1, "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-y\",\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\r\n\r\n"
	                                             "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n"
	                                             "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"
	                                             "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":21}}\n\n"
	                                             "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	  1,
	  { 1, 50, 21, 0, 0 },
	  "claude-y" },
	{ "anthropic sse cut after message_start", PROTO_USAGE_ANTHROPIC, 1, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n"
	                                                                     "event: content_block_delta\ndata: {\"type\":\"content_bl",
	  1,
	  { 1, 40, 1, 0, 0 },
	  "" },
	{ "openai chat json", PROTO_USAGE_OPENAI, 0, "{\"model\":\"gpt-z\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":12,\"total_tokens\":112,"
	                                             "\"prompt_tokens_details\":{\"cached_tokens\":60}}}",
	  1,
	  { 1, 40, 12, 60, 0 },
	  "gpt-z" },
	{ "openai chat sse", PROTO_USAGE_OPENAI, 1, "data: {\"model\":\"gpt-z\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
	                                            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":33,\"completion_tokens\":4}}\n\n"
	                                            "data: [DONE]\n\n",
	  1,
	  { 1, 33, 4, 0, 0 },
	  "gpt-z" },
	{ "openai chat sse without usage", PROTO_USAGE_OPENAI, 1, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n", 0, { 1, 0, 0, 0, 0 }, "" },
	{ "openai responses sse", PROTO_USAGE_OPENAI, 1, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-r\",\"usage\":null}}\n\n"
	                                                 "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n"
	                                                 "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-r\","
	                                                 "\"usage\":{\"input_tokens\":70,\"output_tokens\":8,\"input_tokens_details\":{\"cached_tokens\":20}}}}\n\n",
	  1,
	  { 1, 50, 8, 20, 0 },
	  "gpt-r" },
	{ "openai responses json", PROTO_USAGE_OPENAI, 0, "{\"object\":\"response\",\"model\":\"gpt-r\",\"usage\":{\"input_tokens\":9,\"output_tokens\":3}}", 1, { 1, 9, 3, 0, 0 }, "gpt-r" },
	{ "multi-line data", PROTO_USAGE_OPENAI, 1, "data: {\"usage\":\ndata: {\"prompt_tokens\":5,\"completion_tokens\":6}}\n\n", 1, { 1, 5, 6, 0, 0 }, "" },
	{ "garbage json", PROTO_USAGE_ANTHROPIC, 0, "<html>bad gateway</html>", 0, { 1, 0, 0, 0, 0 }, "" },
	{ "garbage sse", PROTO_USAGE_ANTHROPIC, 1, "data: {not json\n\n:comment\nretry: 5\n\n\n", 0, { 1, 0, 0, 0, 0 }, "" },
	{ "negative and float tokens ignored", PROTO_USAGE_ANTHROPIC, 0, "{\"usage\":{\"input_tokens\":-5,\"output_tokens\":2.5}}", 0, { 1, 0, 0, 0, 0 }, "" },
	{ "cached above prompt clamps", PROTO_USAGE_OPENAI, 0, "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":9}}}", 1, { 1, 0, 1, 5, 0 }, "" },
};

static void run_case(const usage_case_t *k, int bytewise)
{
	proto_usage_call_t *c = proto_usage_call_new(k->api, k->sse, 4096);
	TH_REQUIRE(c, "parser");
	size_t n = strlen(k->body);
	if (bytewise)
		for (size_t i = 0; i < n; i++)
			proto_usage_call_feed(c, k->body + i, 1);
	else
		proto_usage_call_feed(c, k->body, n);
	proto_usage_t u;
	char model[PROTO_USAGE_MODEL_MAX];
	int rc = proto_usage_call_finish(c, &u, model, sizeof(model));
	proto_usage_call_free(c);
	TH_CHECK(rc == k->rc, "%s%s: rc %d, want %d", k->what, bytewise ? " (bytewise)" : "", rc, k->rc);
	TH_CHECK(!memcmp(&u, &k->want, sizeof(u)), "%s%s: usage %llu/%llu/%llu/%llu/%llu", k->what,
	         bytewise ? " (bytewise)" : "", (unsigned long long)u.requests, (unsigned long long)u.input_tokens,
	         (unsigned long long)u.output_tokens, (unsigned long long)u.cache_read_input_tokens,
	         (unsigned long long)u.cache_creation_input_tokens);
	TH_CHECK(!strcmp(model, k->model), "%s: model \"%s\"", k->what, model);
}

/* An event over the cap is skipped and said so; the next one counts. */
static void test_cap(void)
{
	proto_usage_call_t *c = proto_usage_call_new(PROTO_USAGE_ANTHROPIC, 1, 64);
	char big[200];
	memset(big, 'x', sizeof(big));
	proto_usage_call_feed(c, "data: {\"pad\":\"", 14);
	proto_usage_call_feed(c, big, sizeof(big));
	proto_usage_call_feed(c, "\",\"usage\":{\"input_tokens\":999}}\n\n", 33);
	const char *next = "data: {\"usage\":{\"output_tokens\":3}}\n\n";
	proto_usage_call_feed(c, next, strlen(next));
	proto_usage_t u;
	char model[8];
	TH_CHECK(proto_usage_call_finish(c, &u, model, sizeof(model)) == -1, "over-cap event reported");
	TH_CHECK(u.input_tokens == 0 && u.output_tokens == 3, "only the event within the cap counted");
	proto_usage_call_free(c);

	c = proto_usage_call_new(PROTO_USAGE_OPENAI, 0, 16);
	proto_usage_call_feed(c, "{\"usage\":{\"prompt_tokens\":1}}", 29);
	TH_CHECK(proto_usage_call_finish(c, &u, model, sizeof(model)) == -1 && u.input_tokens == 0, "over-cap body skipped");
	proto_usage_call_free(c);
}

static void test_sum(void)
{
	proto_usage_t s = { 0 }, a = { 1, 100, 20, 3, 4 }, b = { 1, UINT64_MAX, 1, 0, 0 };
	proto_usage_add(&s, &a);
	proto_usage_add(&s, &a);
	TH_CHECK(s.requests == 2 && s.input_tokens == 200 && s.output_tokens == 40, "sum");
	TH_CHECK(proto_usage_budget_tokens(&s) == 240, "budget tokens are input + output");
	char *t = proto_usage_text(&s);
	TH_CHECK(t && !strcmp(t, "{\"requests\":2,\"input_tokens\":200,\"output_tokens\":40,"
	                         "\"cache_read_input_tokens\":6,\"cache_creation_input_tokens\":8}"),
	         "SPEC shape: %s", t ? t : "(null)");
	free(t);
	proto_usage_add(&s, &b);
	TH_CHECK(s.input_tokens == UINT64_MAX, "saturates");
	t = proto_usage_text(&s);
	TH_CHECK(t && strstr(t, "\"input_tokens\":9223372036854775807"), "clamped to a JSON integer");
	free(t);
}

int main(void)
{
	th_check_name("proto_usage");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		run_case(&cases[i], 0);
		run_case(&cases[i], 1);
	}
	test_cap();
	test_sum();
	return th_done();
}
