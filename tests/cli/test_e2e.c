/*
 * tests/cli/test_e2e.c - the CLI with the real stack: `runnel dev --demo
 * --once` end to end (exit 0, nothing left running, scratch removed), then
 * a `runnel dev` stack used with submit, tail, status and cancel, a job
 * produced with plain kcat, and redis-cli XREAD showing the same lines as
 * `runnel tail`.  Needs runnel-dispatcher, runnel-worker and
 * runnel-mock-agent built next to runnel (CMake registers this test only
 * when those targets exist).
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <jansson.h>

#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

static const char *g_bin;
static char *g_tmp;
static pid_t g_own_child; /* a child of the test itself, not of runnel dev */

/* Live (non-zombie) children of this process, reaping zombies.  With
 * PR_SET_CHILD_SUBREAPER, anything `runnel dev` left behind lands here. */
static int live_descendants(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300], buf[512];
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		char *rp = strrchr(buf, ')');
		char state;
		int ppid;
		if (rp && sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid() && state != 'Z' &&
		    strtol(e->d_name, NULL, 10) != g_own_child) {
			TH_NOTE("left running: %s", buf);
			n++;
		}
	}
	if (d)
		closedir(d);
	return n;
}

static int none_left(void *arg)
{
	(void)arg;
	return live_descendants() == 0;
}

static int dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	if (d)
		closedir(d);
	return n == 0;
}

/* The value after "  <label>" on a banner line, up to the first space. */
static char *banner_field(const char *out, const char *label)
{
	char *needle = th_strf("\n  %s", label);
	const char *p = strstr(out, needle);
	if (!p)
		return NULL;
	p += strlen(needle);
	while (*p == ' ')
		p++;
	size_t n = strcspn(p, " \n");
	return th_strf("%.*s", (int)n, p);
}

static int port_open(const char *url)
{
	const char *c = strrchr(url, ':');
	return th_port_open(c ? (int)strtol(c + 1, NULL, 10) : 0);
}

/* 1. The README's demo, once. */
static void test_demo_once(void)
{
	clirun_t p;
	char *envtmp = th_strf("TMPDIR=%s", g_tmp);
	int64_t t0 = th_now_ms();
	int rc = clirun(ARGS(g_bin, "dev", "--demo", "--once", "--port", "0"), ARGS(envtmp), 120000, &p);
	TH_NOTE("runnel dev --demo --once: exit %d in %lld ms", rc, (long long)(th_now_ms() - t0));
	TH_CHECK(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, p.out, p.err);
	TH_CHECK(strstr(p.out, "runnel dev: the stack is up"), "%s", p.out);
	TH_CHECK(strstr(p.out, "\nresult  "), "no result line:\n%s", p.out);
	TH_CHECK(strstr(p.out, "step    "), "no step line:\n%s", p.out);
	char *redis = banner_field(p.out, "redis");
	TH_CHECK(redis && strncmp(redis, "redis://127.0.0.1:", 18) == 0, "%s", p.out);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "processes left after runnel dev");
	TH_CHECK(dir_empty(g_tmp), "scratch left in %s", g_tmp);
	if (redis)
		TH_CHECK(!port_open(redis), "redis-server still answers at %s", redis);
	clirun_free(&p);
}

/* 2. With RUNNEL_REDIS_URL set, dev uses that Redis (and leaves it running),
 * and --sandbox process runs the demo without isolation. */
static void test_demo_external_redis(void)
{
	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, NULL) == 0);
	g_own_child = r.pid;
	clirun_t p;
	char *envtmp = th_strf("TMPDIR=%s", g_tmp);
	char *envredis = th_strf("RUNNEL_REDIS_URL=%s", r.url);
	int rc = clirun(ARGS(g_bin, "dev", "--demo", "--once", "--port", "0", "--sandbox", "process"),
	                ARGS(envtmp, envredis), 120000, &p);
	TH_CHECK(rc == 0, "exit %d\n%s\n%s", rc, p.out, p.err);
	TH_CHECK(strstr(p.out, th_strf("  redis       %s\n", r.url)), "%s", p.out);
	TH_CHECK(strstr(p.out, "sandbox process"), "%s", p.out);
	const char *d = strstr(p.out, "Demo run ");
	TH_REQUIRE(d, "%s", p.out);
	char *run = th_strf("%.*s", (int)strcspn(d + 9, " "), d + 9);
	redisContext *c = th_redis_connect(&r);
	TH_REQUIRE(c, "the external redis-server was stopped");
	redisReply *rep = redisCommand(c, "HGET runnel:{%s}:state status", run);
	TH_CHECK(rep && rep->type == REDIS_REPLY_STRING && !strcmp(rep->str, "succeeded"), "run %s", run);
	if (rep)
		freeReplyObject(rep);
	redisFree(c);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "processes left after runnel dev");
	TH_CHECK(dir_empty(g_tmp), "scratch left in %s", g_tmp);
	clirun_free(&p);
	th_redis_stop(&r);
	g_own_child = 0;
}

/* 3. A child that dies on its own stops the stack, and whatever it left in
 * its process group goes with it (here a worker that leaves a sleep). */
static void test_child_dies(void)
{
	clirun_t p;
	char *script = th_strf("%s/fake-worker.sh", g_tmp);
	FILE *f = fopen(script, "w");
	TH_REQUIRE(f);
	fputs("#!/bin/sh\nsleep 300 &\nexit 1\n", f);
	fclose(f);
	TH_REQUIRE(chmod(script, 0755) == 0);
	char *envtmp = th_strf("TMPDIR=%s", g_tmp);
	char *envworker = th_strf("RUNNEL_WORKER_BIN=%s", script);
	int rc = clirun(ARGS(g_bin, "dev", "--port", "0", "--sandbox", "process"), ARGS(envtmp, envworker), 60000, &p);
	TH_CHECK(rc == 1, "exit %d\n%s\n%s", rc, p.out, p.err);
	TH_CHECK(strstr(p.err, "runnel dev: worker exited (exit 1)"), "%s", p.err);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "processes left after a child died");
	unlink(script);
	TH_CHECK(dir_empty(g_tmp), "scratch left in %s", g_tmp);
	clirun_free(&p);
}

typedef struct stack {
	clirun_t proc;
	char *dispatcher, *redis, *kafka, *workspace;
	char *env_disp, *env_redis;
} stack_t_;

static int banner_done(void *arg)
{
	stack_t_ *s = arg;
	clirun_pump(&s->proc, 20);
	return strstr(s->proc.out, "runnel submit --otp-file -") || s->proc.pid <= 0 ||
	        waitpid(s->proc.pid, NULL, WNOHANG) != 0;
}

static const char *which(const char *name)
{
	static const char *const dirs[] = { "/usr/bin", "/usr/local/bin", "/bin", NULL };
	for (int i = 0; dirs[i]; i++) {
		char *p = th_strf("%s/%s", dirs[i], name);
		if (access(p, X_OK) == 0)
			return p;
	}
	return NULL;
}

/* POST /mint?agent=NAME on the stub; returns the answer (owned by the harness). */
static char *mint(stack_t_ *s, const char *agent)
{
	clirun_t p;
	char *url = th_strf("%s/mint?agent=%s", s->workspace, agent);
	int rc = clirun(ARGS(which("curl"), "-sf", "-X", "POST", url), NULL, 20000, &p);
	TH_REQUIRE(rc == 0 && p.out_len > 0, "mint %s: %d %s", agent, rc, p.err);
	char *out = th_strf("%s", p.out);
	clirun_free(&p);
	return out;
}

static char *write_tmp(const char *name, const char *text)
{
	char *path = th_strf("%s/%s", th_tmpdir(), name);
	TH_REQUIRE(th_file_write(path, text, strlen(text)) == 0);
	return path;
}

static int run_cli(stack_t_ *s, const char *const *args, clirun_t *p)
{
	return clirun_argv(g_bin, NULL, args, ARGS(s->env_disp, s->env_redis), NULL, 60000, p);
}

/* Lines of text (each ending in \n) as a NULL-terminated array; harness-owned. */
static char **split_lines(const char *text, size_t *n)
{
	size_t cap = 64;
	char **v = calloc(cap, sizeof(*v));
	*n = 0;
	const char *p = text;
	while (*p) {
		size_t l = strcspn(p, "\n");
		if (*n + 1 >= cap)
			v = realloc(v, (cap *= 2) * sizeof(*v));
		v[(*n)++] = th_strf("%.*s", (int)l, p);
		p += l;
		if (*p == '\n')
			p++;
	}
	v[*n] = NULL;
	return v;
}

static void last_line_type(const char *out, char *type, size_t tsz, char *code, size_t csz)
{
	size_t n;
	char **v = split_lines(out, &n);
	type[0] = code[0] = '\0';
	if (n > 0)
		th_line_type(v[n - 1], type, tsz, code, csz);
	free(v);
}

static int state_exists(void *arg)
{
	const char **a = arg;
	redisContext *c = redisConnect("127.0.0.1", (int)strtol(strrchr(a[0], ':') + 1, NULL, 10));
	if (!c || c->err) {
		if (c)
			redisFree(c);
		return 0;
	}
	redisReply *r = redisCommand(c, "HGET runnel:{%s}:state status", a[1]);
	int ok = r && r->type == REDIS_REPLY_STRING && (!a[2] || !strcmp(r->str, a[2]));
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return ok;
}

/* Submits a slow run as run_id, waits until it runs, cancels it with
 * `runnel cancel run_id opt val` and checks that its tail ends cancelled. */
static void cancel_running(stack_t_ *s, const char *run_id, const char *opt, const char *val)
{
	clirun_t p;
	char type[64], code[64];
	char *fs = write_tmp(th_strf("%s.json", run_id), mint(s, "slow"));
	int rc = run_cli(s, ARGS("submit", "--otp-file", fs, "--prompt", "x", "--run-id", run_id, "--no-tail"), &p);
	TH_CHECK(rc == 0 && th_streq(p.out, th_strf("%s\n", run_id)), "submit %s: %d %s %s", run_id, rc, p.out, p.err);
	clirun_free(&p);
	const char *wr[] = { s->redis, run_id, "running" };
	TH_CHECK(th_wait_until(state_exists, wr, 30000), "the slow run %s never ran", run_id);
	rc = run_cli(s, ARGS("cancel", run_id, opt, val), &p);
	TH_CHECK(rc == 0, "cancel %s %s %s: %d %s", run_id, opt, val, rc, p.err);
	clirun_free(&p);
	rc = run_cli(s, ARGS("tail", run_id, "--json"), &p);
	TH_CHECK(rc == 1, "tail cancelled %s: %d", run_id, rc);
	last_line_type(p.out, type, sizeof(type), code, sizeof(code));
	TH_CHECK(th_streq(type, "error") && th_streq(code, "cancelled"), "%s", p.out);
	clirun_free(&p);
}

static void test_stack(void)
{
	stack_t_ s;
	memset(&s, 0, sizeof(s));
	char *agents = th_strf("%s/agents", th_tmpdir());
	TH_REQUIRE(mkdir(agents, 0700) == 0);
	const char *demo = "{\"config\":{\"agent\":{\"kind\":\"mock\",\"script\":\"demo\"}}}";
	const char *slow = "{\"config\":{\"agent\":{\"kind\":\"mock\",\"script\":\"sleep 60\"}}}";
	TH_REQUIRE(th_file_write(th_strf("%s/demo.json", agents), demo, strlen(demo)) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/slow.json", agents), slow, strlen(slow)) == 0);

	char *envtmp = th_strf("TMPDIR=%s", g_tmp);
	TH_REQUIRE(clirun_start(&s.proc, ARGS(g_bin, "dev", "--port", "0", "--agents", agents), ARGS(envtmp), 0, 0) == 0);
	TH_REQUIRE(th_wait_until(banner_done, &s, 60000), "no banner");
	TH_REQUIRE(strstr(s.proc.out, "runnel submit --otp-file -"), "stack did not start:\n%s\n%s",
	           s.proc.out, s.proc.err);
	s.dispatcher = banner_field(s.proc.out, "dispatcher");
	s.redis = banner_field(s.proc.out, "redis");
	s.kafka = banner_field(s.proc.out, "kafka");
	s.workspace = banner_field(s.proc.out, "workspace");
	TH_REQUIRE(s.dispatcher && s.redis && s.kafka && s.workspace, "%s", s.proc.out);
	s.env_disp = th_strf("RUNNEL_DISPATCHER_URL=%s", s.dispatcher);
	s.env_redis = th_strf("RUNNEL_REDIS_URL=%s", s.redis);
	clirun_t p;
	char type[32], code[64];

	/* submit (through the dispatcher) + follow: the result, exit 0. */
	char *f1 = write_tmp("m1.json", mint(&s, "demo"));
	int rc = run_cli(&s, ARGS("submit", "--otp-file", f1, "--prompt", "Add an inference node", "--json"), &p);
	TH_CHECK(rc == 0, "submit: %d %s\n%s", rc, p.err, p.out);
	json_error_t jerr;
	json_t *head = json_loadb(p.out, strcspn(p.out, "\n"), 0, &jerr);
	const char *rid = json_string_value(json_object_get(head, "run_id"));
	TH_REQUIRE(rid, "%s", p.out);
	char *run1 = th_strf("%s", rid);
	json_decref(head);
	char *submit_lines = th_strf("%s", strchr(p.out, '\n') + 1);
	last_line_type(submit_lines, type, sizeof(type), code, sizeof(code));
	TH_CHECK(th_streq(type, "result"), "last line %s:\n%s", type, submit_lines);
	clirun_free(&p);

	/* The two command lines the banner prints work as pasted. */
	const char *l1 = strstr(s.proc.out, "Start a run and stream it (NDJSON):\n  ");
	const char *l2 = strstr(s.proc.out, "or with the CLI:\n  ");
	TH_REQUIRE(l1 && l2, "%s", s.proc.out);
	l1 = strchr(l1, '\n') + 3;
	l2 = strchr(l2, '\n') + 3;
	char *paste1 = th_strf("%.*s", (int)strcspn(l1, "\n"), l1);
	char *paste2 = th_strf("%.*s", (int)strcspn(l2, "\n"), l2);
	rc = clirun(ARGS("/bin/bash", "-c", paste1), NULL, 60000, &p);
	TH_CHECK(rc == 0, "pasted curl line: %d %s", rc, p.err);
	last_line_type(p.out, type, sizeof(type), code, sizeof(code));
	TH_CHECK(th_streq(type, "result"), "pasted curl line printed:\n%s", p.out);
	clirun_free(&p);
	rc = clirun(ARGS("/bin/bash", "-c", paste2), NULL, 60000, &p);
	TH_CHECK(rc == 0, "pasted runnel line: %d %s\n%s", rc, p.err, p.out);
	TH_CHECK(strstr(p.out, "\nresult  "), "%s", p.out);
	clirun_free(&p);

	/* tail of the finished run: the same lines, exit 0; status succeeded. */
	rc = run_cli(&s, ARGS("tail", run1, "--json"), &p);
	TH_CHECK(rc == 0, "tail: %d %s", rc, p.err);
	TH_CHECK(th_streq(p.out, submit_lines), "tail\n%s\nsubmit\n%s", p.out, submit_lines);
	clirun_free(&p);
	rc = run_cli(&s, ARGS("status", run1, "--json"), &p);
	TH_CHECK(rc == 0 && strstr(p.out, "\"status\":\"succeeded\""), "%s", p.out);
	clirun_free(&p);

	/* redis-cli XREAD shows the same lines. */
	char *key = th_strf("runnel:{%s}:out", run1);
	const char *rcli = which("redis-cli");
	TH_REQUIRE(rcli, "redis-cli not installed");
	rc = clirun(ARGS(rcli, "-u", s.redis, "--raw", "XREAD", "COUNT", "1000", "STREAMS", key, "0"), NULL, 20000, &p);
	TH_CHECK(rc == 0, "redis-cli: %s", p.err);
	size_t n;
	char **v = split_lines(submit_lines, &n);
	TH_CHECK(n >= 2);
	for (size_t i = 0; i < n; i++) {
		char *needle = th_strf("\n%s\n", v[i]);
		TH_CHECK(strstr(p.out, needle), "redis-cli lacks line %zu: %s\n%s", i, v[i], p.out);
	}
	free(v);
	clirun_free(&p);

	/* A job produced with plain kcat runs (the worker claims it; tail sees the result). */
	json_t *m = json_loads(mint(&s, "demo"), 0, &jerr);
	TH_REQUIRE(m);
	json_t *job = json_pack("{s:i, s:s, s:O, s:O, s:O, s:O, s:s}", "v", 1, "run_id", "run_kcat1",
	                        "agent_url", json_object_get(m, "agent_url"), "otp_setup", json_object_get(m, "otp_setup"),
	                        "otp_run", json_object_get(m, "otp_run"), "otp_upload", json_object_get(m, "otp_upload"),
	                        "prompt", "hello from kcat");
	char *job_text = json_dumps(job, JSON_COMPACT);
	char *jf = write_tmp("job.json", job_text);
	free(job_text);
	json_decref(job);
	json_decref(m);
	const char *kcat = which("kcat");
	TH_REQUIRE(kcat, "kcat not installed");
	rc = clirun(ARGS(kcat, "-P", "-b", s.kafka, "-t", "runnel.jobs", "-k", "run_kcat1", jf), NULL, 30000, &p);
	TH_CHECK(rc == 0, "kcat: %d %s", rc, p.err);
	clirun_free(&p);
	const char *wa[] = { s.redis, "run_kcat1", NULL };
	TH_CHECK(th_wait_until(state_exists, wa, 30000), "the kcat job was never claimed");
	rc = run_cli(&s, ARGS("tail", "run_kcat1", "--json"), &p);
	TH_CHECK(rc == 0, "tail kcat run: %d %s\n%s", rc, p.err, p.out);
	last_line_type(p.out, type, sizeof(type), code, sizeof(code));
	TH_CHECK(th_streq(type, "result"), "%s", p.out);
	clirun_free(&p);

	/* A run whose setup OTP is wrong ends with an error: submit and tail exit 1. */
	m = json_loads(mint(&s, "demo"), 0, &jerr);
	json_object_set_new(m, "otp_setup", json_string("otp_00000000000000000000000000000000"));
	char *bad_text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	char *fb = write_tmp("bad.json", bad_text);
	free(bad_text);
	rc = run_cli(&s, ARGS("submit", "--otp-file", fb, "--prompt", "x", "--run-id", "run_badotp", "--json"), &p);
	TH_CHECK(rc == 1, "submit with a bad OTP: %d\n%s", rc, p.out);
	clirun_free(&p);
	rc = run_cli(&s, ARGS("tail", "run_badotp", "--json"), &p);
	TH_CHECK(rc == 1, "tail: %d", rc);
	last_line_type(p.out, type, sizeof(type), code, sizeof(code));
	TH_CHECK(th_streq(type, "error") && th_streq(code, "bootstrap_failed"), "%s", p.out);
	clirun_free(&p);

	/* The dispatcher refuses a run: exit 1 with its message, no secret echoed. */
	char *f2 = write_tmp("m2.json", mint(&s, "demo"));
	rc = run_cli(&s, ARGS("submit", "--otp-file", f2, "--prompt", "x", "--max-runtime-sec", "600000"), &p);
	TH_CHECK(rc == 1, "refused submit: %d %s", rc, p.err);
	TH_CHECK(strncmp(p.err, "runnel submit: the dispatcher refused the run (400): ", 53) == 0 &&
	                 strstr(p.err, "max_runtime_sec"),
	         "%s", p.err);
	TH_CHECK(!strstr(p.err, "otp_") && p.out_len == 0, "%s%s", p.out, p.err);
	clirun_free(&p);

	/* Unknown run: 3. */
	rc = run_cli(&s, ARGS("tail", "run_never_was"), &p);
	TH_CHECK(rc == 3, "tail unknown: %d", rc);
	clirun_free(&p);

	/* cancel a running run (Redis control stream, then via the dispatcher). */
	cancel_running(&s, "run_slow", "--reason", "test");
	cancel_running(&s, "run_slow2", "--via", "dispatcher");
	rc = run_cli(&s, ARGS("cancel", "run_nope", "--via", "dispatcher"), &p);
	TH_CHECK(rc == 3, "cancel unknown via dispatcher: %d %s", rc, p.err);
	clirun_free(&p);

	/* Ctrl-C stops the stack: exit 0, nothing left, scratch removed. */
	clirun_signal(&s.proc, SIGINT);
	rc = clirun_wait(&s.proc, 30000);
	TH_CHECK(rc == 0, "runnel dev after SIGINT: %d\n%s", rc, s.proc.err);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "processes left after Ctrl-C");
	TH_CHECK(dir_empty(g_tmp), "scratch left in %s", g_tmp);
	TH_CHECK(!port_open(s.redis), "redis-server still answers");
	clirun_free(&s.proc);
}

int main(int argc, char **argv)
{
	TH_REQUIRE(argc == 2, "usage: test_cli_e2e RUNNEL_BINARY");
	g_bin = argv[1];
	TH_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	g_tmp = th_strf("%s", th_tmpdir());
	test_demo_once();
	test_demo_external_redis();
	test_child_dies();
	test_stack();
	return th_done();
}
