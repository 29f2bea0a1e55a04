/*
 * tests/kafka/fleet.c - the fleet scenarios' shared steps (see fleet.h).
 */
#include "tests/kafka/fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void fleet_pause_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

void fleet_submit(wt_t *t, fleet_run_t *r, const char *prefix, int i, const char *script, int is_long)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->id, sizeof(r->id), "%s_%d", prefix, i);
	snprintf(r->script, sizeof(r->script), "%s", script);
	r->is_long = is_long;
	r->wait_ms = -1;
	wt_submit_agent(t, r->id, th_strf("{\"kind\":\"mock\",\"script\":\"%s\"}", script), "fleet", 0, 0, &r->o);
}

static int64_t state_ms(wt_t *t, const char *id, const char *field)
{
	const char *v = wt_state(t, id, field);
	return *v ? strtoll(v, NULL, 10) : -1;
}

int fleet_collect(wt_t *t, fleet_run_t *runs, int n, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int ended = 0;
	for (int i = 0; i < n; i++) {
		fleet_run_t *r = &runs[i];
		int64_t left = deadline - th_now_ms();
		r->ended = wt_wait_terminal(t, r->id, left > 0 ? (int)left : 1);
		ended += r->ended;
		size_t nl = 0;
		char **l = wt_lines(t, r->id, &nl);
		r->terminals = 0;
		for (size_t k = 0; k < nl; k++) {
			char type[32], code[64];
			th_line_type(l[k], type, sizeof(type), code, sizeof(code));
			if (!strcmp(type, "result") || !strcmp(type, "error")) {
				r->terminals++;
				snprintf(r->code, sizeof(r->code), "%s", code);
				if (k != nl - 1)
					r->terminals += 100; /* a terminal line that is not last */
			}
		}
		th_strv_free(l, nl);
		dev_stub_ep_stats_t st;
		r->config_calls = dev_stub_stats(t->stub, r->o.session, DEV_STUB_EP_CONFIG, &st) == 0 ? st.calls : -1;
		snprintf(r->status, sizeof(r->status), "%s", wt_state(t, r->id, "status"));
		int64_t enq = state_ms(t, r->id, "enqueued_at");
		int64_t start = state_ms(t, r->id, "started_at");
		r->wait_ms = enq > 0 && start >= enq ? start - enq : -1;
	}
	return ended;
}

int fleet_check(const fleet_run_t *runs, int n, int allow_lost)
{
	int before = th_failures();
	for (int i = 0; i < n; i++) {
		const fleet_run_t *r = &runs[i];
		TH_CHECK(r->ended, "%s (%s) never ended: lost", r->id, r->script);
		TH_CHECK(r->terminals == 1, "%s: %d terminal lines (100+ = one not last)", r->id, r->terminals);
		TH_CHECK(r->config_calls <= 1, "%s started %d times (/config calls)", r->id, r->config_calls);
		int lost = allow_lost && th_streq(r->code, "worker_lost");
		if (lost) {
			TH_CHECK(th_streq(r->status, "lost"), "%s: status %s", r->id, r->status);
		} else {
			TH_CHECK(th_streq(r->code, ""), "%s ended %s", r->id, r->code);
			TH_CHECK(th_streq(r->status, "succeeded"), "%s: status %s", r->id, r->status);
			TH_CHECK(r->config_calls == 1, "%s: /config called %d times", r->id, r->config_calls);
		}
	}
	return th_failures() - before;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

int64_t fleet_wait_pct(const fleet_run_t *runs, int n, int want_long, double pct)
{
	int64_t *v = calloc((size_t)(n ? n : 1), sizeof(*v));
	int m = 0;
	for (int i = 0; v && i < n; i++)
		if (runs[i].is_long == want_long && runs[i].wait_ms >= 0)
			v[m++] = runs[i].wait_ms;
	int64_t out = -1;
	if (m > 0) {
		qsort(v, (size_t)m, sizeof(*v), cmp64);
		/* Nearest rank. */
		int k = (int)((pct / 100.0) * m + 0.999999) - 1;
		out = v[k < 0 ? 0 : (k >= m ? m - 1 : k)];
	}
	free(v);
	return out;
}

int fleet_worker_ready(wt_t *t, const char *name, int timeout_ms)
{
	return wt_wait_log(t, name, "\"kafka_assigned\"", timeout_ms);
}

int fleet_wait_scenario(wt_t *t, const fleet_wait_opts_t *o, fleet_run_t *runs, int cap)
{
	const char *slots = th_strf("RUNNEL_SLOTS=%d", o->slots);
	const char *env[] = { slots, NULL };
	for (int i = 0; i < o->workers; i++)
		wt_worker(t, th_strf("fw%d", i), env);
	/* One run through the group proves it formed; then every worker
	 * should hold partitions. */
	wt_warmup(t);
	for (int i = 0; i < o->workers; i++)
		if (!fleet_worker_ready(t, th_strf("fw%d", i), 20000))
			TH_NOTE("fw%d logged no assignment yet", i);
	int n = 0;
	const char *lscript = th_strf("sleep %d", o->long_sec);
	for (int i = 0; i < o->longs && n < cap; i++)
		fleet_submit(t, &runs[n++], "run_long", i, lscript, 1);
	/* The long runs hold their slots before the stream starts. */
	for (int i = 0; i < n; i++)
		if (!wt_wait_started(t, runs[i].id, 30000))
			TH_NOTE("%s not started after 30 s", runs[i].id);
	for (int i = 0; i < o->shorts && n < cap; i++) {
		fleet_submit(t, &runs[n++], "run_short", i, "echo", 0);
		fleet_pause_ms(o->gap_ms);
	}
	return n;
}
