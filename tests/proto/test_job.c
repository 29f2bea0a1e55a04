/*
 * tests/proto/test_job.c - the v1 job of SPEC §2: every field's accept and
 * reject side with the exact error, sealing (round trip, tamper, wrong key,
 * moved to another run_id, required, no key), serialize->parse round trips,
 * job key parsing, and that no error ever quotes a secret.
 */
#include "proto/job.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include <jansson.h>
#include <sodium.h>

/* Every secret in these tests carries a marker that must never show up in
 * an error message. */
#define MARK_OTP    "Sekr1t"
#define MARK_PROMPT "PromptSekr1t"

static const char base_job[] =
        "{\"v\":1,\"run_id\":\"run_8Jd3kQ\","
        "\"agent_url\":\"https://ws.example/api/assistant/sandbox/sess_1\","
        "\"otp_setup\":\"setup-" MARK_OTP "-1\",\"otp_run\":\"run-" MARK_OTP "-2\","
        "\"otp_upload\":\"upload-" MARK_OTP "-3\",\"prompt\":\"Add an inference node " MARK_PROMPT "\","
        "\"caller\":\"assistant\",\"enqueued_at\":1700000000000,\"max_runtime_sec\":28800,"
        "\"meta\":{\"k\":\"v\"}}";

static const char key_hex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
static const char key2_hex[] = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

static int leak_checked;

/* Every error goes through here: it must not contain a secret. */
static void check_no_secret(const char *what, const char *err)
{
	leak_checked++;
	TH_CHECK(!strstr(err, MARK_OTP) && !strstr(err, "upload-") &&
	                 !strstr(err, MARK_PROMPT),
	         "%s: error quotes a secret: %s", what, err);
}

static int parse_str(const char *s, const uint8_t *key, int require, proto_job_t *job,
                     char *err, size_t size)
{
	int rc;

	err[0] = '\0';
	rc = proto_job_parse(s, strlen(s), key, require, job, err, size);
	if (rc != 0)
		check_no_secret(s, err);
	return rc;
}

/* base_job with field set to the JSON text value (NULL: removed). */
static char *mutate(const char *field, const char *value)
{
	json_t *o = json_loads(base_job, 0, NULL);
	char *s;

	if (!value) {
		json_object_del(o, field);
	} else {
		json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);

		if (!v) {
			fprintf(stderr, "bad test value %s\n", value);
			abort();
		}
		json_object_set_new(o, field, v);
	}
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

typedef struct job_case {
	const char *field;
	const char *value; /* JSON text; NULL removes the field */
	const char *err;   /* NULL: accepted */
} job_case_t;

#define OTPERR(f) f ": only visible ASCII characters (0x21-0x7e) are allowed"

static const job_case_t cases[] = {
	{ "v", NULL, "v: missing" },
	{ "v", "\"1\"", "v: not an integer" },
	{ "v", "1.0", "v: not an integer" },
	{ "v", "2", "v: unsupported version 2 (want 1)" },
	{ "run_id", NULL, "run_id: missing" },
	{ "run_id", "5", "run_id: not a string" },
	{ "run_id", "\"\"", "run_id: empty" },
	{ "run_id", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
	  "run_id: longer than 64 characters" },
	{ "run_id", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", NULL },
	{ "run_id", "\"run 1\"", "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)" },
	{ "run_id", "\"run/1\"", "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)" },
	{ "run_id", "\"r\u00e9\"", "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)" },
	{ "run_id", "\"A-z_09\"", NULL },
	{ "agent_url", NULL, "agent_url: missing" },
	{ "agent_url", "1", "agent_url: not a string" },
	{ "agent_url", "\"ftp://ws.example/x\"", "agent_url: must start with http:// or https://" },
	{ "agent_url", "\"ws.example/x\"", "agent_url: must start with http:// or https://" },
	{ "agent_url", "\"https://ws.example/a b\"", "agent_url: contains a space or control character" },
	{ "agent_url", "\"https://ws.example/a\\r\\nX: y\"", "agent_url: contains a space or control character" },
	{ "agent_url", "\"https://\"", "agent_url: missing host" },
	{ "agent_url", "\"http:///path\"", "agent_url: missing host" },
	{ "agent_url", "\"http://127.0.0.1:8080/api\"", NULL },
	{ "otp_setup", NULL, "otp_setup: missing" },
	{ "otp_setup", "7", "otp_setup: not a string" },
	{ "otp_setup", "null", "otp_setup: not a string" },
	{ "otp_setup", "\"\"", "otp_setup: empty" },
	{ "otp_setup", "\"a-" MARK_OTP "\\r\\nX-Evil: 1\"", OTPERR("otp_setup") },
	{ "otp_setup", "\"a-" MARK_OTP "\\n\"", OTPERR("otp_setup") },
	{ "otp_setup", "\"a " MARK_OTP "\"", OTPERR("otp_setup") },
	{ "otp_setup", "\"a-" MARK_OTP "\u00e9\"", OTPERR("otp_setup") },
	{ "otp_setup", "\"a-" MARK_OTP "\\u007f\"", OTPERR("otp_setup") },
	{ "otp_run", NULL, "otp_run: missing" },
	{ "otp_run", "[]", "otp_run: not a string" },
	{ "otp_run", "\"b-" MARK_OTP "\\r\"", OTPERR("otp_run") },
	{ "otp_upload", NULL, NULL },
	{ "otp_upload", "null", NULL },
	{ "otp_upload", "\"\"", "otp_upload: empty" },
	{ "otp_upload", "5", "otp_upload: not a string" },
	{ "otp_upload", "\"c-" MARK_OTP "\\n\"", OTPERR("otp_upload") },
	{ "prompt", NULL, "prompt: missing" },
	{ "prompt", "5", "prompt: not a string" },
	{ "prompt", "\"\"", NULL },
	{ "prompt", "\"multi\\nline \\\"prompt\\\" \u2603\"", NULL },
	{ "caller", NULL, NULL },
	{ "caller", "null", NULL },
	{ "caller", "5", "caller: not a string" },
	{ "tenant", NULL, NULL },
	{ "tenant", "null", NULL },
	{ "tenant", "\"acme\"", NULL },
	{ "tenant", "\"Acme_Corp.eu-1\"", NULL },
	{ "tenant", "5", "tenant: not a string" },
	{ "tenant", "\"\"", "tenant: empty" },
	{ "tenant", "\"a b\"", "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)" },
	{ "tenant", "\"a/b\"", "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)" },
	{ "tenant", "\"caf\u00e9\"", "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)" },
	{ "tenant", "\""
	            "0123456789012345678901234567890123456789012345678901234567890123"
	            "\"",
	  NULL },
	{ "tenant", "\""
	            "0123456789012345678901234567890123456789012345678901234567890123x"
	            "\"",
	  "tenant: longer than 64 characters" },
	{ "enqueued_at", NULL, NULL },
	{ "enqueued_at", "0", NULL },
	{ "enqueued_at", "-1", "enqueued_at: must not be negative" },
	{ "enqueued_at", "\"1700000000000\"", "enqueued_at: not an integer" },
	{ "enqueued_at", "1.5", "enqueued_at: not an integer" },
	{ "max_runtime_sec", NULL, NULL },
	{ "max_runtime_sec", "1", NULL },
	{ "max_runtime_sec", "0", "max_runtime_sec: must be at least 1" },
	{ "max_runtime_sec", "-5", "max_runtime_sec: must be at least 1" },
	{ "max_runtime_sec", "true", "max_runtime_sec: not an integer" },
	{ "meta", NULL, NULL },
	{ "meta", "null", NULL },
	{ "meta", "[1]", "meta: not an object" },
	{ "meta", "\"x\"", "meta: not an object" },
	{ "permission_mode", NULL, NULL },
	{ "permission_mode", "null", NULL },
	{ "permission_mode", "\"ask\"", NULL },
	{ "permission_mode", "\"deny\"", NULL },
	{ "permission_mode", "\"bypass\"", NULL },
	{ "permission_mode", "\"ASK\"", "permission_mode: must be bypass, ask or deny" },
	{ "permission_mode", "\"\"", "permission_mode: must be bypass, ask or deny" },
	{ "permission_mode", "1", "permission_mode: must be bypass, ask or deny" },
	{ "budget", NULL, NULL },
	{ "budget", "null", NULL },
	{ "budget", "{\"max_tokens\":500}", NULL },
	{ "budget", "{\"max_tokens\":0}", "budget: must be {\"max_tokens\": N} with N at least 1" },
	{ "budget", "{\"max_tokens\":\"5\"}", "budget: must be {\"max_tokens\": N} with N at least 1" },
	{ "budget", "{}", "budget: must be {\"max_tokens\": N} with N at least 1" },
	{ "budget", "500", "budget: must be {\"max_tokens\": N} with N at least 1" },
	{ "zzz_unknown", "{\"a\":[1,2]}", NULL },
	{ "sealed", "5", "otp_setup: must not appear in plaintext next to sealed" },
};

static void run_table(void)
{
	char err[256];
	proto_job_t job;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const job_case_t *c = &cases[i];
		char *s = mutate(c->field, c->value);
		int rc = parse_str(s, NULL, 0, &job, err, sizeof(err));

		if (!c->err) {
			TH_CHECK(rc == 0, "%s=%s: want accepted, got %s", c->field,
			         c->value ? c->value : "(removed)", err);
		} else {
			TH_CHECK(rc == -1, "%s=%s: want rejected", c->field, c->value ? c->value : "(removed)");
			TH_CHECK_STR(c->field, err, c->err);
			TH_CHECK(!job.agent_url && !job.otp_setup && !job.prompt &&
			                 !job.meta,
			         "cleared on failure");
		}
		proto_job_clear(&job);
		free(s);
	}
	printf("job table: %zu cases\n", sizeof(cases) / sizeof(cases[0]));
}

static void test_valid(void)
{
	char err[256];
	proto_job_t job;
	const char *minimal = "{\"v\":1,\"run_id\":\"r1\",\"agent_url\":\"http://h\","
	                      "\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":\"p\"}";

	TH_CHECK(parse_str(base_job, NULL, 0, &job, err, sizeof(err)) == 0, "full: %s", err);
	TH_CHECK(job.v == 1, "v");
	TH_CHECK_STR("run_id", job.run_id, "run_8Jd3kQ");
	TH_CHECK_STR("agent_url", job.agent_url, "https://ws.example/api/assistant/sandbox/sess_1");
	TH_CHECK_STR("otp_setup", job.otp_setup, "setup-" MARK_OTP "-1");
	TH_CHECK_STR("otp_run", job.otp_run, "run-" MARK_OTP "-2");
	TH_CHECK_STR("otp_upload", job.otp_upload, "upload-" MARK_OTP "-3");
	TH_CHECK_STR("prompt", job.prompt, "Add an inference node " MARK_PROMPT);
	TH_CHECK_STR("caller", job.caller, "assistant");
	TH_CHECK(job.enqueued_at == 1700000000000LL, "enqueued_at");
	TH_CHECK(job.max_runtime_sec == 28800, "max_runtime_sec");
	TH_CHECK(json_is_object(job.meta) &&
	                 strcmp(json_string_value(json_object_get(job.meta, "k")), "v") == 0,
	         "meta");
	proto_job_clear(&job);
	TH_CHECK(!job.agent_url && !job.otp_setup && !job.meta &&
	                 job.run_id[0] == '\0' && job.v == 0,
	         "clear zeroes");

	TH_CHECK(parse_str(minimal, NULL, 0, &job, err, sizeof(err)) == 0, "minimal: %s", err);
	TH_CHECK(!job.otp_upload && !job.caller && job.enqueued_at == 0 &&
	                 job.max_runtime_sec == 0 && !job.meta,
	         "minimal defaults");
	proto_job_clear(&job);
	proto_job_clear(&job); /* twice is harmless */
}

static void test_raw(void)
{
	char err[256];
	proto_job_t job;
	char *big;
	size_t n;

	TH_CHECK(parse_str("{", NULL, 0, &job, err, sizeof(err)) == -1, "truncated");
	TH_CHECK_STR("truncated", err, "job: not valid JSON at line 1 column 1");
	TH_CHECK(parse_str("", NULL, 0, &job, err, sizeof(err)) == -1, "empty");
	TH_CHECK_STR("empty", err, "job: not valid JSON at line 1 column 0");
	TH_CHECK(parse_str("[1]", NULL, 0, &job, err, sizeof(err)) == -1, "array");
	TH_CHECK_STR("array", err, "job: not a JSON object");
	TH_CHECK(parse_str("{\"v\":1,\"v\":1}", NULL, 0, &job, err, sizeof(err)) == -1, "dup");
	TH_CHECK_STR("dup", err, "job: duplicate key at line 1 column 10");
	/* A duplicate secret key: jansson's own message would quote it. */
	TH_CHECK(parse_str("{\"otp_run\":\"x-" MARK_OTP "\",\"otp_run\":\"y-" MARK_OTP "\"}",
	                   NULL, 0, &job, err, sizeof(err)) == -1,
	         "dup otp");
	TH_CHECK_STR("dup otp", err, "job: duplicate key at line 1 column 31");
	/* A bad escape inside an OTP: jansson's message would quote it. */
	TH_CHECK(parse_str("{\"otp_run\":\"x-" MARK_OTP "\\q\"}", NULL, 0, &job, err, sizeof(err)) == -1,
	         "bad escape");
	TH_CHECK_STR("bad escape", err, "job: not valid JSON at line 1 column 22");
	TH_CHECK(parse_str("{\"v\":1,\"prompt\":\"\xff\"}", NULL, 0, &job, err, sizeof(err)) == -1, "utf8");
	TH_CHECK_STR("utf8", err, "job: invalid UTF-8 at line 1 column 17");
	TH_CHECK(proto_job_parse("{\"v\":1}\0", 8, NULL, 0, &job, err, sizeof(err)) == -1, "nul");
	TH_CHECK_STR("nul", err, "job: not valid JSON at line 1 column 8");
	TH_CHECK(parse_str("{\"v\":1,\"prompt\":\"a\\u0000b\"}", NULL, 0, &job, err, sizeof(err)) == -1,
	         "escaped nul");
	TH_CHECK_STR("escaped nul", err, "job: contains a NUL byte at line 1 column 26");
	TH_CHECK(parse_str("{\"v\":1,\"enqueued_at\":99999999999999999999}", NULL, 0, &job, err,
	                   sizeof(err)) == -1,
	         "overflow");
	TH_CHECK_STR("overflow", err, "job: number out of range at line 1 column 41");

	/* Oversized prompt: one byte over the cap, job still under its own cap. */
	n = PROTO_JOB_PROMPT_MAX + 1;
	big = malloc(n + 3);
	big[0] = '"';
	memset(big + 1, 'p', n);
	big[n + 1] = '"';
	big[n + 2] = '\0';
	{
		char *s = mutate("prompt", big);

		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == -1, "big prompt");
		TH_CHECK_STR("big prompt", err, "prompt: longer than 524288 bytes");
		free(s);
		big[n] = '"';
		big[n + 1] = '\0';
		s = mutate("prompt", big);
		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == 0, "prompt at cap: %s", err);
		proto_job_clear(&job);
		free(s);
	}
	free(big);

	/* Whole job over its cap. */
	n = PROTO_JOB_MAX_BYTES + 1;
	big = malloc(n + 1);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	big[n] = '\0';
	TH_CHECK(parse_str(big, NULL, 0, &job, err, sizeof(err)) == -1, "big job");
	TH_CHECK_STR("big job", err, "job: too large (921601 bytes > 921600)");
	free(big);

	/* OTP of 1024 bytes is fine, 1025 is not. */
	big = malloc(1100);
	big[0] = '"';
	memset(big + 1, 'o', 1025);
	big[1026] = '"';
	big[1027] = '\0';
	{
		char *s = mutate("otp_run", big);

		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == -1, "long otp");
		TH_CHECK_STR("long otp", err, "otp_run: longer than 1024 bytes");
		free(s);
		big[1025] = '"';
		big[1026] = '\0';
		s = mutate("otp_run", big);
		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == 0, "otp at cap: %s", err);
		proto_job_clear(&job);
		free(s);
	}
	free(big);

	/* agent_url of 2048 bytes is fine, 2049 is not; caller 128 / 129. */
	big = malloc(2100);
	memcpy(big, "\"http://", 8);
	memset(big + 8, 'h', 2042);
	memcpy(big + 2050, "\"", 2);
	{
		char *s = mutate("agent_url", big);

		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == -1, "long url");
		TH_CHECK_STR("long url", err, "agent_url: longer than 2048 bytes");
		free(s);
		memcpy(big + 2049, "\"", 2);
		s = mutate("agent_url", big);
		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == 0, "url at cap: %s", err);
		proto_job_clear(&job);
		free(s);
	}
	big[0] = '"';
	memset(big + 1, 'c', 129);
	memcpy(big + 130, "\"", 2);
	{
		char *s = mutate("caller", big);

		TH_CHECK(parse_str(s, NULL, 0, &job, err, sizeof(err)) == -1, "long caller");
		TH_CHECK_STR("long caller", err, "caller: longer than 128 bytes");
		free(s);
	}
	free(big);
}

static void test_key_parse(void)
{
	uint8_t key[PROTO_JOB_KEY_BYTES];
	char err[128];
	char bad[65];

	TH_CHECK(proto_job_key_parse(key_hex, key, err, sizeof(err)) == 0, "key: %s", err);
	TH_CHECK(key[0] == 0 && key[1] == 1 && key[31] == 0x1f, "key bytes");
	TH_CHECK(proto_job_key_parse("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F",
	                             key, err, sizeof(err)) == 0 &&
	                 key[10] == 0x0a,
	         "upper case");
	TH_CHECK(proto_job_key_parse(NULL, key, err, sizeof(err)) == -1, "null");
	TH_CHECK_STR("null", err, "job key: missing");
	TH_CHECK(proto_job_key_parse("", key, err, sizeof(err)) == -1, "empty");
	TH_CHECK_STR("empty", err, "job key: missing");
	TH_CHECK(proto_job_key_parse(key_hex + 1, key, err, sizeof(err)) == -1, "63");
	TH_CHECK_STR("63", err, "job key: must be 64 hex digits (got 63 characters)");
	memcpy(bad, key_hex, 65);
	bad[40] = 'g';
	TH_CHECK(proto_job_key_parse(bad, key, err, sizeof(err)) == -1, "g");
	TH_CHECK_STR("g", err, "job key: not a hex digit at position 41");
	TH_CHECK(!strstr(err, "0001"), "key not quoted");
	{
		char long_key[130];

		memcpy(long_key, key_hex, 64);
		memcpy(long_key + 64, key_hex, 65);
		TH_CHECK(proto_job_key_parse(long_key, key, err, sizeof(err)) == -1, "128");
		TH_CHECK_STR("128", err, "job key: must be 64 hex digits (got 128 characters)");
	}
}

static int same_job(const proto_job_t *a, const proto_job_t *b)
{
#define SAME(f) ((!a->f && !b->f) || (a->f && b->f && strcmp(a->f, b->f) == 0))
	return a->v == b->v && strcmp(a->run_id, b->run_id) == 0 && SAME(agent_url) &&
	        SAME(otp_setup) && SAME(otp_run) && SAME(otp_upload) && SAME(prompt) &&
	        SAME(caller) && a->enqueued_at == b->enqueued_at &&
	        a->max_runtime_sec == b->max_runtime_sec && a->max_tokens == b->max_tokens &&
	        ((!a->meta && !b->meta) || json_equal(a->meta, b->meta));
#undef SAME
}

/* Replaces the string member field of JSON text s; returns a new string. */
static char *with_string(const char *s, const char *field, const char *value)
{
	json_t *o = json_loads(s, 0, NULL);
	char *r;

	json_object_set_new(o, field, json_string(value));
	r = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return r;
}

static void test_sealed(void)
{
	uint8_t key[PROTO_JOB_KEY_BYTES], key2[PROTO_JOB_KEY_BYTES];
	char err[256], *s, *t, *u;
	proto_job_t job, back;
	size_t len = 0;
	json_t *o;
	const char *sealed;

	TH_CHECK(proto_job_key_parse(key_hex, key, err, sizeof(err)) == 0, "key");
	TH_CHECK(proto_job_key_parse(key2_hex, key2, err, sizeof(err)) == 0, "key2");
	TH_CHECK(parse_str(base_job, NULL, 0, &job, err, sizeof(err)) == 0, "base");

	/* Round trip, sealed. */
	s = proto_job_serialize(&job, key, &len, err, sizeof(err));
	TH_CHECK(s && len == strlen(s), "serialize sealed: %s", err);
	TH_CHECK(!strstr(s, MARK_OTP) && !strstr(s, MARK_PROMPT) &&
	                 !strstr(s, "otp_") && !strstr(s, "prompt"),
	         "no plaintext: %s", s);
	TH_CHECK(strstr(s, "\"sealed\":\""), "has sealed");
	TH_CHECK(parse_str(s, key, 1, &back, err, sizeof(err)) == 0, "parse sealed: %s", err);
	TH_CHECK(same_job(&job, &back), "sealed round trip");
	proto_job_clear(&back);

	/* Base64 of 24-byte nonce || ciphertext || 16-byte tag, original alphabet. */
	o = json_loads(s, 0, NULL);
	sealed = json_string_value(json_object_get(o, "sealed"));
	{
		unsigned char bin[1024];
		size_t bin_len = 0;
		char plain_json[512];
		unsigned long long plen = 0;

		TH_CHECK(sodium_base642bin(bin, sizeof(bin), sealed, strlen(sealed), NULL, &bin_len, NULL,
		                           sodium_base64_VARIANT_ORIGINAL) == 0,
		         "base64 original");
		TH_CHECK(crypto_aead_xchacha20poly1305_ietf_decrypt(
		                 (unsigned char *)plain_json, &plen, NULL, bin + 24, bin_len - 24,
		                 (const unsigned char *)"run_8Jd3kQ", 10, bin, key) == 0,
		         "open by hand");
		plain_json[plen] = '\0';
		TH_CHECK_STR("sealed content", plain_json,
		             "{\"otp_setup\":\"setup-" MARK_OTP "-1\",\"otp_run\":\"run-" MARK_OTP "-2\","
		             "\"otp_upload\":\"upload-" MARK_OTP "-3\",\"prompt\":\"Add an inference node " MARK_PROMPT "\"}");
	}

	/* Two seals of the same job differ (random nonce). */
	t = proto_job_serialize(&job, key, NULL, err, sizeof(err));
	TH_CHECK(t && strcmp(s, t) != 0, "fresh nonce");
	free(t);

	/* No key configured. */
	TH_CHECK(parse_str(s, NULL, 0, &back, err, sizeof(err)) == -1, "no key");
	TH_CHECK_STR("no key", err, "sealed: no job key configured");
	/* Wrong key. */
	TH_CHECK(parse_str(s, key2, 0, &back, err, sizeof(err)) == -1, "wrong key");
	TH_CHECK_STR("wrong key", err, "sealed: cannot be opened (wrong key or tampered)");
	/* Moved to another run_id. */
	t = with_string(s, "run_id", "run_other");
	TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "moved");
	TH_CHECK_STR("moved", err, "sealed: cannot be opened (wrong key or tampered)");
	free(t);
	/* Tampered: one base64 character changed in the middle. */
	{
		char *m = strdup(sealed);
		size_t mid = strlen(m) / 2;

		m[mid] = m[mid] == 'A' ? 'B' : 'A';
		t = with_string(s, "sealed", m);
		TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "tampered");
		TH_CHECK_STR("tampered", err, "sealed: cannot be opened (wrong key or tampered)");
		free(t);
		/* Truncated. */
		memcpy(m, sealed, strlen(sealed) + 1);
		m[strlen(m) - 8] = '\0';
		t = with_string(s, "sealed", m);
		TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "truncated");
		TH_CHECK_STR("truncated", err, "sealed: cannot be opened (wrong key or tampered)");
		free(t);
		free(m);
	}
	{
		static const char *const junk[] = { "", "!!!!", "AAAA", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
			                            "AAAA AAAA" };
		size_t i;

		for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
			t = with_string(s, "sealed", junk[i]);
			TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "junk %zu", i);
			TH_CHECK_STR("junk", err, "sealed: cannot be opened (wrong key or tampered)");
			free(t);
		}
	}
	/* Plaintext secrets next to a seal. */
	t = with_string(s, "otp_run", "x-" MARK_OTP);
	TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "plaintext next to sealed");
	TH_CHECK_STR("plaintext next to sealed", err, "otp_run: must not appear in plaintext next to sealed");
	free(t);
	t = with_string(s, "sealed", "x");
	{
		json_t *so = json_loads(t, 0, NULL);

		json_object_set_new(so, "sealed", json_integer(5));
		free(t);
		t = json_dumps(so, JSON_COMPACT);
		json_decref(so);
	}
	TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "sealed 5");
	TH_CHECK_STR("sealed 5", err, "sealed: not a string");
	free(t);
	t = with_string(s, "prompt", "p");
	TH_CHECK(parse_str(t, key, 0, &back, err, sizeof(err)) == -1, "prompt next to sealed");
	TH_CHECK_STR("prompt next to sealed", err, "prompt: must not appear in plaintext next to sealed");
	free(t);
	json_decref(o);
	free(s);

	/* require_sealed refuses a plaintext job, with or without a key. */
	TH_CHECK(parse_str(base_job, key, 1, &back, err, sizeof(err)) == -1, "require");
	TH_CHECK_STR("require", err, "sealed: required but the job is not sealed");
	TH_CHECK(parse_str(base_job, NULL, 1, &back, err, sizeof(err)) == -1, "require no key");
	TH_CHECK_STR("require no key", err, "sealed: required but the job is not sealed");
	/* A key alone does not require sealing. */
	TH_CHECK(parse_str(base_job, key, 0, &back, err, sizeof(err)) == 0, "key, plaintext ok");
	proto_job_clear(&back);

	/* Round trip, unsealed; and sealed without otp_upload / optionals. */
	s = proto_job_serialize(&job, NULL, &len, err, sizeof(err));
	TH_CHECK_STR("unsealed serialize", s,
	             "{\"v\":1,\"run_id\":\"run_8Jd3kQ\",\"agent_url\":\"https://ws.example/api/assistant/sandbox/sess_1\","
	             "\"otp_setup\":\"setup-" MARK_OTP "-1\",\"otp_run\":\"run-" MARK_OTP "-2\","
	             "\"otp_upload\":\"upload-" MARK_OTP "-3\",\"prompt\":\"Add an inference node " MARK_PROMPT "\","
	             "\"caller\":\"assistant\",\"enqueued_at\":1700000000000,\"max_runtime_sec\":28800,"
	             "\"meta\":{\"k\":\"v\"}}");
	TH_CHECK(parse_str(s, NULL, 0, &back, err, sizeof(err)) == 0 && same_job(&job, &back),
	         "unsealed round trip");
	proto_job_clear(&back);
	free(s);

	/* The budget goes through. */
	job.max_tokens = 500;
	s = proto_job_serialize(&job, NULL, &len, err, sizeof(err));
	TH_CHECK(s && strstr(s, ",\"budget\":{\"max_tokens\":500}"), "budget serialized");
	TH_CHECK(parse_str(s, NULL, 0, &back, err, sizeof(err)) == 0 && back.max_tokens == 500, "budget round trip");
	proto_job_clear(&back);
	free(s);
	job.max_tokens = 0;

	free(job.otp_upload);
	job.otp_upload = NULL;
	free(job.caller);
	job.caller = NULL;
	json_decref(job.meta);
	job.meta = NULL;
	job.enqueued_at = 0;
	job.max_runtime_sec = 0;
	s = proto_job_serialize(&job, NULL, &len, err, sizeof(err));
	TH_CHECK_STR("minimal serialize", s,
	             "{\"v\":1,\"run_id\":\"run_8Jd3kQ\",\"agent_url\":\"https://ws.example/api/assistant/sandbox/sess_1\","
	             "\"otp_setup\":\"setup-" MARK_OTP "-1\",\"otp_run\":\"run-" MARK_OTP "-2\","
	             "\"prompt\":\"Add an inference node " MARK_PROMPT "\"}");
	free(s);
	s = proto_job_serialize(&job, key, &len, err, sizeof(err));
	TH_CHECK(parse_str(s, key, 0, &back, err, sizeof(err)) == 0 && same_job(&job, &back) &&
	                 !back.otp_upload,
	         "sealed round trip without upload: %s", err);
	proto_job_clear(&back);
	free(s);

	/* Serialize refuses an invalid job, naming the field. */
	u = job.otp_run;
	job.otp_run = strdup("bad-" MARK_OTP "\r\nX: 1");
	s = proto_job_serialize(&job, key, &len, err, sizeof(err));
	TH_CHECK(!s, "serialize invalid");
	TH_CHECK_STR("serialize invalid", err, OTPERR("otp_run"));
	check_no_secret("serialize", err);
	free(job.otp_run);
	job.otp_run = u;
	proto_job_clear(&job);
}

/* A seal that opens but holds something unexpected. */
static void test_odd_seal_content(void)
{
	uint8_t key[PROTO_JOB_KEY_BYTES];
	char err[256];
	static const char *const contents[] = {
		"[1]",
		"{\"otp_setup\":\"a\",\"prompt\":\"p\"}",
		"{\"otp_setup\":\"a\",\"otp_run\":\"b\",\"prompt\":5}",
		"{\"otp_setup\":\"a\",\"otp_run\":\"b c-" MARK_OTP "\",\"prompt\":\"p\"}",
	};
	static const char *const errs[] = {
		"sealed: content is not a JSON object",
		"otp_run: missing",
		"prompt: not a string",
		OTPERR("otp_run"),
	};
	size_t i;

	proto_job_key_parse(key_hex, key, err, sizeof(err));
	for (i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
		unsigned char box[256];
		char b64[400], *s;
		unsigned long long clen = 0;
		size_t plen = strlen(contents[i]);
		json_t *o;
		proto_job_t job;

		randombytes_buf(box, 24);
		crypto_aead_xchacha20poly1305_ietf_encrypt(box + 24, &clen, (const unsigned char *)contents[i],
		                                           plen, (const unsigned char *)"r1", 2, NULL, box, key);
		sodium_bin2base64(b64, sizeof(b64), box, 24 + clen, sodium_base64_VARIANT_ORIGINAL);
		o = json_pack("{s:i,s:s,s:s,s:s}", "v", 1, "run_id", "r1", "agent_url", "http://h", "sealed", b64);
		s = json_dumps(o, JSON_COMPACT);
		TH_CHECK(parse_str(s, key, 0, &job, err, sizeof(err)) == -1, "odd seal %zu", i);
		TH_CHECK_STR("odd seal", err, errs[i]);
		free(s);
		json_decref(o);
	}
}

static void test_validate(void)
{
	proto_job_t job;
	char err[256];

	memset(&job, 0, sizeof(job));
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "empty struct");
	TH_CHECK_STR("empty struct", err, "v: unsupported version 0 (want 1)");
	job.v = 1;
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "no run_id");
	TH_CHECK_STR("no run_id", err, "run_id: empty");
	snprintf(job.run_id, sizeof(job.run_id), "%s", "r1");
	job.agent_url = "http://h";
	job.otp_setup = "a";
	job.otp_run = "b";
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "no prompt");
	TH_CHECK_STR("no prompt", err, "prompt: missing");
	job.prompt = "bad \xff utf8";
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "bad prompt");
	TH_CHECK_STR("bad prompt", err, "prompt: invalid UTF-8");
	job.prompt = "ok";
	job.caller = "\xc3";
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "bad caller");
	TH_CHECK_STR("bad caller", err, "caller: invalid UTF-8");
	job.caller = NULL;
	job.enqueued_at = -1;
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "neg enqueued");
	TH_CHECK_STR("neg enqueued", err, "enqueued_at: must not be negative");
	job.enqueued_at = 0;
	job.meta = json_array();
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == -1, "meta array");
	TH_CHECK_STR("meta array", err, "meta: not an object");
	json_decref(job.meta);
	job.meta = NULL;
	TH_CHECK(proto_job_validate(&job, err, sizeof(err)) == 0, "valid: %s", err);
	/* A tiny error buffer truncates, never overflows. */
	job.prompt = NULL;
	TH_CHECK(proto_job_validate(&job, err, 4) == -1 && strcmp(err, "pro") == 0, "small buffer");
	TH_CHECK(proto_job_validate(&job, NULL, 0) == -1, "no buffer");
}

int main(void)
{
	run_table();
	test_valid();
	test_raw();
	test_key_parse();
	test_sealed();
	test_odd_seal_content();
	test_validate();
	TH_CHECK(leak_checked > 60, "leak checks ran: %d", leak_checked);
	printf("no-secret checks: %d error messages\n", leak_checked);
	return th_done();
}
