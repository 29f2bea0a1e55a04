/*
 * worker/limits.c - the worker's limits and egress policy, a run's
 * narrowing of them, and the per-run guard that enforces them (see
 * limits.h): cgroup, size-limited workspace, egress proxy, limit checks.
 */
#include "worker/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/util.h"
#include "worker/egress.h"

#define CHECK_EVERY_MS   100
#define WALK_EVERY_MS    1000
#define DISK_SLACK_BYTES (64 * 1024)
#define ALLOW_MAX        256
#define MIB              (1024ULL * 1024ULL)

/* Indexed by worker_limit_t. */
static const char *const limit_names[WORKER_LIMIT_COUNT] = {
	[WORKER_LIMIT_NONE] = "none",
	[WORKER_LIMIT_MEMORY] = "memory",
	[WORKER_LIMIT_PROCESSES] = "processes",
	[WORKER_LIMIT_DISK] = "disk",
	[WORKER_LIMIT_OUTPUT] = "output",
};

/* Indexed by worker_egress_mode_t. */
static const char *const egress_names[] = {
	[WORKER_EGRESS_NONE] = "none",
	[WORKER_EGRESS_ALLOWLIST] = "allowlist",
	[WORKER_EGRESS_FULL] = "full",
};
#define EGRESS_MODES (sizeof(egress_names) / sizeof(egress_names[0]))

const char *worker_limit_name(worker_limit_t l)
{
	return (unsigned)l < WORKER_LIMIT_COUNT ? limit_names[l] : "none";
}

int worker_egress_mode_parse(const char *s)
{
	for (size_t i = 0; s && i < EGRESS_MODES; i++)
		if (!strcmp(s, egress_names[i]))
			return (int)i;
	return -1;
}

const char *worker_egress_mode_name(worker_egress_mode_t m)
{
	return (unsigned)m < EGRESS_MODES ? egress_names[m] : "none";
}

/* Splits a comma-separated list into owned strings (empty items skipped). */
static int split_list(const char *s, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!s)
		return 0;
	char **v = calloc(ALLOW_MAX + 1, sizeof(*v));
	if (!v)
		return -1;
	size_t k = 0;
	for (const char *p = s; *p;) {
		const char *c = strchr(p, ',');
		size_t l = c ? (size_t)(c - p) : strlen(p);
		while (l && (*p == ' ' || *p == '\t')) {
			p++;
			l--;
		}
		while (l && (p[l - 1] == ' ' || p[l - 1] == '\t'))
			l--;
		if (l && k < ALLOW_MAX) {
			v[k] = strndup(p, l);
			if (!v[k]) {
				for (size_t i = 0; i < k; i++)
					free(v[i]);
				free(v);
				return -1;
			}
			k++;
		}
		if (!c)
			break;
		p = c + 1;
	}
	*out = v;
	*n = k;
	return 0;
}

static int name_ok(const char *p)
{
	return !strcmp(p, "@model") || !strcmp(p, "@workspace_api");
}

/* 0 when a tmpfs can be mounted under dir (the worker may mount). */
static int probe_mount(const char *dir, char *why, size_t whysz)
{
	char p[4096];
	if (worker_ws_scratch(dir, "mount-probe", p, sizeof(p)) != 0) {
		snprintf(why, whysz, "cannot create a directory in %.300s: %s", dir, strerror(errno));
		return -1;
	}
	int rc = mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0700");
	int e = errno;
	if (rc == 0)
		umount2(p, MNT_DETACH);
	rmdir(p);
	if (rc != 0)
		snprintf(why, whysz, "the worker may not mount a tmpfs (%s)", strerror(e));
	return rc;
}

/* Number of threads of this process (1 when single-threaded), or -1. */
static int thread_count(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	char line[256];
	int n = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

static int write_proc(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/*
 * A worker that may mount (root) takes a mount namespace of its own, a
 * slave of the host's: the runs' tmpfs mounts never show on the host and
 * vanish with the worker, even after a SIGKILL.  Only while
 * single-threaded (unshare refuses otherwise).
 */
static int private_mount_namespace(void)
{
	if (thread_count() != 1 || unshare(CLONE_NEWNS) != 0)
		return -1;
	/* Mount events still come in from the host; none go out. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0)
		return -1;
	return 0;
}

/*
 * A worker that may not mount (not root, no CAP_SYS_ADMIN: a Kubernetes
 * pod) moves itself into a user and mount namespace of its own, with its
 * uid and gid mapped onto themselves: there it may mount tmpfs, nowhere
 * else, and gains nothing over the host (bwrap does the same for every
 * sandbox).  Only while single-threaded (unshare refuses otherwise).
 */
static int own_mount_namespace(char *why, size_t whysz)
{
	if (thread_count() != 1) {
		snprintf(why, whysz, "the worker is already multi-threaded");
		return -1;
	}
	uid_t uid = geteuid();
	gid_t gid = getegid();
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		snprintf(why, whysz, "unshare(CLONE_NEWUSER|CLONE_NEWNS): %s", strerror(errno));
		return -1;
	}
	char map[64];
	snprintf(map, sizeof(map), "%lu %lu 1\n", (unsigned long)uid, (unsigned long)uid);
	int rc = write_proc("/proc/self/uid_map", map);
	if (rc == 0)
		rc = write_proc("/proc/self/setgroups", "deny\n");
	snprintf(map, sizeof(map), "%lu %lu 1\n", (unsigned long)gid, (unsigned long)gid);
	if (rc == 0)
		rc = write_proc("/proc/self/gid_map", map);
	if (rc != 0) {
		snprintf(why, whysz, "cannot map the worker's ids in its own user namespace: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int worker_limits_setup(worker_limits_env_t *env, const worker_limits_t *max,
                        const char *cgroup, const char *work_dir,
                        const char *egress, const char *allow, const char *sandbox_net,
                        char *warn, size_t warn_size, char *errstr, size_t errstr_size)
{
	memset(env, 0, sizeof(*env));
	env->max = *max;
	env->bridge_path = "";
	if (warn_size)
		warn[0] = '\0';
	int em = worker_egress_mode_parse(egress);
	if (em < 0) {
		snprintf(errstr, errstr_size, "RUNNEL_EGRESS/--egress: \"%.32s\" is not none, allowlist or full", egress ? egress : "");
		return -1;
	}
	env->egress = (worker_egress_mode_t)em;
	if (split_list(allow, &env->egress_allow, &env->egress_nallow) < 0) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < env->egress_nallow; i++) {
		const char *p = env->egress_allow[i];
		if (!name_ok(p) && worker_egress_pattern_ok(p) < 0) {
			snprintf(errstr, errstr_size, "RUNNEL_EGRESS_ALLOW/--egress-allow: \"%.64s\" is not a host[:port] pattern, @model or @workspace_api", p);
			return -1;
		}
	}
	/* command and mock runs keep what --sandbox-net gave them, within the policy. */
	env->default_command = sandbox_net && !strcmp(sandbox_net, "host") ? WORKER_EGRESS_FULL : WORKER_EGRESS_NONE;
	if (env->default_command > env->egress)
		env->default_command = env->egress;

	if (!cgroup || (strcmp(cgroup, "auto") && strcmp(cgroup, "v1") && strcmp(cgroup, "v2") && strcmp(cgroup, "off"))) {
		snprintf(errstr, errstr_size, "RUNNEL_CGROUP/--cgroup: \"%.32s\" is not auto, v1, v2 or off", cgroup ? cgroup : "");
		return -1;
	}
	char why[1024];
	size_t wl = 0;
	if (worker_cgroup_probe(&env->cgroup, cgroup, why, sizeof(why)) == WORKER_CGROUP_NONE) {
		int n = snprintf(warn, warn_size,
		                 "no writable cgroup hierarchy (%s): runs get no memory or CPU limit of their own "
		                 "(the pod's or the host's applies), processes only RLIMIT_NPROC, and a run over "
		                 "those cannot be told apart from one that crashed; see docs/operations.md\n",
		                 why);
		wl = n > 0 ? (size_t)n : 0;
	} else if (!env->cgroup.have_cpu && max->cpu_millis > 0 && wl < warn_size) {
		int n = snprintf(warn + wl, warn_size - wl,
		                 "cgroup %s has no CPU controller here: runs get no CPU share limit\n",
		                 worker_cgroup_mode_name(env->cgroup.mode));
		wl += n > 0 ? (size_t)n : 0;
	}
	env->disk_mode = WORKER_DISK_TMPFS;
	char why_ns[256] = "";
	int can_mount = 0;
	why[0] = '\0';
	if (max->disk_mb > 0 && private_mount_namespace() == 0) {
		env->mount_ns = 1;
		can_mount = probe_mount(work_dir, why, sizeof(why)) == 0;
	}
	if (max->disk_mb > 0 && !can_mount && own_mount_namespace(why_ns, sizeof(why_ns)) == 0) {
		env->mount_ns = 2;
		can_mount = probe_mount(work_dir, why, sizeof(why)) == 0;
	} else if (max->disk_mb > 0 && !can_mount && !env->mount_ns) {
		can_mount = probe_mount(work_dir, why, sizeof(why)) == 0;
	}
	if (max->disk_mb > 0 && !can_mount) {
		if (!why[0])
			snprintf(why, sizeof(why), "the worker may not mount a tmpfs");
		if (why_ns[0] && strlen(why) + strlen(why_ns) + 3 < sizeof(why))
			snprintf(why + strlen(why), sizeof(why) - strlen(why), "; %s", why_ns);
		env->disk_mode = WORKER_DISK_WATCH;
		if (wl < warn_size)
			snprintf(warn + wl, warn_size - wl,
			         "workspace disk cap: %s; the workspace is measured every second and a run "
			         "over its cap is stopped (a fast writer can overshoot by what it writes in "
			         "that second; single files are capped with RLIMIT_FSIZE)\n",
			         why);
	}
	return 0;
}

void worker_limits_env_free(worker_limits_env_t *env)
{
	for (size_t i = 0; env->egress_allow && i < env->egress_nallow; i++)
		free(env->egress_allow[i]);
	free(env->egress_allow);
	env->egress_allow = NULL;
	env->egress_nallow = 0;
	rn_netaddr_set_free(&env->own);
}

/* ------------------------------------------------------------------------
 * A run's guard
 * ------------------------------------------------------------------------ */

struct worker_guard {
	const worker_limits_env_t *env;
	worker_limits_t lim;
	worker_egress_mode_t egress;
	worker_sandbox_driver_t driver;
	char run_id[80];
	worker_cgroup_t cg; /* ndirs 0: none (no cgroups on this host) */
	char ws_dir[4096];
	int mounted;
	int detached; /* the tmpfs left the worker's namespace (ws_dir reaches it) */
	worker_egress_t *proxy;
	char sock_path[4200];
	worker_guard_note_fn note;
	void *arg;
	int64_t next_check;
	int64_t next_walk;
	worker_limit_t hit;
	uint64_t output_bytes; /* published so far, against lim.output_mb */
};

static void gnote(worker_guard_t *g, const char *level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void gnote(worker_guard_t *g, const char *level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	rn_log_info(g->run_id, "limits", "%s", buf);
	if (g->note)
		g->note(level, buf, g->arg);
}

/*
 * One config limit: a positive number at most the worker's (0 = the
 * worker has none) lowers it; anything else is refused with a note.
 */
static void resolve_one(worker_guard_t *g, const json_t *limits, const char *key,
                        long worker_val, long *out, double scale, const char *unit)
{
	*out = worker_val;
	const json_t *v = json_object_get(limits, key);
	if (!v)
		return;
	if (!json_is_number(v) || json_number_value(v) <= 0 || !isfinite(json_number_value(v)) ||
	    json_number_value(v) * scale > 1e15) {
		if (worker_val)
			gnote(g, "warn", "limits.%s must be a positive number; using this worker's limit of %g%s",
			      key, (double)worker_val / scale, unit);
		else
			gnote(g, "warn", "limits.%s must be a positive number; ignored", key);
		return;
	}
	double want = json_number_value(v);
	long w = (long)llround(want * scale);
	if (w < 1)
		w = 1;
	if (worker_val && w > worker_val) {
		gnote(g, "warn", "limits.%s %g is above this worker's limit of %g%s; using %g%s",
		      key, want, (double)worker_val / scale, unit, (double)worker_val / scale, unit);
		return;
	}
	*out = w;
}

/* "host:port" of a URL, as an allowlist entry; 0 or -1. */
static int url_entry(const char *url, char *out, size_t size)
{
	if (!url || !*url)
		return -1;
	CURLU *u = curl_url();
	if (!u)
		return -1;
	char *host = NULL, *port = NULL;
	int rc = -1;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
		int n = snprintf(out, size, "%s:%s", host, port);
		rc = n > 0 && (size_t)n < size && worker_egress_pattern_ok(out) == 0 ? 0 : -1;
	}
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return rc;
}

typedef struct list {
	char *v[ALLOW_MAX + 1];
	size_t n;
} list_t;

static void list_add(list_t *l, const char *s)
{
	if (l->n >= ALLOW_MAX)
		return;
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], s))
			return;
	char *d = strdup(s);
	if (d)
		l->v[l->n++] = d;
}

static void list_free(list_t *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	l->n = 0;
}

/* Adds an entry, expanding @model and @workspace_api. */
static void expand(list_t *l, const char *entry, const worker_guard_args_t *a)
{
	char hp[320];
	if (!strcmp(entry, "@workspace_api")) {
		if (url_entry(a->ws_api_url, hp, sizeof(hp)) == 0)
			list_add(l, hp);
		return;
	}
	if (!strcmp(entry, "@model")) {
		/* The base URLs the agents read (OpenAI-compatible: builtin and
		 * Codex; Anthropic: Claude Code), else the public APIs. */
		static const char *const vars[] = { "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL" };
		int any = 0;
		for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
			const char *u = json_string_value(json_object_get(a->variables, vars[i]));
			if (u && url_entry(u, hp, sizeof(hp)) == 0) {
				list_add(l, hp);
				any = 1;
			}
		}
		if (!any) {
			list_add(l, "api.openai.com:443");
			list_add(l, "api.anthropic.com:443");
		}
		return;
	}
	list_add(l, entry);
}

static int covered(const list_t *outer, const char *inner)
{
	for (size_t i = 0; i < outer->n; i++)
		if (worker_egress_covers(outer->v[i], inner))
			return 1;
	return 0;
}

/* The run's network mode and allowlist (notes for refused values). */
static void resolve_egress(worker_guard_t *g, const worker_guard_args_t *a, list_t *allow)
{
	const worker_limits_env_t *env = g->env;
	worker_egress_mode_t want = a->command_egress ? env->default_command : WORKER_EGRESS_ALLOWLIST;
	const char *net = json_string_value(json_object_get(a->config, "network"));
	if (net) {
		int m = worker_egress_mode_parse(net);
		if (m < 0) {
			gnote(g, "warn", "network \"%.32s\" is not none, allowlist or full; ignored", net);
		} else if ((worker_egress_mode_t)m > env->egress) {
			gnote(g, "warn", "network \"%s\" is above this worker's egress policy \"%s\"; using %s",
			      net, worker_egress_mode_name(env->egress), worker_egress_mode_name(env->egress));
			want = env->egress;
		} else {
			want = (worker_egress_mode_t)m;
		}
	}
	if (want > env->egress)
		want = env->egress;
	g->egress = want;

	list_t wl = { .n = 0 };
	for (size_t i = 0; i < env->egress_nallow; i++)
		expand(&wl, env->egress_allow[i], a);
	const json_t *hosts = json_object_get(a->config, "allow_hosts");
	if (want == WORKER_EGRESS_ALLOWLIST && json_is_array(hosts)) {
		size_t i;
		const json_t *h;
		json_array_foreach(hosts, i, h)
		{
			const char *s = json_string_value(h);
			if (!s || (!name_ok(s) && worker_egress_pattern_ok(s) < 0)) {
				gnote(g, "warn", "allow_hosts entry %zu is not a host[:port] pattern; ignored", i);
				continue;
			}
			list_t one = { .n = 0 };
			expand(&one, s, a);
			for (size_t k = 0; k < one.n; k++) {
				if (env->egress == WORKER_EGRESS_FULL || covered(&wl, one.v[k]))
					list_add(allow, one.v[k]);
				else
					gnote(g, "warn", "allow_hosts entry \"%.200s\" is not allowed by this worker's egress allowlist; ignored",
					      one.v[k]);
			}
			list_free(&one);
		}
	} else if (hosts && !json_is_array(hosts)) {
		gnote(g, "warn", "allow_hosts must be an array of host[:port] patterns; ignored");
	}
	if (want == WORKER_EGRESS_ALLOWLIST && !json_is_array(hosts))
		for (size_t i = 0; i < wl.n; i++)
			list_add(allow, wl.v[i]);
	list_free(&wl);
}

/* 1 when dir is itself a tmpfs mount (not a directory inside one); *sf
 * is its statfs. */
static int is_tmpfs_mount(const char *dir, struct statfs *sf)
{
	struct stat st, up;
	char parent[4200];
	snprintf(parent, sizeof(parent), "%s/..", dir);
	return statfs(dir, sf) == 0 && sf->f_type == TMPFS_MAGIC &&
	        stat(dir, &st) == 0 && stat(parent, &up) == 0 && st.st_dev != up.st_dev;
}

/*
 * Mounts a tmpfs of disk_mb on dir, or, when dir already is one (mounted
 * for a sandbox started before its run), resizes it: a tmpfs remount
 * changes the one superblock every bind of it shares, the sandbox's too.
 */
static int mount_tmpfs(const char *dir, long disk_mb, char *errstr, size_t errstr_size)
{
	unsigned long long bytes = (unsigned long long)disk_mb * MIB;
	/* Inodes cost memory on a tmpfs: one per 4 KiB of the cap, enough for
	 * any real tree and no way to fill memory with empty files. */
	unsigned long long inodes = bytes / 4096 + 1024;
	char opts[128];
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=0755", bytes, inodes);
	struct statfs sf;
	int remount = is_tmpfs_mount(dir, &sf);
	/* Already this size (a warm sandbox's, and a run that keeps the cap). */
	if (remount && (unsigned long long)sf.f_blocks * (unsigned long long)sf.f_bsize == bytes &&
	    (unsigned long long)sf.f_files == inodes)
		return 0;
	unsigned long flags = MS_NOSUID | MS_NODEV | (remount ? MS_REMOUNT : 0);
	if (mount("tmpfs", dir, "tmpfs", flags, opts) != 0) {
		snprintf(errstr, errstr_size, "cannot %s the workspace: %s", remount ? "resize" : "mount",
		         strerror(errno));
		return -1;
	}
	return 0;
}

worker_cgroup_limits_t worker_limits_cgroup(const worker_limits_t *l)
{
	worker_cgroup_limits_t cl = {
		.memory_bytes = (uint64_t)l->memory_mb * MIB,
		.pids = l->pids,
		.cpu_millis = l->cpu_millis,
	};
	return cl;
}

int worker_limits_mount_workspace(const worker_limits_env_t *env, const char *dir,
                                  char *errstr, size_t errstr_size)
{
	if (env->max.disk_mb <= 0 || env->disk_mode != WORKER_DISK_TMPFS)
		return 0;
	return mount_tmpfs(dir, env->max.disk_mb, errstr, errstr_size);
}

static int mount_workspace(worker_guard_t *g, const worker_guard_args_t *a,
                           char *errstr, size_t errstr_size)
{
	if (mount_tmpfs(a->ws->workspace, g->lim.disk_mb, errstr, errstr_size) < 0)
		return -1;
	g->mounted = 1;
	snprintf(g->ws_dir, sizeof(g->ws_dir), "%s", a->ws->workspace);
	/* The new tmpfs hides the assets/ the tree had. */
	if (a->ws->assets[0] && !worker_ws_make(a->ws, WORKER_WS_ASSETS)) {
		snprintf(errstr, errstr_size, "cannot create assets/: %s", strerror(errno));
		return -1;
	}
	return 0;
}

worker_guard_t *worker_guard_new(const worker_limits_env_t *env, const worker_guard_args_t *a,
                                 worker_guard_note_fn note, void *arg,
                                 char *errstr, size_t errstr_size)
{
	worker_guard_t *g = calloc(1, sizeof(*g));
	if (!g) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	g->env = env;
	g->driver = a->driver;
	g->note = note;
	g->arg = arg;
	snprintf(g->run_id, sizeof(g->run_id), "%s", a->run_id);
	snprintf(g->ws_dir, sizeof(g->ws_dir), "%s", a->ws->workspace);

	const json_t *lj = json_object_get(a->config, "limits");
	if (lj && !json_is_object(lj)) {
		gnote(g, "warn", "limits must be an object; ignored");
		lj = NULL;
	}
	resolve_one(g, lj, "memory_mb", env->max.memory_mb, &g->lim.memory_mb, 1, " MiB");
	resolve_one(g, lj, "pids", env->max.pids, &g->lim.pids, 1, "");
	resolve_one(g, lj, "cpus", env->max.cpu_millis, &g->lim.cpu_millis, 1000, " CPUs");
	resolve_one(g, lj, "disk_mb", env->max.disk_mb, &g->lim.disk_mb, 1, " MiB");
	resolve_one(g, lj, "tmp_mb", env->max.tmp_mb, &g->lim.tmp_mb, 1, " MiB");
	resolve_one(g, lj, "output_mb", env->max.output_mb, &g->lim.output_mb, 1, " MiB");

	list_t allow = { .n = 0 };
	resolve_egress(g, a, &allow);
	/* The process driver has no network namespace: nothing to enforce. */
	if (a->driver == WORKER_SANDBOX_PROCESS)
		g->egress = WORKER_EGRESS_FULL;

	if (g->lim.disk_mb > 0 && env->disk_mode == WORKER_DISK_TMPFS &&
	    mount_workspace(g, a, errstr, errstr_size) < 0)
		goto fail;
	if (env->cgroup.mode != WORKER_CGROUP_NONE) {
		worker_cgroup_limits_t cl = worker_limits_cgroup(&g->lim);
		if (a->cgroup && a->cgroup->ndirs) {
			worker_cgroup_move(&g->cg, a->cgroup);
			if (worker_cgroup_set_limits(&g->cg, &cl, errstr, errstr_size) < 0)
				goto fail;
			worker_cgroup_rename(&g->cg, a->run_id);
		} else if (worker_cgroup_create(&g->cg, &env->cgroup, a->run_id, &cl, 0, errstr, errstr_size) < 0) {
			goto fail;
		}
	}
	if (g->egress == WORKER_EGRESS_ALLOWLIST) {
		if (!env->bridge_path || !env->bridge_path[0]) {
			snprintf(errstr, errstr_size, "this worker has no runnel-egress-bridge (set RUNNEL_EGRESS_BRIDGE)");
			goto fail;
		}
		/* meta/ is made only when a run needs it (worker/workspace.h);
		 * a warm agent's bridge already looks in sock/. */
		const char *meta = worker_ws_make(a->ws, a->sock_dir ? WORKER_WS_SOCK : WORKER_WS_META);
		if (!meta) {
			snprintf(errstr, errstr_size, "cannot create %s: %s", a->sock_dir ? a->ws->sock : a->ws->meta,
			         strerror(errno));
			goto fail;
		}
		snprintf(g->sock_path, sizeof(g->sock_path), "%s/egress.sock", meta);
		/* What the run asked for is checked against the run's list; where
		 * it may connect to, against the operator's exact entries: a host
		 * from the run (@model, @workspace_api, allow_hosts, a wildcard)
		 * reaches public addresses only. */
		worker_egress_rules_t rules = {
			.allow = allow.v,
			.nallow = allow.n,
			.named = env->egress_allow,
			.nnamed = env->egress_nallow,
			.own = &env->own,
		};
		g->proxy = worker_egress_start(g->sock_path, &rules, a->run_id, errstr, errstr_size);
		if (!g->proxy)
			goto fail;
	}
	rn_log_debug(g->run_id, "limits", "memory %ld MiB, pids %ld, cpus %.3f, disk %ld MiB, tmp %ld MiB, output %ld MiB, network %s (%zu allowed)",
	             g->lim.memory_mb, g->lim.pids, (double)g->lim.cpu_millis / 1000.0, g->lim.disk_mb,
	             g->lim.tmp_mb, g->lim.output_mb, worker_egress_mode_name(g->egress), allow.n);
	list_free(&allow);
	return g;
fail:
	list_free(&allow);
	worker_guard_free(g);
	return NULL;
}

const worker_limits_t *worker_guard_limits(const worker_guard_t *g)
{
	return &g->lim;
}

int worker_guard_workspace_mounted(const worker_guard_t *g)
{
	return g && g->mounted && !g->detached;
}

void worker_guard_workspace_detached(worker_guard_t *g, const char *root)
{
	if (!g || !g->mounted)
		return;
	snprintf(g->ws_dir, sizeof(g->ws_dir), "%s", root);
	g->detached = 1;
}

worker_egress_mode_t worker_guard_egress(const worker_guard_t *g)
{
	return g->egress;
}

void worker_guard_sandbox_spec(worker_guard_t *g, worker_sandbox_spec_t *spec)
{
	/* procs_fd[0..ndirs) are open: add_dir made them together. */
	spec->cgroup_fds = g->cg.ndirs ? g->cg.procs_fd : NULL;
	spec->ncgroup_fds = g->cg.ndirs;
	spec->tmp_mb = g->lim.tmp_mb;
	spec->share_net = g->egress == WORKER_EGRESS_FULL;
	if (g->proxy) {
		spec->egress_bridge = g->env->bridge_path;
		spec->egress_socket = g->sock_path;
	}
	if (!g->cg.ndirs) {
		/* The fallback for processes: the user's process count (all of
		 * the user's processes, not the run's; see docs/operations.md).
		 * None for memory: RLIMIT_AS counts address space, and V8, the
		 * JVM, Go and sanitizers reserve far more than they use, so an
		 * agent would fail to start long before it used its memory. */
		if (g->lim.pids > 0)
			spec->rlimit_nproc = g->lim.pids;
	}
	if (g->lim.disk_mb > 0 && !g->mounted)
		spec->rlimit_fsize_mb = g->lim.disk_mb;
}

const int *worker_guard_cgroup_fds(const worker_guard_t *g, int *n)
{
	*n = g ? g->cg.ndirs : 0;
	return *n ? g->cg.procs_fd : NULL;
}

int worker_guard_fd(const worker_guard_t *g)
{
	return g && g->proxy ? worker_egress_fd(g->proxy) : -1;
}

static void proxy_note(const char *msg, void *arg)
{
	worker_guard_t *g = arg;
	if (g->note)
		g->note("warn", msg, g->arg);
}

/* nftw has no user pointer; each run walks on its own thread. */
static __thread uint64_t walk_total;
static int walk_cb(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)path;
	(void)flag;
	(void)f;
	walk_total += (uint64_t)st->st_blocks * 512;
	return 0;
}

/* Bytes under dir (allocated blocks), not following links or mounts. */
static uint64_t dir_usage(const char *dir)
{
	walk_total = 0;
	nftw(dir, walk_cb, 32, FTW_PHYS | FTW_MOUNT);
	return walk_total;
}

static worker_limit_t check(worker_guard_t *g, int64_t now, int final)
{
	if (g->hit)
		return g->hit;
	if (g->cg.ndirs) {
		worker_cgroup_events_t ev;
		if (worker_cgroup_events(&g->cg, &ev) == 0) {
			if (ev.oom_kills > 0 && g->lim.memory_mb > 0)
				g->hit = WORKER_LIMIT_MEMORY;
			else if (ev.pids_max_hits > 0 && g->lim.pids > 0)
				g->hit = WORKER_LIMIT_PROCESSES;
		}
	}
	if (!g->hit && g->lim.disk_mb > 0) {
		if (g->mounted) {
			struct statvfs sv;
			if (statvfs(g->ws_dir, &sv) == 0 &&
			    (uint64_t)sv.f_bfree * sv.f_frsize < DISK_SLACK_BYTES)
				g->hit = WORKER_LIMIT_DISK;
		} else if (final || now >= g->next_walk) {
			g->next_walk = now + WALK_EVERY_MS;
			if (dir_usage(g->ws_dir) > (uint64_t)g->lim.disk_mb * MIB)
				g->hit = WORKER_LIMIT_DISK;
		}
	}
	return g->hit;
}

worker_limit_t worker_guard_tick(worker_guard_t *g, int64_t now_ms, int64_t *next_ms)
{
	if (g->proxy)
		worker_egress_drain(g->proxy, proxy_note, g);
	if (now_ms >= g->next_check) {
		g->next_check = now_ms + CHECK_EVERY_MS;
		check(g, now_ms, 0);
	}
	*next_ms = g->next_check;
	return g->hit;
}

int worker_guard_output(worker_guard_t *g, size_t len)
{
	if (!g || g->lim.output_mb <= 0)
		return 0;
	if (g->hit == WORKER_LIMIT_OUTPUT)
		return 1;
	if (g->output_bytes + len > (uint64_t)g->lim.output_mb * MIB) {
		/* Another limit seen first keeps its name; the line is dropped all
		 * the same, the stream stays under the cap. */
		if (!g->hit)
			g->hit = WORKER_LIMIT_OUTPUT;
		return 1;
	}
	g->output_bytes += len;
	return 0;
}

worker_limit_t worker_guard_final(worker_guard_t *g)
{
	if (!g)
		return WORKER_LIMIT_NONE;
	if (g->proxy)
		worker_egress_drain(g->proxy, proxy_note, g);
	return check(g, rn_mono_ms(), 1);
}

void worker_guard_message(const worker_guard_t *g, worker_limit_t l, char *buf, size_t size)
{
	switch (l) {
	case WORKER_LIMIT_MEMORY:
		snprintf(buf, size, "The run used more than %ld MiB of memory.", g->lim.memory_mb);
		break;
	case WORKER_LIMIT_PROCESSES:
		snprintf(buf, size, "The run tried to run more than %ld processes at once.", g->lim.pids);
		break;
	case WORKER_LIMIT_DISK:
		snprintf(buf, size, "The run wrote more than %ld MiB to its workspace.", g->lim.disk_mb);
		break;
	case WORKER_LIMIT_OUTPUT:
		snprintf(buf, size, "The run printed more than %ld MiB of output (its output cap).", g->lim.output_mb);
		break;
	default:
		snprintf(buf, size, "The run hit a resource limit.");
		break;
	}
}

void worker_guard_free(worker_guard_t *g)
{
	if (!g)
		return;
	if (g->proxy)
		worker_egress_stop(g->proxy);
	g->proxy = NULL;
	worker_cgroup_destroy(&g->cg, 2000); /* a no-op without one */
	if (g->mounted && !g->detached && umount2(g->ws_dir, MNT_DETACH) != 0)
		rn_log_warn(g->run_id, "limits", "cannot unmount the workspace: %s", strerror(errno));
	free(g);
}
