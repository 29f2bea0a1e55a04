/*
 * worker/agent_acp.c - runnel as an Agent Client Protocol client (see
 * agent_acp.h): the JSON-RPC session with the agent and the mapping of its
 * session updates to envelope lines.
 */
#include "worker/agent_acp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sodium.h>

#include "common/dynbuf.h"
#include "common/io.h"
#include "common/log.h"
#include "common/sandbox_layout.h"
#include "common/util.h"
#include "proto/control.h"
#include "worker/cgroup.h"
#include "worker/sandbox.h"

#define ACP_PROTOCOL_VERSION 1
#define ACP_WORKSPACE        RN_SANDBOX_WORKSPACE
#define ACP_STEPS_MAX        1024
#define ACP_ASKS_MAX         64
#define ACP_SECRETS_MAX      32
#define ACP_THOUGHT_MAX      (16 * 1024)
#define ACP_FS_MAX           (4 * 1024 * 1024)

/* Ids of the requests runnel sends (the agent's own ids are echoed verbatim). */
enum {
	ID_INITIALIZE = 1,
	ID_SESSION_NEW,
	ID_SET_MODE,
	ID_SET_MODEL,
	ID_PROMPT,
};

typedef enum {
	PH_INIT = 0, /* initialize sent */
	PH_NEW,      /* session/new sent */
	PH_READY,    /* a warm session: answered session/new, waits for its run */
	PH_SETUP,    /* set_mode / set_model sent */
	PH_PROMPT,   /* the turn runs */
	PH_DONE,     /* terminal line emitted, or the turn was cancelled */
} phase_t;

typedef struct step {
	char *id;
	char *name; /* from _meta.claudeCode.toolName, else title, else kind */
	char *title;
	json_t *args; /* rawInput (owned) */
	int64_t t0;   /* monotonic ms when runnel first heard of it */
	int running;  /* the running line was emitted */
	int done;
} step_t;

typedef struct ask {
	char id[24];     /* "ask_N" */
	json_t *rpc_id;  /* the agent's request id (owned) */
	json_t *options; /* the request's options (owned) */
} ask_t;

struct worker_acp {
	worker_acp_opts_t o;
	phase_t phase;
	unsigned awaiting; /* bit 1 << ID_*: sent, not answered yet */
	char *session_id;
	json_t *modes;                    /* session/new result.modes (owned) or NULL */
	char *agent_name, *agent_version; /* initialize's agentInfo */
	int cancelled;
	int fs;           /* fs requests served */
	rn_dynbuf_t text; /* the agent's message, its first WORKER_ACP_TEXT_MAX bytes */
	int text_cut;
	int text_break; /* a tool ran since the last text: start a paragraph */
	char *thought;
	size_t thought_len;
	json_t *usage; /* last usage_update or prompt usage (owned) */
	step_t steps[ACP_STEPS_MAX];
	size_t nsteps;
	ask_t asks[ACP_ASKS_MAX];
	size_t nasks;
	unsigned ask_seq;
	char *secrets[ACP_SECRETS_MAX];
	size_t nsecrets;
};

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

int worker_acp_perm_parse(const char *s, worker_acp_perm_t *out)
{
	if (!s || !strcmp(s, "bypass"))
		*out = WORKER_ACP_PERM_BYPASS;
	else if (!strcmp(s, "ask"))
		*out = WORKER_ACP_PERM_ASK;
	else if (!strcmp(s, "deny"))
		*out = WORKER_ACP_PERM_DENY;
	else
		return -1;
	return 0;
}

static int name_is_secret(const char *name)
{
	static const char *const words[] = { "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "AUTH", "CREDENTIAL" };
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcasestr(name, words[i]))
			return 1;
	return 0;
}

/* Replaces every secret in text (in place when shorter: "[redacted]" is
 * only used for secrets of 10 bytes or more, so the text never grows). */
static void redact(const worker_acp_t *s, char *text)
{
	for (size_t i = 0; i < s->nsecrets; i++) {
		const char *sec = s->secrets[i];
		size_t sl = strlen(sec);
		char *p;
		while ((p = strstr(text, sec))) {
			static const char mark[] = "[redacted]";
			memcpy(p, mark, sizeof(mark) - 1);
			memmove(p + sizeof(mark) - 1, p + sl, strlen(p + sl) + 1);
		}
	}
}

/* The workspace as the agent sees it. */
static const char *ws_path(const worker_acp_t *s)
{
	return s->o.cwd ? s->o.cwd : ACP_WORKSPACE;
}

/* Emits an envelope object (consumed). */
static void emit_obj(worker_acp_t *s, const worker_agent_io_t *io, json_t *obj)
{
	if (!obj)
		return;
	char *line = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!line)
		return;
	redact(s, line);
	io->emit(io->loop, line, strlen(line));
	free(line);
}

static void emit_log(worker_acp_t *s, const worker_agent_io_t *io, const char *level,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void emit_log(worker_acp_t *s, const worker_agent_io_t *io, const char *level,
                     const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit_obj(s, io, json_pack("{s:s,s:s,s:s}", "type", "log", "level", level, "message", msg));
}

/* Writes one JSON-RPC message (consumed).  wipe: the text held the prompt. */
static int send_obj(worker_acp_t *s, const worker_agent_io_t *io, json_t *msg, int wipe)
{
	(void)s;
	if (!msg)
		return -1;
	char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text)
		return -1;
	size_t n = strlen(text);
	char *line = malloc(n + 1);
	int rc = -1;
	if (line) {
		memcpy(line, text, n);
		line[n] = '\n';
		rc = io->write(io->loop, line, n + 1);
		if (wipe)
			sodium_memzero(line, n + 1);
		free(line);
	}
	if (wipe)
		sodium_memzero(text, n);
	free(text);
	return rc;
}

static int send_request(worker_acp_t *s, const worker_agent_io_t *io, int id, const char *method,
                        json_t *params, int wipe)
{
	s->awaiting |= 1u << id;
	return send_obj(s, io, json_pack("{s:s,s:i,s:s,s:o}", "jsonrpc", "2.0", "id", id, "method", method, "params", params), wipe);
}

static void send_result(worker_acp_t *s, const worker_agent_io_t *io, json_t *rpc_id, json_t *result)
{
	send_obj(s, io, json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", rpc_id, "result", result), 0);
}

static void send_error(worker_acp_t *s, const worker_agent_io_t *io, json_t *rpc_id, int code,
                       const char *message)
{
	send_obj(s, io, json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", rpc_id, "error", "code", code, "message", message), 0);
}

/* The text of an ACP content list ([{type:"content",content:{type:"text",text}}])
 * or of a plain string; malloc'd, NULL when there is none. */
static char *content_text(const json_t *v)
{
	if (json_is_string(v))
		return strdup(json_string_value(v));
	if (!json_is_array(v))
		return NULL;
	size_t i;
	json_t *c;
	rn_dynbuf_t out;
	/* The texts joined by LF, as many whole ones as fit the cap with a NUL. */
	rn_dynbuf_init(&out, WORKER_ACP_RESULT_MAX - 1);
	int any = 0;
	json_array_foreach(v, i, c)
	{
		const json_t *inner = json_object_get(c, "content");
		const char *t = json_string_value(json_object_get(inner ? inner : c, "text"));
		if (!t)
			continue;
		size_t tl = strlen(t);
		if (rn_dynbuf_reserve(&out, (any ? 1 : 0) + tl) < 0 || (any && rn_dynbuf_add(&out, "\n", 1) < 0) ||
		    rn_dynbuf_add(&out, t, tl) < 0)
			break;
		any = 1;
	}
	if (!any) {
		rn_dynbuf_free(&out);
		return NULL;
	}
	return rn_dynbuf_take(&out, NULL);
}

/* ------------------------------------------------------------------------
 * Steps
 * ------------------------------------------------------------------------ */

static step_t *step_find(worker_acp_t *s, const char *id)
{
	for (size_t i = 0; i < s->nsteps; i++)
		if (!strcmp(s->steps[i].id, id))
			return &s->steps[i];
	return NULL;
}

static void step_clear(step_t *st)
{
	free(st->id);
	free(st->name);
	free(st->title);
	json_decref(st->args);
	memset(st, 0, sizeof(*st));
}

/* Forgets finished steps so the table does not fill up. */
static void steps_compact(worker_acp_t *s)
{
	size_t w = 0;
	for (size_t i = 0; i < s->nsteps; i++) {
		if (s->steps[i].done) {
			step_clear(&s->steps[i]);
			continue;
		}
		if (w != i) {
			s->steps[w] = s->steps[i];
			memset(&s->steps[i], 0, sizeof(s->steps[i]));
		}
		w++;
	}
	s->nsteps = w;
}

static step_t *step_get(worker_acp_t *s, const char *id)
{
	step_t *st = step_find(s, id);
	if (st)
		return st;
	if (s->nsteps == ACP_STEPS_MAX)
		steps_compact(s);
	if (s->nsteps == ACP_STEPS_MAX)
		return NULL;
	st = &s->steps[s->nsteps];
	memset(st, 0, sizeof(*st));
	st->id = strdup(id);
	if (!st->id)
		return NULL;
	st->t0 = rn_mono_ms();
	s->nsteps++;
	return st;
}

static void set_str(char **dst, const char *v)
{
	if (!v || !*v)
		return;
	char *n = strdup(v);
	if (!n)
		return;
	free(*dst);
	*dst = n;
}

/* Takes what an update (or a permission request's toolCall) says. */
static void step_merge(step_t *st, const json_t *u)
{
	const char *tool_name = json_string_value(json_object_get(
	        json_object_get(json_object_get(u, "_meta"), "claudeCode"), "toolName"));
	const char *title = json_string_value(json_object_get(u, "title"));
	const char *kind = json_string_value(json_object_get(u, "kind"));
	set_str(&st->title, title);
	if (tool_name)
		set_str(&st->name, tool_name);
	else if (!st->name && title)
		set_str(&st->name, title);
	else if (!st->name && kind)
		set_str(&st->name, kind);
	json_t *raw = json_object_get(u, "rawInput");
	if (raw && !json_is_null(raw) && !(json_is_object(raw) && json_object_size(raw) == 0)) {
		json_decref(st->args);
		st->args = json_deep_copy(raw);
	}
}

/* v (consumed) as published: its JSON text when longer than
 * WORKER_ACP_RESULT_MAX becomes a string of its first bytes (cut on a UTF-8
 * boundary), so one large tool input or output never makes an envelope line
 * over the line cap. */
static json_t *capped(json_t *v)
{
	if (!v)
		return json_null();
	char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!d || strlen(d) <= WORKER_ACP_RESULT_MAX) {
		free(d);
		return v;
	}
	json_decref(v);
	size_t n = WORKER_ACP_RESULT_MAX;
	while (n && ((unsigned char)d[n] & 0xC0) == 0x80)
		n--; /* d[n] is now the first byte of the character that is cut off */
	json_t *cut = json_stringn(d, n);
	free(d);
	return cut ? cut : json_string("(too large to show)");
}

static void step_running(worker_acp_t *s, const worker_agent_io_t *io, step_t *st)
{
	if (st->running || st->done)
		return;
	st->running = 1;
	emit_obj(s, io, json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "step", "id", st->id, "name", st->name ? st->name : "tool", "status", "running", "args", st->args ? capped(json_incref(st->args)) : json_object()));
}

/* The step's result as published: rawOutput, else the content's text,
 * cut to WORKER_ACP_RESULT_MAX. */
/* The step's result as published: rawOutput, else the content's text. */
static json_t *step_result(const json_t *u)
{
	json_t *raw = json_object_get(u, "rawOutput");
	if (raw && !json_is_null(raw))
		return capped(json_incref(raw));
	char *t = content_text(json_object_get(u, "content"));
	json_t *res = t ? json_string(t) : json_null();
	free(t);
	return capped(res);
}

static void step_finish(worker_acp_t *s, const worker_agent_io_t *io, step_t *st, const json_t *u,
                        int failed)
{
	if (st->done)
		return;
	step_running(s, io, st);
	st->done = 1;
	json_t *result = step_result(u);
	/* Codex reports a command that exited non-zero as "completed". */
	json_t *ec = json_object_get(json_object_get(u, "rawOutput"), "exit_code");
	char why[256];
	why[0] = '\0';
	if (json_is_integer(ec) && json_integer_value(ec) != 0) {
		failed = 1;
		snprintf(why, sizeof(why), "the command exited with status %lld",
		         (long long)json_integer_value(ec));
	}
	json_t *line = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:I}", "type", "step", "id", st->id,
	                         "name", st->name ? st->name : "tool",
	                         "status", failed ? "failed" : "succeeded",
	                         "args", st->args ? capped(json_incref(st->args)) : json_object(), "result", result,
	                         "durationMs", (json_int_t)(rn_mono_ms() - st->t0));
	if (line && failed) {
		if (!why[0]) {
			char *t = json_is_string(result) ? strdup(json_string_value(result)) : content_text(json_object_get(u, "content"));
			snprintf(why, sizeof(why), "%s", t && *t ? t : "the tool failed");
			free(t);
		}
		json_t *e = json_string(why);
		json_object_set_new(line, "error", e ? e : json_string("the tool failed"));
	}
	emit_obj(s, io, line);
}

/* Closes every open step as failed (the turn ended without their end). */
static void steps_close(worker_acp_t *s, const worker_agent_io_t *io, const char *why)
{
	for (size_t i = 0; i < s->nsteps; i++) {
		step_t *st = &s->steps[i];
		if (st->done)
			continue;
		st->done = 1;
		if (!st->running)
			continue;
		emit_obj(s, io, json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "type", "step", "id", st->id, "name", st->name ? st->name : "tool", "status", "failed", "error", why, "durationMs", (json_int_t)(rn_mono_ms() - st->t0)));
	}
}

/* ------------------------------------------------------------------------
 * The turn's end
 * ------------------------------------------------------------------------ */

static void flush_thought(worker_acp_t *s, const worker_agent_io_t *io)
{
	if (!s->thought_len)
		return;
	emit_log(s, io, "debug", "thinking: %s", s->thought);
	s->thought_len = 0;
	s->thought[0] = '\0';
}

static void end_error(worker_acp_t *s, const worker_agent_io_t *io, const char *code, const char *message)
{
	if (s->phase == PH_DONE)
		return;
	flush_thought(s, io);
	steps_close(s, io, "the agent's turn ended before the tool finished");
	s->phase = PH_DONE;
	emit_obj(s, io, json_pack("{s:s,s:s,s:s}", "type", "error", "code", code, "message", message));
}

static void end_turn(worker_acp_t *s, const worker_agent_io_t *io, const json_t *result)
{
	const char *stop = json_string_value(json_object_get(result, "stopReason"));
	flush_thought(s, io);
	if (s->cancelled) {
		/* The worker writes the cancelled line itself. */
		steps_close(s, io, "the run was cancelled");
		s->phase = PH_DONE;
		return;
	}
	if (!stop || strcmp(stop, "end_turn") != 0) {
		char msg[768];
		const char *code = "agent_stopped";
		if (stop && !strcmp(stop, "max_tokens"))
			code = "max_tokens";
		else if (stop && !strcmp(stop, "refusal"))
			code = "agent_refused";
		else if (stop && !strcmp(stop, "max_turn_requests"))
			code = "max_turn_requests";
		else if (stop && !strcmp(stop, "cancelled"))
			code = "agent_cancelled";
		snprintf(msg, sizeof(msg), "The agent stopped its turn (%s)%s%.600s", stop ? stop : "no stop reason",
		         s->text.len ? ": " : ".", s->text.len ? s->text.p : "");
		end_error(s, io, code, msg);
		return;
	}
	steps_close(s, io, "the agent's turn ended before the tool finished");
	s->phase = PH_DONE;
	json_t *line = json_pack("{s:s,s:s}", "type", "result", "message", s->text.p ? s->text.p : "");
	json_t *u = json_object_get(result, "usage");
	if (line && u)
		json_object_set(line, "usage", u);
	else if (line && s->usage)
		json_object_set(line, "usage", s->usage);
	emit_obj(s, io, line);
}

/* ------------------------------------------------------------------------
 * Session setup
 * ------------------------------------------------------------------------ */

/* The config's mcp_servers in ACP's shape: env and headers as name/value lists. */
static json_t *mcp_to_acp(const json_t *servers)
{
	json_t *out = json_array();
	size_t i;
	json_t *sv;
	json_array_foreach(servers, i, sv)
	{
		const char *name = json_string_value(json_object_get(sv, "name"));
		const char *cmd = json_string_value(json_object_get(sv, "command"));
		const char *url = json_string_value(json_object_get(sv, "url"));
		if (!name || (!cmd && !url))
			continue;
		json_t *e = json_object();
		json_object_set_new(e, "name", json_string(name));
		json_t *pairs = json_array();
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(sv, cmd ? "env" : "headers"), k, v)
		{
			if (json_is_string(v))
				json_array_append_new(pairs, json_pack("{s:s,s:O}", "name", k, "value", v));
		}
		if (cmd) {
			json_object_set_new(e, "command", json_string(cmd));
			json_t *args = json_object_get(sv, "args");
			json_object_set_new(e, "args", json_is_array(args) ? json_deep_copy(args) : json_array());
			json_object_set_new(e, "env", pairs);
		} else {
			json_object_set_new(e, "type", json_string("http"));
			json_object_set_new(e, "url", json_string(url));
			json_object_set_new(e, "headers", pairs);
		}
		json_array_append_new(out, e);
	}
	return out;
}

static int send_session_new(worker_acp_t *s, const worker_agent_io_t *io)
{
	json_t *p = json_pack("{s:s,s:o}", "cwd", ws_path(s), "mcpServers",
	                      mcp_to_acp(s->o.mcp_servers));
	/* Claude's adapter appends _meta.systemPrompt.append to its own preset;
	 * Codex takes the system prompt on its command line (prepare). */
	if (p && s->o.preset == WORKER_ACP_PRESET_CLAUDE && s->o.system_prompt && *s->o.system_prompt)
		json_object_set_new(p, "_meta", json_pack("{s:{s:s}}", "systemPrompt", "append", s->o.system_prompt));
	s->phase = PH_NEW;
	return send_request(s, io, ID_SESSION_NEW, "session/new", p, 0);
}

/* 1 when the session/new result offers mode id. */
static int mode_offered(const worker_acp_t *s, const char *id)
{
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(s->modes, "availableModes"), i, m) if (json_is_string(json_object_get(m, "id")) && !strcmp(json_string_value(json_object_get(m, "id")), id)) return 1;
	return 0;
}

/* The mode a preset asks for under the run's permission_mode. */
static const char *preset_mode(const worker_acp_t *s)
{
	switch (s->o.preset) {
	case WORKER_ACP_PRESET_CLAUDE:
		/* default: every tool that needs approval comes to us as a
		 * session/request_permission, answered per permission_mode. */
		return s->o.perm == WORKER_ACP_PERM_BYPASS ? "bypassPermissions" : "default";
	case WORKER_ACP_PRESET_CODEX:
		/* read-only (Codex's default) runs commands in Codex's own sandbox
		 * and reports no tool call at all: never use it. */
		return s->o.perm == WORKER_ACP_PERM_BYPASS ? "full-access" : "auto";
	case WORKER_ACP_PRESET_NONE:
		break;
	}
	return NULL;
}

static int send_prompt(worker_acp_t *s, const worker_agent_io_t *io)
{
	json_t *blocks = json_array();
	/* ACP has no field for earlier turns: they go first, as text. */
	if (json_is_array(s->o.history) && json_array_size(s->o.history)) {
		size_t i;
		json_t *h;
		json_t *lines = json_array();
		json_array_foreach(s->o.history, i, h)
		{
			const char *role = json_string_value(json_object_get(h, "role"));
			const char *content = json_string_value(json_object_get(h, "content"));
			if (role && content)
				json_array_append_new(lines, json_pack("{s:s,s:s}", "role", role, "content", content));
		}
		char *hist = json_dumps(lines, JSON_COMPACT);
		json_decref(lines);
		if (hist) {
			size_t n = strlen(hist) + 128;
			char *t = malloc(n);
			if (t) {
				snprintf(t, n, "Earlier turns of this conversation, oldest first (JSON):\n%s", hist);
				json_array_append_new(blocks, json_pack("{s:s,s:s}", "type", "text", "text", t));
				sodium_memzero(t, strlen(t));
				free(t);
			}
			free(hist);
		}
	}
	json_array_append_new(blocks, json_pack("{s:s,s:s}", "type", "text", "text", s->o.prompt ? s->o.prompt : ""));
	s->phase = PH_PROMPT;
	return send_request(s, io, ID_PROMPT, "session/prompt",
	                    json_pack("{s:s,s:o}", "sessionId", s->session_id, "prompt", blocks), 1);
}

/* Next setup call after `after` (0 = none yet), or the prompt. */
static int setup_next(worker_acp_t *s, const worker_agent_io_t *io, int after)
{
	s->phase = PH_SETUP;
	if (after < ID_SET_MODE) {
		const char *mode = preset_mode(s);
		if (mode && mode_offered(s, mode)) {
			const char *cur = json_string_value(json_object_get(s->modes, "currentModeId"));
			if (!cur || strcmp(cur, mode))
				return send_request(s, io, ID_SET_MODE, "session/set_mode",
				                    json_pack("{s:s,s:s}", "sessionId", s->session_id, "modeId", mode), 0);
		} else if (mode) {
			emit_log(s, io, "warn", "the agent does not offer mode %s; permissions stay as it decides", mode);
		}
	}
	if (after < ID_SET_MODEL && s->o.model && *s->o.model && s->o.preset == WORKER_ACP_PRESET_CLAUDE)
		return send_request(s, io, ID_SET_MODEL, "session/set_model",
		                    json_pack("{s:s,s:s}", "sessionId", s->session_id, "modelId", s->o.model), 0);
	return send_prompt(s, io);
}

/* ------------------------------------------------------------------------
 * Messages from the agent
 * ------------------------------------------------------------------------ */

static const char *rpc_error_text(const json_t *err, char *buf, size_t size)
{
	const char *m = json_string_value(json_object_get(err, "message"));
	const char *dm = json_string_value(json_object_get(json_object_get(err, "data"), "message"));
	if (m && dm && strcmp(m, dm))
		snprintf(buf, size, "%s: %s", m, dm);
	else
		snprintf(buf, size, "%s", dm ? dm : m ? m
		                                      : "unknown error");
	return buf;
}

static void on_response(worker_acp_t *s, const worker_agent_io_t *io, json_int_t id, const json_t *msg)
{
	const json_t *err = json_object_get(msg, "error");
	const json_t *res = json_object_get(msg, "result");
	char ebuf[700], m[900];
	/* Only a request runnel sent and has no answer for yet: a repeated or
	 * unasked response would restart a phase (and leak its state). */
	if (id < ID_INITIALIZE || id > ID_PROMPT || !(s->awaiting & (1u << id))) {
		emit_log(s, io, "warn", "the agent answered request %lld, which is not waiting for an answer", (long long)id);
		return;
	}
	s->awaiting &= ~(1u << id);
	if (err)
		rpc_error_text(err, ebuf, sizeof(ebuf));
	switch (id) {
	case ID_INITIALIZE: {
		if (err || !json_is_object(res)) {
			snprintf(m, sizeof(m), "The agent did not accept the ACP handshake: %s", err ? ebuf : "no result");
			end_error(s, io, "agent_error", m);
			return;
		}
		json_t *info = json_object_get(res, "agentInfo");
		json_t *pv = json_object_get(res, "protocolVersion");
		if (json_is_integer(pv) && json_integer_value(pv) != ACP_PROTOCOL_VERSION) {
			snprintf(m, sizeof(m), "The agent speaks ACP version %lld; runnel speaks version %d.",
			         (long long)json_integer_value(pv), ACP_PROTOCOL_VERSION);
			end_error(s, io, "agent_error", m);
			return;
		}
		s->agent_name = strdup(json_string_value(json_object_get(info, "name")) ?: "(unnamed)");
		s->agent_version = strdup(json_string_value(json_object_get(info, "version")) ?: "");
		if (!s->agent_name || !s->agent_version) {
			end_error(s, io, "agent_error", "The worker ran out of memory.");
			return;
		}
		emit_log(s, io, "info", "ACP agent %s %s", s->agent_name, s->agent_version);
		send_session_new(s, io);
		return;
	}
	case ID_SESSION_NEW: {
		const char *sid = json_string_value(json_object_get(res, "sessionId"));
		if (err || !sid) {
			snprintf(m, sizeof(m), "The agent could not start a session: %s", err ? ebuf : "no sessionId");
			end_error(s, io, "agent_error", m);
			return;
		}
		s->session_id = strdup(sid);
		json_t *modes = json_object_get(res, "modes");
		s->modes = modes ? json_incref(modes) : NULL;
		if (!s->session_id) {
			end_error(s, io, "agent_error", "The worker ran out of memory.");
			return;
		}
		emit_log(s, io, "debug", "ACP session %s, mode %s", sid,
		         json_string_value(json_object_get(s->modes, "currentModeId")) ?: "(none)");
		/* A warm agent waits here for its run (worker_acp_resume). */
		if (s->o.warm) {
			s->phase = PH_READY;
			return;
		}
		if (s->cancelled) {
			s->phase = PH_DONE;
			return;
		}
		setup_next(s, io, 0);
		return;
	}
	case ID_SET_MODE:
	case ID_SET_MODEL:
		if (err)
			emit_log(s, io, "warn", "the agent refused %s: %s",
			         id == ID_SET_MODE ? "session/set_mode" : "session/set_model", ebuf);
		if (s->cancelled) {
			s->phase = PH_DONE;
			return;
		}
		setup_next(s, io, (int)id);
		return;
	case ID_PROMPT:
		if (err) {
			if (s->cancelled) {
				s->phase = PH_DONE;
				return;
			}
			snprintf(m, sizeof(m), "The agent failed: %s", ebuf);
			end_error(s, io, "agent_error", m);
			return;
		}
		end_turn(s, io, res);
		return;
	default:
		return;
	}
}

static void append_text(worker_acp_t *s, const char *t)
{
	if (!*t)
		return;
	/* Text before and after a tool call are separate paragraphs. */
	if (s->text_break && s->text.len) {
		s->text_break = 0;
		append_text(s, "\n\n");
	}
	s->text_break = 0;
	if (rn_dynbuf_adds(&s->text, t) == RN_DYNBUF_TOO_BIG)
		s->text_cut = 1;
}

static void append_thought(worker_acp_t *s, const char *t)
{
	size_t tl = strlen(t);
	if (!s->thought) {
		s->thought = malloc(ACP_THOUGHT_MAX + 1);
		if (!s->thought)
			return;
		s->thought[0] = '\0';
	}
	if (s->thought_len + tl > ACP_THOUGHT_MAX)
		tl = ACP_THOUGHT_MAX - s->thought_len;
	memcpy(s->thought + s->thought_len, t, tl);
	s->thought_len += tl;
	s->thought[s->thought_len] = '\0';
}

static void on_update(worker_acp_t *s, const worker_agent_io_t *io, const json_t *u)
{
	const char *kind = json_string_value(json_object_get(u, "sessionUpdate"));
	if (!kind || s->phase == PH_DONE)
		return;
	if (strcmp(kind, "agent_thought_chunk"))
		flush_thought(s, io);
	if (!strcmp(kind, "agent_message_chunk")) {
		const char *t = json_string_value(json_object_get(json_object_get(u, "content"), "text"));
		if (t)
			append_text(s, t);
	} else if (!strcmp(kind, "agent_thought_chunk")) {
		const char *t = json_string_value(json_object_get(json_object_get(u, "content"), "text"));
		if (t)
			append_thought(s, t);
	} else if (!strcmp(kind, "tool_call") || !strcmp(kind, "tool_call_update")) {
		const char *id = json_string_value(json_object_get(u, "toolCallId"));
		if (!id)
			return;
		step_t *st = step_get(s, id);
		if (!st || st->done)
			return;
		s->text_break = 1;
		step_merge(st, u);
		const char *status = json_string_value(json_object_get(u, "status"));
		if (status && !strcmp(status, "completed"))
			step_finish(s, io, st, u, 0);
		else if (status && !strcmp(status, "failed"))
			step_finish(s, io, st, u, 1);
		else if ((status && !strcmp(status, "in_progress")) || st->args)
			step_running(s, io, st);
		/* else: Claude announces the tool before its input is known; the
		 * running line waits for the input (or the permission request). */
	} else if (!strcmp(kind, "plan")) {
		char buf[900];
		size_t off = 0, i;
		json_t *e;
		buf[0] = '\0';
		json_array_foreach(json_object_get(u, "entries"), i, e)
		{
			int n = snprintf(buf + off, sizeof(buf) - off, "%s[%s] %s", i ? "; " : "",
			                 json_string_value(json_object_get(e, "status")) ?: "?",
			                 json_string_value(json_object_get(e, "content")) ?: "");
			if (n < 0 || (size_t)n >= sizeof(buf) - off)
				break;
			off += (size_t)n;
		}
		emit_log(s, io, "debug", "plan: %s", buf);
	} else if (!strcmp(kind, "usage_update")) {
		json_decref(s->usage);
		s->usage = json_deep_copy(u);
		json_object_del(s->usage, "sessionUpdate");
	}
	/* available_commands_update, config_option_update, current_mode_update,
	 * session_info_update, user_message_chunk: nothing a caller needs. */
}

/* The option of the given kind, or NULL. */
static const char *option_of_kind(const json_t *options, const char *kind)
{
	size_t i;
	json_t *o;
	json_array_foreach(options, i, o)
	{
		const char *k = json_string_value(json_object_get(o, "kind"));
		const char *id = json_string_value(json_object_get(o, "optionId"));
		if (k && id && !strcmp(k, kind))
			return id;
	}
	return NULL;
}

static const char *option_allow(const json_t *options)
{
	const char *id = option_of_kind(options, "allow_once");
	return id ? id : option_of_kind(options, "allow_always");
}

static const char *option_reject(const json_t *options)
{
	const char *id = option_of_kind(options, "reject_once");
	return id ? id : option_of_kind(options, "reject_always");
}

/* Answers a permission request: optionId selected, or NULL = cancelled. */
static void answer_permission(worker_acp_t *s, const worker_agent_io_t *io, json_t *rpc_id, const char *option_id)
{
	json_t *outcome = option_id ? json_pack("{s:{s:s,s:s}}", "outcome", "outcome", "selected", "optionId", option_id) : json_pack("{s:{s:s}}", "outcome", "outcome", "cancelled");
	send_result(s, io, rpc_id, outcome);
}

static void on_permission(worker_acp_t *s, const worker_agent_io_t *io, json_t *rpc_id, const json_t *params)
{
	const json_t *tc = json_object_get(params, "toolCall");
	const json_t *options = json_object_get(params, "options");
	const char *tcid = json_string_value(json_object_get(tc, "toolCallId"));
	step_t *st = tcid ? step_get(s, tcid) : NULL;
	if (st && !st->done) {
		step_merge(st, tc);
		step_running(s, io, st);
	}
	const char *tool = st && st->name ? st->name : json_string_value(json_object_get(tc, "title"));
	if (s->cancelled || s->phase == PH_DONE) {
		answer_permission(s, io, rpc_id, NULL);
		return;
	}
	if (s->o.perm == WORKER_ACP_PERM_BYPASS) {
		const char *allow = option_allow(options);
		emit_log(s, io, "debug", "allowed %s (permission_mode bypass)", tool ? tool : "a tool");
		answer_permission(s, io, rpc_id, allow);
		return;
	}
	if (s->o.perm == WORKER_ACP_PERM_DENY || s->nasks == ACP_ASKS_MAX) {
		emit_log(s, io, "info", "refused %s (permission_mode %s)", tool ? tool : "a tool",
		         s->o.perm == WORKER_ACP_PERM_DENY ? "deny" : "ask: too many open asks");
		answer_permission(s, io, rpc_id, option_reject(options));
		return;
	}
	ask_t *a = &s->asks[s->nasks];
	memset(a, 0, sizeof(*a));
	snprintf(a->id, sizeof(a->id), "ask_%u", ++s->ask_seq);
	a->rpc_id = json_deep_copy(rpc_id);
	a->options = json_is_array(options) ? json_deep_copy(options) : json_array();
	if (!a->rpc_id || !a->options) {
		json_decref(a->rpc_id);
		json_decref(a->options);
		answer_permission(s, io, rpc_id, option_reject(options));
		return;
	}
	json_t *opts = json_array();
	size_t i;
	json_t *o;
	json_array_foreach(a->options, i, o)
	{
		const char *id = json_string_value(json_object_get(o, "optionId"));
		const char *label = json_string_value(json_object_get(o, "name"));
		const char *k = json_string_value(json_object_get(o, "kind"));
		/* An option a reply cannot name (SPEC §4's id characters) is left
		 * out of the ask: the ask line would be refused whole. */
		if (!proto_ctl_id_ok(id))
			continue;
		json_t *e = json_pack("{s:s,s:s}", "id", id, "label", label ? label : id);
		if (e && k)
			json_object_set_new(e, "kind", json_string(k));
		json_array_append_new(opts, e);
	}
	if (json_array_size(opts) == 0) {
		json_decref(opts);
		json_decref(a->rpc_id);
		json_decref(a->options);
		emit_log(s, io, "warn", "refused %s: the agent offered no option a reply can name", tool ? tool : "a tool");
		answer_permission(s, io, rpc_id, option_reject(options));
		return;
	}
	s->nasks++;
	const char *title = json_string_value(json_object_get(tc, "title"));
	char tbuf[512];
	snprintf(tbuf, sizeof(tbuf), "Allow %s: %s", tool ? tool : "a tool", title ? title : "");
	json_t *line = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:s}", "type", "ask", "id", a->id,
	                         "kind", "permission", "title", title ? title : tbuf,
	                         "tool", tool ? tool : "tool", "options", opts, "status", "open");
	if (line && st && st->args)
		json_object_set_new(line, "args", capped(json_incref(st->args)));
	if (line && st)
		json_object_set_new(line, "step", json_string(st->id));
	emit_obj(s, io, line);
}

/* fs requests: paths are sandbox paths under /root/workspace, served beneath
 * the run's own workspace descriptor with openat2(RESOLVE_BENEATH), so
 * neither ".." nor a symlink planted by the agent leads out of it.  The
 * descriptor is the run's tmpfs itself (worker_ws_open), never a path
 * built again from names: that reaches it warm or cold, also after it left
 * the worker's mount namespace, and every write counts against disk_mb. */

/* path's part beneath the workspace, or NULL with err (a path elsewhere). */
static const char *fs_rel(const worker_acp_t *s, const char *path, char *err, size_t esz)
{
	const char *wsp = ws_path(s);
	size_t wl = strlen(wsp);
	if (!path || strncmp(path, wsp, wl) || (path[wl] != '/' && path[wl] != '\0')) {
		snprintf(err, esz, "only files under %s can be read or written", wsp);
		return NULL;
	}
	const char *rel = path + wl;
	while (*rel == '/')
		rel++;
	if (!*rel) {
		snprintf(err, esz, "not a file");
		return NULL;
	}
	return rel;
}

/* rel opened beneath the workspace, never through a link: an fd, or -1
 * with errno.  System calls only (a charged child runs it). */
static int fs_open_rel(const worker_acp_t *s, const char *rel, int flags)
{
	struct open_how how;
	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW);
	how.mode = (flags & O_CREAT) ? 0644 : 0;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS;
	return (int)syscall(SYS_openat2, s->o.workspace_fd, rel, &how, sizeof(how));
}

static int fs_open(const worker_acp_t *s, const char *path, int flags, char *err, size_t esz)
{
	const char *rel = fs_rel(s, path, err, esz);
	if (!rel)
		return -1;
	int fd = fs_open_rel(s, rel, flags);
	if (fd < 0)
		snprintf(err, esz, "%s", strerror(errno));
	return fd;
}

/* One fs/write_text_file, run by worker_cgroup_call: in a child inside
 * the run's cgroup when there is one, so the file's tmpfs pages are the
 * run's to pay for (memory_mb), not the worker's.  System calls only: the
 * child of a multi-threaded worker may not allocate or format. */
typedef struct fs_write {
	const worker_acp_t *s;
	const char *rel;
	const char *content;
	size_t len;
} fs_write_t;

#define FS_WRITE_NO_OPEN    1000 /* + errno of the open */
#define FS_WRITE_FAILED     2
#define FS_WRITE_TIMEOUT_MS 30000 /* a tmpfs write of <= ACP_FS_MAX */

static int fs_write(void *arg, char *out, size_t out_size)
{
	(void)out;
	(void)out_size;
	fs_write_t *w = arg;
	int fd = fs_open_rel(w->s, w->rel, O_WRONLY | O_CREAT | O_TRUNC);
	if (fd < 0)
		return FS_WRITE_NO_OPEN + errno;
	/* The worker (root) made it: the sandbox's uid owns the workspace. */
	if (w->s->o.chown_files && fchown(fd, w->s->o.file_uid, w->s->o.file_gid) != 0) {
		close(fd);
		return FS_WRITE_FAILED;
	}
	size_t off = 0;
	while (off < w->len) {
		ssize_t n = write(fd, w->content + off, w->len - off);
		/* A short write is the run's tmpfs full (disk_mb): reported as a
		 * failed write, and the guard ends the run over its disk limit. */
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	return off < w->len ? FS_WRITE_FAILED : 0;
}

static void on_fs(worker_acp_t *s, const worker_agent_io_t *io, json_t *rpc_id, const char *method,
                  const json_t *params)
{
	char err[256];
	const char *path = json_string_value(json_object_get(params, "path"));
	if (!strcmp(method, "fs/read_text_file")) {
		int fd = fs_open(s, path, O_RDONLY, err, sizeof(err));
		if (fd < 0) {
			send_error(s, io, rpc_id, -32002, err);
			return;
		}
		/* At most ACP_FS_MAX: the answer goes back as one JSON-RPC line,
		 * and a larger file would only be cut by the agent's line cap. */
		char *buf = malloc(ACP_FS_MAX + 1);
		size_t len = 0;
		ssize_t r = 0;
		while (buf && len < ACP_FS_MAX && (r = read(fd, buf + len, ACP_FS_MAX - len)) > 0)
			len += (size_t)r;
		close(fd);
		if (!buf || r < 0) {
			free(buf);
			send_error(s, io, rpc_id, -32603, "read failed");
			return;
		}
		buf[len] = '\0';
		/* line (1-based) and limit select lines, as the schema says. */
		const char *start = buf;
		json_int_t line = json_integer_value(json_object_get(params, "line"));
		json_int_t limit = json_integer_value(json_object_get(params, "limit"));
		for (json_int_t i = 1; i < line && start; i++) {
			start = strchr(start, '\n');
			if (start)
				start++;
		}
		if (!start)
			start = buf + len;
		char *end = (char *)buf + len;
		if (limit > 0) {
			char *p = (char *)start;
			for (json_int_t i = 0; i < limit && p; i++) {
				p = strchr(p, '\n');
				if (p)
					p++;
			}
			if (p)
				end = p;
		}
		json_t *content = json_stringn(start, (size_t)(end - start));
		free(buf);
		if (!content) {
			send_error(s, io, rpc_id, -32002, "the file is not UTF-8 text");
			return;
		}
		send_result(s, io, rpc_id, json_pack("{s:o}", "content", content));
		return;
	}
	const char *content = json_string_value(json_object_get(params, "content"));
	if (!content) {
		send_error(s, io, rpc_id, -32602, "content missing");
		return;
	}
	if (json_string_length(json_object_get(params, "content")) > ACP_FS_MAX) {
		send_error(s, io, rpc_id, -32602, "content too large");
		return;
	}
	fs_write_t w = { .s = s, .rel = fs_rel(s, path, err, sizeof(err)), .content = content };
	if (!w.rel) {
		send_error(s, io, rpc_id, -32002, err);
		return;
	}
	w.len = json_string_length(json_object_get(params, "content"));
	int rc = worker_cgroup_call(s->o.cgroup_fds, s->o.ncgroup_fds, NULL, FS_WRITE_TIMEOUT_MS, fs_write, &w, err,
	                            sizeof(err), NULL);
	if (rc >= FS_WRITE_NO_OPEN)
		send_error(s, io, rpc_id, -32002, strerror(rc - FS_WRITE_NO_OPEN));
	else if (rc != 0)
		send_error(s, io, rpc_id, -32603, "write failed");
	else
		send_result(s, io, rpc_id, json_null());
}

static void on_request(worker_acp_t *s, const worker_agent_io_t *io, json_t *rpc_id, const char *method,
                       const json_t *params)
{
	if (!strcmp(method, "session/request_permission")) {
		on_permission(s, io, rpc_id, params);
	} else if (s->fs && (!strcmp(method, "fs/read_text_file") || !strcmp(method, "fs/write_text_file"))) {
		on_fs(s, io, rpc_id, method, params);
	} else {
		send_error(s, io, rpc_id, -32601, "Method not found");
	}
}

void worker_acp_on_line(worker_acp_t *s, const char *line, size_t len, const worker_agent_io_t *io)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (!len)
		return;
	json_error_t jerr;
	json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(msg)) {
		json_decref(msg);
		/* Not ACP: say so without quoting it (it may hold anything). */
		emit_log(s, io, "warn", "the agent printed a line that is not a JSON-RPC message (%zu bytes)", len);
		return;
	}
	json_t *id = json_object_get(msg, "id");
	const char *method = json_string_value(json_object_get(msg, "method"));
	if (method && id && !json_is_null(id)) {
		on_request(s, io, id, method, json_object_get(msg, "params"));
	} else if (method) {
		if (!strcmp(method, "session/update"))
			on_update(s, io, json_object_get(json_object_get(msg, "params"), "update"));
	} else if (json_is_integer(id)) {
		on_response(s, io, json_integer_value(id), msg);
	}
	json_decref(msg);
}

/* ------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------ */

worker_acp_t *worker_acp_new(const worker_acp_opts_t *opts, char *errstr, size_t errstr_size)
{
	worker_acp_t *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	s->o = *opts;
	rn_dynbuf_init(&s->text, WORKER_ACP_TEXT_MAX);
	s->fs = opts->workspace_fd >= 0 || opts->warm;
	/* workspace_fd is borrowed like the rest (the run keeps it open). */
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)opts->variables, k, v)
	{
		const char *val = json_string_value(v);
		if (val && strlen(val) >= 10 && name_is_secret(k) && s->nsecrets < ACP_SECRETS_MAX) {
			s->secrets[s->nsecrets] = strdup(val);
			if (s->secrets[s->nsecrets])
				s->nsecrets++;
		}
	}
	return s;
}

void worker_acp_free(worker_acp_t *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nsteps; i++)
		step_clear(&s->steps[i]);
	for (size_t i = 0; i < s->nasks; i++) {
		json_decref(s->asks[i].rpc_id);
		json_decref(s->asks[i].options);
	}
	for (size_t i = 0; i < s->nsecrets; i++) {
		sodium_memzero(s->secrets[i], strlen(s->secrets[i]));
		free(s->secrets[i]);
	}
	free(s->session_id);
	free(s->agent_name);
	free(s->agent_version);
	json_decref(s->modes);
	json_decref(s->usage);
	rn_dynbuf_free(&s->text);
	free(s->thought);
	free(s);
}

int worker_acp_start(worker_acp_t *s, const worker_agent_io_t *io)
{
	json_t *caps = json_pack("{s:{s:b,s:b},s:b}", "fs", "readTextFile", s->fs, "writeTextFile", s->fs,
	                         "terminal", 0);
	s->phase = PH_INIT;
	return send_request(s, io, ID_INITIALIZE, "initialize",
	                    json_pack("{s:i,s:o,s:{s:s,s:s,s:s}}", "protocolVersion", ACP_PROTOCOL_VERSION,
	                              "clientCapabilities", caps, "clientInfo", "name", "runnel",
	                              "title", "runnel", "version", "0.1.0"),
	                    0);
}

static ask_t *ask_find(worker_acp_t *s, const char *id)
{
	for (size_t i = 0; i < s->nasks; i++)
		if (!strcmp(s->asks[i].id, id))
			return &s->asks[i];
	return NULL;
}

static void ask_drop(worker_acp_t *s, ask_t *a)
{
	json_decref(a->rpc_id);
	json_decref(a->options);
	size_t i = (size_t)(a - s->asks);
	memmove(&s->asks[i], &s->asks[i + 1], (s->nasks - i - 1) * sizeof(s->asks[0]));
	s->nasks--;
}

int worker_acp_on_reply(worker_acp_t *s, const char *ask_id, const char *option,
                        const char *text, int reject, const worker_agent_io_t *io)
{
	ask_t *a = ask_id ? ask_find(s, ask_id) : NULL;
	if (!a)
		return -1;
	const char *pick = NULL;
	const char *want = option ? option : text;
	if (!reject && want) {
		size_t i;
		json_t *o;
		json_array_foreach(a->options, i, o)
		{
			const char *id = json_string_value(json_object_get(o, "optionId"));
			if (id && !strcmp(id, want))
				pick = id;
		}
		/* runnel's generic ids stand for the option of that kind. */
		if (!pick && (!strcmp(want, "allow_once") || !strcmp(want, "allow_always") || !strcmp(want, "reject_once") || !strcmp(want, "reject_always")))
			pick = option_of_kind(a->options, want);
		if (!pick && !strcmp(want, "allow_once"))
			pick = option_allow(a->options);
	}
	if (!pick)
		pick = option_reject(a->options);
	if (!pick)
		emit_log(s, io, "warn", "%s: the agent offered no reject option; the request is cancelled", a->id);
	answer_permission(s, io, a->rpc_id, pick);
	ask_drop(s, a);
	return 0;
}

void worker_acp_on_cancel(worker_acp_t *s, const worker_agent_io_t *io)
{
	if (s->cancelled)
		return;
	s->cancelled = 1;
	while (s->nasks) {
		answer_permission(s, io, s->asks[0].rpc_id, NULL);
		ask_drop(s, &s->asks[0]);
	}
	if (s->session_id && s->phase != PH_DONE)
		send_obj(s, io, json_pack("{s:s,s:s,s:{s:s}}", "jsonrpc", "2.0", "method", "session/cancel", "params", "sessionId", s->session_id), 0);
}

void worker_acp_on_eof(worker_acp_t *s, const worker_agent_io_t *io)
{
	if (s->phase == PH_DONE)
		return;
	flush_thought(s, io);
	steps_close(s, io, s->cancelled ? "the run was cancelled" : "the agent exited before the tool finished");
	s->phase = PH_DONE;
}

int worker_acp_ready(const worker_acp_t *s)
{
	return s->phase == PH_READY && s->session_id;
}

int worker_acp_resume(worker_acp_t *s, const worker_acp_t *warm, const worker_agent_io_t *io)
{
	if (!worker_acp_ready(warm))
		return -1;
	s->session_id = strdup(warm->session_id);
	s->agent_name = strdup(warm->agent_name ? warm->agent_name : "(unnamed)");
	s->agent_version = strdup(warm->agent_version ? warm->agent_version : "");
	s->modes = warm->modes ? json_deep_copy(warm->modes) : NULL;
	if (!s->session_id || !s->agent_name || !s->agent_version || (warm->modes && !s->modes))
		return -1;
	/* The lines a cold start emits for initialize and session/new, so a
	 * run reads the same either way. */
	emit_log(s, io, "info", "ACP agent %s %s", s->agent_name, s->agent_version);
	emit_log(s, io, "debug", "ACP session %s, mode %s", s->session_id,
	         json_string_value(json_object_get(s->modes, "currentModeId")) ?: "(none)");
	if (s->cancelled) {
		s->phase = PH_DONE;
		return 0;
	}
	return setup_next(s, io, 0);
}

int worker_acp_done(const worker_acp_t *s)
{
	return s->phase == PH_DONE;
}

/* ------------------------------------------------------------------------
 * The adapter: presets, launch and the seam's callbacks
 * ------------------------------------------------------------------------ */

typedef struct acp_run {
	worker_acp_t *s;
} acp_run_t;

/* Sets NAME=value unless the /env variables already set NAME (they win
 * over a preset's defaults, since the launch env is applied after them). */
static int env_default(worker_agent_launch_t *l, const worker_boot_t *boot, const char *name,
                       const char *value)
{
	if (json_object_get(boot->variables, name))
		return 0;
	return rn_strv_setenv(&l->env, name, value);
}

/* A TOML basic string for codex's -c key=value (JSON escapes are TOML's). */
static int codex_opt(worker_agent_launch_t *l, const char *key, const char *value)
{
	json_t *v = json_string(value);
	char *q = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
	json_decref(v);
	if (!q)
		return -1;
	int rc = rn_strv_add(&l->argv, "-c") < 0 || rn_strv_addf(&l->argv, "%s=%s", key, q) < 0 ? -1 : 0;
	free(q);
	return rc;
}

/*
 * Codex's developer instructions (the run's system prompt) reach it through
 * its config file, not `-c` on its command line, which every local user
 * can read in /proc/<pid>/cmdline.  The TOML line travels in the
 * environment (private to the sandbox's uid) and a shell in front of
 * codex-acp appends it to $CODEX_HOME/config.toml (the private HOME's by
 * default), drops the variable and becomes codex-acp.
 */
#define CODEX_CONFIG_VAR "RUNNEL_CODEX_CONFIG"
#define CODEX_CONFIG_SH \
	": \"${CODEX_HOME:=$HOME/.codex}\"; export CODEX_HOME; mkdir -p \"$CODEX_HOME\" && " \
	"printf '%s\\n' \"$" CODEX_CONFIG_VAR "\" >> \"$CODEX_HOME/config.toml\" || exit 126; " \
	"unset " CODEX_CONFIG_VAR "; exec \"$0\" \"$@\""

static int codex_config(worker_agent_launch_t *l, const char *key, const char *value)
{
	json_t *v = json_string(value);
	char *q = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
	json_decref(v);
	char *line = NULL;
	if (!q || asprintf(&line, "%s = %s", key, q) < 0)
		line = NULL;
	free(q);
	if (!line)
		return -1;
	int rc = rn_strv_setenv(&l->env, CODEX_CONFIG_VAR, line);
	explicit_bzero(line, strlen(line));
	free(line);
	if (rc < 0)
		return -1;
	/* [sh -c SCRIPT codex-acp args...]: codex-acp is the script's $0. */
	rn_strv_t a = { 0 };
	rn_strv_add(&a, "/bin/sh");
	rn_strv_add(&a, "-c");
	rn_strv_add(&a, CODEX_CONFIG_SH);
	for (size_t i = 0; i < l->argv.n; i++)
		rn_strv_add(&a, l->argv.v[i]);
	if (a.oom) {
		rn_strv_free(&a);
		return -1;
	}
	rn_strv_free(&l->argv);
	l->argv = a;
	return 0;
}

static int acp_prepare(const worker_agent_ctx_t *ctx, worker_agent_launch_t *l, void **state,
                       char *errstr, size_t errstr_size)
{
	const worker_config_t *cfg = ctx->cfg;
	const worker_boot_t *boot = ctx->boot;
	const char *preset_name = json_string_value(json_object_get(ctx->agent, "preset"));
	const json_t *argv = json_object_get(ctx->agent, "argv");
	worker_acp_opts_t o;
	memset(&o, 0, sizeof(o));
	int bwrap = cfg->driver == WORKER_SANDBOX_BWRAP;
	const char *prefix = bwrap ? WORKER_ACP_PREFIX_IN_SANDBOX : cfg->acp_prefix;
	const char *node = bwrap ? WORKER_ACP_NODE_IN_SANDBOX : cfg->node_path;

	if (!!preset_name == !!argv) {
		snprintf(errstr, errstr_size, "an acp agent needs exactly one of agent.preset (claude, codex) or agent.argv");
		return -1;
	}
	if (preset_name && !strcmp(preset_name, "claude")) {
		o.preset = WORKER_ACP_PRESET_CLAUDE;
	} else if (preset_name && !strcmp(preset_name, "codex")) {
		o.preset = WORKER_ACP_PRESET_CODEX;
	} else if (preset_name) {
		snprintf(errstr, errstr_size, "agent.preset \"%.32s\" is not known (claude, codex)", preset_name);
		return -1;
	}
	if (o.preset != WORKER_ACP_PRESET_NONE && !(cfg->acp_prefix && *cfg->acp_prefix)) {
		snprintf(errstr, errstr_size, "this worker has no ACP agents installed (set RUNNEL_ACP_PREFIX)");
		return -1;
	}
	if (o.preset == WORKER_ACP_PRESET_CLAUDE && !cfg->node_path[0]) {
		snprintf(errstr, errstr_size, "this worker has no Node.js runtime for the claude preset (set RUNNEL_NODE)");
		return -1;
	}
	if (worker_acp_perm_parse(ctx->permission_mode, &o.perm) < 0) {
		snprintf(errstr, errstr_size, "permission_mode \"%.16s\" is not bypass, ask or deny", ctx->permission_mode);
		return -1;
	}
	/* The prefix and Node.js are bound for raw argv too, so an ACP agent
	 * added to agents/package.json runs as [node, prefix/node_modules/...]. */
	if (bwrap && cfg->acp_prefix && *cfg->acp_prefix &&
	    rn_strv_addf(&l->ro_binds, "%s:%s", cfg->acp_prefix, WORKER_ACP_PREFIX_IN_SANDBOX) < 0)
		goto oom;
	if (bwrap && cfg->node_path[0] &&
	    rn_strv_addf(&l->ro_binds, "%s:%s", cfg->node_path, WORKER_ACP_NODE_IN_SANDBOX) < 0)
		goto oom;

	switch (o.preset) {
	case WORKER_ACP_PRESET_CLAUDE:
		if (rn_strv_add(&l->argv, node) < 0 ||
		    rn_strv_addf(&l->argv, "%s/node_modules/@zed-industries/claude-agent-acp/dist/index.js", prefix) < 0)
			goto oom;
		/* No telemetry, update checks or error reports; IS_SANDBOX lets
		 * root use bypassPermissions (the sandbox is the boundary). */
		if (env_default(l, boot, "DISABLE_AUTOUPDATER", "1") < 0 ||
		    env_default(l, boot, "DISABLE_TELEMETRY", "1") < 0 ||
		    env_default(l, boot, "DISABLE_ERROR_REPORTING", "1") < 0 ||
		    env_default(l, boot, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1") < 0 ||
		    env_default(l, boot, "IS_SANDBOX", "1") < 0 ||
		    /* Retries are silent over ACP: a few, not ten minutes' worth. */
		    env_default(l, boot, "CLAUDE_CODE_MAX_RETRIES", "2") < 0 ||
		    env_default(l, boot, "TMPDIR", "/tmp") < 0)
			goto oom;
		break;
	case WORKER_ACP_PRESET_CODEX: {
		const char *arch = "x64";
#if defined(__aarch64__)
		arch = "arm64";
#endif
		if (rn_strv_addf(&l->argv, "%s/node_modules/@zed-industries/codex-acp-linux-%s/bin/codex-acp",
		                 prefix, arch) < 0)
			goto oom;
		/* An OpenAI-compatible endpoint from /env becomes a provider of
		 * its own (codex has no base-URL variable for its built-in one). */
		const char *base = json_string_value(json_object_get(boot->variables, "OPENAI_BASE_URL"));
		if (base && *base &&
		    (codex_opt(l, "model_provider", "runnel") < 0 ||
		     codex_opt(l, "model_providers.runnel.name", "runnel") < 0 ||
		     codex_opt(l, "model_providers.runnel.base_url", base) < 0 ||
		     codex_opt(l, "model_providers.runnel.env_key", "OPENAI_API_KEY") < 0 ||
		     codex_opt(l, "model_providers.runnel.wire_api", "responses") < 0))
			goto oom;
		if (rn_strv_add(&l->argv, "-c") < 0 || rn_strv_add(&l->argv, "analytics.enabled=false") < 0 ||
		    rn_strv_add(&l->argv, "-c") < 0 || rn_strv_add(&l->argv, "features.plugins=false") < 0)
			goto oom;
		if (boot->model && *boot->model && codex_opt(l, "model", boot->model) < 0)
			goto oom;
		if (env_default(l, boot, "RUST_LOG", "error") < 0 || env_default(l, boot, "NO_COLOR", "1") < 0 ||
		    env_default(l, boot, "TMPDIR", "/tmp") < 0)
			goto oom;
		if (boot->system_prompt && *boot->system_prompt &&
		    codex_config(l, "developer_instructions", boot->system_prompt) < 0)
			goto oom;
		break;
	}
	case WORKER_ACP_PRESET_NONE:
		if (worker_agent_launch_argv(l, argv, errstr, errstr_size) < 0)
			return -1;
		break;
	}
	/* Contract: acp agents call a model, so they share the host network
	 * (until the egress policy replaces this); HOME is the run's own. */
	l->share_net = 1;
	l->private_home = 1;
	/* An ACP agent waits for the next prompt after end_turn. */
	l->stop_after_turn = 1;

	acp_run_t *r = calloc(1, sizeof(*r));
	if (!r)
		goto oom;
	o.run_id = ctx->run_id;
	o.prompt = ctx->job ? ctx->job->prompt : NULL;
	o.system_prompt = boot->system_prompt;
	if (bwrap) {
		worker_sandbox_spec_t ids = { .driver = cfg->driver, .uid = cfg->sandbox_uid, .gid = cfg->sandbox_gid };
		o.chown_files = worker_sandbox_ids(&ids, &o.file_uid, &o.file_gid);
	}
	o.model = boot->model;
	o.mcp_servers = boot->mcp_servers;
	o.history = boot->history;
	o.variables = boot->variables;
	/* The run's workspace, for the agent's fs requests. */
	o.workspace_fd = ctx->workspace_fd;
	o.cgroup_fds = ctx->cgroup_fds;
	o.ncgroup_fds = ctx->ncgroup_fds;
	/* Without bwrap the agent sees the host's paths. */
	if (!bwrap && ctx->workspace_dir)
		o.cwd = ctx->workspace_dir;
	r->s = worker_acp_new(&o, errstr, errstr_size);
	if (!r->s) {
		free(r);
		return -1;
	}
	*state = r;
	return 0;
oom:
	snprintf(errstr, errstr_size, "out of memory");
	return -1;
}

static int acp_start(void *state, const worker_agent_ctx_t *ctx, const worker_agent_io_t *io)
{
	/* A warm agent answered initialize and session/new before the run. */
	if (ctx->warm)
		return worker_acp_resume(((acp_run_t *)state)->s, ctx->warm, io);
	return worker_acp_start(((acp_run_t *)state)->s, io);
}

static void acp_on_line(void *state, const char *line, size_t len, const worker_agent_io_t *io)
{
	worker_acp_on_line(((acp_run_t *)state)->s, line, len, io);
}

static void acp_on_reply(void *state, const worker_agent_reply_t *reply, const worker_agent_io_t *io)
{
	worker_acp_on_reply(((acp_run_t *)state)->s, reply->ask_id, reply->option, reply->text,
	                    reply->reject || reply->expired, io);
}

static void acp_on_cancel(void *state, const worker_agent_io_t *io)
{
	worker_acp_on_cancel(((acp_run_t *)state)->s, io);
}

static void acp_on_eof(void *state, const worker_agent_io_t *io)
{
	worker_acp_on_eof(((acp_run_t *)state)->s, io);
}

static void acp_free(void *state)
{
	acp_run_t *r = state;
	if (!r)
		return;
	worker_acp_free(r->s);
	free(r);
}

/* ------------------------------------------------------------------------
 * Warm agents (worker/warm_agent.h): a preset started before its run, up to
 * its answer to session/new.  What that needs of the run must be fixed
 * then: the cwd (/root/workspace), no MCP servers, no system prompt, and
 * for Codex no model (both on its command line); the run's key stays
 * outside (the gateway's placeholder is minted with the agent).  A run
 * whose launch would differ starts cold (worker/run.c compares them).
 * ------------------------------------------------------------------------ */

static const char *const acp_warm_names[] = { "claude", "codex", NULL };

static const char *acp_warm_name(const json_t *agent)
{
	const char *p = json_string_value(json_object_get(agent, "preset"));
	if (!p || json_object_get(agent, "argv"))
		return NULL;
	for (size_t i = 0; acp_warm_names[i]; i++)
		if (!strcmp(p, acp_warm_names[i]))
			return acp_warm_names[i];
	return NULL;
}

static int acp_warm_launch(const worker_config_t *cfg, const char *name, const char *token, json_t *variables,
                           worker_agent_launch_t *l, char *errstr, size_t errstr_size)
{
	/* What worker_gateway_open puts into a run's /env for the preset's
	 * provider in a sandbox with its own network. */
	int claude = !strcmp(name, "claude");
	char url[96];
	snprintf(url, sizeof(url), "http://localhost:%d/%s", RN_SANDBOX_GATEWAY_PORT, claude ? "anthropic" : "openai");
	if (json_object_set_new(variables, claude ? "ANTHROPIC_BASE_URL" : "OPENAI_BASE_URL", json_string(url)) < 0 ||
	    json_object_set_new(variables, claude ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY", json_string(token)) < 0) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	json_t *agent = json_pack("{s:s,s:s}", "kind", "acp", "preset", name);
	worker_boot_t boot = { .variables = variables };
	worker_agent_ctx_t ctx = {
		.cfg = cfg,
		.run_id = "warm",
		.boot = &boot,
		.agent = agent,
		.permission_mode = WORKER_PERM_BYPASS,
		.workspace_fd = -1,
	};
	void *state = NULL;
	int rc = agent ? acp_prepare(&ctx, l, &state, errstr, errstr_size) : -1;
	if (!agent)
		snprintf(errstr, errstr_size, "out of memory");
	acp_free(state);
	json_decref(agent);
	return rc;
}

/*
 * What the agents read from the workspace when their session starts: a
 * warm agent's session started in an empty one, so a run whose bag brings
 * any of these starts cold (measured: a cold Claude Code sends the bag's
 * CLAUDE.md to the model, a warm one did not; a cold Codex sends AGENTS.md).
 */
static const char *const claude_session_files[] = { "CLAUDE.md", "CLAUDE.local.md", ".claude", ".mcp.json", NULL };
static const char *const codex_session_files[] = { "AGENTS.md", "AGENTS.override.md", ".codex", NULL };

static const char *session_file(const worker_agent_ctx_t *ctx, const char *name)
{
	const char *const *files = !strcmp(name, "claude") ? claude_session_files : codex_session_files;
	struct stat st;
	for (size_t i = 0; ctx->workspace_fd >= 0 && files[i]; i++)
		if (fstatat(ctx->workspace_fd, files[i], &st, AT_SYMLINK_NOFOLLOW) == 0)
			return files[i];
	return NULL;
}

static int acp_warm_fits(const worker_agent_ctx_t *ctx, const char *name, char *why, size_t why_size)
{
	const worker_boot_t *b = ctx->boot;
	const char *want = acp_warm_name(ctx->agent);
	const char *file = NULL;
	if (!want || strcmp(want, name))
		snprintf(why, why_size, "the run asks for another agent");
	else if (b->system_prompt && *b->system_prompt)
		snprintf(why, why_size, "the run has a system prompt");
	else if (json_array_size(b->mcp_servers))
		snprintf(why, why_size, "the run has MCP servers");
	else if (ctx->cfg->driver != WORKER_SANDBOX_BWRAP)
		snprintf(why, why_size, "the sandbox is not bwrap");
	else if ((file = session_file(ctx, name)))
		snprintf(why, why_size, "the workspace has %s, which the agent reads when its session starts", file);
	else
		return 1;
	return 0;
}

/* The handshake's view of the loop: stdin written whole (blocking); an
 * error line becomes the handshake's error, other lines are dropped. */
typedef struct warm_io {
	int in_fd;
	char err[512];
} warm_io_t;

static void warm_emit(void *loop, const char *line, size_t len)
{
	warm_io_t *w = loop;
	json_t *o = json_loadb(line, len, 0, NULL);
	if (o && !strcmp(json_string_value(json_object_get(o, "type")) ?: "", "error") && !w->err[0])
		snprintf(w->err, sizeof(w->err), "%s", json_string_value(json_object_get(o, "message")) ?: "an error");
	json_decref(o);
}

static int warm_write(void *loop, const char *buf, size_t len)
{
	return rn_write_all(((warm_io_t *)loop)->in_fd, buf, len, 0) == 0 ? 0 : -1;
}

/* Reads stdout a byte at a time up to the handshake's last answer, so
 * that every byte after it stays in the pipe for the run's loop; stderr
 * is read and dropped meanwhile (a full pipe would stall the agent). */
static int warm_read(worker_acp_t *s, const worker_agent_io_t *io, int out_fd, int err_fd, int timeout_ms,
                     const atomic_int *cancel, char *errstr, size_t errstr_size)
{
	warm_io_t *w = io->loop;
	rn_dynbuf_t line;
	rn_dynbuf_init(&line, 1024 * 1024);
	int64_t deadline = rn_mono_ms() + timeout_ms;
	int rc = -1;
	while (!w->err[0] && !worker_acp_ready(s)) {
		int64_t left = deadline - rn_mono_ms();
		if (cancel && atomic_load(cancel)) {
			snprintf(errstr, errstr_size, "cancelled");
			goto out;
		}
		if (left <= 0) {
			snprintf(errstr, errstr_size, "the agent did not answer the handshake within %d ms", timeout_ms);
			goto out;
		}
		struct pollfd p[2] = { { .fd = out_fd, .events = POLLIN }, { .fd = err_fd, .events = POLLIN } };
		if (poll(p, 2, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
			goto out;
		if (p[1].revents) {
			char junk[4096];
			if (read(err_fd, junk, sizeof(junk)) == 0)
				p[1].fd = -1;
		}
		if (!p[0].revents)
			continue;
		char c;
		ssize_t n;
		while ((n = read(out_fd, &c, 1)) == 1 && c != '\n')
			if (rn_dynbuf_add(&line, &c, 1) != 0) {
				snprintf(errstr, errstr_size, "the agent printed a line over 1 MiB");
				goto out;
			}
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			snprintf(errstr, errstr_size, "the agent exited during the handshake");
			goto out;
		}
		if (n == 1) {
			worker_acp_on_line(s, line.p ? line.p : "", line.len, io);
			rn_dynbuf_reset(&line);
		}
	}
	if (w->err[0])
		snprintf(errstr, errstr_size, "%s", w->err);
	else
		rc = 0;
out:
	rn_dynbuf_free(&line);
	return rc;
}

static int acp_warm_handshake(const char *name, int in_fd, int out_fd, int err_fd, int timeout_ms,
                              const atomic_int *cancel, void **warm, char *errstr, size_t errstr_size)
{
	*warm = NULL;
	worker_acp_opts_t o = {
		.preset = !strcmp(name, "claude") ? WORKER_ACP_PRESET_CLAUDE : WORKER_ACP_PRESET_CODEX,
		.perm = WORKER_ACP_PERM_BYPASS,
		.run_id = "warm",
		.workspace_fd = -1,
		.warm = 1,
	};
	worker_acp_t *s = worker_acp_new(&o, errstr, errstr_size);
	if (!s)
		return -1;
	warm_io_t w = { .in_fd = in_fd };
	worker_agent_io_t io = { .emit = warm_emit, .write = warm_write, .loop = &w };
	if (worker_acp_start(s, &io) < 0) {
		snprintf(errstr, errstr_size, "the agent's stdin is closed");
		worker_acp_free(s);
		return -1;
	}
	if (warm_read(s, &io, out_fd, err_fd, timeout_ms, cancel, errstr, errstr_size) < 0) {
		worker_acp_free(s);
		return -1;
	}
	*warm = s;
	return 0;
}

static void acp_warm_free(void *warm)
{
	worker_acp_free(warm);
}

const worker_agent_ops_t worker_agent_acp = {
	.kind = "acp",
	.flags = WORKER_AGENT_WARM,
	.warm_names = acp_warm_names,
	.warm_name = acp_warm_name,
	.warm_launch = acp_warm_launch,
	.warm_fits = acp_warm_fits,
	.warm_handshake = acp_warm_handshake,
	.warm_free = acp_warm_free,
	.prepare = acp_prepare,
	.start = acp_start,
	.on_line = acp_on_line,
	.on_reply = acp_on_reply,
	.on_cancel = acp_on_cancel,
	.on_eof = acp_on_eof,
	.free = acp_free,
};
