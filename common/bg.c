/*
 * common/bg.c - the background thread shape (see bg.h).
 */
#include "common/bg.h"

#include <errno.h>
#include <time.h>

#include "common/util.h"

int rn_bg_init(rn_bg_t *b)
{
	pthread_condattr_t ca;
	int rc;
	b->stop = 0;
	b->nthreads = 0;
	if ((rc = pthread_mutex_init(&b->mu, NULL)) != 0)
		return rc;
	if ((rc = pthread_condattr_init(&ca)) != 0) {
		pthread_mutex_destroy(&b->mu);
		return rc;
	}
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&b->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0)
		pthread_mutex_destroy(&b->mu);
	return rc;
}

int rn_bg_start(rn_bg_t *b, const char *name, size_t stack_size, void *(*fn)(void *), void *arg)
{
	if (b->nthreads == RN_BG_THREADS_MAX)
		return EAGAIN;
	int rc = rn_thread_start(&b->threads[b->nthreads], name, stack_size, 0, fn, arg);
	if (rc == 0)
		b->nthreads++;
	return rc;
}

int rn_bg_wait_ms(rn_bg_t *b, int64_t ms)
{
	if (b->stop)
		return 1;
	if (ms < 0) {
		pthread_cond_wait(&b->cv, &b->mu);
		return b->stop;
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&b->cv, &b->mu, &ts);
	return b->stop;
}

void rn_bg_stop(rn_bg_t *b, pthread_cond_t *also, void (*poke)(void *), void *arg)
{
	pthread_mutex_lock(&b->mu);
	b->stop = 1;
	pthread_cond_broadcast(&b->cv);
	if (also)
		pthread_cond_broadcast(also);
	pthread_mutex_unlock(&b->mu);
	if (poke)
		poke(arg);
	for (size_t i = 0; i < b->nthreads; i++)
		pthread_join(b->threads[i], NULL);
	b->nthreads = 0;
}

void rn_bg_destroy(rn_bg_t *b)
{
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
}
