/*
 * cli/view.c - rendering a run's envelope lines for people (PLAIN, LIVE)
 * and for scripts (JSON).
 *
 * LIVE keeps the invariant that every row it printed is exactly one
 * physical terminal line (text is clipped or wrapped to the width by this
 * file, never by the terminal), so a step's row can be found again by
 * moving the cursor up by a known count.  Agent text is untrusted: control
 * characters (ESC included) are replaced before they reach the terminal.
 */
#include "view.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <jansson.h>

#include "common/dynbuf.h"
#include "common/util.h"

#define VIEW_STEPS_MAX 4096
#define VIEW_OUT_MAX   (8u << 20) /* bytes of agent text shown per event */
#define VIEW_OUT_SLACK 4096       /* room past it for escapes and line ends */
#define VIEW_FIELD_MAX 4096       /* bytes of a name/error kept per step */

#define SGR_RESET  "\033[0m"
#define SGR_DIM    "\033[2m"
#define SGR_BOLD   "\033[1m"
#define SGR_RED    "\033[31m"
#define SGR_GREEN  "\033[32m"
#define SGR_YELLOW "\033[33m"

enum { STEP_RUNNING = 0,
       STEP_SUCCEEDED,
       STEP_FAILED };

static const char *const spinner[] = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" };

typedef struct view_step {
	char *id;
	char *name;
	char *error; /* failed steps: what went wrong, or NULL */
	int status;
	int64_t seen_mono; /* when this view first saw it running */
	int64_t start_ts;  /* ts of its running line, 0 if none */
	long long dur_ms;  /* -1 while running */
	long row;          /* physical line index of its row */
} view_step_t;

/* The output of one event, capped at VIEW_BUF_MAX. */
typedef rn_dynbuf_t view_buf_t;
#define VIEW_BUF_MAX (VIEW_OUT_MAX + VIEW_OUT_SLACK - 1)

struct cli_view {
	cli_view_mode_t mode;
	FILE *out;
	char run_id[80];
	int cols, rows;
	long lines; /* physical lines printed above the footer */
	int footer; /* footer drawn on line `lines` */
	int finished;
	char status[64];
	int open_asks; /* asks shown open and not yet settled */
	int64_t start_mono;
	unsigned spin;
	view_step_t *steps;
	size_t nsteps, cap;
	view_buf_t b;
};

/* ---- output buffer (capped) ------------------------------------------- */

static void buf_add(view_buf_t *b, const char *s, size_t n)
{
	/* Past the cap the event is cut short, never the process. */
	(void)rn_dynbuf_add(b, s, n);
}

static void buf_str(view_buf_t *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void flush_buf(cli_view_t *v)
{
	if (v->b.len)
		fwrite(v->b.p, 1, v->b.len, v->out);
	fflush(v->out);
	rn_dynbuf_reset(&v->b);
}

/* ---- text: UTF-8, display width, sanitising --------------------------- */

/* Decodes one code point; invalid bytes come back as U+FFFD, one at a time. */
static size_t u8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned c = s[0];
	size_t n;
	uint32_t v;

	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xE0) == 0xC0) {
		n = 2;
		v = c & 0x1F;
	} else if ((c & 0xF0) == 0xE0) {
		n = 3;
		v = c & 0x0F;
	} else if ((c & 0xF8) == 0xF0) {
		n = 4;
		v = c & 0x07;
	} else {
		*cp = 0xFFFD;
		return 1;
	}
	if (n > len) {
		*cp = 0xFFFD;
		return 1;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80) {
			*cp = 0xFFFD;
			return 1;
		}
		v = (v << 6) | (s[i] & 0x3F);
	}
	if ((n == 2 && v < 0x80) || (n == 3 && v < 0x800) || (n == 4 && v < 0x10000) ||
	    v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
		*cp = 0xFFFD;
		return 1;
	}
	*cp = v;
	return n;
}

/* Columns a code point takes; a small table instead of wcwidth() so the
 * answer does not depend on the user's locale. */
static int cp_width(uint32_t cp)
{
	if ((cp >= 0x300 && cp <= 0x36F) || (cp >= 0x200B && cp <= 0x200F) ||
	    (cp >= 0xFE00 && cp <= 0xFE0F))
		return 0;
	if ((cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
	    (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
	    (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
	    (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1FAFF) ||
	    (cp >= 0x20000 && cp <= 0x3FFFD))
		return 2;
	return 1;
}

static int is_control(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7F && cp < 0xA0);
}

/*
 * Appends text up to maxw columns (maxw < 0: no limit), replacing control
 * characters with a space and stopping before a newline.  Returns the bytes
 * of s consumed; *used gets the columns written.
 */
static size_t put_text(view_buf_t *b, const char *s, size_t len, int maxw, int *used)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	int w = 0;

	while (i < len && u[i] != '\n' && b->len < VIEW_OUT_MAX) {
		uint32_t cp;
		size_t n = u8_next(u + i, len - i, &cp);
		int cw = is_control(cp) ? 1 : cp_width(cp);
		if (maxw >= 0 && w + cw > maxw)
			break;
		if (is_control(cp))
			buf_add(b, " ", 1);
		else if (cp == 0xFFFD && n == 1)
			buf_str(b, "\xEF\xBF\xBD");
		else
			buf_add(b, s + i, n);
		w += cw;
		i += n;
	}
	if (used)
		*used = w;
	return i;
}

static int text_width(const char *s)
{
	view_buf_t scratch;
	int w = 0;
	rn_dynbuf_init(&scratch, VIEW_BUF_MAX);
	put_text(&scratch, s, strlen(s), -1, &w);
	rn_dynbuf_free(&scratch);
	return w;
}

/* A segment of a row: colour, then text clipped to what is left of *budget. */
static void put_seg(view_buf_t *b, const char *sgr, const char *text, int *budget, int color)
{
	int used = 0;
	if (*budget <= 0)
		return;
	if (color && sgr)
		buf_str(b, sgr);
	size_t len = strlen(text);
	size_t n = put_text(b, text, len, *budget, &used);
	*budget -= used;
	if (n < len && *budget <= 0 && used > 0) {
		/* Mark the cut; the last column is kept free for it. */
		buf_str(b, "…");
	}
	if (color && sgr)
		buf_str(b, SGR_RESET);
}

char *cli_view_duration(char *buf, size_t size, long long ms)
{
	if (ms < 0)
		ms = 0;
	if (ms < 1000)
		snprintf(buf, size, "%lldms", ms);
	else if (ms < 60000)
		snprintf(buf, size, "%lld.%llds", ms / 1000, (ms % 1000) / 100);
	else if (ms < 3600000)
		snprintf(buf, size, "%lldm%02llds", ms / 60000, (ms % 60000) / 1000);
	else
		snprintf(buf, size, "%lldh%02lldm", ms / 3600000, (ms % 3600000) / 60000);
	return buf;
}

/* ---- construction ------------------------------------------------------ */

cli_view_t *cli_view_new(cli_view_mode_t mode, FILE *out, const char *run_id, int cols, int rows)
{
	cli_view_t *v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->mode = mode;
	v->out = out;
	rn_dynbuf_init(&v->b, VIEW_BUF_MAX);
	snprintf(v->run_id, sizeof(v->run_id), "%s", run_id ? run_id : "");
	v->start_mono = rn_mono_ms();
	snprintf(v->status, sizeof(v->status), "waiting for the run to start");
	if (mode == CLI_VIEW_LIVE && (cols <= 0 || rows <= 0)) {
		struct winsize ws;
		if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
			cols = ws.ws_col;
			rows = ws.ws_row;
		} else {
			cols = 80;
			rows = 24;
		}
	}
	v->cols = cols < 20 ? 20 : (cols > 1000 ? 1000 : cols);
	v->rows = rows < 2 ? 2 : rows;
	if (mode == CLI_VIEW_LIVE) {
		int budget = v->cols - 1;
		buf_str(&v->b, "\033[?25l"); /* hide the cursor while rows move */
		put_seg(&v->b, SGR_DIM, "run ", &budget, 1);
		put_seg(&v->b, SGR_BOLD, v->run_id, &budget, 1);
		buf_str(&v->b, "\n");
		v->lines++;
		cli_view_tick(v);
	}
	return v;
}

void cli_view_free(cli_view_t *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->nsteps; i++) {
		free(v->steps[i].id);
		free(v->steps[i].name);
		free(v->steps[i].error);
	}
	free(v->steps);
	rn_dynbuf_free(&v->b);
	free(v);
}

/* ---- LIVE rows ---------------------------------------------------------- */

static void footer_erase(cli_view_t *v)
{
	if (v->footer) {
		buf_str(&v->b, "\r\033[2K");
		v->footer = 0;
	}
}

static void footer_draw(cli_view_t *v)
{
	char el[32], text[160];
	int budget = v->cols - 1;

	buf_str(&v->b, "\r\033[2K");
	snprintf(text, sizeof(text), "%s %s · %s", spinner[v->spin % 10], v->status,
	         cli_view_duration(el, sizeof(el), rn_mono_ms() - v->start_mono));
	put_seg(&v->b, SGR_DIM, text, &budget, 1);
	v->footer = 1;
}

static void step_row(cli_view_t *v, const view_step_t *s)
{
	char dur[32], word[32];
	int budget = v->cols - 2; /* one column spare for the cut mark */
	const char *icon, *color;

	switch (s->status) {
	case STEP_RUNNING:
		icon = spinner[v->spin % 10];
		color = SGR_YELLOW;
		snprintf(word, sizeof(word), "  running ");
		cli_view_duration(dur, sizeof(dur), rn_mono_ms() - s->seen_mono);
		break;
	case STEP_SUCCEEDED:
		icon = "✓";
		color = SGR_GREEN;
		snprintf(word, sizeof(word), "  succeeded ");
		cli_view_duration(dur, sizeof(dur), s->dur_ms);
		break;
	default:
		icon = "✗";
		color = SGR_RED;
		snprintf(word, sizeof(word), "  failed ");
		cli_view_duration(dur, sizeof(dur), s->dur_ms);
		break;
	}
	/* The status and duration matter most: a long name gives way first. */
	int fixed = 2 + text_width(word) + text_width(dur);
	int name_budget = budget - fixed;
	if (name_budget < 6)
		name_budget = 6;
	put_seg(&v->b, color, icon, &budget, 1);
	put_seg(&v->b, NULL, " ", &budget, 0);
	if (text_width(s->name) > name_budget) {
		int used = 0;
		buf_str(&v->b, SGR_BOLD);
		put_text(&v->b, s->name, strlen(s->name), name_budget - 1, &used);
		buf_str(&v->b, "…" SGR_RESET);
		budget -= used + 1;
	} else {
		put_seg(&v->b, SGR_BOLD, s->name, &budget, 1);
	}
	put_seg(&v->b, color, word, &budget, 1);
	put_seg(&v->b, SGR_DIM, dur, &budget, 1);
	if (s->status == STEP_FAILED && s->error) {
		put_seg(&v->b, NULL, "  ", &budget, 0);
		put_seg(&v->b, SGR_RED, s->error, &budget, 1);
	}
}

/* Draws a step's row: in place when it is still on screen, else anew. */
static void step_draw(cli_view_t *v, view_step_t *s, int is_new)
{
	long d = v->lines - s->row;
	if (!is_new && d >= 1 && d <= v->rows - 1) {
		char mv[32];
		snprintf(mv, sizeof(mv), "\033[%ldA\r\033[2K", d);
		buf_str(&v->b, mv);
		step_row(v, s);
		snprintf(mv, sizeof(mv), "\033[%ldB\r", d);
		buf_str(&v->b, mv);
		return;
	}
	footer_erase(v);
	step_row(v, s);
	buf_str(&v->b, "\n");
	s->row = v->lines++;
}

/* Prints text as whole rows: split at newlines, wrapped at the width. */
static void put_rows(cli_view_t *v, const char *sgr, const char *first_prefix,
                     const char *indent, const char *text)
{
	size_t len = strlen(text), i = 0;
	int first = 1;

	footer_erase(v);
	do {
		int budget = v->mode == CLI_VIEW_LIVE ? v->cols - 1 : -1;
		const char *pre = first ? first_prefix : indent;
		int pw = text_width(pre);
		if (v->mode == CLI_VIEW_LIVE && sgr)
			buf_str(&v->b, sgr);
		buf_str(&v->b, pre);
		int used = 0;
		size_t n = put_text(&v->b, text + i, len - i, budget < 0 ? -1 : (budget - pw > 1 ? budget - pw : 1), &used);
		if (v->mode == CLI_VIEW_LIVE && sgr)
			buf_str(&v->b, SGR_RESET);
		buf_str(&v->b, "\n");
		v->lines++;
		if (n == 0 && i < len && text[i] != '\n') {
			/* A character wider than the room left: skip it, never spin. */
			uint32_t cp;
			n = u8_next((const unsigned char *)text + i, len - i, &cp);
		}
		i += n;
		if (i < len && text[i] == '\n')
			i++;
		first = 0;
		if (i < len && v->b.len >= VIEW_OUT_MAX) {
			buf_str(&v->b, "… (cut)\n");
			v->lines++;
			break;
		}
	} while (i < len);
}

/* ---- events ------------------------------------------------------------- */

static view_step_t *step_find(cli_view_t *v, const char *id)
{
	for (size_t i = v->nsteps; i > 0; i--)
		if (!strcmp(v->steps[i - 1].id, id))
			return &v->steps[i - 1];
	return NULL;
}

static char *dup_capped(const char *s)
{
	return strndup(s ? s : "", VIEW_FIELD_MAX);
}

/* NULL past the cap (or out of memory): such a step is drawn, not tracked. */
static view_step_t *step_add(cli_view_t *v, const char *id, const char *name)
{
	if (v->nsteps >= VIEW_STEPS_MAX)
		return NULL;
	if (v->nsteps == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 16;
		view_step_t *p = realloc(v->steps, cap * sizeof(*p));
		if (!p)
			return NULL;
		v->steps = p;
		v->cap = cap;
	}
	view_step_t *s = &v->steps[v->nsteps++];
	memset(s, 0, sizeof(*s));
	s->id = dup_capped(id);
	s->name = dup_capped(name);
	s->dur_ms = -1;
	s->seen_mono = rn_mono_ms();
	if (!s->id || !s->name) {
		free(s->id);
		free(s->name);
		v->nsteps--;
		return NULL;
	}
	return s;
}

static char *error_text(json_t *e)
{
	if (json_is_string(e))
		return dup_capped(json_string_value(e));
	if (json_is_object(e) && json_is_string(json_object_get(e, "message")))
		return dup_capped(json_string_value(json_object_get(e, "message")));
	if (e && !json_is_null(e)) {
		char *s = json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY);
		char *d = dup_capped(s);
		free(s);
		return d;
	}
	return NULL;
}

static void on_step(cli_view_t *v, json_t *o)
{
	const char *id = json_string_value(json_object_get(o, "id"));
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *st = json_string_value(json_object_get(o, "status"));
	json_t *ts = json_object_get(o, "ts");
	json_t *dms = json_object_get(o, "durationMs");
	if (!id)
		id = "";
	if (!name)
		name = id;
	if (!st)
		st = "running";

	view_step_t tmp;
	view_step_t *s = step_find(v, id);
	int is_new = !s;
	if (!s)
		s = step_add(v, id, name);
	if (!s) {
		/* Untracked: drawn once as a new row, with borrowed strings. */
		memset(&tmp, 0, sizeof(tmp));
		tmp.id = (char *)id;
		tmp.name = (char *)name;
		tmp.dur_ms = -1;
		tmp.seen_mono = rn_mono_ms();
		s = &tmp;
	}

	if (!strcmp(st, "running")) {
		s->status = STEP_RUNNING;
		if (json_is_integer(ts))
			s->start_ts = json_integer_value(ts);
	} else {
		s->status = !strcmp(st, "succeeded") ? STEP_SUCCEEDED : STEP_FAILED;
		if (json_is_number(dms))
			s->dur_ms = (long long)json_number_value(dms);
		else if (json_is_integer(ts) && s->start_ts)
			s->dur_ms = json_integer_value(ts) - s->start_ts;
		else
			s->dur_ms = rn_mono_ms() - s->seen_mono;
		if (s->status == STEP_FAILED) {
			free(s->error);
			s->error = error_text(json_object_get(o, "error"));
		}
	}

	if (v->mode == CLI_VIEW_LIVE) {
		step_draw(v, s, is_new);
		if (s == &tmp)
			free(tmp.error);
		return;
	}
	char dur[32], line[256];
	if (s->status == STEP_RUNNING)
		snprintf(line, sizeof(line), " running");
	else
		snprintf(line, sizeof(line), " %s %s", s->status == STEP_SUCCEEDED ? "succeeded" : "failed",
		         cli_view_duration(dur, sizeof(dur), s->dur_ms));
	buf_str(&v->b, "step    ");
	put_text(&v->b, s->name, strlen(s->name), -1, NULL);
	buf_str(&v->b, line);
	if (s->status == STEP_FAILED && s->error) {
		buf_str(&v->b, ": ");
		put_text(&v->b, s->error, strlen(s->error), -1, NULL);
	}
	buf_str(&v->b, "\n");
	if (s == &tmp) {
		free(tmp.error);
	}
}

static void on_log(cli_view_t *v, json_t *o)
{
	const char *level = json_string_value(json_object_get(o, "level"));
	const char *msg = json_string_value(json_object_get(o, "message"));
	if (!level)
		level = "info";
	if (!msg)
		msg = "";
	const char *sgr = SGR_DIM;
	char pre[32];
	if (v->mode == CLI_VIEW_LIVE) {
		if (!strcmp(level, "warn")) {
			sgr = SGR_YELLOW;
			snprintf(pre, sizeof(pre), "  warn: ");
		} else if (!strcmp(level, "error")) {
			sgr = SGR_RED;
			snprintf(pre, sizeof(pre), "  error: ");
		} else {
			snprintf(pre, sizeof(pre), "  ");
		}
		put_rows(v, sgr, pre, "  ", msg);
		return;
	}
	snprintf(pre, sizeof(pre), "%-8.8s", level);
	put_rows(v, NULL, pre, "        ", msg);
}

/* An ask opens (with how to answer it) or is settled (SPEC §4). */
static void on_ask(cli_view_t *v, json_t *o)
{
	const char *id = json_string_value(json_object_get(o, "id"));
	const char *status = json_string_value(json_object_get(o, "status"));
	const char *title = json_string_value(json_object_get(o, "title"));
	const char *question = json_string_value(json_object_get(o, "question"));
	json_t *opts = json_object_get(o, "options"), *opt;
	char pre[200], text[1024];
	size_t off = 0, i;
	if (!id)
		id = "?";
	if (!status)
		status = "open";
	if (!strcmp(status, "open")) {
		v->open_asks++;
		off += (size_t)snprintf(text + off, sizeof(text) - off, "%.300s",
		                        title ? title : question ? question
		                                                 : "the agent asks");
		json_array_foreach(opts, i, opt)
		{
			const char *oid = json_string_value(json_object_get(opt, "id"));
			const char *label = json_string_value(json_object_get(opt, "label"));
			if (oid && off < sizeof(text))
				off += (size_t)snprintf(text + off, sizeof(text) - off, "%s %.64s (%.64s)",
				                        i ? "," : " | options:", oid, label ? label : oid);
		}
		if (off < sizeof(text))
			snprintf(text + off, sizeof(text) - off, " | answer: runnel reply %s %.128s %s", v->run_id, id,
			         json_array_size(opts) ? "OPTION" : "--text TEXT");
		snprintf(pre, sizeof(pre), v->mode == CLI_VIEW_LIVE ? "? ask %.128s: " : "ask     %.128s: ", id);
		put_rows(v, SGR_YELLOW SGR_BOLD, pre, "  ", text);
		return;
	}
	if (v->open_asks > 0)
		v->open_asks--;
	const char *option = json_string_value(json_object_get(o, "option"));
	const char *answer = json_string_value(json_object_get(o, "text"));
	snprintf(text, sizeof(text), "%s%s%.600s", status, option || answer ? ": " : "",
	         option ? option : answer ? answer
	                                  : "");
	snprintf(pre, sizeof(pre), v->mode == CLI_VIEW_LIVE ? "  ask %.128s " : "ask     %.128s ", id);
	put_rows(v, SGR_DIM, pre, "  ", text);
}

static void on_terminal(cli_view_t *v, json_t *o, int is_error)
{
	const char *msg = json_string_value(json_object_get(o, "message"));
	const char *code = json_string_value(json_object_get(o, "code"));
	char pre[200];
	if (!msg)
		msg = "";
	if (v->mode == CLI_VIEW_LIVE) {
		if (is_error)
			snprintf(pre, sizeof(pre), "✗ %.120s: ", code ? code : "error");
		else
			snprintf(pre, sizeof(pre), "✓ ");
		put_rows(v, is_error ? SGR_RED SGR_BOLD : SGR_GREEN SGR_BOLD, pre, "  ", msg);
		return;
	}
	if (is_error)
		snprintf(pre, sizeof(pre), "error   %.120s: ", code ? code : "error");
	else
		snprintf(pre, sizeof(pre), "result  ");
	put_rows(v, NULL, pre, "        ", msg);
}

int cli_view_line(cli_view_t *v, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *o = json_loadb(line, len, 0, &jerr);
	const char *type = json_is_object(o) ? json_string_value(json_object_get(o, "type")) : NULL;
	int term = 0;

	if (type && !strcmp(type, "result"))
		term = 1;
	else if (type && !strcmp(type, "error"))
		term = 2;

	if (v->mode == CLI_VIEW_JSON) {
		fwrite(line, 1, len, v->out);
		fputc('\n', v->out);
		fflush(v->out);
		json_decref(o);
		return term;
	}
	if (v->mode == CLI_VIEW_LIVE && v->footer && !term)
		snprintf(v->status, sizeof(v->status), "running");
	if (!type) {
		char *raw = strndup(line, len);
		if (raw)
			put_rows(v, SGR_DIM, "  ", "  ", raw);
		free(raw);
	} else if (!strcmp(type, "step")) {
		on_step(v, o);
	} else if (!strcmp(type, "log")) {
		on_log(v, o);
	} else if (!strcmp(type, "ask")) {
		on_ask(v, o);
	} else if (term) {
		on_terminal(v, o, term == 2);
	} else {
		char *raw = strndup(line, len);
		if (raw)
			put_rows(v, SGR_DIM, "  ", "  ", raw);
		free(raw);
	}
	json_decref(o);
	if (v->mode == CLI_VIEW_LIVE && !term && v->open_asks > 0)
		snprintf(v->status, sizeof(v->status), "waiting for a reply (%d open ask%s)", v->open_asks,
		         v->open_asks == 1 ? "" : "s");
	if (v->mode == CLI_VIEW_LIVE && !term)
		footer_draw(v);
	flush_buf(v);
	return term;
}

void cli_view_status(cli_view_t *v, const char *status)
{
	snprintf(v->status, sizeof(v->status), "%s", status);
}

void cli_view_tick(cli_view_t *v)
{
	if (v->mode != CLI_VIEW_LIVE || v->finished)
		return;
	v->spin++;
	for (size_t i = 0; i < v->nsteps; i++) {
		view_step_t *s = &v->steps[i];
		long d = v->lines - s->row;
		if (s->status == STEP_RUNNING && d >= 1 && d <= v->rows - 1)
			step_draw(v, s, 0);
	}
	footer_draw(v);
	flush_buf(v);
}

void cli_view_finish(cli_view_t *v)
{
	if (v->finished)
		return;
	v->finished = 1;
	if (v->mode == CLI_VIEW_LIVE) {
		footer_erase(v);
		buf_str(&v->b, "\033[?25h");
	}
	flush_buf(v);
}
