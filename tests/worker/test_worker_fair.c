/*
 * tests/worker/test_worker_fair.c - fair shares between tenants: 1 worker
 * x 2 slots; tenant A enqueues 200 runs of 0.2 s (a command agent that
 * sleeps 0.2 s; the average run time is printed), then tenant B one run.  B's
 * run starts within 1.5 s while A's runs keep flowing (A runs start after
 * B's), and after a drain every A run is either ended (one terminal line)
 * or still queued: none lost, none doubled.  Timings are printed.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/util.h"

#define BURST   200
#define RUN_02S "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\"," \
	        "\"read turn; sleep 0.2; echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"done\\\"}'\"]}"

static wt_t T;
static long long b_started;

static long long ms_of(const char *run_id, const char *field)
{
	return strtoll(wt_state(&T, run_id, field), NULL, 10);
}

/* At least two of A's runs started after B's did. */
static int a_flows(void *arg)
{
	int after = 0;
	for (int i = 0; i < BURST && after < 2; i++) {
		char id[32];
		snprintf(id, sizeof(id), "run_a%d", i);
		long long s = ms_of(id, "started_at");
		if (s > b_started)
			after++;
	}
	return after >= 2;
}

int main(void)
{
	const char *env[] = { "RUNNEL_SLOTS=2", NULL };
	pid_t w = wt_start(&T, "worker_fair", 2, "fw", env);

	int64_t t_burst = rn_now_ms();
	for (int i = 0; i < BURST; i++) {
		char id[32];
		snprintf(id, sizeof(id), "run_a%d", i);
		wt_submit_agent_to(&T, id, RUN_02S, "a", i % 2, "tenant_a", 0, 0, NULL);
	}
	int64_t t0 = rn_now_ms();
	TH_NOTE("200 runs of tenant_a produced in %lld ms", (long long)(t0 - t_burst));
	wt_submit_agent_to(&T, "run_b", RUN_02S, "b", 0, "tenant_b", 0, 0, NULL);
	TH_REQUIRE(wt_wait_terminal(&T, "run_b", 30000), "B's run ran");
	b_started = ms_of("run_b", "started_at");
	long long wait = b_started - t0;
	int a_done = 0;
	for (int i = 0; i < BURST; i++) {
		char id[32];
		snprintf(id, sizeof(id), "run_a%d", i);
		long long s = ms_of(id, "started_at");
		if (s > 0 && s <= b_started)
			a_done++;
	}
	printf("# fairness: tenant_b's single run started after %lld ms, behind %d of tenant_a's %d queued runs\n",
	       wait, a_done, BURST);
	TH_CHECK(wait <= 1500, "B waited %lld ms (bound 1500)", wait);
	TH_CHECK(a_done < BURST, "B did not wait for the whole burst");
	TH_CHECK(th_streq(wt_state(&T, "run_b", "tenant"), "tenant_b"), "state hash tenant");
	TH_CHECK(th_wait_until(a_flows, NULL, 20000), "A's runs keep flowing after B's");

	/* Drain: what ran ended once; the rest is still queued, none lost. */
	wt_stop_worker(w, 30000, "worker");
	int ended = 0, queued = 0;
	long long dur = 0;
	for (int i = 0; i < BURST; i++) {
		char id[32];
		snprintf(id, sizeof(id), "run_a%d", i);
		const char *st = wt_state(&T, id, "status");
		if (th_streq(st, "succeeded")) {
			TH_CHECK(th_streq(wt_run_code(&T, id, NULL), ""), "%s one result", id);
			dur += ms_of(id, "ended_at") - ms_of(id, "started_at");
			ended++;
		} else if (th_streq(st, "queued")) {
			queued++;
		} else {
			TH_CHECK(0, "%s is %s", id, st);
		}
	}
	TH_NOTE("after the drain: %d of tenant_a's runs ended (%lld ms each on average), %d still queued",
	        ended, ended ? dur / ended : 0, queued);
	TH_CHECK(ended + queued == BURST);
	wt_teardown(&T);
	return th_done();
}
