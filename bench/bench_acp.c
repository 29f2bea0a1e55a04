/*
 * bench/bench_acp.c - how soon a Claude Code or Codex run does something:
 * the real runnel-worker (bwrap, Redis, the Kafka mock cluster, the
 * workspace stub) runs acp runs against the fake providers of tests/acp,
 * which answer at once, so every millisecond measured is runnel's, the
 * adapter's and the agent's own start.  Per run:
 *
 *   claim -> first model request   the worker's claim (its run_phase log
 *                                  line "bootstrap done at +X ms" dates it)
 *                                  to the fake provider receiving the
 *                                  run's first model call;
 *   enqueue -> first step          the job's produce to the first `step`
 *                                  line in the run's stream (the line's
 *                                  own ts);
 *   claim -> bootstrap, claim -> workspace ready (the same log lines),
 *   claim -> initialize answered, claim -> session/new answered (the
 *   adapter's "ACP agent" and "ACP session" lines): where the time goes.
 *
 * p50 and p99 over N runs one at a time, then N runs 4 at a time, for each
 * agent, with the machine's load average.  Warm agents (RUNNEL_WARM_AGENTS)
 * are not built yet: every figure is a cold start.  Prints figures;
 * asserts nothing.
 *
 *   bench_acp PREFIX NODE [--runs N] [--agents claude,codex]
 *
 * PREFIX holds the agents (agents/install.sh PREFIX); a Release build
 * without sanitizers gives the figures worth quoting (see bench/acp.cmake).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "tests/acp/acptest.h"

#define PAR 4

typedef struct sample {
	double claim_model, enq_step, claim_boot, claim_ws, claim_init, claim_sess;
} sample_t;

static long long wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "2026-11-26T19:26:17.424Z" -> ms since the epoch (UTC). */
static long long iso_ms(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	int ms = 0;
	if (!s || sscanf(s, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (long long)timegm(&tm) * 1000 + ms;
}

/* The claim time of run_id from the worker's log, and its phases. */
static long long claim_ms(const char *log, const char *run_id, long long *boot, long long *ws)
{
	long long claim = -1;
	*boot = *ws = -1;
	char *text = th_file_read(log, NULL);
	for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strstr(line, run_id) || !strstr(line, "run_phase"))
			continue;
		json_t *o = json_loads(line, 0, NULL);
		const char *msg = json_string_value(json_object_get(o, "msg"));
		if (!msg)
			msg = json_string_value(json_object_get(o, "message"));
		const char *at = msg ? strstr(msg, " at +") : NULL;
		long long ts = iso_ms(json_string_value(json_object_get(o, "ts")));
		if (at && ts > 0 && th_streq(json_string_value(json_object_get(o, "run_id")), run_id)) {
			long long rel = strtoll(at + 5, NULL, 10);
			claim = ts - rel;
			if (!strncmp(msg, "bootstrap done", 14))
				*boot = rel;
			else if (!strncmp(msg, "workspace ready", 15))
				*ws = rel;
		}
		json_decref(o);
	}
	free(text);
	return claim;
}

/* From the run's stream, by each line's own "ts" (the worker's clock, ms):
 * the first step, the adapter's "ACP agent ..." log line (initialize
 * answered) and its "ACP session ..." line (session/new answered); -1
 * for what is missing. */
static void stream_times(at_t *t, const char *run_id, long long *step, long long *init, long long *sess)
{
	char **lines = NULL;
	size_t n = 0;
	*step = *init = *sess = -1;
	if (th_stream_read_all(t->w.rc, th_strf("runnel:{%s}:out", run_id), &lines, NULL, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_loads(lines[i], 0, NULL);
		const char *type = json_string_value(json_object_get(o, "type"));
		const char *msg = json_string_value(json_object_get(o, "message"));
		long long ts = (long long)json_integer_value(json_object_get(o, "ts"));
		if (getenv("BENCH_VERBOSE"))
			printf("# %.160s\n", lines[i]);
		if (th_streq(type, "step") && *step < 0)
			*step = ts;
		else if (th_streq(type, "log") && msg && !strncmp(msg, "ACP agent ", 10) && *init < 0)
			*init = ts;
		else if (th_streq(type, "log") && msg && !strncmp(msg, "ACP session ", 12) && *sess < 0)
			*sess = ts;
		json_decref(o);
	}
	th_strv_free(lines, n);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void pct(const char *what, double *v, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i] >= 0)
			v[k++] = v[i];
	if (!k) {
		printf("    %-30s   (no samples)\n", what);
		return;
	}
	qsort(v, k, sizeof(*v), cmp_d);
	size_t i50 = (k - 1) / 2, i99 = (size_t)((double)(k - 1) * 0.99 + 0.5);
	printf("    %-30s p50 %7.0f ms   p99 %7.0f ms   (n=%zu)\n", what, v[i50], v[i99], k);
}

static void report(const char *agent, const char *mode, sample_t *s, size_t n)
{
	double *v = calloc(n ? n : 1, sizeof(*v));
	printf("  %s, %s (cold):\n", agent, mode);
	for (size_t i = 0; i < n; i++)
		v[i] = s[i].claim_model;
	pct("claim -> first model request", v, n);
	for (size_t i = 0; i < n; i++)
		v[i] = s[i].enq_step;
	pct("enqueue -> first step", v, n);
	for (size_t i = 0; i < n; i++)
		v[i] = s[i].claim_boot;
	pct("claim -> bootstrap done", v, n);
	for (size_t i = 0; i < n; i++)
		v[i] = s[i].claim_ws;
	pct("claim -> workspace ready", v, n);
	for (size_t i = 0; i < n; i++)
		v[i] = s[i].claim_init;
	pct("claim -> initialize answered", v, n);
	for (size_t i = 0; i < n; i++)
		v[i] = s[i].claim_sess;
	pct("claim -> session/new answered", v, n);
	free(v);
}

/* Runs `count` runs of agent, `par` at a time; fills s. */
static void batch(at_t *t, const char *log, const char *agent, int par, int count, sample_t *s)
{
	static int seq;
	fp_t *prov = strstr(agent, "codex") ? t->openai : t->anthropic;
	for (int done = 0; done < count;) {
		int k = count - done < par ? count - done : par;
		char ids[PAR][64];
		long long enq[PAR];
		for (int i = 0; i < k; i++) {
			dev_stub_otps_t o;
			snprintf(ids[i], sizeof(ids[i]), "bench-%s-%d", agent, ++seq);
			enq[i] = wall_ms();
			at_submit(t, ids[i], th_strf("{\"kind\":\"acp\",\"preset\":\"%s\"}", agent), "bypass",
			          th_strf("[[tag:%s]] Run the command.", ids[i]), &o);
		}
		for (int i = 0; i < k; i++) {
			sample_t *x = &s[done + i];
			if (at_wait_line(t, ids[i], "result", NULL, 180000) < 0) {
				printf("  %s did not end with a result\n", ids[i]);
				x->claim_model = x->enq_step = x->claim_boot = x->claim_ws = -1;
				x->claim_init = x->claim_sess = -1;
				continue;
			}
			long long boot, ws, claim = claim_ms(log, ids[i], &boot, &ws);
			long long model = fp_tag_ms(prov, ids[i]), step, init, sess;
			stream_times(t, ids[i], &step, &init, &sess);
			x->claim_init = claim > 0 && init > 0 ? (double)(init - claim) : -1;
			x->claim_sess = claim > 0 && sess > 0 ? (double)(sess - claim) : -1;
			x->claim_model = claim > 0 && model > 0 ? (double)(model - claim) : -1;
			x->enq_step = step > 0 ? (double)(step - enq[i]) : -1;
			if (getenv("BENCH_VERBOSE"))
				printf("# %s enqueued %lld claimed %lld model %lld step %lld\n", ids[i], enq[i], claim, model,
				       step);
			x->claim_boot = (double)boot;
			x->claim_ws = (double)ws;
		}
		done += k;
	}
}

int main(int argc, char **argv)
{
	th_init("bench_acp");
	int runs = 50;
	const char *agents = "claude,codex";
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--runs"))
			runs = (int)strtol(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--agents"))
			agents = argv[i + 1];
	}
	if (runs < 1)
		runs = 1;
	at_t t;
	int rc = at_setup(&t, argc, argv, NULL);
	if (rc)
		return rc;
	fp_script_t script = { .cmd = "echo bench" };
	fp_set(t.anthropic, &script);
	fp_set(t.openai, &script);
	const char *extra[] = { "RUNNEL_LOG_LEVEL=debug", NULL };
	at_worker(&t, "w1", extra);
	wt_warmup(&t.w);
	const char *log = wt_log_path(&t.w, "w1");

	char load[128] = "";
	char *la = th_file_read("/proc/loadavg", NULL);
	if (la)
		snprintf(load, sizeof(load), "%.*s", (int)strcspn(la, "\n"), la);
	free(la);
	printf("bench_acp: %d runs per mode, fake providers on loopback, load average at start: %s\n", runs, load);

	sample_t *s = calloc((size_t)runs, sizeof(*s));
	char *list = th_strf("%s", agents);
	for (char *a = strtok_r(list, ",", &list); a; a = strtok_r(NULL, ",", &list)) {
		batch(&t, log, a, 1, runs, s);
		report(a, "one at a time", s, (size_t)runs);
		batch(&t, log, a, PAR, runs, s);
		report(a, "4 at once", s, (size_t)runs);
		fflush(stdout);
	}
	la = th_file_read("/proc/loadavg", NULL);
	if (la)
		printf("load average at the end: %.*s\n", (int)strcspn(la, "\n"), la);
	free(la);
	printf("warm agents (RUNNEL_WARM_AGENTS): not built; no warm column\n");
	free(s);
	at_teardown(&t);
	return 0;
}
