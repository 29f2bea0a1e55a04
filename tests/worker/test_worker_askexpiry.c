/*
 * tests/worker/test_worker_askexpiry.c - an ask nobody answers expires after
 * the worker's --ask-timeout-sec (1 s here): its settlement says expired,
 * the agent gets a rejection with "expired":true and ends with its result.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static wt_t T;

int main(void)
{
	const char *env[] = { "RUNNEL_ASK_TIMEOUT_SEC=1", NULL };
	pid_t w = wt_start(&T, "worker_askexpiry", 1, "w1", env);

	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"ask\"}");
	json_object_set_new(run.config, "permission_mode", json_string("ask"));
	int64_t t0 = th_now_ms();
	wt_submit(&T, "run_expire", &run, "p", 0, 0, &o);
	json_decref(run.config);
	size_t n;
	char **l = wt_ended_lines(&T, "run_expire", 20000, &n);
	TH_CHECK(n == 6, "%zu lines", n);
	if (n == 6) {
		TH_CHECK(th_streq(wt_field(l[2], "status"), "open"), "%s", l[2]);
		TH_CHECK(th_streq(wt_field(l[3], "type"), "ask") && th_streq(wt_field(l[3], "status"), "expired"), "%s", l[3]);
		TH_CHECK(th_streq(wt_field(l[4], "status"), "failed") &&
		                 th_streq(wt_field(l[4], "error"), "the permission request expired"),
		         "%s", l[4]);
		long long opened = strtoll(wt_field(l[2], "ts"), NULL, 10), settled = strtoll(wt_field(l[3], "ts"), NULL, 10);
		TH_CHECK(settled - opened >= 1000 && settled - opened < 5000, "expired after %lld ms", settled - opened);
	}
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	th_strv_free(l, n);
	TH_CHECK(th_now_ms() - t0 < 15000, "timely");
	TH_CHECK(wt_log_has(&T, "w1", "ask ask_1 expired"), "expiry logged");
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
