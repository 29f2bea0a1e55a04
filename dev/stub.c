/*
 * dev/stub.c - the local workspace stub: an evhttp server on its own
 * thread that mints OTPs per run, serves /env, /config, /results and blobs,
 * applies programmed faults and records what each client did.
 */
#include "dev/stub.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define STUB_URL_PLACEHOLDER "${RUNNEL_STUB_URL}"
#define STUB_NAME_MAX        128

typedef struct stub_fault {
	int   delay_ms;
	int   close;
	char *redirect;
	int   status;
	char *body;
} stub_fault_t;

typedef struct stub_file {
	char  *name;
	char  *data;   /* NULL when over max_store (counted, not kept) */
	size_t len;
} stub_file_t;

typedef struct stub_run {
	struct stub_run    *next;
	char                session[72];
	char                otp[DEV_STUB_EP_COUNT][40];
	int                 spent[DEV_STUB_EP_COUNT];
	char               *env_body;
	char               *config_body;
	stub_fault_t        faults[DEV_STUB_EP_COUNT];
	int                 results_status;
	dev_stub_ep_stats_t stats[DEV_STUB_EP_COUNT];
	stub_file_t        *files;
	size_t              nfiles, files_cap;
	size_t              stored;
} stub_run_t;

typedef struct stub_blob {
	struct stub_blob     *next;
	char                  name[STUB_NAME_MAX];
	char                 *data;
	size_t                len;
	stub_fault_t          fault;
	dev_stub_blob_stats_t stats;
} stub_blob_t;

/* An answer decided under the lock and sent (maybe later) without it. */
typedef struct stub_reply {
	struct stub_reply     *next;      /* pending list (delayed answers) */
	struct stub_reply     *prev;
	dev_stub_t            *stub;
	struct evhttp_request *req;       /* NULL once the connection died */
	struct event          *timer;
	int                    close;
	int                    status;
	char                  *body;
	size_t                 len;
	const char            *ctype;
	char                  *location;
} stub_reply_t;

struct dev_stub {
	pthread_mutex_t     mu;
	struct event_base  *base;
	struct evhttp      *http;
	pthread_t           thread;
	int                 thread_started;
	char                url[96];
	int                 port;
	char               *agents_dir;
	char               *results_dir;
	char               *blobs_dir;
	size_t              max_body;
	size_t              max_store;
	int                 enable_mint;
	char                cors_origin[128];  /* "" = no CORS */
	stub_run_t         *runs;
	stub_blob_t        *blobs;
	int                 unknown;
	stub_reply_t       *pending;      /* event thread only */
	struct event       *stop_ev;      /* activated by dev_stub_stop */
};

static const char *const ep_names[DEV_STUB_EP_COUNT] = { "env", "config", "results" };

const char *dev_stub_ep_name(dev_stub_ep_t ep)
{
	return (unsigned)ep < DEV_STUB_EP_COUNT ? ep_names[ep] : "?";
}

/* ------------------------------------------------------------------------
 * Small utilities
 * ------------------------------------------------------------------------ */

static int stub_random_hex(char *out, size_t nbytes)
{
	unsigned char buf[32];
	if (nbytes > sizeof buf)
		return -1;
	size_t got = 0;
	while (got < nbytes) {
		ssize_t r = getrandom(buf + got, nbytes - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		got += (size_t)r;
	}
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = hex[buf[i] >> 4];
		out[2 * i + 1] = hex[buf[i] & 15];
	}
	out[2 * nbytes] = 0;
	return 0;
}

static int stub_name_ok(const char *s, int allow_dot)
{
	if (!s || !*s || strlen(s) >= STUB_NAME_MAX)
		return 0;
	for (const char *p = s; *p; p++) {
		char c = *p;
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		         (c >= '0' && c <= '9') || c == '_' || c == '-' || (allow_dot && c == '.');
		if (!ok)
			return 0;
	}
	return !(allow_dot && (strcmp(s, ".") == 0 || strcmp(s, "..") == 0));
}

/* Constant-time comparison of a presented token with the expected OTP. */
static int stub_token_eq(const char *given, size_t glen, const char *want)
{
	size_t wlen = strlen(want);
	unsigned char d = (unsigned char)(glen != wlen);
	for (size_t i = 0; i < wlen; i++)
		d |= (unsigned char)(want[i] ^ (i < glen ? given[i] : 0));
	return d == 0;
}

/* Replaces every ${RUNNEL_STUB_URL} in s by url; returns a malloc'd copy. */
static char *stub_subst(const char *s, const char *url)
{
	size_t plen = strlen(STUB_URL_PLACEHOLDER), ulen = strlen(url), n = 0;
	for (const char *p = s; (p = strstr(p, STUB_URL_PLACEHOLDER)) != NULL; p += plen)
		n++;
	size_t len = strlen(s) + n * ulen + 1;
	char *out = malloc(len);
	if (!out)
		return NULL;
	char *o = out;
	const char *p = s, *q;
	while ((q = strstr(p, STUB_URL_PLACEHOLDER)) != NULL) {
		memcpy(o, p, (size_t)(q - p));
		o += q - p;
		memcpy(o, url, ulen);
		o += ulen;
		p = q + plen;
	}
	memcpy(o, p, strlen(p) + 1);
	return out;
}

static void stub_fault_clear(stub_fault_t *f)
{
	free(f->redirect);
	free(f->body);
	memset(f, 0, sizeof *f);
}

static int stub_fault_set(stub_fault_t *f, const dev_stub_fault_t *src)
{
	stub_fault_clear(f);
	if (!src)
		return 0;
	f->delay_ms = src->delay_ms;
	f->close = src->close;
	f->status = src->status;
	if (src->redirect && !(f->redirect = strdup(src->redirect)))
		return -1;
	if (src->body && !(f->body = strdup(src->body)))
		return -1;
	return 0;
}

static int stub_fault_active(const stub_fault_t *f)
{
	return f->delay_ms > 0 || f->close || f->redirect || f->status || f->body;
}

static void stub_run_free(stub_run_t *r)
{
	if (!r)
		return;
	free(r->env_body);
	free(r->config_body);
	for (int i = 0; i < DEV_STUB_EP_COUNT; i++)
		stub_fault_clear(&r->faults[i]);
	for (size_t i = 0; i < r->nfiles; i++) {
		free(r->files[i].name);
		free(r->files[i].data);
	}
	free(r->files);
	free(r);
}

static stub_run_t *stub_find_run(dev_stub_t *s, const char *session)
{
	for (stub_run_t *r = s->runs; r; r = r->next)
		if (strcmp(r->session, session) == 0)
			return r;
	return NULL;
}

static stub_blob_t *stub_find_blob(dev_stub_t *s, const char *name)
{
	for (stub_blob_t *b = s->blobs; b; b = b->next)
		if (strcmp(b->name, name) == 0)
			return b;
	return NULL;
}

/* ------------------------------------------------------------------------
 * Answers
 * ------------------------------------------------------------------------ */

static stub_reply_t *stub_reply_new(dev_stub_t *s, struct evhttp_request *req)
{
	stub_reply_t *rp = calloc(1, sizeof *rp);
	if (rp) {
		rp->stub = s;
		rp->req = req;
		rp->ctype = "application/json";
	}
	return rp;
}

static void stub_reply_set(stub_reply_t *rp, int status, const char *ctype, const char *body)
{
	rp->status = status;
	rp->ctype = ctype;
	free(rp->body);
	rp->body = body ? strdup(body) : NULL;
	rp->len = rp->body ? strlen(rp->body) : 0;
}

static void stub_reply_free(stub_reply_t *rp)
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
	default:  return "Status";
	}
}

static void stub_conn_closed(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	stub_reply_t *rp = arg;
	rp->req = NULL;
}

static void stub_pending_unlink(stub_reply_t *rp)
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
	(void)fd; (void)what;
	stub_reply_t *rp = arg;
	stub_pending_unlink(rp);
	stub_reply_send(rp);
}

/*
 * Sends now, or after delay_ms.  A close without delay is deferred to the
 * next loop turn: freeing the connection from inside its own request
 * callback is not safe.
 */
static void stub_reply_dispatch(stub_reply_t *rp, int delay_ms)
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
static int stub_apply_fault(dev_stub_t *s, const stub_fault_t *f, stub_reply_t *rp)
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

/* ------------------------------------------------------------------------
 * multipart/form-data (RFC 7578), enough for curl's and browsers' forms
 * ------------------------------------------------------------------------ */

typedef struct stub_part {
	const char *data;
	size_t      len;
	char        name[64];
	char       *filename;   /* malloc'd, NULL when the part has none */
} stub_part_t;

/* Copies the value of param (name= or filename=) from a Content-Disposition
 * line, unquoting "..." with backslash escapes.  malloc'd or NULL. */
static char *stub_cd_param(const char *line, size_t llen, const char *param)
{
	size_t plen = strlen(param);
	for (size_t i = 0; i + plen < llen; i++) {
		if (strncasecmp(line + i, param, plen) != 0 || line[i + plen] != '=')
			continue;
		/* A whole word: preceded by ';', ' ' or '\t'. */
		if (i > 0 && line[i - 1] != ';' && line[i - 1] != ' ' && line[i - 1] != '\t')
			continue;
		const char *p = line + i + plen + 1, *end = line + llen;
		char *out = malloc(llen + 1);
		if (!out)
			return NULL;
		size_t o = 0;
		if (p < end && *p == '"') {
			p++;
			while (p < end && *p != '"') {
				if (*p == '\\' && p + 1 < end)
					p++;
				out[o++] = *p++;
			}
		} else {
			while (p < end && *p != ';' && *p != ' ')
				out[o++] = *p++;
		}
		out[o] = 0;
		return out;
	}
	return NULL;
}

/*
 * Calls cb for each part.  Returns the number of parts, or -1 when the
 * body is not well-formed multipart with that boundary.
 */
static int stub_multipart_each(const char *body, size_t len, const char *boundary,
                               int (*cb)(const stub_part_t *, void *), void *arg)
{
	char delim[200];
	int dl = snprintf(delim, sizeof delim, "--%s", boundary);
	if (dl < 0 || (size_t)dl >= sizeof delim)
		return -1;
	const char *end = body + len;
	const char *p = memmem(body, len, delim, (size_t)dl);
	if (!p)
		return -1;
	int count = 0;
	for (;;) {
		p += dl;
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			return count;  /* closing delimiter */
		/* Transport padding, then CRLF. */
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
			return -1;
		p += 2;
		const char *hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
		if (!hend)
			return -1;
		stub_part_t part;
		memset(&part, 0, sizeof part);
		for (const char *l = p; l < hend;) {
			const char *le = memmem(l, (size_t)(hend - l), "\r\n", 2);
			if (!le)
				le = hend;
			size_t ll = (size_t)(le - l);
			if (ll > 20 && strncasecmp(l, "Content-Disposition:", 20) == 0) {
				char *nm = stub_cd_param(l, ll, "name");
				if (nm) {
					snprintf(part.name, sizeof part.name, "%s", nm);
					free(nm);
				}
				free(part.filename);
				part.filename = stub_cd_param(l, ll, "filename");
			}
			l = le + 2;
		}
		const char *data = hend + 4;
		char close_delim[210];
		int cl = snprintf(close_delim, sizeof close_delim, "\r\n%s", delim);
		const char *next = memmem(data, (size_t)(end - data), close_delim, (size_t)cl);
		if (!next) {
			free(part.filename);
			return -1;
		}
		part.data = data;
		part.len = (size_t)(next - data);
		int rc = cb(&part, arg);
		free(part.filename);
		if (rc < 0)
			return -1;
		count++;
		p = next + 2;
	}
}

/* mkdir -p of path's parent dirs, under a root that exists. */
static int stub_mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		int rc = mkdir(path, 0700);
		*p = '/';
		if (rc < 0 && errno != EEXIST)
			return -1;
	}
	return 0;
}

/* A relative path without "..", "." or empty segments. */
static int stub_relpath_ok(const char *name)
{
	if (!*name || name[0] == '/' || strlen(name) > 1024)
		return 0;
	const char *p = name;
	while (*p) {
		const char *seg = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - seg);
		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return 0;
		if (*p)
			p++;
	}
	return 1;
}

typedef struct stub_upload {
	dev_stub_t *stub;
	stub_run_t *run;
	int         files;
} stub_upload_t;

/* Called with the lock held. */
static int stub_upload_part(const stub_part_t *part, void *arg)
{
	stub_upload_t *u = arg;
	if (strcmp(part->name, "files") != 0 || !part->filename)
		return 0;
	stub_run_t *r = u->run;
	if (r->nfiles == r->files_cap) {
		size_t cap = r->files_cap ? r->files_cap * 2 : 8;
		stub_file_t *nf = realloc(r->files, cap * sizeof *nf);
		if (!nf)
			return -1;
		r->files = nf;
		r->files_cap = cap;
	}
	stub_file_t *f = &r->files[r->nfiles];
	memset(f, 0, sizeof *f);
	if (!(f->name = strdup(part->filename)))
		return -1;
	f->len = part->len;
	if (r->stored + part->len <= u->stub->max_store) {
		f->data = malloc(part->len + 1);
		if (!f->data) {
			free(f->name);
			return -1;
		}
		memcpy(f->data, part->data, part->len);
		f->data[part->len] = 0;
		r->stored += part->len;
	}
	r->nfiles++;
	u->files++;
	if (u->stub->results_dir && stub_relpath_ok(part->filename)) {
		char *path = NULL;
		if (asprintf(&path, "%s/%s/%s", u->stub->results_dir, r->session, part->filename) >= 0) {
			if (stub_mkdirs(path) == 0) {
				int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
				if (fd >= 0) {
					size_t off = 0;
					while (off < part->len) {
						ssize_t w = write(fd, part->data + off, part->len - off);
						if (w <= 0 && errno != EINTR)
							break;
						if (w > 0)
							off += (size_t)w;
					}
					close(fd);
				}
			}
			free(path);
		}
	}
	return 0;
}

/* The boundary parameter of a multipart/form-data Content-Type, or -1. */
static int stub_boundary(const char *ctype, char *out, size_t size)
{
	if (!ctype || strncasecmp(ctype, "multipart/form-data", 19) != 0)
		return -1;
	const char *b = strcasestr(ctype, "boundary=");
	if (!b)
		return -1;
	b += 9;
	size_t n = 0;
	if (*b == '"') {
		b++;
		while (b[n] && b[n] != '"')
			n++;
	} else {
		while (b[n] && b[n] != ';' && b[n] != ' ')
			n++;
	}
	if (n == 0 || n > 70 || n >= size)
		return -1;
	memcpy(out, b, n);
	out[n] = 0;
	return 0;
}

/* ------------------------------------------------------------------------
 * Routes
 * ------------------------------------------------------------------------ */

/* Handles BASE/ws/<session>/<ep>.  Called under the lock; fills rp. */
static int stub_handle_ws(dev_stub_t *s, struct evhttp_request *req, const char *session,
                          dev_stub_ep_t ep, stub_reply_t *rp)
{
	stub_run_t *r = stub_find_run(s, session);
	if (!r) {
		s->unknown++;
		stub_reply_set(rp, 404, "application/json", "{\"error\":\"unknown session\"}");
		return 0;
	}
	dev_stub_ep_stats_t *st = &r->stats[ep];
	st->calls++;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	if ((ep == DEV_STUB_EP_RESULTS) != (cmd == EVHTTP_REQ_POST) ||
	    (ep != DEV_STUB_EP_RESULTS && cmd != EVHTTP_REQ_GET)) {
		stub_reply_set(rp, 405, "application/json", "{\"error\":\"method not allowed\"}");
		st->last_status = 405;
		return 0;
	}
	const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	const char *tok = NULL;
	if (auth && strncasecmp(auth, "Bearer ", 7) == 0)
		tok = auth + 7;
	if (!tok || !stub_token_eq(tok, strlen(tok), r->otp[ep])) {
		st->bad_token++;
		st->last_status = 401;
		stub_reply_set(rp, 401, "application/json", "{\"error\":\"bad token\"}");
		return 0;
	}
	if (r->spent[ep]) {
		st->reused++;
		st->last_status = 401;
		stub_reply_set(rp, 401, "application/json", "{\"error\":\"token already used\"}");
		return 0;
	}
	r->spent[ep] = 1;

	const stub_fault_t *f = &r->faults[ep];
	int delay = 0;
	if (stub_fault_active(f)) {
		delay = stub_apply_fault(s, f, rp);
		if (rp->close || rp->status) {
			st->faulted++;
			st->last_status = rp->status;
			return delay;
		}
		/* Only a delay: answer normally, later. */
	}
	switch (ep) {
	case DEV_STUB_EP_ENV:
		stub_reply_set(rp, 200, "application/json", r->env_body);
		break;
	case DEV_STUB_EP_CONFIG:
		stub_reply_set(rp, 200, "application/json", r->config_body);
		break;
	default: {
		struct evbuffer *in = evhttp_request_get_input_buffer(req);
		size_t len = evbuffer_get_length(in);
		const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
		char boundary[80];
		const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
		stub_upload_t u = { s, r, 0 };
		if (stub_boundary(ct, boundary, sizeof boundary) < 0 ||
		    stub_multipart_each(body, len, boundary, stub_upload_part, &u) < 0) {
			st->bad_request++;
			st->last_status = 400;
			stub_reply_set(rp, 400, "application/json", "{\"error\":\"body is not multipart/form-data\"}");
			return delay;
		}
		char ok[64];
		snprintf(ok, sizeof ok, "{\"ok\":true,\"files\":%d}", u.files);
		stub_reply_set(rp, r->results_status ? r->results_status : 200, "application/json", ok);
		break;
	}
	}
	if (f->delay_ms > 0)
		st->faulted++;
	st->ok++;
	st->last_status = rp->status;
	return delay;
}

#define STUB_BLOB_FILE_MAX ((size_t)256 << 20)

/* Reads blobs_dir/<name> into a new blob entry.  Called under the lock. */
static stub_blob_t *stub_blob_from_dir(dev_stub_t *s, const char *name)
{
	if (!s->blobs_dir || !stub_name_ok(name, 1))
		return NULL;
	char *path = NULL;
	if (asprintf(&path, "%s/%s", s->blobs_dir, name) < 0)
		return NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	free(path);
	if (fd < 0)
		return NULL;
	struct stat st;
	stub_blob_t *b = NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= STUB_BLOB_FILE_MAX &&
	    (b = calloc(1, sizeof *b)) != NULL && (b->data = malloc((size_t)st.st_size + 1)) != NULL) {
		size_t off = 0, len = (size_t)st.st_size;
		while (off < len) {
			ssize_t r = read(fd, b->data + off, len - off);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			off += (size_t)r;
		}
		b->len = off;
		snprintf(b->name, sizeof b->name, "%s", name);
		b->next = s->blobs;
		s->blobs = b;
	} else if (b) {
		free(b);
		b = NULL;
	}
	close(fd);
	return b;
}

static int stub_handle_blob(dev_stub_t *s, struct evhttp_request *req, const char *name,
                            stub_reply_t *rp)
{
	stub_blob_t *b = stub_find_blob(s, name);
	if (!b)
		b = stub_blob_from_dir(s, name);
	if (!b || evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		if (!b)
			s->unknown++;
		stub_reply_set(rp, b ? 405 : 404, "application/json", b ? "{\"error\":\"method not allowed\"}" : "{\"error\":\"no such blob\"}");
		return 0;
	}
	b->stats.calls++;
	if (evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization"))
		b->stats.with_authorization++;
	int delay = 0;
	if (stub_fault_active(&b->fault)) {
		delay = stub_apply_fault(s, &b->fault, rp);
		if (rp->close || rp->status)
			return delay;
	}
	rp->status = 200;
	rp->ctype = "application/octet-stream";
	free(rp->body);
	rp->body = malloc(b->len ? b->len : 1);
	if (!rp->body) {
		stub_reply_set(rp, 500, "application/json", "{\"error\":\"out of memory\"}");
		return 0;
	}
	memcpy(rp->body, b->data, b->len);
	rp->len = b->len;
	return delay;
}

static void stub_handle_mint(dev_stub_t *s, struct evhttp_request *req, stub_reply_t *rp)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
	struct evkeyvalq q;
	TAILQ_INIT(&q);
	const char *agent = NULL;
	if (query && evhttp_parse_query_str(query, &q) == 0)
		agent = evhttp_find_header(&q, "agent");
	dev_stub_otps_t o;
	if (!agent || dev_stub_add_run_from_agent(s, agent, &o) < 0) {
		stub_reply_set(rp, agent ? 404 : 400, "application/json",
		               agent ? "{\"error\":\"unknown agent\"}" : "{\"error\":\"agent is required\"}");
	} else {
		json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s}", "agent_url", o.agent_url,
		                      "otp_setup", o.otp_setup, "otp_run", o.otp_run,
		                      "otp_upload", o.otp_upload, "session", o.session);
		char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (text) {
			stub_reply_set(rp, 200, "application/json", text);
			free(text);
		} else {
			stub_reply_set(rp, 500, "application/json", "{\"error\":\"out of memory\"}");
		}
	}
	evhttp_clear_headers(&q);
}

/* The configured origin, also when the page was opened as localhost
 * instead of 127.0.0.1 (same port). */
static int stub_origin_ok(const dev_stub_t *s, const char *origin)
{
	static const char lo[] = "http://127.0.0.1:";
	if (strcmp(origin, s->cors_origin) == 0)
		return 1;
	return strncmp(s->cors_origin, lo, sizeof(lo) - 1) == 0 && strncmp(origin, "http://localhost:", 17) == 0 &&
	       strcmp(origin + 17, s->cors_origin + sizeof(lo) - 1) == 0;
}

static int stub_cmp_names(const void *a, const void *b)
{
	return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* GET /agents: the NAME of every agents_dir/NAME.json, sorted. */
static void stub_handle_agents(dev_stub_t *s, stub_reply_t *rp)
{
	json_t *names = json_array();
	DIR *dir = s->agents_dir ? opendir(s->agents_dir) : NULL;
	struct dirent *de;

	while (names && dir && (de = readdir(dir)) != NULL) {
		size_t n = strlen(de->d_name);
		char name[128];
		if (n <= 5 || n - 5 >= sizeof name || strcmp(de->d_name + n - 5, ".json") != 0)
			continue;
		memcpy(name, de->d_name, n - 5);
		name[n - 5] = '\0';
		if (stub_name_ok(name, 0))
			json_array_append_new(names, json_string(name));
	}
	if (dir)
		closedir(dir);
	if (names && json_array_size(names) > 1) {
		/* jansson keeps its items in a plain array of json_t pointers. */
		size_t n = json_array_size(names);
		json_t **v = calloc(n, sizeof *v);
		if (v) {
			for (size_t i = 0; i < n; i++)
				v[i] = json_incref(json_array_get(names, i));
			qsort(v, n, sizeof *v, stub_cmp_names);
			json_array_clear(names);
			for (size_t i = 0; i < n; i++)
				json_array_append_new(names, v[i]);
			free(v);
		}
	}
	json_t *o = names ? json_pack("{s:o}", "agents", names) : NULL;
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text) {
		stub_reply_set(rp, 200, "application/json", text);
		free(text);
	} else {
		stub_reply_set(rp, 500, "application/json", "{\"error\":\"out of memory\"}");
	}
}

static void stub_request_cb(struct evhttp_request *req, void *arg)
{
	dev_stub_t *s = arg;
	stub_reply_t *rp = stub_reply_new(s, req);
	if (!rp) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	if (!path)
		path = "/";
	int delay = 0;

	/* The dev viewer (another origin: the dispatcher) mints runs here. */
	if ((strcmp(path, "/mint") == 0 || strcmp(path, "/agents") == 0) && s->enable_mint &&
	    s->cors_origin[0]) {
		const char *origin = evhttp_find_header(evhttp_request_get_input_headers(req), "Origin");
		if (origin && stub_origin_ok(s, origin))
			evhttp_add_header(evhttp_request_get_output_headers(req), "Access-Control-Allow-Origin", origin);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Vary", "Origin");
	}
	if (strcmp(path, "/agents") == 0 && s->enable_mint) {
		if (evhttp_request_get_command(req) != EVHTTP_REQ_GET)
			stub_reply_set(rp, 405, "application/json", "{\"error\":\"method not allowed\"}");
		else
			stub_handle_agents(s, rp);
		stub_reply_dispatch(rp, 0);
		return;
	}
	if (strcmp(path, "/mint") == 0 && s->enable_mint) {
		if (evhttp_request_get_command(req) != EVHTTP_REQ_POST)
			stub_reply_set(rp, 405, "application/json", "{\"error\":\"method not allowed\"}");
		else
			stub_handle_mint(s, req, rp);  /* takes the lock itself */
		stub_reply_dispatch(rp, 0);
		return;
	}

	pthread_mutex_lock(&s->mu);
	if (strcmp(path, "/healthz") == 0) {
		stub_reply_set(rp, 200, "text/plain", "ok\n");
	} else if (strncmp(path, "/ws/", 4) == 0) {
		const char *sess = path + 4;
		const char *slash = strchr(sess, '/');
		char session[72];
		int ep = -1;
		if (slash && (size_t)(slash - sess) < sizeof session) {
			memcpy(session, sess, (size_t)(slash - sess));
			session[slash - sess] = 0;
			for (int i = 0; i < DEV_STUB_EP_COUNT; i++)
				if (strcmp(slash + 1, ep_names[i]) == 0)
					ep = i;
		}
		if (ep < 0) {
			s->unknown++;
			stub_reply_set(rp, 404, "application/json", "{\"error\":\"not found\"}");
		} else {
			delay = stub_handle_ws(s, req, session, (dev_stub_ep_t)ep, rp);
		}
	} else if (strncmp(path, "/blobs/", 7) == 0) {
		delay = stub_handle_blob(s, req, path + 7, rp);
	} else {
		s->unknown++;
		stub_reply_set(rp, 404, "application/json", "{\"error\":\"not found\"}");
	}
	pthread_mutex_unlock(&s->mu);
	stub_reply_dispatch(rp, delay);
}

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
	(void)fd; (void)what;
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
	memset(&none, 0, sizeof none);
	if (!opts)
		opts = &none;
	char host[64];
	int port;
	if (stub_parse_listen(opts->listen, host, sizeof host, &port, errstr, errstr_size) < 0)
		return NULL;
	if (evthread_use_pthreads() < 0) {
		snprintf(errstr, errstr_size, "libevent: no thread support");
		return NULL;
	}
	dev_stub_t *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->max_body = opts->max_body ? opts->max_body : DEV_STUB_MAX_BODY_DEFAULT;
	s->max_store = opts->max_store ? opts->max_store : DEV_STUB_MAX_STORE_DEFAULT;
	s->enable_mint = opts->enable_mint;
	if (opts->cors_origin)
		snprintf(s->cors_origin, sizeof s->cors_origin, "%s", opts->cors_origin);
	if ((opts->agents_dir && !(s->agents_dir = strdup(opts->agents_dir))) ||
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
	evhttp_set_max_body_size(s->http, (ev_ssize_t)s->max_body);
	evhttp_set_max_headers_size(s->http, 64 * 1024);
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
	                                    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
	evhttp_set_gencb(s->http, stub_request_cb, s);
	struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port);
	if (!bs) {
		snprintf(errstr, errstr_size, "cannot listen on %s:%d: %s", host, port, strerror(errno));
		stub_free(s);
		return NULL;
	}
	struct sockaddr_in a;
	socklen_t alen = sizeof a;
	if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&a, &alen) < 0) {
		snprintf(errstr, errstr_size, "getsockname: %s", strerror(errno));
		stub_free(s);
		return NULL;
	}
	s->port = ntohs(a.sin_port);
	snprintf(s->url, sizeof s->url, "http://%s:%d", host, s->port);
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

/* ------------------------------------------------------------------------
 * Runs
 * ------------------------------------------------------------------------ */

static char *stub_json_body(json_t *given, const char *const *keys, json_t *const *defs,
                            size_t ndefs, const char *url)
{
	json_t *o = given ? json_deep_copy(given) : json_object();
	if (!o)
		return NULL;
	for (size_t i = 0; i < ndefs; i++)
		if (!json_object_get(o, keys[i]))
			json_object_set(o, keys[i], defs[i]);
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		return NULL;
	char *out = stub_subst(text, url);
	free(text);
	return out;
}

int dev_stub_add_run(dev_stub_t *s, const dev_stub_run_t *run, dev_stub_otps_t *out)
{
	dev_stub_run_t none;
	memset(&none, 0, sizeof none);
	if (!run)
		run = &none;
	memset(out, 0, sizeof *out);
	if ((run->env && !json_is_object(run->env)) || (run->config && !json_is_object(run->config)))
		return -1;
	if (run->session && (!stub_name_ok(run->session, 0) || strlen(run->session) >= sizeof out->session))
		return -1;
	stub_run_t *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	if (run->session) {
		snprintf(r->session, sizeof r->session, "%s", run->session);
	} else {
		char hex[17];
		if (stub_random_hex(hex, 8) < 0)
			goto fail;
		snprintf(r->session, sizeof r->session, "sess_%s", hex);
	}
	for (int i = 0; i < DEV_STUB_EP_COUNT; i++) {
		char hex[33];
		if (stub_random_hex(hex, 16) < 0)
			goto fail;
		snprintf(r->otp[i], sizeof r->otp[i], "otp_%s", hex);
	}
	if (run->env_json) {
		r->env_body = stub_subst(run->env_json, s->url);
	} else {
		const char *keys[] = { "variables", "setup_script" };
		json_t *defs[] = { json_object(), json_null() };
		r->env_body = stub_json_body(run->env, keys, defs, 2, s->url);
		json_decref(defs[0]);
	}
	if (run->config_json) {
		r->config_body = stub_subst(run->config_json, s->url);
	} else {
		const char *keys[] = { "system_prompt", "model", "skills", "mcp_servers", "agent" };
		json_t *defs[] = { json_string("You are a helpful assistant working in a sandbox."),
		                   json_string("mock"), json_array(), json_array(),
		                   json_pack("{s:s,s:s}", "kind", "mock", "script", "demo") };
		r->config_body = stub_json_body(run->config, keys, defs, 5, s->url);
		for (int i = 0; i < 5; i++)
			json_decref(defs[i]);
	}
	if (!r->env_body || !r->config_body)
		goto fail;
	for (int i = 0; i < DEV_STUB_EP_COUNT; i++)
		if (stub_fault_set(&r->faults[i], &run->faults[i]) < 0)
			goto fail;
	r->results_status = run->results_status;

	pthread_mutex_lock(&s->mu);
	if (stub_find_run(s, r->session)) {
		pthread_mutex_unlock(&s->mu);
		goto fail;
	}
	r->next = s->runs;
	s->runs = r;
	pthread_mutex_unlock(&s->mu);

	snprintf(out->session, sizeof out->session, "%s", r->session);
	snprintf(out->agent_url, sizeof out->agent_url, "%s/ws/%s", s->url, r->session);
	snprintf(out->otp_setup, sizeof out->otp_setup, "%s", r->otp[DEV_STUB_EP_ENV]);
	snprintf(out->otp_run, sizeof out->otp_run, "%s", r->otp[DEV_STUB_EP_CONFIG]);
	snprintf(out->otp_upload, sizeof out->otp_upload, "%s", r->otp[DEV_STUB_EP_RESULTS]);
	return 0;
fail:
	stub_run_free(r);
	return -1;
}

int dev_stub_add_run_from_agent(dev_stub_t *s, const char *agent, dev_stub_otps_t *out)
{
	memset(out, 0, sizeof *out);
	if (!s->agents_dir || !stub_name_ok(agent, 0))
		return -1;
	char *path = NULL;
	if (asprintf(&path, "%s/%s.json", s->agents_dir, agent) < 0)
		return -1;
	json_error_t err;
	json_t *def = json_load_file(path, 0, &err);
	free(path);
	if (!def || !json_is_object(def)) {
		json_decref(def);
		return -1;
	}
	json_t *env = json_object_get(def, "env"), *config = json_object_get(def, "config");
	int rc = -1;
	if ((!env || json_is_object(env)) && (!config || json_is_object(config))) {
		dev_stub_run_t run;
		memset(&run, 0, sizeof run);
		run.env = env;
		run.config = config;
		rc = dev_stub_add_run(s, &run, out);
	}
	json_decref(def);
	return rc;
}

int dev_stub_set_fault(dev_stub_t *s, const char *session, dev_stub_ep_t ep, const dev_stub_fault_t *f)
{
	if ((unsigned)ep >= DEV_STUB_EP_COUNT)
		return -1;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	int rc = r ? stub_fault_set(&r->faults[ep], f) : -1;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int dev_stub_stats(dev_stub_t *s, const char *session, dev_stub_ep_t ep, dev_stub_ep_stats_t *out)
{
	memset(out, 0, sizeof *out);
	if ((unsigned)ep >= DEV_STUB_EP_COUNT)
		return -1;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	if (r)
		*out = r->stats[ep];
	pthread_mutex_unlock(&s->mu);
	return r ? 0 : -1;
}

int dev_stub_total_calls(dev_stub_t *s, const char *session)
{
	int n = 0;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	for (int i = 0; r && i < DEV_STUB_EP_COUNT; i++)
		n += r->stats[i].calls;
	pthread_mutex_unlock(&s->mu);
	return n;
}

char **dev_stub_file_names(dev_stub_t *s, const char *session, size_t *n)
{
	*n = 0;
	char **v = NULL;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	if (r && r->nfiles > 0 && (v = calloc(r->nfiles, sizeof *v)) != NULL) {
		for (size_t i = 0; i < r->nfiles; i++) {
			if (!(v[i] = strdup(r->files[i].name))) {
				for (size_t j = 0; j < i; j++)
					free(v[j]);
				free(v);
				v = NULL;
				break;
			}
		}
		if (v)
			*n = r->nfiles;
	}
	pthread_mutex_unlock(&s->mu);
	return v;
}

int dev_stub_file_get(dev_stub_t *s, const char *session, const char *name, char **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	int found = 0;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	/* The latest upload of that name wins. */
	for (size_t i = r ? r->nfiles : 0; i-- > 0;) {
		stub_file_t *f = &r->files[i];
		if (strcmp(f->name, name) != 0)
			continue;
		if (f->data && (*data = malloc(f->len + 1)) != NULL) {
			memcpy(*data, f->data, f->len + 1);
			*len = f->len;
			found = 1;
		}
		break;
	}
	pthread_mutex_unlock(&s->mu);
	return found;
}

/* ------------------------------------------------------------------------
 * Blobs
 * ------------------------------------------------------------------------ */

int dev_stub_add_blob(dev_stub_t *s, const char *name, const void *bytes, size_t len)
{
	if (!stub_name_ok(name, 1))
		return -1;
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return -1;
	if (len)
		memcpy(copy, bytes, len);
	pthread_mutex_lock(&s->mu);
	stub_blob_t *b = stub_find_blob(s, name);
	if (!b && (b = calloc(1, sizeof *b)) != NULL) {
		snprintf(b->name, sizeof b->name, "%s", name);
		b->next = s->blobs;
		s->blobs = b;
	}
	if (b) {
		free(b->data);
		b->data = copy;
		b->len = len;
	}
	pthread_mutex_unlock(&s->mu);
	if (!b) {
		free(copy);
		return -1;
	}
	return 0;
}

int dev_stub_add_blob_file(dev_stub_t *s, const char *name, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > (1ULL << 32)) {
		close(fd);
		return -1;
	}
	size_t len = (size_t)st.st_size, off = 0;
	char *buf = malloc(len ? len : 1);
	if (!buf) {
		close(fd);
		return -1;
	}
	while (off < len) {
		ssize_t r = read(fd, buf + off, len - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		off += (size_t)r;
	}
	close(fd);
	int rc = off == len ? dev_stub_add_blob(s, name, buf, len) : -1;
	free(buf);
	return rc;
}

int dev_stub_set_blob_fault(dev_stub_t *s, const char *name, const dev_stub_fault_t *f)
{
	pthread_mutex_lock(&s->mu);
	stub_blob_t *b = stub_find_blob(s, name);
	int rc = b ? stub_fault_set(&b->fault, f) : -1;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int dev_stub_blob_url(const dev_stub_t *s, const char *name, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/blobs/%s", s->url, name);
	return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

int dev_stub_blob_stats(dev_stub_t *s, const char *name, dev_stub_blob_stats_t *out)
{
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&s->mu);
	stub_blob_t *b = stub_find_blob(s, name);
	if (b)
		*out = b->stats;
	pthread_mutex_unlock(&s->mu);
	return b ? 0 : -1;
}

int dev_stub_unknown_requests(dev_stub_t *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->unknown;
	pthread_mutex_unlock(&s->mu);
	return n;
}
