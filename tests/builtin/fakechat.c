/*
 * tests/builtin/fakechat.c - the scripted fake Chat Completions server (see
 * fakechat.h).  One connection at a time, Connection: close, bodies
 * close-delimited: enough for one client that sends one request per
 * connection.
 */
#include "tests/builtin/fakechat.h"
#include "tests/support/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long long mono_ms(void)
{
	return mono_us() / 1000;
}

/* Reads one request; returns the body (malloc'd) and the Authorization
 * value, or NULL when the client went away. */
static char *read_request(int fd, char **auth)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap + 1);
	char *hend = NULL;
	*auth = NULL;
	while (buf) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 10000) <= 0)
			break;
		if (len == cap) {
			cap *= 2;
			char *nb = realloc(buf, cap + 1);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t r = recv(fd, buf + len, cap - len, 0);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
		if (!hend)
			hend = strstr(buf, "\r\n\r\n");
		if (hend) {
			size_t hlen = (size_t)(hend - buf) + 4;
			long clen = 0;
			char *cl = strcasestr(buf, "\r\nContent-Length:");
			if (cl && cl < hend)
				clen = strtol(cl + 17, NULL, 10);
			if (len >= hlen + (size_t)clen) {
				char *a = strcasestr(buf, "\r\nAuthorization:");
				if (a && a < hend) {
					a += 16;
					while (*a == ' ')
						a++;
					char *e = strstr(a, "\r\n");
					*auth = strndup(a, (size_t)(e - a));
				}
				char *body = strndup(buf + hlen, (size_t)clen);
				free(buf);
				return body;
			}
		}
	}
	free(buf);
	return NULL;
}

static void serve(fakechat_t *f, int fd)
{
	char *auth;
	char *body = read_request(fd, &auth);
	if (!body) {
		free(auth);
		return;
	}
	pthread_mutex_lock(&f->mu);
	int n = f->nreq;
	if (n < FC_MAX_REQ) {
		f->bodies[n] = body;
		f->auth[n] = auth;
		f->at_us[n] = mono_us();
		f->nreq++;
	} else {
		free(body);
		free(auth);
	}
	pthread_mutex_unlock(&f->mu);
	const fc_resp_t *r = &f->script[n < f->nscript ? n : f->nscript - 1];
	char head[1024];
	int hl = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Type: %s\r\nConnection: close\r\n%s\r\n",
	                  r->status ? r->status : 200, r->content_type ? r->content_type : "text/event-stream",
	                  r->headers ? r->headers : "");
	if (th_send_all(fd, head, (size_t)hl) < 0)
		return;
	const char *p = r->body ? r->body : "";
	while (*p) {
		const char *sep = strchr(p, '\x1e');
		size_t n2 = sep ? (size_t)(sep - p) : strlen(p);
		if (n2 && th_send_all(fd, p, n2) < 0)
			return;
		if (!sep)
			break;
		p = sep + 1;
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (r->stall) {
		/* Hold the stream open until the client gives up or we stop. */
		struct pollfd fds[2] = { { fd, POLLIN, 0 }, { f->stop_pipe[0], POLLIN, 0 } };
		long long until = mono_ms() + 30000;
		while (mono_ms() < until) {
			if (poll(fds, 2, 200) > 0) {
				char tmp[256];
				if (fds[1].revents || recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT) <= 0)
					break;
			}
		}
	}
}

static void *run(void *arg)
{
	fakechat_t *f = arg;
	for (;;) {
		struct pollfd fds[2] = { { f->lfd, POLLIN, 0 }, { f->stop_pipe[0], POLLIN, 0 } };
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents)
			break;
		if (!fds[0].revents)
			continue;
		int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(f, fd);
		close(fd);
	}
	return NULL;
}

int fakechat_start(fakechat_t *f, const fc_resp_t *script, int n)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	if (n < 1 || n > FC_MAX_RESP)
		return -1;
	memcpy(f->script, script, sizeof(*script) * (size_t)n);
	f->nscript = n;
	f->lfd = th_listen_loopback(16, &f->port);
	if (f->lfd < 0)
		return -1;
	snprintf(f->base_url, sizeof(f->base_url), "http://127.0.0.1:%d/v1", f->port);
	if (pipe2(f->stop_pipe, O_CLOEXEC) < 0)
		return -1;
	return pthread_create(&f->thread, NULL, run, f) == 0 ? 0 : -1;
}

int fakechat_requests(fakechat_t *f)
{
	pthread_mutex_lock(&f->mu);
	int n = f->nreq;
	pthread_mutex_unlock(&f->mu);
	return n;
}

void fakechat_stop(fakechat_t *f)
{
	ssize_t w = write(f->stop_pipe[1], "x", 1);
	(void)w;
	pthread_join(f->thread, NULL);
	close(f->lfd);
	close(f->stop_pipe[0]);
	close(f->stop_pipe[1]);
	for (int i = 0; i < f->nreq; i++) {
		free(f->bodies[i]);
		free(f->auth[i]);
	}
	pthread_mutex_destroy(&f->mu);
}
