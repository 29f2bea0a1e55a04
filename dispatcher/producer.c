/*
 * dispatcher/producer.c - librdkafka producer wired into the libevent loop
 * (see producer.h).
 */
#include "dispatcher/producer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

struct dispatcher_producer {
	rd_kafka_t *rk;
	rd_kafka_topic_t *topic;
	int pipe_fd[2];
	struct event *ev_pipe;
	struct event *ev_tick;
	int outstanding;
};

/* One message in flight: who to tell when its report arrives. */
typedef struct delivery {
	dispatcher_delivery_cb cb;
	void *arg;
} delivery_t;

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	dispatcher_producer_t *p = opaque;
	delivery_t *d = m->_private;

	(void)rk;
	p->outstanding--;
	if (!d)
		return;
	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
		d->cb(d->arg, 1, 1, NULL);
	} else {
		rd_kafka_msg_status_t st = rd_kafka_message_status(m);

		d->cb(d->arg, 0, st != RD_KAFKA_MSG_STATUS_NOT_PERSISTED, rd_kafka_err2str(m->err));
	}
	free(d);
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (level <= 3)
		rn_log_error(NULL, "kafka_log", "%s: %s", fac, buf);
	else if (level <= 4)
		rn_log_warn(NULL, "kafka_log", "%s: %s", fac, buf);
	else
		rn_log_debug(NULL, "kafka_log", "%s: %s", fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	(void)rk;
	(void)opaque;
	rn_log_warn(NULL, "kafka_error", "%s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static void serve(dispatcher_producer_t *p)
{
	/* The io event fires only on the empty -> non-empty transition, so
	 * drain the queue completely each time. */
	while (rd_kafka_poll(p->rk, 0) > 0)
		;
}

static void on_pipe(evutil_socket_t fd, short what, void *arg)
{
	char buf[64];

	(void)what;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	serve(arg);
}

/* A safety net in case a wake-up is ever missed; cheap when idle. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	serve(arg);
}

static int set_conf(rd_kafka_conf_t *conf, const char *k, const char *v,
                    char *errstr, size_t errstr_size)
{
	char err[256];

	if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
		snprintf(errstr, errstr_size, "kafka property %s: %s", k, err);
		return -1;
	}
	return 0;
}

dispatcher_producer_t *dispatcher_producer_new(struct event_base *base,
                                               const dispatcher_config_t *cfg,
                                               char *errstr, size_t errstr_size)
{
	dispatcher_producer_t *p = calloc(1, sizeof(*p));
	rd_kafka_conf_t *conf;
	char num[32], err[256];
	struct timeval tick = { 0, 100 * 1000 };

	if (!p) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	p->pipe_fd[0] = p->pipe_fd[1] = -1;
	conf = rd_kafka_conf_new();
	snprintf(num, sizeof(num), "%ld", cfg->enqueue_timeout_ms);
	/* Defaults first so that -X can override any of them. */
	if (set_conf(conf, "bootstrap.servers", cfg->kafka_brokers, errstr, errstr_size) < 0 ||
	    set_conf(conf, "client.id", "runnel-dispatcher", errstr, errstr_size) < 0 ||
	    set_conf(conf, "message.timeout.ms", num, errstr, errstr_size) < 0 ||
	    set_conf(conf, "acks", "all", errstr, errstr_size) < 0 ||
	    set_conf(conf, "linger.ms", "1", errstr, errstr_size) < 0 ||
	    set_conf(conf, "socket.keepalive.enable", "true", errstr, errstr_size) < 0)
		goto fail_conf;
	for (size_t i = 0; i < cfg->kafka_props.n; i++)
		if (set_conf(conf, cfg->kafka_props.items[i].key, cfg->kafka_props.items[i].value,
		             errstr, errstr_size) < 0)
			goto fail_conf;
	rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	rd_kafka_conf_set_opaque(conf, p);
	/* rd_kafka_new() takes ownership of conf on success only. */
	p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!p->rk) {
		snprintf(errstr, errstr_size, "kafka: %s", err);
		goto fail_conf;
	}
	conf = NULL;
	p->topic = rd_kafka_topic_new(p->rk, cfg->jobs_topic, NULL);
	if (!p->topic) {
		snprintf(errstr, errstr_size, "kafka topic %s: %s", cfg->jobs_topic,
		         rd_kafka_err2str(rd_kafka_last_error()));
		goto fail;
	}
	if (pipe2(p->pipe_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(errstr, errstr_size, "pipe: %s", strerror(errno));
		goto fail;
	}
	{
		rd_kafka_queue_t *q = rd_kafka_queue_get_main(p->rk);

		rd_kafka_queue_io_event_enable(q, p->pipe_fd[1], "1", 1);
		rd_kafka_queue_destroy(q);
	}
	p->ev_pipe = event_new(base, p->pipe_fd[0], EV_READ | EV_PERSIST, on_pipe, p);
	p->ev_tick = event_new(base, -1, EV_PERSIST, on_tick, p);
	if (!p->ev_pipe || !p->ev_tick ||
	    event_add(p->ev_pipe, NULL) < 0 || event_add(p->ev_tick, &tick) < 0) {
		snprintf(errstr, errstr_size, "libevent: cannot add the kafka events");
		goto fail;
	}
	return p;

fail_conf:
	if (conf)
		rd_kafka_conf_destroy(conf);
fail:
	dispatcher_producer_free(p, 0);
	return NULL;
}

int dispatcher_producer_send(dispatcher_producer_t *p, const char *key,
                             const void *value, size_t len,
                             dispatcher_delivery_cb cb, void *arg,
                             char *errstr, size_t errstr_size)
{
	delivery_t *d = malloc(sizeof(*d));

	if (!d) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	d->cb = cb;
	d->arg = arg;
	if (rd_kafka_produce(p->topic, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
	                     (void *)value, len, key, strlen(key), d) < 0) {
		snprintf(errstr, errstr_size, "%s", rd_kafka_err2str(rd_kafka_last_error()));
		free(d);
		return -1;
	}
	p->outstanding++;
	return 0;
}

int dispatcher_producer_outstanding(dispatcher_producer_t *p)
{
	return p->outstanding;
}

rd_kafka_t *dispatcher_producer_handle(dispatcher_producer_t *p)
{
	return p->rk;
}

void dispatcher_producer_free(dispatcher_producer_t *p, int flush_ms)
{
	if (!p)
		return;
	if (p->rk) {
		/* rd_kafka_flush serves the delivery callbacks itself. */
		if (flush_ms > 0)
			rd_kafka_flush(p->rk, flush_ms);
		/* Anything left is purged: its callback reports the failure. */
		rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_poll(p->rk, 0);
		{
			rd_kafka_queue_t *q = rd_kafka_queue_get_main(p->rk);

			rd_kafka_queue_io_event_enable(q, -1, NULL, 0);
			rd_kafka_queue_destroy(q);
		}
	}
	if (p->ev_pipe)
		event_free(p->ev_pipe);
	if (p->ev_tick)
		event_free(p->ev_tick);
	if (p->topic)
		rd_kafka_topic_destroy(p->topic);
	if (p->rk)
		rd_kafka_destroy(p->rk);
	if (p->pipe_fd[0] >= 0)
		close(p->pipe_fd[0]);
	if (p->pipe_fd[1] >= 0)
		close(p->pipe_fd[1]);
	free(p);
}
