/*
 * tests/builtin/agentproc.c - runnel-agent as a child (see agentproc.h).
 */
#include "tests/builtin/agentproc.h"
#include "tests/support/harness.h"

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
	/* stdin and stdout are ours; stderr passes through to the test's. */
	th_spawn_opts_t o = TH_SPAWN_OPTS_INIT;
	o.stdin_fd = in[0];
	o.stdout_fd = out[1];
	pid_t pid = th_spawn_opts(argv, env, &o);
	if (pid < 0) {
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		return -1;
	}
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
	long long until = th_now_ms() + timeout_ms;
	for (;;) {
		if (a->out && strstr(a->out, needle))
			return 1;
		long long left = until - th_now_ms();
		if (left <= 0)
			return 0;
		if (pump(a, (int)(left > 100 ? 100 : left)) < 0)
			return a->out && strstr(a->out, needle);
	}
}

int ap_finish(ap_t *a, int timeout_ms)
{
	long long until = th_now_ms() + timeout_ms;
	if (a->in_fd >= 0) {
		close(a->in_fd);
		a->in_fd = -1;
	}
	while (!a->eof && th_now_ms() < until)
		pump(a, 100);
	long long left = until - th_now_ms();
	if (!a->reaped && left > 0 && th_wait_exit(a->pid, (int)left, &a->status) == 0)
		a->reaped = 1;
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
		th_kill(a->pid);
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
