/*
 * tests/worker/test_worker_hol.c - no head-of-line blocking (replaces the
 * old "a worker with full slots pauses its partitions" test): 2 workers x
 * 1 slot, 4 partitions.  A 20 s run fills one worker; a short run produced
 * to each partition in turn (two of them owned by the busy worker) starts
 * within 2 s on the idle worker.  Timings are printed; the bound is the
 * one the design promises, generous for a loaded machine.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/util.h"

static wt_t T;

static int both_assigned(void *arg)
{
	return wt_log_has(&T, "ha", "partition(s) assigned") && wt_log_has(&T, "hb", "partition(s) assigned");
}

int main(void)
{
	th_init("worker_hol");
	wt_setup(&T, NULL, 4);
	const char *env[] = { "RUNNEL_SLOTS=1", NULL };
	pid_t a = wt_worker(&T, "ha", env);
	pid_t b = wt_worker(&T, "hb", env);
	TH_REQUIRE(th_wait_until(both_assigned, NULL, 30000), "both workers joined the group");

	/* Every partition is consumed by someone before we measure. */
	for (int p = 0; p < 4; p++) {
		char id[32];
		snprintf(id, sizeof(id), "run_warm%d", p);
		wt_submit_agent_to(&T, id, "{\"kind\":\"mock\",\"script\":\"echo\"}", "warm", p, NULL, 0, 0, NULL);
		TH_REQUIRE(wt_wait_terminal(&T, id, 30000), "%s ran", id);
	}

	wt_submit_agent_to(&T, "run_long", "{\"kind\":\"mock\",\"script\":\"sleep 20\"}", "long", 0, NULL, 0, 0, NULL);
	TH_REQUIRE(wt_wait_started(&T, "run_long", 20000), "long run started");
	char busy[32], idle[32];
	snprintf(busy, sizeof(busy), "%s", wt_state(&T, "run_long", "worker"));
	snprintf(idle, sizeof(idle), "%s", th_streq(busy, "ha") ? "hb" : "ha");
	TH_NOTE("the 20 s run fills %s; %s is idle", busy, idle);

	long long worst = 0;
	for (int p = 0; p < 4; p++) {
		char id[32];
		snprintf(id, sizeof(id), "run_short%d", p);
		int64_t t0 = rn_now_ms();
		wt_submit_agent_to(&T, id, "{\"kind\":\"mock\",\"script\":\"echo\"}", "short", p, NULL, 0, 0, NULL);
		TH_CHECK(wt_wait_terminal(&T, id, 20000), "%s ran", id);
		long long started = strtoll(wt_state(&T, id, "started_at"), NULL, 10);
		long long wait = started - t0;
		if (wait > worst)
			worst = wait;
		TH_NOTE("partition %d: started after %lld ms on %s", p, wait, wt_state(&T, id, "worker"));
		TH_CHECK(started > 0 && wait <= 2000, "%s waited %lld ms (bound 2000)", id, wait);
		TH_CHECK(th_streq(wt_state(&T, id, "worker"), idle), "%s ran on %s, not the idle worker",
		         id, wt_state(&T, id, "worker"));
	}
	printf("# head-of-line: worst short-run wait %lld ms behind a 20 s run\n", worst);
	TH_CHECK(!th_streq(wt_state(&T, "run_long", "status"), "succeeded"), "the long run was still going");

	wt_ctl(&T, "run_long", "{\"type\":\"cancel\",\"reason\":\"test_done\"}");
	TH_CHECK(wt_wait_terminal(&T, "run_long", 20000), "long run ended");
	TH_CHECK(th_streq(wt_run_code(&T, "run_long", NULL), "cancelled"), "long run cancelled");

	wt_stop_worker(a, 15000, "a");
	wt_stop_worker(b, 15000, "b");
	wt_teardown(&T);
	return th_done();
}
