/*
 * proto/queueentry.h - the run-time queue's entry by reference (common/
 * runqueue.h, worker/claim.h): {"ref":{"t":TOPIC,"p":PARTITION,"o":OFFSET}},
 * the place of a job's record in the job topic, queued instead of the job
 * when the worker has no job key (or the sealed job would be too large).
 * Every worker of a fleet reads the entries any other wrote, so the reader
 * checks each field.  Any other entry is a job (sealed or not) for
 * proto_job_parse.  Pure functions; any thread.
 */
#ifndef RUNNEL_PROTO_QUEUEENTRY_H
#define RUNNEL_PROTO_QUEUEENTRY_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_TOPIC_MAX 249 /* Kafka's limit on a topic name */

typedef struct proto_queue_ref {
	char topic[PROTO_TOPIC_MAX + 1]; /* "" in an entry without "t" */
	int32_t partition;
	int64_t offset;
} proto_queue_ref_t;

/*
 * The entry for ref (compact JSON, no newline; "t" left out when topic is
 * "").  malloc'd (the caller frees) with *lenp, or NULL out of memory.
 */
char *proto_queue_ref_write(const proto_queue_ref_t *ref, size_t *lenp);

/*
 * Reads an entry.  1 with *ref filled when it is a reference; 0 when it is
 * not (a JSON object without "ref", or not JSON at all: a job); -1 with
 * errstr for a reference that breaks its rules:
 *   "ref: not an object"
 *   "ref: t must be a topic name of 1-249 characters"
 *   "ref: p must be a partition number (0-2147483647)"
 *   "ref: o must be an offset (a non-negative integer)"
 */
int proto_queue_ref_parse(const char *entry, size_t len, proto_queue_ref_t *ref, char *errstr,
                          size_t errstr_size);

#endif
