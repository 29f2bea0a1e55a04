/*
 * tests/support/harness.h - what every runnel test program shares: checks
 * and a summary, private temp dirs, free loopback ports, child processes
 * that never outlive the test, a real redis-server, librdkafka's in-process
 * mock cluster, and functions that read what runnel wrote to Redis.
 *
 * Cleanup is unconditional.  Every child started here (th_spawn, redis) and
 * every temp dir (th_tmpdir) is kept in a registry; an atexit handler and
 * handlers for SIGINT, SIGTERM, SIGABRT and SIGSEGV kill the children's
 * process groups with SIGKILL and remove the temp dirs.  Children also get
 * PR_SET_PDEATHSIG(SIGKILL), so even a test killed with SIGKILL (a ctest
 * timeout) takes them down; its temp dirs are swept by the next test that
 * starts (dirs are named runnel-th-<pid>-* and removed when <pid> is dead).
 * Set TH_KEEP=1 in the environment to keep temp dirs for a post-mortem;
 * they get a ".th-kept" file, which keeps the sweep away.
 *
 * This is test support: unlike runnel's libraries it prints diagnostics to
 * stderr (prefixed "# ") and TH_REQUIRE / th_done end the program.
 *
 * @locality main thread of the test, unless a function says otherwise.
 * Spawn children from the main thread: PR_SET_PDEATHSIG fires when the
 * *thread* that forked exits.
 *
 * A test looks like:
 *
 *	int main(void)
 *	{
 *		th_redis_t r;
 *		TH_REQUIRE(th_redis_start(&r, NULL) == 0, "redis");
 *		redisContext *c = th_redis_connect(&r);
 *		TH_CHECK(c, "connect to %s", r.url);
 *		...
 *		redisFree(c);
 *		return th_done();
 *	}
 */
#ifndef RUNNEL_TESTS_SUPPORT_HARNESS_H
#define RUNNEL_TESTS_SUPPORT_HARNESS_H

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "common/rcluster.h"
#include "tests/support/check.h"

/* ------------------------------------------------------------------------
 * Checks and the summary: tests/support/check.h
 * ------------------------------------------------------------------------ */

/*
 * Optional: names the test in diagnostics and installs the cleanup
 * handlers now.  Every th_* function calls it lazily with the program name,
 * so calling it is never required.  Safe to call more than once.
 */
void th_init(const char *test_name);

/* ------------------------------------------------------------------------
 * Temp dirs, ports, files, strings
 * ------------------------------------------------------------------------ */

/*
 * Creates a fresh private directory (mode 0700) under $TMPDIR or /tmp and
 * returns its absolute path.  The harness owns the string and removes the
 * whole tree at exit (unless TH_KEEP=1).  NULL on failure (printed).
 */
const char *th_tmpdir(void);

/*
 * Returns a loopback TCP port that was free a moment ago (bind
 * 127.0.0.1:0, read the port, close), or -1.  Another process may take it
 * before you bind it: callers that start servers retry with a new port
 * when the bind fails (th_redis_start does).
 */
int th_free_port(void);

/* A listening TCP socket (CLOEXEC) on 127.0.0.1 on a port the kernel
 * picks, for a test's own server; *port gets the port.  The fd, or -1. */
int th_listen_loopback(int backlog, int *port);

/* A blocking TCP connection (CLOEXEC) to 127.0.0.1:port, or -1. */
int th_dial(int port);

/* 1 when something accepts TCP connections on 127.0.0.1:port, else 0.
 * th_port_open_cond is the same for th_wait_until, arg an int *. */
int th_port_open(int port);
int th_port_open_cond(void *arg);

/* Writes all n bytes to a socket (send with MSG_NOSIGNAL, EINTR retried).
 * 0, or -1 when the peer went away. */
int th_send_all(int fd, const void *p, size_t n);

/*
 * printf into a fresh string the harness owns and frees at exit.
 * Handy for paths and argv: th_strf("%s/worker.log", dir).  Never NULL
 * (out of memory ends the test).
 */
char *th_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Reads a whole file (at most 256 MiB) into a NUL-terminated malloc'd
 * buffer the caller frees; *len (may be NULL) gets the size without the
 * NUL.  NULL when the file cannot be read.
 */
char *th_file_read(const char *path, size_t *len);

/* Writes len bytes to path (created 0600, truncated).  0 or -1. */
int th_file_write(const char *path, const void *data, size_t len);

/* 1 when the file exists and contains needle (a C string), else 0. */
int th_file_contains(const char *path, const char *needle);

/*
 * 1 when any regular file under dir (recursively, symlinks not followed)
 * contains the needle_len bytes of needle, else 0.  On a hit, prints which
 * file.  Used to prove a secret never reached a data dir (e.g. Redis's AOF
 * under th_redis_t.dir, which holds every write ever made).
 */
int th_dir_contains(const char *dir, const void *needle, size_t needle_len);

/* The entries of dir whose names do not start with '.'; -1 when it cannot
 * be read. */
int th_count_files(const char *dir);

/* A NUL-terminated malloc'd copy of exactly len bytes (the caller frees;
 * strndup would stop at a NUL or look past len).  NULL when out of memory. */
char *th_memdup0(const void *p, size_t len);

/* Frees an array of n malloc'd strings and the array itself (NULL ok). */
void th_strv_free(char **v, size_t n);

/* ------------------------------------------------------------------------
 * Waiting
 * ------------------------------------------------------------------------ */

/*
 * Polls cond(arg) until it returns non-zero or timeout_ms passes; sleeps
 * 1 ms between polls, doubling up to 50 ms.  cond is always tried once
 * more at the deadline.  Returns 1 when cond held, 0 on timeout.
 */
int th_wait_until(int (*cond)(void *), void *arg, int timeout_ms);

/* Milliseconds on the monotonic clock (for measuring in tests). */
int64_t th_now_ms(void);

/* ------------------------------------------------------------------------
 * Processes
 * ------------------------------------------------------------------------ */

/*
 * Starts argv[0] (a path, or a name looked up on PATH) with argv, in its
 * own process group, with PR_SET_PDEATHSIG(SIGKILL), stdin from /dev/null
 * and stdout+stderr appended to log_path (NULL: inherit the test's).
 *
 * The environment is minimal, never the test's own: PATH, HOME, TMPDIR,
 * LANG=C.UTF-8, the sanitizer options (ASAN_OPTIONS, UBSAN_OPTIONS,
 * LSAN_OPTIONS) when set, then extra_env, a NULL-terminated list of
 * "NAME=value" strings (a later entry with the same NAME wins).
 *
 * An exec failure is reported (over a CLOEXEC pipe), not guessed: the
 * call returns -1 and prints why.  On success returns the pid, which is
 * registered for cleanup until th_wait_exit reaps it.
 */
pid_t th_spawn(char *const argv[], const char *const extra_env[], const char *log_path);

/*
 * th_spawn with the child's standard descriptors chosen by the caller (the
 * one spawner of the tests: tests/cli's runner and tests/builtin's agent
 * runner are built on it).  Each fd is dup'd onto 0, 1 or 2 in the child;
 * the caller keeps and closes its own copies.  -1: stdin from /dev/null,
 * stdout/stderr to log_path when set, else the test's own.  ctty: the
 * child starts a new session and takes stdin (a pty slave) as its
 * controlling terminal.  Same environment, exec report, registry and
 * return value as th_spawn.
 */
typedef struct th_spawn_opts {
	const char *log_path;
	int stdin_fd, stdout_fd, stderr_fd;
	int ctty;
} th_spawn_opts_t;
#define TH_SPAWN_OPTS_INIT \
	{ \
		NULL, -1, -1, -1, 0 \
	}

pid_t th_spawn_opts(char *const argv[], const char *const extra_env[], const th_spawn_opts_t *o);

/*
 * Starts a server that takes its port from the environment: picks a free
 * port, passes "<port_var>=<port>" (after extra_env), and waits up to
 * timeout_ms until 127.0.0.1:<port> accepts; a server that lost the port
 * race is killed and started again on another (three tries).  Returns the
 * pid and sets *port, or -1.
 */
pid_t th_spawn_port(char *const argv[], const char *const extra_env[], const char *port_var,
                    const char *log_path, int timeout_ms, int *port);

/*
 * The minimal environment th_spawn gives a child, as a NULL-terminated
 * malloc'd vector (free with th_env_free): PATH (a default when unset),
 * HOME, TMPDIR, the sanitizer options when set, LANG=C.UTF-8, then
 * extra_env ("NAME=value"; a later entry with the same NAME wins).
 * NULL when out of memory.
 */
char **th_env_new(const char *const extra_env[]);
void th_env_free(char **envp);

/*
 * th_spawn, then waits up to timeout_ms for the exit.  Returns the exit
 * status (0-255), 128 + the signal that ended it, or -1 when it could not
 * start or did not end in time (then its group is killed).
 */
int th_run(char *const argv[], const char *const extra_env[], const char *log_path, int timeout_ms);

/* Sends sig to the process pid only (not its group).  0 or -1. */
int th_signal(pid_t pid, int sig);

/*
 * Waits up to timeout_ms for pid to exit and reaps it.  Returns 0 and
 * fills *status (may be NULL; the raw waitpid status: use WIFEXITED,
 * WEXITSTATUS, WIFSIGNALED, WTERMSIG) or -1 on timeout (the child is left
 * running and registered).  Also reaps a child that died earlier.
 */
int th_wait_exit(pid_t pid, int timeout_ms, int *status);

/* SIGKILL to pid's whole process group, then reap it.  0 or -1. */
int th_kill(pid_t pid);

/*
 * SIGTERM to pid, wait up to timeout_ms, then SIGKILL to its group.
 * Returns the raw waitpid status of the exit, or -1 when it could not be
 * reaped.  Tells whether the program drained by itself: check
 * WIFEXITED(status).
 */
int th_stop(pid_t pid, int timeout_ms);

/* One process as /proc/<pid>/stat shows it. */
typedef struct th_proc {
	pid_t pid;
	char state; /* 'R', 'S', 'Z', ... */
	pid_t ppid;
	pid_t pgrp;
} th_proc_t;

/*
 * Calls fn for every process of the system whose stat can be read, until
 * fn returns non-zero.  0, or -1 when /proc cannot be read.  May be called
 * from the cleanup handlers (no allocation beyond opendir's).
 */
int th_proc_each(int (*fn)(const th_proc_t *p, void *arg), void *arg);

/* Zombie children of parent (exited, not yet reaped), or -1. */
int th_zombies_of(pid_t parent);

/* 1 when pid is a registered child that has not exited yet, else 0.
 * Looks without reaping: th_wait_exit still gets the status later. */
int th_alive(pid_t pid);

/* ------------------------------------------------------------------------
 * Redis: a real redis-server per test
 * ------------------------------------------------------------------------ */

typedef struct th_redis {
	int port;           /* loopback port it listens on */
	char url[192];      /* "redis://127.0.0.1:PORT" */
	char dir[PATH_MAX]; /* private dir: redis.conf, redis.log, AOF/RDB */
	char log_path[PATH_MAX];
	pid_t pid;          /* 0 when not running */
	char *extra;        /* private: extra config lines, kept for restart */
	char password[128]; /* from a "requirepass" extra line, else "" */
} th_redis_t;

/*
 * Starts `redis-server` (first on PATH, else /usr/bin/redis-server) on a
 * free loopback port in a fresh temp dir with no persistence (save "",
 * appendonly no) unless extra_config_lines (NULL or lines such as
 * "appendonly yes\nappendfsync always\n") say otherwise; later lines win.
 * Ready means PING answered PONG, probed until a 10 s deadline (never a
 * fixed sleep).  When the port was taken meanwhile, retries with another.
 * Fills *r.  0, or -1 (printed, with redis.log's tail).
 * With a "requirepass PASS" line, r->password is set, r->url becomes
 * "redis://:PASS@127.0.0.1:PORT" and th_redis_connect authenticates.
 */
int th_redis_start(th_redis_t *r, const char *extra_config_lines);

/* SHUTDOWN-like stop: SIGTERM, wait up to 5 s, then SIGKILL.  The dir
 * stays (for th_redis_restart) until exit.  0 or -1. */
int th_redis_stop(th_redis_t *r);

/* SIGKILL, as a crash: nothing is flushed beyond what redis already
 * wrote (with appendfsync always, every acknowledged write).  0 or -1. */
int th_redis_kill(th_redis_t *r);

/*
 * Starts redis again on the same port and dir with the same config, so
 * that AOF data comes back.  Stops it first when running.  Retries the
 * bind until a 10 s deadline (the old socket may linger).  0 or -1.
 */
int th_redis_restart(th_redis_t *r);

/* A new blocking connection (2 s connect timeout, 5 s per reply: keep
 * XREAD BLOCK under 5000 ms); AUTH when r->password is set.  The caller
 * frees it with redisFree.  NULL on failure (printed). */
redisContext *th_redis_connect(const th_redis_t *r);

/*
 * Reads the whole stream key (XRANGE key - +) and returns the "line" field
 * of each entry in *lines and the entry ids in *ids (ids may be NULL),
 * *n entries.  Both arrays are malloc'd and the caller frees them with
 * th_strv_free(lines, n).  A missing key gives n = 0.  0 or -1.
 */
int th_stream_read_all(redisContext *c, const char *key, char ***lines,
                       char ***ids, size_t *n);

/*
 * Waits until the last entry of stream key has a "line" whose JSON "type"
 * is "result" or "error".  Returns 1, or 0 on timeout (the stream's
 * current entries are printed to help the post-mortem).
 */
int th_wait_stream_terminal(redisContext *c, const char *key, int timeout_ms);

/*
 * The JSON "type" and, for errors, "code" of a line, copied into the
 * buffers ("" when absent or not JSON).  Convenience for asserting
 * envelope lines.  0, or -1 when line is not a JSON object.
 */
int th_line_type(const char *line, char *type, size_t type_size,
                 char *code, size_t code_size);

/* Index of the first of lines[from..n) whose "type" is type and, when status
 * is not NULL, whose "status" is status; -1 when none is. */
long th_lines_find(char **lines, size_t n, size_t from, const char *type, const char *status);

/* The value at line.path1 (.path2 when not NULL) as text: a string as it
 * is, any other JSON value compact ("5", "true", "{...}"); "" when absent
 * or line is not JSON.  A static buffer (4 KiB), overwritten by each call. */
const char *th_line_field(const char *line, const char *path1, const char *path2);

/* How many of lines[] th_lines_find would match. */
size_t th_lines_count(char **lines, size_t n, const char *type, const char *status);

/*
 * 1 when needle (a C string) occurs anywhere in the Redis server c is
 * connected to: in any key name or any value of any type (strings,
 * hashes, lists, sets, sorted sets with members, streams with field names
 * and values), in every logical database.  0 when not found, -1 on error.
 * On a hit, prints which key.  Used to prove that no OTP, token or prompt
 * ever sits in Redis; pair it with th_dir_contains(r.dir, ...) under
 * "appendonly yes" to also catch values that were written and deleted.
 */
int th_redis_scan_contains(redisContext *c, const char *needle);

/* How many connections Redis lists (CLIENT LIST) whose line contains
 * needle (NULL: every one, the caller's own included); -1 on error. */
int th_redis_clients(redisContext *c, const char *needle);

/* Runs one command and returns its integer reply (TTL, XLEN, LLEN, ...),
 * or dflt when the command failed or answered something else. */
long long th_redis_int(redisContext *c, long long dflt, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------
 * Redis Cluster: real redis-server nodes joined by redis-cli --cluster
 * ------------------------------------------------------------------------ */

#define TH_CLUSTER_MAX_NODES 12

typedef struct th_cluster {
	int n;                                 /* nodes started */
	th_redis_t node[TH_CLUSTER_MAX_NODES]; /* each with its own dir and log */
	int bus_port[TH_CLUSTER_MAX_NODES];    /* its cluster-port */
	char url[192];                         /* node 0's URL: any node will do */
	char password[128];                    /* "" or every node's requirepass */
} th_cluster_t;

/*
 * Starts primaries * (1 + replicas) redis-server nodes on free loopback
 * ports, each with cluster-enabled yes, an explicit cluster-port (the
 * default port + 10000 can pass 65535 for an ephemeral port),
 * cluster-node-timeout 2000, appendonly yes and extra_config_lines (NULL
 * or lines; a "requirepass P" line also sets masterauth and is passed to
 * redis-cli), then runs `redis-cli --cluster create ... --cluster-replicas
 * replicas --cluster-yes` and waits (th_cluster_wait_ok) until every node
 * agrees.  The nodes are registered children: they die with the test.
 * 0, or -1 (printed, with redis-cli's output).
 */
int th_cluster_start(th_cluster_t *cl, int primaries, int replicas, const char *extra_config_lines);

/*
 * Waits up to timeout_ms until every running node says cluster_state:ok,
 * knows all cl->n nodes, maps all 16384 slots to running primaries in its
 * CLUSTER SLOTS (the same map on every node), and every running replica of
 * a running primary has its replication link up.  After a primary is
 * killed this is the moment its replica has taken over.  1, or 0 on
 * timeout (the disagreement is printed).
 */
int th_cluster_wait_ok(th_cluster_t *cl, int timeout_ms);

/* The index of the running node that serves slot as a primary, according
 * to the first running node's CLUSTER SLOTS; -1 when none does. */
int th_cluster_primary_of(th_cluster_t *cl, int slot);

/* The index of a running node replicating from node primary; -1. */
int th_cluster_replica_of(th_cluster_t *cl, int primary);

/* A blocking connection to node i (th_redis_connect); NULL when down. */
redisContext *th_cluster_connect(th_cluster_t *cl, int i);

/* SIGKILL node i (a crash). 0 or -1. */
int th_cluster_kill(th_cluster_t *cl, int i);

/* Runs redis-cli with the cluster's password (via REDISCLI_AUTH) and the
 * NULL-terminated args after it, output to log_path (NULL: the test's),
 * up to timeout_ms.  The exit status as th_run gives it. */
int th_cluster_cli(th_cluster_t *cl, const char *log_path, int timeout_ms, ...)
        __attribute__((sentinel));


/*
 * A handle of common/rcluster (what runnel's run-state and queue calls
 * take) to the server c is connected to, opened on first use and kept
 * for the test's life (one per port).  For tests that hold a plain
 * context for their own checks.  With the password of the last cluster
 * th_cluster_start started, if any.  Ends the test when it
 * cannot be opened.
 */
rn_rcluster_t *th_rc_for(const redisContext *c);

/*
 * redisCommand(c, fmt, ...), except that with RUNNEL_TEST_REDIS=cluster in
 * the environment (the cluster-labelled reruns) the command is routed by
 * slot through th_rc_for(c), so a test's checks work on any node (c
 * itself when its node does not answer).  The reply is the caller's
 * (freeReplyObject); NULL on a transport error.
 */
int th_cluster_mode(void);
redisReply *th_cmd(redisContext *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
redisReply *th_vcmd(redisContext *c, const char *fmt, va_list ap);

/* A handle to url (a standalone server or any cluster node) for the
 * caller to free with rn_rcluster_free; NULL on failure (printed). */
rn_rcluster_t *th_rcluster_open(const char *url);

/* ------------------------------------------------------------------------
 * Kafka: librdkafka's mock cluster, in the test's own process
 * ------------------------------------------------------------------------ */

typedef struct th_kafka {
	rd_kafka_t *rk; /* handle that owns the mock cluster */
	rd_kafka_mock_cluster_t *mcluster;
	rd_kafka_t *producer; /* private: created on first produce */
	int brokers;
	char bootstrap[512]; /* "127.0.0.1:p1,127.0.0.1:p2" */
	/* Real broker mode (see th_kafka_start); mcluster is NULL then. */
	int real;                 /* 1 shared broker, 2 private one */
	rd_kafka_t *admin;        /* private: topic creation */
	char state_dir[PATH_MAX]; /* private broker's */
} th_kafka_t;

/*
 * Creates a mock cluster of `brokers` brokers (ids 1..brokers), each on a
 * 127.0.0.1 ephemeral port that child processes can reach too; fills
 * k->bootstrap for RUNNEL_KAFKA_BROKERS.  0 or -1.
 * Note: a consumer group's first join takes about 3 s on the mock cluster;
 * th_kafka_consume_one avoids groups (it assigns partitions directly).
 *
 * Real Apache Kafka instead of the mock, chosen by the environment (the
 * kafka-labelled tests set it through CTest, so the same test program runs
 * against both):
 *   RUNNEL_TEST_KAFKA=real     the broker the kafka_broker fixture started
 *                              (tests/kafka/broker.sh): its address comes
 *                              from RUNNEL_TEST_KAFKA_BROKERS, else from the
 *                              file RUNNEL_TEST_KAFKA_ADDR_FILE, else from
 *                              <build>/tests/kafka/broker.addr.  Shared by
 *                              every test: use topics and groups of your own.
 *   RUNNEL_TEST_KAFKA=private  a broker of this test's own (its start costs
 *                              a few seconds), so th_kafka_broker_down/up
 *                              can stop it and start it again on the same
 *                              port and data (a real broker restart).
 * `brokers` must be 1 in both modes.
 */
int th_kafka_start(th_kafka_t *k, int brokers);

/* Creates topic with partitions partitions (replication factor 1) and, on
 * a real broker, waits until every partition has a leader.  An existing
 * topic is fine.  Topics are also auto-created on first produce or fetch
 * (with one partition on the real broker).  0 or -1. */
int th_kafka_create_topic(th_kafka_t *k, const char *topic, int partitions);

/*
 * Produces one message and waits for its delivery report (up to 10 s).
 * key may be NULL; value may be NULL (a tombstone).  headers is NULL or a
 * NULL-terminated list of alternating names and values:
 * (const char *[]){"reason", "bad json", NULL}.  partition < 0 lets the
 * partitioner pick (by key).  0, or -1 with the delivery error printed.
 */
int th_kafka_produce(th_kafka_t *k, const char *topic, int partition,
                     const char *key, const void *value, size_t len,
                     const char *const *headers);

/* One consumed message; every buffer is owned by the struct (NUL-terminated
 * copies) and freed by th_kafka_msg_free. */
typedef struct th_kafka_msg {
	char *key; /* NULL when the message had no key */
	size_t key_len;
	char *value; /* NULL when the message had no value */
	size_t len;
	size_t n_headers;
	char **header_names;
	char **header_values; /* NULL entry for a header without value */
	int32_t partition;
	int64_t offset;
} th_kafka_msg_t;

/* The value of the first header called name, or NULL. */
const char *th_kafka_msg_header(const th_kafka_msg_t *m, const char *name);
void th_kafka_msg_free(th_kafka_msg_t *m);

typedef struct th_kafka_consumer th_kafka_consumer_t;

/*
 * A consumer of topic reading from the earliest offset.  group NULL: no
 * consumer group; every partition is assigned directly (fast: no 3 s
 * join).  group non-NULL: subscribes with that group.id and
 * auto.offset.reset=earliest (expect the first join to take ~3 s).
 * NULL on failure.
 */
th_kafka_consumer_t *th_kafka_consumer_new(th_kafka_t *k, const char *topic,
                                           const char *group);

/* Next message within timeout_ms: 1 with *out filled (free it with
 * th_kafka_msg_free), 0 on timeout, -1 on a consumer error (printed).
 * End-of-partition events are skipped. */
int th_kafka_consumer_next(th_kafka_consumer_t *c, int timeout_ms, th_kafka_msg_t *out);

/* Closes and frees (NULL ok). */
void th_kafka_consumer_free(th_kafka_consumer_t *c);

/*
 * The first message a fresh reader of topic receives (every partition
 * from its earliest offset, no consumer group), waiting up to timeout_ms
 * for the topic and a message to appear.  1 with *out filled, 0 on
 * timeout, -1 on error.  Meant for asserting a DLQ's content and headers;
 * for a topic with several messages use a consumer.
 */
int th_kafka_consume_one(th_kafka_t *k, const char *topic, int timeout_ms,
                         th_kafka_msg_t *out);

/* Takes broker broker_id (1..brokers) down or brings it back up. 0 or -1.
 * With a private real broker: stops the broker process (SIGTERM) / starts
 * it again on the same port with the same data; up returns once it answers
 * metadata.  The shared real broker refuses (-1). */
int th_kafka_broker_down(th_kafka_t *k, int broker_id);
int th_kafka_broker_up(th_kafka_t *k, int broker_id);

/* Destroys the producer and the mock cluster (NULL fields ok). */
void th_kafka_stop(th_kafka_t *k);

#endif
