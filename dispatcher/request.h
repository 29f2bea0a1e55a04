/*
 * dispatcher/request.h - turns the JSON body of POST /v1/runs and
 * POST /stream into a proto_job_t, or into the one error a caller needs to
 * fix it: "<field>: <reason>" (the same form proto/job.h uses).  Pure: no
 * I/O, no globals; the messages never quote a value (values may be OTPs).
 *
 * Fields: agent_url, otp_setup, otp_run (strings, required), otp_upload
 * (string or null, optional), prompt (string, required), run_id (string,
 * optional), caller (string, optional), max_runtime_sec (positive integer,
 * optional), budget ({"max_tokens": positive integer}, optional; no other
 * key), meta (object, optional).  Unknown fields are refused for
 * /v1/runs; for /stream (the older SANDBOX_URL contract) they are carried
 * in meta (a top-level field wins over a meta key of the same name).
 */
#ifndef RUNNEL_DISPATCHER_REQUEST_H
#define RUNNEL_DISPATCHER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "proto/job.h"

typedef enum {
	DISPATCHER_REQ_STRICT = 0, /* /v1/runs */
	DISPATCHER_REQ_LENIENT,    /* /stream: unknown fields -> meta */
} dispatcher_req_mode_t;

/*
 * Parses body into *job (which the caller clears with proto_job_clear in
 * every case), mints a run_id when the body has none, stamps enqueued_at =
 * now_ms, and runs proto_job_validate, so the job is complete and valid on
 * return.  max_runtime_cap bounds max_runtime_sec.  Returns 0, or -1 with
 * errstr.
 */
int dispatcher_request_parse(const char *body, size_t len, dispatcher_req_mode_t mode,
                             int64_t max_runtime_cap, int64_t now_ms, proto_job_t *job,
                             char *errstr, size_t errstr_size);

#endif
