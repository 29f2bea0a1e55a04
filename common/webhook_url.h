/*
 * common/webhook_url.h - the whole check of a completion webhook's URL
 * before a job is taken: proto_webhook_url_check (scheme, syntax, names)
 * plus a literal address judged by common/netaddr.h, the one
 * classification every connection made for a run uses.  The dispatcher
 * (400) and the worker's intake (DLQ) call it; the delivery checks the
 * resolved addresses again at connect time (rn_netaddr_run_may_reach).
 * Pure; any thread.
 */
#ifndef RUNNEL_COMMON_WEBHOOK_URL_H
#define RUNNEL_COMMON_WEBHOOK_URL_H

#include <stddef.h>

/*
 * 0 when url may be called under flags (PROTO_WEBHOOK_ALLOW_*), else -1
 * with "webhook: <reason>", e.g. "webhook: resolves to a private address,
 * which is not allowed".  The URL is never quoted.
 */
int rn_webhook_url_check(const char *url, unsigned flags, char *errstr, size_t errstr_size);

#endif
