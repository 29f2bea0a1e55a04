/*
 * tests/cli/clirun.h - runs the `runnel` binary as a child for the CLI
 * tests: separate stdout and stderr (or a pseudo-terminal), a private
 * environment, an exit status, and a kill on timeout.  Plus a tiny
 * terminal emulator that turns what the TTY view wrote into the final
 * screen text.
 */
#ifndef RUNNEL_TESTS_CLI_CLIRUN_H
#define RUNNEL_TESTS_CLI_CLIRUN_H

#include <stddef.h>
#include <sys/types.h>

/* A NULL-terminated list literal: ARGS("tail", "--json"). */
#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

typedef struct clirun {
	pid_t pid;
	int out_fd, err_fd; /* -1 once closed; with a pty err_fd is -1 */
	char *out, *err;    /* NUL-terminated, malloc'd */
	size_t out_len, err_len;
	int exit_code; /* exit status, 128+signal, or -1 on timeout */
} clirun_t;

/*
 * Starts argv (argv[0] a path) through th_spawn_opts: th_spawn's minimal
 * environment (PATH, HOME, TMPDIR, LANG, sanitizer options) plus env
 * ("NAME=value", NULL-terminated, may be NULL; a NAME given here wins).  With cols > 0 the child gets a pseudo-terminal of
 * cols x rows as stdin/stdout/stderr.  0 or -1.
 */
int clirun_start(clirun_t *p, const char *const argv[], const char *const env[], int cols, int rows);

/* Reads output until the child exits or timeout_ms passes (then SIGKILL to
 * its group).  Returns the exit code (also in p->exit_code), -1 on timeout. */
int clirun_wait(clirun_t *p, int timeout_ms);

/* Sends sig to the child. */
void clirun_signal(clirun_t *p, int sig);

/* Reads whatever output is available for up to ms without waiting for exit. */
void clirun_pump(clirun_t *p, int ms);

/* start + wait. */
int clirun(const char *const argv[], const char *const env[], int timeout_ms, clirun_t *p);

/*
 * The CLI tests' one way to run a verb: bin, then the words pre (the verb,
 * NULL-terminated, may be NULL), then args; the environment is base_env (the
 * test's defaults: server URLs) then env (the call's own, which win over a
 * default of the same name).  Lists hold at most CLIRUN_ARGV_MAX - 1 entries
 * together.  start + wait; -1 when the lists are too long or on a spawn error.
 */
#define CLIRUN_ARGV_MAX 48
int clirun_argv(const char *bin, const char *const pre[], const char *const args[],
                const char *const base_env[], const char *const env[], int timeout_ms, clirun_t *p);

void clirun_free(clirun_t *p);

/*
 * Replays terminal output (UTF-8 text, CR, LF, BS, CSI n A/B/C/D/K/J, SGR
 * and private modes ignored) on a terminal cols wide and rows high whose
 * scrolled-off lines are kept (cursor-up stops at the top of the visible
 * screen, as on a real terminal), and returns everything as text: rows
 * joined with '\n', trailing spaces trimmed.  rows <= 0: unbounded.
 * Caller frees.
 */
char *vt_screen(const char *bytes, size_t len, int cols);
char *vt_screen_rows(const char *bytes, size_t len, int cols, int rows);

#endif
