/*
 * proto/usage.h - what a run's model calls used (SPEC §4 `usage`), and the
 * parser that reads it out of a provider's answer.
 *
 * The answer is untrusted bytes from the upstream (or from whatever the
 * run's base URL names): a JSON body or a server-sent-events stream, fed in
 * pieces as it passes through the gateway.  Three APIs are understood:
 *   Anthropic Messages   usage in the body, or in the `message_start`
 *                        event's message.usage and the `message_delta`
 *                        events' usage (cumulative: the last value wins);
 *   OpenAI Chat          usage in the body, or in the final chunk;
 *   OpenAI Responses     usage in the body, or in the `response.completed`
 *                        (or .incomplete/.failed) event's response.usage.
 * Within one call the last value reported for a field wins.  OpenAI counts
 * cached prompt tokens inside its prompt/input tokens; they are reported
 * as cache_read_input_tokens and taken out of input_tokens, so the fields
 * mean the same for both providers (Anthropic's meaning).
 *
 * Memory is capped: an SSE event or a JSON body longer than the cap is
 * skipped (its usage is not counted; proto_usage_call_finish says so).
 *
 * @locality any thread; a parser belongs to one call.
 */
#ifndef RUNNEL_PROTO_USAGE_H
#define RUNNEL_PROTO_USAGE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct proto_usage {
	uint64_t requests;
	uint64_t input_tokens;
	uint64_t output_tokens;
	uint64_t cache_read_input_tokens;
	uint64_t cache_creation_input_tokens;
} proto_usage_t;

typedef enum {
	PROTO_USAGE_ANTHROPIC = 0,
	PROTO_USAGE_OPENAI,
} proto_usage_api_t;

#define PROTO_USAGE_MODEL_MAX 128

typedef struct proto_usage_call proto_usage_call_t;

/* A parser for one answer.  sse: the body is text/event-stream.  cap:
 * the longest event (or JSON body) kept.  NULL when out of memory. */
proto_usage_call_t *proto_usage_call_new(proto_usage_api_t api, int sse, size_t cap);

/* The next piece of the answer's body. */
void proto_usage_call_feed(proto_usage_call_t *c, const char *data, size_t len);

/*
 * The answer ended (complete or cut).  *out gets this call's usage
 * (requests = 1) and model the model the provider named ("" when none).
 * Returns 1 when the answer reported usage, 0 when it did not, -1 when an
 * event or the body went over the cap and was skipped.
 */
int proto_usage_call_finish(proto_usage_call_t *c, proto_usage_t *out, char *model, size_t model_size);

void proto_usage_call_free(proto_usage_call_t *c);

/* sum += u, saturating. */
void proto_usage_add(proto_usage_t *sum, const proto_usage_t *u);

/* What a budget counts: input + output tokens (SPEC §5). */
uint64_t proto_usage_budget_tokens(const proto_usage_t *u);

/* The SPEC §4 object:
 * {"requests","input_tokens","output_tokens","cache_read_input_tokens","cache_creation_input_tokens"}.
 * New reference, NULL when out of memory. */
json_t *proto_usage_json(const proto_usage_t *u);

/* The same as compact text (caller frees), NULL when out of memory. */
char *proto_usage_text(const proto_usage_t *u);

#endif
