/*
 * proto/webhook.h - the completion webhook's wire format (SPEC §2): who may
 * be called (the URL policy), what is sent (the body) and how it is signed
 * (Runnel-Signature).  Pure functions, no I/O, no DNS: any thread.
 *
 * Body:       {"run_id","status","code","ended_at","usage"}
 * Signature:  Runnel-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "t.body")>
 * Delivery:   Runnel-Delivery: <id>, the same on every attempt of one run end
 *
 * The address rules are the egress rules of SPEC §6 (common/netaddr.h owns
 * the classification): loopback, private (RFC 1918, CGNAT, ULA),
 * link-local, unspecified, multicast and reserved addresses are refused
 * unless the operator allows private targets.  Here a URL is checked as
 * far as its text goes without any address table (scheme, syntax, names
 * that are loopback by definition); common/webhook_url.h adds the literal
 * addresses, and the delivery checks every address a name resolves to at
 * connect time, so DNS cannot smuggle one in.
 */
#ifndef RUNNEL_PROTO_WEBHOOK_H
#define RUNNEL_PROTO_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define PROTO_WEBHOOK_ALLOW_HTTP    1u /* plain http:// (tests, dev) */
#define PROTO_WEBHOOK_ALLOW_PRIVATE 2u /* loopback, private, link-local targets */

#define PROTO_WEBHOOK_SIG_MAX 96 /* "t=<20 digits>,v1=<64 hex>" + NUL */

/*
 * Checks webhook URL url against the policy flags, as far as its text
 * goes (literal addresses: see common/webhook_url.h).  0, or -1 with
 * "webhook: <reason>" in errstr (the URL itself is never quoted: it may
 * carry a token in its path).
 */
int proto_webhook_url_check(const char *url, unsigned flags, char *errstr, size_t errstr_size);

/*
 * The host of a webhook URL that proto_webhook_url_check accepted, without
 * brackets or port, into host.  *literal is set to 1 when it is an IP
 * address (already judged by the check), 0 for a name the caller may
 * resolve.  0, or -1 when url has no host that fits.
 */
int proto_webhook_host(const char *url, char *host, size_t size, int *literal);

/*
 * The body of one run end.  usage may be NULL (the run called no model):
 * the body then carries "usage": null.  code "" for a run that succeeded
 * is sent as null.  Returns a malloc'd compact JSON string, NULL on OOM.
 */
char *proto_webhook_body(const char *run_id, const char *status, const char *code,
                         int64_t ended_at, const json_t *usage);

/* "t=<t>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>" into out.  0 or -1. */
int proto_webhook_sign(const uint8_t *key, size_t key_len, int64_t t, const char *body,
                       size_t body_len, char out[PROTO_WEBHOOK_SIG_MAX]);

#endif
