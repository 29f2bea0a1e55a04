/*
 * tests/worker/test_worker_alive.c - a worker that awaits something slow
 * (here: a DLQ topic the broker refuses, so the DLQ delivery report does
 * not come) keeps renewing its leases: another process's lost sweep,
 * running all the while, never ends its live run worker_lost.
 */
#include "tests/worker/wtest.h"

#include "common/runstate.h"

#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static wt_t T;

int main(void)
{
	th_init("worker_alive");
	wt_setup(&T, NULL, 1);
	const char *env[] = { "RUNNEL_LEASE_SEC=1", NULL };
	pid_t w = wt_worker(&T, "w1", env);
	wt_warmup(&T);

	char dlq[96];
	snprintf(dlq, sizeof(dlq), "%s.dlq", T.topic);
	rd_kafka_mock_topic_set_error(T.kafka.mcluster, dlq, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE);

	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"sleep 5\"}");
	wt_submit(&T, "run_alive", &run, "hello", 0, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_started(&T, "run_alive", 20000), "run started");

	/* An undecodable job: its DLQ produce waits (10 s) for a delivery
	 * that does not come, far longer than the 1 s lease. */
	wt_produce_raw(&T, "bad1", "not json", 8);

	/* Sweep as a second worker or the dispatcher would, until the run ends. */
	int64_t end = th_now_ms() + 30000;
	int swept = 0;
	while (th_now_ms() < end) {
		char err[256];
		int r = rn_runstate_sweep(T.rc, "runnel", 60, 100, NULL, NULL, err, sizeof(err));
		TH_CHECK(r >= 0, "sweep: %s", err);
		if (r > 0)
			swept += r;
		if (th_streq(wt_state(&T, "run_alive", "status"), "succeeded") ||
		    th_streq(wt_state(&T, "run_alive", "status"), "lost"))
			break;
		struct timespec ts = { 0, 100 * 1000000L };
		nanosleep(&ts, NULL);
	}
	TH_CHECK(swept == 0, "the sweep ended %d live run(s)", swept);
	TH_CHECK(th_streq(wt_state(&T, "run_alive", "status"), "succeeded"), "status %s",
	         wt_state(&T, "run_alive", "status"));
	size_t n;
	char **l = wt_lines(&T, "run_alive", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "the run ended with its result");
	th_strv_free(l, n);

	int s = th_stop(w, 30000);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "worker exit %d", s);
	wt_teardown(&T);
	return th_done();
}
