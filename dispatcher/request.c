/*
 * dispatcher/request.c - request bodies to jobs (see request.h).
 */
#include "dispatcher/request.h"

#include <inttypes.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "proto/keys.h"

static const char *const known[] = {
	"agent_url",
	"otp_setup",
	"otp_run",
	"otp_upload",
	"prompt",
	"run_id",
	"caller",
	"max_runtime_sec",
	"meta",
	"tenant",
	"permission_mode", /* asks (docs/protocol.md) */
	"idempotency_key", /* SPEC §2, for backends */
	"priority",
	"traceparent",
	"webhook",
	"budget", /* SPEC §5: {"max_tokens":N} */
	NULL,
};

static int is_known(const char *k)
{
	for (size_t i = 0; known[i]; i++)
		if (strcmp(known[i], k) == 0)
			return 1;
	return 0;
}

/*
 * jansson reports a duplicate key as "duplicate object key near '"name"'".
 * Name the field when it is one we know; never echo arbitrary input.
 */
static void duplicate_error(const json_error_t *jerr, char *errstr, size_t errstr_size)
{
	const char *p = strstr(jerr->text, "'\"");

	if (p) {
		char name[32];
		size_t n;
		const char *q = strstr(p + 2, "\"'");

		if (q && (n = (size_t)(q - (p + 2))) < sizeof(name)) {
			memcpy(name, p + 2, n);
			name[n] = '\0';
			if (is_known(name)) {
				snprintf(errstr, errstr_size, "%s: duplicate key", name);
				return;
			}
		}
	}
	snprintf(errstr, errstr_size, "body: duplicate key");
}

/*
 * 1 and *out when v is an integer, or a double with a whole value (60.0:
 * JSON has one number type, and JavaScript or Python callers send either
 * form); 0 otherwise.
 */
static int whole_number(const json_t *v, json_int_t *out)
{
	double r;

	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 1;
	}
	if (!json_is_real(v))
		return 0;
	r = json_real_value(v);
	/* The range test comes first: converting a double outside int64 is
	 * undefined behaviour. */
	if (!(r > -9.0e18 && r < 9.0e18) || r != (double)(json_int_t)r)
		return 0;
	*out = (json_int_t)r;
	return 1;
}

/* Copies a required or optional string field.  1 set, 0 absent, -1 error. */
static int get_string(json_t *root, const char *name, int required, int nullable,
                      char **dst, char *errstr, size_t errstr_size)
{
	json_t *v = json_object_get(root, name);

	if (!v || (nullable && json_is_null(v))) {
		if (required) {
			snprintf(errstr, errstr_size, "%s: missing", name);
			return -1;
		}
		return 0;
	}
	if (!json_is_string(v)) {
		snprintf(errstr, errstr_size, "%s: must be a string%s", name, nullable ? " or null" : "");
		return -1;
	}
	if (memchr(json_string_value(v), '\0', json_string_length(v))) {
		snprintf(errstr, errstr_size, "%s: contains a NUL character", name);
		return -1;
	}
	*dst = strdup(json_string_value(v));
	if (!*dst) {
		snprintf(errstr, errstr_size, "%s: out of memory", name);
		return -1;
	}
	return 1;
}

/* The body as JSON, or NULL with errstr saying what is wrong with it in
 * the caller's terms (duplicate keys and NUL characters are refused). */
static json_t *body_load(const char *body, size_t len, char *errstr, size_t errstr_size)
{
	json_error_t jerr;
	json_t *root;

	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	/* An integer past 64 bits is legal JSON (a JavaScript caller's meta
	 * may hold one): read the body again with every integer as a double,
	 * the way JavaScript reads it.  Only such a body pays for the second
	 * pass; whole_number() still takes its integer fields. */
	if (!root && json_error_code(&jerr) == json_error_numeric_overflow)
		root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_duplicate_key)
			duplicate_error(&jerr, errstr, errstr_size);
		else if (json_error_code(&jerr) == json_error_numeric_overflow)
			snprintf(errstr, errstr_size, "body: number out of range (line %d, column %d)",
			         jerr.line, jerr.column);
		else if (json_error_code(&jerr) == json_error_null_byte_in_key)
			snprintf(errstr, errstr_size, "body: an object key holds a NUL character (line %d, column %d)",
			         jerr.line, jerr.column);
		/* Refused, not allowed with JSON_ALLOW_NUL: workers parse jobs
		 * without it, so such a meta would send the job to the DLQ. */
		else if (json_error_code(&jerr) == json_error_null_character)
			snprintf(errstr, errstr_size, "body: a string holds a NUL character (line %d, column %d)",
			         jerr.line, jerr.column);
		else if (json_error_code(&jerr) == json_error_invalid_utf8)
			snprintf(errstr, errstr_size, "body: invalid UTF-8 (line %d, column %d)", jerr.line, jerr.column);
		else if (json_error_code(&jerr) == json_error_stack_overflow)
			snprintf(errstr, errstr_size, "body: nested deeper than %d levels", JSON_PARSER_MAX_DEPTH);
		else
			snprintf(errstr, errstr_size, "body: not valid JSON (line %d, column %d)",
			         jerr.line, jerr.column);
		return NULL;
	}
	return root;
}

/* 1 with errstr when root has a field the strict mode does not know, else 0. */
static int unknown_field(json_t *root, char *errstr, size_t errstr_size)
{
	const char *k;
	json_t *v;

	json_object_foreach(root, k, v)
	{
		if (!is_known(k)) {
			/* The name is the caller's own text: quote a short, safe prefix. */
			char name[40];
			size_t i;
			int plain = 1;

			for (i = 0; k[i] != '\0' && i < sizeof(name) - 1; i++) {
				name[i] = (k[i] >= 0x20 && k[i] < 0x7f && k[i] != '"') ? k[i] : '?';
				if (!isalnum((unsigned char)k[i]) && !strchr("_.-", k[i]))
					plain = 0;
			}
			name[i] = '\0';
			/* An error starts with the field it is about: a name that could
			 * not stand there ("", ": x", spaces) is reported of the body. */
			if (i == 0)
				snprintf(errstr, errstr_size, "body: unknown field with an empty name");
			else if (!plain)
				snprintf(errstr, errstr_size, "body: unknown field \"%s\"", name);
			else
				snprintf(errstr, errstr_size, "%s: unknown field", name);
			return 1;
		}
	}
	return 0;
}

/* max_runtime_sec: a positive integer up to this dispatcher's cap. */
static int max_runtime_take(json_t *v, int64_t cap, proto_job_t *job, char *errstr, size_t errstr_size)
{
	json_int_t n = 0;

	if (!whole_number(v, &n) || n <= 0) {
		snprintf(errstr, errstr_size, "max_runtime_sec: must be a positive integer");
		return -1;
	}
	if (n > cap) {
		snprintf(errstr, errstr_size, "max_runtime_sec: over this dispatcher's cap of %" PRId64,
		         cap);
		return -1;
	}
	job->max_runtime_sec = n;
	return 0;
}

/* budget: {"max_tokens":N}, N >= 1 (SPEC §5); the worker takes the
 * smaller of this and the config's. */
static int budget_take(json_t *v, proto_job_t *job, char *errstr, size_t errstr_size)
{
	const char *k;
	json_t *mt;
	json_int_t n = 0;

	if (!json_is_object(v)) {
		snprintf(errstr, errstr_size, "budget: must be an object {\"max_tokens\": N}");
		return -1;
	}
	json_object_foreach(v, k, mt)
	{
		if (strcmp(k, "max_tokens") != 0) {
			snprintf(errstr, errstr_size, "budget: unknown field (only max_tokens)");
			return -1;
		}
	}
	mt = json_object_get(v, "max_tokens");
	if (!mt || json_is_null(mt)) {
		snprintf(errstr, errstr_size, "budget.max_tokens: missing");
		return -1;
	}
	/* The bound is the API document's maximum (and whole_number's). */
	if (!whole_number(mt, &n) || n <= 0 || n > 9000000000000000000LL) {
		snprintf(errstr, errstr_size, "budget.max_tokens: must be a positive integer");
		return -1;
	}
	job->max_tokens = n;
	return 0;
}

int dispatcher_request_parse(const char *body, size_t len, dispatcher_req_mode_t mode,
                             int64_t max_runtime_cap, int64_t now_ms, proto_job_t *job,
                             char *errstr, size_t errstr_size)
{
	json_t *root, *v;
	const char *k;
	char *run_id = NULL, *tenant = NULL, *idem = NULL, *tp = NULL;
	int rc = -1;

	memset(job, 0, sizeof(*job));
	job->v = PROTO_JOB_VERSION;
	job->enqueued_at = now_ms;
	if (len == 0) {
		snprintf(errstr, errstr_size, "body: empty (expected a JSON object)");
		return -1;
	}
	root = body_load(body, len, errstr, errstr_size);
	if (!root)
		return -1;
	if (!json_is_object(root)) {
		snprintf(errstr, errstr_size, "body: must be a JSON object");
		goto out;
	}
	if (mode == DISPATCHER_REQ_STRICT && unknown_field(root, errstr, errstr_size))
		goto out;
	if (get_string(root, "agent_url", 1, 0, &job->agent_url, errstr, errstr_size) < 0 ||
	    get_string(root, "otp_setup", 1, 0, &job->otp_setup, errstr, errstr_size) < 0 ||
	    get_string(root, "otp_run", 1, 0, &job->otp_run, errstr, errstr_size) < 0 ||
	    get_string(root, "otp_upload", 0, 1, &job->otp_upload, errstr, errstr_size) < 0 ||
	    get_string(root, "prompt", 1, 0, &job->prompt, errstr, errstr_size) < 0 ||
	    get_string(root, "caller", 0, 0, &job->caller, errstr, errstr_size) < 0 ||
	    get_string(root, "run_id", 0, 0, &run_id, errstr, errstr_size) < 0 ||
	    get_string(root, "tenant", 0, 1, &tenant, errstr, errstr_size) < 0 ||
	    get_string(root, "idempotency_key", 0, 1, &idem, errstr, errstr_size) < 0 ||
	    get_string(root, "traceparent", 0, 1, &tp, errstr, errstr_size) < 0 ||
	    get_string(root, "webhook", 0, 1, &job->webhook, errstr, errstr_size) < 0)
		goto out;
	if (idem) {
		if (!proto_idem_key_valid(idem)) {
			snprintf(errstr, errstr_size, "idempotency_key: 1 to %d characters of A-Z a-z 0-9 _ . : -",
			         PROTO_IDEM_KEY_MAX);
			goto out;
		}
		snprintf(job->idempotency_key, sizeof(job->idempotency_key), "%s", idem);
	}
	/* In the body a traceparent is the caller's own claim: a bad one is a
	 * 400 (the request header's is only dropped, see runs.c). */
	if (tp && proto_traceparent_parse(tp, job->traceparent) != 0) {
		snprintf(errstr, errstr_size, "traceparent: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)");
		goto out;
	}
	v = json_object_get(root, "priority");
	if (v && !json_is_null(v)) {
		/* 7.0 is an integer to JSON Schema (and to a caller's JSON
		 * encoder): take an integral number, whatever its spelling. */
		double x = json_is_number(v) ? json_number_value(v) : -1;

		if (x < PROTO_PRIORITY_MIN || x > PROTO_PRIORITY_MAX || x != (double)(int)x) {
			snprintf(errstr, errstr_size, "priority: must be an integer from %d to %d", PROTO_PRIORITY_MIN,
			         PROTO_PRIORITY_MAX);
			goto out;
		}
		job->has_priority = 1;
		job->priority = (int)x;
	}
	if (tenant) {
		/* Characters: proto_job_validate's words; here only what fits. */
		if (tenant[0] == '\0') {
			snprintf(errstr, errstr_size, "tenant: empty");
			goto out;
		}
		if (strlen(tenant) > PROTO_TENANT_MAX) {
			snprintf(errstr, errstr_size, "tenant: longer than %d characters", PROTO_TENANT_MAX);
			goto out;
		}
		snprintf(job->tenant, sizeof(job->tenant), "%s", tenant);
	}
	if (run_id) {
		/* The characters are proto_job_validate's to judge (same words
		 * as everywhere else); only the length must fit the struct. */
		if (strlen(run_id) > PROTO_RUN_ID_MAX) {
			snprintf(errstr, errstr_size, "run_id: longer than %d characters", PROTO_RUN_ID_MAX);
			goto out;
		}
		snprintf(job->run_id, sizeof(job->run_id), "%s", run_id);
	} else {
		char minted[27];

		proto_run_id_mint(minted);
		snprintf(job->run_id, sizeof(job->run_id), "%s", minted);
	}
	v = json_object_get(root, "max_runtime_sec");
	if (v && !json_is_null(v) && max_runtime_take(v, max_runtime_cap, job, errstr, errstr_size) < 0)
		goto out;
	v = json_object_get(root, "budget");
	if (v && !json_is_null(v) && budget_take(v, job, errstr, errstr_size) < 0)
		goto out;
	/* permission_mode: bypass, ask or deny (SPEC §5). */
	v = json_object_get(root, "permission_mode");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || !proto_permission_mode_ok(json_string_value(v))) {
			snprintf(errstr, errstr_size, "permission_mode: must be bypass, ask or deny");
			goto out;
		}
		snprintf(job->permission_mode, sizeof(job->permission_mode), "%s", json_string_value(v));
	}
	v = json_object_get(root, "meta");
	if (v && !json_is_null(v)) {
		if (mode == DISPATCHER_REQ_STRICT && !json_is_object(v)) {
			snprintf(errstr, errstr_size, "meta: must be an object");
			goto out;
		}
		if (json_is_object(v))
			job->meta = json_deep_copy(v);
	}
	if (mode == DISPATCHER_REQ_LENIENT) {
		json_object_foreach(root, k, v)
		{
			if (is_known(k) && !(strcmp(k, "meta") == 0 && !json_is_object(v) && !json_is_null(v)))
				continue;
			if (!job->meta && !(job->meta = json_object())) {
				snprintf(errstr, errstr_size, "body: out of memory");
				goto out;
			}
			json_object_set(job->meta, k, v);
		}
	}
	if (proto_job_validate(job, errstr, errstr_size) < 0)
		goto out;
	rc = 0;
out:
	free(run_id);
	free(tenant);
	free(idem);
	free(tp);
	json_decref(root);
	return rc;
}
