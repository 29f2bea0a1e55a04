/*
 * agent/answer.c - assembly of one streamed answer (see answer.h).
 */
#include "agent/answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* A call's id and name are short; its arguments and the text have caps of
 * their own (answer.h). */
#define ANSWER_NAME_MAX 256

void agent_answer_init(agent_answer_t *a)
{
	memset(a, 0, sizeof(*a));
	rn_dynbuf_init(&a->text, AGENT_ANSWER_TEXT_MAX);
}

static void str_free(agent_str_t *s)
{
	rn_dynbuf_free(s);
}

void agent_answer_free(agent_answer_t *a)
{
	str_free(&a->text);
	for (int i = 0; i < a->ncalls; i++) {
		str_free(&a->calls[i].id);
		str_free(&a->calls[i].name);
		str_free(&a->calls[i].args);
	}
	a->ncalls = 0;
}

/* Appends n bytes (nothing at all for 0: p stays NULL when empty).  0, or
 * -1 past the string's cap or out of memory. */
static int str_append(agent_str_t *s, const char *p, size_t n)
{
	return n == 0 || rn_dynbuf_add(s, p, n) == 0 ? 0 : -1;
}

static int str_set(agent_str_t *s, const char *p, size_t n)
{
	str_free(s);
	return str_append(s, p, n);
}

/* The call a delta belongs to: by index when the provider gives one, else a
 * new call when the delta carries a new id, else the last call. */
static agent_call_t *call_for(agent_answer_t *a, const json_t *d, size_t pos)
{
	const json_t *ji = json_object_get(d, "index");
	const char *id = json_string_value(json_object_get(d, "id"));
	int index;
	if (json_is_integer(ji)) {
		json_int_t v = json_integer_value(ji);
		if (v < 0 || v > 1000000)
			return NULL;
		index = (int)v;
		for (int i = 0; i < a->ncalls; i++)
			if (a->calls[i].index == index)
				return &a->calls[i];
	} else if (a->ncalls > 0 && (!id || !*id || (a->calls[a->ncalls - 1].id.p && !strcmp(a->calls[a->ncalls - 1].id.p, id)))) {
		return &a->calls[a->ncalls - 1];
	} else {
		index = a->ncalls > 0 ? a->calls[a->ncalls - 1].index + 1 : (int)pos;
	}
	if (a->ncalls >= AGENT_ANSWER_CALLS_MAX)
		return NULL;
	agent_call_t *c = &a->calls[a->ncalls++];
	memset(c, 0, sizeof(*c));
	c->index = index;
	rn_dynbuf_init(&c->id, ANSWER_NAME_MAX);
	rn_dynbuf_init(&c->name, ANSWER_NAME_MAX);
	rn_dynbuf_init(&c->args, AGENT_ANSWER_ARGS_MAX);
	return c;
}

static int take_tool_calls(agent_answer_t *a, const json_t *tcs, char *errstr, size_t errstr_size)
{
	size_t i;
	const json_t *d;
	json_array_foreach(tcs, i, d)
	{
		if (!json_is_object(d))
			goto bad;
		agent_call_t *c = call_for(a, d, i);
		if (!c) {
			snprintf(errstr, errstr_size, "the model asked for more than %d tool calls in one answer",
			         AGENT_ANSWER_CALLS_MAX);
			return -1;
		}
		const json_t *jid = json_object_get(d, "id");
		if (json_is_string(jid) && json_string_length(jid) > 0 && !c->id.p &&
		    str_set(&c->id, json_string_value(jid), json_string_length(jid)) < 0)
			goto big;
		const json_t *fn = json_object_get(d, "function");
		if (!fn || json_is_null(fn))
			continue;
		if (!json_is_object(fn))
			goto bad;
		const json_t *jn = json_object_get(fn, "name");
		if (json_is_string(jn) && json_string_length(jn) > 0) {
			const char *n = json_string_value(jn);
			size_t nl = json_string_length(jn);
			/* Most providers send the whole name once; some repeat it in
			 * every delta, a few stream it in pieces. */
			if (!c->name.p || !(nl == c->name.len && !memcmp(c->name.p, n, nl)))
				if (str_append(&c->name, n, nl) < 0)
					goto big;
		}
		const json_t *ja = json_object_get(fn, "arguments");
		if (json_is_string(ja) &&
		    str_append(&c->args, json_string_value(ja), json_string_length(ja)) < 0)
			goto big;
	}
	return 0;
bad:
	snprintf(errstr, errstr_size, "the model provider sent a malformed stream event");
	return -1;
big:
	snprintf(errstr, errstr_size, "the model's tool call is over the size limit");
	return -1;
}

int agent_answer_chunk(agent_answer_t *a, const char *data, size_t len, char *errstr, size_t errstr_size)
{
	/* [DONE] ends the stream (with or without surrounding blanks). */
	while (len > 0 && (*data == ' ' || *data == '\t')) {
		data++;
		len--;
	}
	while (len > 0 && (data[len - 1] == ' ' || data[len - 1] == '\t'))
		len--;
	if (len == 6 && !memcmp(data, "[DONE]", 6)) {
		a->done = 1;
		return 1;
	}
	json_error_t jerr;
	json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		snprintf(errstr, errstr_size, "the model provider sent a malformed stream event");
		return -1;
	}
	int rc = 0;
	const json_t *err = json_object_get(o, "error");
	if (err && !json_is_null(err)) {
		const char *m = json_string_value(json_object_get(err, "message"));
		if (!m)
			m = json_string_value(err);
		/* An empty message says nothing: the caller still gets a reason. */
		snprintf(errstr, errstr_size, "%.300s", m && *m ? m : "the model provider reported an error");
		rc = -1;
		goto out;
	}
	a->chunks++;
	const json_t *choices = json_object_get(o, "choices");
	if (!choices || json_is_null(choices))
		goto out; /* usage-only or keep-alive chunk */
	if (!json_is_array(choices)) {
		snprintf(errstr, errstr_size, "the model provider sent a malformed stream event");
		rc = -1;
		goto out;
	}
	size_t i;
	const json_t *ch;
	json_array_foreach(choices, i, ch)
	{
		if (!json_is_object(ch)) {
			snprintf(errstr, errstr_size, "the model provider sent a malformed stream event");
			rc = -1;
			goto out;
		}
		/* Only the first choice matters (n is never set). */
		const json_t *ji = json_object_get(ch, "index");
		if (json_is_integer(ji) && json_integer_value(ji) != 0)
			continue;
		const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
		if (fr)
			snprintf(a->finish, sizeof(a->finish), "%s", fr);
		const json_t *d = json_object_get(ch, "delta");
		if (!d || json_is_null(d))
			d = json_object_get(ch, "message"); /* a provider answering whole */
		if (!d || json_is_null(d))
			continue;
		if (!json_is_object(d)) {
			snprintf(errstr, errstr_size, "the model provider sent a malformed stream event");
			rc = -1;
			goto out;
		}
		const json_t *c = json_object_get(d, "content");
		if (json_is_string(c) &&
		    str_append(&a->text, json_string_value(c), json_string_length(c)) < 0) {
			snprintf(errstr, errstr_size, "the model's answer is over the size limit");
			rc = -1;
			goto out;
		}
		const json_t *tcs = json_object_get(d, "tool_calls");
		if (json_is_array(tcs) && take_tool_calls(a, tcs, errstr, errstr_size) < 0) {
			rc = -1;
			goto out;
		}
	}
out:
	json_decref(o);
	return rc;
}

int agent_answer_finish(agent_answer_t *a, char *errstr, size_t errstr_size)
{
	for (int i = 0; i < a->ncalls; i++) {
		agent_call_t *c = &a->calls[i];
		if (!c->name.p) {
			snprintf(errstr, errstr_size, "the model sent a tool call without a function name");
			return -1;
		}
		if (!c->id.p) {
			char id[32];
			int n = snprintf(id, sizeof(id), "call_%d", i + 1);
			if (str_set(&c->id, id, (size_t)n) < 0)
				goto oom;
		}
		if (!c->args.p && str_set(&c->args, "{}", 2) < 0)
			goto oom;
	}
	return 0;
oom:
	snprintf(errstr, errstr_size, "out of memory");
	return -1;
}
