/*
 * common/netaddr.c - the classification of resolved addresses and the
 * set of the worker's own service addresses (see netaddr.h).
 */
#include "common/netaddr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by rn_addr_class_t. */
static const char *const class_text[RN_ADDR_CLASS_COUNT] = {
	[RN_ADDR_PUBLIC] = "a public address",
	[RN_ADDR_LOOPBACK] = "a loopback address",
	[RN_ADDR_UNSPECIFIED] = "an unspecified address",
	[RN_ADDR_PRIVATE] = "a private address",
	[RN_ADDR_CGNAT] = "a shared (CGNAT) address",
	[RN_ADDR_ULA] = "a unique local address",
	[RN_ADDR_LINK_LOCAL] = "a link-local address",
	[RN_ADDR_MULTICAST] = "a multicast address",
	[RN_ADDR_RESERVED] = "a reserved address",
};

int rn_netaddr_literal(const char *host, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1)
		ss->ss_family = AF_INET;
	else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1)
		ss->ss_family = AF_INET6;
	else
		return -1;
	return 0;
}

const char *rn_netaddr_class_text(rn_addr_class_t c)
{
	return (unsigned)c < RN_ADDR_CLASS_COUNT ? class_text[c] : "a reserved address";
}

/* b: the four bytes of an IPv4 address, network order. */
static rn_addr_class_t classify4(const unsigned char *b)
{
	if (b[0] == 127)
		return RN_ADDR_LOOPBACK;
	if (b[0] == 0)
		return RN_ADDR_UNSPECIFIED;
	if (b[0] == 10 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168))
		return RN_ADDR_PRIVATE;
	if (b[0] == 100 && (b[1] & 0xc0) == 64)
		return RN_ADDR_CGNAT;
	if (b[0] == 169 && b[1] == 254)
		return RN_ADDR_LINK_LOCAL;
	if ((b[0] & 0xf0) == 224)
		return RN_ADDR_MULTICAST;
	if ((b[0] & 0xf0) == 240) /* 240/4, 255.255.255.255 included */
		return RN_ADDR_RESERVED;
	if (b[0] == 192 && b[1] == 0 && (b[2] == 0 || b[2] == 2)) /* IETF assignments, TEST-NET-1 */
		return RN_ADDR_RESERVED;
	if (b[0] == 198 && (b[1] & 0xfe) == 18) /* benchmarking 198.18/15 */
		return RN_ADDR_RESERVED;
	if ((b[0] == 198 && b[1] == 51 && b[2] == 100) || (b[0] == 203 && b[1] == 0 && b[2] == 113))
		return RN_ADDR_RESERVED;
	if (b[0] == 192 && b[1] == 88 && b[2] == 99) /* 6to4 relay anycast, deprecated */
		return RN_ADDR_RESERVED;
	return RN_ADDR_PUBLIC;
}

static rn_addr_class_t classify6(const unsigned char *a)
{
	static const unsigned char zero[16];
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	if (!memcmp(a, zero, 16))
		return RN_ADDR_UNSPECIFIED;
	if (!memcmp(a, zero, 15) && a[15] == 1)
		return RN_ADDR_LOOPBACK;
	/* Addresses that carry an IPv4 address are judged by it: a mapped one
	 * on a dual-stack socket, a NAT64 or a 6to4 one through a gateway, all
	 * reach that IPv4 address. */
	if (!memcmp(a, mapped, 12) || !memcmp(a, nat64, 12))
		return classify4(a + 12);
	if (a[0] == 0x20 && a[1] == 0x02)
		return classify4(a + 2);
	if (a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 && a[5] == 1)
		return RN_ADDR_PRIVATE; /* 64:ff9b:1::/48, local-use NAT64 */
	if ((a[0] & 0xfe) == 0xfc)
		return RN_ADDR_ULA;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return RN_ADDR_LINK_LOCAL;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
		return RN_ADDR_PRIVATE; /* fec0::/10, the old site-local */
	if (a[0] == 0xff)
		return RN_ADDR_MULTICAST;
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
		return RN_ADDR_RESERVED; /* documentation */
	/* Only 2000::/3 is global unicast; the rest (::/8 with the deprecated
	 * IPv4-compatible form, 100::/64 discard, …) is not for a run. */
	if ((a[0] & 0xe0) != 0x20)
		return RN_ADDR_RESERVED;
	return RN_ADDR_PUBLIC;
}

rn_addr_class_t rn_netaddr_classify(const struct sockaddr *sa)
{
	if (sa && sa->sa_family == AF_INET)
		return classify4((const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa && sa->sa_family == AF_INET6)
		return classify6(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
	return RN_ADDR_RESERVED;
}

void rn_netaddr_format(const struct sockaddr *sa, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (!size)
		return;
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		snprintf(buf, size, "%s:%u", ip, (unsigned)ntohs(s4->sin_port));
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		snprintf(buf, size, "[%s]:%u", ip, (unsigned)ntohs(s6->sin6_port));
	} else {
		snprintf(buf, size, "(not an IP address)");
	}
}

/* The IPv4 address and port of sa (a mapped IPv6 one counts), or the
 * IPv6 one: a comparable key.  fam 4 or 6, addr 4 or 16 bytes. */
static void key_of(const struct sockaddr *sa, int *fam, unsigned char addr[16], unsigned *port)
{
	memset(addr, 0, 16);
	*fam = 0;
	*port = 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		*fam = 4;
		memcpy(addr, &s4->sin_addr, 4);
		*port = ntohs(s4->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		*port = ntohs(s6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			*fam = 4;
			memcpy(addr, s6->sin6_addr.s6_addr + 12, 4);
		} else {
			*fam = 6;
			memcpy(addr, s6->sin6_addr.s6_addr, 16);
		}
	}
}

static int set_push(rn_netaddr_set_t *s, const struct sockaddr *sa, socklen_t len, int port)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		if (cap > 4096)
			return 0; /* a host with more addresses than that: keep the first */
		struct sockaddr_storage *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	struct sockaddr_storage *d = &s->v[s->n++];
	memset(d, 0, sizeof(*d));
	memcpy(d, sa, len <= sizeof(*d) ? len : sizeof(*d));
	if (d->ss_family == AF_INET)
		((struct sockaddr_in *)d)->sin_port = htons((uint16_t)port);
	else if (d->ss_family == AF_INET6)
		((struct sockaddr_in6 *)d)->sin6_port = htons((uint16_t)port);
	return 0;
}

int rn_netaddr_set_add(rn_netaddr_set_t *s, const char *host, int port,
                       char *errstr, size_t errstr_size)
{
	if (port < 0 || port > 65535) {
		snprintf(errstr, errstr_size, "%.200s: port %d out of range", host ? host : "", port);
		return -1;
	}
	if (!host || !*host || !strcmp(host, "*") || !strcmp(host, "0.0.0.0") || !strcmp(host, "::")) {
		/* A listener on every interface answers at each of their addresses. */
		struct ifaddrs *ifs = NULL;
		if (getifaddrs(&ifs) != 0) {
			snprintf(errstr, errstr_size, "cannot list the host's addresses");
			return -1;
		}
		int rc = 0;
		for (struct ifaddrs *i = ifs; i && rc == 0; i = i->ifa_next) {
			if (!i->ifa_addr)
				continue;
			if (i->ifa_addr->sa_family == AF_INET)
				rc = set_push(s, i->ifa_addr, sizeof(struct sockaddr_in), port);
			else if (i->ifa_addr->sa_family == AF_INET6)
				rc = set_push(s, i->ifa_addr, sizeof(struct sockaddr_in6), port);
		}
		freeifaddrs(ifs);
		if (rc < 0)
			snprintf(errstr, errstr_size, "out of memory");
		return rc;
	}
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	int gr = getaddrinfo(host, NULL, &hints, &res);
	if (gr != 0) {
		snprintf(errstr, errstr_size, "%.200s: %s", host, gai_strerror(gr));
		return -1;
	}
	int rc = 0;
	for (struct addrinfo *ai = res; ai && rc == 0; ai = ai->ai_next)
		rc = set_push(s, ai->ai_addr, ai->ai_addrlen, port);
	freeaddrinfo(res);
	if (rc < 0)
		snprintf(errstr, errstr_size, "out of memory");
	return rc;
}

int rn_netaddr_set_add_list(rn_netaddr_set_t *s, const char *list, int defport,
                            char *errstr, size_t errstr_size)
{
	int rc = 0;
	for (const char *p = list ? list : ""; *p;) {
		const char *c = strchr(p, ',');
		size_t l = c ? (size_t)(c - p) : strlen(p);
		char item[300];
		while (l && (*p == ' ' || *p == '\t')) {
			p++;
			l--;
		}
		while (l && (p[l - 1] == ' ' || p[l - 1] == '\t'))
			l--;
		if (l && l < sizeof(item)) {
			memcpy(item, p, l);
			item[l] = '\0';
			/* Kafka writes PLAINTEXT://host:port as well as host:port. */
			char *h = strstr(item, "://") ? strstr(item, "://") + 3 : item;
			char *port = NULL;
			if (h[0] == '[') {
				char *rb = strchr(h, ']');
				if (rb) {
					*rb = '\0';
					h++;
					port = rb[1] == ':' ? rb + 2 : NULL;
				}
			} else if ((port = strrchr(h, ':'))) {
				*port++ = '\0';
			}
			int pn = port && *port ? (int)strtol(port, NULL, 10) : defport;
			if (rn_netaddr_set_add(s, h, pn, errstr, errstr_size) < 0)
				rc = -1; /* go on: the other items still count */
		}
		if (!c)
			break;
		p = c + 1;
	}
	return rc;
}

int rn_netaddr_set_has(const rn_netaddr_set_t *s, const struct sockaddr *sa)
{
	int fam;
	unsigned char addr[16];
	unsigned port;
	key_of(sa, &fam, addr, &port);
	if (!fam)
		return 0;
	for (size_t i = 0; s && i < s->n; i++) {
		int f2;
		unsigned char a2[16];
		unsigned p2;
		key_of((const struct sockaddr *)&s->v[i], &f2, a2, &p2);
		if (f2 == fam && p2 == port && !memcmp(a2, addr, 16))
			return 1;
	}
	return 0;
}

void rn_netaddr_set_free(rn_netaddr_set_t *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

int rn_netaddr_run_may_reach(const struct sockaddr *sa, int named, const rn_netaddr_set_t *own,
                             char *why, size_t why_size)
{
	if (named)
		return 1;
	rn_addr_class_t c = rn_netaddr_classify(sa);
	if (c != RN_ADDR_PUBLIC) {
		snprintf(why, why_size, "%s", rn_netaddr_class_text(c));
		return 0;
	}
	if (rn_netaddr_set_has(own, sa)) {
		snprintf(why, why_size, "one of the worker's own services");
		return 0;
	}
	return 1;
}
