/*
 * worker/claim.h - the worker's side of the run-time queue (common/
 * runqueue.h): what a Kafka record becomes in the queue (the entry) and
 * how it is pushed there (intake), the claimer thread that fills free
 * slots from the queue, and the hand-over of claimed runs to the loop.
 * main.c keeps the slot table, the leases and the Kafka side.
 *
 * The entry never holds an OTP or a prompt in plaintext (SPEC §2):
 *   - with a job key (RUNNEL_JOB_KEY): the job serialized *sealed* with that
 *     key (a sealed Kafka record stays sealed; an unsealed one is sealed
 *     here), so any worker of the fleet can open it on claim;
 *   - without a key (or when the sealed job would exceed the job size cap):
 *     a reference {"ref":{"t":TOPIC,"p":PARTITION,"o":OFFSET}} to the record
 *     in the job topic, which the claiming worker reads back from
 *     Kafka (its secrets then only ever sit in Kafka, as before), unless
 *     it queued the record itself moments ago: the last records it queued
 *     by reference (64, 4 MiB at most) stay in its memory for its own
 *     claims (worker_claimer_remember), wiped when taken or dropped.
 *
 * The claimer thread, while this worker has fewer runs than slots and is
 * not draining, takes the next run fairly (rn_runqueue_take), opens its
 * entry, claims it in its state hash (rn_runstate_claim: exactly-once
 * start, cancel before start, lost runs), acknowledges the entry, and
 * hands the run over to the main thread: it appends it to a list sized by
 * the slots (under the claimer's mutex) and activates a libevent user
 * event, whose callback starts the runs on the main thread's loop.  With
 * nothing to take it blocks on the queue's wake list (BLPOP, 1 s at most).
 * Runs handed over but not started when the claimer stops (after the loop
 * ended) are ended worker_shutdown by worker_claimer_stop.
 *
 * @locality worker_queue_entry: main thread.  worker_claimer_*: main
 * thread; the start callback runs on the main thread (inside the loop).
 * Take, claim and ack run on the claimer thread, which shares only the
 * hand-over list and its counters (under its mutex) with the main thread.
 */
#ifndef RUNNEL_WORKER_CLAIM_H
#define RUNNEL_WORKER_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <librdkafka/rdkafka.h>

#include "common/runstate.h"
#include "proto/job.h"
#include "worker/config.h"
#include "worker/metrics.h"

/* The queue entry for job, which arrived as record m.  malloc'd (the
 * caller frees it), length in *len; NULL with errstr. */
char *worker_queue_entry(const worker_config_t *cfg, const proto_job_t *job,
                         const rd_kafka_message_t *m, size_t *len,
                         char *errstr, size_t errstr_size);

typedef enum {
	WORKER_QUEUE_PUSHED = 0,     /* queued (or had been: *already) */
	WORKER_QUEUE_NO_ENTRY,       /* the entry could not be made (memory) */
	WORKER_QUEUE_REDIS,          /* mark or push failed: drop the connection */
	WORKER_QUEUE_WAIT_FAILED,    /* WAIT gave no answer: drop the connection */
	WORKER_QUEUE_REPLICAS_SHORT, /* fewer replicas than queue_wait_replicas */
	WORKER_QUEUE_DUPLICATE,      /* another run owns the idempotency key: not
	                              * queued (errstr holds that run's id) */
} worker_queue_push_t;

/*
 * Intake: puts job, which arrived as record m, into the run-time queue: its
 * state hash says "queued" (with its tenant), then the entry is pushed;
 * with cfg->queue_wait_replicas, WAIT (1 s at most) for that many replicas
 * too, since durable means there as well before the offset moves.  Short
 * of it, the caller pushes again later (a no-op push).  *already: the run
 * had been queued before.  A job with an idempotency key first claims
 * the key (SET NX, shared with the dispatcher): when another run owns it
 * the job is not queued at all (WORKER_QUEUE_DUPLICATE), so its OTPs are
 * never redeemed.  Anything but WORKER_QUEUE_PUSHED comes with errstr.  The entry's plaintext is wiped before returning.
 * @locality main thread (c is the main thread's connection).
 */
worker_queue_push_t worker_queue_push(rn_rcluster_t *c, const worker_config_t *cfg,
                                      const proto_job_t *job, const rd_kafka_message_t *m,
                                      int *already, char *errstr, size_t errstr_size);

/* A run the claimer claimed (status OK or CANCEL). */
typedef struct worker_claimed {
	proto_job_t job; /* owned */
	rn_claim_t claim;
	int64_t queued_ms; /* when it entered the queue (server clock) */
	/* A job with a webhook: the record's bytes as fetched (sealed stays
	 * sealed), for the DLQ if the run refuses the webhook at boot; NULL
	 * otherwise.  Owned; wiped when freed. */
	char *raw;
	size_t raw_len;
} worker_claimed_t;

/* Wipes and frees a kept record copy (*raw NULL ok); leaves NULL, 0. */
void worker_claimed_raw_clear(char **raw, size_t *raw_len);

/* Main thread, inside the loop: start the run.  The callback owns c->job
 * (moves or clears it); the struct itself is freed after it returns. */
typedef void (*worker_claim_cb)(worker_claimed_t *c, void *arg);

typedef struct worker_claimer worker_claimer_t;

/* Starts the thread; claimed runs reach cb on base's loop.  slots bounds
 * the runs handed out and not yet reported done.  NULL with errstr. */
worker_claimer_t *worker_claimer_start(struct event_base *base, const worker_config_t *cfg,
                                       worker_metrics_t *m, long slots, worker_claim_cb cb,
                                       void *arg, char *errstr, size_t errstr_size);

/* Main thread, before pushing record m's reference entry: keeps a copy for
 * this worker's own claim of it (reference mode; see above).  Best effort. */
void worker_claimer_remember(worker_claimer_t *cl, const rd_kafka_message_t *m);

/* A handed-out run ended (its slot is free).  NULL: nothing. */
void worker_claimer_done(worker_claimer_t *cl);

/* Drain: take nothing more (queued runs stay for other workers). */
void worker_claimer_pause(worker_claimer_t *cl);

/* Stops and joins the thread (within about a second), ends the runs
 * handed over but never started worker_shutdown, frees it (NULL ok).  Call
 * after the loop stopped dispatching. */
void worker_claimer_stop(worker_claimer_t *cl);

#endif
