/*
 * proto/job.c - parsing, validation, sealing and serialization of the v1 job
 * (SPEC §2).  Secrets (OTPs, prompt) are wiped from every buffer this file
 * controls before it is freed, including the strings inside jansson trees.
 */
#include "proto/job.h"
#include "proto/keys.h"
#include "proto/jsonerr.h"
#include "proto/names.h"
#include "proto/utf8.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_BYTES   crypto_aead_xchacha20poly1305_ietf_ABYTES

#define SEAL_FAILED "sealed: cannot be opened (wrong key or tampered)"

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_status = -1;

static void sodium_init_once(void)
{
	/* 1 means "already initialised", which is success too. */
	sodium_status = sodium_init() < 0 ? -1 : 0;
}

int proto_sodium_init(void)
{
	pthread_once(&sodium_once, sodium_init_once);
	return sodium_status;
}

static void seterr(char *errstr, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void seterr(char *errstr, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (!errstr || size == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(errstr, size, fmt, ap);
	va_end(ap);
}

/* jansson keeps its own copy of every string; wipe it before the tree goes. */
static void wipe_json_string(json_t *s)
{
	if (json_is_string(s))
		sodium_memzero((char *)json_string_value(s), json_string_length(s));
}

static void free_secret(char **p)
{
	if (*p) {
		sodium_memzero(*p, strlen(*p));
		free(*p);
		*p = NULL;
	}
}

void proto_job_clear(proto_job_t *job)
{
	if (!job)
		return;
	free_secret(&job->otp_setup);
	free_secret(&job->otp_run);
	free_secret(&job->otp_upload);
	free_secret(&job->prompt);
	free(job->agent_url);
	free(job->caller);
	free(job->webhook);
	json_decref(job->meta);
	sodium_memzero(job, sizeof(*job));
}

int proto_job_key_parse(const char *hex, uint8_t key[PROTO_JOB_KEY_BYTES],
                        char *errstr, size_t errstr_size)
{
	size_t i, n, bin_len = 0;

	if (!hex || hex[0] == '\0') {
		seterr(errstr, errstr_size, "job key: missing");
		return -1;
	}
	n = strlen(hex);
	if (n != 2 * PROTO_JOB_KEY_BYTES) {
		seterr(errstr, errstr_size,
		       "job key: must be %d hex digits (got %zu characters)",
		       2 * PROTO_JOB_KEY_BYTES, n);
		return -1;
	}
	for (i = 0; i < n; i++) {
		char c = hex[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
		      (c >= 'A' && c <= 'F'))) {
			seterr(errstr, errstr_size,
			       "job key: not a hex digit at position %zu", i + 1);
			return -1;
		}
	}
	if (sodium_hex2bin(key, PROTO_JOB_KEY_BYTES, hex, n, NULL, &bin_len, NULL) != 0 ||
	    bin_len != PROTO_JOB_KEY_BYTES) {
		sodium_memzero(key, PROTO_JOB_KEY_BYTES);
		seterr(errstr, errstr_size, "job key: not valid hex");
		return -1;
	}
	return 0;
}

/* ---- validation of values (shared by parse and validate) ---- */

/* A name field (run_id, tenant): at most max characters that valid()
 * accepts; allowed lists them for the error. */
static int check_name(const char *field, const char *s, size_t max, int (*valid)(const char *),
                      const char *allowed, char *errstr, size_t size)
{
	if (strnlen(s, max + 1) > max) {
		seterr(errstr, size, "%s: longer than %zu characters", field, max);
		return -1;
	}
	if (!valid(s)) {
		seterr(errstr, size, "%s: invalid character (allowed: %s)", field, allowed);
		return -1;
	}
	return 0;
}

static int check_run_id(const char *run_id, char *errstr, size_t size)
{
	if (!run_id || run_id[0] == '\0') {
		seterr(errstr, size, "run_id: empty");
		return -1;
	}
	return check_name("run_id", run_id, PROTO_RUN_ID_MAX, proto_run_id_valid, "A-Z a-z 0-9 _ -", errstr,
	                  size);
}

int proto_tenant_valid(const char *s)
{
	return proto_name_chars_ok(s, PROTO_TENANT_MAX, "_.-");
}

const char *proto_job_tenant(const proto_job_t *job)
{
	return job->tenant[0] ? job->tenant : PROTO_TENANT_DEFAULT;
}

static int check_tenant(const char *t, char *errstr, size_t size)
{
	if (t[0] == '\0')
		return 0; /* absent: the default tenant */
	return check_name("tenant", t, PROTO_TENANT_MAX, proto_tenant_valid, "A-Z a-z 0-9 _ . -", errstr, size);
}

static int check_url_field(const char *field, const char *url, char *errstr, size_t size)
{
	size_t n, i, skip;

	if (!url) {
		seterr(errstr, size, "%s: missing", field);
		return -1;
	}
	n = strlen(url);
	if (n > PROTO_JOB_URL_MAX) {
		seterr(errstr, size, "%s: longer than %d bytes", field, PROTO_JOB_URL_MAX);
		return -1;
	}
	if (strncmp(url, "http://", 7) == 0)
		skip = 7;
	else if (strncmp(url, "https://", 8) == 0)
		skip = 8;
	else {
		seterr(errstr, size, "%s: must start with http:// or https://", field);
		return -1;
	}
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)url[i];

		if (c <= 0x20 || c == 0x7f) {
			seterr(errstr, size, "%s: contains a space or control character", field);
			return -1;
		}
	}
	if (url[skip] == '\0' || url[skip] == '/') {
		seterr(errstr, size, "%s: missing host", field);
		return -1;
	}
	if (!proto_utf8_valid(url, n)) {
		seterr(errstr, size, "%s: invalid UTF-8", field);
		return -1;
	}
	return 0;
}

static int check_url(const char *url, char *errstr, size_t size)
{
	return check_url_field("agent_url", url, errstr, size);
}

int proto_idem_key_valid(const char *s)
{
	return proto_name_chars_ok(s, PROTO_IDEM_KEY_MAX, "_.:-");
}

int proto_job_priority(const proto_job_t *job)
{
	return job->has_priority ? job->priority : PROTO_PRIORITY_DEFAULT;
}

static int lower_hex(const char *s, size_t n, int *all_zero)
{
	*all_zero = 1;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
		if (c != '0')
			*all_zero = 0;
	}
	return 1;
}

int proto_traceparent_parse(const char *s, char out[PROTO_TRACEPARENT_LEN + 1])
{
	int zero;
	size_t n;

	if (!s)
		return -1;
	n = strnlen(s, 512);
	/* version-traceid-parentid-flags; a later version may append "-…". */
	if (n < PROTO_TRACEPARENT_LEN || n >= 512 || s[2] != '-' || s[35] != '-' || s[52] != '-')
		return -1;
	if (!lower_hex(s, 2, &zero) || strncmp(s, "ff", 2) == 0)
		return -1;
	if (strncmp(s, "00", 2) == 0 ? n != PROTO_TRACEPARENT_LEN
	                             : (n > PROTO_TRACEPARENT_LEN && s[PROTO_TRACEPARENT_LEN] != '-'))
		return -1;
	if (!lower_hex(s + 3, 32, &zero) || zero)
		return -1;
	if (!lower_hex(s + 36, 16, &zero) || zero)
		return -1;
	if (!lower_hex(s + 53, 2, &zero))
		return -1;
	memcpy(out, "00", 2);
	memcpy(out + 2, s + 2, PROTO_TRACEPARENT_LEN - 2);
	out[PROTO_TRACEPARENT_LEN] = '\0';
	return 0;
}

void proto_traceparent_trace_id(const char *tp, char out[33])
{
	memcpy(out, tp + 3, 32);
	out[32] = '\0';
}

void proto_traceparent_child(const char *tp, char out[PROTO_TRACEPARENT_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char span[8];

	memcpy(out, tp, PROTO_TRACEPARENT_LEN + 1);
	(void)proto_sodium_init();
	/* A span id of all zeros is invalid: draw again (p = 2^-64). */
	do
		randombytes_buf(span, sizeof(span));
	while (memcmp(span, "\0\0\0\0\0\0\0\0", 8) == 0);
	for (size_t i = 0; i < sizeof(span); i++) {
		out[36 + 2 * i] = hex[span[i] >> 4];
		out[37 + 2 * i] = hex[span[i] & 15];
	}
}

/* OTPs go into an Authorization header: visible ASCII only, so CR/LF,
 * spaces and non-ASCII bytes can never split or smuggle a header. */
static int check_otp(const char *field, const char *otp, int required,
                     char *errstr, size_t size)
{
	size_t i;

	if (!otp) {
		if (!required)
			return 0;
		seterr(errstr, size, "%s: missing", field);
		return -1;
	}
	if (otp[0] == '\0') {
		seterr(errstr, size, "%s: empty", field);
		return -1;
	}
	for (i = 0; otp[i] != '\0'; i++) {
		unsigned char c = (unsigned char)otp[i];

		if (i >= PROTO_JOB_OTP_MAX) {
			seterr(errstr, size, "%s: longer than %d bytes", field, PROTO_JOB_OTP_MAX);
			return -1;
		}
		if (c < 0x21 || c > 0x7e) {
			seterr(errstr, size,
			       "%s: only visible ASCII characters (0x21-0x7e) are allowed", field);
			return -1;
		}
	}
	return 0;
}

static int check_prompt(const char *prompt, char *errstr, size_t size)
{
	size_t n;

	if (!prompt) {
		seterr(errstr, size, "prompt: missing");
		return -1;
	}
	n = strnlen(prompt, PROTO_JOB_PROMPT_MAX + 1);
	if (n > PROTO_JOB_PROMPT_MAX) {
		seterr(errstr, size, "prompt: longer than %d bytes", PROTO_JOB_PROMPT_MAX);
		return -1;
	}
	if (!proto_utf8_valid(prompt, n)) {
		seterr(errstr, size, "prompt: invalid UTF-8");
		return -1;
	}
	return 0;
}

int proto_job_validate(const proto_job_t *job, char *errstr, size_t errstr_size)
{
	if (job->v != PROTO_JOB_VERSION) {
		seterr(errstr, errstr_size, "v: unsupported version %d (want %d)",
		       job->v, PROTO_JOB_VERSION);
		return -1;
	}
	if (check_run_id(job->run_id, errstr, errstr_size) != 0 ||
	    check_url(job->agent_url, errstr, errstr_size) != 0 ||
	    check_otp("otp_setup", job->otp_setup, 1, errstr, errstr_size) != 0 ||
	    check_otp("otp_run", job->otp_run, 1, errstr, errstr_size) != 0 ||
	    check_otp("otp_upload", job->otp_upload, 0, errstr, errstr_size) != 0 ||
	    check_prompt(job->prompt, errstr, errstr_size) != 0)
		return -1;
	if (job->caller) {
		size_t n = strnlen(job->caller, PROTO_JOB_CALLER_MAX + 1);

		if (n > PROTO_JOB_CALLER_MAX) {
			seterr(errstr, errstr_size, "caller: longer than %d bytes",
			       PROTO_JOB_CALLER_MAX);
			return -1;
		}
		if (!proto_utf8_valid(job->caller, n)) {
			seterr(errstr, errstr_size, "caller: invalid UTF-8");
			return -1;
		}
	}
	if (check_tenant(job->tenant, errstr, errstr_size) != 0)
		return -1;
	if (job->enqueued_at < 0) {
		seterr(errstr, errstr_size, "enqueued_at: must not be negative");
		return -1;
	}
	if (job->max_runtime_sec < 0) {
		seterr(errstr, errstr_size, "max_runtime_sec: must be at least 1");
		return -1;
	}
	if (job->meta && !json_is_object(job->meta)) {
		seterr(errstr, errstr_size, "meta: not an object");
		return -1;
	}
	if (job->permission_mode[0] != '\0' && !proto_permission_mode_ok(job->permission_mode)) {
		seterr(errstr, errstr_size, "permission_mode: must be bypass, ask or deny");
		return -1;
	}
	if (job->idempotency_key[0] != '\0' && !proto_idem_key_valid(job->idempotency_key)) {
		seterr(errstr, errstr_size,
		       "idempotency_key: 1 to %d characters of A-Z a-z 0-9 _ . : -", PROTO_IDEM_KEY_MAX);
		return -1;
	}
	if (job->has_priority && (job->priority < PROTO_PRIORITY_MIN || job->priority > PROTO_PRIORITY_MAX)) {
		seterr(errstr, errstr_size, "priority: must be an integer from %d to %d", PROTO_PRIORITY_MIN,
		       PROTO_PRIORITY_MAX);
		return -1;
	}
	if (job->traceparent[0] != '\0') {
		char norm[PROTO_TRACEPARENT_LEN + 1];

		if (proto_traceparent_parse(job->traceparent, norm) != 0) {
			seterr(errstr, errstr_size, "traceparent: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)");
			return -1;
		}
	}
	if (job->webhook && check_url_field("webhook", job->webhook, errstr, errstr_size) != 0)
		return -1;
	return 0;
}

int proto_permission_mode_ok(const char *s)
{
	return s && (strcmp(s, "bypass") == 0 || strcmp(s, "ask") == 0 || strcmp(s, "deny") == 0);
}

/* ---- parsing ---- */

static char *dup_json_string(json_t *s)
{
	size_t n = json_string_length(s);
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, json_string_value(s), n);
		p[n] = '\0';
	}
	return p;
}

/*
 * Copies string field key of obj into *dst.  Absent (or null when
 * null_ok) leaves *dst NULL and returns 0.  Returns -1 on a type error or
 * allocation failure with errstr set.
 */
static int take_string(json_t *obj, const char *key, int null_ok, char **dst,
                       char *errstr, size_t size)
{
	json_t *v = json_object_get(obj, key);

	*dst = NULL;
	if (!v || (null_ok && json_is_null(v)))
		return 0;
	if (!json_is_string(v)) {
		seterr(errstr, size, "%s: not a string", key);
		return -1;
	}
	*dst = dup_json_string(v);
	if (!*dst) {
		seterr(errstr, size, "%s: out of memory", key);
		return -1;
	}
	return 0;
}

static const char *const secret_fields[] = { "otp_setup", "otp_run", "otp_upload", "prompt" };

/* Takes the four secrets from obj (the job itself, or the opened seal) and
 * wipes jansson's copies of them. */
static int take_secrets(json_t *obj, proto_job_t *job, char *errstr, size_t size)
{
	size_t i;
	int rc = 0;

	if (take_string(obj, "otp_setup", 0, &job->otp_setup, errstr, size) != 0 ||
	    take_string(obj, "otp_run", 0, &job->otp_run, errstr, size) != 0 ||
	    take_string(obj, "otp_upload", 1, &job->otp_upload, errstr, size) != 0 ||
	    take_string(obj, "prompt", 0, &job->prompt, errstr, size) != 0)
		rc = -1;
	for (i = 0; i < sizeof(secret_fields) / sizeof(secret_fields[0]); i++)
		wipe_json_string(json_object_get(obj, secret_fields[i]));
	return rc;
}

static int open_seal(json_t *sealed, const char *run_id, const uint8_t *key,
                     proto_job_t *job, char *errstr, size_t size)
{
	const char *b64 = json_string_value(sealed);
	size_t b64_len = json_string_length(sealed);
	size_t max = b64_len / 4 * 3 + 3, bin_len = 0;
	unsigned long long plain_len = 0;
	unsigned char *bin = NULL, *plain = NULL;
	json_t *inner = NULL;
	int rc = -1;

	bin = malloc(max);
	if (!bin) {
		seterr(errstr, size, "sealed: out of memory");
		return -1;
	}
	if (sodium_base642bin(bin, max, b64, b64_len, NULL, &bin_len, NULL,
	                      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    bin_len < NONCE_BYTES + TAG_BYTES) {
		seterr(errstr, size, SEAL_FAILED);
		goto out;
	}
	plain = malloc(bin_len); /* at least TAG_BYTES more than needed */
	if (!plain) {
		seterr(errstr, size, "sealed: out of memory");
		goto out;
	}
	if (crypto_aead_xchacha20poly1305_ietf_decrypt(
	            plain, &plain_len, NULL, bin + NONCE_BYTES, bin_len - NONCE_BYTES,
	            (const unsigned char *)run_id, strlen(run_id), bin, key) != 0) {
		seterr(errstr, size, SEAL_FAILED);
		goto out;
	}
	inner = json_loadb((const char *)plain, (size_t)plain_len,
	                   JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(inner)) {
		seterr(errstr, size, "sealed: content is not a JSON object");
		goto out;
	}
	rc = take_secrets(inner, job, errstr, size);
out:
	if (plain) {
		sodium_memzero(plain, bin_len);
		free(plain);
	}
	free(bin);
	json_decref(inner);
	return rc;
}

/* Optional integer field: absent or null leaves *dst 0. */
static int take_int(json_t *root, const char *key, int64_t min, int64_t *dst,
                    char *errstr, size_t size)
{
	json_t *v = json_object_get(root, key);

	*dst = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v)) {
		seterr(errstr, size, "%s: not an integer", key);
		return -1;
	}
	if (json_integer_value(v) < min) {
		if (min == 0)
			seterr(errstr, size, "%s: must not be negative", key);
		else
			seterr(errstr, size, "%s: must be at least %lld", key, (long long)min);
		return -1;
	}
	*dst = json_integer_value(v);
	return 0;
}

/* idempotency_key, priority, traceparent, webhook (SPEC §2).  A
 * traceparent that is not W3C is dropped, never fatal. */
static int parse_backend_fields(json_t *root, proto_job_t *job, char *errstr, size_t size)
{
	json_t *v = json_object_get(root, "idempotency_key");

	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
		    !proto_idem_key_valid(json_string_value(v))) {
			seterr(errstr, size, "idempotency_key: 1 to %d characters of A-Z a-z 0-9 _ . : -",
			       PROTO_IDEM_KEY_MAX);
			return -1;
		}
		snprintf(job->idempotency_key, sizeof(job->idempotency_key), "%s", json_string_value(v));
	}
	v = json_object_get(root, "priority");
	if (v && !json_is_null(v)) {
		/* 7.0 is an integer to JSON Schema and to many encoders. */
		double x = json_is_number(v) ? json_number_value(v) : -1;

		if (x < PROTO_PRIORITY_MIN || x > PROTO_PRIORITY_MAX || x != (double)(int)x) {
			seterr(errstr, size, "priority: must be an integer from %d to %d", PROTO_PRIORITY_MIN,
			       PROTO_PRIORITY_MAX);
			return -1;
		}
		job->has_priority = 1;
		job->priority = (int)x;
	}
	v = json_object_get(root, "traceparent");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
		    proto_traceparent_parse(json_string_value(v), job->traceparent) != 0) {
			job->traceparent[0] = '\0';
			job->traceparent_dropped = 1;
		}
	}
	return take_string(root, "webhook", 1, &job->webhook, errstr, size);
}

static int parse_root(json_t *root, const uint8_t *key, int require_sealed,
                      proto_job_t *job, char *errstr, size_t size)
{
	json_t *v, *sealed;
	const char *s;
	size_t i;

	v = json_object_get(root, "v");
	if (!v) {
		seterr(errstr, size, "v: missing");
		return -1;
	}
	if (!json_is_integer(v)) {
		seterr(errstr, size, "v: not an integer");
		return -1;
	}
	if (json_integer_value(v) != PROTO_JOB_VERSION) {
		seterr(errstr, size, "v: unsupported version %lld (want %d)",
		       (long long)json_integer_value(v), PROTO_JOB_VERSION);
		return -1;
	}
	job->v = PROTO_JOB_VERSION;

	v = json_object_get(root, "run_id");
	if (!v) {
		seterr(errstr, size, "run_id: missing");
		return -1;
	}
	if (!json_is_string(v)) {
		seterr(errstr, size, "run_id: not a string");
		return -1;
	}
	s = json_string_value(v);
	if (strlen(s) != json_string_length(v) || check_run_id(s, errstr, size) != 0) {
		if (strlen(s) != json_string_length(v))
			seterr(errstr, size, "run_id: invalid character (allowed: A-Z a-z 0-9 _ -)");
		return -1;
	}
	memcpy(job->run_id, s, strlen(s) + 1);

	v = json_object_get(root, "agent_url");
	if (!v) {
		seterr(errstr, size, "agent_url: missing");
		return -1;
	}
	if (take_string(root, "agent_url", 0, &job->agent_url, errstr, size) != 0)
		return -1;

	sealed = json_object_get(root, "sealed");
	if (sealed) {
		for (i = 0; i < sizeof(secret_fields) / sizeof(secret_fields[0]); i++) {
			if (json_object_get(root, secret_fields[i])) {
				wipe_json_string(json_object_get(root, secret_fields[i]));
				seterr(errstr, size, "%s: must not appear in plaintext next to sealed",
				       secret_fields[i]);
				return -1;
			}
		}
		if (!json_is_string(sealed)) {
			seterr(errstr, size, "sealed: not a string");
			return -1;
		}
		if (!key) {
			seterr(errstr, size, "sealed: no job key configured");
			return -1;
		}
		if (open_seal(sealed, job->run_id, key, job, errstr, size) != 0)
			return -1;
	} else {
		if (require_sealed) {
			for (i = 0; i < sizeof(secret_fields) / sizeof(secret_fields[0]); i++)
				wipe_json_string(json_object_get(root, secret_fields[i]));
			seterr(errstr, size, "sealed: required but the job is not sealed");
			return -1;
		}
		if (take_secrets(root, job, errstr, size) != 0)
			return -1;
	}

	if (take_string(root, "caller", 1, &job->caller, errstr, size) != 0 ||
	    take_int(root, "enqueued_at", 0, &job->enqueued_at, errstr, size) != 0 ||
	    take_int(root, "max_runtime_sec", 1, &job->max_runtime_sec, errstr, size) != 0)
		return -1;

	/* budget (SPEC §5): {"max_tokens":N}, N >= 1. */
	v = json_object_get(root, "budget");
	if (v && !json_is_null(v)) {
		json_t *mt = json_object_get(v, "max_tokens");
		if (!json_is_object(v) || !json_is_integer(mt) || json_integer_value(mt) < 1) {
			seterr(errstr, size, "budget: must be {\"max_tokens\": N} with N at least 1");
			return -1;
		}
		job->max_tokens = json_integer_value(mt);
	}

	v = json_object_get(root, "permission_mode");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || !proto_permission_mode_ok(json_string_value(v))) {
			seterr(errstr, size, "permission_mode: must be bypass, ask or deny");
			return -1;
		}
		snprintf(job->permission_mode, sizeof(job->permission_mode), "%s", json_string_value(v));
	}

	v = json_object_get(root, "tenant");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v)) {
			seterr(errstr, size, "tenant: not a string");
			return -1;
		}
		s = json_string_value(v);
		if (json_string_length(v) == 0) {
			seterr(errstr, size, "tenant: empty");
			return -1;
		}
		if (strlen(s) != json_string_length(v) || json_string_length(v) > PROTO_TENANT_MAX) {
			seterr(errstr, size, json_string_length(v) > PROTO_TENANT_MAX ? "tenant: longer than 64 characters" : "tenant: invalid character (allowed: A-Z a-z 0-9 _ . -)");
			return -1;
		}
		if (check_tenant(s, errstr, size) != 0)
			return -1;
		memcpy(job->tenant, s, strlen(s) + 1);
	}

	v = json_object_get(root, "meta");
	if (v && !json_is_null(v)) {
		if (!json_is_object(v)) {
			seterr(errstr, size, "meta: not an object");
			return -1;
		}
		job->meta = json_incref(v);
	}
	if (parse_backend_fields(root, job, errstr, size) != 0)
		return -1;
	return proto_job_validate(job, errstr, size);
}

int proto_job_parse(const char *buf, size_t len,
                    const uint8_t *key, int require_sealed,
                    proto_job_t *job, char *errstr, size_t errstr_size)
{
	json_error_t jerr;
	json_t *root;
	size_t i;
	int rc;

	memset(job, 0, sizeof(*job));
	if (proto_sodium_init() != 0) {
		seterr(errstr, errstr_size, "job: libsodium failed to initialise");
		return -1;
	}
	if (len > PROTO_JOB_MAX_BYTES) {
		seterr(errstr, errstr_size, "job: too large (%zu bytes > %d)",
		       len, PROTO_JOB_MAX_BYTES);
		return -1;
	}
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		/* jerr.text may quote the input (an OTP): report only the position. */
		seterr(errstr, errstr_size, "job: %s at line %d column %d",
		       proto_json_error_words(&jerr, "not valid JSON"), jerr.line, jerr.column);
		return -1;
	}
	if (!json_is_object(root)) {
		json_decref(root);
		seterr(errstr, errstr_size, "job: not a JSON object");
		return -1;
	}
	rc = parse_root(root, key, require_sealed, job, errstr, errstr_size);
	for (i = 0; i < sizeof(secret_fields) / sizeof(secret_fields[0]); i++)
		wipe_json_string(json_object_get(root, secret_fields[i]));
	if (rc != 0)
		proto_job_clear(job);
	json_decref(root);
	return rc;
}

/* ---- serialization ---- */

static int set_string(json_t *obj, const char *key, const char *value)
{
	return json_object_set_new(obj, key, json_string(value));
}

static void wipe_secret_members(json_t *obj)
{
	size_t i;

	for (i = 0; i < sizeof(secret_fields) / sizeof(secret_fields[0]); i++)
		wipe_json_string(json_object_get(obj, secret_fields[i]));
}

/* Dumps obj compactly into a malloc'd buffer sized in a first pass, so no
 * intermediate (unwiped) buffers hold the secrets. */
static char *dump_exact(const json_t *obj, size_t *lenp)
{
	size_t n = json_dumpb(obj, NULL, 0, JSON_COMPACT);
	char *p;

	if (n == 0)
		return NULL;
	p = malloc(n + 1);
	if (!p)
		return NULL;
	if (json_dumpb(obj, p, n, JSON_COMPACT) != n) {
		sodium_memzero(p, n);
		free(p);
		return NULL;
	}
	p[n] = '\0';
	*lenp = n;
	return p;
}

static json_t *secrets_object(const proto_job_t *job)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (set_string(o, "otp_setup", job->otp_setup) != 0 ||
	    set_string(o, "otp_run", job->otp_run) != 0 ||
	    (job->otp_upload ? set_string(o, "otp_upload", job->otp_upload)
	                     : json_object_set_new(o, "otp_upload", json_null())) != 0 ||
	    set_string(o, "prompt", job->prompt) != 0) {
		wipe_secret_members(o);
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Returns base64(nonce || XChaCha20-Poly1305(secrets JSON, ad = run_id)). */
static char *seal(const proto_job_t *job, const uint8_t *key)
{
	json_t *inner = secrets_object(job);
	char *plain = NULL, *b64 = NULL;
	unsigned char *box = NULL;
	size_t plain_len = 0, box_len, b64_size;
	unsigned long long clen = 0;

	if (!inner)
		return NULL;
	plain = dump_exact(inner, &plain_len);
	wipe_secret_members(inner);
	json_decref(inner);
	if (!plain)
		return NULL;
	box_len = NONCE_BYTES + plain_len + TAG_BYTES;
	box = malloc(box_len);
	if (!box)
		goto out;
	randombytes_buf(box, NONCE_BYTES);
	crypto_aead_xchacha20poly1305_ietf_encrypt(
	        box + NONCE_BYTES, &clen, (const unsigned char *)plain, plain_len,
	        (const unsigned char *)job->run_id, strlen(job->run_id), NULL, box, key);
	b64_size = sodium_base64_ENCODED_LEN(box_len, sodium_base64_VARIANT_ORIGINAL);
	b64 = malloc(b64_size);
	if (b64)
		sodium_bin2base64(b64, b64_size, box, box_len, sodium_base64_VARIANT_ORIGINAL);
out:
	sodium_memzero(plain, plain_len);
	free(plain);
	free(box);
	return b64;
}

char *proto_job_serialize(const proto_job_t *job, const uint8_t *key,
                          size_t *lenp, char *errstr, size_t errstr_size)
{
	json_t *root;
	char *out = NULL, *sealed = NULL;
	size_t len = 0;
	int bad = 0;

	if (proto_sodium_init() != 0) {
		seterr(errstr, errstr_size, "job: libsodium failed to initialise");
		return NULL;
	}
	if (proto_job_validate(job, errstr, errstr_size) != 0)
		return NULL;
	root = json_object();
	if (!root)
		goto oom;
	bad |= json_object_set_new(root, "v", json_integer(PROTO_JOB_VERSION));
	bad |= set_string(root, "run_id", job->run_id);
	bad |= set_string(root, "agent_url", job->agent_url);
	if (key) {
		sealed = seal(job, key);
		if (!sealed)
			bad = -1;
		else
			bad |= json_object_set_new(root, "sealed", json_string_nocheck(sealed));
		free(sealed);
	} else {
		bad |= set_string(root, "otp_setup", job->otp_setup);
		bad |= set_string(root, "otp_run", job->otp_run);
		if (job->otp_upload)
			bad |= set_string(root, "otp_upload", job->otp_upload);
		bad |= set_string(root, "prompt", job->prompt);
	}
	if (job->caller)
		bad |= set_string(root, "caller", job->caller);
	if (job->tenant[0])
		bad |= set_string(root, "tenant", job->tenant);
	if (job->enqueued_at > 0)
		bad |= json_object_set_new(root, "enqueued_at", json_integer(job->enqueued_at));
	if (job->max_runtime_sec > 0)
		bad |= json_object_set_new(root, "max_runtime_sec",
		                           json_integer(job->max_runtime_sec));
	if (job->meta)
		bad |= json_object_set(root, "meta", job->meta);
	if (job->permission_mode[0] != '\0')
		bad |= set_string(root, "permission_mode", job->permission_mode);
	if (job->idempotency_key[0] != '\0')
		bad |= set_string(root, "idempotency_key", job->idempotency_key);
	if (job->has_priority)
		bad |= json_object_set_new(root, "priority", json_integer(job->priority));
	if (job->traceparent[0] != '\0')
		bad |= set_string(root, "traceparent", job->traceparent);
	if (job->webhook)
		bad |= set_string(root, "webhook", job->webhook);
	if (job->max_tokens > 0)
		bad |= json_object_set_new(root, "budget", json_pack("{s:I}", "max_tokens", (json_int_t)job->max_tokens));
	if (bad == 0)
		out = dump_exact(root, &len);
	wipe_secret_members(root);
	json_decref(root);
	if (!out)
		goto oom;
	if (len > PROTO_JOB_MAX_BYTES) {
		sodium_memzero(out, len);
		free(out);
		seterr(errstr, errstr_size, "job: too large (%zu bytes > %d)",
		       len, PROTO_JOB_MAX_BYTES);
		return NULL;
	}
	if (lenp)
		*lenp = len;
	return out;
oom:
	seterr(errstr, errstr_size, "job: out of memory");
	return NULL;
}
