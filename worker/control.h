/*
 * worker/control.h - watching the :ctl streams of every active run over
 * one Redis connection: a thread runs XREAD BLOCK over all the keys at once
 * and re-arms it with the current set after each block.  Adding a run ends
 * the block at once (CLIENT UNBLOCK from a second connection), so the new
 * run is read from its first entry without delay and nothing is missed.
 *
 * Every parsed message (cancel, reply, and types this worker does not know)
 * reaches the callback; the worker routes cancel and reply to the run
 * (worker_run_control) and ignores the rest.
 *
 * @locality watch/unwatch from any thread; the callback runs on the
 * control thread.
 */
#ifndef RUNNEL_WORKER_CONTROL_H
#define RUNNEL_WORKER_CONTROL_H

#include <stddef.h>

#include "proto/control.h"
#include "worker/config.h"

typedef struct worker_control worker_control_t;

typedef void (*worker_control_cb)(const char *run_id, const proto_ctl_t *ctl, void *arg);

/* Starts the thread (it connects lazily and reconnects with backoff).
 * max_runs bounds the watched set.  NULL with errstr. */
worker_control_t *worker_control_start(const worker_config_t *cfg, size_t max_runs,
                                       worker_control_cb cb, void *arg,
                                       char *errstr, size_t errstr_size);

/* Starts watching run_id's :ctl from its first entry.  0, or -1 when full. */
int worker_control_watch(worker_control_t *wc, const char *run_id);
void worker_control_unwatch(worker_control_t *wc, const char *run_id);

/* Stops and joins the thread, frees everything (NULL ok). */
void worker_control_stop(worker_control_t *wc);

#endif
