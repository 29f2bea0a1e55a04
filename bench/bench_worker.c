/*
 * bench/bench_worker.c - runnel-worker's figures: enqueue -> first line
 * latency for trivial bwrap runs one at a time (p50/p99), trivial runs per
 * second with 8 slots, one run flooding small lines (lines/s, and the ratio
 * to redis-benchmark's pipelined XADD on the same server), idle RSS and
 * RSS per active run.  Prints figures; asserts nothing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "common/util.h"
#include "dev/stub.h"
#include "tests/support/harness.h"

static th_redis_t R;
static th_kafka_t K;
static dev_stub_t *S;
static redisContext *C;
static rd_kafka_t *P;           /* fire-and-forget producer for the bursts */
static const char *TOPIC = "bench.jobs";

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

static void produce_async(const char *run_id, const char *json)
{
	while (rd_kafka_producev(P, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_KEY(run_id, strlen(run_id)),
	                         RD_KAFKA_V_VALUE((void *)json, strlen(json)),
	                         RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) ==
	       RD_KAFKA_RESP_ERR__QUEUE_FULL)
		rd_kafka_poll(P, 10);
	rd_kafka_poll(P, 0);
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

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
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

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Latency, enqueue -> first line readable, one run at a time. */
static void bench_latency(int runs)
{
	int64_t *lat = calloc((size_t)runs, sizeof(*lat));
	int got = 0;
	for (int i = 0; i < runs; i++) {
		dev_stub_otps_t o;
		char id[64];
		snprintf(id, sizeof(id), "run_lat_%d", i);
		add_run("{\"kind\":\"mock\",\"script\":\"echo\"}", &o);
		char *js = job_json(id, &o, "hi");
		int64_t t0 = now_us();
		produce_async(id, js);
		rd_kafka_flush(P, 5000);
		int64_t t1 = now_us();
		if (wait_first_line(id, 10000))
			lat[got++] = now_us() - t0;
		if (getenv("BENCH_VERBOSE") && *getenv("BENCH_VERBOSE"))
			printf("  run %d: produce %.1f ms, then first line %.1f ms (wall at produce %lld)\n", i, (t1 - t0) / 1000.0,
			       (now_us() - t1) / 1000.0, (long long)rn_now_ms() - (now_us() - t0) / 1000);
		free(js);
		/* Let the run finish before the next one (one at a time). */
		th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", id), 10000);
	}
	qsort(lat, (size_t)got, sizeof(*lat), cmp_i64);
	if (got)
		printf("latency enqueue->first line (mock echo, %d runs one at a time): "
		       "p50 %.1f ms  p99 %.1f ms  max %.1f ms\n", got,
		       lat[got / 2] / 1000.0, lat[(got * 99) / 100 < got ? (got * 99) / 100 : got - 1] / 1000.0,
		       lat[got - 1] / 1000.0);
	free(lat);
}

/* Runs per second with all slots busy. */
static void bench_throughput(int runs)
{
	char (*ids)[32] = calloc((size_t)runs, sizeof(*ids));
	char **js = calloc((size_t)runs, sizeof(*js));
	for (int i = 0; i < runs; i++) {
		dev_stub_otps_t o;
		snprintf(ids[i], sizeof(ids[i]), "run_tp_%d", i);
		add_run("{\"kind\":\"mock\",\"script\":\"echo\"}", &o);
		js[i] = job_json(ids[i], &o, "hi");
	}
	int64_t t0 = now_us();
	for (int i = 0; i < runs; i++)
		produce_async(ids[i], js[i]);
	rd_kafka_flush(P, 10000);
	int done = 0;
	for (int i = 0; i < runs; i++)
		done += th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", ids[i]), 60000);
	double secs = (now_us() - t0) / 1e6;
	printf("throughput (mock echo, 8 slots): %d of %d runs in %.2f s = %.0f runs/s\n",
	       done, runs, secs, done / secs);
	for (int i = 0; i < runs; i++)
		free(js[i]);
	free(js);
	free(ids);
}

static double redis_benchmark_xadd(long n, int clients)
{
	char *cmd = th_strf("redis-benchmark -h 127.0.0.1 -p %d -c %d -P 64 -n %ld -q XADD bench:xadd '*' line "
	                    "'{\"type\":\"log\",\"level\":\"debug\",\"message\":\"line 123456\",\"ts\":1700000000000}' 2>/dev/null",
	                    R.port, clients, n);
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
	double lps = (double)n / secs;
	double ref = redis_benchmark_xadd(lines, 50);
	double ref1 = redis_benchmark_xadd(lines, 1);
	printf("flood: %lld lines in %.2f s = %.0f lines/s; redis-benchmark -P 64 XADD: %.0f/s with 50 clients "
	       "(ratio %.2f), %.0f/s with 1 client (ratio %.2f)\n",
	       n, secs, lps, ref, ref > 0 ? lps / ref : 0, ref1, ref1 > 0 ? lps / ref1 : 0);
}

static void bench_rss(pid_t w)
{
	long idle = rss_kb(w);
	dev_stub_otps_t o;
	char ids[8][32];
	for (int i = 0; i < 8; i++) {
		snprintf(ids[i], sizeof(ids[i]), "run_rss_%d", i);
		add_run("{\"kind\":\"mock\",\"script\":\"sleep 3\"}", &o);
		char *js = job_json(ids[i], &o, "hi");
		produce_async(ids[i], js);
		free(js);
	}
	rd_kafka_flush(P, 10000);
	for (int i = 0; i < 8; i++)
		wait_first_line(ids[i], 10000);
	long busy = rss_kb(w);
	printf("RSS: idle %ld KB; with 8 active runs %ld KB = %.0f KB per run (worker process only)\n",
	       idle, busy, (busy - idle) / 8.0);
	for (int i = 0; i < 8; i++)
		th_wait_stream_terminal(C, th_strf("runnel:{%s}:out", ids[i]), 20000);
}

int main(int argc, char **argv)
{
	int lat_runs = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 200;
	int tp_runs = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 1000;
	long flood = argc > 3 ? strtol(argv[3], NULL, 10) : 1000000;

	th_init("bench_worker");
	char *la = th_file_read("/proc/loadavg", NULL);
	printf("bench_worker: sandbox %s, kafka properties \"%s\", load average %s",
	       getenv("BENCH_SANDBOX") ? getenv("BENCH_SANDBOX") : "bwrap",
	       getenv("BENCH_KAFKA_PROPERTIES") ? getenv("BENCH_KAFKA_PROPERTIES") : "",
	       la ? la : "?\n");
	free(la);
	const char *dir = th_tmpdir();
	if (th_redis_start(&R, NULL) < 0 || th_kafka_start(&K, 1) < 0 ||
	    th_kafka_create_topic(&K, TOPIC, 8) < 0)
		return 1;
	C = th_redis_connect(&R);
	char err[256];
	S = dev_stub_start(NULL, err, sizeof(err));
	if (!S || !C)
		return 1;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", K.bootstrap, err, sizeof(err));
	rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err));
	P = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));

	const char *env[] = {
		th_strf("RUNNEL_KAFKA_BROKERS=%s", K.bootstrap),
		th_strf("RUNNEL_JOBS_TOPIC=%s", TOPIC),
		"RUNNEL_GROUP=bench",
		th_strf("RUNNEL_REDIS_URL=%s", R.url),
		th_strf("RUNNEL_WORK_DIR=%s/work", dir),
		"RUNNEL_METRICS_LISTEN=127.0.0.1:0",
		"RUNNEL_SLOTS=8",
		getenv("BENCH_SANDBOX") ? th_strf("RUNNEL_SANDBOX=%s", getenv("BENCH_SANDBOX")) : "RUNNEL_SANDBOX=bwrap",
		getenv("BENCH_KAFKA_PROPERTIES") ? th_strf("RUNNEL_KAFKA_PROPERTIES=%s", getenv("BENCH_KAFKA_PROPERTIES")) : "X_UNUSED=1",
		getenv("BENCH_LOG_LEVEL") ? th_strf("RUNNEL_LOG_LEVEL=%s", getenv("BENCH_LOG_LEVEL")) : "RUNNEL_LOG_LEVEL=warn",
		NULL,
	};
	char *wargv[] = { WORKER_BIN, NULL };
	pid_t w = th_spawn(wargv, env, getenv("BENCH_WORKER_LOG") ? getenv("BENCH_WORKER_LOG") : th_strf("%s/worker.log", dir));
	if (w < 0)
		return 1;
	/* Warm up (group join). */
	dev_stub_otps_t o;
	add_run("{\"kind\":\"mock\",\"script\":\"echo\"}", &o);
	char *js = job_json("run_warm", &o, "hi");
	produce_async("run_warm", js);
	rd_kafka_flush(P, 10000);
	free(js);
	if (!th_wait_stream_terminal(C, "runnel:{run_warm}:out", 30000))
		return 1;
	sleep_ms(1500);
	if (lat_runs > 0) {
		bench_rss(w);
		sleep_ms(500);
		printf("RSS idle after runs: %ld KB\n", rss_kb(w));
		bench_latency(lat_runs);
	}
	if (tp_runs > 0)
		bench_throughput(tp_runs);
	printf("worker pid %ld\n", (long)w);
	fflush(stdout);
	if (flood > 0)
		bench_flood(flood);
	th_stop(w, 20000);
	rd_kafka_destroy(P);
	dev_stub_stop(S);
	redisFree(C);
	th_kafka_stop(&K);
	th_redis_stop(&R);
	return 0;
}
