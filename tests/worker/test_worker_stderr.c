/*
 * tests/worker/test_worker_stderr.c - stderr written right before the
 * result line is never lost: 200 runs of the mock "stderr-race" script
 * (stderr, then the result at once, so both pipes are often readable in one
 * poll round) each end with exactly [warn "to stderr", result "done"].
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define RUNS 200

static wt_t T;

typedef struct {
	int next; /* runs before this one have ended */
} progress_t;

static int all_ended(void *arg)
{
	progress_t *p = arg;
	while (p->next < RUNS) {
		char id[32];
		snprintf(id, sizeof(id), "run_se_%d", p->next);
		const char *st = wt_state(&T, id, "status");
		if (!th_streq(st, "succeeded") && !th_streq(st, "failed"))
			return 0;
		p->next++;
	}
	return 1;
}

int main(void)
{
	const char *env[] = { "RUNNEL_SLOTS=8", "RUNNEL_LOG_LEVEL=info", NULL };
	pid_t w = wt_start(&T, "worker_stderr", 2, "w1", env);

	json_t *cfg = wt_agent_config("{\"kind\":\"mock\",\"script\":\"stderr-race\"}");
	for (int i = 0; i < RUNS; i++) {
		char id[32];
		dev_stub_otps_t o;
		dev_stub_run_t run = { 0 };
		run.config = cfg;
		snprintf(id, sizeof(id), "run_se_%d", i);
		wt_submit(&T, id, &run, "p", 0, 0, &o);
	}
	json_decref(cfg);
	progress_t p = { 0 };
	TH_REQUIRE(th_wait_until(all_ended, &p, 150000), "%d of %d runs ended", p.next, RUNS);

	int lost = 0, bad = 0;
	for (int i = 0; i < RUNS; i++) {
		char id[32];
		size_t n;
		snprintf(id, sizeof(id), "run_se_%d", i);
		char **l = wt_lines(&T, id, &n);
		if (n == 1)
			lost++;
		else if (n != 2 || !th_streq(wt_field(l[0], "message"), "to stderr") ||
		         !th_streq(wt_field(l[0], "level"), "warn") || !th_streq(wt_field(l[1], "message"), "done"))
			bad++, TH_NOTE("%s: %zu lines, first %s", id, n, n ? l[0] : "-");
		th_strv_free(l, n);
	}
	TH_CHECK(lost == 0, "stderr lost in %d of %d runs", lost, RUNS);
	TH_CHECK(bad == 0, "%d runs with unexpected lines", bad);
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
