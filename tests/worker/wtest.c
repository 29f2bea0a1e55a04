/*
 * tests/worker/wtest.c - the worker tests' fixture (see wtest.h).
 */
#include "tests/worker/wtest.h"

#include <curl/curl.h>
#include <dirent.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "tests/support/body.h"

void wt_setup(wt_t *t, const char *redis_extra, int partitions)
{
	memset(t, 0, sizeof(*t));
	t->dir = th_tmpdir();
	TH_REQUIRE(t->dir, "tmpdir");
	const char *mode = getenv("RUNNEL_TEST_REDIS");
	if (mode && strcmp(mode, "cluster") == 0) {
		static th_cluster_t cl;
		TH_REQUIRE(th_cluster_start(&cl, 3, 1, redis_extra) == 0, "redis cluster");
		t->cluster = &cl;
		t->redis = cl.node[0];
		t->rcl = th_rcluster_open(cl.url);
		TH_REQUIRE(t->rcl && rn_rcluster_is_cluster(t->rcl), "cluster handle");
	} else {
		TH_REQUIRE(th_redis_start(&t->redis, redis_extra) == 0, "redis");
	}
	t->rc = th_redis_connect(&t->redis);
	TH_REQUIRE(t->rc, "redis connect");
	TH_REQUIRE(th_kafka_start(&t->kafka, 1) == 0, "kafka");
	snprintf(t->topic, sizeof(t->topic), "wt.jobs.%ld", (long)getpid());
	snprintf(t->group, sizeof(t->group), "wt-workers-%ld", (long)getpid());
	TH_REQUIRE(th_kafka_create_topic(&t->kafka, t->topic, partitions) == 0, "topic");
	char dlq[80];
	snprintf(dlq, sizeof(dlq), "%s.dlq", t->topic);
	TH_REQUIRE(th_kafka_create_topic(&t->kafka, dlq, 1) == 0, "dlq topic");
	char err[256];
	t->stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(t->stub, "stub: %s", err);
}

pid_t wt_start(wt_t *t, const char *test_name, int partitions, const char *name,
               const char *const *extra_env)
{
	th_init(test_name);
	wt_setup(t, NULL, partitions);
	pid_t pid = wt_worker(t, name, extra_env);
	wt_warmup(t);
	return pid;
}

void wt_stop_worker(pid_t pid, int timeout_ms, const char *what)
{
	int s = th_stop(pid, timeout_ms);
	TH_CHECK(s >= 0 && WIFEXITED(s) && WEXITSTATUS(s) == 0, "%s exit status %d", what, s);
}

void wt_redis_restart(wt_t *t, const char *what)
{
	TH_REQUIRE(!t->cluster, "%s: a restart of the one server is not a cluster case", what);
	redisFree(t->rc);
	t->rc = NULL;
	TH_REQUIRE(th_redis_restart(&t->redis) == 0, "%s", what);
	t->rc = th_redis_connect(&t->redis);
	TH_REQUIRE(t->rc, "redis connect after: %s", what);
}

void wt_teardown(wt_t *t)
{
	if (t->rc)
		redisFree(t->rc);
	dev_stub_stop(t->stub);
	th_kafka_stop(&t->kafka);
	if (t->cluster) {
		rn_rcluster_free(t->rcl);
		t->rcl = NULL;
		for (int i = 0; i < t->cluster->n; i++)
			th_redis_stop(&t->cluster->node[i]);
	} else {
		th_redis_stop(&t->redis);
	}
}

redisContext *wt_rc_key(wt_t *t, const char *key)
{
	if (!t->rcl)
		return t->rc;
	char err[256];
	/* A failover or a stale map: the handle reads the map again. */
	for (int tries = 0; tries < 50; tries++) {
		redisContext *c =
		        rn_rcluster_slot_context(t->rcl, rn_rcluster_key_slot(key, strlen(key)), err, sizeof(err));
		if (c && !c->err)
			return c;
		rn_rcluster_reset_slot(t->rcl, rn_rcluster_key_slot(key, strlen(key)));
		struct timeval tv = { 0, 100000 };
		select(0, NULL, NULL, NULL, &tv);
	}
	TH_REQUIRE(0, "no node for %s: %s", key, err);
	return NULL;
}

const char *wt_log_path(wt_t *t, const char *name)
{
	return th_strf("%s/%s.log", t->dir, name);
}

pid_t wt_worker(wt_t *t, const char *name, const char *const *extra_env)
{
	return wt_worker_bin(t, WORKER_BIN, name, extra_env);
}

pid_t wt_worker_bin(wt_t *t, const char *bin, const char *name, const char *const *extra_env)
{
	const char *env[64];
	size_t n = 0;
	env[n++] = th_strf("RUNNEL_KAFKA_BROKERS=%s", t->kafka.bootstrap);
	env[n++] = th_strf("RUNNEL_JOBS_TOPIC=%s", t->topic);
	env[n++] = th_strf("RUNNEL_GROUP=%s", t->group);
	env[n++] = th_strf("RUNNEL_REDIS_URL=%s", t->redis.url);
	env[n++] = th_strf("RUNNEL_WORK_DIR=%s/work-%s", t->dir, name);
	env[n++] = th_strf("RUNNEL_WORKER_ID=%s", name);
	env[n++] = "RUNNEL_METRICS_LISTEN=127.0.0.1:0";
	env[n++] = "RUNNEL_SLOTS=4";
	env[n++] = "RUNNEL_KILL_GRACE_MS=500";
	env[n++] = "RUNNEL_LOG_LEVEL=debug";
	/* Faster group joins and fetches against the mock cluster. */
	env[n++] = "RUNNEL_KAFKA_PROPERTIES=topic.metadata.refresh.interval.ms=1000;session.timeout.ms=6000;heartbeat.interval.ms=500";
	/* Warm sandboxes on (the worker's default) or off: ctest runs both. */
	if (getenv("RUNNEL_WARM"))
		env[n++] = th_strf("RUNNEL_WARM=%s", getenv("RUNNEL_WARM"));
	for (size_t i = 0; extra_env && extra_env[i] && n < 62; i++)
		env[n++] = extra_env[i];
	env[n] = NULL;
	char *argv[] = { (char *)bin, NULL };
	pid_t pid = th_spawn(argv, env, wt_log_path(t, name));
	TH_REQUIRE(pid > 0, "spawn worker");
	return pid;
}

json_t *wt_agent_config(const char *agent_json)
{
	json_error_t e;
	json_t *agent = json_loads(agent_json, 0, &e);
	TH_REQUIRE(agent, "agent json: %s", e.text);
	json_t *cfg = json_object();
	json_object_set_new(cfg, "agent", agent);
	return cfg;
}

/* The job of a run the stub knows (o), produced to the job topic. */
static void produce_job(wt_t *t, const char *run_id, const dev_stub_otps_t *o, const char *prompt,
                        int partition, const char *tenant, int upload, long max_runtime)
{
	json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:I}",
	                      "v", 1, "run_id", run_id, "agent_url", o->agent_url,
	                      "otp_setup", o->otp_setup, "otp_run", o->otp_run,
	                      "prompt", prompt ? prompt : "hello", "caller", "test",
	                      "enqueued_at", (json_int_t)rn_now_ms());
	if (upload)
		json_object_set_new(j, "otp_upload", json_string(o->otp_upload));
	if (max_runtime > 0)
		json_object_set_new(j, "max_runtime_sec", json_integer(max_runtime));
	if (tenant)
		json_object_set_new(j, "tenant", json_string(tenant));
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	TH_REQUIRE(th_kafka_produce(&t->kafka, t->topic, partition, run_id, s, strlen(s), NULL) == 0, "produce");
	free(s);
}

void wt_submit_agent(wt_t *t, const char *run_id, const char *agent_json, const char *prompt,
                     int upload, long max_runtime, dev_stub_otps_t *o)
{
	wt_submit_agent_to(t, run_id, agent_json, prompt, -1, NULL, upload, max_runtime, o);
}

void wt_submit_agent_to(wt_t *t, const char *run_id, const char *agent_json, const char *prompt,
                        int partition, const char *tenant, int upload, long max_runtime,
                        dev_stub_otps_t *o)
{
	dev_stub_otps_t own;
	if (!o)
		o = &own;
	wt_add_agent_run(t, agent_json, o);
	produce_job(t, run_id, o, prompt, partition, tenant, upload, max_runtime);
}

void wt_add_agent_run(wt_t *t, const char *agent_json, dev_stub_otps_t *o)
{
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config(agent_json);
	TH_REQUIRE(dev_stub_add_run(t->stub, &run, o) == 0, "stub add run");
	json_decref(run.config);
}

void wt_submit(wt_t *t, const char *run_id, const dev_stub_run_t *run, const char *prompt,
               int upload, long max_runtime, dev_stub_otps_t *o)
{
	wt_submit_to(t, run_id, run, prompt, -1, NULL, upload, max_runtime, o);
}

void wt_submit_to(wt_t *t, const char *run_id, const dev_stub_run_t *run, const char *prompt,
                  int partition, const char *tenant, int upload, long max_runtime,
                  dev_stub_otps_t *o)
{
	TH_REQUIRE(dev_stub_add_run(t->stub, run, o) == 0, "stub add run");
	produce_job(t, run_id, o, prompt, partition, tenant, upload, max_runtime);
}

void wt_produce_raw(wt_t *t, const char *key, const void *v, size_t len)
{
	TH_REQUIRE(th_kafka_produce(&t->kafka, t->topic, -1, key, v, len, NULL) == 0, "produce raw");
}

static const char *key_of(const char *run_id, const char *kind)
{
	return th_strf("runnel:{%s}:%s", run_id, kind);
}

typedef struct {
	wt_t *t;
	const char *run_id;
} wt_run_ref_t;

static int last_is_terminal(void *arg)
{
	wt_run_ref_t *ref = arg;
	size_t n;
	char **l = wt_lines(ref->t, ref->run_id, &n);
	char type[32] = "", code[64];
	if (n > 0)
		th_line_type(l[n - 1], type, sizeof(type), code, sizeof(code));
	th_strv_free(l, n);
	return strcmp(type, "result") == 0 || strcmp(type, "error") == 0;
}

int wt_wait_terminal(wt_t *t, const char *run_id, int timeout_ms)
{
	const char *key = key_of(run_id, "out");
	if (!t->rcl)
		return th_wait_stream_terminal(t->rc, key, timeout_ms);
	/* On a cluster each look asks the node serving the slot now (a
	 * failover may move it while we wait). */
	wt_run_ref_t ref = { t, run_id };
	return th_wait_until(last_is_terminal, &ref, timeout_ms);
}

/* What a th_wait_until condition of the fixture looks at: a run (what),
 * or a worker's log (what) and a needle. */
typedef struct {
	wt_t *t;
	const char *what;
	const char *needle;
} wt_ref_t;

static int has_lines(void *arg)
{
	wt_ref_t *ref = arg;
	size_t n;
	char **l = wt_lines(ref->t, ref->what, &n);
	th_strv_free(l, n);
	return n >= 1;
}

int wt_wait_started(wt_t *t, const char *run_id, int timeout_ms)
{
	wt_ref_t ref = { t, run_id, NULL };
	return th_wait_until(has_lines, &ref, timeout_ms);
}

static int log_has(void *arg)
{
	wt_ref_t *ref = arg;
	return wt_log_has(ref->t, ref->what, ref->needle);
}

int wt_wait_log(wt_t *t, const char *name, const char *needle, int timeout_ms)
{
	wt_ref_t ref = { t, name, needle };
	return th_wait_until(log_has, &ref, timeout_ms);
}

char **wt_lines(wt_t *t, const char *run_id, size_t *n)
{
	char **lines = NULL;
	*n = 0;
	const char *key = key_of(run_id, "out");
	if (th_stream_read_all(wt_rc_key(t, key), key, &lines, NULL, n) == 0)
		return lines;
	/* On a cluster: the slot moved (MOVED) or its node died; read the
	 * map again and ask once more. */
	if (!t->rcl)
		return NULL;
	rn_rcluster_reset_slot(t->rcl, rn_rcluster_key_slot(key, strlen(key)));
	*n = 0;
	if (th_stream_read_all(wt_rc_key(t, key), key, &lines, NULL, n) < 0)
		return NULL;
	return lines;
}

char **wt_ended_lines(wt_t *t, const char *run_id, int timeout_ms, size_t *n)
{
	TH_REQUIRE(wt_wait_terminal(t, run_id, timeout_ms), "%s ended", run_id);
	return wt_lines(t, run_id, n);
}

const char *wt_run_code(wt_t *t, const char *run_id, size_t *n)
{
	static char code[64];
	size_t len;
	char **l = wt_lines(t, run_id, &len);
	snprintf(code, sizeof(code), "%s", wt_check_terminal(l, len));
	th_strv_free(l, len);
	if (n)
		*n = len;
	return code;
}

void wt_ctl(wt_t *t, const char *run_id, const char *msg)
{
	redisReply *r = redisCommand(wt_rc_key(t, key_of(run_id, "ctl")), "XADD runnel:{%s}:ctl * msg %s", run_id, msg);
	TH_CHECK(r && r->type == REDIS_REPLY_STRING, "XADD ctl of %s", run_id);
	if (r)
		freeReplyObject(r);
}

const char *wt_state(wt_t *t, const char *run_id, const char *field)
{
	static char buf[256];
	buf[0] = '\0';
	const char *key = key_of(run_id, "state");
	redisReply *r = redisCommand(wt_rc_key(t, key), "HGET %s %s", key, field);
	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(buf, sizeof(buf), "%s", r->str);
	if (r)
		freeReplyObject(r);
	return buf;
}

const char *wt_field(const char *line, const char *field)
{
	static char buf[16384];
	buf[0] = '\0';
	json_t *j = json_loads(line, 0, NULL);
	if (!j)
		return buf;
	json_t *v = json_object_get(j, field);
	if (json_is_string(v))
		snprintf(buf, sizeof(buf), "%s", json_string_value(v));
	else if (json_is_integer(v))
		snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
	json_decref(j);
	return buf;
}

const char *wt_check_terminal(char **lines, size_t n)
{
	static char code[64];
	code[0] = '\0';
	size_t terms = 0;
	for (size_t i = 0; i < n; i++) {
		char type[32], c[64];
		th_line_type(lines[i], type, sizeof(type), c, sizeof(c));
		if (!strcmp(type, "result") || !strcmp(type, "error")) {
			terms++;
			TH_CHECK(i == n - 1, "terminal line %zu of %zu is not last: %s", i, n, lines[i]);
			snprintf(code, sizeof(code), "%s", c);
		}
		TH_CHECK(strstr(lines[i], "\"ts\":"), "line without ts: %s", lines[i]);
	}
	TH_CHECK(terms == 1, "%zu terminal lines", terms);
	return code;
}

int wt_log_has(wt_t *t, const char *name, const char *needle)
{
	return th_file_contains(wt_log_path(t, name), needle);
}

void wt_warmup(wt_t *t)
{
	char id[64];
	snprintf(id, sizeof(id), "run_warmup_%ld", (long)getpid());
	wt_submit_agent(t, id, "{\"kind\":\"mock\",\"script\":\"echo\"}", "warm", 0, 0, NULL);
	/* The first run waits for the worker's group join and its Redis and
	 * Kafka connections: seconds on a quiet machine, more with the whole
	 * suite at once. */
	TH_REQUIRE(wt_wait_terminal(t, id, 90000), "warm-up run finished");
}

int wt_metrics_port(wt_t *t, const char *name)
{
	size_t len = 0;
	char *log = th_file_read(wt_log_path(t, name), &len);
	if (!log)
		return -1;
	const char *m = strstr(log, "metrics 127.0.0.1:");
	int port = m ? (int)strtol(m + 18, NULL, 10) : -1;
	free(log);
	return port;
}

long wt_metric(wt_t *t, const char *name, const char *series)
{
	long status = 0;
	char *body = wt_http_get(th_strf("http://127.0.0.1:%d/metrics", wt_metrics_port(t, name)), &status);
	const char *p = body ? strstr(body, series) : NULL;
	long v = -1;
	if (p && p[strlen(series)] == ' ')
		v = strtol(p + strlen(series) + 1, NULL, 10);
	free(body);
	return v;
}

char *wt_http_get(const char *url, long *status)
{
	th_body_t b = { 0 }; /* TH_BODY_FAIL at TH_BODY_MAX: a test body that large is a bug */
	CURL *h = curl_easy_init();
	*status = 0;
	if (!h)
		return NULL;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, th_body_sink);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(h);
	return b.body;
}

void wt_check_probe(int port, const char *path, long want_status, const char *want_body)
{
	long status;
	char *body = wt_http_get(th_strf("http://127.0.0.1:%d%s", port, path), &status);
	TH_CHECK(status == want_status && body && !strcmp(body, want_body), "%s %ld %s", path, status, body);
	free(body);
}

const char *wt_ended(wt_t *t, const char *run_id, int timeout_ms, char *msg, size_t msgsz)
{
	static char code[64];
	code[0] = '\0';
	msg[0] = '\0';
	if (!wt_wait_terminal(t, run_id, timeout_ms))
		return "(no terminal line)";
	size_t n;
	char **l = wt_lines(t, run_id, &n);
	snprintf(code, sizeof(code), "%s", wt_check_terminal(l, n));
	if (n)
		snprintf(msg, msgsz, "%s", wt_field(l[n - 1], "message"));
	th_strv_free(l, n);
	return code;
}

int wt_stream_has(wt_t *t, const char *run_id, const char *needle)
{
	size_t n;
	char **l = wt_lines(t, run_id, &n);
	int found = 0;
	for (size_t i = 0; i < n; i++)
		if (strstr(l[i], needle))
			found = 1;
	th_strv_free(l, n);
	return found;
}

/* The "shmem" of a cgroup's memory.stat, or -1. */
static long long cg_shmem(const char *dir)
{
	char line[256];
	FILE *f = fopen(th_strf("%s/memory.stat", dir), "r");
	long long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "shmem ", 6))
			v = strtoll(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* The most tmpfs memory ("shmem") charged to any of the worker's run
 * cgroups ("runnel-<pid>-*" beside its v2 "worker" leaf, or below its v1
 * memory cgroup), or -1 when it has none.  The largest: a warm sandbox's
 * cgroup keeps its own name on v2, and the idle ones hold next to nothing. */
long long wt_runs_max_shmem(pid_t worker)
{
	char line[1024], base[1024] = "";
	FILE *f = fopen(th_strf("/proc/%d/cgroup", (int)worker), "r");
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		const char *c = strchr(line, ':');
		size_t l;
		if (c && !strncmp(c, ":memory:", 8)) {
			snprintf(base, sizeof(base), "/sys/fs/cgroup/memory%s", c + 8);
			break;
		}
		if (!strncmp(line, "0::", 3) && (l = strlen(line)) > 10 && !strcmp(line + l - 7, "/worker"))
			snprintf(base, sizeof(base), "/sys/fs/cgroup%.*s", (int)(l - 10), line + 3);
	}
	if (f)
		fclose(f);
	DIR *d = base[0] ? opendir(base) : NULL;
	const char *prefix = th_strf("runnel-%d-", (int)worker);
	long long best = -1;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		long long v = cg_shmem(th_strf("%s/%s", base, de->d_name));
		if (v > best)
			best = v;
	}
	if (d)
		closedir(d);
	return best;
}

int wt_scan_contains(wt_t *t, const char *needle)
{
	if (!t->cluster)
		return th_redis_scan_contains(t->rc, needle);
	int found = 0;
	for (int i = 0; i < t->cluster->n && !found; i++) {
		redisContext *c = th_cluster_connect(t->cluster, i);
		if (!c)
			continue;
		int r = th_redis_scan_contains(c, needle);
		redisFree(c);
		if (r != 0)
			found = r;
	}
	return found;
}

int wt_aof_contains(wt_t *t, const char *needle)
{
	if (!t->cluster)
		return th_dir_contains(t->redis.dir, needle, strlen(needle));
	for (int i = 0; i < t->cluster->n; i++)
		if (th_dir_contains(t->cluster->node[i].dir, needle, strlen(needle)))
			return 1;
	return 0;
}
