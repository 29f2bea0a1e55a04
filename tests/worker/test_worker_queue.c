/*
 * tests/worker/test_worker_queue.c - one worker (2 slots) with the run-time
 * queue:
 *   - a job with a bad tenant goes to the DLQ with the exact reason;
 *   - a queued run's state hash says "queued" with its tenant;
 *   - a cancel sent while the run waits in the queue ends it "cancelled"
 *     when a slot takes it, without any OTP call;
 *   - the per-tenant cap (RUNNEL_TENANT_MAX_RUNS_FOR=capped=1): the capped
 *     tenant's second run starts only after its first ended, while another
 *     tenant's run uses the free slot meanwhile;
 *   - /metrics shows the queue (depth, per-tenant, claims);
 *   - a bad cap list is refused at start with the exact message;
 *   - RUNNEL_QUEUE_WAIT_REPLICAS=1 against a Redis without replicas: the
 *     offset is not stored (the worker says so and retries), while the run
 *     itself, queued on the primary, still runs.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "proto/job.h"

static wt_t T;

static long long ms_of(const char *run_id, const char *field)
{
	return strtoll(wt_state(&T, run_id, field), NULL, 10);
}

static void submit(const char *id, const char *script, const char *tenant, dev_stub_otps_t *o)
{
	char *agent = th_strf("{\"kind\":\"mock\",\"script\":\"%s\"}", script);
	wt_submit_agent_to(&T, id, agent, "hi", -1, tenant, 0, 0, o);
}

static void test_bad_tenant(void)
{
	const char *bad = "{\"v\":1,\"run_id\":\"run_badt\",\"agent_url\":\"http://127.0.0.1:1/ws\","
	                  "\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\",\"tenant\":\"acme corp\"}";
	wt_produce_raw(&T, "run_badt", bad, strlen(bad));
	char dlq[96];
	snprintf(dlq, sizeof(dlq), "%s.dlq", T.topic);
	th_kafka_msg_t m;
	TH_REQUIRE(th_kafka_consume_one(&T.kafka, dlq, 20000, &m) == 1, "bad tenant in the DLQ");
	TH_CHECK(th_streq(th_kafka_msg_header(&m, "reason"),
	                  "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)"),
	         "reason: %s", th_kafka_msg_header(&m, "reason"));
	th_kafka_msg_free(&m);
	TH_CHECK(wt_state(&T, "run_badt", "status")[0] == '\0', "a refused job leaves no state");
}

static int queued_c0(void *arg)
{
	return th_streq(wt_state(&T, "run_c0", "status"), "queued");
}

static void test_cancel_and_cap(void)
{
	dev_stub_otps_t o, oc;
	/* Both slots busy for ~3 s. */
	submit("run_busy1", "sleep 3", "fill", &o);
	submit("run_busy2", "sleep 3", "fill", &o);
	TH_REQUIRE(wt_wait_started(&T, "run_busy1", 20000) && wt_wait_started(&T, "run_busy2", 20000),
	           "slots filled");
	submit("run_c0", "demo", "acme", &oc);
	TH_CHECK(th_wait_until(queued_c0, NULL, 10000), "run_c0 queued");
	TH_CHECK(th_streq(wt_state(&T, "run_c0", "tenant"), "acme"), "tenant in the state hash");
	wt_ctl(&T, "run_c0", "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
	TH_CHECK(wt_wait_terminal(&T, "run_c0", 30000), "queued run cancelled");
	size_t n;
	char **l = wt_lines(&T, "run_c0", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "cancelled"), "cancelled");
	TH_CHECK(n == 1 && th_streq(wt_field(l[0], "message"), "The run was cancelled (client_closed)."),
	         "message");
	th_strv_free(l, n);
	TH_CHECK(dev_stub_total_calls(T.stub, oc.session) == 0, "no OTP used: %d calls",
	         dev_stub_total_calls(T.stub, oc.session));
	TH_CHECK(wt_wait_terminal(&T, "run_busy1", 20000) && wt_wait_terminal(&T, "run_busy2", 20000));

	/* The cap: capped=1.  Two capped runs and one other. */
	submit("run_cap1", "sleep 2", "capped", &o);
	submit("run_cap2", "sleep 1", "capped", &o);
	submit("run_other", "sleep 1", "other", &o);
	TH_CHECK(wt_wait_terminal(&T, "run_cap1", 30000) && wt_wait_terminal(&T, "run_cap2", 30000) &&
	                 wt_wait_terminal(&T, "run_other", 30000),
	         "all three ran");
	long long c1_end = ms_of("run_cap1", "ended_at"), c2_start = ms_of("run_cap2", "started_at");
	long long o_start = ms_of("run_other", "started_at");
	TH_NOTE("cap1 ended %lld, cap2 started %lld, other started %lld", c1_end, c2_start, o_start);
	TH_CHECK(c2_start >= c1_end, "the capped tenant's second run waited for its first");
	TH_CHECK(o_start < c1_end, "another tenant used the free slot meanwhile");
	TH_CHECK(th_streq(wt_state(&T, "run_cap2", "status"), "succeeded"));
}

static void test_metrics(void)
{
	int port = wt_metrics_port(&T, "qw");
	TH_REQUIRE(port > 0, "metrics port");
	long st = 0;
	char *body = wt_http_get(th_strf("http://127.0.0.1:%d/metrics", port), &st);
	TH_CHECK(st == 200 && body, "metrics answered");
	TH_CHECK(body && strstr(body, "runnel_queue_depth "), "depth gauge");
	TH_CHECK(body && strstr(body, "runnel_queue_oldest_age_ms "), "oldest age gauge");
	TH_CHECK(body && strstr(body, "runnel_worker_queue_claims_total "), "claims counter");
	TH_CHECK(body && strstr(body, "runnel_worker_jobs_queued_total "), "intake counter");
	TH_CHECK(body && strstr(body, "# TYPE runnel_queue_tenant_queued gauge"), "per-tenant series");
	free(body);
}

static void test_bad_caps(void)
{
	const char *env[] = { "RUNNEL_TENANT_MAX_RUNS_FOR=acme=2,bad tenant=1", NULL };
	pid_t p = wt_worker(&T, "qbad", env);
	int s = 0;
	TH_CHECK(th_wait_exit(p, 20000, &s) == 0 && WIFEXITED(s) && WEXITSTATUS(s) == 2, "exit 2");
	TH_CHECK(wt_log_has(&T, "qbad", "RUNNEL_TENANT_MAX_RUNS_FOR/--tenant-max-runs-for: \\\"bad tenant=1\\\" "
	                                "is not tenant=N (tenant [A-Za-z0-9_.-]{1,64}, N 0..1000000)"),
	         "exact message");
}

static void test_wait_replicas(void)
{
	const char *topic = th_strf("%s.wait", T.topic);
	TH_REQUIRE(th_kafka_create_topic(&T.kafka, topic, 1) == 0);
	const char *env[] = { "RUNNEL_QUEUE_WAIT_REPLICAS=1", th_strf("RUNNEL_JOBS_TOPIC=%s", topic),
		              th_strf("RUNNEL_GROUP=%s.wait", T.group), NULL };
	pid_t p = wt_worker(&T, "qwait", env);
	dev_stub_otps_t o;
	wt_add_agent_run(&T, "{\"kind\":\"mock\",\"script\":\"echo\"}", &o);
	char *job = th_strf("{\"v\":1,\"run_id\":\"run_wait\",\"agent_url\":\"%s\",\"otp_setup\":\"%s\","
	                    "\"otp_run\":\"%s\",\"prompt\":\"w\"}",
	                    o.agent_url, o.otp_setup, o.otp_run);
	TH_REQUIRE(th_kafka_produce(&T.kafka, topic, 0, "run_wait", job, strlen(job), NULL) == 0);
	TH_CHECK(wt_wait_log(&T, "qwait", "0 of 1 replica(s) have the queued job; retrying", 30000), "WAIT short of replicas: offset not stored");
	TH_CHECK(wt_wait_terminal(&T, "run_wait", 30000), "the run still ran once");
	TH_CHECK(dev_stub_total_calls(T.stub, o.session) == 2, "%d OTP calls", dev_stub_total_calls(T.stub, o.session));
	wt_stop_worker(p, 20000, "qwait");
}

int main(void)
{
	const char *env[] = { "RUNNEL_SLOTS=2", "RUNNEL_TENANT_MAX_RUNS_FOR=capped=1", NULL };
	pid_t w = wt_start(&T, "worker_queue", 2, "qw", env);
	test_bad_tenant();
	test_cancel_and_cap();
	test_metrics();
	test_bad_caps();
	test_wait_replicas();
	wt_stop_worker(w, 20000, "worker");
	wt_teardown(&T);
	return th_done();
}
