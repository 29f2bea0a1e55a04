/*
 * agent/chat.c - the Chat Completions client (see chat.h).
 */
#include "agent/chat.h"

#include <ctype.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "agent/ctl.h"
#include "agent/emit.h"
#include "agent/http.h"
#include "agent/sse.h"
#include "common/dynbuf.h"
#include "common/util.h"

#define CHAT_EVENT_MAX (2 * 1024 * 1024) /* one SSE line or event */
#define CHAT_BODY_MAX  (64 * 1024)       /* an error body or a whole-JSON answer we keep */

typedef struct attempt {
	agent_answer_t *ans;
	CURL *easy;
	agent_sse_t sse;
	long status;
	int is_sse;       /* Content-Type text/event-stream */
	int failed;       /* the stream was refused (errstr) */
	rn_dynbuf_t body; /* non-SSE body, its first CHAT_BODY_MAX bytes */
	int64_t retry_after_ms;
	char errstr[512];
} attempt_t;

int agent_chat_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void agent_chat_global_free(void)
{
	curl_global_cleanup();
}

int64_t agent_chat_retry_after_ms(const char *v)
{
	if (!v)
		return -1;
	while (*v == ' ' || *v == '\t')
		v++;
	if (!*v)
		return -1;
	if (isdigit((unsigned char)*v)) {
		char *end;
		double secs = strtod(v, &end);
		while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
			end++;
		if (*end || secs < 0 || secs > 86400.0 * 365)
			return -1;
		return (int64_t)(secs * 1000.0);
	}
	time_t t = curl_getdate(v, NULL);
	if (t < 0)
		return -1;
	int64_t ms = ((int64_t)t * 1000) - rn_now_ms();
	return ms < 0 ? 0 : ms;
}

static int on_event(void *arg, const char *event, const char *data, size_t len)
{
	attempt_t *a = arg;
	if (len == 0)
		return 0;
	int rc = agent_answer_chunk(a->ans, data, len, a->errstr, sizeof(a->errstr));
	if (rc < 0) {
		a->failed = 1;
		return 1;
	}
	return rc == 1 ? 1 : 0;
}

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
	attempt_t *a = arg;
	size_t len = size * n;
	agent_http_touch();
	if (len > 12 && !strncasecmp(buf, "Retry-After:", 12)) {
		char v[128];
		size_t vl = len - 12 < sizeof(v) - 1 ? len - 12 : sizeof(v) - 1;
		memcpy(v, buf + 12, vl);
		v[vl] = '\0';
		a->retry_after_ms = agent_chat_retry_after_ms(v);
	} else if (len > 13 && !strncasecmp(buf, "Content-Type:", 13)) {
		a->is_sse = !!memmem(buf, len, "event-stream", 12);
	}
	return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg)
{
	attempt_t *a = arg;
	size_t len = size * n;
	agent_http_touch();
	if (a->status == 0)
		curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &a->status);
	if (a->status < 400 && a->is_sse) {
		int rc = agent_sse_feed(&a->sse, buf, len);
		if (rc < 0 && !a->failed) {
			a->failed = 1;
			snprintf(a->errstr, sizeof(a->errstr), "the model provider sent a stream event over %d bytes",
			         CHAT_EVENT_MAX);
		}
		if (rc != 0) {
			agent_http_abort();
			return 0;
		}
		return len;
	}
	/* An error body or an answer sent whole: keep the first part. */
	size_t room = a->body.max - a->body.len;
	size_t take = len < room ? len : room;
	if (rn_dynbuf_add(&a->body, buf, take) < 0)
		return 0;
	return len;
}

/* The provider's message from an error body: error.message, else the body's
 * first bytes as text. */
static void provider_message(const attempt_t *a, char *out, size_t size)
{
	out[0] = '\0';
	if (!a->body.len)
		return;
	json_t *o = json_loadb(a->body.p, a->body.len, 0, NULL);
	const json_t *e = json_object_get(o, "error");
	const char *m = json_string_value(json_object_get(e, "message"));
	if (!m)
		m = json_string_value(e);
	if (!m)
		m = json_string_value(json_object_get(o, "message"));
	if (!m)
		m = json_string_value(json_object_get(o, "detail"));
	if (m) {
		snprintf(out, size, "%.300s", m);
	} else {
		char *t = agent_cap_text(a->body.p, a->body.len, 200);
		if (t) {
			/* Keep it on one line. */
			for (char *p = t; *p; p++)
				if (*p == '\n' || *p == '\r')
					*p = ' ';
			snprintf(out, size, "%s", t);
		}
		free(t);
	}
	json_decref(o);
}

/* Sleeps ms unless a stop comes first.  0, or -1 when stopped. */
static int wait_ms(int64_t ms)
{
	int64_t until = rn_mono_ms() + ms;
	for (;;) {
		if (agent_ctl_stopped())
			return -1;
		int64_t left = until - rn_mono_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { agent_ctl_stop_fd(), POLLIN, 0 };
		poll(&p, 1, left > 1000 ? 1000 : (int)left);
	}
}

agent_chat_rc_t agent_chat_complete(const agent_chat_opts_t *o, const char *body, agent_answer_t *ans,
                                    char *errstr, size_t errstr_size)
{
	char url[2048];
	size_t bl = strlen(o->base_url);
	while (bl > 0 && o->base_url[bl - 1] == '/')
		bl--;
	if (bl > sizeof(url) - 32) {
		snprintf(errstr, errstr_size, "OPENAI_BASE_URL is too long");
		return AGENT_CHAT_ERROR;
	}
	snprintf(url, sizeof(url), "%.*s/chat/completions", (int)bl, o->base_url);

	struct curl_slist *hdrs = NULL;
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	hdrs = curl_slist_append(hdrs, "Accept: text/event-stream");
	/* No 100-continue round trip before each (large) request body. */
	hdrs = curl_slist_append(hdrs, "Expect:");
	char *auth = NULL;
	if (o->api_key && *o->api_key) {
		size_t n = strlen(o->api_key) + 32;
		auth = malloc(n);
		if (auth) {
			snprintf(auth, n, "Authorization: Bearer %s", o->api_key);
			hdrs = curl_slist_append(hdrs, auth);
			/* The slist holds its own copy. */
			explicit_bzero(auth, strlen(auth));
			free(auth);
		}
	}

	agent_chat_rc_t rc = AGENT_CHAT_ERROR;
	for (int attempt_no = 0;; attempt_no++) {
		attempt_t a;
		memset(&a, 0, sizeof(a));
		a.ans = ans;
		a.retry_after_ms = -1;
		rn_dynbuf_init(&a.body, CHAT_BODY_MAX);
		agent_sse_init(&a.sse, CHAT_EVENT_MAX, on_event, &a);
		agent_answer_free(ans);
		agent_answer_init(ans);

		CURL *e = curl_easy_init();
		if (!e) {
			snprintf(errstr, errstr_size, "out of memory");
			agent_sse_free(&a.sse);
			break;
		}
		curl_easy_setopt(e, CURLOPT_URL, url);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, &a);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, &a);
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
		curl_easy_setopt(e, CURLOPT_USERAGENT, "runnel-agent/" RUNNEL_VERSION);
		curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
		/* on_body reads the status (known before the first body byte). */
		a.easy = e;

		char terr[256];
		agent_http_rc_t hr = agent_http_perform(e, o->timeout_ms, terr, sizeof(terr));
		long status = 0;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
		curl_easy_cleanup(e);
		if (hr == AGENT_HTTP_OK && a.is_sse && status < 400 && !a.failed)
			agent_sse_finish(&a.sse);
		agent_sse_free(&a.sse);

		int retryable = 0;
		int64_t delay = -1;
		if (hr == AGENT_HTTP_STOPPED) {
			rc = AGENT_CHAT_STOPPED;
		} else if (hr == AGENT_HTTP_IDLE) {
			snprintf(errstr, errstr_size, "The model sent nothing for %lld s",
			         (long long)((o->timeout_ms + 999) / 1000));
			rc = AGENT_CHAT_TIMEOUT;
		} else if (hr == AGENT_HTTP_FAILED && status == 0) {
			snprintf(errstr, errstr_size, "The model provider could not be reached: %s", terr);
			rc = AGENT_CHAT_ERROR;
			retryable = 1;
		} else if (status == 429 || status >= 500) {
			char pm[400];
			provider_message(&a, pm, sizeof(pm));
			snprintf(errstr, errstr_size, "The model provider answered HTTP %ld%s%s", status, pm[0] ? ": " : "", pm);
			rc = AGENT_CHAT_ERROR;
			retryable = 1;
			delay = a.retry_after_ms;
		} else if (status >= 400 || (status < 200 && status != 0)) {
			char pm[400];
			provider_message(&a, pm, sizeof(pm));
			snprintf(errstr, errstr_size, "The model provider answered HTTP %ld%s%s", status, pm[0] ? ": " : "", pm);
			rc = AGENT_CHAT_ERROR;
		} else if (hr == AGENT_HTTP_FAILED) {
			snprintf(errstr, errstr_size, "The model stream broke off: %s", terr);
			rc = AGENT_CHAT_ERROR;
		} else if (a.failed) {
			snprintf(errstr, errstr_size, "%s", a.errstr);
			rc = AGENT_CHAT_ERROR;
		} else if (!a.is_sse) {
			/* A provider that ignored "stream": one JSON answer. */
			char cerr[512];
			if (!a.body.len || agent_answer_chunk(ans, a.body.p, a.body.len, cerr, sizeof(cerr)) < 0) {
				snprintf(errstr, errstr_size, "%s",
				         a.body.len ? cerr : "the model provider sent an empty answer");
				rc = AGENT_CHAT_ERROR;
			} else {
				rc = AGENT_CHAT_OK;
			}
		} else if (!ans->done && !ans->finish[0]) {
			snprintf(errstr, errstr_size, "The model stream ended before the answer was complete");
			rc = AGENT_CHAT_ERROR;
		} else {
			rc = AGENT_CHAT_OK;
		}
		rn_dynbuf_free(&a.body);
		if (!retryable || attempt_no >= o->retries)
			break;
		if (delay < 0)
			delay = o->backoff_ms << (attempt_no < 20 ? attempt_no : 20);
		if (delay > o->retry_max_ms) {
			/* The provider asks for a longer wait than we would hold the
			 * run for: give up now rather than sleep past it. */
			if (a.retry_after_ms > o->retry_max_ms)
				break;
			delay = o->retry_max_ms;
		}
		agent_emit_log("warn", "%s; retrying in %.1f s (%d of %d)", errstr, (double)delay / 1000.0,
		               attempt_no + 1, o->retries);
		if (wait_ms(delay) < 0) {
			rc = AGENT_CHAT_STOPPED;
			break;
		}
	}
	curl_slist_free_all(hdrs);
	return rc;
}
