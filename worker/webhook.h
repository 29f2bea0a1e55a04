/*
 * worker/webhook.h - completion webhooks (SPEC §2): the intake check of a
 * job's webhook and the delivery thread that sends one signed POST per run
 * end, at least once, from an outbox in Redis.
 *
 * The outbox (common/runstate.h names it: <prefix>:{wh}:outbox, a sorted
 * set run_id -> due ms) is armed at intake for every run with a webhook,
 * due a poll interval later; whoever writes the terminal line (a run's
 * finish, the lost sweep of a worker or a dispatcher, a claim that finds a
 * dead owner) makes it due at once.  Because the entry exists before the
 * run can end, a writer that dies right after the terminal line loses
 * nothing: the entry comes due by itself and any worker delivers it.
 *
 * Delivery ("runnel-webhook" thread, one per worker, its own Redis
 * connection, libcurl multi): due entries are taken by moving them a lease
 * ahead (so two workers do not send the same attempt), the state hash is
 * read (status, ended_at, code, usage, webhook), and the POST goes out with
 * Runnel-Signature and a Runnel-Delivery id that is the same on every
 * attempt.  A 2xx ends it (webhook_state "delivered"); anything else
 * (refused, timeout, 3xx: redirects are never followed, 4xx, 5xx) is tried
 * again after an exponential backoff with jitter (1 s doubling to 10 min)
 * until --webhook-give-up-sec after the run's end, then dropped (metric and
 * log line).  A target that resolves to a forbidden address is dropped at
 * once.  No run thread ever waits on a webhook.
 *
 * The secret (RUNNEL_WEBHOOK_SECRET) is only ever passed to the HMAC.
 */
#ifndef RUNNEL_WORKER_WEBHOOK_H
#define RUNNEL_WORKER_WEBHOOK_H

#include <stddef.h>

#include "proto/job.h"
#include "worker/config.h"
#include "worker/metrics.h"

/* How often a run's outbox entry is looked at while the run has not
 * ended (the fallback should a terminal writer die before making it due). */
#define WORKER_WEBHOOK_POLL_MS 30000

/* The policy flags (PROTO_WEBHOOK_ALLOW_*) of this worker's settings. */
unsigned worker_webhook_flags(const worker_config_t *cfg);

/*
 * Intake: 0 when job has no webhook or one this worker may call; -1 with
 * "webhook: <reason>" (the job goes to the DLQ).  A webhook with no secret
 * configured is refused unless plain HTTP is allowed (dev, tests: sent
 * unsigned).  @locality any thread.
 */
int worker_webhook_job_check(const worker_config_t *cfg, const proto_job_t *job, char *errstr,
                             size_t errstr_size);

/*
 * Boot of a run (its own thread, before any OTP is used): resolves url's
 * host, within timeout_ms, as the delivery would and judges every address
 * by the delivery's own rule (the operator's allow settings included).  -1
 * with "webhook: resolves to <what>, which is not allowed" when one is
 * forbidden; 0 otherwise (a name that does not resolve, or not in time, is
 * left to the delivery, which checks again at connect time).  Connects to
 * nothing.  @locality any thread; blocks up to timeout_ms.
 */
int worker_webhook_resolve_check(const worker_config_t *cfg, const char *url, long timeout_ms, char *errstr,
                                 size_t errstr_size);

typedef struct worker_webhook worker_webhook_t;

/* Starts the delivery thread.  NULL with errstr.  @locality main thread. */
worker_webhook_t *worker_webhook_start(const worker_config_t *cfg, worker_metrics_t *m, char *errstr,
                                       size_t errstr_size);
/* Stops it: attempts in flight are abandoned (their entries come due again
 * after their lease, on any worker).  NULL is fine.  @locality main thread. */
void worker_webhook_stop(worker_webhook_t *wh);

#endif
