/*
 * cli/devproc.h - the child processes `runnel dev` starts (redis-server,
 * runnel-dispatcher, runnel-worker) and the scratch it leaves behind:
 * each child runs in its own process group with PR_SET_PDEATHSIG(SIGKILL)
 * and its output in a log file, so that Ctrl-C stops them in order and
 * even a killed `runnel dev` takes them down.
 *
 * @locality main thread (the PDEATHSIG of a child fires when the thread
 * that forked it exits).
 */
#ifndef RUNNEL_CLI_DEVPROC_H
#define RUNNEL_CLI_DEVPROC_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct cli_proc {
	pid_t pid;     /* 0 when not started or reaped */
	char name[32]; /* "redis-server", "dispatcher", "worker" */
	char log_path[PATH_MAX];
	int status; /* raw waitpid status once reaped */
} cli_proc_t;

/*
 * Forks and execs argv[0] (a path) with envp, stdin from /dev/null, stdout
 * and stderr appended to log_path.  An exec failure is reported through a
 * CLOEXEC pipe, not guessed.  0, or -1 with errstr.
 */
int cli_proc_spawn(cli_proc_t *p, const char *name, char *const argv[], char *const envp[],
                   const char *log_path, char *errstr, size_t errstr_size);

/* 1 while running; 0 once exited (reaped, status kept; whatever it left
 * in its process group is SIGKILLed then). */
int cli_proc_alive(cli_proc_t *p);

/* Sends sig to the child's process group, waits up to grace_ms, then
 * SIGKILLs the group and reaps.  Returns the raw status or -1. */
int cli_proc_stop(cli_proc_t *p, int sig, int grace_ms);

/* Prints the last `lines` lines of the child's log, indented. */
void cli_proc_log_tail(const cli_proc_t *p, FILE *f, int lines);

/* Describes a raw wait status: "exit 1", "signal 9". */
void cli_proc_describe(int status, char *buf, size_t size);

/* The environment for a child: this process's, minus every name that
 * overrides set, plus overrides ("NAME=value", NULL-terminated).  Free
 * with cli_env_free.  NULL when out of memory. */
char **cli_env_build(const char *const overrides[]);
void cli_env_free(char **env);

/* A loopback TCP port that was free a moment ago, or -1. */
int cli_free_port(void);
/* 1 when 127.0.0.1:port can be bound now. */
int cli_port_free(int port);

/* Removes a directory tree (no symlinks followed).  0 or -1. */
int cli_rm_rf(const char *dir);

/* Full path of an executable: name itself when it has a '/', else the
 * first match on PATH.  0 with out filled, or -1. */
int cli_which(const char *name, char *out, size_t size);

#endif
