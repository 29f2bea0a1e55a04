/*
 * tests/cli/test_reply.c - `runnel reply` against a real redis-server: the
 * exact control message for an option, text and reject; exit 3 for an
 * unknown run or ask, 1 for a settled ask or a foreign option, 2 for usage
 * errors (exact messages); nothing written when refused.
 */
#include <stdio.h>
#include <string.h>

#include "tests/cli/cliredis.h"
#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

static cli_redis_t T;

static int run(const char *const *args, clirun_t *p)
{
	return clirun_argv(T.bin, ARGS("reply"), args, ARGS(T.env_url), NULL, 20000, p);
}

static void out_line(const char *run, const char *line)
{
	redisReply *r = redisCommand(T.c, "XADD runnel:{%s}:out * line %s", run, line);
	TH_REQUIRE(r && r->type == REDIS_REPLY_STRING);
	freeReplyObject(r);
}

/* The "msg" fields of a run's control stream, one per line. */
static char *ctl_msgs(const char *run)
{
	return cli_stream_text(T.c, th_strf("runnel:{%s}:ctl", run), 0);
}

#define OPEN_ASK "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"title\":\"Run: ls\"," \
	         "\"options\":[{\"id\":\"allow_once\",\"label\":\"Allow\"},{\"id\":\"reject_once\",\"label\":\"Reject\"}],\"status\":\"open\",\"ts\":1}"

int main(int argc, char **argv)
{
	clirun_t p;

	cli_redis_start(&T, argc, argv, "test_cli_reply");

	redisReply *r = redisCommand(T.c, "HSET runnel:{run_a}:state status running");
	freeReplyObject(r);
	r = redisCommand(T.c, "EXPIRE runnel:{run_a}:state 1000");
	freeReplyObject(r);
	out_line("run_a", OPEN_ASK);
	out_line("run_a", "{\"type\":\"ask\",\"id\":\"q_1\",\"kind\":\"question\",\"question\":\"?\",\"status\":\"open\",\"ts\":2}");

	TH_CHECK(run(ARGS("run_a", "ask_1", "allow_once"), &p) == 0, "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(th_streq(p.out, "reply sent to ask ask_1 of run run_a\n"), "%s", p.out);
	clirun_free(&p);
	TH_CHECK(run(ARGS("run_a", "q_1", "--text", "the \"red\" one"), &p) == 0, "exit %d: %s", p.exit_code, p.err);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("run_a"),
	                  "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}\n"
	                  "{\"type\":\"reply\",\"id\":\"q_1\",\"text\":\"the \\\"red\\\" one\"}\n"),
	         "%s", ctl_msgs("run_a"));
	r = redisCommand(T.c, "PTTL runnel:{run_a}:ctl");
	TH_CHECK(r && r->integer > 0 && r->integer <= 1000000, "ctl expiry follows the state's: %lld", r ? r->integer : -9);
	freeReplyObject(r);

	/* A foreign option: refused, nothing written. */
	TH_CHECK(run(ARGS("run_a", "ask_1", "always"), &p) == 1, "exit %d", p.exit_code);
	TH_CHECK(th_streq(p.err, "runnel reply: \"always\" is not an option of ask ask_1 (options: allow_once, reject_once)\n"),
	         "%s", p.err);
	clirun_free(&p);

	/* Settled: exit 1. */
	out_line("run_a", "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"status\":\"answered\",\"option\":\"allow_once\",\"ts\":3}");
	TH_CHECK(run(ARGS("run_a", "ask_1", "--reject"), &p) == 1, "exit %d", p.exit_code);
	TH_CHECK(th_streq(p.err, "runnel reply: ask ask_1 of run run_a is already settled\n"), "%s", p.err);
	clirun_free(&p);
	/* A run that ended with the ask open (lost worker): settled too. */
	r = redisCommand(T.c, "HSET runnel:{run_a}:state status lost");
	freeReplyObject(r);
	TH_CHECK(run(ARGS("run_a", "q_1", "--reject"), &p) == 1, "exit %d", p.exit_code);
	clirun_free(&p);

	/* Unknown ask and unknown run: exit 3. */
	TH_CHECK(run(ARGS("run_a", "ask_9", "--reject"), &p) == 3, "exit %d", p.exit_code);
	TH_CHECK(th_streq(p.err, "runnel reply: run run_a has no ask ask_9\n"), "%s", p.err);
	clirun_free(&p);
	TH_CHECK(run(ARGS("run_none", "ask_1", "--reject"), &p) == 3, "exit %d", p.exit_code);
	TH_CHECK(th_streq(p.err, "runnel reply: run run_none not found\n"), "%s", p.err);
	clirun_free(&p);
	TH_CHECK(th_streq(ctl_msgs("run_a"),
	                  "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}\n"
	                  "{\"type\":\"reply\",\"id\":\"q_1\",\"text\":\"the \\\"red\\\" one\"}\n"),
	         "nothing more written");

	/* Usage errors. */
	const struct {
		const char *const *args;
		const char *err;
	} bad[] = {
		{ ARGS("run_a", "ask_1"), "runnel reply: give exactly one of OPTION, --text, --reject\n" },
		{ ARGS("run_a", "ask_1", "allow_once", "--reject"), "runnel reply: give exactly one of OPTION, --text, --reject\n" },
		{ ARGS("run_a", "ask 1", "allow_once"), "runnel reply: ASK: must be 1-128 characters of A-Z a-z 0-9 _ . : -\n" },
		{ ARGS("run_a", "ask_1", "allow once"), "runnel reply: option: must be 1-128 characters of A-Z a-z 0-9 _ . : -\n" },
		{ ARGS("run_a", "ask_1", "--text", "x", "--via", "kafka"), "runnel reply: --via: expected redis or dispatcher, got \"kafka\"\n" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		TH_CHECK(run(bad[i].args, &p) == 2, "case %zu: exit %d", i, p.exit_code);
		TH_CHECK(!strncmp(p.err, bad[i].err, strlen(bad[i].err)), "case %zu: %s", i, p.err);
		clirun_free(&p);
	}
	TH_CHECK(run(ARGS("--help"), &p) == 0 && strstr(p.out, "exit status: 0 reply sent"), "help");
	clirun_free(&p);

	/* Unreachable Redis: exit 4. */
	{
		const char *argv2[] = { T.bin, "reply", "run_a", "ask_1", "--reject", NULL };
		const char *e[] = { th_strf("RUNNEL_REDIS_URL=redis://127.0.0.1:%d", th_free_port()), NULL };
		TH_CHECK(clirun(argv2, e, 20000, &p) == 4, "exit %d: %s", p.exit_code, p.err);
		clirun_free(&p);
	}
	redisFree(T.c);
	th_redis_stop(&T.r);
	return th_done();
}
