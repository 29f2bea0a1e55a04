/*
 * proto/envelope.h - the NDJSON envelope an agent prints and callers read
 * (SPEC §4): validation of one line, the replacement for an invalid line,
 * ts stamping, terminal detection, and the per-run step tracker that lets a
 * run close steps still "running" as "failed" before its terminal line.
 *
 * A proto_env_t holds one run's validation state and scratch memory; it is
 * not thread-safe but cheap, so each run owns one.  Nothing here does I/O.
 */
#ifndef RUNNEL_PROTO_ENVELOPE_H
#define RUNNEL_PROTO_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_ENV_LINE_MAX_DEFAULT  (1024 * 1024)  /* SPEC: over 1 MiB is invalid */
#define PROTO_ENV_ECHO_MAX          64             /* bytes of bad input quoted back */
#define PROTO_ENV_STEPS_MAX         4096           /* open steps tracked per run */
#define PROTO_ENV_REASON_MAX        96

/* Error codes the runner itself writes (SPEC §4). */
#define PROTO_ERR_CANCELLED         "cancelled"
#define PROTO_ERR_RUNTIME_CAP       "runtime_cap"
#define PROTO_ERR_WORKER_LOST       "worker_lost"
#define PROTO_ERR_WORKER_SHUTDOWN   "worker_shutdown"
#define PROTO_ERR_BOOTSTRAP_FAILED  "bootstrap_failed"
#define PROTO_ERR_BAG_REJECTED      "bag_rejected"
#define PROTO_ERR_AGENT_EXIT        "agent_exit"
#define PROTO_ERR_WRITEBACK_FAILED  "writeback_failed"
#define PROTO_ERR_INTERNAL          "internal"
#define PROTO_ERR_RESOURCE_LIMIT    "resource_limit"

typedef enum {
	PROTO_ENV_LOG = 1,
	PROTO_ENV_STEP,
	PROTO_ENV_RESULT,
	PROTO_ENV_ERROR,
} proto_env_type_t;

typedef enum {
	PROTO_ENV_PUBLISH = 0,  /* publish out->text */
	PROTO_ENV_DROP,         /* after the terminal line: drop it (counted) */
} proto_env_action_t;

typedef struct proto_env_line {
	proto_env_action_t action;
	proto_env_type_t   type;      /* type of the line to publish */
	int                valid;     /* 0: out->text is the log/warn replacement */
	int                terminal;  /* 1 for a valid result or error line */
	const char        *text;      /* line to publish, no newline; valid until the next call */
	size_t             len;
	char               reason[PROTO_ENV_REASON_MAX]; /* why invalid, "" when valid */
} proto_env_line_t;

typedef struct proto_env proto_env_t;

/* line_max 0 means PROTO_ENV_LINE_MAX_DEFAULT.  NULL on allocation failure. */
proto_env_t *proto_env_new(size_t line_max);
void proto_env_free(proto_env_t *env);

/*
 * Validates one line as printed by the agent (without its newline; a
 * trailing '\r' is tolerated).  Fills *out.  A valid line is published as the
 * agent wrote it, with ",\"ts\":<now_ms>" added when it had no ts.  An
 * invalid line becomes
 *   {"type":"log","level":"warn","message":"invalid agent output: <reason>: <first bytes>","ts":now}
 * Step lines update the tracker; the first terminal line marks the run
 * terminated and every later line comes back as PROTO_ENV_DROP.
 */
void proto_env_process(proto_env_t *env, const char *line, size_t len,
                       int64_t now_ms, proto_env_line_t *out);

/* Number of lines dropped after the terminal line. */
uint64_t proto_env_dropped(const proto_env_t *env);
/* 1 once a terminal line went through proto_env_process(). */
int proto_env_terminated(const proto_env_t *env);
/* Steps seen "running" and not yet closed. */
size_t proto_env_open_steps(const proto_env_t *env);

/*
 * Emits, oldest first, one line per open step:
 *   {"type":"step","id":..,"name":..,"status":"failed","error":"<why>","ts":now}
 * and forgets them.  emit returns 0 to continue, non-zero to stop (the steps
 * not yet emitted stay open).  Returns the number emitted.
 * A non-zero return means "that line was not published": its step stays
 * open too, so a later call retries it.  why NULL means "run ended".
 * out->text of the last proto_env_process() call stays valid across this
 * call (it uses its own buffers), so a worker holding a terminal line can
 * close the steps first and then publish that line.
 */
size_t proto_env_close_steps(proto_env_t *env, int64_t now_ms, const char *why,
                             int (*emit)(const char *line, size_t len, void *arg),
                             void *arg);

/*
 * Builders for lines the runner writes itself.  Return a malloc'd
 * NUL-terminated line (length in *lenp when lenp is non-NULL) or NULL on
 * allocation failure.  message is escaped; invalid UTF-8 in it is replaced.
 */
char *proto_env_make_log(const char *level, const char *message, int64_t ts, size_t *lenp);
char *proto_env_make_error(const char *code, const char *message, int64_t ts, size_t *lenp);

/* Mark a run terminated by a line the runner wrote (error or held result). */
void proto_env_set_terminated(proto_env_t *env);

#endif
