/*
 * dev/stub_reply.c - answers: decided under the lock, sent (maybe after a
 * programmed delay, close or redirect) on the event thread without it.
 */
#include "dev/stub_internal.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Answers
 * ------------------------------------------------------------------------ */

stub_reply_t *stub_reply_new(dev_stub_t *s, struct evhttp_request *req)
{
	stub_reply_t *rp = calloc(1, sizeof(*rp));
	if (rp) {
		rp->stub = s;
		rp->req = req;
		rp->ctype = "application/json";
	}
	return rp;
}

void stub_reply_set(stub_reply_t *rp, int status, const char *ctype, const char *body)
{
	rp->status = status;
	rp->ctype = ctype;
	free(rp->body);
	rp->body = body ? strdup(body) : NULL;
	rp->len = rp->body ? strlen(rp->body) : 0;
}

void stub_reply_free(stub_reply_t *rp)
{
	if (!rp)
		return;
	if (rp->timer)
		event_free(rp->timer);
	free(rp->body);
	free(rp->location);
	free(rp);
}

static const char *stub_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 302: return "Found";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Payload Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	default: return "Status";
	}
}

static void stub_conn_closed(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	stub_reply_t *rp = arg;
	rp->req = NULL;
}

void stub_pending_unlink(stub_reply_t *rp)
{
	dev_stub_t *s = rp->stub;
	if (rp->prev)
		rp->prev->next = rp->next;
	else if (s->pending == rp)
		s->pending = rp->next;
	if (rp->next)
		rp->next->prev = rp->prev;
	rp->next = rp->prev = NULL;
}

/* Sends the answer (or drops the connection) and frees rp.  Event thread. */
static void stub_reply_send(stub_reply_t *rp)
{
	struct evhttp_request *req = rp->req;
	if (req) {
		struct evhttp_connection *evcon = evhttp_request_get_connection(req);
		if (evcon)
			evhttp_connection_set_closecb(evcon, NULL, NULL);
		if (rp->close) {
			if (evcon)
				evhttp_connection_free(evcon);
		} else {
			struct evkeyvalq *h = evhttp_request_get_output_headers(req);
			if (rp->ctype)
				evhttp_add_header(h, "Content-Type", rp->ctype);
			if (rp->location)
				evhttp_add_header(h, "Location", rp->location);
			struct evbuffer *b = evbuffer_new();
			if (b && rp->body)
				evbuffer_add(b, rp->body, rp->len);
			evhttp_send_reply(req, rp->status, stub_reason(rp->status), b);
			if (b)
				evbuffer_free(b);
		}
	}
	stub_reply_free(rp);
}

static void stub_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	stub_reply_t *rp = arg;
	stub_pending_unlink(rp);
	stub_reply_send(rp);
}

/*
 * Sends now, or after delay_ms.  A close without delay is deferred to the
 * next loop turn: freeing the connection from inside its own request
 * callback is not safe.
 */
void stub_reply_dispatch(stub_reply_t *rp, int delay_ms)
{
	dev_stub_t *s = rp->stub;
	if (delay_ms <= 0 && !rp->close) {
		stub_reply_send(rp);
		return;
	}
	rp->timer = evtimer_new(s->base, stub_timer_cb, rp);
	if (!rp->timer) {
		stub_reply_send(rp);
		return;
	}
	struct evhttp_connection *evcon = evhttp_request_get_connection(rp->req);
	if (evcon)
		evhttp_connection_set_closecb(evcon, stub_conn_closed, rp);
	rp->next = s->pending;
	if (s->pending)
		s->pending->prev = rp;
	s->pending = rp;
	struct timeval tv = { delay_ms / 1000, (delay_ms % 1000) * 1000 };
	evtimer_add(rp->timer, &tv);
}

/* Fills rp from a fault; returns the delay.  Called under the lock. */
int stub_apply_fault(dev_stub_t *s, const stub_fault_t *f, stub_reply_t *rp)
{
	if (f->close) {
		rp->close = 1;
		rp->status = 0;
	} else if (f->redirect) {
		stub_reply_set(rp, 302, "text/plain", "redirect\n");
		if (f->redirect[0] == '/') {
			if (asprintf(&rp->location, "%s%s", s->url, f->redirect) < 0)
				rp->location = NULL;
		} else {
			rp->location = strdup(f->redirect);
		}
	} else if (f->body) {
		stub_reply_set(rp, f->status ? f->status : 200, "text/plain", f->body);
	} else if (f->status) {
		stub_reply_set(rp, f->status, "application/json", "{\"error\":\"injected\"}");
	}
	return f->delay_ms;
}
