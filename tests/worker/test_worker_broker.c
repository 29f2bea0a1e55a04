/*
 * tests/worker/test_worker_broker.c - the Kafka broker down for 10 s while
 * jobs wait: when it comes back every job runs, none is lost.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#define JOBS 6

static wt_t T;

int main(void)
{
	const char *env[] = { "RUNNEL_SLOTS=2", NULL };
	pid_t w = wt_start(&T, "worker_broker", 2, "wk", env);

	char ids[JOBS][32];
	for (int i = 0; i < JOBS; i++) {
		snprintf(ids[i], sizeof(ids[i]), "run_b%d", i);
		wt_submit_agent(&T, ids[i], "{\"kind\":\"mock\",\"script\":\"sleep 1\"}", "hello", 0, 0, NULL);
	}
	TH_REQUIRE(th_kafka_broker_down(&T.kafka, 1) == 0);
	int64_t t0 = th_now_ms();
	while (th_now_ms() - t0 < 10000) {
		struct timespec ts = { 0, 100 * 1000000L };
		nanosleep(&ts, NULL);
	}
	TH_REQUIRE(th_kafka_broker_up(&T.kafka, 1) == 0);
	for (int i = 0; i < JOBS; i++) {
		TH_CHECK(wt_wait_terminal(&T, ids[i], 60000), "%s ran", ids[i]);
		size_t n;
		const char *code = wt_run_code(&T, ids[i], &n);
		TH_CHECK(n == 2 && th_streq(code, ""), "%s: %zu lines", ids[i], n);
		TH_CHECK(th_streq(wt_state(&T, ids[i], "status"), "succeeded"), "%s succeeded", ids[i]);
	}
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
