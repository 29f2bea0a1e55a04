/*
 * tests/builtin/agentproc.h - runs runnel-agent the way the worker does:
 * the turn line on a stdin pipe that stays open for control lines, stdout
 * collected, stderr passed through.  The child is in its own process group
 * with PR_SET_PDEATHSIG (th_spawn_opts), and ap_free kills the group.
 */
#ifndef RUNNEL_TESTS_BUILTIN_AGENTPROC_H
#define RUNNEL_TESTS_BUILTIN_AGENTPROC_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

typedef struct ap {
	pid_t pid;
	int in_fd, out_fd;
	char *out; /* stdout so far, NUL-terminated */
	size_t out_len;
	int eof;
	int status; /* waitpid status once reaped */
	int reaped;
} ap_t;

/* Starts bin with args (NULL-terminated, may be NULL) and env
 * (NULL-terminated "NAME=value", added to PATH and the sanitizer options),
 * writes turn plus a newline.  0 or -1. */
int ap_start(ap_t *a, const char *bin, const char *const *args, const char *const *env, const char *turn);
/* Writes a control line (a newline is added).  0 or -1. */
int ap_write(ap_t *a, const char *line);
/* Reads stdout until it contains needle.  1, or 0 at the deadline / EOF. */
int ap_wait_for(ap_t *a, const char *needle, int timeout_ms);
/* Closes stdin (unless keep_stdin), reads to EOF and reaps.  0, or -1 at
 * the deadline. */
int ap_finish(ap_t *a, int timeout_ms);
/* The stdout lines as parsed JSON (array, new reference). */
json_t *ap_lines(const ap_t *a);
/* The last line's type and code ("" when absent). */
void ap_last(const ap_t *a, char *type, size_t ts, char *code, size_t cs);
void ap_free(ap_t *a);

#endif
