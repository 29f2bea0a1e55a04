/*
 * fuzz/fuzz_request.c - libFuzzer target for dispatcher_request_parse(), the
 * body of POST /v1/runs and POST /stream: any bytes, in both modes.  A
 * rejection names a field ("<field>: <reason>"); a body that parses gives a
 * job that validates, serializes, and parses back (as a worker reads it from
 * Kafka) to the same job.
 */
#include "dispatcher/request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(const char *err)
{
	const char *colon = strstr(err, ": ");

	if (!colon || colon == err || strlen(err) < 4)
		__builtin_trap();
}

static void one(const uint8_t *data, size_t size, dispatcher_req_mode_t mode)
{
	proto_job_t job, back;
	char err[256] = "";
	size_t len = 0;
	char *value;

	if (dispatcher_request_parse((const char *)data, size, mode, 28800, 1700000000000, &job, err, sizeof(err)) < 0) {
		check_error(err);
		proto_job_clear(&job);
		return;
	}
	if (proto_job_validate(&job, err, sizeof(err)) < 0)
		__builtin_trap();
	value = proto_job_serialize(&job, NULL, &len, err, sizeof(err));
	if (!value) {
		/* Only a job over Kafka's message cap may fail here. */
		if (strncmp(err, "job: too large", 14) != 0)
			__builtin_trap();
		proto_job_clear(&job);
		return;
	}
	/* What a worker would make of it: the job it was asked for. */
	if (proto_job_parse(value, len, NULL, 0, &back, err, sizeof(err)) < 0)
		__builtin_trap();
	if (strcmp(back.run_id, job.run_id) != 0 || strcmp(back.prompt, job.prompt) != 0 ||
	    back.max_runtime_sec != job.max_runtime_sec ||
	    !((!back.meta && !job.meta) || json_equal(back.meta, job.meta)))
		__builtin_trap();
	proto_job_clear(&back);
	free(value);
	proto_job_clear(&job);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (sodium_init() < 0)
		return 0;
	one(data, size, DISPATCHER_REQ_STRICT);
	one(data, size, DISPATCHER_REQ_LENIENT);
	return 0;
}
