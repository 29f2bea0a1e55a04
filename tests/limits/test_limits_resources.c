/*
 * tests/limits/test_limits_resources.c - per-run limits end to end on one
 * real runnel-worker with real bwrap and this machine's cgroups: a fork
 * bomb, a memory hog and a disk filler each end resource_limit naming the
 * limit while a normal run beside them succeeds and the worker lives on; a
 * CPU spinner is throttled (a concurrent run's first-line latency is
 * printed, never asserted); a config asking for more than the worker's
 * limit gets a log line and the worker's value; 100 MiB of output over an
 * 8 MiB output cap ends resource_limit with the stream under the cap.
 * The bag is unpacked in the run's cgroup: a 12 MiB bag shows in the
 * run's memory.stat shmem, and one larger than the run's memory_mb ends
 * bag_rejected.
 */
#include "tests/worker/wtest.h"

#include <archive.h>
#include <archive_entry.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static wt_t T;
static pid_t W;

/* A command agent: /bin/sh -c SCRIPT, optional extra config members. */
static void submit_sh(const char *run_id, const char *script, const char *extra_json, long max_runtime)
{
	json_t *argv = json_pack("[s,s,s]", "/bin/sh", "-c", script);
	json_t *agent = json_pack("{s:s,s:o}", "kind", "command", "argv", argv);
	json_t *cfg = json_object();
	json_object_set_new(cfg, "agent", agent);
	if (extra_json) {
		json_error_t e;
		json_t *x = json_loads(extra_json, 0, &e);
		TH_REQUIRE(x, "extra json: %s", e.text);
		json_object_update(cfg, x);
		json_decref(x);
	}
	dev_stub_run_t run = { 0 };
	run.config = cfg;
	dev_stub_otps_t o;
	wt_submit(&T, run_id, &run, "p", 0, max_runtime, &o);
	json_decref(cfg);
}

static void submit_normal(const char *run_id)
{
	wt_submit_agent(&T, run_id, "{\"kind\":\"mock\",\"script\":\"demo\"}", "normal", 0, 0, NULL);
}


static void check_normal(const char *run_id)
{
	char msg[256];
	const char *code = wt_ended(&T, run_id, 60000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, ""), "%s beside a limited run: code \"%s\" (%s)", run_id, code, msg);
	TH_CHECK(th_streq(wt_state(&T, run_id, "status"), "succeeded"), "%s status", run_id);
}

/* The run submitted at t0 ends resource_limit with the message want; what
 * it was and how long it took are printed. */
static void check_limited(const char *run_id, const char *what, int64_t t0, const char *want)
{
	char msg[256];
	const char *code = wt_ended(&T, run_id, 30000, msg, sizeof(msg));
	fprintf(stderr, "# %s ended %s after %lld ms: %s\n", what, code, (long long)(th_now_ms() - t0), msg);
	TH_CHECK(th_streq(code, "resource_limit"), "%s: %s", what, code);
	TH_CHECK(th_streq(msg, want), "%s", msg);
}

static void test_fork_bomb(void)
{
	int64_t t0 = th_now_ms();
	/* The bomb's own shell waits on stdin (which stays open), not with
	 * wait: each level of the bomb returns at once, so a shell that waited
	 * for its one job could exit 0 before the bomb reached the cap, and the
	 * run would end agent_exit, a race the machine's load decides. */
	submit_sh("run_bomb", "read t; b() { b | b & }; b; read t", NULL, 0);
	submit_normal("run_bomb_ok");
	check_limited("run_bomb", "fork bomb", t0, "The run tried to run more than 64 processes at once.");
	TH_CHECK(th_streq(wt_state(&T, "run_bomb", "code"), "resource_limit"));
	check_normal("run_bomb_ok");
	TH_CHECK(th_alive(W), "the worker survived the fork bomb");
}

static void test_memory_hog(void)
{
	int64_t t0 = th_now_ms();
	/* An open step first: it must be closed before the terminal line. */
	submit_sh("run_hog",
	          "read t; echo '{\"type\":\"step\",\"id\":\"s1\",\"name\":\"eat\",\"status\":\"running\"}'; "
	          "tail /dev/zero",
	          NULL, 0);
	submit_normal("run_hog_ok");
	check_limited("run_hog", "memory hog", t0, "The run used more than 64 MiB of memory.");
	TH_CHECK(wt_stream_has(&T, "run_hog", "\"status\":\"failed\""), "the open step was closed");
	check_normal("run_hog_ok");
	TH_CHECK(th_alive(W), "the worker was not OOM-killed");
}

static uint64_t free_bytes(const char *dir)
{
	struct statvfs sv;
	if (statvfs(dir, &sv) != 0)
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

static void test_disk_filler(void)
{
	uint64_t before = free_bytes(T.dir);
	submit_sh("run_fill", "read t; head -c 1073741824 /dev/zero > /root/workspace/big; sleep 60", NULL, 0);
	submit_normal("run_fill_ok");
	char msg[256];
	const char *code = wt_ended(&T, "run_fill", 30000, msg, sizeof(msg));
	uint64_t after = free_bytes(T.dir);
	long long used = (long long)before - (long long)after;
	fprintf(stderr, "# disk filler ended %s: %s; host free space changed by %lld KiB (cap 16 MiB, tried 1 GiB)\n",
	        code, msg, used / 1024);
	TH_CHECK(th_streq(code, "resource_limit"), "disk filler: %s", code);
	TH_CHECK(th_streq(msg, "The run wrote more than 16 MiB to its workspace."), "%s", msg);
	/* Other programs share this disk: allow them some, but never the GiB. */
	TH_CHECK(used < 256LL * 1024 * 1024, "host free space dropped by %lld bytes", used);
	check_normal("run_fill_ok");
	/* A /tmp over its size fails inside the sandbox (ENOSPC), without
	 * ending the run. */
	submit_sh("run_tmp",
	          "read t; if head -c 67108864 /dev/zero > /tmp/big 2>/dev/null; then r=wrote; else r=refused; fi; "
	          "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"tmp $r\\\"}\"",
	          NULL, 0);
	code = wt_ended(&T, "run_tmp", 30000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, ""), "tmp run: %s %s", code, msg);
	TH_CHECK(th_streq(msg, "tmp refused"), "a 64 MiB file in a 16 MiB /tmp: %s", msg);
	TH_CHECK(th_alive(W));
}

/* 100 MiB of 1 KiB lines with limits.output_mb 8: the run ends
 * resource_limit naming the output cap, its stream holds at most 8 MiB of
 * lines plus the one terminal line, which is last. */
static void test_output_cap(void)
{
	submit_sh("run_loud",
	          "read t; m=$(head -c 1000 /dev/zero | tr '\\0' x); "
	          "yes \"{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"$m\\\"}\" | head -n 102400; "
	          "echo '{\"type\":\"result\",\"message\":\"all printed\"}'",
	          "{\"limits\":{\"output_mb\":8}}", 0);
	submit_normal("run_loud_ok");
	check_limited("run_loud", "100 MiB of output", th_now_ms(), "The run printed more than 8 MiB of output (its output cap).");
	TH_CHECK(th_streq(wt_state(&T, "run_loud", "code"), "resource_limit"), "the state hash says so");
	size_t n;
	char **l = wt_lines(&T, "run_loud", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), "resource_limit"), "exactly one terminal line, last");
	unsigned long long total = 0;
	for (size_t i = 0; i + 1 < n; i++)
		total += strlen(l[i]);
	fprintf(stderr, "# output cap: %zu lines, %llu bytes before the terminal line (cap %d)\n", n, total, 8 << 20);
	TH_CHECK(total <= 8ULL << 20, "the stream holds %llu bytes of lines, over the 8 MiB cap", total);
	TH_CHECK(total > 7ULL << 20, "the cap was reached, not something else: %llu bytes", total);
	TH_CHECK(!wt_stream_has(&T, "run_loud", "all printed"), "the agent's result never made it");
	th_strv_free(l, n);
	check_normal("run_loud_ok");
	TH_CHECK(th_alive(W));
}

/* Milliseconds from submit to the first line of a normal run. */
static long first_line_ms(const char *run_id)
{
	int64_t t0 = th_now_ms();
	submit_normal(run_id);
	if (!wt_wait_started(&T, run_id, 60000))
		return -1;
	long ms = (long)(th_now_ms() - t0);
	check_normal(run_id);
	return ms;
}

static void print_throttle(const char *run_id)
{
	const char *paths[] = {
		th_strf("/sys/fs/cgroup/cpu/runnel-%ld-%s/cpu.stat", (long)W, run_id),
		th_strf("/sys/fs/cgroup/runnel-%ld-%s/cpu.stat", (long)W, run_id),
	};
	for (size_t i = 0; i < 2; i++) {
		size_t len;
		char *s = th_file_read(paths[i], &len);
		if (!s)
			continue;
		for (char *p = s; *p; p++)
			if (*p == '\n')
				*p = ' ';
		fprintf(stderr, "# spinner cpu.stat: %s\n", s);
		free(s);
		return;
	}
}

static void test_cpu_spinner(void)
{
	long before = first_line_ms("run_cpu_before");
	/* Three spinners on a two-core machine, limited to 0.2 CPU. */
	submit_sh("run_spin", "read t; for i in 1 2 3; do (while :; do :; done) & done; wait",
	          "{\"limits\":{\"cpus\":0.2}}", 6);
	/* The spinners run once the worker has started the sandbox. */
	int64_t deadline = th_now_ms() + 20000;
	while (th_now_ms() < deadline &&
	       !wt_log_has(&T, "w1", "\"event\":\"agent_started\",\"run_id\":\"run_spin\""))
		usleep(20000);
	long during = first_line_ms("run_cpu_during");
	print_throttle("run_spin");
	fprintf(stderr, "# first-line latency of a normal run: %ld ms alone, %ld ms beside a CPU spinner limited to 0.2 CPU\n",
	        before, during);
	char msg[256];
	const char *code = wt_ended(&T, "run_spin", 30000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, "runtime_cap"), "spinner: %s %s", code, msg);
	TH_CHECK(wt_log_has(&T, "w1", "cpus 0.200"), "the spinner ran with 0.2 CPU");
}

static void test_raise_refused(void)
{
	submit_sh("run_raise",
	          "read t; echo '{\"type\":\"result\",\"message\":\"ok\"}'",
	          "{\"limits\":{\"memory_mb\":4096,\"pids\":32,\"output_mb\":1000}}", 0);
	char msg[256];
	const char *code = wt_ended(&T, "run_raise", 30000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, ""), "raise: %s %s", code, msg);
	TH_CHECK(wt_stream_has(&T, "run_raise",
	                       "limits.memory_mb 4096 is above this worker's limit of 64 MiB; using 64 MiB"),
	         "a log line refuses the raise");
	TH_CHECK(wt_stream_has(&T, "run_raise",
	                       "limits.output_mb 1000 is above this worker's limit of 64 MiB; using 64 MiB"),
	         "the output cap is a ceiling too");
	TH_CHECK(wt_log_has(&T, "w1", "memory 64 MiB, pids 32,"), "the worker's memory limit and the lowered pids were used");
}

/* A zip holding one file of size zero bytes. */
static void make_zip(const char *path, size_t size)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_zip(a);
	TH_REQUIRE(archive_write_open_filename(a, path) == ARCHIVE_OK);
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, "big.bin");
	archive_entry_set_size(e, (la_int64_t)size);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_write_header(a, e);
	char *buf = calloc(1, 1 << 20);
	TH_REQUIRE(buf);
	for (size_t off = 0; off < size; off += 1 << 20)
		archive_write_data(a, buf, size - off < (1 << 20) ? size - off : 1 << 20);
	free(buf);
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
}

static void submit_bag(const char *run_id, const char *blob, const char *script, const char *limits_json)
{
	char url[512];
	dev_stub_blob_url(T.stub, blob, url, sizeof(url));
	json_t *argv = json_pack("[s,s,s]", "/bin/sh", "-c", script);
	json_t *cfg = json_pack("{s:{s:s,s:o},s:{s:s}}", "agent", "kind", "command", "argv", argv, "assets", "zip_url", url);
	if (limits_json) {
		json_error_t e;
		json_t *x = json_loads(limits_json, 0, &e);
		TH_REQUIRE(x, "limits json: %s", e.text);
		json_object_set_new(cfg, "limits", x);
	}
	dev_stub_run_t run = { 0 };
	run.config = cfg;
	dev_stub_otps_t o;
	wt_submit(&T, run_id, &run, "p", 0, 0, &o);
	json_decref(cfg);
}

static int bag_run_started(void *arg)
{
	(void)arg;
	return wt_stream_has(&T, "run_bagmem", "bagged");
}

/* The bag's files are the run's memory: 12 MiB unpacked raise the run's
 * cgroup shmem by as much (the worker's before), and a bag larger than the
 * run's memory_mb is refused. */
static void test_bag_charged(void)
{
	char *zip = th_strf("%s/bag12.zip", T.dir);
	make_zip(zip, 12u << 20);
	TH_REQUIRE(dev_stub_add_blob_file(T.stub, "bag12.zip", zip) == 0);
	submit_bag("run_bagmem", "bag12.zip",
	           "read t; echo '{\"type\":\"step\",\"id\":\"s1\",\"name\":\"bagged\",\"status\":\"running\"}'; "
	           "sleep 60",
	           NULL);
	TH_REQUIRE(th_wait_until(bag_run_started, NULL, 60000), "the bag run started its agent");
	long long shmem = wt_runs_max_shmem(W);
	fprintf(stderr, "# a 12 MiB bag: the run's cgroup shmem is %lld KiB\n", shmem / 1024);
	TH_CHECK(shmem >= 11LL << 20, "the run's cgroup is charged for its bag: shmem %lld", shmem);
	wt_ctl(&T, "run_bagmem", "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
	char msg[256];
	const char *code = wt_ended(&T, "run_bagmem", 30000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, "cancelled"), "bag run: %s %s", code, msg);

	submit_bag("run_bagbig", "bag12.zip", "read t; echo never", "{\"memory_mb\":8}");
	code = wt_ended(&T, "run_bagbig", 60000, msg, sizeof(msg));
	fprintf(stderr, "# a 12 MiB bag with memory_mb 8 ended %s: %s\n", code, msg);
	TH_CHECK(th_streq(code, "bag_rejected"), "bag over memory_mb: %s", code);
	TH_CHECK(th_streq(msg, "The workspace bag was refused: archive does not fit the run's memory limit"), "%s", msg);
	TH_CHECK(th_alive(W), "the worker lives on");
}

static void test_metrics(void)
{
	int port = wt_metrics_port(&T, "w1");
	TH_REQUIRE(port > 0, "metrics port");
	long status = 0;
	char *body = wt_http_get(th_strf("http://127.0.0.1:%d/metrics", port), &status);
	TH_REQUIRE(body && status == 200, "GET /metrics: %ld", status);
	TH_CHECK(strstr(body, "runnel_worker_limit_hits_total{limit=\"processes\"} 1"), "processes hit counted");
	TH_CHECK(strstr(body, "runnel_worker_limit_hits_total{limit=\"memory\"} 1"), "memory hit counted");
	TH_CHECK(strstr(body, "runnel_worker_limit_hits_total{limit=\"disk\"} 1"), "disk hit counted");
	TH_CHECK(strstr(body, "runnel_worker_limit_hits_total{limit=\"output\"} 1"), "output hit counted");
	TH_CHECK(strstr(body, "runnel_worker_runs_total{outcome=\"resource_limit\"} 4"), "outcome counted");
	free(body);
}

int main(void)
{
	const char *env[] = {
		"RUNNEL_RUN_MEMORY_MB=64",
		"RUNNEL_RUN_PIDS=64",
		"RUNNEL_RUN_DISK_MB=16",
		"RUNNEL_RUN_TMP_MB=16",
		"RUNNEL_RUN_CPUS=1",
		NULL,
	};
	W = wt_start(&T, "limits_resources", 4, "w1", env);
	TH_CHECK(wt_log_has(&T, "w1", "\"event\":\"limits\""), "the worker logs its limits at start");
	/* Without a cgroup nothing would stop a fork bomb or a memory hog but
	 * the machine itself: those cases need one. */
	int have_cgroup = wt_log_has(&T, "w1", "cgroup v1") || wt_log_has(&T, "w1", "cgroup v2");
	if (have_cgroup) {
		test_fork_bomb();
		test_memory_hog();
	} else {
		fprintf(stderr, "# skipped the fork bomb and the memory hog: no writable cgroup on this machine\n");
	}
	test_disk_filler();
	test_output_cap();
	test_raise_refused();
	if (have_cgroup) {
		test_cpu_spinner();
		test_metrics();
		test_bag_charged();
	}

	th_stop(W, 20000);
	wt_teardown(&T);
	return th_done();
}
