/*
 * dispatcher/main.c - runnel-dispatcher: parse the configuration, run the
 * event loop until SIGTERM/SIGINT, then end open streams, flush Kafka and
 * exit.  The only place that prints or exits.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "common/log.h"
#include "dispatcher/config.h"
#include "dispatcher/dispatcher.h"
#include "proto/job.h"

#define DRAIN_FLUSH_MS 5000

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	dispatcher_t *d = arg;

	(void)what;
	if (d->draining)
		rn_log_info(NULL, "shutdown", "signal %d again: stopping now", (int)sig);
	else
		rn_log_info(NULL, "shutdown", "signal %d: no new connections; answering the enqueues in flight",
		            (int)sig);
	dispatcher_drain(d, DRAIN_FLUSH_MS);
}

int main(int argc, char **argv)
{
	dispatcher_config_t cfg;
	dispatcher_t d;
	struct event_base *base;
	struct event *ev_term, *ev_int;
	char err[512];
	int rc;

	memset(&cfg, 0, sizeof(cfg));
	rn_log_init("dispatcher", RN_LOG_INFO);
	rc = dispatcher_config_parse(&cfg, argc, argv, stdout, err, sizeof(err));
	if (rc != 0) {
		if (rc < 0)
			fprintf(stderr, "runnel-dispatcher: %s\n", err);
		dispatcher_config_free(&cfg);
		return rc < 0 ? 2 : 0;
	}
	rn_log_init("dispatcher", (rn_log_level_t)rn_log_level_parse(cfg.log_level));
	if (proto_sodium_init() < 0) {
		fprintf(stderr, "runnel-dispatcher: libsodium cannot initialise\n");
		dispatcher_config_free(&cfg);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	{
		/* Every open stream is a socket: take the whole allowance. */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	{
		/* Each line written to a caller enables and then disables the
		 * socket's write event; the changelist folds such pairs inside
		 * one loop iteration into fewer epoll_ctl calls.  (Its one
		 * caveat, dup()ed fds, does not apply: every fd here is unique.) */
		struct event_config *ecfg = event_config_new();

		if (ecfg)
			event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
		base = ecfg ? event_base_new_with_config(ecfg) : NULL;
		if (ecfg)
			event_config_free(ecfg);
	}
	if (!base) {
		fprintf(stderr, "runnel-dispatcher: event_base_new failed\n");
		dispatcher_config_free(&cfg);
		return 1;
	}
	if (dispatcher_init(&d, base, &cfg, err, sizeof(err)) < 0) {
		rn_log_error(NULL, "start_failed", "%s", err);
		fprintf(stderr, "runnel-dispatcher: %s\n", err);
		dispatcher_fini(&d, 0);
		event_base_free(base);
		dispatcher_config_free(&cfg);
		return 1;
	}
	ev_term = evsignal_new(base, SIGTERM, on_signal, &d);
	ev_int = evsignal_new(base, SIGINT, on_signal, &d);
	event_add(ev_term, NULL);
	event_add(ev_int, NULL);
	rn_log_info(NULL, "listening", "http://%s (kafka %s, topic %s, redis %s:%d, prefix %s, %s jobs, auth %s)",
	            d.bound, cfg.kafka_brokers, cfg.jobs_topic, d.redis_url.host, d.redis_url.port,
	            cfg.key_prefix, cfg.sealed ? "sealed" : "unsealed", cfg.api_token ? "on" : "off");
	event_base_dispatch(base);
	dispatcher_fini(&d, DRAIN_FLUSH_MS);
	event_free(ev_term);
	event_free(ev_int);
	event_base_free(base);
	dispatcher_config_free(&cfg);
	rn_log_info(NULL, "stopped", "bye");
	return 0;
}
