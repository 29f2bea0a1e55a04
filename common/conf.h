/*
 * common/conf.h - command-line flags with environment-variable twins.
 *
 * Each program describes its options once, in a table; the same table
 * drives parsing, --help and the docs.  Precedence: built-in default, then
 * the RUNNEL_* environment variable, then the flag.  Values are validated
 * here (integers in range, booleans) so that a typo fails at start with a
 * message naming the flag and its variable, never later.
 */
#ifndef RUNNEL_COMMON_CONF_H
#define RUNNEL_COMMON_CONF_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
	RN_OPT_STR,  /* dst: char **   (owned by the table's user, free with rn_conf_free) */
	RN_OPT_INT,  /* dst: long *    (checked against min..max) */
	RN_OPT_BOOL, /* dst: int *     (flag alone = 1; env/flag value true/false/1/0/yes/no) */
	RN_OPT_KV,   /* dst: rn_kv_list_t * (repeatable -X key=value; env: "k=v;k=v") */
} rn_opt_type_t;

typedef struct rn_kv {
	char *key;
	char *value;
} rn_kv_t;

typedef struct rn_kv_list {
	rn_kv_t *items;
	size_t n;
} rn_kv_list_t;

typedef struct rn_opt {
	const char *name; /* long flag without "--", e.g. "kafka-brokers" */
	char short_name;  /* e.g. 'X', or 0 */
	const char *env;  /* e.g. "RUNNEL_KAFKA_BROKERS", or NULL */
	rn_opt_type_t type;
	void *dst;
	const char *def;     /* default as text, or NULL (unset) */
	const char *metavar; /* e.g. "ADDR" for --help */
	const char *help;
	long min, max; /* RN_OPT_INT only */
} rn_opt_t;

#define RN_OPT_END \
	{ \
		NULL, 0, NULL, RN_OPT_STR, NULL, NULL, NULL, NULL, 0, 0 \
	}

/*
 * Applies defaults, the environment, then argv[*argi ...] up to the first
 * argument that is not an option (or after "--").  On return *argi indexes
 * the first positional argument.  Returns 0, 1 when --help/-h was given
 * (nothing else is guaranteed then), or -1 with errstr.
 */
int rn_conf_parse(const rn_opt_t *opts, int argc, char **argv, int *argi,
                  char *errstr, size_t errstr_size);

/* The option an argv word ("--name", "--name=value", "-X", "-Xvalue")
 * names, or NULL; *inline_val is the value the word carries, or NULL. */
const rn_opt_t *rn_conf_find(const rn_opt_t *opts, const char *word, const char **inline_val);

/* Prints the option table for --help. */
void rn_conf_usage(FILE *f, const rn_opt_t *opts);

/* Frees the strings and lists the table's destinations hold. */
void rn_conf_free(const rn_opt_t *opts);

/* Parses one "key=value" into a list (used for -X).  0 or -1. */
int rn_kv_list_add(rn_kv_list_t *l, const char *kv, char *errstr, size_t errstr_size);
void rn_kv_list_free(rn_kv_list_t *l);

#endif
