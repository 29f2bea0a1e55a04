/*
 * agent/sse.c - the Server-Sent Events reader (see sse.h).
 */
#include "agent/sse.h"

#include <stdlib.h>
#include <string.h>

void agent_sse_init(agent_sse_t *s, size_t max, agent_sse_event_fn fn, void *arg)
{
	memset(s, 0, sizeof(*s));
	rn_dynbuf_init(&s->line, max);
	rn_dynbuf_init(&s->data, max);
	s->fn = fn;
	s->arg = arg;
}

void agent_sse_free(agent_sse_t *s)
{
	rn_dynbuf_free(&s->line);
	rn_dynbuf_free(&s->data);
}

static int dispatch(agent_sse_t *s)
{
	int rc = 0;
	if (s->has_data && s->fn)
		rc = s->fn(s->arg, s->event, s->data.p ? s->data.p : "", s->data.len);
	s->has_data = 0;
	rn_dynbuf_reset(&s->data);
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
		/* Room for the joining LF and the value at once: all or nothing. */
		if (rn_dynbuf_reserve(&s->data, (s->has_data ? 1 : 0) + vlen) < 0 ||
		    (s->has_data && rn_dynbuf_add(&s->data, "\n", 1) < 0) || rn_dynbuf_add(&s->data, val, vlen) < 0)
			return -1;
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
			int rc = on_line(s, s->line.p ? s->line.p : "", s->line.len);
			rn_dynbuf_reset(&s->line);
			if (rc < 0)
				s->overflow = 1;
			if (rc)
				return rc;
			continue;
		}
		if (rn_dynbuf_add(&s->line, &c, 1) < 0) {
			s->overflow = 1;
			return -1;
		}
	}
	return 0;
}

int agent_sse_finish(agent_sse_t *s)
{
	if (s->overflow)
		return -1;
	int rc = 0;
	if (s->line.len > 0) {
		rc = on_line(s, s->line.p, s->line.len);
		rn_dynbuf_reset(&s->line);
		if (rc)
			return rc;
	}
	return dispatch(s);
}
