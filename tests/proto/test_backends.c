/*
 * tests/proto/test_backends.c - the job fields for backends (SPEC §2):
 * idempotency_key, priority, traceparent and webhook, each accepted and
 * refused with the exact error; a traceparent that is not W3C is dropped,
 * never fatal; the round trip through serialize; the webhook's URL policy
 * with its literal addresses judged by common/netaddr (rn_webhook_url_check);
 * its body and its signature (a known HMAC-SHA256).
 */
#include "common/webhook_url.h"
#include "proto/job.h"
#include "proto/keys.h"
#include "proto/webhook.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP_TID "4bf92f3577b34da6a3ce929d0e0e4736"

/* A valid job with extra fields spliced in before the closing brace. */
static char *job_with(const char *extra)
{
	static char buf[4096];
	snprintf(buf, sizeof(buf),
	         "{\"v\":1,\"run_id\":\"run_b1\",\"agent_url\":\"https://ws.example/s\",\"otp_setup\":\"a\","
	         "\"otp_run\":\"b\",\"prompt\":\"p\"%s%s}",
	         extra[0] ? "," : "", extra);
	return buf;
}

static int parse(const char *extra, proto_job_t *job, char *err, size_t errsz)
{
	const char *s = job_with(extra);
	return proto_job_parse(s, strlen(s), NULL, 0, job, err, errsz);
}

static void refused(const char *extra, const char *want)
{
	proto_job_t job;
	char err[256] = "";
	TH_CHECK(parse(extra, &job, err, sizeof(err)) == -1 && th_streq(err, want), "%s: got \"%s\", want \"%s\"", extra,
	         err, want);
}

static void url_refused(const char *url, unsigned flags, const char *want)
{
	char err[256] = "";
	TH_CHECK(rn_webhook_url_check(url, flags, err, sizeof(err)) == -1 && th_streq(err, want),
	         "%s: got \"%s\", want \"%s\"", url, err, want);
}

static void url_ok(const char *url, unsigned flags)
{
	char err[256] = "";
	TH_CHECK(rn_webhook_url_check(url, flags, err, sizeof(err)) == 0, "%s accepted: %s", url, err);
}

int main(void)
{
	proto_job_t job;
	char err[256];

	/* Accepted, and carried through serialize -> parse. */
	TH_REQUIRE(parse("\"idempotency_key\":\"order-42:retry.1_x\",\"priority\":9,\"traceparent\":\"" TP
	                 "\",\"webhook\":\"https://hooks.example/r?t=1\"",
	                 &job, err, sizeof(err)) == 0,
	           "parse: %s", err);
	TH_CHECK(th_streq(job.idempotency_key, "order-42:retry.1_x") && job.has_priority && job.priority == 9 &&
	                 th_streq(job.traceparent, TP) && !job.traceparent_dropped &&
	                 th_streq(job.webhook, "https://hooks.example/r?t=1"),
	         "fields");
	size_t len = 0;
	char *s = proto_job_serialize(&job, NULL, &len, err, sizeof(err));
	TH_REQUIRE(s, "serialize: %s", err);
	proto_job_t back;
	TH_REQUIRE(proto_job_parse(s, len, NULL, 0, &back, err, sizeof(err)) == 0, "reparse: %s", err);
	TH_CHECK(th_streq(back.idempotency_key, job.idempotency_key) && back.priority == 9 &&
	                 th_streq(back.traceparent, TP) && th_streq(back.webhook, job.webhook),
	         "round trip");
	proto_job_clear(&back);
	free(s);
	proto_job_clear(&job);

	/* Defaults. */
	TH_REQUIRE(parse("", &job, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(proto_job_priority(&job) == 5 && !job.has_priority && job.idempotency_key[0] == '\0' &&
	                 job.traceparent[0] == '\0' && !job.webhook,
	         "defaults");
	proto_job_clear(&job);
	TH_REQUIRE(parse("\"priority\":0", &job, err, sizeof(err)) == 0 && proto_job_priority(&job) == 0, "priority 0");
	proto_job_clear(&job);

	/* Bad input: the exact errors (the DLQ's reason). */
	refused("\"priority\":10", "priority: must be an integer from 0 to 9");
	refused("\"priority\":-1", "priority: must be an integer from 0 to 9");
	refused("\"priority\":\"5\"", "priority: must be an integer from 0 to 9");
	refused("\"priority\":5.5", "priority: must be an integer from 0 to 9");
	TH_REQUIRE(parse("\"priority\":7.0", &job, err, sizeof(err)) == 0 && job.priority == 7, "7.0 is 7: %s", err);
	proto_job_clear(&job);
	refused("\"idempotency_key\":\"\"", "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
	refused("\"idempotency_key\":\"has space\"", "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
	refused("\"idempotency_key\":\"a/b\"", "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
	refused("\"idempotency_key\":7", "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
	char longkey[200];
	memset(longkey, 'k', 129);
	longkey[129] = '\0';
	char extra[300];
	snprintf(extra, sizeof(extra), "\"idempotency_key\":\"%s\"", longkey);
	refused(extra, "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
	longkey[128] = '\0';
	snprintf(extra, sizeof(extra), "\"idempotency_key\":\"%s\"", longkey);
	TH_CHECK(parse(extra, &job, err, sizeof(err)) == 0, "a 128-character key is fine: %s", err);
	proto_job_clear(&job);
	refused("\"webhook\":\"ftp://x/\"", "webhook: must start with http:// or https://");
	refused("\"webhook\":3", "webhook: not a string");
	refused("\"webhook\":\"https:// x\"", "webhook: contains a space or control character");

	/* A traceparent that is not W3C: dropped and flagged, the job stands. */
	const char *bad_tps[] = {
		"\"traceparent\":\"garbage\"",
		"\"traceparent\":\"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\"", /* upper case */
		"\"traceparent\":\"00-00000000000000000000000000000000-00f067aa0ba902b7-01\"", /* zero trace */
		"\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01\"", /* zero span */
		"\"traceparent\":\"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"", /* version ff */
		"\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra\"",
		"\"traceparent\":12",
	};
	for (size_t i = 0; i < sizeof(bad_tps) / sizeof(bad_tps[0]); i++) {
		TH_CHECK(parse(bad_tps[i], &job, err, sizeof(err)) == 0 && job.traceparent_dropped &&
		                 job.traceparent[0] == '\0',
		         "%s dropped, not fatal (%s)", bad_tps[i], err);
		proto_job_clear(&job);
	}
	/* A later version is read as 00 (W3C forward compatibility). */
	char norm[PROTO_TRACEPARENT_LEN + 1];
	TH_CHECK(proto_traceparent_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", norm) == 0 &&
	                 th_streq(norm, TP),
	         "version 01 with a suffix");
	/* The run's own span: same trace and flags, another span id. */
	char child[PROTO_TRACEPARENT_LEN + 1], tid[33];
	proto_traceparent_child(TP, child);
	proto_traceparent_trace_id(child, tid);
	TH_CHECK(th_streq(tid, TP_TID) && strncmp(child + 36, &TP[36], 16) != 0 && th_streq(child + 52, "-01") &&
	                 proto_traceparent_parse(child, norm) == 0,
	         "child %s", child);

	/* The webhook URL policy. */
	url_ok("https://hooks.example/x", 0);
	url_ok("https://93.184.216.34:8443/x", 0);
	url_refused("http://hooks.example/x", 0, "webhook: must start with https://");
	url_ok("http://hooks.example/x", PROTO_WEBHOOK_ALLOW_HTTP);
	url_refused("ftp://hooks.example/x", PROTO_WEBHOOK_ALLOW_HTTP, "webhook: must start with https://");
	url_refused("https://127.0.0.1/x", 0, "webhook: resolves to a loopback address, which is not allowed");
	url_refused("https://localhost:8080/x", 0, "webhook: resolves to a loopback address, which is not allowed");
	url_refused("https://a.localhost/x", 0, "webhook: resolves to a loopback address, which is not allowed");
	url_refused("https://10.1.2.3/x", 0, "webhook: resolves to a private address, which is not allowed");
	url_refused("https://192.168.0.1/x", 0, "webhook: resolves to a private address, which is not allowed");
	url_refused("https://172.16.5.4/x", 0, "webhook: resolves to a private address, which is not allowed");
	url_refused("https://169.254.169.254/latest", 0, "webhook: resolves to a link-local address, which is not allowed");
	url_refused("https://[::1]/x", 0, "webhook: resolves to a loopback address, which is not allowed");
	url_refused("https://[fe80::1]/x", 0, "webhook: resolves to a link-local address, which is not allowed");
	url_refused("https://[fd00::1]/x", 0, "webhook: resolves to a unique local address, which is not allowed");
	url_refused("https://[::ffff:127.0.0.1]/x", 0, "webhook: resolves to a loopback address, which is not allowed");
	url_refused("https://2130706433/x", 0,
	            "webhook: resolves to a numeric host that is not a dotted IPv4 address, which is not allowed");
	url_refused("https://0x7f.1/x", 0,
	            "webhook: resolves to a numeric host that is not a dotted IPv4 address, which is not allowed");
	url_refused("https://user:pw@hooks.example/x", 0, "webhook: must not carry user credentials");
	url_refused("https:///x", 0, "webhook: missing host");
	url_ok("http://127.0.0.1:9/x", PROTO_WEBHOOK_ALLOW_HTTP | PROTO_WEBHOOK_ALLOW_PRIVATE);

	/* More literal addresses, as common/netaddr judges them. */
	url_ok("https://[2606:4700::1111]/x", 0);
	url_refused("https://100.64.1.1/x", 0, "webhook: resolves to a shared (CGNAT) address, which is not allowed");
	url_refused("https://0.0.0.0/x", 0, "webhook: resolves to an unspecified address, which is not allowed");
	url_refused("https://224.0.0.1/x", 0, "webhook: resolves to a multicast address, which is not allowed");
	url_refused("https://[::ffff:10.0.0.1]/x", 0, "webhook: resolves to a private address, which is not allowed");
	url_refused("https://[64:ff9b::7f00:1]/x", 0, "webhook: resolves to a loopback address, which is not allowed");
	url_ok("https://10.1.2.3/x", PROTO_WEBHOOK_ALLOW_PRIVATE);

	/* Body and signature. */
	json_t *usage = json_pack("{s:i,s:i}", "requests", 2, "input_tokens", 200);
	char *body = proto_webhook_body("run_1", "failed", "agent_exit", 1700000000999LL, usage);
	TH_CHECK(th_streq(body, "{\"run_id\":\"run_1\",\"status\":\"failed\",\"code\":\"agent_exit\",\"ended_at\":"
	                        "1700000000999,\"usage\":{\"requests\":2,\"input_tokens\":200}}"),
	         "body %s", body);
	free(body);
	json_decref(usage);
	body = proto_webhook_body("run_1", "succeeded", "", 5, NULL);
	TH_CHECK(th_streq(body, "{\"run_id\":\"run_1\",\"status\":\"succeeded\",\"code\":null,\"ended_at\":5,\"usage\":null}"),
	         "body without usage %s", body);
	free(body);
	char sig[PROTO_WEBHOOK_SIG_MAX];
	const char *b = "{\"run_id\":\"r1\"}";
	TH_REQUIRE(proto_webhook_sign((const uint8_t *)"whsec_test", 10, 1700000000, b, strlen(b), sig) == 0, "sign");
	TH_CHECK(th_streq(sig, "t=1700000000,v1=2f968c749c27df9501758a9f038da504a81a51cfcab8bc95bdc210cdf4c061f2"),
	         "signature %s", sig);

	/* The idempotency record's key: tenant as the hash tag. */
	char k[PROTO_IDEM_REDIS_KEY_MAX];
	TH_CHECK(proto_idem_redis_key(k, sizeof(k), "runnel", "acme", "order-1") > 0 &&
	                 th_streq(k, "runnel:idem:{acme}:order-1"),
	         "idem key %s", k);
	TH_CHECK(proto_idem_redis_key(k, sizeof(k), "runnel", "acme", "bad key") == -1, "bad key refused");
	return th_done();
}
