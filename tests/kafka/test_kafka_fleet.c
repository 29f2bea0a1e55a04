/*
 * tests/kafka/test_kafka_fleet.c - fleet scenarios against the real Kafka
 * broker (label kafka); runnel-worker processes on this machine.  One
 * scenario per run, named by argv[1]:
 *
 *   wait   3 workers x 2 slots, 12 partitions, long runs on 2 of the 6
 *          slots, then a stream of short runs: every run ends once.  The
 *          queue waits are printed (bench/bench_fleet.c reports them);
 *          only counts and invariants are asserted.
 *   churn  runs flow while a worker joins, one drains (SIGTERM) and one is
 *          killed (SIGKILL): every run ends with exactly one terminal line
 *          (a run on the killed worker ends worker_lost), none starts twice,
 *          none is lost; the drained worker exits 0.
 *   redis  Redis (AOF, appendfsync always) restarted twice while runs flow:
 *          every run succeeds exactly once.
 *   restart  the broker itself (a private one: RUNNEL_TEST_KAFKA=private)
 *          stopped for a few seconds and started again while runs are
 *          running and queued, then more runs: every run succeeds exactly
 *          once, none is lost.
 */
#include "tests/kafka/fleet.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define CAP 64

static wt_t T;
static fleet_run_t R[CAP];

static void report(const char *what, int n)
{
	int lost = 0;
	for (int i = 0; i < n; i++)
		lost += th_streq(R[i].code, "worker_lost");
	TH_NOTE("%s: %d runs, %d worker_lost; short wait p50 %lld ms p99 %lld ms; long p99 %lld ms", what, n,
	        lost, (long long)fleet_wait_pct(R, n, 0, 50), (long long)fleet_wait_pct(R, n, 0, 99),
	        (long long)fleet_wait_pct(R, n, 1, 99));
}

/* Waits for runs[0..n) to end within timeout_ms and checks the fleet's
 * invariants (lost_ok: worker_lost is an allowed end), then prints the
 * waits. */
static void collect(const char *what, int n, int timeout_ms, int lost_ok)
{
	int ended = fleet_collect(&T, R, n, timeout_ms);
	TH_CHECK(ended == n, "%d of %d runs ended", ended, n);
	fleet_check(R, n, lost_ok);
	report(what, n);
}

/* Two workers fw0 and fw1 with env, consuming. */
static void start_pair(const char *const *env, pid_t *w0, pid_t *w1)
{
	*w0 = wt_worker(&T, "fw0", env);
	*w1 = wt_worker(&T, "fw1", env);
	wt_warmup(&T);
}

static void scenario_wait(void)
{
	wt_setup(&T, NULL, 12);
	fleet_wait_opts_t o = { .workers = 3, .slots = 2, .partitions = 12, .longs = 2, .long_sec = 12, .shorts = 30, .gap_ms = 150 };
	int n = fleet_wait_scenario(&T, &o, R, CAP);
	TH_CHECK(n == 32, "%d runs submitted", n);
	collect("wait", n, 120000, 0);
}

static void scenario_churn(void)
{
	wt_setup(&T, NULL, 12);
	const char *env[] = { "RUNNEL_SLOTS=2", "RUNNEL_LEASE_SEC=3", "RUNNEL_DRAIN_SEC=30", NULL };
	pid_t w0, w1;
	start_pair(env, &w0, &w1);
	pid_t w2 = 0;
	int n = 0;
	int64_t killed_at = 0;
	for (int i = 0; i < 36; i++) {
		fleet_submit(&T, &R[n++], "run_churn", i, i % 3 ? "sleep 1" : "sleep 3", 0);
		if (i == 8) {
			w2 = wt_worker(&T, "fw2", env);
			TH_NOTE("fw2 joins");
		} else if (i == 16) {
			TH_REQUIRE(th_signal(w0, SIGTERM) == 0);
			TH_NOTE("fw0 drains");
		} else if (i == 24) {
			TH_REQUIRE(th_signal(w1, SIGKILL) == 0);
			th_wait_exit(w1, 5000, NULL);
			killed_at = th_now_ms();
			TH_NOTE("fw1 killed");
		}
		fleet_pause_ms(250);
	}
	collect("churn", n, 150000, 1);
	int st = 0;
	TH_CHECK(th_wait_exit(w0, 40000, &st) == 0, "the drained worker exited");
	TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "drained worker status %d", st);
	/* Nothing ran on the drained worker after the drain or on the killed
	 * one after the kill (it cannot): every run that ended normally after
	 * the kill did so on a live worker. */
	for (int i = 0; i < n; i++)
		if (th_streq(R[i].status, "succeeded"))
			TH_CHECK(!th_streq(wt_state(&T, R[i].id, "worker"), ""), "%s has a worker", R[i].id);
	TH_NOTE("collected %lld ms after the kill", (long long)(th_now_ms() - killed_at));
	wt_stop_worker(w2, 20000, "fw2");
}

static void scenario_redis(void)
{
	wt_setup(&T, "appendonly yes\nappendfsync always\n", 6);
	const char *env[] = { "RUNNEL_SLOTS=2", NULL };
	pid_t w0, w1;
	start_pair(env, &w0, &w1);
	int n = 0;
	for (int i = 0; i < 24; i++) {
		fleet_submit(&T, &R[n++], "run_redis", i, "sleep 1", 0);
		if (i == 8 || i == 16) {
			wt_redis_restart(&T, "redis restarted");
			TH_NOTE("redis restarted");
		}
		fleet_pause_ms(200);
	}
	collect("redis", n, 120000, 0);
	wt_stop_worker(w0, 20000, "fw0");
	wt_stop_worker(w1, 20000, "fw1");
}

static void scenario_restart(void)
{
	TH_REQUIRE(T.kafka.real == 0, "fresh fixture");
	wt_setup(&T, NULL, 6);
	TH_REQUIRE(T.kafka.real == 2, "restart needs RUNNEL_TEST_KAFKA=private");
	const char *env[] = { "RUNNEL_SLOTS=2", NULL };
	pid_t w0, w1;
	start_pair(env, &w0, &w1);
	int n = 0;
	/* Enough work that runs are running and queued when the broker goes. */
	for (int i = 0; i < 16; i++)
		fleet_submit(&T, &R[n++], "run_restart", i, i % 2 ? "sleep 1" : "sleep 2", 0);
	TH_REQUIRE(wt_wait_started(&T, R[0].id, 30000), "first run started");
	int64_t t0 = th_now_ms();
	TH_REQUIRE(th_kafka_broker_down(&T.kafka, 1) == 0, "broker stopped");
	fleet_pause_ms(3000);
	TH_REQUIRE(th_kafka_broker_up(&T.kafka, 1) == 0, "broker started again");
	TH_NOTE("broker away for %lld ms", (long long)(th_now_ms() - t0));
	for (int i = 16; i < 24; i++) {
		fleet_submit(&T, &R[n++], "run_restart", i, "sleep 1", 0);
		fleet_pause_ms(200);
	}
	collect("restart", n, 150000, 0);
	wt_stop_worker(w0, 20000, "fw0");
	wt_stop_worker(w1, 20000, "fw1");
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";
	th_init(th_strf("kafka_fleet_%s", what));
	if (!strcmp(what, "wait"))
		scenario_wait();
	else if (!strcmp(what, "churn"))
		scenario_churn();
	else if (!strcmp(what, "redis"))
		scenario_redis();
	else if (!strcmp(what, "restart"))
		scenario_restart();
	else
		TH_REQUIRE(0, "usage: test_kafka_fleet wait|churn|redis|restart");
	wt_teardown(&T);
	return th_done();
}
