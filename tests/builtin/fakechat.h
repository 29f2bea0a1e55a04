/*
 * tests/builtin/fakechat.h - a scripted fake Chat Completions server on a
 * free loopback port, on its own thread.  Request n gets response n of the
 * script (the last one repeats).  Each request's body and Authorization
 * header are kept for the test to inspect.
 *
 * A response body is sent as written; a '\x1e' byte in it is not sent but
 * splits the body into separate writes (a short pause between them), so
 * tests control where a stream breaks across TCP reads.
 */
#ifndef RUNNEL_TESTS_BUILTIN_FAKECHAT_H
#define RUNNEL_TESTS_BUILTIN_FAKECHAT_H

#include <pthread.h>

#include "tests/support/httpd.h"

#define FC_MAX_RESP 32
#define FC_MAX_REQ  256

typedef struct fc_resp {
	int status;               /* 0 = 200 */
	const char *content_type; /* NULL = text/event-stream */
	const char *headers;      /* extra header lines, each ending \r\n, or NULL */
	const char *body;
	int stall; /* after the body, hold the connection open */
} fc_resp_t;

typedef struct fakechat {
	int port;
	char base_url[64]; /* http://127.0.0.1:PORT/v1 */
	fc_resp_t script[FC_MAX_RESP];
	int nscript;
	/* what came in (guarded by mu) */
	pthread_mutex_t mu;
	char *bodies[FC_MAX_REQ];
	char *auth[FC_MAX_REQ];
	long long at_us[FC_MAX_REQ]; /* monotonic arrival time (µs) */
	int nreq;
	/* private */
	th_httpd_t *srv;
} fakechat_t;

/* Starts the server with the script (copied by pointer: keep it alive).
 * 0 or -1. */
int fakechat_start(fakechat_t *f, const fc_resp_t *script, int n);
void fakechat_stop(fakechat_t *f);
/* Requests received so far. */
int fakechat_requests(fakechat_t *f);

/* SSE helpers: a data frame with a text delta, a finish frame, [DONE]. */
#define FC_TEXT(s) "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" s "\"}}]}\n\n"
#define FC_STOP    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
#define FC_CALLS   "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
#define FC_DONE    "data: [DONE]\n\n"
/* A whole tool call in one frame; args is JSON text escaped for a JSON string. */
#define FC_CALL(idx, id, name, args) \
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":" #idx ",\"id\":\"" id \
	"\",\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"arguments\":\"" args "\"}}]}}]}\n\n"

#endif
