/*
 * dispatcher/producer.h - the Kafka producer of jobs, driven from the
 * dispatcher's event loop: librdkafka signals its main queue on a pipe
 * (rd_kafka_queue_io_event_enable) and the loop serves delivery reports
 * with rd_kafka_poll(), so a report reaches its HTTP request on the loop
 * thread without locks.
 *
 * @locality main (loop) thread, except dispatcher_producer_handle(), whose
 * rd_kafka_t is thread-safe (the readiness probe calls rd_kafka_metadata).
 */
#ifndef RUNNEL_DISPATCHER_PRODUCER_H
#define RUNNEL_DISPATCHER_PRODUCER_H

#include <stddef.h>

#include <event2/event.h>
#include <librdkafka/rdkafka.h>

#include "dispatcher/config.h"

typedef struct dispatcher_producer dispatcher_producer_t;

/*
 * The outcome of one produce.  ok = 1: the broker has it.  ok = 0: err says
 * why (no secret); persisted = 1 when the message may nevertheless have
 * reached the broker (a timeout after sending), 0 when it certainly did not.
 */
typedef void (*dispatcher_delivery_cb)(void *arg, int ok, int maybe_persisted,
                                       const char *err);

dispatcher_producer_t *dispatcher_producer_new(struct event_base *base,
                                               const dispatcher_config_t *cfg,
                                               char *errstr, size_t errstr_size);

/*
 * Produces value (copied; the caller wipes its own buffer) with key to the
 * jobs topic.  cb runs exactly once, later, on the loop thread, unless this
 * returns -1 (nothing queued; errstr says why, e.g. the local queue is full).
 */
int dispatcher_producer_send(dispatcher_producer_t *p, const char *key,
                             const void *value, size_t len,
                             dispatcher_delivery_cb cb, void *arg,
                             char *errstr, size_t errstr_size);

/* Messages produced and not yet reported. */
int dispatcher_producer_outstanding(dispatcher_producer_t *p);

rd_kafka_t *dispatcher_producer_handle(dispatcher_producer_t *p);

/* Waits up to flush_ms for outstanding reports (their callbacks run), then
 * destroys the producer.  NULL ok. */
void dispatcher_producer_free(dispatcher_producer_t *p, int flush_ms);

#endif
