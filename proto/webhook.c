/*
 * proto/webhook.c - the completion webhook's URL policy, body and
 * signature (see webhook.h).
 */
#include "proto/webhook.h"
#include "proto/job.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

static const char *v4_forbidden(uint32_t a)
{
	if ((a >> 24) == 127)
		return "a loopback address";
	if ((a >> 24) == 10 || (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8)
		return "a private address";
	if ((a >> 22) == (100u << 2 | 1)) /* 100.64.0.0/10 */
		return "a private (shared) address";
	if ((a >> 16) == 0xa9fe)
		return "a link-local address";
	if ((a >> 24) == 0)
		return "an unspecified address";
	if ((a >> 28) >= 0xe)
		return "a multicast or reserved address";
	return NULL;
}

const char *proto_webhook_addr_forbidden(const struct sockaddr *sa, unsigned flags)
{
	if (flags & PROTO_WEBHOOK_ALLOW_PRIVATE)
		return NULL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		return v4_forbidden(ntohl(s4->sin_addr.s_addr));
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		/* An IPv4-mapped or -compatible address is judged as IPv4. */
		if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4COMPAT(a)) {
			uint32_t v4;

			memcpy(&v4, a->s6_addr + 12, 4);
			return v4_forbidden(ntohl(v4));
		}
		if (IN6_IS_ADDR_LOOPBACK(a))
			return "a loopback address";
		if (IN6_IS_ADDR_UNSPECIFIED(a))
			return "an unspecified address";
		if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_SITELOCAL(a))
			return "a link-local address";
		if ((a->s6_addr[0] & 0xfe) == 0xfc)
			return "a private (ULA) address";
		if (IN6_IS_ADDR_MULTICAST(a))
			return "a multicast address";
		/* NAT64 (64:ff9b::/96) reaches IPv4 space we cannot judge here. */
		if (a->s6_addr[0] == 0 && a->s6_addr[1] == 0x64 && a->s6_addr[2] == 0xff && a->s6_addr[3] == 0x9b)
			return "a NAT64 address";
		return NULL;
	}
	return "not an IP address";
}

static int seterr(char *errstr, size_t size, const char *reason)
{
	snprintf(errstr, size, "webhook: %s", reason);
	return -1;
}

int proto_webhook_url_check(const char *url, unsigned flags, char *errstr, size_t errstr_size)
{
	char host[256];
	const char *h, *end, *at;
	size_t n;

	if (url == NULL)
		return seterr(errstr, errstr_size, "missing");
	if (strncasecmp(url, "https://", 8) == 0)
		h = url + 8;
	else if (strncasecmp(url, "http://", 7) == 0) {
		if (!(flags & PROTO_WEBHOOK_ALLOW_HTTP))
			return seterr(errstr, errstr_size, "must start with https://");
		h = url + 7;
	} else
		return seterr(errstr, errstr_size, "must start with https://");
	if (strlen(url) > PROTO_JOB_URL_MAX)
		return seterr(errstr, errstr_size, "too long");
	for (const char *p = url; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return seterr(errstr, errstr_size, "contains a space or control character");
	end = h + strcspn(h, "/?#");
	at = memchr(h, '@', (size_t)(end - h));
	if (at != NULL)
		return seterr(errstr, errstr_size, "must not carry user credentials");
	if (*h == '[') {
		const char *close = memchr(h, ']', (size_t)(end - h));

		if (close == NULL)
			return seterr(errstr, errstr_size, "malformed IPv6 host");
		n = (size_t)(close - h - 1);
		h++;
	} else {
		const char *colon = memchr(h, ':', (size_t)(end - h));

		n = (size_t)((colon ? colon : end) - h);
	}
	if (n == 0)
		return seterr(errstr, errstr_size, "missing host");
	if (n >= sizeof(host))
		return seterr(errstr, errstr_size, "host name too long");
	memcpy(host, h, n);
	host[n] = '\0';
	if (!(flags & PROTO_WEBHOOK_ALLOW_PRIVATE)) {
		struct sockaddr_in s4;
		struct sockaddr_in6 s6;
		const char *why = NULL;
		size_t hl = strlen(host);

		memset(&s4, 0, sizeof(s4));
		memset(&s6, 0, sizeof(s6));
		if (inet_pton(AF_INET, host, &s4.sin_addr) == 1) {
			s4.sin_family = AF_INET;
			why = proto_webhook_addr_forbidden((struct sockaddr *)&s4, flags);
		} else if (inet_pton(AF_INET6, host, &s6.sin6_addr) == 1) {
			s6.sin6_family = AF_INET6;
			why = proto_webhook_addr_forbidden((struct sockaddr *)&s6, flags);
		} else if (strcasecmp(host, "localhost") == 0 ||
		           (hl > 10 && strcasecmp(host + hl - 10, ".localhost") == 0)) {
			why = "a loopback address";
		} else if (strspn(host, "0123456789.xXabcdefABCDEF") == hl) {
			/* 2130706433, 0x7f.1, 0177.0.0.1: resolvers read these as
			 * IPv4; refuse rather than guess what they mean. */
			why = "a numeric host that is not a dotted IPv4 address";
		}
		if (why != NULL) {
			char msg[128];

			snprintf(msg, sizeof(msg), "resolves to %s, which is not allowed", why);
			return seterr(errstr, errstr_size, msg);
		}
	}
	return 0;
}

int proto_webhook_host(const char *url, char *host, size_t size, int *literal)
{
	const char *h = strstr(url, "://"), *end;
	unsigned char buf[sizeof(struct in6_addr)];
	size_t n;

	if (h == NULL)
		return -1;
	h += 3;
	end = h + strcspn(h, "/?#");
	if (*h == '[') {
		const char *close = memchr(h, ']', (size_t)(end - h));

		if (close == NULL)
			return -1;
		h++;
		n = (size_t)(close - h);
	} else {
		const char *colon = memchr(h, ':', (size_t)(end - h));

		n = (size_t)((colon ? colon : end) - h);
	}
	if (n == 0 || n >= size)
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	*literal = inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
	return 0;
}

char *proto_webhook_body(const char *run_id, const char *status, const char *code,
                         int64_t ended_at, const json_t *usage)
{
	json_t *o = json_object();
	char *s;

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "run_id", json_string(run_id));
	json_object_set_new(o, "status", json_string(status));
	json_object_set_new(o, "code", code && code[0] ? json_string(code) : json_null());
	json_object_set_new(o, "ended_at", json_integer(ended_at));
	json_object_set_new(o, "usage", usage ? json_deep_copy(usage) : json_null());
	s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	return s;
}

int proto_webhook_sign(const uint8_t *key, size_t key_len, int64_t t, const char *body,
                       size_t body_len, char out[PROTO_WEBHOOK_SIG_MAX])
{
	crypto_auth_hmacsha256_state st;
	unsigned char mac[crypto_auth_hmacsha256_BYTES];
	char ts[24], hex[2 * crypto_auth_hmacsha256_BYTES + 1];
	int n;

	if (proto_sodium_init() != 0)
		return -1;
	n = snprintf(ts, sizeof(ts), "%lld", (long long)t);
	crypto_auth_hmacsha256_init(&st, key, key_len);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, (unsigned long long)n);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)body, body_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
	sodium_memzero(&st, sizeof(st));
	snprintf(out, PROTO_WEBHOOK_SIG_MAX, "t=%s,v1=%s", ts, hex);
	return 0;
}
