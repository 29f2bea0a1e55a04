/*
 * tests/dispatcher/dtest.c - shared dispatcher test helpers (see dtest.h).
 */
#include "tests/dispatcher/dtest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

#ifndef DISPATCHER_BIN
#error DISPATCHER_BIN must name the runnel-dispatcher binary
#endif

int dt_http(dt_resp_t *r, const char *method, const char *url, const char *const *headers,
            const char *body, long len, long timeout_ms)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	th_body_t b = { 0 }, hb = { 0 }; /* TH_BODY_FAIL at TH_BODY_MAX */
	CURLcode rc;

	memset(r, 0, sizeof(*r));
	for (size_t i = 0; headers && headers[i]; i++)
		h = curl_slist_append(h, headers[i]);
	/* No "Expect: 100-continue" dance for big bodies. */
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_body_sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, th_body_sink);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &hb);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)(len < 0 ? (long)strlen(body) : len));
	}
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &r->secs);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	r->body = th_body_take(&b, &r->len);
	r->headers = th_body_take(&hb, NULL);
	/* A 413 may come back while curl is still sending: still an answer. */
	if (rc != CURLE_OK && r->status == 0)
		return -1;
	return 0;
}

void dt_resp_free(dt_resp_t *r)
{
	free(r->body);
	free(r->headers);
	memset(r, 0, sizeof(*r));
}

int dt_header(const dt_resp_t *r, const char *name, char *buf, size_t size)
{
	size_t nl = strlen(name);
	const char *p = r->headers;

	while (p && *p != '\0') {
		const char *e = strstr(p, "\r\n");
		size_t ll = e ? (size_t)(e - p) : strlen(p);

		if (ll > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1;
			size_t vl;

			while (*v == ' ')
				v++;
			vl = ll - (size_t)(v - p);
			snprintf(buf, size, "%.*s", (int)vl, v);
			return 1;
		}
		p = e ? e + 2 : NULL;
	}
	return 0;
}

char *dt_job_body(const char *run_id, const char *extra)
{
	return th_strf("{\"agent_url\":\"http://127.0.0.1:9/ws/s\",\"otp_setup\":\"otp_SETUP_SECRET_1\","
	               "\"otp_run\":\"otp_RUN_SECRET_2\",\"otp_upload\":\"otp_UPLOAD_SECRET_3\","
	               "\"prompt\":\"PROMPT_TEXT_4\"%s%s%s%s%s}",
	               run_id ? ",\"run_id\":\"" : "", run_id ? run_id : "", run_id ? "\"" : "",
	               extra ? "," : "", extra ? extra : "");
}

typedef struct health_arg {
	const dt_disp_t *d;
	const char *path;
	long want;
} health_arg_t;

static int answers(void *arg)
{
	health_arg_t *a = arg;
	dt_resp_t r;
	char *url = th_strf("%s%s", a->d->base, a->path);
	int ok = dt_http(&r, "GET", url, NULL, NULL, 0, 1000) == 0 && r.status == a->want;

	dt_resp_free(&r);
	return ok;
}

static th_cluster_t dt_cl;
static int dt_have_cluster;

th_cluster_t *dt_cluster(void)
{
	return dt_have_cluster ? &dt_cl : NULL;
}

void dt_servers_start(const char *test_name, th_redis_t *red, th_kafka_t *k, int partitions, redisContext **c)
{
	th_init(test_name);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (th_cluster_mode()) {
		/* The cluster-labelled reruns: node 0's URL names the cluster,
		 * the test's checks go through th_cmd (routed by slot). */
		TH_REQUIRE(th_cluster_start(&dt_cl, 3, 1, NULL) == 0, "redis cluster");
		*red = dt_cl.node[0];
		dt_have_cluster = 1;
	} else {
		TH_REQUIRE(th_redis_start(red, NULL) == 0, "redis");
	}
	TH_REQUIRE(th_kafka_start(k, 1) == 0, "kafka");
	if (partitions > 0)
		TH_REQUIRE(th_kafka_create_topic(k, "runnel.jobs", partitions) == 0, "topic runnel.jobs");
	*c = th_redis_connect(red);
	TH_REQUIRE(*c, "connect to %s", red->url);
}

void dt_servers_stop(redisContext *c, th_kafka_t *k)
{
	if (c)
		redisFree(c);
	th_kafka_stop(k);
	curl_global_cleanup();
}

pid_t dt_worker_start(const char *worker_bin, const th_redis_t *red, const th_kafka_t *k, const char *dir,
                      const char *worker_id, int slots)
{
	char *argv[] = { (char *)worker_bin, NULL };
	const char *env[] = {
		th_strf("RUNNEL_KAFKA_BROKERS=%s", k->bootstrap),
		th_strf("RUNNEL_REDIS_URL=%s", red->url),
		th_strf("RUNNEL_WORK_DIR=%s/work", dir),
		th_strf("RUNNEL_WORKER_ID=%s", worker_id),
		"RUNNEL_METRICS_LISTEN=127.0.0.1:0",
		th_strf("RUNNEL_SLOTS=%d", slots),
		"RUNNEL_KILL_GRACE_MS=500",
		"RUNNEL_LOG_LEVEL=debug",
		"RUNNEL_KAFKA_PROPERTIES=topic.metadata.refresh.interval.ms=1000;session.timeout.ms=6000;heartbeat.interval.ms=500",
		NULL,
	};
	pid_t pid = th_spawn(argv, env, th_strf("%s/worker.log", dir));
	TH_REQUIRE(pid > 0, "worker %s", worker_bin);
	return pid;
}

int dt_disp_start(dt_disp_t *d, const th_redis_t *r, const th_kafka_t *k,
                  const char *const *extra_env)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		const char *env[64];
		size_t n = 0;
		char *argv[] = { DISPATCHER_BIN, NULL };
		health_arg_t ha = { d, "/healthz", 200 };

		memset(d, 0, sizeof(*d));
		d->port = th_free_port();
		snprintf(d->base, sizeof(d->base), "http://127.0.0.1:%d", d->port);
		snprintf(d->log, sizeof(d->log), "%s/dispatcher.log", th_tmpdir());
		env[n++] = th_strf("RUNNEL_LISTEN=127.0.0.1:%d", d->port);
		env[n++] = th_strf("RUNNEL_REDIS_URL=%s", r->url);
		env[n++] = th_strf("RUNNEL_KAFKA_BROKERS=%s", k ? k->bootstrap : "127.0.0.1:1");
		env[n++] = "RUNNEL_LOG_LEVEL=debug";
		for (size_t i = 0; extra_env && extra_env[i] && n < 62; i++)
			env[n++] = extra_env[i];
		env[n] = NULL;
		d->pid = th_spawn(argv, env, d->log);
		if (d->pid < 0)
			return -1;
		if (th_wait_until(answers, &ha, 10000))
			return 0;
		th_kill(d->pid);
		d->pid = 0;
		TH_NOTE("dispatcher did not come up on port %d (attempt %d)", d->port, attempt + 1);
	}
	return -1;
}

int dt_wait_ready(const dt_disp_t *d, long want, int timeout_ms)
{
	health_arg_t ha = { d, "/readyz", want };

	return th_wait_until(answers, &ha, timeout_ms);
}

int dt_disp_stop(dt_disp_t *d)
{
	int st;

	if (d->pid <= 0)
		return 0;
	st = th_stop(d->pid, 10000);
	d->pid = 0;
	return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* ---- streams ---- */

int dt_multi_init(dt_multi_t *m)
{
	m->multi = curl_multi_init();
	return m->multi ? 0 : -1;
}

void dt_multi_cleanup(dt_multi_t *m)
{
	curl_multi_cleanup(m->multi);
	m->multi = NULL;
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
	dt_stream_t *s = arg;

	s->last_rx_ms = th_now_ms();
	return th_body_sink(p, size, n, &s->rx);
}

int dt_stream_open(dt_multi_t *m, dt_stream_t *s, const char *url, const char *const *headers,
                   const char *post)
{
	memset(s, 0, sizeof(*s));
	s->easy = curl_easy_init();
	if (!s->easy)
		return -1;
	for (size_t i = 0; headers && headers[i]; i++)
		s->hdrs = curl_slist_append(s->hdrs, headers[i]);
	s->hdrs = curl_slist_append(s->hdrs, "Expect:");
	curl_easy_setopt(s->easy, CURLOPT_URL, url);
	curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->hdrs);
	curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
	curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, 120000L);
	if (post) {
		s->post = strdup(post);
		curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->post);
		curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(s->post));
	}
	/* A stream the test reads whole: over TH_BODY_MAX is a bug (FAIL). */
	th_body_add(&s->rx, "", 0);
	return curl_multi_add_handle(m->multi, s->easy) == CURLM_OK ? 0 : -1;
}

void dt_stream_close(dt_multi_t *m, dt_stream_t *s)
{
	if (s->easy) {
		curl_multi_remove_handle(m->multi, s->easy);
		curl_easy_cleanup(s->easy);
	}
	curl_slist_free_all(s->hdrs);
	th_body_free(&s->rx);
	free(s->post);
	memset(s, 0, sizeof(*s));
}

void dt_multi_pump(dt_multi_t *m, int ms)
{
	int64_t end = th_now_ms() + ms;

	do {
		int running = 0, left = 0;
		CURLMsg *msg;

		curl_multi_perform(m->multi, &running);
		while ((msg = curl_multi_info_read(m->multi, &left))) {
			if (msg->msg == CURLMSG_DONE) {
				dt_stream_t *s = NULL;

				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
				s->done = 1;
				s->rc = msg->data.result;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &s->status);
			}
		}
		if (running == 0)
			break;
		curl_multi_poll(m->multi, NULL, 0, 20, NULL);
	} while (th_now_ms() < end);
}

int dt_multi_until(dt_multi_t *m, int (*cond)(void *), void *arg, int timeout_ms)
{
	int64_t end = th_now_ms() + timeout_ms;

	for (;;) {
		if (cond(arg))
			return 1;
		if (th_now_ms() >= end)
			return cond(arg);
		dt_multi_pump(m, 20);
	}
}

size_t dt_stream_lines(const dt_stream_t *s)
{
	size_t n = 0;

	for (size_t i = 0; i < s->rx.len; i++)
		n += s->rx.body[i] == '\n';
	return n;
}

int dt_stream_started(dt_stream_t *s)
{
	if (s->status == 0 && s->easy)
		curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
	return s->status != 0;
}

char *dt_xadd_line(redisContext *c, const char *key, const char *line)
{
	redisReply *r = th_cmd(c, "XADD %s * line %s", key, line);
	char *id = NULL;

	if (r && r->type == REDIS_REPLY_STRING)
		id = strdup(r->str);
	if (r)
		freeReplyObject(r);
	/* On a cluster the worker wakes the tails: do as it does. */
	size_t kl = strlen(key);
	if (id && th_cluster_mode() && kl > 4 && strcmp(key + kl - 4, ":out") == 0) {
		r = th_cmd(c, "SPUBLISH %.*s:wake 1", (int)(kl - 4), key);
		if (r)
			freeReplyObject(r);
	}
	return id;
}
