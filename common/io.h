/*
 * common/io.h - the one "write all of it" loop, the one "read until full
 * or EOF" loop, the one "read all of a file" loop, the one two-way
 * socket relay and the one lingering close (rn_linger).  Header-only (static
 * inline, libc only), so that the small programs that link nothing of
 * runnel (runnel-egress-bridge, runnel-warm-init) share it too.  Any
 * thread; the fds are the caller's.
 */
#ifndef RUNNEL_COMMON_IO_H
#define RUNNEL_COMMON_IO_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RN_IO_SOCKET 1 /* send(2) with MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE */
#define RN_IO_WAIT   2 /* a non-blocking fd: on EAGAIN wait (poll, 1 s slices) and go on */

/* Writes the n bytes at buf to fd, retrying EINTR and short writes.  0, or
 * -1 with errno (EAGAIN too, unless RN_IO_WAIT). */
static inline int rn_write_all(int fd, const void *buf, size_t n, int flags)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = (flags & RN_IO_SOCKET) ? send(fd, p, n, MSG_NOSIGNAL) : write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN && (flags & RN_IO_WAIT)) {
			struct pollfd pf = { fd, POLLOUT, 0 };
			poll(&pf, 1, 1000);
			continue;
		}
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads from fd into buf until n bytes, EOF or an error (EINTR retried).
 * Returns the bytes read: fewer than n means EOF, or an error with errno. */
static inline size_t rn_read_full(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

#define RN_IO_WIPE 4 /* rn_read_alloc: wipe every buffer left behind (the data is a secret) */

/*
 * Reads fd to EOF into a malloc'd buffer, NUL-terminated (*len, when
 * given, excludes the NUL).  NULL with errno set on a read error, ENOMEM,
 * or EFBIG when there is more than max bytes.  flags: RN_IO_WIPE.
 */
static inline char *rn_read_alloc(int fd, size_t max, size_t *len, int flags)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);

	while (buf) {
		if (n + 1 >= cap) {
			if (n >= max) {
				errno = EFBIG;
				break;
			}
			char *nb = malloc(cap * 2);
			if (!nb) {
				errno = ENOMEM;
				break;
			}
			memcpy(nb, buf, n);
			if (flags & RN_IO_WIPE)
				explicit_bzero(buf, cap);
			free(buf);
			buf = nb;
			cap *= 2;
		}
		size_t want = cap - n - 1;
		if (want > max + 1 - n)
			want = max + 1 - n; /* one byte past max tells "too large" */
		ssize_t r = read(fd, buf + n, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		if (r == 0) {
			buf[n] = '\0';
			if (len)
				*len = n;
			return buf;
		}
		n += (size_t)r;
		if (n > max) {
			errno = EFBIG;
			break;
		}
	}
	if (buf) {
		int e = errno;
		if (flags & RN_IO_WIPE)
			explicit_bzero(buf, cap);
		free(buf);
		errno = e;
	} else {
		errno = ENOMEM;
	}
	return NULL;
}

/*
 * Copies bytes both ways between the connected sockets a and b through buf
 * until both directions ended.  When one side reaches EOF (or a write to
 * the other fails) the other side's write half is shut down, so a
 * half-close passes through; an error reading ends the relay.  Blocks;
 * closing the fds is the caller's.
 */
static inline void rn_relay(int a, int b, char *buf, size_t size)
{
	int open_a = 1, open_b = 1; /* a -> b, b -> a still flowing */

	while (open_a || open_b) {
		struct pollfd p[2] = { { open_a ? a : -1, POLLIN, 0 }, { open_b ? b : -1, POLLIN, 0 } };
		int pr = poll(p, 2, -1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return;
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			int from = i ? b : a, to = i ? a : b;
			ssize_t r = recv(from, buf, size, 0);
			if (r < 0 && errno == EINTR)
				continue;
			if (r > 0 && rn_write_all(to, buf, (size_t)r, RN_IO_SOCKET) == 0)
				continue;
			if (i)
				open_b = 0;
			else
				open_a = 0;
			shutdown(to, SHUT_WR);
			if (r < 0)
				return;
		}
	}
}

/*
 * Closes a connected socket whose peer may still be sending, as when an
 * answer refused a request before its body was read.  A close with unread
 * input resets the connection, and the reset can reach a peer that is
 * still writing before it has read the answer.  So: end our side (the peer
 * reads EOF after the answer) and drop whatever still arrives until the
 * peer closes, ms pass or max bytes came.  Blocks up to ms; closing fd
 * is the caller's, right after.
 */
static inline void rn_linger(int fd, int ms, size_t max)
{
	struct timespec t0, t;
	char buf[16384];
	size_t dropped = 0;

	shutdown(fd, SHUT_WR);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (dropped < max) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		long left = ms - ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L);
		struct pollfd p = { fd, POLLIN, 0 };
		if (left <= 0)
			break;
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			break;
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		dropped += (size_t)r;
	}
}

#endif
