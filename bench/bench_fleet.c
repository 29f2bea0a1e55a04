/*
 * bench/bench_fleet.c - queue wait of short runs in a fleet on a real
 * Apache Kafka broker: 3 workers x 2 slots, 12 partitions, long runs on
 * 2 of the 6 slots (30 %), then a stream of short runs; prints the short
 * runs' queue wait (enqueued_at -> started_at) percentiles against the goal
 * p99 <= 1 s, and the fleet invariants' failures.  Asserts nothing.
 *
 * The broker: RUNNEL_TEST_KAFKA_BROKERS (with RUNNEL_TEST_KAFKA=real), else
 * a private one started with tests/kafka/broker.sh (Java 17 and the jars
 * from scripts/deps.sh).
 *
 *   bench_fleet [shorts=60] [gap_ms=200] [long_sec=30]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/kafka/fleet.h"

#define CAP 1024

static wt_t T;
static fleet_run_t R[CAP];

/* A whole decimal number in [0, 1000000], else -1. */
static int arg_int(const char *s)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 1000000)
		return -1;
	return (int)v;
}

int main(int argc, char **argv)
{
	fleet_wait_opts_t o = { .workers = 3, .slots = 2, .partitions = 12, .longs = 2, .long_sec = 30, .shorts = 60, .gap_ms = 200 };
	if (argc > 1)
		o.shorts = arg_int(argv[1]);
	if (argc > 2)
		o.gap_ms = arg_int(argv[2]);
	if (argc > 3)
		o.long_sec = arg_int(argv[3]);
	if (o.shorts < 1 || o.shorts + o.longs > CAP || o.gap_ms < 0 || o.long_sec < 1) {
		fprintf(stderr, "usage: bench_fleet [shorts 1..%d] [gap_ms] [long_sec]\n", CAP - o.longs);
		return 2;
	}
	if (!getenv("RUNNEL_TEST_KAFKA"))
		setenv("RUNNEL_TEST_KAFKA", getenv("RUNNEL_TEST_KAFKA_BROKERS") ? "real" : "private", 1);
	th_init("bench_fleet");
	wt_setup(&T, NULL, o.partitions);
	printf("fleet: %d workers x %d slots, %d partitions, broker %s (%s)\n", o.workers, o.slots,
	       o.partitions, T.kafka.bootstrap, getenv("RUNNEL_TEST_KAFKA"));
	printf("load: %d long runs of %d s, then %d short runs, one every %d ms\n", o.longs, o.long_sec,
	       o.shorts, o.gap_ms);
	int n = fleet_wait_scenario(&T, &o, R, CAP);
	int ended = fleet_collect(&T, R, n, (o.long_sec + 120) * 1000);
	int bad = fleet_check(R, n, 0);
	printf("runs: %d submitted, %d ended, %d invariant failures\n", n, ended, bad);
	int64_t p50 = fleet_wait_pct(R, n, 0, 50), p90 = fleet_wait_pct(R, n, 0, 90);
	int64_t p99 = fleet_wait_pct(R, n, 0, 99), max = fleet_wait_pct(R, n, 0, 100);
	printf("short-run queue wait: p50 %lld ms  p90 %lld ms  p99 %lld ms  max %lld ms  (goal p99 <= 1000 ms: %s)\n",
	       (long long)p50, (long long)p90, (long long)p99, (long long)max,
	       p99 >= 0 && p99 <= 1000 ? "met" : "missed");
	printf("long-run queue wait: p99 %lld ms\n", (long long)fleet_wait_pct(R, n, 1, 99));
	wt_teardown(&T);
	th_done();
	return 0;
}
