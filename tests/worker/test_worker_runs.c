/*
 * tests/worker/test_worker_runs.c - runs end to end through one worker:
 * the happy paths (mock demo, command agent, writeback), cancel before and
 * during a run, the runtime cap, an agent exit without result, lines after
 * the terminal, bad agent output, and bootstrap / bag failures.
 */
#include "tests/worker/wtest.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <curl/curl.h>
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static wt_t T;

/* What the state hash says of a run: its status and, when code is not
 * NULL, its code. */
static void check_state(const char *run_id, const char *status, const char *code)
{
	TH_CHECK(th_streq(wt_state(&T, run_id, "status"), status), "%s status %s, want %s", run_id,
	         wt_state(&T, run_id, "status"), status);
	if (code)
		TH_CHECK(th_streq(wt_state(&T, run_id, "code"), code), "%s code %s, want %s", run_id,
		         wt_state(&T, run_id, "code"), code);
}

static void test_demo(void)
{
	dev_stub_otps_t o;
	wt_submit_agent(&T, "run_demo", "{\"kind\":\"mock\",\"script\":\"demo\"}", "add a node", 1, 0, &o);
	size_t n;
	char **l = wt_ended_lines(&T, "run_demo", 20000, &n);
	static const char *const want[][3] = {
		{ "log", "", "" },
		{ "step", "step_1", "running" },
		{ "step", "step_1", "succeeded" },
		{ "step", "step_2", "running" },
		{ "step", "step_2", "succeeded" },
		{ "step", "step_3", "running" },
		{ "step", "step_3", "succeeded" },
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
	check_state("run_demo", "succeeded", "");
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
	wt_submit_agent(&T, "run_files", "{\"kind\":\"mock\",\"script\":\"files 3\"}", "write files", 1, 0, &o);
	size_t n;
	char **l = wt_ended_lines(&T, "run_files", 20000, &n);
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
	                 len == 7 && !memcmp(data, "file 1\n", 7),
	         "file_1 content");
	free(data);
	check_state("run_files", "succeeded", NULL);
}

static void test_command(void)
{
	/* A command agent: a shell that reads its turn and prints two lines. */
	wt_submit_agent(
	        &T, "run_cmd",
	        "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	        "\"read turn; echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"hi from sh\\\"}';"
	        " echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"sh done\\\"}'\"]}",
	        "p", 0, 0, NULL);
	size_t n;
	char **l = wt_ended_lines(&T, "run_cmd", 20000, &n);
	TH_CHECK(n == 2, "%zu lines", n);
	if (n == 2) {
		TH_CHECK(th_streq(wt_field(l[0], "message"), "hi from sh"), "%s", l[0]);
		TH_CHECK(th_streq(wt_field(l[1], "message"), "sh done"), "%s", l[1]);
	}
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	th_strv_free(l, n);
	check_state("run_cmd", "succeeded", NULL);
}


/* Submits a run of the given agent and waits for its end; returns its lines. */
static char **run_agent(const char *run_id, const char *agent, const dev_stub_run_t *base,
                        int upload, long max_runtime, dev_stub_otps_t *o, size_t *n)
{
	dev_stub_run_t run = { 0 };
	if (base)
		run = *base;
	json_t *cfg = NULL;
	if (agent && !run.config) {
		cfg = wt_agent_config(agent);
		run.config = cfg;
	}
	wt_submit(&T, run_id, &run, "hello", upload, max_runtime, o);
	json_decref(cfg);
	TH_CHECK(wt_wait_terminal(&T, run_id, 30000), "%s ended", run_id);
	return wt_lines(&T, run_id, n);
}

static void check_error(char **l, size_t n, const char *code, const char *message)
{
	TH_CHECK(th_streq(wt_check_terminal(l, n), code), "terminal code, want %s", code);
	if (n && message)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), message), "message: %s", l[n - 1]);
}

/* A client's cancel on the run's control stream. */
static void cancel(const char *run_id)
{
	wt_ctl(&T, run_id, "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
}

static void test_cancel_before_start(void)
{
	dev_stub_otps_t o;
	cancel("run_cancel0");
	size_t n;
	char **l = run_agent("run_cancel0", "{\"kind\":\"mock\",\"script\":\"demo\"}", NULL, 1, 0, &o, &n);
	TH_CHECK(n == 1, "%zu lines", n);
	check_error(l, n, "cancelled", "The run was cancelled (client_closed).");
	th_strv_free(l, n);
	TH_CHECK(dev_stub_total_calls(T.stub, o.session) == 0, "no OTP used: %d calls",
	         dev_stub_total_calls(T.stub, o.session));
	check_state("run_cancel0", "cancelled", "cancelled");
}

/* Processes whose command line has an argument equal to arg. */
static int count_procs_with_arg(const char *arg)
{
	int found = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char *path = th_strf("/proc/%s/cmdline", e->d_name);
		size_t len = 0;
		char *c = th_file_read(path, &len);
		for (size_t i = 0; c && i < len; i += strlen(c + i) + 1)
			if (!strcmp(c + i, arg))
				found++;
		free(c);
	}
	if (d)
		closedir(d);
	return found;
}

static int no_marker(void *arg)
{
	return count_procs_with_arg(arg) == 0;
}

static int has_first_line(void *arg)
{
	size_t n;
	char **l = wt_lines(&T, arg, &n);
	th_strv_free(l, n);
	return n >= 1;
}

static int has_line_count(void *arg)
{
	const char *id = arg;
	size_t n;
	char **l = wt_lines(&T, id, &n);
	th_strv_free(l, n);
	return n >= 2;
}

static void test_cancel_during(void)
{
	dev_stub_otps_t o;
	char *marker = th_strf("37.%ld", (long)getpid() % 100000);
	/* Ignores SIGTERM: the kill must escalate to SIGKILL of the tree. */
	char *agent = th_strf(
	        "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	        "\"trap '' TERM; read t; echo '{\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s1\\\",\\\"name\\\":\\\"wait\\\",\\\"status\\\":\\\"running\\\"}';"
	        " echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"waiting\\\"}'; sleep $0; echo never\",\"%s\"]}",
	        marker);
	/* A file in assets/ would be uploaded after a result; never after a cancel. */
	wt_submit_agent(&T, "run_cancel1", agent, "hello", 1, 0, &o);
	TH_REQUIRE(th_wait_until(has_line_count, "run_cancel1", 20000), "agent started");
	TH_CHECK(count_procs_with_arg(marker) >= 1, "agent process visible");
	int64_t t0 = th_now_ms();
	cancel("run_cancel1");
	TH_CHECK(wt_wait_terminal(&T, "run_cancel1", 10000), "cancel ended the run");
	int64_t took = th_now_ms() - t0;
	TH_CHECK(th_wait_until(no_marker, marker, 2000), "no sandbox process left");
	TH_NOTE("cancel to terminal: %lld ms", (long long)took);
	size_t n;
	char **l = wt_lines(&T, "run_cancel1", &n);
	TH_CHECK(n == 4, "%zu lines", n);
	if (n == 4) {
		TH_CHECK(th_streq(wt_field(l[0], "status"), "running"), "%s", l[0]);
		TH_CHECK(th_streq(wt_field(l[1], "message"), "waiting"), "%s", l[1]);
		/* The open step is closed failed before the terminal line. */
		TH_CHECK(th_streq(wt_field(l[2], "type"), "step") && th_streq(wt_field(l[2], "id"), "s1") &&
		                 th_streq(wt_field(l[2], "status"), "failed") && wt_field(l[2], "error")[0],
		         "%s", l[2]);
	}
	check_error(l, n, "cancelled", "The run was cancelled (client_closed).");
	th_strv_free(l, n);
	dev_stub_ep_stats_t st;
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_RESULTS, &st);
	TH_CHECK(st.calls == 0, "no writeback after cancel (%d)", st.calls);
	check_state("run_cancel1", "cancelled", NULL);
}

/*
 * A run's workspace tmpfs is not in the worker's mount namespace while the
 * run goes on: the sandbox has its own copy (every later bwrap would copy
 * it again).  The agent prints its workspace's device; the worker's
 * mountinfo must not hold it.  Without a workspace tmpfs (a worker that
 * cannot mount) there is nothing to check.
 */
static void test_workspace_detached(pid_t worker)
{
	dev_stub_otps_t o;
	const char *agent = "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	                    "\"read t; d=$(mountpoint -d /root/workspace) || d=none; "
	                    "echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"dev '$d'\\\"}'; "
	                    "echo hi > assets/kept.txt; sleep 1000\"]}";
	wt_submit_agent(&T, "run_detached", agent, "hello", 1, 0, &o);
	TH_REQUIRE(th_wait_until(has_first_line, "run_detached", 20000), "agent started");
	size_t n;
	char **l = wt_lines(&T, "run_detached", &n);
	const char *msg = n ? wt_field(l[0], "message") : "";
	TH_CHECK(!strncmp(msg, "dev ", 4), "first line %s", n ? l[0] : "(none)");
	if (!strncmp(msg, "dev ", 4) && strcmp(msg + 4, "none")) {
		char *mi = th_file_read(th_strf("/proc/%d/mountinfo", (int)worker), NULL);
		TH_REQUIRE(mi);
		/* mountinfo's third field is the device, "0:123". */
		char *needle = th_strf(" %s / ", msg + 4);
		TH_CHECK(!strstr(mi, needle), "the run's workspace (%s) is still mounted in the worker", msg + 4);
		free(mi);
	} else {
		TH_NOTE("no workspace tmpfs here: %s", msg);
	}
	th_strv_free(l, n);
	cancel("run_detached");
	TH_CHECK(wt_wait_terminal(&T, "run_detached", 10000), "cancel ended the run");
}

static void test_runtime_cap(void)
{
	dev_stub_otps_t o;
	size_t n;
	int64_t t0 = th_now_ms();
	char **l = run_agent("run_cap", "{\"kind\":\"mock\",\"script\":\"hang\"}", NULL, 0, 2, &o, &n);
	int64_t took = th_now_ms() - t0;
	TH_CHECK(took >= 2000 && took < 8000, "cap took %lld ms", (long long)took);
	TH_CHECK(n == 2, "%zu lines", n);
	if (n == 2)
		TH_CHECK(th_streq(wt_field(l[0], "message"), "hanging"), "%s", l[0]);
	check_error(l, n, "runtime_cap", "The run reached its runtime cap of 2 seconds and was stopped.");
	th_strv_free(l, n);
	check_state("run_cap", "failed", "runtime_cap");
}

static void test_agent_exit(void)
{
	dev_stub_otps_t o;
	size_t n;
	char **l = run_agent("run_exit", "{\"kind\":\"mock\",\"script\":\"exit 3\"}", NULL, 1, 0, &o, &n);
	TH_CHECK(n == 2, "%zu lines", n);
	if (n == 2)
		TH_CHECK(th_streq(wt_field(l[0], "message"), "exiting without a terminal line"), "%s", l[0]);
	check_error(l, n, "agent_exit", "The agent exited with status 3 without a result.");
	th_strv_free(l, n);

	l = run_agent("run_openexit", "{\"kind\":\"mock\",\"script\":\"open-step-exit\"}", NULL, 0, 0, &o, &n);
	TH_CHECK(n == 3, "%zu lines", n);
	if (n == 3) {
		TH_CHECK(th_streq(wt_field(l[0], "status"), "running"), "%s", l[0]);
		TH_CHECK(th_streq(wt_field(l[1], "id"), "step_open") && th_streq(wt_field(l[1], "status"), "failed"), "%s", l[1]);
	}
	check_error(l, n, "agent_exit", "The agent exited with status 0 without a result.");
	th_strv_free(l, n);

	l = run_agent("run_openres", "{\"kind\":\"mock\",\"script\":\"open-step\"}", NULL, 0, 0, &o, &n);
	TH_CHECK(n == 3, "%zu lines", n);
	if (n == 3)
		TH_CHECK(th_streq(wt_field(l[1], "id"), "step_open") && th_streq(wt_field(l[1], "status"), "failed"), "%s", l[1]);
	check_error(l, n, "", "ended with a step still running");
	th_strv_free(l, n);

	l = run_agent("run_agenterr", "{\"kind\":\"mock\",\"script\":\"error\"}", NULL, 1, 0, &o, &n);
	TH_CHECK(n == 1, "%zu lines", n);
	check_error(l, n, "agent_error", "the mock agent failed on purpose");
	th_strv_free(l, n);
	check_state("run_agenterr", "failed", "agent_error");
}

static void test_after_terminal(void)
{
	dev_stub_otps_t o;
	size_t n;
	char **l = run_agent("run_after", "{\"kind\":\"mock\",\"script\":\"after-terminal\"}", NULL, 0, 0, &o, &n);
	TH_CHECK(n == 1, "%zu lines", n);
	check_error(l, n, "", "first and only result");
	th_strv_free(l, n);
	check_state("run_after", "succeeded", NULL);
}

static void test_garbage(void)
{
	dev_stub_otps_t o;
	size_t n;
	char **l = run_agent("run_garbage", "{\"kind\":\"mock\",\"script\":\"garbage\"}", NULL, 0, 0, &o, &n);
	TH_CHECK(n >= 7, "%zu lines", n);
	size_t warns = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		if (th_streq(wt_field(l[i], "type"), "log") && th_streq(wt_field(l[i], "level"), "warn") &&
		    !strncmp(wt_field(l[i], "message"), "invalid agent output: ", 22))
			warns++;
		else
			TH_NOTE("garbage line %zu: %.200s", i, l[i]);
		TH_CHECK(strlen(l[i]) < 4096, "replacement lines are short (%zu)", strlen(l[i]));
	}
	TH_CHECK(warns >= 6, "%zu warn lines", warns);
	if (n > 5)
		TH_CHECK(strstr(wt_field(l[5], "message"), "line too long"), "%s", l[5]);
	check_error(l, n, "", "garbage done");
	th_strv_free(l, n);
	check_state("run_garbage", "succeeded", NULL);

	l = run_agent("run_stderr", "{\"kind\":\"mock\",\"script\":\"stderr\"}", NULL, 0, 0, &o, &n);
	TH_CHECK(n == 3, "%zu lines", n);
	if (n == 3) {
		TH_CHECK(th_streq(wt_field(l[0], "level"), "warn") && th_streq(wt_field(l[0], "message"), "a line on stderr"), "%s", l[0]);
		TH_CHECK(th_streq(wt_field(l[1], "message"), "another line on stderr"), "%s", l[1]);
	}
	check_error(l, n, "", "wrote to stderr");
	th_strv_free(l, n);
}

/* A zip with one file name -> content (name may climb out: "../evil.txt"). */
static void make_zip(const char *path, const char *name, const char *content)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_zip(a);
	TH_REQUIRE(archive_write_open_filename(a, path) == ARCHIVE_OK);
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_size(e, (la_int64_t)strlen(content));
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_write_header(a, e);
	archive_write_data(a, content, strlen(content));
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
}

/* A stub run of the mock "demo" script whose workspace bag is at url. */
static json_t *bag_config(const char *url)
{
	json_t *cfg = wt_agent_config("{\"kind\":\"mock\",\"script\":\"demo\"}");
	json_object_set_new(cfg, "assets", json_pack("{s:s}", "zip_url", url));
	return cfg;
}

/* The bag lands in /root/workspace, a skill in /root/skills/<name> (read-only). */
static void test_bag_and_skill(void)
{
	char url[256], surl[256];
	char *zip = th_strf("%s/bag.zip", T.dir);
	char *szip = th_strf("%s/skill.zip", T.dir);
	make_zip(zip, "hello.txt", "bag-ok");
	make_zip(szip, "SKILL.md", "skill-ok");
	TH_REQUIRE(dev_stub_add_blob_file(T.stub, "bag.zip", zip) == 0);
	TH_REQUIRE(dev_stub_add_blob_file(T.stub, "skill.zip", szip) == 0);
	dev_stub_blob_url(T.stub, "bag.zip", url, sizeof(url));
	dev_stub_blob_url(T.stub, "skill.zip", surl, sizeof(surl));
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config(
	        "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	        "\"read t; b=$(cat /root/workspace/hello.txt); s=$(cat /root/skills/tables/SKILL.md);"
	        " if touch /root/skills/tables/x 2>/dev/null; then w=writable; else w=readonly; fi;"
	        " echo \\\"{\\\\\\\"type\\\\\\\":\\\\\\\"result\\\\\\\",\\\\\\\"message\\\\\\\":\\\\\\\"$b $s $w\\\\\\\"}\\\"\"]}");
	json_object_set_new(run.config, "assets", json_pack("{s:s}", "zip_url", url));
	json_object_set_new(run.config, "skills", json_pack("[{s:s,s:s}]", "name", "tables", "zip_url", surl));
	dev_stub_otps_t o;
	size_t n;
	char **l = run_agent("run_bag", NULL, &run, 0, 0, &o, &n);
	json_decref(run.config);
	TH_CHECK(n == 1, "%zu lines", n);
	check_error(l, n, "", "bag-ok skill-ok readonly");
	th_strv_free(l, n);
}

/* A run whose bag is one entry named entry: refused bag_rejected with
 * "The workspace bag was refused: " and why, its only line. */
static void evil_bag(const char *run_id, const char *entry, const char *why)
{
	dev_stub_otps_t o;
	size_t n;
	char url[256];
	const char *name = th_strf("%s.zip", run_id);
	char *zip = th_strf("%s/%s", T.dir, name);
	make_zip(zip, entry, "evil");
	TH_REQUIRE(dev_stub_add_blob_file(T.stub, name, zip) == 0);
	dev_stub_blob_url(T.stub, name, url, sizeof(url));
	dev_stub_run_t run = { 0 };
	run.config = bag_config(url);
	char **l = run_agent(run_id, NULL, &run, 1, 0, &o, &n);
	json_decref(run.config);
	TH_CHECK(n == 1, "%s: %zu lines", run_id, n);
	check_error(l, n, "bag_rejected", NULL);
	if (n)
		TH_CHECK(th_streq(wt_field(l[0], "message"), th_strf("The workspace bag was refused: %s", why)), "%s", l[0]);
	th_strv_free(l, n);
}

static void test_bootstrap_failures(void)
{
	dev_stub_otps_t o;
	size_t n;
	char **l;
	char url[256];

	/* A bag with "..": refused.  The entry's name comes back through the
	 * unpacker's answer (one line): a newline in it arrives escaped. */
	evil_bag("run_evil", "../evil.txt", "entry \"../evil.txt\" leaves the workspace");
	evil_bag("run_evil_nl", "../a\nb", "entry \"../a\\x0ab\" leaves the workspace");

	dev_stub_run_t run = { 0 };
	/* A bag that cannot be downloaded. */
	dev_stub_blob_url(T.stub, "missing.zip", url, sizeof(url));
	memset(&run, 0, sizeof(run));
	run.config = bag_config(url);
	l = run_agent("run_nobag", NULL, &run, 1, 0, &o, &n);
	json_decref(run.config);
	check_error(l, n, "bootstrap_failed", NULL);
	if (n)
		TH_CHECK(!strncmp(wt_field(l[0], "message"), "Could not download the workspace bag: ", 38), "%s", l[0]);
	th_strv_free(l, n);

	/* /env answers 500. */
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].status = 500;
	l = run_agent("run_env500", "{\"kind\":\"mock\",\"script\":\"demo\"}", &run, 1, 0, &o, &n);
	check_error(l, n, "bootstrap_failed", NULL);
	if (n) {
		TH_CHECK(!strncmp(wt_field(l[0], "message"), "Could not load the run's setup from the workspace: ", 51), "%s", l[0]);
		TH_CHECK(strstr(l[0], "500"), "names the status: %s", l[0]);
	}
	th_strv_free(l, n);
	dev_stub_ep_stats_t st;
	dev_stub_stats(T.stub, o.session, DEV_STUB_EP_RESULTS, &st);
	TH_CHECK(st.calls == 0, "no writeback after a failed bootstrap");

	/* An unknown agent kind. */
	l = run_agent("run_badkind", "{\"kind\":\"teleport\"}", NULL, 0, 0, &o, &n);
	/* The list of kinds grows with the adapters built in: only its start is fixed. */
	check_error(l, n, "bootstrap_failed", NULL);
	TH_CHECK(n && !strncmp(wt_field(l[n - 1], "message"), "The agent cannot be started: agent.kind \"teleport\" is not supported (command, mock", 82),
	         "%s", n ? l[n - 1] : "-");
	th_strv_free(l, n);

	/* A setup script that fails. */
	memset(&run, 0, sizeof(run));
	run.env_json = "{\"variables\":{},\"setup_script\":\"echo preparing; exit 5\"}";
	l = run_agent("run_setup", "{\"kind\":\"mock\",\"script\":\"demo\"}", &run, 0, 0, &o, &n);
	check_error(l, n, "bootstrap_failed", NULL);
	if (n)
		TH_CHECK(!strncmp(wt_field(l[n - 1], "message"), "The setup script failed", 23), "%s", l[n - 1]);
	for (size_t i = 0; i + 1 < n; i++)
		TH_NOTE("setup line: %s", l[i]);
	th_strv_free(l, n);
}

/* The stderr caps: 8 KiB per line (cut, "..."), RUNNEL_STDERR_MAX per run
 * (1 MiB here), then one truncation notice. */
static void test_stderr_caps(void)
{
	dev_stub_otps_t o;
	size_t n;
	/* One 20000-byte line, then 3000 lines of 399 bytes + newline. */
	char **l = run_agent("run_stderrcap",
	                     "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	                     "\"read t; printf '%20000s\\\\n' x >&2;"
	                     " i=0; while [ $i -lt 3000 ]; do printf '%399s\\\\n' y; i=$((i+1)); done >&2;"
	                     " echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"capped\\\"}'\"]}",
	                     NULL, 0, 0, &o, &n);
	/* 8192 + 2600 * 399 = 1045592 <= 1 MiB; the next line passes the cap. */
	size_t want_b = (1048576 - 8192) / 399;
	TH_CHECK(n == 1 + want_b + 1 + 1, "%zu lines, want %zu", n, 1 + want_b + 2);
	if (n >= 3) {
		const char *m0 = wt_field(l[0], "message");
		TH_CHECK(strlen(m0) == 8192 + 3 && !strcmp(m0 + 8192, "..."), "first line cut at 8 KiB (%zu)", strlen(m0));
		TH_CHECK(th_streq(wt_field(l[1], "level"), "warn") && strlen(wt_field(l[1], "message")) == 399, "%.80s", l[1]);
		TH_CHECK(th_streq(wt_field(l[n - 2], "message"), "stderr truncated: the agent wrote more than 1048576 bytes"),
		         "%.200s", l[n - 2]);
	}
	check_error(l, n, "", "capped");
	th_strv_free(l, n);
}

static double metric(const char *text, const char *series)
{
	const char *p = text;
	size_t sl = strlen(series);
	while (p && (p = strstr(p, series))) {
		if ((p == text || p[-1] == '\n') && p[sl] == ' ')
			return strtod(p + sl + 1, NULL);
		p += sl;
	}
	return -1;
}

static void test_metrics(void)
{
	int port = wt_metrics_port(&T, "w1");
	TH_REQUIRE(port > 0, "metrics address logged");
	wt_check_probe(port, "/healthz", 200, "ok\n");
	wt_check_probe(port, "/readyz", 200, "ok\n");
	long st;
	char *body = wt_http_get(th_strf("http://127.0.0.1:%d/metrics", port), &st);
	TH_REQUIRE(st == 200 && body, "metrics %ld", st);
	TH_CHECK(metric(body, "runnel_worker_runs_total{outcome=\"succeeded\"}") >= 8, "succeeded runs: %g", metric(body, "runnel_worker_runs_total{outcome=\"succeeded\"}"));
	TH_CHECK(metric(body, "runnel_worker_runs_total{outcome=\"cancelled\"}") == 2, "cancelled runs");
	TH_CHECK(metric(body, "runnel_worker_runs_total{outcome=\"runtime_cap\"}") == 1, "capped runs");
	TH_CHECK(metric(body, "runnel_worker_runs_total{outcome=\"agent_exit\"}") == 2, "agent_exit runs");
	TH_CHECK(metric(body, "runnel_worker_runs_total{outcome=\"bag_rejected\"}") == 2, "bag_rejected runs (run_evil, run_evil_nl)");
	TH_CHECK(metric(body, "runnel_worker_slots_total") == 4, "slots total");
	TH_CHECK(metric(body, "runnel_worker_slots_busy") == 0, "slots busy");
	TH_CHECK(metric(body, "runnel_worker_lines_dropped_total") >= 2, "dropped lines");
	TH_CHECK(metric(body, "runnel_worker_lines_invalid_total") >= 6, "invalid lines");
	TH_CHECK(metric(body, "runnel_worker_lines_published_total") >= 30, "published lines");
	TH_CHECK(metric(body, "runnel_worker_queue_wait_seconds_count") >= 10, "queue wait histogram");
	TH_CHECK(metric(body, "runnel_worker_sandbox_start_seconds_count") >= 8, "sandbox start histogram");
	TH_CHECK(metric(body, "runnel_worker_first_line_seconds_count") >= 8, "first line histogram");
	free(body);
}

static int blob_requested(void *arg)
{
	dev_stub_blob_stats_t st;
	return dev_stub_blob_stats(T.stub, arg, &st) == 0 && st.calls >= 1;
}

/* Cancels a run stalled in a request to the stub (what: "download",
 * "upload"): it ends at once, with the cancel as its only line. */
static void cancel_stalled(const char *run_id, const char *what)
{
	int64_t t0 = th_now_ms();
	cancel(run_id);
	TH_CHECK(wt_wait_terminal(&T, run_id, 5000), "cancel ended the %s", what);
	TH_NOTE("cancel during %s to terminal: %lld ms", what, (long long)(th_now_ms() - t0));
	size_t n;
	char **l = wt_lines(&T, run_id, &n);
	TH_CHECK(n == 1, "%zu lines", n);
	check_error(l, n, "cancelled", "The run was cancelled (client_closed).");
	th_strv_free(l, n);
}

/* A cancel during a bag download that does not answer ends the run at once. */
static void test_cancel_during_download(void)
{
	char url[256];
	TH_REQUIRE(dev_stub_add_blob(T.stub, "slow.zip", "PK", 2) == 0);
	dev_stub_fault_t f = { .delay_ms = 60000 };
	TH_REQUIRE(dev_stub_set_blob_fault(T.stub, "slow.zip", &f) == 0);
	dev_stub_blob_url(T.stub, "slow.zip", url, sizeof(url));
	dev_stub_run_t run = { 0 };
	run.config = bag_config(url);
	dev_stub_otps_t o;
	wt_submit(&T, "run_cancel_dl", &run, "hello", 1, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(th_wait_until(blob_requested, "slow.zip", 20000), "download started");
	cancel_stalled("run_cancel_dl", "download");
}

static int results_requested(void *arg)
{
	dev_stub_ep_stats_t st;
	dev_stub_stats(T.stub, arg, DEV_STUB_EP_RESULTS, &st);
	return st.calls >= 1;
}

/* A cancel during an upload that does not answer ends the run cancelled at once. */
static void test_cancel_during_writeback(void)
{
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"files 2\"}");
	run.faults[DEV_STUB_EP_RESULTS].delay_ms = 60000;
	wt_submit(&T, "run_cancel_wb", &run, "write files", 1, 0, &o);
	json_decref(run.config);
	TH_REQUIRE(th_wait_until(results_requested, o.session, 20000), "upload started");
	cancel_stalled("run_cancel_wb", "upload");
	check_state("run_cancel_wb", "cancelled", NULL);
}

/* A burst of tiny invalid lines (thousands per read) is published whole,
 * in order, once each: the batch never outgrows its line cap. */
static void test_tiny_lines(void)
{
	dev_stub_otps_t o;
	size_t n;
	char **l = run_agent("run_tiny",
	                     "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	                     "\"read t; yes x | head -n 30000; echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"tiny\\\"}'\"]}",
	                     NULL, 0, 0, &o, &n);
	TH_CHECK(n == 30001, "%zu lines", n);
	size_t warn = 0;
	for (size_t i = 0; i + 1 < n; i++)
		if (th_streq(wt_field(l[i], "type"), "log") && th_streq(wt_field(l[i], "level"), "warn"))
			warn++;
	TH_CHECK(warn == 30000, "%zu warn lines", warn);
	check_error(l, n, "", "tiny");
	th_strv_free(l, n);
}

static int quiet_dirs; /* count_run_dirs names nothing (a wait polls it) */

/* Entries in the worker's work directory; skip_warm: not the idle warm ones
 * nor the empty trees kept for the next runs. */
static int count_run_dirs(int skip_warm)
{
	DIR *d = opendir(th_strf("%s/work-w1", T.dir));
	int left = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    !(skip_warm && (!strncmp(e->d_name, "warm.", 5) || !strncmp(e->d_name, ".recycled-", 10))))
			left++, quiet_dirs ? (void)0 : TH_NOTE("left behind: %s", e->d_name);
	if (d)
		closedir(d);
	return d ? left : -1;
}

static int run_dirs_gone(void *arg)
{
	(void)arg;
	quiet_dirs = 1;
	int gone = count_run_dirs(1) == 0;
	quiet_dirs = 0;
	return gone;
}

static int worker_reaped_all(void *arg)
{
	return th_zombies_of(*(pid_t *)arg) == 0;
}

int main(void)
{
	pid_t w = wt_start(&T, "worker_runs", 2, "w1", NULL);
	test_demo();
	test_files();
	test_command();
	test_cancel_before_start();
	test_cancel_during();
	test_runtime_cap();
	test_agent_exit();
	test_after_terminal();
	test_garbage();
	test_bootstrap_failures();
	test_bag_and_skill();
	test_stderr_caps();
	test_metrics();
	test_cancel_during_download();
	test_cancel_during_writeback();
	test_tiny_lines();
	test_workspace_detached(w);
	/* Every run's directory is gone (idle warm sandboxes keep theirs). */
	/* (The last run's is removed just after its terminal line.) */
	TH_CHECK(th_wait_until(run_dirs_gone, NULL, 5000), "run directories removed (%d left)", count_run_dirs(1));
	/* Each sandbox's init outlives bwrap and comes back to the worker (a
	 * subreaper, as a container's pid 1 would be), which reaps it: none
	 * stays a zombie there, none reaches this process. */
	TH_CHECK(th_wait_until(worker_reaped_all, &w, 5000), "%d zombie(s) under the worker", th_zombies_of(w));
	TH_CHECK(th_zombies_of(getpid()) == 0, "%d zombie(s) under the test", th_zombies_of(getpid()));
	wt_stop_worker(w, 10000, "worker");
	/* ... and the worker's exit removed those too. */
	TH_CHECK(count_run_dirs(0) == 0, "directories left after the worker stopped (%d)", count_run_dirs(0));
	wt_teardown(&T);
	return th_done();
}
