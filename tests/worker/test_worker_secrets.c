/*
 * tests/worker/test_worker_secrets.c - jobs the worker must not run and
 * secrets it must not leak.  One worker with a job key that requires
 * sealed jobs:
 *   - undecodable and plaintext jobs go to <topic>.dlq with the exact
 *     reason header and the worker's id, and the next valid job still runs;
 *   - after sealed runs, no OTP, prompt or job key sits in the worker's
 *     log, in any Redis key, or in Redis's AOF; the agent (a command that
 *     dumps its environment, /proc/1/environ and its own environ into
 *     assets/, uploaded by the writeback) sees none of them, nor the
 *     worker's RUNNEL_* settings.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/job.h"

#define KEY_HEX "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static wt_t T;
static uint8_t key[PROTO_JOB_KEY_BYTES];

/* Produces a sealed job for a stub run. */
static void submit_sealed(const char *run_id, const dev_stub_run_t *run, const char *prompt,
                          dev_stub_otps_t *o)
{
	TH_REQUIRE(dev_stub_add_run(T.stub, run, o) == 0);
	proto_job_t j;
	memset(&j, 0, sizeof(j));
	j.v = 1;
	snprintf(j.run_id, sizeof(j.run_id), "%s", run_id);
	j.agent_url = o->agent_url;
	j.otp_setup = o->otp_setup;
	j.otp_run = o->otp_run;
	j.otp_upload = o->otp_upload;
	j.prompt = (char *)prompt;
	j.enqueued_at = th_now_ms();
	char err[256];
	size_t len = 0;
	char *s = proto_job_serialize(&j, key, &len, err, sizeof(err));
	TH_REQUIRE(s, "serialize: %s", err);
	TH_CHECK(!strstr(s, o->otp_run), "sealed job carries no plaintext OTP");
	wt_produce_raw(&T, run_id, s, len);
	free(s);
}

/* The reason proto gives for bytes (what the DLQ header must say). */
static const char *reason_for(const char *bytes, int sealed_required)
{
	static char err[256];
	proto_job_t j;
	int rc = proto_job_parse(bytes, strlen(bytes), key, sealed_required, &j, err, sizeof(err));
	TH_CHECK(rc < 0, "proto refuses %s", bytes);
	return err;
}

static void test_dlq(void)
{
	static const char *const bad[] = {
		"this is not json",
		"{\"v\":1,\"run_id\":\"bad id!\",\"agent_url\":\"http://x\",\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}",
		/* Plaintext OTPs while the worker requires sealing. */
		"{\"v\":1,\"run_id\":\"run_plain\",\"agent_url\":\"http://127.0.0.1:1/ws\",\"otp_setup\":\"plainotp1\",\"otp_run\":\"plainotp2\",\"prompt\":\"p\"}",
	};
	for (size_t i = 0; i < 3; i++)
		wt_produce_raw(&T, "bad", bad[i], strlen(bad[i]));
	/* The next valid job still runs. */
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"echo\"}");
	submit_sealed("run_after_dlq", &run, "still running", &o);
	json_decref(run.config);
	TH_CHECK(wt_wait_terminal(&T, "run_after_dlq", 30000), "valid job after bad ones ran");
	size_t n;
	char **l = wt_lines(&T, "run_after_dlq", &n);
	TH_CHECK(n == 1 && th_streq(wt_field(l[0], "message"), "still running"), "echo result");
	th_strv_free(l, n);

	char dlq[96];
	snprintf(dlq, sizeof(dlq), "%s.dlq", T.topic);
	th_kafka_consumer_t *c = th_kafka_consumer_new(&T.kafka, dlq, NULL);
	TH_REQUIRE(c);
	for (size_t i = 0; i < 3; i++) {
		th_kafka_msg_t m;
		int rc = th_kafka_consumer_next(c, 10000, &m);
		TH_CHECK(rc == 1, "dlq message %zu", i);
		if (rc != 1)
			break;
		TH_CHECK(m.len == strlen(bad[i]) && !memcmp(m.value, bad[i], m.len), "original bytes %zu", i);
		TH_CHECK(th_streq(m.key, "bad"), "key kept");
		const char *want = reason_for(bad[i], 1);
		TH_CHECK(th_streq(th_kafka_msg_header(&m, "reason"), want), "reason \"%s\", want \"%s\"",
		         th_kafka_msg_header(&m, "reason"), want);
		TH_CHECK(th_streq(th_kafka_msg_header(&m, "worker"), "ws1"), "worker header");
		th_kafka_msg_free(&m);
	}
	th_kafka_consumer_free(c);
	TH_CHECK(th_streq(reason_for(bad[1], 1), "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)"));
	TH_CHECK(wt_state(&T, "run_plain", "status")[0] == '\0', "a refused job leaves no state");
}

static int file_has(const char *data, size_t len, const char *needle)
{
	return data && memmem(data, len, needle, strlen(needle));
}

static void test_secrets(void)
{
	char *prompt = th_strf("prompt-secret-%ld", (long)getpid());
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.env_json = "{\"variables\":{\"MY_VAR\":\"my value\"},\"setup_script\":null}";
	run.config = wt_agent_config(
	        "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\","
	        "\"read turn; cd /root/workspace; mkdir -p assets; env > assets/env.txt;"
	        " cat /proc/1/environ > assets/p1.txt 2>&1; cat /proc/self/environ > assets/self.txt 2>&1;"
	        " for p in /proc/[0-9]*; do cat $p/environ; done > assets/all.txt 2>/dev/null;"
	        " echo \\\"$turn\\\" | grep -c prompt-secret > assets/turn.txt;"
	        " echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"dumped\\\"}'\"]}");
	json_object_set_new(run.config, "workspace_api",
	                    json_pack("{s:s,s:s}", "url", "http://127.0.0.1:1/api", "token", "asbx_wstoken"));
	submit_sealed("run_secret", &run, prompt, &o);
	json_decref(run.config);
	TH_REQUIRE(wt_wait_terminal(&T, "run_secret", 30000), "secret run ended");
	TH_CHECK(th_streq(wt_run_code(&T, "run_secret", NULL), ""), "succeeded");

	const char *otps[] = { o.otp_setup, o.otp_run, o.otp_upload };
	static const char *const files[] = { "env.txt", "p1.txt", "self.txt", "all.txt" };
	for (size_t f = 0; f < 4; f++) {
		char *data = NULL;
		size_t len = 0;
		TH_CHECK(dev_stub_file_get(T.stub, o.session, files[f], &data, &len) == 1, "uploaded %s", files[f]);
		for (size_t i = 0; i < 3; i++)
			TH_CHECK(!file_has(data, len, otps[i]), "OTP visible to the agent in %s", files[f]);
		TH_CHECK(!file_has(data, len, KEY_HEX), "job key visible in %s", files[f]);
		TH_CHECK(!file_has(data, len, "RUNNEL_REDIS_URL"), "RUNNEL_REDIS_URL visible in %s", files[f]);
		TH_CHECK(!file_has(data, len, "RUNNEL_KAFKA"), "worker settings visible in %s", files[f]);
		TH_CHECK(!file_has(data, len, T.redis.url), "redis url visible in %s", files[f]);
		TH_CHECK(!file_has(data, len, prompt), "prompt in the environment (%s)", files[f]);
		if (f == 0) {
			TH_CHECK(file_has(data, len, "RUNNEL_RUN_ID=run_secret"), "RUNNEL_RUN_ID set");
			TH_CHECK(file_has(data, len, "MY_VAR=my value"), "/env variable set");
			TH_CHECK(file_has(data, len, "HOME=/root"), "HOME");
			TH_CHECK(file_has(data, len, "RUNNEL_WORKSPACE_API_URL=http://127.0.0.1:1/api"), "workspace api url");
			TH_CHECK(file_has(data, len, "RUNNEL_WORKSPACE_TOKEN=asbx_wstoken"), "workspace api token");
		}
		free(data);
	}
	char *data = NULL;
	size_t len = 0;
	TH_CHECK(dev_stub_file_get(T.stub, o.session, "turn.txt", &data, &len) == 1 && len >= 1 && data[0] == '1',
	         "the agent got its prompt on stdin");
	free(data);

	/* Nothing secret in Redis (keys, values, and the AOF's history). */
	for (size_t i = 0; i < 3; i++) {
		TH_CHECK(wt_scan_contains(&T, otps[i]) == 0, "OTP in Redis");
		TH_CHECK(wt_aof_contains(&T, otps[i]) == 0, "OTP in the AOF");
		TH_CHECK(!wt_log_has(&T, "ws1", otps[i]), "OTP in the worker log");
	}
	TH_CHECK(wt_scan_contains(&T, prompt) == 0, "prompt in Redis");
	TH_CHECK(wt_aof_contains(&T, prompt) == 0, "prompt in the AOF");
	TH_CHECK(!wt_log_has(&T, "ws1", prompt), "prompt in the log");
	TH_CHECK(!wt_log_has(&T, "ws1", KEY_HEX), "job key in the log");
	TH_CHECK(!wt_log_has(&T, "ws1", "asbx_wstoken"), "workspace token in the log");
	TH_CHECK(wt_scan_contains(&T, "asbx_wstoken") == 0, "workspace token in Redis");
}

static void test_bad_config(void)
{
	static const char *const cases[][2] = {
		{ "RUNNEL_SLOTS=0", "RUNNEL_SLOTS: 0 is out of range 1..256" },
		{ "RUNNEL_SANDBOX=docker", "RUNNEL_SANDBOX/--sandbox: \\\"docker\\\" is not bwrap or process" },
		{ "RUNNEL_REQUIRE_SEALED=1", "RUNNEL_REQUIRE_SEALED needs RUNNEL_JOB_KEY" },
		{ "RUNNEL_JOB_KEY=abc", "RUNNEL_JOB_KEY: must be 64 hex digits" },
		{ "RUNNEL_REDIS_URL=http://x", "RUNNEL_REDIS_URL/--redis-url: redis url: must start with redis://" },
		{ "RUNNEL_KAFKA_PROPERTIES=no.such.property=1", "-X no.such.property: No such configuration property: \\\"no.such.property\\\"" },
		{ "RUNNEL_METRICS_LISTEN=nowhere", "RUNNEL_METRICS_LISTEN/--metrics-listen: \\\"nowhere\\\" is not host:port" },
		{ "RUNNEL_WARM=-2", "RUNNEL_WARM: -2 is out of range -1..256" },
		{ "RUNNEL_WARM_INIT=/nonexistent/init", "RUNNEL_WARM_INIT/--warm-init: /nonexistent/init is not an executable file" },
		{ "RUNNEL_UNPACK=/nonexistent/unpack", "RUNNEL_UNPACK/--unpack: /nonexistent/unpack is not an executable file" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *name = th_strf("bad%zu", i);
		const char *env[] = { cases[i][0], NULL };
		pid_t p = wt_worker(&T, name, env);
		int st = 0;
		TH_CHECK(th_wait_exit(p, 10000, &st) == 0, "bad config exits");
		TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: exit 2 (status %d)", cases[i][0], st);
		TH_CHECK(wt_log_has(&T, name, cases[i][1]), "%s: log says %s", cases[i][0], cases[i][1]);
		size_t len = 0;
		char *log = th_file_read(wt_log_path(&T, name), &len);
		size_t lines = 0;
		for (size_t k = 0; log && k < len; k++)
			lines += log[k] == '\n';
		TH_CHECK(lines == 1, "%s: one error line (%zu)", cases[i][0], lines);
		free(log);
	}
}

/* A worker with cgroups and no runnel-unpack next to it (a copy of it
 * alone, its other helpers named) refuses to start: it could not unpack a
 * run's bag inside the run's cgroup. */
static void test_no_unpack(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "# not root: no cgroups, so runnel-unpack is not needed\n");
		return;
	}
	size_t len = 0;
	char *bin = th_file_read(WORKER_BIN, &len);
	TH_REQUIRE(bin && len > 0, "read %s", WORKER_BIN);
	const char *solo = th_strf("%s/solo-runnel-worker", T.dir);
	TH_REQUIRE(th_file_write(solo, bin, len) == 0 && chmod(solo, 0755) == 0, "copy the worker");
	free(bin);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", WORKER_BIN);
	*strrchr(dir, '/') = '\0';
	const char *env[] = { th_strf("RUNNEL_WARM_INIT=%s/runnel-warm-init", dir),
		              th_strf("RUNNEL_EGRESS_BRIDGE=%s/runnel-egress-bridge", dir), NULL };
	pid_t p = wt_worker_bin(&T, solo, "nounpack", env);
	int st = 0;
	TH_CHECK(th_wait_exit(p, 20000, &st) == 0, "the worker without runnel-unpack exits");
	TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit 2 (status %d)", st);
	const char *want = "runnel-unpack not found (RUNNEL_UNPACK/--unpack): the runs' cgroups need it to unpack "
	                   "bags (RUNNEL_CGROUP=off does without)";
	TH_CHECK(wt_log_has(&T, "nounpack", want), "log says: %s", want);
}

/* Flags on the command line: -X, --help, an unknown flag. */
static void test_flags(void)
{
	static const struct {
		const char *a1, *a2;
		int status;
		const char *want;
	} cases[] = {
		{ "-X", "no.such.property=1", 2, "-X no.such.property: No such configuration property" },
		{ "--slots", "x", 2, "--slots: \\\"x\\\" is not an integer" },
		{ "--frobnicate", NULL, 2, "unknown option --frobnicate (see --help)" },
		{ "--help", NULL, 0, "RUNNEL_KAFKA_BROKERS, default localhost:9092" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *log = th_strf("%s/flags%zu.log", T.dir, i);
		char *argv[] = { WORKER_BIN, (char *)cases[i].a1, (char *)cases[i].a2, NULL };
		int st = th_run(argv, NULL, log, 10000);
		TH_CHECK(st >= 0, "%s exits", cases[i].a1);
		TH_CHECK(st == cases[i].status, "%s: exit status %d", cases[i].a1, st);
		TH_CHECK(th_file_contains(log, cases[i].want), "%s: output has %s", cases[i].a1, cases[i].want);
	}
}

int main(void)
{
	th_init("worker_secrets");
	char err[128];
	TH_REQUIRE(proto_job_key_parse(KEY_HEX, key, err, sizeof(err)) == 0);
	wt_setup(&T, "appendonly yes\nappendfsync always\n", 1);
	test_bad_config();
	test_no_unpack();
	test_flags();
	const char *env[] = { "RUNNEL_JOB_KEY=" KEY_HEX, "RUNNEL_REQUIRE_SEALED=true", NULL };
	pid_t w = wt_worker(&T, "ws1", env);
	test_dlq();
	/* unsetenv() leaves the original strings in /proc/<pid>/environ, which
	 * any process of the same user can read (the process sandbox driver). */
	size_t elen = 0;
	char *environ_text = th_file_read(th_strf("/proc/%ld/environ", (long)w), &elen);
	TH_CHECK(environ_text, "read the worker's /proc environ");
	TH_CHECK(environ_text && !memmem(environ_text, elen, KEY_HEX, strlen(KEY_HEX)),
	         "the job key is gone from /proc/<worker>/environ");
	free(environ_text);
	test_secrets();
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
