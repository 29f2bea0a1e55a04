/*
 * tests/worker/wtest.h - the fixture the worker's integration tests share:
 * one redis-server, one Kafka mock cluster, one workspace stub, and the
 * real runnel-worker binary spawned against them; helpers to submit runs,
 * wait for their terminal line and read back their stream.
 */
#ifndef RUNNEL_TESTS_WORKER_WTEST_H
#define RUNNEL_TESTS_WORKER_WTEST_H

#include <jansson.h>
#include <sys/types.h>

#include "dev/stub.h"
#include "tests/support/harness.h"

typedef struct wt {
	th_redis_t redis;      /* on a cluster: a copy of node 0 (its URL names the cluster) */
	th_cluster_t *cluster; /* RUNNEL_TEST_REDIS=cluster: the cluster, else NULL */
	rn_rcluster_t *rcl;    /* on a cluster: routes the fixture's reads and writes */
	th_kafka_t kafka;
	dev_stub_t *stub;
	redisContext *rc;
	const char *dir;
	char topic[64];
	char group[64];
} wt_t;

/* Starts redis (with extra config lines, may be NULL), kafka (partitions of
 * the job topic) and the stub.  Ends the test on failure.
 * With RUNNEL_TEST_REDIS=cluster in the environment (the cluster-labelled
 * reruns), a real Redis Cluster of 3 primaries and 3 replicas instead
 * (th_cluster_start): the worker gets node 0's URL, and the fixture's own
 * reads and writes of a run's keys go to the node serving its slot. */
void wt_setup(wt_t *t, const char *redis_extra, int partitions);
void wt_teardown(wt_t *t);

/* Restarts redis-server on its port and data (th_redis_restart) and
 * reconnects t->rc; what names the step in a failure.  Ends the test on
 * failure (on a cluster, always: not a case the cluster reruns cover). */
void wt_redis_restart(wt_t *t, const char *what);

/* The usual start of a worker test: names the test (th_init), wt_setup
 * without extra redis config, spawns one worker called name with extra_env
 * (see wt_worker) and waits until it consumes (wt_warmup).  Returns its pid. */
pid_t wt_start(wt_t *t, const char *test_name, int partitions, const char *name,
               const char *const *extra_env);

/* Stops a worker (th_stop, SIGTERM then up to timeout_ms) and checks that it
 * drained and exited 0; what names it in the failure. */
void wt_stop_worker(pid_t pid, int timeout_ms, const char *what);

/* Spawns runnel-worker with the fixture's settings plus extra env (NULL-
 * terminated "NAME=value"; later wins).  Its log is <dir>/<name>.log. */
pid_t wt_worker(wt_t *t, const char *name, const char *const *extra_env);
/* The same with the runnel-worker binary at bin. */
pid_t wt_worker_bin(wt_t *t, const char *bin, const char *name, const char *const *extra_env);
const char *wt_log_path(wt_t *t, const char *name);

/* Registers a run with the stub (run may be NULL) and produces its job.
 * upload: include otp_upload.  max_runtime 0 = absent.  Fills *o. */
void wt_submit(wt_t *t, const char *run_id, const dev_stub_run_t *run, const char *prompt,
               int upload, long max_runtime, dev_stub_otps_t *o);

/* The same, to a given partition (-1: by key) and with a tenant (NULL:
 * none, the default tenant). */
void wt_submit_to(wt_t *t, const char *run_id, const dev_stub_run_t *run, const char *prompt,
                  int partition, const char *tenant, int upload, long max_runtime,
                  dev_stub_otps_t *o);

/* wt_submit / wt_submit_to of a run whose config holds only the agent
 * (agent_json, as for wt_agent_config).  o may be NULL when the caller
 * needs no OTPs. */
void wt_submit_agent(wt_t *t, const char *run_id, const char *agent_json, const char *prompt,
                     int upload, long max_runtime, dev_stub_otps_t *o);
void wt_submit_agent_to(wt_t *t, const char *run_id, const char *agent_json, const char *prompt,
                        int partition, const char *tenant, int upload, long max_runtime,
                        dev_stub_otps_t *o);

/* Registers with the stub a run whose config holds only the agent, for a
 * test that writes the job itself; fills *o. */
void wt_add_agent_run(wt_t *t, const char *agent_json, dev_stub_otps_t *o);

/* A stub run whose config.agent is the given JSON text (e.g.
 * {"kind":"mock","script":"demo"}); caller frees with json_decref. */
json_t *wt_agent_config(const char *agent_json);

/* Waits for the terminal line (1) or times out (0). */
int wt_wait_terminal(wt_t *t, const char *run_id, int timeout_ms);
/* Waits until the run's stream holds at least one line (the run started
 * printing).  1, or 0 at the deadline. */
int wt_wait_started(wt_t *t, const char *run_id, int timeout_ms);

/* Stream lines of a run (th_strv_free(lines, n) them). */
char **wt_lines(wt_t *t, const char *run_id, size_t *n);

/* Requires the run's terminal line within timeout_ms (the test ends
 * otherwise: "<run_id> ended"), then returns its lines as wt_lines does. */
char **wt_ended_lines(wt_t *t, const char *run_id, int timeout_ms, size_t *n);

/* HGET of the state hash into a static buffer ("" when absent). */
const char *wt_state(wt_t *t, const char *run_id, const char *field);

/* JSON field of a line as a string ("" when absent); a static buffer. */
const char *wt_field(const char *line, const char *field);

/* Checks that lines[] ends with exactly one terminal line and returns its
 * code ("" for a result) in a static buffer. */
const char *wt_check_terminal(char **lines, size_t n);

/* wt_check_terminal over run_id's stream as it is now: its code in a
 * static buffer; *n (may be NULL) gets the number of lines. */
const char *wt_run_code(wt_t *t, const char *run_id, size_t *n);

/* Waits up to timeout_ms for run_id's terminal line; returns its code (""
 * for a result, "(no terminal line)" at the deadline) in a static buffer,
 * and copies its message into msg. */
const char *wt_ended(wt_t *t, const char *run_id, int timeout_ms, char *msg, size_t msgsz);

/* 1 when a line of run_id's stream contains needle, else 0. */
int wt_stream_has(wt_t *t, const char *run_id, const char *needle);

/* Appends a control message (JSON text, e.g. a cancel or a reply) to the
 * run's ctl stream, as a client would; checks that redis took it. */
void wt_ctl(wt_t *t, const char *run_id, const char *msg);

/* The connection for a key: t->rc standalone, the serving node's on a
 * cluster (owned by t->rcl). */
redisContext *wt_rc_key(wt_t *t, const char *key);

/* th_redis_scan_contains over every node of the fixture's Redis (the one
 * server, or every running node of the cluster): 1 found, 0 not, -1 error. */
int wt_scan_contains(wt_t *t, const char *needle);

/* th_dir_contains over every node's data dir (AOF, RDB): 1 found, else 0. */
int wt_aof_contains(wt_t *t, const char *needle);

/* Produces raw bytes as a job. */
void wt_produce_raw(wt_t *t, const char *key, const void *v, size_t len);

/* 1 when the worker log contains needle. */
int wt_log_has(wt_t *t, const char *name, const char *needle);
/* Waits until it does: 1, or 0 at the deadline. */
int wt_wait_log(wt_t *t, const char *name, const char *needle, int timeout_ms);

/* The port of the worker's /healthz, /readyz and /metrics, read from its
 * "metrics 127.0.0.1:PORT" log line; -1 when not logged. */
int wt_metrics_port(wt_t *t, const char *name);

/* GET url; returns the body (caller frees, may be NULL) and the HTTP status
 * in *status (0 when the request failed). */
char *wt_http_get(const char *url, long *status);

/* The value of series (a metric name with its labels, as printed) in the
 * /metrics of worker name, -1 when it is not there. */
long wt_metric(wt_t *t, const char *name, const char *series);

/* GET http://127.0.0.1:port<path> (a probe: /healthz, /readyz) and checks
 * that it answers want_status with exactly want_body. */
void wt_check_probe(int port, const char *path, long want_status, const char *want_body);

/* Waits until the worker joined the group and is consuming: submits a
 * trivial run and waits for it (the first group join takes ~3 s). */
void wt_warmup(wt_t *t);

/* The most tmpfs memory ("shmem" in memory.stat) charged to any of the
 * worker's run cgroups ("runnel-<pid>-*" beside its v2 "worker" leaf, or
 * below its v1 memory cgroup), or -1 when it has none.  The largest: on v2
 * a warm sandbox's cgroup keeps its own name, and idle ones hold next to
 * nothing. */
long long wt_runs_max_shmem(pid_t worker);

#endif
