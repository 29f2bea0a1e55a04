/*
 * cli/devproc.c - spawning, watching and stopping `runnel dev`'s children.
 */
#include "devproc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/util.h"

extern char **environ;

int cli_proc_spawn(cli_proc_t *p, const char *name, char *const argv[], char *const envp[],
                   const char *log_path, char *errstr, size_t errstr_size)
{
	int sync[2];

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->log_path, sizeof(p->log_path), "%s", log_path);
	if (pipe2(sync, O_CLOEXEC) < 0) {
		snprintf(errstr, errstr_size, "%s: pipe: %s", name, strerror(errno));
		return -1;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(errstr, errstr_size, "%s: fork: %s", name, strerror(errno));
		close(sync[0]);
		close(sync[1]);
		return -1;
	}
	if (pid == 0) {
		/* Only async-signal-safe calls from here: the parent has threads. */
		int e;
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		int in = open("/dev/null", O_RDONLY);
		int out = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
			e = errno;
			(void)!write(sync[1], &e, sizeof(e));
			_exit(127);
		}
		execve(argv[0], argv, envp);
		e = errno;
		(void)!write(sync[1], &e, sizeof(e));
		_exit(127);
	}
	setpgid(pid, pid); /* also here: no race with a signal to the group */
	close(sync[1]);
	int e = 0;
	ssize_t n;
	do
		n = read(sync[0], &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	close(sync[0]);
	if (n == (ssize_t)sizeof(e)) {
		waitpid(pid, NULL, 0);
		snprintf(errstr, errstr_size, "cannot start %s (%s): %s", name, argv[0], strerror(e));
		return -1;
	}
	p->pid = pid;
	return 0;
}

int cli_proc_alive(cli_proc_t *p)
{
	if (p->pid <= 0)
		return 0;
	int st;
	pid_t w = waitpid(p->pid, &st, WNOHANG);
	if (w == p->pid) {
		p->status = st;
		p->pid = 0;
		/* The leader died on its own: take down anything it left in its
		 * group (its pid stays reserved while the group has members, so
		 * this reaches nobody else). */
		kill(-w, SIGKILL);
		return 0;
	}
	return 1;
}

int cli_proc_stop(cli_proc_t *p, int sig, int grace_ms)
{
	if (p->pid <= 0)
		return p->status;
	pid_t pid = p->pid;
	kill(-pid, sig);
	int64_t end = rn_mono_ms() + grace_ms;
	while (rn_mono_ms() < end) {
		if (!cli_proc_alive(p)) {
			/* The leader is gone; take down anything it left in its group. */
			kill(-pid, SIGKILL);
			return p->status;
		}
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
	kill(-pid, SIGKILL);
	int st = 0;
	if (waitpid(pid, &st, 0) == pid)
		p->status = st;
	p->pid = 0;
	return p->status;
}

void cli_proc_describe(int status, char *buf, size_t size)
{
	if (WIFEXITED(status))
		snprintf(buf, size, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, size, "signal %d", WTERMSIG(status));
	else
		snprintf(buf, size, "status %d", status);
}

void cli_proc_log_tail(const cli_proc_t *p, FILE *f, int lines)
{
	FILE *in = fopen(p->log_path, "r");
	if (!in)
		return;
	/* Keep the start offsets of the last `lines` lines in a ring. */
	long offs[64];
	int n = 0;
	if (lines > 64)
		lines = 64;
	long off = 0;
	int c, at_start = 1;
	while ((c = fgetc(in)) != EOF) {
		if (at_start) {
			offs[n % lines] = off;
			n++;
			at_start = 0;
		}
		off++;
		if (c == '\n')
			at_start = 1;
	}
	if (n > 0) {
		long from = offs[n > lines ? n % lines : 0];
		fseek(in, from, SEEK_SET);
		char line[1024];
		while (fgets(line, sizeof(line), in)) {
			fputs("    ", f);
			fputs(line, f);
			if (!strchr(line, '\n'))
				fputc('\n', f);
		}
	}
	fclose(in);
}

char **cli_env_build(const char *const overrides[])
{
	size_t n = 0, m = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	for (size_t i = 0; overrides && overrides[i]; i++)
		m++;
	char **env = calloc(n + m + 1, sizeof(*env));
	if (!env)
		return NULL;
	size_t k = 0;
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		size_t nl = eq ? (size_t)(eq - *e) : strlen(*e);
		int overridden = 0;
		for (size_t i = 0; i < m && !overridden; i++)
			overridden = !strncmp(overrides[i], *e, nl) && overrides[i][nl] == '=';
		if (!overridden && !(env[k++] = strdup(*e)))
			goto fail;
	}
	for (size_t i = 0; i < m; i++)
		if (!(env[k++] = strdup(overrides[i])))
			goto fail;
	env[k] = NULL;
	return env;
fail:
	cli_env_free(env);
	return NULL;
}

void cli_env_free(char **env)
{
	if (!env)
		return;
	for (size_t i = 0; env[i]; i++) {
		/* The environment may carry RUNNEL_JOB_KEY or a token. */
		memset(env[i], 0, strlen(env[i]));
		free(env[i]);
	}
	free(env);
}

static int bind_port(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	socklen_t len = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &len);
	close(fd);
	return ntohs(a.sin_port);
}

int cli_free_port(void)
{
	return bind_port(0);
}

int cli_port_free(int port)
{
	return bind_port(port) == port;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int cli_rm_rf(const char *dir)
{
	return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int cli_which(const char *name, char *out, size_t size)
{
	if (strchr(name, '/')) {
		if (access(name, X_OK) != 0)
			return -1;
		snprintf(out, size, "%s", name);
		return 0;
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
	const char *p = path;
	while (*p) {
		size_t len = strcspn(p, ":");
		char cand[PATH_MAX];
		if (len > 0 && (size_t)snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, p, name) < sizeof(cand) &&
		    access(cand, X_OK) == 0) {
			snprintf(out, size, "%s", cand);
			return 0;
		}
		p += len;
		if (*p == ':')
			p++;
	}
	/* Debian puts redis-server in /usr/bin, but a minimal PATH may lack /usr/sbin. */
	static const char *const extra[] = { "/usr/bin", "/usr/sbin", "/usr/local/bin", NULL };
	for (int i = 0; extra[i]; i++) {
		char cand[PATH_MAX];
		snprintf(cand, sizeof(cand), "%s/%s", extra[i], name);
		if (access(cand, X_OK) == 0) {
			snprintf(out, size, "%s", cand);
			return 0;
		}
	}
	return -1;
}
