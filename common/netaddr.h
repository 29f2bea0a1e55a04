/*
 * common/netaddr.h - which addresses a run may reach (SPEC §6): the one
 * classification of a resolved socket address, shared by every connection
 * the worker makes for a run (the egress proxy, and any later client that
 * dials a host a run supplied: the model gateway's upstream, webhooks).
 *
 * The rule: a host that comes from a run (its base URLs, workspace_api.url,
 * allow_hosts, any wildcard) is reachable only at a public address.
 * Loopback, unspecified (0.0.0.0 connects to the host itself), RFC 1918,
 * CGNAT 100.64/10, ULA fc00::/7, link-local, multicast, reserved ranges
 * and the worker's own services (its Redis, metrics listener, Kafka
 * brokers) are reachable only when the operator names the host explicitly
 * (the caller decides what "named" means; the egress proxy: an exact host
 * or address of RUNNEL_EGRESS_ALLOW, never a wildcard or @model).
 *
 * The check is made on the address that is then connected to, after
 * resolution, so a name that resolves to a public address once and to
 * 127.0.0.1 the next time (DNS rebinding) gains nothing.  IPv4-mapped
 * (::ffff:a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses
 * are judged by the IPv4 address they carry.
 *
 * Users: the egress proxy (worker/egress.c, its own connect loop) and
 * libcurl transfers to a run's URLs through worker_httpc_reach
 * (worker/httpc.h: an open-socket callback, so redirects are checked
 * too); a new client of run-supplied hosts takes one of those two.
 * Completion webhooks (worker/webhook.c) apply rn_netaddr_run_may_reach in
 * their own open-socket callback (named = the operator allows private
 * targets), and common/webhook_url.c judges a literal address of a URL.
 *
 * Pure functions and a set the caller owns; no thread of its own.  The
 * set is filled once (main thread, at start) and read-only afterwards.
 */
#ifndef RUNNEL_COMMON_NETADDR_H
#define RUNNEL_COMMON_NETADDR_H

#include <stddef.h>
#include <sys/socket.h>

typedef enum {
	RN_ADDR_PUBLIC = 0,
	RN_ADDR_LOOPBACK,    /* 127/8, ::1 */
	RN_ADDR_UNSPECIFIED, /* 0/8, :: (Linux connects 0.0.0.0 to the host) */
	RN_ADDR_PRIVATE,     /* 10/8, 172.16/12, 192.168/16, fec0::/10, 64:ff9b:1::/48 */
	RN_ADDR_CGNAT,       /* 100.64/10 */
	RN_ADDR_ULA,         /* fc00::/7 */
	RN_ADDR_LINK_LOCAL,  /* 169.254/16 (cloud metadata), fe80::/10 */
	RN_ADDR_MULTICAST,   /* 224/4, ff00::/8 */
	RN_ADDR_RESERVED,    /* documentation, benchmarking, 240/4, IETF, outside 2000::/3 */
	RN_ADDR_CLASS_COUNT,
} rn_addr_class_t;

/* The class of an AF_INET or AF_INET6 address (anything else: reserved). */
rn_addr_class_t rn_netaddr_classify(const struct sockaddr *sa);

/* Reads an IPv4 or IPv6 address literal ("127.0.0.1", "::1"; no brackets,
 * no port) into ss.  0, or -1 when host is a name or not an address. */
int rn_netaddr_literal(const char *host, struct sockaddr_storage *ss);

/* "a loopback address", "a private (RFC 1918) address", … for messages. */
const char *rn_netaddr_class_text(rn_addr_class_t c);

/* "127.0.0.1:6379" or "[::1]:80" into buf (always terminated). */
void rn_netaddr_format(const struct sockaddr *sa, char *buf, size_t size);

/* Addresses with ports: the worker's own services. */
typedef struct rn_netaddr_set {
	struct sockaddr_storage *v; /* owned */
	size_t n;
	size_t cap;
} rn_netaddr_set_t;

/*
 * Adds every address host resolves to, with port.  A wildcard host
 * ("0.0.0.0", "::", "" or "*": a listener on every interface) adds every
 * address of every local interface instead.  0, or -1 with errstr (a name
 * that does not resolve is an error: the caller may decide to go on).
 */
int rn_netaddr_set_add(rn_netaddr_set_t *s, const char *host, int port,
                       char *errstr, size_t errstr_size);

/* Adds each "host:port" or "[v6]:port" of a comma-separated list
 * (Kafka's bootstrap servers); items without a port get defport. */
int rn_netaddr_set_add_list(rn_netaddr_set_t *s, const char *list, int defport,
                            char *errstr, size_t errstr_size);

/* 1 when sa (address and port; a mapped IPv4 address counts as itself) is in s. */
int rn_netaddr_set_has(const rn_netaddr_set_t *s, const struct sockaddr *sa);

void rn_netaddr_set_free(rn_netaddr_set_t *s);

/*
 * May a connection made for a run go to sa?  named: the operator's own
 * list names this host explicitly (then anything goes).  Otherwise only a
 * public address that is not one of own (may be NULL).  1, or 0 with why
 * ("a loopback address", "one of the worker's own services").
 */
int rn_netaddr_run_may_reach(const struct sockaddr *sa, int named, const rn_netaddr_set_t *own,
                             char *why, size_t why_size);

#endif
