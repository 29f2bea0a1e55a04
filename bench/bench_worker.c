/*
 * bench/bench_worker.c - runnel-worker against a no-queue floor, in one
 * invocation, on one Redis and one Kafka (the suite's real broker, or
 * librdkafka's mock cluster with --mock):
 *
 *   (a) floor: the worker's own bwrap argv (worker_sandbox_spawn, the same
 *       spec) running a 3-line agent, 8 at a time, every stdout line XADDed;
 *   (b) runnel: the same agent, N runs queued before the worker starts,
 *       8 slots, OTP bootstrap against the dev stub; runs/s from the
 *       worker's start (so it includes the group join), CPU ms per run;
 *   (c) one at a time: enqueue -> first line readable by an XREAD BLOCK
 *       caller, for both (the floor's "enqueue" is the spawn decision);
 *   (d) one run flooding lines vs redis-benchmark -P 64 XADD;
 * plus idle RSS (worker and its warm sandboxes) and RSS per active run,
 * the whole machine's busy CPUs in (a) and (b) (/proc/stat), and the
 * ratios against the targets.  Prints figures; asserts nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "common/util.h"
#include "dev/stub.h"
#include "tests/support/harness.h"
#include "worker/sandbox.h"

#define SLOTS 8

/* The 3-line agent: reads its turn, prints two logs and a result. */
#define AGENT_SH "read -r t; " \
	         "echo '{\"type\":\"log\",\"level\":\"info\",\"message\":\"one\"}'; " \
	         "echo '{\"type\":\"log\",\"level\":\"info\",\"message\":\"two\"}'; " \
	         "echo '{\"type\":\"result\",\"message\":\"done\"}'"
#define AGENT_JSON "{\"kind\":\"command\",\"argv\":[\"/bin/sh\",\"-c\",\"read -r t; " \
	           "echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"one\\\"}'; " \
	           "echo '{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"two\\\"}'; " \
	           "echo '{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"done\\\"}'\"]}"

static th_redis_t R;
static th_kafka_t K;
static int use_mock;
static char brokers[512];
static char topic[128];
static dev_stub_t *S;
static redisContext *C;
static rd_kafka_t *P;
static const char *workdir;
static char *broker_state; /* set when the bench started the broker itself */

/* Figures for the summary. */
static double floor_rps, floor_cpu, floor_p50, floor_p99;
static double rn_rps, rn_cpu, rn_p50, rn_p99;
static double kafka_p50, kafka_p99;
static double flood_lps, flood_ref, flood_ref1;
static long rss_idle, rss_idle_tree, rss_per_run;

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void pct(int64_t *v, int n, double *p50, double *p99)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	*p50 = n ? v[n / 2] / 1000.0 : -1;
	*p99 = n ? v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1000.0 : -1;
}

static char *loadavg(void)
{
	char *la = th_file_read("/proc/loadavg", NULL);
	if (la && strchr(la, '\n'))
		*strchr(la, '\n') = '\0';
	return la ? la : strdup("?");
}

static double ru_ms(const struct rusage *r)
{
	return (double)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1000.0 +
	        (double)(r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1000.0;
}

/* CPU ms used by this process and its reaped children; *children: theirs. */
static double self_cpu_ms(double *children)
{
	struct rusage a, b;
	getrusage(RUSAGE_SELF, &a);
	getrusage(RUSAGE_CHILDREN, &b);
	*children = ru_ms(&b);
	return ru_ms(&a) + ru_ms(&b);
}

/* CPU ms of pid and its reaped children (utime+stime+cutime+cstime);
 * *children: the reaped children's alone. */
static double proc_cpu_ms2(pid_t pid, double *children)
{
	char *s = th_file_read(th_strf("/proc/%ld/stat", (long)pid), NULL);
	const char *p = s ? strrchr(s, ')') : NULL;
	double ms = -1;
	if (p) {
		unsigned long long v[15];
		/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime */
		char st;
		if (sscanf(p + 2, "%c %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &st,
		           &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11],
		           &v[12], &v[13]) == 15) {
			ms = (double)(v[10] + v[11] + v[12] + v[13]) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
			*children = (double)(v[12] + v[13]) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
		}
	}
	free(s);
	return ms;
}

static double proc_cpu_ms(pid_t pid)
{
	double children;
	return proc_cpu_ms2(pid, &children);
}

static long rss_kb(pid_t pid)
{
	char *s = th_file_read(th_strf("/proc/%ld/status", (long)pid), NULL);
	long kb = -1;
	const char *p = s ? strstr(s, "VmRSS:") : NULL;
	if (p)
		kb = strtol(p + 6, NULL, 10);
	free(s);
	return kb;
}

static pid_t ppid_of(pid_t pid)
{
	char *s = th_file_read(th_strf("/proc/%ld/stat", (long)pid), NULL);
	const char *p = s ? strrchr(s, ')') : NULL;
	int pp = -1;
	char st;
	if (!p || sscanf(p + 2, "%c %d", &st, &pp) != 2)
		pp = -1;
	free(s);
	return (pid_t)pp;
}

/* RSS of pid and every descendant (warm sandboxes: bwrap and its init). */
static long tree_rss_kb(pid_t root)
{
	pid_t pids[4096];
	size_t n = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d)) && n < 4096) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		if (!*end && v > 0)
			pids[n++] = (pid_t)v;
	}
	if (d)
		closedir(d);
	long total = 0;
	for (size_t i = 0; i < n; i++) {
		pid_t p = pids[i];
		for (int depth = 0; p > 1 && depth < 16; depth++) {
			if (p == root) {
				long kb = rss_kb(pids[i]);
				total += kb > 0 ? kb : 0;
				break;
			}
			p = ppid_of(p);
		}
	}
	return total;
}

static void xadd(const char *id, const char *line, size_t len)
{
	redisReply *r = redisCommand(C, "XADD runnel:{%s}:out * line %b", id, line, len);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "floor: XADD failed\n");
		exit(1);
	}
	freeReplyObject(r);
}

/* ------------------------------------------------------------------------
 * (a) the floor: the same bwrap argv, spawned directly
 * ------------------------------------------------------------------------ */

typedef struct fslot {
	int active;
	worker_sandbox_t sb;
	char id[48];
	char dir[512];
	char buf[16384];
	size_t len;
	int first_done;
	int64_t t0, first_us;
} fslot_t;

static char *floor_env[5];

static void floor_start(fslot_t *s, const char *id)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "%s", id);
	snprintf(s->dir, sizeof(s->dir), "%s/floor-%s", workdir, id);
	s->t0 = now_us();
	if (mkdir(s->dir, 0755) != 0) {
		fprintf(stderr, "floor: mkdir %s: %s\n", s->dir, strerror(errno));
		exit(1);
	}
	char *argv[] = { "/bin/sh", "-c", AGENT_SH, NULL };
	floor_env[0] = "HOME=/root";
	floor_env[1] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	floor_env[2] = th_strf("RUNNEL_RUN_ID=%s", id);
	floor_env[3] = NULL;
	worker_sandbox_spec_t spec = {
		.driver = WORKER_SANDBOX_BWRAP,
		.init_path = RUNNEL_TEST_SANDBOX_INIT,
		.workspace_dir = s->dir,
		.argv = argv,
		.envp = floor_env,
		.rlimit_nofile = 4096,
	};
	char err[256];
	if (worker_sandbox_spawn(&spec, &s->sb, err, sizeof(err)) != 0) {
		fprintf(stderr, "floor: %s\n", err);
		exit(1);
	}
	const char *turn = "{\"run_id\":\"x\",\"prompt\":\"hi\"}\n";
	if (write(s->sb.stdin_fd, turn, strlen(turn)) < 0)
		fprintf(stderr, "floor: write turn: %s\n", strerror(errno));
	s->active = 1;
}

/* Reads what is there, XADDs every whole line; 1 at EOF. */
static int floor_read(fslot_t *s)
{
	ssize_t n = read(s->sb.stdout_fd, s->buf + s->len, sizeof(s->buf) - s->len);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : 1;
	if (n == 0)
		return 1;
	s->len += (size_t)n;
	char *p = s->buf, *nl;
	while ((nl = memchr(p, '\n', s->len - (size_t)(p - s->buf)))) {
		xadd(s->id, p, (size_t)(nl - p));
		if (!s->first_done) {
			s->first_done = 1;
			s->first_us = now_us() - s->t0;
		}
		p = nl + 1;
	}
	s->len -= (size_t)(p - s->buf);
	memmove(s->buf, p, s->len);
	return 0;
}

static void floor_end(fslot_t *s)
{
	worker_sandbox_destroy(&s->sb);
	rmdir(s->dir);
	s->active = 0;
}

/* Runs n runs, `par` at a time; fills lat (first line, us) when given. */
static double floor_run(int n, int par, int64_t *lat, const char *tag)
{
	fslot_t *slots = calloc((size_t)par, sizeof(*slots));
	int started = 0, done = 0;
	int64_t t0 = now_us();
	while (done < n) {
		struct pollfd pfd[SLOTS];
		int idx[SLOTS], np = 0;
		for (int i = 0; i < par; i++) {
			if (!slots[i].active && started < n)
				floor_start(&slots[i], th_strf("%s_%d", tag, started++));
			if (slots[i].active) {
				idx[np] = i;
				pfd[np++] = (struct pollfd){ slots[i].sb.stdout_fd, POLLIN, 0 };
			}
		}
		if (poll(pfd, (nfds_t)np, 10000) <= 0)
			continue;
		for (int k = 0; k < np; k++) {
			if (!pfd[k].revents)
				continue;
			fslot_t *s = &slots[idx[k]];
			if (floor_read(s)) {
				if (lat)
					lat[done] = s->first_us;
				floor_end(s);
				done++;
			}
		}
	}
	double secs = (now_us() - t0) / 1e6;
	free(slots);
	return secs;
}

/* CPU (ms) of the programs around the runs, for the machine's account:
 * this process (the floor, or the dev stub serving the OTPs), redis-server
 * (INFO cpu), the Kafka broker (every java process) and the kernel's own
 * threads (children of kthreadd; a kworker that exits meanwhile is missed). */
typedef struct around {
	double self, redis, kafka, kthreads;
} around_t;

static int around_proc(const th_proc_t *p, void *arg)
{
	around_t *a = arg;
	int kthread = p->pid == 2 || p->ppid == 2;
	char *comm = kthread ? NULL : th_file_read(th_strf("/proc/%ld/comm", (long)p->pid), NULL);
	if (kthread || (comm && !strcmp(comm, "java\n"))) {
		double kids = 0, ms = proc_cpu_ms2(p->pid, &kids);
		if (ms > 0)
			*(kthread ? &a->kthreads : &a->kafka) += ms - kids;
	}
	free(comm);
	return 0;
}

static around_t around_now(void)
{
	around_t a = { 0, 0, 0, 0 };
	double kids;
	a.self = self_cpu_ms(&kids) - kids;
	redisReply *r = redisCommand(C, "INFO cpu");
	if (r && r->type == REDIS_REPLY_STRING) {
		const char *u = strstr(r->str, "used_cpu_user:"), *y = strstr(r->str, "used_cpu_sys:");
		a.redis = ((u ? atof(u + 14) : 0) + (y ? atof(y + 13) : 0)) * 1000.0;
	}
	if (r)
		freeReplyObject(r);
	th_proc_each(around_proc, &a);
	return a;
}

static void print_around(const char *self_name, around_t a, around_t b, int runs)
{
	if (runs <= 0)
		return;
	printf("    around them per run: %s %.2f, redis-server %.2f, Kafka broker %.2f, kernel threads %.2f ms\n",
	       self_name, (b.self - a.self) / runs, (b.redis - a.redis) / runs, (b.kafka - a.kafka) / runs,
	       (b.kthreads - a.kthreads) / runs);
}

/* The whole machine's CPU (/proc/stat), every process and the kernel's own
 * threads: busy and total jiffies. */
typedef struct machine_cpu {
	unsigned long long busy, total;
} machine_cpu_t;

static machine_cpu_t machine_cpu(void)
{
	machine_cpu_t m = { 0, 0 };
	char *st = th_file_read("/proc/stat", NULL);
	unsigned long long v[10] = { 0 };
	if (st && sscanf(st, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 8) {
		for (int i = 0; i < 8; i++)
			m.total += v[i];
		m.busy = m.total - v[3] - v[4]; /* idle, iowait */
	}
	free(st);
	return m;
}

/* "machine: 1.72 of 2 CPUs busy, 10.9 ms per run": what a CPU-bound phase
 * really costs (the rusage figures miss the kernel's own threads). */
static void print_machine(machine_cpu_t a, machine_cpu_t b, double secs, int runs)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double tot = (double)(b.total - a.total), busy = (double)(b.busy - a.busy);
	if (tot <= 0 || runs <= 0)
		return;
	printf("    machine: %.2f of %ld CPUs busy, %.1f ms of machine CPU per run\n", ncpu * busy / tot, ncpu,
	       ncpu * busy / tot * secs * 1000.0 / runs);
}

static void bench_floor(int runs, int lat_runs)
{
	char *la = loadavg();
	double k0, k1;
	double c0 = self_cpu_ms(&k0);
	around_t a0 = around_now();
	machine_cpu_t m0 = machine_cpu();
	double secs = floor_run(runs, SLOTS, NULL, "floor_tp");
	machine_cpu_t m1 = machine_cpu();
	around_t a1 = around_now();
	double c1 = self_cpu_ms(&k1);
	floor_rps = runs / secs;
	floor_cpu = (c1 - c0) / runs;
	printf("(a) floor: %d runs, %d at a time, in %.2f s = %.0f runs/s, CPU %.2f ms per run "
	       "(bench %.2f + bwrap and agent %.2f) [load %s]\n",
	       runs, SLOTS, secs, floor_rps, floor_cpu, (c1 - c0 - (k1 - k0)) / runs, (k1 - k0) / runs, la);
	print_machine(m0, m1, secs, runs);
	print_around("the bench (its XADDs)", a0, a1, runs);
	free(la);
	if (lat_runs > 0) {
		int64_t *lat = calloc((size_t)lat_runs, sizeof(*lat));
		la = loadavg();
		for (int i = 0; i < lat_runs; i++)
			floor_run(1, 1, &lat[i], th_strf("floor_lat%d", i));
		pct(lat, lat_runs, &floor_p50, &floor_p99);
		printf("(c) floor: spawn -> first line XADDed, %d runs one at a time: p50 %.1f ms  p99 %.1f ms "
		       "[load %s]\n",
		       lat_runs, floor_p50, floor_p99, la);
		free(la);
		free(lat);
	}
}

/* ------------------------------------------------------------------------
 * Kafka and the stub
 * ------------------------------------------------------------------------ */

static char *job_json(const char *run_id, const dev_stub_otps_t *o, const char *prompt)
{
	json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:I}", "v", 1, "run_id", run_id,
	                      "agent_url", o->agent_url, "otp_setup", o->otp_setup,
	                      "otp_run", o->otp_run, "prompt", prompt,
	                      "enqueued_at", (json_int_t)th_now_ms());
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}

static void add_run(const char *agent, dev_stub_otps_t *o)
{
	dev_stub_run_t run = { 0 };
	json_t *cfg = json_object();
	json_object_set_new(cfg, "agent", json_loads(agent, 0, NULL));
	run.config = cfg;
	if (dev_stub_add_run(S, &run, o) < 0) {
		fprintf(stderr, "stub add run failed\n");
		exit(1);
	}
	json_decref(cfg);
}

static void produce_to(const char *to, const char *run_id, const char *json)
{
	while (rd_kafka_producev(P, RD_KAFKA_V_TOPIC(to), RD_KAFKA_V_KEY(run_id, strlen(run_id)),
	                         RD_KAFKA_V_VALUE((void *)json, strlen(json)),
	                         RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) ==
	       RD_KAFKA_RESP_ERR__QUEUE_FULL)
		rd_kafka_poll(P, 10);
	rd_kafka_poll(P, 0);
}

static void produce_async(const char *run_id, const char *json)
{
	produce_to(topic, run_id, json);
}

/* A topic of 8 partitions on the real broker (Admin API). */
static int create_topic_real(const char *name)
{
	char err[256];
	rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(name, 8, 1, err, sizeof(err));
	rd_kafka_queue_t *q = rd_kafka_queue_new(P);
	rd_kafka_CreateTopics(P, &nt, 1, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	int rc = -1;
	if (ev) {
		const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
		size_t cnt = 0;
		const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &cnt) : NULL;
		if (tr && cnt == 1 && (!rd_kafka_topic_result_error(tr[0]) || rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS))
			rc = 0;
		else
			fprintf(stderr, "create topic %s: %s\n", name,
			        tr && cnt ? rd_kafka_err2str(rd_kafka_topic_result_error(tr[0])) : "no result");
		rd_kafka_event_destroy(ev);
	} else {
		fprintf(stderr, "create topic %s: timed out\n", name);
	}
	rd_kafka_queue_destroy(q);
	rd_kafka_NewTopic_destroy(nt);
	return rc;
}

/* Blocks until the stream of run_id has an entry (XREAD BLOCK, as a caller). */
static int wait_first_line(const char *run_id, int timeout_ms)
{
	redisReply *r = redisCommand(C, "XREAD COUNT 1 BLOCK %d STREAMS runnel:{%s}:out 0-0", timeout_ms, run_id);
	int ok = r && r->type == REDIS_REPLY_ARRAY;
	if (r)
		freeReplyObject(r);
	return ok;
}

/* ------------------------------------------------------------------------
 * (b)-(d) runnel
 * ------------------------------------------------------------------------ */

/* When the run was marked running (Redis's clock, ms: the host's). */
static int run_started(const char *id, long long *started)
{
	redisReply *a = redisCommand(C, "HGET runnel:{%s}:state started_at", id);
	int ok = a && a->type == REDIS_REPLY_STRING;
	if (ok)
		*started = strtoll(a->str, NULL, 10);
	if (a)
		freeReplyObject(a);
	return ok;
}

/*
 * Kafka alone, for scale: the same producer and topic, a consumer of a
 * group of its own polling in this process; produce -> record polled, one
 * at a time.  What no worker can take off its enqueue -> first line.
 */
static void bench_kafka_alone(int runs)
{
	char err[256];
	/* A topic of its own, shaped like the jobs topic (the worker must not
	 * see these records). */
	char *alone = th_strf("bench.kafka.%ld", (long)getpid());
	if ((use_mock ? th_kafka_create_topic(&K, alone, 8) : create_topic_real(alone)) < 0)
		return;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
	rd_kafka_conf_set(conf, "group.id", th_strf("bench-kafka-%ld", (long)getpid()), err, sizeof(err));
	rd_kafka_conf_set(conf, "auto.offset.reset", "latest", err, sizeof(err));
	rd_kafka_conf_set(conf, "fetch.wait.max.ms", "100", err, sizeof(err)); /* the worker's */
	rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "kafka alone: %s\n", err);
		rd_kafka_conf_destroy(conf);
		return;
	}
	rd_kafka_poll_set_consumer(c);
	rd_kafka_topic_partition_list_t *t = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(t, alone, RD_KAFKA_PARTITION_UA);
	rd_kafka_subscribe(c, t);
	rd_kafka_topic_partition_list_destroy(t);
	/* Joined once partitions are assigned and, two seconds on, their
	 * positions fetched; 30 s at most. */
	int64_t joining = now_us();
	for (;;) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
		if (m)
			rd_kafka_message_destroy(m);
		rd_kafka_topic_partition_list_t *a = NULL;
		int assigned = rd_kafka_assignment(c, &a) == 0 && a && a->cnt > 0;
		if (a)
			rd_kafka_topic_partition_list_destroy(a);
		int64_t waited = now_us() - joining;
		if ((assigned && waited > 2000000) || waited > 30000000)
			break;
	}
	int64_t *lat = calloc((size_t)runs, sizeof(*lat));
	int got = 0;
	char *la = loadavg();
	/* The first few, while the consumer's fetches settle, are not counted. */
	for (int i = -5; i < runs; i++) {
		char key[32];
		snprintf(key, sizeof(key), "kafka_alone_%d", i);
		int64_t t0 = now_us();
		produce_to(alone, key, "kafka-alone");
		for (int64_t until = t0 + 5000000; now_us() < until;) {
			rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 1000);
			if (!m)
				continue;
			int mine = !m->err && m->key_len == strlen(key) && !memcmp(m->key, key, m->key_len);
			rd_kafka_message_destroy(m);
			if (mine) {
				if (i >= 0)
					lat[got++] = now_us() - t0;
				break;
			}
		}
		sleep_ms(20);
	}
	rd_kafka_flush(P, 5000);
	pct(lat, got, &kafka_p50, &kafka_p99);
	printf("(c) Kafka alone: produce -> record polled by a consumer, %d one at a time: p50 %.1f ms  p99 %.1f ms "
	       "[load %s]\n",
	       got, kafka_p50, kafka_p99, la);
	free(la);
	free(lat);
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
}

static void bench_latency(int runs)
{
	int64_t *lat = calloc((size_t)runs, sizeof(*lat));
	int64_t *intake = calloc((size_t)runs, sizeof(*intake));
	int64_t *inrun = calloc((size_t)runs, sizeof(*inrun));
	int got = 0, split = 0;
	char *la = loadavg();
	for (int i = 0; i < runs; i++) {
		dev_stub_otps_t o;
		char id[64];
		snprintf(id, sizeof(id), "run_lat_%d", i);
		add_run(AGENT_JSON, &o);
		char *js = job_json(id, &o, "hi");
		/* The caller is already blocked in XREAD when the job is sent (as
		 * a client tailing the run would be); the producer's delivery
		 * report is not waited for before the clock stops. */
		redisAppendCommand(C, "XREAD COUNT 1 BLOCK 10000 STREAMS runnel:{%s}:out 0-0", id);
		int wdone = 0;
		while (!wdone)
			if (redisBufferWrite(C, &wdone) != REDIS_OK)
				break;
		sleep_ms(2); /* Redis has it blocked */
		int64_t t0 = now_us();
		long long wall0 = (long long)rn_now_ms();
		produce_async(id, js);
		redisReply *xr = NULL;
		int ok = redisGetReply(C, (void **)&xr) == REDIS_OK && xr && xr->type == REDIS_REPLY_ARRAY;
		int64_t t1 = now_us();
		long long wall1 = (long long)rn_now_ms();
		if (xr)
			freeReplyObject(xr);
		rd_kafka_flush(P, 5000);
		if (ok)
			lat[got++] = t1 - t0;
		long long started;
		if (ok && run_started(id, &started) && getenv("BENCH_VERBOSE"))
			printf("    %s: enqueued %lld, running %lld, first line read %lld (wall ms)\n", id, wall0, started, wall1);
		if (ok && run_started(id, &started)) {
			intake[split] = (started - wall0) * 1000;
			inrun[split++] = (wall1 - started) * 1000;
		}
		free(js);
		/* One at a time: the run ends, and the pool has refilled, before the next. */
		th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", id), 10000);
		sleep_ms(20);
	}
	pct(lat, got, &rn_p50, &rn_p99);
	printf("(c) runnel: enqueue -> first line readable by XREAD BLOCK, %d runs one at a time: "
	       "p50 %.1f ms  p99 %.1f ms  max %.1f ms [load %s]\n",
	       got, rn_p50, rn_p99,
	       got ? lat[got - 1] / 1000.0 : -1, la);
	double i50, i99, r50, r99;
	pct(intake, split, &i50, &i99);
	pct(inrun, split, &r50, &r99);
	printf("    split (1 ms resolution): enqueue -> run marked running (intake: Kafka, claim, thread) p50 %.0f  "
	       "p99 %.0f ms; running -> first line read (bootstrap, sandbox, agent, publish) p50 %.0f  p99 %.0f ms\n",
	       i50, i99, r50, r99);
	free(la);
	free(lat);
	free(intake);
	free(inrun);
}

static double redis_benchmark_xadd(long n, int clients)
{
	char *cmd = th_strf("redis-benchmark -h 127.0.0.1 -p %d -c %d -P 64 -n %ld -q XADD bench:xadd '*' line "
	                    "'{\"type\":\"log\",\"level\":\"debug\",\"message\":\"line 123456\",\"ts\":1700000000000}' 2>/dev/null",
	                    R.port, clients, n);
	if (R.password[0])
		cmd = th_strf("REDISCLI_AUTH=%s %s", R.password, cmd);
	FILE *f = popen(cmd, "r");
	char buf[4096];
	double rps = -1;
	while (f && fgets(buf, sizeof(buf), f)) {
		/* "XADD ...: 123456.78 requests per second" (last figure wins) */
		char *p = strstr(buf, "requests per second");
		if (p) {
			char *q = p;
			while (q > buf && q[-1] == ' ')
				q--;
			while (q > buf && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9')))
				q--;
			rps = strtod(q, NULL);
		}
	}
	if (f)
		pclose(f);
	freeReplyObject(redisCommand(C, "DEL bench:xadd"));
	return rps;
}

static void bench_flood(long lines)
{
	dev_stub_otps_t o;
	char *agent = th_strf("{\"kind\":\"mock\",\"script\":\"flood %ld\"}", lines);
	add_run(agent, &o);
	char *js = job_json("run_flood", &o, "hi");
	char *la = loadavg();
	produce_async("run_flood", js);
	rd_kafka_flush(P, 10000);
	free(js);
	wait_first_line("run_flood", 10000);
	int64_t t0 = now_us();
	th_wait_stream_terminal(C, "runnel:{run_flood}:out", 600000);
	double secs = (now_us() - t0) / 1e6;
	redisReply *r = redisCommand(C, "XLEN runnel:{run_flood}:out");
	long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
	if (r)
		freeReplyObject(r);
	freeReplyObject(redisCommand(C, "DEL runnel:{run_flood}:out"));
	flood_lps = (double)n / secs;
	flood_ref = redis_benchmark_xadd(lines, 50);
	flood_ref1 = redis_benchmark_xadd(lines, 1);
	printf("(d) flood: %lld lines in %.2f s = %.0f lines/s; redis-benchmark -P 64 XADD: %.0f/s with 50 "
	       "clients (ratio %.2f), %.0f/s with 1 client (ratio %.2f) [load %s]\n",
	       n, secs, flood_lps, flood_ref, flood_ref > 0 ? flood_lps / flood_ref : 0, flood_ref1,
	       flood_ref1 > 0 ? flood_lps / flood_ref1 : 0, la);
	free(la);
}

/* One field of /proc/PID/smaps_rollup, in KB. */
static long rollup_kb(pid_t pid, const char *field)
{
	char *s = th_file_read(th_strf("/proc/%ld/smaps_rollup", (long)pid), NULL);
	char *key = th_strf("\n%s:", field);
	const char *p = s ? strstr(s, key) : NULL;
	long kb = p ? strtol(p + strlen(key), NULL, 10) : -1;
	free(s);
	return kb;
}

static void bench_rss(pid_t w)
{
	rss_idle = rss_kb(w);
	printf("    idle worker memory: Rss %ld KB = shared file pages (libraries) %ld + private clean %ld + "
	       "private dirty %ld + anon shared %ld KB; Pss %ld KB\n",
	       rollup_kb(w, "Rss"), rollup_kb(w, "Shared_Clean"),
	       rollup_kb(w, "Private_Clean"), rollup_kb(w, "Private_Dirty"), rollup_kb(w, "Shared_Dirty"),
	       rollup_kb(w, "Pss"));
	rss_idle_tree = tree_rss_kb(w);
	dev_stub_otps_t o;
	char ids[SLOTS][32];
	for (int i = 0; i < SLOTS; i++) {
		snprintf(ids[i], sizeof(ids[i]), "run_rss_%d", i);
		add_run("{\"kind\":\"mock\",\"script\":\"sleep 3\"}", &o);
		char *js = job_json(ids[i], &o, "hi");
		produce_async(ids[i], js);
		free(js);
	}
	rd_kafka_flush(P, 10000);
	for (int i = 0; i < SLOTS; i++)
		wait_first_line(ids[i], 10000);
	long busy = rss_kb(w);
	rss_per_run = (busy - rss_idle) / SLOTS;
	printf("RSS: worker idle %ld KB (with its idle warm sandboxes: %ld KB); with %d active runs %ld KB "
	       "= %ld KB per run (worker process only)\n",
	       rss_idle, rss_idle_tree, SLOTS, busy, rss_per_run);
	for (int i = 0; i < SLOTS; i++)
		th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", ids[i]), 20000);
}

static void verdict(const char *what, double v, double target, int at_most)
{
	int ok = at_most ? v <= target : v >= target;
	printf("  %-58s %10.2f  target %s %-8.2f %s\n", what, v, at_most ? "<=" : ">=", target,
	       ok ? "met" : "NOT met");
}

static const char *usage =
        "usage: bench_worker [--brokers HOSTS | --mock] [--runs N] [--latency N] [--flood N]\n"
        "                    [--warm N] [--worker PATH] [-X kafka.property=value]...\n"
        "Real broker: --brokers, else $RUNNEL_TEST_KAFKA_BROKERS, else the suite's broker.addr\n"
        "(" BROKER_ADDR_FILE "), else one started with tests/kafka/broker.sh.\n"
        "--mock: librdkafka's mock cluster.\n";

int main(int argc, char **argv)
{
	int lat_runs = 200, tp_runs = 1000;
	long flood = 1000000;
	const char *warm = NULL;
	const char *worker_bin = WORKER_BIN;
	char xprops[1024] = "";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--mock")) {
			use_mock = 1;
		} else if (!strcmp(a, "--brokers") && v) {
			snprintf(brokers, sizeof(brokers), "%s", v);
			i++;
		} else if (!strcmp(a, "--runs") && v) {
			tp_runs = (int)strtol(v, NULL, 10);
			i++;
		} else if (!strcmp(a, "--latency") && v) {
			lat_runs = (int)strtol(v, NULL, 10);
			i++;
		} else if (!strcmp(a, "--flood") && v) {
			flood = strtol(v, NULL, 10);
			i++;
		} else if (!strcmp(a, "--worker") && v) {
			worker_bin = v; /* another build of runnel-worker (before/after) */
			i++;
		} else if (!strcmp(a, "--warm") && v) {
			warm = v;
			i++;
		} else if (!strcmp(a, "-X") && v) {
			size_t l = strlen(xprops);
			snprintf(xprops + l, sizeof(xprops) - l, "%s%s", l ? ";" : "", v);
			i++;
		} else {
			fputs(usage, stderr);
			return 2;
		}
	}
	th_init("bench_worker");
	if (!use_mock && !brokers[0]) {
		const char *e = getenv("RUNNEL_TEST_KAFKA_BROKERS");
		char *f = e && *e ? NULL : th_file_read(BROKER_ADDR_FILE, NULL);
		snprintf(brokers, sizeof(brokers), "%s", e && *e ? e : f ? f
		                                                         : "");
		free(f);
		brokers[strcspn(brokers, "\r\n")] = '\0';
	}
	if (!use_mock && !brokers[0] && access(BROKER_SH, R_OK) == 0) {
		/* The suite's own broker, started here and stopped at the end. */
		broker_state = th_strf("%s/kafka", th_tmpdir());
		mkdir(broker_state, 0700);
		char *cmd = th_strf("RUNNEL_KAFKA_WATCH_PID=%ld bash %s start %s >%s/start.log 2>&1", (long)getpid(),
		                    BROKER_SH, broker_state, broker_state);
		char *f = system(cmd) == 0 ? th_file_read(th_strf("%s/broker.addr", broker_state), NULL) : NULL;
		snprintf(brokers, sizeof(brokers), "%s", f ? f : "");
		free(f);
		brokers[strcspn(brokers, "\r\n")] = '\0';
		if (!brokers[0])
			fprintf(stderr, "bench_worker: %s start failed (see %s/start.log)\n", BROKER_SH, broker_state);
	}
	if (!use_mock && !brokers[0]) {
		fprintf(stderr, "bench_worker: no Kafka broker: pass --brokers HOST:PORT, start the suite's broker "
		                "(tests/kafka/broker.sh), or use --mock\n%s",
		        usage);
		return 2;
	}

	char *la = loadavg();
	printf("bench_worker: kafka %s, sandbox bwrap, warm %s, worker %s -X \"%s\", load average %s\n",
	       use_mock ? "mock cluster" : brokers, warm ? warm : "default", worker_bin, xprops, la);
	free(la);
	workdir = th_tmpdir();
	if (th_redis_start(&R, NULL) < 0)
		return 1;
	C = th_redis_connect(&R);
	char err[256];
	S = dev_stub_start(NULL, err, sizeof(err));
	if (!S || !C)
		return 1;

	/* (a) first, with nothing else running. */
	if (tp_runs > 0)
		bench_floor(tp_runs, lat_runs);

	if (use_mock) {
		if (th_kafka_start(&K, 1) < 0)
			return 1;
		snprintf(brokers, sizeof(brokers), "%s", K.bootstrap);
	}
	snprintf(topic, sizeof(topic), "bench.jobs.%ld", (long)getpid());
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
	rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err));
	P = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!P || (use_mock ? th_kafka_create_topic(&K, topic, 8) : create_topic_real(topic)) < 0)
		return 1;

	/* (b) runs queued before the worker starts. */
	char(*ids)[32] = calloc((size_t)tp_runs + 1, sizeof(*ids));
	for (int i = 0; i < tp_runs; i++) {
		dev_stub_otps_t o;
		snprintf(ids[i], sizeof(ids[i]), "run_tp_%d", i);
		add_run(AGENT_JSON, &o);
		char *js = job_json(ids[i], &o, "hi");
		produce_async(ids[i], js);
		free(js);
	}
	rd_kafka_flush(P, 30000);

	const char *base_env[] = {
		th_strf("RUNNEL_KAFKA_BROKERS=%s", brokers),
		th_strf("RUNNEL_JOBS_TOPIC=%s", topic),
		th_strf("RUNNEL_GROUP=bench-%ld", (long)getpid()),
		th_strf("RUNNEL_REDIS_URL=%s", R.url),
		th_strf("RUNNEL_WORK_DIR=%s/work", workdir),
		"RUNNEL_METRICS_LISTEN=127.0.0.1:0",
		th_strf("RUNNEL_SLOTS=%d", SLOTS),
		"RUNNEL_SANDBOX=bwrap",
		th_strf("RUNNEL_KAFKA_PROPERTIES=%s%sauto.offset.reset=earliest", xprops, xprops[0] ? ";" : ""),
		getenv("BENCH_LOG_LEVEL") ? th_strf("RUNNEL_LOG_LEVEL=%s", getenv("BENCH_LOG_LEVEL")) : "RUNNEL_LOG_LEVEL=warn",
		warm ? th_strf("RUNNEL_WARM=%s", warm) : "X_UNUSED=1",
		NULL,
	};
	/* Any other RUNNEL_* setting of the bench's own environment reaches the
	 * worker too (RUNNEL_JOB_KEY: sealed queue entries instead of Kafka
	 * references; RUNNEL_CGROUP=off, RUNNEL_RUN_DISK_MB=0: what limits cost). */
	const char *env[128];
	size_t ne = 0;
	for (size_t i = 0; base_env[i]; i++)
		env[ne++] = base_env[i];
	for (char **e = environ; *e && ne < sizeof(env) / sizeof(env[0]) - 1; e++) {
		const char *eq = strchr(*e, '=');
		if (strncmp(*e, "RUNNEL_", 7) || !strncmp(*e, "RUNNEL_TEST_", 12) || !eq)
			continue;
		int set = 0;
		for (size_t i = 0; base_env[i]; i++)
			if (!strncmp(base_env[i], *e, (size_t)(eq - *e) + 1))
				set = 1;
		if (!set)
			env[ne++] = *e;
	}
	env[ne] = NULL;
	char *wargv[] = { (char *)worker_bin, NULL };
	la = loadavg();
	int64_t t0 = now_us();
	around_t a0 = around_now();
	machine_cpu_t m0 = machine_cpu();
	pid_t w = th_spawn(wargv, env, getenv("BENCH_WORKER_LOG") ? getenv("BENCH_WORKER_LOG") : th_strf("%s/worker.log", workdir));
	if (w < 0)
		return 1;
	int done = 0;
	for (int i = 0; i < tp_runs; i++)
		done += th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", ids[i]), 120000);
	double secs = (now_us() - t0) / 1e6;
	machine_cpu_t m1 = machine_cpu();
	around_t a1 = around_now();
	double kids = 0;
	double cpu = proc_cpu_ms2(w, &kids);
	rn_rps = done / secs;
	rn_cpu = done ? cpu / done : -1;
	printf("(b) runnel: %d of %d pre-queued runs, %d slots, in %.2f s from worker start = %.0f runs/s, "
	       "CPU %.2f ms per run (worker %.2f + bwrap and agent %.2f; the stub's side not counted) [load %s]\n",
	       done, tp_runs, SLOTS, secs, rn_rps, rn_cpu, done ? (cpu - kids) / done : -1, done ? kids / done : -1, la);
	print_machine(m0, m1, secs, done);
	print_around("the bench (the dev stub)", a0, a1, done);
	free(la);
	free(ids);
	sleep_ms(1500); /* the pool refills; the worker settles */
	{
		/* What the worker burns doing nothing (librdkafka's threads, timers). */
		double i0 = proc_cpu_ms(w);
		sleep_ms(3000);
		double idle_ms_s = (proc_cpu_ms(w) - i0) / 3.0;
		printf("    idle worker CPU: %.1f ms per second (%.2f ms per run at the rate above)\n", idle_ms_s,
		       rn_rps > 0 ? idle_ms_s / rn_rps : 0);
	}

	if (lat_runs > 0) {
		bench_rss(w);
		sleep_ms(1000);
		bench_latency(lat_runs);
		bench_kafka_alone(lat_runs);
	}
	if (flood > 0)
		bench_flood(flood);
	th_stop(w, 20000);

	la = loadavg();
	printf("\nsummary (targets of the issue) [load %s]\n", la);
	free(la);
	if (tp_runs > 0) {
		verdict("runs/s runnel / floor", floor_rps > 0 ? rn_rps / floor_rps : 0, 0.9, 0);
		verdict("CPU per run runnel / floor", floor_cpu > 0 ? rn_cpu / floor_cpu : 0, 1.2, 1);
	}
	if (lat_runs > 0) {
		verdict("first line p50 ms (runnel)", rn_p50, 5, 1);
		verdict("first line p99 ms (runnel)", rn_p99, 15, 1);
		printf("  %-58s %10.2f / %.2f ms\n", "first line p50 / p99 (floor)", floor_p50, floor_p99);
		printf("  %-58s %10.2f / %.2f ms\n", "Kafka alone p50 / p99 (part of runnel's)", kafka_p50, kafka_p99);
		verdict("idle worker RSS MB", rss_idle / 1024.0, 10, 1);
		verdict("RSS per active run KB (worker process)", (double)rss_per_run, 256, 1);
	}
	if (flood > 0) {
		verdict("flood / redis-benchmark -P 64 (50 clients)", flood_ref > 0 ? flood_lps / flood_ref : 0, 0.7, 0);
		verdict("flood / redis-benchmark -P 64 (1 client)", flood_ref1 > 0 ? flood_lps / flood_ref1 : 0, 0.7, 0);
	}
	fflush(stdout);
	rd_kafka_destroy(P);
	dev_stub_stop(S);
	redisFree(C);
	if (use_mock)
		th_kafka_stop(&K);
	if (broker_state && system(th_strf("bash %s stop %s >/dev/null 2>&1", BROKER_SH, broker_state)) != 0)
		fprintf(stderr, "bench_worker: stopping the broker failed\n");
	th_redis_stop(&R);
	return 0;
}
