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

	if (!url)
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
	if (at)
		return seterr(errstr, errstr_size, "must not carry user credentials");
	if (*h == '[') {
		const char *close = memchr(h, ']', (size_t)(end - h));

		if (!close)
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
		const char *why = NULL;
		size_t hl = strlen(host);
		unsigned char buf[sizeof(struct in6_addr)];

		/* Literal addresses are judged by the caller (common/netaddr:
		 * proto_webhook_host says which hosts are literals); names that
		 * are loopback by definition, and numeric forms a resolver would
		 * read as IPv4, are refused here. */
		if (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1)
			why = NULL;
		else if (strcasecmp(host, "localhost") == 0 || (hl > 10 && strcasecmp(host + hl - 10, ".localhost") == 0))
			why = "a loopback address";
		else if (strspn(host, "0123456789.xXabcdefABCDEF") == hl)
			/* 2130706433, 0x7f.1, 0177.0.0.1: resolvers read these as
			 * IPv4; refuse rather than guess what they mean. */
			why = "a numeric host that is not a dotted IPv4 address";
		if (why) {
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

	if (!h)
		return -1;
	h += 3;
	end = h + strcspn(h, "/?#");
	if (*h == '[') {
		const char *close = memchr(h, ']', (size_t)(end - h));

		if (!close)
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

	if (!o)
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
