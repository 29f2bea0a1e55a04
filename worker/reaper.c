/*
 * worker/reaper.c - removes finished runs' guards and run directories on
 * threads of their own (see reaper.h).
 */
#include "worker/reaper.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "proto/job.h"
#include "worker/sandbox.h"

typedef struct item {
	char run_id[PROTO_RUN_ID_MAX + 1];
	int64_t claimed_mono_ms;
	worker_guard_t *guard;
	worker_ws_t ws;
	int have_ws;
} item_t;

struct worker_reaper {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* an item came, or stop */
	pthread_cond_t room;
	item_t *q;
	size_t cap, head, n;
	int stop;
	pthread_t *threads;
	size_t nthreads;
};

static void reap(item_t *it)
{
	/* The guard first: the workspace tmpfs is unmounted before the run
	 * directory under it is removed. */
	worker_guard_free(it->guard);
	if (it->have_ws && worker_ws_recycle(&it->ws) < 0)
		rn_log_warn(it->run_id, "workspace_remove", "could not remove %s", it->ws.dir);
	/* The sandbox's init, if it had not exited yet when bwrap was reaped. */
	worker_sandbox_reap_orphans();
	rn_log_debug(it->run_id, "run_phase", "cleaned up at +%" PRId64 " ms", rn_mono_ms() - it->claimed_mono_ms);
}

static void *reaper_main(void *arg)
{
	worker_reaper_t *r = arg;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->n && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		if (!r->n)
			break; /* stop, and nothing left */
		item_t it = r->q[r->head];
		r->head = (r->head + 1) % r->cap;
		r->n--;
		pthread_cond_signal(&r->room);
		pthread_mutex_unlock(&r->mu);
		reap(&it);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

worker_reaper_t *worker_reaper_new(size_t cap, size_t nthreads, char *errstr, size_t errstr_size)
{
	cap = cap ? cap : 1;
	nthreads = nthreads ? nthreads : 1;
	worker_reaper_t *r = calloc(1, sizeof(*r));
	if (!r || !(r->q = calloc(cap, sizeof(*r->q))) || !(r->threads = calloc(nthreads, sizeof(*r->threads)))) {
		if (r)
			free(r->q);
		free(r);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	r->cap = cap;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	pthread_cond_init(&r->room, NULL);
	for (; r->nthreads < nthreads; r->nthreads++) {
		/* nftw and the proxy's stop are the deepest calls made here. */
		int e = rn_thread_start(&r->threads[r->nthreads], "runnel-reaper", 256 * 1024, 0, reaper_main, r);
		if (e) {
			snprintf(errstr, errstr_size, "cannot start a reaper thread: %s", strerror(e));
			worker_reaper_free(r);
			return NULL;
		}
	}
	return r;
}

void worker_reaper_put(worker_reaper_t *r, const char *run_id, int64_t claimed_mono_ms,
                       worker_guard_t *guard, const worker_ws_t *ws)
{
	item_t it;
	memset(&it, 0, sizeof(it));
	snprintf(it.run_id, sizeof(it.run_id), "%s", run_id);
	it.claimed_mono_ms = claimed_mono_ms;
	it.guard = guard;
	if (ws) {
		it.ws = *ws;
		it.have_ws = 1;
	}
	if (r) {
		pthread_mutex_lock(&r->mu);
		while (r->n == r->cap && !r->stop)
			pthread_cond_wait(&r->room, &r->mu);
		if (!r->stop) {
			r->q[(r->head + r->n) % r->cap] = it;
			r->n++;
			pthread_cond_signal(&r->cv);
			pthread_mutex_unlock(&r->mu);
			return;
		}
		pthread_mutex_unlock(&r->mu);
	}
	reap(&it);
}

void worker_reaper_free(worker_reaper_t *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_broadcast(&r->cv);
	pthread_cond_broadcast(&r->room);
	pthread_mutex_unlock(&r->mu);
	for (size_t i = 0; i < r->nthreads; i++)
		pthread_join(r->threads[i], NULL); /* they empty the queue first */
	free(r->threads);
	pthread_cond_destroy(&r->room);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r->q);
	free(r);
}
