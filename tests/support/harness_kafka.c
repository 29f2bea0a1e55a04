/*
 * tests/support/harness_kafka.c - librdkafka's mock cluster inside the test
 * process, or a real Apache Kafka broker (tests/kafka/broker.sh) chosen by
 * RUNNEL_TEST_KAFKA; a synchronous producer and a small consumer for
 * assertions.
 */
#include "tests/support/harness.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TH_KAFKA_BROKER_SCRIPT
#define TH_KAFKA_BROKER_SCRIPT "tests/kafka/broker.sh"
#endif
#ifndef TH_KAFKA_ADDR_FILE
#define TH_KAFKA_ADDR_FILE "tests/kafka/broker.addr"
#endif

struct th_kafka_consumer {
	rd_kafka_t *rk;
};

static atomic_int th_kafka_seq;

/* Quiet the mock cluster's own logs; failures reach the caller anyway. */
static void th_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (level <= 3)
		fprintf(stderr, "# rdkafka %s: %s\n", fac, buf);
}

static rd_kafka_conf_t *th_kafka_conf(const th_kafka_t *k)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char errstr[256];
	if (k && rd_kafka_conf_set(conf, "bootstrap.servers", k->bootstrap, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		fprintf(stderr, "# rdkafka conf: %s\n", errstr);
	rd_kafka_conf_set_log_cb(conf, th_kafka_log_cb);
	rd_kafka_conf_set(conf, "log.connection.close", "false", errstr, sizeof(errstr));
	return conf;
}

/* rd_kafka_new, which takes conf only when it succeeds; what names the
 * handle in the message printed on failure.  NULL on failure. */
static rd_kafka_t *th_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, const char *what)
{
	char errstr[512];
	rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		fprintf(stderr, "# kafka: %s: %s\n", what, errstr);
	}
	return rk;
}

/* Runs tests/kafka/broker.sh CMD on k's private state dir; 0 or -1. */
static int th_kafka_script(th_kafka_t *k, const char *cmd)
{
	const char *home = getenv("RUNNEL_KAFKA_HOME");
	const char *opts = getenv("RUNNEL_KAFKA_JAVA_OPTS");
	/* The data dir goes inside the state dir, a th_tmpdir: a test that
	 * ends early (TH_REQUIRE) kills the broker and the watchdog with its
	 * other children, and the harness removes the data with the dir. */
	const char *env[] = {
		th_strf("RUNNEL_KAFKA_WATCH_PID=%ld", (long)getpid()),
		th_strf("RUNNEL_KAFKA_DATA_PARENT=%s", k->state_dir),
		home ? th_strf("RUNNEL_KAFKA_HOME=%s", home) : NULL,
		NULL,
		NULL,
	};
	if (opts)
		env[home ? 3 : 2] = th_strf("RUNNEL_KAFKA_JAVA_OPTS=%s", opts);
	char *argv[] = { "bash", TH_KAFKA_BROKER_SCRIPT, (char *)cmd, k->state_dir, NULL };
	pid_t pid = th_spawn(argv, env, NULL);
	if (pid < 0)
		return -1;
	int st = 0;
	if (th_wait_exit(pid, 180000, &st) < 0) {
		th_kill(pid);
		fprintf(stderr, "# kafka: broker.sh %s did not finish\n", cmd);
		return -1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "# kafka: broker.sh %s failed (status %d)\n", cmd, st);
		return -1;
	}
	return 0;
}

/* Fills k->bootstrap from the shared broker's address file. */
static int th_kafka_real_addr(th_kafka_t *k)
{
	const char *env = getenv("RUNNEL_TEST_KAFKA_BROKERS");
	if (env && *env) {
		snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", env);
		return 0;
	}
	const char *path = getenv("RUNNEL_TEST_KAFKA_ADDR_FILE");
	if (!path || !*path)
		path = TH_KAFKA_ADDR_FILE;
	char *addr = th_file_read(path, NULL);
	if (!addr || !*addr) {
		free(addr);
		fprintf(stderr, "# kafka: no broker address in %s (the kafka_broker fixture starts the broker: "
		                "ctest -L kafka, or set RUNNEL_TEST_KAFKA_BROKERS)\n",
		        path);
		return -1;
	}
	addr[strcspn(addr, "\r\n")] = '\0';
	snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", addr);
	free(addr);
	return 0;
}

static int th_kafka_start_real(th_kafka_t *k, const char *mode)
{
	if (!strcmp(mode, "private")) {
		const char *dir = th_tmpdir();
		if (!dir)
			return -1;
		snprintf(k->state_dir, sizeof(k->state_dir), "%s", dir);
		if (th_kafka_script(k, "start") < 0) {
			k->state_dir[0] = '\0';
			return -1;
		}
		k->real = 2;
		char *addr = th_file_read(th_strf("%s/broker.addr", k->state_dir), NULL);
		if (!addr)
			return -1;
		addr[strcspn(addr, "\r\n")] = '\0';
		snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", addr);
		free(addr);
	} else {
		if (th_kafka_real_addr(k) < 0)
			return -1;
		k->real = 1;
	}
	k->brokers = 1;
	return 0;
}

int th_kafka_start(th_kafka_t *k, int brokers)
{
	memset(k, 0, sizeof(*k));
	const char *mode = getenv("RUNNEL_TEST_KAFKA");
	if (mode && (!strcmp(mode, "real") || !strcmp(mode, "private"))) {
		if (brokers != 1) {
			fprintf(stderr, "# kafka: a real broker has one node, not %d\n", brokers);
			return -1;
		}
		return th_kafka_start_real(k, mode);
	}
	k->rk = th_kafka_new(RD_KAFKA_PRODUCER, th_kafka_conf(NULL), "rd_kafka_new");
	if (!k->rk)
		return -1;
	k->mcluster = rd_kafka_mock_cluster_new(k->rk, brokers);
	if (!k->mcluster) {
		fprintf(stderr, "# kafka: mock cluster of %d brokers failed\n", brokers);
		rd_kafka_destroy(k->rk);
		k->rk = NULL;
		return -1;
	}
	k->brokers = brokers;
	snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", rd_kafka_mock_cluster_bootstraps(k->mcluster));
	return 0;
}

static int th_kafka_partitions(rd_kafka_t *rk, const char *topic);

/* CreateTopics through the admin API, then wait for the partitions. */
static int th_kafka_create_topic_real(th_kafka_t *k, const char *topic, int partitions)
{
	char errstr[512];
	if (!k->admin && !(k->admin = th_kafka_new(RD_KAFKA_PRODUCER, th_kafka_conf(k), "admin")))
		return -1;
	rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, 1, errstr, sizeof(errstr));
	if (!nt) {
		fprintf(stderr, "# kafka: new topic %s: %s\n", topic, errstr);
		return -1;
	}
	rd_kafka_queue_t *q = rd_kafka_queue_new(k->admin);
	rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(k->admin, RD_KAFKA_ADMIN_OP_CREATETOPICS);
	rd_kafka_AdminOptions_set_operation_timeout(o, 30000, errstr, sizeof(errstr));
	rd_kafka_AdminOptions_set_request_timeout(o, 60000, errstr, sizeof(errstr));
	rd_kafka_CreateTopics(k->admin, &nt, 1, o, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 70000);
	int rc = -1;
	if (!ev) {
		fprintf(stderr, "# kafka: create topic %s: no answer\n", topic);
	} else if (rd_kafka_event_error(ev)) {
		fprintf(stderr, "# kafka: create topic %s: %s\n", topic, rd_kafka_event_error_string(ev));
	} else {
		size_t n = 0;
		const rd_kafka_topic_result_t **res =
		        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
		rd_kafka_resp_err_t e = n == 1 ? rd_kafka_topic_result_error(res[0]) : RD_KAFKA_RESP_ERR__FAIL;
		if (e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
			rc = 0;
		else
			fprintf(stderr, "# kafka: create topic %s: %s\n", topic,
			        n == 1 ? rd_kafka_topic_result_error_string(res[0]) : "no result");
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_AdminOptions_destroy(o);
	rd_kafka_queue_destroy(q);
	rd_kafka_NewTopic_destroy(nt);
	/* Producers and consumers started right after must find every
	 * partition with a leader, not a topic that is still being made. */
	int64_t deadline = th_now_ms() + 30000;
	while (rc == 0 && th_kafka_partitions(k->admin, topic) < partitions) {
		if (th_now_ms() > deadline) {
			fprintf(stderr, "# kafka: topic %s has no %d partitions after 30 s\n", topic, partitions);
			return -1;
		}
		usleep(20000);
	}
	return rc;
}

int th_kafka_create_topic(th_kafka_t *k, const char *topic, int partitions)
{
	if (k->real)
		return th_kafka_create_topic_real(k, topic, partitions);
	rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(k->mcluster, topic, partitions, 1);
	if (err) {
		fprintf(stderr, "# kafka: create topic %s: %s\n", topic, rd_kafka_err2str(err));
		return -1;
	}
	return 0;
}

typedef struct th_dr {
	int done;
	rd_kafka_resp_err_t err;
} th_dr_t;

static void th_kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	(void)opaque;
	th_dr_t *dr = m->_private;
	if (dr) {
		dr->err = m->err;
		dr->done = 1;
	}
}

static rd_kafka_t *th_kafka_producer(th_kafka_t *k)
{
	if (k->producer)
		return k->producer;
	char errstr[512];
	rd_kafka_conf_t *conf = th_kafka_conf(k);
	rd_kafka_conf_set(conf, "message.timeout.ms", "10000", errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "linger.ms", "0", errstr, sizeof(errstr));
	rd_kafka_conf_set_dr_msg_cb(conf, th_kafka_dr_cb);
	k->producer = th_kafka_new(RD_KAFKA_PRODUCER, conf, "producer");
	return k->producer;
}

int th_kafka_produce(th_kafka_t *k, const char *topic, int partition, const char *key,
                     const void *value, size_t len, const char *const *headers)
{
	rd_kafka_t *p = th_kafka_producer(k);
	if (!p)
		return -1;
	rd_kafka_headers_t *hdrs = NULL;
	if (headers && headers[0]) {
		size_t n = 0;
		while (headers[n] && headers[n + 1])
			n += 2;
		hdrs = rd_kafka_headers_new(n / 2);
		for (size_t i = 0; i < n; i += 2)
			rd_kafka_header_add(hdrs, headers[i], -1, headers[i + 1], -1);
	}
	th_dr_t dr = { 0, RD_KAFKA_RESP_ERR_NO_ERROR };
	rd_kafka_resp_err_t err = rd_kafka_producev(
	        p, RD_KAFKA_V_TOPIC(topic),
	        RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
	        RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
	        RD_KAFKA_V_VALUE((void *)value, value ? len : 0),
	        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
	        RD_KAFKA_V_HEADERS(hdrs),
	        RD_KAFKA_V_OPAQUE(&dr),
	        RD_KAFKA_V_END);
	if (err) {
		/* On failure the headers stay ours. */
		if (hdrs)
			rd_kafka_headers_destroy(hdrs);
		fprintf(stderr, "# kafka: produce to %s: %s\n", topic, rd_kafka_err2str(err));
		return -1;
	}
	int64_t deadline = th_now_ms() + 15000;
	while (!dr.done && th_now_ms() < deadline)
		rd_kafka_poll(p, 20);
	if (!dr.done) {
		/* The opaque points at our stack: wait for the report for good
		 * rather than let a late callback write into a dead frame. */
		rd_kafka_flush(p, 60000);
		fprintf(stderr, "# kafka: no delivery report for %s\n", topic);
		return -1;
	}
	if (dr.err) {
		fprintf(stderr, "# kafka: delivery to %s failed: %s\n", topic, rd_kafka_err2str(dr.err));
		return -1;
	}
	return 0;
}

const char *th_kafka_msg_header(const th_kafka_msg_t *m, const char *name)
{
	for (size_t i = 0; i < m->n_headers; i++)
		if (strcmp(m->header_names[i], name) == 0)
			return m->header_values[i];
	return NULL;
}

void th_kafka_msg_free(th_kafka_msg_t *m)
{
	if (!m)
		return;
	free(m->key);
	free(m->value);
	for (size_t i = 0; i < m->n_headers; i++) {
		free(m->header_names[i]);
		free(m->header_values[i]);
	}
	free(m->header_names);
	free(m->header_values);
	memset(m, 0, sizeof(*m));
}

static void th_kafka_msg_copy(const rd_kafka_message_t *rm, th_kafka_msg_t *out)
{
	memset(out, 0, sizeof(*out));
	if (rm->key) {
		out->key = th_memdup0(rm->key, rm->key_len);
		out->key_len = rm->key_len;
	}
	if (rm->payload) {
		out->value = th_memdup0(rm->payload, rm->len);
		out->len = rm->len;
	}
	out->partition = rm->partition;
	out->offset = rm->offset;
	rd_kafka_headers_t *hdrs = NULL;
	if (rd_kafka_message_headers(rm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
		size_t n = rd_kafka_header_cnt(hdrs);
		out->header_names = calloc(n ? n : 1, sizeof(char *));
		out->header_values = calloc(n ? n : 1, sizeof(char *));
		if (!out->header_names || !out->header_values)
			return;
		for (size_t i = 0; i < n; i++) {
			const char *name;
			const void *val;
			size_t vlen;
			if (rd_kafka_header_get_all(hdrs, i, &name, &val, &vlen))
				break;
			out->header_names[i] = strdup(name);
			out->header_values[i] = val ? th_memdup0(val, vlen) : NULL;
			out->n_headers = i + 1;
		}
	}
}

/* Partition count of topic from metadata; 0 while it does not exist. */
static int th_kafka_partitions(rd_kafka_t *rk, const char *topic)
{
	rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
	if (!t)
		return 0;
	const struct rd_kafka_metadata *md = NULL;
	int n = 0;
	if (rd_kafka_metadata(rk, 0, t, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR && md) {
		if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
			n = md->topics[0].partition_cnt;
		rd_kafka_metadata_destroy(md);
	}
	rd_kafka_topic_destroy(t);
	return n;
}

th_kafka_consumer_t *th_kafka_consumer_new(th_kafka_t *k, const char *topic, const char *group)
{
	char errstr[512], gid[96];
	rd_kafka_conf_t *conf = th_kafka_conf(k);
	if (group)
		snprintf(gid, sizeof(gid), "%s", group);
	else
		snprintf(gid, sizeof(gid), "th-%d-%d", (int)getpid(), atomic_fetch_add(&th_kafka_seq, 1));
	rd_kafka_conf_set(conf, "group.id", gid, errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "enable.partition.eof", "false", errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "enable.auto.commit", group ? "true" : "false", errstr, sizeof(errstr));
	/* Short fetch waits: tests poll for one message and want it now. */
	rd_kafka_conf_set(conf, "fetch.wait.max.ms", "50", errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "fetch.error.backoff.ms", "50", errstr, sizeof(errstr));
	rd_kafka_t *rk = th_kafka_new(RD_KAFKA_CONSUMER, conf, "consumer");
	if (!rk)
		return NULL;
	rd_kafka_poll_set_consumer(rk);
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
	rd_kafka_resp_err_t err;
	if (group) {
		rd_kafka_topic_partition_list_add(l, topic, RD_KAFKA_PARTITION_UA);
		err = rd_kafka_subscribe(rk, l);
	} else {
		/* Wait for the topic to exist (a DLQ is created by its first
		 * message), then take every partition from the beginning. */
		int n = 0;
		int64_t deadline = th_now_ms() + 10000;
		while ((n = th_kafka_partitions(rk, topic)) == 0 && th_now_ms() < deadline)
			usleep(20000);
		if (n == 0)
			n = 1;
		for (int i = 0; i < n; i++)
			rd_kafka_topic_partition_list_add(l, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
		err = rd_kafka_assign(rk, l);
	}
	rd_kafka_topic_partition_list_destroy(l);
	if (err) {
		fprintf(stderr, "# kafka: consume %s: %s\n", topic, rd_kafka_err2str(err));
		rd_kafka_destroy(rk);
		return NULL;
	}
	th_kafka_consumer_t *c = calloc(1, sizeof(*c));
	if (!c) {
		rd_kafka_destroy(rk);
		return NULL;
	}
	c->rk = rk;
	return c;
}

int th_kafka_consumer_next(th_kafka_consumer_t *c, int timeout_ms, th_kafka_msg_t *out)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	for (;;) {
		int64_t left = deadline - th_now_ms();
		if (left < 0)
			return 0;
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, left > 100 ? 100 : (int)left);
		if (!m)
			continue;
		if (m->err) {
			int fatal = m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF &&
			        m->err != RD_KAFKA_RESP_ERR__TRANSPORT &&
			        m->err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN &&
			        m->err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
			if (fatal)
				fprintf(stderr, "# kafka: consumer: %s\n", rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
			if (fatal)
				return -1;
			continue;
		}
		th_kafka_msg_copy(m, out);
		rd_kafka_message_destroy(m);
		return 1;
	}
}

void th_kafka_consumer_free(th_kafka_consumer_t *c)
{
	if (!c)
		return;
	rd_kafka_consumer_close(c->rk);
	rd_kafka_destroy(c->rk);
	free(c);
}

int th_kafka_consume_one(th_kafka_t *k, const char *topic, int timeout_ms, th_kafka_msg_t *out)
{
	th_kafka_consumer_t *c = th_kafka_consumer_new(k, topic, NULL);
	if (!c)
		return -1;
	int rc = th_kafka_consumer_next(c, timeout_ms, out);
	th_kafka_consumer_free(c);
	return rc;
}

int th_kafka_broker_down(th_kafka_t *k, int broker_id)
{
	if (k->real) {
		if (k->real != 2 || broker_id != 1) {
			fprintf(stderr, "# kafka: only a private real broker can be taken down\n");
			return -1;
		}
		return th_kafka_script(k, "down");
	}
	return rd_kafka_mock_broker_set_down(k->mcluster, broker_id) ? -1 : 0;
}

int th_kafka_broker_up(th_kafka_t *k, int broker_id)
{
	if (k->real) {
		if (k->real != 2 || broker_id != 1)
			return -1;
		return th_kafka_script(k, "up");
	}
	return rd_kafka_mock_broker_set_up(k->mcluster, broker_id) ? -1 : 0;
}

void th_kafka_stop(th_kafka_t *k)
{
	if (k->producer) {
		rd_kafka_flush(k->producer, 2000);
		rd_kafka_destroy(k->producer);
		k->producer = NULL;
	}
	if (k->admin) {
		rd_kafka_destroy(k->admin);
		k->admin = NULL;
	}
	if (k->real == 2 && k->state_dir[0]) {
		th_kafka_script(k, "stop");
		k->state_dir[0] = '\0';
	}
	k->real = 0;
	if (k->mcluster) {
		rd_kafka_mock_cluster_destroy(k->mcluster);
		k->mcluster = NULL;
	}
	if (k->rk) {
		rd_kafka_destroy(k->rk);
		k->rk = NULL;
	}
}
