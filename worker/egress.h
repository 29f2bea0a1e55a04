/*
 * worker/egress.h - the HTTP proxy that is a run's only way out under the
 * `allowlist` egress policy (SPEC §6; docs/sandbox.md "Egress").
 *
 * The sandbox has its own network namespace with nothing but loopback.
 * The worker listens on a unix socket in the run's private directory; the
 * socket is bound read-only into the sandbox at /run/runnel/egress.sock and
 * runnel-egress-bridge (in the sandbox) forwards 127.0.0.1:3128 to it, so
 * HTTPS_PROXY=http://127.0.0.1:3128 works for any client.  The proxy reads
 * one request head per connection:
 *   CONNECT host:port HTTP/1.1          -> a tunnel (HTTPS, any TLS client)
 *   GET http://host[:port]/path HTTP/1.1 -> the request, sent on to host
 * and passes it only when host:port matches a pattern of the run's list:
 *   "api.example.com"        that host, ports 80 and 443
 *   "api.example.com:8443"   that host and port
 *   "*.example.org[:port]"   any name below example.org (not example.org)
 *   "127.0.0.1:9000", "[::1]:9000"  an address literal
 *   "*"                      anything (the same as `full`, but through the proxy)
 * Names are compared case-insensitively before any DNS lookup; the proxy
 * resolves an allowed name itself and checks every address it would
 * connect to (common/netaddr.h): an address that is not public (loopback
 * in any spelling, private, CGNAT, ULA, link-local, …) or that is one of
 * the worker's own services is dialled only when the host matches one of
 * the operator's `named` entries, the exact hosts and addresses of
 * RUNNEL_EGRESS_ALLOW (never a wildcard, never @model or @workspace_api,
 * whose hosts come from the run).  The address checked is the address
 * connected to: no second lookup, no rebinding gap.  A refusal answers
 * 403 and becomes a note ("egress refused: evil.example.com:443 is not on
 * the run's allowlist", "egress refused: localhost:6390 resolves to a
 * loopback address (127.0.0.1:6390), which only the worker's own
 * allowlist may name") that the run publishes as a `log` line.
 *
 * One thread per run accepts; one thread per connection relays (at most
 * WORKER_EGRESS_CONN_MAX at once per run).  Stopping shuts every socket
 * down; a connection still resolving or connecting (10 s connect timeout)
 * is waited for.
 *
 * @locality start/drain/stop: the run's thread.  The proxy has its own
 * acceptor thread and one thread per connection; they share only the
 * proxy's state under its mutex, and stop joins or waits for them all.
 */
#ifndef RUNNEL_WORKER_EGRESS_H
#define RUNNEL_WORKER_EGRESS_H

#include <stddef.h>

#include "common/netaddr.h"
#include "common/sandbox_layout.h"

#define WORKER_EGRESS_CONN_MAX          64
#define WORKER_EGRESS_HEAD_MAX          8192
#define WORKER_EGRESS_PORT              3128 /* the bridge's port inside the sandbox */
#define WORKER_EGRESS_SOCK_IN_SANDBOX   RN_SANDBOX_EGRESS_SOCK
#define WORKER_EGRESS_BRIDGE_IN_SANDBOX RN_SANDBOX_EGRESS_BRIDGE

typedef struct worker_egress worker_egress_t;

/* What a run's proxy lets through. */
typedef struct worker_egress_rules {
	char *const *allow; /* the run's patterns: what may be asked for */
	size_t nallow;
	char *const *named; /* the operator's exact entries: these may reach inside */
	size_t nnamed;
	const rn_netaddr_set_t *own; /* the worker's own services, or NULL (not copied:
	                              * it must outlive the proxy) */
} worker_egress_rules_t;

/*
 * Listens on sock_path (created, mode 0600) and serves until stopped.
 * The patterns are copied; named entries with a wildcard are dropped.
 * NULL with errstr.
 */
worker_egress_t *worker_egress_start(const char *sock_path, const worker_egress_rules_t *rules,
                                     const char *run_id, char *errstr, size_t errstr_size);

/* 1 when pattern names one host or address exactly (no wildcard, no @name). */
int worker_egress_pattern_exact(const char *pattern);

/* Readable when notes are waiting (an eventfd). */
int worker_egress_fd(const worker_egress_t *e);

/* Hands every waiting note to fn, oldest first (at most 100 are kept; the
 * rest are counted and summarised in one last note). */
void worker_egress_drain(worker_egress_t *e, void (*fn)(const char *note, void *arg), void *arg);

/* Closes the listener and every connection, waits for the threads. */
void worker_egress_stop(worker_egress_t *e);

/* 1 when host:port matches pattern (the rules above). */
int worker_egress_match(const char *pattern, const char *host, int port);

/* 1 when every host:port that `inner` matches is matched by `outer`. */
int worker_egress_covers(const char *outer, const char *inner);

/* 0 when pattern is well formed, -1 otherwise. */
int worker_egress_pattern_ok(const char *pattern);

#endif
