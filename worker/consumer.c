/*
 * worker/consumer.c - the job topic consumer, the record reader used on
 * claim in reference mode, and the DLQ producer (see consumer.h).
 *
 * The consumer never pauses: every record goes into the run-time queue in
 * Redis as soon as it arrives, whatever the slots are doing, so a record
 * never waits on a busy worker's partition.
 */
#include "worker/consumer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "common/log.h"
#include "common/util.h"

struct worker_consumer {
	rd_kafka_t *rk;
	rd_kafka_queue_t *q;
	rd_kafka_t *dlq; /* created on first use */
	int pipefd[2];
	int assigned;
	const worker_config_t *cfg; /* borrowed, outlives us */
	rd_kafka_resp_err_t dr_err;
	int dr_done;
	uintptr_t dr_seq;    /* the DLQ message waited for */
	int64_t dr_deadline; /* mono ms: stop waiting for its report */
	int dr_timeout_ms;
};

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	rn_log_level_t l = level <= 3 ? RN_LOG_ERROR : level <= 4 ? RN_LOG_WARN
	        : level <= 6                                      ? RN_LOG_INFO
	                                                          : RN_LOG_DEBUG;
	rn_log(l, NULL, "kafka_log", "%s: %s", fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	rn_log_warn(NULL, "kafka_error", "%s: %s", rd_kafka_err2name(err), reason);
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
		rn_log_info(NULL, "kafka_assigned", "%d partition(s) assigned", parts->cnt);
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

/* Builds a conf with the brokers and the -X properties last (they win),
 * but for group.id (group; NULL: none). */
static rd_kafka_conf_t *conf_build(const worker_config_t *cfg, const char *const *defaults,
                                   int producer, const char *group, char *errstr, size_t errstr_size)
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
	if (group && conf_set(conf, "group.id", group, errstr, errstr_size) < 0)
		goto fail;
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	return conf;
fail:
	rd_kafka_conf_destroy(conf);
	return NULL;
}

/* rd_kafka_new(), which takes ownership of conf on success only: on failure
 * conf is destroyed and errstr says "kafka <what>: ...". */
static rd_kafka_t *client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, const char *what,
                              char *errstr, size_t errstr_size)
{
	char err[512];
	rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof(err));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		snprintf(errstr, errstr_size, "kafka %s: %s", what, err);
	}
	return rk;
}

worker_consumer_t *worker_consumer_new(const worker_config_t *cfg,
                                       char *errstr, size_t errstr_size)
{
	static const char *const defaults[] = {
		"enable.auto.offset.store",
		"false",
		"enable.auto.commit",
		"true",
		"auto.commit.interval.ms",
		"1000",
		"auto.offset.reset",
		"earliest",
		/*
		 * Records go straight into the Redis queue, so the prefetch only
		 * needs to cover intake while Redis answers; it stays bounded so
		 * that a Redis outage does not buffer much in this process.
		 */
		"queued.max.messages.kbytes",
		"1024",
		"max.partition.fetch.bytes",
		"1048576",
		"fetch.wait.max.ms",
		"100",
		"fetch.error.backoff.ms",
		"100",
		"reconnect.backoff.ms",
		"50",
		"reconnect.backoff.max.ms",
		"1000",
		NULL,
	};
	worker_consumer_t *wc = calloc(1, sizeof(*wc));
	if (!wc) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	wc->cfg = cfg;
	wc->pipefd[0] = wc->pipefd[1] = -1;

	rd_kafka_conf_t *conf = conf_build(cfg, defaults, 0, cfg->group, errstr, errstr_size);
	if (!conf)
		goto fail;
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	rd_kafka_conf_set_opaque(conf, wc);
	wc->rk = client_new(RD_KAFKA_CONSUMER, conf, "consumer", errstr, errstr_size);
	if (!wc->rk)
		goto fail;
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

/* The dead-letter producers' settings under the operator's: each record
 * is sent alone and waited for, so no batching and no idempotence. */
static const char *const dlq_defaults[] = {
	"linger.ms",
	"0",
	"message.timeout.ms",
	"30000",
	"enable.idempotence",
	"false",
	NULL,
};

int worker_consumer_dlq_send(worker_consumer_t *wc, const rd_kafka_message_t *m,
                             const char *reason, int timeout_ms,
                             char *errstr, size_t errstr_size)
{
	if (!wc->dlq) {
		rd_kafka_conf_t *conf = conf_build(wc->cfg, dlq_defaults, 1, NULL, errstr, errstr_size);
		if (!conf)
			return -1;
		rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
		rd_kafka_conf_set_opaque(conf, wc);
		wc->dlq = client_new(RD_KAFKA_PRODUCER, conf, "producer", errstr, errstr_size);
		if (!wc->dlq)
			return -1;
		/* Delivery reports wake the loop through the consumer's pipe. */
		rd_kafka_queue_t *q = rd_kafka_queue_get_main(wc->dlq);
		rd_kafka_queue_io_event_enable(q, wc->pipefd[1], "1", 1);
		rd_kafka_queue_destroy(q);
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
	wc->dr_deadline = rn_mono_ms() + timeout_ms;
	wc->dr_timeout_ms = timeout_ms;
	return 0;
}

int worker_consumer_dlq_result(worker_consumer_t *wc, char *errstr, size_t errstr_size)
{
	/* Serves the delivery report callback, without waiting. */
	rd_kafka_poll(wc->dlq, 0);
	if (!wc->dr_done) {
		if (rn_mono_ms() < wc->dr_deadline)
			return 0;
		/* A late report is told apart by its sequence and ignored. */
		snprintf(errstr, errstr_size, "produce to %s: no delivery within %d ms", wc->cfg->dlq_topic,
		         wc->dr_timeout_ms);
		return -1;
	}
	if (wc->dr_err) {
		snprintf(errstr, errstr_size, "produce to %s: %s", wc->cfg->dlq_topic, rd_kafka_err2str(wc->dr_err));
		return -1;
	}
	return 1;
}

/* ------------------------------------------------------------------------
 * The record reader (reference mode)
 * ------------------------------------------------------------------------ */

/*
 * Claims take runs in queue order, which is mostly record order within a
 * partition, so the reader keeps its partition assigned and keeps the
 * records a fetch brought beyond the one asked for (a bounded read-ahead):
 * the next claims are then answered from memory instead of a new
 * assign-and-fetch round trip to the broker each.  The kept records are
 * unsealed jobs (this is reference mode): they are wiped when taken or
 * dropped, and never outlive the fetcher.
 */
#define FETCH_AHEAD_MAX   64                /* records kept */
#define FETCH_AHEAD_BYTES (4 * 1024 * 1024) /* bytes kept */

typedef struct fetched {
	char *topic;
	int32_t partition;
	int64_t offset;
	char *buf;
	size_t len;
} fetched_t;

struct worker_fetcher {
	rd_kafka_t *rk;
	const worker_config_t *cfg;
	/* The assigned partition and the offset of the next record it gives. */
	char *topic;
	int32_t partition;
	int64_t next;
	fetched_t ahead[FETCH_AHEAD_MAX]; /* oldest first */
	size_t nahead, ahead_bytes;
};

worker_fetcher_t *worker_fetcher_new(const worker_config_t *cfg, char *errstr, size_t errstr_size)
{
	static const char *const defaults[] = {
		"enable.auto.commit",
		"false",
		"enable.auto.offset.store",
		"false",
		"fetch.wait.max.ms",
		"50",
		"fetch.error.backoff.ms",
		"100",
		"queued.max.messages.kbytes",
		"1024",
		"reconnect.backoff.ms",
		"50",
		"reconnect.backoff.max.ms",
		"1000",
		NULL,
	};
	worker_fetcher_t *f = calloc(1, sizeof(*f));
	if (!f) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	f->cfg = cfg;
	/* librdkafka wants a group.id for assign(); the reader never joins
	 * (no subscribe) and commits nothing. */
	char gid[300];
	snprintf(gid, sizeof(gid), "%s.reader", cfg->group);
	rd_kafka_conf_t *conf = conf_build(cfg, defaults, 0, gid, errstr, errstr_size);
	f->rk = conf ? client_new(RD_KAFKA_CONSUMER, conf, "reader", errstr, errstr_size) : NULL;
	if (!f->rk) {
		free(f);
		return NULL;
	}
	rd_kafka_poll_set_consumer(f->rk);
	return f;
}

static void fetched_drop(worker_fetcher_t *f, size_t i)
{
	fetched_t *x = &f->ahead[i];
	if (x->buf) {
		sodium_memzero(x->buf, x->len);
		free(x->buf);
	}
	free(x->topic);
	f->ahead_bytes -= x->len;
	memmove(&f->ahead[i], &f->ahead[i + 1], (f->nahead - i - 1) * sizeof(*x));
	f->nahead--;
}

/* Keeps a record a fetch brought along (the oldest go first when full). */
static void fetched_keep(worker_fetcher_t *f, const rd_kafka_message_t *m)
{
	if (m->len > FETCH_AHEAD_BYTES)
		return;
	while (f->nahead && (f->nahead == FETCH_AHEAD_MAX || f->ahead_bytes + m->len > FETCH_AHEAD_BYTES))
		fetched_drop(f, 0);
	fetched_t *x = &f->ahead[f->nahead];
	x->topic = strdup(rd_kafka_topic_name(m->rkt));
	x->buf = malloc(m->len + 1);
	if (!x->topic || !x->buf) {
		free(x->topic);
		free(x->buf);
		return;
	}
	if (m->len)
		memcpy(x->buf, m->payload, m->len);
	x->buf[m->len] = '\0';
	x->len = m->len;
	x->partition = m->partition;
	x->offset = m->offset;
	f->ahead_bytes += m->len;
	f->nahead++;
}

/* Hands a kept record over (0), or -1 when it is not kept. */
static int fetched_take(worker_fetcher_t *f, const char *topic, int32_t partition, int64_t offset,
                        char **buf, size_t *len)
{
	for (size_t i = 0; i < f->nahead; i++) {
		fetched_t *x = &f->ahead[i];
		if (x->partition != partition || x->offset != offset || strcmp(x->topic, topic))
			continue;
		*buf = x->buf;
		*len = x->len;
		x->buf = NULL; /* moved: fetched_drop wipes nothing */
		f->ahead_bytes -= x->len;
		x->len = 0;
		fetched_drop(f, i);
		return 0;
	}
	return -1;
}

/* Assigns topic/partition from offset, unless the assignment already
 * stands there and will give offset next.  0, or -2 with errstr. */
static int fetch_position(worker_fetcher_t *f, const char *topic, int32_t partition, int64_t offset,
                          char *errstr, size_t errstr_size)
{
	/* Reading on is cheaper than a new assignment only a little way ahead. */
	if (f->topic && !strcmp(f->topic, topic) && f->partition == partition && f->next >= 0 &&
	    f->next <= offset && offset - f->next < FETCH_AHEAD_MAX)
		return 0;
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
	rd_kafka_resp_err_t e = rd_kafka_assign(f->rk, l);
	rd_kafka_topic_partition_list_destroy(l);
	free(f->topic);
	f->topic = NULL;
	f->next = -1;
	if (e) {
		snprintf(errstr, errstr_size, "kafka reader: assign: %s", rd_kafka_err2str(e));
		return -2;
	}
	f->topic = strdup(topic);
	if (!f->topic) {
		rd_kafka_assign(f->rk, NULL);
		snprintf(errstr, errstr_size, "out of memory");
		return -2;
	}
	f->partition = partition;
	f->next = offset;
	return 0;
}

int worker_fetcher_get(worker_fetcher_t *f, const char *topic, int32_t partition, int64_t offset,
                       int timeout_ms, char **buf, size_t *len, char *errstr, size_t errstr_size)
{
	*buf = NULL;
	*len = 0;
	if (fetched_take(f, topic, partition, offset, buf, len) == 0)
		return 0;
	if (fetch_position(f, topic, partition, offset, errstr, errstr_size) < 0)
		return -2;
	/* Until a record answers, the failure is a transient one (-2). */
	int ret = -2;
	snprintf(errstr, errstr_size, "kafka reader: partition %d offset %lld not read within %d ms",
	         (int)partition, (long long)offset, timeout_ms);
	int64_t deadline = rn_mono_ms() + timeout_ms;
	while (rn_mono_ms() < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(f->rk, 100);
		if (!m)
			continue;
		if (m->err) {
			if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
				rn_log_debug(NULL, "kafka_reader", "%s", rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
			continue;
		}
		/* Left over from an earlier assignment: not ours to keep. */
		if (m->partition != partition || strcmp(rd_kafka_topic_name(m->rkt), topic)) {
			rd_kafka_message_destroy(m);
			continue;
		}
		f->next = m->offset + 1;
		if (m->offset < offset) {
			/* Before the one asked for: a later claim may want it. */
			fetched_keep(f, m);
			rd_kafka_message_destroy(m);
			continue;
		}
		if (m->offset > offset) {
			snprintf(errstr, errstr_size, "kafka reader: partition %d offset %lld is gone",
			         (int)partition, (long long)offset);
			ret = -1;
			rd_kafka_message_destroy(m);
			break;
		}
		*buf = malloc(m->len + 1);
		if (!*buf) {
			snprintf(errstr, errstr_size, "out of memory");
			ret = -1;
		} else {
			if (m->len)
				memcpy(*buf, m->payload, m->len);
			(*buf)[m->len] = '\0';
			*len = m->len;
			ret = 0;
		}
		rd_kafka_message_destroy(m);
		break;
	}
	if (ret == 0) {
		/* What this fetch brought beyond it: kept for the next claims. */
		rd_kafka_message_t *m;
		while (f->nahead < FETCH_AHEAD_MAX && (m = rd_kafka_consumer_poll(f->rk, 0))) {
			if (!m->err && m->partition == partition && !strcmp(rd_kafka_topic_name(m->rkt), topic)) {
				f->next = m->offset + 1;
				fetched_keep(f, m);
			}
			rd_kafka_message_destroy(m);
		}
	} else {
		/* Start afresh next time (the broker may have been away). */
		rd_kafka_assign(f->rk, NULL);
		free(f->topic);
		f->topic = NULL;
		f->next = -1;
	}
	return ret;
}

void worker_fetcher_free(worker_fetcher_t *f)
{
	if (!f)
		return;
	while (f->nahead)
		fetched_drop(f, f->nahead - 1);
	free(f->topic);
	rd_kafka_consumer_close(f->rk);
	rd_kafka_destroy(f->rk);
	free(f);
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

/* ------------------------------------------------------------------------
 * The DLQ for runs' threads
 * ------------------------------------------------------------------------ */

struct worker_dlq {
	const worker_config_t *cfg; /* borrowed, outlives us */
	pthread_mutex_t mu;         /* guards rk's creation and every waiter */
	rd_kafka_t *rk;             /* created on first use */
};

/* One message's report, on the heap: a sender that stopped waiting leaves
 * it to the report (abandoned), which frees it then. */
struct dlq_waiter {
	int done, abandoned;
	rd_kafka_resp_err_t err;
};

static void dlq_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	worker_dlq_t *d = opaque;
	struct dlq_waiter *w = m->_private;
	if (!w)
		return;
	pthread_mutex_lock(&d->mu);
	if (w->abandoned) {
		pthread_mutex_unlock(&d->mu);
		free(w);
		return;
	}
	w->err = m->err;
	w->done = 1;
	pthread_mutex_unlock(&d->mu);
}

worker_dlq_t *worker_dlq_new(const worker_config_t *cfg)
{
	worker_dlq_t *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->cfg = cfg;
	pthread_mutex_init(&d->mu, NULL);
	return d;
}

int worker_dlq_send(worker_dlq_t *d, const void *key, size_t key_len, const void *value,
                    size_t value_len, const char *reason, int timeout_ms, char *errstr,
                    size_t errstr_size)
{
	pthread_mutex_lock(&d->mu);
	if (!d->rk) {
		rd_kafka_conf_t *conf = conf_build(d->cfg, dlq_defaults, 1, NULL, errstr, errstr_size);
		if (conf) {
			rd_kafka_conf_set_dr_msg_cb(conf, dlq_dr_cb);
			rd_kafka_conf_set_opaque(conf, d);
			d->rk = client_new(RD_KAFKA_PRODUCER, conf, "producer", errstr, errstr_size);
		}
	}
	rd_kafka_t *rk = d->rk;
	pthread_mutex_unlock(&d->mu);
	if (!rk)
		return -1;
	struct dlq_waiter *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	rd_kafka_resp_err_t e = rd_kafka_producev(
	        rk,
	        RD_KAFKA_V_TOPIC(d->cfg->dlq_topic),
	        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
	        RD_KAFKA_V_KEY(key, key_len),
	        RD_KAFKA_V_VALUE((void *)value, value_len),
	        RD_KAFKA_V_HEADER("reason", reason, -1),
	        RD_KAFKA_V_HEADER("worker", d->cfg->worker_id, -1),
	        RD_KAFKA_V_OPAQUE(w),
	        RD_KAFKA_V_END);
	if (e) {
		free(w);
		snprintf(errstr, errstr_size, "produce to %s: %s", d->cfg->dlq_topic, rd_kafka_err2str(e));
		return -1;
	}
	/* Any thread's poll serves any waiter's report (under mu). */
	int64_t deadline = rn_mono_ms() + timeout_ms;
	for (;;) {
		rd_kafka_poll(rk, 100);
		pthread_mutex_lock(&d->mu);
		if (w->done) {
			e = w->err;
			pthread_mutex_unlock(&d->mu);
			free(w);
			if (e) {
				snprintf(errstr, errstr_size, "produce to %s: %s", d->cfg->dlq_topic, rd_kafka_err2str(e));
				return -1;
			}
			return 0;
		}
		if (rn_mono_ms() >= deadline) {
			w->abandoned = 1;
			pthread_mutex_unlock(&d->mu);
			snprintf(errstr, errstr_size, "produce to %s: no delivery within %d ms", d->cfg->dlq_topic,
			         timeout_ms);
			return -1;
		}
		pthread_mutex_unlock(&d->mu);
	}
}

void worker_dlq_free(worker_dlq_t *d)
{
	if (!d)
		return;
	if (d->rk) {
		rd_kafka_flush(d->rk, 5000);
		rd_kafka_destroy(d->rk);
	}
	pthread_mutex_destroy(&d->mu);
	free(d);
}
