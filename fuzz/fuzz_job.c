/*
 * fuzz/fuzz_job.c - libFuzzer target for proto_job_parse(): any bytes, with
 * and without a job key, with and without require_sealed.  Whatever parses
 * must validate, serialize (sealed and not) and parse back to the same job;
 * errors must follow the "<field>: <reason>" shape.
 */
#include "proto/job.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The key the sealed seeds in fuzz/corpus/job/ were made with. */
static const char key_hex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int same_job(const proto_job_t *a, const proto_job_t *b)
{
	return a->v == b->v && strcmp(a->run_id, b->run_id) == 0 &&
	        same_str(a->agent_url, b->agent_url) && same_str(a->otp_setup, b->otp_setup) &&
	        same_str(a->otp_run, b->otp_run) && same_str(a->otp_upload, b->otp_upload) &&
	        same_str(a->prompt, b->prompt) && same_str(a->caller, b->caller) &&
	        a->enqueued_at == b->enqueued_at && a->max_runtime_sec == b->max_runtime_sec &&
	        ((!a->meta && !b->meta) || json_equal(a->meta, b->meta)) &&
	        strcmp(a->idempotency_key, b->idempotency_key) == 0 && a->has_priority == b->has_priority &&
	        a->priority == b->priority && strcmp(a->traceparent, b->traceparent) == 0 &&
	        same_str(a->webhook, b->webhook);
}

static void check_error(const char *err)
{
	/* Every rejection names a field: "<field>: <reason>". */
	const char *colon = strstr(err, ": ");

	if (!colon || colon == err || strlen(err) < 4)
		__builtin_trap();
}

static void round_trip(const proto_job_t *job, const uint8_t *key)
{
	char err[256];
	size_t len = 0;
	proto_job_t back;
	char *s;

	if (proto_job_validate(job, err, sizeof(err)) != 0)
		__builtin_trap();
	s = proto_job_serialize(job, key, &len, err, sizeof(err));
	if (!s) {
		/* Only a job grown past the size cap by escaping may fail. */
		if (strncmp(err, "job: too large", 14) != 0)
			__builtin_trap();
		return;
	}
	if (proto_job_parse(s, len, key, !!key, &back, err, sizeof(err)) != 0)
		__builtin_trap();
	if (!same_job(job, &back))
		__builtin_trap();
	proto_job_clear(&back);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t key[PROTO_JOB_KEY_BYTES];
	static int have_key;
	char err[256];
	proto_job_t job;
	int require;

	if (!have_key) {
		if (proto_job_key_parse(key_hex, key, err, sizeof(err)) != 0)
			__builtin_trap();
		have_key = 1;
	}
	for (require = 0; require <= 1; require++) {
		if (proto_job_parse((const char *)data, size, NULL, require, &job, err, sizeof(err)) == 0) {
			round_trip(&job, NULL);
			proto_job_clear(&job);
		} else {
			check_error(err);
		}
		if (proto_job_parse((const char *)data, size, key, require, &job, err, sizeof(err)) == 0) {
			round_trip(&job, key);
			proto_job_clear(&job);
		} else {
			check_error(err);
		}
	}
	return 0;
}
