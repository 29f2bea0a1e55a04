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

#include "common/bg.h"
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
	rn_bg_t bg;          /* the reaper threads; cv: an item came, or stop */
	pthread_cond_t room; /* under bg.mu: the queue has room, or stop */
	item_t *q;
	size_t cap, head, n;
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
	pthread_mutex_lock(&r->bg.mu);
	for (;;) {
		while (!r->n && !r->bg.stop)
			pthread_cond_wait(&r->bg.cv, &r->bg.mu);
		if (!r->n)
			break; /* stop, and nothing left */
		item_t it = r->q[r->head];
		r->head = (r->head + 1) % r->cap;
		r->n--;
		pthread_cond_signal(&r->room);
		pthread_mutex_unlock(&r->bg.mu);
		reap(&it);
		pthread_mutex_lock(&r->bg.mu);
	}
	pthread_mutex_unlock(&r->bg.mu);
	return NULL;
}

worker_reaper_t *worker_reaper_new(size_t cap, size_t nthreads, char *errstr, size_t errstr_size)
{
	cap = cap ? cap : 1;
	nthreads = nthreads ? nthreads : 1;
	worker_reaper_t *r = calloc(1, sizeof(*r));
	if (nthreads > RN_BG_THREADS_MAX)
		nthreads = RN_BG_THREADS_MAX;
	if (!r || !(r->q = calloc(cap, sizeof(*r->q)))) {
		if (r)
			free(r->q);
		free(r);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	r->cap = cap;
	rn_bg_init(&r->bg);
	pthread_cond_init(&r->room, NULL);
	for (size_t i = 0; i < nthreads; i++) {
		/* nftw and the proxy's stop are the deepest calls made here. */
		int e = rn_bg_start(&r->bg, "runnel-reaper", 256 * 1024, reaper_main, r);
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
		pthread_mutex_lock(&r->bg.mu);
		while (r->n == r->cap && !r->bg.stop)
			pthread_cond_wait(&r->room, &r->bg.mu);
		if (!r->bg.stop) {
			r->q[(r->head + r->n) % r->cap] = it;
			r->n++;
			pthread_cond_signal(&r->bg.cv);
			pthread_mutex_unlock(&r->bg.mu);
			return;
		}
		pthread_mutex_unlock(&r->bg.mu);
	}
	reap(&it);
}

void worker_reaper_free(worker_reaper_t *r)
{
	if (!r)
		return;
	rn_bg_stop(&r->bg, &r->room, NULL, NULL); /* they empty the queue first */
	pthread_cond_destroy(&r->room);
	rn_bg_destroy(&r->bg);
	free(r->q);
	free(r);
}
