/*
 * worker/warm.c - warm sandboxes and their pool (see warm.h): starting a
 * bwrap sandbox ahead of its run (its init waits), checking that a run's
 * sandbox spec matches it, launching the run in it (the launch message is
 * worker/sandbox.c's, as for a cold start), and the refill thread that
 * keeps a few of them waiting.
 */
#include "worker/warm.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bg.h"
#include "common/log.h"
#include "common/util.h"

#define WARM_RETRY_MS 1000 /* after a failed start */

/* ------------------------------------------------------------------------
 * One warm sandbox
 * ------------------------------------------------------------------------ */

static int str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static char **strv_dup(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	char **d = calloc(n + 1, sizeof(*d));
	if (!d)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		d[i] = strdup(v[i]);
		if (!d[i]) {
			for (size_t j = 0; j < i; j++)
				free(d[j]);
			free(d);
			return NULL;
		}
	}
	return d;
}

static void strv_free0(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static void sb_blank(worker_sandbox_t *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->pid = -1;
	sb->stdin_fd = sb->stdout_fd = sb->stderr_fd = sb->info_fd = -1;
}

int worker_warm_start(const worker_sandbox_spec_t *tmpl, const char *init_path,
                      worker_warm_sb_t *w, char *errstr, size_t errstr_size)
{
	worker_ws_t keep = w->ws;
	int keep_have = w->have_ws;
	memset(w, 0, sizeof(*w));
	w->ws = keep;
	w->have_ws = keep_have;
	sb_blank(&w->sb);
	if (tmpl->driver != WORKER_SANDBOX_BWRAP || !init_path || !tmpl->workspace_dir) {
		snprintf(errstr, errstr_size, "warm: only bwrap sandboxes start warm");
		return -1;
	}
	/* The init waits for the run's argv and environment (launch). */
	worker_sandbox_spec_t s = *tmpl;
	s.init_path = init_path;
	s.argv = NULL;
	s.envp = NULL;
	s.setup_script = NULL;
	if (worker_sandbox_start(&s, &w->sb, errstr, errstr_size) != 0) {
		sb_blank(&w->sb);
		return -1;
	}
	w->bwrap_path = tmpl->bwrap_path ? strdup(tmpl->bwrap_path) : NULL;
	w->rootfs = tmpl->rootfs ? strdup(tmpl->rootfs) : NULL;
	w->workspace_dir = strdup(tmpl->workspace_dir);
	w->skills_dir = tmpl->skills_dir ? strdup(tmpl->skills_dir) : NULL;
	w->ro_binds = strv_dup(tmpl->ro_binds);
	w->share_net = tmpl->share_net;
	w->rlimit_nofile = tmpl->rlimit_nofile;
	w->rlimit_nproc = tmpl->rlimit_nproc;
	w->rlimit_as_mb = tmpl->rlimit_as_mb;
	w->rlimit_fsize_mb = tmpl->rlimit_fsize_mb;
	w->tmp_mb = tmpl->tmp_mb;
	w->uid = tmpl->uid;
	w->gid = tmpl->gid;
	if ((tmpl->bwrap_path && !w->bwrap_path) || (tmpl->rootfs && !w->rootfs) ||
	    !w->workspace_dir || !w->ro_binds || (tmpl->skills_dir && !w->skills_dir)) {
		worker_warm_discard(w, 1);
		snprintf(errstr, errstr_size, "warm: out of memory");
		return -1;
	}
	return 0;
}

static int bind_listed(char *const *list, const char *b)
{
	for (size_t i = 0; list && list[i]; i++)
		if (!strcmp(list[i], b))
			return 1;
	return 0;
}

int worker_warm_fits(const worker_warm_sb_t *w, const worker_sandbox_spec_t *spec)
{
	if (!w || w->sb.pid <= 0 || spec->driver != WORKER_SANDBOX_BWRAP)
		return 0;
	if (!str_eq(w->bwrap_path, spec->bwrap_path) || !str_eq(w->rootfs, spec->rootfs) ||
	    !str_eq(w->workspace_dir, spec->workspace_dir) || (spec->skills_dir && !str_eq(w->skills_dir, spec->skills_dir)) ||
	    w->share_net != spec->share_net || w->rlimit_nofile != spec->rlimit_nofile ||
	    w->rlimit_nproc != spec->rlimit_nproc || w->rlimit_as_mb != spec->rlimit_as_mb ||
	    w->rlimit_fsize_mb != spec->rlimit_fsize_mb || w->tmp_mb != spec->tmp_mb || spec->egress_bridge ||
	    w->uid != spec->uid || w->gid != spec->gid)
		return 0;
	for (size_t i = 0; spec->ro_binds && spec->ro_binds[i]; i++)
		if (!bind_listed(w->ro_binds, spec->ro_binds[i]))
			return 0;
	return 1;
}

int worker_warm_launch(worker_warm_sb_t *w, const worker_sandbox_spec_t *spec,
                       worker_sandbox_t *sb, char *errstr, size_t errstr_size)
{
	sb_blank(sb);
	if (!worker_warm_fits(w, spec) || !spec->argv || !spec->argv[0]) {
		snprintf(errstr, errstr_size, "warm: the run does not fit this sandbox");
		worker_warm_discard(w, 1);
		return -1;
	}
	int rc = worker_sandbox_launch(&w->sb, spec, errstr, errstr_size);
	if (rc == 0) {
		*sb = w->sb;
		sb_blank(&w->sb);
	} else {
		if (!strcmp(errstr, "the sandbox is gone"))
			snprintf(errstr, errstr_size, "the warm sandbox is gone");
		worker_warm_discard(w, 1);
	}
	return rc;
}

void worker_warm_discard(worker_warm_sb_t *w, int keep_ws)
{
	if (w->sb.pid > 0)
		worker_sandbox_destroy(&w->sb);
	sb_blank(&w->sb);
	/* Not taken over by a run: nothing of one is in it. */
	worker_cgroup_destroy(&w->cg, 2000);
	free(w->bwrap_path);
	free(w->rootfs);
	free(w->workspace_dir);
	free(w->skills_dir);
	strv_free0(w->ro_binds);
	w->bwrap_path = w->rootfs = w->workspace_dir = w->skills_dir = NULL;
	w->ro_binds = NULL;
	if (!keep_ws && w->have_ws) {
		/* The workspace tmpfs (worker_limits_mount_workspace), if any. */
		if (umount2(w->ws.workspace, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
			rn_log_warn(NULL, "warm_remove", "could not unmount %s: %s", w->ws.workspace, strerror(errno));
		if (worker_ws_remove(&w->ws) < 0)
			rn_log_warn(NULL, "warm_remove", "could not remove %s", w->ws.dir);
		w->have_ws = 0;
	}
}

/* ------------------------------------------------------------------------
 * The pool
 * ------------------------------------------------------------------------ */

struct worker_warm_pool {
	size_t size;
	char *init_path, *work_dir, *bwrap_path, *rootfs;
	char **ro_binds;
	int share_net;
	long rlimit_nofile;
	long tmp_mb;
	long uid, gid;
	const worker_limits_env_t *limits;

	rn_bg_t bg; /* the refill thread; mu guards what follows */
	worker_warm_sb_t **idle;
	size_t nidle;
	int draining;
	unsigned long taken, missed, started, seq;
};

/* One new warm sandbox with its own run directory, or NULL. */
static worker_warm_sb_t *pool_start_one(worker_warm_pool_t *p, unsigned long seq,
                                        char *errstr, size_t errstr_size)
{
	worker_warm_sb_t *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	/* "warm.<pid>.<seq>": its directory's and its cgroup's name, which no
	 * run id can spell (worker/workspace.h). */
	char name[64];
	if (worker_ws_create_own(&w->ws, p->work_dir, "warm", seq, name, errstr, errstr_size) != 0) {
		free(w);
		return NULL;
	}
	w->have_ws = 1;
	if (p->limits && worker_limits_mount_workspace(p->limits, w->ws.workspace, errstr, errstr_size) < 0) {
		worker_warm_discard(w, 0);
		free(w);
		return NULL;
	}
	/* Its cgroup, entered by bwrap's first process, bounded by the
	 * worker's limits until its run sets its own. */
	worker_cgroup_t cg = { .ndirs = 0 };
	if (p->limits && p->limits->cgroup.mode != WORKER_CGROUP_NONE) {
		worker_cgroup_limits_t cl = worker_limits_cgroup(&p->limits->max);
		if (worker_cgroup_create(&cg, &p->limits->cgroup, name, &cl, 1, errstr, errstr_size) < 0) {
			worker_warm_discard(w, 0);
			free(w);
			return NULL;
		}
	}
	worker_sandbox_spec_t t;
	memset(&t, 0, sizeof(t));
	t.cgroup_fds = cg.ndirs ? cg.procs_fd : NULL;
	t.ncgroup_fds = cg.ndirs;
	t.driver = WORKER_SANDBOX_BWRAP;
	t.bwrap_path = p->bwrap_path;
	t.rootfs = p->rootfs;
	t.workspace_dir = w->ws.workspace;
	t.ro_binds = p->ro_binds;
	t.share_net = p->share_net;
	t.rlimit_nofile = p->rlimit_nofile;
	t.tmp_mb = p->tmp_mb;
	t.uid = p->uid;
	t.gid = p->gid;
	/* Without cgroups a run's process cap is RLIMIT_NPROC (the guard's
	 * fallback): the worker's own cap, so that runs that keep it fit. */
	if (p->limits && p->limits->cgroup.mode == WORKER_CGROUP_NONE)
		t.rlimit_nproc = p->limits->max.pids;
	if (worker_warm_start(&t, p->init_path, w, errstr, errstr_size) != 0) {
		worker_cgroup_destroy(&cg, 2000); /* a no-op without one */
		worker_warm_discard(w, 0);
		free(w);
		return NULL;
	}
	worker_cgroup_move(&w->cg, &cg);
	return w;
}

/*
 * The refill thread.  It forks every warm sandbox, so it must outlive
 * them all (PR_SET_PDEATHSIG follows the forking thread): it returns only
 * from worker_warm_pool_free().
 */
static void *pool_main(void *arg)
{
	worker_warm_pool_t *p = arg;
	int failing = 0;
	pthread_mutex_lock(&p->bg.mu);
	while (!p->bg.stop) {
		if (p->draining || p->nidle >= p->size) {
			pthread_cond_wait(&p->bg.cv, &p->bg.mu);
			continue;
		}
		unsigned long seq = ++p->seq;
		pthread_mutex_unlock(&p->bg.mu);
		char err[512];
		worker_warm_sb_t *w = pool_start_one(p, seq, err, sizeof(err));
		pthread_mutex_lock(&p->bg.mu);
		if (!w) {
			if (!failing)
				rn_log_warn(NULL, "warm_start", "a warm sandbox could not be started (%s); "
				                                "runs start cold meanwhile",
				            err);
			failing = 1;
			if (!p->bg.stop)
				rn_bg_wait_ms(&p->bg, WARM_RETRY_MS);
			continue;
		}
		failing = 0;
		p->started++;
		if (p->draining || p->bg.stop) {
			pthread_mutex_unlock(&p->bg.mu);
			worker_warm_free(w, 0);
			pthread_mutex_lock(&p->bg.mu);
			continue;
		}
		p->idle[p->nidle++] = w;
	}
	pthread_mutex_unlock(&p->bg.mu);
	return NULL;
}

worker_warm_pool_t *worker_warm_pool_new(const worker_warm_pool_opts_t *o,
                                         char *errstr, size_t errstr_size)
{
	if (o->size == 0 || !o->init_path || !o->work_dir) {
		snprintf(errstr, errstr_size, "warm: no pool size, init or work directory");
		return NULL;
	}
	worker_warm_pool_t *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	p->size = o->size;
	p->init_path = strdup(o->init_path);
	p->work_dir = strdup(o->work_dir);
	p->bwrap_path = o->bwrap_path ? strdup(o->bwrap_path) : NULL;
	p->rootfs = o->rootfs ? strdup(o->rootfs) : NULL;
	p->ro_binds = strv_dup(o->ro_binds);
	p->share_net = o->share_net;
	p->rlimit_nofile = o->rlimit_nofile;
	p->tmp_mb = o->tmp_mb;
	p->uid = o->uid;
	p->gid = o->gid;
	p->limits = o->limits;
	p->idle = calloc(o->size, sizeof(*p->idle));
	rn_bg_init(&p->bg);
	if (!p->init_path || !p->work_dir || (o->bwrap_path && !p->bwrap_path) ||
	    (o->rootfs && !p->rootfs) || !p->ro_binds || !p->idle) {
		worker_warm_pool_free(p);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	int e = rn_bg_start(&p->bg, "runnel-warm", 0, pool_main, p);
	if (e) {
		worker_warm_pool_free(p);
		snprintf(errstr, errstr_size, "warm: cannot start the refill thread: %s", strerror(e));
		return NULL;
	}
	return p;
}

worker_warm_sb_t *worker_warm_pool_take(worker_warm_pool_t *p, int share_net)
{
	if (!p)
		return NULL;
	for (;;) {
		worker_warm_sb_t *w = NULL;
		pthread_mutex_lock(&p->bg.mu);
		if (share_net != p->share_net || p->draining) {
			pthread_mutex_unlock(&p->bg.mu);
			return NULL;
		}
		if (p->nidle > 0) {
			/* Oldest first: every sandbox waits about as long. */
			w = p->idle[0];
			memmove(p->idle, p->idle + 1, (p->nidle - 1) * sizeof(*p->idle));
			p->nidle--;
			pthread_cond_signal(&p->bg.cv);
		} else {
			p->missed++;
		}
		pthread_mutex_unlock(&p->bg.mu);
		if (!w)
			return NULL;
		/* One that died while waiting is thrown away, not handed out. */
		if (worker_sandbox_reap(&w->sb) == 0) {
			pthread_mutex_lock(&p->bg.mu);
			p->taken++;
			pthread_mutex_unlock(&p->bg.mu);
			return w;
		}
		rn_log_warn(NULL, "warm_dead", "a warm sandbox ended while waiting (status %d)", w->sb.status);
		worker_warm_free(w, 0);
	}
}

void worker_warm_free(worker_warm_sb_t *w, int keep_ws)
{
	if (!w)
		return;
	worker_warm_discard(w, keep_ws);
	free(w);
}

void worker_warm_pool_drain(worker_warm_pool_t *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->bg.mu);
	p->draining = 1;
	pthread_cond_broadcast(&p->bg.cv);
	for (;;) {
		if (p->nidle == 0)
			break;
		worker_warm_sb_t *w = p->idle[--p->nidle];
		pthread_mutex_unlock(&p->bg.mu);
		worker_warm_free(w, 0);
		pthread_mutex_lock(&p->bg.mu);
	}
	pthread_mutex_unlock(&p->bg.mu);
}

void worker_warm_pool_stats(worker_warm_pool_t *p, unsigned long *taken,
                            unsigned long *missed, unsigned long *started)
{
	if (!p) {
		*taken = *missed = *started = 0;
		return;
	}
	pthread_mutex_lock(&p->bg.mu);
	*taken = p->taken;
	*missed = p->missed;
	*started = p->started;
	pthread_mutex_unlock(&p->bg.mu);
}

static void drain_cb(void *p)
{
	worker_warm_pool_drain(p);
}

void worker_warm_pool_free(worker_warm_pool_t *p)
{
	if (!p)
		return;
	if (p->bg.nthreads) {
		/* Drain before the join: idle sandboxes die with their forking thread. */
		rn_bg_stop(&p->bg, NULL, drain_cb, p);
		worker_warm_pool_drain(p); /* one the thread finished meanwhile */
	}
	rn_bg_destroy(&p->bg);
	free(p->idle);
	free(p->init_path);
	free(p->work_dir);
	free(p->bwrap_path);
	free(p->rootfs);
	strv_free0(p->ro_binds);
	free(p);
}
