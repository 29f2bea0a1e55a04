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
 * agent, cold (a worker without warm agents) and warm (a worker with
 * RUNNEL_WARM_AGENTS=<agent>:4, whose pool is full again before each batch:
 * the figure is a warm start's, and the runs that still started cold are
 * counted), side by side, with the machine's load average; then the RSS,
 * PSS and CPU of an idle warm agent (its sandbox's processes, summed).
 * Every run has no system prompt and no model for Codex, so that both
 * modes run the same configuration.  Prints figures; asserts nothing.
 *
 * With --refill N, only this instead: whether a warm Claude agent's refill
 * slows a run in flight (see refill_bench below).
 *
 *   bench_acp PREFIX NODE [--runs N] [--agents claude,codex] [--refill N]
 *
 * PREFIX holds the agents (agents/install.sh PREFIX); a Release build
 * without sanitizers gives the figures worth quoting (see bench/acp.cmake).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* p50 and p99 of the samples that exist (-1 each when none). */
static size_t pct(double *v, size_t n, double *p50, double *p99)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i] >= 0)
			v[k++] = v[i];
	*p50 = *p99 = -1;
	if (!k)
		return 0;
	qsort(v, k, sizeof(*v), cmp_d);
	*p50 = v[(k - 1) / 2];
	*p99 = v[(size_t)((double)(k - 1) * 0.99 + 0.5)];
	return k;
}

#define NFIELDS 6
static const char *const field_names[NFIELDS] = {
	"claim -> first model request",
	"enqueue -> first step",
	"claim -> bootstrap done",
	"claim -> workspace ready",
	"claim -> initialize answered",
	"claim -> session/new answered",
};

static double field(const sample_t *x, int f)
{
	const double v[NFIELDS] = { x->claim_model, x->enq_step, x->claim_boot, x->claim_ws, x->claim_init, x->claim_sess };
	return v[f];
}

/* cold and warm side by side (warm NULL: cold only). */
static void report(const char *agent, const char *mode, const sample_t *cold, const sample_t *warm, size_t n,
                   int warm_started)
{
	double *v = calloc(n ? n : 1, sizeof(*v));
	printf("  %s, %s:%*s cold p50 / p99            warm p50 / p99\n", agent, mode, (int)(24 - strlen(agent) - strlen(mode)), "");
	for (int f = 0; f < NFIELDS; f++) {
		double c50, c99, w50 = -1, w99 = -1;
		for (size_t i = 0; i < n; i++)
			v[i] = field(&cold[i], f);
		size_t kc = pct(v, n, &c50, &c99), kw = 0;
		if (warm) {
			for (size_t i = 0; i < n; i++)
				v[i] = field(&warm[i], f);
			kw = pct(v, n, &w50, &w99);
		}
		printf("    %-30s %6.0f / %6.0f ms (n=%zu)   %6.0f / %6.0f ms (n=%zu)\n", field_names[f], c50, c99, kc, w50,
		       w99, kw);
	}
	if (warm)
		printf("    runs that started on a warm agent: %d of %zu\n", warm_started, n);
	free(v);
}

/* A run of agent with both providers in /env and nothing a warm agent
 * cannot serve (no system prompt; no model: Codex has it on its command
 * line), the same for both modes. */
static void submit(at_t *t, const char *run_id, const char *agent, const char *prompt)
{
	dev_stub_otps_t o;
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config(th_strf("{\"kind\":\"acp\",\"preset\":\"%s\"}", agent));
	json_object_set_new(run.config, "permission_mode", json_string("bypass"));
	json_object_set_new(run.config, "system_prompt", json_null());
	json_object_set_new(run.config, "model", json_null());
	run.env = json_pack("{s:{s:s,s:s,s:s,s:s},s:n}", "variables", "ANTHROPIC_BASE_URL", fp_url(t->anthropic),
	                    "ANTHROPIC_API_KEY", AT_ANTHROPIC_KEY, "OPENAI_BASE_URL", th_strf("%s/v1", fp_url(t->openai)),
	                    "OPENAI_API_KEY", AT_OPENAI_KEY, "setup_script");
	wt_submit(&t->w, run_id, &run, prompt, 1, 0, &o);
	json_decref(run.config);
	json_decref(run.env);
}

/* 1 when the worker's log says run_id started on a warm agent. */
static int started_warm(const char *log, const char *run_id)
{
	char *text = th_file_read(log, NULL);
	int warm = 0;
	for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (strstr(line, th_strf("\"%s\"", run_id)) && strstr(line, "warm agent start"))
			warm = 1;
	}
	free(text);
	return warm;
}

/* Waits until a worker just started consumes: a trivial run of its own.
 * Not wt_warmup, whose run has one id per process: for a second worker it
 * finds the first one's run ended and returns at once, before the new
 * worker holds any partition, and the first measured run would wait out
 * the group join. */
static void warmup(at_t *t, const char *tag)
{
	char *id = th_strf("run_warmup_%s_%ld", tag, (long)getpid());
	wt_submit_agent(&t->w, id, "{\"kind\":\"mock\",\"script\":\"echo\"}", "warm", 0, 0, NULL);
	TH_REQUIRE(wt_wait_terminal(&t->w, id, 30000), "warm-up run finished");
}

typedef struct pool_ref {
	at_t *t;
	const char *worker, *series;
	long want;
} pool_ref_t;

static int pool_full(void *arg)
{
	pool_ref_t *r = arg;
	return wt_metric(&r->t->w, r->worker, r->series) >= r->want;
}

/* Runs `count` runs of agent, `par` at a time; fills s.  pool: before each
 * batch, wait until the warm pool of that worker is full again. */
static int batch(at_t *t, const char *log, const char *agent, int par, int count, sample_t *s, const pool_ref_t *pool)
{
	static int seq;
	int warm = 0;
	fp_t *prov = strstr(agent, "codex") ? t->openai : t->anthropic;
	for (int done = 0; done < count;) {
		int k = count - done < par ? count - done : par;
		char ids[PAR][64];
		long long enq[PAR];
		if (pool && !th_wait_until(pool_full, (void *)pool, 300000))
			printf("  the warm pool did not fill up again within 300 s\n");
		for (int i = 0; i < k; i++) {
			snprintf(ids[i], sizeof(ids[i]), "bench-%s-%d", agent, ++seq);
			enq[i] = wall_ms();
			submit(t, ids[i], agent, th_strf("[[tag:%s]] Run the command.", ids[i]));
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
			warm += started_warm(log, ids[i]);
		}
		done += k;
	}
	return warm;
}

/* ------------------------------------------------------------------------
 * What an idle warm agent costs: the worker's descendants (the warm
 * worker runs no warm sandboxes and no run meanwhile), their RSS, PSS
 * and CPU time, over a 10 s window.
 * ------------------------------------------------------------------------ */

static long ppid_of(long pid)
{
	char *st = th_file_read(th_strf("/proc/%ld/stat", pid), NULL);
	const char *p = st ? strrchr(st, ')') : NULL;
	long pp = -1;
	if (p)
		sscanf(p + 2, "%*c %ld", &pp);
	free(st);
	return pp;
}

static int descends(long pid, long root)
{
	for (int i = 0; i < 64 && pid > 1; i++) {
		pid = ppid_of(pid);
		if (pid == root)
			return 1;
	}
	return 0;
}

/* kB of field ("Rss:", "Pss:") in a /proc smaps_rollup or status text. */
static long kb_of(const char *text, const char *name)
{
	const char *p = text ? strstr(text, name) : NULL;
	return p ? strtol(p + strlen(name), NULL, 10) : 0;
}

static void cost(long root, long *procs, long *rss_kb, long *pss_kb, long long *cpu_ticks)
{
	*procs = *rss_kb = *pss_kb = 0;
	*cpu_ticks = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		long pid = strtol(e->d_name, NULL, 10);
		if (pid <= 1 || !descends(pid, root))
			continue;
		char *sm = th_file_read(th_strf("/proc/%ld/smaps_rollup", pid), NULL);
		char *st = th_file_read(th_strf("/proc/%ld/stat", pid), NULL);
		const char *p = st ? strrchr(st, ')') : NULL;
		unsigned long long ut = 0, stt = 0;
		if (p)
			sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &stt);
		(*procs)++;
		*rss_kb += kb_of(sm, "Rss:");
		*pss_kb += kb_of(sm, "Pss:");
		*cpu_ticks += (long long)(ut + stt);
		free(sm);
		free(st);
	}
	if (d)
		closedir(d);
}

static void idle_cost(at_t *t, pid_t worker, const char *agent, const pool_ref_t *pool)
{
	if (!th_wait_until(pool_full, (void *)pool, 300000))
		return;
	long procs, rss, pss, procs2, rss2, pss2;
	long long cpu0, cpu1;
	cost(worker, &procs, &rss, &pss, &cpu0);
	long long t0 = wall_ms();
	/* A fixed window: this is what is measured, not a wait for a condition. */
	struct timespec ten = { 10, 0 };
	nanosleep(&ten, NULL);
	cost(worker, &procs2, &rss2, &pss2, &cpu1);
	double secs = (double)(wall_ms() - t0) / 1000.0;
	long hz = sysconf(_SC_CLK_TCK);
	long n = pool->want;
	(void)t;
	printf("  idle warm %s agent (%ld ready; %ld processes in all): RSS %.0f MiB, PSS %.0f MiB, CPU %.1f ms/s each\n",
	       agent, n, procs2, (double)rss2 / 1024.0 / (double)n, (double)pss2 / 1024.0 / (double)n,
	       (double)(cpu1 - cpu0) * 1000.0 / (double)hz / secs / (double)n);
}

/* ------------------------------------------------------------------------
 * --refill N: does a warm Claude agent's refill slow the runs in flight?
 * A worker keeping one warm Claude agent (RUNNEL_WARM_AGENTS=claude:1, no
 * plain warm sandboxes) runs a `command` run whose job is a fixed shell
 * loop (~1.5 s of CPU) on every CPU at once, N times each way, alternating:
 *
 *   (a) idle    the pool full and its agent idle for REFILL_SETTLE_MS;
 *   (b) refill  a Claude run takes the warm agent and the measured run is
 *               enqueued as soon as that run's result is in its stream, so
 *               the pool's refill (a new sandbox, Node, the adapter and
 *               the CLI: seconds of CPU) runs beside the measured job.
 *
 * Measured: the job's own wall time (the run's "job start" to its "job
 * end" log line, by their ts) and enqueue -> the run's end; p50, p99 and
 * the (b)/(a) ratio.  Then the same on a worker with RUNNEL_CGROUP=off,
 * where the refill has no cgroup and so no lowered CPU weight.
 * ------------------------------------------------------------------------ */

#define REFILL_SETTLE_MS 2000
#define REFILL_LOOP      "1500000"

/* The job: one loop per online CPU at once, so that the runs in flight
 * leave no core idle for the refill to take. */
static const char *refill_job(void)
{
	static char *s;
	if (!s) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		char *loops = th_strf("%s", "");
		for (long i = 0; i < (cpus > 0 ? cpus : 1); i++)
			loops = th_strf("%s(i=0; while [ $i -lt %s ]; do i=$((i+1)); done) & ", loops, REFILL_LOOP);
		char *script = th_strf("read turn; echo '{\"type\":\"log\",\"level\":\"info\",\"message\":\"job start\"}';"
		                       " %swait;"
		                       " echo '{\"type\":\"log\",\"level\":\"info\",\"message\":\"job end\"}';"
		                       " echo '{\"type\":\"result\",\"message\":\"done\"}'",
		                       loops);
		json_t *o = json_pack("{s:s,s:[s,s,s]}", "kind", "command", "argv", "/bin/sh", "-c", script);
		s = json_dumps(o, JSON_COMPACT);
		json_decref(o);
	}
	return s;
}

static void settle(void)
{
	/* A fixed pause, part of what is measured (an idle pool), not a wait
	 * for a condition. */
	struct timespec ts = { REFILL_SETTLE_MS / 1000, (REFILL_SETTLE_MS % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* One measured run: its job's wall time and enqueue -> end (ms, -1 when
 * missing). */
static void refill_measure(at_t *t, const char *id, double *job, double *total)
{
	long long enq = wall_ms();
	*job = *total = -1;
	wt_submit_agent(&t->w, id, refill_job(), "go", 0, 0, NULL);
	if (!wt_wait_terminal(&t->w, id, 120000)) {
		printf("  %s did not end\n", id);
		return;
	}
	*total = (double)(wall_ms() - enq);
	char **lines = NULL;
	size_t n = 0;
	long long a = -1, b = -1;
	if (th_stream_read_all(t->w.rc, th_strf("runnel:{%s}:out", id), &lines, NULL, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_loads(lines[i], 0, NULL);
		const char *msg = json_string_value(json_object_get(o, "message"));
		long long ts = (long long)json_integer_value(json_object_get(o, "ts"));
		if (th_streq(msg, "job start"))
			a = ts;
		else if (th_streq(msg, "job end"))
			b = ts;
		json_decref(o);
	}
	th_strv_free(lines, n);
	if (a > 0 && b >= a)
		*job = (double)(b - a);
}

static void refill_line(const char *what, double *a, double *b, int n)
{
	double a50, a99, b50, b99;
	size_t ka = pct(a, (size_t)n, &a50, &a99), kb = pct(b, (size_t)n, &b50, &b99);
	printf("    %-22s idle p50 %5.0f / p99 %5.0f ms (n=%zu)   refilling p50 %5.0f / p99 %5.0f ms (n=%zu)   "
	       "ratio p50 %.2f, p99 %.2f\n",
	       what, a50, a99, ka, b50, b99, kb, a50 > 0 ? b50 / a50 : -1, a99 > 0 ? b99 / a99 : -1);
}

static void refill_series(at_t *t, const char *wname, const char *cgroup, int n)
{
	const char *wenv[] = { "RUNNEL_LOG_LEVEL=debug", "RUNNEL_WARM=0", "RUNNEL_WARM_AGENTS=claude:1", cgroup, NULL };
	pid_t wp = at_worker(t, wname, wenv);
	warmup(t, wname);
	pool_ref_t pool = { t, wname, "runnel_worker_warm_agents{agent=\"claude\"}", 1 };
	const char *wlog = wt_log_path(&t->w, wname);
	double *ja = calloc((size_t)n, sizeof(double)), *jb = calloc((size_t)n, sizeof(double));
	double *ta = calloc((size_t)n, sizeof(double)), *tb = calloc((size_t)n, sizeof(double));
	double *fill = calloc((size_t)n, sizeof(double));
	int warm = 0, overlap = 0;
	for (int i = 0; i < n; i++) {
		if (!th_wait_until(pool_full, &pool, 300000))
			printf("  the warm pool did not fill up within 300 s\n");
		settle();
		refill_measure(t, th_strf("refill-%s-a%d", wname, i), &ja[i], &ta[i]);
		if (!th_wait_until(pool_full, &pool, 300000))
			printf("  the warm pool did not fill up within 300 s\n");
		settle();
		const char *cid = th_strf("refill-%s-claude%d", wname, i);
		long long take = wall_ms();
		submit(t, cid, "claude", th_strf("[[tag:%s]] Run the command.", cid));
		if (at_wait_line(t, cid, "result", NULL, 180000) < 0)
			printf("  %s did not end with a result\n", cid);
		warm += started_warm(wlog, cid);
		refill_measure(t, th_strf("refill-%s-b%d", wname, i), &jb[i], &tb[i]);
		overlap += wt_metric(&t->w, wname, pool.series) < 1;
		fill[i] = th_wait_until(pool_full, &pool, 300000) ? (double)(wall_ms() - take) : -1;
		if (getenv("BENCH_VERBOSE"))
			printf("# %d: idle job %.0f total %.0f; refilling job %.0f total %.0f; refill %.0f ms\n", i, ja[i],
			       ta[i], jb[i], tb[i], fill[i]);
	}
	printf("  %s (%s):\n", wname, cgroup);
	refill_line("job (loop) wall", ja, jb, n);
	refill_line("enqueue -> run ended", ta, tb, n);
	double f50, f99;
	pct(fill, (size_t)n, &f50, &f99);
	printf("    Claude runs on the warm agent: %d of %d; refill still running when the measured run ended: %d of %d;"
	       " take -> pool full again p50 %.0f / p99 %.0f ms\n",
	       warm, n, overlap, n, f50, f99);
	fflush(stdout);
	wt_stop_worker(wp, 30000, wname);
	free(ja);
	free(jb);
	free(ta);
	free(tb);
	free(fill);
}

static void print_load(const char *when)
{
	char *la = th_file_read("/proc/loadavg", NULL);
	if (la)
		printf("load average %s: %.*s\n", when, (int)strcspn(la, "\n"), la);
	free(la);
}

static int refill_bench(at_t *t, int n)
{
	fp_script_t script = { .cmd = "echo bench" };
	fp_set(t->anthropic, &script);
	printf("bench_acp --refill: %d runs each way (job: %ld %s-step shell loops at once), alternating idle/refilling\n",
	       n, sysconf(_SC_NPROCESSORS_ONLN), REFILL_LOOP);
	print_load("at the start");
	refill_series(t, "wrefill", "RUNNEL_CGROUP=auto", n);
	refill_series(t, "wnocg", "RUNNEL_CGROUP=off", n);
	print_load("at the end");
	at_teardown(t);
	return 0;
}

int main(int argc, char **argv)
{
	th_init("bench_acp");
	int runs = 50, refill = 0;
	const char *agents = "claude,codex";
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--runs"))
			runs = (int)strtol(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--agents"))
			agents = argv[i + 1];
		else if (!strcmp(argv[i], "--refill"))
			refill = (int)strtol(argv[i + 1], NULL, 10);
	}
	if (runs < 1)
		runs = 1;
	at_t t;
	int rc = at_setup(&t, argc, argv, NULL);
	if (rc)
		return rc;
	if (refill > 0)
		return refill_bench(&t, refill);
	fp_script_t script = { .cmd = "echo bench" };
	fp_set(t.anthropic, &script);
	fp_set(t.openai, &script);
	const char *extra[] = { "RUNNEL_LOG_LEVEL=debug", NULL };
	pid_t cold_pid = at_worker(&t, "w1", extra);
	wt_warmup(&t.w);
	const char *log = wt_log_path(&t.w, "w1");

	char load[128] = "";
	char *la = th_file_read("/proc/loadavg", NULL);
	if (la)
		snprintf(load, sizeof(load), "%.*s", (int)strcspn(la, "\n"), la);
	free(la);
	printf("bench_acp: %d runs per mode, fake providers on loopback, load average at start: %s\n", runs, load);

	sample_t *w1 = calloc((size_t)runs, sizeof(*w1)), *w4 = calloc((size_t)runs, sizeof(*w4));
	char *list = th_strf("%s", agents);
	char *names[8];
	int nn = 0;
	for (char *a = strtok_r(list, ",", &list); a && nn < 8; a = strtok_r(NULL, ",", &list))
		names[nn++] = a;
	/* Cold first, on a worker without warm agents. */
	sample_t *cold1[8], *cold4[8];
	for (int i = 0; i < nn; i++) {
		cold1[i] = calloc((size_t)runs, sizeof(sample_t));
		cold4[i] = calloc((size_t)runs, sizeof(sample_t));
		batch(&t, log, names[i], 1, runs, cold1[i], NULL);
		batch(&t, log, names[i], PAR, runs, cold4[i], NULL);
	}
	wt_stop_worker(cold_pid, 30000, "w1");
	for (int i = 0; i < nn; i++) {
		/* Warm: a worker keeping PAR agents of this kind ready. */
		const char *wname = th_strf("w%s", names[i]);
		const char *wenv[] = { "RUNNEL_LOG_LEVEL=debug", "RUNNEL_WARM=0",
			               th_strf("RUNNEL_WARM_AGENTS=%s:%d", names[i], PAR), NULL };
		pid_t wp = at_worker(&t, wname, wenv);
		/* Its group join (~3 s) is not a start's. */
		warmup(&t, names[i]);
		pool_ref_t pool = { &t, wname, th_strf("runnel_worker_warm_agents{agent=\"%s\"}", names[i]), PAR };
		const char *wlog = wt_log_path(&t.w, wname);
		int warm1 = batch(&t, wlog, names[i], 1, runs, w1, &pool);
		int warm4 = batch(&t, wlog, names[i], PAR, runs, w4, &pool);
		report(names[i], "one at a time", cold1[i], w1, (size_t)runs, warm1);
		report(names[i], "4 at once", cold4[i], w4, (size_t)runs, warm4);
		idle_cost(&t, wp, names[i], &pool);
		fflush(stdout);
		wt_stop_worker(wp, 30000, wname);
		free(cold1[i]);
		free(cold4[i]);
	}
	la = th_file_read("/proc/loadavg", NULL);
	if (la)
		printf("load average at the end: %.*s\n", (int)strcspn(la, "\n"), la);
	free(la);
	free(w1);
	free(w4);
	at_teardown(&t);
	return 0;
}
