/*
 * worker/consumer.h - the Kafka side of runnel-worker: a high-level
 * consumer of the job topic that never pauses (every record moves into the
 * run-time queue in Redis at once; the offset is stored only after that
 * write), a reader that fetches one record by partition and offset (for
 * queue entries that reference their record), and the dead-letter
 * producer for jobs that cannot be decoded.
 *
 * @locality consumer and DLQ: main thread (the DLQ producer's delivery
 * report callback runs there too, inside worker_consumer_dlq_result);
 * a fetcher: the thread that created it (the claimer).
 */
#ifndef RUNNEL_WORKER_CONSUMER_H
#define RUNNEL_WORKER_CONSUMER_H

#include <stddef.h>
#include <librdkafka/rdkafka.h>

#include "worker/config.h"

typedef struct worker_consumer worker_consumer_t;

/* Creates the consumer and subscribes to the job topic.  NULL with errstr
 * (a bad -X property is named). */
worker_consumer_t *worker_consumer_new(const worker_config_t *cfg,
                                       char *errstr, size_t errstr_size);

/* A pipe read end that becomes readable when the consumer queue has
 * something (messages, rebalances, errors): poll then. */
int worker_consumer_fd(worker_consumer_t *wc);

/*
 * Serves the consumer queue without waiting and returns the next message,
 * or NULL when none is ready.  The caller owns the message
 * (rd_kafka_message_destroy).  Errors and rebalances are handled inside.
 */
rd_kafka_message_t *worker_consumer_poll(worker_consumer_t *wc);

/* Drains the wake-up pipe (call when worker_consumer_fd was readable). */
void worker_consumer_ack_fd(worker_consumer_t *wc);

/* Stores offset+1 of m for the next commit (after the run is queued in Redis). */
void worker_consumer_store(worker_consumer_t *wc, const rd_kafka_message_t *m);

/*
 * Starts producing m's key and value to <topic>.dlq with headers "reason"
 * and "worker", and returns at once: the delivery is awaited on the
 * caller's event loop, through worker_consumer_dlq_result.  Its report
 * makes worker_consumer_fd readable.  One DLQ message at a time.  0, or -1
 * with errstr (nothing in flight then).
 */
int worker_consumer_dlq_send(worker_consumer_t *wc, const rd_kafka_message_t *m,
                             const char *reason, int timeout_ms,
                             char *errstr, size_t errstr_size);

/*
 * Serves the DLQ producer's delivery report without waiting: 0 while the
 * message sent last is in flight, 1 once it was delivered, -1 with errstr
 * when it was refused or timeout_ms passed with no report (a late report
 * is then ignored; the message may still be delivered, e.g. by the flush
 * at close).
 */
int worker_consumer_dlq_result(worker_consumer_t *wc, char *errstr, size_t errstr_size);

/* Leaves the group (committing stored offsets) and frees everything. */
void worker_consumer_close(worker_consumer_t *wc);

/* Partitions currently assigned (for logs and tests). */
int worker_consumer_assigned(worker_consumer_t *wc);

/* A group-less reader of single records. */
typedef struct worker_fetcher worker_fetcher_t;

worker_fetcher_t *worker_fetcher_new(const worker_config_t *cfg, char *errstr, size_t errstr_size);

/* Reads the record at topic/partition/offset: 0 with *buf (malloc'd,
 * NUL-terminated, the caller wipes and frees it) and *len; -1 with errstr
 * when it can never be read (deleted by retention); -2 with errstr when it
 * could not be read now (timeout: e.g. the broker is down or restarting). */
int worker_fetcher_get(worker_fetcher_t *f, const char *topic, int32_t partition, int64_t offset,
                       int timeout_ms, char **buf, size_t *len, char *errstr, size_t errstr_size);

void worker_fetcher_free(worker_fetcher_t *f);

/*
 * The DLQ for runs' own threads: a job refused only once claimed (its
 * webhook resolves to a forbidden address) goes to <topic>.dlq with the
 * same "reason" and "worker" headers as the consumer's.  Its own producer
 * (created on first use), apart from the consumer's, so that the main
 * thread's loop and delivery reports stay as they are.
 *
 * @locality new and free: main thread (free after every run ended);
 * send: any thread, concurrently.
 */
typedef struct worker_dlq worker_dlq_t;

worker_dlq_t *worker_dlq_new(const worker_config_t *cfg);

/* Produces key and value (the record's bytes as fetched) with reason, and
 * waits up to timeout_ms for the delivery report.  0, or -1 with errstr. */
int worker_dlq_send(worker_dlq_t *d, const void *key, size_t key_len, const void *value,
                    size_t value_len, const char *reason, int timeout_ms, char *errstr,
                    size_t errstr_size);

/* Flushes what is in flight (up to 5 s) and frees it (NULL ok). */
void worker_dlq_free(worker_dlq_t *d);

#endif
