/*
 * tests/dispatcher/test_backends.c - the dispatcher's side of SPEC §2 for
 * backends, with the real worker, Redis and the mock cluster:
 *
 *   1. 50 concurrent identical POST /v1/runs with one idempotency key: one
 *      202, 49 200 with the same run_id, one job on Kafka, one run; a
 *      /stream with the same key tails that run; the same body with the
 *      run_id given is a repeat too (200, not 409).
 *   2. Bad input: a 400 naming the field for a malformed key, a priority
 *      out of range, a non-W3C traceparent in the body, a webhook that is
 *      not https or names a forbidden address; nothing reaches Kafka.
 *   3. The request's traceparent header reaches the state hash, the
 *      terminal line's trace_id and the sandbox's TRACEPARENT (the run's own
 *      span id); a bad header is dropped with a log line, the run goes on.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/runstate.h"
#include "dev/stub.h"
#include "tests/dispatcher/dtest.h"

#ifndef WORKER_BIN
#error WORKER_BIN must name runnel-worker
#endif

#define TP  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#define TID "0af7651916cd43dd8448eb211c80319c"
#define N   50

static dt_disp_t D;
static redisContext *C;
static dev_stub_t *stub;
static th_kafka_t K;

static const char *const ct[] = { "Content-Type: application/json", NULL };

static char *body_for(const dev_stub_otps_t *o, const char *extra)
{
	return th_strf("{\"agent_url\":\"%s\",\"otp_setup\":\"%s\",\"otp_run\":\"%s\",\"prompt\":\"hi\"%s%s}",
	               o->agent_url, o->otp_setup, o->otp_run, extra ? "," : "", extra ? extra : "");
}

/* A stub run of a command agent; env (may be NULL) is its /env variables. */
static void add_run_env(const char *script, json_t *env, dev_stub_otps_t *o)
{
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	run.config = json_pack("{s:{s:s,s:[s,s,s]}}", "agent", "kind", "command", "argv", "/bin/sh", "-c", script);
	run.env = env;
	TH_REQUIRE(dev_stub_add_run(stub, &run, o) == 0, "stub run");
	json_decref(run.config);
	json_decref(env);
}

static void add_run(const char *script, dev_stub_otps_t *o)
{
	add_run_env(script, NULL, o);
}

/* Messages on the jobs topic, read from the start until 2 s pass with none. */
static int jobs_on_kafka(void)
{
	th_kafka_consumer_t *c = th_kafka_consumer_new(&K, "runnel.jobs", NULL);
	th_kafka_msg_t m;
	int n = 0;
	TH_REQUIRE(c, "consumer");
	while (th_kafka_consumer_next(c, 2000, &m) == 1) {
		n++;
		th_kafka_msg_free(&m);
	}
	th_kafka_consumer_free(c);
	return n;
}

static int key_gone(void *arg)
{
	return th_redis_int(C, -1, "EXISTS %s", (const char *)arg) == 0;
}

static int run_ended(void *arg)
{
	char st[32] = "", err[128];
	return rn_runstate_get(th_rc_for(C), "runnel", arg, "ended_at", st, sizeof(st), err, sizeof(err)) == 1;
}

/* The last line of a run's stream (a static buffer). */
static const char *last_line(const char *run_id)
{
	static char buf[4096];
	char **lines = NULL;
	size_t n = 0;
	buf[0] = '\0';
	if (th_stream_read_all(C, th_strf("runnel:{%s}:out", run_id), &lines, NULL, &n) == 0 && n > 0)
		snprintf(buf, sizeof(buf), "%s", lines[n - 1]);
	th_strv_free(lines, n);
	return buf;
}

static const char *jfield(const char *json, const char *name)
{
	static char buf[512];
	json_t *j = json_loads(json, 0, NULL);
	const char *s = json_string_value(json_object_get(j, name));
	snprintf(buf, sizeof(buf), "%s", s ? s : "");
	json_decref(j);
	return buf;
}

static void bad(const char *extra, const char *want_message)
{
	dev_stub_otps_t o;
	dt_resp_t r;
	add_run("read turn", &o);
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), ct, body_for(&o, extra), -1, 10000) == 0, "post");
	json_t *j = json_loads(r.body, 0, NULL);
	const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	TH_CHECK(r.status == 400 && msg && strcmp(msg, want_message) == 0, "%s: %ld %s (want %s)", extra, r.status,
	         r.body, want_message);
	json_decref(j);
	dt_resp_free(&r);
	TH_CHECK(dev_stub_total_calls(stub, o.session) == 0, "%s: no OTP redeemed", extra);
}

typedef struct all_done_arg {
	dt_stream_t *s;
} all_done_arg_t;

static int all_done(void *arg)
{
	all_done_arg_t *a = arg;
	for (int i = 0; i < N; i++)
		if (!a->s[i].done)
			return 0;
	return 1;
}

static int stream_done(void *arg)
{
	return ((dt_stream_t *)arg)->done;
}

int main(void)
{
	th_redis_t red;
	char err[256];
	dev_stub_otps_t o;
	dt_multi_t m;
	static dt_stream_t s[N];

	dt_servers_start("dispatcher_backends", &red, &K, 2, &C);
	stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(stub, "stub: %s", err);
	TH_REQUIRE(dt_disp_start(&D, &red, &K, NULL) == 0);
	pid_t worker = dt_worker_start(WORKER_BIN, &red, &K, th_tmpdir(), "w-backends", 2);
	TH_REQUIRE(dt_multi_init(&m) == 0);

	/* ---- 1. 50 concurrent identical submits: one run ---- */
	add_run("read turn; echo '{\"type\":\"result\",\"message\":\"once\"}'", &o);
	char *body = body_for(&o, "\"idempotency_key\":\"order-42\",\"tenant\":\"acme\",\"priority\":7");
	for (int i = 0; i < N; i++)
		TH_REQUIRE(dt_stream_open(&m, &s[i], th_strf("%s/v1/runs", D.base), ct, body) == 0, "open %d", i);
	all_done_arg_t all = { s };
	TH_CHECK(dt_multi_until(&m, all_done, &all, 60000), "50 answers");
	int n202 = 0, n200 = 0;
	char first[80] = "";
	for (int i = 0; i < N; i++) {
		const char *id = jfield(s[i].rx.body, "run_id");
		if (s[i].status == 202)
			n202++;
		else if (s[i].status == 200)
			n200++;
		if (!first[0])
			snprintf(first, sizeof(first), "%s", id);
		TH_CHECK(th_streq(id, first), "answer %d names run %s (first %s)", i, id, first);
		dt_stream_close(&m, &s[i]);
	}
	TH_CHECK(n202 == 1 && n200 == N - 1, "one 202 (%d) and %d 200 (%d)", n202, N - 1, n200);
	TH_CHECK(th_wait_until(run_ended, first, 60000), "the run %s ended", first);
	TH_CHECK(th_streq(jfield(last_line(first), "message"), "once"), "it ran: %s", last_line(first));
	TH_CHECK(jobs_on_kafka() == 1, "exactly one job reached Kafka");
	char st[64] = "";
	rn_runstate_get(th_rc_for(C), "runnel", first, "priority", st, sizeof(st), err, sizeof(err));
	TH_CHECK(th_streq(st, "7"), "priority 7 in the state hash (%s)", st);

	/* /stream with the same key tails the first run (to its end). */
	TH_REQUIRE(dt_stream_open(&m, &s[0], th_strf("%s/stream", D.base), ct, body) == 0, "stream repeat");
	TH_CHECK(dt_multi_until(&m, stream_done, &s[0], 30000), "the repeat's stream ends");
	TH_CHECK(s[0].status == 200 && strstr(s[0].rx.body, "\"message\":\"once\""), "it tails the first run: %ld %s",
	         s[0].status, s[0].rx.body);
	dt_stream_close(&m, &s[0]);

	/* The same body with its run_id: a retry of the same enqueue. */
	dev_stub_otps_t o2;
	add_run("read turn; echo '{\"type\":\"result\",\"message\":\"r\"}'", &o2);
	char *b2 = body_for(&o2, "\"idempotency_key\":\"order-43\",\"run_id\":\"run_fixed\"");
	dt_resp_t r;
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), ct, b2, -1, 10000) == 0);
	TH_CHECK(r.status == 202, "first: %ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), ct, b2, -1, 10000) == 0);
	TH_CHECK(r.status == 200 && th_streq(jfield(r.body, "run_id"), "run_fixed"), "retry: %ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_CHECK(th_wait_until(run_ended, "run_fixed", 60000), "run_fixed ended");
	/* A run_id in use under a new key is a conflict, and frees that key. */
	char *b3 = body_for(&o2, "\"idempotency_key\":\"order-44\",\"run_id\":\"run_fixed\"");
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), ct, b3, -1, 10000) == 0);
	TH_CHECK(r.status == 409, "run_id reused under another key: %ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_CHECK(th_wait_until(key_gone, "runnel:idem:{default}:order-44", 5000), "the new key was given back");
	TH_CHECK(jobs_on_kafka() == 2, "one more job on Kafka");

	/* ---- 2. bad input: 400 naming the field, nothing enqueued ---- */
	bad("\"idempotency_key\":\"white space\"", "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
	bad("\"idempotency_key\":17", "idempotency_key: must be a string or null");
	bad("\"priority\":10", "priority: must be an integer from 0 to 9");
	bad("\"priority\":-1", "priority: must be an integer from 0 to 9");
	bad("\"priority\":\"high\"", "priority: must be an integer from 0 to 9");
	bad("\"traceparent\":\"00-abc-def-01\"", "traceparent: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)");
	bad("\"webhook\":\"http://hooks.example/x\"", "webhook: must start with https://");
	bad("\"webhook\":\"https://10.0.0.7/x\"", "webhook: resolves to a private address, which is not allowed");
	bad("\"webhook\":\"https://127.0.0.1:8443/x\"", "webhook: resolves to a loopback address, which is not allowed");
	bad("\"webhook\":\"https://169.254.169.254/x\"", "webhook: resolves to a link-local address, which is not allowed");
	bad("\"webhook\":\"https://[::1]/x\"", "webhook: resolves to a loopback address, which is not allowed");
	/* A name that resolves inside (here: this host's name, through
	 * /etc/hosts) is refused too, after an asynchronous lookup. */
	char host[256] = "";
	struct addrinfo *ai = NULL, hints = { .ai_socktype = SOCK_STREAM };
	if (gethostname(host, sizeof(host)) == 0 && !strchr(host, '.') && getaddrinfo(host, NULL, &hints, &ai) == 0 &&
	    ai->ai_family == AF_INET &&
	    (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127)
		bad(th_strf("\"webhook\":\"https://%s/x\"", host),
		    "webhook: resolves to a loopback address, which is not allowed");
	else
		TH_NOTE("this host's name (%s) does not resolve to a loopback address: name lookup not checked", host);
	if (ai)
		freeaddrinfo(ai);
	TH_CHECK(jobs_on_kafka() == 2, "no bad request reached Kafka");

	/* ---- 3. traceparent from the request header ---- */
	dev_stub_otps_t o3;
	/* OTEL_* from /env pass through untouched; TRACEPARENT is the run's. */
	add_run_env("read turn; printf '{\"type\":\"result\",\"message\":\"tp=%s\",\"otel\":\"%s %s\"}\\n' "
	            "\"$TRACEPARENT\" \"$OTEL_EXPORTER_OTLP_ENDPOINT\" \"$OTEL_SERVICE_NAME\"",
	            json_pack("{s:{s:s,s:s,s:s},s:n}", "variables", "OTEL_EXPORTER_OTLP_ENDPOINT",
	                      "https://otel.example:4318", "OTEL_SERVICE_NAME", "agent-x", "TRACEPARENT",
	                      "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01", "setup_script"),
	            &o3);
	const char *const with_tp[] = { "Content-Type: application/json", "traceparent: " TP, NULL };
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), with_tp, body_for(&o3, "\"run_id\":\"run_tp\""), -1,
	                   10000) == 0);
	TH_CHECK(r.status == 202, "%ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_CHECK(th_wait_until(run_ended, "run_tp", 60000), "run_tp ended");
	const char *last = last_line("run_tp");
	TH_CHECK(th_streq(jfield(last, "trace_id"), TID), "terminal line trace_id: %s", last);
	const char *msg = jfield(last, "message");
	TH_CHECK(strncmp(msg, "tp=00-" TID "-", 6 + 32 + 1) == 0 && strlen(msg) == 3 + 55 &&
	                 !strstr(msg, "b7ad6b7169203331"),
	         "the sandbox's TRACEPARENT (the run's, over the one /env gave): %s", msg);
	TH_CHECK(th_streq(jfield(last, "otel"), "https://otel.example:4318 agent-x"), "OTEL_* passed through: %s", last);
	rn_runstate_get(th_rc_for(C), "runnel", "run_tp", "traceparent", st, sizeof(st), err, sizeof(err));
	TH_CHECK(th_streq(st, TP), "state hash traceparent %s", st);
	TH_REQUIRE(dt_http(&r, "GET", th_strf("%s/v1/runs/run_tp", D.base), NULL, NULL, 0, 10000) == 0);
	TH_CHECK(r.status == 200 && strstr(r.body, "\"traceparent\":\"" TP "\"") && strstr(r.body, "\"priority\":5"),
	         "GET /v1/runs/run_tp: %s", r.body);
	dt_resp_free(&r);

	/* A bad header: dropped with a log line, the run goes on. */
	dev_stub_otps_t o4;
	add_run("read turn; echo '{\"type\":\"result\",\"message\":\"fine\"}'", &o4);
	const char *const bad_tp[] = { "Content-Type: application/json", "traceparent: not-a-trace", NULL };
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), bad_tp, body_for(&o4, "\"run_id\":\"run_badtp\""),
	                   -1, 10000) == 0);
	TH_CHECK(r.status == 202, "a bad traceparent header is not a 400: %ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_CHECK(th_wait_until(run_ended, "run_badtp", 60000), "run_badtp ended");
	TH_CHECK(jfield(last_line("run_badtp"), "trace_id")[0] == '\0', "no trace_id without a trace");
	TH_CHECK(th_file_contains(D.log, "traceparent_dropped"), "the dropped header is logged");

	dt_multi_cleanup(&m);
	th_stop(worker, 30000);
	TH_CHECK(dt_disp_stop(&D), "the dispatcher drained and exited 0 (its lookups freed)");
	dev_stub_stop(stub);
	dt_servers_stop(C, &K);
	return th_done();
}
