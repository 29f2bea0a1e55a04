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
	th_init("worker_broker");
	wt_setup(&T, NULL, 2);
	const char *env[] = { "RUNNEL_SLOTS=2", NULL };
	pid_t w = wt_worker(&T, "wk", env);
	wt_warmup(&T);

	char ids[JOBS][32];
	for (int i = 0; i < JOBS; i++) {
		dev_stub_otps_t o;
		dev_stub_run_t run = { 0 };
		run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"sleep 1\"}");
		snprintf(ids[i], sizeof(ids[i]), "run_b%d", i);
		wt_submit(&T, ids[i], &run, "hello", 0, 0, &o);
		json_decref(run.config);
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
		char **l = wt_lines(&T, ids[i], &n);
		TH_CHECK(n == 2 && th_streq(wt_check_terminal(l, n), ""), "%s: %zu lines", ids[i], n);
		th_strv_free(l, n);
		TH_CHECK(th_streq(wt_state(&T, ids[i], "status"), "succeeded"), "%s succeeded", ids[i]);
	}
	int s = th_stop(w, 10000);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "worker exit %d", s);
	wt_teardown(&T);
	return th_done();
}
