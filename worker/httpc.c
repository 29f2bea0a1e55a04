/*
 * worker/httpc.c - libcurl options and safe error
 * messages shared by the stages that speak HTTP.
 */
#include "worker/httpc.h"

#include <errno.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "worker/egress.h"

#ifndef RUNNEL_VERSION
#define RUNNEL_VERSION "0"
#endif

void worker_httpc_setup(CURL *h, long connect_timeout_ms, long timeout_ms)
{
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "runnel-worker/" RUNNEL_VERSION);
	/* Never read credentials from ~/.netrc or the environment's proxies'
	 * user info into a request we did not ask for. */
	curl_easy_setopt(h, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
}

static int abort_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                    curl_off_t ulnow)
{
	return worker_stopword_any(arg) ? 1 : 0;
}

void worker_httpc_abort_on(CURL *h, const worker_stopword_t *stop)
{
	if (!stop)
		return;
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_cb);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)stop);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
}

void worker_httpc_send_once(CURL *h)
{
	curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
	curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
}

static int url_parts(const char *url, CURLU **out)
{
	CURLU *u = curl_url();
	if (!u)
		return -1;
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
		curl_url_cleanup(u);
		return -1;
	}
	char *scheme = NULL;
	if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
		curl_free(scheme);
		curl_url_cleanup(u);
		return -1;
	}
	curl_free(scheme);
	*out = u;
	return 0;
}

char *worker_httpc_join(const char *base, const char *leaf, char *errstr, size_t errstr_size)
{
	CURLU *u;
	if (!base || url_parts(base, &u) != 0) {
		snprintf(errstr, errstr_size, "agent_url is not a valid http(s) URL");
		return NULL;
	}
	char *path = NULL, *full = NULL, *result = NULL;
	if (curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK)
		goto out;
	size_t plen = strlen(path);
	while (plen > 0 && path[plen - 1] == '/')
		plen--;
	size_t n = plen + strlen(leaf) + 2;
	char *np = malloc(n);
	if (!np)
		goto out;
	snprintf(np, n, "%.*s/%s", (int)plen, path, leaf);
	CURLUcode rc = curl_url_set(u, CURLUPART_PATH, np, 0);
	free(np);
	if (rc != CURLUE_OK || curl_url_get(u, CURLUPART_URL, &full, 0) != CURLUE_OK)
		goto out;
	result = strdup(full);
out:
	if (!result)
		snprintf(errstr, errstr_size, "agent_url is not a valid http(s) URL");
	curl_free(path);
	curl_free(full);
	curl_url_cleanup(u);
	return result;
}

void worker_httpc_safe_url(const char *url, char *out, size_t out_size)
{
	CURLU *u;
	if (!url || url_parts(url, &u) != 0) {
		snprintf(out, out_size, "(invalid URL)");
		return;
	}
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_get(u, CURLUPART_PORT, &port, 0);
	curl_url_get(u, CURLUPART_PATH, &path, 0);
	snprintf(out, out_size, "%s://%s%s%s%s", scheme ? scheme : "?", host ? host : "?",
	         port ? ":" : "", port ? port : "", path ? path : "/");
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_url_cleanup(u);
}

void worker_httpc_host_port(const char *url, char *out, size_t out_size)
{
	CURLU *u;
	if (!url || url_parts(url, &u) != 0) {
		snprintf(out, out_size, "?");
		return;
	}
	char *host = NULL, *port = NULL;
	curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
	snprintf(out, out_size, "%s:%s", host ? host : "?", port ? port : "?");
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
}

void worker_httpc_describe(CURL *h, CURLcode rc, const char *url, long connect_timeout_ms,
                           long timeout_ms, char *out, size_t out_size)
{
	char hp[300];
	worker_httpc_host_port(url, hp, sizeof(hp));
	long os_errno = 0;
	curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
	curl_off_t connected_us = 0;
	curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connected_us);

	/* The errors told in words of our own that name nothing of the request. */
	static const struct {
		CURLcode rc;
		const char *text;
	} fixed[] = {
		{ CURLE_UNSUPPORTED_PROTOCOL, "unsupported URL scheme (only http and https are allowed)" },
		{ CURLE_URL_MALFORMAT, "malformed URL" },
		{ CURLE_GOT_NOTHING, "the server closed the connection without answering" },
		{ CURLE_PARTIAL_FILE, "the answer was cut short" },
		{ CURLE_TOO_MANY_REDIRECTS, "too many redirects" },
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		if (fixed[i].rc == rc) {
			snprintf(out, out_size, "%s", fixed[i].text);
			return;
		}
	}
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		if (connected_us == 0 && connect_timeout_ms > 0 && connect_timeout_ms < timeout_ms)
			snprintf(out, out_size, "could not connect to %s within %ld ms", hp, connect_timeout_ms);
		else
			snprintf(out, out_size, "timed out after %ld ms", timeout_ms);
		break;
	case CURLE_COULDNT_CONNECT:
		snprintf(out, out_size, "could not connect to %s (%s)", hp,
		         os_errno ? strerror((int)os_errno) : "connection failed");
		break;
	case CURLE_COULDNT_RESOLVE_HOST: {
		char host[300];
		snprintf(host, sizeof(host), "%s", hp);
		char *colon = strrchr(host, ':');
		if (colon)
			*colon = '\0';
		snprintf(out, out_size, "could not resolve host %s", host);
		break;
	}
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
		snprintf(out, out_size, "connection to %s broke (%s)", hp,
		         os_errno ? strerror((int)os_errno) : curl_easy_strerror(rc));
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
		snprintf(out, out_size, "TLS with %s failed (%s)", hp, curl_easy_strerror(rc));
		break;
	default:
		/* curl_easy_strerror is generic text: it never quotes the URL. */
		snprintf(out, out_size, "%s", curl_easy_strerror(rc));
		break;
	}
}

struct curl_slist *worker_httpc_bearer(const char *token)
{
	size_t n = strlen(token) + sizeof("Authorization: Bearer ");
	char *h = malloc(n);
	if (!h)
		return NULL;
	snprintf(h, n, "Authorization: Bearer %s", token);
	struct curl_slist *l = curl_slist_append(NULL, h);
	/* curl copied it; do not leave the token in freed heap memory. */
	explicit_bzero(h, n);
	free(h);
	return l;
}

/* Splits "host:port" (a bracketed IPv6 host loses its brackets). */
static int split_host_port(const char *hp, char *host, size_t hsz, int *port)
{
	const char *c = strrchr(hp, ':');
	if (!c)
		return -1;
	const char *h = hp;
	size_t hl = (size_t)(c - hp);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= hsz)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)strtol(c + 1, NULL, 10);
	return 0;
}

static curl_socket_t reach_open(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
	worker_httpc_reach_state_t *st = clientp;
	const worker_httpc_reach_t *r = st->rule;
	(void)purpose;
	/* The host being connected to: the URL of this hop (libcurl moves the
	 * effective URL to a redirect's target before connecting to it). */
	char *url = NULL;
	char hp[300], host[256];
	int port = 0, named = 0;
	curl_easy_getinfo(st->h, CURLINFO_EFFECTIVE_URL, &url);
	worker_httpc_host_port(url, hp, sizeof(hp));
	if (r->origin[0] && !strcasecmp(hp, r->origin))
		named = 1;
	if (!named && split_host_port(hp, host, sizeof(host), &port) == 0)
		for (size_t i = 0; i < r->nnamed && !named; i++)
			named = worker_egress_pattern_exact(r->named[i]) && worker_egress_match(r->named[i], host, port);
	char why[64];
	if (!rn_netaddr_run_may_reach(&a->addr, named, r->own, why, sizeof(why))) {
		if (!st->refused[0]) {
			char addr[80];
			rn_netaddr_format(&a->addr, addr, sizeof(addr));
			snprintf(st->refused, sizeof(st->refused), "%s (%s)", addr, why);
		}
		errno = EACCES;
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

void worker_httpc_reach(CURL *h, const worker_httpc_reach_t *rule, worker_httpc_reach_state_t *st)
{
	memset(st, 0, sizeof(*st));
	st->h = h;
	st->rule = rule;
	if (!rule || !rule->on)
		return;
	curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, reach_open);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, st);
}
