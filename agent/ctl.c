/*
 * agent/ctl.c - stop word, stop pipe and the stdin control-line reader (see
 * ctl.h).
 */
#include "agent/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "proto/agentctl.h"

#define CTL_LINE_MAX (64 * 1024)
#define CTL_REPLIES  16

static volatile sig_atomic_t stop_flag;
static int stop_pipe[2] = { -1, -1 };

static pthread_t reader;
static int reader_started;
static int reader_fd = -1;
static int quit_pipe[2] = { -1, -1 };
static char *pending; /* leftover bytes after the turn line */
static size_t pending_len;

/* Replies that arrived, waiting for agent_ctl_wait_reply. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct {
	char id[64];
	agent_reply_t r;
	int used;
} replies[CTL_REPLIES];
static int stdin_closed;

static void on_signal(int sig)
{
	(void)sig;
	agent_ctl_stop();
}

void agent_ctl_stop(void)
{
	int saved = errno;
	if (!stop_flag) {
		stop_flag = 1;
		if (stop_pipe[1] >= 0) {
			ssize_t n = write(stop_pipe[1], "x", 1);
			(void)n;
		}
	}
	errno = saved;
}

int agent_ctl_stopped(void)
{
	return stop_flag != 0;
}

int agent_ctl_stop_fd(void)
{
	return stop_pipe[0];
}

int agent_ctl_init(void)
{
	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	/* A tool or MCP server that closes its pipe must not kill us either. */
	rn_stop_signals_install(on_signal);
	return 0;
}

static void take_line(const char *line, size_t len)
{
	proto_agentctl_t c;
	proto_agentctl_parse(line, len, &c);
	if (c.type == PROTO_AGENTCTL_CANCEL) {
		agent_ctl_stop();
	} else if (c.type == PROTO_AGENTCTL_REPLY && strlen(c.id) < sizeof(replies[0].id)) {
		pthread_mutex_lock(&mu);
		int slot = -1;
		for (int i = 0; i < CTL_REPLIES; i++)
			if (!replies[i].used) {
				slot = i;
				break;
			}
		if (slot < 0)
			slot = 0; /* nobody waits for that many: drop the oldest */
		memset(&replies[slot], 0, sizeof(replies[slot]));
		replies[slot].used = 1;
		snprintf(replies[slot].id, sizeof(replies[slot].id), "%s", c.id);
		agent_reply_t *r = &replies[slot].r;
		r->rejected = c.reject;
		r->expired = c.expired;
		snprintf(r->option, sizeof(r->option), "%s", c.option);
		snprintf(r->text, sizeof(r->text), "%s", c.text);
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
	/* Anything else is not for us. */
}

static void *reader_main(void *arg)
{
	(void)arg;
	char *line = malloc(CTL_LINE_MAX);
	size_t len = 0;
	int skipping = 0; /* in a line over the cap */
	char buf[4096];
	if (!line)
		goto out;
	for (;;) {
		const char *p;
		ssize_t n;
		if (pending) {
			p = pending;
			n = (ssize_t)pending_len;
		} else {
			struct pollfd fds[2] = { { reader_fd, POLLIN, 0 }, { quit_pipe[0], POLLIN, 0 } };
			if (poll(fds, 2, -1) < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			if (fds[1].revents)
				break;
			n = read(reader_fd, buf, sizeof(buf));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0)
				break;
			p = buf;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (p[i] == '\n') {
				if (!skipping)
					take_line(line, len);
				len = 0;
				skipping = 0;
			} else if (len < CTL_LINE_MAX) {
				line[len++] = p[i];
			} else {
				skipping = 1;
			}
		}
		if (pending) {
			free(pending);
			pending = NULL;
		}
	}
out:
	free(line);
	pthread_mutex_lock(&mu);
	stdin_closed = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

int agent_ctl_start(int fd, const char *leftover, size_t leftover_len)
{
	if (pipe2(quit_pipe, O_CLOEXEC) < 0)
		return -1;
	reader_fd = fd;
	if (leftover_len > 0) {
		pending = malloc(leftover_len);
		if (!pending)
			return -1;
		memcpy(pending, leftover, leftover_len);
		pending_len = leftover_len;
	}
	if (pthread_create(&reader, NULL, reader_main, NULL) != 0)
		return -1;
	reader_started = 1;
	return 0;
}

void agent_ctl_shutdown(void)
{
	if (reader_started) {
		ssize_t n = write(quit_pipe[1], "x", 1);
		(void)n;
		pthread_join(reader, NULL);
		reader_started = 0;
	}
	free(pending);
	pending = NULL;
	for (int i = 0; i < 2; i++) {
		if (quit_pipe[i] >= 0)
			close(quit_pipe[i]);
		quit_pipe[i] = -1;
	}
}

int agent_ctl_wait_reply(const char *id, int timeout_ms, agent_reply_t *out)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	int64_t left = timeout_ms;
	pthread_mutex_lock(&mu);
	for (;;) {
		for (int i = 0; i < CTL_REPLIES; i++)
			if (replies[i].used && !strcmp(replies[i].id, id)) {
				*out = replies[i].r;
				replies[i].used = 0;
				pthread_mutex_unlock(&mu);
				return 1;
			}
		if (stop_flag || stdin_closed) {
			pthread_mutex_unlock(&mu);
			return -1;
		}
		if (timeout_ms >= 0 && left <= 0) {
			pthread_mutex_unlock(&mu);
			return 0;
		}
		/* Wake at least every 100 ms: a SIGTERM sets the flag without
		 * touching the condition variable. */
		int step = (timeout_ms >= 0 && left < 100) ? (int)left : 100;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)step * 1000000L;
		while (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&cv, &mu, &until);
		left -= step;
	}
}
