/*
 * worker/agent_loop.c - the agent's I/O loop (see agent_loop.h): line
 * splitting with caps, the stdin output queue, stop decisions, the kill
 * grace periods, control messages and ask expiry.
 */
#include "worker/agent_loop.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include <sodium.h>

#include "common/log.h"
#include "common/util.h"

#define LOOP_READ_CHUNK      (16 * 1024)
#define LOOP_STDERR_LINE     (8 * 1024)
#define LOOP_READS_PER_FLUSH 8
#define LOOP_PIPE_SIZE       (1024 * 1024)
#define LOOP_STDIN_MAX       (8 * 1024 * 1024) /* bytes queued for the agent */

/* A line splitter with a cap: longer lines keep their first cap+1 bytes. */
typedef struct splitter {
	char *buf;
	size_t len, cap, limit; /* limit = keep at most this many bytes */
	int overflow;
} splitter_t;

typedef struct loop {
	const worker_loop_params_t *p;
	const worker_line_sink_t *sink;
	const worker_stop_source_t *stop;
	worker_sandbox_t *sb;
	worker_agent_io_t io;
	/* stdin: bytes queued for the agent (may hold the prompt: wiped) */
	char *in_buf;
	size_t in_len, in_off;
	int in_closed;
	int stopping; /* a stop is under way: no more adapter calls */
	int eof_done;
} loop_t;

/* ---- line splitting ---- */

static void split_init(splitter_t *s, size_t limit)
{
	memset(s, 0, sizeof(*s));
	s->limit = limit;
}

static void split_free(splitter_t *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

/* Appends bytes to the current line, keeping at most limit of them. */
static int split_append(splitter_t *s, const char *p, size_t n)
{
	if (s->len + n > s->limit) {
		s->overflow = 1;
		n = s->limit > s->len ? s->limit - s->len : 0;
	}
	if (n == 0)
		return 0;
	if (s->len + n > s->cap) {
		size_t ncap = s->cap ? s->cap : 1024;
		while (ncap < s->len + n)
			ncap *= 2;
		if (ncap > s->limit)
			ncap = s->limit;
		char *nb = realloc(s->buf, ncap);
		if (!nb)
			return -1;
		s->buf = nb;
		s->cap = ncap;
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	return 0;
}

/* After a line was handled: forget it, and give back a big buffer. */
static void split_reset(splitter_t *s)
{
	s->len = 0;
	s->overflow = 0;
	if (s->cap > 64 * 1024) {
		free(s->buf);
		s->buf = NULL;
		s->cap = 0;
	}
}

/* ---- the adapter's side ---- */

static void io_emit(void *arg, const char *line, size_t len)
{
	loop_t *l = arg;
	l->sink->line(l->sink->arg, line, len);
}

static int io_write(void *arg, const char *buf, size_t len)
{
	loop_t *l = arg;
	if (l->in_closed)
		return -1;
	size_t keep = l->in_len - l->in_off;
	if (keep + len > LOOP_STDIN_MAX)
		return -1;
	char *nb = malloc(keep + len);
	if (!nb)
		return -1;
	/* A fresh buffer each time: the old one is wiped, never realloc'd. */
	if (keep)
		memcpy(nb, l->in_buf + l->in_off, keep);
	memcpy(nb + keep, buf, len);
	if (l->in_buf) {
		sodium_memzero(l->in_buf, l->in_len);
		free(l->in_buf);
	}
	l->in_len = keep + len;
	l->in_off = 0;
	l->in_buf = nb;
	return 0;
}

static void stdout_line(loop_t *l, const char *line, size_t len)
{
	l->p->ops->on_line(l->p->state, line, len, &l->io);
}

static void stderr_line(loop_t *l, const char *line, size_t len, int cut)
{
	l->sink->stderr_line(l->sink->arg, line, len, cut);
}

static void call_eof(loop_t *l)
{
	if (l->eof_done || l->stopping)
		return;
	l->eof_done = 1;
	if (l->p->ops->on_eof)
		l->p->ops->on_eof(l->p->state, &l->io);
}

/*
 * Reads once from fd into the splitter and handles every complete line.
 * Returns 1 at EOF, 2 when nothing was there (EAGAIN), 0 otherwise.
 */
static int read_lines(loop_t *l, int fd, splitter_t *s, int is_stderr, char *chunk)
{
	ssize_t n = read(fd, chunk, LOOP_READ_CHUNK);
	if (n < 0)
		return errno == EAGAIN ? 2 : errno == EINTR ? 0
		                                            : 1;
	if (n == 0) {
		/* A last line without newline still counts. */
		if (s->len || s->overflow) {
			if (is_stderr)
				stderr_line(l, s->buf, s->len, s->overflow);
			else
				stdout_line(l, s->buf ? s->buf : "", s->len);
			split_reset(s);
		}
		return 1;
	}
	const char *p = chunk, *end = chunk + n;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t take = nl ? (size_t)(nl - p) : (size_t)(end - p);
		split_append(s, p, take);
		if (!nl)
			break;
		if (is_stderr)
			stderr_line(l, s->buf, s->len, s->overflow);
		else
			stdout_line(l, s->buf ? s->buf : "", s->len);
		split_reset(s);
		p = nl + 1;
	}
	return 0;
}

/* ---- control messages and asks ---- */

/* Settles one ask and forwards it to the adapter.  Returns the sink's rc. */
static int deliver(loop_t *l, const worker_agent_reply_t *r)
{
	int rc = l->sink->settle(l->sink->arg, r);
	switch (rc) {
	case PROTO_ASK_SETTLED:
		rn_log_info(l->p->run_id, r->expired ? "ask_expired" : "ask_settled", "ask %s %s", r->ask_id,
		            r->expired ? "expired" : r->reject ? "rejected"
		                                               : "answered");
		if (l->p->ops->on_reply)
			l->p->ops->on_reply(l->p->state, r, &l->io);
		break;
	case PROTO_ASK_UNKNOWN:
		rn_log_warn(l->p->run_id, "reply_ignored", "a reply to ask %s was ignored: no such ask", r->ask_id);
		break;
	case PROTO_ASK_CLOSED:
		rn_log_warn(l->p->run_id, "reply_ignored", "a reply to ask %s was ignored: already settled", r->ask_id);
		break;
	case PROTO_ASK_BAD_OPTION:
		rn_log_warn(l->p->run_id, "reply_ignored", "a reply to ask %s was ignored: option %s is not one of its options",
		            r->ask_id, r->option ? r->option : "?");
		break;
	default:
		rn_log_error(l->p->run_id, "reply_failed", "out of memory settling ask %s", r->ask_id);
		break;
	}
	return rc;
}

static void drain_inbox(loop_t *l)
{
	proto_ctl_t msg;
	if (!l->stop->inbox)
		return;
	while (worker_inbox_pop(l->stop->inbox, &msg)) {
		if (msg.type != PROTO_CTL_REPLY)
			continue; /* a cancel acts through the stop flag */
		if (l->stopping) {
			rn_log_info(l->p->run_id, "reply_ignored", "a reply to ask %s came while the run was stopping", msg.id);
			continue;
		}
		worker_agent_reply_t r = { 0 };
		r.ask_id = msg.id;
		if (msg.reply == PROTO_REPLY_OPTION)
			r.option = msg.option;
		else if (msg.reply == PROTO_REPLY_TEXT)
			r.text = msg.text;
		else
			r.reject = 1;
		deliver(l, &r);
	}
}

/* Settles asks past their timeout; returns the next expiry (wall ms) or -1. */
static int64_t expire_asks(loop_t *l)
{
	if (l->p->ask_timeout_ms <= 0 || !l->sink->oldest_ask || l->stopping)
		return -1;
	for (;;) {
		int64_t opened = 0;
		const char *id = l->sink->oldest_ask(l->sink->arg, &opened);
		if (!id)
			return -1;
		int64_t at = opened + l->p->ask_timeout_ms;
		if (rn_now_ms() < at)
			return at;
		char copy[PROTO_CTL_ID_MAX + 1];
		snprintf(copy, sizeof(copy), "%s", id);
		worker_agent_reply_t r = { .ask_id = copy, .reject = 1, .expired = 1 };
		if (deliver(l, &r) != PROTO_ASK_SETTLED)
			return rn_now_ms() + 1000; /* out of memory: try again later, never spin */
	}
}

/* ---- the loop ---- */

static worker_loop_end_t end_of_stop(worker_stop_t st)
{
	switch (st) {
	case WORKER_STOP_CANCEL: return WORKER_LOOP_CANCEL;
	case WORKER_STOP_SHUTDOWN: return WORKER_LOOP_SHUTDOWN;
	case WORKER_STOP_LOST: return WORKER_LOOP_LOST;
	default: return WORKER_LOOP_NONE;
	}
}

/* Forgets the stdin queue, wiping it (the turn holds the prompt). */
static void drop_stdin(loop_t *l)
{
	if (l->in_buf) {
		sodium_memzero(l->in_buf, l->in_len);
		free(l->in_buf);
	}
	l->in_buf = NULL;
	l->in_len = l->in_off = 0;
}

/* Writes what is queued for stdin without blocking. */
static void flush_stdin(loop_t *l)
{
	while (!l->in_closed && l->in_off < l->in_len && l->sb->stdin_fd >= 0) {
		ssize_t w = write(l->sb->stdin_fd, l->in_buf + l->in_off, l->in_len - l->in_off);
		if (w > 0) {
			l->in_off += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else {
			if (w < 0 && errno != EAGAIN)
				l->in_closed = 1; /* the agent closed stdin: fine */
			break;
		}
	}
	if (l->in_off == l->in_len || l->in_closed)
		drop_stdin(l);
}

worker_loop_end_t worker_agent_loop(const worker_loop_params_t *p, worker_sandbox_t *sb,
                                    const worker_line_sink_t *sink,
                                    const worker_stop_source_t *stop)
{
	loop_t L;
	memset(&L, 0, sizeof(L));
	L.p = p;
	L.sink = sink;
	L.stop = stop;
	L.sb = sb;
	L.io.emit = io_emit;
	L.io.write = io_write;
	L.io.loop = &L;

	splitter_t so, se;
	char *chunk = malloc(LOOP_READ_CHUNK);
	int out_open = 1, err_open = 1, exited = 0;
	worker_loop_end_t end = WORKER_LOOP_NONE;
	int64_t kill_at = -1; /* SIGKILL deadline after SIGTERM */
	int killed = 0;
	int64_t term_seen_at = -1; /* agent printed its terminal line */
	int64_t exited_at = -1;
	int64_t last_io = rn_mono_ms(); /* last read from the pipes or Redis wait */
	long grace = p->kill_grace_ms;
	/* How long an agent may run on after its terminal line before SIGTERM. */
	long turn_grace = p->stop_after_turn ? 0 : grace;
	int64_t limit_next = INT64_MAX; /* the limits check wants to look again then */

	if (!chunk)
		return WORKER_LOOP_INTERNAL;
	split_init(&so, p->line_max + 1);
	split_init(&se, p->stderr_line_max ? p->stderr_line_max : LOOP_STDERR_LINE);
	int pidfd = pidfd_open(sb->pid, 0);

	/* A large stdout pipe lets the agent go on printing while a batch is
	 * in flight to Redis (best effort: the kernel may refuse the size). */
	fcntl(sb->stdout_fd, F_SETPIPE_SZ, LOOP_PIPE_SIZE);

	/* stdin: written without blocking; kept open afterwards. */
	if (sb->stdin_fd >= 0) {
		int fl = fcntl(sb->stdin_fd, F_GETFL);
		if (fl >= 0)
			fcntl(sb->stdin_fd, F_SETFL, fl | O_NONBLOCK);
	} else {
		L.in_closed = 1;
	}
	if (p->ops->start && p->ops->start(p->state, p->actx, &L.io) < 0) {
		rn_log_error(p->run_id, "agent_start", "the %s adapter could not start the agent", p->ops->kind);
		end = WORKER_LOOP_INTERNAL;
		worker_sandbox_kill(sb, SIGTERM);
		kill_at = rn_mono_ms() + grace;
		L.stopping = 1;
	}
	flush_stdin(&L);

	for (;;) {
		int64_t now = rn_mono_ms();

		/* Decide to stop the agent. */
		if (end == WORKER_LOOP_NONE) {
			end = end_of_stop(stop->stop(stop->arg));
			if (end == WORKER_LOOP_NONE && now >= p->cap_deadline)
				end = WORKER_LOOP_CAP;
			else if (end == WORKER_LOOP_NONE && sink->failed && sink->failed(sink->arg))
				end = WORKER_LOOP_INTERNAL;
			else if (end == WORKER_LOOP_NONE && stop->limit_check &&
			         stop->limit_check(stop->limit_arg, now, &limit_next))
				end = WORKER_LOOP_LIMIT;
			if (end == WORKER_LOOP_LIMIT) {
				L.stopping = 1;
				if (!exited) {
					worker_sandbox_kill(sb, SIGKILL);
					killed = 1;
				}
			} else if (end != WORKER_LOOP_NONE) {
				if (end == WORKER_LOOP_CANCEL && !exited && p->ops->on_cancel) {
					/* A graceful request first (best effort, not waited for). */
					p->ops->on_cancel(p->state, &L.io);
					flush_stdin(&L);
				}
				L.stopping = 1;
				if (!exited) {
					worker_sandbox_kill(sb, SIGTERM);
					kill_at = now + grace;
				}
			}
		}
		if (end == WORKER_LOOP_NONE && sink->terminated(sink->arg) && term_seen_at < 0)
			term_seen_at = now;
		/* After its terminal line (or its exit) the agent gets a grace period
		 * to finish; then it is stopped like any other. */
		if (!exited && kill_at < 0 && term_seen_at >= 0 && now >= term_seen_at + turn_grace) {
			worker_sandbox_kill(sb, SIGTERM);
			kill_at = now + grace;
		}
		/* After the exit, the pipes are read until EOF; only when they stay
		 * silent for the grace period (a leftover process holds them) is
		 * the rest given up.  Time spent waiting on Redis does not count. */
		if (exited && (out_open || err_open) && exited_at >= 0 &&
		    now >= (last_io > exited_at ? last_io : exited_at) + grace && !killed) {
			/* Something in the sandbox still holds the pipes. */
			worker_sandbox_kill(sb, SIGKILL);
			killed = 1;
			out_open = err_open = 0;
		}
		if (kill_at >= 0 && !killed && now >= kill_at) {
			worker_sandbox_kill(sb, SIGKILL);
			killed = 1;
		}
		if (!exited && worker_sandbox_reap(sb) != 0) {
			exited = 1;
			exited_at = now;
		}
		if (exited && !out_open && !err_open) {
			break;
		}
		if (exited && end != WORKER_LOOP_NONE && end != WORKER_LOOP_EXITED)
			break;

		int64_t ask_at = expire_asks(&L);

		struct pollfd pfd[7];
		int np = 0, i_out = -1, i_err = -1, i_in = -1, i_wake, i_red = -1;
		/* While a stop is pending, output is no longer read into the stream:
		 * drain it only so that the agent is not blocked writing. */
		if (out_open) {
			i_out = np;
			pfd[np++] = (struct pollfd){ sb->stdout_fd, POLLIN, 0 };
		}
		if (err_open) {
			i_err = np;
			pfd[np++] = (struct pollfd){ sb->stderr_fd, POLLIN, 0 };
		}
		if (!L.in_closed && L.in_off < L.in_len && sb->stdin_fd >= 0) {
			i_in = np;
			pfd[np++] = (struct pollfd){ sb->stdin_fd, POLLOUT, 0 };
		}
		i_wake = np;
		pfd[np++] = (struct pollfd){ stop->wake_fd, POLLIN, 0 };
		if (pidfd >= 0 && !exited)
			pfd[np++] = (struct pollfd){ pidfd, POLLIN, 0 };
		int wfd = sink->wait_fd ? sink->wait_fd(sink->arg) : -1;
		if (wfd >= 0) {
			i_red = np;
			pfd[np++] = (struct pollfd){ wfd, POLLIN, 0 };
		}
		int lfd = end == WORKER_LOOP_NONE && stop->limit_fd ? stop->limit_fd(stop->limit_arg) : -1;
		if (lfd >= 0)
			pfd[np++] = (struct pollfd){ lfd, POLLIN, 0 };
		int64_t timeout = 1000;
		int64_t next = p->cap_deadline;
		if (end == WORKER_LOOP_NONE && limit_next < next)
			next = limit_next;
		if (kill_at >= 0 && !killed && kill_at < next)
			next = kill_at;
		if (term_seen_at >= 0 && kill_at < 0 && term_seen_at + turn_grace < next)
			next = term_seen_at + turn_grace;
		if (exited_at >= 0 && (last_io > exited_at ? last_io : exited_at) + grace < next)
			next = (last_io > exited_at ? last_io : exited_at) + grace;
		if (ask_at >= 0 && now + (ask_at - rn_now_ms()) < next)
			next = now + (ask_at - rn_now_ms());
		if (next - now < timeout)
			timeout = next - now < 0 ? 0 : next - now;
		if (pidfd < 0 && !exited && timeout > 20)
			timeout = 20; /* no pidfd: notice the exit by polling */
		int pr = poll(pfd, (nfds_t)np, (int)timeout);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr <= 0)
			continue;
		if (pfd[i_wake].revents) {
			uint64_t v;
			ssize_t rr = read(stop->wake_fd, &v, sizeof(v));
			(void)rr;
			drain_inbox(&L);
		}
		if (i_in >= 0 && pfd[i_in].revents) {
			if (pfd[i_in].revents & (POLLERR | POLLHUP)) {
				L.in_closed = 1; /* the agent closed stdin: fine */
				drop_stdin(&L);
			} else {
				flush_stdin(&L);
			}
		}
		int stopping = end != WORKER_LOOP_NONE && end != WORKER_LOOP_EXITED;
		if (i_out >= 0 && pfd[i_out].revents) {
			if (stopping) {
				ssize_t rr = read(sb->stdout_fd, chunk, LOOP_READ_CHUNK);
				if (rr == 0 || (rr < 0 && errno != EAGAIN && errno != EINTR))
					out_open = 0;
			} else {
				/* A burst is read in several chunks before one pipelined
				 * flush, up to a batch; then the sink gets it. */
				for (int k = 0; k < LOOP_READS_PER_FLUSH; k++) {
					int r = read_lines(&L, sb->stdout_fd, &so, 0, chunk);
					if (r == 1) {
						out_open = 0;
						call_eof(&L);
					}
					if (r != 0 || (sink->backlog && sink->backlog(sink->arg)))
						break;
				}
			}
		}
		if (i_err >= 0 && pfd[i_err].revents) {
			if (stopping) {
				ssize_t rr = read(sb->stderr_fd, chunk, LOOP_READ_CHUNK);
				if (rr == 0 || (rr < 0 && errno != EAGAIN && errno != EINTR))
					err_open = 0;
			} else if (read_lines(&L, sb->stderr_fd, &se, 1, chunk) == 1) {
				err_open = 0;
			}
		}
		/* Send what this round produced; the replies are read while the
		 * next round is parsed.  While Redis is away this blocks, the pipe
		 * fills and the agent waits. */
		if (!stopping && sink->pump)
			sink->pump(sink->arg, i_red >= 0 && pfd[i_red].revents);
		/* Replies the adapter queued in this round go out now. */
		if (!L.in_closed && L.in_off < L.in_len)
			flush_stdin(&L);
		last_io = rn_mono_ms();
	}
	if (end == WORKER_LOOP_NONE)
		end = WORKER_LOOP_EXITED;
	if (end == WORKER_LOOP_EXITED)
		call_eof(&L);
	if (pidfd >= 0)
		close(pidfd);
	drop_stdin(&L);
	split_free(&so);
	split_free(&se);
	free(chunk);
	return end;
}
