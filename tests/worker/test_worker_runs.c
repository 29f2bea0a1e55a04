/*
 * tests/worker/test_worker_runs.c - runs end to end through one worker:
 * the happy paths (mock demo, command agent, writeback), cancel before and
 * during a run, the runtime cap, an agent exit without result, lines after
 * the terminal, bad agent output, and bootstrap / bag failures.
 */
#include "tests/worker/wtest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static wt_t T;

static void test_demo(void)
{
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"demo\"}");
	wt_submit(&T, "run_demo", &run, "add a node", 1, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_terminal(&T, "run_demo", 20000), "demo ended");

	size_t n;
	char **l = wt_lines(&T, "run_demo", &n);
	static const char *const want[][3] = {
		{ "log", "", "" },
		{ "step", "step_1", "running" }, { "step", "step_1", "succeeded" },
		{ "step", "step_2", "running" }, { "step", "step_2", "succeeded" },
		{ "step", "step_3", "running" }, { "step", "step_3", "succeeded" },
		{ "result", "", "" },
	};
	TH_CHECK(n == 8, "demo: %zu lines", n);
	for (size_t i = 0; i < n && i < 8; i++) {
		char type[32], code[32];
		th_line_type(l[i], type, sizeof(type), code, sizeof(code));
		TH_CHECK(th_streq(type, want[i][0]), "line %zu: %s", i, l[i]);
		if (want[i][1][0]) {
			TH_CHECK(th_streq(wt_field(l[i], "id"), want[i][1]), "line %zu id: %s", i, l[i]);
			TH_CHECK(th_streq(wt_field(l[i], "status"), want[i][2]), "line %zu status: %s", i, l[i]);
		}
	}
	if (n >= 1)
		TH_CHECK(th_streq(wt_field(l[0], "message"), "Loaded 3 skills"), "%s", l[0]);
	if (n == 8)
		TH_CHECK(th_streq(wt_field(l[7], "message"), "Done: add a node"), "%s", l[7]);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_demo", "status"), "succeeded"));
	TH_CHECK(th_streq(wt_state(&T, "run_demo", "code"), ""));
	TH_CHECK(th_streq(wt_state(&T, "run_demo", "worker"), "w1"));
	/* No files: no upload request. */
	dev_stub_ep_stats_t st;
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_RESULTS, &st);
	TH_CHECK(st.calls == 0, "results calls %d", st.calls);
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_ENV, &st);
	TH_CHECK(st.calls == 1 && st.ok == 1, "env calls %d ok %d", st.calls, st.ok);
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_CONFIG, &st);
	TH_CHECK(st.calls == 1 && st.ok == 1, "config calls %d ok %d", st.calls, st.ok);
}

static void test_files(void)
{
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"files 3\"}");
	wt_submit(&T, "run_files", &run, "write files", 1, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_terminal(&T, "run_files", 20000), "files ended");
	size_t n;
	char **l = wt_lines(&T, "run_files", &n);
	TH_CHECK(n == 1, "%zu lines", n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "wrote 3 files"), "%s", l[n - 1]);
	th_strv_free(l, n);
	size_t nf = 0;
	char **names = dev_stub_file_names(T.stub, o.session, &nf);
	TH_CHECK(nf == 3, "stub received %zu files", nf);
	int seen = 0;
	for (size_t i = 0; i < nf; i++) {
		if (th_streq(names[i], "file_0.txt") || th_streq(names[i], "file_1.txt") ||
		    th_streq(names[i], "file_2.txt"))
			seen++;
		free(names[i]);
	}
	free(names);
	TH_CHECK(seen == 3, "file names");
	char *data = NULL;
	size_t len = 0;
	TH_CHECK(dev_stub_file_get(T.stub, o.session, "file_1.txt", &data, &len) == 1 &&
	         len == 7 && !memcmp(data, "file 1\n", 7), "file_1 content");
	free(data);
	TH_CHECK(th_streq(wt_state(&T, "run_files", "status"), "succeeded"));
}

static void test_command(void)
{
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	/* A command agent: a shell that reads its turn and prints two lines. */
	run.config = wt_agent_config(
		"{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
		"\"read turn; echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"hi from sh\\\"}';"
		" echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"sh done\\\"}'\"]}");
	wt_submit(&T, "run_cmd", &run, "p", 0, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_terminal(&T, "run_cmd", 20000), "command ended");
	size_t n;
	char **l = wt_lines(&T, "run_cmd", &n);
	TH_CHECK(n == 2, "%zu lines", n);
	if (n == 2) {
		TH_CHECK(th_streq(wt_field(l[0], "message"), "hi from sh"), "%s", l[0]);
		TH_CHECK(th_streq(wt_field(l[1], "message"), "sh done"), "%s", l[1]);
	}
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_cmd", "status"), "succeeded"));
}

int main(void)
{
	th_init("worker_runs");
	wt_setup(&T, NULL, 2);
	pid_t w = wt_worker(&T, "w1", NULL);
	wt_warmup(&T);
	test_demo();
	test_files();
	test_command();
	int st = th_stop(w, 10000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker exit status %d", st);
	wt_teardown(&T);
	return th_done();
}
