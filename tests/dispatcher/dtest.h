/*
 * tests/dispatcher/dtest.h - what the dispatcher tests share: starting the
 * real runnel-dispatcher against a test Redis and the in-process Kafka mock
 * cluster, blocking HTTP requests with libcurl, and streaming requests
 * driven by a curl multi handle so the test can play the worker (XADD into
 * Redis) while the answer is open.
 */
#ifndef RUNNEL_TESTS_DISPATCHER_DTEST_H
#define RUNNEL_TESTS_DISPATCHER_DTEST_H

#include <stddef.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>

#include "tests/support/body.h"
#include "tests/support/harness.h"

/*
 * What every dispatcher test starts first: names the test (th_init),
 * initialises libcurl, starts Redis and the mock cluster, creates the jobs
 * topic "runnel.jobs" with partitions partitions (0: none; it is then made
 * on first use) and connects *c to Redis.  Ends the test when any step fails.
 */
void dt_servers_start(const char *test_name, th_redis_t *red, th_kafka_t *k, int partitions, redisContext **c);

/* With RUNNEL_TEST_REDIS=cluster (the cluster-labelled reruns),
 * dt_servers_start starts a Redis Cluster of 3 primaries and 3 replicas
 * instead (red: node 0, whose URL names the cluster; the test's own
 * reads go through th_cmd) and this returns it; NULL otherwise. */
th_cluster_t *dt_cluster(void);

/* The other end of dt_servers_start: closes c (NULL ok), destroys the mock
 * cluster and cleans up libcurl (Redis goes at exit with the harness). */
void dt_servers_stop(redisContext *c, th_kafka_t *k);

/*
 * Starts the real worker (worker_bin) against red and k as worker_id with
 * slots slots, its work dir and worker.log under dir, at debug level, with a
 * 500 ms kill grace and a quick Kafka metadata refresh and group session.
 * Returns the pid; ends the test when it does not start.
 */
pid_t dt_worker_start(const char *worker_bin, const th_redis_t *red, const th_kafka_t *k, const char *dir,
                      const char *worker_id, int slots);

typedef struct dt_disp {
	pid_t pid;
	int port;
	char base[64]; /* "http://127.0.0.1:PORT" */
	char log[4096];
} dt_disp_t;

/*
 * Starts the dispatcher with RUNNEL_REDIS_URL, RUNNEL_KAFKA_BROKERS and
 * RUNNEL_LISTEN set, plus extra_env ("NAME=value", NULL-terminated, may be
 * NULL), and waits until /healthz answers.  Retries with another port when
 * the bind lost a race.  0 or -1.
 */
int dt_disp_start(dt_disp_t *d, const th_redis_t *r, const th_kafka_t *k,
                  const char *const *extra_env);
/* Waits until /readyz answers want (200 or 503).  1 or 0. */
int dt_wait_ready(const dt_disp_t *d, long want, int timeout_ms);
/* SIGTERM and wait; 1 when it exited 0 by itself. */
int dt_disp_stop(dt_disp_t *d);

typedef struct dt_resp {
	long status;
	char *body; /* NUL-terminated, malloc'd */
	size_t len;
	char *headers; /* raw header block, malloc'd */
	double secs;
} dt_resp_t;

/*
 * One blocking request.  headers: NULL-terminated list of "Name: value".
 * body NULL = no body (GET); for POST pass a body (len -1 = strlen).
 * 0 when an HTTP answer arrived, -1 on a transport error.
 */
int dt_http(dt_resp_t *r, const char *method, const char *url, const char *const *headers,
            const char *body, long len, long timeout_ms);
void dt_resp_free(dt_resp_t *r);
/* Value of a response header (case-insensitive) copied into buf; 1 or 0. */
int dt_header(const dt_resp_t *r, const char *name, char *buf, size_t size);

/* A JSON body {"agent_url",...} with the given run_id (NULL = none). */
char *dt_job_body(const char *run_id, const char *extra_fields);

/* ---- streams: many open requests pumped together ---- */

typedef struct dt_stream {
	CURL *easy;
	struct curl_slist *hdrs;
	th_body_t rx; /* rx.body: what arrived so far, NUL-terminated */
	char *post;
	int done;
	CURLcode rc;
	long status;
	int64_t last_rx_ms;
	void *user;
} dt_stream_t;

typedef struct dt_multi {
	CURLM *multi;
} dt_multi_t;

int dt_multi_init(dt_multi_t *m);
void dt_multi_cleanup(dt_multi_t *m);

/* Starts a request on m (method GET when post is NULL). */
int dt_stream_open(dt_multi_t *m, dt_stream_t *s, const char *url, const char *const *headers,
                   const char *post);
/* Removes and frees the handle (closing the connection if still open). */
void dt_stream_close(dt_multi_t *m, dt_stream_t *s);
/* Runs the transfers for up to ms (returns early when nothing is running). */
void dt_multi_pump(dt_multi_t *m, int ms);
/* Pumps until cond(arg) or timeout; 1 or 0. */
int dt_multi_until(dt_multi_t *m, int (*cond)(void *), void *arg, int timeout_ms);
/* Number of '\n' in s->body. */
size_t dt_stream_lines(const dt_stream_t *s);
/* 1 once response headers arrived (status known). */
int dt_stream_started(dt_stream_t *s);

/* XADD key * line <line>; returns the new id (malloc'd) or NULL. */
char *dt_xadd_line(redisContext *c, const char *key, const char *line);

#endif
