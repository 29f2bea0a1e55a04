/*
 * tests/builtin/fakechat.c - the scripted fake Chat Completions server (see
 * fakechat.h), on the loopback server core of tests/support/httpd.h.  One
 * connection at a time, Connection: close, bodies close-delimited: enough
 * for one client that sends one request per connection.
 */
#include "tests/builtin/fakechat.h"
#include "tests/support/harness.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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

static void serve(th_httpd_t *srv, void *arg, int fd, th_http_req_t *req)
{
	fakechat_t *f = arg;
	char *auth = th_http_req_header(req, "Authorization");
	char *body = req->body;
	req->body = NULL;
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
	if (th_httpd_writef(fd, "HTTP/1.1 %d X\r\nContent-Type: %s\r\nConnection: close\r\n%s\r\n",
	                    r->status ? r->status : 200, r->content_type ? r->content_type : "text/event-stream",
	                    r->headers ? r->headers : "") < 0)
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
		struct pollfd fds[2] = { { fd, POLLIN, 0 }, { th_httpd_stop_fd(srv), POLLIN, 0 } };
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

int fakechat_start(fakechat_t *f, const fc_resp_t *script, int n)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	if (n < 1 || n > FC_MAX_RESP)
		return -1;
	memcpy(f->script, script, sizeof(*script) * (size_t)n);
	f->nscript = n;
	th_httpd_opts_t o = { serve, f, 0, 10000 };
	f->srv = th_httpd_start("fakechat", &o);
	if (!f->srv)
		return -1;
	f->port = th_httpd_port(f->srv);
	snprintf(f->base_url, sizeof(f->base_url), "http://127.0.0.1:%d/v1", f->port);
	return 0;
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
	th_httpd_stop(f->srv);
	for (int i = 0; i < f->nreq; i++) {
		free(f->bodies[i]);
		free(f->auth[i]);
	}
	pthread_mutex_destroy(&f->mu);
}
