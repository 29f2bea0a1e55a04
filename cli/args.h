/*
 * cli/args.h - one verb's command line: options (common/conf.h tables, so
 * each flag keeps its RUNNEL_* twin) mixed freely with positional
 * arguments, --help, and the exact usage-error messages.
 */
#ifndef RUNNEL_CLI_ARGS_H
#define RUNNEL_CLI_ARGS_H

#include <stdio.h>

#include "common/conf.h"

#define CLI_ARGS_POS_MAX 4

typedef struct cli_verb {
	const char *name;     /* "tail" */
	const char *synopsis; /* "[options] RUN" */
	const char *summary;  /* one sentence for --help and `runnel --help` */
	const char *epilog;   /* extra --help text (exit codes, examples) or NULL */
	const char *pos_name; /* "RUN", or NULL when the verb takes none */
	const rn_opt_t *opts;
	int pos_min, pos_max;
} cli_verb_t;

typedef struct cli_args {
	const char *pos[CLI_ARGS_POS_MAX]; /* borrowed from argv */
	int npos;
} cli_args_t;

/*
 * Parses argv (argv[0] = verb name) against the verb's table.  Options may
 * come before or after positional arguments; "--" ends options.  Returns 0,
 * 1 after printing --help on stdout (exit 0), or -1 after printing a usage
 * error on stderr (exit CLI_EXIT_USAGE):
 *   runnel VERB: <reason>
 *   usage: runnel VERB SYNOPSIS (see runnel VERB --help)
 */
int cli_args_parse(const cli_verb_t *v, int argc, char **argv, cli_args_t *out);

/* Prints a usage error in the format above; always returns CLI_EXIT_USAGE. */
int cli_args_usage_error(const cli_verb_t *v, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Prints the verb's --help. */
void cli_args_help(FILE *f, const cli_verb_t *v);

/* Checks a positional run id; prints the usage error and returns -1 when bad. */
int cli_args_check_run_id(const cli_verb_t *v, const char *run_id);

/* Checks a redis:// URL option; prints the usage error and returns -1 when bad. */
int cli_args_check_redis_url(const cli_verb_t *v, const char *flag, const char *url);

#endif
