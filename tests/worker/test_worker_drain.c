/*
 * tests/worker/test_worker_drain.c - SIGTERM drains: a short run finishes,
 * a long one ends worker_shutdown at the drain timeout, the worker exits 0,
 * and a job produced after the signal is left for the next worker.
 */
#include "tests/worker/wtest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static wt_t T;

static void submit(const char *id, const char *script)
{
	char *agent = th_strf("{\"kind\":\"mock\",\"script\":\"%s\"}", script);
	wt_submit_agent(&T, id, agent, "hello", 0, 0, NULL);
}

int main(void)
{
	const char *env[] = { "RUNNEL_DRAIN_SEC=3", NULL };
	pid_t w = wt_start(&T, "worker_drain", 1, "wd", env);

	submit("run_short", "sleep 2");
	submit("run_long", "sleep 60");
	TH_REQUIRE(wt_wait_started(&T, "run_short", 20000), "short started");
	TH_REQUIRE(wt_wait_started(&T, "run_long", 20000), "long started");
	int port = wt_metrics_port(&T, "wd");
	TH_REQUIRE(port > 0, "metrics address logged");
	int64_t t0 = th_now_ms();
	TH_REQUIRE(th_signal(w, SIGTERM) == 0);
	submit("run_later", "echo");
	TH_REQUIRE(wt_wait_log(&T, "wd", "\"drain_start\"", 3000), "drain logged");
	/* Draining: not ready for jobs, but alive (a liveness probe must not
	 * restart a worker that is letting its runs finish). */
	wt_check_probe(port, "/readyz", 503, "draining\n");
	wt_check_probe(port, "/healthz", 200, "draining\n");

	int st = 0;
	TH_CHECK(th_wait_exit(w, 15000, &st) == 0, "worker exited");
	int64_t took = th_now_ms() - t0;
	TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
	TH_CHECK(took >= 3000 && took < 8000, "drained in %lld ms (drain 3 s)", (long long)took);

	size_t n;
	char **l = wt_lines(&T, "run_short", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "short run finished");
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "slept"), "%s", l[n - 1]);
	th_strv_free(l, n);
	l = wt_lines(&T, "run_long", &n);
	TH_CHECK(n == 2, "%zu lines", n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "worker_shutdown"));
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "The worker shut down before the run finished."), "%s", l[n - 1]);
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_long", "status"), "failed"));
	TH_CHECK(th_streq(wt_state(&T, "run_later", "status"), ""), "no job taken while draining");
	TH_CHECK(wt_log_has(&T, "wd", "\"drain_start\""), "drain logged");

	/* The next worker picks up what the drained one left. */
	pid_t w2 = wt_worker(&T, "wd2", NULL);
	TH_CHECK(wt_wait_terminal(&T, "run_later", 30000), "job left for the next worker ran");
	const char *code = wt_run_code(&T, "run_later", &n);
	TH_CHECK(n == 1 && th_streq(code, ""), "run_later result");
	TH_CHECK(th_streq(wt_state(&T, "run_later", "worker"), "wd2"));
	wt_stop_worker(w2, 10000, "second worker");
	wt_teardown(&T);
	return th_done();
}
