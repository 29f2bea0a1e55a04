/*
 * worker/httpc.h - what the stages that speak HTTP (bootstrap, workspace
 * download, writeback) share about libcurl: the options every handle gets,
 * and error messages in words that never
 * quote a URL's query string or an Authorization header.
 *
 * libcurl must be initialised once by main (curl_global_init) before any
 * thread uses these.  @locality any thread; handles are not shared.
 */
#ifndef RUNNEL_WORKER_HTTPC_H
#define RUNNEL_WORKER_HTTPC_H

#include <stddef.h>
#include <curl/curl.h>

#include "common/netaddr.h"
#include "worker/stop.h"

/* The answer body kept in memory is common/dynbuf.h's rn_body_t. */
#include "common/dynbuf.h"

/*
 * Options every request gets: http/https only (also on redirects), no
 * signals (threads), no redirects (callers that allow some set them after),
 * connect and total timeouts in ms, a User-Agent.
 */
void worker_httpc_setup(CURL *h, long connect_timeout_ms, long timeout_ms);

/*
 * Makes a transfer on h stop with CURLE_ABORTED_BY_CALLBACK soon (within
 * about a second, libcurl's progress tick) after any stop was asked for
 * on stop.  stop NULL: nothing.  The word must outlive the transfer.
 */
void worker_httpc_abort_on(CURL *h, const worker_stopword_t *stop);

/*
 * For a request that carries an OTP: a fresh connection that is closed
 * afterwards.  libcurl resends a request whose reused connection turns out
 * dead before any answer, and the first send may have reached the server;
 * a request on a new connection is never resent.
 */
void worker_httpc_send_once(CURL *h);

/*
 * agent_url + "/" + leaf, the leaf appended to the path (before any query
 * string, which is kept).  malloc'd, or NULL with errstr when the URL is not
 * a valid http(s) URL.
 */
char *worker_httpc_join(const char *base, const char *leaf, char *errstr, size_t errstr_size);

/* "scheme://host[:port]/path": no user info, query or fragment. */
void worker_httpc_safe_url(const char *url, char *out, size_t out_size);

/* "host:port" of url (port filled in from the scheme), or "?" */
void worker_httpc_host_port(const char *url, char *out, size_t out_size);

/*
 * Describes a failed transfer: "timed out after 30000 ms", "could not
 * connect to 127.0.0.1:1 (Connection refused)", "could not resolve host
 * ws.example", ...  url is the one the handle used (for host and port only).
 */
void worker_httpc_describe(CURL *h, CURLcode rc, const char *url, long connect_timeout_ms,
                           long timeout_ms, char *out, size_t out_size);

/*
 * The address rule of common/netaddr.h for a transfer made on a run's
 * behalf to a URL the run supplied (a bag's or a skill's zip_url):
 * checked on every address libcurl is about to connect to, redirects
 * included.  A host that is named (equal, as host:port, to origin: the
 * workspace API the job's caller chose; or matched by one of the exact
 * patterns in named, the operator's RUNNEL_EGRESS_ALLOW) may be at any
 * address; any other only at a public one that is not one of own.
 */
typedef struct worker_httpc_reach {
	int on;             /* 0: no rule (anywhere) */
	char origin[300];   /* "host:port", or "" */
	char *const *named; /* egress patterns; only exact ones count */
	size_t nnamed;
	const rn_netaddr_set_t *own; /* may be NULL */
} worker_httpc_reach_t;

/* What a transfer under a reach rule refused (the first one). */
typedef struct worker_httpc_reach_state {
	CURL *h;
	const worker_httpc_reach_t *rule;
	char refused[200]; /* "127.0.0.1:6379 (a loopback address)"; "" when none */
} worker_httpc_reach_state_t;

/* Applies rule (NULL or not on: nothing) to h (CURLOPT_OPENSOCKETFUNCTION).
 * rule and st must outlive the transfer; st->refused says what was refused. */
void worker_httpc_reach(CURL *h, const worker_httpc_reach_t *rule, worker_httpc_reach_state_t *st);

/* "Authorization: Bearer <token>" as a one-element list (free with
 * curl_slist_free_all), or NULL on allocation failure.  The token only
 * ever lives in this header. */
struct curl_slist *worker_httpc_bearer(const char *token);

#endif
