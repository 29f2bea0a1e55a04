/*
 * worker/stop.h - a run's stop word: the one value that says whether, and
 * why, a run must stop, and whether it must give up on Redis.
 *
 * Low byte: the stop reason (worker_stop_t).  The first reason wins, except
 * WORKER_STOP_LOST, which overrides any other (a run whose lease is gone
 * must write nothing, whatever it was stopping for).  Bit
 * WORKER_STOP_GIVE_UP: stop retrying Redis and abandon (set on every run
 * when the drain's hard deadline passed).
 *
 * The main and control threads write the word (worker_run_stop, the
 * drain), the run's thread and the blocking stages it calls (bootstrap,
 * workspace download, writeback upload, the publisher's backoff) read it.
 * Nothing else is shared for stopping: no volatile flags.
 *
 * @locality any thread (every access is atomic, sequentially consistent).
 */
#ifndef RUNNEL_WORKER_STOP_H
#define RUNNEL_WORKER_STOP_H

#include <stdatomic.h>

typedef enum {
	WORKER_STOP_NONE = 0,
	WORKER_STOP_CANCEL,   /* a cancel control message */
	WORKER_STOP_SHUTDOWN, /* the drain timeout passed */
	WORKER_STOP_LOST,     /* the lease is not ours any more: write nothing */
} worker_stop_t;

#define WORKER_STOP_REASON_MASK 0xffu
#define WORKER_STOP_GIVE_UP     0x100u

typedef struct worker_stopword {
	atomic_uint w;
} worker_stopword_t;

static inline void worker_stopword_init(worker_stopword_t *s)
{
	atomic_init(&s->w, 0u);
}

/* The stop reason (WORKER_STOP_NONE while the run may go on). */
static inline worker_stop_t worker_stopword_reason(const worker_stopword_t *s)
{
	return (worker_stop_t)(atomic_load(&((worker_stopword_t *)s)->w) & WORKER_STOP_REASON_MASK);
}

/* Non-zero once any stop was asked for (a reason, or giving up): what a
 * blocking stage polls to end early. */
static inline int worker_stopword_any(const worker_stopword_t *s)
{
	return atomic_load(&((worker_stopword_t *)s)->w) != 0;
}

/* Non-zero once the run must stop retrying Redis. */
static inline int worker_stopword_given_up(const worker_stopword_t *s)
{
	return (atomic_load(&((worker_stopword_t *)s)->w) & WORKER_STOP_GIVE_UP) != 0;
}

/* Records why (first reason wins; LOST overrides).  Returns the reason in
 * force afterwards. */
static inline worker_stop_t worker_stopword_request(worker_stopword_t *s, worker_stop_t why)
{
	unsigned cur = atomic_load(&s->w);
	for (;;) {
		unsigned reason = cur & WORKER_STOP_REASON_MASK;
		if (reason == WORKER_STOP_LOST || (reason != WORKER_STOP_NONE && why != WORKER_STOP_LOST))
			return (worker_stop_t)reason;
		unsigned next = (cur & ~WORKER_STOP_REASON_MASK) | (unsigned)why;
		if (atomic_compare_exchange_weak(&s->w, &cur, next))
			return why;
	}
}

/* Sets the give-up bit (the reason is left as it is). */
static inline void worker_stopword_give_up(worker_stopword_t *s)
{
	atomic_fetch_or(&s->w, WORKER_STOP_GIVE_UP);
}

#endif
