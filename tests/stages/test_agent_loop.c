/*
 * tests/stages/test_agent_loop.c - the agent I/O loop (worker/agent_loop.c)
 * on its own, with an in-memory line sink and stop source, agents started
 * by the process driver: stderr written right before the result reaches
 * the sink every time (200 runs), an ask answered through the inbox reaches
 * the agent on stdin, an unanswered ask expires, and a cancel stops the
 * loop.  The pattern for testing an adapter without Redis or Kafka.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/util.h"
#include "proto/envelope.h"
#include "tests/support/harness.h"
#include "tests/stages/stages_support.h"
#include "worker/agent.h"
#include "worker/agent_loop.h"
#include "worker/inbox.h"
#include "worker/sandbox.h"

static const char *mock_agent;
static const char *ws_dir;

/* The sink: the envelope validator plus a record of what was published. */
typedef struct sink {
	proto_env_t *env;
	char lines[32][512];
	size_t n;
	int stderr_lines;
	worker_inbox_t *inbox; /* replies pushed from here (as the control thread would) */
	const char *reply;     /* pushed when the ask opens, or NULL */
	int cancel_on_ask;
	worker_stopword_t stop;
} sink_t;

static void record(sink_t *s, const char *line, size_t len)
{
	if (s->n < 32)
		snprintf(s->lines[s->n], sizeof(s->lines[0]), "%.*s", (int)(len < 500 ? len : 500), line);
	s->n++;
}

static void s_line(void *arg, const char *line, size_t len)
{
	sink_t *s = arg;
	proto_env_line_t out;
	proto_env_process(s->env, line, len, rn_now_ms(), &out);
	if (out.action != PROTO_ENV_PUBLISH)
		return;
	record(s, out.text, out.len);
	if (out.valid && out.type == PROTO_ENV_ASK) {
		if (s->reply) {
			proto_ctl_t ctl;
			char err[128];
			TH_REQUIRE(proto_ctl_parse(s->reply, strlen(s->reply), &ctl, err, sizeof(err)) == 0, "%s", err);
			TH_REQUIRE(worker_inbox_push(s->inbox, &ctl) == 0);
		}
		if (s->cancel_on_ask)
			worker_stopword_request(&s->stop, WORKER_STOP_CANCEL);
	}
}

static void s_stderr(void *arg, const char *line, size_t len, int cut)
{
	sink_t *s = arg;
	(void)cut;
	s->stderr_lines++;
	record(s, line, len);
}

static int s_terminated(void *arg)
{
	return proto_env_terminated(((sink_t *)arg)->env);
}

static int s_settle(void *arg, const worker_agent_reply_t *r)
{
	sink_t *s = arg;
	char *line = NULL;
	size_t len = 0;
	proto_ask_rc_t rc = proto_env_settle_ask(s->env, r->ask_id, r->expired ? "expired" : r->reject ? "rejected"
	                                                                                               : "answered",
	                                         r->option, r->text, rn_now_ms(), &line, &len);
	if (rc == PROTO_ASK_SETTLED) {
		record(s, line, len);
		free(line);
	}
	return (int)rc;
}

static const char *s_oldest(void *arg, int64_t *opened)
{
	return proto_env_oldest_ask(((sink_t *)arg)->env, opened);
}

static worker_stop_t s_stop(void *arg)
{
	return worker_stopword_reason(&((sink_t *)arg)->stop);
}

/* Runs argv (process driver) through the loop with the command adapter. */
static worker_loop_end_t run_loop(char *const *argv, const char *mode, int64_t ask_timeout_ms,
                                  sink_t *s)
{
	int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	TH_REQUIRE(wake >= 0);
	memset(s->lines, 0, sizeof(s->lines));
	s->n = 0;
	s->stderr_lines = 0;
	s->env = proto_env_new(0);
	s->inbox = worker_inbox_new(wake);
	worker_stopword_init(&s->stop);
	proto_env_allow_asks(s->env, !strcmp(mode, "ask"));

	proto_job_t job;
	worker_boot_t boot;
	memset(&job, 0, sizeof(job));
	memset(&boot, 0, sizeof(boot));
	job.prompt = "make assets";
	worker_agent_ctx_t actx = { .run_id = "run_loop", .job = &job, .boot = &boot, .permission_mode = mode, .ask_timeout_sec = ask_timeout_ms / 1000 };

	char *envp[] = { "PATH=/usr/bin:/bin", NULL };
	worker_sandbox_spec_t spec = sbx_spec(WORKER_SANDBOX_PROCESS, ws_dir, argv, envp);
	worker_sandbox_t sb;
	char err[256];
	TH_REQUIRE(worker_sandbox_spawn(&spec, &sb, err, sizeof(err)) == 0, "%s", err);

	worker_line_sink_t sink = { .arg = s, .line = s_line, .stderr_line = s_stderr, .terminated = s_terminated, .settle = s_settle, .oldest_ask = s_oldest };
	worker_stop_source_t stop = { .arg = s, .wake_fd = wake, .stop = s_stop, .inbox = s->inbox };
	worker_loop_params_t p = { .run_id = "run_loop", .ops = worker_agent_find("command"), .actx = &actx, .cap_deadline = rn_mono_ms() + 20000, .kill_grace_ms = 500, .line_max = 1 << 20, .ask_timeout_ms = ask_timeout_ms };
	worker_loop_end_t end = worker_agent_loop(&p, &sb, &sink, &stop);
	if (sb.stdin_fd >= 0) {
		close(sb.stdin_fd);
		sb.stdin_fd = -1;
	}
	worker_sandbox_destroy(&sb);
	proto_env_free(s->env);
	worker_inbox_free(s->inbox);
	close(wake);
	return end;
}

static const char *field(const char *line, const char *name)
{
	static char buf[512];
	json_t *j = json_loads(line, 0, NULL);
	const char *v = json_string_value(json_object_get(j, name));
	snprintf(buf, sizeof(buf), "%s", v ? v : "");
	json_decref(j);
	return buf;
}

static void test_stderr_race(void)
{
	char *argv[] = { (char *)mock_agent, "stderr-race", NULL };
	int missing = 0;
	for (int i = 0; i < 200; i++) {
		sink_t s;
		memset(&s, 0, sizeof(s));
		TH_CHECK(run_loop(argv, "bypass", 0, &s) == WORKER_LOOP_EXITED, "run %d ended", i);
		if (s.stderr_lines != 1 || s.n != 2)
			missing++, TH_NOTE("run %d: %zu lines, %d on stderr", i, s.n, s.stderr_lines);
	}
	TH_CHECK(missing == 0, "stderr lost in %d of 200 runs", missing);
}

static void test_ask(const char *reply, const char *settled, const char *step, int64_t timeout_ms)
{
	char *argv[] = { (char *)mock_agent, "ask", NULL };
	sink_t s;
	memset(&s, 0, sizeof(s));
	s.reply = reply;
	TH_CHECK(run_loop(argv, "ask", timeout_ms, &s) == WORKER_LOOP_EXITED, "ended");
	TH_CHECK(s.n == 6, "%zu lines", s.n);
	if (s.n == 6) {
		TH_CHECK(!strcmp(field(s.lines[2], "status"), "open"), "%s", s.lines[2]);
		TH_CHECK(!strcmp(field(s.lines[3], "type"), "ask") && !strcmp(field(s.lines[3], "status"), settled),
		         "%s", s.lines[3]);
		TH_CHECK(!strcmp(field(s.lines[4], "status"), step), "%s", s.lines[4]);
		TH_CHECK(!strcmp(field(s.lines[5], "type"), "result"), "%s", s.lines[5]);
	}
}

static void test_cancel(void)
{
	char *argv[] = { (char *)mock_agent, "ask", NULL };
	sink_t s;
	memset(&s, 0, sizeof(s));
	s.cancel_on_ask = 1;
	int64_t t0 = rn_mono_ms();
	TH_CHECK(run_loop(argv, "ask", 0, &s) == WORKER_LOOP_CANCEL, "cancelled");
	TH_CHECK(rn_mono_ms() - t0 < 5000, "stopped in %lld ms", (long long)(rn_mono_ms() - t0));
	TH_CHECK(s.n == 3, "%zu lines (nothing after the stop)", s.n);
}

int main(int argc, char **argv)
{
	th_init("stages_agent_loop");
	TH_REQUIRE(argc == 2, "usage: test_agent_loop MOCK_AGENT");
	mock_agent = argv[1];
	ws_dir = th_tmpdir();
	TH_REQUIRE(ws_dir);
	signal(SIGPIPE, SIG_IGN);
	test_stderr_race();
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}", "answered", "succeeded", 0);
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true}", "rejected", "failed", 0);
	test_ask(NULL, "expired", "failed", 300);
	test_cancel();
	return th_done();
}
