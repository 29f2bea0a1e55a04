/*
 * agent/http.h - runs one libcurl transfer through the multi interface so
 * that it ends at once when the agent is asked to stop (the stop fd is one
 * of the fds curl_multi_poll waits on) or when the peer goes quiet for too
 * long (an idle deadline that every received byte pushes back).
 */
#ifndef RUNNEL_AGENT_HTTP_H
#define RUNNEL_AGENT_HTTP_H

#include <stdint.h>

#include <curl/curl.h>

typedef enum {
	AGENT_HTTP_OK = 0,  /* the transfer completed (any HTTP status) */
	AGENT_HTTP_STOPPED, /* agent_ctl_stop() was called */
	AGENT_HTTP_IDLE,    /* nothing received for idle_ms */
	AGENT_HTTP_FAILED,  /* a transport error (errstr says which) */
} agent_http_rc_t;

/* Marks activity: the write/header callbacks of the transfer call it so that
 * the idle deadline moves. */
void agent_http_touch(void);

/* Performs easy (set up by the caller; its callbacks must call
 * agent_http_touch()) with an idle limit (ms, >0).  Also ends with
 * AGENT_HTTP_OK when a write callback aborted the transfer on purpose
 * (CURLE_WRITE_ERROR after agent_http_abort()). */
agent_http_rc_t agent_http_perform(CURL *easy, int64_t idle_ms, char *errstr, size_t errstr_size);

/* A write callback wants the transfer to end without an error. */
void agent_http_abort(void);

#endif
