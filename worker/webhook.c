/*
 * worker/webhook.c - the completion webhook's intake check and delivery
 * thread (see webhook.h): outbox in Redis, libcurl multi, signed POSTs.
 */
#include "worker/webhook.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>

#include "common/bg.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/rcluster.h"
#include "common/redis.h"
#include "common/runstate.h"
#include "common/util.h"
#include "common/webhook_url.h"
#include "proto/keys.h"
#include "proto/webhook.h"
#include "worker/publish.h"

#define TAKE_MAX       64     /* due entries taken per look */
#define LEASE_EXTRA_MS 5000   /* a taken entry's lease past the attempt's timeout */
#define BACKOFF_MIN_MS 1000   /* first retry */
#define BACKOFF_MAX_MS 600000 /* retries settle at 5-10 min */
#define IDLE_POLL_MS   250    /* how often the outbox is looked at */
#define ERR_MAX        240    /* webhook_error in the state hash */

unsigned worker_webhook_flags(const worker_config_t *cfg)
{
	return (cfg->webhook_allow_http ? PROTO_WEBHOOK_ALLOW_HTTP : 0) |
	        (cfg->webhook_allow_private ? PROTO_WEBHOOK_ALLOW_PRIVATE : 0);
}

int worker_webhook_job_check(const worker_config_t *cfg, const proto_job_t *job, char *errstr,
                             size_t errstr_size)
{
	if (!job->webhook)
		return 0;
	if (rn_webhook_url_check(job->webhook, worker_webhook_flags(cfg), errstr, errstr_size) < 0)
		return -1;
	if (cfg->webhook_secret_len == 0 && !cfg->webhook_allow_http) {
		snprintf(errstr, errstr_size, "webhook: no webhook secret is configured on the workers");
		return -1;
	}
	return 0;
}

/* The delivery's rule for one address it is about to connect to (see
 * open_socket): the boot check and the delivery share it. */
static int may_reach(const worker_config_t *cfg, const struct sockaddr *sa, char *why, size_t why_size)
{
	return rn_netaddr_run_may_reach(sa, cfg->webhook_allow_private, &cfg->limits.own, why, why_size);
}

typedef struct {
	const worker_config_t *cfg;
	char forbidden[120]; /* the first address refused; "" none */
} resolve_check_t;

/* Judges each address curl would connect to, and connects to none. */
static curl_socket_t check_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	resolve_check_t *rc = arg;
	char why[120];
	(void)purpose;
	if (!rc->forbidden[0] && !may_reach(rc->cfg, &a->addr, why, sizeof(why)))
		snprintf(rc->forbidden, sizeof(rc->forbidden), "%s", why);
	return CURL_SOCKET_BAD;
}

int worker_webhook_resolve_check(const worker_config_t *cfg, const char *url, long timeout_ms, char *errstr,
                                 size_t errstr_size)
{
	resolve_check_t rc = { .cfg = cfg, .forbidden = "" };
	CURL *h = curl_easy_init();
	if (!h)
		return 0; /* the delivery checks again */
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, cfg->webhook_allow_http ? "http,https" : "https");
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* the target itself, as the delivery resolves it */
	curl_easy_setopt(h, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
	curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, check_socket);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &rc);
	curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
	(void)curl_easy_perform(h); /* never connects: check_socket opens no socket */
	curl_easy_cleanup(h);
	if (rc.forbidden[0]) {
		snprintf(errstr, errstr_size, "webhook: resolves to %s, which is not allowed", rc.forbidden);
		return -1;
	}
	return 0;
}

/* One attempt in flight. */
typedef struct attempt {
	struct attempt *next;
	struct worker_webhook *wh;
	CURL *h;
	struct curl_slist *headers;
	char run_id[PROTO_RUN_ID_MAX + 1];
	char *body;
	int64_t lease;    /* the outbox score this attempt holds */
	int64_t ended_at; /* ms */
	long attempts;    /* this one included */
	int64_t t0_ms;
	char forbidden[160]; /* what the opensocket callback refused; "" none */
	char trace_id[33];   /* the run's, for the log lines; "" none */
} attempt_t;

struct worker_webhook {
	const worker_config_t *cfg;
	worker_metrics_t *m;
	rn_bg_t bg; /* the delivery thread */
	CURLM *multi;
	rn_redis_conn_t rc;
	attempt_t *active;
	long nactive;
	char outbox[96];
};

/* ---- Redis ---- */

/* The thread's connection; NULL while Redis is down (the outbox is looked
 * at again on the next poll, so no nap here: curl's transfers go on). */
static rn_rcluster_t *wh_redis(worker_webhook_t *wh)
{
	return rn_redis_conn_get(&wh->rc, NULL);
}

static void wh_redis_failed(worker_webhook_t *wh, const char *what, const char *err)
{
	rn_redis_conn_failed(&wh->rc, what, err);
}

/* KEYS: outbox.  ARGV: now lease_ms max.  The due ids, each moved a lease
 * ahead so that no other worker takes it meanwhile. */
static const char lua_take[] =
        "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))\n"
        "local lease = tonumber(ARGV[1]) + tonumber(ARGV[2])\n"
        "for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], 'XX', lease, id) end\n"
        "return {lease, ids}\n";

/* KEYS: outbox.  ARGV: id expected new.  Moves the entry only if it still
 * holds our lease: a terminal writer's "due now" (score 0) since our take
 * must not be pushed back. */
static const char lua_resched[] =
        "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
        "if s and tonumber(s) == tonumber(ARGV[2]) then redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1]) end\n"
        "return 1\n";

/* KEYS: state.  ARGV: field value ...  Only while the hash exists: an
 * expired run's hash is not recreated without its expiry. */
static const char lua_note[] =
        "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
        "for i = 1, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end\n"
        "return 1\n";

static void resched(worker_webhook_t *wh, const char *run_id, int64_t expected, int64_t due)
{
	char a_exp[24], a_due[24], err[256];
	rn_rcluster_t *c = wh_redis(wh);
	if (!c)
		return; /* the lease runs out and the entry comes due anyway */
	snprintf(a_exp, sizeof(a_exp), "%" PRId64, expected);
	snprintf(a_due, sizeof(a_due), "%" PRId64, due);
	const char *argv[] = { "EVAL", lua_resched, "1", wh->outbox, run_id, a_exp, a_due };
	if (rn_rcluster_command_ll(c, 0, 7, argv, NULL, "webhook reschedule", err, sizeof(err)) < 0)
		wh_redis_failed(wh, "reschedule", err);
}

static void outbox_remove(worker_webhook_t *wh, const char *run_id)
{
	char err[256];
	rn_rcluster_t *c = wh_redis(wh);
	if (!c)
		return;
	const char *argv[] = { "ZREM", wh->outbox, run_id };
	if (rn_rcluster_command_ll(c, 0, 3, argv, NULL, "webhook remove", err, sizeof(err)) < 0)
		wh_redis_failed(wh, "remove", err);
}

/* webhook_state, webhook_attempts and webhook_error of the state hash. */
static void note(worker_webhook_t *wh, const char *run_id, const char *state, long attempts, const char *error)
{
	char key[PROTO_KEY_MAX], a_att[24], err[256];
	rn_rcluster_t *c = wh_redis(wh);
	if (!c || proto_key(key, sizeof(key), wh->cfg->key_prefix, run_id, PROTO_KEY_STATE) < 0)
		return;
	snprintf(a_att, sizeof(a_att), "%ld", attempts);
	const char *argv[] = { "EVAL", lua_note, "1", key, "webhook_state", state, "webhook_attempts", a_att,
		               "webhook_error", error ? error : "" };
	if (rn_rcluster_command_ll(c, 0, 10, argv, NULL, "webhook note", err, sizeof(err)) < 0)
		wh_redis_failed(wh, "note", err);
}

/* ---- one attempt ---- */

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p;
	(void)arg;
	return size * n;
}

/* Every address curl is about to connect to passes the rule of
 * common/netaddr.h here (public, and not one of the worker's own services,
 * unless the operator allows private targets), so a name that resolves (or
 * re-resolves) inside is refused whatever the URL's text said. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	attempt_t *at = arg;
	const worker_config_t *cfg = at->wh->cfg;
	char why[120];
	(void)purpose;
	if (!may_reach(cfg, &a->addr, why, sizeof(why))) {
		snprintf(at->forbidden, sizeof(at->forbidden), "%s", why);
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static void attempt_free(attempt_t *at)
{
	if (at->h)
		curl_easy_cleanup(at->h);
	curl_slist_free_all(at->headers);
	free(at->body);
	free(at);
}

static int header_add(attempt_t *at, const char *h)
{
	struct curl_slist *n = curl_slist_append(at->headers, h);
	if (!n)
		return -1;
	at->headers = n;
	return 0;
}

/* The stable delivery id of one run end. */
static void delivery_id(const char *run_id, char *buf, size_t size)
{
	snprintf(buf, size, "whd_%s", run_id);
}

static void drop(worker_webhook_t *wh, const char *run_id, const char *trace_id, long attempts, const char *why)
{
	rn_counter_add(wh->m->webhooks_dropped, 1);
	rn_log_traced(RN_LOG_WARN, run_id, trace_id, "webhook_dropped",
	              "completion webhook dropped after %ld attempt(s): %s", attempts, why);
	note(wh, run_id, "dropped", attempts, why);
	outbox_remove(wh, run_id);
}

/* Starts an attempt for a taken entry whose run has ended. */
static void attempt_start(worker_webhook_t *wh, const char *run_id, int64_t lease, const char *url,
                          const char *status, const char *code, int64_t ended_at, const char *usage_text,
                          long prev_attempts, const char *traceparent)
{
	char tid[33] = "";

	if (traceparent && strlen(traceparent) == PROTO_TRACEPARENT_LEN)
		proto_traceparent_trace_id(traceparent, tid);
	char err[256], sig[PROTO_WEBHOOK_SIG_MAX], hdr[PROTO_WEBHOOK_SIG_MAX + 64], did[96];
	unsigned flags = worker_webhook_flags(wh->cfg);

	/* The policy may have tightened since intake (a restart with other
	 * flags): the URL is judged again. */
	if (rn_webhook_url_check(url, flags, err, sizeof(err)) < 0) {
		drop(wh, run_id, tid, prev_attempts, err);
		return;
	}
	json_t *usage = usage_text && *usage_text ? json_loads(usage_text, 0, NULL) : NULL;
	attempt_t *at = calloc(1, sizeof(*at));
	if (!at) {
		json_decref(usage);
		return; /* the lease runs out: tried again */
	}
	at->wh = wh;
	snprintf(at->run_id, sizeof(at->run_id), "%s", run_id);
	memcpy(at->trace_id, tid, sizeof(tid));
	at->lease = lease;
	at->ended_at = ended_at;
	at->attempts = prev_attempts + 1;
	at->t0_ms = rn_now_ms();
	at->body = proto_webhook_body(run_id, status, code, ended_at, json_is_object(usage) ? usage : NULL);
	json_decref(usage);
	at->h = curl_easy_init();
	if (!at->body || !at->h) {
		attempt_free(at);
		return;
	}
	delivery_id(run_id, did, sizeof(did));
	snprintf(hdr, sizeof(hdr), "Runnel-Delivery: %s", did);
	int bad = header_add(at, "Content-Type: application/json") | header_add(at, hdr) | header_add(at, "Expect:");
	if (wh->cfg->webhook_secret_len > 0) {
		if (proto_webhook_sign(wh->cfg->webhook_secret, wh->cfg->webhook_secret_len, rn_now_ms() / 1000, at->body,
		                       strlen(at->body), sig) < 0)
			bad = -1;
		snprintf(hdr, sizeof(hdr), "Runnel-Signature: %s", sig);
		bad |= header_add(at, hdr);
		sodium_memzero(hdr, sizeof(hdr));
	}
	if (bad) {
		attempt_free(at);
		return;
	}
	CURL *h = at->h;
	long timeout_ms = wh->cfg->webhook_timeout_sec * 1000;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, wh->cfg->webhook_allow_http ? "http,https" : "https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* no proxy from the environment: the SSRF check sees the target */
	curl_easy_setopt(h, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "runnel-webhook/" RUNNEL_VERSION);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, at->headers);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, at->body);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(at->body));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, at);
	curl_easy_setopt(h, CURLOPT_PRIVATE, at);
	curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
	if (curl_multi_add_handle(wh->multi, h) != CURLM_OK) {
		attempt_free(at);
		return;
	}
	at->next = wh->active;
	wh->active = at;
	wh->nactive++;
}

/* An attempt finished (curl's result, HTTP status). */
static void attempt_done(worker_webhook_t *wh, attempt_t *at, CURLcode res)
{
	long http = 0;
	char why[ERR_MAX];
	curl_easy_getinfo(at->h, CURLINFO_RESPONSE_CODE, &http);
	if (res == CURLE_OK && http >= 200 && http < 300) {
		rn_counter_add(wh->m->webhooks_delivered, 1);
		if (at->ended_at > 0)
			rn_hist_observe(wh->m->webhook_latency, (double)(rn_now_ms() - at->ended_at) / 1000.0);
		rn_log_traced(RN_LOG_INFO, at->run_id, at->trace_id, "webhook_delivered",
		              "completion webhook answered %ld (attempt %ld)", http, at->attempts);
		note(wh, at->run_id, "delivered", at->attempts, NULL);
		outbox_remove(wh, at->run_id);
		return;
	}
	if (at->forbidden[0]) {
		snprintf(why, sizeof(why), "the target resolves to %s, which is not allowed", at->forbidden);
		drop(wh, at->run_id, at->trace_id, at->attempts, why);
		return;
	}
	if (res != CURLE_OK)
		snprintf(why, sizeof(why), "%s", curl_easy_strerror(res));
	else if (http >= 300 && http < 400)
		snprintf(why, sizeof(why), "HTTP %ld (redirects are not followed)", http);
	else
		snprintf(why, sizeof(why), "HTTP %ld", http);
	int64_t now = rn_now_ms();
	if (at->ended_at > 0 && now - at->ended_at >= wh->cfg->webhook_give_up_sec * 1000) {
		drop(wh, at->run_id, at->trace_id, at->attempts, why);
		return;
	}
	long delay = rn_backoff_ms((unsigned)(at->attempts - 1), BACKOFF_MIN_MS, BACKOFF_MAX_MS);
	rn_counter_add(wh->m->webhooks_retried, 1);
	rn_log_traced(RN_LOG_INFO, at->run_id, at->trace_id, "webhook_retry",
	              "completion webhook attempt %ld failed (%s); next in %ld ms", at->attempts, why, delay);
	note(wh, at->run_id, "retrying", at->attempts, why);
	resched(wh, at->run_id, at->lease, now + delay);
}

/* Looks at the due entries and starts an attempt for each ended run. */
static void take_due(worker_webhook_t *wh)
{
	char err[256], a_now[24], a_lease[24], a_max[24];
	long room = wh->cfg->webhook_parallel - wh->nactive;
	if (room <= 0)
		return;
	rn_rcluster_t *c = wh_redis(wh);
	if (!c)
		return;
	int64_t now = rn_now_ms();
	snprintf(a_now, sizeof(a_now), "%" PRId64, now);
	snprintf(a_lease, sizeof(a_lease), "%ld", wh->cfg->webhook_timeout_sec * 1000 + LEASE_EXTRA_MS);
	snprintf(a_max, sizeof(a_max), "%ld", room < TAKE_MAX ? room : TAKE_MAX);
	const char *argv[] = { "EVAL", lua_take, "1", wh->outbox, a_now, a_lease, a_max };
	redisReply *r = rn_rcluster_argv(c, 0, 7, argv, NULL);
	if (rn_rcluster_reply_check(c, r, "webhook take", err, sizeof(err)) < 0) {
		if (r)
			freeReplyObject(r);
		wh_redis_failed(wh, "take", err);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return;
	}
	int64_t lease = rn_redis_reply_ll(r->element[0]);
	for (size_t i = 0; i < r->element[1]->elements; i++) {
		const redisReply *e = r->element[1]->element[i];
		char run_id[PROTO_RUN_ID_MAX + 1], key[PROTO_KEY_MAX];
		if (e->type != REDIS_REPLY_STRING || e->len > PROTO_RUN_ID_MAX)
			continue;
		memcpy(run_id, e->str, e->len);
		run_id[e->len] = '\0';
		if (proto_key(key, sizeof(key), wh->cfg->key_prefix, run_id, PROTO_KEY_STATE) < 0) {
			outbox_remove(wh, run_id);
			continue;
		}
		redisReply *s = rn_rcluster_command(c, 0, "HMGET %s status ended_at code usage webhook webhook_attempts traceparent", key);
		if (rn_rcluster_reply_check(c, s, "webhook state", err, sizeof(err)) < 0) {
			if (s)
				freeReplyObject(s);
			freeReplyObject(r);
			wh_redis_failed(wh, "state", err);
			return;
		}
		const char *f[7] = { 0 };
		for (size_t j = 0; s->type == REDIS_REPLY_ARRAY && j < s->elements && j < 7; j++)
			f[j] = s->element[j]->type == REDIS_REPLY_STRING ? s->element[j]->str : NULL;
		const char *st = f[0];
		if (!st) {
			/* The run's keys expired (or never existed): nothing to tell. */
			rn_counter_add(wh->m->webhooks_dropped, 1);
			rn_log_warn(run_id, "webhook_dropped", "completion webhook dropped: the run's state is gone");
			outbox_remove(wh, run_id);
		} else if (!f[4] || !*f[4]) {
			outbox_remove(wh, run_id);
		} else if (strcmp(st, "succeeded") && strcmp(st, "failed") && strcmp(st, "cancelled") && strcmp(st, "lost")) {
			resched(wh, run_id, lease, now + WORKER_WEBHOOK_POLL_MS);
		} else {
			attempt_start(wh, run_id, lease, f[4], st, f[2] ? f[2] : "", f[1] ? strtoll(f[1], NULL, 10) : 0, f[3],
			              f[5] ? strtol(f[5], NULL, 10) : 0, f[6]);
		}
		freeReplyObject(s);
		if (!wh->rc.c)
			break; /* a Redis failure inside: the rest come due again */
	}
	freeReplyObject(r);
}

static void reap(worker_webhook_t *wh)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(wh->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		attempt_t *at = NULL;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&at);
		CURLcode res = msg->data.result;
		curl_multi_remove_handle(wh->multi, msg->easy_handle);
		for (attempt_t **p = &wh->active; *p; p = &(*p)->next) {
			if (*p == at) {
				*p = at->next;
				wh->nactive--;
				break;
			}
		}
		if (at) {
			attempt_done(wh, at, res);
			attempt_free(at);
		}
	}
}

static int stopping(worker_webhook_t *wh)
{
	pthread_mutex_lock(&wh->bg.mu);
	int stop = wh->bg.stop;
	pthread_mutex_unlock(&wh->bg.mu);
	return stop;
}

/* rn_bg_stop's poke: ends the wait in curl_multi_poll (or the next one). */
static void wake(void *arg)
{
	worker_webhook_t *wh = arg;
	curl_multi_wakeup(wh->multi);
}

static void *webhook_main(void *arg)
{
	worker_webhook_t *wh = arg;
	int64_t next_take = 0;
	while (!stopping(wh)) {
		int running = 0;
		if (rn_mono_ms() >= next_take) {
			take_due(wh);
			next_take = rn_mono_ms() + IDLE_POLL_MS;
		}
		curl_multi_perform(wh->multi, &running);
		reap(wh);
		curl_multi_poll(wh->multi, NULL, 0, IDLE_POLL_MS / 2, NULL);
	}
	/* Abandoned attempts: their entries come due again after the lease. */
	while (wh->active) {
		attempt_t *at = wh->active;
		wh->active = at->next;
		curl_multi_remove_handle(wh->multi, at->h);
		attempt_free(at);
	}
	rn_redis_conn_close(&wh->rc);
	return NULL;
}

worker_webhook_t *worker_webhook_start(const worker_config_t *cfg, worker_metrics_t *m, char *errstr,
                                       size_t errstr_size)
{
	worker_webhook_t *wh = calloc(1, sizeof(*wh));
	if (!wh) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	wh->cfg = cfg;
	wh->m = m;
	rn_redis_conn_init(&wh->rc, &cfg->redis, "webhook", NULL, 2000);
	if (rn_webhook_outbox_key(cfg->key_prefix, wh->outbox, sizeof(wh->outbox)) < 0 ||
	    !(wh->multi = curl_multi_init())) {
		snprintf(errstr, errstr_size, "cannot set up the webhook sender");
		free(wh);
		return NULL;
	}
	int e = rn_bg_init(&wh->bg);
	if (e) {
		snprintf(errstr, errstr_size, "cannot set up the webhook thread: %s", strerror(e));
		curl_multi_cleanup(wh->multi);
		free(wh);
		return NULL;
	}
	e = rn_bg_start(&wh->bg, "runnel-webhook", 512 * 1024, webhook_main, wh);
	if (e) {
		snprintf(errstr, errstr_size, "cannot start the webhook thread: %s", strerror(e));
		rn_bg_destroy(&wh->bg);
		curl_multi_cleanup(wh->multi);
		free(wh);
		return NULL;
	}
	return wh;
}

void worker_webhook_stop(worker_webhook_t *wh)
{
	if (!wh)
		return;
	rn_bg_stop(&wh->bg, NULL, wake, wh);
	rn_bg_destroy(&wh->bg);
	curl_multi_cleanup(wh->multi);
	free(wh);
}
