/*
 * tests/support/httpd.c - the loopback HTTP server core of the tests' fake
 * upstreams (see httpd.h).
 */
#include "tests/support/httpd.h"
#include "tests/support/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct th_httpd {
	th_httpd_opts_t o;
	int lfd;
	int port;
	int stop_pipe[2];
	pthread_t thread;
	atomic_int stopping;
	atomic_int active; /* connection threads still running */
};

typedef struct conn {
	th_httpd_t *s;
	int fd;
} conn_t;

/* recv, after waiting at most timeout_ms (-1: no limit) for data. */
static ssize_t recv_some(int fd, char *p, size_t n, int timeout_ms)
{
	if (timeout_ms >= 0) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, timeout_ms) <= 0)
			return -1;
	}
	return recv(fd, p, n, 0);
}

/* Decodes a chunked body in place; returns its new length. */
static size_t dechunk(char *body, size_t have)
{
	size_t in = 0, out = 0;
	while (in < have) {
		char *e;
		unsigned long n = strtoul(body + in, &e, 16);
		char *crlf = strstr(e, "\r\n");
		if (!crlf || n == 0)
			break;
		in = (size_t)(crlf - body) + 2;
		if (in + n > have)
			n = have - in;
		memmove(body + out, body + in, n);
		out += n;
		in += n + 2;
	}
	return out;
}

/* What is known of a request once its head is in. */
typedef struct req_shape {
	size_t hlen; /* bytes of the head, with its blank line; 0 until it is in */
	long clen;   /* Content-Length, or -1 */
	int chunked;
} req_shape_t;

/* 1 once buf (n bytes) holds the whole head (sh->hlen == 0) or, after it,
 * the whole body. */
static int request_done(const char *buf, size_t n, const req_shape_t *sh)
{
	if (!sh->hlen)
		return !!memmem(buf, n, "\r\n\r\n", 4);
	const char *body = buf + sh->hlen;
	size_t have = n - sh->hlen;
	if (!sh->chunked)
		return sh->clen < 0 || have >= (size_t)sh->clen;
	return memmem(body, have, "\r\n0\r\n\r\n", 7) || (have >= 5 && !memcmp(body, "0\r\n\r\n", 5));
}

/* Reads from fd into *buf (growing it, at most TH_HTTPD_REQ_MAX) until
 * request_done, the peer stops or timeout_ms pass without data. */
static void recv_request(int fd, int timeout_ms, char **buf, size_t *len, size_t *cap, const req_shape_t *sh)
{
	while (*buf && !request_done(*buf, *len, sh)) {
		if (*len == *cap) {
			if (*cap >= TH_HTTPD_REQ_MAX)
				break;
			*cap *= 2;
			char *n = realloc(*buf, *cap + 1);
			if (!n)
				break;
			*buf = n;
		}
		ssize_t r = recv_some(fd, *buf + *len, *cap - *len, timeout_ms);
		if (r <= 0)
			break;
		*len += (size_t)r;
	}
}

int th_http_read_request(int fd, int timeout_ms, th_http_req_t *req)
{
	memset(req, 0, sizeof(*req));
	req_shape_t sh = { 0, -1, 0 };
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap + 1);
	recv_request(fd, timeout_ms, &buf, &len, &cap, &sh);
	char *end = buf ? memmem(buf, len, "\r\n\r\n", 4) : NULL;
	if (!end) {
		free(buf);
		return -1;
	}
	sh.hlen = (size_t)(end - buf) + 4;
	char *head = strndup(buf, sh.hlen);
	for (char *l = head; l && *l;) {
		char *nl = strstr(l, "\r\n");
		if (nl)
			*nl = '\0';
		if (!strncasecmp(l, "content-length:", 15))
			sh.clen = strtol(l + 15, NULL, 10);
		if (!strncasecmp(l, "transfer-encoding:", 18) && strcasestr(l, "chunked"))
			sh.chunked = 1;
		if (nl)
			*nl = '\r';
		l = nl ? nl + 2 : NULL;
	}
	recv_request(fd, timeout_ms, &buf, &len, &cap, &sh);
	size_t have = len - sh.hlen;
	char *body = malloc(have + 1);
	if (!body || !head) {
		free(buf);
		free(body);
		free(head);
		return -1;
	}
	memcpy(body, buf + sh.hlen, have);
	free(buf);
	if (sh.chunked)
		have = dechunk(body, have);
	else if (sh.clen >= 0 && have > (size_t)sh.clen)
		have = (size_t)sh.clen;
	body[have] = '\0';
	req->head = head;
	req->body = body;
	req->body_len = have;
	sscanf(head, "%15s %511s", req->method, req->path);
	char *q = strchr(req->path, '?');
	if (q)
		*q = '\0';
	return 0;
}

char *th_http_req_header(const th_http_req_t *req, const char *name)
{
	size_t nl = strlen(name);
	const char *l = req->head ? strstr(req->head, "\r\n") : NULL;
	while (l && l[2] != '\r' && l[2] != '\0') {
		l += 2;
		if (!strncasecmp(l, name, nl) && l[nl] == ':') {
			const char *v = l + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			const char *e = strstr(v, "\r\n");
			return strndup(v, e ? (size_t)(e - v) : strlen(v));
		}
		l = strstr(l, "\r\n");
	}
	return NULL;
}

void th_http_req_free(th_http_req_t *req)
{
	free(req->head);
	free(req->body);
	req->head = req->body = NULL;
}

int th_httpd_writef(int fd, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	int rc = th_send_all(fd, s, (size_t)n);
	free(s);
	return rc;
}

static void serve_conn(th_httpd_t *s, int fd)
{
	th_http_req_t req;
	if (th_http_read_request(fd, s->o.read_timeout_ms, &req) == 0) {
		s->o.serve(s, s->o.arg, fd, &req);
		th_http_req_free(&req);
	}
	shutdown(fd, SHUT_WR);
	close(fd);
}

static void *conn_main(void *arg)
{
	conn_t *c = arg;
	th_httpd_t *s = c->s;
	serve_conn(s, c->fd);
	free(c);
	atomic_fetch_sub(&s->active, 1);
	return NULL;
}

static void *accept_main(void *arg)
{
	th_httpd_t *s = arg;
	for (;;) {
		struct pollfd fds[2] = { { s->lfd, POLLIN, 0 }, { s->stop_pipe[0], POLLIN, 0 } };
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents)
			break;
		if (!fds[0].revents)
			continue;
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (!s->o.threads) {
			serve_conn(s, fd);
			continue;
		}
		conn_t *c = malloc(sizeof(*c));
		pthread_t t;
		if (!c) {
			close(fd);
			continue;
		}
		c->s = s;
		c->fd = fd;
		atomic_fetch_add(&s->active, 1);
		if (pthread_create(&t, NULL, conn_main, c) != 0) {
			atomic_fetch_sub(&s->active, 1);
			close(fd);
			free(c);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

th_httpd_t *th_httpd_start(const char *name, const th_httpd_opts_t *o)
{
	th_httpd_t *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->o = *o;
	s->stop_pipe[0] = s->stop_pipe[1] = -1;
	s->lfd = th_listen_loopback(64, &s->port);
	if (s->lfd < 0 || pipe2(s->stop_pipe, O_CLOEXEC) < 0) {
		fprintf(stderr, "# %s: cannot listen: %s\n", name, strerror(errno));
		goto fail;
	}
	if (pthread_create(&s->thread, NULL, accept_main, s) != 0) {
		fprintf(stderr, "# %s: cannot start its thread\n", name);
		goto fail;
	}
	return s;
fail:
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->stop_pipe[0] >= 0) {
		close(s->stop_pipe[0]);
		close(s->stop_pipe[1]);
	}
	free(s);
	return NULL;
}

int th_httpd_port(const th_httpd_t *s)
{
	return s->port;
}

int th_httpd_stopping(const th_httpd_t *s)
{
	return atomic_load(&s->stopping);
}

int th_httpd_stop_fd(const th_httpd_t *s)
{
	return s->stop_pipe[0];
}

int th_httpd_stop(th_httpd_t *s)
{
	if (!s)
		return 0;
	atomic_store(&s->stopping, 1);
	ssize_t w = write(s->stop_pipe[1], "x", 1);
	(void)w;
	pthread_join(s->thread, NULL);
	close(s->lfd);
	for (int i = 0; i < 500 && atomic_load(&s->active) > 0; i++) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (atomic_load(&s->active) > 0)
		return -1;
	close(s->stop_pipe[0]);
	close(s->stop_pipe[1]);
	free(s);
	return 0;
}
