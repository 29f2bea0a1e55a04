/*
 * worker/cgroup.h - one control group per run's sandbox, so that memory,
 * processes and CPU are bounded per run and a run that hits a bound can be
 * told apart from one that crashed (SPEC §6; docs/sandbox.md "Limits").
 *
 * Three modes, probed once at worker start (worker_cgroup_probe):
 *   v2   a delegated cgroup v2 subtree (what a Kubernetes pod with a
 *        writable /sys/fs/cgroup has): the worker moves itself into a
 *        "worker" leaf of its own cgroup, enables memory, pids (and cpu)
 *        for the children, and makes "run-<id>" siblings with memory.max,
 *        memory.oom.group, pids.max and cpu.max;
 *   v1   writable cgroup v1 hierarchies (pids and memory required, cpu
 *        optional): "<own>/runnel-<pid>/run-<id>" in each, with pids.max,
 *        memory.limit_in_bytes and cpu.cfs_quota_us;
 *   none neither is writable: the caller warns once and falls back to
 *        rlimits.
 * A cgroup is entered by the sandbox's first process before it executes
 * bwrap (the child writes "0" to pre-opened files: v1 "tasks", v2
 * "cgroup.procs"), so
 * nothing the agent starts is ever outside it.  A warm sandbox is started
 * in a cgroup of its own, which its run takes over with the run's limits
 * (worker_cgroup_set_limits): moving processes between cgroups waits for
 * an RCU grace period in the kernel (10-15 ms measured, on the run's
 * critical path), writing a limit file does not.
 *
 * @locality worker_cgroup_probe: main thread, before any run; the rest:
 * the run's thread, one worker_cgroup_t per run.
 */
#ifndef RUNNEL_WORKER_CGROUP_H
#define RUNNEL_WORKER_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "worker/stop.h"

typedef enum {
	WORKER_CGROUP_NONE = 0,
	WORKER_CGROUP_V1,
	WORKER_CGROUP_V2,
} worker_cgroup_mode_t;

#define WORKER_CGROUP_PATH_MAX 512
#define WORKER_CGROUP_FDS      3

/* What the probe found; lives as long as the worker (one, static). */
typedef struct worker_cgroup_root {
	worker_cgroup_mode_t mode;
	int have_cpu; /* cpu bandwidth control available */
	/* v2: the directory whose children are runs.  v1: one per controller
	 * (pids, memory, cpu; "" when absent). */
	char v2_base[WORKER_CGROUP_PATH_MAX];
	char v1_pids[WORKER_CGROUP_PATH_MAX];
	char v1_mem[WORKER_CGROUP_PATH_MAX];
	char v1_cpu[WORKER_CGROUP_PATH_MAX];
} worker_cgroup_root_t;

/* Limits of one run; 0 = not limited. */
typedef struct worker_cgroup_limits {
	uint64_t memory_bytes;
	long pids;
	long cpu_millis; /* 1000 = one CPU */
} worker_cgroup_limits_t;

/* Counters read back from a run's cgroup. */
typedef struct worker_cgroup_events {
	uint64_t oom_kills;        /* processes the kernel killed at the memory limit */
	uint64_t memory_max_hits;  /* times the memory limit was reached */
	uint64_t pids_max_hits;    /* forks refused at the process limit */
	uint64_t cpu_throttled_us; /* time spent throttled by the CPU limit */
} worker_cgroup_events_t;

typedef struct worker_cgroup {
	const worker_cgroup_root_t *root;
	int ndirs;
	char dirs[WORKER_CGROUP_FDS][WORKER_CGROUP_PATH_MAX]; /* created dirs */
	/* O_WRONLY|O_CLOEXEC, -1 unused: v1 "tasks", v2 "cgroup.procs" (see add_dir) */
	int procs_fd[WORKER_CGROUP_FDS];
	/* The limits in force (have_limits): setting the same again writes
	 * nothing (a CPU quota write walks every cgroup under a global mutex). */
	worker_cgroup_limits_t limits;
	int have_limits;
} worker_cgroup_t;

/*
 * Finds a writable hierarchy and prepares it (v2: moves this process into
 * "<own>/worker" and enables the controllers for its siblings).  Always
 * fills root; returns the mode, with a one-line explanation in errstr when
 * the mode is NONE ("cgroup v2 at /sys/fs/cgroup is not writable (...);
 * cgroup v1 has no writable pids hierarchy").  force: "auto", "v1", "v2"
 * or "off".
 */
worker_cgroup_mode_t worker_cgroup_probe(worker_cgroup_root_t *root, const char *force,
                                         char *errstr, size_t errstr_size);

/* "v2", "v1" or "none". */
const char *worker_cgroup_mode_name(worker_cgroup_mode_t mode);

/*
 * Creates the cgroup "runnel-<worker pid>-<name>" and writes the limits.
 * want_cpu: v1 makes the cpu hierarchy's cgroup even without a CPU limit
 * (one made ahead of its run, which may set one).  0, or -1 with errstr
 * (nothing left behind).
 */
int worker_cgroup_create(worker_cgroup_t *cg, const worker_cgroup_root_t *root,
                         const char *name, const worker_cgroup_limits_t *lim, int want_cpu,
                         char *errstr, size_t errstr_size);

/* The cgroup's CPU weight among its siblings: idle 1 (v2 cpu.weight; v1
 * cpu.shares 2), else the default 100 (1024).  For work done ahead of a
 * run (a warm agent's start), which must not slow the runs in flight;
 * without a cpu controller nothing happens.  Best effort, never fails. */
void worker_cgroup_set_idle(worker_cgroup_t *cg, int idle);

/* Writes every limit again (0 fields: unlimited), for a cgroup made ahead
 * of its run.  0, or -1 with errstr naming the file. */
int worker_cgroup_set_limits(worker_cgroup_t *cg, const worker_cgroup_limits_t *lim,
                             char *errstr, size_t errstr_size);

/* v1: renames the cgroup to "runnel-<worker pid>-<name>" (best effort:
 * its processes, files and limits stay).  v2 cannot rename: a no-op. */
void worker_cgroup_rename(worker_cgroup_t *cg, const char *name);

/* Hands src's cgroup over to dst; src is left as never made. */
void worker_cgroup_move(worker_cgroup_t *dst, worker_cgroup_t *src);

/* Reads the counters.  0, or -1 when nothing could be read. */
int worker_cgroup_events(const worker_cgroup_t *cg, worker_cgroup_events_t *ev);

/* Kills every process in the cgroup (SIGKILL), waits for it to empty (at
 * most timeout_ms) and removes it.  Safe on a zeroed (never made: nothing is closed) or
 * failed cgroup. */
void worker_cgroup_destroy(worker_cgroup_t *cg, int timeout_ms);

/* Work done in a charged child: returns a result and fills out (a
 * message), both handed back to worker_cgroup_call's caller. */
typedef int (*worker_cgroup_fn_t)(void *arg, char *out, size_t out_size);

#define WORKER_CGROUP_CALL_DIED (-1000) /* the child was killed or timed out */

/*
 * Runs fn(arg, out, out_size) so that the memory it allocates, tmpfs pages
 * above all, is charged to a run's cgroup rather than the worker's: in a
 * forked child that first enters the cgroup through its procs files
 * fds[0..nfds) (what worker_guard_cgroup_fds hands out), with
 * PR_SET_PDEATHSIG.  The worker is multi-threaded: fn may take no lock
 * another thread could hold, so it may not allocate (a sanitizer's malloc
 * is not reset in the child), nor format an errno (strerror may); plain
 * system calls only, or worker_cgroup_exec.  The
 * caller waits at most timeout_ms and polls stop (may be NULL); a stopped
 * or late child is killed.  nfds 0 (no cgroups on this host): fn runs here.
 * Returns fn's result, or WORKER_CGROUP_CALL_DIED with out telling why
 * (*sig, may be NULL, gets the signal that killed it, 0 when none).
 */
int worker_cgroup_call(const int *fds, int nfds, const worker_stopword_t *stop, int timeout_ms,
                       worker_cgroup_fn_t fn, void *arg, char *out, size_t out_size, int *sig);

/*
 * Runs the program at path (argv) charged to a run's cgroup: started with
 * posix_spawn (no code of this process runs in the child), stdin in_fd,
 * stdout a pipe whose bytes (at most out_size - 1, trailing newline cut)
 * become out, stderr this process's, and the procs files fds[0..nfds) as
 * its fds 3, 4, ...: the program enters the cgroup through them (writing
 * "0") before it allocates, and sets PR_SET_PDEATHSIG itself.  Waits at
 * most timeout_ms and polls stop (may be NULL); a stopped or late program
 * is killed.  Returns its exit status, or WORKER_CGROUP_CALL_DIED with out
 * telling why (*sig, may be NULL, the signal that killed it, 0 when none).
 */
int worker_cgroup_exec(const int *fds, int nfds, const worker_stopword_t *stop, int timeout_ms, const char *path,
                       char *const argv[], int in_fd, char *out, size_t out_size, int *sig);

#endif
