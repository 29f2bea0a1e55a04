/*
 * tests/cli/test_usage.c - `runnel` usage errors (exit 2, exact messages),
 * --help for every verb, the RUNNEL_* twins reaching the verbs, and the
 * "cannot reach" exit code 4.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

static const char *g_bin;

#define SUBMIT_USAGE "usage: runnel submit [options] --agent-url URL --prompt TEXT (see runnel submit --help)\n"

/* Runs runnel with args and env and checks its exit code; the output stays
 * in *p for the caller (clirun_free).  shown gets the arguments, for
 * messages. */
static void run_code(const char *const *args, const char *const *env, int code, clirun_t *p, char *shown,
                     size_t shown_size)
{
	const char *argv[16] = { g_bin };
	int n = 1;
	size_t off = 0;
	shown[0] = '\0';
	for (int i = 0; args[i] && n < 15; i++) {
		argv[n++] = args[i];
		int w = snprintf(shown + off, shown_size - off, " %s", args[i]);
		if (w > 0)
			off += (size_t)w < shown_size - off ? (size_t)w : shown_size - off - 1;
	}
	argv[n] = NULL;
	int rc = clirun(argv, env, 20000, p);
	TH_CHECK(rc == code, "runnel%s: exit %d, want %d (stderr: %s)", shown, rc, code, p->err);
}

/* Runs runnel with args; checks exit code and exact stderr (NULL: skip). */
static void expect(const char *const *args, const char *const *env, int code, const char *err)
{
	char shown[512];
	clirun_t p;
	run_code(args, env, code, &p, shown, sizeof(shown));
	if (err)
		TH_CHECK(th_streq(p.err, err), "runnel%s: stderr\n%s\nwant\n%s", shown, p.err, err);
	clirun_free(&p);
}

/* The same, for a stderr that starts with err. */
static void expect_prefix(const char *const *args, const char *const *env, int code, const char *err)
{
	char shown[512];
	clirun_t p;
	run_code(args, env, code, &p, shown, sizeof(shown));
	TH_CHECK(strncmp(p.err, err, strlen(err)) == 0, "runnel%s: stderr\n%s\nwant it to start with\n%s", shown,
	         p.err, err);
	clirun_free(&p);
}

static void expect_help(const char *verb)
{
	const char *argv[] = { g_bin, verb, "--help", NULL };
	clirun_t p;
	int rc = clirun(argv, NULL, 20000, &p);
	char want[64];
	snprintf(want, sizeof(want), "usage: runnel %s ", verb);
	TH_CHECK(rc == 0, "%s --help exit %d", verb, rc);
	TH_CHECK(strncmp(p.out, want, strlen(want)) == 0, "%s --help: %s", verb, p.out);
	TH_CHECK(strstr(p.out, "-h, --help"));
	TH_CHECK(p.err_len == 0, "%s --help wrote to stderr: %s", verb, p.err);
	clirun_free(&p);
	/* -h too, and after other arguments. */
	const char *argv2[] = { g_bin, verb, "run_1", "-h", NULL };
	rc = clirun(argv2, NULL, 20000, &p);
	TH_CHECK(rc == 0 && strncmp(p.out, want, strlen(want)) == 0, "%s run_1 -h", verb);
	clirun_free(&p);
}

int main(int argc, char **argv)
{
	TH_REQUIRE(argc == 2, "usage: test_cli_usage RUNNEL_BINARY");
	g_bin = argv[1];

	/* The program and its verbs. */
	expect_prefix((const char *const[]){ NULL }, NULL, 2, "runnel: missing verb\nusage: runnel VERB");
	expect_prefix(ARGS("frob"), NULL, 2, "runnel: unknown verb \"frob\"\n");
	{
		char shown[512];
		clirun_t p;
		run_code(ARGS("--help"), NULL, 0, &p, shown, sizeof(shown));
		TH_CHECK(strstr(p.out, "usage: runnel VERB") && strstr(p.out, "submit") &&
		                 strstr(p.out, "tail") && strstr(p.out, "cancel") && strstr(p.out, "status") &&
		                 strstr(p.out, "dev"),
		         "%s", p.out);
		clirun_free(&p);
	}
	expect_help("submit");
	expect_help("tail");
	expect_help("cancel");
	expect_help("status");
	expect_help("dev");

	/* tail */
	expect(ARGS("tail"), NULL, 2,
	       "runnel tail: missing RUN\nusage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "run_a", "run_b"), NULL, 2,
	       "runnel tail: unexpected argument \"run_b\"\nusage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "--nope", "run_a"), NULL, 2,
	       "runnel tail: unknown option --nope\nusage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "bad id"), NULL, 2,
	       "runnel tail: invalid run id \"bad id\" (expected 1-64 of A-Z a-z 0-9 _ -)\n"
	       "usage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "run_a", "--after", "zzz"), NULL, 2,
	       "runnel tail: --after: \"zzz\" is not a stream id (like 1700000000000-3)\n"
	       "usage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "run_a", "--after"), NULL, 2,
	       "runnel tail: --after needs a value\nusage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "run_a", "--json=maybe"), NULL, 2,
	       "runnel tail: --json: \"maybe\" is not a boolean (true/false)\n"
	       "usage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "run_a", "--redis-url", "http://x"), NULL, 2,
	       "runnel tail: --redis-url: redis url: must start with redis://\n"
	       "usage: runnel tail [options] RUN (see runnel tail --help)\n");
	expect(ARGS("tail", "run_a", "--key-prefix", "a b"), NULL, 2,
	       "runnel tail: --key-prefix: invalid prefix \"a b\"\n"
	       "usage: runnel tail [options] RUN (see runnel tail --help)\n");
	/* An env twin with a bad value names the variable. */
	expect(ARGS("tail", "run_a"), ARGS("RUNNEL_JSON=maybe"), 2,
	       "runnel tail: RUNNEL_JSON: \"maybe\" is not a boolean (true/false)\n"
	       "usage: runnel tail [options] RUN (see runnel tail --help)\n");

	/* status, cancel */
	expect(ARGS("status", "run_a", "run_b"), NULL, 2,
	       "runnel status: unexpected argument \"run_b\"\nusage: runnel status [options] [RUN] (see runnel status --help)\n");
	expect(ARGS("cancel"), NULL, 2,
	       "runnel cancel: missing RUN\nusage: runnel cancel [options] RUN (see runnel cancel --help)\n");
	expect(ARGS("cancel", "run_a", "--via", "pigeon"), NULL, 2,
	       "runnel cancel: --via: expected redis or dispatcher, got \"pigeon\"\n"
	       "usage: runnel cancel [options] RUN (see runnel cancel --help)\n");
	expect(ARGS("cancel", "run_a", "--reason", ""), NULL, 2,
	       "runnel cancel: --reason: must be 1 to 128 bytes\n"
	       "usage: runnel cancel [options] RUN (see runnel cancel --help)\n");

	/* dev, submit */
	expect(ARGS("dev", "extra"), NULL, 2,
	       "runnel dev: unexpected argument \"extra\"\nusage: runnel dev [options] (see runnel dev --help)\n");
	expect(ARGS("dev", "--sandbox", "chroot"), NULL, 2,
	       "runnel dev: --sandbox: expected bwrap or process, got \"chroot\"\n"
	       "usage: runnel dev [options] (see runnel dev --help)\n");
	expect(ARGS("dev", "--port", "70000"), NULL, 2,
	       "runnel dev: --port: 70000 is out of range 0..65535\n"
	       "usage: runnel dev [options] (see runnel dev --help)\n");
	expect(ARGS("dev", "--redis-url", "redis:/x"), NULL, 2,
	       "runnel dev: --redis-url: redis url: must start with redis://\n"
	       "usage: runnel dev [options] (see runnel dev --help)\n");
	expect(ARGS("submit", "--agent-url", "http://h/ws"), NULL, 2,
	       "runnel submit: --otp-setup is required\n" SUBMIT_USAGE);

	/* --otp-file has a cap (the largest job plus 4 KiB). */
	{
		const char *dir = th_tmpdir();
		TH_REQUIRE(dir);
		char *path = th_strf("%s/huge.json", dir);
		size_t n = 900 * 1024 + 4096 + 1;
		char *big = malloc(n);
		memset(big, ' ', n);
		TH_REQUIRE(th_file_write(path, big, n) == 0);
		free(big);
		expect(ARGS("submit", "--otp-file", path), NULL, 2,
		       "runnel submit: --otp-file: over 925696 bytes\n" SUBMIT_USAGE);
		/* Files that are not an object with string OTPs. */
		static const char *const otp_files[][2] = {
			{ "[1,2]", "not a JSON object" },
			{ "{\n\"otp_setup\": otp_x", "not valid JSON (line 2)" },
			{ "{\"otp_setup\":5}", "otp_setup must be a string" },
		};
		for (size_t i = 0; i < sizeof(otp_files) / sizeof(otp_files[0]); i++) {
			char *bad = th_strf("%s/bad%zu.json", dir, i);
			TH_REQUIRE(th_file_write(bad, otp_files[i][0], strlen(otp_files[i][0])) == 0);
			expect(ARGS("submit", "--otp-file", bad), NULL, 2,
			       th_strf("runnel submit: --otp-file: %s\n" SUBMIT_USAGE, otp_files[i][1]));
		}
	}

	/* Nothing listens: exit 4, the flag and its RUNNEL_REDIS_URL twin alike. */
	int port = th_free_port();
	TH_REQUIRE(port > 0);
	char *url = th_strf("redis://127.0.0.1:%d", port);
	char *env = th_strf("RUNNEL_REDIS_URL=%s", url);
	char *want = th_strf("runnel tail: cannot reach Redis at 127.0.0.1:%d: Connection refused\n", port);
	expect(ARGS("tail", "run_a", "--redis-url", url), NULL, 4, want);
	expect(ARGS("tail", "run_a"), ARGS(env), 4, want);
	want = th_strf("runnel status: cannot reach Redis at 127.0.0.1:%d: Connection refused\n", port);
	expect(ARGS("status", "run_a"), ARGS(env), 4, want);
	want = th_strf("runnel cancel: cannot reach Redis at 127.0.0.1:%d: Connection refused\n", port);
	expect(ARGS("cancel", "run_a"), ARGS(env), 4, want);
	char *durl = th_strf("http://127.0.0.1:%d", port);
	char *denv = th_strf("RUNNEL_DISPATCHER_URL=%s", durl);
	expect_prefix(ARGS("cancel", "run_a", "--via", "dispatcher"), ARGS(denv), 4,
	              th_strf("runnel cancel: cannot reach the dispatcher at %s/v1/runs/run_a/cancel: ", durl));
	{
		char shown[512];
		clirun_t p;
		run_code(ARGS("submit", "--agent-url", "http://h/ws", "--otp-setup", "otp_s3cret", "--otp-run",
		              "otp_r3cret", "--prompt", "p"),
		         ARGS(denv), 4, &p, shown, sizeof(shown));
		want = th_strf("runnel submit: cannot reach the dispatcher at %s/v1/runs: ", durl);
		TH_CHECK(strncmp(p.err, want, strlen(want)) == 0, "%s", p.err);
		TH_CHECK(!strstr(p.err, "r3cret") && !strstr(p.out, "r3cret"));
		clirun_free(&p);
	}
	return th_done();
}
