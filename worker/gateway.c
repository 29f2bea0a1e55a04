/*
 * worker/gateway.c - the per-run model gateway (see gateway.h): the /env
 * rewrite, the listener, one thread per agent connection, the request
 * checks, the call through libcurl with the answer streamed back, and the
 * usage and budget bookkeeping.
 *
 * Threads and blocking libcurl calls, like the egress proxy: a model call
 * lasts as long as the model writes, and each thread owns its connection
 * and its curl handle (kept for the connection's next request, so the
 * upstream TLS session is reused).  The run's thread only reads the
 * totals, under the mutex.
 */
#include "worker/gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "common/io.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/rcluster.h"
#include "common/runqueue.h"
#include "common/util.h"
#include "worker/egress.h"
#include "worker/httpc.h"

#define NOTES_MAX          100
#define IDLE_TIMEOUT_MS    120000   /* a kept-alive connection with no request */
#define BODY_TIMEOUT_MS    60000    /* the rest of a request once its head arrived */
#define SEND_TIMEOUT_SEC   60       /* an agent that stops reading its answer */
#define LINGER_MS          2000     /* at close, what an agent still sends is dropped... */
#define LINGER_MAX         67108864 /* ...for this long and up to this many bytes */
#define CONNECT_TIMEOUT_S  10
#define USAGE_EVENT_CAP    (1 << 20)
#define TOKEN_RANDOM_BYTES 32

#define DEFAULT_ANTHROPIC "https://api.anthropic.com"
#define DEFAULT_OPENAI    "https://api.openai.com/v1"

enum { P_ANTHROPIC = 0,
       P_OPENAI,
       P_COUNT };

static const char *const prov_name[P_COUNT] = { "anthropic", "openai" };
static const char *const prov_base_var[P_COUNT] = { "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL" };

typedef struct provider {
	int on;
	char *base;      /* real base URL, no trailing slash */
	char *key;       /* real key or NULL (wiped at stop) */
	int bearer;      /* Authorization: Bearer instead of x-api-key */
	int run_url;     /* the base came from the run: checked before each call */
	const char *var; /* the variable that named the base (for messages) */
} provider_t;

struct worker_gateway {
	const worker_gateway_conf_t *conf;
	char run_id[80];
	char tenant[80];
	provider_t prov[P_COUNT];
	char token[80]; /* the placeholder */
	int host_net;
	int lfd; /* unix listener */
	int tfd; /* TCP listener (host network) */
	int tcp_port;
	int stop_fd;
	int wake_fd;
	char sock_path[4096];
	pthread_t acceptor;
	int acceptor_started;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nconn;
	int stopping;
	size_t body_bytes; /* request bodies held now (body_reserve) */
	struct {
		pthread_t t;
		int fd; /* to shut down on stop; -1 once closed */
		int used, finished;
	} slot[WORKER_GATEWAY_CONN_MAX];
	char *notes[NOTES_MAX];
	size_t nnotes;
	uint64_t notes_lost;
	proto_usage_t usage;
	int64_t max_tokens;
	int over; /* 1 run budget, 2 tenant budget */
	int64_t tenant_budget;
	int64_t tenant_used;  /* last count seen in Redis */
	rn_rcluster_t *redis; /* tenant counting, under mu (any node of a cluster) */
};

/* ------------------------------------------------------------------------
 * Metrics: series made on first use, bounded in number.
 * ------------------------------------------------------------------------ */

#define SERIES_MAX 512

typedef struct series {
	char *labels;
	int kind; /* 0 counter, 1 histogram */
	char name[64];
	struct rn_metric *m;
} series_t;

static pthread_mutex_t series_mu = PTHREAD_MUTEX_INITIALIZER;
static series_t series[SERIES_MAX];
static size_t nseries;

static struct rn_metric *metric(rn_metrics_t *reg, int kind, const char *name, const char *help, const char *labels)
{
	if (!reg)
		return NULL;
	struct rn_metric *m = NULL;
	pthread_mutex_lock(&series_mu);
	for (size_t i = 0; i < nseries; i++)
		if (series[i].kind == kind && !strcmp(series[i].name, name) && !strcmp(series[i].labels, labels)) {
			m = series[i].m;
			break;
		}
	if (!m && nseries < SERIES_MAX) {
		char *l = strdup(labels);
		if (l) {
			m = kind ? rn_metrics_histogram(reg, name, help, labels, rn_metrics_latency_bounds,
			                                rn_metrics_latency_nbounds)
			         : rn_metrics_counter(reg, name, help, labels);
			series[nseries].labels = l;
			series[nseries].kind = kind;
			snprintf(series[nseries].name, sizeof(series[nseries].name), "%s", name);
			series[nseries].m = m;
			nseries++;
		}
	}
	pthread_mutex_unlock(&series_mu);
	return m;
}

/* A label value: printable, no quotes or backslashes, bounded. */
static void label_value(char *out, size_t size, const char *in)
{
	size_t o = 0;
	for (const char *p = in ? in : ""; *p && o + 1 < size && o < 64; p++)
		out[o++] = (*p > ' ' && *p < 127 && *p != '"' && *p != '\\') ? *p : '_';
	out[o] = '\0';
	if (!o)
		snprintf(out, size, "unknown");
}

static void count_tokens(worker_gateway_t *g, const char *model, const char *dir, uint64_t n)
{
	if (!n || !g->conf->metrics)
		return;
	char t[80], mo[80], labels[256];
	label_value(t, sizeof(t), g->tenant);
	label_value(mo, sizeof(mo), model);
	snprintf(labels, sizeof(labels), "tenant=\"%s\",model=\"%s\",direction=\"%s\"", t, mo, dir);
	rn_counter_add(metric(g->conf->metrics, 0, "runnel_worker_model_tokens_total",
	                      "tokens the runs' model calls used, as the providers reported them", labels),
	               n);
}

static void count_request(worker_gateway_t *g, int p, int status, double secs)
{
	if (!g->conf->metrics)
		return;
	char labels[128];
	snprintf(labels, sizeof(labels), "provider=\"%s\",status=\"%d\"", prov_name[p], status);
	rn_counter_add(metric(g->conf->metrics, 0, "runnel_worker_model_requests_total",
	                      "model calls through the gateway by provider and HTTP status (0: no answer)", labels),
	               1);
	if (secs >= 0)
		rn_hist_observe(metric(g->conf->metrics, 1, "runnel_worker_model_upstream_seconds",
		                       "time from a model call to the provider's answer head", labels),
		                secs);
}

/* ------------------------------------------------------------------------
 * Notes and bookkeeping
 * ------------------------------------------------------------------------ */

static void wake(worker_gateway_t *g)
{
	uint64_t one = 1;
	if (g->wake_fd >= 0) {
		ssize_t w = write(g->wake_fd, &one, sizeof(one));
		(void)w;
	}
}

static void note(worker_gateway_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(worker_gateway_t *g, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	rn_log_info(g->run_id, "gateway", "%s", buf);
	pthread_mutex_lock(&g->mu);
	char *d = g->nnotes < NOTES_MAX ? strdup(buf) : NULL;
	if (d)
		g->notes[g->nnotes++] = d;
	else
		g->notes_lost++;
	pthread_mutex_unlock(&g->mu);
	wake(g);
}

/* ------------------------------------------------------------------------
 * Tenant hourly budget: one counter per tenant and hour in Redis,
 * INCRBY'd after each call and read before it, shared by the fleet.
 * ------------------------------------------------------------------------ */

static void tenant_key(const worker_gateway_t *g, char *key, size_t size)
{
	long long hour = (long long)(rn_now_ms() / 3600000);
	/* In the run-time queue's slot: its take script reads it. */
	snprintf(key, size, RN_RUNQUEUE_TOKENS_FMT, g->conf->key_prefix ? g->conf->key_prefix : "runnel", g->tenant, hour);
}

/* Runs one command on the gateway's Redis connection (connecting when
 * needed); the count, or -1.  Under mu. */
static long long tenant_cmd(worker_gateway_t *g, int argc, const char **argv)
{
	char err[256] = "not connected";
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!g->redis) {
			rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;
			o.command_timeout_ms = 2000;
			o.retry_budget_ms = 2000;
			g->redis = rn_rcluster_open(g->conf->redis, &o, err, sizeof(err));
			if (!g->redis)
				break;
		}
		long long v = rn_rcluster_command_ll(g->redis, 0, argc, argv, NULL, "tenant budget", err, sizeof(err));
		if (v >= 0)
			return v;
		rn_rcluster_free(g->redis);
		g->redis = NULL;
	}
	rn_log_warn(g->run_id, "gateway", "tenant budget: %s", err);
	return -1;
}

/* 1 when the tenant's hour is used up.  Redis down: the calls go on (the
 * run's own budget still holds). */
static int tenant_over(worker_gateway_t *g)
{
	if (g->tenant_budget <= 0 || !g->conf->redis)
		return 0;
	char key[256];
	tenant_key(g, key, sizeof(key));
	const char *argv[] = { "INCRBY", key, "0" };
	pthread_mutex_lock(&g->mu);
	long long v = tenant_cmd(g, 3, argv);
	if (v >= 0)
		g->tenant_used = v;
	pthread_mutex_unlock(&g->mu);
	return v >= g->tenant_budget;
}

static void tenant_charge(worker_gateway_t *g, uint64_t tokens)
{
	if (g->tenant_budget <= 0 || !g->conf->redis || !tokens)
		return;
	char key[256], n[32];
	tenant_key(g, key, sizeof(key));
	snprintf(n, sizeof(n), "%llu", (unsigned long long)tokens);
	const char *incr[] = { "INCRBY", key, n };
	const char *exp[] = { "EXPIRE", key, "7200" };
	pthread_mutex_lock(&g->mu);
	long long v = tenant_cmd(g, 3, incr);
	if (v >= 0) {
		g->tenant_used = v;
		tenant_cmd(g, 3, exp);
		if (v >= g->tenant_budget && !g->over)
			g->over = 2;
	}
	pthread_mutex_unlock(&g->mu);
}

/* ------------------------------------------------------------------------
 * Addresses: a run-supplied upstream must be public unless the operator
 * names it.
 * ------------------------------------------------------------------------ */

/* The parts of an http(s) URL.  0 or -1. */
typedef struct url {
	int https;
	char host[256]; /* without brackets */
	int port;
} url_t;

static int url_parse(const char *u, url_t *o)
{
	memset(o, 0, sizeof(*o));
	const char *p;
	if (!strncasecmp(u, "https://", 8)) {
		o->https = 1;
		p = u + 8;
	} else if (!strncasecmp(u, "http://", 7)) {
		p = u + 7;
	} else {
		return -1;
	}
	size_t al = strcspn(p, "/?#");
	if (!al || al >= sizeof(o->host) || memchr(p, '@', al))
		return -1;
	char auth[256];
	memcpy(auth, p, al);
	auth[al] = '\0';
	char *port = NULL;
	if (auth[0] == '[') {
		char *rb = strchr(auth, ']');
		if (!rb || rb == auth + 1)
			return -1;
		*rb = '\0';
		snprintf(o->host, sizeof(o->host), "%s", auth + 1);
		if (rb[1] == ':')
			port = rb + 2;
		else if (rb[1])
			return -1;
	} else {
		char *c = strchr(auth, ':');
		if (c) {
			*c = '\0';
			port = c + 1;
		}
		snprintf(o->host, sizeof(o->host), "%s", auth);
	}
	if (!o->host[0])
		return -1;
	for (const char *c = o->host; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		      strchr(".-_:", *c)))
			return -1;
	o->port = o->https ? 443 : 80;
	if (port) {
		char *end;
		long v = strtol(port, &end, 10);
		if (!*port || *end || v < 1 || v > 65535)
			return -1;
		o->port = (int)v;
	}
	for (const char *c = u; *c; c++)
		if ((unsigned char)*c <= ' ' || *c == 127)
			return -1;
	return 0;
}

/* 1 when an explicit (non-wildcard, non-@) entry of the operator's list
 * names host:port. */
static int operator_names(const worker_gateway_conf_t *conf, const char *host, int port)
{
	for (size_t i = 0; i < conf->nallow; i++) {
		const char *e = conf->allow[i];
		if (!e || e[0] == '*' || e[0] == '@' || strchr(e, '*'))
			continue;
		if (worker_egress_match(e, host, port))
			return 1;
	}
	return 0;
}

/*
 * Resolves a run-supplied URL's host and checks every address with the
 * address rule (common/netaddr.h), so a run whose base URL is out of
 * bounds ends at its start, naming the variable.  The calls themselves are
 * checked again on each address libcurl connects to (worker_httpc_reach).
 */
static int check_url(const worker_gateway_conf_t *conf, const char *u, char *why, size_t why_size)
{
	url_t url;
	if (url_parse(u, &url) < 0) {
		snprintf(why, why_size, "is not an http(s) URL with a host");
		return -1;
	}
	int named = operator_names(conf, url.host, url.port);
	char ps[8];
	snprintf(ps, sizeof(ps), "%d", url.port);
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	int gr = getaddrinfo(url.host, ps, &hints, &res);
	if (gr != 0) {
		snprintf(why, why_size, "names a host that does not resolve (%s)", gai_strerror(gr));
		return -1;
	}
	int rc = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		char a[INET6_ADDRSTRLEN] = "?", k[96];
		const void *src = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
		                                           : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
		inet_ntop(ai->ai_family, src, a, sizeof(a));
		if (!rn_netaddr_run_may_reach(ai->ai_addr, named, conf->own, k, sizeof(k))) {
			snprintf(why, why_size, "resolves to %s, %s, which this worker's allowlist does not name", a, k);
			rc = -1;
			break;
		}
	}
	freeaddrinfo(res);
	/* The address first (the worse news), then the scheme: the key never
	 * crosses the network in the clear to a host the operator did not name. */
	if (rc == 0 && !url.https && !named) {
		snprintf(why, why_size, "is not https (plain http only for a host this worker's allowlist names)");
		rc = -1;
	}
	return rc;
}

int worker_gateway_check_url(const worker_gateway_conf_t *conf, const char *url, char *why, size_t why_size)
{
	return check_url(conf, url, why, why_size);
}

/* ------------------------------------------------------------------------
 * One connection
 * ------------------------------------------------------------------------ */

typedef struct conn {
	worker_gateway_t *g;
	int fd;
	size_t slot;
	char in[WORKER_GATEWAY_HEAD_MAX];
	size_t inlen;
	CURL *curl;
} conn_t;

/* Reads more into c->in (up to the deadline); >0 bytes, 0 EOF/timeout, -1 full. */
static ssize_t conn_fill(conn_t *c, int64_t deadline)
{
	if (c->inlen >= sizeof(c->in))
		return -1;
	for (;;) {
		int64_t left = deadline - rn_mono_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { c->fd, POLLIN, 0 };
		int pr = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return 0;
		pthread_mutex_lock(&c->g->mu);
		int stopping = c->g->stopping;
		pthread_mutex_unlock(&c->g->mu);
		if (stopping)
			return 0;
		if (pr == 0)
			continue;
		ssize_t n = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		c->inlen += (size_t)n;
		return n;
	}
}

/* Takes n bytes of the request (buffered first); 0 or -1. */
static int conn_read(conn_t *c, char *out, size_t n, int64_t deadline)
{
	while (n) {
		if (!c->inlen && conn_fill(c, deadline) <= 0)
			return -1;
		size_t k = c->inlen < n ? c->inlen : n;
		memcpy(out, c->in, k);
		memmove(c->in, c->in + k, c->inlen - k);
		c->inlen -= k;
		out += k;
		n -= k;
	}
	return 0;
}

/* One line ending in CRLF (chunked framing); its length without CRLF or -1. */
static ssize_t conn_line(conn_t *c, char *out, size_t size, int64_t deadline)
{
	for (;;) {
		char *nl = memchr(c->in, '\n', c->inlen);
		if (nl) {
			size_t l = (size_t)(nl - c->in) + 1;
			if (l < 2 || nl[-1] != '\r' || l - 2 >= size)
				return -1;
			memcpy(out, c->in, l - 2);
			out[l - 2] = '\0';
			memmove(c->in, c->in + l, c->inlen - l);
			c->inlen -= l;
			return (ssize_t)(l - 2);
		}
		if (c->inlen > 256 || conn_fill(c, deadline) <= 0)
			return -1;
	}
}

static int send_all(int fd, const void *p, size_t n)
{
	return rn_write_all(fd, p, n, RN_IO_SOCKET);
}

/* A provider-shaped JSON error, the connection closed after it. */
static void answer_error(conn_t *c, int p, int status, const char *type, const char *message)
{
	json_t *j;
	if (p == P_ANTHROPIC)
		j = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", message);
	else
		j = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", message, "type", type, "param", "code", type);
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	const char *b = body ? body : "{}";
	char head[256];
	int n = snprintf(head, sizeof(head),
	                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n",
	                 status, status == 401 ? "Unauthorized" : status == 413 ? "Payload Too Large"
	                         : status == 502                                ? "Bad Gateway"
	                         : status == 504                                ? "Gateway Timeout"
	                         : status == 400                                ? "Bad Request"
	                                                                        : "Error",
	                 strlen(b));
	if (n > 0 && (size_t)n < sizeof(head) && send_all(c->fd, head, (size_t)n) == 0)
		send_all(c->fd, b, strlen(b));
	free(body);
}

typedef struct req {
	char method[8];
	char path[2048]; /* after the provider prefix, with the query */
	int prov;
	int close;
	int chunked;
	long long clen; /* -1 none */
	char token[128];
	struct curl_slist *hdrs; /* forwarded headers */
	char *body;
	size_t blen;
	worker_gateway_t *g; /* for the body's reservation */
	size_t reserved;     /* bytes of g->body_bytes this body holds */
} req_t;

/*
 * Bodies held at once by one gateway are capped at twice the body cap, so
 * a run opening every connection with a large body cannot make the worker
 * hold WORKER_GATEWAY_CONN_MAX of them.  Grows r's reservation to want.
 * 0, or -1 (the caller answers 503).
 */
static int body_reserve(req_t *r, size_t want)
{
	worker_gateway_t *g = r->g;
	if (want <= r->reserved)
		return 0;
	size_t more = want - r->reserved, cap = 2 * g->conf->body_max + 2 * 65536;
	int ok;
	pthread_mutex_lock(&g->mu);
	ok = g->body_bytes + more <= cap;
	if (ok)
		g->body_bytes += more;
	pthread_mutex_unlock(&g->mu);
	if (!ok)
		return -1;
	r->reserved = want;
	return 0;
}

static void req_clear(req_t *r)
{
	if (r->g && r->reserved) {
		pthread_mutex_lock(&r->g->mu);
		r->g->body_bytes -= r->reserved;
		pthread_mutex_unlock(&r->g->mu);
	}
	curl_slist_free_all(r->hdrs);
	if (r->body) {
		sodium_memzero(r->body, r->blen);
		free(r->body);
	}
	sodium_memzero(r->token, sizeof(r->token));
	memset(r, 0, sizeof(*r));
}

static int hdr_is(const char *line, size_t nl, const char *name)
{
	size_t l = strlen(name);
	return nl == l && !strncasecmp(line, name, l);
}

/* Headers that are the connection's or the gateway's, never forwarded. */
static int hop_header(const char *n, size_t l)
{
	static const char *const drop[] = { "host", "content-length", "transfer-encoding", "connection", "keep-alive",
		                            "te", "trailer", "upgrade", "x-api-key", "authorization", "accept-encoding",
		                            "expect", "proxy-authorization", "proxy-connection" };
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
		if (hdr_is(n, l, drop[i]))
			return 1;
	return 0;
}

/* 1 when the Host header value names the gateway (127.0.0.1, localhost, [::1], any port). */
static int host_ok(const char *v)
{
	char h[300];
	snprintf(h, sizeof(h), "%s", v);
	char *colon = h[0] == '[' ? strstr(h, "]:") : strrchr(h, ':');
	if (colon)
		colon[h[0] == '[' ? 1 : 0] = '\0';
	return !strcasecmp(h, "127.0.0.1") || !strcasecmp(h, "localhost") || !strcmp(h, "[::1]");
}

/*
 * Parses the request head (hl bytes of c->in).  0, or -1 after answering
 * the refusal (and noting it).
 */
static int parse_head(conn_t *c, size_t hl, req_t *r)
{
	worker_gateway_t *g = c->g;
	char *h = c->in;
	h[hl - 2] = '\0'; /* the last CRLF */
	char *eol = strstr(h, "\r\n");
	if (!eol) {
		note(g, "gateway refused a request: no request line");
		answer_error(c, P_ANTHROPIC, 400, "invalid_request_error", "runnel gateway: not an HTTP request");
		return -1;
	}
	*eol = '\0';
	char target[2100], version[16];
	if (sscanf(h, "%7s %2099s %15s", r->method, target, version) != 3 || strncmp(version, "HTTP/1.", 7)) {
		note(g, "gateway refused a request: not an HTTP/1.x request line");
		answer_error(c, P_ANTHROPIC, 400, "invalid_request_error", "runnel gateway: not an HTTP request");
		return -1;
	}
	if (!strcmp(version, "HTTP/1.0"))
		r->close = 1;
	if (target[0] != '/') {
		note(g, "gateway refused a request for another host (%.80s)", target);
		answer_error(c, P_ANTHROPIC, 400, "invalid_request_error",
		             "runnel gateway: only requests for the model provider go through this address");
		return -1;
	}
	const char *rest = NULL;
	for (int p = 0; p < P_COUNT; p++) {
		size_t pl = strlen(prov_name[p]);
		if (target[1 + pl - 1] && !strncmp(target + 1, prov_name[p], pl) &&
		    (target[1 + pl] == '/' || target[1 + pl] == '?' || !target[1 + pl])) {
			r->prov = p;
			rest = target + 1 + pl;
			break;
		}
	}
	if (!rest || !g->prov[r->prov].on) {
		note(g, "gateway refused a request for an unknown route (%.80s)", target);
		answer_error(c, P_ANTHROPIC, 404, "not_found_error", "runnel gateway: no such provider route");
		return -1;
	}
	int bad_path = strstr(rest, "/../") || strstr(rest, "/..?") ||
	        (strlen(rest) >= 3 && !strcmp(rest + strlen(rest) - 3, "/..")) || strchr(rest, '#') ||
	        strchr(rest, '\\') || strstr(rest, "%2e") || strstr(rest, "%2E");
	if (bad_path || strlen(rest) >= sizeof(r->path)) {
		note(g, "gateway refused a request with an unusable path");
		answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: unusable request path");
		return -1;
	}
	snprintf(r->path, sizeof(r->path), "%s", rest);
	if (strcmp(r->method, "GET") && strcmp(r->method, "POST")) {
		note(g, "gateway refused a %s request", r->method);
		answer_error(c, r->prov, 405, "invalid_request_error", "runnel gateway: only GET and POST");
		return -1;
	}
	r->clen = -1;
	int host_seen = 0;
	char *line = eol + 2;
	while (*line) {
		char *e = strstr(line, "\r\n");
		if (e)
			*e = '\0';
		char *colon = strchr(line, ':');
		if (!colon || colon == line || line[0] == ' ' || line[0] == '\t' || strchr(line, '\n') ||
		    strchr(line, '\r') || memchr(line, ' ', (size_t)(colon - line))) {
			note(g, "gateway refused a request with a malformed header");
			answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: malformed header");
			return -1;
		}
		size_t nl = (size_t)(colon - line);
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		size_t vl = strlen(v);
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			v[--vl] = '\0';
		if (hdr_is(line, nl, "host")) {
			if (host_seen++ || !host_ok(v)) {
				note(g, "gateway refused a request for another host (%.80s)", v);
				answer_error(c, r->prov, 400, "invalid_request_error",
				             "runnel gateway: only requests for the model provider go through this address");
				return -1;
			}
		} else if (hdr_is(line, nl, "content-length")) {
			char *end;
			long long v2 = strtoll(v, &end, 10);
			if (!*v || *end || v2 < 0 || (r->clen >= 0 && r->clen != v2)) {
				note(g, "gateway refused a request with a bad Content-Length");
				answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: bad Content-Length");
				return -1;
			}
			r->clen = v2;
		} else if (hdr_is(line, nl, "transfer-encoding")) {
			if (strcasecmp(v, "chunked")) {
				note(g, "gateway refused a request with Transfer-Encoding %.40s", v);
				answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: unsupported Transfer-Encoding");
				return -1;
			}
			r->chunked = 1;
		} else if (hdr_is(line, nl, "connection")) {
			if (strcasestr(v, "close"))
				r->close = 1;
		} else if (hdr_is(line, nl, "x-api-key")) {
			snprintf(r->token, sizeof(r->token), "%s", v);
		} else if (hdr_is(line, nl, "authorization")) {
			if (!strncasecmp(v, "Bearer ", 7))
				snprintf(r->token, sizeof(r->token), "%s", v + 7);
		} else if (!hop_header(line, nl)) {
			struct curl_slist *n2 = curl_slist_append(r->hdrs, line);
			if (!n2) {
				answer_error(c, r->prov, 500, "api_error", "runnel gateway: out of memory");
				return -1;
			}
			r->hdrs = n2;
		}
		if (!e)
			break;
		line = e + 2;
	}
	if (r->chunked && r->clen >= 0) {
		note(g, "gateway refused a request with both Content-Length and Transfer-Encoding");
		answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: ambiguous body length");
		return -1;
	}
	/* The placeholder, in constant time; its length is not secret. */
	size_t tl = strlen(r->token), gl = strlen(g->token);
	if (tl != gl || sodium_memcmp(r->token, g->token, gl) != 0) {
		note(g, "gateway refused a request without this run's key");
		answer_error(c, r->prov, 401, "authentication_error",
		             "runnel gateway: the request does not carry this run's key");
		return -1;
	}
	return 0;
}

/* Reads the body (length or chunked) within the cap.  0, or -1 answered. */
static int read_body(conn_t *c, req_t *r)
{
	worker_gateway_t *g = c->g;
	size_t max = g->conf->body_max;
	int64_t deadline = rn_mono_ms() + BODY_TIMEOUT_MS;
	if (r->clen >= 0) {
		if ((unsigned long long)r->clen > max) {
			note(g, "gateway refused a request body of %lld bytes (the cap is %zu)", r->clen, max);
			answer_error(c, r->prov, 413, "request_too_large", "runnel gateway: the request body is too large");
			return -1;
		}
		if (body_reserve(r, (size_t)r->clen + 1) < 0) {
			note(g, "gateway refused a request: too many large bodies at once");
			answer_error(c, r->prov, 503, "overloaded_error", "runnel gateway: too many large requests at once");
			return -1;
		}
		r->blen = (size_t)r->clen;
		r->body = malloc(r->blen + 1);
		if (!r->body || conn_read(c, r->body, r->blen, deadline) < 0) {
			r->blen = r->body ? r->blen : 0;
			return -1;
		}
		r->body[r->blen] = '\0';
		return 0;
	}
	if (!r->chunked)
		return 0;
	size_t cap = 0;
	for (;;) {
		char line[300];
		if (conn_line(c, line, sizeof(line), deadline) < 0)
			return -1;
		char *end;
		unsigned long long n = strtoull(line, &end, 16);
		if (end == line || (*end && *end != ';')) {
			answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: bad chunked body");
			return -1;
		}
		if (n == 0) {
			/* trailers, then the blank line */
			for (;;) {
				ssize_t l = conn_line(c, line, sizeof(line), deadline);
				if (l < 0)
					return -1;
				if (l == 0)
					break;
			}
			if (r->body)
				r->body[r->blen] = '\0';
			return 0;
		}
		if (n > max || r->blen + n > max) {
			note(g, "gateway refused a request body over the cap of %zu bytes", max);
			answer_error(c, r->prov, 413, "request_too_large", "runnel gateway: the request body is too large");
			return -1;
		}
		if (r->blen + n + 1 > cap) {
			size_t nc = cap ? cap : 65536;
			while (nc < r->blen + n + 1)
				nc *= 2;
			if (body_reserve(r, nc) < 0) {
				note(g, "gateway refused a request: too many large bodies at once");
				answer_error(c, r->prov, 503, "overloaded_error", "runnel gateway: too many large requests at once");
				return -1;
			}
			char *nb = malloc(nc);
			if (!nb)
				return -1;
			if (r->body) {
				memcpy(nb, r->body, r->blen);
				sodium_memzero(r->body, r->blen);
				free(r->body);
			}
			r->body = nb;
			cap = nc;
		}
		char crlf[2];
		if (conn_read(c, r->body + r->blen, (size_t)n, deadline) < 0 || conn_read(c, crlf, 2, deadline) < 0 ||
		    memcmp(crlf, "\r\n", 2))
			return -1;
		r->blen += (size_t)n;
	}
}

static int ends_with(const char *path, const char *suffix)
{
	size_t pl = strcspn(path, "?"), sl = strlen(suffix);
	return pl >= sl && !strncmp(path + pl - sl, suffix, sl);
}

/* A call whose answer carries usage. */
static int model_call(const req_t *r)
{
	if (strcmp(r->method, "POST"))
		return 0;
	if (r->prov == P_ANTHROPIC)
		return ends_with(r->path, "/messages");
	return ends_with(r->path, "/chat/completions") || ends_with(r->path, "/responses") ||
	        ends_with(r->path, "/completions");
}

/*
 * What the key may be used for through the gateway: model calls (and
 * counting tokens, embeddings) and the model list.  Everything else a
 * provider's API offers (files, batches, fine-tuning, admin) is refused,
 * so the run cannot spend or read with the key beyond its model calls.
 */
static int route_allowed(const req_t *r)
{
	if (!strcmp(r->method, "GET")) {
		size_t pl = strcspn(r->path, "?");
		const char *m = NULL;
		for (const char *p = r->path; (p = strstr(p, "/models")) && (size_t)(p - r->path) < pl; p++)
			m = p;
		/* .../models or .../models/<id>, nothing below */
		return m && (m[7] == '\0' || m[7] == '?' || (m[7] == '/' && !memchr(m + 8, '/', pl - (size_t)(m + 8 - r->path))));
	}
	return model_call(r) || ends_with(r->path, "/messages/count_tokens") || ends_with(r->path, "/embeddings");
}

/* The answer's state while curl delivers it. */
typedef struct xfer {
	conn_t *c;
	req_t *r;
	int status;
	char reason[64];
	struct curl_slist *resp_hdrs;
	int head_sent;
	int sse;
	int client_gone;
	int64_t t0_us;
	double head_secs;
	proto_usage_call_t *usage;
	int metered;
} xfer_t;

static int send_head(xfer_t *x)
{
	if (x->head_sent)
		return 0;
	x->head_sent = 1;
	char buf[8192];
	size_t o = 0;
	int n = snprintf(buf, sizeof(buf), "HTTP/1.1 %d %s\r\n", x->status, x->reason[0] ? x->reason : "-");
	o = (size_t)n;
	for (struct curl_slist *s = x->resp_hdrs; s; s = s->next) {
		size_t l = strlen(s->data);
		if (o + l + 2 < sizeof(buf) - 128) {
			memcpy(buf + o, s->data, l);
			memcpy(buf + o + l, "\r\n", 2);
			o += l + 2;
		}
	}
	n = snprintf(buf + o, sizeof(buf) - o, "Transfer-Encoding: chunked\r\nConnection: %s\r\n\r\n",
	             x->r->close ? "close" : "keep-alive");
	o += (size_t)n;
	if (send_all(x->c->fd, buf, o) < 0) {
		x->client_gone = 1;
		return -1;
	}
	return 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	xfer_t *x = arg;
	size_t len = size * n;
	size_t l = len;
	while (l && (p[l - 1] == '\r' || p[l - 1] == '\n'))
		l--;
	if (!strncmp(p, "HTTP/", 5)) {
		/* A new response (after a 1xx): start over. */
		curl_slist_free_all(x->resp_hdrs);
		x->resp_hdrs = NULL;
		x->status = 0;
		x->reason[0] = '\0';
		const char *sp = memchr(p, ' ', l);
		if (sp) {
			char *end;
			long st = strtol(sp + 1, &end, 10);
			x->status = st >= 100 && st < 1000 ? (int)st : 502;
			const char *sp2 = memchr(sp + 1, ' ', l - (size_t)(sp + 1 - p));
			if (sp2)
				snprintf(x->reason, sizeof(x->reason), "%.*s", (int)(l - (size_t)(sp2 + 1 - p)), sp2 + 1);
		}
		if (!x->head_secs)
			x->head_secs = (double)(rn_mono_us() - x->t0_us) / 1e6;
		return len;
	}
	if (!l)
		return len;
	const char *colon = memchr(p, ':', l);
	if (!colon)
		return len;
	size_t nl = (size_t)(colon - p);
	static const char *const drop[] = { "connection", "keep-alive", "transfer-encoding", "content-length",
		                            "te", "trailer", "upgrade", "proxy-connection", "alt-svc" };
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
		if (hdr_is(p, nl, drop[i]))
			return len;
	if (hdr_is(p, nl, "content-type")) {
		const char *v = colon + 1;
		while (*v == ' ')
			v++;
		x->sse = !strncasecmp(v, "text/event-stream", 17);
	}
	char line[4096];
	if (l < sizeof(line)) {
		memcpy(line, p, l);
		line[l] = '\0';
		struct curl_slist *s = curl_slist_append(x->resp_hdrs, line);
		if (s)
			x->resp_hdrs = s;
	}
	return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	xfer_t *x = arg;
	size_t len = size * n;
	if (x->status < 200)
		return len;
	if (x->metered) {
		if (!x->usage)
			x->usage = proto_usage_call_new(x->r->prov == P_ANTHROPIC ? PROTO_USAGE_ANTHROPIC : PROTO_USAGE_OPENAI,
			                                x->sse, USAGE_EVENT_CAP);
		proto_usage_call_feed(x->usage, p, len);
	}
	if (x->client_gone || send_head(x) < 0)
		return 0;
	if (!len)
		return 0;
	char hex[24];
	int hl = snprintf(hex, sizeof(hex), "%zx\r\n", len);
	struct iovec iov[3] = { { hex, (size_t)hl }, { p, len }, { (void *)"\r\n", 2 } };
	size_t total = (size_t)hl + len + 2, done = 0;
	int idx = 0;
	struct msghdr mh;
	while (done < total) {
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = iov + idx;
		mh.msg_iovlen = (size_t)(3 - idx);
		ssize_t w = sendmsg(x->c->fd, &mh, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			x->client_gone = 1;
			return 0;
		}
		done += (size_t)w;
		size_t k = (size_t)w;
		while (idx < 3 && k >= iov[idx].iov_len) {
			k -= iov[idx].iov_len;
			idx++;
		}
		if (idx < 3) {
			iov[idx].iov_base = (char *)iov[idx].iov_base + k;
			iov[idx].iov_len -= k;
		}
	}
	return len;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d)
{
	(void)a;
	(void)b;
	(void)c2;
	(void)d;
	xfer_t *x = arg;
	pthread_mutex_lock(&x->c->g->mu);
	int stop = x->c->g->stopping;
	pthread_mutex_unlock(&x->c->g->mu);
	return stop || x->client_gone;
}

/* Adds stream_options.include_usage to a streamed Chat Completions call
 * that did not ask for it.  The body is replaced when changed. */
static void want_usage(req_t *r)
{
	if (r->prov != P_OPENAI || !ends_with(r->path, "/chat/completions"))
		return;
	json_t *j = json_loadb(r->body, r->blen, 0, NULL);
	if (!json_is_object(j) || !json_is_true(json_object_get(j, "stream")) ||
	    json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage"))) {
		json_decref(j);
		return;
	}
	json_t *so = json_object_get(j, "stream_options");
	if (!json_is_object(so)) {
		so = json_object();
		json_object_set_new(j, "stream_options", so);
	}
	json_object_set_new(so, "include_usage", json_true());
	char *nb = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!nb)
		return;
	sodium_memzero(r->body, r->blen);
	free(r->body);
	r->body = nb;
	r->blen = strlen(nb);
}

/* Books a finished call: the sum, the tenant's count, the metrics, the
 * budget. */
static void book(worker_gateway_t *g, xfer_t *x, const char *req_model)
{
	proto_usage_t u;
	char model[PROTO_USAGE_MODEL_MAX];
	int rc = proto_usage_call_finish(x->usage, &u, model, sizeof(model));
	u.requests = 1; /* also a call that got no answer at all */
	if (!model[0] && req_model)
		snprintf(model, sizeof(model), "%s", req_model);
	if (rc < 0)
		note(g, "gateway: a %s answer had an event too large to read its usage", prov_name[x->r->prov]);
	pthread_mutex_lock(&g->mu);
	proto_usage_add(&g->usage, &u);
	uint64_t total = proto_usage_budget_tokens(&g->usage);
	int crossed = g->max_tokens > 0 && total > (uint64_t)g->max_tokens && !g->over;
	if (crossed)
		g->over = 1;
	pthread_mutex_unlock(&g->mu);
	count_tokens(g, model, "input", u.input_tokens);
	count_tokens(g, model, "output", u.output_tokens);
	count_tokens(g, model, "cache_read", u.cache_read_input_tokens);
	count_tokens(g, model, "cache_creation", u.cache_creation_input_tokens);
	tenant_charge(g, proto_usage_budget_tokens(&u));
	if (crossed || worker_gateway_over_budget(g))
		wake(g);
}

/* Handles one request; 0 to keep the connection, -1 to close it. */
static int handle(conn_t *c, req_t *r)
{
	worker_gateway_t *g = c->g;
	provider_t *pv = &g->prov[r->prov];
	if (read_body(c, r) < 0)
		return -1;
	if (!route_allowed(r)) {
		note(g, "gateway refused a %s %s call to %.80s: not a model call", prov_name[r->prov], r->method, r->path);
		answer_error(c, r->prov, 403, "permission_error", "runnel gateway: only model calls go through this gateway");
		return -1;
	}
	int metered = model_call(r);
	char req_model[PROTO_USAGE_MODEL_MAX] = "";
	if (metered) {
		json_t *j = r->body ? json_loadb(r->body, r->blen, 0, NULL) : NULL;
		if (!json_is_object(j)) {
			json_decref(j);
			note(g, "gateway refused a %s call whose body is not a JSON object", prov_name[r->prov]);
			answer_error(c, r->prov, 400, "invalid_request_error", "runnel gateway: the request body is not JSON");
			return -1;
		}
		const char *m = json_string_value(json_object_get(j, "model"));
		if (m)
			snprintf(req_model, sizeof(req_model), "%s", m);
		json_decref(j);
		int over = worker_gateway_over_budget(g);
		if (!over && tenant_over(g)) {
			pthread_mutex_lock(&g->mu);
			if (!g->over)
				g->over = 2;
			pthread_mutex_unlock(&g->mu);
			over = 2;
		}
		if (over) {
			char msg[256];
			worker_gateway_budget_message(g, msg, sizeof(msg));
			note(g, "gateway refused a %s call: %s", prov_name[r->prov], msg);
			answer_error(c, r->prov, 400, "invalid_request_error", msg);
			wake(g);
			return -1;
		}
		want_usage(r);
	}
	size_t ul = strlen(pv->base) + strlen(r->path) + 1;
	char *url = malloc(ul);
	if (!url)
		return -1;
	snprintf(url, ul, "%s%s", pv->base, r->path);

	if (!c->curl && !(c->curl = curl_easy_init())) {
		free(url);
		return -1;
	}
	CURL *h = c->curl;
	curl_easy_reset(h);
	struct curl_slist *hdrs = r->hdrs;
	r->hdrs = NULL;
	char auth[600] = "";
	if (pv->key) {
		snprintf(auth, sizeof(auth), pv->bearer ? "Authorization: Bearer %s" : "x-api-key: %s", pv->key);
		struct curl_slist *s = curl_slist_append(hdrs, auth);
		sodium_memzero(auth, sizeof(auth));
		if (s)
			hdrs = s;
	}
	struct curl_slist *s = curl_slist_append(hdrs, "Expect:");
	if (s)
		hdrs = s;
	/* A base URL the run supplied: every address libcurl connects to is
	 * checked (common/netaddr.h), so DNS that changes after the start
	 * check gains nothing. */
	worker_httpc_reach_t rule = {
		.on = pv->run_url, .named = g->conf->allow, .nnamed = g->conf->nallow, .own = g->conf->own
	};
	worker_httpc_reach_state_t rst;
	memset(&rst, 0, sizeof(rst));
	xfer_t x;
	memset(&x, 0, sizeof(x));
	x.c = c;
	x.r = r;
	x.metered = metered;
	x.t0_us = rn_mono_us();
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	worker_httpc_reach(h, &rule, &rst);
	if (!strcmp(r->method, "POST")) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->blen);
	}
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, g->conf->timeout_sec > 0 ? g->conf->timeout_sec : 600L);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	/* No proxy from the worker's environment: the upstream is reached
	 * directly (the check above is about that address). */
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	CURLcode cc = curl_easy_perform(h);
	free(url);
	curl_slist_free_all(hdrs);
	int keep = 0;
	/* Booked before the agent sees the answer end: its next call already
	 * meets the new totals (and the budget). */
	if (metered)
		book(g, &x, req_model);
	if (cc == CURLE_OK && x.status >= 200) {
		if (send_head(&x) == 0 && send_all(c->fd, "0\r\n\r\n", 5) == 0)
			keep = !r->close;
		count_request(g, r->prov, x.status, x.head_secs);
	} else if (!x.head_sent && !x.client_gone) {
		int to = cc == CURLE_OPERATION_TIMEDOUT;
		if (rst.refused[0])
			note(g, "gateway refused a %s call: %s reaches %s, which this worker's allowlist does not name",
			     prov_name[r->prov], pv->var, rst.refused);
		else
			note(g, "gateway: the %s call failed: %s", prov_name[r->prov], curl_easy_strerror(cc));
		answer_error(c, r->prov, to ? 504 : 502, "api_error",
		             to ? "runnel gateway: the provider did not answer in time"
		                : "runnel gateway: the provider could not be reached");
		count_request(g, r->prov, 0, -1);
	} else {
		/* Cut mid-answer: the agent sees the stream end early, as it
		 * would from the provider. */
		if (!x.client_gone)
			note(g, "gateway: the %s answer was cut: %s", prov_name[r->prov], curl_easy_strerror(cc));
		count_request(g, r->prov, x.status, x.head_secs);
	}
	curl_slist_free_all(x.resp_hdrs);
	proto_usage_call_free(x.usage);
	return keep ? 0 : -1;
}

static void serve(conn_t *c)
{
	struct timeval tv = { SEND_TIMEOUT_SEC, 0 };
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	for (;;) {
		/* The head: everything up to the blank line. */
		int64_t deadline = rn_mono_ms() + IDLE_TIMEOUT_MS;
		size_t hl = 0;
		for (;;) {
			char *e = c->inlen >= 4 ? memmem(c->in, c->inlen, "\r\n\r\n", 4) : NULL;
			if (e) {
				hl = (size_t)(e - c->in) + 4;
				break;
			}
			ssize_t n = conn_fill(c, deadline);
			if (n < 0) {
				note(c->g, "gateway refused a request head over %d bytes", WORKER_GATEWAY_HEAD_MAX);
				answer_error(c, P_ANTHROPIC, 431, "invalid_request_error", "runnel gateway: request head too large");
				return;
			}
			if (n == 0)
				return;
			/* Once a head starts, it has the body's deadline. */
			deadline = rn_mono_ms() + BODY_TIMEOUT_MS;
		}
		req_t r;
		memset(&r, 0, sizeof(r));
		r.g = c->g;
		int rc = parse_head(c, hl, &r);
		if (rc == 0) {
			memmove(c->in, c->in + hl, c->inlen - hl);
			c->inlen -= hl;
			rc = handle(c, &r);
		}
		req_clear(&r);
		if (rc < 0)
			return;
	}
}

/*
 * Connection threads are joinable and joined: by the acceptor once they
 * finished (their slot is then free again), and by stop_calls.  A thread
 * that has only been counted out may still be running its exit (libcurl's
 * and OpenSSL's thread state): nothing of it outlives the gateway.
 */
static void reap(worker_gateway_t *g, int all)
{
	pthread_t t[WORKER_GATEWAY_CONN_MAX];
	size_t n = 0;
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < WORKER_GATEWAY_CONN_MAX; i++)
		if (g->slot[i].used && (g->slot[i].finished || all)) {
			t[n++] = g->slot[i].t;
			g->slot[i].used = 0;
			g->slot[i].finished = 0;
			g->slot[i].fd = -1;
		}
	pthread_mutex_unlock(&g->mu);
	for (size_t i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

static void *conn_main(void *arg)
{
	conn_t *c = arg;
	worker_gateway_t *g = c->g;
	serve(c);
	if (c->curl)
		curl_easy_cleanup(c->curl);
	/* An agent may still be sending the body a 413 or 401 refused. */
	rn_linger(c->fd, LINGER_MS, LINGER_MAX);
	pthread_mutex_lock(&g->mu);
	g->slot[c->slot].fd = -1;
	close(c->fd);
	g->slot[c->slot].finished = 1;
	g->nconn--;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	sodium_memzero(c->in, sizeof(c->in));
	free(c);
	return NULL;
}

/* Starts the thread of a new connection in a free slot; -1 when full. */
static int conn_start(worker_gateway_t *g, int fd)
{
	conn_t *c = calloc(1, sizeof(*c));
	if (!c)
		return -1;
	c->g = g;
	c->fd = fd;
	pthread_mutex_lock(&g->mu);
	int rc = -1;
	for (size_t i = 0; !g->stopping && i < WORKER_GATEWAY_CONN_MAX; i++) {
		if (g->slot[i].used)
			continue;
		c->slot = i;
		g->slot[i].fd = fd;
		g->slot[i].used = 1;
		g->nconn++;
		if (rn_thread_start(&g->slot[i].t, "runnel-gateway", 1024 * 1024, 0, conn_main, c) == 0) {
			rc = 0;
		} else {
			g->slot[i].used = 0;
			g->slot[i].fd = -1;
			g->nconn--;
		}
		break;
	}
	pthread_mutex_unlock(&g->mu);
	if (rc < 0)
		free(c);
	return rc;
}

static void *accept_main(void *arg)
{
	worker_gateway_t *g = arg;
	for (;;) {
		struct pollfd p[3] = { { g->stop_fd, POLLIN, 0 }, { g->lfd, POLLIN, 0 }, { g->tfd, POLLIN, 0 } };
		int pr = poll(p, 3, -1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0 || p[0].revents)
			break;
		reap(g, 0);
		for (int i = 1; i < 3; i++) {
			if (!p[i].revents || p[i].fd < 0)
				continue;
			int fd = accept4(p[i].fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd < 0)
				continue;
			if (i == 2) {
				int one = 1;
				setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
			}
			if (conn_start(g, fd) == 0)
				continue;
			static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
			send_all(fd, busy, sizeof(busy) - 1);
			close(fd);
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------------
 * Opening: the /env rewrite and the listeners
 * ------------------------------------------------------------------------ */

/* Removes a variable, wiping its value first. */
static void var_wipe(json_t *vars, const char *name)
{
	json_t *v = json_object_get(vars, name);
	if (json_is_string(v)) {
		char *s = (char *)json_string_value(v);
		sodium_memzero(s, strlen(s));
	}
	json_object_del(vars, name);
}

static char *var_dup(const json_t *vars, const char *name)
{
	const char *s = json_string_value(json_object_get(vars, name));
	return s && *s ? strdup(s) : NULL;
}

static int listen_unix(worker_gateway_t *g, const char *dir, char *errstr, size_t errstr_size)
{
	int n = snprintf(g->sock_path, sizeof(g->sock_path), "%s/gateway.sock", dir);
	if (n < 0 || (size_t)n >= sizeof(g->sock_path)) {
		snprintf(errstr, errstr_size, "the gateway's socket path is too long");
		return -1;
	}
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	int dfd = -1;
	if (strlen(g->sock_path) < sizeof(sa.sun_path)) {
		memcpy(sa.sun_path, g->sock_path, strlen(g->sock_path) + 1);
	} else {
		/* A deep work directory: bind through the directory's fd. */
		dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0) {
			snprintf(errstr, errstr_size, "the gateway's socket path is not usable");
			return -1;
		}
		snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/gateway.sock", dfd);
	}
	g->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	unlink(g->sock_path);
	int ok = g->lfd >= 0 && bind(g->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && chmod(g->sock_path, 0600) == 0 &&
	        listen(g->lfd, 64) == 0;
	if (dfd >= 0)
		close(dfd);
	if (!ok) {
		snprintf(errstr, errstr_size, "the gateway cannot listen on its socket: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int listen_tcp(worker_gateway_t *g, char *errstr, size_t errstr_size)
{
	struct sockaddr_in in;
	memset(&in, 0, sizeof(in));
	in.sin_family = AF_INET;
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(in);
	g->tfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g->tfd < 0 || bind(g->tfd, (struct sockaddr *)&in, sizeof(in)) != 0 || listen(g->tfd, 64) != 0 ||
	    getsockname(g->tfd, (struct sockaddr *)&in, &sl) != 0) {
		snprintf(errstr, errstr_size, "the gateway cannot listen on loopback: %s", strerror(errno));
		return -1;
	}
	g->tcp_port = ntohs(in.sin_port);
	return 0;
}

void worker_gateway_placeholder(char *out, size_t size)
{
	unsigned char rnd[TOKEN_RANDOM_BYTES];
	randombytes_buf(rnd, sizeof(rnd));
	char b64[64];
	sodium_bin2base64(b64, sizeof(b64), rnd, sizeof(rnd), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(rnd, sizeof(rnd));
	snprintf(out, size, "%s%s", WORKER_GATEWAY_PLACEHOLDER_PREFIX, b64);
	sodium_memzero(b64, sizeof(b64));
}

int worker_gateway_open(const worker_gateway_conf_t *conf, const worker_gateway_args_t *a, worker_gateway_t **out,
                        char *errstr, size_t errstr_size)
{
	*out = NULL;
	json_t *vars = a->variables;
	worker_gateway_t *g = calloc(1, sizeof(*g));
	if (!g) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	g->conf = conf;
	g->lfd = g->tfd = g->stop_fd = -1;
	g->wake_fd = a->wake_fd;
	g->host_net = a->host_net;
	g->max_tokens = a->max_tokens;
	for (size_t i = 0; i < WORKER_GATEWAY_CONN_MAX; i++)
		g->slot[i].fd = -1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	snprintf(g->run_id, sizeof(g->run_id), "%s", a->run_id);
	snprintf(g->tenant, sizeof(g->tenant), "%s", a->tenant && *a->tenant ? a->tenant : "default");
	g->tenant_budget = conf->tenant_tokens_per_hour;
	for (size_t i = 0; i < conf->ntenant; i++)
		if (!strcmp(conf->tenant_names[i], g->tenant))
			g->tenant_budget = conf->tenant_budgets[i];

	/* The keys, then every credential out of the variables. */
	char *anth_key = var_dup(vars, "ANTHROPIC_API_KEY");
	char *anth_tok = var_dup(vars, "ANTHROPIC_AUTH_TOKEN");
	char *oai_key = var_dup(vars, "OPENAI_API_KEY");
	provider_t *pa = &g->prov[P_ANTHROPIC], *po = &g->prov[P_OPENAI];
	if (anth_key) {
		pa->key = anth_key;
		anth_key = NULL;
	} else if (anth_tok) {
		pa->key = anth_tok;
		pa->bearer = 1;
		anth_tok = NULL;
	} else if (conf->anthropic_key && *conf->anthropic_key) {
		pa->key = strdup(conf->anthropic_key);
	}
	if (oai_key) {
		po->key = oai_key;
		oai_key = NULL;
	} else if (conf->openai_key && *conf->openai_key) {
		po->key = strdup(conf->openai_key);
	}
	po->bearer = 1;
	if (anth_tok) {
		sodium_memzero(anth_tok, strlen(anth_tok));
		free(anth_tok);
	}
	static const char *const model_vars[] = { "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY" };
	for (size_t i = 0; i < sizeof(model_vars) / sizeof(model_vars[0]); i++)
		var_wipe(vars, model_vars[i]);
	for (size_t i = 0; i < conf->nsecrets; i++)
		var_wipe(vars, conf->secrets[i]);

	const char *op_base[P_COUNT] = { conf->anthropic_base, conf->openai_base };
	const char *def_base[P_COUNT] = { DEFAULT_ANTHROPIC, DEFAULT_OPENAI };
	int any = 0;
	for (int p = 0; p < P_COUNT; p++) {
		provider_t *pv = &g->prov[p];
		char *run_base = var_dup(vars, prov_base_var[p]);
		pv->on = pv->key || run_base;
		pv->var = prov_base_var[p];
		if (!pv->on) {
			free(run_base);
			continue;
		}
		any = 1;
		if (run_base) {
			pv->base = run_base;
			pv->run_url = 1;
		} else {
			pv->base = strdup(op_base[p] && *op_base[p] ? op_base[p] : def_base[p]);
		}
		if (!pv->base) {
			snprintf(errstr, errstr_size, "out of memory");
			goto fail;
		}
		size_t bl = strlen(pv->base);
		while (bl && pv->base[bl - 1] == '/')
			pv->base[--bl] = '\0';
		char why[300];
		if (pv->run_url && check_url(conf, pv->base, why, sizeof(why)) < 0) {
			snprintf(errstr, errstr_size, "%s %s", pv->var, why);
			goto fail;
		}
	}
	if (!any) {
		worker_gateway_stop(g);
		return 0;
	}
	if (!a->host_net && (!conf->bridge_path || !conf->bridge_path[0])) {
		snprintf(errstr, errstr_size, "this worker has no runnel-egress-bridge for the model gateway (set RUNNEL_EGRESS_BRIDGE)");
		goto fail;
	}

	/* The placeholder: random, this run's only (a warm agent's was minted
	 * when it started, and no other run ever gets it). */
	if (a->token && !strncmp(a->token, WORKER_GATEWAY_PLACEHOLDER_PREFIX, strlen(WORKER_GATEWAY_PLACEHOLDER_PREFIX)) &&
	    strlen(a->token) < sizeof(g->token))
		snprintf(g->token, sizeof(g->token), "%s", a->token);
	else
		worker_gateway_placeholder(g->token, sizeof(g->token));

	g->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g->stop_fd < 0) {
		snprintf(errstr, errstr_size, "the gateway cannot start: %s", strerror(errno));
		goto fail;
	}
	if (a->host_net ? listen_tcp(g, errstr, errstr_size) < 0 : listen_unix(g, a->meta_dir, errstr, errstr_size) < 0)
		goto fail;
	char base[96];
	/* In a sandbox of its own, "localhost": the egress proxy's NO_PROXY
	 * names it, while 127.0.0.1 may mean the host's loopback through the
	 * proxy (worker/sandbox.c). */
	if (a->host_net)
		snprintf(base, sizeof(base), "http://127.0.0.1:%d", g->tcp_port);
	else
		snprintf(base, sizeof(base), "http://localhost:%d", WORKER_GATEWAY_PORT);
	for (int p = 0; p < P_COUNT; p++) {
		if (!g->prov[p].on)
			continue;
		char u[128];
		snprintf(u, sizeof(u), "%s/%s", base, prov_name[p]);
		const char *kv = p == P_OPENAI ? "OPENAI_API_KEY" : g->prov[p].bearer ? "ANTHROPIC_AUTH_TOKEN"
		                                                                      : "ANTHROPIC_API_KEY";
		if (json_object_set_new(vars, prov_base_var[p], json_string(u)) < 0 ||
		    json_object_set_new(vars, kv, json_string(g->token)) < 0) {
			snprintf(errstr, errstr_size, "out of memory");
			goto fail;
		}
	}
	if (rn_thread_start(&g->acceptor, "runnel-gateway", 0, 0, accept_main, g) != 0) {
		snprintf(errstr, errstr_size, "the gateway cannot start its thread");
		goto fail;
	}
	g->acceptor_started = 1;
	rn_log_info(g->run_id, "gateway", "model gateway on %s for%s%s", a->host_net ? base : "the sandbox's bridge",
	            g->prov[P_ANTHROPIC].on ? " anthropic" : "", g->prov[P_OPENAI].on ? " openai" : "");
	*out = g;
	return 0;
fail:
	worker_gateway_stop(g);
	return -1;
}

int worker_gateway_wrap(const worker_gateway_t *g, rn_strv_t *argv, rn_strv_t *ro_binds)
{
	if (!g || g->host_net)
		return 0;
	rn_strv_t n = { 0 };
	if (rn_strv_add(&n, RN_SANDBOX_GATEWAY_BRIDGE) < 0 || rn_strv_addf(&n, "%d", WORKER_GATEWAY_PORT) < 0 ||
	    rn_strv_add(&n, RN_SANDBOX_GATEWAY_SOCK) < 0)
		goto oom;
	for (size_t i = 0; i < argv->n; i++)
		if (rn_strv_add(&n, argv->v[i]) < 0)
			goto oom;
	if (rn_strv_addf(ro_binds, "%s:%s", g->conf->bridge_path, RN_SANDBOX_GATEWAY_BRIDGE) < 0 ||
	    rn_strv_addf(ro_binds, "%s:%s", g->sock_path, RN_SANDBOX_GATEWAY_SOCK) < 0)
		goto oom;
	rn_strv_free(argv);
	*argv = n;
	return 0;
oom:
	rn_strv_free(&n);
	return -1;
}

int worker_gateway_hand_to(worker_gateway_t *g, uid_t uid, gid_t gid)
{
	if (!g || g->lfd < 0 || !g->sock_path[0])
		return 0;
	if (lchown(g->sock_path, uid, gid) != 0) {
		rn_log_error(g->run_id, "gateway", "cannot hand the gateway socket to uid %ld: %s", (long)uid, strerror(errno));
		return -1;
	}
	return 0;
}

void worker_gateway_usage(worker_gateway_t *g, proto_usage_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	*out = g->usage;
	pthread_mutex_unlock(&g->mu);
}

int worker_gateway_over_budget(worker_gateway_t *g)
{
	if (!g)
		return 0;
	pthread_mutex_lock(&g->mu);
	int o = g->over;
	pthread_mutex_unlock(&g->mu);
	return o;
}

void worker_gateway_budget_message(worker_gateway_t *g, char *buf, size_t size)
{
	pthread_mutex_lock(&g->mu);
	int o = g->over;
	uint64_t used = proto_usage_budget_tokens(&g->usage);
	int64_t tused = g->tenant_used;
	pthread_mutex_unlock(&g->mu);
	if (o == 2)
		snprintf(buf, size, "The tenant \"%s\" used %lld tokens this hour, its budget is %lld tokens.", g->tenant,
		         (long long)tused, (long long)g->tenant_budget);
	else
		snprintf(buf, size, "The run used %llu tokens, over its budget of %lld tokens.", (unsigned long long)used,
		         (long long)g->max_tokens);
}

void worker_gateway_drain(worker_gateway_t *g, void (*fn)(const char *note, void *arg), void *arg)
{
	if (!g)
		return;
	char *taken[NOTES_MAX];
	pthread_mutex_lock(&g->mu);
	size_t n = g->nnotes;
	memcpy(taken, g->notes, n * sizeof(taken[0]));
	g->nnotes = 0;
	uint64_t lost = g->notes_lost;
	g->notes_lost = 0;
	pthread_mutex_unlock(&g->mu);
	for (size_t i = 0; i < n; i++) {
		fn(taken[i], arg);
		free(taken[i]);
	}
	if (lost) {
		char buf[96];
		snprintf(buf, sizeof(buf), "gateway: %llu more notes not shown", (unsigned long long)lost);
		fn(buf, arg);
	}
}

void worker_gateway_stop_calls(worker_gateway_t *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	g->stopping = 1;
	pthread_mutex_unlock(&g->mu);
	if (g->acceptor_started) {
		uint64_t one = 1;
		ssize_t w = write(g->stop_fd, &one, sizeof(one));
		(void)w;
		pthread_join(g->acceptor, NULL);
		g->acceptor_started = 0;
	}
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < WORKER_GATEWAY_CONN_MAX; i++)
		if (g->slot[i].fd >= 0)
			shutdown(g->slot[i].fd, SHUT_RDWR);
	while (g->nconn > 0)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	reap(g, 1);
}

void worker_gateway_stop(worker_gateway_t *g)
{
	if (!g)
		return;
	worker_gateway_stop_calls(g);
	if (g->lfd >= 0) {
		close(g->lfd);
		unlink(g->sock_path);
	}
	if (g->tfd >= 0)
		close(g->tfd);
	if (g->stop_fd >= 0)
		close(g->stop_fd);
	rn_rcluster_free(g->redis);
	for (int p = 0; p < P_COUNT; p++) {
		if (g->prov[p].key) {
			sodium_memzero(g->prov[p].key, strlen(g->prov[p].key));
			free(g->prov[p].key);
		}
		free(g->prov[p].base);
	}
	for (size_t i = 0; i < g->nnotes; i++)
		free(g->notes[i]);
	sodium_memzero(g->token, sizeof(g->token));
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}
