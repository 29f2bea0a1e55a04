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

#define PROTO_ENV_LINE_MAX_DEFAULT (1024 * 1024) /* SPEC: over 1 MiB is invalid */
#define PROTO_ENV_ECHO_MAX         64            /* bytes of bad input quoted back */
#define PROTO_ENV_STEPS_MAX        4096          /* open steps tracked per run */
#define PROTO_ENV_CODE_MAX         64            /* the held error code, with its NUL */
#define PROTO_ENV_REASON_MAX       96
#define PROTO_ENV_ASKS_MAX         256  /* open asks per run */
#define PROTO_ENV_ASKS_KEPT        1024 /* asks remembered (open + settled) */

/* Error codes the runner itself writes (SPEC §4). */
#define PROTO_ERR_CANCELLED        "cancelled"
#define PROTO_ERR_RUNTIME_CAP      "runtime_cap"
#define PROTO_ERR_WORKER_LOST      "worker_lost"
#define PROTO_ERR_WORKER_SHUTDOWN  "worker_shutdown"
#define PROTO_ERR_BOOTSTRAP_FAILED "bootstrap_failed"
#define PROTO_ERR_BAG_REJECTED     "bag_rejected"
#define PROTO_ERR_AGENT_EXIT       "agent_exit"
#define PROTO_ERR_WRITEBACK_FAILED "writeback_failed"
#define PROTO_ERR_INTERNAL         "internal"
#define PROTO_ERR_RESOURCE_LIMIT   "resource_limit"
#define PROTO_ERR_BUDGET_EXCEEDED  "budget_exceeded"

typedef enum {
	PROTO_ENV_LOG = 1,
	PROTO_ENV_STEP,
	PROTO_ENV_RESULT,
	PROTO_ENV_ERROR,
	PROTO_ENV_ASK,
} proto_env_type_t;

/* Outcome of proto_env_settle_ask(). */
typedef enum {
	PROTO_ASK_SETTLED = 0, /* *line holds the settlement line */
	PROTO_ASK_UNKNOWN,     /* no ask with that id was opened */
	PROTO_ASK_CLOSED,      /* the ask is already settled */
	PROTO_ASK_BAD_OPTION,  /* the option is not one of the ask's options */
	PROTO_ASK_NOMEM,
} proto_ask_rc_t;

typedef enum {
	PROTO_ENV_PUBLISH = 0, /* publish out->text */
	PROTO_ENV_DROP,        /* after the terminal line: drop it (counted) */
} proto_env_action_t;

typedef struct proto_env_line {
	proto_env_action_t action;
	proto_env_type_t type; /* type of the line to publish */
	int valid;             /* 0: out->text is the log/warn replacement */
	int terminal;          /* 1 for a valid result or error line */
	const char *text;      /* line to publish, no newline; valid until the next call */
	size_t len;
	char reason[PROTO_ENV_REASON_MAX]; /* why invalid, "" when valid */
	char code[PROTO_ENV_CODE_MAX];     /* a valid error line's code (cut), else "" */
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
 *
 * An ask line (SPEC §4) is valid only after proto_env_allow_asks(env, 1)
 * (the run's permission_mode is ask) and only as it opens: `id` (1-128 of
 * [A-Za-z0-9_.:-], new in the run), `kind` permission | question,
 * `status` "open", `options` (required for permission, else optional: an
 * array of {"id","label"} strings), `question` (a string, for question),
 * `title` (a string when present).  Valid asks are tracked until settled.
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

/* 1: ask lines are accepted (permission_mode ask); 0 (the default): an ask
 * line is invalid ("ask: the run's permission_mode is not ask"). */
void proto_env_allow_asks(proto_env_t *env, int allow);

/* Asks opened and not yet settled. */
size_t proto_env_open_asks(const proto_env_t *env);

/* The oldest open ask's id (valid until the next call that changes the
 * asks) and the now_ms it was opened at; NULL when none is open. */
const char *proto_env_oldest_ask(const proto_env_t *env, int64_t *opened_ms);

/*
 * Settles the open ask id: status "answered" (with option or text),
 * "rejected" or "expired".  On PROTO_ASK_SETTLED *line is a malloc'd
 *   {"type":"ask","id":..,"kind":..,"title":..,"status":..,"option"|"text":..,"ts":now}
 * (title when the ask had one) and the ask is closed.  An option that is
 * not one of the ask's options is PROTO_ASK_BAD_OPTION (nothing changes).
 */
proto_ask_rc_t proto_env_settle_ask(proto_env_t *env, const char *id, const char *status,
                                    const char *option, const char *text, int64_t now_ms,
                                    char **line, size_t *lenp);

/*
 * Settles every open ask as status ("rejected" when a run ends), oldest
 * first, handing each line to emit (as proto_env_close_steps does: a
 * non-zero return stops and leaves that ask open).  on_closed, when not
 * NULL, is called with each closed ask's id after its line was emitted.
 * Returns the number settled.
 */
size_t proto_env_close_asks(proto_env_t *env, int64_t now_ms, const char *status,
                            int (*emit)(const char *line, size_t len, void *arg),
                            void (*on_closed)(const char *id, void *arg), void *arg);

#endif
