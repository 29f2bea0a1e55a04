/*
 * worker/sandbox.c - starts the agent in a fresh bubblewrap sandbox (or, for
 * the "process" driver, as a plain child), wires its stdin/stdout/stderr to
 * pipes, signals and reaps the whole process tree (SPEC §6).
 *
 * Everything the child needs (argv, paths, rlimits, bwrap's fds) is
 * prepared before fork(): the worker is multi-threaded, so between fork()
 * and execve() the child only makes async-signal-safe system calls.  An
 * exec failure travels back over a CLOEXEC pipe (bubblewrap/nsjail style):
 * EOF on that pipe means the exec succeeded, a record means it did not and
 * says why.
 *
 * Under bwrap, nothing of the run is on the host side: bwrap gets an empty
 * environment and its options through a memfd (--args), runs as an
 * unprivileged uid when the worker is root, and starts runnel-warm-init,
 * which receives the agent's argv, environment and setup script over
 * stdin (the launch message, below) once inside the namespaces.
 */
#include "worker/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "common/sandbox_layout.h"
#include "common/strv.h"
#include "common/util.h"
#include "worker/egress.h"
#include "worker/seccomp.h"

#define ARGV_MAX            4096 /* entries in bwrap's argv */
#define SANDBOX_INFO_FD     4    /* bwrap's --info-fd in the child; its other fds follow */
#define SANDBOX_INFO_FD_STR "4"
#define SANDBOX_FDS_MAX     8          /* fds handed to bwrap: info, seccomp, args */
#define LAUNCH_SETUP_MAX    (8u << 20) /* matches runnel-warm-init's string cap */
#define SANDBOX_HOME        RN_SANDBOX_HOME
#define SANDBOX_WS          RN_SANDBOX_WORKSPACE
#define SANDBOX_SKILLS      RN_SANDBOX_SKILLS
#define SANDBOX_SETUP       WORKER_SANDBOX_SETUP_PATH
/* Host-side command lookup when the caller gives no PATH (not the
 * sandbox's PATH, which is RN_SANDBOX_PATH). */
#define DEFAULT_PATH     "/usr/local/bin:/usr/bin:/bin"
#define PROBE_TIMEOUT_MS 10000

#define SETUP_WRAPPER WORKER_SANDBOX_SETUP_WRAPPER /* see sandbox.h */

/* Host paths bound read-only when no rootfs is given.  Symlinks (merged
 * /usr) are recreated as symlinks. */
static const char *const host_ro_paths[] = {
	"/usr",
	"/bin",
	"/sbin",
	"/lib",
	"/lib64",
	"/lib32",
	"/libx32",
};

/*
 * Only these parts of the host's /etc are visible.  Binding all of /etc
 * would expose /etc/shadow, /etc/ssl/private and credential files such as
 * pip.conf or npmrc: a worker running as root maps the sandbox's uid 0 onto
 * the host's root, and file owner bits then apply.
 */
static const char *const host_etc_paths[] = {
	"/etc/alternatives",
	"/etc/ssl/certs",
	"/etc/ca-certificates.conf",
	"/etc/passwd",
	"/etc/group",
	"/etc/hosts",
	"/etc/hostname",
	"/etc/resolv.conf",
	"/etc/nsswitch.conf",
	"/etc/host.conf",
	"/etc/gai.conf",
	"/etc/protocols",
	"/etc/services",
	"/etc/networks",
	"/etc/ld.so.cache",
	"/etc/ld.so.conf",
	"/etc/ld.so.conf.d",
	"/etc/localtime",
	"/etc/timezone",
	"/etc/mime.types",
	"/etc/os-release",
	"/etc/debian_version",
	"/etc/magic",
	"/etc/magic.mime",
};

/* What the child reports when it cannot reach execve(). */
enum child_stage {
	STAGE_FDS = 1,
	STAGE_SESSION,
	STAGE_RLIMIT,
	STAGE_CHDIR,
	STAGE_EXEC,
	STAGE_CGROUP,
	STAGE_IDS,
};

struct child_report {
	int stage;
	int err;
};

typedef rn_strv_t strv_t;

/* Adds to bwrap's argv; past ARGV_MAX entries the vector counts as out of
 * memory (the caller checks ->oom once). */
static void strv_push(strv_t *s, const char *str)
{
	if (s->n + 2 > ARGV_MAX)
		s->oom = 1;
	rn_strv_add(s, str);
}

static void strv_push3(strv_t *s, const char *a, const char *b, const char *c)
{
	strv_push(s, a);
	strv_push(s, b);
	if (c)
		strv_push(s, c);
}

static const char *env_lookup(char *const *envp, const char *name)
{
	size_t nlen = strlen(name);
	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], name, nlen) == 0 && envp[i][nlen] == '=')
			return envp[i] + nlen + 1;
	return NULL;
}

/*
 * Finds an executable the way execvp would, but before fork() (execvp may
 * allocate).  0 with out filled, or -1 with errno (ENOENT, EACCES, ...).
 */
static int resolve_exec(const char *name, const char *path, char *out, size_t outsz)
{
	if (!name || !*name) {
		errno = ENOENT;
		return -1;
	}
	if (strchr(name, '/')) {
		if ((size_t)snprintf(out, outsz, "%s", name) >= outsz) {
			errno = ENAMETOOLONG;
			return -1;
		}
		return 0;
	}
	if (!path || !*path)
		path = DEFAULT_PATH;
	int saw_eacces = 0;
	const char *p = path;
	while (1) {
		const char *colon = strchr(p, ':');
		size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
		const char *dir = dlen ? p : ".";
		int dl = dlen ? (int)dlen : 1;
		if ((size_t)snprintf(out, outsz, "%.*s/%s", dl, dir, name) < outsz) {
			if (access(out, X_OK) == 0) {
				struct stat st;
				if (stat(out, &st) == 0 && S_ISREG(st.st_mode))
					return 0;
			} else if (errno == EACCES) {
				saw_eacces = 1;
			}
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	errno = saw_eacces ? EACCES : ENOENT;
	return -1;
}

/*
 * What of the host's system directories and /etc exists, as bwrap options
 * ("--symlink TARGET PATH", "--ro-bind PATH PATH", ...).  Probed once per
 * HOST_PROBE_MS rather than per sandbox: the lstat, readlink and access
 * calls of some thirty paths were a tenth of the worker's own CPU per
 * run.  A path that appears or disappears is seen within that time.
 */
#define HOST_PROBE_MS 5000

static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static rn_strv_t host_args; /* guarded by host_mu */
static int64_t host_probed_at = -1;

static void probe_host_root(rn_strv_t *out)
{
	for (size_t i = 0; i < sizeof(host_ro_paths) / sizeof(host_ro_paths[0]); i++) {
		const char *p = host_ro_paths[i];
		struct stat st;
		if (lstat(p, &st) != 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = readlink(p, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			strv_push3(out, "--symlink", target, p);
		} else if (S_ISDIR(st.st_mode)) {
			strv_push3(out, "--ro-bind", p, p);
		}
	}
	for (size_t i = 0; i < sizeof(host_etc_paths) / sizeof(host_etc_paths[0]); i++) {
		const char *p = host_etc_paths[i];
		if (access(p, F_OK) == 0) /* follows links: a dangling one is skipped */
			strv_push3(out, "--ro-bind", p, p);
	}
}

/* Adds the host's system directories, read-only; symlinks stay symlinks. */
static void add_host_root(strv_t *a)
{
	pthread_mutex_lock(&host_mu);
	int64_t now = rn_mono_ms();
	if (host_probed_at < 0 || now - host_probed_at >= HOST_PROBE_MS || host_args.oom) {
		rn_strv_t fresh = { 0 };
		probe_host_root(&fresh);
		rn_strv_free(&host_args);
		host_args = fresh;
		host_probed_at = now;
	}
	for (size_t i = 0; i < host_args.n; i++)
		strv_push(a, host_args.v[i]);
	if (host_args.oom)
		a->oom = 1;
	pthread_mutex_unlock(&host_mu);
}

/* ------------------------------------------------------------------------
 * The run's environment and ids
 * ------------------------------------------------------------------------ */

/*
 * glibc's unsecure-envvars list (what the loader drops for setuid
 * programs) and every LD_* name: each makes a program load code (LD_PRELOAD,
 * LD_AUDIT, GCONV_PATH...), read files it names (LOCPATH, NLSPATH, TZDIR,
 * HOSTALIASES...) or write them (LD_DEBUG_OUTPUT, MALLOC_TRACE).  TMPDIR,
 * LOCALDOMAIN and RES_OPTIONS stay: they name a directory or resolver
 * options, load nothing, and jobs set them.
 */
static const char *const refused_env[] = {
	"GCONV_PATH",
	"GETCONF_DIR",
	"GLIBC_TUNABLES",
	"HOSTALIASES",
	"LOCPATH",
	"MALLOC_TRACE",
	"NIS_PATH",
	"NLSPATH",
	"RESOLV_HOST_CONF",
	"TZDIR",
	"MALLOC_CHECK_",
	"MALLOC_ARENA_MAX",
	"MALLOC_MMAP_MAX_",
	"MALLOC_PERTURB_",
	"MALLOC_TOP_PAD_",
	"MALLOC_MMAP_THRESHOLD_",
	"MALLOC_TRIM_THRESHOLD_",
};

int worker_sandbox_env_refused(const char *name)
{
	size_t n = strcspn(name, "=");
	if (n >= 3 && !strncmp(name, "LD_", 3))
		return 1;
	for (size_t i = 0; i < sizeof(refused_env) / sizeof(refused_env[0]); i++)
		if (strlen(refused_env[i]) == n && !strncmp(name, refused_env[i], n))
			return 1;
	return 0;
}

int worker_sandbox_ids(const worker_sandbox_spec_t *spec, uid_t *uid, gid_t *gid)
{
	if (geteuid() != 0) {
		*uid = geteuid();
		*gid = getegid();
		return 0;
	}
	*uid = (uid_t)(spec->uid > 0 ? spec->uid : WORKER_SANDBOX_ID_DEFAULT);
	*gid = (gid_t)(spec->gid > 0 ? spec->gid : WORKER_SANDBOX_ID_DEFAULT);
	return 1;
}

static uid_t chown_uid;
static gid_t chown_gid;
static pthread_mutex_t chown_mu = PTHREAD_MUTEX_INITIALIZER; /* nftw has no argument */

static int chown_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)type;
	(void)ftw;
	/* A file with a second name could be a link to something outside
	 * (a tree without its own tmpfs shares the host's filesystem): left
	 * alone, readable but not writable inside. */
	if (!S_ISDIR(st->st_mode) && !S_ISLNK(st->st_mode) && st->st_nlink > 1)
		return 0;
	if (st->st_uid != chown_uid || st->st_gid != chown_gid)
		lchown(path, chown_uid, chown_gid);
	return 0;
}

/*
 * Gives dir's tree to the sandbox's ids, before anything of the run runs
 * (the worker wrote it as root: the bag, the workspace's files).  lchown,
 * no symlink followed, no other filesystem entered.  0 or -1 (errno).
 */
static int hand_over(const char *dir, uid_t uid, gid_t gid)
{
	pthread_mutex_lock(&chown_mu);
	chown_uid = uid;
	chown_gid = gid;
	int rc = nftw(dir, chown_one, 16, FTW_PHYS | FTW_MOUNT);
	pthread_mutex_unlock(&chown_mu);
	/* The run directory above is only searchable by others; the tree
	 * itself is the sandbox's alone. */
	if (rc == 0)
		rc = chmod(dir, 0700);
	return rc;
}

/* ------------------------------------------------------------------------
 * Limits and egress (see worker/limits.h): tmpfs sizes, the egress bridge
 * and its environment.  Kept apart from the rest of the command line.
 * ------------------------------------------------------------------------ */

/* A tmpfs with the run's size, when it has one.  Its pages are charged to
 * the memory of the process that writes them: the run's cgroup. */
static void add_sized_tmpfs(const worker_sandbox_spec_t *spec, strv_t *a, const char *path)
{
	if (spec->tmp_mb > 0) {
		char size[32];
		snprintf(size, sizeof(size), "%lld", (long long)spec->tmp_mb * 1024LL * 1024LL);
		strv_push3(a, "--size", size, NULL);
	}
	strv_push3(a, "--tmpfs", path, NULL);
}

/* The fds bwrap gets (--info-fd, --seccomp, --args): they sit at
 * SANDBOX_INFO_FD and up in the child, in the order added. */
typedef struct fdmap {
	int fd[SANDBOX_FDS_MAX]; /* ours (O_CLOEXEC), closed by fdmap_free */
	int n;
	int bad; /* errno of the first failure */
} fdmap_t;

/* Adds fd (taken over) and returns its number in the child as a string in
 * num; -1 when full. */
static int fdmap_add(fdmap_t *m, int fd, char num[16])
{
	if (fd < 0 || m->n >= SANDBOX_FDS_MAX) {
		if (fd >= 0)
			close(fd);
		if (!m->bad)
			m->bad = fd < 0 ? errno : EMFILE;
		return -1;
	}
	m->fd[m->n] = fd;
	snprintf(num, 16, "%d", SANDBOX_INFO_FD + m->n);
	m->n++;
	return 0;
}

static void fdmap_free(fdmap_t *m)
{
	for (int i = 0; i < m->n; i++)
		close(m->fd[i]);
	m->n = 0;
}

/* The bridge binary and the proxy socket, read-only (connecting to a unix
 * socket needs no write access to its mount). */
static int has_egress(const worker_sandbox_spec_t *spec)
{
	return spec->egress_bridge && (spec->egress_socket || spec->sock_dir);
}

static void add_egress_binds(const worker_sandbox_spec_t *spec, strv_t *a)
{
	/* A warm agent's directory, whose sockets appear when a run takes it. */
	if (spec->sock_dir)
		strv_push3(a, "--ro-bind", spec->sock_dir, RN_SANDBOX_SOCK_DIR);
	if (!has_egress(spec))
		return;
	strv_push3(a, "--ro-bind", spec->egress_bridge, WORKER_EGRESS_BRIDGE_IN_SANDBOX);
	if (!spec->sock_dir)
		strv_push3(a, "--ro-bind", spec->egress_socket, WORKER_EGRESS_SOCK_IN_SANDBOX);
}

/* The bridge runs first and executes the rest of the command line. */
static void add_egress_argv(const worker_sandbox_spec_t *spec, strv_t *a)
{
	if (!has_egress(spec))
		return;
	char port[16];
	snprintf(port, sizeof(port), "%d", WORKER_EGRESS_PORT);
	strv_push(a, WORKER_EGRESS_BRIDGE_IN_SANDBOX);
	strv_push(a, port);
	strv_push(a, spec->sock_dir ? RN_SANDBOX_SOCK_DIR "/" RN_SANDBOX_SOCK_EGRESS_NAME : WORKER_EGRESS_SOCK_IN_SANDBOX);
}

static int is_proxy_var(const char *e)
{
	static const char *const names[] = {
		"HTTPS_PROXY=",
		"HTTP_PROXY=",
		"https_proxy=",
		"http_proxy=",
		"ALL_PROXY=",
		"all_proxy=",
		"NO_PROXY=",
		"no_proxy=",
		"NODE_USE_ENV_PROXY=",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strncmp(e, names[i], strlen(names[i])))
			return 1;
	return 0;
}

/* envp plus the proxy variables (the run's own proxy settings dropped: the
 * bridge is the only way out, and NO_PROXY would only send a client to a
 * dead end). */
static void build_egress_env(char *const *envp, strv_t *out)
{
	for (size_t i = 0; envp && envp[i]; i++)
		if (!is_proxy_var(envp[i]))
			strv_push(out, envp[i]);
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", WORKER_EGRESS_PORT);
	static const char *const names[] = { "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char v[96];
		snprintf(v, sizeof(v), "%s=%s", names[i], url);
		strv_push(out, v);
	}
	/* Node.js reads the proxy variables only when told to (24 and later). */
	strv_push(out, "NODE_USE_ENV_PROXY=1");
	/* The model gateway's address inside (worker/gateway.h) stays
	 * direct.  Only the name: 127.0.0.1 is the host's loopback through
	 * the proxy, when the operator's list names a service there. */
	strv_push(out, "NO_PROXY=localhost");
	strv_push(out, "no_proxy=localhost");
}

/* /proc/sysrq-trigger exists only on kernels built with it. */
static int have_sysrq(void)
{
	return access("/proc/sysrq-trigger", F_OK) == 0;
}

/* The namespaces, and what bwrap enforces inside them: seccomp, no
 * capabilities, a fixed identity. */
static int add_isolation(const worker_sandbox_spec_t *spec, fdmap_t *m, strv_t *a, char *errstr,
                         size_t errstr_size)
{
	char num[16];
	/*
	 * New user namespace (no privilege needed, and capabilities there mean
	 * nothing outside), pid (the agent sees only its own processes and the
	 * whole tree dies with its init), ipc, uts, cgroup when possible.
	 */
	strv_push(a, "--unshare-user");
	strv_push(a, "--unshare-pid");
	strv_push(a, "--unshare-ipc");
	strv_push(a, "--unshare-uts");
	strv_push(a, "--unshare-cgroup-try");
	if (!spec->share_net)
		strv_push(a, "--unshare-net");
	/* No user namespace inside: a nested one would give the job every
	 * capability over fresh mount and network namespaces, the surface of
	 * most kernel privilege escalations.  The filter refuses the call too. */
	strv_push(a, "--disable-userns");
	strv_push(a, "--die-with-parent");
	/* bwrap writes the sandbox's pid here once its namespaces exist
	 * (worker_sandbox_wait_cloned): the caller's info pipe, first in m. */
	strv_push3(a, "--info-fd", SANDBOX_INFO_FD_STR, NULL);
	int sfd = worker_seccomp_fd(errstr, errstr_size);
	if (sfd < 0)
		return -1;
	if (fdmap_add(m, sfd, num) == 0)
		strv_push3(a, "--seccomp", num, NULL);
	/* bwrap keeps every capability for uid 0 in the sandbox by default. */
	strv_push3(a, "--cap-drop", "ALL", NULL);
	strv_push3(a, "--uid", "0", NULL);
	strv_push3(a, "--gid", "0", NULL);
	strv_push3(a, "--hostname", "sandbox", NULL);
	return 0;
}

/* The file system the agent sees: the host's system directories (or the
 * rootfs), private /proc, /dev and tmpfs, the run's own binds. */
static void add_filesystem(const worker_sandbox_spec_t *spec, strv_t *a)
{
	if (spec->rootfs)
		strv_push3(a, "--ro-bind", spec->rootfs, "/");
	else
		add_host_root(a);

	strv_push3(a, "--proc", "/proc", NULL);
	/*
	 * Kernel knobs read-only, whoever the sandbox's uid is (bwrap covers
	 * them only when it could write them itself).  The source is the
	 * host's procfs: the same files, each answering for the namespaces
	 * of the process that opens it.
	 */
	strv_push3(a, "--ro-bind", "/proc/sys", "/proc/sys");
	if (have_sysrq())
		strv_push3(a, "--ro-bind", "/proc/sysrq-trigger", "/proc/sysrq-trigger");
	strv_push3(a, "--dev", "/dev", NULL);
	add_sized_tmpfs(spec, a, "/tmp");
	add_sized_tmpfs(spec, a, "/run");
	add_sized_tmpfs(spec, a, SANDBOX_HOME);
	strv_push3(a, "--bind", spec->workspace_dir, SANDBOX_WS);
	if (spec->skills_dir)
		strv_push3(a, "--ro-bind", spec->skills_dir, SANDBOX_SKILLS);
	strv_push3(a, "--ro-bind", spec->init_path, RN_SANDBOX_WARM_INIT);
}

/* The worker's own extra binds, each "host:/path", read-only. */
static int add_ro_binds(const worker_sandbox_spec_t *spec, strv_t *a, char *errstr,
                        size_t errstr_size)
{
	for (size_t i = 0; spec->ro_binds && spec->ro_binds[i]; i++) {
		const char *b = spec->ro_binds[i];
		const char *colon = strchr(b, ':');
		if (!colon || colon == b || colon[1] != '/') {
			snprintf(errstr, errstr_size, "sandbox: read-only bind \"%s\" is not host:/path", b);
			return -1;
		}
		char host[PATH_MAX];
		if ((size_t)(colon - b) >= sizeof(host)) {
			snprintf(errstr, errstr_size, "sandbox: read-only bind path too long");
			return -1;
		}
		memcpy(host, b, (size_t)(colon - b));
		host[colon - b] = '\0';
		strv_push3(a, "--ro-bind", host, colon + 1);
	}
	return 0;
}

/*
 * bwrap's options, for its --args fd: a's entries go to bwrap through a
 * memfd, never on its command line, which every local user and the
 * sandbox itself (/proc/1/cmdline) can read; the host's work paths and
 * warm sandboxes' names stay out of sight.
 */
static int build_bwrap_opts(const worker_sandbox_spec_t *spec, fdmap_t *m, strv_t *a,
                            char *errstr, size_t errstr_size)
{
	if (add_isolation(spec, m, a, errstr, errstr_size) != 0)
		return -1;
	add_filesystem(spec, a);
	if (add_ro_binds(spec, a, errstr, errstr_size) != 0)
		return -1;
	add_egress_binds(spec, a);
	strv_push3(a, "--chdir", SANDBOX_WS, NULL);
	if (m->bad) {
		snprintf(errstr, errstr_size, "sandbox: cannot pass bwrap its fds: %s", strerror(m->bad));
		return -1;
	}
	return 0;
}

/* opts, NUL-separated, in a new memfd at offset 0 (bwrap's --args), in
 * one write; -1 with errno. */
static int opts_fd(const strv_t *opts)
{
	size_t len = 0;
	for (size_t i = 0; i < opts->n; i++)
		len += strlen(opts->v[i]) + 1;
	char *buf = malloc(len ? len : 1);
	if (!buf)
		return -1;
	size_t off = 0;
	for (size_t i = 0; i < opts->n; i++) {
		size_t l = strlen(opts->v[i]) + 1;
		memcpy(buf + off, opts->v[i], l);
		off += l;
	}
	int fd = memfd_create("runnel-bwrap-args", MFD_CLOEXEC);
	if (fd >= 0 && (rn_write_all(fd, buf, len, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)) {
		close(fd);
		fd = -1;
	}
	free(buf);
	return fd;
}

static void add_agent_argv(const worker_sandbox_spec_t *spec, const char *setup_path,
                           strv_t *a)
{
	if (setup_path) {
		strv_push(a, "/bin/sh");
		strv_push(a, "-c");
		strv_push(a, SETUP_WRAPPER);
		strv_push(a, setup_path);
	}
	for (size_t i = 0; spec->argv[i]; i++)
		strv_push(a, spec->argv[i]);
}

/* Everything the child uses, computed before fork(). */
struct child_plan {
	const char *exec_path;
	char *const *argv;
	char *const *envp;
	const char *chdir_to; /* NULL: stay */
	int no_new_privs;
	pid_t parent;
	int in_r, out_w, err_w, rep_w;
	const int *keep; /* placed at SANDBOX_INFO_FD and up, in order (bwrap's fds) */
	int nkeep;
	long max_fd; /* fallback when close_range() is missing */
	struct {
		int res;
		rlim_t val;
	} rl[4];
	int nrl;
	const int *cg_fds; /* cgroup.procs files to enter first */
	int ncg;
	int drop_ids; /* become uid/gid (raw system calls) before exec */
	uid_t uid;
	gid_t gid;
};

static void child_fail(int rep_fd, int stage) __attribute__((noreturn));
static void child_fail(int rep_fd, int stage)
{
	struct child_report r = { stage, errno };
	ssize_t n;
	do {
		n = write(rep_fd, &r, sizeof(r));
	} while (n < 0 && errno == EINTR);
	_exit(127);
}

/* PR_SET_PDEATHSIG, and a check that the worker did not die before it. */
static void child_pdeathsig(const struct child_plan *p, int rep)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		child_fail(rep, STAGE_SESSION);
	if (getppid() != p->parent)
		_exit(127);
}

/*
 * The child's fds: stdin, stdout, stderr from the plan, the report pipe at
 * 3, bwrap's fds from SANDBOX_INFO_FD up, every other one closed.  Returns
 * the report pipe's number.
 */
static int child_place_fds(const struct child_plan *p)
{
	/* Move our fds above every number they go to before dup2 over them. */
	const int high = SANDBOX_INFO_FD + SANDBOX_FDS_MAX + 4;
	int in_r = fcntl(p->in_r, F_DUPFD_CLOEXEC, high);
	int out_w = fcntl(p->out_w, F_DUPFD_CLOEXEC, high);
	int err_w = fcntl(p->err_w, F_DUPFD_CLOEXEC, high);
	int rep = fcntl(p->rep_w, F_DUPFD_CLOEXEC, high);
	if (rep < 0)
		child_fail(p->rep_w, STAGE_FDS);
	int keep[SANDBOX_FDS_MAX];
	for (int i = 0; i < p->nkeep; i++)
		if ((keep[i] = fcntl(p->keep[i], F_DUPFD_CLOEXEC, high)) < 0)
			child_fail(rep, STAGE_FDS);
	if (in_r < 0 || out_w < 0 || err_w < 0)
		child_fail(rep, STAGE_FDS);
	if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		child_fail(rep, STAGE_FDS);
	if (dup3(rep, 3, O_CLOEXEC) < 0)
		child_fail(rep, STAGE_FDS);
	rep = 3;
	for (int i = 0; i < p->nkeep; i++) /* kept across execve */
		if (dup2(keep[i], SANDBOX_INFO_FD + i) < 0)
			child_fail(rep, STAGE_FDS);
	unsigned first = (unsigned)(SANDBOX_INFO_FD + p->nkeep);
	if (syscall(SYS_close_range, first, ~0U, 0U) != 0)
		for (long fd = first; fd < p->max_fd; fd++)
			close((int)fd);
	return rep;
}

/* Signal state survives execve(): reset what the worker changed.  The
 * handlers go first: every signal stays blocked (see the vfork) until
 * none of the worker's handlers can run here. */
static void child_reset_signals(void)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/*
 * A root worker's sandbox: bwrap runs as the unprivileged ids, so the
 * user namespace it makes maps the sandbox's uid 0 onto them and no
 * process of the run is ever the host's root.  Raw system calls: libc's
 * setuid() would signal the worker's other threads (its set*id
 * broadcast) from this vfork child.  Groups first, uid last.
 */
static void child_drop_ids(const struct child_plan *p, int rep)
{
	if (syscall(SYS_setgroups, 0, NULL) != 0 ||
	    syscall(SYS_setresgid, p->gid, p->gid, p->gid) != 0 ||
	    syscall(SYS_setresuid, p->uid, p->uid, p->uid) != 0)
		child_fail(rep, STAGE_IDS);
	/* A change of credentials clears the death signal. */
	child_pdeathsig(p, rep);
}

/* Runs in the forked child: async-signal-safe calls only. */
static void child_exec(const struct child_plan *p) __attribute__((noreturn));
static void child_exec(const struct child_plan *p)
{
	/*
	 * Enter the run's cgroup before anything else: everything this child
	 * becomes (bwrap, its init, the agent and all it starts) is born
	 * inside, so no fork can escape the limits.
	 */
	for (int i = 0; i < p->ncg; i++)
		if (write(p->cg_fds[i], "0", 1) != 1)
			child_fail(p->rep_w, STAGE_CGROUP);
	int rep = child_place_fds(p);
	/*
	 * Die with the worker (bwrap adds --die-with-parent for its own
	 * children).  The death signal follows the forking thread, so the
	 * caller keeps that thread alive while the sandbox runs.
	 */
	child_pdeathsig(p, rep);
	/*
	 * A new session: its own process group (so the worker can signal the
	 * whole tree with one kill) and no controlling terminal (so nothing
	 * inside can push input into the worker's terminal with TIOCSTI).
	 */
	if (setsid() < 0)
		child_fail(rep, STAGE_SESSION);
	child_reset_signals();
	/* Before the ids are dropped, while a hard limit may still be raised. */
	for (int i = 0; i < p->nrl; i++) {
		struct rlimit rl = { p->rl[i].val, p->rl[i].val };
		if (setrlimit(p->rl[i].res, &rl) != 0)
			child_fail(rep, STAGE_RLIMIT);
	}
	if (p->drop_ids)
		child_drop_ids(p, rep);
	if (p->chdir_to && chdir(p->chdir_to) != 0)
		child_fail(rep, STAGE_CHDIR);
	if (p->no_new_privs)
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);

	execve(p->exec_path, p->argv, p->envp);
	child_fail(rep, STAGE_EXEC);
}

static void add_rlimit(struct child_plan *p, int res, long val, long mult)
{
	if (val <= 0)
		return;
	rlim_t v = (rlim_t)val;
	if (mult > 1) {
		if (v > RLIM_INFINITY / (rlim_t)mult)
			v = RLIM_INFINITY;
		else
			v *= (rlim_t)mult;
	}
	p->rl[p->nrl].res = res;
	p->rl[p->nrl].val = v;
	p->nrl++;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* ------------------------------------------------------------------------
 * The launch message (runnel-warm-init reads it; see worker/warm_init.c)
 * ------------------------------------------------------------------------ */

/* A growable message buffer with a cap; wiped whenever it moves. */
typedef struct msg {
	unsigned char *p;
	size_t len, cap;
	int bad;
} msg_t;

static void msg_put(msg_t *m, const void *data, size_t n)
{
	if (m->bad)
		return;
	if (m->len + n > m->cap) {
		size_t nc = m->cap ? m->cap : 4096;
		while (nc < m->len + n)
			nc *= 2;
		unsigned char *np = malloc(nc);
		if (!np) {
			m->bad = 1;
			return;
		}
		if (m->p) {
			memcpy(np, m->p, m->len);
			explicit_bzero(m->p, m->cap);
			free(m->p);
		}
		m->p = np;
		m->cap = nc;
	}
	memcpy(m->p + m->len, data, n);
	m->len += n;
}

static void msg_u32(msg_t *m, size_t v)
{
	if (v > UINT32_MAX) {
		m->bad = 1;
		return;
	}
	unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
		               (unsigned char)(v >> 24) };
	msg_put(m, b, 4);
}

static void msg_str(msg_t *m, const char *s, size_t n)
{
	msg_u32(m, n);
	msg_put(m, s, n);
}

/* Reads the host's setup script (small: /env's answer is capped).  It
 * carries secrets: no copy is left behind in freed memory. */
static char *read_setup(const char *path, size_t *len, char *errstr, size_t errstr_size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char *buf = fd >= 0 ? rn_read_alloc(fd, LAUNCH_SETUP_MAX, len, RN_IO_WIPE) : NULL;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (!buf && e == EFBIG)
		snprintf(errstr, errstr_size, "the setup script is larger than %u bytes", LAUNCH_SETUP_MAX);
	else if (!buf)
		snprintf(errstr, errstr_size, "cannot read the setup script: %s", strerror(e));
	return buf;
}

/* "RNW1" argc {argv} envc {envp} setup: see worker/warm_init.c. */
static int build_launch(const worker_sandbox_spec_t *spec, msg_t *m, char *errstr, size_t errstr_size)
{
	char *setup = NULL;
	size_t setup_len = 0;
	if (spec->setup_script) {
		setup = read_setup(spec->setup_script, &setup_len, errstr, errstr_size);
		if (!setup)
			return -1;
	}
	strv_t egress_env = { 0 };
	char *const *envp = spec->envp;
	if (has_egress(spec)) {
		build_egress_env(spec->envp, &egress_env);
		envp = egress_env.v;
		if (egress_env.oom)
			m->bad = 1;
	}
	msg_put(m, "RNW1", 4);
	size_t argc = 0;
	while (spec->argv[argc])
		argc++;
	/* The setup wrapper: its script is written inside by the init. */
	msg_u32(m, argc + (setup ? 4 : 0));
	if (setup) {
		msg_str(m, "/bin/sh", 7);
		msg_str(m, "-c", 2);
		msg_str(m, SETUP_WRAPPER, strlen(SETUP_WRAPPER));
		msg_str(m, SANDBOX_SETUP, strlen(SANDBOX_SETUP));
	}
	for (size_t i = 0; i < argc; i++)
		msg_str(m, spec->argv[i], strlen(spec->argv[i]));
	size_t envc = 0;
	while (envp && envp[envc])
		envc++;
	msg_u32(m, envc);
	for (size_t i = 0; i < envc; i++)
		msg_str(m, envp[i], strlen(envp[i]));
	msg_str(m, setup ? setup : "", setup_len);
	if (setup) {
		explicit_bzero(setup, setup_len);
		free(setup);
	}
	for (size_t i = 0; i < egress_env.n; i++)
		explicit_bzero(egress_env.v[i], strlen(egress_env.v[i]));
	rn_strv_free(&egress_env);
	if (m->bad) {
		snprintf(errstr, errstr_size, "sandbox: out of memory building the launch message");
		return -1;
	}
	return 0;
}

int worker_sandbox_hand_over(const worker_sandbox_spec_t *spec, char *errstr, size_t errstr_size)
{
	uid_t uid;
	gid_t gid;
	if (worker_sandbox_ids(spec, &uid, &gid) &&
	    ((spec->workspace_dir && hand_over(spec->workspace_dir, uid, gid) != 0) ||
	     (spec->skills_dir && hand_over(spec->skills_dir, uid, gid) != 0))) {
		snprintf(errstr, errstr_size, "sandbox: cannot hand the workspace to uid %ld: %s", (long)uid,
		         strerror(errno));
		return -1;
	}
	return 0;
}

int worker_sandbox_launch(worker_sandbox_t *sb, const worker_sandbox_spec_t *spec,
                          char *errstr, size_t errstr_size)
{
	if (!spec->argv || !spec->argv[0]) {
		snprintf(errstr, errstr_size, "sandbox: no agent command");
		return -1;
	}
	/* The workspace (and skills) belong to the sandbox's ids before
	 * anything of the run runs: the init waits for this message. */
	if (worker_sandbox_hand_over(spec, errstr, errstr_size) < 0)
		return -1;
	msg_t m = { 0 };
	int rc = build_launch(spec, &m, errstr, errstr_size);
	if (rc == 0) {
		/* Blocking write: the init reads it all before anything else. */
		size_t off = 0;
		while (off < m.len) {
			ssize_t n = write(sb->stdin_fd, m.p + off, m.len - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			off += (size_t)n;
		}
		if (off != m.len) {
			snprintf(errstr, errstr_size, "the sandbox is gone");
			rc = -1;
		}
	}
	if (m.p) {
		explicit_bzero(m.p, m.cap);
		free(m.p);
	}
	return rc;
}

/* ------------------------------------------------------------------------
 * Starting: spawn() chains the steps below in a fixed order.  Everything
 * the child needs is computed first (the worker is multi-threaded: the
 * child may only make async-signal-safe calls), then the child is forked
 * and its exec checked.
 * ------------------------------------------------------------------------ */

/* bwrap's own environment: empty, nothing of the run's (the loader of a
 * host process reads it); the init's path is absolute. */
static char *const empty_env[] = { NULL };

/* What one start holds until the child has exec'd; start_release frees
 * whatever is still ours, on success and on failure alike. */
struct start {
	char exec_path[PATH_MAX];
	strv_t args;       /* the child's argv */
	char *const *envp; /* the child's environment */
	fdmap_t fds;       /* bwrap's fds: the info pipe, seccomp, --args */
	struct child_plan plan;
	int in[2], out[2], err[2], rep[2];
	int info[2]; /* bwrap's --info-fd pipe; [0] goes to the handle */
};

static void sandbox_clear(worker_sandbox_t *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->pid = -1;
	sb->stdin_fd = sb->stdout_fd = sb->stderr_fd = sb->info_fd = -1;
}

static void start_init(struct start *s, const worker_sandbox_spec_t *spec)
{
	memset(s, 0, sizeof(*s));
	s->envp = spec->envp ? spec->envp : empty_env;
	for (int i = 0; i < 2; i++)
		s->in[i] = s->out[i] = s->err[i] = s->rep[i] = s->info[i] = -1;
}

static void start_release(struct start *s)
{
	rn_strv_free(&s->args);
	fdmap_free(&s->fds);
	for (int i = 0; i < 2; i++) {
		close_fd(&s->in[i]);
		close_fd(&s->out[i]);
		close_fd(&s->err[i]);
		close_fd(&s->rep[i]);
		close_fd(&s->info[i]);
	}
}

static int check_spec(const worker_sandbox_spec_t *spec, char *errstr, size_t errstr_size)
{
	/* A bwrap sandbox may start before its run (warm): its argv comes
	 * later, with worker_sandbox_launch. */
	if (spec->driver == WORKER_SANDBOX_PROCESS && (!spec->argv || !spec->argv[0])) {
		snprintf(errstr, errstr_size, "sandbox: no agent command");
		return -1;
	}
	if (!spec->workspace_dir) {
		snprintf(errstr, errstr_size, "sandbox: no workspace directory");
		return -1;
	}
	return 0;
}

/*
 * bwrap's fds, in the order the child places them from SANDBOX_INFO_FD
 * up: the info pipe's write end, the seccomp program, then the options
 * themselves in a memfd (build_bwrap_opts says why not the command line).
 * num gets the --args fd's number in the child.
 */
static int pass_bwrap_opts(const worker_sandbox_spec_t *spec, struct start *s, char num[16],
                           char *errstr, size_t errstr_size)
{
	if (pipe2(s->info, O_CLOEXEC) != 0) {
		snprintf(errstr, errstr_size, "sandbox: pipe: %s", strerror(errno));
		return -1;
	}
	fdmap_add(&s->fds, s->info[1], num); /* SANDBOX_INFO_FD: the map's first */
	s->info[1] = -1;
	strv_t opts = { 0 };
	int rc = build_bwrap_opts(spec, &s->fds, &opts, errstr, errstr_size);
	if (rc == 0 && opts.oom) {
		snprintf(errstr, errstr_size, "sandbox: out of memory building the command line");
		rc = -1;
	}
	if (rc == 0 && fdmap_add(&s->fds, opts_fd(&opts), num) != 0) {
		snprintf(errstr, errstr_size, "sandbox: cannot pass bwrap its options: %s", strerror(errno));
		rc = -1;
	}
	rn_strv_free(&opts);
	return rc;
}

/*
 * The bwrap driver: bwrap's command line names only its --args fd, the
 * egress bridge when there is one, and the init; the init receives the
 * rest over stdin (worker_sandbox_launch).  No NO_NEW_PRIVS here: a
 * setuid bwrap must keep working.
 */
static int plan_bwrap(const worker_sandbox_spec_t *spec, struct start *s, char *errstr,
                      size_t errstr_size)
{
	if (!spec->init_path) {
		snprintf(errstr, errstr_size, "sandbox: no runnel-warm-init for the sandbox");
		return -1;
	}
	const char *bw = spec->bwrap_path ? spec->bwrap_path : "bwrap";
	if (resolve_exec(bw, getenv("PATH"), s->exec_path, sizeof(s->exec_path)) != 0) {
		snprintf(errstr, errstr_size, "cannot exec bwrap: %s", strerror(errno));
		return -1;
	}
	char num[16];
	if (pass_bwrap_opts(spec, s, num, errstr, errstr_size) != 0)
		return -1;
	strv_push(&s->args, s->exec_path);
	strv_push3(&s->args, "--args", num, NULL);
	strv_push(&s->args, "--");
	add_egress_argv(spec, &s->args);
	strv_push(&s->args, RN_SANDBOX_WARM_INIT);
	s->envp = empty_env;
	/* A root worker's bwrap runs as the sandbox's unprivileged ids (see
	 * child_drop_ids), so no process of the run is ever the host's root. */
	struct child_plan *p = &s->plan;
	p->drop_ids = worker_sandbox_ids(spec, &p->uid, &p->gid);
	/* The proxy's socket (0600): the sandbox's uid connects to it. */
	if (p->drop_ids && spec->egress_bridge && spec->egress_socket &&
	    lchown(spec->egress_socket, p->uid, p->gid) != 0) {
		snprintf(errstr, errstr_size, "sandbox: cannot hand the egress socket to uid %ld: %s",
		         (long)p->uid, strerror(errno));
		return -1;
	}
	return 0;
}

/* The process driver: the agent (behind the setup wrapper) as a plain
 * child, in the workspace, unable to gain privileges by exec. */
static int plan_process(const worker_sandbox_spec_t *spec, struct start *s, char *errstr,
                        size_t errstr_size)
{
	const char *name = spec->setup_script ? "/bin/sh" : spec->argv[0];
	if (resolve_exec(name, env_lookup(s->envp, "PATH"), s->exec_path, sizeof(s->exec_path)) != 0) {
		snprintf(errstr, errstr_size, "cannot exec %s: %s", name, strerror(errno));
		return -1;
	}
	add_agent_argv(spec, spec->setup_script, &s->args);
	s->plan.chdir_to = spec->workspace_dir;
	s->plan.no_new_privs = 1;
	return 0;
}

static int plan_command(const worker_sandbox_spec_t *spec, struct start *s, char *errstr,
                        size_t errstr_size)
{
	int rc;
	if (spec->driver == WORKER_SANDBOX_BWRAP) {
		rc = plan_bwrap(spec, s, errstr, errstr_size);
	} else if (spec->driver == WORKER_SANDBOX_PROCESS) {
		rc = plan_process(spec, s, errstr, errstr_size);
	} else {
		snprintf(errstr, errstr_size, "sandbox: unknown driver %d", (int)spec->driver);
		return -1;
	}
	if (rc == 0 && (s->args.oom || !s->args.v)) {
		snprintf(errstr, errstr_size, "sandbox: out of memory building the command line");
		rc = -1;
	}
	return rc;
}

/* The run's rlimits, which the child sets on itself just before execve:
 * everything it becomes and starts inherits them. */
static void plan_rlimits(const worker_sandbox_spec_t *spec, struct child_plan *p)
{
	add_rlimit(p, RLIMIT_NOFILE, spec->rlimit_nofile, 1);
	add_rlimit(p, RLIMIT_NPROC, spec->rlimit_nproc, 1);
	add_rlimit(p, RLIMIT_AS, spec->rlimit_as_mb, 1024L * 1024L);
	add_rlimit(p, RLIMIT_FSIZE, spec->rlimit_fsize_mb, 1024L * 1024L);
}

/* stdin, stdout, stderr and the exec report; the child's ends, and bwrap's
 * fds and the run's cgroup, go into the plan. */
static int plan_fds(const worker_sandbox_spec_t *spec, struct start *s, char *errstr,
                    size_t errstr_size)
{
	if (pipe2(s->in, O_CLOEXEC) != 0 || pipe2(s->out, O_CLOEXEC) != 0 ||
	    pipe2(s->err, O_CLOEXEC) != 0 || pipe2(s->rep, O_CLOEXEC) != 0) {
		snprintf(errstr, errstr_size, "sandbox: pipe: %s", strerror(errno));
		return -1;
	}
	struct child_plan *p = &s->plan;
	/* Where the child's close loop stops when close_range() is missing. */
	struct rlimit nofile;
	p->max_fd = (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
	        ? (long)nofile.rlim_cur
	        : 65536;
	if (p->max_fd > 1048576)
		p->max_fd = 1048576;
	p->exec_path = s->exec_path;
	p->argv = s->args.v;
	p->envp = s->envp;
	p->parent = getpid();
	p->in_r = s->in[0];
	p->out_w = s->out[1];
	p->err_w = s->err[1];
	p->rep_w = s->rep[1];
	p->keep = s->fds.fd;
	p->nkeep = s->fds.n;
	p->cg_fds = spec->cgroup_fds;
	p->ncg = spec->cgroup_fds ? spec->ncgroup_fds : 0;
	return 0;
}

/*
 * vfork, as posix_spawn does: the child borrows the worker's memory until
 * execve instead of copying its page tables (fork's copy and the
 * copy-on-write faults after it were most of the worker's CPU per run).
 * The child only reads the plan and writes its own stack, and never
 * returns from here.  All signals are blocked across it, so that no
 * handler of the worker runs in the child while it shares our memory.
 */
static pid_t fork_child(const struct child_plan *plan, char *errstr, size_t errstr_size)
{
	sigset_t all_sigs, old_sigs;
	sigfillset(&all_sigs);
	pthread_sigmask(SIG_SETMASK, &all_sigs, &old_sigs);
	pid_t pid = vfork();
	if (pid == 0)
		child_exec(plan);
	int fork_err = errno;
	pthread_sigmask(SIG_SETMASK, &old_sigs, NULL);
	if (pid < 0)
		snprintf(errstr, errstr_size, "sandbox: fork: %s", strerror(fork_err));
	return pid;
}

/* The child's record of why it did not reach execve, as the run's error. */
static void explain_report(const worker_sandbox_spec_t *spec, const struct start *s,
                           const struct child_report *r, char *errstr, size_t errstr_size)
{
	const char *what = spec->driver == WORKER_SANDBOX_BWRAP ? "bwrap" : spec->argv[0];
	switch (r->stage) {
	case STAGE_EXEC:
		snprintf(errstr, errstr_size, "cannot exec %s: %s", what, strerror(r->err));
		break;
	case STAGE_CHDIR:
		snprintf(errstr, errstr_size, "cannot enter the workspace: %s", strerror(r->err));
		break;
	case STAGE_RLIMIT:
		snprintf(errstr, errstr_size, "cannot set resource limits: %s", strerror(r->err));
		break;
	case STAGE_CGROUP:
		snprintf(errstr, errstr_size, "cannot enter the run's cgroup: %s", strerror(r->err));
		break;
	case STAGE_IDS:
		snprintf(errstr, errstr_size, "cannot switch to the sandbox's uid %ld: %s",
		         (long)s->plan.uid, strerror(r->err));
		break;
	default:
		snprintf(errstr, errstr_size, "cannot start the sandbox: %s", strerror(r->err));
		break;
	}
}

/*
 * Closes the child's ends and waits for its exec: EOF on the report pipe
 * means execve succeeded (the pipe is close-on-exec), a record means the
 * child failed before it and has exited, and is reaped here.
 */
static int await_exec(const worker_sandbox_spec_t *spec, struct start *s, pid_t pid,
                      char *errstr, size_t errstr_size)
{
	close_fd(&s->in[0]);
	close_fd(&s->out[1]);
	close_fd(&s->err[1]);
	close_fd(&s->rep[1]);
	fdmap_free(&s->fds); /* the info pipe's write end and the binds: bwrap's now */

	struct child_report r;
	size_t got = 0;
	while (got < sizeof(r)) {
		ssize_t n = read(s->rep[0], (char *)&r + got, sizeof(r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close_fd(&s->rep[0]);
	if (got != sizeof(r))
		return 0;
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	explain_report(spec, s, &r, errstr, errstr_size);
	return -1;
}

/* The running child's pipes move from s to the handle. */
static void hand_to_handle(struct start *s, pid_t pid, worker_sandbox_t *sb)
{
	/* Reads never block the run's loop; the write end of stdin does. */
	fcntl(s->out[0], F_SETFL, fcntl(s->out[0], F_GETFL) | O_NONBLOCK);
	fcntl(s->err[0], F_SETFL, fcntl(s->err[0], F_GETFL) | O_NONBLOCK);
	sb->pid = pid;
	sb->stdin_fd = s->in[1];
	sb->stdout_fd = s->out[0];
	sb->stderr_fd = s->err[0];
	sb->info_fd = s->info[0];
	s->in[1] = s->out[0] = s->err[0] = s->info[0] = -1;
}

/*
 * One start, in order: the command (bwrap's or the agent's), the limits
 * and fds the child applies to itself, the fork, the exec's report, the
 * handle.  Each step is 0, or -1 with errstr; start_release then closes
 * whatever the handle did not take.
 */
static int spawn(const worker_sandbox_spec_t *spec, worker_sandbox_t *sb, char *errstr,
                 size_t errstr_size)
{
	sandbox_clear(sb);
	sb->driver = spec->driver;
	if (check_spec(spec, errstr, errstr_size) != 0)
		return -1;

	struct start s;
	start_init(&s, spec);
	pid_t pid = -1;
	int rc = plan_command(spec, &s, errstr, errstr_size);
	if (rc == 0) {
		plan_rlimits(spec, &s.plan);
		rc = plan_fds(spec, &s, errstr, errstr_size);
	}
	if (rc == 0 && (pid = fork_child(&s.plan, errstr, errstr_size)) < 0)
		rc = -1;
	if (rc == 0)
		rc = await_exec(spec, &s, pid, errstr, errstr_size);
	if (rc == 0)
		hand_to_handle(&s, pid, sb);
	start_release(&s);
	return rc;
}

int worker_sandbox_start(const worker_sandbox_spec_t *spec, worker_sandbox_t *sb,
                         char *errstr, size_t errstr_size)
{
	if (spec->driver != WORKER_SANDBOX_BWRAP) {
		snprintf(errstr, errstr_size, "sandbox: only bwrap sandboxes start before their run");
		return -1;
	}
	return spawn(spec, sb, errstr, errstr_size);
}

int worker_sandbox_spawn(const worker_sandbox_spec_t *spec, worker_sandbox_t *sb,
                         char *errstr, size_t errstr_size)
{
	if (!spec->argv || !spec->argv[0]) {
		sandbox_clear(sb);
		snprintf(errstr, errstr_size, "sandbox: no agent command");
		return -1;
	}
	if (spawn(spec, sb, errstr, errstr_size) != 0)
		return -1;
	if (spec->driver != WORKER_SANDBOX_BWRAP)
		return 0;
	char err[256];
	if (worker_sandbox_launch(sb, spec, err, sizeof(err)) == 0)
		return 0;
	/*
	 * bwrap ended before its init read the message (a bind it refused,
	 * say): its exit status and stderr tell the run why, as before the
	 * init existed.  Any other failure ends the sandbox here.
	 */
	if (!strcmp(err, "the sandbox is gone"))
		return 0;
	worker_sandbox_destroy(sb);
	snprintf(errstr, errstr_size, "%s", err);
	return -1;
}

/* The start of a small /proc or /sys file as a string (one read); 0, or
 * -1 when it cannot be read or is empty. */
static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/*
 * bwrap's outer process exits as soon as the sandbox's init (pid 1 of the
 * run's pid namespace, bwrap too) reports the agent's exit status, before
 * that init has exited itself.  The init is orphaned: the kernel hands it
 * to the nearest child subreaper, or to pid 1 of the worker's namespace,
 * and makes it a child of that process's first live thread.  A worker that
 * is either (a container's pid 1, or worker_sandbox_adopt_orphans()) must
 * reap these, or every run leaves a zombie behind.  Only zombies that live
 * in a nested pid namespace are taken: the worker never starts a process
 * of its own in one, so no status another thread waits for is stolen.
 */
static int orphan_zombie(pid_t pid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return 0;
	const char *st = strstr(buf, "\nState:\t");
	const char *ns = strstr(buf, "\nNSpid:\t");
	if (!st || st[8] != 'Z' || !ns)
		return 0;
	/* "NSpid:\t310\t1": one id per namespace level, ours first. */
	const char *end = strchr(ns + 8, '\n');
	const char *tab = strchr(ns + 8, '\t');
	return tab && (!end || tab < end);
}

void worker_sandbox_reap_orphans(void)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
	if (read_small(path, buf, sizeof(buf)) < 0)
		return; /* none (or a kernel without CONFIG_PROC_CHILDREN) */
	char *save = NULL;
	for (char *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		pid_t pid = (pid_t)strtol(tok, NULL, 10);
		if (pid > 0 && orphan_zombie(pid))
			waitpid(pid, NULL, WNOHANG);
	}
}

int worker_sandbox_adopt_orphans(void)
{
	return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ? 0 : -1;
}

/* Process group of pid as the host sees it, or -1. */
static pid_t proc_pgid(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return -1;
	/* pid (comm) state ppid pgrp ...; comm may hold spaces and ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	char state;
	int ppid, pgrp;
	if (sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) != 3)
		return -1;
	return (pid_t)pgrp;
}

/*
 * Sends sig to every member of the group except the leader.  Used for
 * signals other than SIGKILL under bwrap: bwrap itself dies on SIGTERM and
 * takes the pid namespace with it at once, which would turn a polite
 * SIGTERM into SIGKILL with no grace for the agent.
 */
static int signal_members(pid_t pgid, int sig)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		if (*end || v <= 0 || v > INT_MAX || (pid_t)v == pgid)
			continue;
		if (proc_pgid((pid_t)v) == pgid)
			kill((pid_t)v, sig);
	}
	closedir(d);
	return 0;
}

void worker_sandbox_kill(worker_sandbox_t *sb, int sig)
{
	/* Once reaped, the id may belong to someone else. */
	if (sb->pid <= 0 || sb->exited)
		return;
	if (sig == SIGKILL) {
		/* bwrap's death kills its pid namespace; the group catches the rest. */
		kill(-sb->pid, SIGKILL);
		kill(sb->pid, SIGKILL);
		return;
	}
	/* Under the process driver the leader is the agent (or its setup
	 * wrapper): it gets the signal too. */
	if (sb->driver == WORKER_SANDBOX_PROCESS) {
		kill(-sb->pid, sig);
		return;
	}
	/* Process groups span pid namespaces, so this reaches the agent. */
	if (signal_members(sb->pid, sig) != 0)
		kill(-sb->pid, sig);
}

int worker_sandbox_reap(worker_sandbox_t *sb)
{
	if (sb->exited)
		return 1;
	if (sb->pid <= 0)
		return -1;
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	/*
	 * Peek first: while the leader is an unreaped zombie its id cannot be
	 * reused, so killing what is left of its group is safe.  Nothing the
	 * agent started survives it (a daemonised child under the process
	 * driver would otherwise outlive the run).
	 */
	for (;;) {
		if (waitid(P_PID, (id_t)sb->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
			break;
		if (errno != EINTR)
			return -1;
	}
	if (si.si_pid == 0)
		return 0;
	kill(-sb->pid, SIGKILL);
	int status;
	for (;;) {
		if (waitpid(sb->pid, &status, 0) >= 0)
			break;
		if (errno != EINTR)
			return -1;
	}
	sb->status = status;
	sb->exited = 1;
	worker_sandbox_reap_orphans();
	return 1;
}

int worker_sandbox_wait_cloned(worker_sandbox_t *sb, int timeout_ms)
{
	if (sb->info_fd < 0)
		return 0;
	/* bwrap writes {"child-pid": N, ...} after the clone that made the
	 * namespaces, then closes the pipe: data then EOF.  EOF alone: it
	 * ended before. */
	int64_t deadline = rn_mono_ms() + timeout_ms;
	size_t got = 0;
	for (;;) {
		int64_t left = deadline - rn_mono_ms();
		struct pollfd pfd = { sb->info_fd, POLLIN, 0 };
		int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return 0; /* not yet: the caller goes on without it */
		char buf[256];
		ssize_t n = read(sb->info_fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		close_fd(&sb->info_fd);
		return got > 0;
	}
}

void worker_sandbox_destroy(worker_sandbox_t *sb)
{
	close_fd(&sb->stdin_fd);
	close_fd(&sb->stdout_fd);
	close_fd(&sb->stderr_fd);
	close_fd(&sb->info_fd);
	if (sb->pid <= 0 || sb->exited)
		return;
	worker_sandbox_kill(sb, SIGKILL);
	int status;
	for (;;) {
		if (waitpid(sb->pid, &status, 0) >= 0) {
			sb->status = status;
			worker_sandbox_reap_orphans();
			break;
		}
		if (errno != EINTR)
			break;
	}
	sb->exited = 1;
}

/* Reads a small integer sysctl; -1 when absent. */
static long read_sysctl(const char *path)
{
	char buf[32];
	if (read_small(path, buf, sizeof(buf)) < 0)
		return -1;
	char *end;
	long v = strtol(buf, &end, 10);
	return end == buf ? -1 : v;
}

static int capture_wait(pid_t pid, int fd, char *out, size_t outsz);

/* fork()ed child of run_capture: async-signal-safe calls only. */
static void capture_child(char *const *argv, int out_w, const uid_t *uid, const gid_t *gid)
{
	static char *const empty_env[] = { NULL };
	int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (nul < 0 || dup2(nul, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0 || setsid() < 0)
		_exit(127);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (uid && (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, *gid, *gid, *gid) != 0 || syscall(SYS_setresuid, *uid, *uid, *uid) != 0))
		_exit(126);
	execve(argv[0], argv, empty_env);
	_exit(127);
}

/*
 * Runs argv with an empty environment, stdin /dev/null, stdout and stderr
 * captured (first bytes kept), as uid/gid when given (the ids a root
 * worker's sandboxes run as).  Returns the wait status, or -1.
 */
static int run_capture(char *const *argv, const uid_t *uid, const gid_t *gid, char *out, size_t outsz)
{
	if (uid) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) != 0)
			return -1;
		pid_t pid = fork();
		if (pid == 0)
			capture_child(argv, p[1], uid, gid);
		close(p[1]);
		if (pid < 0) {
			close(p[0]);
			return -1;
		}
		return capture_wait(pid, p[0], out, outsz);
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawnattr_t at;
	posix_spawnattr_init(&at);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
	static char *const empty_env[] = { NULL };
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, &at, argv, empty_env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		errno = rc;
		return -1;
	}
	return capture_wait(pid, p[0], out, outsz);
}

/* Reads the child's output from fd (closed) until EOF or the probe's
 * deadline, then reaps it.  The wait status, or -1. */
static int capture_wait(pid_t pid, int fd, char *out, size_t outsz)
{
	int p[2] = { fd, -1 };
	size_t got = 0;
	int64_t deadline = rn_mono_ms() + PROBE_TIMEOUT_MS;
	for (;;) {
		int64_t left = deadline - rn_mono_ms();
		if (left <= 0) {
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			break;
		}
		struct pollfd pfd = { p[0], POLLIN, 0 };
		int pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue;
		char tmp[512];
		ssize_t n = read(p[0], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (got + 1 < outsz) {
			size_t take = (size_t)n < outsz - 1 - got ? (size_t)n : outsz - 1 - got;
			memcpy(out + got, tmp, take);
			got += take;
		}
	}
	if (outsz)
		out[got] = '\0';
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

int worker_sandbox_probe(worker_sandbox_driver_t driver, const char *bwrap_path,
                         char *errstr, size_t errstr_size)
{
	worker_sandbox_spec_t ids = { .driver = driver };
	return worker_sandbox_probe_as(driver, bwrap_path, &ids, errstr, errstr_size);
}

int worker_sandbox_probe_as(worker_sandbox_driver_t driver, const char *bwrap_path,
                            const worker_sandbox_spec_t *ids_of, char *errstr, size_t errstr_size)
{
	if (driver == WORKER_SANDBOX_PROCESS)
		return 0;
	if (driver != WORKER_SANDBOX_BWRAP) {
		snprintf(errstr, errstr_size, "sandbox: unknown driver %d", (int)driver);
		return -1;
	}
	char path[PATH_MAX];
	if (resolve_exec(bwrap_path ? bwrap_path : "bwrap", getenv("PATH"), path, sizeof(path)) != 0 ||
	    access(path, X_OK) != 0) {
		snprintf(errstr, errstr_size, "cannot exec bwrap: %s", strerror(errno));
		return -1;
	}
	char true_path[PATH_MAX];
	if (resolve_exec("true", DEFAULT_PATH, true_path, sizeof(true_path)) != 0)
		snprintf(true_path, sizeof(true_path), "/bin/true");
	char *const argv[] = {
		path,
		"--unshare-user",
		"--unshare-pid",
		"--die-with-parent",
		"--ro-bind",
		"/",
		"/",
		"--proc",
		"/proc",
		"--dev",
		"/dev",
		"--",
		true_path,
		NULL,
	};
	/* As the sandboxes will run: a root worker's as the unprivileged ids,
	 * which need user namespaces that root's bwrap would not. */
	uid_t uid;
	gid_t gid;
	int drop = worker_sandbox_ids(ids_of, &uid, &gid);
	char out[512];
	int status = run_capture(argv, drop ? &uid : NULL, drop ? &gid : NULL, out, sizeof(out));
	worker_sandbox_reap_orphans();
	if (status < 0) {
		snprintf(errstr, errstr_size, "cannot exec bwrap: %s", strerror(errno));
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;

	if (read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == 0) {
		snprintf(errstr, errstr_size, "unprivileged user namespaces are disabled "
		                              "(kernel.unprivileged_userns_clone=0)");
		return -1;
	}
	if (read_sysctl("/proc/sys/user/max_user_namespaces") == 0) {
		snprintf(errstr, errstr_size, "user namespaces are disabled (user.max_user_namespaces=0)");
		return -1;
	}
	if (read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1) {
		snprintf(errstr, errstr_size, "AppArmor restricts unprivileged user namespaces "
		                              "(kernel.apparmor_restrict_unprivileged_userns=1); allow bwrap with an "
		                              "AppArmor profile or set the sysctl to 0");
		return -1;
	}
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
	if (WIFSIGNALED(status))
		snprintf(errstr, errstr_size, "bwrap test run killed by signal %d", WTERMSIG(status));
	else
		snprintf(errstr, errstr_size, "bwrap cannot create a sandbox here (exit %d): %s",
		         WEXITSTATUS(status), out[0] ? out : "no message");
	return -1;
}
