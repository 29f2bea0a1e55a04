/*
 * tests/gateway/test_gateway_worker.c - the model gateway through the real
 * runnel-worker in bwrap (worker/gateway.h): command agents that call the
 * providers with curl, and runnel-agent, against fake providers on loopback
 * (the scripted Chat Completions server, the Anthropic Messages and OpenAI
 * Responses fakes).
 *
 *   - key custody: the providers receive the real keys; a dump of env,
 *     /proc/<pid>/environ and cmdline and a grep of the sandbox's files
 *     (setup script included) finds only placeholders, and neither the
 *     stream, the state hash nor the worker's log holds a key;
 *   - usage on the terminal line and in the state hash equals what the
 *     fakes reported, streamed and whole, for each provider API, and the
 *     worker's /metrics counts the same tokens, calls and latencies;
 *   - refusals (wrong key, other host, huge body, garbage) reach no
 *     provider and leave a `log` line;
 *   - SPEC §6: a base URL at an address the operator's list does not name
 *     ends the run bootstrap_failed naming the variable;
 *   - budgets: a looping agent with max_tokens 500 ends budget_exceeded
 *     after the call that crosses it; the same with the budget in a job
 *     given to the real dispatcher's POST /v1/runs (the smaller of job's
 *     and config's wins); a tenant's hourly budget holds
 *     across two workers;
 *   - faults: provider 500, 429, down, silent mid-answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/acp/fakeprov.h"
#include "tests/builtin/fakechat.h"
#include "tests/dispatcher/dtest.h"
#include "tests/worker/wtest.h"

#define OKEY "sk-openai-real-7f3e9a1c5b2d"
#define AKEY "sk-ant-real-2d8c4b6a0e9f"
#define FRAG "real-7f3e9a"

static wt_t T;

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "$OPENAI_BASE_URL/chat/completions" with the key, status into a var. */
#define SH_OAI(var, out, data) \
	var "=$(curl -s --max-time 30 -o " out " -w '%{http_code}' -H \"Authorization: Bearer $OPENAI_API_KEY\" " \
	    "-H 'content-type: application/json' -d '" data "' \"$OPENAI_BASE_URL/chat/completions\"); "

static json_t *vars_openai(const char *base)
{
	return json_pack("{s:s,s:s}", "OPENAI_BASE_URL", base, "OPENAI_API_KEY", OKEY);
}

/* A command agent running script under /bin/sh -c; vars is taken. */
static void submit_sh(const char *run_id, json_t *vars, const char *setup, const char *script, long budget,
                      const char *tenant)
{
	dev_stub_run_t run = { 0 };
	run.env = json_pack("{s:o,s:s?}", "variables", vars, "setup_script", setup);
	run.config = json_pack("{s:{s:s,s:[s,s,s]}}", "agent", "kind", "command", "argv", "/bin/sh", "-c", script);
	if (budget)
		json_object_set_new(run.config, "budget", json_pack("{s:I}", "max_tokens", (json_int_t)budget));
	dev_stub_otps_t o;
	wt_submit_to(&T, run_id, &run, "go", -1, tenant, 0, 0, &o);
	json_decref(run.env);
	json_decref(run.config);
}

static long num(const json_t *o, const char *k)
{
	return (long)json_integer_value(json_object_get(o, k));
}

/* The run's terminal line (code, message) and its usage against want
 * (requests, input, output); the state hash holds the same object. */
static json_t *ended(const char *run_id, const char *code, long req, long in, long out)
{
	size_t n;
	char **l = wt_ended_lines(&T, run_id, 90000, &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), code), "%s: %s", run_id, n ? l[n - 1] : "-");
	json_t *j = n ? json_loads(l[n - 1], 0, NULL) : NULL;
	th_strv_free(l, n);
	json_t *u = json_object_get(j, "usage");
	TH_CHECK(json_is_object(u) && num(u, "requests") == req && num(u, "input_tokens") == in &&
	                 num(u, "output_tokens") == out && json_object_get(u, "cache_read_input_tokens") &&
	                 json_object_get(u, "cache_creation_input_tokens"),
	         "%s: usage %ld/%ld/%ld, want %ld/%ld/%ld", run_id, num(u, "requests"), num(u, "input_tokens"),
	         num(u, "output_tokens"), req, in, out);
	json_t *su = json_loads(wt_state(&T, run_id, "usage"), 0, NULL);
	TH_CHECK(su && json_equal(su, u), "%s: the state hash's usage is the line's", run_id);
	json_decref(su);
	return j;
}

typedef struct loop_ref {
	fakechat_t *f;
	int n;
} loop_ref_t;

static int loop_grew(void *arg)
{
	loop_ref_t *r = arg;
	return fakechat_requests(r->f) >= r->n;
}

static const char *msg_of(json_t *j)
{
	static char buf[512];
	snprintf(buf, sizeof(buf), "%s", json_string_value(json_object_get(j, "message")) ?: "");
	return buf;
}

/* The value of the series "name{labels}" in a Prometheus text body; -1
 * when absent. */
static double series_value(const char *body, const char *name, const char *labels)
{
	char *want = th_strf("\n%s{%s} ", name, labels);
	const char *p = body ? strstr(body, want) : NULL;
	double v = p ? strtod(p + strlen(want), NULL) : -1;
	return v;
}

/* The worker's /metrics after the chat, Anthropic and Responses runs:
 * tokens by tenant, model and direction, calls by provider and status, and
 * one upstream latency observation a call. */
static void check_metrics(const char *worker)
{
	int port = wt_metrics_port(&T, worker);
	TH_REQUIRE(port > 0, "metrics port");
	long st = 0;
	char *body = wt_http_get(th_strf("http://127.0.0.1:%d/metrics", port), &st);
	TH_REQUIRE(st == 200 && body, "metrics answered %ld", st);
	static const struct {
		const char *name, *labels;
		double want;
	} want[] = {
		{ "runnel_worker_model_tokens_total", "tenant=\"default\",model=\"m\",direction=\"input\"", 18 },
		{ "runnel_worker_model_tokens_total", "tenant=\"default\",model=\"m\",direction=\"output\"", 5 },
		{ "runnel_worker_model_tokens_total", "tenant=\"default\",model=\"claude-fake\",direction=\"input\"", 200 },
		{ "runnel_worker_model_tokens_total", "tenant=\"default\",model=\"claude-fake\",direction=\"output\"", 40 },
		{ "runnel_worker_model_tokens_total", "tenant=\"default\",model=\"gpt-fake\",direction=\"input\"", 100 },
		{ "runnel_worker_model_tokens_total", "tenant=\"default\",model=\"gpt-fake\",direction=\"output\"", 20 },
		{ "runnel_worker_model_requests_total", "provider=\"openai\",status=\"200\"", 3 },
		{ "runnel_worker_model_requests_total", "provider=\"anthropic\",status=\"200\"", 2 },
		{ "runnel_worker_model_upstream_seconds_count", "provider=\"openai\",status=\"200\"", 3 },
		{ "runnel_worker_model_upstream_seconds_count", "provider=\"anthropic\",status=\"200\"", 2 },
		{ "runnel_worker_model_upstream_seconds_bucket", "provider=\"anthropic\",status=\"200\",le=\"+Inf\"", 2 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		double v = series_value(body, want[i].name, want[i].labels);
		TH_CHECK(v == want[i].want, "%s{%s} is %g, want %g", want[i].name, want[i].labels, v, want[i].want);
	}
	TH_CHECK(strstr(body, "# TYPE runnel_worker_model_tokens_total counter") &&
	                 strstr(body, "# TYPE runnel_worker_model_requests_total counter") &&
	                 strstr(body, "# TYPE runnel_worker_model_upstream_seconds histogram"),
	         "TYPE lines");
	TH_CHECK(series_value(body, "runnel_worker_model_upstream_seconds_sum", "provider=\"openai\",status=\"200\"") >= 0,
	         "latency sum");
	TH_CHECK(!strstr(body, OKEY) && !strstr(body, AKEY), "no key in the metrics");
	free(body);
}

static int any_key_in_redis(void)
{
	/* Every key the test's runs left: stream entries and hashes. */
	redisReply *r = redisCommand(T.rc, "KEYS *");
	int found = 0;
	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
		redisReply *d = redisCommand(T.rc, "DUMP %s", r->element[i]->str);
		if (d && d->type == REDIS_REPLY_STRING &&
		    (memmem(d->str, d->len, OKEY, strlen(OKEY)) || memmem(d->str, d->len, AKEY, strlen(AKEY))))
			found = 1;
		if (d)
			freeReplyObject(d);
	}
	if (r)
		freeReplyObject(r);
	return found;
}

int main(void)
{
	th_init("gateway_worker");
	wt_setup(&T, NULL, 1);

	/* The fakes, all on loopback, each named by the operator's list. */
	static const fc_resp_t chat_script[] = {
		{ .body = FC_TEXT("hi") "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3}}\n\n" FC_DONE },
		{ .content_type = "application/json",
		  .body = "{\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ok\"}}],"
		          "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":0}}}" },
	};
	static const fc_resp_t loop_script[] = {
		{ .content_type = "application/json",
		  .body = "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"again\"}}],"
		          "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20}}" },
	};
	static const fc_resp_t e500[] = { { .status = 500, .content_type = "application/json", .body = "{\"error\":{\"message\":\"fake provider failure\",\"type\":\"server_error\"}}" } };
	static const fc_resp_t e429[] = { { .status = 429, .content_type = "application/json", .headers = "Retry-After: 7\r\n", .body = "{\"error\":{\"message\":\"slow down\",\"type\":\"rate_limit\"}}" } };
	static const fc_resp_t cut[] = {
		{ .body = "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n"
		          "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n",
		  .stall = 1 },
	};
	static const fc_resp_t dump_script[] = {
		{ .body = FC_CALL(0, "c1", "bash",
		                  "{\\\"command\\\":\\\"env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline; grep -rIl " FRAG
		                  " /root /tmp /run 2>/dev/null | sed s/^/FOUND$((1+1)):/\\\"}") FC_CALLS FC_DONE },
		{ .body = FC_TEXT("Dumped.") FC_STOP FC_DONE },
	};
	fakechat_t chat, loop, f500, f429, fcut, fdump;
	TH_REQUIRE(fakechat_start(&chat, chat_script, 2) == 0);
	TH_REQUIRE(fakechat_start(&loop, loop_script, 1) == 0);
	TH_REQUIRE(fakechat_start(&f500, e500, 1) == 0);
	TH_REQUIRE(fakechat_start(&f429, e429, 1) == 0);
	TH_REQUIRE(fakechat_start(&fcut, cut, 1) == 0);
	TH_REQUIRE(fakechat_start(&fdump, dump_script, 2) == 0);
	fp_t *anth = fp_start(FP_ANTHROPIC), *resp = fp_start(FP_OPENAI);
	TH_REQUIRE(anth && resp, "fake providers");
	int down = th_free_port();
	int aport = (int)strtol(strrchr(fp_url(anth), ':') + 1, NULL, 10),
	    rport = (int)strtol(strrchr(fp_url(resp), ':') + 1, NULL, 10);
	char *allow = th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,"
	                      "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
	                      chat.port, loop.port, f500.port, f429.port, fcut.port, fdump.port, aport, rport, down);
	const char *wenv[] = { allow, "RUNNEL_GATEWAY_BODY_MAX=65536", "RUNNEL_GATEWAY_TIMEOUT_SEC=3",
		               "RUNNEL_TENANT_TOKENS_PER_HOUR_FOR=acme=300", "RUNNEL_MODEL_SECRETS=MY_MODEL_TOKEN",
		               "RUNNEL_LOG_LEVEL=debug", NULL };
	pid_t w = wt_worker(&T, "w1", wenv);
	wt_warmup(&T);
	json_t *j;

	/* OpenAI Chat Completions, streamed (include_usage added) and whole. */
	submit_sh("run_chat", vars_openai(chat.base_url), NULL,
	          SH_OAI("a", "/tmp/a", "{\"model\":\"m\",\"stream\":true,\"messages\":[]}")
	                  SH_OAI("b", "/tmp/b", "{\"model\":\"m\",\"messages\":[]}") "grep -q 'data: \\[DONE\\]' /tmp/a && d=done || d=cut; "
	                                                                             "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$a $b $d\\\"}\"",
	          0, NULL);
	j = ended("run_chat", "", 2, 18, 5);
	TH_CHECK(th_streq(msg_of(j), "200 200 done"), "%s", msg_of(j));
	json_decref(j);
	TH_REQUIRE(fakechat_requests(&chat) == 2);
	TH_CHECK(th_streq(chat.auth[0], "Bearer " OKEY) && th_streq(chat.auth[1], "Bearer " OKEY), "the real key");
	TH_CHECK(strstr(chat.bodies[0], "\"include_usage\":true"), "usage asked for: %s", chat.bodies[0]);
	TH_CHECK(!strstr(chat.bodies[1], "include_usage"), "a whole answer is left alone");

	/* Anthropic Messages, streamed and whole: 100 in, 20 out each. */
	json_t *av = json_pack("{s:s,s:s}", "ANTHROPIC_BASE_URL", fp_url(anth), "ANTHROPIC_API_KEY", AKEY);
	submit_sh("run_anthropic", av, NULL,
	          "for s in true false; do c=$(curl -s --max-time 30 -o /tmp/$s -w '%{http_code}' -H \"x-api-key: "
	          "$ANTHROPIC_API_KEY\" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d "
	          "\"{\\\"model\\\":\\\"claude-fake\\\",\\\"max_tokens\\\":100,\\\"stream\\\":$s,\\\"messages\\\":[{"
	          "\\\"role\\\":\\\"user\\\",\\\"content\\\":\\\"hi\\\"}]}\" \"$ANTHROPIC_BASE_URL/v1/messages\"); "
	          "r=\"$r $c\"; done; grep -q message_stop /tmp/true && r=\"$r streamed\"; "
	          "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$r\\\"}\"",
	          0, NULL);
	j = ended("run_anthropic", "", 2, 200, 40);
	TH_CHECK(th_streq(msg_of(j), " 200 200 streamed"), "%s", msg_of(j));
	json_decref(j);
	TH_CHECK(fp_calls(anth) == 2 && fp_seen(anth, AKEY) && !fp_seen(anth, "rgw-"), "the real Anthropic key");

	/* OpenAI Responses, streamed. */
	submit_sh("run_responses", json_pack("{s:s,s:s}", "OPENAI_BASE_URL", th_strf("%s/v1", fp_url(resp)), "OPENAI_API_KEY", OKEY),
	          NULL,
	          "c=$(curl -s --max-time 30 -o /tmp/r -w '%{http_code}' -H \"Authorization: Bearer $OPENAI_API_KEY\" -H "
	          "'content-type: application/json' -d '{\"model\":\"gpt-fake\",\"stream\":true,\"input\":\"hi\"}' "
	          "\"$OPENAI_BASE_URL/responses\"); grep -q response.completed /tmp/r && c=\"$c completed\"; "
	          "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$c\\\"}\"",
	          0, NULL);
	j = ended("run_responses", "", 1, 100, 20);
	TH_CHECK(th_streq(msg_of(j), "200 completed"), "%s", msg_of(j));
	json_decref(j);
	TH_CHECK(fp_calls(resp) == 1 && fp_seen(resp, OKEY), "the real OpenAI key");
	check_metrics("w1");

	/* Refusals: none reaches the provider, each leaves a log line. */
	int before = fakechat_requests(&chat);
	submit_sh("run_refused", vars_openai(chat.base_url), NULL,
	          "K=\"Authorization: Bearer $OPENAI_API_KEY\"; U=\"$OPENAI_BASE_URL/chat/completions\"; "
	          "C='curl -s --max-time 30 -o /dev/null -w %{http_code}'; "
	          "a=$($C -H 'Authorization: Bearer rgw-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' -d '{}' \"$U\"); "
	          "b=$($C -H \"$K\" -H 'Host: evil.example' -d '{}' \"$U\"); "
	          "c=$($C -H \"$K\" --request-target http://evil.example/v1/chat/completions -d '{}' \"$U\"); "
	          "head -c 100000 /dev/zero | tr '\\0' a > /tmp/big; "
	          "d=$($C -H \"$K\" --data-binary @/tmp/big \"$U\"); "
	          "e=$($C -H \"$K\" -H 'Transfer-Encoding: chunked' --data-binary @/tmp/big \"$U\"); "
	          "f=$($C -H \"$K\" -d 'not json' \"$U\"); "
	          "g=$($C -d '{}' \"$U\"); "
	          "h=$($C -H \"$K\" -d '{}' \"$OPENAI_BASE_URL/files\"); "
	          "i=$($C -H \"$K\" \"$OPENAI_BASE_URL/files/file-1/content\"); "
	          "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$a $b $c $d $e $f $g $h $i\\\"}\"",
	          0, NULL);
	j = ended("run_refused", "", 0, 0, 0);
	TH_CHECK(th_streq(msg_of(j), "401 400 400 413 413 400 401 403 403"), "%s", msg_of(j));
	json_decref(j);
	TH_CHECK(fakechat_requests(&chat) == before, "nothing forwarded");
	TH_CHECK(wt_stream_has(&T, "run_refused", "gateway refused a request without this run's key") &&
	                 wt_stream_has(&T, "run_refused", "gateway refused a request for another host") &&
	                 wt_stream_has(&T, "run_refused", "gateway refused a request body") &&
	                 wt_stream_has(&T, "run_refused", "whose body is not a JSON object"),
	         "log lines for the refusals");

	/* Key custody: the sandbox holds placeholders only, setup included. */
	json_t *kv = json_pack("{s:s,s:s,s:s,s:s,s:s}", "OPENAI_BASE_URL", chat.base_url, "OPENAI_API_KEY", OKEY,
	                       "ANTHROPIC_BASE_URL", fp_url(anth), "ANTHROPIC_API_KEY", AKEY, "MY_MODEL_TOKEN", "also-secret");
	submit_sh("run_dump", kv, "env; echo setup-ran",
	          "{ env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; "
	          "grep -rIl " FRAG " /root /tmp /run 2>/dev/null | sed \"s/^/FOUND$((1+1)):/\"; } 1>&2; "
	          "echo '{\"type\":\"result\",\"message\":\"dumped\"}'",
	          0, NULL);
	j = ended("run_dump", "", 0, 0, 0);
	json_decref(j);
	TH_CHECK(wt_stream_has(&T, "run_dump", "setup-ran"), "the setup script ran");
	TH_CHECK(wt_stream_has(&T, "run_dump", "OPENAI_API_KEY=rgw-") && wt_stream_has(&T, "run_dump", "ANTHROPIC_API_KEY=rgw-"),
	         "placeholders in the environment");
	TH_CHECK(!wt_stream_has(&T, "run_dump", OKEY) && !wt_stream_has(&T, "run_dump", AKEY), "no key in env or /proc");
	TH_CHECK(!wt_stream_has(&T, "run_dump", "FOUND2:"), "no key in the sandbox's files");
	TH_CHECK(!wt_stream_has(&T, "run_dump", "also-secret"), "RUNNEL_MODEL_SECRETS names left out");

	/* runnel-agent: its bash tool dumps the same; the model sees it. */
	dev_stub_run_t br = { 0 };
	br.env = json_pack("{s:o,s:n}", "variables", vars_openai(fdump.base_url), "setup_script");
	br.config = json_pack("{s:s,s:{s:s}}", "model", "fake-model", "agent", "kind", "builtin");
	dev_stub_otps_t bo;
	wt_submit(&T, "run_builtin_dump", &br, "dump", 0, 0, &bo);
	json_decref(br.env);
	json_decref(br.config);
	j = ended("run_builtin_dump", "", 2, 0, 0);
	json_decref(j);
	TH_REQUIRE(fakechat_requests(&fdump) == 2);
	TH_CHECK(th_streq(fdump.auth[0], "Bearer " OKEY), "runnel-agent's calls carry the real key upstream");
	TH_CHECK(strstr(fdump.bodies[1], "rgw-") && !strstr(fdump.bodies[1], OKEY) && !strstr(fdump.bodies[1], "FOUND2:"),
	         "the tool's dump holds the placeholder only");
	TH_CHECK(!wt_stream_has(&T, "run_builtin_dump", OKEY), "no key in the stream");

	/* SPEC §6: addresses the operator's list does not name. */
	const char *bad[][2] = { { "http://93.184.216.34/v1", "OPENAI_BASE_URL is not https" },
		                 { "http://127.0.0.1:1/v1", "OPENAI_BASE_URL resolves to 127.0.0.1, a loopback address" },
		                 { "https://127.0.0.1:1/v1", "OPENAI_BASE_URL resolves to 127.0.0.1, a loopback address" },
		                 { "https://10.1.2.3/v1", "OPENAI_BASE_URL resolves to 10.1.2.3, a private" },
		                 { "https://169.254.169.254/v1", "OPENAI_BASE_URL resolves to 169.254.169.254, a link-local" },
		                 { "https://[::1]:8/v1", "OPENAI_BASE_URL resolves to ::1, a loopback" },
		                 { "ftp://x/v1", "OPENAI_BASE_URL is not an http(s) URL" } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char id[32];
		snprintf(id, sizeof(id), "run_private_%zu", i);
		submit_sh(id, vars_openai(bad[i][0]), NULL, "echo '{\"type\":\"result\",\"message\":\"ran\"}'", 0, NULL);
		char msg[512];
		const char *code = wt_ended(&T, id, 60000, msg, sizeof(msg));
		TH_CHECK(th_streq(code, "bootstrap_failed") && strstr(msg, bad[i][1]), "%s: %s %s", bad[i][0], code, msg);
	}

	/* A looping agent with a budget of 500: 120 tokens a call, the fifth
	 * crosses it, the run ends at once with that usage. */
	const char *loop_sh = "i=0; while [ $i -lt 30 ]; do i=$((i+1)); " SH_OAI("c", "/dev/null", "{\"model\":\"m\",\"messages\":[]}") "echo \"call $i: $c\" 1>&2; done; echo '{\"type\":\"result\",\"message\":\"looped\"}'";
	submit_sh("run_budget", vars_openai(loop.base_url), NULL, loop_sh, 500, NULL);
	j = ended("run_budget", "budget_exceeded", 5, 500, 100);
	TH_CHECK(strstr(msg_of(j), "600 tokens, over its budget of 500"), "%s", msg_of(j));
	json_decref(j);
	TH_CHECK(fakechat_requests(&loop) == 5, "%d calls reached the provider", fakechat_requests(&loop));

	/* The same through the real dispatcher: POST /v1/runs with a job
	 * budget of 300.0 (a whole double, as a JavaScript caller sends it)
	 * under a config budget of 1000; the smaller wins, so the third call
	 * (360 tokens) ends the run. */
	{
		dt_disp_t d;
		const char *denv[] = { th_strf("RUNNEL_JOBS_TOPIC=%s", T.topic), NULL };
		TH_REQUIRE(dt_disp_start(&d, &T.redis, &T.kafka, denv) == 0, "dispatcher");
		dev_stub_run_t run = { 0 };
		run.env = json_pack("{s:o,s:n}", "variables", vars_openai(loop.base_url), "setup_script");
		run.config = json_pack("{s:{s:s,s:[s,s,s]},s:{s:i}}", "agent", "kind", "command", "argv", "/bin/sh", "-c",
		                       loop_sh, "budget", "max_tokens", 1000);
		dev_stub_otps_t o;
		TH_REQUIRE(dev_stub_add_run(T.stub, &run, &o) == 0, "stub add run");
		json_decref(run.env);
		json_decref(run.config);
		json_t *body = json_pack("{s:s,s:s,s:s,s:s,s:s,s:{s:f}}", "agent_url", o.agent_url, "otp_setup", o.otp_setup,
		                         "otp_run", o.otp_run, "prompt", "go", "run_id", "run_budget_api", "budget",
		                         "max_tokens", 300.0);
		char *b = json_dumps(body, JSON_COMPACT);
		json_decref(body);
		dt_resp_t r;
		int loop_at = fakechat_requests(&loop);
		TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", d.base), (const char *const[]){ "Content-Type: application/json", NULL },
		                   b, -1, 15000) == 0,
		           "POST /v1/runs");
		TH_CHECK(r.status == 202, "%ld %s", r.status, r.body);
		dt_resp_free(&r);
		free(b);
		j = ended("run_budget_api", "budget_exceeded", 3, 300, 60);
		TH_CHECK(strstr(msg_of(j), "360 tokens, over its budget of 300"), "%s", msg_of(j));
		json_decref(j);
		TH_CHECK(fakechat_requests(&loop) == loop_at + 3, "%d calls reached the provider",
		         fakechat_requests(&loop) - loop_at);
		dt_disp_stop(&d);
	}

	/* Faults: the agent sees what the provider said, no hang. */
	submit_sh("run_500", vars_openai(f500.base_url), NULL,
	          SH_OAI("c", "/tmp/o", "{\"model\":\"m\",\"messages\":[]}") "grep -q 'fake provider failure' /tmp/o && c=\"$c said\"; echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$c\\\"}\"",
	          0, NULL);
	j = ended("run_500", "", 1, 0, 0);
	TH_CHECK(th_streq(msg_of(j), "500 said"), "%s", msg_of(j));
	json_decref(j);
	submit_sh("run_429", vars_openai(f429.base_url), NULL,
	          "c=$(curl -s --max-time 30 -D /tmp/h -o /dev/null -w '%{http_code}' -H \"Authorization: Bearer $OPENAI_API_KEY\" "
	          "-d '{\"model\":\"m\",\"messages\":[]}' \"$OPENAI_BASE_URL/chat/completions\"); "
	          "grep -qi 'retry-after: 7' /tmp/h && c=\"$c retry\"; echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$c\\\"}\"",
	          0, NULL);
	j = ended("run_429", "", 1, 0, 0);
	TH_CHECK(th_streq(msg_of(j), "429 retry"), "%s", msg_of(j));
	json_decref(j);
	submit_sh("run_down", vars_openai(th_strf("http://127.0.0.1:%d/v1", down)), NULL,
	          SH_OAI("c", "/tmp/o", "{\"model\":\"m\",\"messages\":[]}") "grep -q 'could not be reached' /tmp/o && c=\"$c said\"; echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$c\\\"}\"",
	          0, NULL);
	j = ended("run_down", "", 1, 0, 0);
	TH_CHECK(th_streq(msg_of(j), "502 said"), "%s", msg_of(j));
	json_decref(j);
	TH_CHECK(wt_stream_has(&T, "run_down", "gateway: the openai call failed"), "a log line");
	long long t0 = mono_ms();
	submit_sh("run_cut", vars_openai(fcut.base_url), NULL,
	          SH_OAI("c", "/tmp/o", "{\"model\":\"m\",\"stream\":true,\"messages\":[]}") "grep -q par /tmp/o && c=\"$c partial\"; echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$c\\\"}\"",
	          0, NULL);
	j = ended("run_cut", "", 1, 40, 1);
	TH_CHECK(th_streq(msg_of(j), "200 partial"), "%s", msg_of(j));
	json_decref(j);
	TH_CHECK(mono_ms() - t0 < 30000, "the silent provider was given up on (%lld ms)", (long long)(mono_ms() - t0));
	TH_CHECK(wt_stream_has(&T, "run_cut", "answer was cut"), "a log line for the cut");

	/* The tenant's hourly budget (300), counted in Redis: a running run
	 * of acme made one call (120); another run crosses the budget on its
	 * second call (360); the first ends budget_exceeded at its next call. */
	int loop_before = fakechat_requests(&loop);
	submit_sh("run_tenant_long", vars_openai(loop.base_url), NULL,
	          SH_OAI("c", "/dev/null", "{\"model\":\"m\",\"messages\":[]}") "sleep 6; " SH_OAI(
	                  "c", "/dev/null", "{\"model\":\"m\",\"messages\":[]}") "echo '{\"type\":\"result\",\"message\":\"late\"}'",
	          0, "acme");
	TH_REQUIRE(th_wait_until(loop_grew, &(loop_ref_t){ &loop, loop_before + 1 }, 30000), "the long run's first call");
	submit_sh("run_tenant_1", vars_openai(loop.base_url), NULL, loop_sh, 0, "acme");
	j = ended("run_tenant_1", "budget_exceeded", 2, 200, 40);
	TH_CHECK(strstr(msg_of(j), "The tenant \"acme\" used 360 tokens this hour, its budget is 300 tokens."), "%s",
	         msg_of(j));
	json_decref(j);
	j = ended("run_tenant_long", "budget_exceeded", 1, 100, 20);
	json_decref(j);
	TH_CHECK(fakechat_requests(&loop) == loop_before + 3, "the refused call reached no provider");
	/* Across workers: another worker starts no run of acme this hour (it
	 * waits in the queue), while another tenant's run goes ahead. */
	wt_stop_worker(w, 20000, "w1");
	pid_t w2 = wt_worker(&T, "w2", wenv);
	submit_sh("run_tenant_2", vars_openai(loop.base_url), NULL, loop_sh, 0, "acme");
	submit_sh("run_tenant_other", vars_openai(chat.base_url), NULL,
	          SH_OAI("c", "/dev/null", "{\"model\":\"m\",\"messages\":[]}") "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$c\\\"}\"",
	          0, "bulk");
	j = ended("run_tenant_other", "", 1, 7, 2);
	json_decref(j);
	TH_CHECK(th_streq(wt_state(&T, "run_tenant_2", "status"), "queued"), "acme's run waits: %s",
	         wt_state(&T, "run_tenant_2", "status"));
	TH_CHECK(fakechat_requests(&loop) == loop_before + 3, "and calls no provider");

	/* Nothing of the keys anywhere a caller or the run can read. */
	TH_CHECK(!any_key_in_redis(), "no key in Redis");
	TH_CHECK(!th_file_contains(wt_log_path(&T, "w1"), OKEY) && !th_file_contains(wt_log_path(&T, "w1"), AKEY) &&
	                 !th_file_contains(wt_log_path(&T, "w2"), OKEY),
	         "no key in the workers' logs");
	wt_stop_worker(w2, 20000, "w2");
	fakechat_stop(&chat);
	fakechat_stop(&loop);
	fakechat_stop(&f500);
	fakechat_stop(&f429);
	fakechat_stop(&fcut);
	fakechat_stop(&fdump);
	fp_stop(anth);
	fp_stop(resp);
	wt_teardown(&T);
	return th_done();
}
