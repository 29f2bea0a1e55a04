/*
 * tests/builtin/agentproc.c - runnel-agent as a child (see agentproc.h).
 */
#include "tests/builtin/agentproc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ap_start(ap_t *a, const char *bin, const char *const *args, const char *const *env, const char *turn)
{
	memset(a, 0, sizeof(*a));
	a->in_fd = a->out_fd = -1;
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -1;
	char *argv[64];
	int ac = 0;
	argv[ac++] = (char *)bin;
	for (int i = 0; args && args[i] && ac < 63; i++)
		argv[ac++] = (char *)args[i];
	argv[ac] = NULL;
	char *envp[128];
	int ec = 0;
	static char path[4096];
	snprintf(path, sizeof(path), "PATH=%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	envp[ec++] = path;
	const char *keep[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "HOME", NULL };
	static char kept[4][4096];
	for (int i = 0; keep[i]; i++)
		if (getenv(keep[i])) {
			snprintf(kept[i], sizeof(kept[i]), "%s=%s", keep[i], getenv(keep[i]));
			envp[ec++] = kept[i];
		}
	for (int i = 0; env && env[i] && ec < 127; i++)
		envp[ec++] = (char *)env[i];
	envp[ec] = NULL;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(in[0], 0);
		dup2(out[1], 1);
		execve(bin, argv, envp);
		_exit(127);
	}
	setpgid(pid, pid);
	close(in[0]);
	close(out[1]);
	a->pid = pid;
	a->in_fd = in[1];
	a->out_fd = out[0];
	fcntl(a->out_fd, F_SETFL, O_NONBLOCK);
	if (turn && (ap_write(a, turn) < 0))
		return -1;
	return 0;
}

int ap_write(ap_t *a, const char *line)
{
	size_t n = strlen(line);
	char *buf = malloc(n + 1);
	if (!buf)
		return -1;
	memcpy(buf, line, n);
	buf[n] = '\n';
	size_t off = 0;
	int rc = 0;
	while (off < n + 1) {
		ssize_t w = write(a->in_fd, buf + off, n + 1 - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = -1;
			break;
		}
		off += (size_t)w;
	}
	free(buf);
	return rc;
}

/* Reads what is there within wait_ms.  0, or -1 at EOF. */
static int pump(ap_t *a, int wait_ms)
{
	if (a->eof)
		return -1;
	struct pollfd p = { a->out_fd, POLLIN, 0 };
	if (poll(&p, 1, wait_ms) <= 0)
		return 0;
	char buf[65536];
	ssize_t r = read(a->out_fd, buf, sizeof(buf));
	if (r == 0) {
		a->eof = 1;
		return -1;
	}
	if (r < 0)
		return 0;
	char *n = realloc(a->out, a->out_len + (size_t)r + 1);
	if (!n)
		return -1;
	memcpy(n + a->out_len, buf, (size_t)r);
	a->out = n;
	a->out_len += (size_t)r;
	a->out[a->out_len] = '\0';
	return 0;
}

int ap_wait_for(ap_t *a, const char *needle, int timeout_ms)
{
	long long until = now_ms() + timeout_ms;
	for (;;) {
		if (a->out && strstr(a->out, needle))
			return 1;
		long long left = until - now_ms();
		if (left <= 0)
			return 0;
		if (pump(a, (int)(left > 100 ? 100 : left)) < 0)
			return a->out && strstr(a->out, needle);
	}
}

int ap_finish(ap_t *a, int timeout_ms)
{
	long long until = now_ms() + timeout_ms;
	if (a->in_fd >= 0) {
		close(a->in_fd);
		a->in_fd = -1;
	}
	while (!a->eof && now_ms() < until)
		pump(a, 100);
	while (!a->reaped && now_ms() < until) {
		pid_t r = waitpid(a->pid, &a->status, WNOHANG);
		if (r == a->pid) {
			a->reaped = 1;
			break;
		}
		struct timespec ts = { 0, 5000000L };
		nanosleep(&ts, NULL);
	}
	return a->reaped && a->eof ? 0 : -1;
}

json_t *ap_lines(const ap_t *a)
{
	json_t *arr = json_array();
	const char *p = a->out ? a->out : "";
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		json_t *o = json_loadb(p, n, 0, NULL);
		json_array_append_new(arr, o ? o : json_string("(not json)"));
		p += n + (nl ? 1 : 0);
	}
	return arr;
}

void ap_last(const ap_t *a, char *type, size_t ts, char *code, size_t cs)
{
	json_t *arr = ap_lines(a);
	json_t *last = json_array_get(arr, json_array_size(arr) - 1);
	const char *t = json_string_value(json_object_get(last, "type"));
	const char *c = json_string_value(json_object_get(last, "code"));
	snprintf(type, ts, "%s", t ? t : "");
	snprintf(code, cs, "%s", c ? c : "");
	json_decref(arr);
}

void ap_free(ap_t *a)
{
	if (a->pid > 0 && !a->reaped) {
		kill(-a->pid, SIGKILL);
		waitpid(a->pid, &a->status, 0);
		a->reaped = 1;
	}
	if (a->in_fd >= 0)
		close(a->in_fd);
	if (a->out_fd >= 0)
		close(a->out_fd);
	free(a->out);
	memset(a, 0, sizeof(*a));
	a->in_fd = a->out_fd = -1;
}
