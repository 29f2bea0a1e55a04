/*
 * bench/bench_dispatcher.c - the dispatcher under load, end to end through
 * the real binary: C concurrent /stream callers (default 1,000), each on its
 * own run printing L lines (default 100), written by a simulated worker
 * thread that XADDs each line with its send time inside; the callers (one
 * curl multi handle) time each line on arrival.  Prints line latency
 * p50/p99/max, the dispatcher's peak RSS and CPU, the most Redis
 * connections it held, and enqueue latency (HTTP request -> 202, which
 * waits for Kafka's delivery report) against the mock cluster.
 *
 * Usage: bench_dispatcher [callers [lines [ms between a run's lines]]]
 *
 * BENCH_REDIS=cluster runs the same against a Redis Cluster of 3
 * primaries and 3 replicas: the simulated worker adds the SPUBLISH
 * wake-up to each line as worker/publish.c does there, the tails read
 * each run when woken, and the Redis figures are summed over the nodes,
 * with the commands per run (INFO commandstats) in both modes.
 *
 * Figures, not assertions: goals are p99 line latency <= 20 ms and <= 4
 * Redis connections.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>

#include "common/rcluster.h"
#include "tests/support/harness.h"

typedef struct caller {
	CURL *easy;
	char *post;
	char partial[512];
	size_t plen;
	int lines;
	int done;
	long status;
} caller_t;

static int C_N = 1000, L_N = 100;
static caller_t *CALLERS;
static int64_t *LAT_US;  /* one slot per line */
static int64_t *SENT_US; /* its send time (for the timeline) */
static _Atomic size_t NLAT;
static const th_redis_t *RED;
static th_cluster_t CL; /* BENCH_REDIS=cluster */
static int CLUSTER;
static _Atomic int WRITER_DONE;
static int64_t WRITE_SPAN_MS;

static int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_line(caller_t *c, const char *line, size_t len)
{
	const char *p = memmem(line, len, "\"sent_us\":", 10);

	c->lines++;
	if (p) {
		int64_t sent = strtoll(p + 10, NULL, 10);
		size_t i = atomic_fetch_add(&NLAT, 1);

		if (i < (size_t)C_N * (size_t)L_N) {
			LAT_US[i] = mono_us() - sent;
			SENT_US[i] = sent;
		}
	}
}

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	caller_t *c = arg;
	size_t len = size * n;

	for (size_t i = 0; i < len; i++) {
		if (data[i] == '\n') {
			on_line(c, c->partial, c->plen);
			c->plen = 0;
		} else if (c->plen < sizeof(c->partial) - 1) {
			c->partial[c->plen++] = data[i];
		}
	}
	return len;
}

/* curl multi driven by epoll (curl's multi_socket API): each wake-up
 * costs O(ready sockets), not O(callers), so the bench's own receive
 * loop does not dominate the latency it measures. */
static int EPFD = -1;
static long TIMER_MS = -1;

static int sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	CURLM *multi = userp;
	struct epoll_event ev = { 0 };

	(void)e;
	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(EPFD, EPOLL_CTL_DEL, s, NULL);
		curl_multi_assign(multi, s, NULL);
		return 0;
	}
	ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
	ev.data.fd = s;
	if (!socketp) {
		epoll_ctl(EPFD, EPOLL_CTL_ADD, s, &ev);
		curl_multi_assign(multi, s, (void *)1);
	} else {
		epoll_ctl(EPFD, EPOLL_CTL_MOD, s, &ev);
	}
	return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	(void)multi;
	(void)userp;
	TIMER_MS = timeout_ms;
	return 0;
}

/* One round of waiting (at most max_ms) and serving ready sockets. */
static void pump(CURLM *multi, int max_ms)
{
	struct epoll_event evs[256];
	int running = 0, n;
	int wait = TIMER_MS >= 0 && TIMER_MS < max_ms ? (int)TIMER_MS : max_ms;

	n = epoll_wait(EPFD, evs, 256, wait);
	if (n <= 0) {
		TIMER_MS = -1;
		curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
		return;
	}
	for (int i = 0; i < n; i++) {
		int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
		        (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
		        (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);

		curl_multi_socket_action(multi, evs[i].data.fd, flags, &running);
	}
	if (TIMER_MS == 0) {
		TIMER_MS = -1;
		curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return 0;
	i = (size_t)(p * (double)(n - 1));
	return v[i];
}

/* VmHWM / VmRSS in kB. */
static long proc_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	FILE *f;
	long v = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, strlen(field)) == 0)
			v = strtol(line + strlen(field) + 1, NULL, 10);
	fclose(f);
	return v;
}

static double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	FILE *f;
	unsigned long ut = 0, st = 0;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double redis_cpu_s(redisContext *c)
{
	redisReply *r = redisCommand(c, "INFO cpu");
	double s = 0, u = 0;
	const char *p;

	if (r && r->type == REDIS_REPLY_STRING) {
		if ((p = strstr(r->str, "used_cpu_sys:")))
			s = strtod(p + 13, NULL);
		if ((p = strstr(r->str, "used_cpu_user:")))
			u = strtod(p + 14, NULL);
	}
	if (r)
		freeReplyObject(r);
	return s + u;
}

/* usec_per_call of a command from INFO commandstats, or -1. */
static double redis_usec_per_call(redisContext *c, const char *cmd, long *calls)
{
	redisReply *r = redisCommand(c, "INFO commandstats");
	double v = -1;
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), "cmdstat_%s:calls=", cmd);
	if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, key))) {
		*calls = strtol(p + strlen(key), NULL, 10);
		p = strstr(p, "usec_per_call=");
		if (p)
			v = strtod(p + 14, NULL);
	}
	if (r)
		freeReplyObject(r);
	return v;
}

/* Every node's connection (the one server's when standalone). */
static redisContext *node_conn(int i)
{
	return th_redis_connect(CLUSTER ? &CL.node[i] : RED);
}

static int nnodes(void)
{
	return CLUSTER ? CL.n : 1;
}

static double redis_cpu_all(void)
{
	double v = 0;

	for (int i = 0; i < nnodes(); i++) {
		redisContext *c = node_conn(i);

		if (c) {
			v += redis_cpu_s(c);
			redisFree(c);
		}
	}
	return v;
}

static int redis_clients_all(const char *needle)
{
	int v = 0;

	for (int i = 0; i < nnodes(); i++) {
		redisContext *c = node_conn(i);

		if (c) {
			int n = th_redis_clients(c, needle);

			v += n > 0 ? n : 0;
			redisFree(c);
		}
	}
	return v;
}

/* Calls per command, summed over the nodes (INFO commandstats). */
#define NCMDS 12
static const char *const CMDS[NCMDS] = { "xread", "xadd", "spublish", "ssubscribe",
	                                 "sunsubscribe", "eval", "evalsha", "hgetall",
	                                 "zadd", "cluster|slots", "ping", "client|unblock" };

static void redis_calls_all(long calls[NCMDS])
{
	memset(calls, 0, NCMDS * sizeof(calls[0]));
	for (int i = 0; i < nnodes(); i++) {
		redisContext *c = node_conn(i);
		redisReply *r = c ? redisCommand(c, "INFO commandstats") : NULL;

		for (int k = 0; r && r->type == REDIS_REPLY_STRING && k < NCMDS; k++) {
			const char *p = strstr(r->str, th_strf("cmdstat_%s:calls=", CMDS[k]));

			if (p)
				calls[k] += strtol(p + strlen(CMDS[k]) + 15, NULL, 10);
		}
		if (r)
			freeReplyObject(r);
		if (c)
			redisFree(c);
	}
}

static double self_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	        ru.ru_stime.tv_usec / 1e6;
}

/* The simulated workers: every run gets line l before any gets l+1; a
 * round (one line for every run) is spread over round_ms. */
/* One round's batch on a cluster: XADD + SPUBLISH per run, pipelined
 * per node by common/rcluster.  0 or -1. */
static int write_batch_cluster(rn_rcluster_t *h, int l, int b, int end)
{
	for (int i = b; i < end; i++) {
		char line[256], key[48], chan[48];

		if (l == L_N)
			snprintf(line, sizeof(line), "{\"type\":\"result\",\"message\":\"done\",\"sent_us\":%" PRId64 ",\"ts\":1}",
			         mono_us());
		else
			snprintf(line, sizeof(line), "{\"type\":\"log\",\"level\":\"info\","
			                             "\"message\":\"line %d of a benchmark run\",\"sent_us\":%" PRId64 ",\"ts\":1}",
			         l, mono_us());
		snprintf(key, sizeof(key), "runnel:{bench_%04d}:out", i);
		snprintf(chan, sizeof(chan), "runnel:{bench_%04d}:wake", i);
		const char *xa[] = { "XADD", key, "*", "line", line };
		const char *sp[] = { "SPUBLISH", chan, "1" };

		if (rn_rcluster_append_argv(h, 0, 5, xa, NULL) < 0 || rn_rcluster_append_argv(h, 0, 3, sp, NULL) < 0)
			return -1;
	}
	for (int i = b; i < end; i++)
		for (int k = 0; k < 2; k++) {
			redisReply *r = NULL;

			if (rn_rcluster_get_reply(h, &r) < 0)
				return -1;
			freeReplyObject(r);
		}
	return 0;
}

static void *writer(void *arg)
{
	redisContext *c = CLUSTER ? NULL : th_redis_connect(RED);
	rn_rcluster_t *h = CLUSTER ? th_rcluster_open(CL.url) : NULL;
	int round_ms = *(int *)arg;
	const int batch = 50;
	int64_t t0 = mono_us();

	for (int l = 1; l <= L_N && (c || h); l++) {
		int64_t round_start = mono_us();

		for (int b = 0; b < C_N; b += batch) {
			int end = b + batch < C_N ? b + batch : C_N;
			int64_t due = round_start + (int64_t)round_ms * 1000 * b / C_N;
			int64_t now = mono_us();

			if (due > now)
				usleep((useconds_t)(due - now));
			if (h) {
				if (write_batch_cluster(h, l, b, end) < 0)
					fprintf(stderr, "writer: %s\n", rn_rcluster_errstr(h));
				continue;
			}
			for (int i = b; i < end; i++) {
				char line[256];

				if (l == L_N)
					snprintf(line, sizeof(line), "{\"type\":\"result\",\"message\":\"done\","
					                             "\"sent_us\":%" PRId64 ",\"ts\":1}",
					         mono_us());
				else
					snprintf(line, sizeof(line), "{\"type\":\"log\",\"level\":\"info\","
					                             "\"message\":\"line %d of a benchmark run\",\"sent_us\":%" PRId64 ",\"ts\":1}",
					         l, mono_us());
				redisAppendCommand(c, "XADD runnel:{bench_%04d}:out * line %s", i, line);
			}
			for (int i = b; i < end; i++) {
				redisReply *r = NULL;

				if (redisGetReply(c, (void **)&r) != REDIS_OK)
					break;
				freeReplyObject(r);
			}
		}
		{
			int64_t next = round_start + (int64_t)round_ms * 1000, now = mono_us();

			if (l < L_N && next > now)
				usleep((useconds_t)(next - now));
		}
	}
	WRITE_SPAN_MS = (mono_us() - t0) / 1000;
	if (c)
		redisFree(c);
	if (h)
		rn_rcluster_free(h);
	atomic_store(&WRITER_DONE, 1);
	return NULL;
}

static void bench_enqueue(const char *base, int n)
{
	CURL *e = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	int64_t *lat = calloc((size_t)n, sizeof(*lat));
	char url[128];
	size_t ok = 0;
	FILE *devnull = fopen("/dev/null", "w");

	snprintf(url, sizeof(url), "%s/v1/runs", base);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, devnull);
	for (int i = 0; i < n; i++) {
		char body[256];
		long status = 0;
		int64_t t0;

		snprintf(body, sizeof(body), "{\"agent_url\":\"http://127.0.0.1:9/ws\",\"otp_setup\":\"a\","
		                             "\"otp_run\":\"b\",\"prompt\":\"p\",\"run_id\":\"enq_%06d\"}",
		         i);
		curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
		t0 = mono_us();
		if (curl_easy_perform(e) == CURLE_OK) {
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
			if (status == 202)
				lat[ok++] = mono_us() - t0;
		}
	}
	qsort(lat, ok, sizeof(*lat), cmp64);
	printf("enqueue (POST /v1/runs -> 202 after the delivery report, sequential, keep-alive): %zu/%d ok\n", ok, n);
	printf("  p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", pct(lat, ok, 0.5) / 1000.0,
	       pct(lat, ok, 0.99) / 1000.0, ok ? lat[ok - 1] / 1000.0 : 0.0);
	free(lat);
	fclose(devnull);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
}

int main(int argc, char **argv)
{
	th_redis_t red;
	th_kafka_t k;
	char port_env[64];
	const char *env[8];
	/* BENCH_DISPATCHER_BIN runs another binary or a wrapper (perf record). */
	char *dargv[] = { getenv("BENCH_DISPATCHER_BIN") ? getenv("BENCH_DISPATCHER_BIN") : DISPATCHER_BIN, NULL };
	char base[64];
	pid_t pid;
	CURLM *multi;
	struct curl_slist *hdrs;
	redisContext *rc;
	pthread_t wt;
	int round_ms = 100, started = 0, done = 0, max_conns = 0;
	long peak_rss = 0;
	int64_t t0;
	struct rlimit rl;
	double cpu0, rcpu0, scpu0;
	long calls0[NCMDS], calls1[NCMDS];

	if (argc > 1)
		C_N = strtol(argv[1], NULL, 10) > 0 ? (int)strtol(argv[1], NULL, 10) : C_N;
	if (argc > 2)
		L_N = strtol(argv[2], NULL, 10) > 1 ? (int)strtol(argv[2], NULL, 10) : L_N;
	if (argc > 3)
		round_ms = strtol(argv[3], NULL, 10) > 0 ? (int)strtol(argv[3], NULL, 10) : round_ms;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	th_init("bench_dispatcher");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CLUSTER = getenv("BENCH_REDIS") && strcmp(getenv("BENCH_REDIS"), "cluster") == 0;
	if (CLUSTER) {
		if (th_cluster_start(&CL, 3, 1, NULL) != 0)
			return 1;
		red = CL.node[0];
	} else if (th_redis_start(&red, NULL) != 0) {
		return 1;
	}
	if (th_kafka_start(&k, 1) != 0)
		return 1;
	RED = &red;
	th_kafka_create_topic(&k, "runnel.jobs", 4);
	{
		int port = th_free_port();

		snprintf(port_env, sizeof(port_env), "RUNNEL_LISTEN=127.0.0.1:%d", port);
		snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
	}
	env[0] = port_env;
	env[1] = th_strf("RUNNEL_REDIS_URL=%s", red.url);
	env[2] = th_strf("RUNNEL_KAFKA_BROKERS=%s", k.bootstrap);
	env[3] = "RUNNEL_LOG_LEVEL=warn";
	/* BENCH_TAIL_CONNECTIONS=N tries another pool size (default 2). */
	env[4] = getenv("BENCH_TAIL_CONNECTIONS") ? th_strf("RUNNEL_TAIL_CONNECTIONS=%s", getenv("BENCH_TAIL_CONNECTIONS")) : NULL;
	env[5] = NULL;
	pid = th_spawn(dargv, env, th_strf("%s/dispatcher.log", th_tmpdir()));
	rc = th_redis_connect(&red);
	for (int i = 0; i < 100; i++) {
		CURL *e = curl_easy_init();
		long st = 0;

		curl_easy_setopt(e, CURLOPT_URL, th_strf("%s/healthz", base));
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, &(caller_t){ 0 });
		if (curl_easy_perform(e) == CURLE_OK)
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
		curl_easy_cleanup(e);
		if (st == 200)
			break;
		usleep(50000);
	}
	printf("runnel-dispatcher benchmark on %s: %d concurrent /stream callers x %d lines (%d lines), one line per run "
	       "every %d ms\n",
	       CLUSTER ? "a Redis Cluster (3 primaries, 3 replicas)" : "a standalone Redis", C_N, L_N, C_N * L_N,
	       round_ms);
	{
		double la[3] = { 0, 0, 0 };

		if (getloadavg(la, 3) == 3)
			printf("host: %ld CPUs, load average %.2f (shared with redis-server, the dispatcher and this bench)\n",
			       sysconf(_SC_NPROCESSORS_ONLN), la[0]);
	}
	printf("idle dispatcher RSS: %ld kB\n", proc_kb(pid, "VmRSS:"));
	bench_enqueue(base, 1000);

	CALLERS = calloc((size_t)C_N, sizeof(*CALLERS));
	LAT_US = calloc((size_t)C_N * (size_t)L_N, sizeof(*LAT_US));
	SENT_US = calloc((size_t)C_N * (size_t)L_N, sizeof(*SENT_US));
	multi = curl_multi_init();
	EPFD = epoll_create1(EPOLL_CLOEXEC);
	curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
	curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, multi);
	curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	t0 = mono_us();
	for (int i = 0; i < C_N; i++) {
		caller_t *c = &CALLERS[i];

		c->easy = curl_easy_init();
		c->post = th_strf("{\"agent_url\":\"http://127.0.0.1:9/ws\",\"otp_setup\":\"a\",\"otp_run\":\"b\","
		                  "\"prompt\":\"p\",\"run_id\":\"bench_%04d\"}",
		                  i);
		curl_easy_setopt(c->easy, CURLOPT_URL, th_strf("%s/stream", base));
		curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->post);
		curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
		curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
		curl_multi_add_handle(multi, c->easy);
	}
	cpu0 = proc_cpu_s(pid);
	{
		int running;

		curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
	while (started < C_N && mono_us() - t0 < 60000000) {
		pump(multi, 10);
		started = 0;
		for (int i = 0; i < C_N; i++) {
			if (CALLERS[i].status == 0)
				curl_easy_getinfo(CALLERS[i].easy, CURLINFO_RESPONSE_CODE, &CALLERS[i].status);
			started += CALLERS[i].status == 200;
		}
	}
	printf("%d/%d streams answered 200 (enqueued on Kafka, tail attached) in %.2f s\n", started, C_N,
	       (mono_us() - t0) / 1e6);
	rcpu0 = redis_cpu_all();
	redis_calls_all(calls0);
	scpu0 = self_cpu_s();
	pthread_create(&wt, NULL, writer, &round_ms);
	t0 = mono_us();
	while (done < C_N && mono_us() - t0 < 120000000) {
		int left;
		CURLMsg *msg;
		static int64_t last_sample;

		pump(multi, 5);
		while ((msg = curl_multi_info_read(multi, &left)))
			if (msg->msg == CURLMSG_DONE) {
				caller_t *c = NULL;

				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
				c->done = 1;
				done++;
			}
		if (mono_us() - last_sample > 200000) {
			long rss = proc_kb(pid, "VmRSS:");
			int n = redis_clients_all("name=runnel-dispatcher");

			last_sample = mono_us();
			peak_rss = rss > peak_rss ? rss : peak_rss;
			max_conns = n > max_conns ? n : max_conns;
		}
	}
	pthread_join(wt, NULL);
	{
		size_t n = atomic_load(&NLAT), complete = 0;
		double cpu = proc_cpu_s(pid) - cpu0;

		if (n > (size_t)C_N * (size_t)L_N)
			n = (size_t)C_N * (size_t)L_N;
		for (int i = 0; i < C_N; i++)
			complete += CALLERS[i].lines == L_N;
		if (getenv("BENCH_TIMELINE") && n > 0) {
			/* Worst latency per second of sending: steady or spiky? */
			int64_t first = SENT_US[0], worst[600] = { 0 };
			size_t cnt[600] = { 0 };

			for (size_t i = 0; i < n; i++)
				first = SENT_US[i] < first ? SENT_US[i] : first;
			for (size_t i = 0; i < n; i++) {
				size_t s = (size_t)((SENT_US[i] - first) / 1000000);

				if (s < 600) {
					worst[s] = LAT_US[i] > worst[s] ? LAT_US[i] : worst[s];
					cnt[s]++;
				}
			}
			for (size_t s = 0; s < 600; s++)
				if (cnt[s] > 0)
					printf("  second %3zu: %6zu lines, worst %.1f ms\n", s, cnt[s], worst[s] / 1000.0);
		}
		qsort(LAT_US, n, sizeof(*LAT_US), cmp64);
		printf("lines: %zu received of %d written over %.1f s; %zu/%d callers got all %d lines and the end\n",
		       n, C_N * L_N, WRITE_SPAN_MS / 1000.0, complete, C_N, L_N);
		printf("line latency XADD -> caller: p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms  max %.2f ms  (goal p99 <= 20 ms)\n",
		       pct(LAT_US, n, 0.5) / 1000.0, pct(LAT_US, n, 0.99) / 1000.0, pct(LAT_US, n, 0.999) / 1000.0,
		       n ? LAT_US[n - 1] / 1000.0 : 0.0);
		printf("dispatcher: peak RSS %ld kB (%.1f kB per caller), VmHWM %ld kB, CPU %.2f s for the stream phase\n",
		       peak_rss, (double)peak_rss / C_N, proc_kb(pid, "VmHWM:"), cpu);
		if (CLUSTER)
			printf("Redis connections held by the dispatcher: max %d over the nodes (per primary: requests, tail "
			       "reads, wake-ups, sweep)\n",
			       max_conns);
		else
			printf("Redis connections held by the dispatcher: max %d (goal <= 4; 2 + RUNNEL_TAIL_CONNECTIONS)\n",
			       max_conns);
		printf("CPU in the stream phase: redis-server%s %.2f s, this bench (callers + writer) %.2f s\n",
		       CLUSTER ? "s (all 6)" : "", redis_cpu_all() - rcpu0, self_cpu_s() - scpu0);
		redis_calls_all(calls1);
		printf("Redis commands per run in the stream phase (all nodes; the writer's XADD/SPUBLISH included):");
		for (int i = 0; i < NCMDS; i++)
			if (calls1[i] > calls0[i])
				printf(" %s %.1f", CMDS[i], (double)(calls1[i] - calls0[i]) / C_N);
		printf("\n");
		{
			long xr = 0, xa = 0;
			double ux = redis_usec_per_call(rc, "xread", &xr), ua = redis_usec_per_call(rc, "xadd", &xa);

			printf("redis%s: XREAD %ld calls, %.1f us per call; XADD %ld calls, %.1f us per call\n", CLUSTER ? " (node 0)" : "", xr, ux, xa, ua);
		}
	}
	{
		/* How well the tail pool batches: entries per XREAD. */
		CURL *e = curl_easy_init();
		caller_t sink = { 0 };
		FILE *mf = tmpfile();
		char line[512];
		double reads = 0, entries = 0, unblocks = 0, wakeups = 0;

		curl_easy_setopt(e, CURLOPT_URL, th_strf("%s/metrics", base));
		curl_easy_setopt(e, CURLOPT_WRITEDATA, mf);
		curl_easy_perform(e);
		curl_easy_cleanup(e);
		rewind(mf);
		while (fgets(line, sizeof(line), mf)) {
			if (strncmp(line, "runnel_dispatcher_tail_reads_total ", 35) == 0)
				reads = strtod(line + 35, NULL);
			else if (strncmp(line, "runnel_dispatcher_tail_entries_total ", 37) == 0)
				entries = strtod(line + 37, NULL);
			else if (strncmp(line, "runnel_dispatcher_tail_unblocks_total ", 38) == 0)
				unblocks = strtod(line + 38, NULL);
			else if (strncmp(line, "runnel_dispatcher_tail_wakeups_total ", 37) == 0)
				wakeups = strtod(line + 37, NULL);
		}
		fclose(mf);
		(void)sink;
		printf("tail pool: %.0f XREADs for %.0f entries (%.1f entries per read), %.0f unblocks, %.0f wake-ups\n",
		       reads, entries, reads > 0 ? entries / reads : 0, unblocks, wakeups);
	}
	for (int i = 0; i < C_N; i++) {
		curl_multi_remove_handle(multi, CALLERS[i].easy);
		curl_easy_cleanup(CALLERS[i].easy);
	}
	curl_multi_cleanup(multi);
	curl_slist_free_all(hdrs);
	th_stop(pid, 10000);
	redisFree(rc);
	th_kafka_stop(&k);
	return 0;
}
