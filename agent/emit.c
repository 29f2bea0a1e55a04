/*
 * agent/emit.c - envelope lines on stdout (see emit.h).
 */
#include "agent/emit.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "common/util.h"
#include "proto/utf8.h"

static char *secret;
static size_t secret_len;

void agent_emit_secret(const char *s)
{
	free(secret);
	secret = (s && *s) ? strdup(s) : NULL;
	secret_len = secret ? strlen(secret) : 0;
}

void agent_emit_free(void)
{
	free(secret);
	secret = NULL;
	secret_len = 0;
}

int agent_emit(json_t *obj)
{
	if (!obj)
		return -1;
	if (!json_object_get(obj, "ts"))
		json_object_set_new(obj, "ts", json_integer(rn_now_ms()));
	char *s = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!s)
		return -1;
	if (secret_len >= 4) {
		/* Overwrite in place: the replacement is never longer. */
		char *hit;
		while ((hit = strstr(s, secret))) {
			static const char mark[] = "[redacted]";
			size_t m = sizeof(mark) - 1 < secret_len ? sizeof(mark) - 1 : secret_len;
			memcpy(hit, mark, m);
			memmove(hit + m, hit + secret_len, strlen(hit + secret_len) + 1);
		}
	}
	size_t n = strlen(s);
	s[n] = '\0';
	char *line = malloc(n + 1);
	int rc = -1;
	if (line) {
		memcpy(line, s, n);
		line[n] = '\n';
		rc = rn_write_all(1, line, n + 1, 0);
		free(line);
	}
	free(s);
	return rc;
}

/* {"type":type, key:value, "message":<fmt, cut to max bytes>}. */
__attribute__((format(printf, 5, 0))) static void emit_message(const char *type, const char *key, const char *value, size_t max,
                                                               const char *fmt, va_list ap)
{
	char msg[2048];
	vsnprintf(msg, max < sizeof(msg) ? max : sizeof(msg), fmt, ap);
	agent_emit(json_pack("{s:s,s:s,s:s}", "type", type, key, value, "message", msg));
}

void agent_emit_log(const char *level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_message("log", "level", level, 2048, fmt, ap);
	va_end(ap);
}

void agent_emit_result(const char *message)
{
	agent_emit(json_pack("{s:s,s:s}", "type", "result", "message", message ? message : ""));
}

void agent_emit_error(const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_message("error", "code", code, 1024, fmt, ap);
	va_end(ap);
}

void agent_emit_step_running(const char *id, const char *name, json_t *args)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "type", "step", "id", id, "name", name, "status", "running");
	if (o && args)
		json_object_set(o, "args", args);
	agent_emit(o);
}

void agent_emit_step_done(const char *id, const char *name, int ok, json_t *args, json_t *result,
                          const char *error, int64_t duration_ms)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I}", "type", "step", "id", id, "name", name, "status",
	                      ok ? "succeeded" : "failed", "durationMs", (json_int_t)duration_ms);
	if (!o) {
		json_decref(result);
		return;
	}
	if (args)
		json_object_set(o, "args", args);
	if (result)
		json_object_set_new(o, "result", result);
	if (!ok)
		json_object_set_new(o, "error", json_pack("{s:s}", "message", error ? error : "the tool failed"));
	agent_emit(o);
}

char *agent_cap_text(const char *s, size_t len, size_t max)
{
	static const char mark[] = "\n[... output cut]";
	size_t budget = len < max ? len : max;
	/* Tool output is arbitrary bytes; JSON needs valid UTF-8. */
	char *r = malloc(3 * budget + sizeof(mark));
	if (!r)
		return NULL;
	size_t n = proto_utf8_sanitize(r, s, len, budget);
	if (len > max) {
		memcpy(r + n, mark, sizeof(mark));
	} else {
		r[n] = '\0';
	}
	return r;
}
