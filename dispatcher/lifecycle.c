/*
 * dispatcher/lifecycle.c - the dispatcher's start, graceful drain and stop:
 * dispatcher_init wires every component (metrics, Kafka producer, Redis
 * store, tail connections, the HTTP listener, the janitor thread) onto the
 * shared loop; dispatcher_drain and dispatcher_fini take them down again in
 * the order that lets callers in flight get their real answer.
 */
#include "dispatcher/dispatcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>

#include "common/log.h"
#include "common/rcluster.h"
#include "common/util.h"

/* How long the loop runs after the streams were ended at a stop, so that
 * the last chunks and 503s reach their sockets. */
#define DRAIN_WRITE_MS 300

/* Splits "host:port" / "[v6]:port". */
static int split_listen(const char *s, char *host, size_t hsize, unsigned short *port)
{
	const char *colon = strrchr(s, ':');
	size_t hl;
	char *end = NULL;
	long p;

	if (!colon)
		return -1;
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	if (hl == 0 || hl >= hsize)
		return -1;
	memcpy(host, s, hl);
	host[hl] = '\0';
	p = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
		return -1;
	*port = (unsigned short)p;
	return 0;
}

int dispatcher_init(dispatcher_t *d, struct event_base *base, const dispatcher_config_t *cfg,
                    char *errstr, size_t errstr_size)
{
	char host[64];
	unsigned short port;
	char uerr[160];
	int kind;

	memset(d, 0, sizeof(*d));
	d->base = base;
	d->cfg = cfg;
	if (rn_redis_url_parse(cfg->redis_url, &d->redis_url, uerr, sizeof(uerr)) < 0) {
		snprintf(errstr, errstr_size, "--redis-url/RUNNEL_REDIS_URL: %s", uerr);
		return -1;
	}
	/*
	 * A wrong Redis is refused at start with the reason, not met by a
	 * reconnect loop.  What answers decides how the connections below
	 * route (a cluster: by slot, tails woken through sharded pub/sub).
	 * A Redis that does not answer yet is left to their reconnect loops,
	 * which find out what it is once it answers (CLUSTER SLOTS).
	 */
	kind = rn_rcluster_probe(&d->redis_url, 1000, uerr, sizeof(uerr));
	if (kind == -1) {
		snprintf(errstr, errstr_size, "--redis-url/RUNNEL_REDIS_URL: %s", uerr);
		return -1;
	}
	if (kind == 1)
		rn_log_info(NULL, "redis_cluster", "%s:%d is a Redis Cluster node: commands are routed by slot",
		            d->redis_url.host, d->redis_url.port);
	if (split_listen(cfg->listen, host, sizeof(host), &port) < 0) {
		snprintf(errstr, errstr_size, "--listen/RUNNEL_LISTEN: expected host:port");
		return -1;
	}
	d->metrics = rn_metrics_new();
	if (!d->metrics) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	dispatcher_http_metrics(d);
	d->producer = dispatcher_producer_new(base, cfg, errstr, errstr_size);
	if (!d->producer)
		return -1;
	d->store = dispatcher_store_new(base, &d->redis_url, kind == -2 ? -1 : kind, cfg->key_prefix, errstr,
	                                errstr_size);
	if (!d->store)
		return -1;
	d->tail = dispatcher_tail_new(base, &d->redis_url, kind == -2 ? -1 : kind, cfg->key_prefix, (int)cfg->tail_connections,
	                              cfg->tail_block_ms, cfg->tail_batch, d->store, d->metrics);
	if (!d->tail) {
		snprintf(errstr, errstr_size, "cannot set up the tail connections");
		return -1;
	}
	if (dispatcher_http_listen(d, host, port, errstr, errstr_size) < 0)
		return -1;
	d->janitor = dispatcher_janitor_start(d, errstr, errstr_size);
	if (!d->janitor)
		return -1;
	return 0;
}

static void drain_tick(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_t *d = arg;

	(void)fd;
	(void)what;
	if (d->draining == 1) {
		if (d->enqueues && rn_mono_ms() < d->drain_until_ms)
			return;
		d->draining = 2;
		dispatcher_feed_end_all(d);
		dispatcher_runs_abort_all(d);
		d->drain_until_ms = rn_mono_ms() + DRAIN_WRITE_MS;
		return;
	}
	if (rn_mono_ms() >= d->drain_until_ms)
		event_base_loopbreak(d->base);
}

void dispatcher_drain(dispatcher_t *d, int flush_ms)
{
	if (d->draining) {
		event_base_loopbreak(d->base);
		return;
	}
	d->draining = 1;
	if (d->sock)
		evhttp_del_accept_socket(d->http, d->sock);
	d->sock = NULL;
	d->drain_until_ms = rn_mono_ms() + flush_ms;
	d->ev_drain = event_new(d->base, -1, EV_PERSIST, drain_tick, d);
	if (!d->ev_drain || event_add(d->ev_drain, &(struct timeval){ 0, 20 * 1000 }) < 0)
		event_base_loopbreak(d->base);
}

void dispatcher_fini(dispatcher_t *d, int flush_ms)
{
	if (d->ev_drain)
		event_free(d->ev_drain);
	d->ev_drain = NULL;
	dispatcher_janitor_stop(d->janitor);
	d->janitor = NULL;
	if (d->http) {
		dispatcher_feed_end_all(d);
		dispatcher_runs_abort_all(d);
	}
	/* Delivery callbacks of aborted enqueues only free their state now. */
	dispatcher_producer_free(d->producer, flush_ms);
	d->producer = NULL;
	/* So do enqueues still waiting on a webhook host's addresses. */
	if (d->dns)
		evdns_base_free(d->dns, 1);
	d->dns = NULL;
	if (d->http)
		evhttp_free(d->http);
	d->http = NULL;
	dispatcher_conns_fini(d);
	dispatcher_tail_free(d->tail);
	d->tail = NULL;
	dispatcher_store_free(d->store);
	d->store = NULL;
	rn_metrics_free(d->metrics);
	d->metrics = NULL;
}
