/*
 * worker/agent_loop.h - the agent's I/O loop: one poll() over the agent's
 * stdout, stderr and stdin, the run's wake eventfd, the agent's pidfd and
 * the publisher's reply socket, until the agent exited and its pipes are
 * drained, or a stop (cancel, runtime cap, shutdown, lost lease) ended it.
 *
 * The loop knows nothing of Redis or of the envelope's rules: stdout lines
 * go through the adapter (worker/agent.h) into a line sink, stderr lines
 * straight into the sink, and stop requests and control messages come from
 * a stop source.  The run (worker/run.c) implements both; stage tests use
 * in-memory ones.
 *
 * Ending rules: after the agent's terminal line (the sink says so) the
 * agent gets kill_grace_ms to exit, then SIGTERM, then SIGKILL after
 * another kill_grace_ms.  After its exit, stdout and stderr are read to EOF;
 * both stay silent for kill_grace_ms only when a leftover process holds them.
 * stderr is taken until then, also after the terminal line: the terminal
 * line is held by the sink and published after the loop, so nothing the
 * agent wrote before or around it is lost.
 *
 * Asks: a reply (from the inbox) or an ask past its timeout is settled by
 * the sink (which publishes the settlement line); then the adapter's
 * on_reply forwards it to the agent.
 *
 * @locality the run's thread (the stop source's stop() and inbox are the
 * only things other threads reach, through the run's stop word and inbox).
 */
#ifndef RUNNEL_WORKER_AGENT_LOOP_H
#define RUNNEL_WORKER_AGENT_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "proto/envelope.h"
#include "worker/agent.h"
#include "worker/inbox.h"
#include "worker/run.h"
#include "worker/sandbox.h"

/* How the agent phase ended. */
typedef enum {
	WORKER_LOOP_NONE = 0,
	WORKER_LOOP_EXITED, /* the agent exited (with or without a terminal line) */
	WORKER_LOOP_CANCEL,
	WORKER_LOOP_CAP,
	WORKER_LOOP_SHUTDOWN,
	WORKER_LOOP_LOST,
	WORKER_LOOP_INTERNAL, /* the worker failed (publishing gave up, I/O error) */
	WORKER_LOOP_LIMIT,    /* the run went over a resource limit (worker/limits.h) */
} worker_loop_end_t;

/* Where lines go (the run's publishing side). */
typedef struct worker_line_sink {
	void *arg;
	/* One envelope line from the adapter: validate, publish, hold a terminal. */
	void (*line)(void *arg, const char *line, size_t len);
	/* One stderr line; cut: it was longer than the per-line cap. */
	void (*stderr_line)(void *arg, const char *line, size_t len, int cut);
	/* 1 once a terminal line was taken. */
	int (*terminated)(void *arg);
	/* Settles an open ask (publishing its second line).  A proto_ask_rc_t. */
	int (*settle)(void *arg, const worker_agent_reply_t *reply);
	/* The oldest open ask (id valid until the next settle) and when it opened
	 * (wall ms); NULL when none. */
	const char *(*oldest_ask)(void *arg, int64_t *opened_ms);
	/* Flow control (all may be NULL): the fd to poll for publishing
	 * progress (-1 none); 1 when enough is batched to stop reading stdout
	 * this round; send what is batched (readable: the wait fd was ready). */
	int (*wait_fd)(void *arg);
	int (*backlog)(void *arg);
	void (*pump)(void *arg, int readable);
	/* 1 when publishing gave up (the run ends internal). */
	int (*failed)(void *arg);
} worker_line_sink_t;

/* Where stops and control messages come from. */
typedef struct worker_stop_source {
	void *arg;
	int wake_fd;                      /* readable when something changed */
	worker_stop_t (*stop)(void *arg); /* the current stop request */
	worker_inbox_t *inbox;            /* control messages, may be NULL */
	/* Per-run limits (worker/limits.h), all may be NULL.  limit_check runs
	 * every round and sets *next_ms (monotonic) to when it wants to look
	 * again; non-zero ends the loop WORKER_LOOP_LIMIT with SIGKILL at once
	 * (no grace: a fork bomb would use it).  limit_fd is polled beside the
	 * pipes (-1: none). */
	int (*limit_check)(void *arg, int64_t now_ms, int64_t *next_ms);
	int (*limit_fd)(void *arg);
	void *limit_arg;
} worker_stop_source_t;

typedef struct worker_loop_params {
	const char *run_id; /* for logs */
	const worker_agent_ops_t *ops;
	void *state; /* the adapter's */
	const worker_agent_ctx_t *actx;
	int64_t cap_deadline; /* monotonic ms: runtime cap */
	long kill_grace_ms;
	int stop_after_turn;    /* SIGTERM as soon as the terminal line is in */
	size_t line_max;        /* stdout lines keep line_max + 1 bytes */
	size_t stderr_line_max; /* 0: 8 KiB */
	int64_t ask_timeout_ms; /* 0: asks never expire */
} worker_loop_params_t;

/*
 * The kill policy: when the loop signals the agent, as a clock of its own so
 * that the rules above are one small type with a test of its own
 * (tests/stages/test_kill_policy.c).  It sends nothing itself: the loop
 * tells it what happened (a stop, the terminal line, the exit, pipe I/O)
 * and sends the signals worker_kill_due() names.  Times are monotonic ms.
 */
typedef struct worker_kill {
	long grace_ms;        /* SIGTERM to SIGKILL, and silent pipes after the exit */
	long turn_grace_ms;   /* terminal line to SIGTERM (0 with stop_after_turn) */
	int64_t turn_done_at; /* the terminal line was seen; -1 */
	int64_t kill_at;      /* SIGKILL due after a SIGTERM; -1 */
	int64_t exited_at;    /* the agent exited; -1 */
	int64_t last_io;      /* the last read from the pipes or wait on Redis */
	int killed;           /* SIGKILL was sent */
} worker_kill_t;

void worker_kill_init(worker_kill_t *k, long grace_ms, int stop_after_turn, int64_t now);

/* A stop: the signal to send now (SIGKILL when hard, else SIGTERM with a
 * SIGKILL due grace_ms later), or 0 when the agent exited already. */
int worker_kill_stop(worker_kill_t *k, int64_t now, int hard);

/* The agent printed its terminal line (the first call counts). */
void worker_kill_turn_done(worker_kill_t *k, int64_t now);

/* The agent exited; and the pipes were read (or Redis waited on) at now. */
void worker_kill_exited(worker_kill_t *k, int64_t now);
void worker_kill_io(worker_kill_t *k, int64_t now);

/*
 * The signal due at now, or 0; call until 0.  SIGTERM once the terminal
 * line is turn_grace_ms old; SIGKILL once a SIGTERM is grace_ms old; and,
 * after the exit, SIGKILL when the pipes (pipes_open) stayed silent for
 * grace_ms (a leftover process holds them): *abandon is then set and the
 * loop stops reading them.
 */
int worker_kill_due(worker_kill_t *k, int64_t now, int pipes_open, int *abandon);

/* The earlier of next and the policy's next deadline. */
int64_t worker_kill_next(const worker_kill_t *k, int64_t next);

/* Runs the agent from `start` to its end.  sb's stdin is left open. */
worker_loop_end_t worker_agent_loop(const worker_loop_params_t *p, worker_sandbox_t *sb,
                                    const worker_line_sink_t *sink,
                                    const worker_stop_source_t *stop);

#endif
