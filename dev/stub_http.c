/*
 * dev/stub_http.c - the routes: /ws/<session>/{env,config,results},
 * /blobs/<name>, /mint, /agents, /healthz and the request callback that
 * checks auth, OTPs and faults in that order.
 */
#include "dev/stub_internal.h"

#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <unistd.h>

/* The endpoint names as they stand in the route /ws/<session>/<name>. */
static const char *const ep_names[DEV_STUB_EP_COUNT] = { "env", "config", "results" };

const char *dev_stub_ep_name(dev_stub_ep_t ep)
{
	return (unsigned)ep < DEV_STUB_EP_COUNT ? ep_names[ep] : "?";
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
		if (stub_boundary(ct, boundary, sizeof(boundary)) < 0 ||
		    stub_multipart_each(body, len, boundary, stub_upload_part, &u) < 0) {
			st->bad_request++;
			st->last_status = 400;
			stub_reply_set(rp, 400, "application/json", "{\"error\":\"body is not multipart/form-data\"}");
			return delay;
		}
		char ok[64];
		snprintf(ok, sizeof(ok), "{\"ok\":true,\"files\":%d}", u.files);
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
	    (b = calloc(1, sizeof(*b))) && (b->data = malloc((size_t)st.st_size + 1))) {
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
		snprintf(b->name, sizeof(b->name), "%s", name);
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

/* A 200 with the JSON j (taken; NULL after a failed json_pack: a 500). */
static void stub_reply_json(stub_reply_t *rp, json_t *j)
{
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (text) {
		stub_reply_set(rp, 200, "application/json", text);
		free(text);
	} else {
		stub_reply_set(rp, 500, "application/json", "{\"error\":\"out of memory\"}");
	}
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
		stub_reply_json(rp, j);
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

	while (names && dir && (de = readdir(dir))) {
		size_t n = strlen(de->d_name);
		char name[128];
		if (n <= 5 || n - 5 >= sizeof(name) || strcmp(de->d_name + n - 5, ".json") != 0)
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
		json_t **v = calloc(n, sizeof(*v));
		if (v) {
			for (size_t i = 0; i < n; i++)
				v[i] = json_incref(json_array_get(names, i));
			qsort(v, n, sizeof(*v), stub_cmp_names);
			json_array_clear(names);
			for (size_t i = 0; i < n; i++)
				json_array_append_new(names, v[i]);
			free(v);
		}
	}
	stub_reply_json(rp, names ? json_pack("{s:o}", "agents", names) : NULL);
}

void stub_request_cb(struct evhttp_request *req, void *arg)
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
			stub_handle_mint(s, req, rp); /* takes the lock itself */
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
		if (slash && (size_t)(slash - sess) < sizeof(session)) {
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
