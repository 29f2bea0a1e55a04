/*
 * worker/cgroup.c - finds a writable cgroup hierarchy at start, then makes,
 * fills, reads back and removes one cgroup per run (see cgroup.h).
 *
 * Paths come from /proc/self/cgroup and /proc/self/mountinfo: the worker's
 * runs go below the worker's own cgroup, never beside it, so whatever bounds
 * the worker (the pod, a systemd slice) also bounds its runs.
 */
#include "worker/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "common/util.h"

#define CPU_PERIOD_US 100000

const char *worker_cgroup_mode_name(worker_cgroup_mode_t mode)
{
	static const char *const names[] = {
		[WORKER_CGROUP_NONE] = "none",
		[WORKER_CGROUP_V1] = "v1",
		[WORKER_CGROUP_V2] = "v2",
	};
	return (unsigned)mode < sizeof(names) / sizeof(names[0]) ? names[mode] : "none";
}

/* Writes a short string to dir/file.  0 or -1 (errno set). */
static int write_file(const char *dir, const char *file, const char *val)
{
	char path[WORKER_CGROUP_PATH_MAX + 64];
	int pn = snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (pn < 0 || (size_t)pn >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(val);
	ssize_t w = write(fd, val, n);
	int e = errno;
	close(fd);
	if (w != (ssize_t)n) {
		errno = w < 0 ? e : EIO;
		return -1;
	}
	return 0;
}

/* Reads dir/file into buf (NUL-terminated).  Bytes read, or -1. */
static ssize_t read_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[WORKER_CGROUP_PATH_MAX + 64];
	if (file)
		snprintf(path, sizeof(path), "%s/%s", dir, file);
	else
		snprintf(path, sizeof(path), "%s", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = rn_read_full(fd, buf, size - 1);
	close(fd);
	buf[got] = '\0';
	return (ssize_t)got;
}

/* The value of "key N" in a flat keyed file; 0 when absent. */
static uint64_t keyed_value(const char *dir, const char *file, const char *key)
{
	char buf[4096];
	if (read_file(dir, file, buf, sizeof(buf)) <= 0)
		return 0;
	size_t kl = strlen(key);
	for (char *line = buf; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strncmp(line, key, kl) && line[kl] == ' ')
			return strtoull(line + kl + 1, NULL, 10);
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

/* 1 when word is one of the comma- or space-separated words of list. */
static int has_word(const char *list, const char *word, char sep)
{
	size_t wl = strlen(word);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, sep);
		size_t l = e ? (size_t)(e - p) : strlen(p);
		while (l && (p[l - 1] == '\n' || p[l - 1] == ' '))
			l--;
		if (l == wl && !strncmp(p, word, wl))
			return 1;
		p = e ? e + 1 : NULL;
	}
	return 0;
}

/*
 * The mount point of a hierarchy from /proc/self/mountinfo: fstype
 * "cgroup2" (ctrl NULL) or "cgroup" whose super options name ctrl.  The
 * mount's root (the cgroup seen as its top) goes to mroot.
 */
static int find_mount(const char *ctrl, char *mnt, size_t mntsz, char *mroot, size_t mrootsz)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -1;
	char line[2048];
	int found = -1;
	while (fgets(line, sizeof(line), f)) {
		/* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
		char root[1024], point[1024];
		if (sscanf(line, "%*s %*s %*s %1023s %1023s", root, point) != 2)
			continue;
		char *dash = strstr(line, " - ");
		if (!dash)
			continue;
		char fstype[64], src[256], sopts[1024];
		if (sscanf(dash + 3, "%63s %255s %1023s", fstype, src, sopts) != 3)
			continue;
		if (ctrl ? (strcmp(fstype, "cgroup") || !has_word(sopts, ctrl, ','))
		         : strcmp(fstype, "cgroup2"))
			continue;
		snprintf(mnt, mntsz, "%s", point);
		snprintf(mroot, mrootsz, "%s", root);
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

/* This process's cgroup path in a hierarchy (ctrl NULL: the v2 "0::" line). */
static int own_path(const char *ctrl, char *out, size_t size)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -1;
	char line[2048];
	int found = -1;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		char *path = c2 + 1;
		path[strcspn(path, "\n")] = '\0';
		int match = ctrl ? has_word(c1 + 1, ctrl, ',') : (!strncmp(line, "0", 1) && !c1[1]);
		if (!match)
			continue;
		snprintf(out, size, "%s", path);
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

/* The directory of this process's cgroup in a hierarchy, or -1. */
static int own_dir(const char *ctrl, char *out, size_t size)
{
	char mnt[1024], mroot[1024], path[1024];
	if (find_mount(ctrl, mnt, sizeof(mnt), mroot, sizeof(mroot)) < 0 ||
	    own_path(ctrl, path, sizeof(path)) < 0)
		return -1;
	/* Inside a cgroup namespace or a bind of a sub-tree the mount's root
	 * is a prefix of our path. */
	const char *rel = path;
	size_t rl = strlen(mroot);
	if (strcmp(mroot, "/") && !strncmp(path, mroot, rl))
		rel = path + rl;
	while (*rel == '/')
		rel++;
	int n = snprintf(out, size, "%s%s%s", mnt, *rel ? "/" : "", rel);
	if (n < 0 || (size_t)n >= size - 80) /* room for a run's name */
		return -1;
	return 0;
}

/* 0 when a child cgroup can be made in dir and limited with file=val. */
static int try_child(const char *dir, const char *file, const char *val)
{
	char probe[WORKER_CGROUP_PATH_MAX + 64];
	snprintf(probe, sizeof(probe), "%s/runnel-probe-%ld", dir, (long)getpid());
	if (mkdir(probe, 0755) != 0 && errno != EEXIST)
		return -1;
	int rc = write_file(probe, file, val);
	int e = errno;
	rmdir(probe);
	errno = e;
	return rc;
}

/* Moves this process from dir into dir/worker (v2 leaves no process in a
 * cgroup whose children get controllers).  Refused when other processes
 * share dir: they are not ours to move (a login session, a service without
 * Delegate=yes), and the cgroup is then not delegated to the worker. */
static int v2_move_out(const char *dir, char *errstr, size_t errstr_size)
{
	char procs[8192];
	if (read_file(dir, "cgroup.procs", procs, sizeof(procs)) < 0) {
		snprintf(errstr, errstr_size, "cannot read %s/cgroup.procs: %s", dir, strerror(errno));
		return -1;
	}
	for (char *p = procs; *p;) {
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		if (*p && strtol(p, NULL, 10) != (long)getpid()) {
			snprintf(errstr, errstr_size, "cgroup v2 at %.300s holds other processes than the worker "
			                              "(give the worker a cgroup of its own, e.g. systemd Delegate=yes)",
			         dir);
			return -1;
		}
		if (!nl)
			break;
		p = nl + 1;
	}
	char leaf[WORKER_CGROUP_PATH_MAX + 16];
	snprintf(leaf, sizeof(leaf), "%s/worker", dir);
	if (mkdir(leaf, 0755) != 0 && errno != EEXIST) {
		snprintf(errstr, errstr_size, "cannot create %.300s: %s", leaf, strerror(errno));
		return -1;
	}
	for (int round = 0; round < 5; round++) {
		char buf[8192];
		if (read_file(dir, "cgroup.procs", buf, sizeof(buf)) < 0) {
			snprintf(errstr, errstr_size, "cannot read %s/cgroup.procs: %s", dir, strerror(errno));
			return -1;
		}
		if (!buf[0])
			return 0;
		for (char *p = buf; *p;) {
			char *nl = strchr(p, '\n');
			if (nl)
				*nl = '\0';
			if (*p && write_file(leaf, "cgroup.procs", p) != 0 && errno != ESRCH) {
				snprintf(errstr, errstr_size, "cannot move process %.20s into %.300s: %s", p, leaf,
				         strerror(errno));
				return -1;
			}
			if (!nl)
				break;
			p = nl + 1;
		}
	}
	return 0;
}

static worker_cgroup_mode_t probe_v2(worker_cgroup_root_t *root, char *why, size_t whysz)
{
	char dir[WORKER_CGROUP_PATH_MAX], buf[512];
	if (own_dir(NULL, dir, sizeof(dir)) < 0) {
		snprintf(why, whysz, "no cgroup v2 hierarchy");
		return WORKER_CGROUP_NONE;
	}
	if (read_file(dir, "cgroup.controllers", buf, sizeof(buf)) < 0 ||
	    !has_word(buf, "memory", ' ') || !has_word(buf, "pids", ' ')) {
		snprintf(why, whysz, "cgroup v2 at %.300s does not offer the memory and pids controllers", dir);
		return WORKER_CGROUP_NONE;
	}
	if (access(dir, W_OK) != 0) {
		snprintf(why, whysz, "cgroup v2 at %.300s is not writable (%s)", dir, strerror(errno));
		return WORKER_CGROUP_NONE;
	}
	/* Already delegated as we want it (a restart in the same cgroup)? */
	char sub[512];
	int ready = read_file(dir, "cgroup.subtree_control", sub, sizeof(sub)) >= 0 &&
	        has_word(sub, "memory", ' ') && has_word(sub, "pids", ' ');
	if (!ready) {
		if (v2_move_out(dir, why, whysz) < 0)
			return WORKER_CGROUP_NONE;
		int cpu = has_word(buf, "cpu", ' ');
		if (write_file(dir, "cgroup.subtree_control", cpu ? "+memory +pids +cpu" : "+memory +pids") != 0 &&
		    write_file(dir, "cgroup.subtree_control", "+memory +pids") != 0) {
			snprintf(why, whysz, "cannot enable memory and pids in %.300s/cgroup.subtree_control: %s",
			         dir, strerror(errno));
			return WORKER_CGROUP_NONE;
		}
		read_file(dir, "cgroup.subtree_control", sub, sizeof(sub));
	}
	snprintf(root->v2_base, sizeof(root->v2_base), "%s", dir);
	root->have_cpu = has_word(sub, "cpu", ' ');
	root->mode = WORKER_CGROUP_V2;
	return WORKER_CGROUP_V2;
}

static worker_cgroup_mode_t probe_v1(worker_cgroup_root_t *root, char *why, size_t whysz)
{
	char pids[WORKER_CGROUP_PATH_MAX], mem[WORKER_CGROUP_PATH_MAX], cpu[WORKER_CGROUP_PATH_MAX];
	if (own_dir("pids", pids, sizeof(pids)) < 0 || own_dir("memory", mem, sizeof(mem)) < 0) {
		snprintf(why, whysz, "no cgroup v1 pids and memory hierarchies");
		return WORKER_CGROUP_NONE;
	}
	if (try_child(pids, "pids.max", "max") != 0) {
		snprintf(why, whysz, "cgroup v1 pids at %.300s is not writable (%s)", pids, strerror(errno));
		return WORKER_CGROUP_NONE;
	}
	if (try_child(mem, "memory.limit_in_bytes", "-1") != 0) {
		snprintf(why, whysz, "cgroup v1 memory at %.300s is not writable (%s)", mem, strerror(errno));
		return WORKER_CGROUP_NONE;
	}
	snprintf(root->v1_pids, sizeof(root->v1_pids), "%s", pids);
	snprintf(root->v1_mem, sizeof(root->v1_mem), "%s", mem);
	root->v1_cpu[0] = '\0';
	if (own_dir("cpu", cpu, sizeof(cpu)) == 0 && try_child(cpu, "cpu.cfs_quota_us", "-1") == 0) {
		snprintf(root->v1_cpu, sizeof(root->v1_cpu), "%s", cpu);
		root->have_cpu = 1;
	}
	root->mode = WORKER_CGROUP_V1;
	return WORKER_CGROUP_V1;
}

/*
 * Removes the run cgroups a dead worker left in base ("runnel-<pid>-<run>"
 * whose pid is gone): a worker killed with SIGKILL cannot remove its own.
 * rmdir only succeeds on an empty cgroup, so nothing live is touched.
 */
static void sweep(const char *base)
{
	if (!base[0])
		return;
	DIR *d = opendir(base);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "runnel-", 7) != 0)
			continue;
		char *end;
		long pid = strtol(de->d_name + 7, &end, 10);
		if (pid <= 0 || *end != '-' || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char path[WORKER_CGROUP_PATH_MAX + 300];
		snprintf(path, sizeof(path), "%s/%s", base, de->d_name);
		rmdir(path);
	}
	closedir(d);
}

worker_cgroup_mode_t worker_cgroup_probe(worker_cgroup_root_t *root, const char *force,
                                         char *errstr, size_t errstr_size)
{
	memset(root, 0, sizeof(*root));
	if (errstr_size)
		errstr[0] = '\0';
	if (force && !strcmp(force, "off")) {
		snprintf(errstr, errstr_size, "cgroups are turned off (--cgroup off)");
		return WORKER_CGROUP_NONE;
	}
	char why2[512] = "", why1[512] = "";
	int want_v2 = !force || !strcmp(force, "auto") || !strcmp(force, "v2");
	int want_v1 = !force || !strcmp(force, "auto") || !strcmp(force, "v1");
	if (want_v2 && probe_v2(root, why2, sizeof(why2)) == WORKER_CGROUP_V2) {
		sweep(root->v2_base);
		return WORKER_CGROUP_V2;
	}
	memset(root, 0, sizeof(*root));
	if (want_v1 && probe_v1(root, why1, sizeof(why1)) == WORKER_CGROUP_V1) {
		sweep(root->v1_pids);
		sweep(root->v1_mem);
		sweep(root->v1_cpu);
		return WORKER_CGROUP_V1;
	}
	memset(root, 0, sizeof(*root));
	snprintf(errstr, errstr_size, "%s%s%s", why2, why2[0] && why1[0] ? "; " : "", why1);
	return WORKER_CGROUP_NONE;
}

/* A cgroup's directory in a hierarchy: "<base>/runnel-<worker pid>-<name>".
 * 0, or -1 when it does not fit. */
static int cg_path(char out[WORKER_CGROUP_PATH_MAX], const char *base, const char *name)
{
	int n = snprintf(out, WORKER_CGROUP_PATH_MAX, "%s/runnel-%ld-%s", base, (long)getpid(), name);
	return n < 0 || n >= WORKER_CGROUP_PATH_MAX ? -1 : 0;
}

/* v1: the hierarchy of dirs[i] (pids, memory, cpu: the order of create). */
static const char *v1_base(const worker_cgroup_root_t *root, int i)
{
	return i == 0 ? root->v1_pids : i == 1 ? root->v1_mem
	                                       : root->v1_cpu;
}

/* A never made (or emptied) cgroup: no directories, no fds. */
static void blank(worker_cgroup_t *cg, const worker_cgroup_root_t *root)
{
	memset(cg, 0, sizeof(*cg));
	for (int i = 0; i < WORKER_CGROUP_FDS; i++)
		cg->procs_fd[i] = -1;
	cg->root = root;
}

static int add_dir(worker_cgroup_t *cg, const char *base, const char *run_id,
                   char *errstr, size_t errstr_size)
{
	char *d = cg->dirs[cg->ndirs];
	if (cg_path(d, base, run_id) < 0) {
		snprintf(errstr, errstr_size, "cgroup path too long");
		return -1;
	}
	if (mkdir(d, 0755) != 0 && errno != EEXIST) {
		snprintf(errstr, errstr_size, "cannot create cgroup %s: %s", d, strerror(errno));
		return -1;
	}
	/*
	 * The file the sandbox's first process writes "0" to.  v1: "tasks",
	 * which moves only the writing thread, under cgroup_mutex alone;
	 * "cgroup.procs" also takes the kernel's global threadgroup lock for
	 * writing, which waits for an RCU grace period first (7 ms on average,
	 * up to 21 ms measured here, against 39 us).  The writer is a
	 * single-threaded child, so its thread is the whole process.  v2 has
	 * no such file for a domain cgroup.
	 */
	char procs[WORKER_CGROUP_PATH_MAX + 16];
	snprintf(procs, sizeof(procs), "%s/%s", d, cg->root->mode == WORKER_CGROUP_V1 ? "tasks" : "cgroup.procs");
	cg->procs_fd[cg->ndirs] = open(procs, O_WRONLY | O_CLOEXEC);
	cg->ndirs++;
	if (cg->procs_fd[cg->ndirs - 1] < 0) {
		snprintf(errstr, errstr_size, "cannot open %s: %s", procs, strerror(errno));
		return -1;
	}
	return 0;
}

/* Writes file=val in dir, or fails with a message naming the file. */
static int set_limit(const char *dir, const char *file, const char *val,
                     char *errstr, size_t errstr_size)
{
	if (write_file(dir, file, val) == 0)
		return 0;
	snprintf(errstr, errstr_size, "cannot write %s to %s/%s: %s", val, dir, file, strerror(errno));
	return -1;
}

/* x in decimal in v, or unlimited (x 0) as the file spells it. */
static const char *limit_text(char *v, size_t size, uint64_t x, const char *unlimited)
{
	if (!x)
		return unlimited;
	snprintf(v, size, "%" PRIu64, x);
	return v;
}

/*
 * Limits of a v2 cgroup (one directory).  all: unlimited fields are
 * written too ("max"), for a cgroup that had other limits; otherwise a
 * new cgroup's defaults stand.
 */
static int set_v2(const char *d, const worker_cgroup_limits_t *lim, int have_cpu, int all,
                  char *errstr, size_t errstr_size)
{
	char v[64];
	uint64_t pids = lim->pids > 0 ? (uint64_t)lim->pids : 0;
	if ((lim->memory_bytes || all) &&
	    set_limit(d, "memory.max", limit_text(v, sizeof(v), lim->memory_bytes, "max"), errstr, errstr_size) < 0)
		return -1;
	if (lim->memory_bytes) {
		/* No swap: a run at its limit is stopped, not slowed to a crawl. */
		write_file(d, "memory.swap.max", "0");
		/* The OOM killer takes the whole run, not one of its processes. */
		write_file(d, "memory.oom.group", "1");
	}
	if ((pids || all) && set_limit(d, "pids.max", limit_text(v, sizeof(v), pids, "max"), errstr, errstr_size) < 0)
		return -1;
	if (have_cpu && (lim->cpu_millis > 0 || all)) {
		if (lim->cpu_millis > 0)
			snprintf(v, sizeof(v), "%ld %d", lim->cpu_millis * (CPU_PERIOD_US / 1000), CPU_PERIOD_US);
		else
			snprintf(v, sizeof(v), "max %d", CPU_PERIOD_US);
		if (set_limit(d, "cpu.max", v, errstr, errstr_size) < 0)
			return -1;
	}
	return 0;
}

/* Limits of v1 cgroups: dirs[0] pids, dirs[1] memory, dirs[2] cpu (when
 * made); all as for set_v2 ("max", -1). */
static int set_v1(const worker_cgroup_t *cg, const worker_cgroup_limits_t *lim, int all,
                  char *errstr, size_t errstr_size)
{
	char v[64];
	uint64_t pids = lim->pids > 0 ? (uint64_t)lim->pids : 0;
	if ((pids || all) &&
	    set_limit(cg->dirs[0], "pids.max", limit_text(v, sizeof(v), pids, "max"), errstr, errstr_size) < 0)
		return -1;
	if (lim->memory_bytes || all) {
		/* Memory plus swap (absent where swap accounting is off) may
		 * never be below memory alone: lifted first, set after. */
		const char *mem = limit_text(v, sizeof(v), lim->memory_bytes, "-1");
		if (all)
			write_file(cg->dirs[1], "memory.memsw.limit_in_bytes", "-1");
		if (set_limit(cg->dirs[1], "memory.limit_in_bytes", mem, errstr, errstr_size) < 0)
			return -1;
		if (lim->memory_bytes) {
			write_file(cg->dirs[1], "memory.memsw.limit_in_bytes", mem);
			write_file(cg->dirs[1], "memory.swappiness", "0");
		}
	}
	if (cg->ndirs > 2) {
		snprintf(v, sizeof(v), "%d", CPU_PERIOD_US);
		if (set_limit(cg->dirs[2], "cpu.cfs_period_us", v, errstr, errstr_size) < 0)
			return -1;
		snprintf(v, sizeof(v), "%ld", lim->cpu_millis > 0 ? lim->cpu_millis * (CPU_PERIOD_US / 1000) : -1L);
		if (set_limit(cg->dirs[2], "cpu.cfs_quota_us", v, errstr, errstr_size) < 0)
			return -1;
	}
	return 0;
}

static int set_limits(worker_cgroup_t *cg, const worker_cgroup_limits_t *lim, int all,
                      char *errstr, size_t errstr_size)
{
	if (!cg->root || !cg->ndirs) {
		snprintf(errstr, errstr_size, "no cgroup");
		return -1;
	}
	if (cg->have_limits && cg->limits.memory_bytes == lim->memory_bytes &&
	    cg->limits.pids == lim->pids && cg->limits.cpu_millis == lim->cpu_millis)
		return 0;
	int rc;
	if (cg->root->mode == WORKER_CGROUP_V2) {
		rc = set_v2(cg->dirs[0], lim, cg->root->have_cpu, all, errstr, errstr_size);
	} else if (lim->cpu_millis > 0 && cg->root->v1_cpu[0] && cg->ndirs < 3) {
		snprintf(errstr, errstr_size, "cgroup %s has no cpu controller", cg->dirs[0]);
		rc = -1;
	} else {
		rc = set_v1(cg, lim, all, errstr, errstr_size);
	}
	/* A failed write leaves the files partly changed: written in full next time. */
	cg->limits = *lim;
	cg->have_limits = rc == 0;
	return rc;
}

int worker_cgroup_create(worker_cgroup_t *cg, const worker_cgroup_root_t *root,
                         const char *name, const worker_cgroup_limits_t *lim, int want_cpu,
                         char *errstr, size_t errstr_size)
{
	blank(cg, root);
	if (root->mode == WORKER_CGROUP_V2) {
		if (add_dir(cg, root->v2_base, name, errstr, errstr_size) < 0)
			goto fail;
	} else if (root->mode == WORKER_CGROUP_V1) {
		/* The cpu hierarchy only where a CPU limit may be set: each
		 * hierarchy is one more move for the sandbox's first process. */
		int n = root->v1_cpu[0] && (want_cpu || lim->cpu_millis > 0) ? 3 : 2;
		for (int i = 0; i < n; i++)
			if (add_dir(cg, v1_base(root, i), name, errstr, errstr_size) < 0)
				goto fail;
	} else {
		snprintf(errstr, errstr_size, "no cgroup hierarchy");
		return -1;
	}
	if (set_limits(cg, lim, 0, errstr, errstr_size) < 0)
		goto fail;
	return 0;
fail:
	worker_cgroup_destroy(cg, 0);
	return -1;
}

void worker_cgroup_set_idle(worker_cgroup_t *cg, int idle)
{
	if (!cg || !cg->root || !cg->ndirs)
		return;
	if (cg->root->mode == WORKER_CGROUP_V2)
		write_file(cg->dirs[0], "cpu.weight", idle ? "1" : "100");
	else if (cg->ndirs > 2)
		write_file(cg->dirs[2], "cpu.shares", idle ? "2" : "1024");
}

int worker_cgroup_set_limits(worker_cgroup_t *cg, const worker_cgroup_limits_t *lim,
                             char *errstr, size_t errstr_size)
{
	return set_limits(cg, lim, 1, errstr, errstr_size);
}

void worker_cgroup_rename(worker_cgroup_t *cg, const char *name)
{
	if (!cg->root || cg->root->mode != WORKER_CGROUP_V1)
		return;
	for (int i = 0; i < cg->ndirs; i++) {
		char to[WORKER_CGROUP_PATH_MAX];
		if (cg_path(to, v1_base(cg->root, i), name) == 0 && rename(cg->dirs[i], to) == 0)
			memcpy(cg->dirs[i], to, sizeof(to));
	}
}

void worker_cgroup_move(worker_cgroup_t *dst, worker_cgroup_t *src)
{
	*dst = *src;
	blank(src, NULL);
}

int worker_cgroup_events(const worker_cgroup_t *cg, worker_cgroup_events_t *ev)
{
	memset(ev, 0, sizeof(*ev));
	if (!cg->root || !cg->ndirs)
		return -1;
	if (cg->root->mode == WORKER_CGROUP_V2) {
		const char *d = cg->dirs[0];
		ev->oom_kills = keyed_value(d, "memory.events", "oom_kill");
		ev->memory_max_hits = keyed_value(d, "memory.events", "max");
		ev->pids_max_hits = keyed_value(d, "pids.events", "max");
		ev->cpu_throttled_us = keyed_value(d, "cpu.stat", "throttled_usec");
		return 0;
	}
	ev->pids_max_hits = keyed_value(cg->dirs[0], "pids.events", "max");
	if (cg->ndirs > 1) {
		ev->oom_kills = keyed_value(cg->dirs[1], "memory.oom_control", "oom_kill");
		char buf[32];
		if (read_file(cg->dirs[1], "memory.failcnt", buf, sizeof(buf)) > 0)
			ev->memory_max_hits = strtoull(buf, NULL, 10);
	}
	if (cg->ndirs > 2)
		ev->cpu_throttled_us = keyed_value(cg->dirs[2], "cpu.stat", "throttled_time") / 1000;
	return 0;
}

/* SIGKILLs every process listed in dir/cgroup.procs; 1 when it was empty. */
static int kill_all(const char *dir)
{
	char buf[16384];
	if (read_file(dir, "cgroup.procs", buf, sizeof(buf)) < 0)
		return 1;
	if (!buf[0])
		return 1;
	char *save = NULL;
	for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
		long p = strtol(t, NULL, 10);
		/* Only processes still inside the run's cgroup are listed; the
		 * sandbox's pid namespace is gone with its init, so these are
		 * leftovers being torn down. */
		if (p > 1)
			kill((pid_t)p, SIGKILL);
	}
	return 0;
}

void worker_cgroup_destroy(worker_cgroup_t *cg, int timeout_ms)
{
	if (!cg->root)
		return; /* zeroed: never made (its fds are not ours) */
	for (int i = 0; i < WORKER_CGROUP_FDS; i++) {
		if (cg->procs_fd[i] >= 0)
			close(cg->procs_fd[i]);
		cg->procs_fd[i] = -1;
	}
	if (cg->root->mode == WORKER_CGROUP_V2 && cg->ndirs)
		write_file(cg->dirs[0], "cgroup.kill", "1");
	int64_t deadline = rn_mono_ms() + timeout_ms;
	/* The sandbox's last processes are usually gone within a fraction of
	 * a millisecond of its leader: the first waits are short (the reaper
	 * has other runs queued), later ones up to 5 ms. */
	long wait_us = 100;
	for (int i = 0; i < cg->ndirs; i++) {
		for (;;) {
			int empty = kill_all(cg->dirs[i]);
			if (empty && rmdir(cg->dirs[i]) == 0)
				break;
			if (empty && errno == ENOENT)
				break;
			if (rn_mono_ms() >= deadline)
				break;
			struct timespec ts = { 0, wait_us * 1000 };
			nanosleep(&ts, NULL);
			if (wait_us < 5000)
				wait_us *= 2;
		}
	}
	cg->ndirs = 0;
}

/* What a charged child hands back through its pipe. */
typedef struct call_reply {
	int rc;
	char out[1024];
} call_reply_t;

/* The charged child: enters the cgroup, calls fn, writes the reply. */
static void call_child(int wfd, const int *fds, int nfds, worker_cgroup_fn_t fn, void *arg, pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent)
		_exit(127);
	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0 && write(fds[i], "0", 1) != 1)
			_exit(126);
	static call_reply_t r;
	r.rc = fn(arg, r.out, sizeof(r.out));
	r.out[sizeof(r.out) - 1] = '\0';
	ssize_t w = write(wfd, &r, sizeof(r));
	_exit(w == (ssize_t)sizeof(r) ? 0 : 125);
}

/*
 * Reads the child's answer from rfd into buf (at most cap bytes; with
 * exact, until cap bytes arrived, else until end of file), at most until
 * deadline or a stop; kills a child that is late or stopped, reaps it.
 * *got: bytes read; *late: stopped or late; *status: its wait status.
 */
static void child_wait(int rfd, pid_t pid, const worker_stopword_t *stop, int timeout_ms, char *buf, size_t cap,
                       int exact, size_t *got, int *late, int *status)
{
	int64_t deadline = rn_mono_ms() + timeout_ms;
	*got = 0;
	*late = 0;
	int eof = 0;
	while (buf && !eof && (!exact || *got < cap)) {
		if ((stop && worker_stopword_any(stop)) || rn_mono_ms() >= deadline) {
			*late = 1;
			break;
		}
		struct pollfd pf = { .fd = rfd, .events = POLLIN };
		int n = poll(&pf, 1, 200);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		char sink[256];
		ssize_t rd = *got < cap ? read(rfd, buf + *got, cap - *got) : read(rfd, sink, sizeof(sink));
		if (rd < 0 && errno == EINTR)
			continue;
		if (rd <= 0) {
			eof = 1; /* the child closed it: answered, or died */
			break;
		}
		if (*got < cap)
			*got += (size_t)rd;
	}
	if (!eof && (!exact || *got < cap))
		kill(pid, SIGKILL);
	*status = 0;
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
}

/* Why a child gave no answer, into out (late: child_wait's). */
static void child_why(int late, const worker_stopword_t *stop, int status, char *out, size_t out_size, int *sig)
{
	if (late) {
		snprintf(out, out_size, stop && worker_stopword_any(stop) ? "cancelled" : "timed out");
	} else if (WIFSIGNALED(status)) {
		if (sig)
			*sig = WTERMSIG(status);
		snprintf(out, out_size, "killed by signal %d", WTERMSIG(status));
	} else {
		snprintf(out, out_size, "its child ended with status %d before answering",
		         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
}

int worker_cgroup_call(const int *fds, int nfds, const worker_stopword_t *stop, int timeout_ms,
                       worker_cgroup_fn_t fn, void *arg, char *out, size_t out_size, int *sig)
{
	if (sig)
		*sig = 0;
	if (!fds || nfds <= 0)
		return fn(arg, out, out_size);
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) {
		snprintf(out, out_size, "cannot make a pipe: %s", strerror(errno));
		return WORKER_CGROUP_CALL_DIED;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(out, out_size, "cannot fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return WORKER_CGROUP_CALL_DIED;
	}
	if (pid == 0) {
		close(p[0]);
		call_child(p[1], fds, nfds, fn, arg, parent);
	}
	close(p[1]);
	call_reply_t *r = calloc(1, sizeof(*r));
	size_t got = 0;
	int late = 0, status = 0;
	child_wait(p[0], pid, stop, timeout_ms, (char *)r, sizeof(*r), 1, &got, &late, &status);
	close(p[0]);
	int rc = WORKER_CGROUP_CALL_DIED;
	if (r && got == sizeof(*r)) {
		rc = r->rc;
		snprintf(out, out_size, "%s", r->out);
	} else {
		child_why(late, stop, status, out, out_size, sig);
	}
	free(r);
	return rc;
}

/* The sources of worker_cgroup_exec's dup2s are first copied to fds at
 * or above this, above every target (0, 1, 3 .. 3+n). */
#define EXEC_FD_BASE 64

int worker_cgroup_exec(const int *fds, int nfds, const worker_stopword_t *stop, int timeout_ms, const char *path,
                       char *const argv[], int in_fd, char *out, size_t out_size, int *sig)
{
	if (sig)
		*sig = 0;
	out[0] = '\0';
	if (nfds < 0 || nfds > EXEC_FD_BASE - 4) {
		snprintf(out, out_size, "too many cgroup files (%d)", nfds);
		return WORKER_CGROUP_CALL_DIED;
	}
	/* Every source above the targets (0, 1, 3..3+n), so that no dup2 of
	 * the file actions overwrites a source still to come. */
	int hi[EXEC_FD_BASE], nhi = 0, p[2] = { -1, -1 }, rc = WORKER_CGROUP_CALL_DIED;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int have_fa = posix_spawn_file_actions_init(&fa) == 0, have_at = have_fa && posix_spawnattr_init(&at) == 0;
	if (!have_at) {
		snprintf(out, out_size, "out of memory");
		goto out;
	}
	if (pipe2(p, O_CLOEXEC) != 0) {
		snprintf(out, out_size, "cannot make a pipe: %s", strerror(errno));
		goto out;
	}
	for (int i = 0; i < nfds + 2; i++) {
		int src = i == 0 ? in_fd : i == 1 ? p[1]
		                                  : fds[i - 2];
		int fd = fcntl(src, F_DUPFD_CLOEXEC, EXEC_FD_BASE);
		if (fd < 0) {
			snprintf(out, out_size, "cannot duplicate a descriptor: %s", strerror(errno));
			goto out;
		}
		hi[nhi++] = fd;
		if (posix_spawn_file_actions_adddup2(&fa, fd, i == 0 ? 0 : i == 1 ? 1
		                                                                  : i + 1) != 0) {
			snprintf(out, out_size, "out of memory");
			goto out;
		}
	}
	/* Default dispositions and no blocked signal: the worker's threads
	 * block some for their own handling. */
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	/* No secret of the worker's environment; a sanitizer build's options. */
	char *envp[8] = { "PATH=/usr/bin:/bin" }, san[3][512];
	const char *san_names[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS" };
	for (int i = 0, n = 1; i < 3; i++) {
		const char *v = getenv(san_names[i]);
		if (v && (size_t)snprintf(san[i], sizeof(san[i]), "%s=%s", san_names[i], v) < sizeof(san[i]))
			envp[n++] = san[i];
	}
	pid_t pid;
	int e = posix_spawn(&pid, path, &fa, &at, argv, envp);
	for (int i = 0; i < nhi; i++)
		close(hi[i]);
	nhi = 0;
	close(p[1]);
	p[1] = -1;
	if (e != 0) {
		snprintf(out, out_size, "cannot start %s: %s", path, strerror(e));
		goto out;
	}
	size_t got = 0;
	int late = 0, status = 0;
	child_wait(p[0], pid, stop, timeout_ms, out, out_size - 1, 0, &got, &late, &status);
	out[got] = '\0';
	if (got && out[got - 1] == '\n')
		out[got - 1] = '\0';
	if (!late && WIFEXITED(status))
		rc = WEXITSTATUS(status);
	else
		child_why(late, stop, status, out, out_size, sig);
out:
	for (int i = 0; i < nhi; i++)
		close(hi[i]);
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	if (have_at)
		posix_spawnattr_destroy(&at);
	if (have_fa)
		posix_spawn_file_actions_destroy(&fa);
	return rc;
}
