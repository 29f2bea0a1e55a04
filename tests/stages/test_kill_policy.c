/*
 * tests/stages/test_kill_policy.c - the agent loop's kill policy
 * (worker_kill_t in worker/agent_loop.h) on a clock of the test's own, no
 * process involved: a terminal line gives the agent turn_grace_ms, then
 * SIGTERM, then SIGKILL after grace_ms; stop_after_turn sends SIGTERM at
 * once; a stop sends SIGTERM (SIGKILL for a hard one) and nothing after the
 * exit; after the exit the pipes are given up only when they stay silent
 * for grace_ms after the last I/O; and the next deadline is always the
 * earliest one due.
 */
#include <signal.h>
#include <stdint.h>

#include "tests/support/check.h"
#include "worker/agent_loop.h"

/* Every signal due at now, in order, as "TERM,KILL"; *abandon as due set it. */
static const char *due_all(worker_kill_t *k, int64_t now, int pipes_open, int *abandon)
{
	static char out[64];
	size_t o = 0;
	int sig;
	out[0] = '\0';
	*abandon = 0;
	while ((sig = worker_kill_due(k, now, pipes_open, abandon)) != 0 && o + 6 < sizeof(out))
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s", o ? "," : "", sig == SIGTERM ? "TERM" : sig == SIGKILL ? "KILL"
		                                                                                                               : "?");
	return out;
}

static void test_turn_grace(void)
{
	worker_kill_t k;
	int ab;
	worker_kill_init(&k, 1000, 0, 0);
	TH_CHECK_STR("idle", due_all(&k, 5000, 1, &ab), "");
	TH_CHECK(worker_kill_next(&k, INT64_MAX) == INT64_MAX, "nothing is due before the terminal line");
	worker_kill_turn_done(&k, 100);
	worker_kill_turn_done(&k, 400); /* only the first counts */
	TH_CHECK(worker_kill_next(&k, INT64_MAX) == 1100);
	TH_CHECK_STR("before the turn grace", due_all(&k, 1099, 1, &ab), "");
	TH_CHECK_STR("turn grace over", due_all(&k, 1100, 1, &ab), "TERM");
	TH_CHECK(worker_kill_next(&k, INT64_MAX) == 2100, "SIGKILL is due grace_ms after SIGTERM");
	TH_CHECK_STR("no second TERM", due_all(&k, 2099, 1, &ab), "");
	TH_CHECK_STR("grace over", due_all(&k, 2100, 1, &ab), "KILL");
	TH_CHECK_STR("nothing after KILL", due_all(&k, 9000, 1, &ab), "");
	TH_CHECK(worker_kill_next(&k, 12345) == 12345);
}

static void test_stop_after_turn(void)
{
	worker_kill_t k;
	int ab;
	worker_kill_init(&k, 1000, 1, 0);
	worker_kill_turn_done(&k, 50);
	TH_CHECK_STR("SIGTERM right after the turn", due_all(&k, 50, 1, &ab), "TERM");
	/* A grace of 0: SIGTERM and SIGKILL in the same round. */
	worker_kill_init(&k, 0, 0, 0);
	worker_kill_turn_done(&k, 10);
	TH_CHECK_STR("grace 0", due_all(&k, 10, 1, &ab), "TERM,KILL");
}

static void test_stop(void)
{
	worker_kill_t k;
	int ab;
	worker_kill_init(&k, 500, 0, 0);
	TH_CHECK(worker_kill_stop(&k, 100, 0) == SIGTERM);
	TH_CHECK_STR("KILL waits", due_all(&k, 599, 1, &ab), "");
	TH_CHECK_STR("KILL after grace", due_all(&k, 600, 1, &ab), "KILL");
	/* A hard stop (a limit): SIGKILL at once, nothing due afterwards. */
	worker_kill_init(&k, 500, 0, 0);
	TH_CHECK(worker_kill_stop(&k, 100, 1) == SIGKILL);
	TH_CHECK_STR("after a hard stop", due_all(&k, 10000, 1, &ab), "");
	/* An agent that exited is not signalled. */
	worker_kill_init(&k, 500, 0, 0);
	worker_kill_exited(&k, 10);
	TH_CHECK(worker_kill_stop(&k, 20, 0) == 0);
	TH_CHECK(worker_kill_stop(&k, 20, 1) == 0);
	/* The exit ends the turn grace too: no SIGTERM for an exited agent. */
	worker_kill_init(&k, 500, 0, 0);
	worker_kill_turn_done(&k, 10);
	worker_kill_exited(&k, 20);
	TH_CHECK_STR("exited after the turn", due_all(&k, 5000, 0, &ab), "");
}

static void test_silent_pipes(void)
{
	worker_kill_t k;
	int ab;
	worker_kill_init(&k, 1000, 0, 0);
	worker_kill_exited(&k, 100);
	TH_CHECK(worker_kill_next(&k, INT64_MAX) == 1100);
	TH_CHECK_STR("pipes still talking", due_all(&k, 1099, 1, &ab), "");
	TH_CHECK(!ab);
	/* I/O (or a wait on Redis) after the exit moves the deadline. */
	worker_kill_io(&k, 900);
	TH_CHECK(worker_kill_next(&k, INT64_MAX) == 1900);
	TH_CHECK_STR("moved", due_all(&k, 1100, 1, &ab), "");
	TH_CHECK_STR("silent for grace", due_all(&k, 1900, 1, &ab), "KILL");
	TH_CHECK(ab, "the pipes are given up");
	TH_CHECK_STR("once", due_all(&k, 5000, 1, &ab), "");
	/* Closed pipes: nothing to give up, nothing to kill. */
	worker_kill_init(&k, 1000, 0, 0);
	worker_kill_exited(&k, 100);
	TH_CHECK_STR("pipes closed", due_all(&k, 5000, 0, &ab), "");
	TH_CHECK(!ab);
}

static void test_next(void)
{
	worker_kill_t k;
	worker_kill_init(&k, 1000, 0, 0);
	TH_CHECK(worker_kill_next(&k, 700) == 700, "the caller's deadline when earlier");
	worker_kill_turn_done(&k, 0);
	TH_CHECK(worker_kill_next(&k, 5000) == 1000);
	TH_CHECK(worker_kill_next(&k, 700) == 700);
}

int main(void)
{
	th_check_name("stages_kill_policy");
	test_turn_grace();
	test_stop_after_turn();
	test_stop();
	test_silent_pipes();
	test_next();
	return th_done();
}
