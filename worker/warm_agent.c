/*
 * worker/warm_agent.c - warm agents and their pool (see warm_agent.h):
 * starting an agent in a warm sandbox before its run with a placeholder
 * of its own, its kind's pre-run handshake, the check that a run's cold
 * launch is exactly the warm one, and the refill thread.
 */
#include "worker/warm_agent.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "common/bg.h"
#include "common/log.h"
#include "common/sandbox_layout.h"
#include "common/util.h"
#include "worker/gateway.h"
#include "worker/run.h"

#define WA_RETRY_MS     1000   /* after a failed start */
#define WA_HANDSHAKE_MS 120000 /* Claude Code answers session/new in 1.5-10 s */

/* The pool: per warm name, its ready agents. */
typedef struct wa_kind {
	char name[32];
	const worker_agent_ops_t *ops;
	size_t want;
	worker_warm_agent_t **idle;
	size_t nidle;
	struct worker_metrics_warm *mw; /* or NULL */
	int failing;
} wa_kind_t;

struct worker_warm_agents {
	const worker_config_t *cfg;
	worker_metrics_t *m;
	rn_bg_t bg; /* the refill thread; mu guards what follows */
	wa_kind_t kinds[WORKER_WARM_AGENT_KINDS];
	size_t nkinds;
	int draining;
	unsigned long seq;
	/* The worker has runs in flight: every agent of the pool (the one
	 * starting and the idle ones) has the lowest CPU weight meanwhile. */
	int yield;
	worker_cgroup_t *starting; /* the cgroup of the agent being started, or NULL */
	/* Set by the drain: a handshake in progress ends within a second. */
	atomic_int cancel;
};

/* ------------------------------------------------------------------------
 * One warm agent
 * ------------------------------------------------------------------------ */

/* The kind's launch for a's name, with its placeholder, its environment
 * and the gateway's bridge in front.  0, or -1 with errstr. */
static int wa_launch(const worker_config_t *cfg, worker_warm_agent_t *a, rn_strv_t *argv, char *errstr,
                     size_t errstr_size)
{
	worker_agent_launch_t l;
	memset(&l, 0, sizeof(l));
	json_t *vars = json_object();
	int rc = -1;
	if (!vars) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	if (a->ops->warm_launch(cfg, a->name, a->token, vars, &l, errstr, errstr_size) < 0)
		goto out;
	snprintf(errstr, errstr_size, "out of memory");
	if (rn_strv_setenv(&a->env, "HOME", RN_SANDBOX_HOME) < 0 || rn_strv_setenv(&a->env, "PATH", RN_SANDBOX_PATH) < 0)
		goto out;
	const char *k;
	json_t *v;
	json_object_foreach(vars, k, v)
	{
		if (rn_strv_setenv(&a->env, k, json_string_value(v)) < 0)
			goto out;
	}
	/* The launch's own variables win over /env, as in a run. */
	for (size_t i = 0; i < l.env.n; i++) {
		const char *eq = strchr(l.env.v[i], '=');
		char name[257];
		if (!eq || eq == l.env.v[i] || (size_t)(eq - l.env.v[i]) >= sizeof(name))
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(eq - l.env.v[i]), l.env.v[i]);
		if (rn_strv_setenv(&a->env, name, eq + 1) < 0)
			goto out;
	}
	for (size_t i = 0; i < l.argv.n; i++)
		if (rn_strv_add(&a->argv, l.argv.v[i]) < 0)
			goto out;
	for (size_t i = 0; i < l.ro_binds.n; i++)
		if (rn_strv_add(&a->binds, l.ro_binds.v[i]) < 0)
			goto out;
	/* worker_gateway_wrap's prefix, the socket in the socket directory. */
	if (rn_strv_add(argv, RN_SANDBOX_GATEWAY_BRIDGE) < 0 || rn_strv_addf(argv, "%d", RN_SANDBOX_GATEWAY_PORT) < 0 ||
	    rn_strv_add(argv, RN_SANDBOX_SOCK_DIR "/" RN_SANDBOX_SOCK_GATEWAY_NAME) < 0)
		goto out;
	for (size_t i = 0; i < l.argv.n; i++)
		if (rn_strv_add(argv, l.argv.v[i]) < 0)
			goto out;
	rc = 0;
	errstr[0] = '\0';
out:
	worker_agent_launch_free(&l);
	json_decref(vars);
	return rc;
}

static void sb_blank(worker_sandbox_t *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->pid = -1;
	sb->stdin_fd = sb->stdout_fd = sb->stderr_fd = sb->info_fd = -1;
}

void worker_warm_agent_free(worker_warm_agent_t *a, int keep_ws)
{
	if (!a)
		return;
	/* A warm sandbox's teardown: the sandbox, its cgroup unless a run
	 * took it over, its run directory unless a run owns it. */
	worker_warm_discard(&a->w, keep_ws);
	if (a->hs && a->ops && a->ops->warm_free)
		a->ops->warm_free(a->hs);
	rn_strv_free(&a->argv);
	rn_strv_free(&a->env);
	rn_strv_free(&a->binds);
	sodium_memzero(a->token, sizeof(a->token));
	free(a);
}

/* The sandbox's shape for a's start (the warm pool's, plus the egress
 * bridge and the socket directory). */
static void wa_spec(const worker_config_t *cfg, worker_warm_agent_t *a, const worker_cgroup_t *cg,
                    char *const *binds, worker_sandbox_spec_t *t)
{
	memset(t, 0, sizeof(*t));
	t->cgroup_fds = cg->ndirs ? cg->procs_fd : NULL;
	t->ncgroup_fds = cg->ndirs;
	t->driver = WORKER_SANDBOX_BWRAP;
	t->bwrap_path = cfg->bwrap_path;
	t->rootfs = cfg->rootfs;
	t->workspace_dir = a->w.ws.workspace;
	/* Bound now, empty; the run that takes the agent unpacks its skills
	 * into it (a run without skills sees an empty /root/skills). */
	t->skills_dir = a->w.ws.skills;
	t->ro_binds = binds;
	t->share_net = 0;
	t->rlimit_nofile = WORKER_RUN_RLIMIT_NOFILE;
	t->tmp_mb = cfg->run_tmp_mb;
	t->uid = cfg->sandbox_uid;
	t->gid = cfg->sandbox_gid;
	t->egress_bridge = cfg->egress_bridge_path;
	t->sock_dir = a->w.ws.sock;
	/* Without cgroups a run's process cap is RLIMIT_NPROC (the guard's
	 * fallback): the worker's own, as for a warm sandbox. */
	if (cfg->limits.cgroup.mode == WORKER_CGROUP_NONE)
		t->rlimit_nproc = cfg->limits.max.pids;
}

/* The run directory, its tmpfs, the socket directory and the cgroup. */
static int wa_dirs(const worker_config_t *cfg, worker_warm_agent_t *a, unsigned long seq, worker_cgroup_t *cg,
                   char *errstr, size_t errstr_size)
{
	const worker_limits_env_t *lim = &cfg->limits;
	char name[64];
	/* "agent.<pid>.<seq>": no run id can spell it (worker/workspace.h). */
	if (worker_ws_create_own(&a->w.ws, cfg->work_dir, "agent", seq, name, errstr, errstr_size) != 0)
		return -1;
	a->w.have_ws = 1;
	if (worker_limits_mount_workspace(lim, a->w.ws.workspace, errstr, errstr_size) < 0)
		return -1;
	if (!worker_ws_make(&a->w.ws, WORKER_WS_SOCK) || !worker_ws_make(&a->w.ws, WORKER_WS_SKILLS)) {
		snprintf(errstr, errstr_size, "cannot create the sockets' or skills' directory in %s: %s", a->w.ws.dir,
		         strerror(errno));
		return -1;
	}
	if (lim->cgroup.mode != WORKER_CGROUP_NONE) {
		worker_cgroup_limits_t cl = worker_limits_cgroup(&lim->max);
		if (worker_cgroup_create(cg, &lim->cgroup, name, &cl, 1, errstr, errstr_size) < 0)
			return -1;
	}
	return 0;
}

static void pool_starting(worker_warm_agents_t *p, worker_cgroup_t *cg);

/* One warm agent of kind k: sandbox, agent, handshake.  NULL with errstr. */
static worker_warm_agent_t *wa_start(worker_warm_agents_t *p, const worker_agent_ops_t *ops, const char *name,
                                     unsigned long seq, char *errstr, size_t errstr_size)
{
	const worker_config_t *cfg = p->cfg;
	worker_warm_agent_t *a = calloc(1, sizeof(*a));
	if (!a) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	sb_blank(&a->w.sb);
	a->ops = ops;
	a->egress_bridge = cfg->egress_bridge_path;
	snprintf(a->name, sizeof(a->name), "%s", name);
	worker_gateway_placeholder(a->token, sizeof(a->token));
	worker_cgroup_t cg = { .ndirs = 0 };
	rn_strv_t argv = { 0 }, binds = { 0 };
	worker_sandbox_spec_t t;
	if (wa_dirs(cfg, a, seq, &cg, errstr, errstr_size) < 0)
		goto fail;
	pool_starting(p, &cg);
	if (wa_launch(cfg, a, &argv, errstr, errstr_size) < 0)
		goto fail;
	for (size_t i = 0; i < a->binds.n; i++)
		rn_strv_add(&binds, a->binds.v[i]);
	rn_strv_addf(&binds, "%s:%s", cfg->egress_bridge_path, RN_SANDBOX_GATEWAY_BRIDGE);
	if (binds.oom) {
		snprintf(errstr, errstr_size, "out of memory");
		goto fail;
	}
	wa_spec(cfg, a, &cg, binds.v, &t);
	if (worker_warm_start(&t, cfg->warm_init_path, &a->w, errstr, errstr_size) != 0)
		goto fail;
	pool_starting(p, NULL);
	worker_cgroup_move(&a->w.cg, &cg);
	pool_starting(p, &a->w.cg);
	/* The agent starts now, with this agent's placeholder only. */
	t.argv = argv.v;
	t.envp = a->env.v;
	if (worker_sandbox_launch(&a->w.sb, &t, errstr, errstr_size) != 0)
		goto fail;
	if (ops->warm_handshake(a->name, a->w.sb.stdin_fd, a->w.sb.stdout_fd, a->w.sb.stderr_fd, WA_HANDSHAKE_MS,
	                        &p->cancel, &a->hs, errstr, errstr_size) < 0)
		goto fail;
	pool_starting(p, NULL);
	a->ready_ms = rn_mono_ms();
	rn_strv_free(&argv);
	rn_strv_free(&binds);
	return a;
fail:
	pool_starting(p, NULL);
	worker_cgroup_destroy(&cg, 2000); /* a no-op once moved or without one */
	rn_strv_free(&argv);
	rn_strv_free(&binds);
	worker_warm_agent_free(a, 0);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Fitting a run
 * ------------------------------------------------------------------------ */

static int str_eq(const char *x, const char *y)
{
	return (!x && !y) || (x && y && !strcmp(x, y));
}

static int listed(char *const *list, const char *s)
{
	for (size_t i = 0; list && list[i]; i++)
		if (!strcmp(list[i], s))
			return 1;
	return 0;
}

/* A variable the model gateway put into the run's /env for a provider the
 * warm agent does not use: its placeholder, or its in-sandbox base URL. */
static int gateway_var(const worker_warm_agent_t *a, const char *kv)
{
	const char *eq = strchr(kv, '=');
	char url[64];
	snprintf(url, sizeof(url), "http://localhost:%d/", RN_SANDBOX_GATEWAY_PORT);
	return eq && (!strcmp(eq + 1, a->token) || !strncmp(eq + 1, url, strlen(url)));
}

static int env_fits(const worker_warm_agent_t *a, char *const *envp, char *why, size_t why_size)
{
	for (size_t i = 0; envp && envp[i]; i++) {
		const char *e = envp[i];
		/* The run's own marks, which an agent started before it cannot
		 * carry (docs/worker.md, "Warm agents"). */
		if (!strncmp(e, "RUNNEL_RUN_ID=", 14) || !strncmp(e, "TRACEPARENT=", 12))
			continue;
		if (listed(a->env.v, e) || gateway_var(a, e))
			continue;
		const char *eq = strchr(e, '=');
		snprintf(why, why_size, "the run's environment has %.*s", eq ? (int)(eq - e) : 64, e);
		return 0;
	}
	for (size_t i = 0; i < a->env.n; i++)
		if (!listed(envp, a->env.v[i])) {
			const char *eq = strchr(a->env.v[i], '=');
			snprintf(why, why_size, "the run's environment lacks %.*s", eq ? (int)(eq - a->env.v[i]) : 64,
			         a->env.v[i]);
			return 0;
		}
	return 1;
}

int worker_warm_agent_fits(const worker_warm_agent_t *a, const worker_sandbox_spec_t *spec,
                           char *const *launch_argv, char *why, size_t why_size)
{
	const worker_warm_sb_t *w = &a->w;
	if (w->sb.pid <= 0) {
		snprintf(why, why_size, "it is gone");
		return 0;
	}
	if (spec->driver != WORKER_SANDBOX_BWRAP || !str_eq(w->bwrap_path, spec->bwrap_path) ||
	    !str_eq(w->rootfs, spec->rootfs) || !str_eq(w->workspace_dir, spec->workspace_dir) ||
	    w->rlimit_nofile != spec->rlimit_nofile || w->rlimit_nproc != spec->rlimit_nproc ||
	    w->rlimit_as_mb != spec->rlimit_as_mb || w->rlimit_fsize_mb != spec->rlimit_fsize_mb ||
	    w->tmp_mb != spec->tmp_mb || w->uid != spec->uid || w->gid != spec->gid) {
		snprintf(why, why_size, "the run's sandbox limits differ");
		return 0;
	}
	if ((spec->skills_dir && !str_eq(spec->skills_dir, w->skills_dir)) || spec->setup_script) {
		snprintf(why, why_size, "the run has %s", spec->setup_script ? "a setup script" : "skills elsewhere");
		return 0;
	}
	if (spec->share_net || !spec->egress_bridge || !str_eq(spec->egress_bridge, a->egress_bridge)) {
		snprintf(why, why_size, "the run's network is not allowlist");
		return 0;
	}
	for (size_t i = 0; spec->ro_binds && spec->ro_binds[i]; i++)
		if (!listed(a->binds.v, spec->ro_binds[i])) {
			snprintf(why, why_size, "the run's sandbox has other binds");
			return 0;
		}
	size_t n = 0;
	while (launch_argv && launch_argv[n])
		n++;
	if (n != a->argv.n) {
		snprintf(why, why_size, "the agent's command line differs");
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		if (strcmp(launch_argv[i], a->argv.v[i])) {
			snprintf(why, why_size, "the agent's command line differs");
			return 0;
		}
	return env_fits(a, spec->envp, why, why_size);
}

int worker_warm_agent_use(worker_warm_agent_t *a, worker_sandbox_t *sb)
{
	sb_blank(sb);
	if (a->w.sb.pid <= 0 || worker_sandbox_reap(&a->w.sb) != 0)
		return -1;
	*sb = a->w.sb;
	sb_blank(&a->w.sb);
	return 0;
}

/* ------------------------------------------------------------------------
 * The pool
 * ------------------------------------------------------------------------ */

/* The kind furthest below its count, or NULL when all are full. */
static wa_kind_t *pool_next(worker_warm_agents_t *p)
{
	wa_kind_t *best = NULL;
	for (size_t i = 0; i < p->nkinds; i++) {
		wa_kind_t *k = &p->kinds[i];
		if (k->nidle < k->want && (!best || k->want - k->nidle > best->want - best->nidle))
			best = k;
	}
	return best;
}

static void pool_ready_gauge(wa_kind_t *k)
{
	if (k->mw)
		rn_gauge_set(k->mw->ready, (int64_t)k->nidle);
}

/* The agent being started is cg's (NULL: none): it gets the pool's weight
 * now and follows it until it is ready (then it is an idle one). */
static void pool_starting(worker_warm_agents_t *p, worker_cgroup_t *cg)
{
	pthread_mutex_lock(&p->bg.mu);
	p->starting = cg;
	worker_cgroup_set_idle(cg, p->yield);
	pthread_mutex_unlock(&p->bg.mu);
}

/* Takes a's start result under the lock: into the pool, or away. */
static void pool_put(worker_warm_agents_t *p, wa_kind_t *k, worker_warm_agent_t *a, const char *err)
{
	if (!a) {
		if (p->draining || p->bg.stop)
			return; /* cancelled by the drain, not a failure */
		if (!k->failing)
			rn_log_warn(NULL, "warm_agent_start", "a warm %s agent could not be started (%s); its runs start cold meanwhile",
			            k->name, err);
		k->failing = 1;
		if (!p->bg.stop)
			rn_bg_wait_ms(&p->bg, WA_RETRY_MS);
		return;
	}
	if (k->failing)
		rn_log_info(NULL, "warm_agent_start", "warm %s agents start again", k->name);
	k->failing = 0;
	if (k->mw)
		rn_counter_add(k->mw->started, 1);
	if (p->draining || p->bg.stop) {
		pthread_mutex_unlock(&p->bg.mu);
		worker_warm_agent_free(a, 0);
		if (k->mw)
			rn_counter_add(k->mw->discarded, 1);
		pthread_mutex_lock(&p->bg.mu);
		return;
	}
	worker_cgroup_set_idle(&a->w.cg, p->yield);
	k->idle[k->nidle++] = a;
	pool_ready_gauge(k);
}

/*
 * The refill thread: one agent at a time, the kind with the fewest ready
 * first.  It forks every sandbox, so it lives until the pool is freed
 * (PR_SET_PDEATHSIG follows the forking thread).
 */
static void *pool_main(void *arg)
{
	worker_warm_agents_t *p = arg;
	pthread_mutex_lock(&p->bg.mu);
	while (!p->bg.stop) {
		wa_kind_t *k = p->draining ? NULL : pool_next(p);
		if (!k) {
			pthread_cond_wait(&p->bg.cv, &p->bg.mu);
			continue;
		}
		unsigned long seq = ++p->seq;
		pthread_mutex_unlock(&p->bg.mu);
		char err[512] = "";
		worker_warm_agent_t *a = wa_start(p, k->ops, k->name, seq, err, sizeof(err));
		pthread_mutex_lock(&p->bg.mu);
		pool_put(p, k, a, err);
	}
	pthread_mutex_unlock(&p->bg.mu);
	return NULL;
}

/* What every warm agent needs of the worker, and a dry run of each
 * kind's launch.  0, or -1 with errstr. */
static int pool_check(const worker_config_t *cfg, char *errstr, size_t errstr_size)
{
	if (cfg->driver != WORKER_SANDBOX_BWRAP || !cfg->warm_init_path[0]) {
		snprintf(errstr, errstr_size, "warm agents: they need the bwrap sandbox and runnel-warm-init");
		return -1;
	}
	if (cfg->limits.egress != WORKER_EGRESS_ALLOWLIST || !cfg->egress_bridge_path[0]) {
		snprintf(errstr, errstr_size, "warm agents: they need the allowlist egress (RUNNEL_EGRESS) and "
		                              "runnel-egress-bridge");
		return -1;
	}
	for (size_t i = 0; i < cfg->n_warm_agents; i++) {
		const worker_agent_ops_t *ops = worker_agent_warm_kind(cfg->warm_agent_names[i]);
		worker_agent_launch_t l;
		memset(&l, 0, sizeof(l));
		json_t *vars = json_object();
		char err[384];
		int rc = ops && vars ? ops->warm_launch(cfg, cfg->warm_agent_names[i], "rgw-check", vars, &l, err, sizeof(err))
		                     : -1;
		if (!ops || !vars)
			snprintf(err, sizeof(err), "out of memory");
		worker_agent_launch_free(&l);
		json_decref(vars);
		if (rc < 0) {
			snprintf(errstr, errstr_size, "warm agents: %s cannot start: %s", cfg->warm_agent_names[i], err);
			return -1;
		}
	}
	return 0;
}

worker_warm_agents_t *worker_warm_agents_new(const worker_config_t *cfg, worker_metrics_t *m, char *errstr,
                                             size_t errstr_size)
{
	if (!cfg->n_warm_agents) {
		snprintf(errstr, errstr_size, "warm agents: none configured");
		return NULL;
	}
	if (pool_check(cfg, errstr, errstr_size) < 0)
		return NULL;
	worker_warm_agents_t *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	p->cfg = cfg;
	p->m = m;
	rn_bg_init(&p->bg);
	for (size_t i = 0; i < cfg->n_warm_agents && i < WORKER_WARM_AGENT_KINDS; i++) {
		wa_kind_t *k = &p->kinds[p->nkinds++];
		snprintf(k->name, sizeof(k->name), "%s", cfg->warm_agent_names[i]);
		k->ops = worker_agent_warm_kind(k->name);
		k->want = (size_t)cfg->warm_agent_counts[i];
		k->idle = calloc(k->want, sizeof(*k->idle));
		k->mw = worker_metrics_warm(m, k->name);
		if (!k->idle) {
			worker_warm_agents_free(p);
			snprintf(errstr, errstr_size, "out of memory");
			return NULL;
		}
	}
	int e = rn_bg_start(&p->bg, "runnel-wagents", 0, pool_main, p);
	if (e) {
		worker_warm_agents_free(p);
		snprintf(errstr, errstr_size, "warm agents: cannot start the refill thread: %s", strerror(e));
		return NULL;
	}
	return p;
}

static wa_kind_t *pool_kind(worker_warm_agents_t *p, const char *name)
{
	for (size_t i = 0; name && i < p->nkinds; i++)
		if (!strcmp(p->kinds[i].name, name))
			return &p->kinds[i];
	return NULL;
}

worker_warm_agent_t *worker_warm_agents_take(worker_warm_agents_t *p, const char *name)
{
	if (!p)
		return NULL;
	for (;;) {
		worker_warm_agent_t *a = NULL;
		pthread_mutex_lock(&p->bg.mu);
		wa_kind_t *k = pool_kind(p, name);
		if (!k || p->draining) {
			pthread_mutex_unlock(&p->bg.mu);
			return NULL;
		}
		if (k->nidle > 0) {
			/* Oldest first: every agent waits about as long. */
			a = k->idle[0];
			memmove(k->idle, k->idle + 1, (k->nidle - 1) * sizeof(*k->idle));
			k->nidle--;
			pool_ready_gauge(k);
			pthread_cond_signal(&p->bg.cv);
		} else if (k->mw) {
			rn_counter_add(k->mw->missed, 1);
		}
		pthread_mutex_unlock(&p->bg.mu);
		if (!a)
			return NULL;
		/* One that died while waiting is thrown away, not handed out. */
		if (worker_sandbox_reap(&a->w.sb) == 0) {
			worker_cgroup_set_idle(&a->w.cg, 0);
			if (k->mw) {
				rn_counter_add(k->mw->taken, 1);
				rn_hist_observe(k->mw->age, (double)(rn_mono_ms() - a->ready_ms) / 1000.0);
			}
			return a;
		}
		rn_log_warn(NULL, "warm_agent_dead", "a warm %s agent ended while waiting (status %d)", a->name,
		            a->w.sb.status);
		if (k->mw)
			rn_counter_add(k->mw->discarded, 1);
		worker_warm_agent_free(a, 0);
	}
}

void worker_warm_agents_busy(worker_warm_agents_t *p, size_t runs)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->bg.mu);
	int yield = runs > 0;
	if (yield != p->yield) {
		p->yield = yield;
		worker_cgroup_set_idle(p->starting, yield);
		for (size_t i = 0; i < p->nkinds; i++)
			for (size_t j = 0; j < p->kinds[i].nidle; j++)
				worker_cgroup_set_idle(&p->kinds[i].idle[j]->w.cg, yield);
	}
	pthread_mutex_unlock(&p->bg.mu);
}

void worker_warm_agents_drain(worker_warm_agents_t *p)
{
	if (!p)
		return;
	atomic_store(&p->cancel, 1);
	pthread_mutex_lock(&p->bg.mu);
	p->draining = 1;
	pthread_cond_broadcast(&p->bg.cv);
	for (size_t i = 0; i < p->nkinds; i++) {
		wa_kind_t *k = &p->kinds[i];
		while (k->nidle > 0) {
			worker_warm_agent_t *a = k->idle[--k->nidle];
			pool_ready_gauge(k);
			pthread_mutex_unlock(&p->bg.mu);
			worker_warm_agent_free(a, 0);
			if (k->mw)
				rn_counter_add(k->mw->discarded, 1);
			pthread_mutex_lock(&p->bg.mu);
		}
	}
	pthread_mutex_unlock(&p->bg.mu);
}

size_t worker_warm_agents_count(worker_warm_agents_t *p, size_t *ready, size_t *wanted)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->bg.mu);
	for (size_t i = 0; i < p->nkinds; i++) {
		ready[i] = p->kinds[i].nidle;
		wanted[i] = p->kinds[i].want;
	}
	size_t n = p->nkinds;
	pthread_mutex_unlock(&p->bg.mu);
	return n;
}

static void drain_cb(void *p)
{
	worker_warm_agents_drain(p);
}

void worker_warm_agents_free(worker_warm_agents_t *p)
{
	if (!p)
		return;
	if (p->bg.nthreads) {
		/* Drain before the join: idle agents die with their forking thread. */
		rn_bg_stop(&p->bg, NULL, drain_cb, p);
		worker_warm_agents_drain(p);
	}
	rn_bg_destroy(&p->bg);
	for (size_t i = 0; i < p->nkinds; i++)
		free(p->kinds[i].idle);
	free(p);
}
