/*
 * tests/dispatcher/test_api.c - every non-streaming route of the real
 * runnel-dispatcher, with auth off: enqueue (the job on Kafka equals the
 * request), duplicate ids, the state hash, cancel, health, metrics, CORS,
 * and the exact JSON error of each kind of bad request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>

#include "proto/job.h"
#include "tests/dispatcher/dtest.h"

static dt_disp_t D;

static char *url(const char *path)
{
	return th_strf("%s%s", D.base, path);
}

static const char *const JSON_CT[] = { "Content-Type: application/json", NULL };

/* POST path with body; checks status and (when want_body) the exact body. */
static void expect(const char *method, const char *path, const char *const *hdrs, const char *body,
                   long len, long status, const char *want_body)
{
	dt_resp_t r;

	TH_CHECK(dt_http(&r, method, url(path), hdrs, body, len, 15000) == 0, "%s %s", method, path);
	TH_CHECK(r.status == status, "%s %s: status %ld, want %ld (%s)", method, path, r.status, status, r.body);
	if (want_body)
		TH_CHECK(strcmp(r.body, want_body) == 0, "%s %s:\n got  %s want %s", method, path, r.body, want_body);
	dt_resp_free(&r);
}

static void bad_body(const char *body, long len, const char *message)
{
	char *want = th_strf("{\"error\":{\"code\":\"bad_request\",\"message\":\"%s\"}}\n", message);

	expect("POST", "/v1/runs", JSON_CT, body, len, 400, want);
}

/*
 * Sends head and then body_n bytes of body on a fresh connection, all of
 * it before reading, and reads until the dispatcher closes it (or 5 s
 * pass); the bytes read, NUL-terminated, malloc'd.  A send that fails (the
 * dispatcher reset the connection) is a failed check.
 */
static char *raw_exchange_body(const char *head, const char *body, size_t body_n)
{
	struct timeval tv = { 5, 0 };
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	int fd = th_dial(D.port);
	ssize_t k;

	TH_REQUIRE(buf && fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	TH_CHECK(th_send_all(fd, head, strlen(head)) == 0 && th_send_all(fd, body, body_n) == 0,
	         "sent all %zu bytes of the body", body_n);
	while (n < cap - 1 && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	close(fd);
	return buf;
}

static char *raw_exchange(const char *bytes)
{
	return raw_exchange_body(bytes, "", 0);
}

static void test_bad_requests(void)
{
	const char *good = "\"agent_url\":\"http://127.0.0.1:9/ws/s\",\"otp_setup\":\"a\",\"otp_run\":\"b\"";
	size_t n = 600 * 1024, big_n = 20u << 20;
	char *prompt = malloc(n + 256), *big = malloc(big_n);
	size_t off;

	TH_REQUIRE(prompt && big);
	bad_body("", 0, "body: empty (expected a JSON object)");
	bad_body("{oops", -1, "body: not valid JSON (line 1, column 5)");
	bad_body("[{\"agent_url\":\"http://x/y\"}]", -1, "body: must be a JSON object");
	bad_body(th_strf("{%s}", good), -1, "prompt: missing");
	bad_body("{\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}", -1, "agent_url: missing");
	bad_body(th_strf("{%s,\"prompt\":true}", good), -1, "prompt: must be a string");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"max_runtime_sec\":\"x\"}", good), -1,
	         "max_runtime_sec: must be a positive integer");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"no/slash\"}", good), -1,
	         "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)");
	bad_body("{\"agent_url\":\"http://x/y\",\"otp_setup\":\"a\",\"otp_run\":\"b\\nX-Evil: 1\",\"prompt\":\"p\"}", -1,
	         "otp_run: only visible ASCII characters (0x21-0x7e) are allowed");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"tenant\":\"acme corp\"}", good), -1,
	         "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"tenant\":\"\"}", good), -1, "tenant: empty");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"prompt\":\"q\"}", good), -1, "prompt: duplicate key");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"colour\":1}", good), -1, "colour: unknown field");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"otp_upload\":[]}", good), -1, "otp_upload: must be a string or null");
	bad_body("{\"agent_url\":\"file:///etc/passwd\",\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}", -1,
	         "agent_url: must start with http:// or https://");
	off = (size_t)snprintf(prompt, 256, "{%s,\"prompt\":\"", good);
	memset(prompt + off, 'p', n);
	snprintf(prompt + off + n, 256, "\"}");
	bad_body(prompt, -1, "prompt: longer than 524288 bytes");
	free(prompt);

	/* Under the body cap but over the job cap (PROTO_JOB_MAX_BYTES). */
	{
		size_t pn = 500 * 1024, mn = 420 * 1024;
		char *b = malloc(pn + mn + 512);
		size_t o;

		TH_REQUIRE(b);
		o = (size_t)snprintf(b, 256, "{%s,\"prompt\":\"", good);
		memset(b + o, 'p', pn);
		o += pn;
		o += (size_t)snprintf(b + o, 64, "\",\"meta\":{\"blob\":\"");
		memset(b + o, 'm', mn);
		o += mn;
		snprintf(b + o, 16, "\"}}");
		expect("POST", "/v1/runs", JSON_CT, b, -1, 413, NULL);
		{
			dt_resp_t rr;

			TH_CHECK(dt_http(&rr, "POST", url("/v1/runs"), JSON_CT, b, -1, 15000) == 0 && rr.status == 413);
			TH_CHECK(strncmp(rr.body, "{\"error\":{\"code\":\"payload_too_large\",\"message\":\"job: too large (", 62) == 0,
			         "%s", rr.body);
			dt_resp_free(&rr);
		}
		free(b);
	}

	/* Over the 1 MiB body cap: 413 before any parsing. */
	memset(big, ' ', big_n);
	big[0] = '{';
	big[big_n - 1] = '}';
	expect("POST", "/v1/runs", JSON_CT, big, (long)big_n, 413, NULL);
	/* A caller that sends its whole body before it reads gets the 413 too,
	 * not a reset: the dispatcher takes the body and drops it. */
	{
		char *got = raw_exchange_body(th_strf("POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		                                      "Content-Length: %zu\r\n\r\n",
		                                      big_n),
		                              big, big_n);

		TH_CHECK(strncmp(got, "HTTP/1.1 413 ", 13) == 0, "%.40s", got);
		free(got);
	}
	free(big);

	expect("POST", "/v1/runs", (const char *const[]){ "Content-Type: text/plain", NULL }, "{}", -1, 415,
	       "{\"error\":{\"code\":\"unsupported_media_type\",\"message\":\"content-type: must be application/json\"}}\n");
	expect("GET", "/nope", NULL, NULL, 0, 404,
	       "{\"error\":{\"code\":\"not_found\",\"message\":\"route: no such route\"}}\n");
	expect("GET", "/v1/runs/x/other", NULL, NULL, 0, 404, NULL);
	expect("GET", "/v1/runs/bad.id", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"run_id: must match [A-Za-z0-9_-]{1,64}\"}}\n");
	expect("GET", "/v1/runs/nosuchrun", NULL, NULL, 0, 404,
	       "{\"error\":{\"code\":\"not_found\",\"message\":\"run_id: no such run\"}}\n");
	expect("GET", "/v1/runs/nosuchrun/events", NULL, NULL, 0, 404,
	       "{\"error\":{\"code\":\"not_found\",\"message\":\"run_id: no such run\"}}\n");
	expect("GET", "/v1/runs/r1/events?after=abc", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"after: must be a stream id <ms>-<seq> (at most 19 digits each)\"}}\n");
	expect("POST", "/v1/runs/nosuchrun/cancel", NULL, NULL, 0, 404, NULL);
	{
		dt_resp_t r;
		char allow[64] = "";

		/* GET /v1/runs lists the recent runs (tests/ui checks the listing). */
		TH_CHECK(dt_http(&r, "GET", url("/v1/runs"), NULL, NULL, 0, 5000) == 0 && r.status == 200);
		TH_CHECK(strncmp(r.body, "{\"runs\":[", 9) == 0, "%s", r.body);
		dt_resp_free(&r);
		TH_CHECK(dt_http(&r, "DELETE", url("/v1/runs"), NULL, NULL, 0, 5000) == 0 && r.status == 405);
		TH_CHECK(dt_header(&r, "Allow", allow, sizeof(allow)) && strcmp(allow, "GET, POST, OPTIONS") == 0, "%s", allow);
		TH_CHECK(strcmp(r.body, "{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"method: GET, POST, OPTIONS only\"}}\n") == 0,
		         "%s", r.body);
		dt_resp_free(&r);
		TH_CHECK(dt_http(&r, "DELETE", url("/v1/runs/abc"), NULL, NULL, 0, 5000) == 0 && r.status == 405);
		TH_CHECK(dt_header(&r, "Allow", allow, sizeof(allow)) && strcmp(allow, "GET, OPTIONS") == 0, "%s", allow);
		dt_resp_free(&r);
		/* Methods evhttp knows but would refuse itself (501, HTML) get ours. */
		TH_CHECK(dt_http(&r, "TRACE", url("/v1/runs"), NULL, NULL, 0, 5000) == 0 && r.status == 405, "%ld", r.status);
		TH_CHECK(dt_header(&r, "Allow", allow, sizeof(allow)) && strcmp(allow, "GET, POST, OPTIONS") == 0, "%s", allow);
		TH_CHECK(strcmp(r.body, "{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"method: GET, POST, OPTIONS only\"}}\n") == 0,
		         "%s", r.body);
		dt_resp_free(&r);
	}
}

static void test_enqueue(th_kafka_t *k, redisContext *c)
{
	const char *body = "{\"agent_url\":\"https://ws.example/api/assistant/sandbox/sess_1\","
	                   "\"otp_setup\":\"otp_S1\",\"otp_run\":\"otp_R1\",\"otp_upload\":\"otp_U1\","
	                   "\"prompt\":\"Add an inference node\",\"run_id\":\"api_run_1\",\"caller\":\"assistant\","
	                   "\"max_runtime_sec\":600,\"meta\":{\"turn\":3},\"budget\":{\"max_tokens\":500.0}}";
	th_kafka_consumer_t *cons = th_kafka_consumer_new(k, "runnel.jobs", NULL);
	th_kafka_msg_t m;
	proto_job_t job;
	char err[256], loc[128] = "";
	dt_resp_t r;
	json_t *o;

	TH_REQUIRE(cons);
	TH_CHECK(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, body, -1, 15000) == 0);
	TH_CHECK(r.status == 202, "%ld %s", r.status, r.body);
	TH_CHECK(strcmp(r.body, "{\"run_id\":\"api_run_1\",\"stream\":\"runnel:{api_run_1}:out\","
	                        "\"control\":\"runnel:{api_run_1}:ctl\"}\n") == 0,
	         "%s", r.body);
	TH_CHECK(dt_header(&r, "Location", loc, sizeof(loc)) && strcmp(loc, "/v1/runs/api_run_1") == 0);
	dt_resp_free(&r);

	/* The job on Kafka is the request. */
	TH_REQUIRE(th_kafka_consumer_next(cons, 10000, &m) == 1, "no job on Kafka");
	TH_CHECK(th_streq(m.key, "api_run_1"));
	TH_CHECK(proto_job_parse(m.value, m.len, NULL, 0, &job, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(strcmp(job.run_id, "api_run_1") == 0);
	TH_CHECK(th_streq(job.agent_url, "https://ws.example/api/assistant/sandbox/sess_1"));
	TH_CHECK(th_streq(job.otp_setup, "otp_S1") && th_streq(job.otp_run, "otp_R1") &&
	         th_streq(job.otp_upload, "otp_U1"));
	TH_CHECK(th_streq(job.prompt, "Add an inference node") && th_streq(job.caller, "assistant"));
	TH_CHECK(job.max_runtime_sec == 600 && job.enqueued_at > 1600000000000LL);
	TH_CHECK(json_integer_value(json_object_get(job.meta, "turn")) == 3);
	TH_CHECK(job.max_tokens == 500, "budget on the job: %lld", (long long)job.max_tokens);
	proto_job_clear(&job);
	th_kafka_msg_free(&m);

	/* Same id again: 409, and nothing more on Kafka. */
	expect("POST", "/v1/runs", JSON_CT, body, -1, 409,
	       "{\"error\":{\"code\":\"conflict\",\"message\":\"run_id: already exists\"}}\n");

	/* The state hash. */
	TH_CHECK(dt_http(&r, "GET", url("/v1/runs/api_run_1"), NULL, NULL, 0, 5000) == 0 && r.status == 200);
	o = json_loads(r.body, 0, NULL);
	TH_CHECK(th_streq(json_string_value(json_object_get(o, "status")), "queued"), "%s", r.body);
	TH_CHECK(th_streq(json_string_value(json_object_get(o, "run_id")), "api_run_1"));
	TH_CHECK(json_is_integer(json_object_get(o, "enqueued_at")), "%s", r.body);
	json_decref(o);
	dt_resp_free(&r);
	{
		redisReply *ttl = th_cmd(c, "TTL runnel:{api_run_1}:state");

		TH_CHECK(ttl && ttl->integer > 600 + 86000 && ttl->integer <= 600 + 86400, "ttl");
		freeReplyObject(ttl);
	}
	/* The model usage the worker writes comes back as an object. */
	{
		redisReply *hs = th_cmd(c, "HSET runnel:{api_run_1}:state usage %s",
		                        "{\"requests\":1,\"input_tokens\":9,\"output_tokens\":3,"
		                        "\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":0}");

		TH_CHECK(hs && hs->type == REDIS_REPLY_INTEGER);
		if (hs)
			freeReplyObject(hs);
		TH_CHECK(dt_http(&r, "GET", url("/v1/runs/api_run_1"), NULL, NULL, 0, 5000) == 0 && r.status == 200);
		o = json_loads(r.body, 0, NULL);
		TH_CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "input_tokens")) == 9, "%s",
		         r.body);
		json_decref(o);
		dt_resp_free(&r);
	}

	/* No run_id: one is minted. */
	TH_CHECK(dt_http(&r, "POST", url("/v1/runs"), JSON_CT,
	                 "{\"agent_url\":\"http://h/ws\",\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}",
	                 -1, 15000) == 0 &&
	         r.status == 202);
	o = json_loads(r.body, 0, NULL);
	{
		const char *id = json_string_value(json_object_get(o, "run_id"));

		TH_CHECK(id && strncmp(id, "run_", 4) == 0 && strlen(id) == 26, "%s", r.body);
		TH_REQUIRE(th_kafka_consumer_next(cons, 10000, &m) == 1);
		TH_CHECK(th_streq(m.key, id));
		th_kafka_msg_free(&m);
	}
	json_decref(o);
	dt_resp_free(&r);
	/* The 409 produced nothing. */
	TH_CHECK(th_kafka_consumer_next(cons, 300, &m) == 0);
	th_kafka_consumer_free(cons);
}

static void test_cancel(redisContext *c)
{
	char **lines = NULL;
	size_t n = 0;
	redisReply *r;

	expect("POST", "/v1/runs/api_run_1/cancel", JSON_CT, "{\"reason\":\"user_stop\"}", -1, 202,
	       "{\"run_id\":\"api_run_1\",\"cancel\":\"requested\",\"status\":\"queued\"}\n");
	expect("POST", "/v1/runs/api_run_1/cancel", NULL, NULL, 0, 202, NULL);
	expect("POST", "/v1/runs/api_run_1/cancel", JSON_CT, "{\"reason\":5}", -1, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"reason: must be a string of 1..128 bytes\"}}\n");
	expect("POST", "/v1/runs/api_run_1/cancel", JSON_CT, "[]", -1, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"body: must be a JSON object\"}}\n");
	r = th_cmd(c, "XRANGE runnel:{api_run_1}:ctl - +");
	TH_REQUIRE(r && r->type == REDIS_REPLY_ARRAY);
	n = r->elements;
	TH_CHECK(n == 2, "%zu control messages", n);
	if (n == 2) {
		TH_CHECK(strcmp(r->element[0]->element[1]->element[0]->str, "msg") == 0);
		TH_CHECK(strcmp(r->element[0]->element[1]->element[1]->str,
		                "{\"type\":\"cancel\",\"reason\":\"user_stop\"}") == 0);
		TH_CHECK(strcmp(r->element[1]->element[1]->element[1]->str,
		                "{\"type\":\"cancel\",\"reason\":\"api\"}") == 0);
	}
	freeReplyObject(r);
	r = th_cmd(c, "TTL runnel:{api_run_1}:ctl");
	TH_CHECK(r && r->integer > 0, "the control stream expires");
	freeReplyObject(r);
	(void)lines;
}

/* CORS: the listed origin is allowed (a preflight names the headers), any
 * other is refused on a preflight and gets no allow header on a request. */
static const struct cors_case {
	const char *method, *path, *origin;
	int preflight; /* with Access-Control-Request-Method; checks the allowed headers */
	long status;
	int allowed;      /* Access-Control-Allow-Origin: https://app.example, else none */
	const char *body; /* NULL: not checked */
} cors_cases[] = {
	{ "OPTIONS", "/v1/runs", "Origin: https://app.example", 1, 204, 1, NULL },
	{ "OPTIONS", "/v1/runs", "Origin: https://evil.example", 0, 403, 0, NULL },
	{ "GET", "/healthz", "Origin: https://app.example", 0, 200, 1, "{\"status\":\"ok\"}\n" },
	{ "GET", "/healthz", "Origin: https://evil.example", 0, 200, 0, NULL },
};

static void test_cors_health_metrics(void)
{
	dt_resp_t r;
	char v[256] = "";

	for (size_t i = 0; i < sizeof(cors_cases) / sizeof(cors_cases[0]); i++) {
		const struct cors_case *c = &cors_cases[i];
		const char *const hdrs[] = { c->origin, c->preflight ? "Access-Control-Request-Method: POST" : NULL, NULL };

		TH_CHECK(dt_http(&r, c->method, url(c->path), hdrs, NULL, 0, 5000) == 0 && r.status == c->status,
		         "%s %s %s: %ld", c->method, c->path, c->origin, r.status);
		if (c->allowed)
			TH_CHECK(dt_header(&r, "Access-Control-Allow-Origin", v, sizeof(v)) &&
			                 strcmp(v, "https://app.example") == 0,
			         "%s %s: allow origin %s", c->method, c->path, v);
		else
			TH_CHECK(!dt_header(&r, "Access-Control-Allow-Origin", v, sizeof(v)), "%s %s %s", c->method,
			         c->path, c->origin);
		if (c->preflight)
			TH_CHECK(dt_header(&r, "Access-Control-Allow-Headers", v, sizeof(v)) &&
			         !!strstr(v, "Authorization"));
		if (c->body)
			TH_CHECK(strcmp(r.body, c->body) == 0, "%s", r.body);
		dt_resp_free(&r);
	}

	TH_CHECK(dt_http(&r, "GET", url("/readyz"), NULL, NULL, 0, 5000) == 0 && r.status == 200);
	TH_CHECK(strcmp(r.body, "{\"status\":\"ok\",\"kafka\":\"ok\",\"redis\":\"ok\"}\n") == 0, "%s", r.body);
	dt_resp_free(&r);

	TH_CHECK(dt_http(&r, "GET", url("/metrics"), NULL, NULL, 0, 5000) == 0 && r.status == 200);
	TH_CHECK(strstr(r.body, "runnel_dispatcher_requests_total{route=\"runs_create\",status=\"202\"} 2\n"));
	TH_CHECK(strstr(r.body, "runnel_dispatcher_requests_total{route=\"runs_create\",status=\"409\"} 1\n"));
	TH_CHECK(strstr(r.body, "runnel_dispatcher_enqueue_seconds_count 2\n"));
	TH_CHECK(strstr(r.body, "runnel_dispatcher_active_streams 0\n"));
	TH_CHECK(strstr(r.body, "runnel_dispatcher_tail_callers 0\n"));
	TH_CHECK(strstr(r.body, "runnel_dispatcher_cancels_total 2\n"));
	/* On a cluster the tails have no blocking pool (each run is read
	 * when woken): its connections are the sharded pub/sub ones, opened
	 * for the runs being tailed (none now). */
	TH_CHECK(strstr(r.body, th_cluster_mode() ? "runnel_dispatcher_tail_connections 0\n" : "runnel_dispatcher_tail_connections 2\n"));
	dt_resp_free(&r);
}

static size_t count_of(const char *hay, const char *needle)
{
	size_t c = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		c++;
	return c;
}

/*
 * The bad inputs the API contract names, through the real binary: each is
 * a 4xx naming the field, and none of them left a run behind.
 */
static void test_contract_bad_inputs(redisContext *c)
{
	const char *good = "\"agent_url\":\"http://127.0.0.1:9/ws/s\",\"otp_setup\":\"a\",\"otp_run\":\"b\"";
	static const char *const types[] = { "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		                             "text/plain", "application/xml" };
	static const char *const posts[] = { "/v1/runs", "/stream", "/v1/runs/bad_in_1/cancel",
		                             "/v1/runs/bad_in_1/replies/ask_1" };
	size_t depth = 100000;
	char *deep = malloc(2 * depth + 1);

	TH_REQUIRE(deep);
	/* Wrong content types, on every route that takes a body. */
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		for (size_t j = 0; j < sizeof(posts) / sizeof(posts[0]); j++)
			expect("POST", posts[j], (const char *const[]){ th_strf("Content-Type: %s", types[i]), NULL },
			       th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_1\"}", good), -1, 415,
			       "{\"error\":{\"code\":\"unsupported_media_type\",\"message\":\"content-type: must be application/json\"}}\n");
	/* Deeply nested JSON, at the top and inside meta. */
	memset(deep, '[', depth);
	memset(deep + depth, ']', depth);
	deep[2 * depth] = '\0';
	bad_body(deep, -1, "body: nested deeper than 2048 levels");
	deep[depth + 3000] = '\0';
	memset(deep + 3000, ']', 3000);
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_2\",\"meta\":{\"x\":%s}}", good, deep + depth - 3000), -1,
	         "body: nested deeper than 2048 levels");
	free(deep);
	/* Invalid UTF-8. */
	bad_body(th_strf("{%s,\"run_id\":\"bad_in_3\",\"prompt\":\"\xff\"}", good), -1,
	         "body: invalid UTF-8 (line 1, column 99)");
	/* Negative and enormous numbers. */
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_4\",\"max_runtime_sec\":-1}", good), -1,
	         "max_runtime_sec: must be a positive integer");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_5\",\"max_runtime_sec\":1e999}", good), -1,
	         "body: number out of range (line 1, column 125)");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_6\",\"max_runtime_sec\":184467440737095516160}", good),
	         -1, "max_runtime_sec: must be a positive integer");
	/* Unknown fields. */
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_7\",\"colour\":\"red\"}", good), -1, "colour: unknown field");
	/* Budgets (SPEC §5), on both routes. */
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_8\",\"budget\":{\"max_tokens\":0}}", good), -1,
	         "budget.max_tokens: must be a positive integer");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_9\",\"budget\":{\"max_tokens\":2.5}}", good), -1,
	         "budget.max_tokens: must be a positive integer");
	bad_body(th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_10\",\"budget\":{\"max_tokens\":5,\"usd\":1}}", good),
	         -1, "budget: unknown field (only max_tokens)");
	expect("POST", "/stream", JSON_CT,
	       th_strf("{%s,\"prompt\":\"p\",\"run_id\":\"bad_in_11\",\"budget\":{\"max_tokens\":\"9\"}}", good), -1,
	       400, "{\"error\":{\"code\":\"bad_request\",\"message\":\"budget.max_tokens: must be a positive integer\"}}\n");
	/* Duplicate query parameters (more in test_found_by_schemathesis). */
	expect("GET", "/v1/runs?limit=2&x=1&limit=3", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"limit: given more than once\"}}\n");
	/* Nothing was left behind, and the dispatcher still answers. */
	for (int i = 1; i <= 11; i++) {
		redisReply *r = th_cmd(c, "EXISTS runnel:{bad_in_%d}:state runnel:{bad_in_%d}:ctl", i, i);

		TH_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0, "bad_in_%d left keys", i);
		if (r)
			freeReplyObject(r);
	}
	expect("GET", "/healthz", NULL, NULL, 0, 200, NULL);
}

/* What the property-based API tests (tests/api) found, one case each. */
static void test_found_by_schemathesis(void)
{
	dt_resp_t r;
	char ct[64] = "";
	json_t *doc;
	char *raw;

	/* The OpenAPI document is served as JSON. */
	TH_CHECK(dt_http(&r, "GET", url("/openapi.json"), NULL, NULL, 0, 5000) == 0 && r.status == 200);
	TH_CHECK(dt_header(&r, "Content-Type", ct, sizeof(ct)) && strcmp(ct, "application/json") == 0, "%s", ct);
	doc = json_loads(r.body, 0, NULL);
	TH_CHECK(th_streq(json_string_value(json_object_get(doc, "openapi")), "3.1.0"));
	TH_CHECK(json_object_get(json_object_get(doc, "paths"), "/v1/runs/{run_id}/replies/{ask_id}"));
	json_decref(doc);
	dt_resp_free(&r);

	/* A method libevent cannot name got its 501 HTML page: now our 405. */
	expect("QUERY", "/healthz", NULL, NULL, 0, 405,
	       "{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"method: GET, OPTIONS only\"}}\n");
	expect("PROPFIND", "/v1/runs/r1/cancel", NULL, NULL, 0, 405, NULL);

	/* A body on a method evhttp reads no body for stayed on the socket and
	 * was answered as the next request (400 HTML), which the caller took
	 * for the answer to its next request.  Now: one answer, then close. */
	raw = raw_exchange("DELETE /v1/runs/r1 HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
	                   "Content-Length: 17\r\n\r\n{\"reason\":\"oops\"}");
	TH_CHECK(count_of(raw, "HTTP/1.1 ") == 1 && strstr(raw, "HTTP/1.1 405") == raw, "%s", raw);
	TH_CHECK(strstr(raw, "Connection: close") && !strstr(raw, "<HTML>"), "%s", raw);
	free(raw);
	raw = raw_exchange("QUERY /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}");
	TH_CHECK(count_of(raw, "HTTP/1.1 ") == 1 && strstr(raw, "HTTP/1.1 405") == raw, "%s", raw);
	free(raw);
	/* Without a body the connection stays open for the next request. */
	raw = raw_exchange("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n"
	                   "Connection: close\r\n\r\n");
	TH_CHECK(count_of(raw, "HTTP/1.1 200") == 2, "%s", raw);
	free(raw);

	/* Ids are compared after percent-decoding: "ask%3A1" is "ask:1". */
	expect("POST", "/v1/runs/nosuchrun/replies/ask%3A1", JSON_CT, "{\"option\":\"a\"}", -1, 404,
	       "{\"error\":{\"code\":\"not_found\",\"message\":\"run_id: no such run\"}}\n");
	expect("GET", "/v1/runs/no%73uchrun", NULL, NULL, 0, 404,
	       "{\"error\":{\"code\":\"not_found\",\"message\":\"run_id: no such run\"}}\n");
	expect("GET", "/v1/runs/a%2Fb", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"run_id: must match [A-Za-z0-9_-]{1,64}\"}}\n");
	expect("GET", "/v1/runs/a%00b", NULL, NULL, 0, 400, NULL);
	expect("POST", "/v1/runs/r1/replies/a%00b", JSON_CT, "{\"option\":\"a\"}", -1, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"ask_id: must be 1-128 characters of A-Z a-z 0-9 _ . : -\"}}\n");

	/* A query parameter given twice is refused, naming it. */
	expect("GET", "/v1/runs?limit=1&limit=2", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"limit: given more than once\"}}\n");
	expect("GET", "/v1/runs/r1/events?after=1-0&after=2-0", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"after: given more than once\"}}\n");

	/* Cursors: a part over 19 digits, and a bad Last-Event-ID even when
	 * the answer would be NDJSON (which does not use it). */
	expect("GET", "/v1/runs/r1/events?after=12345678901234567890-0", NULL, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"after: must be a stream id <ms>-<seq> (at most 19 digits each)\"}}\n");
	expect("GET", "/v1/runs/r1/events", (const char *const[]){ "Last-Event-ID: x", NULL }, NULL, 0, 400,
	       "{\"error\":{\"code\":\"bad_request\",\"message\":\"last-event-id: must be a stream id <ms>-<seq> (at most 19 digits each)\"}}\n");
	expect("GET", "/v1/runs/r1/events",
	       (const char *const[]){ "Accept: text/event-stream", "Last-Event-ID: 75407355732428090453-20273", NULL }, NULL, 0,
	       400, NULL);
	/* An empty one means none. */
	expect("GET", "/v1/runs/nosuchrun/events", (const char *const[]){ "Last-Event-ID;", NULL }, NULL, 0, 404, NULL);
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	redisContext *c;

	dt_servers_start("dispatcher_api", &red, &k, 1, &c);
	TH_REQUIRE(dt_disp_start(&D, &red, &k, (const char *const[]){ "RUNNEL_CORS_ORIGINS=https://app.example, https://other.example", NULL }) == 0, "dispatcher");
	TH_REQUIRE(dt_wait_ready(&D, 200, 10000), "readyz");

	test_enqueue(&k, c);
	test_bad_requests();
	test_cancel(c);
	test_cors_health_metrics();
	test_found_by_schemathesis();
	test_contract_bad_inputs(c);

	/* No secret reached Redis or the log. */
	TH_CHECK(th_redis_scan_contains(c, "otp_S1") == 0);
	TH_CHECK(th_redis_scan_contains(c, "otp_R1") == 0);
	TH_CHECK(th_redis_scan_contains(c, "Add an inference node") == 0);
	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	TH_CHECK(!th_file_contains(D.log, "otp_S1") && !th_file_contains(D.log, "otp_R1") &&
	         !th_file_contains(D.log, "otp_U1") && !th_file_contains(D.log, "inference node"));
	dt_servers_stop(c, &k);
	return th_done();
}
