/*
 * tests/worker/test_worker_wait.c - RUNNEL_REDIS_WAIT_REPLICAS on a
 * standalone primary (the Sentinel layout): with its replica linked, runs
 * of a few thousand lines end with every line, in order, and no batch
 * waits short of the replica; with the replica gone, runs still end
 * (each batch waits the timeout, then counts) and the worker warns
 * redis_wait_short.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/worker/wtest.h"

#define NLINES 3000

static wt_t T;

static const char *agent_json(void)
{
	return th_strf("{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	               "\"read t; i=1; while [ $i -le %d ]; do "
	               "echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"n='$i'\\\"}'; "
	               "i=$((i+1)); done; "
	               "echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"done\\\"}'\"]}",
	               NLINES);
}

static int replica_linked(void *arg)
{
	th_redis_t *rep = arg;
	redisContext *c = th_redis_connect(rep);
	redisReply *r = c ? redisCommand(c, "INFO replication") : NULL;
	int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return up;
}

/* Every line n=1..NLINES once, in order, then the result. */
static void check_run(const char *run)
{
	char msg[256];
	const char *code = wt_ended(&T, run, 120000, msg, sizeof(msg));
	TH_CHECK(strcmp(code, "") == 0, "%s ended with its result (%s: %s)", run, code, msg);
	size_t n;
	char **l = wt_lines(&T, run, &n);
	TH_CHECK(strcmp(wt_check_terminal(l, n), "") == 0, "%s: one terminal line, last", run);
	long next = 1;
	for (size_t k = 0; k < n; k++) {
		const char *m = th_line_field(l[k], "message", NULL);
		if (strncmp(m, "n=", 2) == 0 && strtol(m + 2, NULL, 10) == next)
			next++;
		else if (strncmp(m, "n=", 2) == 0)
			break;
	}
	TH_CHECK(next == NLINES + 1, "%s: lines 1..%d in order (stopped at %ld)", run, NLINES, next);
	th_strv_free(l, n);
}

int main(void)
{
	th_init("worker_wait");
	wt_setup(&T, NULL, 1);
	th_redis_t rep;
	TH_REQUIRE(th_redis_start(&rep, th_strf("replicaof 127.0.0.1 %d\n", T.redis.port)) == 0, "replica");
	TH_REQUIRE(th_wait_until(replica_linked, &rep, 30000), "the replica is linked");
	const char *env[] = { "RUNNEL_REDIS_WAIT_REPLICAS=1", "RUNNEL_REDIS_WAIT_TIMEOUT_MS=200", NULL };
	pid_t w = wt_worker(&T, "w1", env);
	wt_warmup(&T);

	for (int i = 0; i < 3; i++)
		wt_submit_agent(&T, th_strf("wait-linked-%d", i), agent_json(), "hello", 0, 0, NULL);
	for (int i = 0; i < 3; i++)
		check_run(th_strf("wait-linked-%d", i));
	TH_CHECK(!wt_log_has(&T, "w1", "redis_wait_short"), "no batch waited short of the linked replica");

	/* The replica goes: every batch waits 200 ms, counts, and warns. */
	TH_REQUIRE(th_redis_kill(&rep) == 0, "SIGKILL the replica");
	wt_submit_agent(&T, "wait-alone", agent_json(), "hello", 0, 0, NULL);
	check_run("wait-alone");
	TH_CHECK(wt_log_has(&T, "w1", "\"event\":\"redis_wait_short\""), "a batch short of replicas warns");
	wt_stop_worker(w, 30000, "w1");
	wt_teardown(&T);
	return th_done();
}
