/*
 * tests/kafka/test_kafka_dev.c - `runnel dev --kafka HOST:PORT` on the real
 * broker: the demo runs through it (topics created there), and the bad
 * inputs: an empty or malformed list, a broker nobody listens on.
 *
 * Usage: test_kafka_dev RUNNEL_BINARY
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

static const char *g_bin;

static void bad(const char *value, const char *want_err, int timeout_ms)
{
	clirun_t p;
	int rc = clirun(ARGS(g_bin, "dev", "--port", "0", "--sandbox", "process", "--kafka", value), NULL,
	                timeout_ms, &p);
	TH_CHECK(rc == 1, "--kafka '%s': exit %d", value, rc);
	TH_CHECK(th_streq(p.err, want_err), "--kafka '%s': stderr %s", value, p.err);
	TH_CHECK(!strstr(p.out, "the stack is up"), "%s", p.out);
	clirun_free(&p);
}

int main(int argc, char **argv)
{
	th_init("kafka_dev");
	TH_REQUIRE(argc == 2, "usage: test_kafka_dev RUNNEL_BINARY");
	g_bin = argv[1];
	th_kafka_t k;
	TH_REQUIRE(th_kafka_start(&k, 1) == 0, "broker");
	const char *tmp = th_tmpdir();
	TH_REQUIRE(tmp);
	const char *topic = th_strf("dev.jobs.%ld", (long)getpid());

	clirun_t p;
	int64_t t0 = th_now_ms();
	int rc = clirun(ARGS(g_bin, "dev", "--demo", "--once", "--port", "0", "--kafka", k.bootstrap,
	                     "--jobs-topic", topic),
	                ARGS(th_strf("TMPDIR=%s", tmp)), 120000, &p);
	TH_NOTE("runnel dev --kafka --demo --once: exit %d in %lld ms", rc, (long long)(th_now_ms() - t0));
	TH_CHECK(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, p.out, p.err);
	TH_CHECK(strstr(p.out, th_strf("  kafka       %s (external broker; topics %s, %s.dlq)\n", k.bootstrap, topic, topic)), "%s", p.out);
	TH_CHECK(strstr(p.out, "\nresult  "), "no result line:\n%s", p.out);
	clirun_free(&p);
	/* The demo's job went through the real broker's topic. */
	th_kafka_msg_t m;
	TH_CHECK(th_kafka_consume_one(&k, topic, 10000, &m) == 1, "a job on %s", topic);
	th_kafka_msg_free(&m);

	bad("", "runnel dev: --kafka: expected HOST:PORT[,HOST:PORT...], got \"\"\n", 30000);
	bad("127.0.0.1:1 ;x", "runnel dev: --kafka: expected HOST:PORT[,HOST:PORT...], got \"127.0.0.1:1 ;x\"\n", 30000);
	int port = th_free_port();
	TH_REQUIRE(port > 0);
	const char *dead = th_strf("127.0.0.1:%d", port);
	bad(dead, th_strf("runnel dev: --kafka %s: no broker answered within 10 s\n", dead),
	    60000);
	th_kafka_stop(&k);
	return th_done();
}
