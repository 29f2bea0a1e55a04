/*
 * cli/tail.h - following one run's output stream in Redis until its
 * terminal line; shared by `runnel tail`, `runnel submit` and `runnel dev`.
 */
#ifndef RUNNEL_CLI_TAIL_H
#define RUNNEL_CLI_TAIL_H

#include "view.h"

typedef struct cli_tail_req {
	const char *verb; /* for messages: "tail", "submit", "dev" */
	const char *redis_url;
	const char *prefix;
	const char *run_id;
	const char *after; /* stream id to resume after (exclusive), NULL = start */
	cli_view_mode_t mode;
	int wait_ms; /* an unknown run: 0 exits CLI_EXIT_NOT_FOUND at once,
	                                N > 0 waits up to N ms for it to appear, -1 waits
	                                as long as it takes (a job still in Kafka) */
} cli_tail_req_t;

/*
 * Prints the run's lines through a view until the terminal line, Ctrl-C or
 * a Redis failure.  A lost connection is re-established for up to 10 s and
 * the tail resumes after the last entry shown, so no line is lost or
 * shown twice.  Returns the exit code: CLI_EXIT_OK (result),
 * CLI_EXIT_RUN_ERROR (error line), CLI_EXIT_NOT_FOUND, CLI_EXIT_UNREACHABLE
 * or CLI_EXIT_INTERRUPTED.  Messages go to stderr as "runnel VERB: ...".
 * The caller installs cli_interrupt_install() first if Ctrl-C should stop it.
 */
int cli_tail_follow(const cli_tail_req_t *req);

/* Picks the view for stdout: JSON with --json, LIVE on a terminal (unless
 * TERM=dumb), else PLAIN. */
cli_view_mode_t cli_tail_mode(int json);

#endif
