/*
 * common/util.h - small helpers every runnel program shares: clocks, the
 * Redis URL, the stop signals of a blocking program, a body read in pieces.
 */
#ifndef RUNNEL_COMMON_UTIL_H
#define RUNNEL_COMMON_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* Wall clock in ms since the epoch (envelope ts, state hash). */
int64_t rn_now_ms(void);
/* Monotonic clock in ms (deadlines, latencies). */
int64_t rn_mono_ms(void);
/* Monotonic clock in µs. */
int64_t rn_mono_us(void);
/* pthread_cond_timedwait for at most ms from now (the condition's clock is
 * CLOCK_REALTIME); the caller holds mu.  Returns its result (ETIMEDOUT). */
int rn_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, long ms);
/* Starts fn(arg) on a new thread named name (at most 15 characters: what
 * top -H, perf and /proc show), with a stack of stack_size bytes (0: the
 * default), detached when detached.  0, or pthread_create's error number. */
int rn_thread_start(pthread_t *t, const char *name, size_t stack_size, int detached, void *(*fn)(void *),
                    void *arg);

typedef struct rn_redis_url {
	char host[256];
	int port;
	char password[256]; /* "" when none; a secret: never log it */
	int db;
} rn_redis_url_t;

/* Parses redis://[[user]:password@]host[:port][/db].  0 or -1 with errstr;
 * the error never quotes the password. */
int rn_redis_url_parse(const char *url, rn_redis_url_t *out, char *errstr, size_t errstr_size);

/* For programs without an event loop (the CLI, runnel-agent): handler runs
 * on SIGTERM and SIGINT (no SA_RESTART, so a blocking call returns EINTR),
 * and SIGPIPE is ignored so a closed pipe is an error, not death. */
void rn_stop_signals_install(void (*handler)(int));

#endif
