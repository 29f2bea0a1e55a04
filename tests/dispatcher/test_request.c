/*
 * tests/dispatcher/test_request.c - request bodies to jobs: every kind of
 * bad body gets the exact "<field>: <reason>" message, good bodies give
 * the job the caller asked for, and stream ids parse and order correctly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher/request.h"
#include "dispatcher/tail.h"
#include "tests/support/harness.h"

#define GOOD "\"agent_url\":\"https://ws.example/api/s1\",\"otp_setup\":\"s1\",\"otp_run\":\"r1\""

static void bad(const char *body, dispatcher_req_mode_t mode, const char *want)
{
	proto_job_t job;
	char err[256] = "";
	int rc = dispatcher_request_parse(body, strlen(body), mode, 28800, 1000, &job, err, sizeof(err));

	TH_CHECK(rc == -1, "accepted: %.80s", body);
	TH_CHECK(strcmp(err, want) == 0, "body %.60s: got \"%s\", want \"%s\"", body, err, want);
	proto_job_clear(&job);
}

/* Bodies the parser refuses, with the exact message. */
static const struct bad_case {
	const char *body;
	dispatcher_req_mode_t mode;
	const char *want;
} bad_cases[] = {
	{ "", DISPATCHER_REQ_STRICT, "body: empty (expected a JSON object)" },
	{ "not json", DISPATCHER_REQ_STRICT, "body: not valid JSON (line 1, column 3)" },
	{ "[1,2]", DISPATCHER_REQ_STRICT, "body: must be a JSON object" },
	{ "\"str\"", DISPATCHER_REQ_STRICT, "body: not valid JSON (line 1, column 5)" },
	{ "{" GOOD "}", DISPATCHER_REQ_STRICT, "prompt: missing" },
	{ "{\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}", DISPATCHER_REQ_STRICT, "agent_url: missing" },
	{ "{\"agent_url\":\"https://x/y\",\"otp_setup\":\"a\",\"prompt\":\"p\"}", DISPATCHER_REQ_STRICT, "otp_run: missing" },
	{ "{\"agent_url\":42,\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}", DISPATCHER_REQ_STRICT, "agent_url: must be a string" },
	{ "{" GOOD ",\"prompt\":[\"x\"]}", DISPATCHER_REQ_STRICT, "prompt: must be a string" },
	{ "{" GOOD ",\"prompt\":\"p\",\"otp_upload\":7}", DISPATCHER_REQ_STRICT, "otp_upload: must be a string or null" },
	{ "{" GOOD ",\"prompt\":\"p\",\"run_id\":\"bad id!\"}", DISPATCHER_REQ_STRICT, "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"run_id\":\"\"}", DISPATCHER_REQ_STRICT, "run_id: empty" },
	{ "{" GOOD ",\"prompt\":\"p\",\"run_id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", DISPATCHER_REQ_STRICT, "run_id: longer than 64 characters" },
	{ "{" GOOD ",\"prompt\":\"p\",\"run_id\":5}", DISPATCHER_REQ_STRICT, "run_id: must be a string" },
	{ "{" GOOD ",\"prompt\":\"p\",\"tenant\":\"acme corp\"}", DISPATCHER_REQ_STRICT, "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"tenant\":\"a/b\"}", DISPATCHER_REQ_LENIENT, "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"tenant\":\"\"}", DISPATCHER_REQ_STRICT, "tenant: empty" },
	{ "{" GOOD ",\"prompt\":\"p\",\"tenant\":7}", DISPATCHER_REQ_STRICT, "tenant: must be a string or null" },
	{ "{" GOOD ",\"prompt\":\"p\",\"tenant\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", DISPATCHER_REQ_STRICT, "tenant: longer than 64 characters" },
	{ "{\"agent_url\":\"https://x/y\",\"otp_setup\":\"a\\nb\",\"otp_run\":\"b\",\"prompt\":\"p\"}", DISPATCHER_REQ_STRICT, "otp_setup: only visible ASCII characters (0x21-0x7e) are allowed" },
	{ "{\"agent_url\":\"https://x/y\",\"otp_setup\":\"\",\"otp_run\":\"b\",\"prompt\":\"p\"}", DISPATCHER_REQ_STRICT, "otp_setup: empty" },
	{ "{\"agent_url\":\"ftp://x/y\",\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}", DISPATCHER_REQ_STRICT, "agent_url: must start with http:// or https://" },
	{ "{" GOOD ",\"prompt\":\"p\",\"otp_run\":\"again\"}", DISPATCHER_REQ_STRICT, "otp_run: duplicate key" },
	{ "{" GOOD ",\"prompt\":\"p\",\"zz\":1,\"zz\":2}", DISPATCHER_REQ_LENIENT, "body: duplicate key" },
	{ "{" GOOD ",\"prompt\":\"p\",\"colour\":\"red\"}", DISPATCHER_REQ_STRICT, "colour: unknown field" },
	{ "{" GOOD ",\"prompt\":\"p\",\"\":\"red\"}", DISPATCHER_REQ_STRICT, "body: unknown field with an empty name" },
	{ "{" GOOD ",\"prompt\":\"p\",\": \\t\":\"\"}", DISPATCHER_REQ_STRICT, "body: unknown field \": ?\"" },
	{ "{" GOOD ",\"prompt\":\"p\",\"a \\\"b\":1}", DISPATCHER_REQ_STRICT, "body: unknown field \"a ?b\"" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":0}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":\"60\"}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":99999}", DISPATCHER_REQ_STRICT, "max_runtime_sec: over this dispatcher's cap of 28800" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":60.5}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":-1e300}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":1e300}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":-5}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":99999999999999999999999}", DISPATCHER_REQ_STRICT, "max_runtime_sec: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"meta\":{\"n\":1e999}}", DISPATCHER_REQ_STRICT, "body: number out of range (line 1, column 103)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"extra\":{\"\\u0000\":1}}", DISPATCHER_REQ_LENIENT, "body: an object key holds a NUL character (line 1, column 103)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"meta\":{\"k\":\"a\\u0000b\"}}", DISPATCHER_REQ_STRICT, "body: a string holds a NUL character (line 1, column 108)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"meta\":[1]}", DISPATCHER_REQ_STRICT, "meta: must be an object" },
	{ "{" GOOD ",\"prompt\":\"p\",\"caller\":{}}", DISPATCHER_REQ_STRICT, "caller: must be a string" },
	{ "{" GOOD ",\"prompt\":\"p\",\"permission_mode\":\"always\"}", DISPATCHER_REQ_STRICT, "permission_mode: must be bypass, ask or deny" },
	{ "{" GOOD ",\"prompt\":\"p\",\"permission_mode\":true}", DISPATCHER_REQ_LENIENT, "permission_mode: must be bypass, ask or deny" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":0}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":-3}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":\"500\"}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":500.5}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":1e300}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":99999999999999999999999}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":true}}", DISPATCHER_REQ_LENIENT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":9000000000000000001}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: must be a positive integer" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: missing" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":null}}", DISPATCHER_REQ_STRICT, "budget.max_tokens: missing" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":5,\"usd\":1}}", DISPATCHER_REQ_STRICT, "budget: unknown field (only max_tokens)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":5,\"usd\":1}}", DISPATCHER_REQ_LENIENT, "budget: unknown field (only max_tokens)" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":500}", DISPATCHER_REQ_STRICT, "budget: must be an object {\"max_tokens\": N}" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":[500]}", DISPATCHER_REQ_LENIENT, "budget: must be an object {\"max_tokens\": N}" },
	{ "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":5,\"max_tokens\":6}}", DISPATCHER_REQ_STRICT, "body: duplicate key" },
};

static void test_bad_bodies(void)
{
	char *big;
	size_t n = PROTO_JOB_PROMPT_MAX + 10;

	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++)
		bad(bad_cases[i].body, bad_cases[i].mode, bad_cases[i].want);
	{
		proto_job_t job;
		char err[256] = "";
		const char *b = "{" GOOD ",\"prompt\":\"p\",\"permission_mode\":\"ask\"}";

		TH_CHECK(dispatcher_request_parse(b, strlen(b), DISPATCHER_REQ_STRICT, 28800, 1000, &job, err,
		                                  sizeof(err)) == 0,
		         "%s", err);
		TH_CHECK(strcmp(job.permission_mode, "ask") == 0 && !job.meta, "permission_mode taken");
		proto_job_clear(&job);
	}

	big = malloc(n + 200);
	TH_REQUIRE(big);
	{
		size_t off = (size_t)snprintf(big, 200, "{" GOOD ",\"prompt\":\"");

		memset(big + off, 'x', n);
		snprintf(big + off + n, 200, "\"}");
	}
	bad(big, DISPATCHER_REQ_STRICT, "prompt: longer than 524288 bytes");
	/* Nested past jansson's depth limit (2048), at the top or in meta. */
	memset(big, '[', 100000);
	memset(big + 100000, ']', 100000);
	big[200000] = '\0';
	bad(big, DISPATCHER_REQ_STRICT, "body: nested deeper than 2048 levels");
	{
		size_t off = (size_t)snprintf(big, 200, "{" GOOD ",\"prompt\":\"p\",\"meta\":{\"x\":");

		memset(big + off, '[', 5000);
		memset(big + off + 5000, ']', 5000);
		snprintf(big + off + 10000, 200, "}}");
	}
	bad(big, DISPATCHER_REQ_LENIENT, "body: nested deeper than 2048 levels");
	free(big);
	/* Invalid UTF-8 anywhere: in a field, in a key, in meta. */
	bad("{" GOOD ",\"prompt\":\"\xff\xfe\"}", DISPATCHER_REQ_STRICT, "body: invalid UTF-8 (line 1, column 83)");
	bad("{" GOOD ",\"prompt\":\"p\",\"\xc3\x28\":1}", DISPATCHER_REQ_LENIENT, "body: invalid UTF-8 (line 1, column 87)");
	bad("{" GOOD ",\"prompt\":\"p\",\"meta\":{\"k\":\"\xed\xa0\x80\"}}", DISPATCHER_REQ_STRICT,
	    "body: invalid UTF-8 (line 1, column 99)");
}

static void test_good(void)
{
	proto_job_t job;
	char err[256] = "";
	const char *b1 = "{" GOOD ",\"prompt\":\"hello\",\"otp_upload\":null,\"run_id\":\"run_a-1\","
	                 "\"caller\":\"assistant\",\"max_runtime_sec\":60,\"meta\":{\"k\":1},\"tenant\":\"acme.eu\"}";
	const char *b2 = "{" GOOD ",\"prompt\":\"hello\",\"otp_upload\":\"u1\",\"history\":[1],\"session\":\"s\"}";

	TH_CHECK(dispatcher_request_parse(b1, strlen(b1), DISPATCHER_REQ_STRICT, 28800, 1234, &job,
	                                  err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(strcmp(job.run_id, "run_a-1") == 0);
	TH_CHECK(th_streq(job.agent_url, "https://ws.example/api/s1"));
	TH_CHECK(th_streq(job.otp_setup, "s1") && th_streq(job.otp_run, "r1") && !job.otp_upload);
	TH_CHECK(th_streq(job.prompt, "hello") && th_streq(job.caller, "assistant"));
	TH_CHECK(job.max_runtime_sec == 60 && job.enqueued_at == 1234);
	TH_CHECK(json_integer_value(json_object_get(job.meta, "k")) == 1);
	TH_CHECK(th_streq(job.tenant, "acme.eu") && th_streq(proto_job_tenant(&job), "acme.eu"), "tenant");
	proto_job_clear(&job);

	/* /stream: unknown fields travel in meta; a run id is minted. */
	TH_CHECK(dispatcher_request_parse(b2, strlen(b2), DISPATCHER_REQ_LENIENT, 28800, 1, &job,
	                                  err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(strncmp(job.run_id, "run_", 4) == 0 && strlen(job.run_id) == 26, "%s", job.run_id);
	TH_CHECK(th_streq(job.otp_upload, "u1"));
	TH_CHECK(json_is_array(json_object_get(job.meta, "history")));
	TH_CHECK(th_streq(json_string_value(json_object_get(job.meta, "session")), "s"));
	TH_CHECK(json_object_size(job.meta) == 2);
	proto_job_clear(&job);
	/* The same body is refused by the strict route, naming the field. */
	bad(b2, DISPATCHER_REQ_STRICT, "history: unknown field");
}

/* JSON has one number type: 60.0 is 60, and an integer past 64 bits in
 * meta is read as a double (as JavaScript reads it), not refused. */
static void test_numbers(void)
{
	proto_job_t job;
	char err[256] = "";
	const char *b1 = "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":180.0}";
	const char *b2 = "{" GOOD ",\"prompt\":\"p\",\"max_runtime_sec\":60,\"meta\":{\"big\":[-779187025953067499520],\"n\":3}}";

	TH_CHECK(dispatcher_request_parse(b1, strlen(b1), DISPATCHER_REQ_STRICT, 28800, 1, &job, err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(job.max_runtime_sec == 180, "%lld", (long long)job.max_runtime_sec);
	proto_job_clear(&job);
	TH_CHECK(dispatcher_request_parse(b2, strlen(b2), DISPATCHER_REQ_STRICT, 28800, 1, &job, err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(job.max_runtime_sec == 60, "%lld", (long long)job.max_runtime_sec);
	TH_CHECK(json_real_value(json_array_get(json_object_get(job.meta, "big"), 0)) < -7.7e20, "big number kept");
	TH_CHECK(json_number_value(json_object_get(job.meta, "n")) == 3.0, "small number kept");
	proto_job_clear(&job);
}

/* budget (SPEC §5) is a job field on both routes, 500.0 as 500; on /stream
 * it is not swept into meta, and a null budget is no budget. */
static void test_budget(void)
{
	proto_job_t job;
	char err[256] = "";
	const char *b1 = "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":500}}";
	const char *b2 = "{" GOOD ",\"prompt\":\"p\",\"budget\":{\"max_tokens\":500.0},\"session\":\"s\"}";
	const char *b3 = "{" GOOD ",\"prompt\":\"p\",\"budget\":null}";
	json_t *wire = NULL;
	char *s = NULL;
	size_t n = 0;

	TH_CHECK(dispatcher_request_parse(b1, strlen(b1), DISPATCHER_REQ_STRICT, 28800, 1, &job, err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(job.max_tokens == 500, "%lld", (long long)job.max_tokens);
	TH_CHECK(!job.meta, "budget is not meta");
	/* It reaches the worker: the job's wire form carries it back. */
	s = proto_job_serialize(&job, NULL, &n, err, sizeof(err));
	TH_CHECK(s && (wire = json_loadb(s, n, 0, NULL)), "serialize: %s", err);
	TH_CHECK(json_integer_value(json_object_get(json_object_get(wire, "budget"), "max_tokens")) == 500,
	         "budget on the wire");
	json_decref(wire);
	memset(s, 0, n);
	free(s);
	proto_job_clear(&job);
	TH_CHECK(dispatcher_request_parse(b2, strlen(b2), DISPATCHER_REQ_LENIENT, 28800, 1, &job, err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(job.max_tokens == 500, "%lld", (long long)job.max_tokens);
	TH_CHECK(!json_object_get(job.meta, "budget") && json_object_size(job.meta) == 1, "not in meta");
	proto_job_clear(&job);
	TH_CHECK(dispatcher_request_parse(b3, strlen(b3), DISPATCHER_REQ_STRICT, 28800, 1, &job, err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(job.max_tokens == 0);
	proto_job_clear(&job);
}

static void test_sid(void)
{
	dispatcher_sid_t a, b;

	TH_CHECK(dispatcher_sid_parse("0", &a) == 0 && a.ms == 0 && a.seq == 0);
	TH_CHECK(dispatcher_sid_parse("1700000000000-5", &a) == 0 && a.ms == 1700000000000ULL && a.seq == 5);
	TH_CHECK(dispatcher_sid_parse("1700000000000", &b) == 0 && b.seq == 0);
	TH_CHECK(dispatcher_sid_cmp(b, a) < 0 && dispatcher_sid_cmp(a, b) > 0 && dispatcher_sid_cmp(a, a) == 0);
	TH_CHECK(dispatcher_sid_parse("", &a) == -1);
	TH_CHECK(dispatcher_sid_parse("1-", &a) == -1);
	TH_CHECK(dispatcher_sid_parse("-1", &a) == -1);
	TH_CHECK(dispatcher_sid_parse("1-2-3", &a) == -1);
	TH_CHECK(dispatcher_sid_parse("$", &a) == -1);
	TH_CHECK(dispatcher_sid_parse("99999999999999999999-0", &a) == -1);
}

int main(void)
{
	th_init("dispatcher_request");
	test_bad_bodies();
	test_good();
	test_budget();
	test_numbers();
	test_sid();
	return th_done();
}
