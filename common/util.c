/*
 * common/util.c - clocks, thread starts, timed waits, the Redis URL parser,
 * the stop signals, the body buffer.
 */
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int64_t rn_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rn_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rn_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int rn_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_cond_timedwait(cond, mu, &ts);
}

int rn_thread_start(pthread_t *t, const char *name, size_t stack_size, int detached, void *(*fn)(void *),
                    void *arg)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (stack_size)
		pthread_attr_setstacksize(&attr, stack_size);
	if (detached)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (e == 0 && name)
		pthread_setname_np(*t, name);
	return e;
}

int rn_redis_url_parse(const char *url, rn_redis_url_t *out, char *errstr, size_t errstr_size)
{
	memset(out, 0, sizeof(*out));
	out->port = 6379;

	const char *p = url;
	if (strncmp(p, "redis://", 8) != 0) {
		snprintf(errstr, errstr_size, "redis url: must start with redis://");
		return -1;
	}
	p += 8;

	const char *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (!colon) {
			snprintf(errstr, errstr_size, "redis url: expected [user]:password@ before the host");
			return -1;
		}
		size_t plen = (size_t)(at - colon - 1);
		if (plen >= sizeof(out->password)) {
			snprintf(errstr, errstr_size, "redis url: password too long");
			return -1;
		}
		memcpy(out->password, colon + 1, plen);
		out->password[plen] = '\0';
		p = at + 1;
	}

	const char *hend = p + strcspn(p, ":/");
	size_t hlen = (size_t)(hend - p);
	if (hlen == 0 || hlen >= sizeof(out->host)) {
		snprintf(errstr, errstr_size, "redis url: missing or overlong host");
		return -1;
	}
	memcpy(out->host, p, hlen);
	out->host[hlen] = '\0';
	p = hend;

	if (*p == ':') {
		char *end;
		errno = 0;
		long port = strtol(p + 1, &end, 10);
		if (errno || end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/')) {
			snprintf(errstr, errstr_size, "redis url: bad port");
			return -1;
		}
		out->port = (int)port;
		p = end;
	}
	if (*p == '/') {
		p++;
		if (*p) {
			char *end;
			errno = 0;
			long db = strtol(p, &end, 10);
			if (errno || end == p || *end || db < 0 || db > 1000000) {
				snprintf(errstr, errstr_size, "redis url: bad database number");
				return -1;
			}
			out->db = (int)db;
		}
	} else if (*p) {
		snprintf(errstr, errstr_size, "redis url: unexpected text after the host");
		return -1;
	}
	return 0;
}

void rn_stop_signals_install(void (*handler)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}
