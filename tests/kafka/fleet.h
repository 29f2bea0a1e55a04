/*
 * tests/kafka/fleet.h - fleet scenarios on a real Kafka broker: several
 * runnel-worker processes on this machine, one job topic with many
 * partitions, a stream of runs; what the tests assert (every run ends with
 * exactly one terminal line, none starts twice, none is lost) and what
 * bench/bench_fleet.c prints (queue waits).
 */
#ifndef RUNNEL_TESTS_KAFKA_FLEET_H
#define RUNNEL_TESTS_KAFKA_FLEET_H

#include <stdint.h>

#include "tests/worker/wtest.h"

typedef struct fleet_run {
	char id[48];
	char script[64];
	int is_long;
	dev_stub_otps_t o;
	/* Filled by fleet_collect: */
	int ended;        /* a terminal line was seen */
	int terminals;    /* terminal lines in the stream */
	int config_calls; /* /config redemptions: 1 = started once */
	char code[64];    /* terminal code, "" for a result */
	char status[32];  /* state hash status */
	int64_t wait_ms;  /* started_at - enqueued_at, -1 unknown */
} fleet_run_t;

/* Produces one run (mock agent script) with id PREFIX_<i>.  0 or -1. */
void fleet_submit(wt_t *t, fleet_run_t *r, const char *prefix, int i, const char *script, int is_long);

/* Waits (up to timeout_ms in all) until every run has a terminal line,
 * then fills the per-run fields.  Returns how many runs ended. */
int fleet_collect(wt_t *t, fleet_run_t *runs, int n, int timeout_ms);

/* Checks the invariants on runs[0..n): each ended with exactly one
 * terminal line (the last), was started at most once (/config once), and
 * its state agrees.  allow_lost: a worker was killed, so worker_lost is an
 * acceptable end (still exactly one terminal line).  Returns failures. */
int fleet_check(const fleet_run_t *runs, int n, int allow_lost);

/* Queue-wait percentile (0..100) in ms over the runs with is_long ==
 * want_long and a known wait; -1 when none. */
int64_t fleet_wait_pct(const fleet_run_t *runs, int n, int want_long, double pct);

/* Waits until the worker's log shows it consuming (its first poll after
 * a group assignment) or timeout; 1 or 0. */
int fleet_worker_ready(wt_t *t, const char *name, int timeout_ms);

/* Sleeps ms milliseconds (the stream's pacing, not a wait for a state). */
void fleet_pause_ms(int ms);

/* The wait scenario: 3 workers x 2 slots, 12 partitions, long runs on
 * ~30 % of the slots, then a stream of short runs.  Fills runs (capacity
 * cap) and returns how many were submitted. */
typedef struct fleet_wait_opts {
	int workers, slots, partitions;
	int longs;    /* long runs first */
	int long_sec; /* their length */
	int shorts;   /* then this many short runs */
	int gap_ms;   /* between two short runs */
} fleet_wait_opts_t;
int fleet_wait_scenario(wt_t *t, const fleet_wait_opts_t *o, fleet_run_t *runs, int cap);

#endif
