/*
 * agent/sse.h - an incremental Server-Sent Events reader (the text/event-stream
 * framing of the WHATWG spec): bytes in, whole events out.  It owns line
 * splitting (LF, CRLF and CR), field parsing and the per-event data buffer,
 * each with a cap; it knows nothing of what the data means.
 *
 * Pure: no I/O, no allocation beyond its two capped buffers.  Fuzzed
 * (fuzz/fuzz_agent_sse.c).
 */
#ifndef RUNNEL_AGENT_SSE_H
#define RUNNEL_AGENT_SSE_H

#include <stddef.h>

#include "common/dynbuf.h"

/* Called once per dispatched event with its data (the data: lines joined by
 * LF, NUL-terminated) and event name ("" when none).  Return 0 to go on,
 * nonzero to stop the feed (agent_sse_feed then returns that value). */
typedef int (*agent_sse_event_fn)(void *arg, const char *event, const char *data, size_t len);

typedef struct agent_sse {
	rn_dynbuf_t line; /* the line being read, at most max bytes */
	rn_dynbuf_t data; /* data of the event being read, at most max bytes */
	int has_data;
	char event[64];
	int last_cr;  /* the previous byte was CR: a following LF is not a new line */
	int overflow; /* a line or event went over max */
	agent_sse_event_fn fn;
	void *arg;
} agent_sse_t;

/* max bounds one line and one event (bytes).  fn may be NULL (events are
 * parsed and dropped). */
void agent_sse_init(agent_sse_t *s, size_t max, agent_sse_event_fn fn, void *arg);
/* Feeds bytes.  Returns 0, the callback's nonzero value, or -1 when a line or
 * an event went over the cap (the reader stays failed). */
int agent_sse_feed(agent_sse_t *s, const char *buf, size_t len);
/* End of stream: a final event without its blank line is dispatched, as
 * servers that close right after the last data line expect. */
int agent_sse_finish(agent_sse_t *s);
void agent_sse_free(agent_sse_t *s);

#endif
