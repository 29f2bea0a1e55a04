/*
 * tests/worker/test_worker_hoard.c - a worker with full slots takes no job:
 * its partitions stay paused, also across the rebalance when a second
 * worker joins, and the jobs submitted meanwhile are run by the worker with
 * free slots (or by the first one once its slot frees), none lost.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define JOBS 6

static wt_t T;

static int b_assigned(void *arg)
{
	return wt_log_has(&T, "hb", "partition(s) assigned") && wt_log_has(&T, "ha", "(paused: slots full)");
}

static long long ms_of(const char *run_id, const char *field)
{
	return strtoll(wt_state(&T, run_id, field), NULL, 10);
}

int main(void)
{
	th_init("worker_hoard");
	wt_setup(&T, NULL, 4);
	const char *env_a[] = { "RUNNEL_SLOTS=1", NULL };
	pid_t a = wt_worker(&T, "ha", env_a);
	wt_warmup(&T);

	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"sleep 12\"}");
	wt_submit(&T, "run_busy", &run, "hello", 0, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_started(&T, "run_busy", 20000), "busy run started");

	const char *env_b[] = { "RUNNEL_SLOTS=4", NULL };
	pid_t b = wt_worker(&T, "hb", env_b);
	TH_CHECK(th_wait_until(b_assigned, NULL, 20000), "rebalance: b assigned, a re-paused while full");

	char ids[JOBS][32];
	for (int i = 0; i < JOBS; i++) {
		snprintf(ids[i], sizeof(ids[i]), "run_h%d", i);
		run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"echo\"}");
		wt_submit(&T, ids[i], &run, "hi", 0, 0, &o);
		json_decref(run.config);
	}
	TH_CHECK(wt_wait_terminal(&T, "run_busy", 30000), "busy run ended");
	long long busy_end = ms_of("run_busy", "ended_at");
	int by_b = 0;
	for (int i = 0; i < JOBS; i++) {
		TH_CHECK(wt_wait_terminal(&T, ids[i], 30000), "%s ran", ids[i]);
		const char *who = wt_state(&T, ids[i], "worker");
		if (th_streq(who, "hb")) {
			by_b++;
		} else {
			TH_CHECK(th_streq(who, "ha"), "%s worker %s", ids[i], who);
			/* The busy worker took it only once its slot was free. */
			TH_CHECK(ms_of(ids[i], "started_at") >= busy_end, "%s started by the full worker before its slot freed", ids[i]);
		}
	}
	TH_NOTE("%d of %d jobs run by the worker with free slots", by_b, JOBS);
	TH_CHECK(by_b >= 1, "the free worker ran jobs");
	int s = th_stop(a, 10000);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "a exit %d", s);
	s = th_stop(b, 10000);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "b exit %d", s);
	wt_teardown(&T);
	return th_done();
}
