/*
 * worker/warm.h - warm sandboxes: bwrap sandboxes started ahead of need
 * (worker_sandbox_start), each with its namespaces made, its own fresh run
 * directory's workspace bound at /root/workspace, and runnel-warm-init
 * (worker/warm_init.c) waiting on stdin for the run's argv, environment and
 * setup script (worker_sandbox_launch, as a cold start sends them).
 *
 * A warm sandbox serves exactly one run and is never reused: the run that
 * takes it gets its run directory too (workspace, assets, meta), removes it
 * at the end like a cold one, and nothing of one run is ever visible to
 * another.  What a warm sandbox cannot match is started cold instead:
 * another network mode, skills (no /root/skills bind), other binds, rlimits,
 * bwrap or rootfs.  See docs/worker.md ("Warm sandboxes").
 *
 * The pool keeps up to `size` idle sandboxes and refills in the background
 * on its own thread, which is also the thread that forks them: the kernel's
 * parent-death signal follows that thread, so it lives until
 * worker_warm_pool_free(), after every run has ended.
 * worker_warm_pool_drain() shrinks the pool to zero and stops refilling.
 *
 * @locality take: any run thread; drain/free: the main thread.
 */
#ifndef RUNNEL_WORKER_WARM_H
#define RUNNEL_WORKER_WARM_H

#include <stddef.h>

#include "common/sandbox_layout.h"
#include "worker/limits.h"
#include "worker/sandbox.h"
#include "worker/workspace.h"

/* Where the init is bound inside the sandbox. */
#define WORKER_WARM_INIT_IN_SANDBOX RN_SANDBOX_WARM_INIT

/* One started sandbox waiting for its run. */
typedef struct worker_warm_sb {
	worker_sandbox_t sb; /* running bwrap + init; stdin is the launch pipe */
	worker_ws_t ws;      /* its run directory (ws.workspace is bound) */
	int have_ws;
	/* What it was started with (a run's spec must match it). */
	char *bwrap_path;
	char *rootfs;
	char *workspace_dir;
	char *skills_dir; /* bound at /root/skills (a warm agent's), or NULL */
	char **ro_binds;  /* NULL-terminated, without the init's bind */
	int share_net;
	long rlimit_nofile, rlimit_nproc, rlimit_as_mb, rlimit_fsize_mb;
	long tmp_mb;
	long uid, gid; /* worker_sandbox_spec_t's */
	/* The cgroup it was started in (the worker's limits until a run takes
	 * it over: worker_guard_args_t.cgroup); empty without cgroups. */
	worker_cgroup_t cg;
} worker_warm_sb_t;

/*
 * Starts one warm sandbox from tmpl (driver bwrap; argv, envp and
 * setup_script are ignored; workspace_dir is bound, and skills_dir when
 * set: a warm agent's, which its run fills).  init_path is the host's runnel-warm-init.  Errors are the cold
 * spawn's ("cannot exec bwrap: ...").  0 or -1.  w->ws is left alone (the
 * pool fills it).
 */
int worker_warm_start(const worker_sandbox_spec_t *tmpl, const char *init_path,
                      worker_warm_sb_t *w, char *errstr, size_t errstr_size);

/* 1 when spec can run in w (same sandbox shape, workspace and net mode;
 * no egress bridge: the proxy socket of a run is bound at start). */
int worker_warm_fits(const worker_warm_sb_t *w, const worker_sandbox_spec_t *spec);

/*
 * Hands the run's argv, environment and setup script (spec->setup_script
 * is read from the host and written to /run/runnel/setup.sh inside) to the
 * waiting init (worker_sandbox_launch, as a cold start does), and moves
 * the sandbox into *sb (as worker_sandbox_spawn would fill it).  0, or -1
 * with errstr ("the warm sandbox is gone" when it died while waiting);
 * either way w's sandbox is consumed, its run directory stays with w (see
 * worker_warm_release_ws).
 */
int worker_warm_launch(worker_warm_sb_t *w, const worker_sandbox_spec_t *spec,
                       worker_sandbox_t *sb, char *errstr, size_t errstr_size);

/* Kills and reaps w's sandbox if still there and frees what w holds,
 * except the run directory when keep_ws (the run uses it). */
void worker_warm_discard(worker_warm_sb_t *w, int keep_ws);

/* ---- the pool ---- */

typedef struct worker_warm_pool worker_warm_pool_t; /* run.h names it too */

typedef struct worker_warm_pool_opts {
	size_t size;           /* idle sandboxes kept; 0: no pool */
	const char *init_path; /* host runnel-warm-init */
	const char *work_dir;  /* run directories go here */
	/* The sandbox shape (ro_binds: e.g. the mock agent's). */
	const char *bwrap_path;
	const char *rootfs;
	char *const *ro_binds;
	int share_net;
	long rlimit_nofile;
	long tmp_mb;   /* the worker's /tmp size (a run's must match) */
	long uid, gid; /* the sandbox's ids under a root worker (worker_sandbox_spec_t) */
	/* The worker's limits (outlive the pool): each warm workspace gets its
	 * tmpfs before bwrap binds it, each sandbox a cgroup of its own before
	 * bwrap starts, and the run's guard resizes the one and takes over the
	 * other. */
	const worker_limits_env_t *limits;
} worker_warm_pool_opts_t;

/* Starts the refill thread.  NULL with errstr; o is copied. */
worker_warm_pool_t *worker_warm_pool_new(const worker_warm_pool_opts_t *o,
                                         char *errstr, size_t errstr_size);

/*
 * Takes an idle sandbox of the given network mode, if there is one; the
 * refill thread starts a replacement.  Returns it (owned by the caller:
 * worker_warm_launch, then worker_warm_discard) or NULL (cold start).
 * pool may be NULL.
 */
worker_warm_sb_t *worker_warm_pool_take(worker_warm_pool_t *pool, int share_net);

/* Frees what worker_warm_pool_take returned (after launch or instead of it). */
void worker_warm_free(worker_warm_sb_t *w, int keep_ws);

/* Stops refilling and removes every idle sandbox (draining). */
void worker_warm_pool_drain(worker_warm_pool_t *pool);

/* Counters for logs and the bench: taken, missed (empty pool), started. */
void worker_warm_pool_stats(worker_warm_pool_t *pool, unsigned long *taken,
                            unsigned long *missed, unsigned long *started);

/* Drains, stops the thread and frees.  Call after every run ended. */
void worker_warm_pool_free(worker_warm_pool_t *pool);

#endif
