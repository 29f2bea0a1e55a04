/*
 * cli/view.h - how `runnel tail` shows a run's envelope lines.
 *
 *   JSON  - each stream line verbatim, one per line (for scripts).
 *   PLAIN - one readable line per event, append-only (pipes, logs).
 *   LIVE  - a terminal view: each step is one row that updates in place
 *           (running with a spinner and elapsed time, then succeeded or
 *           failed with its duration), log lines dimmed, a footer with the
 *           run's elapsed time, and the result or error at the end.
 *
 * A cli_view_t writes to one FILE it does not own.  Not thread-safe.
 */
#ifndef RUNNEL_CLI_VIEW_H
#define RUNNEL_CLI_VIEW_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
	CLI_VIEW_JSON = 0,
	CLI_VIEW_PLAIN,
	CLI_VIEW_LIVE,
} cli_view_mode_t;

typedef struct cli_view cli_view_t;

/* cols/rows: the terminal size for LIVE (0 = ask the terminal, else 80x24).
 * run_id is copied.  NULL on allocation failure. */
cli_view_t *cli_view_new(cli_view_mode_t mode, FILE *out, const char *run_id, int cols, int rows);
void cli_view_free(cli_view_t *v);

/*
 * Shows one line of the run's stream (the JSON text of field "line").
 * Returns 0 for a non-terminal line, 1 when the line is the run's `result`,
 * 2 when it is its `error`.
 */
int cli_view_line(cli_view_t *v, const char *line, size_t len);

/* Sets the footer's status word ("waiting for a worker", "running"); LIVE only. */
void cli_view_status(cli_view_t *v, const char *status);

/* Redraws the spinner, running steps and the footer; call every ~100 ms (LIVE only). */
void cli_view_tick(cli_view_t *v);

/* Removes the footer and restores the cursor; call once at the end (also on Ctrl-C). */
void cli_view_finish(cli_view_t *v);

/* Formats a duration: "412ms", "3.4s", "2m05s", "1h02m".  Returns buf. */
char *cli_view_duration(char *buf, size_t size, long long ms);

#endif
