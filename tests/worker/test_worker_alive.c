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
	const char *env[] = { "RUNNEL_LEASE_SEC=1", NULL };
	pid_t w = wt_start(&T, "worker_alive", 1, "w1", env);

	char dlq[96];
	snprintf(dlq, sizeof(dlq), "%s.dlq", T.topic);
	rd_kafka_mock_topic_set_error(T.kafka.mcluster, dlq, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE);

	wt_submit_agent(&T, "run_alive", "{\"kind\":\"mock\",\"script\":\"sleep 5\"}", "hello", 0, 0, NULL);
	TH_REQUIRE(wt_wait_started(&T, "run_alive", 20000), "run started");

	/* An undecodable job: its DLQ produce waits (10 s) for a delivery
	 * that does not come, far longer than the 1 s lease. */
	wt_produce_raw(&T, "bad1", "not json", 8);

	/* Sweep as a second worker or the dispatcher would, until the run ends. */
	int64_t end = th_now_ms() + 30000;
	int swept = 0;
	while (th_now_ms() < end) {
		char err[256];
		int r = rn_runstate_sweep(th_rc_for(T.rc), "runnel", 60, 100, NULL, NULL, err, sizeof(err));
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
	TH_CHECK(th_streq(wt_run_code(&T, "run_alive", NULL), ""), "the run ended with its result");

	wt_stop_worker(w, 30000, "worker");
	wt_teardown(&T);
	return th_done();
}
