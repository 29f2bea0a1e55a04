/*
 * agent/answer.h - the assembly of one streamed Chat Completions answer: the
 * assistant's text deltas and its tool calls, whose id, name and argument
 * fragments arrive spread over many chunks (and, for parallel calls,
 * interleaved by index).  Every part has a cap.
 *
 * Pure: chunk JSON text in, an answer out; no I/O.  Fuzzed
 * (fuzz/fuzz_agent_answer.c).
 */
#ifndef RUNNEL_AGENT_ANSWER_H
#define RUNNEL_AGENT_ANSWER_H

#include <stddef.h>

#include "common/dynbuf.h"

#define AGENT_ANSWER_CALLS_MAX 64            /* tool calls in one answer */
#define AGENT_ANSWER_TEXT_MAX  (1024 * 1024) /* assistant text bytes */
#define AGENT_ANSWER_ARGS_MAX  (1024 * 1024) /* argument bytes of one call */

/* p: NUL-terminated, or NULL when empty; capped at init (answer.c). */
typedef rn_dynbuf_t agent_str_t;

typedef struct agent_call {
	int index; /* the provider's index */
	agent_str_t id, name, args;
} agent_call_t;

typedef struct agent_answer {
	agent_str_t text;
	agent_call_t calls[AGENT_ANSWER_CALLS_MAX];
	int ncalls;
	char finish[32]; /* finish_reason, "" until seen */
	int done;        /* [DONE] seen */
	int chunks;      /* chunks taken */
} agent_answer_t;

void agent_answer_init(agent_answer_t *a);
void agent_answer_free(agent_answer_t *a);

/*
 * Takes the data of one SSE event.  Returns 0 (taken), 1 ([DONE]: the
 * answer is complete) or -1 with errstr: the data is not a chunk object
 * ("the model provider sent a malformed stream event"), the provider put an
 * error in the stream (its message, cut to 300 bytes), or a cap was passed.
 */
int agent_answer_chunk(agent_answer_t *a, const char *data, size_t len, char *errstr, size_t errstr_size);

/* Fills in what a provider may leave out once the answer is complete: call
 * ids ("call_<n>") and empty argument strings ("{}").  Returns -1 with
 * errstr when a call has no function name. */
int agent_answer_finish(agent_answer_t *a, char *errstr, size_t errstr_size);

#endif
