/*
 * tests/cli/test_submit_kafka.c - `runnel submit --via kafka` against
 * librdkafka's mock cluster: the job on the topic is exact (key = run id,
 * the v1 fields), sealed when RUNNEL_JOB_KEY is set (no OTP or prompt bytes
 * in the value), OTPs from variables and --otp-file, usage errors, and
 * exit 4 when no broker answers.  No secret is ever printed.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "proto/job.h"
#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

#define KEY_HEX "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define OTP_S   "otp_setup_5ecret_aaaa"
#define OTP_R   "otp_run_5ecret_bbbb"
#define OTP_U   "otp_upload_5ecret_cccc"
#define PROMPT  "Add an inference node, secretly"

static const char *g_bin;
static th_kafka_t g_k;
static char *g_env_brokers;
static char *g_env_topic;

static int run(const char *const *args, const char *const *env, clirun_t *p)
{
	/* The call's env wins over the broker and topic defaults. */
	return clirun_argv(g_bin, ARGS("submit"), args, ARGS(g_env_brokers, g_env_topic), env, 30000, p);
}

static void no_secret_in(const char *what, const char *s)
{
	TH_CHECK(!strstr(s, OTP_S) && !strstr(s, OTP_R) && !strstr(s, OTP_U) && !strstr(s, PROMPT) &&
	                 !strstr(s, KEY_HEX),
	         "a secret in %s: %s", what, s);
}

/* Reads the next job from the topic. */
static int next_job(th_kafka_consumer_t *c, th_kafka_msg_t *m)
{
	return th_kafka_consumer_next(c, 15000, m);
}

static void check_keys(json_t *o, const char *const *keys)
{
	size_t n = 0;
	for (; keys[n]; n++)
		TH_CHECK(json_object_get(o, keys[n]), "missing %s", keys[n]);
	TH_CHECK(json_object_size(o) == n, "%zu keys, want %zu", json_object_size(o), n);
}

int main(int argc, char **argv)
{
	uint8_t key[PROTO_JOB_KEY_BYTES];
	char err[256];
	clirun_t p;
	th_kafka_msg_t m;
	proto_job_t job;
	json_error_t jerr;

	TH_REQUIRE(argc == 2, "usage: test_cli_submit_kafka RUNNEL_BINARY");
	g_bin = argv[1];
	TH_REQUIRE(th_kafka_start(&g_k, 1) == 0);
	/* A topic of its own: on a shared real broker (label kafka) other
	 * tests produce to runnel.jobs too. */
	const char *topic = th_strf("runnel.jobs.%ld", (long)getpid());
	TH_REQUIRE(th_kafka_create_topic(&g_k, topic, 1) == 0);
	g_env_brokers = th_strf("RUNNEL_KAFKA_BROKERS=%s", g_k.bootstrap);
	g_env_topic = th_strf("RUNNEL_JOBS_TOPIC=%s", topic);
	th_kafka_consumer_t *c = th_kafka_consumer_new(&g_k, topic, NULL);
	TH_REQUIRE(c);
	TH_REQUIRE(proto_job_key_parse(KEY_HEX, key, err, sizeof(err)) == 0);

	/* 1. Sealed: OTPs from the variables, key from RUNNEL_JOB_KEY. */
	int64_t t0 = (int64_t)time(NULL) * 1000 - 1000;
	int rc = run(ARGS("--via", "kafka", "--no-tail", "--agent-url", "http://127.0.0.1:9/ws/sess_1",
	                  "--prompt", PROMPT, "--run-id", "run_k1", "--max-runtime-sec", "60"),
	             ARGS("RUNNEL_OTP_SETUP=" OTP_S, "RUNNEL_OTP_RUN=" OTP_R, "RUNNEL_OTP_UPLOAD=" OTP_U,
	                  "RUNNEL_JOB_KEY=" KEY_HEX),
	             &p);
	TH_CHECK(rc == 0, "exit %d: %s", rc, p.err);
	TH_CHECK(th_streq(p.out, "run_k1\n"), "%s", p.out);
	TH_CHECK(p.err_len == 0, "%s", p.err);
	no_secret_in("stdout", p.out);
	no_secret_in("stderr", p.err);
	clirun_free(&p);
	TH_REQUIRE(next_job(c, &m) == 1, "no job on the topic");
	TH_CHECK(th_streq(m.key, "run_k1"), "key %s", m.key);
	TH_CHECK(!memmem(m.value, m.len, OTP_S, strlen(OTP_S)) && !memmem(m.value, m.len, OTP_R, strlen(OTP_R)) &&
	                 !memmem(m.value, m.len, OTP_U, strlen(OTP_U)) && !memmem(m.value, m.len, PROMPT, strlen(PROMPT)),
	         "plaintext secret in the sealed job: %s", m.value);
	json_t *o = json_loadb(m.value, m.len, 0, &jerr);
	TH_REQUIRE(json_is_object(o), "%s", m.value);
	check_keys(o, ARGS("v", "run_id", "agent_url", "caller", "enqueued_at", "max_runtime_sec", "sealed"));
	json_decref(o);
	/* Unsealed parsing refuses it; the key opens it, with every field exact. */
	TH_CHECK(proto_job_parse(m.value, m.len, NULL, 0, &job, err, sizeof(err)) < 0);
	proto_job_clear(&job);
	TH_REQUIRE(proto_job_parse(m.value, m.len, key, 1, &job, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(job.v == 1);
	TH_CHECK(th_streq(job.run_id, "run_k1"));
	TH_CHECK(th_streq(job.agent_url, "http://127.0.0.1:9/ws/sess_1"));
	TH_CHECK(th_streq(job.otp_setup, OTP_S));
	TH_CHECK(th_streq(job.otp_run, OTP_R));
	TH_CHECK(th_streq(job.otp_upload, OTP_U));
	TH_CHECK(th_streq(job.prompt, PROMPT));
	TH_CHECK(th_streq(job.caller, "cli"));
	TH_CHECK(job.max_runtime_sec == 60);
	TH_CHECK(job.enqueued_at > t0 && job.enqueued_at <= (int64_t)time(NULL) * 1000 + 1000);
	proto_job_clear(&job);
	th_kafka_msg_free(&m);

	/* 2. Unsealed, OTPs from --otp-file (a stub's /mint answer), minted run id, JSON output. */
	const char *dir = th_tmpdir();
	TH_REQUIRE(dir);
	char *file = th_strf("%s/mint.json", dir);
	const char *mint = "{\"agent_url\":\"http://127.0.0.1:9/ws/sess_2\",\"otp_setup\":\"" OTP_S
	                   "\",\"otp_run\":\"" OTP_R "\",\"otp_upload\":null,\"session\":\"sess_2\"}";
	TH_REQUIRE(th_file_write(file, mint, strlen(mint)) == 0);
	rc = run(ARGS("--via=kafka", "--no-tail", "--json", "--otp-file", file, "--prompt", PROMPT,
	              "--caller", "backend"),
	         NULL, &p);
	TH_CHECK(rc == 0, "exit %d: %s", rc, p.err);
	no_secret_in("stdout", p.out);
	no_secret_in("stderr", p.err);
	o = json_loads(p.out, 0, &jerr);
	const char *rid = json_string_value(json_object_get(o, "run_id"));
	TH_CHECK(rid && strncmp(rid, "run_", 4) == 0 && strlen(rid) == 26, "%s", p.out);
	char *want_stream = th_strf("runnel:{%s}:out", rid ? rid : "");
	TH_CHECK(th_streq(json_string_value(json_object_get(o, "stream")), want_stream), "%s", p.out);
	char *rid_copy = th_strf("%s", rid ? rid : "");
	json_decref(o);
	clirun_free(&p);
	TH_REQUIRE(next_job(c, &m) == 1, "no second job");
	TH_CHECK(th_streq(m.key, rid_copy), "key %s", m.key);
	o = json_loadb(m.value, m.len, 0, &jerr);
	TH_REQUIRE(json_is_object(o));
	check_keys(o, ARGS("v", "run_id", "agent_url", "otp_setup", "otp_run", "prompt", "caller", "enqueued_at"));
	json_decref(o);
	TH_REQUIRE(proto_job_parse(m.value, m.len, NULL, 0, &job, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_streq(job.run_id, rid_copy));
	TH_CHECK(th_streq(job.agent_url, "http://127.0.0.1:9/ws/sess_2"));
	TH_CHECK(th_streq(job.otp_setup, OTP_S) && th_streq(job.otp_run, OTP_R));
	TH_CHECK(!job.otp_upload);
	TH_CHECK(th_streq(job.prompt, PROMPT));
	TH_CHECK(th_streq(job.caller, "backend"));
	TH_CHECK(job.max_runtime_sec == 0);
	proto_job_clear(&job);
	th_kafka_msg_free(&m);

	/* The backends' fields go into the job. */
	rc = run(ARGS("--via", "kafka", "--no-tail", "--agent-url", "http://h/ws", "--prompt", PROMPT, "--otp-setup",
	              OTP_S, "--otp-run", OTP_R, "--run-id", "run_bk", "--idempotency-key", "turn-9", "--priority",
	              "0", "--traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "--webhook",
	              "https://b.example/h", "--budget-tokens", "700"),
	         NULL, &p);
	TH_CHECK(rc == 0, "exit %d: %s", rc, p.err);
	clirun_free(&p);
	TH_REQUIRE(next_job(c, &m) == 1, "no job with the backends' fields");
	TH_REQUIRE(proto_job_parse(m.value, m.len, NULL, 0, &job, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_streq(job.idempotency_key, "turn-9") && job.has_priority && job.priority == 0 &&
	                 th_streq(job.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") &&
	                 th_streq(job.webhook, "https://b.example/h") && job.max_tokens == 700,
	         "fields of run_bk");
	proto_job_clear(&job);
	th_kafka_msg_free(&m);

	/* 3. Usage errors: exact, exit 2, nothing produced, no secret echoed. */
	const struct {
		const char *const *args;
		const char *err;
	} bad[] = {
		{ ARGS("--via", "kafka", "--prompt", "x"),
		  "runnel submit: --agent-url is required\n" },
		{ ARGS("--via", "kafka", "--agent-url", "http://h/ws", "--otp-setup", OTP_S, "--otp-run", OTP_R),
		  "runnel submit: --prompt is required\n" },
		{ ARGS("--via", "kafka", "--agent-url", "http://h/ws", "--otp-run", OTP_R, "--prompt", PROMPT),
		  "runnel submit: --otp-setup is required\n" },
		{ ARGS("--via", "carrier-pigeon", "--agent-url", "http://h/ws"),
		  "runnel submit: --via: expected dispatcher or kafka, got \"carrier-pigeon\"\n" },
		{ ARGS("--via", "kafka", "--otp-file", "/nonexistent/x.json"),
		  "runnel submit: --otp-file: cannot open /nonexistent/x.json: No such file or directory\n" },
		{ ARGS("--via", "kafka", "--agent-url", "http://h/ws", "--otp-setup", OTP_S, "--otp-run", OTP_R,
		       "--prompt", PROMPT, "--run-id", "no/slash"),
		  "runnel submit: --run-id: invalid run id \"no/slash\" (expected 1-64 of A-Z a-z 0-9 _ -)\n" },
		{ ARGS("--via", "kafka", "--agent-url", "http://h/ws", "--otp-setup", OTP_S, "--otp-run", OTP_R,
		       "--prompt", PROMPT, "--job-key", "abcd"),
		  NULL /* proto's message, checked for prefix below */ },
		{ ARGS("--via", "kafka", "--agent-url", "ftp://h/ws", "--otp-setup", OTP_S, "--otp-run", OTP_R,
		       "--prompt", PROMPT),
		  NULL },
		{ ARGS("extra"), "runnel submit: unexpected argument \"extra\"\n" },
		{ ARGS("--via", "kafka", "--agent-url", "http://h/ws", "--otp-setup", OTP_S, "--otp-run", OTP_R,
		       "--prompt", PROMPT, "--traceparent", "00-zz"),
		  "runnel submit: traceparent: not a W3C traceparent\n" },
		{ ARGS("--via", "kafka", "--agent-url", "http://h/ws", "--otp-setup", OTP_S, "--otp-run", OTP_R,
		       "--prompt", PROMPT, "--idempotency-key", "a b"),
		  "runnel submit: idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -\n" },
	};
	const char *usage = "usage: runnel submit [options] --agent-url URL --prompt TEXT (see runnel submit --help)\n";
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rc = run(bad[i].args, NULL, &p);
		TH_CHECK(rc == 2, "case %zu: exit %d: %s", i, rc, p.err);
		if (bad[i].err)
			TH_CHECK(th_streq(p.err, th_strf("%s%s", bad[i].err, usage)), "case %zu: %s", i, p.err);
		else
			TH_CHECK(strncmp(p.err, "runnel submit: ", 15) == 0 && strstr(p.err, usage), "case %zu: %s", i, p.err);
		no_secret_in("stderr", p.err);
		clirun_free(&p);
	}
	TH_CHECK(th_kafka_consumer_next(c, 500, &m) == 0, "a refused submit produced a job");

	/* 4. No broker: exit 4, quickly with a short message timeout. */
	int port = th_free_port();
	char *env_dead = th_strf("RUNNEL_KAFKA_BROKERS=127.0.0.1:%d", port);
	int64_t t1 = th_now_ms();
	rc = run(ARGS("--via", "kafka", "--no-tail", "--agent-url", "http://h/ws", "--prompt", PROMPT,
	              "-X", "message.timeout.ms=1500"),
	         ARGS(env_dead, "RUNNEL_OTP_SETUP=" OTP_S, "RUNNEL_OTP_RUN=" OTP_R), &p);
	TH_CHECK(rc == 4, "exit %d: %s", rc, p.err);
	TH_CHECK(strstr(p.err, th_strf("runnel submit: cannot deliver the job to Kafka at 127.0.0.1:%d: ", port)) == p.err,
	         "%s", p.err);
	TH_CHECK(th_now_ms() - t1 < 10000);
	no_secret_in("stderr", p.err);
	clirun_free(&p);

	th_kafka_consumer_free(c);
	th_kafka_stop(&g_k);
	return th_done();
}
