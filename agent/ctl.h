/*
 * agent/ctl.h - the control side of runnel-agent: the stop word (set by
 * SIGTERM or a {"type":"cancel"} line) with a pipe every wait polls, and the
 * reader of the control lines that follow the turn line on stdin (SPEC §6,
 * replies to asks).
 *
 * A thread reads stdin so that every wait in the agent (the model request,
 * a tool process, an MCP server, an ask) only has to poll one stop fd.
 */
#ifndef RUNNEL_AGENT_CTL_H
#define RUNNEL_AGENT_CTL_H

#include <signal.h>
#include <stddef.h>

/* A settled ask: the option chosen, the text given, or a rejection. */
typedef struct agent_reply {
	int rejected; /* reject:true (an expiry too) */
	int expired;
	char option[64]; /* "" when none */
	char text[4096]; /* "" when none */
} agent_reply_t;

/* Sets up the stop pipe and SIGTERM/SIGINT handlers.  0 or -1. */
int agent_ctl_init(void);
/* Starts the stdin reader on fd (after the turn line was read from the same
 * buffer: leftover bytes are passed in).  0 or -1. */
int agent_ctl_start(int fd, const char *leftover, size_t leftover_len);
/* Stops and joins the reader. */
void agent_ctl_shutdown(void);

/* 1 once a stop was asked (SIGTERM, cancel line). Async-signal-safe. */
int agent_ctl_stopped(void);
/* Readable once a stop was asked; never read from it. */
int agent_ctl_stop_fd(void);
/* Asks for a stop (from any thread or a signal handler). */
void agent_ctl_stop(void);

/*
 * Waits for the reply to ask id, at most timeout_ms (<0: no limit).
 * Returns 1 with *out filled, 0 on timeout, -1 when stopped or stdin closed
 * before a reply came.
 */
int agent_ctl_wait_reply(const char *id, int timeout_ms, agent_reply_t *out);

#endif
