/*
 * dispatcher/http.c - the HTTP server: evhttp on the shared loop, routing
 * of SPEC §7's routes, bearer auth, CORS, JSON error answers, /healthz,
 * /readyz, /metrics, the request counters and the listener.  Start, drain
 * and stop of the whole dispatcher live in lifecycle.c.
 */
#include "dispatcher/dispatcher.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <sodium.h>

#include "common/log.h"
#include "common/util.h"
#include "dispatcher/openapi.h"
#include "proto/control.h"
#include "proto/keys.h"

static const int statuses[DISPATCHER_NSTATUS] = {
	200,
	202,
	204,
	400,
	401,
	403,
	404,
	405,
	409,
	413,
	415,
	500,
	503,
	504,
	0,
};

static const char *const route_names[DISPATCHER_ROUTE_COUNT] = {
	"stream",
	"runs_create",
	"run_get",
	"run_events",
	"run_cancel",
	"run_reply",
	"healthz",
	"readyz",
	"metrics",
	"runs_list",
	"ui",
	"openapi",
	"other",
};

void dispatcher_count(dispatcher_t *d, dispatcher_route_t route, int status)
{
	int i;

	for (i = 0; i < DISPATCHER_NSTATUS - 1; i++)
		if (statuses[i] == status)
			break;
	rn_counter_add(d->c_requests[route][i], 1);
}

/* 1 when origin is in the configured comma-separated list (or it is "*"). */
static int origin_allowed(const dispatcher_t *d, const char *origin)
{
	const char *p = d->cfg->cors_origins;
	size_t olen = strlen(origin);

	if (!p || *p == '\0')
		return 0;
	while (*p != '\0') {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		while (n > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if ((n == 1 && *p == '*') || (n == olen && strncasecmp(p, origin, n) == 0))
			return 1;
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

void dispatcher_cors(dispatcher_t *d, struct evhttp_request *req)
{
	const char *origin = evhttp_find_header(evhttp_request_get_input_headers(req), "Origin");
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);

	if (!origin || !origin_allowed(d, origin))
		return;
	evhttp_add_header(out, "Access-Control-Allow-Origin", origin);
	evhttp_add_header(out, "Vary", "Origin");
	evhttp_add_header(out, "Access-Control-Expose-Headers", "X-Runnel-Run-Id, Location");
}

void dispatcher_reply_json(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                           int status, json_t *body)
{
	struct evbuffer *buf = evbuffer_new();
	char *text = json_dumps(body, JSON_COMPACT);

	json_decref(body);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
	evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
	dispatcher_cors(d, req);
	if (buf && text) {
		evbuffer_add(buf, text, strlen(text));
		evbuffer_add(buf, "\n", 1);
	}
	free(text);
	dispatcher_count(d, route, status);
	evhttp_send_reply(req, status, NULL, buf);
	if (buf)
		evbuffer_free(buf);
}

void dispatcher_reply_error(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                            int status, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dispatcher_reply_json(d, req, route, status,
	                      json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
}

/* Constant time: both sides are hashed first so that even their lengths
 * take the same path through sodium_memcmp. */
static int token_ok(const dispatcher_t *d, struct evhttp_request *req)
{
	const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	unsigned char a[32], b[32];
	const char *tok;
	int ok;

	if (!d->cfg->api_token)
		return 1;
	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return 0;
	tok = h + 7;
	while (*tok == ' ')
		tok++;
	crypto_generichash(a, sizeof(a), (const unsigned char *)tok, strlen(tok), NULL, 0);
	crypto_generichash(b, sizeof(b), (const unsigned char *)d->cfg->api_token,
	                   strlen(d->cfg->api_token), NULL, 0);
	ok = sodium_memcmp(a, b, sizeof(a)) == 0;
	sodium_memzero(a, sizeof(a));
	sodium_memzero(b, sizeof(b));
	return ok;
}

void dispatcher_send(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route, int status,
                     const void *body, size_t len)
{
	struct evbuffer *buf = evbuffer_new();

	/* evhttp leaves the body out of a HEAD answer by itself. */
	if (buf && len > 0)
		evbuffer_add(buf, body, len);
	dispatcher_count(d, route, status);
	evhttp_send_reply(req, status, NULL, buf);
	if (buf)
		evbuffer_free(buf);
}

static void reply_text(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                       int status, const char *ctype, const char *text, size_t len)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
	dispatcher_cors(d, req);
	dispatcher_send(d, req, route, status, text, len);
}

static void handle_readyz(dispatcher_t *d, struct evhttp_request *req)
{
	int kafka = dispatcher_janitor_kafka_ok(d->janitor);
	int redis = dispatcher_store_ready(d->store);
	int ok = kafka && redis;

	dispatcher_reply_json(d, req, DISPATCHER_ROUTE_READYZ, ok ? 200 : 503,
	                      json_pack("{s:s,s:s,s:s}", "status", ok ? "ok" : "unavailable",
	                                "kafka", kafka ? "ok" : "down", "redis", redis ? "ok" : "down"));
}

static void handle_metrics(dispatcher_t *d, struct evhttp_request *req)
{
	size_t len = 0;
	char *text;

	text = rn_metrics_render(d->metrics, &len);
	if (!text) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_METRICS, 500, "internal", "metrics: out of memory");
		return;
	}
	reply_text(d, req, DISPATCHER_ROUTE_METRICS, 200, "text/plain; version=0.0.4", text, len);
	free(text);
}

static void method_not_allowed(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                               const char *allow)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	dispatcher_reply_error(d, req, route, 405, "method_not_allowed", "method: %s only", allow);
}

static const char *method_name(enum evhttp_cmd_type m)
{
	switch (m) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_PATCH: return "PATCH";
	case EVHTTP_REQ_TRACE: return "TRACE";
	case EVHTTP_REQ_CONNECT: return "CONNECT";
	default: return "OTHER";
	}
}

/* libevent 2.1's EVHTTP_REQ_UNKNOWN_ (http-internal.h): the type of a
 * request whose method it could not name. */
#define HTTP_REQ_UNKNOWN (1 << 15)

/* A route: which handler, which methods (the first is the one served). */
typedef struct match {
	dispatcher_route_t route;
	const char *allow; /* Allow header */
	enum evhttp_cmd_type method;
	char run_id[PROTO_RUN_ID_MAX + 1];
	char ask_id[PROTO_CTL_ID_MAX + 1]; /* the reply route */
	int bad_ask_id;
	int bad_id;
	int found;
} match_t;

/*
 * A path segment (n bytes at s) as the caller meant it, into out: clients
 * may percent-escape any character of an id ("ask%3A1" is "ask:1"), so ids
 * are compared after decoding.  0, or -1 when it is empty, does not fit
 * size or decodes to a NUL.
 */
static int segment_decode(const char *s, size_t n, char *out, size_t size)
{
	char raw[3 * PROTO_CTL_ID_MAX + 1];
	size_t len = 0;
	char *dec;

	if (n == 0 || n >= sizeof(raw))
		return -1;
	memcpy(raw, s, n);
	raw[n] = '\0';
	dec = evhttp_uridecode(raw, 0, &len);
	if (!dec)
		return -1;
	if (len == 0 || len >= size || strlen(dec) != len) {
		free(dec);
		return -1;
	}
	memcpy(out, dec, len + 1);
	free(dec);
	return 0;
}

static void match_path(const char *path, match_t *m)
{
	static const char runs[] = "/v1/runs/";
	const char *rest, *slash;
	size_t idlen;

	memset(m, 0, sizeof(*m));
	m->route = DISPATCHER_ROUTE_OTHER;
	if (!path)
		return;
	m->found = 1;
	if (strcmp(path, "/stream") == 0) {
		m->route = DISPATCHER_ROUTE_STREAM;
		m->allow = "POST, OPTIONS";
		m->method = EVHTTP_REQ_POST;
		return;
	}
	if (strcmp(path, "/v1/runs") == 0) {
		/* POST enqueues; GET lists the recent runs (on_request picks). */
		m->route = DISPATCHER_ROUTE_RUNS;
		m->allow = "GET, POST, OPTIONS";
		m->method = EVHTTP_REQ_POST;
		return;
	}
	if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 || strcmp(path, "/metrics") == 0) {
		m->route = path[1] == 'h' ? DISPATCHER_ROUTE_HEALTHZ : path[1] == 'r' ? DISPATCHER_ROUTE_READYZ
		                                                                      : DISPATCHER_ROUTE_METRICS;
		m->allow = "GET, OPTIONS";
		m->method = EVHTTP_REQ_GET;
		return;
	}
	if (strcmp(path, "/openapi.json") == 0) {
		m->route = DISPATCHER_ROUTE_OPENAPI;
		m->allow = "GET, OPTIONS";
		m->method = EVHTTP_REQ_GET;
		return;
	}
	if (strcmp(path, "/ui") == 0 || strncmp(path, "/ui/", 4) == 0) {
		m->route = DISPATCHER_ROUTE_UI;
		m->allow = "GET, HEAD, OPTIONS";
		m->method = EVHTTP_REQ_GET;
		return;
	}
	if (strncmp(path, runs, sizeof(runs) - 1) == 0) {
		rest = path + sizeof(runs) - 1;
		slash = strchr(rest, '/');
		idlen = slash ? (size_t)(slash - rest) : strlen(rest);
		if (!slash) {
			m->route = DISPATCHER_ROUTE_RUN;
			m->allow = "GET, OPTIONS";
			m->method = EVHTTP_REQ_GET;
		} else if (strcmp(slash, "/events") == 0) {
			m->route = DISPATCHER_ROUTE_EVENTS;
			m->allow = "GET, OPTIONS";
			m->method = EVHTTP_REQ_GET;
		} else if (strcmp(slash, "/cancel") == 0) {
			m->route = DISPATCHER_ROUTE_CANCEL;
			m->allow = "POST, OPTIONS";
			m->method = EVHTTP_REQ_POST;
		} else if (strncmp(slash, "/replies/", 9) == 0 && !strchr(slash + 9, '/')) {
			m->route = DISPATCHER_ROUTE_REPLY;
			m->allow = "POST, OPTIONS";
			m->method = EVHTTP_REQ_POST;
			if (segment_decode(slash + 9, strlen(slash + 9), m->ask_id, sizeof(m->ask_id)) < 0 ||
			    !proto_ctl_id_ok(m->ask_id)) {
				m->bad_ask_id = 1;
				m->ask_id[0] = '\0';
			}
		} else {
			m->found = 0;
			return;
		}
		if (segment_decode(rest, idlen, m->run_id, sizeof(m->run_id)) < 0 || !proto_run_id_valid(m->run_id)) {
			m->bad_id = 1;
			m->run_id[0] = '\0';
		}
		return;
	}
	m->found = 0;
}

static void preflight(dispatcher_t *d, struct evhttp_request *req, const match_t *m)
{
	const char *origin = evhttp_find_header(evhttp_request_get_input_headers(req), "Origin");
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);

	evhttp_add_header(out, "Allow", m->allow);
	if (origin && !origin_allowed(d, origin)) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_OTHER, 403, "forbidden", "origin: not allowed");
		return;
	}
	if (origin) {
		evhttp_add_header(out, "Access-Control-Allow-Methods", m->allow);
		evhttp_add_header(out, "Access-Control-Allow-Headers",
		                  "Authorization, Content-Type, Accept, Last-Event-ID");
		evhttp_add_header(out, "Access-Control-Max-Age", "600");
	}
	dispatcher_cors(d, req);
	dispatcher_count(d, DISPATCHER_ROUTE_OTHER, 204);
	evhttp_send_reply(req, 204, "No Content", NULL);
}

/* Missing Content-Type is accepted (a body is still parsed as JSON);
 * anything else must be application/json or a +json type. */
static int content_type_ok(struct evhttp_request *req)
{
	const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
	size_t n;

	if (!ct)
		return 1;
	while (*ct == ' ')
		ct++;
	n = strcspn(ct, "; \t");
	if (n == 16 && strncasecmp(ct, "application/json", 16) == 0)
		return 1;
	if (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0)
		return 1;
	return 0;
}

void dispatcher_request_abandon(struct evhttp_request *req)
{
	if (req && !evhttp_request_get_connection(req))
		evhttp_request_free(req);
}

int dispatcher_query(dispatcher_t *d, struct evhttp_request *req, dispatcher_route_t route,
                     struct evkeyvalq *q)
{
	const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));

	q->tqh_first = NULL;
	q->tqh_last = &q->tqh_first;
	if (query && evhttp_parse_query_str(query, q) < 0) {
		dispatcher_reply_error(d, req, route, 400, "bad_request", "query: not a valid query string");
		return -1;
	}
	/* "?after=1&after=2": which one the caller meant is a guess, and
	 * proxies disagree on it; refuse the request, naming the parameter. */
	for (const struct evkeyval *a = q->tqh_first; a; a = a->next.tqe_next)
		for (const struct evkeyval *b = a->next.tqe_next; b; b = b->next.tqe_next) {
			char name[40];
			size_t i;

			if (strcmp(a->key, b->key) != 0)
				continue;
			/* The name is the caller's text: a short, printable prefix. */
			for (i = 0; a->key[i] != '\0' && i < sizeof(name) - 1; i++)
				name[i] = (a->key[i] >= 0x20 && a->key[i] < 0x7f) ? a->key[i] : '?';
			name[i] = '\0';
			evhttp_clear_headers(q);
			dispatcher_reply_error(d, req, route, 400, "bad_request", "%s: given more than once", name);
			return -1;
		}
	return 0;
}

const char *dispatcher_body(struct evhttp_request *req, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);

	*len = evbuffer_get_length(in);
	if (*len == 0)
		return "";
	return (const char *)evbuffer_pullup(in, -1);
}

/* 1 when the request says a body follows its head. */
static int announces_body(struct evhttp_request *req)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *cl = evhttp_find_header(in, "Content-Length");

	if (evhttp_find_header(in, "Transfer-Encoding"))
		return 1;
	if (!cl)
		return 0;
	while (*cl == '0')
		cl++;
	return *cl != '\0';
}

static void on_request(struct evhttp_request *req, void *arg)
{
	dispatcher_t *d = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	match_t m;

	dispatcher_conns_request(d, req);
	/* evhttp reads a body only for POST, PUT and PATCH.  Any other request
	 * that announces one leaves it unread on the socket, where it would be
	 * parsed as the next request (and its 400 taken by the caller for the
	 * answer to its next one): answer this one, then close. */
	if (!(method & (EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH)) && announces_body(req))
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	match_path(uri ? evhttp_uri_get_path(uri) : NULL, &m);
	rn_log_debug(m.run_id[0] ? m.run_id : NULL, "http_request", "%s %s",
	             method_name(method), route_names[m.route]);
	/* Preflights carry no credentials; /healthz is open.  Everything else,
	 * unknown routes and wrong methods included, needs the token first, so
	 * that a caller without it learns nothing about the routes. */
	if (m.found && method == EVHTTP_REQ_OPTIONS) {
		preflight(d, req, &m);
		return;
	}
	/* The viewer's static files are open too: the page asks for the token
	 * and sends it to the API routes. */
	if (!(m.found && (m.route == DISPATCHER_ROUTE_HEALTHZ || m.route == DISPATCHER_ROUTE_UI)) &&
	    !token_ok(d, req)) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
		dispatcher_reply_error(d, req, m.route, 401, "unauthorized",
		                       "authorization: a valid bearer token is required");
		return;
	}
	if (!m.found) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_OTHER, 404, "not_found", "route: no such route");
		return;
	}
	if (m.route == DISPATCHER_ROUTE_RUNS && method == EVHTTP_REQ_GET) {
		m.route = DISPATCHER_ROUTE_RUNS_LIST;
		m.method = EVHTTP_REQ_GET;
	}
	if (m.route == DISPATCHER_ROUTE_UI && method == EVHTTP_REQ_HEAD)
		m.method = EVHTTP_REQ_HEAD;
	if (method != m.method) {
		method_not_allowed(d, req, m.route, m.allow);
		return;
	}
	if (m.route == DISPATCHER_ROUTE_HEALTHZ) {
		dispatcher_reply_json(d, req, m.route, 200, json_pack("{s:s}", "status", "ok"));
		return;
	}
	if (d->draining && m.route != DISPATCHER_ROUTE_HEALTHZ) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
		dispatcher_reply_error(d, req, m.route, 503, "shutting_down", "server: shutting down");
		return;
	}
	if (m.bad_id) {
		dispatcher_reply_error(d, req, m.route, 400, "bad_request",
		                       "run_id: must match [A-Za-z0-9_-]{1,%d}", PROTO_RUN_ID_MAX);
		return;
	}
	if (method == EVHTTP_REQ_POST && evbuffer_get_length(evhttp_request_get_input_buffer(req)) > 0 &&
	    !content_type_ok(req)) {
		dispatcher_reply_error(d, req, m.route, 415, "unsupported_media_type",
		                       "content-type: must be application/json");
		return;
	}
	switch (m.route) {
	case DISPATCHER_ROUTE_STREAM:
	case DISPATCHER_ROUTE_RUNS:
		dispatcher_runs_create(d, req, m.route);
		break;
	case DISPATCHER_ROUTE_RUN:
		dispatcher_runs_get(d, req, m.run_id);
		break;
	case DISPATCHER_ROUTE_EVENTS:
		dispatcher_runs_events(d, req, m.run_id);
		break;
	case DISPATCHER_ROUTE_CANCEL:
		dispatcher_runs_cancel(d, req, m.run_id);
		break;
	case DISPATCHER_ROUTE_REPLY:
		if (m.bad_ask_id)
			dispatcher_reply_error(d, req, m.route, 400, "bad_request",
			                       "ask_id: must be 1-%d characters of A-Z a-z 0-9 _ . : -", PROTO_CTL_ID_MAX);
		else
			dispatcher_runs_reply(d, req, m.run_id, m.ask_id);
		break;
	case DISPATCHER_ROUTE_RUNS_LIST:
		dispatcher_runs_list(d, req);
		break;
	case DISPATCHER_ROUTE_UI:
		dispatcher_ui_serve(d, req, evhttp_uri_get_path(uri));
		break;
	case DISPATCHER_ROUTE_READYZ:
		handle_readyz(d, req);
		break;
	case DISPATCHER_ROUTE_METRICS:
		handle_metrics(d, req);
		break;
	case DISPATCHER_ROUTE_OPENAPI:
		/* The document as it is in the tree (dispatcher/openapi.json). */
		reply_text(d, req, m.route, 200, "application/json", (const char *)dispatcher_openapi_json,
		           dispatcher_openapi_json_len);
		break;
	default:
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_OTHER, 404, "not_found", "route: no such route");
		break;
	}
}

/* The dispatcher's unlabelled series, in /metrics order. */
static const rn_metric_def_t dispatcher_metrics[] = {
	{ offsetof(dispatcher_t, g_streams), RN_METRIC_GAUGE, "runnel_dispatcher_active_streams",
	  "Streaming answers (/stream and events) in progress" },
	{ offsetof(dispatcher_t, h_enqueue), RN_METRIC_LATENCY, "runnel_dispatcher_enqueue_seconds",
	  "Request received to Kafka delivery report" },
	{ offsetof(dispatcher_t, c_enqueued), RN_METRIC_COUNTER, "runnel_dispatcher_enqueued_total", "Jobs Kafka confirmed" },
	{ offsetof(dispatcher_t, c_enqueue_failed), RN_METRIC_COUNTER, "runnel_dispatcher_enqueue_failed_total",
	  "Jobs Kafka did not take (answered 503)" },
	{ offsetof(dispatcher_t, c_enqueue_repeats), RN_METRIC_COUNTER, "runnel_dispatcher_enqueue_repeats_total",
	  "Enqueues answered with the earlier run of their idempotency key" },
	{ offsetof(dispatcher_t, c_cancels), RN_METRIC_COUNTER, "runnel_dispatcher_cancels_total",
	  "Cancel control messages written" },
	{ offsetof(dispatcher_t, c_pauses), RN_METRIC_COUNTER, "runnel_dispatcher_stream_pauses_total",
	  "Times a slow caller's stream was paused until its socket drained" },
	{ offsetof(dispatcher_t, c_lost), RN_METRIC_COUNTER, "runnel_dispatcher_lost_runs_total",
	  "Runs the lost-lease sweep of this dispatcher ended" },
	{ offsetof(dispatcher_t, g_conns), RN_METRIC_GAUGE, "runnel_dispatcher_connections",
	  "Open HTTP connections" },
	{ offsetof(dispatcher_t, c_conns_refused), RN_METRIC_COUNTER, "runnel_dispatcher_connections_refused_total",
	  "Connections answered 503 and closed at the connection cap (every open one busy)" },
	{ offsetof(dispatcher_t, c_conns_evicted), RN_METRIC_COUNTER, "runnel_dispatcher_connections_evicted_total",
	  "Idle connections closed at the cap to make room for a new one" },
	{ offsetof(dispatcher_t, c_conns_timed_out), RN_METRIC_COUNTER, "runnel_dispatcher_connections_timed_out_total",
	  "Connections closed for not sending a whole request within the head deadline" },
};

void dispatcher_http_metrics(dispatcher_t *d)
{
	char labels[96];

	for (int r = 0; r < DISPATCHER_ROUTE_COUNT; r++)
		for (int s = 0; s < DISPATCHER_NSTATUS; s++) {
			if (statuses[s] != 0)
				snprintf(labels, sizeof(labels), "route=\"%s\",status=\"%d\"", route_names[r], statuses[s]);
			else
				snprintf(labels, sizeof(labels), "route=\"%s\",status=\"other\"", route_names[r]);
			d->c_requests[r][s] = rn_metrics_counter(d->metrics, "runnel_dispatcher_requests_total",
			                                         "HTTP answers by route and status", labels);
		}
	rn_metrics_register(d->metrics, d, dispatcher_metrics, sizeof(dispatcher_metrics) / sizeof(dispatcher_metrics[0]));
}

int dispatcher_http_listen(dispatcher_t *d, const char *host, unsigned short port,
                           char *errstr, size_t errstr_size)
{
	const dispatcher_config_t *cfg = d->cfg;
	struct evhttp_bound_socket *sock;

	d->http = evhttp_new(d->base);
	if (!d->http) {
		snprintf(errstr, errstr_size, "evhttp_new failed");
		return -1;
	}
	/* Every method reaches on_request, so a wrong one gets our JSON 405
	 * with Allow (evhttp's own refusal is a 501 HTML page, which callers
	 * read as a server fault).  libevent 2.1 parses a method it does not
	 * know (QUERY, PROPFIND, ...) into its internal "unknown" type, bit 15
	 * of the mask: allowing that bit hands those requests to us too. */
	evhttp_set_allowed_methods(d->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | HTTP_REQ_UNKNOWN);
	/* An oversized body is refused with 413.  Without lingering close evhttp
	 * answers as soon as the head declares too much and closes a socket
	 * with the caller's body still unread, so the kernel resets the
	 * connection and a caller still sending sees "connection reset", not
	 * the 413.  With it, evhttp reads and discards the declared body first
	 * (the head deadline in conns.c still bounds how long that may take). */
	evhttp_set_flags(d->http, EVHTTP_SERVER_LINGERING_CLOSE);
	evhttp_set_max_body_size(d->http, cfg->max_body);
	evhttp_set_max_headers_size(d->http, 64 * 1024);
	evhttp_set_timeout(d->http, (int)cfg->http_timeout_sec);
	evhttp_set_default_content_type(d->http, NULL);
	evhttp_set_gencb(d->http, on_request, d);
	if (dispatcher_conns_init(d) < 0) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	sock = evhttp_bind_socket_with_handle(d->http, host, port);
	if (!sock) {
		snprintf(errstr, errstr_size, "cannot listen on %s", cfg->listen);
		return -1;
	}
	d->sock = sock;
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		evutil_socket_t fd = evhttp_bound_socket_get_fd(sock);
		int bport = port;

		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
			if (ss.ss_family == AF_INET)
				bport = ntohs(((struct sockaddr_in *)&ss)->sin_port);
			else if (ss.ss_family == AF_INET6)
				bport = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		}
		snprintf(d->bound, sizeof(d->bound), "%s:%d", host, bport);
	}
	return 0;
}
