/*
 * common/log.h - structured log lines on stderr, one JSON object per line:
 *   {"ts":"2026-11-26T00:13:33.123Z","level":"info","comp":"worker",
 *    "event":"run_claimed","run_id":"run_x","msg":"..."}
 *
 * Callers must never pass a secret (OTP, token, job key, prompt) to these
 * functions; the log module cannot tell a secret from any other string.
 * Safe to call from any thread: each line is written with one write(2).
 */
#ifndef RUNNEL_COMMON_LOG_H
#define RUNNEL_COMMON_LOG_H

typedef enum {
	RN_LOG_DEBUG = 0,
	RN_LOG_INFO,
	RN_LOG_WARN,
	RN_LOG_ERROR,
} rn_log_level_t;

/* comp is kept by reference: pass a string literal. */
void rn_log_init(const char *comp, rn_log_level_t min_level);
/* Parses "debug", "info", "warn", "error"; -1 when unknown. */
int rn_log_level_parse(const char *s);
/* Sends lines to fd instead of stderr (tests). */
void rn_log_set_fd(int fd);

/*
 * Trace context (W3C): while a run is registered here, every line that
 * names it carries "trace_id" too, from whichever thread logs it.  trace_id
 * is 32 hex digits.  Set when a run is claimed, cleared when its slot is
 * given back; a line about a run not registered (intake, webhooks) names
 * its trace with rn_log_traced.
 */
void rn_log_trace_set(const char *run_id, const char *trace_id);
void rn_log_trace_clear(const char *run_id);

/* run_id may be NULL.  fmt is printf-style and becomes "msg". */
void rn_log(rn_log_level_t level, const char *run_id, const char *event,
            const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The same for a run that is not registered (trace_id: 32 hex digits, or
 * NULL / "" for none), e.g. a run that already ended. */
void rn_log_traced(rn_log_level_t level, const char *run_id, const char *trace_id, const char *event,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define rn_log_debug(run, ev, ...) rn_log(RN_LOG_DEBUG, run, ev, __VA_ARGS__)
#define rn_log_info(run, ev, ...)  rn_log(RN_LOG_INFO, run, ev, __VA_ARGS__)
#define rn_log_warn(run, ev, ...)  rn_log(RN_LOG_WARN, run, ev, __VA_ARGS__)
#define rn_log_error(run, ev, ...) rn_log(RN_LOG_ERROR, run, ev, __VA_ARGS__)

#endif
