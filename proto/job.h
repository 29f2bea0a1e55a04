/*
 * proto/job.h - the v1 job: what the dispatcher enqueues on Kafka and a
 * worker consumes (SPEC §2).
 *
 * Data model and life cycle, in one place:
 *
 *   JSON bytes --proto_job_parse()--> proto_job_t --proto_job_serialize()--> JSON bytes
 *
 * A proto_job_t owns every string it points to.  Secrets (the three OTPs and
 * the prompt) are wiped with sodium_memzero() by proto_job_clear().
 *
 * Sealing: when a 32-byte job key is configured, otp_setup, otp_run,
 * otp_upload and prompt travel only inside "sealed": base64(nonce || box),
 * where box = XChaCha20-Poly1305-IETF over the JSON object
 * {"otp_setup","otp_run","otp_upload","prompt"} with run_id as associated
 * data.  A sealed job moved to another run_id fails to open.
 *
 * Every function here is pure: no I/O, no globals beyond libsodium's
 * one-time init, thread-safe.  Errors are returned as -1 with a message of
 * the form "<field>: <reason>" in errstr; the message never contains a secret.
 */
#ifndef RUNNEL_PROTO_JOB_H
#define RUNNEL_PROTO_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "proto/names.h" /* PROTO_RUN_ID_MAX */

#define PROTO_JOB_VERSION      1
#define PROTO_JOB_KEY_BYTES    32
#define PROTO_JOB_MAX_BYTES    (900 * 1024) /* under Kafka's 1 MB default */
#define PROTO_JOB_PROMPT_MAX   (512 * 1024)
#define PROTO_JOB_URL_MAX      2048
#define PROTO_JOB_OTP_MAX      1024
#define PROTO_JOB_CALLER_MAX   128
#define PROTO_TENANT_MAX       64 /* [A-Za-z0-9_.-]{1,64} */
#define PROTO_TENANT_DEFAULT   "default"
#define PROTO_IDEM_KEY_MAX     128 /* [A-Za-z0-9_.:-]{1,128} */
#define PROTO_PRIORITY_MIN     0
#define PROTO_PRIORITY_MAX     9
#define PROTO_PRIORITY_DEFAULT 5
#define PROTO_TRACEPARENT_LEN  55 /* "00-<32 hex>-<16 hex>-<2 hex>" */

typedef struct proto_job {
	int v; /* always PROTO_JOB_VERSION */
	char run_id[PROTO_RUN_ID_MAX + 1];
	char *agent_url;                   /* http:// or https:// */
	char *otp_setup;                   /* secret */
	char *otp_run;                     /* secret */
	char *otp_upload;                  /* secret; NULL = no writeback */
	char *prompt;                      /* secret-ish: never logged */
	char *caller;                      /* NULL when absent */
	char tenant[PROTO_TENANT_MAX + 1]; /* whose run (fair shares); "" = default */
	int64_t enqueued_at;               /* ms since epoch; 0 when absent */
	int64_t max_runtime_sec;           /* 0 when absent */
	json_t *meta;                      /* object or NULL; owned reference */
	/* permission_mode (SPEC §5): "bypass", "ask", "deny"; "" when absent */
	char permission_mode[8];
	/* Per tenant: a second job with the same key starts no run; "" absent. */
	char idempotency_key[PROTO_IDEM_KEY_MAX + 1];
	int has_priority; /* priority was given (else PROTO_PRIORITY_DEFAULT) */
	int priority;     /* 0-9, higher first within the tenant's share */
	/* W3C traceparent, normalised to version 00 form; "" when absent.  A
	 * value that is not W3C is dropped by proto_job_parse, which then sets
	 * traceparent_dropped so that the caller can log it (never fatal). */
	char traceparent[PROTO_TRACEPARENT_LEN + 1];
	int traceparent_dropped;
	char *webhook; /* completion webhook URL (syntax checked only); NULL absent */
	/* budget.max_tokens (SPEC §5): input + output tokens; 0 when absent */
	int64_t max_tokens;
} proto_job_t;

/* 1 when s is a permission mode: bypass, ask or deny. */
int proto_permission_mode_ok(const char *s);

/* Runs sodium_init() once per process (pthread_once).  0, or -1 when
 * libsodium cannot initialise.  Every proto function that needs libsodium
 * calls it; callers may call it early to fail fast. */
int proto_sodium_init(void);

/* Parses "hex" (exactly 64 hex digits) into key.  0 or -1 with errstr. */
int proto_job_key_parse(const char *hex, uint8_t key[PROTO_JOB_KEY_BYTES],
                        char *errstr, size_t errstr_size);

/*
 * Parses and validates one job.  key may be NULL (no key configured): a
 * sealed job is then refused.  With require_sealed set, an unsealed job is
 * refused.  On success *job is filled and owns its memory (release with
 * proto_job_clear()); on failure *job is left cleared.
 */
int proto_job_parse(const char *buf, size_t len,
                    const uint8_t *key, int require_sealed,
                    proto_job_t *job, char *errstr, size_t errstr_size);

/* 1 when s is a valid tenant name ([A-Za-z0-9_.-]{1,64}), else 0. */
int proto_tenant_valid(const char *s);

/* The job's tenant: job->tenant, or PROTO_TENANT_DEFAULT when empty. */
const char *proto_job_tenant(const proto_job_t *job);

/* The job's priority: job->priority when given, else the default (5). */
int proto_job_priority(const proto_job_t *job);

/* 1 when s is a valid idempotency key ([A-Za-z0-9_.:-]{1,128}), else 0. */
int proto_idem_key_valid(const char *s);

/*
 * Checks a W3C Trace Context traceparent (version 00, or a later version
 * read as 00 per the spec's forward-compatibility rule: its first 55
 * characters, then "-" or the end).  Lowercase hex only; the trace id and
 * parent id must not be all zeros; version ff is invalid.  On success the
 * normalised "00-…" form goes to out and 0 is returned; -1 otherwise.
 */
int proto_traceparent_parse(const char *s, char out[PROTO_TRACEPARENT_LEN + 1]);

/* The trace id (32 hex digits) of a valid traceparent into out. */
void proto_traceparent_trace_id(const char *tp, char out[33]);

/* A child of tp: the same trace id and flags, a new random parent (span)
 * id.  tp must be valid (proto_traceparent_parse's out). */
void proto_traceparent_child(const char *tp, char out[PROTO_TRACEPARENT_LEN + 1]);

/* Validates a job built in memory (the dispatcher's path).  0 or -1. */
int proto_job_validate(const proto_job_t *job, char *errstr, size_t errstr_size);

/*
 * Serializes a valid job to compact JSON.  With key non-NULL the secrets are
 * sealed.  Returns a malloc'd NUL-terminated string the caller frees (wipe
 * it first when unsealed: it holds OTPs), with its length in *lenp; NULL on
 * error.
 */
char *proto_job_serialize(const proto_job_t *job, const uint8_t *key,
                          size_t *lenp, char *errstr, size_t errstr_size);

/* Frees and wipes everything the job owns and zeroes the struct. */
void proto_job_clear(proto_job_t *job);

#endif
