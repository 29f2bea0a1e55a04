/*
 * tests/stages/test_mock_agent.c - runnel-mock-agent's scripts, run inside
 * the real bwrap sandbox (and the process driver), their output checked
 * line by line with the envelope validator the worker uses.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "common/util.h"
#include "proto/envelope.h"
#include "tests/stages/stages_support.h"
#include "tests/support/harness.h"
#include "worker/sandbox.h"

#define TURN "{\"run_id\":\"run_mock\",\"prompt\":\"Add an inference node\",\"system_prompt\":null," \
	     "\"model\":null,\"skills\":[],\"mcp_servers\":[],\"history\":[]}\n"

static const char *mock_agent;
static const char *ws_dir;

typedef struct verdict {
	size_t lines, valid, invalid, published, dropped;
	int terminated;
	int last_type; /* type of the last published line */
	size_t open_steps_at_end;
	char last_text[512]; /* last published line (truncated) */
	char reasons[1024];  /* invalid reasons, joined */
} verdict_t;

/* Feeds every stdout line through proto_env_process. */
static void judge(const char *out, size_t len, verdict_t *v)
{
	memset(v, 0, sizeof(*v));
	proto_env_t *env = proto_env_new(0);
	TH_REQUIRE(env);
	const char *p = out, *end = out + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		proto_env_line_t ln;
		proto_env_process(env, p, l, rn_now_ms(), &ln);
		v->lines++;
		if (ln.action == PROTO_ENV_PUBLISH) {
			v->published++;
			if (ln.valid) {
				v->valid++;
			} else {
				v->invalid++;
				size_t r = strlen(v->reasons);
				snprintf(v->reasons + r, sizeof(v->reasons) - r, "%s;", ln.reason);
			}
			v->last_type = ln.type;
			snprintf(v->last_text, sizeof(v->last_text), "%.*s", (int)(ln.len < 500 ? ln.len : 500), ln.text);
		}
		p = nl ? nl + 1 : end;
	}
	v->terminated = proto_env_terminated(env);
	v->dropped = (size_t)proto_env_dropped(env);
	v->open_steps_at_end = proto_env_open_steps(env);
	proto_env_free(env);
}

static int run_mock(worker_sandbox_driver_t driver, char *const *argv_tail, const char *input,
                    sbx_out_t *o)
{
	char *bind = th_strf("%s:/run/runnel/mock-agent", mock_agent);
	char *binds[] = { bind, NULL };
	char *argv[8];
	size_t n = 0;
	argv[n++] = driver == WORKER_SANDBOX_BWRAP ? "/run/runnel/mock-agent" : (char *)mock_agent;
	for (size_t i = 0; argv_tail[i] && n < 7; i++)
		argv[n++] = argv_tail[i];
	argv[n] = NULL;
	char *envp[] = { "PATH=/usr/bin:/bin", "RUNNEL_RUN_ID=run_mock", NULL };
	worker_sandbox_spec_t s = sbx_spec(driver, ws_dir, argv, envp);
	s.ro_binds = driver == WORKER_SANDBOX_BWRAP ? binds : NULL;
	/* stdin stays open like the worker's; destroy closes it. */
	return sbx_run(worker_sandbox_spawn, &s, input, 0, 15000, o);
}

static int code_of(const sbx_out_t *o)
{
	return o->exited && WIFEXITED(o->status) ? WEXITSTATUS(o->status) : -1;
}

static void test_demo(worker_sandbox_driver_t driver)
{
	sbx_out_t o;
	int64_t t0 = th_now_ms();
	TH_REQUIRE(run_mock(driver, (char *[]){ "demo", NULL }, TURN, &o) == 0);
	int64_t took = th_now_ms() - t0;
	TH_CHECK(code_of(&o) == 0, "status %d, stderr %s", o.status, o.err);
	verdict_t v;
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.lines == 8, "demo printed %zu lines", v.lines);
	TH_CHECK(v.invalid == 0, "invalid demo lines: %s", v.reasons);
	TH_CHECK(v.terminated && v.last_type == PROTO_ENV_RESULT, "last: %s", v.last_text);
	TH_CHECK(strstr(v.last_text, "Add an inference node"), "result: %s", v.last_text);
	TH_CHECK(v.open_steps_at_end == 0);
	TH_CHECK(took >= 900 && took < 5000, "demo took %lld ms", (long long)took);
	TH_CHECK(o.err_len == 0, "stderr: %s", o.err);
	sbx_out_free(&o);
}

static void test_scripts(void)
{
	sbx_out_t o;
	verdict_t v;

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "echo", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.lines == 1 && v.terminated && v.last_type == PROTO_ENV_RESULT);
	json_t *j = json_loads(v.last_text, 0, NULL);
	TH_CHECK(th_streq(json_string_value(json_object_get(j, "message")), "Add an inference node"),
	         "%s", v.last_text);
	json_decref(j);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "error", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.terminated && v.last_type == PROTO_ENV_ERROR && strstr(v.last_text, "\"code\":\"agent_error\""),
	         "%s", v.last_text);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "no-such-script", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.terminated && strstr(v.last_text, "\"code\":\"unknown_script\""), "%s", v.last_text);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "garbage", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.invalid >= 6, "only %zu invalid lines: %s", v.invalid, v.reasons);
	TH_CHECK(v.terminated && v.last_type == PROTO_ENV_RESULT, "last: %s", v.last_text);
	TH_CHECK(o.out_len > 2u * 1024u * 1024u, "no 2 MB line (%zu bytes)", o.out_len);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "after-terminal", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.terminated && v.published == 1 && v.dropped == 2, "published %zu dropped %zu",
	         v.published, v.dropped);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "exit", "3", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(code_of(&o) == 3, "status %d", o.status);
	TH_CHECK(!v.terminated && v.valid == 1);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "stderr", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.terminated && strstr(o.err, "a line on stderr\n"), "stderr: %s", o.err);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "open-step", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.terminated && v.invalid == 0);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "open-step-exit", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(!v.terminated && v.open_steps_at_end == 1);
	sbx_out_free(&o);

	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "flood 2000", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.lines == 2001 && v.invalid == 0 && v.terminated, "lines %zu", v.lines);
	sbx_out_free(&o);

	/* "files N" writes into the workspace's assets/ from inside the sandbox. */
	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "files", "3", NULL }, TURN, &o) == 0);
	judge(o.out, o.out_len, &v);
	TH_CHECK(v.terminated && v.last_type == PROTO_ENV_RESULT, "%s", v.last_text);
	TH_CHECK(th_file_contains(th_strf("%s/assets/file_2.txt", ws_dir), "file 2"));
	sbx_out_free(&o);

	/* A cancel control line on stdin ends "sleep" at once. */
	int64_t t0 = th_now_ms();
	TH_REQUIRE(run_mock(WORKER_SANDBOX_BWRAP, (char *[]){ "sleep", "30", NULL },
	                    TURN "{\"type\":\"cancel\",\"reason\":\"client_closed\"}\n", &o) == 0);
	TH_CHECK(th_now_ms() - t0 < 5000, "cancel took %lld ms", (long long)(th_now_ms() - t0));
	judge(o.out, o.out_len, &v);
	TH_CHECK(!v.terminated && code_of(&o) == 0);
	sbx_out_free(&o);
}

int main(int argc, char **argv)
{
	th_init("stages_mock_agent");
	TH_REQUIRE(argc == 2, "usage: test_mock_agent MOCK_AGENT");
	mock_agent = argv[1];
	ws_dir = th_tmpdir();
	TH_REQUIRE(ws_dir);
	test_demo(WORKER_SANDBOX_BWRAP);
	test_demo(WORKER_SANDBOX_PROCESS);
	test_scripts();
	return th_done();
}
