/*
 * tests/cluster/test_cluster_config.c - the programs against a Redis
 * Cluster with a password, and against Redis URLs that are wrong: the
 * worker runs jobs on the cluster; a wrong password, a port that is not
 * Redis and a cluster with unserved slots stop the worker at start with
 * the reason (exit 2, no retry loop, no password in the log), and the
 * dispatcher too (exit 1); the CLI reads and cancels runs on the cluster
 * and says why a wrong password fails.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/worker/wtest.h"

#define PASS "cfg-cluster-pw-41"

static wt_t T;

/* Spawns the worker with redis_url and waits for it to exit within
 * timeout_ms: its exit status, or -1 when it did not exit. */
static int worker_exit(const char *name, const char *redis_url, int timeout_ms)
{
	const char *env[] = { th_strf("RUNNEL_REDIS_URL=%s", redis_url), NULL };
	pid_t pid = wt_worker(&T, name, env);
	int st = 0;
	if (th_wait_exit(pid, timeout_ms, &st) < 0) {
		th_kill(pid);
		return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void *http_server(void *arg)
{
	int fd = *(int *)arg;
	for (;;) {
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			break;
		char buf[512];
		(void)!read(c, buf, sizeof(buf));
		const char resp[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
		th_send_all(c, resp, sizeof(resp) - 1);
		close(c);
	}
	return NULL;
}

/* Runs the CLI with args (NULL-terminated) and the URL; its exit status,
 * output in *out (the harness's). */
static int cli(const char *url, char **out, const char *verb, const char *run_id)
{
	const char *log = th_strf("%s/cli-%s-%s.log", T.dir, verb, run_id);
	char *argv[] = { CLI_BIN, (char *)verb, "--redis-url", (char *)url, (char *)run_id, NULL };
	int st = th_run(argv, NULL, log, 30000);
	*out = th_file_read(log, NULL);
	return st;
}

/* The CLI (runnel status) and runnel dev given a wrong Redis URL: each
 * says the reason at once, without the password. */
static void cli_and_dev_refuse(const char *name, const char *url, const char *want)
{
	char *out = NULL;
	int st = cli(url, &out, "status", "cfg-any");
	TH_CHECK(st != 0 && out && strstr(out, want), "runnel status, %s: exit %d: %s", name, st, out ? out : "");
	TH_CHECK(out && !strstr(out, PASS) && !strstr(out, "not-the-password"), "runnel status, %s: no password", name);
	free(out);

	const char *log = th_strf("%s/dev-%s.log", T.dir, name);
	const char *env[] = { th_strf("RUNNEL_REDIS_URL=%s", url), th_strf("TMPDIR=%s", T.dir), NULL };
	char *argv[] = { CLI_BIN, "dev", "--port", "0", "--sandbox", "process", NULL };
	int64_t t0 = th_now_ms();
	st = th_run(argv, env, log, 60000);
	out = th_file_read(log, NULL);
	TH_CHECK(st == 1 && out && strstr(out, "runnel dev: RUNNEL_REDIS_URL: cannot reach Redis at 127.0.0.1:") &&
	                 strstr(out, want),
	         "runnel dev, %s: exit %d: %s", name, st, out ? out : "");
	TH_CHECK(th_now_ms() - t0 < 30000, "runnel dev, %s: at start, not after retrying", name);
	TH_CHECK(out && !strstr(out, PASS) && !strstr(out, "not-the-password"), "runnel dev, %s: no password", name);
	free(out);
}

static void test_bad_urls(void)
{
	int st;
	/* The right cluster, the wrong password. */
	const char *wrong = th_strf("redis://:not-the-password@127.0.0.1:%d", T.cluster->node[2].port);
	int64_t t0 = th_now_ms();
	st = worker_exit("w-wrongpw", wrong, 20000);
	TH_CHECK(st == 2, "wrong password: the worker exits 2 (%d)", st);
	TH_CHECK(th_now_ms() - t0 < 15000, "at start, not after retrying");
	TH_CHECK(wt_log_has(&T, "w-wrongpw", "RUNNEL_REDIS_URL: authentication failed"), "the reason is logged");
	TH_CHECK(!wt_log_has(&T, "w-wrongpw", "not-the-password") && !wt_log_has(&T, "w-wrongpw", PASS),
	         "no password in the log");
	cli_and_dev_refuse("wrongpw", wrong, "authentication failed");

	/* No password at all. */
	st = worker_exit("w-nopw", th_strf("redis://127.0.0.1:%d", T.cluster->node[3].port), 20000);
	TH_CHECK(st == 2 && wt_log_has(&T, "w-nopw", "authentication required"), "no password: exit %d", st);

	/* Not Redis. */
	int port = 0;
	int fd = th_listen_loopback(16, &port);
	TH_REQUIRE(fd >= 0, "listen");
	pthread_t t;
	pthread_create(&t, NULL, http_server, &fd);
	st = worker_exit("w-http", th_strf("redis://127.0.0.1:%d", port), 20000);
	TH_CHECK(st == 2 && wt_log_has(&T, "w-http", "not a Redis server (Protocol error"), "HTTP port: exit %d", st);
	cli_and_dev_refuse("http", th_strf("redis://127.0.0.1:%d", port), "not a Redis server (Protocol error");

	/* A user whose ACL lacks INFO: the mode cannot be told, said so. */
	th_redis_t acl;
	TH_REQUIRE(th_redis_start(&acl, NULL) == 0, "ACL server");
	redisContext *ac = th_redis_connect(&acl);
	redisReply *ar = ac ? redisCommand(ac, "ACL SETUSER default on >acl-pw-77 ~* &* +@all -info") : NULL;
	TH_REQUIRE(ar && ar->type == REDIS_REPLY_STATUS, "ACL SETUSER");
	freeReplyObject(ar);
	redisFree(ac);
	const char *acl_url = th_strf("redis://:acl-pw-77@127.0.0.1:%d", acl.port);
	st = worker_exit("w-acl", acl_url, 20000);
	TH_CHECK(st == 2 && wt_log_has(&T, "w-acl", "the Redis user may not run INFO (its ACL needs +info)") &&
	                 !wt_log_has(&T, "w-acl", "acl-pw-77"),
	         "no INFO: exit %d", st);
	cli_and_dev_refuse("acl", acl_url, "the Redis user may not run INFO (its ACL needs +info)");
	{
		const char *dlog = th_strf("%s/d-acl.log", T.dir);
		const char *denv[] = { th_strf("RUNNEL_REDIS_URL=%s", acl_url),
			               th_strf("RUNNEL_KAFKA_BROKERS=%s", T.kafka.bootstrap), "RUNNEL_LISTEN=127.0.0.1:0",
			               NULL };
		char *dargv[] = { DISPATCHER_BIN, NULL };
		st = th_run(dargv, denv, dlog, 20000);
		TH_CHECK(st == 1 && th_file_contains(dlog, "the Redis user may not run INFO (its ACL needs +info)") &&
		                 !th_file_contains(dlog, "acl-pw-77"),
		         "dispatcher, no INFO: exit %d", st);
	}
	th_redis_stop(&acl);

	/* A cluster node that serves no slot (never joined). */
	th_redis_t lone;
	TH_REQUIRE(th_redis_start(&lone, th_strf("cluster-enabled yes\ncluster-port %d\n", th_free_port())) == 0,
	           "lone node");
	st = worker_exit("w-lone", lone.url, 20000);
	TH_CHECK(st == 2 && wt_log_has(&T, "w-lone", "cluster has 16384 of 16384 slots unserved"),
	         "unserved slots: exit %d", st);
	cli_and_dev_refuse("lone", lone.url, "cluster has 16384 of 16384 slots unserved");
	th_redis_stop(&lone);

	/* The dispatcher: the same wrong URLs stop it at start with the
	 * reason (exit 1, no retry loop, no password in its log). */
	struct {
		const char *name, *url, *why;
	} bad[] = {
		{ "d-wrongpw", wrong, "RUNNEL_REDIS_URL: authentication failed" },
		{ "d-nopw", th_strf("redis://127.0.0.1:%d", T.cluster->node[3].port), "authentication required" },
		{ "d-http", th_strf("redis://127.0.0.1:%d", port), "not a Redis server (Protocol error" },
		{ "d-lone", NULL, "cluster has 16384 of 16384 slots unserved" },
	};
	TH_REQUIRE(th_redis_start(&lone, th_strf("cluster-enabled yes\ncluster-port %d\n", th_free_port())) == 0,
	           "lone node");
	bad[3].url = lone.url;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *dlog = th_strf("%s/%s.log", T.dir, bad[i].name);
		const char *denv[] = { th_strf("RUNNEL_REDIS_URL=%s", bad[i].url),
			               th_strf("RUNNEL_KAFKA_BROKERS=%s", T.kafka.bootstrap), "RUNNEL_LISTEN=127.0.0.1:0",
			               NULL };
		char *dargv[] = { DISPATCHER_BIN, NULL };
		t0 = th_now_ms();
		st = th_run(dargv, denv, dlog, 20000);
		TH_CHECK(st == 1 && th_file_contains(dlog, bad[i].why), "dispatcher, %s: exit %d, \"%s\" logged",
		         bad[i].name, st, bad[i].why);
		TH_CHECK(th_now_ms() - t0 < 15000, "dispatcher, %s: at start, not after retrying", bad[i].name);
		TH_CHECK(!th_file_contains(dlog, PASS) && !th_file_contains(dlog, "not-the-password"),
		         "dispatcher, %s: no password in its log", bad[i].name);
	}
	th_redis_stop(&lone);
	shutdown(fd, SHUT_RDWR);
	pthread_join(t, NULL);
	close(fd);
}

static int has_log_line(void *path)
{
	return th_file_contains(path, "\"type\":\"log\"");
}

static void test_runs_and_cli(void)
{
	const char *env[] = { NULL };
	pid_t w = wt_worker(&T, "w1", env);
	wt_warmup(&T);
	const char *agent = "{\"kind\":\"mock\",\"script\":\"demo\"}";
	for (int i = 0; i < 6; i++)
		wt_submit_agent(&T, th_strf("cfg-run-%d", i), agent, "hello", 0, 0, NULL);
	for (int i = 0; i < 6; i++) {
		const char *run = th_strf("cfg-run-%d", i);
		char msg[256];
		const char *code = wt_ended(&T, run, 60000, msg, sizeof(msg));
		TH_CHECK(strcmp(code, "") == 0, "%s ended with a result on the cluster (%s: %s)", run, code, msg);
	}
	TH_CHECK(wt_log_has(&T, "w1", "redis cluster (commands routed by slot)"), "the worker says it found a cluster");

	/* The CLI on the cluster: status of a run on any node. */
	char *out = NULL;
	int st = cli(T.redis.url, &out, "status", "cfg-run-3");
	TH_CHECK(st == 0 && out && strstr(out, "succeeded"), "runnel status on the cluster: %d %s", st, out ? out : "");
	free(out);
	/* runnel tail of an ended run: every line, the result last. */
	const char *tlog = th_strf("%s/cli-tail.log", T.dir);
	char *targv[] = { CLI_BIN, "tail", "--json", "--redis-url", T.redis.url, "cfg-run-4", NULL };
	st = th_run(targv, NULL, tlog, 30000);
	out = th_file_read(tlog, NULL);
	TH_CHECK(st == 0 && out && strstr(out, "\"type\":\"result\""), "runnel tail on the cluster: %d %s", st,
	         out ? out : "");
	free(out);
	st = cli(th_strf("redis://:nope@127.0.0.1:%d", T.cluster->node[1].port), &out, "status", "cfg-run-3");
	TH_CHECK(st != 0 && out && strstr(out, "authentication failed") && !strstr(out, "nope"),
	         "runnel status with a wrong password: %d %s", st, out ? out : "");
	free(out);

	/* Cancel through the CLI: a slow run on the cluster ends cancelled. */
	wt_submit_agent(&T, "cfg-slow", "{\"kind\":\"mock\",\"script\":\"hang\"}", "hello", 0, 0, NULL);
	TH_CHECK(wt_wait_started(&T, "cfg-slow", 60000), "slow run started");
	st = cli(T.redis.url, &out, "cancel", "cfg-slow");
	TH_CHECK(st == 0, "runnel cancel on the cluster: %d %s", st, out ? out : "");
	free(out);
	char msg[256];
	const char *code = wt_ended(&T, "cfg-slow", 30000, msg, sizeof(msg));
	TH_CHECK(strcmp(code, "cancelled") == 0, "the run ended cancelled: %s", code);

	/* The dispatcher on the cluster with its password: a caller follows
	 * a live run (its tail woken through sharded pub/sub, which
	 * authenticates too) and cancels it through the dispatcher; the
	 * events end with the cancelled error line. */
	wt_submit_agent(&T, "cfg-slow2", "{\"kind\":\"mock\",\"script\":\"hang\"}", "hello", 0, 0, NULL);
	TH_CHECK(wt_wait_started(&T, "cfg-slow2", 60000), "second slow run started");
	int dport = th_free_port();
	const char *dlog = th_strf("%s/dispatcher-ok.log", T.dir);
	const char *denv[] = { th_strf("RUNNEL_REDIS_URL=%s", T.redis.url),
		               th_strf("RUNNEL_KAFKA_BROKERS=%s", T.kafka.bootstrap),
		               th_strf("RUNNEL_LISTEN=127.0.0.1:%d", dport), NULL };
	char *dargv[] = { DISPATCHER_BIN, NULL };
	pid_t d = th_spawn(dargv, denv, dlog);
	TH_REQUIRE(d > 0 && th_wait_until(th_port_open_cond, &dport, 20000), "dispatcher on the cluster (%s)", dlog);
	const char *elog = th_strf("%s/events.log", T.dir);
	char *eargv[] = { "curl", "-sN", "--max-time", "60",
		          th_strf("http://127.0.0.1:%d/v1/runs/cfg-slow2/events", dport), NULL };
	pid_t ev = th_spawn(eargv, NULL, elog);
	TH_REQUIRE(ev > 0, "curl");
	TH_CHECK(th_wait_until(has_log_line, (void *)elog, 20000),
	         "the live run's lines reach the caller");
	const char *clog = th_strf("%s/cancel.log", T.dir);
	char *cargv[] = { "curl", "-s", "-X", "POST", "--max-time", "20",
		          th_strf("http://127.0.0.1:%d/v1/runs/cfg-slow2/cancel", dport), NULL };
	TH_CHECK(th_run(cargv, NULL, clog, 30000) == 0, "cancel through the dispatcher");
	int est = 0;
	TH_CHECK(th_wait_exit(ev, 30000, &est) == 0, "the events stream ended after the cancel");
	TH_CHECK(th_file_contains(elog, "\"code\":\"cancelled\""), "it ended with the cancelled error line");
	TH_CHECK(th_file_contains(dlog, "is a Redis Cluster node"), "the dispatcher says it found a cluster");
	TH_CHECK(!th_file_contains(dlog, PASS), "no password in the dispatcher's log");
	th_stop(d, 30000);
	wt_stop_worker(w, 30000, "w1");
}

int main(void)
{
	th_init("cluster_config");
	setenv("RUNNEL_TEST_REDIS", "cluster", 1);
	wt_setup(&T, "requirepass " PASS "\n", 1);
	TH_REQUIRE(T.cluster, "a cluster");
	test_bad_urls();
	test_runs_and_cli();
	wt_teardown(&T);
	return th_done();
}
