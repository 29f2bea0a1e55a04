/*
 * cli/args.c - command-line parsing shared by every verb: positional
 * arguments may sit anywhere among the flags, which common/conf.c alone
 * does not allow (it stops at the first positional argument).
 */
#include "args.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/util.h"
#include "proto/keys.h"

void cli_args_help(FILE *f, const cli_verb_t *v)
{
	fprintf(f, "usage: runnel %s %s\n\n%s\n\noptions:\n", v->name, v->synopsis, v->summary);
	rn_conf_usage(f, v->opts);
	fprintf(f, "  %-34s %s\n", "-h, --help", "show this help");
	if (v->epilog)
		fprintf(f, "\n%s", v->epilog);
}

int cli_args_usage_error(const cli_verb_t *v, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "runnel %s: %s\nusage: runnel %s %s (see runnel %s --help)\n",
	        v->name, msg, v->name, v->synopsis, v->name);
	return CLI_EXIT_USAGE;
}

int cli_args_check_run_id(const cli_verb_t *v, const char *run_id)
{
	if (proto_run_id_valid(run_id))
		return 0;
	cli_args_usage_error(v, "invalid run id \"%.80s\" (expected 1-64 of A-Z a-z 0-9 _ -)", run_id);
	return -1;
}

int cli_args_check_redis(const cli_verb_t *v, const char *url, const char *prefix)
{
	rn_redis_url_t u;
	char err[200];

	if (url) {
		if (rn_redis_url_parse(url, &u, err, sizeof(err)) < 0) {
			cli_args_usage_error(v, "--redis-url: %s", err);
			return -1;
		}
		memset(u.password, 0, sizeof(u.password));
	}
	if (!proto_key_prefix_valid(prefix)) {
		cli_args_usage_error(v, "--key-prefix: invalid prefix \"%.70s\"", prefix);
		return -1;
	}
	return 0;
}

int cli_args_check_choice(const cli_verb_t *v, const char *flag, const char *val, const char *a,
                          const char *b)
{
	if (!strcmp(val, a) || !strcmp(val, b))
		return 0;
	cli_args_usage_error(v, "--%s: expected %s or %s, got \"%.40s\"", flag, a, b, val);
	return -1;
}

int cli_args_begin(const cli_verb_t *v, int argc, char **argv, cli_args_t *out, int *exit_code)
{
	int rc = cli_args_parse(v, argc, argv, out);
	if (rc == 0)
		return 0;
	rn_conf_free(v->opts);
	*exit_code = rc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
	return 1;
}

int cli_args_parse(const cli_verb_t *v, int argc, char **argv, cli_args_t *out)
{
	char err[256];
	int rc = -1;

	memset(out, 0, sizeof(*out));
	/* Reorder into: name, options..., "--", positionals...  (+1 for NULL). */
	char **av = calloc((size_t)argc + 2, sizeof(*av));
	if (!av) {
		fprintf(stderr, "runnel %s: out of memory\n", v->name);
		return -1;
	}
	int n = 0, npos = 0;
	const char *pos[CLI_ARGS_POS_MAX + 1];
	av[n++] = argv[0];
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			for (i++; i < argc; i++) {
				if (npos > CLI_ARGS_POS_MAX)
					break;
				pos[npos++] = argv[i];
			}
			break;
		}
		if (a[0] == '-' && a[1] != '\0') {
			if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
				cli_args_help(stdout, v);
				rc = 1;
				goto out;
			}
			const char *inline_val;
			const rn_opt_t *o = rn_conf_find(v->opts, a, &inline_val);
			if (!o) {
				cli_args_usage_error(v, "unknown option %.64s", a);
				goto out;
			}
			av[n++] = argv[i];
			if (!inline_val && o->type != RN_OPT_BOOL) {
				if (i + 1 >= argc) {
					cli_args_usage_error(v, "--%s needs a value", o->name);
					goto out;
				}
				av[n++] = argv[++i];
			}
			continue;
		}
		if (npos > CLI_ARGS_POS_MAX)
			break;
		pos[npos++] = a;
	}
	av[n] = NULL;

	int argi = 1;
	int prc = rn_conf_parse(v->opts, n, av, &argi, err, sizeof(err));
	if (prc < 0) {
		cli_args_usage_error(v, "%s", err);
		goto out;
	}
	if (npos < v->pos_min) {
		cli_args_usage_error(v, "missing %s", v->pos_name ? v->pos_name : "argument");
		goto out;
	}
	if (npos > v->pos_max) {
		cli_args_usage_error(v, "unexpected argument \"%.64s\"", pos[v->pos_max]);
		goto out;
	}
	for (int i = 0; i < npos; i++)
		out->pos[i] = pos[i];
	out->npos = npos;
	rc = 0;
out:
	free(av);
	return rc;
}
