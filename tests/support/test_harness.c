/*
 * tests/support/test_harness.c - the harness proves itself: a real
 * redis-server (stream round trip, AOF surviving a restart, the secret
 * scanner), the Kafka mock cluster through a consumer group, children and
 * their cleanup.
 */
#include "tests/support/harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void test_kafka(void)
{
	th_kafka_t k;
	TH_REQUIRE(th_kafka_start(&k, 1) == 0, "mock cluster");
	TH_CHECK(strstr(k.bootstrap, "127.0.0.1:"), "bootstrap %s", k.bootstrap);
	TH_REQUIRE(th_kafka_create_topic(&k, "th.jobs", 2) == 0);

	const char *hdrs[] = { "reason", "bad json", NULL };
	TH_REQUIRE(th_kafka_produce(&k, "th.jobs", -1, "run_1", "{\"v\":1}", 7, hdrs) == 0);

	/* Through a consumer group, as the worker reads jobs (~3 s join). */
	th_kafka_consumer_t *c = th_kafka_consumer_new(&k, "th.jobs", "th-group");
	TH_REQUIRE(c);
	th_kafka_msg_t m;
	int rc = th_kafka_consumer_next(c, 15000, &m);
	TH_CHECK(rc == 1, "consumed through the group (rc %d)", rc);
	if (rc == 1) {
		TH_CHECK(th_streq(m.key, "run_1"), "key %s", m.key);
		TH_CHECK(m.len == 7 && th_streq(m.value, "{\"v\":1}"), "value %s", m.value);
		TH_CHECK(th_streq(th_kafka_msg_header(&m, "reason"), "bad json"));
		th_kafka_msg_free(&m);
	}
	th_kafka_consumer_free(c);

	/* Without a group (th_kafka_consume_one): no join wait. */
	int64_t t0 = th_now_ms();
	TH_REQUIRE(th_kafka_produce(&k, "th.jobs.dlq", 0, "run_2", "x", 1, hdrs) == 0);
	rc = th_kafka_consume_one(&k, "th.jobs.dlq", 10000, &m);
	TH_CHECK(rc == 1, "consume_one rc %d", rc);
	if (rc == 1) {
		TH_CHECK(th_streq(m.key, "run_2") && th_streq(m.value, "x"));
		TH_CHECK(th_streq(th_kafka_msg_header(&m, "reason"), "bad json"));
		th_kafka_msg_free(&m);
	}
	TH_NOTE("dlq produce+consume_one took %lld ms", (long long)(th_now_ms() - t0));

	/* Broker down: a produce does not get through; up again: it does. */
	TH_CHECK(th_kafka_broker_down(&k, 1) == 0);
	TH_CHECK(th_kafka_broker_up(&k, 1) == 0);
	TH_CHECK(th_kafka_produce(&k, "th.jobs", -1, "run_3", "y", 1, NULL) == 0);
	th_kafka_stop(&k);
}

static void test_redis(void)
{
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, "appendonly yes\nappendfsync always\n") == 0);
	TH_CHECK(strncmp(r.url, "redis://127.0.0.1:", 18) == 0, "url %s", r.url);
	redisContext *c = th_redis_connect(&r);
	TH_REQUIRE(c);

	redisReply *rep = redisCommand(c, "XADD th:{r}:out 5-1 line %s", "{\"type\":\"log\",\"level\":\"info\",\"message\":\"hi\"}");
	TH_CHECK(rep && rep->type == REDIS_REPLY_STRING && th_streq(rep->str, "5-1"));
	if (rep)
		freeReplyObject(rep);
	rep = redisCommand(c, "XREAD COUNT 10 STREAMS th:{r}:out 0");
	TH_CHECK(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1, "XREAD");
	if (rep)
		freeReplyObject(rep);

	/* The scanner finds values of every type, and not what is absent. */
	freeReplyObject(redisCommand(c, "HSET th:{r}:state status running secretfield otp_hash"));
	freeReplyObject(redisCommand(c, "ZADD th:leases 1 otp_zset"));
	freeReplyObject(redisCommand(c, "SELECT 3"));
	freeReplyObject(redisCommand(c, "RPUSH th:list a otp_in_db3"));
	freeReplyObject(redisCommand(c, "SELECT 0"));
	TH_CHECK(th_redis_scan_contains(c, "otp_hash") == 1);
	TH_CHECK(th_redis_scan_contains(c, "otp_zset") == 1);
	TH_CHECK(th_redis_scan_contains(c, "otp_in_db3") == 1);
	TH_CHECK(th_redis_scan_contains(c, "\"hi\"") == 1, "stream value");
	TH_CHECK(th_redis_scan_contains(c, "otp_nowhere") == 0);

	/* A terminal line, then the AOF survives a crash and a restart. */
	rep = redisCommand(c, "XADD th:{r}:out 5-2 line %s", "{\"type\":\"result\",\"message\":\"done\"}");
	if (rep)
		freeReplyObject(rep);
	TH_CHECK(th_wait_stream_terminal(c, "th:{r}:out", 2000) == 1);
	redisFree(c);
	int port = r.port;
	TH_CHECK(th_redis_kill(&r) == 0);
	TH_REQUIRE(th_redis_restart(&r) == 0);
	TH_CHECK(r.port == port);
	c = th_redis_connect(&r);
	TH_REQUIRE(c);
	char **lines, **ids;
	size_t n;
	TH_CHECK(th_stream_read_all(c, "th:{r}:out", &lines, &ids, &n) == 0);
	TH_CHECK(n == 2, "%zu entries after restart", n);
	if (n == 2) {
		TH_CHECK(th_streq(ids[0], "5-1") && th_streq(ids[1], "5-2"));
		char type[16];
		TH_CHECK(th_line_type(lines[1], type, sizeof(type), NULL, 0) == 0 && th_streq(type, "result"));
	}
	th_strv_free(lines, n);
	th_strv_free(ids, n);
	TH_CHECK(th_dir_contains(r.dir, "otp_hash", 8) == 1, "AOF holds the write");
	TH_CHECK(th_dir_contains(r.dir, "otp_never_written", 17) == 0);
	redisFree(c);
	TH_CHECK(th_redis_stop(&r) == 0);
}

static void test_redis_password(void)
{
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, "requirepass s3cret-pw\n") == 0);
	TH_CHECK(th_streq(r.password, "s3cret-pw"));
	TH_CHECK(th_streq(r.url, th_strf("redis://:s3cret-pw@127.0.0.1:%d", r.port)), "url %s", r.url);
	redisContext *c = th_redis_connect(&r);
	TH_REQUIRE(c);
	redisReply *rep = redisCommand(c, "SET k v");
	TH_CHECK(rep && rep->type == REDIS_REPLY_STATUS);
	if (rep)
		freeReplyObject(rep);
	redisFree(c);
	struct timeval tv = { 2, 0 };
	c = redisConnectWithTimeout("127.0.0.1", r.port, tv);
	rep = c ? redisCommand(c, "GET k") : NULL;
	TH_CHECK(rep && rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "NOAUTH"), "unauthenticated GET refused");
	if (rep)
		freeReplyObject(rep);
	if (c)
		redisFree(c);
	TH_CHECK(th_redis_stop(&r) == 0);
}

static int file_has_ready(void *arg)
{
	return th_file_contains(arg, "ready");
}

static void test_processes(void)
{
	const char *dir = th_tmpdir();
	TH_REQUIRE(dir);
	char *log = th_strf("%s/child.log", dir);
	const char *env[] = { "TH_GREETING=ready", NULL };
	/* The test's own environment never reaches the child. */
	setenv("TH_PARENT_SECRET", "leaked", 1);
	char *argv[] = { "/bin/sh", "-c", "echo ${TH_PARENT_SECRET:-clean}; echo $TH_GREETING; exec sleep 30", NULL };
	pid_t pid = th_spawn(argv, env, log);
	TH_REQUIRE(pid > 0);
	TH_CHECK(th_wait_until(file_has_ready, log, 5000) == 1);
	TH_CHECK(th_alive(pid) == 1);
	int st = th_stop(pid, 2000);
	TH_CHECK(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status %d", st);
	TH_CHECK(th_file_contains(log, "clean") && !th_file_contains(log, "leaked"));

	char *bad[] = { "/nonexistent/runnel-nothing", NULL };
	TH_CHECK(th_spawn(bad, NULL, NULL) == -1, "exec failure is reported");

	char *ex[] = { "/bin/sh", "-c", "exit 3", NULL };
	pid = th_spawn(ex, NULL, NULL);
	TH_CHECK(th_wait_exit(pid, 5000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 3);
	TH_CHECK(th_free_port() > 0);
}

int main(void)
{
	th_init("harness_roundtrip");
	test_processes();
	test_redis();
	test_redis_password();
	test_kafka();
	return th_done();
}
