/*
 * worker/egress.c - the per-run HTTP CONNECT proxy of the `allowlist`
 * egress policy, and the host[:port] patterns it checks (see egress.h).
 *
 * Threads, not the run's poll loop: a connection blocks in DNS and in
 * connect(), and a tunnel lives as long as the agent's model call.  Each
 * thread owns its two sockets; stop shuts them down so that every blocked
 * read returns, then waits for the count to reach zero.
 */
#include "worker/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/io.h"
#include "common/util.h"

#define NOTES_MAX          100
#define HEAD_TIMEOUT_MS    10000
#define CONNECT_TIMEOUT_MS 10000
#define RELAY_CHUNK        (16 * 1024)

/* ------------------------------------------------------------------------
 * Patterns
 * ------------------------------------------------------------------------ */

typedef struct pat {
	char host[256]; /* without brackets; "*" or "*.suffix" for wildcards */
	int port;       /* 0: 80 and 443 */
} pat_t;

static int host_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	        c == '.' || c == '-' || c == '_';
}

static int parse_port(const char *s, int *port)
{
	if (!*s || strlen(s) > 5)
		return -1;
	int v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*port = v;
	return 0;
}

/* The host of "[v6]" or "[v6]:port" (s at the '['), not empty, into host;
 * *port at the port's digits, or left NULL when none.  0 or -1. */
static int split_bracketed(const char *s, char *host, size_t hsz, const char **port)
{
	const char *rb = strchr(s, ']');
	if (!rb || rb == s + 1 || (size_t)(rb - s - 1) >= hsz)
		return -1;
	size_t hl = (size_t)(rb - s - 1);
	memcpy(host, s + 1, hl);
	host[hl] = '\0';
	if (rb[1] == ':')
		*port = rb + 2;
	else if (rb[1])
		return -1;
	return 0;
}

/* host[:port], *.suffix[:port], *, [v6][:port].  0 or -1. */
static int pat_parse(const char *s, pat_t *p)
{
	memset(p, 0, sizeof(*p));
	if (!s || !*s || strlen(s) >= sizeof(p->host))
		return -1;
	const char *port = NULL;
	if (s[0] == '[') {
		if (split_bracketed(s, p->host, sizeof(p->host), &port) < 0)
			return -1;
		for (const char *c = p->host; *c; c++)
			if (!strchr("0123456789abcdefABCDEF:.", *c))
				return -1;
	} else {
		const char *colon = strchr(s, ':');
		if (colon && strchr(colon + 1, ':'))
			return -1; /* a bare IPv6 address: write it in brackets */
		size_t hl = colon ? (size_t)(colon - s) : strlen(s);
		if (!hl)
			return -1;
		memcpy(p->host, s, hl);
		p->host[hl] = '\0';
		if (colon)
			port = colon + 1;
		const char *h = p->host;
		if (!strcmp(h, "*")) {
			/* anything */
		} else {
			if (!strncmp(h, "*.", 2))
				h += 2;
			if (!*h || *h == '.')
				return -1;
			for (const char *c = h; *c; c++)
				if (!host_char_ok(*c))
					return -1;
		}
	}
	if (port && parse_port(port, &p->port) < 0)
		return -1;
	return 0;
}

int worker_egress_pattern_ok(const char *pattern)
{
	pat_t p;
	return pat_parse(pattern, &p);
}

static int port_ok(int pat_port, int port)
{
	return pat_port ? pat_port == port : (port == 80 || port == 443);
}

/* 1 when name ends with ".suffix" and has something before it. */
static int below(const char *name, const char *suffix)
{
	size_t nl = strlen(name), sl = strlen(suffix);
	return nl > sl + 1 && name[nl - sl - 1] == '.' && !strcasecmp(name + nl - sl, suffix);
}

static int host_ok(const char *pat_host, const char *host)
{
	if (!strcmp(pat_host, "*"))
		return 1;
	if (!strncmp(pat_host, "*.", 2))
		return below(host, pat_host + 2);
	return !strcasecmp(pat_host, host);
}

int worker_egress_pattern_exact(const char *pattern)
{
	pat_t p;
	return pattern && pattern[0] != '@' && pat_parse(pattern, &p) == 0 && p.host[0] != '*';
}

int worker_egress_match(const char *pattern, const char *host, int port)
{
	pat_t p;
	if (pat_parse(pattern, &p) < 0 || !host || !*host)
		return 0;
	return port_ok(p.port, port) && host_ok(p.host, host);
}

int worker_egress_covers(const char *outer, const char *inner)
{
	pat_t o, i;
	if (pat_parse(outer, &o) < 0 || pat_parse(inner, &i) < 0)
		return 0;
	int ports = i.port ? port_ok(o.port, i.port) : o.port == 0;
	if (!ports)
		return 0;
	if (!strcmp(o.host, "*"))
		return 1;
	if (!strcmp(i.host, "*"))
		return 0;
	if (!strncmp(i.host, "*.", 2)) {
		if (strncmp(o.host, "*.", 2))
			return 0;
		return !strcasecmp(i.host + 2, o.host + 2) || below(i.host + 2, o.host + 2);
	}
	return host_ok(o.host, i.host);
}

/* ------------------------------------------------------------------------
 * The proxy
 * ------------------------------------------------------------------------ */

struct worker_egress {
	int lfd;
	int note_fd; /* eventfd: notes waiting */
	int stop_fd; /* eventfd: the acceptor stops */
	pthread_t acceptor;
	int acceptor_started;
	char run_id[80];
	char sock_path[4096];
	char **allow;
	size_t nallow;
	char **named;
	size_t nnamed;
	const rn_netaddr_set_t *own;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nconn;
	int stopping;
	int fds[WORKER_EGRESS_CONN_MAX * 2]; /* sockets to shut down on stop */
	char *notes[NOTES_MAX];
	size_t nnotes;
	uint64_t notes_lost;
};

typedef struct conn {
	worker_egress_t *e;
	int cfd;
	int ufd;
} conn_t;

static void note(worker_egress_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(worker_egress_t *e, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	rn_log_info(e->run_id, "egress", "%s", buf);
	pthread_mutex_lock(&e->mu);
	if (e->nnotes < NOTES_MAX) {
		char *d = strdup(buf);
		if (d)
			e->notes[e->nnotes++] = d;
		else
			e->notes_lost++;
	} else {
		e->notes_lost++;
	}
	pthread_mutex_unlock(&e->mu);
	uint64_t one = 1;
	ssize_t w = write(e->note_fd, &one, sizeof(one));
	(void)w;
}

/* Remembers fd for stop; -1 when stopping (the caller closes and leaves). */
static int track(worker_egress_t *e, int fd)
{
	int rc = -1;
	pthread_mutex_lock(&e->mu);
	if (!e->stopping) {
		for (size_t i = 0; i < sizeof(e->fds) / sizeof(e->fds[0]); i++) {
			if (e->fds[i] < 0) {
				e->fds[i] = fd;
				rc = 0;
				break;
			}
		}
	}
	pthread_mutex_unlock(&e->mu);
	return rc;
}

static void untrack_close(worker_egress_t *e, int fd)
{
	if (fd < 0)
		return;
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < sizeof(e->fds) / sizeof(e->fds[0]); i++)
		if (e->fds[i] == fd)
			e->fds[i] = -1;
	pthread_mutex_unlock(&e->mu);
	close(fd);
}

static void answer(int fd, const char *status, const char *text)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf),
	                 "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n%s",
	                 status, strlen(text), text);
	if (n > 0 && (size_t)n < sizeof(buf))
		rn_write_all(fd, buf, (size_t)n, RN_IO_SOCKET);
}

/* Reads until the end of the head; returns its length (including the blank
 * line), 0 on EOF/timeout/overflow.  *got = bytes in buf. */
static size_t read_head(int fd, char *buf, size_t cap, size_t *got)
{
	int64_t deadline = rn_mono_ms() + HEAD_TIMEOUT_MS;
	*got = 0;
	while (*got < cap) {
		int64_t left = deadline - rn_mono_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { fd, POLLIN, 0 };
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return 0;
		ssize_t n = recv(fd, buf + *got, cap - *got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		*got += (size_t)n;
		for (size_t i = *got >= (size_t)n + 3 ? *got - (size_t)n - 3 : 0; i + 3 < *got; i++)
			if (!memcmp(buf + i, "\r\n\r\n", 4))
				return i + 4;
	}
	return 0;
}

/* Splits "host:port" or "[v6]:port" (port required when need_port). */
static int split_target(const char *t, size_t len, char *host, size_t hsz, int *port, int defport)
{
	char tmp[300];
	if (len == 0 || len >= sizeof(tmp))
		return -1;
	memcpy(tmp, t, len);
	tmp[len] = '\0';
	const char *ps = NULL;
	if (tmp[0] == '[') {
		if (split_bracketed(tmp, host, hsz, &ps) < 0)
			return -1;
	} else {
		char *c = strrchr(tmp, ':');
		if (c) {
			*c = '\0';
			ps = c + 1;
		}
		if ((size_t)snprintf(host, hsz, "%s", tmp) >= hsz)
			return -1;
		for (const char *h = host; *h; h++)
			if (!host_char_ok(*h))
				return -1;
	}
	if (!*host)
		return -1;
	if (ps)
		return parse_port(ps, port);
	if (!defport)
		return -1;
	*port = defport;
	return 0;
}

/*
 * Connects to host:port with a timeout, to the first address the rule of
 * common/netaddr.h lets through: named (the operator named this host)
 * opens every address, else only public ones that are not the worker's
 * own services.  The address checked is the one connected to, from this
 * one lookup.  fd; -1 with a reason when nothing answered; -2 when every
 * address was refused by the rule (why: its class, refused: the first
 * refused address).
 */
static int dial(const char *host, int port, int named, const rn_netaddr_set_t *own, char *why,
                size_t whysz, char *refused, size_t refsz)
{
	char ps[8];
	snprintf(ps, sizeof(ps), "%d", port);
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_family = AF_UNSPEC;
	int gr = getaddrinfo(host, ps, &hints, &res);
	if (gr != 0) {
		snprintf(why, whysz, "%s", gai_strerror(gr));
		return -1;
	}
	int fd = -1, tried = 0, denied = 0;
	snprintf(why, whysz, "no address");
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		char cls[64];
		if (!rn_netaddr_run_may_reach(ai->ai_addr, named, own, cls, sizeof(cls))) {
			if (!denied++) {
				snprintf(why, whysz, "%s", cls);
				rn_netaddr_format(ai->ai_addr, refused, refsz);
			}
			continue;
		}
		tried++;
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
		if (fd < 0)
			continue;
		int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (rc != 0 && errno == EINPROGRESS) {
			struct pollfd p = { fd, POLLOUT, 0 };
			int pr;
			do {
				pr = poll(&p, 1, CONNECT_TIMEOUT_MS);
			} while (pr < 0 && errno == EINTR);
			int err = 0;
			socklen_t el = sizeof(err);
			if (pr == 0)
				err = ETIMEDOUT;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
				err = errno;
			rc = err ? -1 : 0;
			errno = err;
		}
		if (rc == 0) {
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
			break;
		}
		snprintf(why, whysz, "%s", strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd < 0 && denied && !tried ? -2 : fd;
}

/* Copies both ways until both sides are done (or stop shuts them down). */
static void relay(int a, int b)
{
	char *buf = malloc(RELAY_CHUNK);
	if (!buf)
		return;
	rn_relay(a, b, buf, RELAY_CHUNK);
	free(buf);
}

static int allowed(const worker_egress_t *e, const char *host, int port)
{
	for (size_t i = 0; i < e->nallow; i++)
		if (worker_egress_match(e->allow[i], host, port))
			return 1;
	return 0;
}

/* 1 when an entry of the operator's own names host:port exactly. */
static int named_by_operator(const worker_egress_t *e, const char *host, int port)
{
	for (size_t i = 0; i < e->nnamed; i++)
		if (worker_egress_match(e->named[i], host, port))
			return 1;
	return 0;
}

/*
 * Drops proxy-only and connection headers from a head (in place); returns
 * the new length.  The request then goes out with "Connection: close": one
 * request per connection, so a client reusing its proxy connection for
 * another host never sends that request to this one.
 */
static size_t strip_proxy_headers(char *h, size_t len)
{
	size_t out = 0;
	for (size_t i = 0; i < len;) {
		char *nl = memchr(h + i, '\n', len - i);
		size_t ll = nl ? (size_t)(nl - (h + i)) + 1 : len - i;
		if (strncasecmp(h + i, "Proxy-", 6) != 0 && strncasecmp(h + i, "Connection:", 11) != 0 &&
		    strncasecmp(h + i, "Keep-Alive:", 11) != 0) {
			memmove(h + out, h + i, ll);
			out += ll;
		}
		i += ll;
	}
	return out;
}

static void serve(conn_t *c)
{
	worker_egress_t *e = c->e;
	char *buf = malloc(WORKER_EGRESS_HEAD_MAX + 1);
	if (!buf)
		return;
	size_t got = 0;
	size_t hl = read_head(c->cfd, buf, WORKER_EGRESS_HEAD_MAX, &got);
	if (!hl) {
		if (got >= WORKER_EGRESS_HEAD_MAX)
			answer(c->cfd, "431 Request Header Fields Too Large", "request head too large\n");
		free(buf);
		return;
	}
	/* METHOD SP TARGET SP VERSION CRLF */
	char *eol = memchr(buf, '\r', hl);
	char *sp1 = memchr(buf, ' ', (size_t)(eol - buf));
	char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (!sp1 || !sp2) {
		answer(c->cfd, "400 Bad Request", "not an HTTP proxy request\n");
		free(buf);
		return;
	}
	char host[256];
	int port = 0;
	int is_connect = (size_t)(sp1 - buf) == 7 && !memcmp(buf, "CONNECT", 7);
	const char *path = NULL;
	size_t path_len = 0;
	if (is_connect) {
		if (split_target(sp1 + 1, (size_t)(sp2 - sp1 - 1), host, sizeof(host), &port, 0) < 0) {
			answer(c->cfd, "400 Bad Request", "CONNECT needs host:port\n");
			free(buf);
			return;
		}
	} else {
		const char *t = sp1 + 1;
		size_t tl = (size_t)(sp2 - t);
		if (tl < 8 || strncasecmp(t, "http://", 7) != 0) {
			answer(c->cfd, "400 Bad Request",
			       "only CONNECT and absolute http:// requests go through this proxy\n");
			free(buf);
			return;
		}
		const char *auth = t + 7;
		const char *slash = memchr(auth, '/', tl - 7);
		size_t al = slash ? (size_t)(slash - auth) : tl - 7;
		if (memchr(auth, '@', al) ||
		    split_target(auth, al, host, sizeof(host), &port, 80) < 0) {
			answer(c->cfd, "400 Bad Request", "bad request target\n");
			free(buf);
			return;
		}
		path = slash ? slash : "/";
		path_len = slash ? (size_t)(sp2 - slash) : 1;
	}
	/* host:port as a user would write it ([v6]:port). */
	char shown[300];
	int v6 = !!strchr(host, ':');
	snprintf(shown, sizeof(shown), "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
	if (!allowed(e, host, port)) {
		note(e, "egress refused: %s is not on the run's allowlist", shown);
		answer(c->cfd, "403 Forbidden", "this host is not on the run's egress allowlist\n");
		free(buf);
		return;
	}
	char why[128], addr[80] = "";
	int ufd = dial(host, port, named_by_operator(e, host, port), e->own, why, sizeof(why), addr,
	               sizeof(addr));
	if (ufd == -2) {
		note(e, "egress refused: %s resolves to %s (%s), which only the worker's own allowlist may name",
		     shown, why, addr);
		answer(c->cfd, "403 Forbidden", "this host is not reachable from a run\n");
		free(buf);
		return;
	}
	if (ufd < 0) {
		note(e, "egress: could not reach %s (%s)", shown, why);
		answer(c->cfd, "502 Bad Gateway", "could not reach the host\n");
		free(buf);
		return;
	}
	if (track(e, ufd) < 0) {
		close(ufd);
		free(buf);
		return;
	}
	c->ufd = ufd;
	rn_log_debug(e->run_id, "egress", "%s %s:%d", is_connect ? "CONNECT" : "HTTP", host, port);
	int ok;
	if (is_connect) {
		static const char est[] = "HTTP/1.1 200 Connection established\r\n\r\n";
		ok = rn_write_all(c->cfd, est, sizeof(est) - 1, RN_IO_SOCKET) == 0 &&
		        (got == hl || rn_write_all(ufd, buf + hl, got - hl, RN_IO_SOCKET) == 0);
	} else {
		/* METHOD path VERSION, then the headers without Proxy-*. */
		char *method_end = sp1;
		char *rest = eol; /* "\r\n" + headers + "\r\n" */
		size_t rest_len = strip_proxy_headers(rest, hl - (size_t)(rest - buf));
		static const char close_hdr[] = "Connection: close\r\n\r\n";
		ok = rest_len >= 4 && /* the request line's CRLF and the blank line */
		        rn_write_all(ufd, buf, (size_t)(method_end - buf) + 1, RN_IO_SOCKET) == 0 &&
		        rn_write_all(ufd, path, path_len, RN_IO_SOCKET) == 0 &&
		        rn_write_all(ufd, sp2, (size_t)(eol - sp2), RN_IO_SOCKET) == 0 &&
		        rn_write_all(ufd, rest, rest_len - 2, RN_IO_SOCKET) == 0 &&
		        rn_write_all(ufd, close_hdr, sizeof(close_hdr) - 1, RN_IO_SOCKET) == 0 &&
		        (got == hl || rn_write_all(ufd, buf + hl, got - hl, RN_IO_SOCKET) == 0);
	}
	free(buf);
	if (ok)
		relay(c->cfd, ufd);
}

/* A connection ends (or never started): worker_egress_stop waits for none. */
static void conn_release(worker_egress_t *e)
{
	pthread_mutex_lock(&e->mu);
	e->nconn--;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

static void *conn_main(void *arg)
{
	conn_t *c = arg;
	worker_egress_t *e = c->e;
	serve(c);
	untrack_close(e, c->ufd);
	untrack_close(e, c->cfd);
	free(c);
	conn_release(e);
	return NULL;
}

static void *accept_main(void *arg)
{
	worker_egress_t *e = arg;
	for (;;) {
		struct pollfd p[2] = { { e->lfd, POLLIN, 0 }, { e->stop_fd, POLLIN, 0 } };
		int pr = poll(p, 2, -1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0 || p[1].revents)
			break;
		int fd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&e->mu);
		int full = e->nconn >= WORKER_EGRESS_CONN_MAX || e->stopping;
		if (!full)
			e->nconn++;
		pthread_mutex_unlock(&e->mu);
		if (full) {
			answer(fd, "503 Service Unavailable", "too many connections\n");
			close(fd);
			continue;
		}
		conn_t *c = calloc(1, sizeof(*c));
		pthread_t t;
		int ok = c && track(e, fd) == 0;
		if (ok) {
			c->e = e;
			c->cfd = fd;
			c->ufd = -1;
			ok = rn_thread_start(&t, "runnel-egress", 256 * 1024, 1, conn_main, c) == 0;
			if (!ok)
				untrack_close(e, fd);
		} else {
			close(fd);
		}
		if (!ok) {
			free(c);
			conn_release(e);
		}
	}
	return NULL;
}

worker_egress_t *worker_egress_start(const char *sock_path, const worker_egress_rules_t *rules,
                                     const char *run_id, char *errstr, size_t errstr_size)
{
	worker_egress_t *e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	e->lfd = e->note_fd = e->stop_fd = -1;
	for (size_t i = 0; i < sizeof(e->fds) / sizeof(e->fds[0]); i++)
		e->fds[i] = -1;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	snprintf(e->run_id, sizeof(e->run_id), "%s", run_id);
	e->own = rules->own;
	e->allow = calloc(rules->nallow + 1, sizeof(*e->allow));
	e->named = calloc(rules->nnamed + 1, sizeof(*e->named));
	if (!e->allow || !e->named)
		goto oom;
	for (size_t i = 0; i < rules->nallow; i++) {
		if (!(e->allow[i] = strdup(rules->allow[i])))
			goto oom;
		e->nallow++;
	}
	for (size_t i = 0; i < rules->nnamed; i++) {
		if (!worker_egress_pattern_exact(rules->named[i]))
			continue; /* a wildcard never opens the inside */
		if (!(e->named[e->nnamed] = strdup(rules->named[i])))
			goto oom;
		e->nnamed++;
	}
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	/* A deep work directory does not fit sun_path: bind through an
	 * O_PATH descriptor of the directory instead. */
	int dfd = -1;
	if (strlen(sock_path) < sizeof(sa.sun_path)) {
		memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	} else {
		char dir[4096];
		const char *slash = strrchr(sock_path, '/');
		if (!slash || (size_t)(slash - sock_path) >= sizeof(dir)) {
			snprintf(errstr, errstr_size, "egress socket path is not usable");
			goto fail;
		}
		memcpy(dir, sock_path, (size_t)(slash - sock_path));
		dir[slash - sock_path] = '\0';
		dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || (size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, slash + 1) >= sizeof(sa.sun_path)) {
			if (dfd >= 0)
				close(dfd);
			snprintf(errstr, errstr_size, "egress socket path is not usable");
			goto fail;
		}
	}
	snprintf(e->sock_path, sizeof(e->sock_path), "%s", sock_path);
	e->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	e->note_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	e->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->lfd < 0 || e->note_fd < 0 || e->stop_fd < 0) {
		snprintf(errstr, errstr_size, "egress proxy: %s", strerror(errno));
		if (dfd >= 0)
			close(dfd);
		goto fail;
	}
	unlink(sock_path);
	int brc = bind(e->lfd, (struct sockaddr *)&sa, sizeof(sa));
	if (dfd >= 0)
		close(dfd);
	if (brc != 0 || chmod(sock_path, 0600) != 0 || listen(e->lfd, 64) != 0) {
		snprintf(errstr, errstr_size, "egress proxy: cannot listen on its socket: %s", strerror(errno));
		goto fail;
	}
	if (rn_thread_start(&e->acceptor, "runnel-egress", 0, 0, accept_main, e) != 0) {
		snprintf(errstr, errstr_size, "egress proxy: cannot start its thread");
		goto fail;
	}
	e->acceptor_started = 1;
	return e;
oom:
	snprintf(errstr, errstr_size, "out of memory");
fail:
	worker_egress_stop(e);
	return NULL;
}

int worker_egress_fd(const worker_egress_t *e)
{
	return e ? e->note_fd : -1;
}

void worker_egress_drain(worker_egress_t *e, void (*fn)(const char *note, void *arg), void *arg)
{
	if (!e)
		return;
	uint64_t v;
	ssize_t r = read(e->note_fd, &v, sizeof(v));
	(void)r;
	char *taken[NOTES_MAX];
	size_t n;
	uint64_t lost;
	pthread_mutex_lock(&e->mu);
	n = e->nnotes;
	memcpy(taken, e->notes, n * sizeof(taken[0]));
	e->nnotes = 0;
	lost = e->notes_lost;
	e->notes_lost = 0;
	pthread_mutex_unlock(&e->mu);
	for (size_t i = 0; i < n; i++) {
		fn(taken[i], arg);
		free(taken[i]);
	}
	if (lost) {
		char buf[128];
		snprintf(buf, sizeof(buf), "egress: %llu more notes not shown", (unsigned long long)lost);
		fn(buf, arg);
	}
}

void worker_egress_stop(worker_egress_t *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->stopping = 1;
	pthread_mutex_unlock(&e->mu);
	if (e->acceptor_started) {
		uint64_t one = 1;
		ssize_t w = write(e->stop_fd, &one, sizeof(one));
		(void)w;
		pthread_join(e->acceptor, NULL);
	}
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < sizeof(e->fds) / sizeof(e->fds[0]); i++)
		if (e->fds[i] >= 0)
			shutdown(e->fds[i], SHUT_RDWR);
	while (e->nconn > 0)
		pthread_cond_wait(&e->cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
	if (e->lfd >= 0) {
		close(e->lfd);
		unlink(e->sock_path);
	}
	if (e->note_fd >= 0)
		close(e->note_fd);
	if (e->stop_fd >= 0)
		close(e->stop_fd);
	for (size_t i = 0; i < e->nnotes; i++)
		free(e->notes[i]);
	for (size_t i = 0; e->allow && i < e->nallow; i++)
		free(e->allow[i]);
	free(e->allow);
	for (size_t i = 0; e->named && i < e->nnamed; i++)
		free(e->named[i]);
	free(e->named);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}
