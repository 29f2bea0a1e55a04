/*
 * common/bg.h - the one shape of a background thread (after redis's bio.c):
 * a lock, a condition the threads wait on, a stop flag, the threads.  A
 * thread loops under the lock until stop is set, waiting on cv (with
 * rn_bg_wait_ms for a periodic one); rn_bg_stop is the only teardown:
 * under the lock it sets stop and wakes every waiter, then, outside the
 * lock, pokes what the condition cannot reach (a blocking read) and joins.
 *
 * The owner may keep its own state under mu and signal cv for its own
 * events.  @locality init, start, stop and destroy: the owner's thread;
 * the rest: any thread.
 */
#ifndef RUNNEL_COMMON_BG_H
#define RUNNEL_COMMON_BG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define RN_BG_THREADS_MAX 256 /* a worker's reaper: one per slot */

typedef struct rn_bg {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* waits time out on CLOCK_MONOTONIC */
	int stop;          /* set once by rn_bg_stop, under mu */
	size_t nthreads;
	pthread_t threads[RN_BG_THREADS_MAX];
} rn_bg_t;

/* 0, or an errno value (nothing to destroy then). */
int rn_bg_init(rn_bg_t *b);
/* Starts one more thread running fn(arg), named name, with a stack of
 * stack_size bytes (0: the default; rn_thread_start).  0, or an errno
 * value (EAGAIN past RN_BG_THREADS_MAX). */
int rn_bg_start(rn_bg_t *b, const char *name, size_t stack_size, void *(*fn)(void *), void *arg);

/*
 * Waits on cv (the caller holds mu) until it is signalled, stop is set,
 * or ms milliseconds passed (ms < 0: no limit).  Returns b->stop.
 */
int rn_bg_wait_ms(rn_bg_t *b, int64_t ms);

/*
 * Stops the threads: under mu, stop = 1 and a broadcast on cv and on also
 * (a second condition the threads may wait on; NULL: none); then
 * poke(arg) when poke is not NULL (outside the lock: for waits cv cannot
 * reach); then joins every thread started.  Once; then rn_bg_destroy.
 */
void rn_bg_stop(rn_bg_t *b, pthread_cond_t *also, void (*poke)(void *), void *arg);
/* Frees the lock and the condition (after rn_bg_stop, or when no thread
 * was started). */
void rn_bg_destroy(rn_bg_t *b);

#endif
