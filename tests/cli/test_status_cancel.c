/*
 * tests/cli/test_status_cancel.c - `runnel status` and `runnel cancel`
 * against a real redis-server: the state table and JSON, exit 3 for
 * unknown runs, and the exact control message cancel writes.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/runqueue.h"
#include "tests/cli/cliredis.h"
#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

static cli_redis_t T;

static int run(const char *const *args, const char *const *env, clirun_t *p)
{
	return clirun_argv(T.bin, NULL, args, ARGS(T.env_url), env, 20000, p);
}

static void cmd(const char *fmt, const char *a)
{
	redisReply *r = redisCommand(T.c, fmt, a);
	TH_REQUIRE(r && r->type != REDIS_REPLY_ERROR, "%s", fmt);
	freeReplyObject(r);
}

static long long pttl(const char *key)
{
	return th_redis_int(T.c, -3, "PTTL %s", key);
}

/* The fields of a control stream, in order ("msg=..." lines). */
static char *ctl_msgs(const char *key)
{
	return cli_stream_text(T.c, key, 1);
}

static void test_status(void)
{
	clirun_t p;
	TH_CHECK(run(ARGS("status", "run_none"), NULL, &p) == 3);
	TH_CHECK(th_streq(p.err, "runnel status: run run_none not found\n"), "%s", p.err);
	clirun_free(&p);

	cmd("HSET runnel:{%s}:state status succeeded worker w-1 enqueued_at 1700000000000 "
	    "started_at 1700000000500 ended_at 1700000002750 out_seq_base 1700000000400 lease_until 0",
	    "run_s");
	redisReply *hr = redisCommand(T.c, "HSET runnel:{run_s}:state code %s", "");
	TH_REQUIRE(hr && hr->type == REDIS_REPLY_INTEGER);
	freeReplyObject(hr);
	cmd("XADD runnel:{%s}:out 1700000000400-1 line {\"type\":\"result\",\"message\":\"ok\",\"ts\":1}", "run_s");
	TH_CHECK(run(ARGS("status", "run_s"), NULL, &p) == 0, "%s", p.err);
	const char *want =
	        "run          run_s\n"
	        "status       succeeded\n"
	        "worker       w-1\n"
	        "enqueued_at  2023-11-14T22:13:20.000Z\n"
	        "started_at   2023-11-14T22:13:20.500Z\n"
	        "ended_at     2023-11-14T22:13:22.750Z\n"
	        "duration     2.2s\n"
	        "lines        1\n";
	TH_CHECK(th_streq(p.out, want), "got\n%s", p.out);
	clirun_free(&p);

	TH_CHECK(run(ARGS("status", "--json", "run_s"), NULL, &p) == 0);
	json_error_t jerr;
	json_t *o = json_loads(p.out, 0, &jerr);
	TH_CHECK(json_is_object(o), "%s", p.out);
	TH_CHECK(th_streq(json_string_value(json_object_get(o, "run_id")), "run_s"));
	TH_CHECK(th_streq(json_string_value(json_object_get(o, "status")), "succeeded"));
	TH_CHECK(json_integer_value(json_object_get(o, "started_at")) == 1700000000500LL);
	TH_CHECK(json_integer_value(json_object_get(o, "ended_at")) == 1700000002750LL);
	TH_CHECK(th_streq(json_string_value(json_object_get(o, "code")), ""));
	TH_CHECK(json_integer_value(json_object_get(o, "lines")) == 1);
	json_decref(o);
	clirun_free(&p);

	/* The usage of a run that called a model: a line, and an object. */
	hr = redisCommand(T.c, "HSET runnel:{run_s}:state usage %s",
	                  "{\"requests\":2,\"input_tokens\":200,\"output_tokens\":40,\"cache_read_input_tokens\":5,"
	                  "\"cache_creation_input_tokens\":0}");
	TH_REQUIRE(hr && hr->type == REDIS_REPLY_INTEGER);
	freeReplyObject(hr);
	TH_CHECK(run(ARGS("status", "run_s"), NULL, &p) == 0, "%s", p.err);
	TH_CHECK(strstr(p.out, "duration     2.2s\n"
	                       "usage        2 requests, 200 input + 40 output tokens (cache: 5 read, 0 written)\n"
	                       "lines        1\n"),
	         "got\n%s", p.out);
	clirun_free(&p);
	TH_CHECK(run(ARGS("status", "--json", "run_s"), NULL, &p) == 0);
	o = json_loads(p.out, 0, &jerr);
	TH_CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "output_tokens")) == 40, "%s", p.out);
	json_decref(o);
	clirun_free(&p);

	/* A queued run of a tenant that used tokens this hour says why it may wait. */
	cmd("HSET runnel:{%s}:state status queued tenant acme enqueued_at 1700000000000", "run_q");
	hr = redisCommand(T.c, "SET runnel:{q}:tok:acme:%lld 360", (long long)(time(NULL) / 3600));
	TH_REQUIRE(hr && hr->type == REDIS_REPLY_STATUS);
	freeReplyObject(hr);
	TH_CHECK(run(ARGS("status", "run_q"), NULL, &p) == 0, "%s", p.err);
	TH_CHECK(strstr(p.out, "waiting      its tenant used 360 model tokens this hour;"), "got\n%s", p.out);
	clirun_free(&p);

	/* Only a stream (no hash): still known, status unknown. */
	cmd("XADD runnel:{%s}:out * line {\"type\":\"log\",\"level\":\"info\",\"message\":\"x\"}", "run_o");
	TH_CHECK(run(ARGS("status", "run_o", "--json"), NULL, &p) == 0);
	TH_CHECK(th_streq(p.out, "{\"run_id\":\"run_o\",\"status\":\"unknown\",\"lines\":1}\n"), "%s", p.out);
	clirun_free(&p);
}

static void test_cancel(void)
{
	clirun_t p;
	/* Unknown: 3, nothing written. */
	TH_CHECK(run(ARGS("cancel", "run_none"), NULL, &p) == 3);
	TH_CHECK(th_streq(p.err, "runnel cancel: run run_none not found (use --force for a job not yet claimed)\n"),
	         "%s", p.err);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("runnel:{run_none}:ctl"), ""));

	/* A running run: the exact message, default reason "cli". */
	cmd("HSET runnel:{%s}:state status running worker w-1", "run_c");
	cmd("EXPIRE runnel:{%s}:state 1000", "run_c");
	TH_CHECK(run(ARGS("cancel", "run_c"), NULL, &p) == 0, "%s", p.err);
	TH_CHECK(strncmp(p.out, "cancel sent to run run_c (control entry ", 40) == 0, "%s", p.out);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("runnel:{run_c}:ctl"), "msg={\"type\":\"cancel\",\"reason\":\"cli\"}\n"),
	         "%s", ctl_msgs("runnel:{run_c}:ctl"));
	/* The control stream expires with the run's state (never a key for ever). */
	TH_CHECK(pttl("runnel:{run_c}:ctl") > 900000 && pttl("runnel:{run_c}:ctl") <= 1000000,
	         "ctl pttl %lld", pttl("runnel:{run_c}:ctl"));
	/* A reason (flag and twin), with characters JSON must escape. */
	TH_CHECK(run(ARGS("cancel", "--reason", "user said \"stop\"", "run_c"), NULL, &p) == 0);
	clirun_free(&p);
	TH_CHECK(run(ARGS("cancel", "run_c"), ARGS("RUNNEL_CANCEL_REASON=timeout"), &p) == 0);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("runnel:{run_c}:ctl"),
	                  "msg={\"type\":\"cancel\",\"reason\":\"cli\"}\n"
	                  "msg={\"type\":\"cancel\",\"reason\":\"user said \\\"stop\\\"\"}\n"
	                  "msg={\"type\":\"cancel\",\"reason\":\"timeout\"}\n"),
	         "%s", ctl_msgs("runnel:{run_c}:ctl"));

	/* A finished run: nothing to cancel, exit 0, nothing written. */
	cmd("HSET runnel:{%s}:state status failed code agent_exit", "run_f");
	TH_CHECK(run(ARGS("cancel", "run_f"), NULL, &p) == 0);
	TH_CHECK(th_streq(p.out, "run run_f already ended (failed); nothing to cancel\n"), "%s", p.out);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("runnel:{run_f}:ctl"), ""));

	/* --force: a job still in Kafka (no state yet) gets its cancel waiting at claim time. */
	TH_CHECK(run(ARGS("cancel", "run_k", "--force", "--reason", "early"), NULL, &p) == 0, "%s", p.err);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("runnel:{run_k}:ctl"), "msg={\"type\":\"cancel\",\"reason\":\"early\"}\n"));
	/* No state to take the expiry from: the default (max runtime + retention). */
	TH_CHECK(pttl("runnel:{run_k}:ctl") > 0, "ctl pttl %lld", pttl("runnel:{run_k}:ctl"));

	/* Another prefix. */
	cmd("HSET acme:{%s}:state status queued", "run_a");
	TH_CHECK(run(ARGS("cancel", "run_a", "--key-prefix", "acme"), NULL, &p) == 0);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("acme:{run_a}:ctl"), "msg={\"type\":\"cancel\",\"reason\":\"cli\"}\n"));
}

/* `runnel status` without a run: the queue by tenant. */
static void test_queue(void)
{
	clirun_t p;
	char err[128];
	TH_CHECK(run(ARGS("status"), NULL, &p) == 0, "%s", p.err);
	TH_CHECK(th_streq(p.out, "queue empty (0 run(s) being taken)\n"), "%s", p.out);
	clirun_free(&p);
	const char *runs[][2] = { { "run_q1", "acme" }, { "run_q2", "acme" }, { "run_q3", "beta" } };
	for (int i = 0; i < 3; i++)
		TH_CHECK(rn_runqueue_push(th_rc_for(T.c), "runnel", runs[i][0], runs[i][1], 5, "{\"ref\":{}}", 10,
		                          err, sizeof(err)) == 1,
		         "%s", err);
	TH_CHECK(run(ARGS("status"), NULL, &p) == 0, "%s", p.err);
	TH_CHECK(strncmp(p.out, "3 run(s) queued, oldest ", 24) == 0, "%s", p.out);
	TH_CHECK(strstr(p.out, "TENANT                             QUEUED  RUNNING   OLDEST\n"
	                       "acme                                    2        0"),
	         "%s", p.out);
	TH_CHECK(strstr(p.out, "\nbeta                                    1        0"), "%s", p.out);
	clirun_free(&p);
	TH_CHECK(run(ARGS("status", "--json"), NULL, &p) == 0, "%s", p.err);
	json_t *o = json_loads(p.out, 0, NULL);
	TH_CHECK(o && json_integer_value(json_object_get(o, "queued")) == 3, "%s", p.out);
	json_t *t0 = json_array_get(json_object_get(o, "tenants"), 0);
	TH_CHECK(th_streq(json_string_value(json_object_get(t0, "tenant")), "acme") &&
	                 json_integer_value(json_object_get(t0, "queued")) == 2,
	         "%s", p.out);
	json_decref(o);
	clirun_free(&p);
}

int main(int argc, char **argv)
{
	cli_redis_start(&T, argc, argv, "test_cli_status_cancel");
	test_status();
	test_cancel();
	test_queue();
	redisFree(T.c);
	return th_done();
}
