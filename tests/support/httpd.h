/*
 * tests/support/httpd.h - the one loopback HTTP server core of the tests'
 * fake upstreams (tests/acp/fakeprov.c, tests/builtin/fakechat.c, the
 * dispatcher in tests/cli/test_submit_dispatcher.c): a listener on a free
 * 127.0.0.1 port, an accept loop on its own thread, the reading of one
 * request (head, then a Content-Length or chunked body) and a printf onto
 * the connection.  What to answer is the caller's: it gets
 * each request in a serve callback and writes the response itself.  Every
 * connection carries one request and is closed after the callback returns.
 *
 * @locality th_httpd_start and th_httpd_stop from the test's main thread;
 * serve runs on the server's threads (several at once with threads = 1).
 */
#ifndef RUNNEL_TESTS_SUPPORT_HTTPD_H
#define RUNNEL_TESTS_SUPPORT_HTTPD_H

#include <stddef.h>

/* A request (head and body) larger than this is cut off there. */
#define TH_HTTPD_REQ_MAX ((size_t)16 << 20)

/* One request as read from a connection. */
typedef struct th_http_req {
	char *head; /* request line and headers through the blank line; NUL-terminated */
	char *body; /* NUL-terminated, chunked encoding removed; serve may take it (set NULL) */
	size_t body_len;
	char method[16];
	char path[512]; /* without the query string */
} th_http_req_t;

typedef struct th_httpd th_httpd_t;

/* Called once a connection's request is read; writes the answer to fd
 * (th_httpd_writef, th_send_all).  The core closes fd and frees req after. */
typedef void (*th_httpd_serve_fn)(th_httpd_t *s, void *arg, int fd, th_http_req_t *req);

typedef struct th_httpd_opts {
	th_httpd_serve_fn serve;
	void *arg;
	int threads;         /* 1: a thread per connection; 0: one at a time on the accept thread */
	int read_timeout_ms; /* a client silent this long loses its connection; -1: no limit */
} th_httpd_opts_t;

/* Listens on a free loopback port and starts accepting.  NULL on failure
 * (printed, prefixed with name). */
th_httpd_t *th_httpd_start(const char *name, const th_httpd_opts_t *o);

int th_httpd_port(const th_httpd_t *s);

/* For serve: 1 once th_httpd_stop began; stop_fd is readable from then on
 * (poll it next to the connection to end a held-open answer). */
int th_httpd_stopping(const th_httpd_t *s);
int th_httpd_stop_fd(const th_httpd_t *s);

/* Stops accepting and waits up to 5 s for the connections still served.
 * 0 when all ended (s is freed); -1 when one still runs (a client that
 * never sent its request): s is left to it rather than freed under it, and
 * so must be whatever its serve arg points to. */
int th_httpd_stop(th_httpd_t *s);

/* Reads one request from fd (see th_http_req_t); timeout_ms as in
 * th_httpd_opts_t.  0, or -1 when the client went away or sent no whole
 * head (nothing to free then). */
int th_http_read_request(int fd, int timeout_ms, th_http_req_t *req);

/* The value of request header name (case-insensitive, leading blanks
 * skipped), malloc'd; NULL when absent. */
char *th_http_req_header(const th_http_req_t *req, const char *name);

void th_http_req_free(th_http_req_t *req);

/* printf onto a socket (th_send_all).  0, or -1 when the peer went away. */
int th_httpd_writef(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
