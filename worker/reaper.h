/*
 * worker/reaper.h - what is left of a run after its terminal line: its
 * guard (the cgroup, killing what is left in it, the egress proxy, the
 * workspace tmpfs) and its run directory, removed on threads of their own
 * so that the run's slot takes the next run at once.
 *
 * Removing a run's cgroups and directories costs 5-15 ms of wall time on a
 * busy machine (cgroup v1 rmdir per hierarchy, waiting for the sandbox's
 * last processes, unmounting, unlinking), during which the slot used to
 * stay busy.  The queue is bounded: a run that finds it full waits, so
 * what finished runs hold on the host never exceeds a few runs' worth.
 * worker_reaper_free() removes everything still queued before returning.
 *
 * @locality new/free: the main thread; put: any run thread.
 */
#ifndef RUNNEL_WORKER_REAPER_H
#define RUNNEL_WORKER_REAPER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/limits.h"
#include "worker/workspace.h"

typedef struct worker_reaper worker_reaper_t;

/* Starts nthreads threads (removals mostly wait on the kernel, so they
 * overlap well); cap: runs queued at most.  NULL with errstr. */
worker_reaper_t *worker_reaper_new(size_t cap, size_t nthreads, char *errstr, size_t errstr_size);

/*
 * Takes over a finished run's guard (may be NULL) and run directory (NULL:
 * none) and removes them.  claimed_mono_ms dates the "cleaned up" log line.
 * With reaper NULL, or when the thread cannot take it, this happens here,
 * before returning.
 */
void worker_reaper_put(worker_reaper_t *reaper, const char *run_id, int64_t claimed_mono_ms,
                       worker_guard_t *guard, const worker_ws_t *ws);

/* Removes what is still queued, stops the thread and frees. */
void worker_reaper_free(worker_reaper_t *reaper);

#endif
