/*
 * cli/status.c - `runnel status RUN`: the run's state hash from Redis, as
 * a table for people or as JSON for scripts.  `runnel status` without a
 * run: the run-time queue by tenant (common/runqueue.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "args.h"
#include "common/runqueue.h"
#include "cli.h"
#include "proto/keys.h"
#include "rconn.h"
#include "view.h"

static struct {
	char *redis_url;
	char *prefix;
	int json;
} g_opt;

static const rn_opt_t status_opts[] = {
	CLI_OPT_JSON(&g_opt.json, "print the state as one JSON object"),
	CLI_OPT_REDIS_URL(&g_opt.redis_url, CLI_REDIS_URL_DEFAULT, "Redis holding the run state"),
	CLI_OPT_KEY_PREFIX(&g_opt.prefix),
	RN_OPT_END,
};

static const cli_verb_t status_verb = {
	.name = "status",
	.synopsis = "[options] [RUN]",
	.summary = "Show a run's state (status, tenant, worker, times, error code) from Redis;\n"
	           "without RUN, the run-time queue by tenant and the workers' warm agents.",
	.epilog = "exit status: 0 found, 2 usage, 3 unknown run, 4 Redis unreachable\n",
	.pos_name = "RUN",
	.opts = status_opts,
	.pos_min = 0,
	.pos_max = 1,
};

/* Fields holding milliseconds since the epoch (or a count): shown as
 * numbers in JSON. */
static int numeric_field(const char *name)
{
	static const char *const names[] = { "lease_until", "enqueued_at", "started_at", "ended_at",
		                             "out_seq_base", "priority", "webhook_attempts", NULL };
	for (int i = 0; names[i]; i++)
		if (!strcmp(name, names[i]))
			return 1;
	return 0;
}

static int time_field(const char *name)
{
	return numeric_field(name) && strcmp(name, "out_seq_base") && strcmp(name, "priority") &&
	        strcmp(name, "webhook_attempts");
}

/* "2026-11-26T00:13:33.123Z" for ms since the epoch. */
static void fmt_time(char *buf, size_t size, long long ms)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	char t[32];
	gmtime_r(&s, &tm);
	strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, size, "%s.%03lldZ", t, ms % 1000);
}

static int parse_ll(const char *s, long long *out)
{
	char *end = NULL;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end)
		return -1;
	*out = v;
	return 0;
}

static const char *hash_get(const redisReply *h, const char *field)
{
	for (size_t i = 0; i + 1 < h->elements; i += 2)
		if (h->element[i]->type == REDIS_REPLY_STRING && !strcmp(h->element[i]->str, field) &&
		    h->element[i + 1]->type == REDIS_REPLY_STRING)
			return h->element[i + 1]->str;
	return NULL;
}

static void print_json(const char *run_id, const redisReply *h, long long lines)
{
	json_t *o = json_object();
	json_object_set_new(o, "run_id", json_string(run_id));
	if (!hash_get(h, "status"))
		json_object_set_new(o, "status", json_string("unknown"));
	for (size_t i = 0; i + 1 < h->elements; i += 2) {
		const char *k = h->element[i]->str, *val = h->element[i + 1]->str;
		long long n;
		if (!k || !val)
			continue;
		json_t *u = !strcmp(k, "usage") ? json_loads(val, 0, NULL) : NULL;
		if (json_is_object(u))
			json_object_set_new(o, k, u); /* the SPEC §4 object, not its text */
		else if (json_decref(u), numeric_field(k) && parse_ll(val, &n) == 0)
			json_object_set_new(o, k, json_integer(n));
		else
			json_object_set_new(o, k, json_string(val));
	}
	const char *tp = hash_get(h, "traceparent");
	if (tp && strlen(tp) == 55)
		json_object_set_new(o, "trace_id", json_stringn(tp + 3, 32));
	json_object_set_new(o, "lines", json_integer(lines));
	char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

static void print_table(const char *run_id, const redisReply *h, long long lines)
{
	static const char *const order[] = { "status", "code", "tenant", "priority", "worker", "enqueued_at",
		                             "started_at", "ended_at", "lease_until", "idempotency_key", NULL };
	/* Shown in their own words below (the webhook's URL may hold a token). */
	static const char *const own[] = { "traceparent", "webhook", "webhook_state", "webhook_attempts",
		                           "webhook_error", NULL };
	char tbuf[64], dur[32];
	long long a, b;

	printf("%-12s %s\n", "run", run_id);
	if (!hash_get(h, "status"))
		printf("%-12s %s\n", "status", "unknown (no state yet)");
	for (int i = 0; order[i]; i++) {
		const char *val = hash_get(h, order[i]);
		if (!val || !*val)
			continue;
		if (time_field(order[i]) && parse_ll(val, &a) == 0) {
			if (a <= 0)
				continue; /* "never" (e.g. a lease already released) */
			fmt_time(tbuf, sizeof(tbuf), a);
			printf("%-12s %s\n", order[i], tbuf);
		} else {
			printf("%-12s %s\n", order[i], val);
		}
	}
	const char *tp = hash_get(h, "traceparent");
	if (tp && strlen(tp) == 55)
		printf("%-12s %.32s\n", "trace_id", tp + 3);
	if (hash_get(h, "webhook")) {
		const char *ws = hash_get(h, "webhook_state"), *wa = hash_get(h, "webhook_attempts"),
		           *we = hash_get(h, "webhook_error");
		printf("%-12s %s", "webhook", ws ? ws : "waiting for the run's end");
		if (wa)
			printf(", %s attempt(s)", wa);
		if (we && *we)
			printf(", last error: %s", we);
		printf("\n");
	}
	const char *st = hash_get(h, "started_at"), *en = hash_get(h, "ended_at");
	if (st && en && parse_ll(st, &a) == 0 && parse_ll(en, &b) == 0 && b >= a)
		printf("%-12s %s\n", "duration", cli_view_duration(dur, sizeof(dur), b - a));
	/* What the run's model calls used (the model gateway). */
	const char *us = hash_get(h, "usage");
	json_t *u = us ? json_loads(us, 0, NULL) : NULL;
	if (json_is_object(u))
		printf("%-12s %lld requests, %lld input + %lld output tokens (cache: %lld read, %lld written)\n", "usage",
		       (long long)json_integer_value(json_object_get(u, "requests")),
		       (long long)json_integer_value(json_object_get(u, "input_tokens")),
		       (long long)json_integer_value(json_object_get(u, "output_tokens")),
		       (long long)json_integer_value(json_object_get(u, "cache_read_input_tokens")),
		       (long long)json_integer_value(json_object_get(u, "cache_creation_input_tokens")));
	json_decref(u);
	/* Fields a newer runnel may add: shown as they are. */
	for (size_t i = 0; i + 1 < h->elements; i += 2) {
		const char *k = h->element[i]->str;
		if (!k)
			continue;
		int known = !strcmp(k, "out_seq_base") || !strcmp(k, "usage");
		for (int j = 0; order[j] && !known; j++)
			known = !strcmp(k, order[j]);
		for (int j = 0; own[j] && !known; j++)
			known = !strcmp(k, own[j]);
		if (!known)
			printf("%-12s %s\n", k, h->element[i + 1]->str ? h->element[i + 1]->str : "");
	}
	printf("%-12s %lld\n", "lines", lines);
}

/*
 * A queued run of a tenant that used tokens this hour: says so, since a
 * tenant over its hourly token budget starts no run until the hour turns
 * (the budget itself is the workers' setting).  Table output only.
 */
static void print_waiting(rn_rcluster_t *c, const redisReply *h)
{
	const char *st = hash_get(h, "status"), *tenant = hash_get(h, "tenant");
	if (g_opt.json || !st || strcmp(st, "queued"))
		return;
	char key[256];
	snprintf(key, sizeof(key), RN_RUNQUEUE_TOKENS_FMT, g_opt.prefix, tenant && *tenant ? tenant : "default",
	         (long long)(time(NULL) / 3600));
	redisReply *r = rn_rcluster_command(c, 0, "GET %s", key);
	long long n = 0;
	if (r && r->type == REDIS_REPLY_STRING && parse_ll(r->str, &n) == 0 && n > 0)
		printf("%-12s its tenant used %lld model tokens this hour; a tenant over its hourly token budget starts "
		       "no run until the hour turns\n",
		       "waiting", n);
	if (r)
		freeReplyObject(r);
}

/* Seconds with one decimal: "0.0s", "12.3s". */
static const char *secs(char *buf, size_t size, long long ms)
{
	snprintf(buf, size, "%lld.%llds", ms / 1000, (ms % 1000) / 100);
	return buf;
}

/* Each live worker's warm agents (RN_WARM_AGENTS_FMT) as {worker: {name:
 * {ready, wanted}}}; an empty object when there are none. */
static json_t *warm_agents(rn_rcluster_t *c)
{
	char key[256];
	snprintf(key, sizeof(key), RN_WARM_AGENTS_FMT, g_opt.prefix);
	json_t *out = json_object();
	redisReply *r = rn_rcluster_command(c, 0, "HGETALL %s", key);
	long long now = (long long)time(NULL) * 1000;
	for (size_t i = 0; out && r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		const redisReply *f = r->element[i], *v = r->element[i + 1];
		json_t *o = f->str && v->str ? json_loads(v->str, 0, NULL) : NULL;
		json_t *agents = json_object_get(o, "agents");
		long long at = (long long)json_integer_value(json_object_get(o, "at"));
		/* A worker gone without removing its entry stops showing. */
		if (json_is_object(agents) && at + RN_WARM_AGENTS_STALE_MS >= now)
			json_object_set(out, f->str, agents);
		json_decref(o);
	}
	if (r)
		freeReplyObject(r);
	return out;
}

/* "warm agents  worker-1: claude 2/2 ready, codex 1/1 ready" per worker. */
static void print_warm(const json_t *w)
{
	const char *worker, *name;
	json_t *agents, *a;
	json_object_foreach((json_t *)w, worker, agents)
	{
		printf("%-12s %s:", "warm agents", worker);
		int first = 1;
		json_object_foreach(agents, name, a)
		{
			printf("%s %s %lld/%lld ready", first ? "" : ",", name,
			       (long long)json_integer_value(json_object_get(a, "ready")),
			       (long long)json_integer_value(json_object_get(a, "wanted")));
			first = 0;
		}
		printf("\n");
	}
}

/* The queue by tenant (deepest first).  Returns a CLI exit code. */
static int print_queue(rn_rcluster_t *c)
{
	char err[256], b1[32];
	rn_queue_stats_t st;
	if (rn_runqueue_stats(c, g_opt.prefix, (size_t)-1, &st, err, sizeof(err)) < 0) {
		fprintf(stderr, "runnel status: %s\n", err);
		return CLI_EXIT_UNREACHABLE;
	}
	if (g_opt.json) {
		json_t *o = json_pack("{s:I,s:I,s:I,s:[]}", "queued", (json_int_t)st.depth,
		                      "taken", (json_int_t)st.inflight, "oldest_ms", (json_int_t)st.oldest_ms,
		                      "tenants");
		json_t *byp = json_object();
		for (int p = 9; p >= 0; p--) {
			char name[4];
			snprintf(name, sizeof(name), "%d", p);
			if (st.by_priority[p] > 0)
				json_object_set_new(byp, name, json_integer(st.by_priority[p]));
		}
		json_object_set_new(o, "by_priority", byp);
		json_object_set_new(o, "warm_agents", warm_agents(c));
		json_t *arr = json_object_get(o, "tenants");
		for (size_t i = 0; i < st.nlisted; i++)
			json_array_append_new(arr, json_pack("{s:s,s:I,s:I,s:I}", "tenant", st.tenants[i].name, "queued", (json_int_t)st.tenants[i].queued, "running", (json_int_t)st.tenants[i].running, "oldest_ms", (json_int_t)st.tenants[i].oldest_ms));
		char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(o);
	} else if (st.depth == 0 && st.nlisted == 0) {
		printf("queue empty (%lld run(s) being taken)\n", (long long)st.inflight);
	} else {
		printf("%lld run(s) queued, oldest %s, %lld being taken\n", (long long)st.depth,
		       secs(b1, sizeof(b1), st.oldest_ms), (long long)st.inflight);
		printf("by priority:");
		for (int p = 9; p >= 0; p--)
			if (st.by_priority[p] > 0)
				printf(" %d:%lld", p, (long long)st.by_priority[p]);
		printf("\n");
		printf("%-32s %8s %8s %8s\n", "TENANT", "QUEUED", "RUNNING", "OLDEST");
		for (size_t i = 0; i < st.nlisted; i++)
			printf("%-32s %8lld %8lld %8s\n", st.tenants[i].name, (long long)st.tenants[i].queued,
			       (long long)st.tenants[i].running, secs(b1, sizeof(b1), st.tenants[i].oldest_ms));
		if (st.ntenants > st.nscanned)
			printf("(%zu more tenant(s) with queued runs not shown)\n", st.ntenants - st.nscanned);
	}
	if (!g_opt.json) {
		json_t *w = warm_agents(c);
		print_warm(w);
		json_decref(w);
	}
	rn_queue_stats_clear(&st);
	return CLI_EXIT_OK;
}

int cli_status_main(int argc, char **argv)
{
	char err[320], kstate[PROTO_KEY_MAX], kout[PROTO_KEY_MAX];
	cli_args_t a;
	rn_rcluster_t *c = NULL;
	redisReply *h = NULL, *x = NULL;
	int rc;

	if (cli_args_begin(&status_verb, argc, argv, &a, &rc))
		return rc;
	if (a.npos > 0 && cli_args_check_run_id(&status_verb, a.pos[0]) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	if (cli_args_check_redis(&status_verb, g_opt.redis_url, g_opt.prefix) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	c = cli_rconn_open(g_opt.redis_url, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "runnel status: %s\n", err);
		rc = CLI_EXIT_UNREACHABLE;
		goto out;
	}
	if (a.npos == 0) {
		rc = print_queue(c);
		goto out;
	}
	proto_key(kstate, sizeof(kstate), g_opt.prefix, a.pos[0], PROTO_KEY_STATE);
	proto_key(kout, sizeof(kout), g_opt.prefix, a.pos[0], PROTO_KEY_OUT);
	h = rn_rcluster_command(c, 0, "HGETALL %s", kstate);
	x = rn_rcluster_command(c, 0, "XLEN %s", kout);
	if (!h || h->type != REDIS_REPLY_ARRAY || !x || x->type != REDIS_REPLY_INTEGER) {
		cli_rconn_error(c, (h && h->type == REDIS_REPLY_ERROR) ? h : x, err, sizeof(err));
		fprintf(stderr, "runnel status: %s\n", err);
		rc = CLI_EXIT_UNREACHABLE;
		goto out;
	}
	if (h->elements == 0 && x->integer == 0) {
		fprintf(stderr, "runnel status: run %s not found\n", a.pos[0]);
		rc = CLI_EXIT_NOT_FOUND;
		goto out;
	}
	if (g_opt.json)
		print_json(a.pos[0], h, x->integer);
	else
		print_table(a.pos[0], h, x->integer);
	print_waiting(c, h);
	rc = CLI_EXIT_OK;
out:
	if (h)
		freeReplyObject(h);
	if (x)
		freeReplyObject(x);
	if (c)
		rn_rcluster_free(c);
	rn_conf_free(status_opts);
	return rc;
}
