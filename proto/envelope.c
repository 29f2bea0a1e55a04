/*
 * proto/envelope.c - validation of the agent's NDJSON envelope lines, the
 * warn replacement for invalid ones, ts stamping on the original bytes,
 * terminal detection and the per-run step tracker (SPEC §4).
 *
 * Speed matters here (every line an agent prints passes through), so the
 * cheap checks (size, NUL, first byte) run before jansson parses, a valid
 * line is re-emitted from its own bytes instead of being re-serialized, and
 * the output buffer lives in proto_env_t across calls.
 */
#include "proto/envelope.h"
#include "proto/control.h"
#include "proto/jsonerr.h"
#include "proto/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define STEP_BUCKETS   1024              /* power of two */
#define STEP_BYTES_MAX (8 * 1024 * 1024) /* ids + names kept by the tracker */
#define TYPE_ECHO_MAX  32                /* bytes of an unknown type quoted */
#define TS_SUFFIX_MAX  32                /* ,"ts":<int64> */
#define BUF_MIN        4096

typedef struct step {
	struct step *older, *newer; /* age list, oldest first */
	struct step *hnext;         /* hash chain */
	uint32_t hash;
	size_t id_len, name_len;
	char *name;  /* points into data, after the id */
	char data[]; /* id NUL name NUL */
} step_t;

/* One ask, from its opening line to its settlement (kept a while after, so
 * a late reply is told "already settled" instead of "unknown"). */
typedef struct ask {
	struct ask *next; /* opening order, oldest first */
	int64_t opened_ms;
	int open;
	json_t *options; /* array of option id strings */
	char *kind;
	char *title; /* NULL when absent */
	char id[];
} ask_t;

struct proto_env {
	int allow_asks;
	ask_t *asks, *asks_tail;
	size_t nasks, nopen_asks;
	size_t line_max;
	int terminated;
	uint64_t dropped;
	char *buf;        /* out->text of the last call */
	size_t buf_cap;   /* capped at line_max + TS_SUFFIX_MAX + BUF_MIN */
	step_t **buckets; /* allocated at the first running step */
	step_t *oldest, *newest;
	size_t nsteps, step_bytes;
};

proto_env_t *proto_env_new(size_t line_max)
{
	proto_env_t *env = calloc(1, sizeof(*env));

	if (!env)
		return NULL;
	env->line_max = line_max != 0 ? line_max : PROTO_ENV_LINE_MAX_DEFAULT;
	env->buf_cap = BUF_MIN;
	env->buf = malloc(env->buf_cap);
	if (!env->buf) {
		free(env);
		return NULL;
	}
	return env;
}

static void step_unlink(proto_env_t *env, step_t *s)
{
	step_t **pp = &env->buckets[s->hash & (STEP_BUCKETS - 1)];

	while (*pp != s)
		pp = &(*pp)->hnext;
	*pp = s->hnext;
	if (s->older)
		s->older->newer = s->newer;
	else
		env->oldest = s->newer;
	if (s->newer)
		s->newer->older = s->older;
	else
		env->newest = s->older;
	env->nsteps--;
	env->step_bytes -= s->id_len + s->name_len;
	free(s);
}

static void ask_free(ask_t *a)
{
	json_decref(a->options);
	free(a->kind);
	free(a->title);
	free(a);
}

void proto_env_free(proto_env_t *env)
{
	if (!env)
		return;
	while (env->asks) {
		ask_t *a = env->asks;
		env->asks = a->next;
		ask_free(a);
	}
	while (env->oldest)
		step_unlink(env, env->oldest);
	free(env->buckets);
	free(env->buf);
	free(env);
}

uint64_t proto_env_dropped(const proto_env_t *env)
{
	return env->dropped;
}
int proto_env_terminated(const proto_env_t *env)
{
	return env->terminated;
}
size_t proto_env_open_steps(const proto_env_t *env)
{
	return env->nsteps;
}
void proto_env_set_terminated(proto_env_t *env)
{
	env->terminated = 1;
}

/* ---- step tracker ---- */

static uint32_t hash_bytes(const char *s, size_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h;
}

static step_t *step_find(proto_env_t *env, const char *id, size_t id_len, uint32_t h)
{
	step_t *s;

	if (!env->buckets)
		return NULL;
	for (s = env->buckets[h & (STEP_BUCKETS - 1)]; s; s = s->hnext)
		if (s->hash == h && s->id_len == id_len && memcmp(s->data, id, id_len) == 0)
			return s;
	return NULL;
}

/* A step went "running".  Beyond the caps the oldest open steps are
 * forgotten (they will not be closed at the end): memory stays bounded no
 * matter what the agent prints. */
static void step_open(proto_env_t *env, const char *id, size_t id_len,
                      const char *name, size_t name_len)
{
	uint32_t h = hash_bytes(id, id_len);
	step_t *s = step_find(env, id, id_len, h);

	if (s)
		return; /* already open: keep its place and first name */
	if (id_len + name_len > STEP_BYTES_MAX)
		return;
	if (!env->buckets) {
		env->buckets = calloc(STEP_BUCKETS, sizeof(*env->buckets));
		if (!env->buckets)
			return;
	}
	while (env->oldest && (env->nsteps >= PROTO_ENV_STEPS_MAX || env->step_bytes + id_len + name_len > STEP_BYTES_MAX))
		step_unlink(env, env->oldest);
	s = malloc(sizeof(*s) + id_len + name_len + 2);
	if (!s)
		return;
	s->hash = h;
	s->id_len = id_len;
	s->name_len = name_len;
	memcpy(s->data, id, id_len);
	s->data[id_len] = '\0';
	s->name = s->data + id_len + 1;
	memcpy(s->name, name, name_len);
	s->name[name_len] = '\0';
	s->hnext = env->buckets[h & (STEP_BUCKETS - 1)];
	env->buckets[h & (STEP_BUCKETS - 1)] = s;
	s->newer = NULL;
	s->older = env->newest;
	if (env->newest)
		env->newest->newer = s;
	else
		env->oldest = s;
	env->newest = s;
	env->nsteps++;
	env->step_bytes += id_len + name_len;
}

static void step_close(proto_env_t *env, const char *id, size_t id_len)
{
	step_t *s = step_find(env, id, id_len, hash_bytes(id, id_len));

	if (s)
		step_unlink(env, s);
}

/* ---- output ---- */

static int buf_reserve(proto_env_t *env, size_t need)
{
	size_t cap;
	char *p;

	if (need <= env->buf_cap)
		return 0;
	if (need > env->line_max + TS_SUFFIX_MAX + BUF_MIN)
		return -1;
	cap = env->buf_cap;
	while (cap < need)
		cap *= 2;
	if (cap > env->line_max + TS_SUFFIX_MAX + BUF_MIN)
		cap = env->line_max + TS_SUFFIX_MAX + BUF_MIN;
	p = realloc(env->buf, cap);
	if (!p)
		return -1;
	env->buf = p;
	env->buf_cap = cap;
	return 0;
}

static size_t fmt_i64(char *dst, int64_t v)
{
	char tmp[24];
	size_t n = 0, i;
	uint64_t u;

	if (v < 0) {
		*dst++ = '-';
		u = (uint64_t)0 - (uint64_t)v;
		n = 1;
	} else {
		u = (uint64_t)v;
	}
	i = sizeof(tmp);
	do {
		tmp[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	memcpy(dst, tmp + i, sizeof(tmp) - i);
	return n + sizeof(tmp) - i;
}

/* A string jansson accepts: s itself when valid UTF-8, else a sanitized copy. */
static json_t *json_string_sane(const char *s, size_t n)
{
	char *tmp;
	size_t m;
	json_t *j;

	if (proto_utf8_valid(s, n))
		return json_stringn_nocheck(s, n);
	tmp = malloc(3 * n + 1);
	if (!tmp)
		return NULL;
	m = proto_utf8_sanitize(tmp, s, n, n);
	j = json_stringn_nocheck(tmp, m);
	free(tmp);
	return j;
}

static char *dump_alloc(json_t *obj, size_t *lenp)
{
	char *p = obj ? json_dumps(obj, JSON_COMPACT) : NULL;

	json_decref(obj);
	if (p && lenp)
		*lenp = strlen(p);
	return p;
}

static json_t *line_object(const char *type, const char *k1, const char *v1,
                           const char *message, int64_t ts)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (!message)
		message = "";
	if (json_object_set_new(o, "type", json_string(type)) != 0 ||
	    json_object_set_new(o, k1, json_string_sane(v1, strlen(v1))) != 0 ||
	    json_object_set_new(o, "message", json_string_sane(message, strlen(message))) != 0 ||
	    json_object_set_new(o, "ts", json_integer(ts)) != 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

char *proto_env_make_log(const char *level, const char *message, int64_t ts, size_t *lenp)
{
	return dump_alloc(line_object("log", "level", level ? level : "info",
	                              message, ts),
	                  lenp);
}

char *proto_env_make_error(const char *code, const char *message, int64_t ts, size_t *lenp)
{
	return dump_alloc(line_object("error", "code", code ? code : "internal",
	                              message, ts),
	                  lenp);
}

/* The replacement for an invalid line: a warn log quoting the reason and at
 * most PROTO_ENV_ECHO_MAX bytes of the input, built by jansson into buf. */
static void make_invalid(proto_env_t *env, const char *line, size_t len,
                         int64_t now_ms, proto_env_line_t *out)
{
	static const char prefix[] = "invalid agent output: ";
	char msg[sizeof(prefix) + PROTO_ENV_REASON_MAX + 2 + 3 * PROTO_ENV_ECHO_MAX];
	size_t m = 0, r = strlen(out->reason), n;
	json_t *o;

	memcpy(msg, prefix, sizeof(prefix) - 1);
	m = sizeof(prefix) - 1;
	memcpy(msg + m, out->reason, r);
	m += r;
	if (len > 0) {
		memcpy(msg + m, ": ", 2);
		m += 2;
		m += proto_utf8_sanitize(msg + m, line, len, PROTO_ENV_ECHO_MAX);
	}
	out->valid = 0;
	out->terminal = 0;
	out->type = PROTO_ENV_LOG;
	o = json_object();
	if (o &&
	    json_object_set_new(o, "type", json_string_nocheck("log")) == 0 &&
	    json_object_set_new(o, "level", json_string_nocheck("warn")) == 0 &&
	    json_object_set_new(o, "message", json_string_sane(msg, m)) == 0 &&
	    json_object_set_new(o, "ts", json_integer(now_ms)) == 0) {
		n = json_dumpb(o, env->buf, env->buf_cap, JSON_COMPACT);
		if (n > env->buf_cap && buf_reserve(env, n) == 0)
			n = json_dumpb(o, env->buf, env->buf_cap, JSON_COMPACT);
		if (n > 0 && n <= env->buf_cap) {
			json_decref(o);
			out->text = env->buf;
			out->len = n;
			return;
		}
	}
	json_decref(o);
	/* Out of memory: a fixed line still keeps the stream well-formed. */
	n = (size_t)snprintf(env->buf, env->buf_cap,
	                     "{\"type\":\"log\",\"level\":\"warn\",\"message\":"
	                     "\"invalid agent output\",\"ts\":%lld}",
	                     (long long)now_ms);
	out->text = env->buf;
	out->len = n;
}

static int reason(proto_env_line_t *out, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static int reason(proto_env_line_t *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out->reason, sizeof(out->reason), fmt, ap);
	va_end(ap);
	return -1;
}

/* Requires a string member; its value in *val, NULL type on error. */
static int need_string(json_t *obj, const char *tname, const char *key,
                       json_t **val, proto_env_line_t *out)
{
	json_t *v = json_object_get(obj, key);

	if (!v)
		return reason(out, "%s: missing %s", tname, key);
	if (!json_is_string(v))
		return reason(out, "%s: %s not a string", tname, key);
	*val = v;
	return 0;
}

static int is_one_of(json_t *v, const char *const *set)
{
	const char *s = json_string_value(v);

	for (; *set; set++)
		if (strcmp(s, *set) == 0)
			return 1;
	return 0;
}

static const char *const levels[] = { "debug", "info", "warn", "error", NULL };
static const char *const ask_kinds[] = { "permission", "question", NULL };

static ask_t *ask_find(const proto_env_t *env, const char *id)
{
	ask_t *a;

	for (a = env->asks; a; a = a->next)
		if (strcmp(a->id, id) == 0)
			return a;
	return NULL;
}

/* The rules of an opening ask line (see proto_env_process()). */
static int check_ask(proto_env_t *env, json_t *root, proto_env_line_t *out)
{
	json_t *id = NULL, *kind = NULL, *status = NULL, *v, *opt;
	size_t i;

	out->type = PROTO_ENV_ASK;
	if (!env->allow_asks)
		return reason(out, "ask: the run's permission_mode is not ask");
	if (need_string(root, "ask", "id", &id, out) != 0 ||
	    need_string(root, "ask", "kind", &kind, out) != 0 ||
	    need_string(root, "ask", "status", &status, out) != 0)
		return -1;
	if (!proto_ctl_id_ok(json_string_value(id)))
		return reason(out, "ask: bad id");
	if (!is_one_of(kind, ask_kinds))
		return reason(out, "ask: bad kind");
	if (strcmp(json_string_value(status), "open") != 0)
		return reason(out, "ask: status must be open");
	v = json_object_get(root, "title");
	if (v && !json_is_string(v))
		return reason(out, "ask: title not a string");
	v = json_object_get(root, "options");
	if (v || strcmp(json_string_value(kind), "permission") == 0) {
		if (!json_is_array(v) || json_array_size(v) == 0)
			return reason(out, "ask: options must be a non-empty array");
		json_array_foreach(v, i, opt)
		{
			json_t *oid = json_object_get(opt, "id");
			if (!json_is_string(oid) || !proto_ctl_id_ok(json_string_value(oid)) ||
			    !json_is_string(json_object_get(opt, "label")))
				return reason(out, "ask: an option needs an id and a label");
		}
	}
	if (strcmp(json_string_value(kind), "question") == 0 &&
	    !json_is_string(json_object_get(root, "question")))
		return reason(out, "ask: question missing or not a string");
	if (ask_find(env, json_string_value(id)))
		return reason(out, "ask: id already used");
	if (env->nopen_asks >= PROTO_ENV_ASKS_MAX)
		return reason(out, "ask: too many open asks");
	return 0;
}

/* Records a valid opening ask line. */
static void track_ask(proto_env_t *env, json_t *root, int64_t now_ms)
{
	const char *id = json_string_value(json_object_get(root, "id"));
	const char *title = json_string_value(json_object_get(root, "title"));
	json_t *opts = json_object_get(root, "options"), *opt;
	size_t i, n = strlen(id);
	ask_t *a = calloc(1, sizeof(*a) + n + 1), *old, **pp;

	if (!a)
		return;
	memcpy(a->id, id, n + 1);
	a->open = 1;
	a->opened_ms = now_ms;
	a->kind = strdup(json_string_value(json_object_get(root, "kind")));
	a->title = title ? strdup(title) : NULL;
	a->options = json_array();
	json_array_foreach(opts, i, opt)
	        json_array_append(a->options, json_object_get(opt, "id"));
	if (!a->kind || !a->options || (title && !a->title)) {
		ask_free(a);
		return;
	}
	/* Beyond the cap, forget the oldest settled asks. */
	for (pp = &env->asks; env->nasks >= PROTO_ENV_ASKS_KEPT && *pp;) {
		old = *pp;
		if (old->open) {
			pp = &old->next;
			continue;
		}
		*pp = old->next;
		if (env->asks_tail == old)
			env->asks_tail = NULL;
		ask_free(old);
		env->nasks--;
	}
	if (!env->asks_tail)
		for (env->asks_tail = env->asks; env->asks_tail && env->asks_tail->next;)
			env->asks_tail = env->asks_tail->next;
	if (env->asks_tail)
		env->asks_tail->next = a;
	else
		env->asks = a;
	env->asks_tail = a;
	env->nasks++;
	env->nopen_asks++;
}

/* Checks the rules of one envelope type.  0 or -1 with out->reason. */
static int check_fields(proto_env_t *env, json_t *root, proto_env_line_t *out)
{
	json_t *type, *v = NULL, *id = NULL, *name = NULL, *status = NULL;
	const char *t;

	type = json_object_get(root, "type");
	if (!type)
		return reason(out, "missing type");
	if (!json_is_string(type))
		return reason(out, "type not a string");
	t = json_string_value(type);
	if (strcmp(t, "log") == 0) {
		out->type = PROTO_ENV_LOG;
		if (need_string(root, "log", "level", &v, out) != 0)
			return -1;
		if (!is_one_of(v, levels))
			return reason(out, "log: bad level");
		return need_string(root, "log", "message", &v, out);
	}
	if (strcmp(t, "step") == 0) {
		out->type = PROTO_ENV_STEP;
		if (need_string(root, "step", "id", &id, out) != 0 ||
		    need_string(root, "step", "name", &name, out) != 0 ||
		    need_string(root, "step", "status", &status, out) != 0)
			return -1;
		t = json_string_value(status);
		if (strcmp(t, "failed") == 0) {
			v = json_object_get(root, "error");
			if (!v || json_is_null(v))
				return reason(out, "step: failed without error");
		} else if (strcmp(t, "running") != 0 && strcmp(t, "succeeded") != 0) {
			return reason(out, "step: bad status");
		}
		return 0;
	}
	if (strcmp(t, "result") == 0) {
		out->type = PROTO_ENV_RESULT;
		return need_string(root, "result", "message", &v, out);
	}
	if (strcmp(t, "ask") == 0)
		return check_ask(env, root, out);
	if (strcmp(t, "error") == 0) {
		out->type = PROTO_ENV_ERROR;
		if (need_string(root, "error", "code", &v, out) != 0)
			return -1;
		snprintf(out->code, sizeof(out->code), "%s", json_string_value(v));
		return need_string(root, "error", "message", &v, out);
	}
	{
		char echo[3 * TYPE_ECHO_MAX + 1];
		size_t n = proto_utf8_sanitize(echo, t, json_string_length(type), TYPE_ECHO_MAX);

		(void)env;
		echo[n] = '\0';
		return reason(out, "unknown type \"%s\"", echo);
	}
}

/* Updates the tracker for a valid step line. */
static void track_step(proto_env_t *env, json_t *root)
{
	json_t *id = json_object_get(root, "id");
	json_t *name = json_object_get(root, "name");
	const char *status = json_string_value(json_object_get(root, "status"));

	if (status[0] == 'r')
		step_open(env, json_string_value(id), json_string_length(id),
		          json_string_value(name), json_string_length(name));
	else
		step_close(env, json_string_value(id), json_string_length(id));
}

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void proto_env_process(proto_env_t *env, const char *line, size_t len,
                       int64_t now_ms, proto_env_line_t *out)
{
	json_error_t jerr;
	json_t *root, *ts;
	size_t i, close;

	out->reason[0] = '\0';
	out->code[0] = '\0';
	out->valid = 0;
	out->terminal = 0;
	out->type = PROTO_ENV_LOG;
	if (env->terminated) {
		env->dropped++;
		out->action = PROTO_ENV_DROP;
		out->text = NULL;
		out->len = 0;
		return;
	}
	out->action = PROTO_ENV_PUBLISH;
	if (len > 0 && line[len - 1] == '\r')
		len--;

	/* Cheap checks first: none of these needs a parse. */
	if (len > env->line_max) {
		reason(out, "line too long (%zu bytes > %zu)", len, env->line_max);
		goto invalid;
	}
	if (len == 0) {
		reason(out, "empty line");
		goto invalid;
	}
	if (memchr(line, '\0', len)) {
		reason(out, "contains a NUL byte");
		goto invalid;
	}
	for (i = 0; i < len && is_ws(line[i]); i++)
		;
	if (i < len && line[i] != '{') {
		/* Parse anyway (rare path) to tell "not JSON" from "not an object". */
		root = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
		if (root) {
			json_decref(root);
			reason(out, "not a JSON object");
		} else {
			reason(out, "%s", proto_json_error_words(&jerr, "not JSON"));
		}
		goto invalid;
	}

	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		reason(out, "%s", proto_json_error_words(&jerr, "not JSON"));
		goto invalid;
	}
	if (check_fields(env, root, out) != 0) {
		json_decref(root);
		goto invalid;
	}
	ts = json_object_get(root, "ts");
	if (ts && (!json_is_integer(ts) || json_integer_value(ts) < 0)) {
		json_decref(root);
		reason(out, "ts: not a non-negative integer");
		goto invalid;
	}
	if (buf_reserve(env, len + TS_SUFFIX_MAX) != 0) {
		json_decref(root);
		reason(out, "out of memory");
		goto invalid;
	}
	if (ts) {
		memcpy(env->buf, line, len);
		out->len = len;
	} else {
		/* The parse succeeded on an object, so the last non-blank byte is
		 * its closing brace: insert ,"ts":N right before it. */
		close = len;
		while (close > 0 && line[close - 1] != '}')
			close--;
		close--;
		memcpy(env->buf, line, close);
		memcpy(env->buf + close, ",\"ts\":", 6);
		i = close + 6;
		i += fmt_i64(env->buf + i, now_ms);
		memcpy(env->buf + i, line + close, len - close);
		out->len = i + len - close;
	}
	out->text = env->buf;
	out->valid = 1;
	if (out->type == PROTO_ENV_STEP)
		track_step(env, root);
	else if (out->type == PROTO_ENV_ASK)
		track_ask(env, root, now_ms);
	else if (out->type == PROTO_ENV_RESULT || out->type == PROTO_ENV_ERROR) {
		out->terminal = 1;
		env->terminated = 1;
	}
	json_decref(root);
	return;

invalid:
	make_invalid(env, line, len, now_ms, out);
}

/* Hands an owned line (NULL: out of memory) to emit and frees it; nonzero
 * when there was no line or emit asks to stop. */
static int emit_owned(char *line, size_t len, int (*emit)(const char *line, size_t len, void *arg),
                      void *arg)
{
	int stop;

	if (!line)
		return -1;
	stop = emit(line, len, arg);
	free(line);
	return stop;
}

size_t proto_env_close_steps(proto_env_t *env, int64_t now_ms, const char *why,
                             int (*emit)(const char *line, size_t len, void *arg),
                             void *arg)
{
	size_t count = 0, len = 0;
	step_t *s;
	json_t *o;
	char *line;

	if (!why)
		why = "run ended";
	while ((s = env->oldest)) {
		o = json_object();
		if (!o ||
		    json_object_set_new(o, "type", json_string_nocheck("step")) != 0 ||
		    json_object_set_new(o, "id", json_stringn_nocheck(s->data, s->id_len)) != 0 ||
		    json_object_set_new(o, "name", json_stringn_nocheck(s->name, s->name_len)) != 0 ||
		    json_object_set_new(o, "status", json_string_nocheck("failed")) != 0 ||
		    json_object_set_new(o, "error", json_string_sane(why, strlen(why))) != 0 ||
		    json_object_set_new(o, "ts", json_integer(now_ms)) != 0) {
			json_decref(o);
			break;
		}
		line = dump_alloc(o, &len);
		if (emit_owned(line, len, emit, arg) != 0)
			break;
		step_unlink(env, s);
		count++;
	}
	return count;
}

/* ---- asks ---- */

void proto_env_allow_asks(proto_env_t *env, int allow)
{
	env->allow_asks = allow != 0;
}
size_t proto_env_open_asks(const proto_env_t *env)
{
	return env->nopen_asks;
}

const char *proto_env_oldest_ask(const proto_env_t *env, int64_t *opened_ms)
{
	ask_t *a;

	for (a = env->asks; a; a = a->next) {
		if (a->open) {
			if (opened_ms)
				*opened_ms = a->opened_ms;
			return a->id;
		}
	}
	return NULL;
}

static char *settle_line(const ask_t *a, const char *status, const char *option,
                         const char *text, int64_t now_ms, size_t *lenp)
{
	json_t *o = json_object();

	if (!o ||
	    json_object_set_new(o, "type", json_string_nocheck("ask")) != 0 ||
	    json_object_set_new(o, "id", json_string(a->id)) != 0 ||
	    json_object_set_new(o, "kind", json_string(a->kind)) != 0 ||
	    (a->title && json_object_set_new(o, "title", json_string(a->title)) != 0) ||
	    json_object_set_new(o, "status", json_string(status)) != 0 ||
	    (option && json_object_set_new(o, "option", json_string(option)) != 0) ||
	    (text && json_object_set_new(o, "text", json_string_sane(text, strlen(text))) != 0) ||
	    json_object_set_new(o, "ts", json_integer(now_ms)) != 0) {
		json_decref(o);
		return NULL;
	}
	return dump_alloc(o, lenp);
}

static void ask_close(proto_env_t *env, ask_t *a)
{
	a->open = 0;
	env->nopen_asks--;
}

proto_ask_rc_t proto_env_settle_ask(proto_env_t *env, const char *id, const char *status,
                                    const char *option, const char *text, int64_t now_ms,
                                    char **line, size_t *lenp)
{
	ask_t *a = ask_find(env, id);
	size_t i;
	json_t *v;
	int found = 0;

	*line = NULL;
	if (!a)
		return PROTO_ASK_UNKNOWN;
	if (!a->open)
		return PROTO_ASK_CLOSED;
	if (option) {
		json_array_foreach(a->options, i, v) if (strcmp(json_string_value(v), option) == 0)
		        found = 1;
		if (!found)
			return PROTO_ASK_BAD_OPTION;
	}
	*line = settle_line(a, status, option, text, now_ms, lenp);
	if (!*line)
		return PROTO_ASK_NOMEM;
	ask_close(env, a);
	return PROTO_ASK_SETTLED;
}

size_t proto_env_close_asks(proto_env_t *env, int64_t now_ms, const char *status,
                            int (*emit)(const char *line, size_t len, void *arg),
                            void (*on_closed)(const char *id, void *arg), void *arg)
{
	size_t count = 0, len = 0;
	ask_t *a;
	char *line;

	for (a = env->asks; a; a = a->next) {
		if (!a->open)
			continue;
		line = settle_line(a, status, NULL, NULL, now_ms, &len);
		if (emit_owned(line, len, emit, arg) != 0)
			break;
		ask_close(env, a);
		if (on_closed)
			on_closed(a->id, arg);
		count++;
	}
	return count;
}
