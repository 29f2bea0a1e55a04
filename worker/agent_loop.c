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
	worker_loop_end_t end; /* WORKER_LOOP_NONE until decided */
	worker_kill_t kill;    /* when to signal the agent */
	int out_open, err_open;
	splitter_t so, se;  /* stdout and stderr lines */
	char *chunk;        /* one read's bytes */
	int pidfd;          /* the agent's, or -1: its exit is then polled */
	int64_t limit_next; /* the limits check wants to look again then */
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

/* ---- the kill policy (agent_loop.h) ---- */

void worker_kill_init(worker_kill_t *k, long grace_ms, int stop_after_turn, int64_t now)
{
	memset(k, 0, sizeof(*k));
	k->grace_ms = grace_ms;
	/* An ACP agent waits for its next prompt after the turn: no reason to
	 * give it time to exit by itself. */
	k->turn_grace_ms = stop_after_turn ? 0 : grace_ms;
	k->turn_done_at = k->kill_at = k->exited_at = -1;
	k->last_io = now;
}

int worker_kill_stop(worker_kill_t *k, int64_t now, int hard)
{
	if (k->exited_at >= 0)
		return 0;
	if (hard) {
		k->killed = 1;
		return SIGKILL;
	}
	k->kill_at = now + k->grace_ms;
	return SIGTERM;
}

void worker_kill_turn_done(worker_kill_t *k, int64_t now)
{
	if (k->turn_done_at < 0)
		k->turn_done_at = now;
}

void worker_kill_exited(worker_kill_t *k, int64_t now)
{
	if (k->exited_at < 0)
		k->exited_at = now;
}

void worker_kill_io(worker_kill_t *k, int64_t now)
{
	k->last_io = now;
}

/* After the exit: when the pipes count as silent.  Time spent waiting on
 * Redis counts as I/O, so a slow Redis never cuts off the agent's output. */
static int64_t silent_at(const worker_kill_t *k)
{
	return (k->last_io > k->exited_at ? k->last_io : k->exited_at) + k->grace_ms;
}

int worker_kill_due(worker_kill_t *k, int64_t now, int pipes_open, int *abandon)
{
	int exited = k->exited_at >= 0;
	if (!exited && k->kill_at < 0 && k->turn_done_at >= 0 && now >= k->turn_done_at + k->turn_grace_ms) {
		k->kill_at = now + k->grace_ms;
		return SIGTERM;
	}
	if (exited && pipes_open && !k->killed && now >= silent_at(k)) {
		/* Something in the sandbox still holds the pipes. */
		k->killed = 1;
		*abandon = 1;
		return SIGKILL;
	}
	if (k->kill_at >= 0 && !k->killed && now >= k->kill_at) {
		k->killed = 1;
		return SIGKILL;
	}
	return 0;
}

int64_t worker_kill_next(const worker_kill_t *k, int64_t next)
{
	if (k->kill_at >= 0 && !k->killed && k->kill_at < next)
		next = k->kill_at;
	if (k->turn_done_at >= 0 && k->kill_at < 0 && k->turn_done_at + k->turn_grace_ms < next)
		next = k->turn_done_at + k->turn_grace_ms;
	if (k->exited_at >= 0 && silent_at(k) < next)
		next = silent_at(k);
	return next;
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

static void signal_agent(loop_t *l, int sig)
{
	if (sig)
		worker_sandbox_kill(l->sb, sig);
}

static int agent_exited(const loop_t *l)
{
	return l->kill.exited_at >= 0;
}

/* Decides whether to stop the agent (a stop request, the runtime cap, a
 * failed sink, a limit), and stops it. */
static void decide_stop(loop_t *l, int64_t now)
{
	const worker_loop_params_t *p = l->p;
	const worker_stop_source_t *stop = l->stop;
	if (l->end != WORKER_LOOP_NONE)
		return;
	worker_loop_end_t end = end_of_stop(stop->stop(stop->arg));
	if (end == WORKER_LOOP_NONE && now >= p->cap_deadline)
		end = WORKER_LOOP_CAP;
	else if (end == WORKER_LOOP_NONE && l->sink->failed && l->sink->failed(l->sink->arg))
		end = WORKER_LOOP_INTERNAL;
	else if (end == WORKER_LOOP_NONE && stop->limit_check && stop->limit_check(stop->limit_arg, now, &l->limit_next))
		end = WORKER_LOOP_LIMIT;
	if (end == WORKER_LOOP_NONE)
		return;
	l->end = end;
	if (end == WORKER_LOOP_CANCEL && !agent_exited(l) && p->ops->on_cancel) {
		/* A graceful request first (best effort, not waited for). */
		p->ops->on_cancel(p->state, &l->io);
		flush_stdin(l);
	}
	l->stopping = 1;
	/* Over a limit the agent gets no grace: it would use it to go on
	 * spending what it is over. */
	signal_agent(l, worker_kill_stop(&l->kill, now, end == WORKER_LOOP_LIMIT));
}

/* The kill policy's signals, and the agent's exit. */
static void run_clock(loop_t *l, int64_t now)
{
	if (l->end == WORKER_LOOP_NONE && l->sink->terminated(l->sink->arg))
		worker_kill_turn_done(&l->kill, now);
	int sig, abandon = 0;
	while ((sig = worker_kill_due(&l->kill, now, l->out_open || l->err_open, &abandon)) != 0)
		signal_agent(l, sig);
	if (abandon)
		l->out_open = l->err_open = 0;
	if (!agent_exited(l) && worker_sandbox_reap(l->sb) != 0)
		worker_kill_exited(&l->kill, now);
}

/* The descriptors of one poll round, and where each one is in pfd. */
typedef struct round {
	struct pollfd pfd[7];
	int np, i_out, i_err, i_in, i_wake, i_red;
} round_t;

static void add_fd(round_t *r, int *idx, int fd, short events)
{
	if (idx)
		*idx = r->np;
	r->pfd[r->np++] = (struct pollfd){ fd, events, 0 };
}

static void round_fds(loop_t *l, round_t *r)
{
	const worker_line_sink_t *sink = l->sink;
	const worker_stop_source_t *stop = l->stop;
	worker_sandbox_t *sb = l->sb;
	memset(r, 0, sizeof(*r));
	r->i_out = r->i_err = r->i_in = r->i_red = -1;
	/* While a stop is pending, output is no longer read into the stream:
	 * drain it only so that the agent is not blocked writing. */
	if (l->out_open)
		add_fd(r, &r->i_out, sb->stdout_fd, POLLIN);
	if (l->err_open)
		add_fd(r, &r->i_err, sb->stderr_fd, POLLIN);
	if (!l->in_closed && l->in_off < l->in_len && sb->stdin_fd >= 0)
		add_fd(r, &r->i_in, sb->stdin_fd, POLLOUT);
	add_fd(r, &r->i_wake, stop->wake_fd, POLLIN);
	if (l->pidfd >= 0 && !agent_exited(l))
		add_fd(r, NULL, l->pidfd, POLLIN);
	int wfd = sink->wait_fd ? sink->wait_fd(sink->arg) : -1;
	if (wfd >= 0)
		add_fd(r, &r->i_red, wfd, POLLIN);
	int lfd = l->end == WORKER_LOOP_NONE && stop->limit_fd ? stop->limit_fd(stop->limit_arg) : -1;
	if (lfd >= 0)
		add_fd(r, NULL, lfd, POLLIN);
}

/* How long the round may wait: the next deadline of the cap, the limits,
 * the kill policy and the asks, at most a second. */
static int round_timeout(const loop_t *l, int64_t now, int64_t ask_at)
{
	int64_t timeout = 1000;
	int64_t next = l->p->cap_deadline;
	if (l->end == WORKER_LOOP_NONE && l->limit_next < next)
		next = l->limit_next;
	next = worker_kill_next(&l->kill, next);
	/* Asks expire on the wall clock: turned into a monotonic deadline. */
	if (ask_at >= 0 && now + (ask_at - rn_now_ms()) < next)
		next = now + (ask_at - rn_now_ms());
	if (next - now < timeout)
		timeout = next - now < 0 ? 0 : next - now;
	if (l->pidfd < 0 && !agent_exited(l) && timeout > 20)
		timeout = 20; /* no pidfd: notice the exit by polling */
	return (int)timeout;
}

/* Reads what a stopping agent still writes and throws it away, so that it
 * is not blocked writing; 0 once the pipe closed. */
static int drain_pipe(loop_t *l, int fd)
{
	ssize_t rr = read(fd, l->chunk, LOOP_READ_CHUNK);
	return !(rr == 0 || (rr < 0 && errno != EAGAIN && errno != EINTR));
}

/* One round's ready descriptors: the wake fd, stdin, stdout, stderr, and
 * then what the round produced goes to the sink. */
static void round_serve(loop_t *l, const round_t *r)
{
	const worker_line_sink_t *sink = l->sink;
	worker_sandbox_t *sb = l->sb;
	if (r->pfd[r->i_wake].revents) {
		uint64_t v;
		ssize_t rr = read(l->stop->wake_fd, &v, sizeof(v));
		(void)rr;
		drain_inbox(l);
	}
	if (r->i_in >= 0 && r->pfd[r->i_in].revents) {
		if (r->pfd[r->i_in].revents & (POLLERR | POLLHUP)) {
			l->in_closed = 1; /* the agent closed stdin: fine */
			drop_stdin(l);
		} else {
			flush_stdin(l);
		}
	}
	int stopping = l->end != WORKER_LOOP_NONE && l->end != WORKER_LOOP_EXITED;
	if (r->i_out >= 0 && r->pfd[r->i_out].revents) {
		if (stopping) {
			l->out_open = drain_pipe(l, sb->stdout_fd);
		} else {
			/* A burst is read in several chunks before one pipelined
			 * flush, up to a batch; then the sink gets it. */
			for (int k = 0; k < LOOP_READS_PER_FLUSH; k++) {
				int rc = read_lines(l, sb->stdout_fd, &l->so, 0, l->chunk);
				if (rc == 1) {
					l->out_open = 0;
					call_eof(l);
				}
				if (rc != 0 || (sink->backlog && sink->backlog(sink->arg)))
					break;
			}
		}
	}
	if (r->i_err >= 0 && r->pfd[r->i_err].revents) {
		if (stopping)
			l->err_open = drain_pipe(l, sb->stderr_fd);
		else if (read_lines(l, sb->stderr_fd, &l->se, 1, l->chunk) == 1)
			l->err_open = 0;
	}
	/* Send what this round produced; the replies are read while the
	 * next round is parsed.  While Redis is away this blocks, the pipe
	 * fills and the agent waits. */
	if (!stopping && sink->pump)
		sink->pump(sink->arg, r->i_red >= 0 && r->pfd[r->i_red].revents);
	/* Replies the adapter queued in this round go out now. */
	if (!l->in_closed && l->in_off < l->in_len)
		flush_stdin(l);
}

/* The pipes and the adapter, before the first round. */
static void loop_start(loop_t *l)
{
	const worker_loop_params_t *p = l->p;
	worker_sandbox_t *sb = l->sb;
	/* A large stdout pipe lets the agent go on printing while a batch is
	 * in flight to Redis (best effort: the kernel may refuse the size). */
	fcntl(sb->stdout_fd, F_SETPIPE_SZ, LOOP_PIPE_SIZE);
	/* stdin: written without blocking; kept open afterwards. */
	if (sb->stdin_fd >= 0) {
		int fl = fcntl(sb->stdin_fd, F_GETFL);
		if (fl >= 0)
			fcntl(sb->stdin_fd, F_SETFL, fl | O_NONBLOCK);
	} else {
		l->in_closed = 1;
	}
	if (p->ops->start && p->ops->start(p->state, p->actx, &l->io) < 0) {
		rn_log_error(p->run_id, "agent_start", "the %s adapter could not start the agent", p->ops->kind);
		l->end = WORKER_LOOP_INTERNAL;
		l->stopping = 1;
		signal_agent(l, worker_kill_stop(&l->kill, rn_mono_ms(), 0));
	}
	flush_stdin(l);
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
	L.out_open = L.err_open = 1;
	L.end = WORKER_LOOP_NONE;
	L.limit_next = INT64_MAX; /* the limits check wants to look again then */
	worker_kill_init(&L.kill, p->kill_grace_ms, p->stop_after_turn, rn_mono_ms());
	L.chunk = malloc(LOOP_READ_CHUNK);
	if (!L.chunk)
		return WORKER_LOOP_INTERNAL;
	split_init(&L.so, p->line_max + 1);
	split_init(&L.se, p->stderr_line_max ? p->stderr_line_max : LOOP_STDERR_LINE);
	L.pidfd = pidfd_open(sb->pid, 0);
	loop_start(&L);

	for (;;) {
		int64_t now = rn_mono_ms();
		decide_stop(&L, now);
		run_clock(&L, now);
		/* Done: the agent exited and its pipes are read to EOF, or it was
		 * stopped (what it still wrote is not wanted). */
		if (agent_exited(&L) && !L.out_open && !L.err_open)
			break;
		if (agent_exited(&L) && L.end != WORKER_LOOP_NONE && L.end != WORKER_LOOP_EXITED)
			break;
		int64_t ask_at = expire_asks(&L);
		round_t r;
		round_fds(&L, &r);
		int pr = poll(r.pfd, (nfds_t)r.np, round_timeout(&L, now, ask_at));
		if (pr < 0 && errno != EINTR)
			break;
		if (pr <= 0)
			continue;
		round_serve(&L, &r);
		worker_kill_io(&L.kill, rn_mono_ms());
	}
	if (L.end == WORKER_LOOP_NONE)
		L.end = WORKER_LOOP_EXITED;
	if (L.end == WORKER_LOOP_EXITED)
		call_eof(&L);
	if (L.pidfd >= 0)
		close(L.pidfd);
	drop_stdin(&L);
	split_free(&L.so);
	split_free(&L.se);
	free(L.chunk);
	return L.end;
}
