/*
 * common/log.c - JSON log lines on stderr.  jansson does the escaping so a
 * hostile string (an agent's output quoted in a message) cannot break the
 * line structure.
 */
#include "log.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *log_comp = "runnel";
static rn_log_level_t log_min = RN_LOG_INFO;
static int log_fd = 2;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

/*
 * The trace ids of the runs in this process (a worker has at most a few
 * hundred at once): a small open table under a mutex, looked up by run id
 * for every line that names a run.  Full: a run's lines go without.
 */
#define TRACE_SLOTS 1024
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char run_id[65];
	char trace_id[33];
} traces[TRACE_SLOTS];
static size_t ntraces;

void rn_log_trace_set(const char *run_id, const char *trace_id)
{
	if (!run_id || !trace_id || strlen(run_id) > 64 || strlen(trace_id) != 32)
		return;
	pthread_mutex_lock(&trace_mu);
	size_t free_slot = TRACE_SLOTS;
	for (size_t i = 0; i < TRACE_SLOTS && ntraces > 0; i++) {
		if (traces[i].run_id[0] && strcmp(traces[i].run_id, run_id) == 0) {
			free_slot = TRACE_SLOTS + 1; /* already there */
			break;
		}
	}
	if (free_slot == TRACE_SLOTS) {
		for (size_t i = 0; i < TRACE_SLOTS; i++) {
			if (!traces[i].run_id[0]) {
				snprintf(traces[i].run_id, sizeof(traces[i].run_id), "%s", run_id);
				memcpy(traces[i].trace_id, trace_id, 33);
				ntraces++;
				break;
			}
		}
	}
	pthread_mutex_unlock(&trace_mu);
}

void rn_log_trace_clear(const char *run_id)
{
	if (!run_id)
		return;
	pthread_mutex_lock(&trace_mu);
	for (size_t i = 0; i < TRACE_SLOTS && ntraces > 0; i++) {
		if (traces[i].run_id[0] && strcmp(traces[i].run_id, run_id) == 0) {
			traces[i].run_id[0] = '\0';
			ntraces--;
			break;
		}
	}
	pthread_mutex_unlock(&trace_mu);
}

/* The trace id of run_id into out (33 bytes); 0 when it has none. */
static int trace_of(const char *run_id, char *out)
{
	int found = 0;
	pthread_mutex_lock(&trace_mu);
	for (size_t i = 0; i < TRACE_SLOTS && ntraces > 0; i++) {
		if (traces[i].run_id[0] && strcmp(traces[i].run_id, run_id) == 0) {
			memcpy(out, traces[i].trace_id, 33);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&trace_mu);
	return found;
}

void rn_log_init(const char *comp, rn_log_level_t min_level)
{
	log_comp = comp;
	log_min = min_level;
}

void rn_log_set_fd(int fd)
{
	log_fd = fd;
}

int rn_log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

static void vlog(rn_log_level_t level, const char *run_id, const char *trace_id, const char *event,
                 const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

void rn_log(rn_log_level_t level, const char *run_id, const char *event,
            const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level, run_id, NULL, event, fmt, ap);
	va_end(ap);
}

void rn_log_traced(rn_log_level_t level, const char *run_id, const char *trace_id, const char *event,
                   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level, run_id, trace_id && strlen(trace_id) == 32 ? trace_id : NULL, event, fmt, ap);
	va_end(ap);
}

static void vlog(rn_log_level_t level, const char *run_id, const char *trace_id, const char *event,
                 const char *fmt, va_list ap)
{
	if (level < log_min || level > RN_LOG_ERROR)
		return;

	char msg[2048];
	vsnprintf(msg, sizeof(msg), fmt, ap);

	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	char ts[40];
	size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, sizeof(ts) - n, ".%03dZ", (int)(tv.tv_usec / 1000));

	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "ts", json_string(ts));
	json_object_set_new(o, "level", json_string(level_names[level]));
	json_object_set_new(o, "comp", json_string(log_comp));
	json_object_set_new(o, "event", json_string(event));
	if (run_id) {
		char tid[33];
		json_object_set_new(o, "run_id", json_string(run_id));
		if (trace_id)
			json_object_set_new(o, "trace_id", json_string(trace_id));
		else if (trace_of(run_id, tid))
			json_object_set_new(o, "trace_id", json_string(tid));
	}
	/* json_string() refuses invalid UTF-8; fall back to a lossy copy. */
	json_t *m = json_string(msg);
	if (!m) {
		for (char *p = msg; *p; p++)
			if ((unsigned char)*p >= 0x80)
				*p = '?';
		m = json_string(msg);
	}
	if (m)
		json_object_set_new(o, "msg", m);

	char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!line)
		return;
	size_t len = strlen(line);
	char *buf = realloc(line, len + 2);
	if (!buf) {
		free(line);
		return;
	}
	buf[len] = '\n';
	ssize_t w = write(log_fd, buf, len + 1);
	(void)w;
	free(buf);
}
