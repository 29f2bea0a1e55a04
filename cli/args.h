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

/*
 * The flags several verbs share, written once so that each keeps one name,
 * one variable and one default in every verb; only the help text (which
 * says what the verb uses it for) differs.
 */
#define CLI_REDIS_URL_DEFAULT "redis://127.0.0.1:6379"
#define CLI_OPT_REDIS_URL(dst, def, help) \
	{ \
		"redis-url", 0, "RUNNEL_REDIS_URL", RN_OPT_STR, (dst), (def), "URL", (help), 0, 0 \
	}
#define CLI_OPT_KEY_PREFIX(dst) \
	{ \
		"key-prefix", 0, "RUNNEL_KEY_PREFIX", RN_OPT_STR, (dst), "runnel", "PREFIX", "Redis key prefix", 0, 0 \
	}
#define CLI_OPT_DISPATCHER_URL(dst, help) \
	{ \
		"dispatcher-url", 0, "RUNNEL_DISPATCHER_URL", RN_OPT_STR, (dst), "http://127.0.0.1:8080", "URL", (help), 0, 0 \
	}
#define CLI_OPT_API_TOKEN(dst, help) \
	{ \
		"api-token", 0, "RUNNEL_API_TOKEN", RN_OPT_STR, (dst), NULL, "TOKEN", (help), 0, 0 \
	}
#define CLI_OPT_JSON(dst, help) \
	{ \
		"json", 0, "RUNNEL_JSON", RN_OPT_BOOL, (dst), "false", NULL, (help), 0, 0 \
	}

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

/*
 * The start of every verb's main: cli_args_parse(), and when the verb must
 * stop there (after --help or a usage error) frees the option values and
 * returns 1 with *exit_code set (CLI_EXIT_OK or CLI_EXIT_USAGE).  Returns 0
 * when the verb goes on; it then frees the values itself (rn_conf_free).
 */
int cli_args_begin(const cli_verb_t *v, int argc, char **argv, cli_args_t *out, int *exit_code);

/* Prints a usage error in the format above; always returns CLI_EXIT_USAGE. */
int cli_args_usage_error(const cli_verb_t *v, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Prints the verb's --help. */
void cli_args_help(FILE *f, const cli_verb_t *v);

/* Checks a positional run id; prints the usage error and returns -1 when bad. */
int cli_args_check_run_id(const cli_verb_t *v, const char *run_id);

/*
 * Checks the Redis flags of a verb that talks to Redis: --redis-url (not
 * when NULL: unset) and --key-prefix.  Prints the usage error and returns -1
 * when one is bad.
 */
int cli_args_check_redis(const cli_verb_t *v, const char *url, const char *prefix);

/*
 * Checks that a flag's value is one of two words; prints the usage error
 * (--FLAG: expected A or B, got "VAL") and returns -1 when not.
 */
int cli_args_check_choice(const cli_verb_t *v, const char *flag, const char *val, const char *a,
                          const char *b);

#endif
