/*
 * tests/dispatcher/test_stream.c - the streaming routes with no worker: the
 * test plays the worker (XADD lines and the terminal line) so that the
 * dispatcher's streaming is tested alone.  /stream as NDJSON and SSE,
 * disconnect -> cancel client_closed, events?after=, SSE resume with
 * Last-Event-ID (no gap, no duplicate), heartbeats, and the real curl -N.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <jansson.h>

#include "tests/dispatcher/dtest.h"

static dt_disp_t D;
static redisContext *C;

static char *url(const char *path)
{
	return th_strf("%s%s", D.base, path);
}

static const char *const JSON_CT[] = { "Content-Type: application/json", NULL };
static const char *const SSE_POST[] = { "Content-Type: application/json", "Accept: text/event-stream", NULL };
static const char *const SSE_GET[] = { "Accept: text/event-stream", NULL };

static char *line_n(int i, int last)
{
	if (last)
		return th_strf("{\"type\":\"result\",\"message\":\"done after %d\",\"ts\":%d}", i, 1000 + i);
	if (i % 3 == 1)
		return th_strf("{\"type\":\"step\",\"id\":\"s%d\",\"name\":\"n\",\"status\":\"running\",\"ts\":%d}", i, 1000 + i);
	return th_strf("{\"type\":\"log\",\"level\":\"info\",\"message\":\"line %d \\u00e9\",\"ts\":%d}", i, 1000 + i);
}

typedef struct wait_stream {
	dt_stream_t *s;
	size_t lines;
} wait_stream_t;

static int started(void *arg)
{
	return dt_stream_started(((wait_stream_t *)arg)->s);
}

static int has_lines(void *arg)
{
	wait_stream_t *w = arg;

	return dt_stream_lines(w->s) >= w->lines || w->s->done;
}

static int is_done(void *arg)
{
	return ((wait_stream_t *)arg)->s->done;
}

static char *ctl_reason(const char *run)
{
	redisReply *r = th_cmd(C, "XRANGE runnel:{%s}:ctl - +", run);
	char *out = NULL;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0)
		out = strdup(r->element[r->elements - 1]->element[1]->element[1]->str);
	if (r)
		freeReplyObject(r);
	return out;
}

static int ctl_has(void *arg)
{
	char *m = ctl_reason(arg);
	int ok = !!m;

	free(m);
	return ok;
}

static void test_ndjson(dt_multi_t *m)
{
	dt_stream_t s;
	wait_stream_t w = { &s, 0 };
	char **lines = NULL;
	size_t n = 0;
	size_t expect_len = 0;
	char *expect;
	const int N = 400;

	TH_REQUIRE(dt_stream_open(m, &s, url("/stream"), JSON_CT, dt_job_body("st_ndjson", "\"session\":\"x\"")) == 0);
	TH_REQUIRE(dt_multi_until(m, started, &w, 15000), "no answer");
	TH_CHECK(s.status == 200, "%ld", s.status);
	for (int i = 1; i <= N; i++)
		free(dt_xadd_line(C, "runnel:{st_ndjson}:out", line_n(i, i == N)));
	/* Anything after the terminal line is never sent. */
	free(dt_xadd_line(C, "runnel:{st_ndjson}:out", "{\"type\":\"log\",\"level\":\"info\",\"message\":\"late\",\"ts\":1}"));
	TH_CHECK(dt_multi_until(m, is_done, &w, 15000), "stream did not end after the terminal line");
	TH_CHECK(s.rc == CURLE_OK, "%d", s.rc);
	TH_REQUIRE(th_stream_read_all(C, "runnel:{st_ndjson}:out", &lines, NULL, &n) == 0);
	TH_CHECK(n == (size_t)N + 1);
	for (size_t i = 0; i + 1 < n; i++)
		expect_len += strlen(lines[i]) + 1;
	expect = malloc(expect_len + 1);
	expect[0] = '\0';
	for (size_t i = 0, off = 0; i + 1 < n; i++)
		off += (size_t)snprintf(expect + off, expect_len + 1 - off, "%s\n", lines[i]);
	TH_CHECK(s.rx.len == expect_len && memcmp(s.rx.body, expect, expect_len) == 0,
	         "NDJSON differs from the Redis stream (%zu vs %zu bytes)", s.rx.len, expect_len);
	free(expect);
	th_strv_free(lines, n);
	TH_CHECK(!ctl_has("st_ndjson"), "a finished stream wrote no cancel");
	dt_stream_close(m, &s);
}

/*
 * A terminal line whose type is spelled with a JSON escape is still a
 * result (the worker checks the decoded value and publishes the agent's
 * bytes as they are): the stream must end after it, not wait forever.
 */
static void test_escaped_terminal(dt_multi_t *m)
{
	static const char *const ends[] = {
		"{\"type\":\"\\u0072esult\",\"message\":\"escaped\",\"ts\":1}",
		"{\"type\":\"e\\u0072ror\",\"code\":\"internal\",\"message\":\"escaped\",\"ts\":1}",
	};

	for (int i = 0; i < 2; i++) {
		const char *run = i == 0 ? "st_esc_r" : "st_esc_e";
		dt_stream_t s;
		wait_stream_t w = { &s, 1 };
		dt_resp_t r;

		TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body(run, NULL), -1, 15000) == 0 &&
		           r.status == 202);
		dt_resp_free(&r);
		TH_REQUIRE(dt_stream_open(m, &s, url(th_strf("/v1/runs/%s/events", run)), NULL, NULL) == 0);
		TH_REQUIRE(dt_multi_until(m, started, &w, 15000), "no answer");
		free(dt_xadd_line(C, th_strf("runnel:{%s}:out", run), line_n(1, 0)));
		free(dt_xadd_line(C, th_strf("runnel:{%s}:out", run), ends[i]));
		TH_CHECK(dt_multi_until(m, is_done, &w, 10000), "%s: no end after %s", run, ends[i]);
		TH_CHECK(dt_stream_lines(&s) == 2, "%s: %s", run, s.rx.body);
		dt_stream_close(m, &s);
	}
}

static void test_disconnect_cancels(dt_multi_t *m)
{
	dt_stream_t s;
	wait_stream_t w = { &s, 1 };
	char *reason;

	TH_REQUIRE(dt_stream_open(m, &s, url("/stream"), JSON_CT, dt_job_body("st_close", NULL)) == 0);
	TH_REQUIRE(dt_multi_until(m, started, &w, 15000));
	free(dt_xadd_line(C, "runnel:{st_close}:out", line_n(1, 0)));
	TH_CHECK(dt_multi_until(m, has_lines, &w, 5000));
	TH_CHECK(!ctl_has("st_close"));
	dt_stream_close(m, &s);
	TH_CHECK(th_wait_until(ctl_has, "st_close", 5000), "no cancel after the caller left");
	reason = ctl_reason("st_close");
	TH_CHECK(th_streq(reason, "{\"type\":\"cancel\",\"reason\":\"client_closed\"}"), "%s", reason);
	free(reason);
}

/* Splits an SSE body into (id, event, data) triples; checks the format. */
static size_t sse_parse(const char *body, char ids[][48], char events[][16], char **datas, size_t max)
{
	size_t n = 0;
	const char *p = body;

	while (*p != '\0' && n < max) {
		const char *end = strstr(p, "\n\n");
		char id[48] = "", ev[16] = "";
		const char *data;

		if (!end)
			break;
		if (strncmp(p, ": heartbeat", 11) == 0) {
			p = end + 2;
			continue;
		}
		TH_CHECK(sscanf(p, "id: %47[^\n]\nevent: %15[^\n]\n", id, ev) == 2, "bad SSE event %.80s", p);
		data = strstr(p, "data: ");
		TH_CHECK(data && data < end);
		if (!data || data > end)
			break;
		snprintf(ids[n], 48, "%s", id);
		snprintf(events[n], 16, "%s", ev);
		datas[n] = strndup(data + 6, (size_t)(end - data - 6));
		n++;
		p = end + 2;
	}
	return n;
}

static void test_sse_stream(dt_multi_t *m)
{
	dt_stream_t s;
	wait_stream_t w = { &s, 0 };
	char **lines = NULL, **ids = NULL, sids[8][48], evs[8][16], *datas[8];
	size_t n = 0, got;

	TH_REQUIRE(dt_stream_open(m, &s, url("/stream"), SSE_POST, dt_job_body("st_sse", NULL)) == 0);
	TH_REQUIRE(dt_multi_until(m, started, &w, 15000));
	for (int i = 1; i <= 5; i++)
		free(dt_xadd_line(C, "runnel:{st_sse}:out", line_n(i, i == 5)));
	TH_CHECK(dt_multi_until(m, is_done, &w, 10000));
	TH_REQUIRE(th_stream_read_all(C, "runnel:{st_sse}:out", &lines, &ids, &n) == 0 && n == 5);
	got = sse_parse(s.rx.body, sids, evs, datas, 8);
	TH_CHECK(got == 5, "%zu events: %s", got, s.rx.body);
	for (size_t i = 0; i < got && i < n; i++) {
		TH_CHECK(strcmp(sids[i], ids[i]) == 0, "id %s vs %s", sids[i], ids[i]);
		TH_CHECK(strcmp(datas[i], lines[i]) == 0);
		TH_CHECK(strcmp(evs[i], i == 4 ? "result" : (i % 3 == 0 ? "step" : "log")) == 0, "%s", evs[i]);
		free(datas[i]);
	}
	th_strv_free(lines, n);
	th_strv_free(ids, n);
	dt_stream_close(m, &s);
}

/*
 * A line may hold a raw CR as JSON whitespace.  In SSE a CR alone ends a
 * field line, so it must start a new data: line rather than go out raw
 * (EventSource would read the rest as a field of its own and lose it).
 */
static void test_sse_cr(dt_multi_t *m)
{
	dt_stream_t s;
	wait_stream_t w = { &s, 0 };
	dt_resp_t r;

	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("st_sse_cr", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);
	TH_REQUIRE(dt_stream_open(m, &s, url("/v1/runs/st_sse_cr/events"), SSE_GET, NULL) == 0);
	TH_REQUIRE(dt_multi_until(m, started, &w, 15000));
	free(dt_xadd_line(C, "runnel:{st_sse_cr}:out", "{\"type\":\"log\",\r\"level\":\"info\",\r\n\"message\":\"cr\",\"ts\":1}"));
	free(dt_xadd_line(C, "runnel:{st_sse_cr}:out", line_n(2, 1)));
	TH_CHECK(dt_multi_until(m, is_done, &w, 10000));
	TH_CHECK(!strchr(s.rx.body, '\r'), "a raw CR in the SSE answer: %s", s.rx.body);
	TH_CHECK(strstr(s.rx.body, "event: log\ndata: {\"type\":\"log\",\ndata: \"level\":\"info\",\ndata: \"message\":\"cr\",\"ts\":1}\n\n"),
	         "%s", s.rx.body);
	dt_stream_close(m, &s);
}

static void test_resume(dt_multi_t *m)
{
	dt_stream_t a, b;
	wait_stream_t wa = { &a, 3 }, wb = { &b, 0 };
	char sids[16][48], evs[16][16], *datas[16], hdr[96];
	char **lines = NULL, **ids = NULL;
	size_t got, n = 0;
	dt_resp_t r;

	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("st_resume", NULL), -1, 15000) == 0);
	TH_REQUIRE(r.status == 202, "%ld %s", r.status, r.body);
	dt_resp_free(&r);

	TH_REQUIRE(dt_stream_open(m, &a, url("/v1/runs/st_resume/events"), SSE_GET, NULL) == 0);
	for (int i = 1; i <= 3; i++)
		free(dt_xadd_line(C, "runnel:{st_resume}:out", line_n(i, 0)));
	/* Each SSE event ends with a blank line: 3 events = 12 newlines. */
	wa.lines = 12;
	TH_CHECK(dt_multi_until(m, has_lines, &wa, 10000));
	got = sse_parse(a.rx.body, sids, evs, datas, 16);
	TH_REQUIRE(got == 3, "%zu", got);
	for (size_t i = 0; i < got; i++)
		free(datas[i]);
	dt_stream_close(m, &a);
	/* Written while nobody listens. */
	for (int i = 4; i <= 5; i++)
		free(dt_xadd_line(C, "runnel:{st_resume}:out", line_n(i, 0)));
	snprintf(hdr, sizeof(hdr), "Last-Event-ID: %s", sids[2]);
	TH_REQUIRE(dt_stream_open(m, &b, url("/v1/runs/st_resume/events?after=0"),
	                          (const char *const[]){ "Accept: text/event-stream", hdr, NULL }, NULL) == 0);
	wb.lines = 8;
	TH_CHECK(dt_multi_until(m, has_lines, &wb, 10000));
	for (int i = 6; i <= 8; i++)
		free(dt_xadd_line(C, "runnel:{st_resume}:out", line_n(i, i == 8)));
	TH_CHECK(dt_multi_until(m, is_done, &wb, 10000));
	TH_REQUIRE(th_stream_read_all(C, "runnel:{st_resume}:out", &lines, &ids, &n) == 0 && n == 8);
	got = sse_parse(b.rx.body, sids, evs, datas, 16);
	TH_CHECK(got == 5, "resumed stream got %zu events, want 5", got);
	for (size_t i = 0; i < got; i++) {
		TH_CHECK(strcmp(sids[i], ids[i + 3]) == 0 && strcmp(datas[i], lines[i + 3]) == 0, "event %zu", i);
		free(datas[i]);
	}
	dt_stream_close(m, &b);
	TH_CHECK(!ctl_has("st_resume"), "closing an events tail does not cancel");

	/* events?after=ID (NDJSON) on the finished run, and after the end. */
	{
		char *u = url(th_strf("/v1/runs/st_resume/events?after=%s", ids[5]));
		char *want = th_strf("%s\n%s\n", lines[6], lines[7]);

		TH_CHECK(dt_http(&r, "GET", u, NULL, NULL, 0, 10000) == 0 && r.status == 200);
		TH_CHECK(strcmp(r.body, want) == 0, "%s", r.body);
		dt_resp_free(&r);
		u = url(th_strf("/v1/runs/st_resume/events?after=%s", ids[7]));
		TH_CHECK(dt_http(&r, "GET", u, NULL, NULL, 0, 5000) == 0 && r.status == 200 && r.len == 0,
		         "after the terminal line: %ld %s", r.status, r.body);
		TH_CHECK(r.secs < 2.0, "answered at once (%.2fs)", r.secs);
		dt_resp_free(&r);
		TH_CHECK(dt_http(&r, "GET", url("/v1/runs/st_resume/events"), NULL, NULL, 0, 10000) == 0);
		TH_CHECK(r.status == 200 && dt_header(&r, "Content-Type", hdr, sizeof(hdr)) &&
		                 strcmp(hdr, "application/x-ndjson") == 0,
		         "%s", hdr);
		{
			size_t lines_seen = 0;

			for (size_t i = 0; i < r.len; i++)
				lines_seen += r.body[i] == '\n';
			TH_CHECK(lines_seen == 8);
		}
		dt_resp_free(&r);
	}
	th_strv_free(lines, n);
	th_strv_free(ids, n);
}


/*
 * A caller that stops reading while its run writes ~8 MB: the dispatcher
 * pauses it (bounded memory) instead of buffering without end, another
 * caller keeps getting lines meanwhile, and once the slow caller reads
 * again it gets every line, in order, exactly once.
 */
static void test_slow_caller(dt_multi_t *m)
{
	const int N = 4000;
	char pad[2001];
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), rcvbuf = 16384;
	char *req, *buf;
	size_t cap = 16u << 20, len = 0;
	dt_resp_t r;
	dt_stream_t other;
	wait_stream_t wo = { &other, 1 };
	int64_t end;

	memset(pad, 'x', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("st_slow", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);
	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("st_other", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)D.port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	TH_REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	req = th_strf("GET /v1/runs/st_slow/events HTTP/1.1\r\nHost: t\r\n\r\n");
	TH_REQUIRE(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
	TH_REQUIRE(dt_stream_open(m, &other, url("/v1/runs/st_other/events"), NULL, NULL) == 0);
	dt_multi_pump(m, 200);
	for (int i = 1; i <= N && th_cluster_mode(); i++) {
		/* A cluster: one by one through the router, with a wake-up
		 * every 64 lines as the worker sends one per batch. */
		redisReply *x = th_cmd(C, "XADD runnel:{st_slow}:out * line {\"type\":\"log\",\"level\":\"info\",\"message\":\"%s\",\"seq\":%d,\"ts\":1}", pad, i);

		TH_REQUIRE(x && x->type == REDIS_REPLY_STRING);
		freeReplyObject(x);
		if (i % 64 == 0 || i == N) {
			x = th_cmd(C, "SPUBLISH runnel:{st_slow}:wake 1");
			if (x)
				freeReplyObject(x);
		}
	}
	for (int i = 1; i <= N && !th_cluster_mode(); i += 100) {
		for (int j = i; j < i + 100; j++)
			redisAppendCommand(C, "XADD runnel:{st_slow}:out * line {\"type\":\"log\",\"level\":\"info\",\"message\":\"%s\",\"seq\":%d,\"ts\":1}",
			                   pad, j);
		for (int j = i; j < i + 100; j++) {
			redisReply *x = NULL;

			TH_REQUIRE(redisGetReply(C, (void **)&x) == REDIS_OK);
			freeReplyObject(x);
		}
	}
	free(dt_xadd_line(C, "runnel:{st_slow}:out", "{\"type\":\"result\",\"message\":\"done\",\"seq\":0,\"ts\":1}"));
	/* The other run is not held up by the slow caller. */
	free(dt_xadd_line(C, "runnel:{st_other}:out", "{\"type\":\"log\",\"level\":\"info\",\"message\":\"hi\",\"ts\":1}"));
	TH_CHECK(dt_multi_until(m, has_lines, &wo, 5000), "another caller stalled behind a slow one");
	dt_stream_close(m, &other);
	TH_CHECK(dt_http(&r, "GET", url("/metrics"), NULL, NULL, 0, 5000) == 0);
	TH_CHECK(!strstr(r.body, "runnel_dispatcher_stream_pauses_total 0\n"), "the slow caller was never paused");
	dt_resp_free(&r);

	/* Now read everything. */
	buf = malloc(cap);
	TH_REQUIRE(buf);
	for (end = th_now_ms() + 30000; th_now_ms() < end && len < cap;) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t got;

		if (poll(&p, 1, 200) <= 0)
			continue;
		got = read(fd, buf + len, cap - len);
		if (got <= 0)
			break;
		len += (size_t)got;
		if (len >= 5 && memcmp(buf + len - 5, "0\r\n\r\n", 5) == 0)
			break;
	}
	close(fd);
	{
		int next = 1, ok = 1;
		const char *p = buf, *e = buf + len;

		while ((p = memmem(p, (size_t)(e - p), "\"seq\":", 6))) {
			int v = (int)strtol(p + 6, NULL, 10);

			if (v == 0 && next == N + 1) {
				next = -1;
				break;
			}
			if (v != next) {
				ok = 0;
				break;
			}
			next++;
			p += 6;
		}
		TH_CHECK(ok && next == -1, "slow caller: lines out of order or missing (next %d, %zu bytes)", next, len);
	}
	free(buf);
}

static long rss_kb(pid_t pid)
{
	char *status = th_file_read(th_strf("/proc/%d/status", (int)pid), NULL);
	const char *p = status ? strstr(status, "VmRSS:") : NULL;
	long kb = p ? strtol(p + 6, NULL, 10) : -1;

	free(status);
	return kb;
}

/* Reads from fd into buf (at most cap - 1 bytes, from *len on) until the
 * bytes read hold stop (NULL: until the peer closes) or timeout_ms pass. */
static void read_until(int fd, char *buf, size_t cap, size_t *len, const char *stop, int timeout_ms)
{
	for (int64_t end = th_now_ms() + timeout_ms;
	     th_now_ms() < end && !(stop && memmem(buf, *len, stop, strlen(stop)));) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t got;

		if (poll(&p, 1, 100) <= 0)
			continue;
		got = read(fd, buf + *len, cap - 1 - *len);
		if (got <= 0)
			break;
		*len += (size_t)got;
	}
}

/*
 * A caller that keeps sending bytes after its request while its answer
 * streams: the dispatcher discards them instead of buffering them without
 * bound, the stream goes on, and the answer says Connection: close.
 */
static void test_flooding_caller(void)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t junk_len = 1u << 16, sent = 0, total = 96u << 20, len = 0;
	char *junk = malloc(junk_len), buf[65536];
	char *req = th_strf("GET /v1/runs/st_flood/events HTTP/1.1\r\nHost: t\r\n\r\n");
	long before, after;
	dt_resp_t r;
	int64_t end;

	TH_REQUIRE(junk);
	memset(junk, 'j', junk_len);
	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("st_flood", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)D.port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	TH_REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	TH_REQUIRE(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
	/* The answer's head first: the stream is open. */
	read_until(fd, buf, sizeof(buf), &len, "\r\n\r\n", 5000);
	TH_REQUIRE(memmem(buf, len, "\r\n\r\n", 4), "no answer head");
	TH_CHECK(memmem(buf, len, "Connection: close\r\n", 19), "%.*s", (int)len, buf);
	before = rss_kb(D.pid);
	for (end = th_now_ms() + 20000; sent < total && th_now_ms() < end;) {
		struct pollfd p = { fd, POLLOUT, 0 };
		ssize_t w;

		if (poll(&p, 1, 100) <= 0)
			continue;
		w = write(fd, junk, junk_len);
		if (w <= 0)
			break;
		sent += (size_t)w;
	}
	TH_CHECK(sent == total, "sent %zu of %zu bytes", sent, total);
	after = rss_kb(D.pid);
	TH_CHECK(before > 0 && after - before < 24 * 1024, "the dispatcher grew by %ld KiB while a caller sent %zu MiB",
	         after - before, sent >> 20);
	/* The stream still works and ends after the terminal line. */
	free(dt_xadd_line(C, "runnel:{st_flood}:out", "{\"type\":\"result\",\"message\":\"flood over\",\"ts\":1}"));
	len = 0;
	read_until(fd, buf, sizeof(buf), &len, NULL, 10000);
	buf[len] = '\0';
	TH_CHECK(strstr(buf, "flood over") && strstr(buf, "0\r\n\r\n"), "got %s", buf);
	close(fd);
	free(junk);
}

static void test_heartbeat(dt_multi_t *m)
{
	dt_stream_t s;
	dt_resp_t r;

	TH_REQUIRE(dt_http(&r, "POST", url("/v1/runs"), JSON_CT, dt_job_body("st_idle", NULL), -1, 15000) == 0 &&
	           r.status == 202);
	dt_resp_free(&r);
	TH_REQUIRE(dt_stream_open(m, &s, url("/v1/runs/st_idle/events"), SSE_GET, NULL) == 0);
	dt_multi_pump(m, 2500);
	TH_CHECK(strstr(s.rx.body, ": heartbeat\n\n"), "no heartbeat in %s", s.rx.body);
	TH_CHECK(!s.done);
	dt_stream_close(m, &s);
}

typedef struct state_arg {
	const char *run;
} state_arg_t;

static int state_exists(void *arg)
{
	redisReply *r = th_cmd(C, "EXISTS runnel:{%s}:state", ((state_arg_t *)arg)->run);
	int ok = r && r->integer == 1;

	if (r)
		freeReplyObject(r);
	return ok;
}

static void test_curl_binary(void)
{
	const char *out = th_strf("%s/curl.out", th_tmpdir());
	char *argv[] = { "curl", "-sS", "-N", "-X", "POST", url("/stream"), "-H", "Content-Type: application/json",
		         "-d", dt_job_body("st_curl", NULL), "-o", (char *)out, NULL };
	state_arg_t sa = { "st_curl" };
	pid_t pid = th_spawn(argv, NULL, th_strf("%s/curl.log", th_tmpdir()));
	char *body, *want;
	int st = -1;

	TH_REQUIRE(pid > 0);
	TH_REQUIRE(th_wait_until(state_exists, &sa, 10000));
	for (int i = 1; i <= 3; i++)
		free(dt_xadd_line(C, "runnel:{st_curl}:out", line_n(i, i == 3)));
	TH_CHECK(th_wait_exit(pid, 10000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "curl status %d", st);
	body = th_file_read(out, NULL);
	want = th_strf("%s\n%s\n%s\n", line_n(1, 0), line_n(2, 0), line_n(3, 1));
	TH_CHECK(body && strcmp(body, want) == 0, "curl -N got %s", body);
	free(body);
}

/*
 * A cursor past the end of the stream (found by the property tests: after=
 * a time far ahead, the run still queued): the lines written next sort
 * before it, the terminal line too, and the caller used to wait forever.
 * It now gets what comes next and the stream ends after the terminal line.
 */
static void test_cursor_past_the_end(dt_multi_t *m)
{
	const char *const modes[][2] = { { "st_future_nd", NULL }, { "st_future_sse", "Accept: text/event-stream" } };

	for (size_t i = 0; i < 2; i++) {
		const char *run = modes[i][0];
		const char *hdrs[] = { modes[i][1], NULL };
		dt_stream_t s;
		wait_stream_t w = { &s, 1 };
		redisReply *r = th_cmd(C, "HSET runnel:{%s}:state status queued enqueued_at 1", run);

		TH_REQUIRE(r);
		freeReplyObject(r);
		TH_REQUIRE(dt_stream_open(m, &s, url(th_strf("/v1/runs/%s/events?after=9999999999999-0", run)), hdrs,
		                          NULL) == 0);
		TH_REQUIRE(dt_multi_until(m, started, &w, 15000), "no answer");
		TH_CHECK(s.status == 200, "%ld", s.status);
		free(dt_xadd_line(C, th_strf("runnel:{%s}:out", run), "{\"type\":\"log\",\"level\":\"info\",\"message\":\"one\"}"));
		free(dt_xadd_line(C, th_strf("runnel:{%s}:out", run), "{\"type\":\"result\",\"message\":\"over\"}"));
		TH_CHECK(dt_multi_until(m, is_done, &w, 10000), "%s: the stream did not end after the terminal line", run);
		TH_CHECK(strstr(s.rx.body, "\"one\"") && strstr(s.rx.body, "\"over\""), "%s", s.rx.body);
		dt_stream_close(m, &s);
	}
	/* Past the end of a finished run: empty, at once (as before). */
	{
		dt_stream_t s;
		wait_stream_t w = { &s, 1 };

		TH_REQUIRE(dt_stream_open(m, &s, url("/v1/runs/st_future_nd/events?after=9999999999999-0"), NULL, NULL) == 0);
		TH_CHECK(dt_multi_until(m, is_done, &w, 5000), "did not end at once");
		TH_CHECK(s.status == 200 && s.rx.len == 0, "%ld %s", s.status, s.rx.body);
		dt_stream_close(m, &s);
	}
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	dt_multi_t m;

	dt_servers_start("dispatcher_stream", &red, &k, 0, &C);
	/* A small ASan quarantine, so that the dispatcher's RSS shows what it
	 * holds rather than what it freed recently. */
	TH_REQUIRE(dt_disp_start(&D, &red, &k, (const char *const[]){ "RUNNEL_HEARTBEAT_SEC=1", th_strf("ASAN_OPTIONS=%s%squarantine_size_mb=4", getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "", getenv("ASAN_OPTIONS") ? ":" : ""), NULL }) == 0);
	TH_REQUIRE(dt_multi_init(&m) == 0);

	test_ndjson(&m);
	test_escaped_terminal(&m);
	test_disconnect_cancels(&m);
	test_sse_stream(&m);
	test_sse_cr(&m);
	test_resume(&m);
	test_cursor_past_the_end(&m);
	test_heartbeat(&m);
	test_slow_caller(&m);
	test_flooding_caller();
	test_curl_binary();

	dt_multi_cleanup(&m);
	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	dt_servers_stop(C, &k);
	return th_done();
}
