/*
 * agent/emit.h - runnel-agent's envelope output (SPEC §4): one JSON line per
 * write on stdout, with ts.  Every line passes one scrubber that replaces the
 * provider key wherever it would appear, so no path (a provider echoing the
 * key in an error, a tool printing the environment) can publish it.
 */
#ifndef RUNNEL_AGENT_EMIT_H
#define RUNNEL_AGENT_EMIT_H

#include <stdint.h>

#include <jansson.h>

/* The secret never to print (copied; NULL or "" for none). */
void agent_emit_secret(const char *secret);
void agent_emit_free(void);

/* Prints obj as one line and steals the reference.  0, or -1 when stdout
 * is gone. */
int agent_emit(json_t *obj);
void agent_emit_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void agent_emit_result(const char *message);
void agent_emit_error(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A step: running (args may be NULL), then succeeded or failed.  result and
 * error are stolen. */
void agent_emit_step_running(const char *id, const char *name, json_t *args);
void agent_emit_step_done(const char *id, const char *name, int ok, json_t *args, json_t *result,
                          const char *error, int64_t duration_ms);

/* Arbitrary bytes as valid UTF-8 (bad bytes and NULs become U+FFFD), cut to
 * max bytes of input at a character boundary with a marker when cut.  A new
 * string (NULL on OOM). */
char *agent_cap_text(const char *s, size_t len, size_t max);

#endif
