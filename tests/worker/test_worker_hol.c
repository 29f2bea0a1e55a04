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

static void cancel(const char *run_id)
{
	redisReply *r = redisCommand(T.rc, "XADD runnel:{%s}:ctl * msg %s", run_id,
	                             "{\"type\":\"cancel\",\"reason\":\"test_done\"}");
	TH_CHECK(r && r->type == REDIS_REPLY_STRING, "cancel %s", run_id);
	if (r)
		freeReplyObject(r);
}

int main(void)
{
	th_init("worker_hol");
	wt_setup(&T, NULL, 4);
	const char *env[] = { "RUNNEL_SLOTS=1", NULL };
	pid_t a = wt_worker(&T, "ha", env);
	pid_t b = wt_worker(&T, "hb", env);
	TH_REQUIRE(th_wait_until(both_assigned, NULL, 30000), "both workers joined the group");

	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	/* Every partition is consumed by someone before we measure. */
	for (int p = 0; p < 4; p++) {
		char id[32];
		snprintf(id, sizeof(id), "run_warm%d", p);
		run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"echo\"}");
		wt_submit_to(&T, id, &run, "warm", p, NULL, 0, 0, &o);
		json_decref(run.config);
		TH_REQUIRE(wt_wait_terminal(&T, id, 30000), "%s ran", id);
	}

	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"sleep 20\"}");
	wt_submit_to(&T, "run_long", &run, "long", 0, NULL, 0, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_started(&T, "run_long", 20000), "long run started");
	char busy[32], idle[32];
	snprintf(busy, sizeof(busy), "%s", wt_state(&T, "run_long", "worker"));
	snprintf(idle, sizeof(idle), "%s", th_streq(busy, "ha") ? "hb" : "ha");
	TH_NOTE("the 20 s run fills %s; %s is idle", busy, idle);

	long long worst = 0;
	for (int p = 0; p < 4; p++) {
		char id[32];
		snprintf(id, sizeof(id), "run_short%d", p);
		run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"echo\"}");
		int64_t t0 = rn_now_ms();
		wt_submit_to(&T, id, &run, "short", p, NULL, 0, 0, &o);
		json_decref(run.config);
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

	cancel("run_long");
	TH_CHECK(wt_wait_terminal(&T, "run_long", 20000), "long run ended");
	size_t n;
	char **l = wt_lines(&T, "run_long", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "cancelled"), "long run cancelled");
	th_strv_free(l, n);

	int s = th_stop(a, 15000);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "a exit %d", s);
	s = th_stop(b, 15000);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "b exit %d", s);
	wt_teardown(&T);
	return th_done();
}
