/*
 * tests/dispatcher/test_secure.c - the dispatcher with a bearer token and a
 * job key: every route but /healthz answers 401 without the token, jobs on
 * Kafka carry no OTP or prompt bytes (sealed, and they open with the key to
 * exactly the request), and no secret reaches Redis or the log.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/job.h"
#include "tests/dispatcher/dtest.h"

#define TOKEN  "tok_Secret_0123456789"
#define KEYHEX "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static dt_disp_t D;

static const char *const AUTH[] = { "Authorization: Bearer " TOKEN, "Content-Type: application/json", NULL };
static const char UNAUTH[] =
        "{\"error\":{\"code\":\"unauthorized\",\"message\":\"authorization: a valid bearer token is required\"}}\n";

static void expect401(const char *method, const char *path, const char *const *hdrs, const char *body)
{
	dt_resp_t r;
	char v[64] = "";

	TH_CHECK(dt_http(&r, method, th_strf("%s%s", D.base, path), hdrs, body, -1, 10000) == 0);
	TH_CHECK(r.status == 401, "%s %s: %ld", method, path, r.status);
	TH_CHECK(strcmp(r.body, UNAUTH) == 0, "%s", r.body);
	TH_CHECK(dt_header(&r, "WWW-Authenticate", v, sizeof(v)) && strcmp(v, "Bearer") == 0);
	dt_resp_free(&r);
}

static int has(const char *hay, size_t n, const char *needle)
{
	return !!memmem(hay, n, needle, strlen(needle));
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	redisContext *c;
	dt_resp_t r;
	th_kafka_msg_t m;
	proto_job_t job;
	uint8_t key[PROTO_JOB_KEY_BYTES];
	char err[256];
	const char *body;

	dt_servers_start("dispatcher_secure", &red, &k, 1, &c);
	TH_REQUIRE(dt_disp_start(&D, &red, &k, (const char *const[]){ "RUNNEL_API_TOKEN=" TOKEN, "RUNNEL_JOB_KEY=" KEYHEX, NULL }) == 0);

	TH_CHECK(dt_http(&r, "GET", th_strf("%s/healthz", D.base), NULL, NULL, 0, 5000) == 0 && r.status == 200);
	dt_resp_free(&r);
	body = dt_job_body("sec_1", "\"caller\":\"test\"");
	expect401("GET", "/readyz", NULL, NULL);
	expect401("GET", "/metrics", NULL, NULL);
	expect401("POST", "/v1/runs", (const char *const[]){ "Content-Type: application/json", NULL }, body);
	expect401("POST", "/stream", (const char *const[]){ "Content-Type: application/json", NULL }, body);
	expect401("GET", "/v1/runs/sec_1", (const char *const[]){ "Authorization: Bearer wrong", NULL }, NULL);
	expect401("GET", "/v1/runs/sec_1/events", (const char *const[]){ "Authorization: Basic " TOKEN, NULL }, NULL);
	expect401("POST", "/v1/runs/sec_1/cancel", (const char *const[]){ "Authorization: Bearer " TOKEN "x", NULL }, NULL);
	expect401("GET", "/v1/runs/sec_1", (const char *const[]){ "Authorization: Bearer tok_Secret", NULL }, NULL);
	TH_CHECK(dt_wait_ready(&D, 401, 1000));
	/* Without the token, unknown routes and wrong methods say nothing either. */
	expect401("GET", "/nope", NULL, NULL);
	expect401("DELETE", "/v1/runs/sec_1", NULL, NULL);
	expect401("GET", "/v1/runs/sec_1/other", NULL, NULL);
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/nope", D.base), AUTH, NULL, 0, 5000) == 0 && r.status == 404,
	         "%ld", r.status);
	dt_resp_free(&r);
	TH_CHECK(dt_http(&r, "DELETE", th_strf("%s/v1/runs/sec_1", D.base), AUTH, NULL, 0, 5000) == 0 &&
	                 r.status == 405,
	         "%ld", r.status);
	dt_resp_free(&r);
	/* /healthz stays open whatever the method; preflights need no token. */
	TH_CHECK(dt_http(&r, "POST", th_strf("%s/healthz", D.base), NULL, "{}", -1, 5000) == 0 && r.status == 405,
	         "%ld", r.status);
	dt_resp_free(&r);
	TH_CHECK(dt_http(&r, "OPTIONS", th_strf("%s/v1/runs", D.base), NULL, NULL, 0, 5000) == 0 && r.status == 204,
	         "%ld", r.status);
	dt_resp_free(&r);

	/* With the token. */
	TH_CHECK(dt_http(&r, "POST", th_strf("%s/v1/runs", D.base), AUTH, body, -1, 15000) == 0);
	TH_CHECK(r.status == 202, "%ld %s", r.status, r.body);
	dt_resp_free(&r);
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/v1/runs/sec_1", D.base), AUTH, NULL, 0, 5000) == 0 &&
	                 r.status == 200,
	         "%ld", r.status);
	dt_resp_free(&r);
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/readyz", D.base), AUTH, NULL, 0, 5000) == 0);
	dt_resp_free(&r);

	/* Sealed on Kafka: no OTP or prompt bytes; opens to the request. */
	TH_REQUIRE(th_kafka_consume_one(&k, "runnel.jobs", 10000, &m) == 1);
	TH_CHECK(th_streq(m.key, "sec_1"));
	TH_CHECK(!has(m.value, m.len, "otp_SETUP_SECRET_1") && !has(m.value, m.len, "otp_RUN_SECRET_2") &&
	                 !has(m.value, m.len, "otp_UPLOAD_SECRET_3") && !has(m.value, m.len, "PROMPT_TEXT_4"),
	         "plaintext secret on Kafka: %.*s", (int)m.len, m.value);
	TH_CHECK(has(m.value, m.len, "\"sealed\""));
	TH_CHECK(proto_job_parse(m.value, m.len, NULL, 0, &job, err, sizeof(err)) == -1, "opened without a key");
	TH_REQUIRE(proto_job_key_parse(KEYHEX, key, err, sizeof(err)) == 0);
	TH_CHECK(proto_job_parse(m.value, m.len, key, 1, &job, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(strcmp(job.run_id, "sec_1") == 0 && th_streq(job.otp_setup, "otp_SETUP_SECRET_1") &&
	         th_streq(job.otp_run, "otp_RUN_SECRET_2") && th_streq(job.otp_upload, "otp_UPLOAD_SECRET_3") &&
	         th_streq(job.prompt, "PROMPT_TEXT_4") && th_streq(job.caller, "test"));
	proto_job_clear(&job);
	th_kafka_msg_free(&m);

	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	for (const char *const *s = (const char *const[]){ "otp_SETUP_SECRET_1", "otp_RUN_SECRET_2",
	                                                   "otp_UPLOAD_SECRET_3", "PROMPT_TEXT_4", TOKEN, KEYHEX, NULL };
	     *s; s++) {
		TH_CHECK(th_redis_scan_contains(c, *s) == 0, "%s in Redis", *s);
		TH_CHECK(!th_file_contains(D.log, *s), "%s in the log", *s);
	}
	dt_servers_stop(c, &k);
	return th_done();
}
