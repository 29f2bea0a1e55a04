/*
 * tests/worker/test_worker_fleet.c - the queue across workers:
 *   - drain: a worker with full slots gets SIGTERM; its queued runs are not
 *     started by it (they stay "queued"), it leaves the group, finishes
 *     its own runs and exits 0, and a worker started afterwards runs them;
 *   - exactly-once start: two workers, every job produced twice to two
 *     partitions (so both workers may queue it): each run redeems its
 *     OTPs once and ends with exactly one terminal line.
 */
#include "tests/worker/wtest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/util.h"

#define QN   3
#define DUPS 12

static wt_t T;
static pid_t b;

static void submit(const char *id, const char *script, dev_stub_otps_t *o)
{
	wt_submit_agent_to(&T, id, th_strf("{\"kind\":\"mock\",\"script\":\"%s\"}", script), "hi", -1, "t1", 0, 0, o);
}

static int all_queued(void *arg)
{
	for (int i = 0; i < QN; i++)
		if (!th_streq(wt_state(&T, th_strf("run_q%d", i), "status"), "queued"))
			return 0;
	return 1;
}

static void test_drain(void)
{
	const char *env[] = { "RUNNEL_SLOTS=2", "RUNNEL_DRAIN_SEC=60", NULL };
	pid_t a = wt_worker(&T, "fa", env);
	wt_warmup(&T);
	dev_stub_otps_t o;
	submit("run_busy1", "sleep 3", &o);
	submit("run_busy2", "sleep 3", &o);
	TH_REQUIRE(wt_wait_started(&T, "run_busy1", 20000) && wt_wait_started(&T, "run_busy2", 20000),
	           "a's slots filled");
	for (int i = 0; i < QN; i++)
		submit(th_strf("run_q%d", i), "echo", &o);
	TH_REQUIRE(th_wait_until(all_queued, NULL, 10000), "runs queued behind the full slots");
	TH_REQUIRE(th_signal(a, SIGTERM) == 0);
	TH_CHECK(wt_wait_log(&T, "fa", "drain_left_group", 10000), "the draining worker left the group");
	TH_CHECK(all_queued(NULL), "the draining worker started none of the queued runs");

	b = wt_worker(&T, "fb", env);
	for (int i = 0; i < QN; i++) {
		const char *id = th_strf("run_q%d", i);
		TH_CHECK(wt_wait_terminal(&T, id, 30000), "%s ran", id);
		TH_CHECK(th_streq(wt_state(&T, id, "worker"), "fb"), "%s ran on %s", id, wt_state(&T, id, "worker"));
	}
	int s = 0;
	TH_CHECK(th_wait_exit(a, 30000, &s) == 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "a drained, exit 0");
	TH_CHECK(th_streq(wt_state(&T, "run_busy1", "status"), "succeeded") &&
	                 th_streq(wt_state(&T, "run_busy2", "status"), "succeeded"),
	         "a's own runs finished");
}

static void test_exactly_once(void)
{
	const char *env[] = { "RUNNEL_SLOTS=4", NULL };
	pid_t c = wt_worker(&T, "fc", env);
	TH_CHECK(wt_wait_log(&T, "fc", "partition(s) assigned", 30000), "c joined");
	char sessions[DUPS][72];
	for (int i = 0; i < DUPS; i++) {
		dev_stub_otps_t o;
		wt_add_agent_run(&T, "{\"kind\":\"mock\",\"script\":\"echo\"}", &o);
		snprintf(sessions[i], sizeof(sessions[i]), "%s", o.session);
		char *id = th_strf("run_dup%d", i);
		json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:I}", "v", 1, "run_id", id,
		                      "agent_url", o.agent_url, "otp_setup", o.otp_setup, "otp_run", o.otp_run,
		                      "prompt", "dup", "tenant", i % 2 ? "odd" : "even",
		                      "enqueued_at", (json_int_t)rn_now_ms());
		char *s = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		TH_REQUIRE(th_kafka_produce(&T.kafka, T.topic, i % 4, id, s, strlen(s), NULL) == 0);
		TH_REQUIRE(th_kafka_produce(&T.kafka, T.topic, (i + 1) % 4, id, s, strlen(s), NULL) == 0);
		free(s);
	}
	int by[2] = { 0, 0 };
	for (int i = 0; i < DUPS; i++) {
		const char *id = th_strf("run_dup%d", i);
		TH_CHECK(wt_wait_terminal(&T, id, 30000), "%s ended", id);
		TH_CHECK(th_streq(wt_run_code(&T, id, NULL), ""), "%s one result", id);
		TH_CHECK(dev_stub_total_calls(T.stub, sessions[i]) == 2, "%s: %d OTP calls (want 2: /env, /config)",
		         id, dev_stub_total_calls(T.stub, sessions[i]));
		by[th_streq(wt_state(&T, id, "worker"), "fc")]++;
	}
	TH_NOTE("duplicated runs: %d on fb, %d on fc", by[0], by[1]);
	wt_stop_worker(c, 20000, "c");
	wt_stop_worker(b, 20000, "b");
}

int main(void)
{
	th_init("worker_fleet");
	wt_setup(&T, NULL, 4);
	test_drain();
	test_exactly_once();
	wt_teardown(&T);
	return th_done();
}
