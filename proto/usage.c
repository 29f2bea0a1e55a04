/*
 * proto/usage.c - the usage parser of model answers and the usage sum
 * (see usage.h).  SSE is read line by line: `data:` lines of one event are
 * joined and parsed as JSON at the blank line that ends the event; a JSON
 * body is kept whole (up to the cap) and parsed at the end.
 */
#include "proto/usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { F_IN = 0,
       F_OUT,
       F_CREAD,
       F_CCREATE,
       F_CACHED,
       F_COUNT };

struct proto_usage_call {
	proto_usage_api_t api;
	int sse;
	size_t cap;
	/* the current line (SSE) or the whole body (JSON) */
	char *buf;
	size_t len, bufcap;
	int line_over; /* the current line went over the cap: skip to its end */
	/* the current SSE event's data */
	char *data;
	size_t dlen, dcap;
	int data_over;
	int skipped; /* some event or the body went over the cap */
	/* the last value of each field, and whether it was seen */
	uint64_t v[F_COUNT];
	int seen[F_COUNT];
	int any;
	char model[PROTO_USAGE_MODEL_MAX];
};

proto_usage_call_t *proto_usage_call_new(proto_usage_api_t api, int sse, size_t cap)
{
	proto_usage_call_t *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->api = api;
	c->sse = sse;
	c->cap = cap ? cap : 1;
	return c;
}

void proto_usage_call_free(proto_usage_call_t *c)
{
	if (!c)
		return;
	free(c->buf);
	free(c->data);
	free(c);
}

/* Appends to a buffer that may grow up to cap; -1 past it (or no memory). */
static int put(char **b, size_t *len, size_t *bcap, size_t cap, const char *p, size_t n)
{
	if (n > cap || *len > cap - n)
		return -1;
	if (*len + n + 1 > *bcap) {
		size_t nc = *bcap ? *bcap : 256;
		while (nc < *len + n + 1)
			nc *= 2;
		if (nc > cap + 1)
			nc = cap + 1;
		char *np = realloc(*b, nc);
		if (!np)
			return -1;
		*b = np;
		*bcap = nc;
	}
	memcpy(*b + *len, p, n);
	*len += n;
	(*b)[*len] = '\0';
	return 0;
}

static void take(proto_usage_call_t *c, int f, const json_t *v)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return;
	c->v[f] = (uint64_t)json_integer_value(v);
	c->seen[f] = 1;
	c->any = 1;
}

static void take_usage(proto_usage_call_t *c, const json_t *u)
{
	if (!json_is_object(u))
		return;
	take(c, F_IN, json_object_get(u, "input_tokens"));
	take(c, F_IN, json_object_get(u, "prompt_tokens"));
	take(c, F_OUT, json_object_get(u, "output_tokens"));
	take(c, F_OUT, json_object_get(u, "completion_tokens"));
	take(c, F_CREAD, json_object_get(u, "cache_read_input_tokens"));
	take(c, F_CCREATE, json_object_get(u, "cache_creation_input_tokens"));
	take(c, F_CACHED, json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
	take(c, F_CACHED, json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens"));
}

static void take_model(proto_usage_call_t *c, const json_t *m)
{
	const char *s = json_string_value(m);
	if (s && *s && strlen(s) < sizeof(c->model))
		memcpy(c->model, s, strlen(s) + 1);
}

/* One JSON object of the answer: a body, or an event's data. */
static void take_object(proto_usage_call_t *c, const json_t *o)
{
	if (!json_is_object(o))
		return;
	/* The body or chunk itself (Chat, Messages JSON, message_delta), a
	 * Messages stream's message_start, a Responses event. */
	static const char *const holders[] = { NULL, "message", "response" };
	for (size_t i = 0; i < sizeof(holders) / sizeof(holders[0]); i++) {
		const json_t *h = holders[i] ? json_object_get(o, holders[i]) : o;
		if (!json_is_object(h))
			continue;
		take_model(c, json_object_get(h, "model"));
		take_usage(c, json_object_get(h, "usage"));
	}
}

static void parse_json(proto_usage_call_t *c, const char *p, size_t n)
{
	json_t *o = json_loadb(p, n, 0, NULL);
	if (o) {
		take_object(c, o);
		json_decref(o);
	}
}

/* The blank line: the event's data is complete. */
static void event_end(proto_usage_call_t *c)
{
	if (c->data_over)
		c->skipped = 1;
	else if (c->dlen && !(c->dlen == 6 && !memcmp(c->data, "[DONE]", 6)))
		parse_json(c, c->data, c->dlen);
	c->dlen = 0;
	c->data_over = 0;
}

static void sse_line(proto_usage_call_t *c, const char *l, size_t n)
{
	if (n && l[n - 1] == '\r')
		n--;
	if (n == 0) {
		event_end(c);
		return;
	}
	if (n < 5 || memcmp(l, "data:", 5))
		return; /* event:, id:, retry:, comments */
	l += 5;
	n -= 5;
	if (n && *l == ' ') {
		l++;
		n--;
	}
	if (c->data_over)
		return;
	/* Several data lines of one event are joined with newlines. */
	if (c->dlen && put(&c->data, &c->dlen, &c->dcap, c->cap, "\n", 1) < 0)
		c->data_over = 1;
	if (!c->data_over && put(&c->data, &c->dlen, &c->dcap, c->cap, l, n) < 0)
		c->data_over = 1;
}

void proto_usage_call_feed(proto_usage_call_t *c, const char *data, size_t len)
{
	if (!c || !len)
		return;
	if (!c->sse) {
		if (!c->line_over && put(&c->buf, &c->len, &c->bufcap, c->cap, data, len) < 0)
			c->line_over = 1;
		return;
	}
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t n = nl ? (size_t)(nl - data) : len;
		if (!c->line_over && put(&c->buf, &c->len, &c->bufcap, c->cap, data, n) < 0)
			c->line_over = 1;
		if (!nl)
			return;
		if (c->line_over) {
			c->data_over = 1;
			c->line_over = 0;
		} else {
			sse_line(c, c->buf ? c->buf : "", c->len);
		}
		c->len = 0;
		data += n + 1;
		len -= n + 1;
	}
}

int proto_usage_call_finish(proto_usage_call_t *c, proto_usage_t *out, char *model, size_t model_size)
{
	memset(out, 0, sizeof(*out));
	if (model_size)
		model[0] = '\0';
	if (!c)
		return 0;
	if (!c->sse) {
		if (c->line_over)
			c->skipped = 1;
		else if (c->len)
			parse_json(c, c->buf, c->len);
	} else if (c->dlen || c->data_over) {
		/* A stream that ended without the event's blank line: what is
		 * complete JSON still counts. */
		event_end(c);
	}
	out->requests = 1;
	uint64_t in = c->v[F_IN];
	if (c->api == PROTO_USAGE_OPENAI) {
		uint64_t cached = c->v[F_CACHED];
		if (cached > in)
			cached = in;
		out->input_tokens = in - cached;
		out->cache_read_input_tokens = cached;
	} else {
		out->input_tokens = in;
		out->cache_read_input_tokens = c->v[F_CREAD];
		out->cache_creation_input_tokens = c->v[F_CCREATE];
	}
	out->output_tokens = c->v[F_OUT];
	if (model_size)
		snprintf(model, model_size, "%s", c->model);
	if (c->skipped)
		return -1;
	return c->any;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void proto_usage_add(proto_usage_t *sum, const proto_usage_t *u)
{
	sum->requests = sat_add(sum->requests, u->requests);
	sum->input_tokens = sat_add(sum->input_tokens, u->input_tokens);
	sum->output_tokens = sat_add(sum->output_tokens, u->output_tokens);
	sum->cache_read_input_tokens = sat_add(sum->cache_read_input_tokens, u->cache_read_input_tokens);
	sum->cache_creation_input_tokens = sat_add(sum->cache_creation_input_tokens, u->cache_creation_input_tokens);
}

uint64_t proto_usage_budget_tokens(const proto_usage_t *u)
{
	return sat_add(u->input_tokens, u->output_tokens);
}

static json_t *num(uint64_t v)
{
	return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

json_t *proto_usage_json(const proto_usage_t *u)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	if (json_object_set_new(o, "requests", num(u->requests)) < 0 ||
	    json_object_set_new(o, "input_tokens", num(u->input_tokens)) < 0 ||
	    json_object_set_new(o, "output_tokens", num(u->output_tokens)) < 0 ||
	    json_object_set_new(o, "cache_read_input_tokens", num(u->cache_read_input_tokens)) < 0 ||
	    json_object_set_new(o, "cache_creation_input_tokens", num(u->cache_creation_input_tokens)) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

char *proto_usage_text(const proto_usage_t *u)
{
	json_t *o = proto_usage_json(u);
	char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	return s;
}
