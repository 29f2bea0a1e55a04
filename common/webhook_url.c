/*
 * common/webhook_url.c - a webhook URL's text and literal address (see
 * webhook_url.h).
 */
#include "common/webhook_url.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "common/netaddr.h"
#include "proto/webhook.h"

int rn_webhook_url_check(const char *url, unsigned flags, char *errstr, size_t errstr_size)
{
	struct sockaddr_storage ss;
	char host[256];
	int literal = 0;

	if (proto_webhook_url_check(url, flags, errstr, errstr_size) < 0)
		return -1;
	if ((flags & PROTO_WEBHOOK_ALLOW_PRIVATE) || proto_webhook_host(url, host, sizeof(host), &literal) < 0 ||
	    !literal)
		return 0;
	if (rn_netaddr_literal(host, &ss) < 0)
		return 0;
	rn_addr_class_t c = rn_netaddr_classify((struct sockaddr *)&ss);
	if (c == RN_ADDR_PUBLIC)
		return 0;
	snprintf(errstr, errstr_size, "webhook: resolves to %s, which is not allowed", rn_netaddr_class_text(c));
	return -1;
}
