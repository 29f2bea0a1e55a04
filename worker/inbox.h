/*
 * worker/inbox.h - one run's inbox of typed control messages (cancel,
 * reply), fed by the control watcher's thread and drained by the run's
 * thread.  Pushing wakes the run through its eventfd.  Bounded: beyond
 * WORKER_INBOX_MAX messages waiting, replies are dropped (and counted);
 * a cancel is never lost since it also sets the run's stop flag.
 *
 * @locality push from any thread; pop from the run's thread.
 */
#ifndef RUNNEL_WORKER_INBOX_H
#define RUNNEL_WORKER_INBOX_H

#include <stddef.h>
#include <stdint.h>

#include "proto/control.h"

#define WORKER_INBOX_MAX 64

typedef struct worker_inbox worker_inbox_t;

/* wake_fd (borrowed) is written on every push.  NULL out of memory. */
worker_inbox_t *worker_inbox_new(int wake_fd);
void worker_inbox_free(worker_inbox_t *in);

/* Queues a copy of msg.  0, or -1 when full (the message is dropped). */
int worker_inbox_push(worker_inbox_t *in, const proto_ctl_t *msg);

/* Takes the oldest message into *msg.  1, or 0 when empty. */
int worker_inbox_pop(worker_inbox_t *in, proto_ctl_t *msg);

/* Messages dropped because the inbox was full. */
uint64_t worker_inbox_dropped(worker_inbox_t *in);

#endif
