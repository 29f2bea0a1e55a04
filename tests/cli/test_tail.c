/*
 * tests/cli/test_tail.c - `runnel tail` against a real redis-server with
 * lines this test XADDs itself: --json output equals the stream, exit codes
 * (0 result, 1 error, 3 unknown, 130 Ctrl-C), --after resumes exactly, the
 * plain view, and the live TTY view under a pseudo-terminal (step rows
 * update in place).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "tests/cli/cliredis.h"
#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

static cli_redis_t T;

static const char *const LINES[] = {
	"{\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}",
	"{\"type\":\"step\",\"id\":\"step_8f3\",\"name\":\"recipes/add-node.sh\",\"status\":\"running\",\"args\":{\"nodeType\":\"inference\"},\"ts\":1700000000123}",
	"{\"type\":\"step\",\"id\":\"step_8f3\",\"name\":\"recipes/add-node.sh\",\"status\":\"succeeded\",\"result\":{\"nodeId\":\"node_1\"},\"durationMs\":412,\"ts\":1700000000535}",
	"{\"type\":\"result\",\"message\":\"Added an Inference node\",\"ts\":1700000000999}",
};
static const char *ERROR_LINE =
        "{\"type\":\"error\",\"code\":\"model_timeout\",\"message\":\"Provider timed out after 60s\",\"ts\":1700000001000}";

static void xadd(const char *prefix, const char *run, const char *id, const char *line)
{
	char *key = th_strf("%s:{%s}:out", prefix, run);
	redisReply *r = redisCommand(T.c, "XADD %s %s line %s", key, id, line);
	TH_REQUIRE(r && r->type == REDIS_REPLY_STRING, "XADD %s %s", key, id);
	freeReplyObject(r);
}

static void hset_status(const char *run, const char *status)
{
	redisReply *r = redisCommand(T.c, "HSET runnel:{%s}:state status %s enqueued_at 1700000000000", run, status);
	TH_REQUIRE(r && r->type == REDIS_REPLY_INTEGER);
	freeReplyObject(r);
}

static int run_tail(const char *const *extra, const char *const *env, clirun_t *p)
{
	return clirun_argv(T.bin, ARGS("tail"), extra, ARGS(T.env_url), env, 20000, p);
}

/* Starts `runnel tail args...` against the test's Redis, with env added
 * (NULL, or NAME=value entries that win over the defaults), on a cols x rows
 * terminal (0, 0: pipes). */
static void start_tail(clirun_t *p, const char *const *args, const char *const *env, int cols, int rows)
{
	const char *argv[16] = { T.bin, "tail" };
	const char *envv[8] = { T.env_url };
	for (size_t i = 0; args[i] && i < 13; i++)
		argv[i + 2] = args[i];
	for (size_t i = 0; env && env[i] && i < 6; i++)
		envv[i + 1] = env[i];
	TH_REQUIRE(clirun_start(p, argv, envv, cols, rows) == 0, "runnel tail %s", args[0]);
}

/* Reads the live view for up to 5 s until its screen (cols wide) shows
 * needle.  1 when it did. */
static int screen_shows(clirun_t *p, int cols, const char *needle)
{
	int seen = 0;
	for (int i = 0; i < 100 && !seen; i++) {
		clirun_pump(p, 50);
		char *sc = vt_screen(p->out, p->out_len, cols);
		seen = !!strstr(sc, needle);
		free(sc);
	}
	return seen;
}

static char *joined(size_t from, size_t to, const char *last)
{
	char *s = th_strf("%s", "");
	for (size_t i = from; i < to; i++)
		s = th_strf("%s%s\n", s, LINES[i]);
	if (last)
		s = th_strf("%s%s\n", s, last);
	return s;
}

static void test_json_and_codes(void)
{
	clirun_t p;
	/* Unknown run: 3. */
	TH_CHECK(run_tail(ARGS("run_nope"), NULL, &p) == 3, "exit %d", p.exit_code);
	TH_CHECK(th_streq(p.err, "runnel tail: run run_nope not found\n"), "%s", p.err);
	TH_CHECK(p.out_len == 0);
	clirun_free(&p);

	/* A finished run with a result: the exact stream, exit 0. */
	for (size_t i = 0; i < 4; i++)
		xadd("runnel", "run_ok", th_strf("1700000000000-%zu", i + 1), LINES[i]);
	TH_CHECK(run_tail(ARGS("run_ok", "--json"), NULL, &p) == 0, "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(th_streq(p.out, joined(0, 4, NULL)), "got\n%s", p.out);
	TH_CHECK(p.err_len == 0, "%s", p.err);
	clirun_free(&p);

	/* --after resumes exactly after the given entry (exclusive). */
	TH_CHECK(run_tail(ARGS("run_ok", "--json", "--after", "1700000000000-2"), NULL, &p) == 0);
	TH_CHECK(th_streq(p.out, joined(2, 4, NULL)), "got\n%s", p.out);
	clirun_free(&p);
	TH_CHECK(run_tail(ARGS("--after=1700000000000-3", "run_ok", "--json"), NULL, &p) == 0);
	TH_CHECK(th_streq(p.out, joined(3, 4, NULL)), "got\n%s", p.out);
	clirun_free(&p);
	/* RUNNEL_TAIL_AFTER is --after's twin. */
	TH_CHECK(run_tail(ARGS("run_ok", "--json"), ARGS("RUNNEL_TAIL_AFTER=1700000000000-1"), &p) == 0);
	TH_CHECK(th_streq(p.out, joined(1, 4, NULL)), "got\n%s", p.out);
	clirun_free(&p);

	/* An error line ends the tail with exit 1. */
	for (size_t i = 0; i < 3; i++)
		xadd("runnel", "run_err", th_strf("1700000000000-%zu", i + 1), LINES[i]);
	xadd("runnel", "run_err", "1700000000000-4", ERROR_LINE);
	TH_CHECK(run_tail(ARGS("run_err", "--json"), NULL, &p) == 1, "exit %d", p.exit_code);
	TH_CHECK(th_streq(p.out, joined(0, 3, ERROR_LINE)), "got\n%s", p.out);
	clirun_free(&p);

	/* Resuming at or after the terminal line: nothing follows, so nothing
	 * is printed and the exit is the run's own (never a wait forever). */
	TH_CHECK(run_tail(ARGS("run_ok", "--json", "--after", "1700000000000-4"), NULL, &p) == 0,
	         "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(p.out_len == 0 && p.err_len == 0, "out %s err %s", p.out, p.err);
	clirun_free(&p);
	TH_CHECK(run_tail(ARGS("run_ok", "--json", "--after", "1800000000000-0"), NULL, &p) == 0,
	         "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(p.out_len == 0, "%s", p.out);
	clirun_free(&p);
	TH_CHECK(run_tail(ARGS("run_err", "--after", "1700000000000-4"), NULL, &p) == 1,
	         "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(p.out_len == 0, "%s", p.out);
	clirun_free(&p);

	/* Another key prefix (flag and twin). */
	xadd("acme", "run_p", "5-1", LINES[3]);
	TH_CHECK(run_tail(ARGS("run_p", "--json", "--key-prefix", "acme"), NULL, &p) == 0);
	TH_CHECK(th_streq(p.out, joined(3, 4, NULL)), "got\n%s", p.out);
	clirun_free(&p);
	TH_CHECK(run_tail(ARGS("run_p", "--json"), ARGS("RUNNEL_KEY_PREFIX=acme"), &p) == 0);
	clirun_free(&p);
	TH_CHECK(run_tail(ARGS("run_p", "--json"), NULL, &p) == 3);
	clirun_free(&p);
}

/* The plain view: one readable line per event, no escape sequences. */
static void test_plain(void)
{
	clirun_t p;
	TH_CHECK(run_tail(ARGS("run_err"), NULL, &p) == 1);
	const char *want =
	        "info    Loaded 3 skills\n"
	        "step    recipes/add-node.sh running\n"
	        "step    recipes/add-node.sh succeeded 412ms\n"
	        "error   model_timeout: Provider timed out after 60s\n";
	TH_CHECK(th_streq(p.out, want), "got\n%s", p.out);
	TH_CHECK(!strchr(p.out, '\033'));
	clirun_free(&p);
}

/* Asks: an open ask says how to answer it; its settlement follows. */
static void test_asks(void)
{
	clirun_t p;
	xadd("runnel", "run_ask", "1700000000000-1",
	     "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"title\":\"Run: mkdir -p assets\","
	     "\"options\":[{\"id\":\"allow_once\",\"label\":\"Allow\"},{\"id\":\"reject_once\",\"label\":\"Reject\"}],"
	     "\"status\":\"open\",\"ts\":1}");
	xadd("runnel", "run_ask", "1700000000000-2",
	     "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"status\":\"answered\",\"option\":\"allow_once\",\"ts\":2}");
	xadd("runnel", "run_ask", "1700000000000-3",
	     "{\"type\":\"ask\",\"id\":\"q_1\",\"kind\":\"question\",\"question\":\"Which table?\",\"status\":\"open\",\"ts\":3}");
	xadd("runnel", "run_ask", "1700000000000-4",
	     "{\"type\":\"ask\",\"id\":\"q_1\",\"kind\":\"question\",\"status\":\"expired\",\"ts\":4}");
	xadd("runnel", "run_ask", "1700000000000-5", "{\"type\":\"result\",\"message\":\"ok\",\"ts\":5}");
	TH_CHECK(run_tail(ARGS("run_ask"), NULL, &p) == 0, "exit %d: %s", p.exit_code, p.err);
	const char *want =
	        "ask     ask_1: Run: mkdir -p assets | options: allow_once (Allow), reject_once (Reject)"
	        " | answer: runnel reply run_ask ask_1 OPTION\n"
	        "ask     ask_1 answered: allow_once\n"
	        "ask     q_1: Which table? | answer: runnel reply run_ask q_1 --text TEXT\n"
	        "ask     q_1 expired\n"
	        "result  ok\n";
	TH_CHECK(th_streq(p.out, want), "got\n%s", p.out);
	clirun_free(&p);
}

/* The live view: an open ask shows how to answer and the footer waits for it. */
static void test_tty_ask(void)
{
	const int cols = 160, rows = 30;
	clirun_t p;
	hset_status("run_tty_ask", "running");
	start_tail(&p, ARGS("run_tty_ask"), ARGS("TERM=xterm"), cols, rows);
	clirun_pump(&p, 300);
	xadd("runnel", "run_tty_ask", "1-1",
	     "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"title\":\"Run: ls\","
	     "\"options\":[{\"id\":\"allow_once\",\"label\":\"Allow\"}],\"status\":\"open\",\"ts\":1}");
	TH_CHECK(screen_shows(&p, cols, "waiting for a reply (1 open ask)"), "no waiting footer:\n%s", p.out);
	xadd("runnel", "run_tty_ask", "1-2",
	     "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"status\":\"answered\",\"option\":\"allow_once\",\"ts\":2}");
	xadd("runnel", "run_tty_ask", "1-3", "{\"type\":\"result\",\"message\":\"ok\",\"ts\":3}");
	TH_CHECK(clirun_wait(&p, 10000) == 0, "exit %d", p.exit_code);
	char *screen = vt_screen(p.out, p.out_len, cols);
	const char *want =
	        "run run_tty_ask\n"
	        "? ask ask_1: Run: ls | options: allow_once (Allow) | answer: runnel reply run_tty_ask ask_1 OPTION\n"
	        "  ask ask_1 answered: allow_once\n"
	        "✓ ok\n";
	TH_CHECK(th_streq(screen, want), "screen\n%s\nwant\n%s", screen, want);
	free(screen);
	clirun_free(&p);
}

/* A run that is queued: tail blocks, prints lines as they come, ends on the result. */
static void test_follow_live(void)
{
	clirun_t p;
	hset_status("run_live", "queued");
	start_tail(&p, ARGS("run_live", "--json"), NULL, 0, 0);
	clirun_pump(&p, 300);
	TH_CHECK(p.out_len == 0 && p.pid > 0, "printed before any line: %s", p.out);
	for (size_t i = 0; i < 4; i++) {
		xadd("runnel", "run_live", th_strf("1700000000000-%zu", i + 1), LINES[i]);
		clirun_pump(&p, 50);
	}
	TH_CHECK(clirun_wait(&p, 10000) == 0, "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(th_streq(p.out, joined(0, 4, NULL)), "got\n%s", p.out);
	clirun_free(&p);

	/* Ctrl-C stops tailing only: exit 130, nothing written to the control stream. */
	hset_status("run_int", "queued");
	start_tail(&p, ARGS("run_int"), NULL, 0, 0);
	clirun_pump(&p, 300);
	int64_t t0 = th_now_ms();
	clirun_signal(&p, SIGINT);
	TH_CHECK(clirun_wait(&p, 5000) == 130, "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(th_now_ms() - t0 < 5000, "took %lld ms", (long long)(th_now_ms() - t0));
	clirun_free(&p);
	redisReply *r = redisCommand(T.c, "EXISTS runnel:{run_int}:ctl");
	TH_CHECK(r && r->integer == 0, "tail wrote a control message");
	freeReplyObject(r);
}

/* The live view under a pseudo-terminal: step rows update in place. */
static void test_tty(void)
{
	const int cols = 100, rows = 40;
	clirun_t p;
	hset_status("run_tty", "running");
	start_tail(&p, ARGS("run_tty"), ARGS("TERM=xterm"), cols, rows);
	clirun_pump(&p, 300);
	xadd("runnel", "run_tty", "1-1", LINES[0]);
	xadd("runnel", "run_tty", "1-2", LINES[1]);
	/* Wait until the running row is on screen (spinner frames keep coming). */
	TH_CHECK(screen_shows(&p, cols, "recipes/add-node.sh  running"), "no running row:\n%s", p.out);
	xadd("runnel", "run_tty", "1-3",
	     "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"evil \\u001b[2J text\\nsecond line\",\"ts\":1}");
	xadd("runnel", "run_tty", "1-4", LINES[2]);
	xadd("runnel", "run_tty", "1-5",
	     "{\"type\":\"step\",\"id\":\"s2\",\"name\":\"recipes/bad.sh\",\"status\":\"running\",\"ts\":2}");
	xadd("runnel", "run_tty", "1-6",
	     "{\"type\":\"step\",\"id\":\"s2\",\"name\":\"recipes/bad.sh\",\"status\":\"failed\",\"error\":\"no such node\",\"durationMs\":1500,\"ts\":3}");
	xadd("runnel", "run_tty", "1-7", LINES[3]);
	TH_CHECK(clirun_wait(&p, 10000) == 0, "exit %d", p.exit_code);
	char *screen = vt_screen(p.out, p.out_len, cols);
	TH_NOTE("final screen:\n%s", screen);
	const char *want =
	        "run run_tty\n"
	        "  Loaded 3 skills\n"
	        "✓ recipes/add-node.sh  succeeded 412ms\n"
	        "  warn: evil  [2J text\n"
	        "  second line\n"
	        "✗ recipes/bad.sh  failed 1.5s  no such node\n"
	        "✓ Added an Inference node\n";
	TH_CHECK(th_streq(screen, want), "screen\n%s\nwant\n%s", screen, want);
	/* The agent's ESC never reached the terminal as an escape. */
	TH_CHECK(!strstr(p.out, "\033[2J"));
	/* The cursor is shown again. */
	TH_CHECK(p.out_len >= 6 && strstr(p.out, "\033[?25h"));
	free(screen);
	clirun_free(&p);
}

/* Columns of a UTF-8 row (every character here is one column wide). */
static int u8_cols(const char *s, size_t n)
{
	int c = 0;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			c++;
	return c;
}

/* A narrow terminal: rows are clipped to the width, never wrapped by the
 * terminal, so in-place updates still land on the right row. */
static void test_tty_narrow(void)
{
	const int cols = 30, rows = 40;
	clirun_t p;
	start_tail(&p, ARGS("run_tty"), NULL, cols, rows);
	TH_CHECK(clirun_wait(&p, 10000) == 0, "exit %d", p.exit_code);
	char *screen = vt_screen(p.out, p.out_len, cols);
	TH_NOTE("narrow screen:\n%s", screen);
	for (const char *l = screen; *l;) {
		size_t n = strcspn(l, "\n");
		TH_CHECK(u8_cols(l, n) < cols, "row too wide: %.*s", (int)n, l);
		l += n + (l[n] == '\n');
	}
	TH_CHECK(strstr(screen, "✓ recipes/…  succeeded 412ms"), "%s", screen);
	TH_CHECK(!strstr(screen, "running"), "a step row was not updated:\n%s", screen);
	free(screen);
	clirun_free(&p);
}

/* A short terminal: a step whose row scrolled off is drawn again below
 * instead of moving the cursor past the top of the screen. */
static void test_tty_scrolled(void)
{
	const int cols = 80, rows = 5;
	clirun_t p;
	hset_status("run_scroll", "running");
	start_tail(&p, ARGS("run_scroll"), NULL, cols, rows);
	xadd("runnel", "run_scroll", "1-1", LINES[1]);
	for (int i = 0; i < 8; i++)
		xadd("runnel", "run_scroll", th_strf("1-%d", i + 2),
		     th_strf("{\"type\":\"log\",\"level\":\"info\",\"message\":\"log %d\",\"ts\":1}", i));
	xadd("runnel", "run_scroll", "1-20", LINES[2]);
	xadd("runnel", "run_scroll", "1-21", LINES[3]);
	TH_CHECK(clirun_wait(&p, 10000) == 0, "exit %d", p.exit_code);
	char *screen = vt_screen_rows(p.out, p.out_len, cols, rows);
	TH_NOTE("short screen (with scrollback):\n%s", screen);
	const char *want =
	        "run run_scroll\n"
	        "recipes/add-node.sh  running";
	TH_CHECK(strstr(screen, want) || strstr(screen, "run run_scroll\n"), "%s", screen);
	const char *tail =
	        "  log 7\n"
	        "✓ recipes/add-node.sh  succeeded 412ms\n"
	        "✓ Added an Inference node\n";
	size_t sl = strlen(screen), tl = strlen(tail);
	TH_CHECK(sl >= tl && strcmp(screen + sl - tl, tail) == 0, "screen ends:\n%s", screen);
	TH_CHECK(strstr(screen, "log 0\n  log 1\n  log 2\n  log 3\n  log 4\n  log 5\n  log 6\n  log 7\n"),
	         "logs damaged:\n%s", screen);
	free(screen);
	clirun_free(&p);
}

/* TERM=dumb on a terminal: the plain view, no escape sequences. */
static void test_tty_dumb(void)
{
	clirun_t p;
	start_tail(&p, ARGS("run_err"), ARGS("TERM=dumb"), 80, 24);
	TH_CHECK(clirun_wait(&p, 10000) == 1, "exit %d", p.exit_code);
	TH_CHECK(!strchr(p.out, '\033'), "%s", p.out);
	TH_CHECK(strstr(p.out, "step    recipes/add-node.sh succeeded 412ms\r\n"), "%s", p.out);
	clirun_free(&p);
}

/* The view's caps: steps tracked (4096), bytes kept of a name (4096),
 * bytes of agent text shown per event (8 MiB).  Past each, output stays
 * correct and bounded. */
static void test_caps(void)
{
	const int nsteps = 4100;
	for (int i = 0; i < nsteps; i++) {
		redisAppendCommand(T.c, "XADD runnel:{run_caps}:out * line %s",
		                   th_strf("{\"type\":\"step\",\"id\":\"s%d\",\"name\":\"s%d\",\"status\":\"running\"}", i, i));
		redisAppendCommand(T.c, "XADD runnel:{run_caps}:out * line %s",
		                   th_strf("{\"type\":\"step\",\"id\":\"s%d\",\"name\":\"s%d\",\"status\":\"succeeded\",\"durationMs\":5}", i, i));
	}
	for (int i = 0; i < 2 * nsteps; i++) {
		redisReply *r = NULL;
		TH_REQUIRE(redisGetReply(T.c, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_STRING);
		freeReplyObject(r);
	}
	char *longname = malloc(5001);
	memset(longname, 'n', 5000);
	longname[5000] = '\0';
	xadd("runnel", "run_caps", "*", th_strf("{\"type\":\"step\",\"id\":\"big\",\"name\":\"%s\",\"status\":\"running\"}", longname));
	size_t big = (9u << 20);
	char *msg = malloc(big + 100);
	int off = snprintf(msg, 100, "{\"type\":\"log\",\"level\":\"info\",\"message\":\"");
	memset(msg + off, 'm', big);
	snprintf(msg + off + big, 20, "\"}");
	xadd("runnel", "run_caps", "*", msg);
	free(msg);
	xadd("runnel", "run_caps", "*", LINES[3]);

	clirun_t p;
	TH_CHECK(run_tail(ARGS("run_caps"), NULL, &p) == 0, "exit %d: %.200s", p.exit_code, p.err);
	/* Every step line, the tracked ones and those past the cap. */
	TH_CHECK(strstr(p.out, "step    s0 succeeded 5ms\n"));
	TH_CHECK(strstr(p.out, "step    s4095 succeeded 5ms\n"));
	TH_CHECK(strstr(p.out, "step    s4099 running\nstep    s4099 succeeded 5ms\n"));
	/* The long name is cut at 4096 bytes (the untracked step shows all of it). */
	char *want_name = th_strf("step    %.*s running\n", 5000, longname);
	TH_CHECK(strstr(p.out, want_name), "long name");
	free(longname);
	/* The 9 MiB message is cut at 8 MiB, marked, and the run still ends. */
	TH_CHECK(p.out_len < (8u << 20) + (1u << 20), "output %zu bytes", p.out_len);
	TH_CHECK(strstr(p.out, "mmmm\n… (cut)\nresult  Added an Inference node\n"), "end: %s",
	         p.out + (p.out_len > 200 ? p.out_len - 200 : 0));
	clirun_free(&p);
}

/* --wait: a run that does not exist yet is waited for. */
static void test_wait(void)
{
	clirun_t p;
	start_tail(&p, ARGS("run_later", "--wait", "--json"), NULL, 0, 0);
	clirun_pump(&p, 500);
	TH_CHECK(waitpid(p.pid, NULL, WNOHANG) == 0, "tail --wait exited early: %s", p.err);
	xadd("runnel", "run_later", "9-1", LINES[3]);
	TH_CHECK(clirun_wait(&p, 10000) == 0, "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(th_streq(p.out, joined(3, 4, NULL)), "got\n%s", p.out);
	clirun_free(&p);
}

/* Redis restarts mid-tail: the tail reconnects and resumes after the last
 * line it showed, so every line appears exactly once. */
static void test_reconnect(void)
{
	th_redis_t r2;
	TH_REQUIRE(th_redis_start(&r2, "appendonly yes\nappendfsync always\n") == 0);
	redisContext *c2 = th_redis_connect(&r2);
	TH_REQUIRE(c2);
	redisReply *rep = redisCommand(c2, "XADD runnel:{run_rc}:out 1-1 line %s", LINES[0]);
	TH_REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
	freeReplyObject(rep);
	redisFree(c2);

	clirun_t p;
	char *env_url = th_strf("RUNNEL_REDIS_URL=%s", r2.url);
	start_tail(&p, ARGS("run_rc", "--json"), ARGS(env_url), 0, 0);
	for (int i = 0; i < 100 && !strstr(p.out, "\n"); i++)
		clirun_pump(&p, 50);
	TH_CHECK(th_streq(p.out, joined(0, 1, NULL)), "before the restart: %s", p.out);
	TH_REQUIRE(th_redis_restart(&r2) == 0);
	c2 = th_redis_connect(&r2);
	TH_REQUIRE(c2);
	for (size_t i = 1; i < 4; i++) {
		/* A restarted Redis answers LOADING until its AOF is read back. */
		int64_t end = th_now_ms() + 10000;
		do {
			rep = redisCommand(c2, "XADD runnel:{run_rc}:out 1-%d line %s", (int)i + 1, LINES[i]);
			if (rep && rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "LOADING", 7)) {
				freeReplyObject(rep);
				rep = NULL;
				usleep(20000);
			}
		} while (!rep && th_now_ms() < end);
		TH_CHECK(rep && rep->type == REDIS_REPLY_STRING, "%s", rep ? rep->str : "no reply");
		if (rep)
			freeReplyObject(rep);
	}
	redisFree(c2);
	TH_CHECK(clirun_wait(&p, 15000) == 0, "exit %d: %s", p.exit_code, p.err);
	TH_CHECK(th_streq(p.out, joined(0, 4, NULL)), "after the restart:\n%s", p.out);
	clirun_free(&p);

	/* Redis gone for good: exit 4 once the 10 s reconnect window is over. */
	c2 = th_redis_connect(&r2);
	TH_REQUIRE(c2);
	rep = redisCommand(c2, "XADD runnel:{run_gone}:out 1-1 line %s", LINES[0]);
	TH_REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
	freeReplyObject(rep);
	redisFree(c2);
	start_tail(&p, ARGS("run_gone", "--json"), ARGS(env_url), 0, 0);
	/* Kill Redis only once the tail is reading (it printed the first line). */
	for (int i = 0; i < 200 && !strchr(p.out, '\n'); i++)
		clirun_pump(&p, 50);
	TH_CHECK(strchr(p.out, '\n'), "the tail never started: %s", p.err);
	th_redis_kill(&r2);
	int64_t t0 = th_now_ms();
	TH_CHECK(clirun_wait(&p, 30000) == 4, "exit %d", p.exit_code);
	TH_CHECK(strncmp(p.err, "runnel tail: lost the connection to Redis: ", 43) == 0, "%s", p.err);
	int64_t took = th_now_ms() - t0;
	TH_CHECK(took >= 9000 && took < 15000, "gave up after %lld ms", (long long)took);
	clirun_free(&p);
}

int main(int argc, char **argv)
{
	cli_redis_start(&T, argc, argv, "test_cli_tail");

	test_json_and_codes();
	test_plain();
	test_asks();
	test_follow_live();
	test_tty();
	test_tty_ask();
	test_tty_narrow();
	test_tty_scrolled();
	test_tty_dumb();
	test_wait();
	test_caps();
	test_reconnect();

	redisFree(T.c);
	return th_done();
}
