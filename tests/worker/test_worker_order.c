/*
 * tests/worker/test_worker_order.c - priorities end to end: one worker
 * with one slot, busy with a run; tenant a queues runs of priority 1, 9
 * and 5 (in that order), tenant b one run of priority 0.  When the slot
 * frees, the runs start a9, b0, a5, a1: higher first within a tenant,
 * tenants still served in turn (a's priority-9 run does not hold b's back
 * a second round).  The state hash carries each run's priority.
 * The same worker has no webhook secret and the strict webhook policy:
 * a job with a webhook on a private address, or any webhook at all, goes
 * to the DLQ with the reason.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define QUICK "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\"," \
	      "\"read turn; echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"ok\\\"}'\"]}"
#define SLOW "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\",\"read turn; sleep 60\"]}"

static wt_t T;

static void produce(const char *run_id, const char *tenant, int priority)
{
	dev_stub_otps_t o;
	wt_add_agent_run(&T, QUICK, &o);
	char *v = th_strf("{\"v\":1,\"run_id\":\"%s\",\"agent_url\":\"%s\",\"otp_setup\":\"%s\",\"otp_run\":\"%s\","
	                  "\"prompt\":\"p\",\"tenant\":\"%s\",\"priority\":%d}",
	                  run_id, o.agent_url, o.otp_setup, o.otp_run, tenant, priority);
	TH_REQUIRE(th_kafka_produce(&T.kafka, T.topic, 0, run_id, v, strlen(v), NULL) == 0, "produce %s", run_id);
}

static int four_queued(void *arg)
{
	(void)arg;
	return th_redis_int(T.rc, -1, "LLEN runnel:{q}:depth") == 4;
}

static int running(void *arg)
{
	return th_streq(wt_state(&T, arg, "status"), "running");
}

int main(void)
{
	const char *env[] = { "RUNNEL_SLOTS=1", NULL };
	pid_t w = wt_start(&T, "worker_order", 1, "ow", env);

	wt_submit_agent_to(&T, "run_block", SLOW, "b", 0, "a", 0, 0, NULL);
	TH_REQUIRE(th_wait_until(running, "run_block", 20000), "the slot is busy");
	produce("run_a1", "a", 1);
	produce("run_a9", "a", 9);
	produce("run_a5", "a", 5);
	produce("run_b0", "b", 0);
	TH_REQUIRE(th_wait_until(four_queued, NULL, 20000), "four runs queued");
	wt_ctl(&T, "run_block", "{\"type\":\"cancel\",\"reason\":\"test\"}");

	const char *want[] = { "run_a9", "run_b0", "run_a5", "run_a1" };
	long long prev = 0;
	for (size_t i = 0; i < 4; i++) {
		TH_REQUIRE(wt_wait_terminal(&T, want[i], 30000), "%s ended", want[i]);
		long long s = strtoll(wt_state(&T, want[i], "started_at"), NULL, 10);
		TH_CHECK(s > prev, "%s started after the one before it (%lld, %lld)", want[i], s, prev);
		prev = s;
	}
	TH_CHECK(th_streq(wt_state(&T, "run_a9", "priority"), "9") && th_streq(wt_state(&T, "run_b0", "priority"), "0"),
	         "priority in the state hash");

	/* Webhooks this worker may not call: the DLQ, with the reason. */
	const char *bad[][2] = {
		{ "run_wh_private", "\"webhook\":\"https://10.1.2.3/hook\"" },
		{ "run_wh_nosecret", "\"webhook\":\"https://hooks.example/hook\"" },
		{ "run_wh_http", "\"webhook\":\"http://hooks.example/hook\"" },
	};
	for (size_t i = 0; i < 3; i++) {
		char *v = th_strf("{\"v\":1,\"run_id\":\"%s\",\"agent_url\":\"http://127.0.0.1:9/ws\",\"otp_setup\":\"a\","
		                  "\"otp_run\":\"b\",\"prompt\":\"p\",%s}",
		                  bad[i][0], bad[i][1]);
		wt_produce_raw(&T, bad[i][0], v, strlen(v));
	}
	th_kafka_consumer_t *dc = th_kafka_consumer_new(&T.kafka, th_strf("%s.dlq", T.topic), NULL);
	TH_REQUIRE(dc, "dlq consumer");
	th_kafka_msg_t m;
	int found = 0;
	while (found < 3 && th_kafka_consumer_next(dc, 15000, &m) == 1) {
		const char *reason = th_kafka_msg_header(&m, "reason");
		const char *reason_want = th_streq(m.key, "run_wh_private")
		        ? "webhook: resolves to a private address, which is not allowed"
		        : th_streq(m.key, "run_wh_nosecret") ? "webhook: no webhook secret is configured on the workers"
		        : th_streq(m.key, "run_wh_http")     ? "webhook: must start with https://"
		                                             : NULL;
		if (reason_want) {
			TH_CHECK(th_streq(reason, reason_want), "%s: reason %s", m.key, reason ? reason : "(none)");
			found++;
		}
		th_kafka_msg_free(&m);
	}
	TH_CHECK(found == 3, "three webhook jobs in the DLQ (%d)", found);
	th_kafka_consumer_free(dc);
	TH_CHECK(th_streq(wt_state(&T, "run_wh_private", "status"), ""), "nothing was queued for them");

	wt_stop_worker(w, 20000, "worker");
	wt_teardown(&T);
	return th_done();
}
