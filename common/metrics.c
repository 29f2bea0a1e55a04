/*
 * common/metrics.c - the Prometheus registry behind /metrics.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"

enum { K_COUNTER,
       K_GAUGE,
       K_HIST };

struct rn_metric {
	int kind;
	char *name, *help, *labels;
	_Atomic uint64_t u;   /* counter */
	_Atomic int64_t i;    /* gauge */
	pthread_mutex_t lock; /* histogram */
	double *bounds;
	uint64_t *buckets; /* nbounds + 1 (+Inf) */
	size_t nbounds;
	double sum;
	uint64_t count;
	struct rn_metric *next;
};

struct rn_metrics {
	pthread_mutex_t lock;
	struct rn_metric *head, *tail;
};

const double rn_metrics_latency_bounds[] = {
	0.0005,
	0.001,
	0.0025,
	0.005,
	0.01,
	0.015,
	0.025,
	0.04,
	0.05,
	0.1,
	0.25,
	0.5,
	1,
	2.5,
	5,
	10,
	30,
	60,
};
const size_t rn_metrics_latency_nbounds =
        sizeof(rn_metrics_latency_bounds) / sizeof(rn_metrics_latency_bounds[0]);

rn_metrics_t *rn_metrics_new(void)
{
	rn_metrics_t *m = calloc(1, sizeof(*m));
	if (m)
		pthread_mutex_init(&m->lock, NULL);
	return m;
}

void rn_metrics_free(rn_metrics_t *m)
{
	if (!m)
		return;
	struct rn_metric *s = m->head;
	while (s) {
		struct rn_metric *next = s->next;
		free(s->name);
		free(s->help);
		free(s->labels);
		free(s->bounds);
		free(s->buckets);
		if (s->kind == K_HIST)
			pthread_mutex_destroy(&s->lock);
		free(s);
		s = next;
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static struct rn_metric *reg(rn_metrics_t *m, int kind, const char *name,
                             const char *help, const char *labels)
{
	struct rn_metric *s = calloc(1, sizeof(*s));
	if (!s)
		abort(); /* registration happens once, at start: nothing to degrade to */
	s->kind = kind;
	s->name = strdup(name);
	s->help = strdup(help ? help : "");
	s->labels = labels ? strdup(labels) : NULL;
	pthread_mutex_lock(&m->lock);
	if (m->tail)
		m->tail->next = s;
	else
		m->head = s;
	m->tail = s;
	pthread_mutex_unlock(&m->lock);
	return s;
}

rn_counter_t *rn_metrics_counter(rn_metrics_t *m, const char *name, const char *help, const char *labels)
{
	return reg(m, K_COUNTER, name, help, labels);
}

rn_gauge_t *rn_metrics_gauge(rn_metrics_t *m, const char *name, const char *help, const char *labels)
{
	return reg(m, K_GAUGE, name, help, labels);
}

rn_hist_t *rn_metrics_histogram(rn_metrics_t *m, const char *name, const char *help,
                                const char *labels, const double *bounds, size_t nbounds)
{
	struct rn_metric *s = reg(m, K_HIST, name, help, labels);
	pthread_mutex_init(&s->lock, NULL);
	s->bounds = malloc(nbounds * sizeof(double));
	s->buckets = calloc(nbounds + 1, sizeof(uint64_t));
	if (!s->bounds || !s->buckets)
		abort();
	memcpy(s->bounds, bounds, nbounds * sizeof(double));
	s->nbounds = nbounds;
	return s;
}

void rn_metrics_register(rn_metrics_t *m, void *base, const rn_metric_def_t *defs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const rn_metric_def_t *d = &defs[i];
		struct rn_metric **dst = (struct rn_metric **)((char *)base + d->offset);
		if (d->kind == RN_METRIC_LATENCY)
			*dst = rn_metrics_histogram(m, d->name, d->help, NULL, rn_metrics_latency_bounds,
			                            rn_metrics_latency_nbounds);
		else
			*dst = reg(m, d->kind == RN_METRIC_GAUGE ? K_GAUGE : K_COUNTER, d->name, d->help, NULL);
	}
}

void rn_counter_add(rn_counter_t *c, uint64_t v)
{
	atomic_fetch_add(&c->u, v);
}
uint64_t rn_counter_get(rn_counter_t *c)
{
	return atomic_load(&c->u);
}
void rn_gauge_set(rn_gauge_t *g, int64_t v)
{
	atomic_store(&g->i, v);
}
void rn_gauge_add(rn_gauge_t *g, int64_t v)
{
	atomic_fetch_add(&g->i, v);
}
int64_t rn_gauge_get(rn_gauge_t *g)
{
	return atomic_load(&g->i);
}

void rn_hist_observe(rn_hist_t *h, double v)
{
	size_t i = 0;
	while (i < h->nbounds && v > h->bounds[i])
		i++;
	pthread_mutex_lock(&h->lock);
	h->buckets[i]++;
	h->sum += v;
	h->count++;
	pthread_mutex_unlock(&h->lock);
}

/* The rendered text never grows past this (a fleet's worth of tenants is a
 * few hundred kB): a render over it fails like one out of memory. */
#define METRICS_TEXT_MAX ((size_t)64 << 20)

typedef struct {
	rn_dynbuf_t buf;
	int oom; /* an add failed: the text is incomplete */
} out_t;

static void out_printf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(out_t *o, const char *fmt, ...)
{
	if (o->oom)
		return;
	va_list ap;
	va_start(ap, fmt);
	if (rn_dynbuf_vaddf(&o->buf, fmt, ap) < 0)
		o->oom = 1;
	va_end(ap);
}

static const char *const type_names[] = { "counter", "gauge", "histogram" };

char *rn_metrics_render(rn_metrics_t *m, size_t *lenp)
{
	out_t o = { .oom = 0 };
	rn_dynbuf_init(&o.buf, METRICS_TEXT_MAX);
	if (rn_dynbuf_reserve(&o.buf, 4096) < 0)
		return NULL;

	pthread_mutex_lock(&m->lock);
	const char *prev = NULL;
	for (struct rn_metric *s = m->head; s; s = s->next) {
		if (!prev || strcmp(prev, s->name) != 0) {
			out_printf(&o, "# HELP %s %s\n# TYPE %s %s\n", s->name, s->help, s->name, type_names[s->kind]);
			prev = s->name;
		}
		const char *l = s->labels ? s->labels : "";
		const char *lb = s->labels ? "{" : "", *rb = s->labels ? "}" : "";
		switch (s->kind) {
		case K_COUNTER:
			out_printf(&o, "%s%s%s%s %llu\n", s->name, lb, l, rb,
			           (unsigned long long)atomic_load(&s->u));
			break;
		case K_GAUGE:
			out_printf(&o, "%s%s%s%s %lld\n", s->name, lb, l, rb,
			           (long long)atomic_load(&s->i));
			break;
		case K_HIST: {
			pthread_mutex_lock(&s->lock);
			uint64_t cum = 0;
			const char *sep = s->labels ? "," : "";
			for (size_t i = 0; i <= s->nbounds; i++) {
				cum += s->buckets[i];
				if (i < s->nbounds)
					out_printf(&o, "%s_bucket{%s%sle=\"%g\"} %llu\n", s->name, l, sep,
					           s->bounds[i], (unsigned long long)cum);
				else
					out_printf(&o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", s->name, l, sep,
					           (unsigned long long)cum);
			}
			out_printf(&o, "%s_sum%s%s%s %.6f\n", s->name, lb, l, rb, s->sum);
			out_printf(&o, "%s_count%s%s%s %llu\n", s->name, lb, l, rb, (unsigned long long)s->count);
			pthread_mutex_unlock(&s->lock);
			break;
		}
		}
	}
	pthread_mutex_unlock(&m->lock);
	if (o.oom) {
		rn_dynbuf_free(&o.buf);
		return NULL;
	}
	return rn_dynbuf_take(&o.buf, lenp);
}
