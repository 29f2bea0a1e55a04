/*
 * common/conf.c - flag and environment parsing for every runnel program.
 */
#include "conf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int parse_bool(const char *s, int *out)
{
	if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) {
		*out = 1;
		return 0;
	}
	if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) {
		*out = 0;
		return 0;
	}
	return -1;
}

void rn_kv_list_free(rn_kv_list_t *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->items[i].key);
		free(l->items[i].value);
	}
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

int rn_kv_list_add(rn_kv_list_t *l, const char *kv, char *errstr, size_t errstr_size)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv) {
		snprintf(errstr, errstr_size, "expected key=value, got \"%.64s\"", kv);
		return -1;
	}
	rn_kv_t *items = realloc(l->items, (l->n + 1) * sizeof(*items));
	if (!items) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	l->items = items;
	items[l->n].key = strndup(kv, (size_t)(eq - kv));
	items[l->n].value = strdup(eq + 1);
	if (!items[l->n].key || !items[l->n].value) {
		free(items[l->n].key);
		free(items[l->n].value);
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	l->n++;
	return 0;
}

/* Applies one textual value to an option; "src" names where it came from. */
static int opt_apply(const rn_opt_t *o, const char *val, const char *src,
                     char *errstr, size_t errstr_size)
{
	char err[160];

	switch (o->type) {
	case RN_OPT_STR: {
		char **dst = o->dst;
		char *copy = strdup(val);
		if (!copy) {
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
		free(*dst);
		*dst = copy;
		return 0;
	}
	case RN_OPT_INT: {
		char *end = NULL;
		errno = 0;
		long v = strtol(val, &end, 10);
		if (errno || end == val || *end != '\0') {
			snprintf(errstr, errstr_size, "%s: \"%.32s\" is not an integer", src, val);
			return -1;
		}
		if (v < o->min || v > o->max) {
			snprintf(errstr, errstr_size, "%s: %ld is out of range %ld..%ld", src, v, o->min, o->max);
			return -1;
		}
		*(long *)o->dst = v;
		return 0;
	}
	case RN_OPT_BOOL:
		if (parse_bool(val, o->dst) < 0) {
			snprintf(errstr, errstr_size, "%s: \"%.32s\" is not a boolean (true/false)", src, val);
			return -1;
		}
		return 0;
	case RN_OPT_KV: {
		/* The environment form is a ';'-separated list; a flag is one pair. */
		char *copy = strdup(val);
		if (!copy) {
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
		char *save = NULL;
		for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
			if (rn_kv_list_add(o->dst, tok, err, sizeof(err)) < 0) {
				snprintf(errstr, errstr_size, "%s: %s", src, err);
				free(copy);
				return -1;
			}
		}
		free(copy);
		return 0;
	}
	}
	return -1;
}

int rn_conf_parse(const rn_opt_t *opts, int argc, char **argv, int *argi,
                  char *errstr, size_t errstr_size)
{
	char src[96];

	for (const rn_opt_t *o = opts; o->name; o++) {
		if (o->def && opt_apply(o, o->def, o->name, errstr, errstr_size) < 0)
			return -1;
		const char *ev = o->env ? getenv(o->env) : NULL;
		if (ev && *ev) {
			if (o->type == RN_OPT_KV)
				rn_kv_list_free(o->dst);
			if (opt_apply(o, ev, o->env, errstr, errstr_size) < 0)
				return -1;
		}
	}

	int i = *argi;
	while (i < argc) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break;
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;

		const char *val = NULL;
		const rn_opt_t *hit = rn_conf_find(opts, a, &val);
		if (!hit) {
			snprintf(errstr, errstr_size, "unknown option %.64s (see --help)", a);
			return -1;
		}
		snprintf(src, sizeof(src), "--%s", hit->name);
		if (!val) {
			if (hit->type == RN_OPT_BOOL) {
				*(int *)hit->dst = 1;
				i++;
				continue;
			}
			if (i + 1 >= argc) {
				snprintf(errstr, errstr_size, "%s needs a value", src);
				return -1;
			}
			val = argv[++i];
		}
		if (opt_apply(hit, val, src, errstr, errstr_size) < 0)
			return -1;
		i++;
	}
	*argi = i;
	return 0;
}

const rn_opt_t *rn_conf_find(const rn_opt_t *opts, const char *word, const char **inline_val)
{
	*inline_val = NULL;
	if (word[1] == '-') {
		const char *name = word + 2;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		for (const rn_opt_t *o = opts; o->name; o++) {
			if (strlen(o->name) == nlen && !strncmp(o->name, name, nlen)) {
				*inline_val = eq ? eq + 1 : NULL;
				return o;
			}
		}
		return NULL;
	}
	for (const rn_opt_t *o = opts; o->name; o++) {
		if (o->short_name && o->short_name == word[1]) {
			*inline_val = word[2] != '\0' ? word + 2 : NULL;
			return o;
		}
	}
	return NULL;
}

void rn_conf_usage(FILE *f, const rn_opt_t *opts)
{
	for (const rn_opt_t *o = opts; o->name; o++) {
		char flag[96];
		if (o->short_name)
			snprintf(flag, sizeof(flag), "-%c, --%s%s%s", o->short_name, o->name,
			         o->type == RN_OPT_BOOL ? "" : " ", o->type == RN_OPT_BOOL ? "" : (o->metavar ? o->metavar : "VALUE"));
		else
			snprintf(flag, sizeof(flag), "    --%s%s%s", o->name,
			         o->type == RN_OPT_BOOL ? "" : " ", o->type == RN_OPT_BOOL ? "" : (o->metavar ? o->metavar : "VALUE"));
		fprintf(f, "  %-34s %s\n", flag, o->help ? o->help : "");
		if (o->env || o->def)
			fprintf(f, "  %-34s %s%s%s%s%s\n", "", o->env ? "env " : "", o->env ? o->env : "",
			        o->env && o->def ? ", " : "", o->def ? "default " : "", o->def ? o->def : "");
	}
}

void rn_conf_free(const rn_opt_t *opts)
{
	for (const rn_opt_t *o = opts; o->name; o++) {
		if (o->type == RN_OPT_STR) {
			char **dst = o->dst;
			free(*dst);
			*dst = NULL;
		} else if (o->type == RN_OPT_KV) {
			rn_kv_list_free(o->dst);
		}
	}
}
