/*
 * tests/worker/test_worker_lost.c - a worker killed with SIGKILL mid-run
 * while a second worker lives: the run ends worker_lost within lease + 5 s
 * (the survivor's sweep, or its claim of the redelivered job), and it is
 * never started again (/config was called once).
 */
#include "tests/worker/wtest.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

static wt_t T;

int main(void)
{
	th_init("worker_lost");
	wt_setup(&T, NULL, 2);
	const char *env[] = { "RUNNEL_LEASE_SEC=2", NULL };
	pid_t a = wt_worker(&T, "wa", env);
	pid_t b = wt_worker(&T, "wb", env);
	wt_warmup(&T);

	dev_stub_otps_t o;
	wt_submit_agent(&T, "run_lost", "{\"kind\":\"mock\",\"script\":\"sleep 60\"}", "hello", 1, 0, &o);
	TH_REQUIRE(wt_wait_started(&T, "run_lost", 20000), "run started");
	char holder[64];
	snprintf(holder, sizeof(holder), "%s", wt_state(&T, "run_lost", "worker"));
	TH_REQUIRE(th_streq(holder, "wa") || th_streq(holder, "wb"), "holder %s", holder);
	TH_CHECK(th_streq(wt_state(&T, "run_lost", "status"), "running"));
	pid_t victim = th_streq(holder, "wa") ? a : b;
	pid_t survivor = victim == a ? b : a;
	int64_t t0 = th_now_ms();
	TH_REQUIRE(th_signal(victim, SIGKILL) == 0);
	th_wait_exit(victim, 5000, NULL);

	TH_CHECK(wt_wait_terminal(&T, "run_lost", 2000 + 5000 + 1000), "worker_lost written");
	int64_t took = th_now_ms() - t0;
	TH_CHECK(took <= 7000, "worker_lost after %lld ms (lease 2 s + 5 s)", (long long)took);
	TH_NOTE("worker_lost after %lld ms", (long long)took);
	size_t n;
	char **l = wt_lines(&T, "run_lost", &n);
	TH_CHECK(n == 2, "%zu lines", n);
	if (n == 2)
		TH_CHECK(th_streq(wt_field(l[0], "message"), "sleeping"), "%s", l[0]);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "worker_lost"));
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "The worker running this run stopped responding."), "%s", l[n - 1]);
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_lost", "status"), "lost"));

	/* Give the survivor time to get the partition and the redelivered job. */
	char *again = th_strf("run_after_lost_%ld", (long)getpid());
	wt_submit_agent(&T, again, "{\"kind\":\"mock\",\"script\":\"echo\"}", "after", 0, 0, NULL);
	TH_CHECK(wt_wait_terminal(&T, again, 30000), "the survivor runs new jobs");
	dev_stub_ep_stats_t st;
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_CONFIG, &st);
	TH_CHECK(st.calls == 1, "/config called %d times", st.calls);
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_RESULTS, &st);
	TH_CHECK(st.calls == 0, "no writeback");
	l = wt_lines(&T, "run_lost", &n);
	TH_CHECK(n == 2, "still exactly one terminal line (%zu lines)", n);
	th_strv_free(l, n);

	wt_stop_worker(survivor, 10000, "survivor");
	wt_teardown(&T);
	return th_done();
}
