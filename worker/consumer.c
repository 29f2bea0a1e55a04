/*
 * worker/consumer.c - the job topic consumer (see consumer.h).
 *
 * Prefetch is kept tiny so that a worker with full slots never sits on jobs
 * another worker could run: a paused partition's fetched messages are
 * purged by librdkafka and fetched again from the next unconsumed offset on
 * resume.
 */
#include "worker/consumer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

struct worker_consumer {
	rd_kafka_t       *rk;
	rd_kafka_queue_t *q;
	rd_kafka_t       *dlq;        /* created on first use */
	int               pipefd[2];
	int               paused;
	int               assigned;
	const worker_config_t *cfg;   /* borrowed, outlives us */
	rd_kafka_resp_err_t dr_err;
	int               dr_done;
	uintptr_t         dr_seq;     /* the DLQ message waited for */
};

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	rn_log_level_t l = level <= 3 ? RN_LOG_ERROR : level <= 4 ? RN_LOG_WARN :
	                   level <= 6 ? RN_LOG_INFO : RN_LOG_DEBUG;
	rn_log(l, NULL, "kafka_log", "%s: %s", fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	rn_log_warn(NULL, "kafka_error", "%s: %s", rd_kafka_err2name(err), reason);
}

static void pause_list(worker_consumer_t *wc, rd_kafka_topic_partition_list_t *l, int pause)
{
	if (!l || l->cnt == 0)
		return;
	rd_kafka_resp_err_t err = pause ? rd_kafka_pause_partitions(wc->rk, l)
	                                : rd_kafka_resume_partitions(wc->rk, l);
	if (err)
		rn_log_warn(NULL, "kafka_pause", "%s partitions: %s",
		            pause ? "pause" : "resume", rd_kafka_err2str(err));
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	worker_consumer_t *wc = opaque;
	int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");

	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		if (coop) {
			rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
			if (e) {
				rn_log_error(NULL, "kafka_assign", "%s", rd_kafka_error_string(e));
				rd_kafka_error_destroy(e);
			}
			wc->assigned += parts->cnt;
		} else {
			rd_kafka_assign(rk, parts);
			wc->assigned = parts->cnt;
		}
		/* Full slots survive a rebalance: new partitions start paused. */
		if (wc->paused)
			pause_list(wc, parts, 1);
		rn_log_info(NULL, "kafka_assigned", "%d partition(s) assigned%s",
		            parts->cnt, wc->paused ? " (paused: slots full)" : "");
	} else {
		if (coop) {
			rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
			if (e)
				rd_kafka_error_destroy(e);
			wc->assigned -= parts->cnt;
			if (wc->assigned < 0)
				wc->assigned = 0;
		} else {
			rd_kafka_assign(rk, NULL);
			wc->assigned = 0;
		}
		rn_log_info(NULL, "kafka_revoked", "%d partition(s) revoked", parts->cnt);
	}
}

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v,
                    char *errstr, size_t errstr_size)
{
	char err[256];
	if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
		snprintf(errstr, errstr_size, "kafka property %s: %s", k, err);
		return -1;
	}
	return 0;
}

/* Builds a conf with the brokers and the -X properties last (they win). */
static rd_kafka_conf_t *conf_build(const worker_config_t *cfg, const char *const *defaults,
                                   int producer, char *errstr, size_t errstr_size)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	if (conf_set(conf, "bootstrap.servers", cfg->kafka_brokers, errstr, errstr_size) < 0)
		goto fail;
	if (conf_set(conf, "client.id", "runnel-worker", errstr, errstr_size) < 0)
		goto fail;
	for (size_t i = 0; defaults && defaults[i]; i += 2)
		if (conf_set(conf, defaults[i], defaults[i + 1], errstr, errstr_size) < 0)
			goto fail;
	for (size_t i = 0; i < cfg->kafka_props.n; i++) {
		const rn_kv_t *kv = &cfg->kafka_props.items[i];
		char err[256];
		if (rd_kafka_conf_set(conf, kv->key, kv->value, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
			/* A consumer-only property is fine to skip on the producer. */
			if (producer)
				continue;
			snprintf(errstr, errstr_size, "-X %s: %s", kv->key, err);
			goto fail;
		}
	}
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	return conf;
fail:
	rd_kafka_conf_destroy(conf);
	return NULL;
}

worker_consumer_t *worker_consumer_new(const worker_config_t *cfg,
                                       char *errstr, size_t errstr_size)
{
	static const char *const defaults[] = {
		"enable.auto.offset.store", "false",
		"enable.auto.commit", "true",
		"auto.commit.interval.ms", "1000",
		"auto.offset.reset", "earliest",
		/*
		 * Never hoard: the pause when the slots are full purges whatever
		 * was prefetched, and the prefetch itself is capped in bytes.
		 * queued.min.messages stays at librdkafka's default on purpose: a
		 * small value stops fetching a partition once that many messages
		 * are queued, and after a resume the fetcher then only looks again
		 * on its next wake-up (about 1 s per slot freed).
		 */
		"queued.max.messages.kbytes", "64",
		"max.partition.fetch.bytes", "65536",
		"fetch.wait.max.ms", "100",
		"fetch.error.backoff.ms", "100",
		"reconnect.backoff.ms", "50",
		"reconnect.backoff.max.ms", "1000",
		NULL,
	};
	worker_consumer_t *wc = calloc(1, sizeof(*wc));
	if (!wc) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	wc->cfg = cfg;
	wc->pipefd[0] = wc->pipefd[1] = -1;

	rd_kafka_conf_t *conf = conf_build(cfg, defaults, 0, errstr, errstr_size);
	if (!conf)
		goto fail;
	if (conf_set(conf, "group.id", cfg->group, errstr, errstr_size) < 0) {
		rd_kafka_conf_destroy(conf);
		goto fail;
	}
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	rd_kafka_conf_set_opaque(conf, wc);

	char err[512];
	/* rd_kafka_new() takes ownership of conf on success only. */
	wc->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (!wc->rk) {
		rd_kafka_conf_destroy(conf);
		snprintf(errstr, errstr_size, "kafka consumer: %s", err);
		goto fail;
	}
	rd_kafka_poll_set_consumer(wc->rk);
	wc->q = rd_kafka_queue_get_consumer(wc->rk);

	if (pipe2(wc->pipefd, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(errstr, errstr_size, "pipe: %s", strerror(errno));
		goto fail;
	}
	rd_kafka_queue_io_event_enable(wc->q, wc->pipefd[1], "1", 1);

	rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, cfg->jobs_topic, RD_KAFKA_PARTITION_UA);
	rd_kafka_resp_err_t e = rd_kafka_subscribe(wc->rk, topics);
	rd_kafka_topic_partition_list_destroy(topics);
	if (e) {
		snprintf(errstr, errstr_size, "kafka subscribe %s: %s", cfg->jobs_topic, rd_kafka_err2str(e));
		goto fail;
	}
	return wc;
fail:
	worker_consumer_close(wc);
	return NULL;
}

int worker_consumer_fd(worker_consumer_t *wc)
{
	return wc->pipefd[0];
}

void worker_consumer_ack_fd(worker_consumer_t *wc)
{
	char buf[64];
	while (read(wc->pipefd[0], buf, sizeof(buf)) > 0)
		;
}

rd_kafka_message_t *worker_consumer_poll(worker_consumer_t *wc)
{
	for (;;) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(wc->rk, 0);
		if (!m)
			return NULL;
		if (!m->err)
			return m;
		if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			rn_log_warn(NULL, "kafka_consume", "%s", rd_kafka_message_errstr(m));
		rd_kafka_message_destroy(m);
	}
}

void worker_consumer_set_paused(worker_consumer_t *wc, int paused)
{
	if (wc->paused == paused)
		return;
	wc->paused = paused;
	rd_kafka_topic_partition_list_t *parts = NULL;
	if (rd_kafka_assignment(wc->rk, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR && parts) {
		pause_list(wc, parts, paused);
		/*
		 * librdkafka (2.0) applies a resume on its main thread; a broker
		 * thread whose partitions were all paused has no fetch in flight
		 * and only notices about a second later.  Any request to that
		 * broker wakes it, so ask the leader of the first partition for its
		 * watermarks (one round trip, bounded).  Partitions led by other
		 * brokers still resume within that second.
		 */
		if (!paused && parts->cnt > 0) {
			int64_t lo, hi;
			rd_kafka_query_watermark_offsets(wc->rk, parts->elems[0].topic,
			                                 parts->elems[0].partition, &lo, &hi, 100);
		}
		rd_kafka_topic_partition_list_destroy(parts);
	}
}

void worker_consumer_store(worker_consumer_t *wc, const rd_kafka_message_t *m)
{
	rd_kafka_resp_err_t e = rd_kafka_offset_store(m->rkt, m->partition, m->offset);
	if (e)
		rn_log_warn(NULL, "kafka_offset_store", "partition %d offset %lld: %s",
		            (int)m->partition, (long long)m->offset, rd_kafka_err2str(e));
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	worker_consumer_t *wc = opaque;
	/* A report for an earlier message that timed out here is not ours. */
	if ((uintptr_t)m->_private != wc->dr_seq)
		return;
	wc->dr_err = m->err;
	wc->dr_done = 1;
}

int worker_consumer_dlq(worker_consumer_t *wc, const rd_kafka_message_t *m,
                        const char *reason, int timeout_ms,
                        void (*idle)(void *), void *idle_arg,
                        char *errstr, size_t errstr_size)
{
	if (!wc->dlq) {
		static const char *const defaults[] = {
			"linger.ms", "0",
			"message.timeout.ms", "30000",
			"enable.idempotence", "false",
			NULL,
		};
		rd_kafka_conf_t *conf = conf_build(wc->cfg, defaults, 1, errstr, errstr_size);
		if (!conf)
			return -1;
		rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
		rd_kafka_conf_set_opaque(conf, wc);
		char err[512];
		wc->dlq = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
		if (!wc->dlq) {
			rd_kafka_conf_destroy(conf);
			snprintf(errstr, errstr_size, "kafka producer: %s", err);
			return -1;
		}
	}
	wc->dr_done = 0;
	wc->dr_err = 0;
	wc->dr_seq++;
	rd_kafka_resp_err_t e = rd_kafka_producev(
		wc->dlq,
		RD_KAFKA_V_TOPIC(wc->cfg->dlq_topic),
		RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		RD_KAFKA_V_KEY(m->key, m->key_len),
		RD_KAFKA_V_VALUE(m->payload, m->len),
		RD_KAFKA_V_HEADER("reason", reason, -1),
		RD_KAFKA_V_HEADER("worker", wc->cfg->worker_id, -1),
		RD_KAFKA_V_OPAQUE((void *)wc->dr_seq),
		RD_KAFKA_V_END);
	if (e) {
		snprintf(errstr, errstr_size, "produce to %s: %s", wc->cfg->dlq_topic, rd_kafka_err2str(e));
		return -1;
	}
	/* Waited for in slices: the caller's main thread also renews leases. */
	int64_t deadline = rn_mono_ms() + timeout_ms;
	while (!wc->dr_done && rn_mono_ms() < deadline) {
		rd_kafka_poll(wc->dlq, 100);
		if (idle)
			idle(idle_arg);
	}
	if (!wc->dr_done) {
		snprintf(errstr, errstr_size, "produce to %s: no delivery within %d ms", wc->cfg->dlq_topic, timeout_ms);
		return -1;
	}
	if (wc->dr_err) {
		snprintf(errstr, errstr_size, "produce to %s: %s", wc->cfg->dlq_topic, rd_kafka_err2str(wc->dr_err));
		return -1;
	}
	return 0;
}

int worker_consumer_assigned(worker_consumer_t *wc)
{
	return wc->assigned;
}

void worker_consumer_close(worker_consumer_t *wc)
{
	if (!wc)
		return;
	if (wc->rk) {
		rd_kafka_resp_err_t e = rd_kafka_consumer_close(wc->rk);
		if (e)
			rn_log_warn(NULL, "kafka_close", "%s", rd_kafka_err2str(e));
		if (wc->q)
			rd_kafka_queue_destroy(wc->q);
		rd_kafka_destroy(wc->rk);
	}
	if (wc->dlq) {
		rd_kafka_flush(wc->dlq, 5000);
		rd_kafka_destroy(wc->dlq);
	}
	if (wc->pipefd[0] >= 0)
		close(wc->pipefd[0]);
	if (wc->pipefd[1] >= 0)
		close(wc->pipefd[1]);
	free(wc);
}
