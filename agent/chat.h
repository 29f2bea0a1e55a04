/*
 * agent/chat.h - the Chat Completions client: one streamed request
 * (POST {base}/chat/completions, "stream":true) read through the SSE reader
 * into an answer, with bounded retries of 429 and 5xx answers (and of
 * transport failures) that honour Retry-After, an idle timeout per request,
 * and an immediate end on stop.
 *
 * Error messages name the HTTP status and the provider's own message; they
 * never contain the key (the caller's output scrubber is the second line of
 * defence).
 */
#ifndef RUNNEL_AGENT_CHAT_H
#define RUNNEL_AGENT_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "agent/answer.h"

typedef struct agent_chat_opts {
	const char *base_url; /* e.g. https://api.openai.com/v1 (no trailing /chat/completions) */
	const char *api_key;  /* Bearer token, or NULL */
	int64_t timeout_ms;   /* idle limit of one request */
	int retries;          /* retries after the first attempt */
	int64_t backoff_ms;   /* first backoff; doubles per retry */
	int64_t retry_max_ms; /* cap on one wait (Retry-After included) */
} agent_chat_opts_t;

typedef enum {
	AGENT_CHAT_OK = 0,
	AGENT_CHAT_STOPPED, /* agent_ctl_stop() */
	AGENT_CHAT_TIMEOUT, /* model_timeout */
	AGENT_CHAT_ERROR,   /* model_error */
} agent_chat_rc_t;

/* Process-wide libcurl setup; call once before threads. */
int agent_chat_global_init(void);
void agent_chat_global_free(void);

/*
 * Sends body (the request JSON) and assembles the streamed answer into ans
 * (initialised by the caller, freed by the caller).  On AGENT_CHAT_TIMEOUT
 * and AGENT_CHAT_ERROR errstr holds the message for the error line.
 * Retries are announced with warn log lines.
 */
agent_chat_rc_t agent_chat_complete(const agent_chat_opts_t *o, const char *body, agent_answer_t *ans,
                                    char *errstr, size_t errstr_size);

/* Parses a Retry-After value (delta-seconds or an HTTP date) into ms from
 * now; -1 when absent or unparsable. */
int64_t agent_chat_retry_after_ms(const char *value);

#endif
