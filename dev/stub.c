/*
 * dev/stub.c - the workspace stub's life cycle: the evhttp server on its
 * own thread, started and stopped; the state, routes and answers live in
 * the stub_*.c files beside it (see stub_internal.h).
 */
#include "dev/stub_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------ */

/*
 * An event rather than a bare event_base_loopbreak() from the caller's
 * thread: a loopbreak that arrives before the loop started is forgotten
 * (the loop clears the flag on entry), an active event is not.
 */
static void stub_stop_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	dev_stub_t *s = arg;
	event_base_loopbreak(s->base);
}

static void *stub_thread_main(void *arg)
{
	dev_stub_t *s = arg;
	event_base_dispatch(s->base);
	return NULL;
}

static void stub_free(dev_stub_t *s)
{
	while (s->pending) {
		stub_reply_t *rp = s->pending;
		stub_pending_unlink(rp);
		if (rp->req) {
			struct evhttp_connection *evcon = evhttp_request_get_connection(rp->req);
			if (evcon)
				evhttp_connection_set_closecb(evcon, NULL, NULL);
		}
		stub_reply_free(rp);
	}
	if (s->stop_ev)
		event_free(s->stop_ev);
	if (s->http)
		evhttp_free(s->http);
	if (s->base)
		event_base_free(s->base);
	while (s->runs) {
		stub_run_t *r = s->runs;
		s->runs = r->next;
		stub_run_free(r);
	}
	while (s->blobs) {
		stub_blob_t *b = s->blobs;
		s->blobs = b->next;
		stub_fault_clear(&b->fault);
		free(b->data);
		free(b);
	}
	for (size_t i = 0; s->env_values && s->env_values[i]; i++) {
		explicit_bzero(s->env_values[i], strlen(s->env_values[i])); /* provider keys */
		free(s->env_values[i]);
	}
	free(s->env_values);
	free(s->agents_dir);
	free(s->results_dir);
	free(s->blobs_dir);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* Splits "host:port" / "host" / ":port"; only loopback hosts. */
static int stub_parse_listen(const char *listen, char *host, size_t hsize, int *port,
                             char *errstr, size_t errstr_size)
{
	snprintf(host, hsize, "127.0.0.1");
	*port = 0;
	if (!listen || !*listen)
		return 0;
	const char *colon = strrchr(listen, ':');
	size_t hlen = colon ? (size_t)(colon - listen) : strlen(listen);
	if (colon) {
		char *end;
		long p = strtol(colon + 1, &end, 10);
		if (*end || p < 0 || p > 65535 || end == colon + 1) {
			snprintf(errstr, errstr_size, "listen address %s: bad port", listen);
			return -1;
		}
		*port = (int)p;
	}
	if (hlen > 0) {
		if (hlen >= hsize) {
			snprintf(errstr, errstr_size, "listen address %s: host too long", listen);
			return -1;
		}
		memcpy(host, listen, hlen);
		host[hlen] = 0;
		if (strcmp(host, "localhost") == 0)
			snprintf(host, hsize, "127.0.0.1");
	}
	struct in_addr a;
	if (inet_pton(AF_INET, host, &a) != 1 || (ntohl(a.s_addr) >> 24) != 127) {
		snprintf(errstr, errstr_size,
		         "listen address %s: the workspace stub only listens on loopback (127.0.0.0/8)", listen);
		return -1;
	}
	return 0;
}

dev_stub_t *dev_stub_start(const dev_stub_opts_t *opts, char *errstr, size_t errstr_size)
{
	dev_stub_opts_t none;
	memset(&none, 0, sizeof(none));
	if (!opts)
		opts = &none;
	char host[64];
	int port;
	if (stub_parse_listen(opts->listen, host, sizeof(host), &port, errstr, errstr_size) < 0)
		return NULL;
	if (evthread_use_pthreads() < 0) {
		snprintf(errstr, errstr_size, "libevent: no thread support");
		return NULL;
	}
	dev_stub_t *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->max_body = opts->max_body ? opts->max_body : DEV_STUB_MAX_BODY_DEFAULT;
	s->max_store = opts->max_store ? opts->max_store : DEV_STUB_MAX_STORE_DEFAULT;
	s->enable_mint = opts->enable_mint;
	if (opts->cors_origin)
		snprintf(s->cors_origin, sizeof(s->cors_origin), "%s", opts->cors_origin);
	size_t nvals = 0;
	while (opts->env_values && opts->env_values[nvals])
		nvals++;
	if (nvals)
		s->env_values = calloc(nvals + 1, sizeof(*s->env_values));
	if (s->env_values)
		for (size_t i = 0; i < nvals; i++)
			if (!(s->env_values[i] = strdup(opts->env_values[i]))) {
				snprintf(errstr, errstr_size, "out of memory");
				stub_free(s);
				return NULL;
			}
	if ((nvals && !s->env_values) || (opts->agents_dir && !(s->agents_dir = strdup(opts->agents_dir))) ||
	    (opts->blobs_dir && !(s->blobs_dir = strdup(opts->blobs_dir))) ||
	    (opts->results_dir && !(s->results_dir = strdup(opts->results_dir)))) {
		snprintf(errstr, errstr_size, "out of memory");
		stub_free(s);
		return NULL;
	}
	if (s->results_dir && mkdir(s->results_dir, 0700) < 0 && errno != EEXIST) {
		snprintf(errstr, errstr_size, "results dir %s: %s", s->results_dir, strerror(errno));
		stub_free(s);
		return NULL;
	}
	s->base = event_base_new();
	s->http = s->base ? evhttp_new(s->base) : NULL;
	s->stop_ev = s->base ? event_new(s->base, -1, 0, stub_stop_cb, s) : NULL;
	if (!s->http || !s->stop_ev) {
		snprintf(errstr, errstr_size, "libevent: cannot create the HTTP server");
		stub_free(s);
		return NULL;
	}
	/* Read an oversized body before answering 413, so an uploader still
	 * sending reads the 413 rather than a reset (dispatcher/http.c). */
	evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE);
	evhttp_set_max_body_size(s->http, (ev_ssize_t)s->max_body);
	evhttp_set_max_headers_size(s->http, 64 * 1024);
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
	evhttp_set_gencb(s->http, stub_request_cb, s);
	struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port);
	if (!bs) {
		snprintf(errstr, errstr_size, "cannot listen on %s:%d: %s", host, port, strerror(errno));
		stub_free(s);
		return NULL;
	}
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&a, &alen) < 0) {
		snprintf(errstr, errstr_size, "getsockname: %s", strerror(errno));
		stub_free(s);
		return NULL;
	}
	s->port = ntohs(a.sin_port);
	snprintf(s->url, sizeof(s->url), "http://%s:%d", host, s->port);
	if (pthread_create(&s->thread, NULL, stub_thread_main, s) != 0) {
		snprintf(errstr, errstr_size, "cannot start the server thread");
		stub_free(s);
		return NULL;
	}
	s->thread_started = 1;
	return s;
}

void dev_stub_stop(dev_stub_t *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		event_active(s->stop_ev, EV_TIMEOUT, 0);
		pthread_join(s->thread, NULL);
	}
	stub_free(s);
}

const char *dev_stub_url(const dev_stub_t *s)
{
	return s->url;
}

int dev_stub_port(const dev_stub_t *s)
{
	return s->port;
}
