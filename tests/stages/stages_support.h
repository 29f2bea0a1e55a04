/*
 * tests/stages/stages_support.h - helpers shared by the stage tests: a
 * sandbox spec, run a sandbox to completion collecting its output, and
 * look for processes of a process group in /proc.
 */
#ifndef RUNNEL_TESTS_STAGES_SUPPORT_H
#define RUNNEL_TESTS_STAGES_SUPPORT_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/harness.h"
#include "worker/sandbox.h"

#define SBX_OUT_MAX (16u << 20)

typedef struct sbx_out {
	char *out; /* stdout, NUL-terminated (malloc'd) */
	size_t out_len;
	char *err; /* stderr, NUL-terminated (malloc'd) */
	size_t err_len;
	int status; /* waitpid status */
	int exited; /* 1 when reaped before the deadline */
} sbx_out_t;

static inline void sbx_out_free(sbx_out_t *o)
{
	free(o->out);
	free(o->err);
	memset(o, 0, sizeof(*o));
}

static inline int sbx_append(char **buf, size_t *len, const char *data, size_t n)
{
	if (*len + n > SBX_OUT_MAX)
		n = SBX_OUT_MAX - *len;
	char *nb = realloc(*buf, *len + n + 1);
	if (!nb)
		return -1;
	memcpy(nb + *len, data, n);
	*len += n;
	nb[*len] = '\0';
	*buf = nb;
	return 0;
}

/*
 * Writes stdin_data (may be NULL) to the sandbox, closes its stdin when
 * close_stdin, then reads stdout and stderr until both reach EOF and the
 * sandbox is reaped, or timeout_ms passes.  0 when it finished in time.
 */
static inline int sbx_collect(worker_sandbox_t *sb, const char *stdin_data, int close_stdin,
                              int timeout_ms, sbx_out_t *o)
{
	memset(o, 0, sizeof(*o));
	sbx_append(&o->out, &o->out_len, "", 0);
	sbx_append(&o->err, &o->err_len, "", 0);
	if (stdin_data) {
		size_t len = strlen(stdin_data), off = 0;
		while (off < len) {
			ssize_t n = write(sb->stdin_fd, stdin_data + off, len - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			off += (size_t)n;
		}
	}
	if (close_stdin && sb->stdin_fd >= 0) {
		close(sb->stdin_fd);
		sb->stdin_fd = -1;
	}
	int64_t deadline = th_now_ms() + timeout_ms;
	int out_open = 1, err_open = 1;
	while (th_now_ms() < deadline) {
		if (!out_open && !err_open) {
			int r = worker_sandbox_reap(sb);
			if (r == 1) {
				o->status = sb->status;
				o->exited = 1;
				return 0;
			}
			if (r < 0)
				return -1;
			usleep(2000);
			continue;
		}
		struct pollfd p[2] = {
			{ out_open ? sb->stdout_fd : -1, POLLIN, 0 },
			{ err_open ? sb->stderr_fd : -1, POLLIN, 0 },
		};
		int pr = poll(p, 2, 50);
		if (pr <= 0)
			continue;
		char buf[65536];
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			ssize_t n = read(p[i].fd, buf, sizeof(buf));
			if (n > 0) {
				if (i == 0)
					sbx_append(&o->out, &o->out_len, buf, (size_t)n);
				else
					sbx_append(&o->err, &o->err_len, buf, (size_t)n);
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				if (i == 0)
					out_open = 0;
				else
					err_open = 0;
			}
		}
	}
	return -1;
}

/* A spec of driver running argv with envp over workspace_dir; every other
 * field zero (no binds, limits, network or setup) for the test to add. */
static inline worker_sandbox_spec_t sbx_spec(worker_sandbox_driver_t driver, const char *workspace_dir,
                                             char *const *argv, char *const *envp)
{
	worker_sandbox_spec_t s = { .driver = driver, .workspace_dir = workspace_dir, .argv = argv, .envp = envp, .init_path = RUNNEL_TEST_SANDBOX_INIT };
	return s;
}

/* Starts s with spawn (worker_sandbox_spawn or a test's variant with the
 * same contract), then sbx_collect with stdin_data, close_stdin and
 * timeout_ms, and destroys the sandbox.  sbx_collect's result, or -1 when
 * the spawn failed (noted; *o zeroed). */
static inline int sbx_run(int (*spawn)(const worker_sandbox_spec_t *, worker_sandbox_t *, char *, size_t),
                          const worker_sandbox_spec_t *s, const char *stdin_data, int close_stdin,
                          int timeout_ms, sbx_out_t *o)
{
	worker_sandbox_t sb;
	char err[256] = "";
	if (spawn(s, &sb, err, sizeof(err)) != 0) {
		TH_NOTE("spawn failed: %s", err);
		memset(o, 0, sizeof(*o));
		return -1;
	}
	int rc = sbx_collect(&sb, stdin_data, close_stdin, timeout_ms, o);
	worker_sandbox_destroy(&sb);
	return rc;
}

typedef struct sbx_group_arg {
	pid_t pgid;
	int count;
} sbx_group_arg_t;

static inline int sbx_group_member(const th_proc_t *p, void *arg)
{
	sbx_group_arg_t *a = arg;
	if (p->pgrp == a->pgid && p->state != 'Z')
		a->count++;
	return 0;
}

/* Number of live (non-zombie) processes whose process group is pgid. */
static inline int sbx_group_count(pid_t pgid)
{
	sbx_group_arg_t a = { pgid, 0 };
	return th_proc_each(sbx_group_member, &a) == 0 ? a.count : -1;
}

#endif
