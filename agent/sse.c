/*
 * agent/sse.c - the Server-Sent Events reader (see sse.h).
 */
#include "agent/sse.h"

#include <stdlib.h>
#include <string.h>

void agent_sse_init(agent_sse_t *s, size_t max, agent_sse_event_fn fn, void *arg)
{
	memset(s, 0, sizeof(*s));
	s->max = max;
	s->fn = fn;
	s->arg = arg;
}

void agent_sse_free(agent_sse_t *s)
{
	free(s->line);
	free(s->data);
	s->line = s->data = NULL;
	s->line_len = s->line_cap = s->data_len = s->data_cap = 0;
}

/* Grows *buf to hold need+1 bytes, never past max+1. */
static int grow(char **buf, size_t *cap, size_t need, size_t max)
{
	if (need > max)
		return -1;
	if (need + 1 <= *cap)
		return 0;
	size_t n = *cap ? *cap * 2 : 256;
	while (n < need + 1)
		n *= 2;
	if (n > max + 1)
		n = max + 1;
	char *p = realloc(*buf, n);
	if (!p)
		return -1;
	*buf = p;
	*cap = n;
	return 0;
}

static int dispatch(agent_sse_t *s)
{
	int rc = 0;
	if (s->has_data && s->fn) {
		s->data[s->data_len] = '\0';
		rc = s->fn(s->arg, s->event, s->data, s->data_len);
	}
	s->has_data = 0;
	s->data_len = 0;
	s->event[0] = '\0';
	return rc;
}

/* One complete line (without its terminator). */
static int on_line(agent_sse_t *s, const char *line, size_t len)
{
	if (len == 0)
		return dispatch(s);
	if (line[0] == ':')
		return 0; /* comment (keep-alive) */
	const char *colon = memchr(line, ':', len);
	size_t nlen = colon ? (size_t)(colon - line) : len;
	const char *val = colon ? colon + 1 : line + len;
	size_t vlen = colon ? len - nlen - 1 : 0;
	if (vlen > 0 && *val == ' ') {
		val++;
		vlen--;
	}
	if (nlen == 4 && !memcmp(line, "data", 4)) {
		size_t need = s->data_len + (s->has_data ? 1 : 0) + vlen;
		if (grow(&s->data, &s->data_cap, need, s->max) < 0)
			return -1;
		if (s->has_data)
			s->data[s->data_len++] = '\n';
		memcpy(s->data + s->data_len, val, vlen);
		s->data_len += vlen;
		s->has_data = 1;
	} else if (nlen == 5 && !memcmp(line, "event", 5)) {
		size_t n = vlen < sizeof(s->event) - 1 ? vlen : sizeof(s->event) - 1;
		memcpy(s->event, val, n);
		s->event[n] = '\0';
	}
	/* id:, retry: and unknown fields do not matter to a single request. */
	return 0;
}

int agent_sse_feed(agent_sse_t *s, const char *buf, size_t len)
{
	if (s->overflow)
		return -1;
	for (size_t i = 0; i < len; i++) {
		char c = buf[i];
		if (c == '\n' && s->last_cr) {
			s->last_cr = 0;
			continue;
		}
		s->last_cr = (c == '\r');
		if (c == '\n' || c == '\r') {
			int rc = on_line(s, s->line ? s->line : "", s->line_len);
			s->line_len = 0;
			if (rc < 0)
				s->overflow = 1;
			if (rc)
				return rc;
			continue;
		}
		if (grow(&s->line, &s->line_cap, s->line_len + 1, s->max) < 0) {
			s->overflow = 1;
			return -1;
		}
		s->line[s->line_len++] = c;
	}
	return 0;
}

int agent_sse_finish(agent_sse_t *s)
{
	if (s->overflow)
		return -1;
	int rc = 0;
	if (s->line_len > 0) {
		rc = on_line(s, s->line, s->line_len);
		s->line_len = 0;
		if (rc)
			return rc;
	}
	return dispatch(s);
}
