/*
 * tests/worker/test_worker_sandbox.c - a hostile run through the real
 * worker (as root, as CI runs it): its /env variables never reach a host
 * process, the loader's variables are dropped with a log line, and the run
 * still ends normally.  Run warm (the default) and cold (RUNNEL_WARM=0).
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static wt_t T;

/* Whether one of the n lines is a log line whose message is msg. */
static int has_log(char **l, size_t n, const char *msg)
{
	for (size_t i = 0; i < n; i++) {
		char type[32], code[32];
		th_line_type(l[i], type, sizeof(type), code, sizeof(code));
		if (th_streq(type, "log") && th_streq(wt_field(l[i], "message"), msg))
			return 1;
	}
	return 0;
}

/*
 * A run whose /env sets LD_PRELOAD to a library that marks every process
 * loading it (at a path the host can load, as the bag's would be): no
 * marker on the host, a log line per dropped variable, and the agent's
 * environment without them.
 */
static void test_preload(void)
{
	const char *marks = th_tmpdir();
	TH_REQUIRE(marks);
	const char *script = "read turn; printf '{\"type\":\"result\",\"message\":\"preload=%s gconv=%s\"}\\n' "
	                     "\"${LD_PRELOAD:-none}\" \"${GCONV_PATH:-none}\"";
	json_t *agent = json_pack("{s:s, s:[s,s,s]}", "kind", "command", "argv", "/bin/sh", "-c", script);
	char *agent_json = json_dumps(agent, JSON_COMPACT);
	json_decref(agent);
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config(agent_json);
	free(agent_json);
	run.env_json = th_strf("{\"variables\":{\"LD_PRELOAD\":\"%s\",\"RUNNEL_TEST_MARKER_DIR\":\"%s\","
	                       "\"GCONV_PATH\":\"/tmp\",\"KEEP_ME\":\"1\"},\"setup_script\":null}",
	                       RUNNEL_TEST_PRELOAD_SO, marks);
	dev_stub_otps_t o;
	wt_submit(&T, "run_preload", &run, "p", 0, 0, &o);
	json_decref(run.config);
	size_t n;
	char **l = wt_ended_lines(&T, "run_preload", 20000, &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "the run did not end normally");
	TH_CHECK(n >= 1 && th_streq(wt_field(l[n - 1], "message"), "preload=none gconv=none"), "last line: %s",
	         n ? l[n - 1] : "(none)");
	TH_CHECK(has_log(l, n, "the /env variable LD_PRELOAD is not passed to the agent "
	                       "(loader and libc variables never are)"),
	         "no log line for LD_PRELOAD");
	TH_CHECK(has_log(l, n, "the /env variable GCONV_PATH is not passed to the agent "
	                       "(loader and libc variables never are)"),
	         "no log line for GCONV_PATH");
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_preload", "status"), "succeeded"), "status %s",
	         wt_state(&T, "run_preload", "status"));
	TH_CHECK(th_count_files(marks) == 0, "the run's LD_PRELOAD was loaded by %d process(es) on the host",
	         th_count_files(marks));
}

/* A root worker whose sandboxes' uid could not reach RUNNEL_WORK_DIR
 * refuses to start, naming the directory, instead of failing every run. */
static void test_unreachable_work_dir(void)
{
	if (geteuid() != 0)
		return;
	const char *tmp = th_tmpdir();
	TH_REQUIRE(tmp);
	char *locked = th_strf("%s/locked", tmp);
	TH_REQUIRE(mkdir(locked, 0700) == 0);
	char *log = th_strf("%s/unreachable.log", tmp);
	const char *env[] = { th_strf("RUNNEL_WORK_DIR=%s/work", locked), "RUNNEL_KAFKA_BROKERS=127.0.0.1:1",
		              "RUNNEL_REDIS_URL=redis://127.0.0.1:1", NULL };
	char *argv[] = { WORKER_BIN, NULL };
	pid_t p = th_spawn(argv, env, log);
	TH_REQUIRE(p > 0, "spawn worker");
	int st = 0;
	TH_CHECK(th_wait_exit(p, 10000, &st) == 0, "the worker exits");
	TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit 2 (status %d)", st);
	TH_CHECK(th_file_contains(log, th_strf("RUNNEL_WORK_DIR: %s/ is not searchable by uid 65534 "
	                                       "(RUNNEL_SANDBOX_UID), which the sandboxes run as: give it o+x",
	                                       locked)),
	         "the log names the directory");
}

int main(void)
{
	pid_t w = wt_start(&T, "worker_sandbox", 1, "w1", NULL);
	test_preload();
	test_unreachable_work_dir();
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
