/*
 * tests/support/harness.c - checks, the cleanup registry (children, temp
 * dirs), child processes, a real redis-server and the Redis readers.
 * The Kafka mock cluster lives in harness_kafka.c.
 */
#include "tests/support/harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "common/io.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

/* ------------------------------------------------------------------------
 * Registry.  Fixed-size static storage so that the signal handler can walk
 * it without allocating.
 * ------------------------------------------------------------------------ */

#define TH_MAX_CHILDREN 256
#define TH_MAX_DIRS     64
#define TH_TMP_PREFIX   "runnel-th-"
#define TH_KEPT_MARK    ".th-kept" /* in a dir TH_KEEP kept */

static volatile pid_t th_children[TH_MAX_CHILDREN];
static char th_dirs[TH_MAX_DIRS][PATH_MAX];
static volatile int th_ndirs;
static int th_inited;
static int th_keep;

/* th_strf's arena: freed at exit so LeakSanitizer stays quiet. */
static char **th_arena;
static size_t th_arena_n, th_arena_cap;

static void th_register_child(pid_t pid)
{
	for (int i = 0; i < TH_MAX_CHILDREN; i++) {
		if (th_children[i] == 0) {
			th_children[i] = pid;
			return;
		}
	}
	fprintf(stderr, "# harness: child registry full; pid %d not tracked\n", (int)pid);
}

static void th_unregister_child(pid_t pid)
{
	for (int i = 0; i < TH_MAX_CHILDREN; i++)
		if (th_children[i] == pid)
			th_children[i] = 0;
}

static int th_is_registered(pid_t pid)
{
	for (int i = 0; i < TH_MAX_CHILDREN; i++)
		if (th_children[i] == pid)
			return 1;
	return 0;
}

/* Async-signal-safe: kill only. */
static void th_kill_children_now(void)
{
	for (int i = 0; i < TH_MAX_CHILDREN; i++) {
		pid_t p = th_children[i];
		if (p > 0) {
			kill(-p, SIGKILL);
			kill(p, SIGKILL);
		}
	}
}

int th_proc_each(int (*fn)(const th_proc_t *p, void *arg), void *arg)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		/* "pid (comm) state ppid pgrp ..."; comm may contain spaces and ')'. */
		char *rp = strrchr(buf, ')');
		th_proc_t p = { .pid = (pid_t)pid };
		long ppid, pgrp;
		if (!rp || sscanf(rp + 1, " %c %ld %ld", &p.state, &ppid, &pgrp) != 3)
			continue;
		p.ppid = (pid_t)ppid;
		p.pgrp = (pid_t)pgrp;
		if (fn(&p, arg))
			break;
	}
	closedir(d);
	return 0;
}

struct th_zombies {
	pid_t parent;
	int n;
};

static int th_zombie_of(const th_proc_t *p, void *arg)
{
	struct th_zombies *z = arg;
	if (p->ppid == z->parent && p->state == 'Z')
		z->n++;
	return 0;
}

int th_zombies_of(pid_t parent)
{
	struct th_zombies z = { parent, 0 };
	return th_proc_each(th_zombie_of, &z) == 0 ? z.n : -1;
}

static int th_kill_orphan(const th_proc_t *p, void *arg)
{
	if (p->ppid == *(pid_t *)arg) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	return 0;
}

/*
 * Orphans: the test is a child subreaper, so grandchildren whose parent
 * died (a worker's sandbox after the worker was killed) are reparented to
 * us.  Find them by their parent pid and kill them too.
 */
static void th_kill_orphans(void)
{
	pid_t self = getpid();
	th_proc_each(th_kill_orphan, &self);
}

static int th_rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void th_rm_rf(const char *dir)
{
	nftw(dir, th_rm_cb, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static void th_cleanup_atexit(void)
{
	th_kill_children_now();
	for (int i = 0; i < TH_MAX_CHILDREN; i++) {
		pid_t p = th_children[i];
		if (p > 0) {
			waitpid(p, NULL, 0);
			th_children[i] = 0;
		}
	}
	th_kill_orphans();
	if (!th_keep) {
		for (int i = 0; i < th_ndirs; i++)
			if (th_dirs[i][0])
				th_rm_rf(th_dirs[i]);
	} else if (th_ndirs > 0) {
		/* The mark keeps them from the sweep of tests that start later. */
		for (int i = 0; i < th_ndirs; i++) {
			char mark[PATH_MAX];
			int fd = -1;
			if (th_dirs[i][0] && (size_t)snprintf(mark, sizeof(mark), "%s/" TH_KEPT_MARK, th_dirs[i]) < sizeof(mark))
				fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			if (fd >= 0)
				close(fd);
		}
		fprintf(stderr, "# TH_KEEP=1: kept %s (and %d more)\n", th_dirs[0], th_ndirs - 1);
	}
	th_ndirs = 0;
	for (size_t i = 0; i < th_arena_n; i++)
		free(th_arena[i]);
	free(th_arena);
	th_arena = NULL;
	th_arena_n = th_arena_cap = 0;
}

/* The handlers we replaced (AddressSanitizer's SIGSEGV report, say): ours
 * cleans up, then hands the signal on to them. */
static const int th_sigs[] = { SIGINT, SIGTERM, SIGABRT, SIGSEGV, SIGHUP };
#define TH_NSIGS (sizeof(th_sigs) / sizeof(th_sigs[0]))
static struct sigaction th_old_sa[TH_NSIGS];

/*
 * On a fatal signal: kill the children, remove the temp dirs with an
 * exec'd rm (fork, execve and waitpid are async-signal-safe; nftw is
 * not), then let the previous handler (or the default action) have it.
 */
static void th_fatal_signal(int sig)
{
	int saved_errno = errno;
	th_kill_children_now();
	if (!th_keep && th_ndirs > 0) {
		pid_t p = fork();
		if (p == 0) {
			char *argv[TH_MAX_DIRS + 4];
			int a = 0;
			argv[a++] = (char *)"rm";
			argv[a++] = (char *)"-rf";
			argv[a++] = (char *)"--";
			for (int i = 0; i < th_ndirs && a < TH_MAX_DIRS + 3; i++)
				if (th_dirs[i][0])
					argv[a++] = th_dirs[i];
			argv[a] = NULL;
			char *envp[] = { NULL };
			execve("/bin/rm", argv, envp);
			_exit(127);
		}
		if (p > 0)
			waitpid(p, NULL, 0);
	}
	th_ndirs = 0;
	for (size_t i = 0; i < TH_NSIGS; i++) {
		if (th_sigs[i] != sig)
			continue;
		sigaction(sig, &th_old_sa[i], NULL);
		/* A fault re-triggers by itself when we return, now with the
		 * previous handler and its real siginfo; others are re-raised. */
		if (sig != SIGSEGV)
			raise(sig);
		errno = saved_errno;
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Dirs of earlier tests that were SIGKILLed (ctest timeout): remove them
 * once their owner is gone, unless it kept them (TH_KEEP). */
static void th_sweep_stale(const char *base)
{
	DIR *d = opendir(base);
	if (!d)
		return;
	struct dirent *de;
	size_t plen = strlen(TH_TMP_PREFIX);
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, TH_TMP_PREFIX, plen) != 0)
			continue;
		char *end;
		long p = strtol(de->d_name + plen, &end, 10);
		if (p <= 0 || *end != '-')
			continue;
		if (kill((pid_t)p, 0) == 0 || errno != ESRCH)
			continue;
		char path[PATH_MAX], mark[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", base, de->d_name) >= sizeof(path) ||
		    (size_t)snprintf(mark, sizeof(mark), "%s/" TH_KEPT_MARK, path) >= sizeof(mark) ||
		    access(mark, F_OK) == 0)
			continue;
		th_rm_rf(path);
	}
	closedir(d);
}

static const char *th_tmp_base(void)
{
	const char *t = getenv("TMPDIR");
	return (t && *t) ? t : "/tmp";
}

void th_init(const char *test_name)
{
	if (test_name && *test_name)
		th_check_name(test_name);
	if (th_inited)
		return;
	th_inited = 1;
	const char *k = getenv("TH_KEEP");
	th_keep = k && *k && strcmp(k, "0") != 0;
	atexit(th_cleanup_atexit);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = th_fatal_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < TH_NSIGS; i++)
		sigaction(th_sigs[i], &sa, &th_old_sa[i]);
	/* A server killed by the test must not kill the test through a
	 * write on its socket. */
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	th_sweep_stale(th_tmp_base());
}

__attribute__((constructor)) static void th_auto_init(void)
{
	th_init(NULL);
}

/* ------------------------------------------------------------------------
 * Temp dirs, ports, files, strings
 * ------------------------------------------------------------------------ */

const char *th_tmpdir(void)
{
	if (th_ndirs >= TH_MAX_DIRS) {
		fprintf(stderr, "# harness: too many temp dirs\n");
		return NULL;
	}
	char tmpl[PATH_MAX];
	int n = snprintf(tmpl, sizeof(tmpl), "%s/" TH_TMP_PREFIX "%d-XXXXXX", th_tmp_base(), (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(tmpl))
		return NULL;
	if (!mkdtemp(tmpl)) {
		fprintf(stderr, "# harness: mkdtemp %s: %s\n", tmpl, strerror(errno));
		return NULL;
	}
	/* Searchable (not listable) by the unprivileged uid a root worker's
	 * sandboxes run as: bwrap binds run directories from below it. */
	chmod(tmpl, 0711);
	char *slot = th_dirs[th_ndirs];
	memcpy(slot, tmpl, (size_t)n + 1);
	th_ndirs = th_ndirs + 1;
	return slot;
}

int th_dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int th_port_open(int port)
{
	int fd = th_dial(port);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

int th_send_all(int fd, const void *p, size_t n)
{
	return rn_write_all(fd, p, n, RN_IO_SOCKET);
}

int th_port_open_cond(void *arg)
{
	return th_port_open(*(int *)arg);
}

int th_listen_loopback(int backlog, int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = 0;
	socklen_t len = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, backlog) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

int th_free_port(void)
{
	int port;
	int fd = th_listen_loopback(1, &port);
	if (fd < 0)
		return -1;
	close(fd);
	return port;
}

static void th_arena_push(char *s)
{
	if (th_arena_n == th_arena_cap) {
		size_t cap = th_arena_cap ? th_arena_cap * 2 : 64;
		char **n = realloc(th_arena, cap * sizeof(*n));
		if (!n) {
			fprintf(stderr, "# harness: out of memory\n");
			th_abort_test();
		}
		th_arena = n;
		th_arena_cap = cap;
	}
	th_arena[th_arena_n++] = s;
}

char *th_strf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0 || !s) {
		fprintf(stderr, "# harness: out of memory\n");
		th_abort_test();
	}
	th_arena_push(s);
	return s;
}

#define TH_FILE_MAX ((size_t)256 << 20)

char *th_file_read(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = rn_read_alloc(fd, TH_FILE_MAX, len, 0);
	close(fd);
	return buf;
}

int th_file_write(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	const char *p = data;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return close(fd);
}

int th_file_contains(const char *path, const char *needle)
{
	size_t len;
	char *s = th_file_read(path, &len);
	if (!s)
		return 0;
	int hit = !!memmem(s, len, needle, strlen(needle));
	free(s);
	return hit;
}

/* nftw has no user pointer: the needle of the walk in progress. */
static const void *th_walk_needle;
static size_t th_walk_needle_len;

static int th_contains_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag != FTW_F || !S_ISREG(st->st_mode))
		return 0;
	size_t len;
	char *s = th_file_read(path, &len);
	if (!s)
		return 0;
	int hit = !!memmem(s, len, th_walk_needle, th_walk_needle_len);
	free(s);
	if (hit) {
		fprintf(stderr, "# found in file %s\n", path);
		return 1;
	}
	return 0;
}

int th_count_files(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int th_dir_contains(const char *dir, const void *needle, size_t needle_len)
{
	if (needle_len == 0)
		return 1;
	th_walk_needle = needle;
	th_walk_needle_len = needle_len;
	return nftw(dir, th_contains_cb, 16, FTW_PHYS) == 1;
}

char *th_memdup0(const void *p, size_t len)
{
	char *s = malloc(len + 1);
	if (!s)
		return NULL;
	if (len)
		memcpy(s, p, len);
	s[len] = 0;
	return s;
}

void th_strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ------------------------------------------------------------------------
 * Waiting
 * ------------------------------------------------------------------------ */

int64_t th_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void th_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int th_wait_until(int (*cond)(void *), void *arg, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int step = 1;
	for (;;) {
		if (cond(arg))
			return 1;
		int64_t left = deadline - th_now_ms();
		if (left <= 0)
			return cond(arg) ? 1 : 0;
		th_sleep_ms(step < left ? step : (int)left);
		step = step * 2 > 50 ? 50 : step * 2;
	}
}

/* ------------------------------------------------------------------------
 * Processes
 * ------------------------------------------------------------------------ */

static int th_env_has_name(char **env, size_t n, const char *kv)
{
	const char *eq = strchr(kv, '=');
	size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], kv, klen) == 0 && env[i][klen] == '=')
			return (int)i;
	return -1;
}

char **th_env_new(const char *const extra_env[])
{
	static const char *const pass[] = { "PATH", "HOME", "TMPDIR", "ASAN_OPTIONS",
		                            "UBSAN_OPTIONS", "LSAN_OPTIONS", NULL };
	size_t nextra = 0;
	while (extra_env && extra_env[nextra])
		nextra++;
	size_t n = 0;
	char **envp = calloc(8 + nextra + 1, sizeof(*envp));
	if (!envp)
		return NULL;
	for (int i = 0; pass[i]; i++) {
		const char *v = getenv(pass[i]);
		if (!v && strcmp(pass[i], "PATH") == 0)
			v = "/usr/local/bin:/usr/bin:/bin";
		if (!v)
			continue;
		if (asprintf(&envp[n], "%s=%s", pass[i], v) < 0)
			goto fail;
		n++;
	}
	if (!(envp[n++] = strdup("LANG=C.UTF-8")))
		goto fail;
	for (size_t i = 0; i < nextra; i++) {
		char *kv = strdup(extra_env[i]);
		if (!kv)
			goto fail;
		int at = th_env_has_name(envp, n, kv);
		if (at >= 0) {
			free(envp[at]);
			envp[at] = kv;
		} else {
			envp[n++] = kv;
		}
	}
	envp[n] = NULL;
	return envp;
fail:
	th_env_free(envp);
	return NULL;
}

void th_env_free(char **envp)
{
	for (size_t i = 0; envp && envp[i]; i++)
		free(envp[i]);
	free(envp);
}

pid_t th_spawn(char *const argv[], const char *const extra_env[], const char *log_path)
{
	th_spawn_opts_t o = TH_SPAWN_OPTS_INIT;
	o.log_path = log_path;
	return th_spawn_opts(argv, extra_env, &o);
}

pid_t th_spawn_opts(char *const argv[], const char *const extra_env[], const th_spawn_opts_t *o)
{
	char **envp = th_env_new(extra_env);
	if (!envp)
		return -1;
	int logfd = -1;
	if (o->log_path) {
		logfd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (logfd < 0) {
			fprintf(stderr, "# spawn %s: open log %s: %s\n", argv[0], o->log_path, strerror(errno));
			th_env_free(envp);
			return -1;
		}
	}
	int fd_in = o->stdin_fd;
	int fd_out = o->stdout_fd >= 0 ? o->stdout_fd : logfd;
	int fd_err = o->stderr_fd >= 0 ? o->stderr_fd : logfd;
	int errpipe[2] = { -1, -1 };
	pid_t pid = -1;
	if (pipe2(errpipe, O_CLOEXEC) < 0)
		goto done;

	pid_t parent = getpid();
	pid = fork();
	if (pid == 0) {
		/* Child: only async-signal-safe calls until execve.  A controlling
		 * terminal needs a new session (which also makes a new process
		 * group); otherwise a process group of its own is enough. */
		if (o->ctty)
			setsid();
		else
			setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != parent)
			_exit(127);
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		signal(SIGPIPE, SIG_DFL);
		if (fd_in < 0) {
			int nullfd = open("/dev/null", O_RDONLY);
			if (nullfd >= 0) {
				dup2(nullfd, 0);
				close(nullfd);
			}
		} else {
			dup2(fd_in, 0);
		}
		if (fd_out >= 0)
			dup2(fd_out, 1);
		if (fd_err >= 0)
			dup2(fd_err, 2);
		if (o->ctty)
			ioctl(0, TIOCSCTTY, 0);
		/* No stray descriptor of the test (sockets of the mock cluster,
		 * pipes) leaks into the program under test. */
		syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
		execvpe(argv[0], argv, envp);
		int e = errno;
		ssize_t w = write(errpipe[1], &e, sizeof(e));
		(void)w;
		_exit(127);
	}
	if (pid < 0)
		goto done;
	/* Both sides set the group, so it is in place whichever runs first
	 * (a session leader's group is its own already). */
	if (!o->ctty)
		setpgid(pid, pid);
	close(errpipe[1]);
	errpipe[1] = -1;
	int child_errno = 0;
	ssize_t r;
	do {
		r = read(errpipe[0], &child_errno, sizeof(child_errno));
	} while (r < 0 && errno == EINTR);
	if (r == (ssize_t)sizeof(child_errno)) {
		waitpid(pid, NULL, 0);
		fprintf(stderr, "# spawn %s: exec failed: %s\n", argv[0], strerror(child_errno));
		pid = -1;
		goto done;
	}
	th_register_child(pid);
done:
	if (errpipe[0] >= 0)
		close(errpipe[0]);
	if (errpipe[1] >= 0)
		close(errpipe[1]);
	if (logfd >= 0)
		close(logfd);
	th_env_free(envp);
	return pid;
}

pid_t th_spawn_port(char *const argv[], const char *const extra_env[], const char *port_var,
                    const char *log_path, int timeout_ms, int *port)
{
	size_t n = 0;
	while (extra_env && extra_env[n])
		n++;
	const char **env = calloc(n + 2, sizeof(*env));
	if (!env)
		return -1;
	for (size_t i = 0; i < n; i++)
		env[i] = extra_env[i];
	pid_t pid = -1;
	for (int attempt = 0; attempt < 3 && pid < 0; attempt++) {
		*port = th_free_port();
		env[n] = th_strf("%s=%d", port_var, *port);
		pid = th_spawn(argv, env, log_path);
		if (pid > 0 && !th_wait_until(th_port_open_cond, port, timeout_ms)) {
			th_kill(pid);
			pid = -1;
		}
	}
	free(env);
	return pid;
}

int th_run(char *const argv[], const char *const extra_env[], const char *log_path, int timeout_ms)
{
	pid_t pid = th_spawn(argv, extra_env, log_path);
	int st = 0;
	if (pid < 0)
		return -1;
	if (th_wait_exit(pid, timeout_ms, &st) != 0) {
		th_kill(pid);
		return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st)
	                                                         : -1;
}

int th_signal(pid_t pid, int sig)
{
	return kill(pid, sig);
}

int th_wait_exit(pid_t pid, int timeout_ms, int *status)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int step = 1;
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			th_unregister_child(pid);
			if (status)
				*status = st;
			return 0;
		}
		if (r < 0 && errno != EINTR) {
			th_unregister_child(pid);
			return -1;
		}
		int64_t left = deadline - th_now_ms();
		if (left <= 0)
			return -1;
		th_sleep_ms(step < left ? step : (int)left);
		step = step * 2 > 50 ? 50 : step * 2;
	}
}

int th_kill(pid_t pid)
{
	if (pid <= 0)
		return -1;
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	return th_wait_exit(pid, 10000, NULL);
}

int th_stop(pid_t pid, int timeout_ms)
{
	if (pid <= 0)
		return -1;
	int st;
	kill(pid, SIGTERM);
	if (th_wait_exit(pid, timeout_ms, &st) == 0)
		return st;
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	if (th_wait_exit(pid, 10000, &st) == 0)
		return st;
	return -1;
}

int th_alive(pid_t pid)
{
	if (pid <= 0 || !th_is_registered(pid))
		return 0;
	/* WNOWAIT: look without reaping, so th_wait_exit still gets the
	 * status later. */
	siginfo_t info;
	memset(&info, 0, sizeof(info));
	if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) < 0)
		return 0;
	return info.si_pid == 0;
}

/* ------------------------------------------------------------------------
 * Redis
 * ------------------------------------------------------------------------ */

static const char *th_redis_binary(void)
{
	static char found[PATH_MAX];
	const char *path = getenv("PATH");
	if (path) {
		const char *p = path;
		while (*p) {
			const char *colon = strchr(p, ':');
			size_t len = colon ? (size_t)(colon - p) : strlen(p);
			if (len > 0 && len < sizeof(found) - 32) {
				snprintf(found, sizeof(found), "%.*s/redis-server", (int)len, p);
				if (access(found, X_OK) == 0)
					return found;
			}
			if (!colon)
				break;
			p = colon + 1;
		}
	}
	return "/usr/bin/redis-server";
}

static int th_redis_write_conf(const th_redis_t *r, const char *conf)
{
	char *text = NULL;
	int n = asprintf(&text,
	                 "port %d\n"
	                 "bind 127.0.0.1\n"
	                 "daemonize no\n"
	                 "dir \"%s\"\n"
	                 "logfile \"\"\n"
	                 "save \"\"\n"
	                 "appendonly no\n"
	                 "tcp-keepalive 0\n"
	                 "%s\n",
	                 r->port, r->dir, r->extra ? r->extra : "");
	if (n < 0)
		return -1;
	int rc = th_file_write(conf, text, (size_t)n);
	free(text);
	return rc;
}

/* 1: our redis answers PONG; 0: not yet; never blocks long. */
static int th_redis_probe(const th_redis_t *r)
{
	struct timeval tv = { 0, 200000 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
	if (!c || c->err) {
		if (c)
			redisFree(c);
		return 0;
	}
	redisSetTimeout(c, tv);
	int ok = 0;
	redisReply *rep;
	if (r->password[0]) {
		redisReply *a = redisCommand(c, "AUTH %s", r->password);
		if (a)
			freeReplyObject(a);
	}
	rep = redisCommand(c, "PING");
	if (rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0) {
		freeReplyObject(rep);
		/* Make sure it is ours and not another test's server that won
		 * the port. */
		rep = redisCommand(c, "INFO server");
		char want[64];
		snprintf(want, sizeof(want), "process_id:%d\r", (int)r->pid);
		if (rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, want))
			ok = 1;
	}
	if (rep)
		freeReplyObject(rep);
	redisFree(c);
	return ok;
}

static void th_redis_print_log(const th_redis_t *r)
{
	size_t len;
	char *s = th_file_read(r->log_path, &len);
	if (!s)
		return;
	const char *tail = len > 2000 ? s + len - 2000 : s;
	fprintf(stderr, "# redis.log (tail):\n%s\n", tail);
	free(s);
}

/*
 * One attempt: spawn on r->port and wait for PONG.  Returns 0 ready,
 * 1 the process exited (likely the port was taken), -1 other failure.
 */
static int th_redis_try(th_redis_t *r, int64_t deadline)
{
	char conf[PATH_MAX + 16];
	snprintf(conf, sizeof(conf), "%s/redis.conf", r->dir);
	if (th_redis_write_conf(r, conf) < 0) {
		fprintf(stderr, "# redis: cannot write %s\n", conf);
		return -1;
	}
	char *argv[] = { (char *)th_redis_binary(), conf, NULL };
	pid_t pid = th_spawn(argv, NULL, r->log_path);
	if (pid < 0)
		return -1;
	r->pid = pid;
	int step = 1;
	for (;;) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			th_unregister_child(pid);
			r->pid = 0;
			return 1;
		}
		if (th_redis_probe(r))
			return 0;
		if (th_now_ms() > deadline) {
			th_kill(pid);
			r->pid = 0;
			fprintf(stderr, "# redis: no PONG on port %d before the deadline\n", r->port);
			return -1;
		}
		th_sleep_ms(step);
		step = step * 2 > 50 ? 50 : step * 2;
	}
}

int th_redis_start(th_redis_t *r, const char *extra_config_lines)
{
	memset(r, 0, sizeof(*r));
	const char *dir = th_tmpdir();
	if (!dir)
		return -1;
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	if (snprintf(r->log_path, sizeof(r->log_path), "%s/redis.log", r->dir) >= (int)sizeof(r->log_path))
		return -1;
	if (extra_config_lines) {
		r->extra = th_strf("%s", extra_config_lines);
		/* The last requirepass wins, as in redis. */
		for (const char *l = extra_config_lines; l && *l;) {
			const char *nl = strchr(l, '\n');
			size_t len = nl ? (size_t)(nl - l) : strlen(l);
			if (len > 12 && strncmp(l, "requirepass ", 12) == 0 && len - 12 < sizeof(r->password)) {
				memcpy(r->password, l + 12, len - 12);
				r->password[len - 12] = 0;
			}
			l = nl ? nl + 1 : NULL;
		}
	}
	int64_t deadline = th_now_ms() + 10000;
	for (int attempt = 0; attempt < 8; attempt++) {
		r->port = th_free_port();
		if (r->port < 0)
			return -1;
		int rc = th_redis_try(r, deadline);
		if (rc == 0) {
			if (r->password[0])
				snprintf(r->url, sizeof(r->url), "redis://:%s@127.0.0.1:%d", r->password, r->port);
			else
				snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
			return 0;
		}
		if (rc < 0 || th_now_ms() > deadline)
			break;
		/* Exited: the port was probably taken; try another one. */
	}
	fprintf(stderr, "# redis: could not start\n");
	th_redis_print_log(r);
	return -1;
}

int th_redis_stop(th_redis_t *r)
{
	if (r->pid <= 0)
		return 0;
	int st = th_stop(r->pid, 5000);
	r->pid = 0;
	return st < 0 ? -1 : 0;
}

int th_redis_kill(th_redis_t *r)
{
	if (r->pid <= 0)
		return 0;
	int rc = th_kill(r->pid);
	r->pid = 0;
	return rc;
}

int th_redis_restart(th_redis_t *r)
{
	if (r->pid > 0 && th_redis_stop(r) < 0)
		return -1;
	int64_t deadline = th_now_ms() + 10000;
	for (;;) {
		int rc = th_redis_try(r, deadline);
		if (rc == 0)
			return 0;
		if (rc < 0 || th_now_ms() > deadline) {
			fprintf(stderr, "# redis: restart on port %d failed\n", r->port);
			th_redis_print_log(r);
			return -1;
		}
		th_sleep_ms(50);
	}
}

redisContext *th_redis_connect(const th_redis_t *r)
{
	struct timeval tv = { 2, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
	if (!c || c->err) {
		fprintf(stderr, "# redis: connect 127.0.0.1:%d: %s\n", r->port,
		        c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	struct timeval rtv = { 5, 0 };
	redisSetTimeout(c, rtv);
	if (r->password[0]) {
		redisReply *a = redisCommand(c, "AUTH %s", r->password);
		int ok = a && a->type == REDIS_REPLY_STATUS;
		if (a)
			freeReplyObject(a);
		if (!ok) {
			fprintf(stderr, "# redis: AUTH on 127.0.0.1:%d refused\n", r->port);
			redisFree(c);
			return NULL;
		}
	}
	return c;
}

/* Copies the "line" field of one XRANGE entry ("" when absent). */
static char *th_entry_field(const redisReply *entry, const char *field)
{
	if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 2)
		return strdup("");
	const redisReply *kv = entry->element[1];
	if (kv->type != REDIS_REPLY_ARRAY)
		return strdup("");
	for (size_t i = 0; i + 1 < kv->elements; i += 2) {
		const redisReply *k = kv->element[i], *v = kv->element[i + 1];
		if (k->type == REDIS_REPLY_STRING && strcmp(k->str, field) == 0 &&
		    v->type == REDIS_REPLY_STRING)
			return strndup(v->str, v->len);
	}
	return strdup("");
}

int th_stream_read_all(redisContext *c, const char *key, char ***lines, char ***ids, size_t *n)
{
	*lines = NULL;
	if (ids)
		*ids = NULL;
	*n = 0;
	redisReply *rep = th_cmd(c, "XRANGE %s - +", key);
	if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		fprintf(stderr, "# XRANGE %s: %s\n", key,
		        rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
		if (rep)
			freeReplyObject(rep);
		return -1;
	}
	size_t m = rep->elements;
	char **l = calloc(m + 1, sizeof(*l));
	char **d = ids ? calloc(m + 1, sizeof(*d)) : NULL;
	if (!l || (ids && !d)) {
		free(l);
		free(d);
		freeReplyObject(rep);
		return -1;
	}
	for (size_t i = 0; i < m; i++) {
		const redisReply *e = rep->element[i];
		l[i] = th_entry_field(e, "line");
		if (d)
			d[i] = (e->type == REDIS_REPLY_ARRAY && e->elements > 0 &&
			        e->element[0]->type == REDIS_REPLY_STRING)
			        ? strdup(e->element[0]->str)
			        : strdup("");
	}
	freeReplyObject(rep);
	*lines = l;
	if (ids)
		*ids = d;
	*n = m;
	return 0;
}

long th_lines_find(char **lines, size_t n, size_t from, const char *type, const char *status)
{
	for (size_t i = from; i < n; i++) {
		json_t *j = json_loads(lines[i], 0, NULL);
		const char *ty = json_string_value(json_object_get(j, "type"));
		const char *st = json_string_value(json_object_get(j, "status"));
		int hit = ty && !strcmp(ty, type) && (!status || (st && !strcmp(st, status)));
		json_decref(j);
		if (hit)
			return (long)i;
	}
	return -1;
}

const char *th_line_field(const char *line, const char *path1, const char *path2)
{
	static char buf[4096];
	json_t *j = json_loads(line, 0, NULL);
	json_t *v = json_object_get(j, path1);
	if (path2)
		v = json_object_get(v, path2);
	buf[0] = '\0';
	if (json_is_string(v)) {
		snprintf(buf, sizeof(buf), "%s", json_string_value(v));
	} else if (v) {
		char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		snprintf(buf, sizeof(buf), "%s", d ? d : "");
		free(d);
	}
	json_decref(j);
	return buf;
}

size_t th_lines_count(char **lines, size_t n, const char *type, const char *status)
{
	size_t c = 0;
	long i = -1;
	while ((i = th_lines_find(lines, n, (size_t)(i + 1), type, status)) >= 0)
		c++;
	return c;
}

int th_line_type(const char *line, char *type, size_t type_size, char *code, size_t code_size)
{
	if (type_size)
		type[0] = 0;
	if (code && code_size)
		code[0] = 0;
	json_error_t err;
	json_t *j = json_loads(line, 0, &err);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return -1;
	}
	const char *t = json_string_value(json_object_get(j, "type"));
	const char *k = json_string_value(json_object_get(j, "code"));
	if (t && type_size)
		snprintf(type, type_size, "%s", t);
	if (k && code && code_size)
		snprintf(code, code_size, "%s", k);
	json_decref(j);
	return 0;
}

typedef struct th_term_arg {
	redisContext *c;
	const char *key;
} th_term_arg_t;

static int th_last_is_terminal(void *p)
{
	th_term_arg_t *a = p;
	redisReply *rep = th_cmd(a->c, "XREVRANGE %s + - COUNT 1", a->key);
	int done = 0;
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1) {
		char *line = th_entry_field(rep->element[0], "line");
		char type[32];
		if (line && th_line_type(line, type, sizeof(type), NULL, 0) == 0)
			done = strcmp(type, "result") == 0 || strcmp(type, "error") == 0;
		free(line);
	}
	if (rep)
		freeReplyObject(rep);
	return done;
}

int th_wait_stream_terminal(redisContext *c, const char *key, int timeout_ms)
{
	th_term_arg_t a = { c, key };
	if (th_wait_until(th_last_is_terminal, &a, timeout_ms))
		return 1;
	char **lines;
	size_t n;
	if (th_stream_read_all(c, key, &lines, NULL, &n) == 0) {
		fprintf(stderr, "# %s has no terminal line after %d ms; %zu entries:\n", key, timeout_ms, n);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, "#   %s\n", lines[i]);
		th_strv_free(lines, n);
	}
	return 0;
}

static int th_reply_contains(const redisReply *r, const char *needle, size_t nlen)
{
	if (!r)
		return 0;
	switch (r->type) {
	case REDIS_REPLY_STRING:
	case REDIS_REPLY_STATUS:
		return r->str && memmem(r->str, r->len, needle, nlen);
	case REDIS_REPLY_ARRAY:
		for (size_t i = 0; i < r->elements; i++)
			if (th_reply_contains(r->element[i], needle, nlen))
				return 1;
		return 0;
	default:
		return 0;
	}
}

/* Scans the current db of c: 1 hit, 0 none, -1 error. */
static int th_scan_db(redisContext *c, int db, const char *needle)
{
	size_t nlen = strlen(needle);
	char cursor[32] = "0";
	do {
		redisReply *rep = redisCommand(c, "SCAN %s COUNT 1000", cursor);
		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
			if (rep)
				freeReplyObject(rep);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
		const redisReply *keys = rep->element[1];
		for (size_t i = 0; i < keys->elements; i++) {
			const redisReply *k = keys->element[i];
			int hit = !!memmem(k->str, k->len, needle, nlen);
			redisReply *t = hit ? NULL : redisCommand(c, "TYPE %b", k->str, k->len);
			redisReply *v = NULL;
			if (t && t->type == REDIS_REPLY_STATUS) {
				if (strcmp(t->str, "string") == 0)
					v = redisCommand(c, "GET %b", k->str, k->len);
				else if (strcmp(t->str, "hash") == 0)
					v = redisCommand(c, "HGETALL %b", k->str, k->len);
				else if (strcmp(t->str, "list") == 0)
					v = redisCommand(c, "LRANGE %b 0 -1", k->str, k->len);
				else if (strcmp(t->str, "set") == 0)
					v = redisCommand(c, "SMEMBERS %b", k->str, k->len);
				else if (strcmp(t->str, "zset") == 0)
					v = redisCommand(c, "ZRANGE %b 0 -1 WITHSCORES", k->str, k->len);
				else if (strcmp(t->str, "stream") == 0)
					v = redisCommand(c, "XRANGE %b - +", k->str, k->len);
				hit = th_reply_contains(v, needle, nlen);
				if (!hit && strcmp(t->str, "stream") == 0) {
					/* Consumer group names too. */
					redisReply *g = redisCommand(c, "XINFO GROUPS %b", k->str, k->len);
					hit = th_reply_contains(g, needle, nlen);
					if (g)
						freeReplyObject(g);
				}
			}
			if (hit)
				fprintf(stderr, "# found in redis db %d key %.*s (%s)\n", db, (int)k->len,
				        k->str, t && t->type == REDIS_REPLY_STATUS ? t->str : "name");
			if (t)
				freeReplyObject(t);
			if (v)
				freeReplyObject(v);
			if (hit) {
				freeReplyObject(rep);
				return 1;
			}
		}
		freeReplyObject(rep);
	} while (strcmp(cursor, "0") != 0);
	return 0;
}

long long th_redis_int(redisContext *c, long long dflt, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *r = th_vcmd(c, fmt, ap);
	va_end(ap);
	long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : dflt;
	if (r)
		freeReplyObject(r);
	return v;
}

int th_redis_clients(redisContext *c, const char *needle)
{
	redisReply *r = redisCommand(c, "CLIENT LIST");
	int n = -1;
	if (r && r->type == REDIS_REPLY_STRING) {
		n = 0;
		/* One line per connection. */
		for (const char *l = r->str; *l;) {
			const char *nl = strchr(l, '\n');
			size_t len = nl ? (size_t)(nl - l) : strlen(l);
			if (!needle || memmem(l, len, needle, strlen(needle)))
				n++;
			l += nl ? len + 1 : len;
		}
	}
	if (r)
		freeReplyObject(r);
	return n;
}

int th_redis_scan_contains(redisContext *c, const char *needle)
{
	/* A connection of our own, so that SELECT leaves the caller's
	 * connection on its database. */
	redisContext *own = NULL;
	if (c->connection_type == REDIS_CONN_TCP && c->tcp.host) {
		struct timeval tv = { 2, 0 };
		own = redisConnectWithTimeout(c->tcp.host, c->tcp.port, tv);
		if (own && own->err) {
			redisFree(own);
			own = NULL;
		}
	}
	if (!own) /* Fall back to the caller's database only. */
		return th_scan_db(c, -1, needle);
	int ndb = 16;
	redisReply *rep = redisCommand(own, "CONFIG GET databases");
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[1]->type == REDIS_REPLY_STRING)
		ndb = (int)strtol(rep->element[1]->str, NULL, 10);
	int needs_auth = rep && rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "NOAUTH");
	if (rep)
		freeReplyObject(rep);
	if (needs_auth) {
		redisFree(own);
		return th_scan_db(c, -1, needle);
	}
	int result = 0;
	for (int db = 0; db < ndb && result == 0; db++) {
		rep = redisCommand(own, "SELECT %d", db);
		int ok = rep && rep->type == REDIS_REPLY_STATUS;
		if (rep)
			freeReplyObject(rep);
		if (!ok)
			break;
		result = th_scan_db(own, db, needle);
	}
	redisFree(own);
	return result;
}
