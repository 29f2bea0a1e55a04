/*
 * common/metrics.h - a small Prometheus registry: counters, gauges and
 * histograms, rendered in the text exposition format for /metrics.
 *
 * Register at start (from the main thread); update from any thread.
 * Counters and gauges are lock-free atomics; a histogram observation takes
 * the histogram's own mutex.  Series with the same name must be registered
 * one after the other so that HELP/TYPE are printed once per family.
 */
#ifndef RUNNEL_COMMON_METRICS_H
#define RUNNEL_COMMON_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct rn_metrics rn_metrics_t;
typedef struct rn_metric rn_counter_t;
typedef struct rn_metric rn_gauge_t;
typedef struct rn_metric rn_hist_t;

rn_metrics_t *rn_metrics_new(void);
void rn_metrics_free(rn_metrics_t *m);

/* labels: Prometheus label text without braces, e.g. "outcome=\"succeeded\"", or NULL.
 * The registry copies name, help and labels. */
rn_counter_t *rn_metrics_counter(rn_metrics_t *m, const char *name, const char *help, const char *labels);
rn_gauge_t *rn_metrics_gauge(rn_metrics_t *m, const char *name, const char *help, const char *labels);
/* bounds: ascending upper bounds (seconds for latencies); +Inf is implicit. */
rn_hist_t *rn_metrics_histogram(rn_metrics_t *m, const char *name, const char *help,
                                const char *labels, const double *bounds, size_t nbounds);

/* A program's unlabelled series as a table: each row names the field of
 * the program's struct that holds the series and what to register there. */
typedef enum rn_metric_kind {
	RN_METRIC_COUNTER,
	RN_METRIC_GAUGE,
	RN_METRIC_LATENCY, /* a histogram with rn_metrics_latency_bounds */
} rn_metric_kind_t;

typedef struct rn_metric_def {
	size_t offset; /* offsetof(struct, its rn_counter_t/rn_gauge_t/rn_hist_t pointer) */
	rn_metric_kind_t kind;
	const char *name;
	const char *help;
} rn_metric_def_t;

/* Registers defs[0..n) in table order (the order of /metrics). */
void rn_metrics_register(rn_metrics_t *m, void *base, const rn_metric_def_t *defs, size_t n);

void rn_counter_add(rn_counter_t *c, uint64_t v);
void rn_gauge_set(rn_gauge_t *g, int64_t v);
void rn_gauge_add(rn_gauge_t *g, int64_t v);
int64_t rn_gauge_get(rn_gauge_t *g);
uint64_t rn_counter_get(rn_counter_t *c);
void rn_hist_observe(rn_hist_t *h, double v);

/* Latency buckets in seconds, 0.5 ms .. 60 s. */
extern const double rn_metrics_latency_bounds[];
extern const size_t rn_metrics_latency_nbounds;

/* Renders every series; returns a malloc'd NUL-terminated text (length in *lenp). */
char *rn_metrics_render(rn_metrics_t *m, size_t *lenp);

#endif
