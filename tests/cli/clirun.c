/*
 * tests/cli/clirun.c - child processes and a terminal replay for the CLI tests.
 */
#include "clirun.h"

#include "tests/support/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define CLIRUN_OUT_MAX (16u << 20)

int clirun_start(clirun_t *p, const char *const argv[], const char *const env[], int cols, int rows)
{
	th_spawn_opts_t o = TH_SPAWN_OPTS_INIT;
	int out[2] = { -1, -1 }, err[2] = { -1, -1 };

	memset(p, 0, sizeof(*p));
	p->out = calloc(64, 1); /* see append(): 64 is the least capacity */
	p->err = calloc(64, 1);
	p->out_fd = p->err_fd = -1;
	if (cols > 0) {
		struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
		int master, slave;
		if (openpty(&master, &slave, NULL, NULL, &ws) < 0)
			return -1;
		fcntl(master, F_SETFD, FD_CLOEXEC);
		o.stdin_fd = o.stdout_fd = o.stderr_fd = slave;
		o.ctty = 1;
		pid_t pid = th_spawn_opts((char *const *)argv, env, &o);
		close(slave);
		if (pid < 0) {
			close(master);
			return -1;
		}
		p->pid = pid;
		p->out_fd = master;
		return 0;
	}
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
		for (int i = 0; i < 2; i++) {
			if (out[i] >= 0)
				close(out[i]);
			if (err[i] >= 0)
				close(err[i]);
		}
		return -1;
	}
	o.stdout_fd = out[1];
	o.stderr_fd = err[1];
	pid_t pid = th_spawn_opts((char *const *)argv, env, &o);
	close(out[1]);
	close(err[1]);
	if (pid < 0) {
		close(out[0]);
		close(err[0]);
		return -1;
	}
	p->pid = pid;
	p->out_fd = out[0];
	p->err_fd = err[0];
	return 0;
}

/* Appends with capacity doubling (the size is the next power of two of the
 * length, so no separate capacity field is needed). */
static void append(char **buf, size_t *len, const char *data, size_t n)
{
	if (*len + n > CLIRUN_OUT_MAX)
		n = CLIRUN_OUT_MAX - *len;
	size_t cap = 64;
	while (cap < *len + 1)
		cap *= 2;
	if (*len + n + 1 > cap) {
		while (cap < *len + n + 1)
			cap *= 2;
		char *b = realloc(*buf, cap);
		if (!b)
			return;
		*buf = b;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* One poll round over the open fds. */
static void pump_once(clirun_t *p, int ms)
{
	struct pollfd fds[2];
	int nf = 0;
	if (p->out_fd >= 0)
		fds[nf++] = (struct pollfd){ .fd = p->out_fd, .events = POLLIN };
	if (p->err_fd >= 0)
		fds[nf++] = (struct pollfd){ .fd = p->err_fd, .events = POLLIN };
	if (nf == 0) {
		usleep((useconds_t)ms * 1000);
		return;
	}
	if (poll(fds, (nfds_t)nf, ms) <= 0)
		return;
	for (int i = 0; i < nf; i++) {
		if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		char buf[8192];
		ssize_t n = read(fds[i].fd, buf, sizeof(buf));
		if (n > 0) {
			if (fds[i].fd == p->out_fd)
				append(&p->out, &p->out_len, buf, (size_t)n);
			else
				append(&p->err, &p->err_len, buf, (size_t)n);
		} else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
			/* EOF (a pty master reports EIO once the child is gone). */
			close(fds[i].fd);
			if (fds[i].fd == p->out_fd)
				p->out_fd = -1;
			else
				p->err_fd = -1;
		}
	}
}

void clirun_pump(clirun_t *p, int ms)
{
	long long end = th_now_ms() + ms;
	do
		pump_once(p, 10);
	while (th_now_ms() < end);
}

void clirun_signal(clirun_t *p, int sig)
{
	if (p->pid > 0)
		kill(p->pid, sig);
}

int clirun_wait(clirun_t *p, int timeout_ms)
{
	long long end = th_now_ms() + timeout_ms;
	int status = 0, done = 0;

	while (th_now_ms() < end) {
		pump_once(p, 20);
		if (!done && th_wait_exit(p->pid, 0, &status) == 0)
			done = 1;
		if (done && p->out_fd < 0 && p->err_fd < 0)
			break;
		if (done) {
			/* Drain what is left; a grandchild may hold the pipe: stop soon. */
			for (int i = 0; i < 20 && (p->out_fd >= 0 || p->err_fd >= 0); i++)
				pump_once(p, 10);
			break;
		}
	}
	if (!done) {
		th_kill(p->pid);
		p->pid = 0;
		p->exit_code = -1;
		return -1;
	}
	p->pid = 0;
	if (WIFEXITED(status))
		p->exit_code = WEXITSTATUS(status);
	else
		p->exit_code = 128 + WTERMSIG(status);
	return p->exit_code;
}

int clirun(const char *const argv[], const char *const env[], int timeout_ms, clirun_t *p)
{
	if (clirun_start(p, argv, env, 0, 0) < 0)
		return -1;
	return clirun_wait(p, timeout_ms);
}

/* Appends the NULL-terminated list src (may be NULL) to v at *n, up to max. */
static int vec_add(const char **v, size_t *n, size_t max, const char *const src[])
{
	for (size_t i = 0; src && src[i]; i++) {
		if (*n + 1 >= max)
			return -1;
		v[(*n)++] = src[i];
	}
	v[*n] = NULL;
	return 0;
}

int clirun_argv(const char *bin, const char *const pre[], const char *const args[],
                const char *const base_env[], const char *const env[], int timeout_ms, clirun_t *p)
{
	const char *argv[CLIRUN_ARGV_MAX] = { bin };
	const char *e[CLIRUN_ARGV_MAX];
	size_t n = 1, m = 0;

	memset(p, 0, sizeof(*p));
	p->out_fd = p->err_fd = -1;
	p->exit_code = -1;
	if (vec_add(argv, &n, CLIRUN_ARGV_MAX, pre) < 0 || vec_add(argv, &n, CLIRUN_ARGV_MAX, args) < 0 ||
	    vec_add(e, &m, CLIRUN_ARGV_MAX, base_env) < 0 || vec_add(e, &m, CLIRUN_ARGV_MAX, env) < 0)
		return -1;
	e[m] = NULL;
	return clirun(argv, e, timeout_ms, p);
}

void clirun_free(clirun_t *p)
{
	if (p->pid > 0)
		th_kill(p->pid);
	if (p->out_fd >= 0)
		close(p->out_fd);
	if (p->err_fd >= 0)
		close(p->err_fd);
	free(p->out);
	free(p->err);
	memset(p, 0, sizeof(*p));
	p->out_fd = p->err_fd = -1;
}

/* ---- terminal replay ----------------------------------------------------- */

#define VT_CELL 8

typedef struct vt {
	char (*cells)[VT_CELL]; /* rows * cols */
	int cols, nrows;
	int row, col;
} vt_t;

static void vt_grow(vt_t *v, int row)
{
	if (row < v->nrows)
		return;
	int n = row + 16;
	v->cells = realloc(v->cells, (size_t)n * (size_t)v->cols * VT_CELL);
	memset(v->cells[(size_t)v->nrows * (size_t)v->cols], 0, (size_t)(n - v->nrows) * (size_t)v->cols * VT_CELL);
	v->nrows = n;
}

static char *vt_cell(vt_t *v, int row, int col)
{
	vt_grow(v, row);
	return v->cells[(size_t)row * (size_t)v->cols + (size_t)col];
}

static void vt_erase(vt_t *v, int row, int from, int to)
{
	for (int c = from; c < to; c++)
		vt_cell(v, row, c)[0] = '\0';
}

char *vt_screen(const char *bytes, size_t len, int cols)
{
	return vt_screen_rows(bytes, len, cols, 0);
}

char *vt_screen_rows(const char *bytes, size_t len, int cols, int rows)
{
	vt_t v = { .cols = cols };
	size_t i = 0;
	int bottom = 0; /* lowest row the cursor reached: the screen's last line */
#define VT_TOP() (rows > 0 && bottom - rows + 1 > 0 ? bottom - rows + 1 : 0)

	vt_grow(&v, 0);
	while (i < len) {
		unsigned char c = (unsigned char)bytes[i];
		if (c == '\r') {
			v.col = 0;
			i++;
		} else if (c == '\n') {
			v.row++;
			if (v.row > bottom)
				bottom = v.row;
			i++;
		} else if (c == '\b') {
			if (v.col > 0)
				v.col--;
			i++;
		} else if (c == 0x1b && i + 1 < len && bytes[i + 1] == '[') {
			size_t j = i + 2;
			int priv = 0, n = 0, have = 0;
			if (j < len && bytes[j] == '?') {
				priv = 1;
				j++;
			}
			while (j < len && ((bytes[j] >= '0' && bytes[j] <= '9') || bytes[j] == ';')) {
				if (bytes[j] == ';')
					n = 0;
				else {
					n = n * 10 + (bytes[j] - '0');
					have = 1;
				}
				j++;
			}
			if (j >= len)
				break;
			char fin = bytes[j];
			int cnt = have && n > 0 ? n : 1;
			if (!priv) {
				switch (fin) {
				case 'A': v.row = v.row - cnt < VT_TOP() ? VT_TOP() : v.row - cnt; break;
				case 'B': v.row = v.row + cnt > bottom ? bottom : v.row + cnt; break;
				case 'C': v.col = v.col + cnt >= cols ? cols - 1 : v.col + cnt; break;
				case 'D': v.col = v.col - cnt < 0 ? 0 : v.col - cnt; break;
				case 'K':
					if (n == 2)
						vt_erase(&v, v.row, 0, cols);
					else if (n == 1)
						vt_erase(&v, v.row, 0, v.col + 1);
					else
						vt_erase(&v, v.row, v.col, cols);
					break;
				case 'J':
					for (int r = v.row + 1; r < v.nrows; r++)
						vt_erase(&v, r, 0, cols);
					vt_erase(&v, v.row, v.col, cols);
					break;
				default: break; /* SGR and the rest: no effect on text */
				}
			}
			i = j + 1;
		} else if (c < 0x20 || c == 0x7f) {
			i++;
		} else {
			size_t n = 1;
			if (c >= 0xF0)
				n = 4;
			else if (c >= 0xE0)
				n = 3;
			else if (c >= 0xC0)
				n = 2;
			if (i + n > len)
				n = len - i;
			if (v.col >= cols) {
				v.col = 0;
				v.row++;
				if (v.row > bottom)
					bottom = v.row;
			}
			char *cell = vt_cell(&v, v.row, v.col);
			memcpy(cell, bytes + i, n);
			cell[n] = '\0';
			v.col++;
			i += n;
		}
	}
	/* Join rows, trimming trailing blanks and trailing empty rows. */
	size_t cap = (size_t)v.nrows * ((size_t)cols * 4 + 1) + 1, o = 0;
	char *s = malloc(cap);
	int last = -1;
	for (int r = 0; r < v.nrows; r++)
		for (int c = 0; c < cols; c++)
			if (v.cells[(size_t)r * (size_t)cols + (size_t)c][0])
				last = r;
	for (int r = 0; r <= last; r++) {
		size_t start = o;
		for (int c = 0; c < cols; c++) {
			const char *cell = v.cells[(size_t)r * (size_t)cols + (size_t)c];
			if (!cell[0]) {
				s[o++] = ' ';
				continue;
			}
			size_t l = strlen(cell);
			memcpy(s + o, cell, l);
			o += l;
		}
		while (o > start && s[o - 1] == ' ')
			o--;
		s[o++] = '\n';
	}
	s[o] = '\0';
	free(v.cells);
	return s;
#undef VT_TOP
}
