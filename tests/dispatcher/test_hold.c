/*
 * tests/dispatcher/test_hold.c - the dispatcher is not open by default and
 * cannot be held by slow callers (SPEC §7):
 *   - it refuses to start listening beyond loopback without a token (exit
 *     2, the exact message), unless --insecure-no-auth says so;
 *   - 2,000 connections that never finish their request head (and one
 *     that trickles a byte at a time) do not keep a normal request from
 *     being answered, and each is closed once the head deadline passed,
 *     never before; so is one whose head declares a body far over the
 *     cap (its 413 waits for a body that never comes);
 *   - at the connection cap a new caller still gets in: the oldest idle
 *     connection makes room, and the connection count stays at the cap;
 *     when every connection is busy (streams), the new one gets a 503 and
 *     is closed, and callers get in again once the streams end.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/dispatcher/dtest.h"

#define SLOW        2000
#define HEAD_MS     1500
#define REFUSAL_FMT "runnel-dispatcher: --listen/RUNNEL_LISTEN: %s is not a loopback address and " \
	            "RUNNEL_API_TOKEN is not set; set a token, or --insecure-no-auth/RUNNEL_INSECURE_NO_AUTH " \
	            "to serve every route without one\n"

static void test_refuses_open_listener(void)
{
	static const char *const listens[] = { "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.invalid:0", ":0" };

	for (size_t i = 0; i < sizeof(listens) / sizeof(listens[0]); i++) {
		char *argv[] = { DISPATCHER_BIN, NULL };
		const char *env[] = { th_strf("RUNNEL_LISTEN=%s", listens[i]), "RUNNEL_API_TOKEN=", NULL };
		char *log = th_strf("%s/refused-%zu.log", th_tmpdir(), i);
		int rc = th_run(argv, env, log, 10000);
		size_t len;
		char *out = th_file_read(log, &len);

		TH_CHECK(rc == 2, "%s: exit %d", listens[i], rc);
		TH_CHECK(out && th_streq(out, th_strf(REFUSAL_FMT, listens[i])), "%s: %s", listens[i],
		         out ? out : "(no output)");
		free(out);
	}
	/* The flag form too. */
	{
		char *argv[] = { DISPATCHER_BIN, "--listen", "0.0.0.0:0", NULL };
		char *log = th_strf("%s/refused-flag.log", th_tmpdir());

		TH_CHECK(th_run(argv, NULL, log, 10000) == 2, "--listen 0.0.0.0:0");
		TH_CHECK(th_file_contains(log, "is not a loopback address"), "the flag is refused too");
	}
}

/* On purpose: --insecure-no-auth starts it on 0.0.0.0 (an ephemeral port,
 * stopped at once). */
static void test_insecure_on_purpose(const th_redis_t *red, const th_kafka_t *k)
{
	char *argv[] = { DISPATCHER_BIN, "--insecure-no-auth", NULL };
	const char *env[] = { "RUNNEL_LISTEN=0.0.0.0:0", th_strf("RUNNEL_REDIS_URL=%s", red->url),
		              th_strf("RUNNEL_KAFKA_BROKERS=%s", k->bootstrap), NULL };
	char *log = th_strf("%s/insecure.log", th_tmpdir());
	pid_t pid = th_spawn(argv, env, log);
	int64_t deadline = th_now_ms() + 10000;

	TH_REQUIRE(pid > 0, "spawn");
	while (th_now_ms() < deadline && !th_file_contains(log, "\"event\":\"listening\""))
		usleep(20000);
	TH_CHECK(th_file_contains(log, "auth off"), "it started, without auth, because it was told to");
	TH_CHECK(th_stop(pid, 10000) == 0, "stopped");
}

typedef struct slow {
	int fd;
	int64_t opened_ms;
	int64_t closed_ms; /* 0 while open */
} slow_t;

static slow_t S[SLOW + 2];

/* Notes every slow connection the server has closed (EOF or reset). */
static int all_closed(void *arg)
{
	int n = *(int *)arg, open = 0;
	char buf[256];

	for (int i = 0; i < n; i++) {
		if (S[i].closed_ms)
			continue;
		struct pollfd p = { S[i].fd, POLLIN, 0 };

		if (poll(&p, 1, 0) == 1) {
			ssize_t r = recv(S[i].fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (r == 0 || (r < 0 && errno != EAGAIN)) {
				S[i].closed_ms = th_now_ms();
				continue;
			}
		}
		open++;
	}
	return open == 0;
}

static long metric(const dt_disp_t *d, const char *name)
{
	dt_resp_t r;
	long v = -1;

	if (dt_http(&r, "GET", th_strf("%s/metrics", d->base), NULL, NULL, 0, 10000) == 0 && r.status == 200) {
		const char *p = strstr(r.body, th_strf("\n%s ", name));

		if (p)
			v = strtol(p + strlen(name) + 2, NULL, 10);
	}
	dt_resp_free(&r);
	return v;
}

static void test_slow_connections(const th_redis_t *red, const th_kafka_t *k)
{
	dt_disp_t d;
	dt_resp_t r;
	int n = 0;

	TH_REQUIRE(dt_disp_start(&d, red, k, (const char *const[]){ th_strf("RUNNEL_HEAD_TIMEOUT_MS=%d", HEAD_MS), NULL }) == 0,
	           "dispatcher");
	/* Half a request head each, never finished; the last one trickles. */
	for (; n < SLOW; n++) {
		S[n].fd = th_dial(d.port);
		if (S[n].fd < 0)
			break;
		S[n].opened_ms = th_now_ms();
		TH_CHECK(th_send_all(S[n].fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n", 33) == 0);
	}
	TH_CHECK(n == SLOW, "opened %d slow connections", n);
	int64_t t0 = th_now_ms();

	TH_CHECK(dt_http(&r, "GET", th_strf("%s/healthz", d.base), NULL, NULL, 0, 5000) == 0 && r.status == 200,
	         "a normal request beside %d slow ones", n);
	fprintf(stderr, "# a normal request beside %d slow connections answered in %lld ms\n", n,
	        (long long)(th_now_ms() - t0));
	dt_resp_free(&r);
	/* A head that declares a body far over --max-body, and then a little
	 * of it: the 413 waits for the body (so a caller still sending reads
	 * it rather than a reset), but the deadline still closes the wait. */
	S[n].fd = th_dial(d.port);
	S[n].opened_ms = th_now_ms();
	TH_REQUIRE(S[n].fd >= 0, "declared body");
	{
		static const char head[] = "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		                           "Content-Length: 10000000000\r\n\r\n{\"prompt\":\"";

		TH_CHECK(th_send_all(S[n].fd, head, sizeof(head) - 1) == 0);
	}
	n++;
	S[n].fd = th_dial(d.port);
	S[n].opened_ms = th_now_ms();
	TH_REQUIRE(S[n].fd >= 0, "trickler");
	n++;
	{
		/* The trickler sends a byte every 200 ms, an idle timeout's
		 * way to stay open for ever. */
		const char *head = "GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
		int64_t until = th_now_ms() + HEAD_MS + 3000;

		for (size_t i = 0; th_now_ms() < until && head[i] != '\0'; i++) {
			if (send(S[n - 1].fd, head + i, 1, MSG_NOSIGNAL) != 1)
				break;
			if (all_closed(&n))
				break;
			usleep(200 * 1000);
		}
	}
	TH_CHECK(th_wait_until(all_closed, &n, HEAD_MS + 15000), "every slow connection closed");
	int early = 0;
	int64_t latest = 0;

	for (int i = 0; i < n; i++) {
		int64_t held = S[i].closed_ms - S[i].opened_ms;

		if (S[i].closed_ms && held < HEAD_MS)
			early++;
		if (held > latest)
			latest = held;
		close(S[i].fd);
	}
	TH_CHECK(early == 0, "%d connections closed before the %d ms deadline", early, HEAD_MS);
	fprintf(stderr, "# %d slow connections closed; the longest held %lld ms (deadline %d ms)\n", n,
	        (long long)latest, HEAD_MS);
	TH_CHECK(metric(&d, "runnel_dispatcher_connections_timed_out_total") >= SLOW + 2, "counted");
	TH_CHECK(dt_disp_stop(&d), "stopped cleanly");
}

static void test_cap(const th_redis_t *red, const th_kafka_t *k)
{
	dt_disp_t d;
	dt_resp_t r;
	int fds[100];

	TH_REQUIRE(dt_disp_start(&d, red, k, (const char *const[]){ "RUNNEL_MAX_CONNECTIONS=64", NULL }) == 0, "dispatcher");
	for (int i = 0; i < 100; i++) {
		fds[i] = th_dial(d.port);
		TH_CHECK(fds[i] >= 0 && th_send_all(fds[i], "GET / HTTP/1.1\r\n", 16) == 0, "slow %d", i);
	}
	TH_CHECK(dt_http(&r, "GET", th_strf("%s/healthz", d.base), NULL, NULL, 0, 5000) == 0 && r.status == 200,
	         "a normal request at the cap");
	dt_resp_free(&r);
	long open = metric(&d, "runnel_dispatcher_connections");
	long evicted = metric(&d, "runnel_dispatcher_connections_evicted_total");

	fprintf(stderr, "# at a cap of 64: %ld open, %ld evicted\n", open, evicted);
	TH_CHECK(open > 0 && open <= 64, "open connections %ld, cap 64", open);
	TH_CHECK(evicted >= 100 - 64, "the oldest idle ones made room: %ld", evicted);
	for (int i = 0; i < 100; i++)
		close(fds[i]);
	TH_CHECK(dt_disp_stop(&d), "stopped cleanly");
}

/* Reads from fd until want appears or the peer closes (2 s at most); what
 * arrived. */
static char *read_some(int fd, const char *want)
{
	static char buf[4096];
	size_t got = 0;
	int64_t deadline = th_now_ms() + 5000;

	buf[0] = '\0';
	while (got < sizeof(buf) - 1 && th_now_ms() < deadline && !strstr(buf, want)) {
		struct pollfd p = { fd, POLLIN, 0 };

		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);

		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = '\0';
	}
	return buf;
}

static int healthz_ok(void *arg)
{
	const dt_disp_t *d = arg;
	dt_resp_t r;
	int ok = dt_http(&r, "GET", th_strf("%s/healthz", d->base), NULL, NULL, 0, 2000) == 0 && r.status == 200;

	dt_resp_free(&r);
	return ok;
}

static void test_cap_all_busy(const th_redis_t *red, const th_kafka_t *k)
{
	dt_disp_t d;
	dt_resp_t r;
	int fds[16], over;

	TH_REQUIRE(dt_disp_start(&d, red, k, (const char *const[]){ "RUNNEL_MAX_CONNECTIONS=16", NULL }) == 0, "dispatcher");
	TH_REQUIRE(dt_http(&r, "POST", th_strf("%s/v1/runs", d.base), (const char *const[]){ "Content-Type: application/json", NULL },
	                   dt_job_body("hold_busy", NULL), -1, 15000) == 0 &&
	                   r.status == 202,
	           "a run to follow");
	dt_resp_free(&r);
	/* Sixteen callers following the run: every connection is busy. */
	for (int i = 0; i < 16; i++) {
		const char *req = "GET /v1/runs/hold_busy/events HTTP/1.1\r\nHost: x\r\n\r\n";

		fds[i] = th_dial(d.port);
		TH_REQUIRE(fds[i] >= 0 && th_send_all(fds[i], req, strlen(req)) == 0, "follower %d", i);
		TH_CHECK(strncmp(read_some(fds[i], "\r\n\r\n"), "HTTP/1.1 200", 12) == 0, "follower %d streams", i);
	}
	over = th_dial(d.port);
	TH_REQUIRE(over >= 0, "one more");
	TH_CHECK(th_send_all(over, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34) == 0);
	const char *ans = read_some(over, "retry shortly\"}}\n");

	TH_CHECK(strncmp(ans, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0 &&
	                 strstr(ans, "{\"error\":{\"code\":\"overloaded\",\"message\":\"too many connections; retry shortly\"}}\n"),
	         "the connection over the cap: %s", ans);
	close(over);
	/* The followers still stream; once they leave, callers get in again. */
	for (int i = 0; i < 16; i++)
		close(fds[i]);
	TH_CHECK(th_wait_until(healthz_ok, &d, 10000), "a normal request after the streams ended");
	TH_CHECK(metric(&d, "runnel_dispatcher_connections_refused_total") >= 1, "refusals counted");
	TH_CHECK(dt_disp_stop(&d), "stopped cleanly");
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	redisContext *c;
	struct rlimit rl;

	dt_servers_start("dispatcher_hold", &red, &k, 1, &c);
	/* Two ends of 2,000 loopback connections in this process and the
	 * dispatcher: raise the soft limit to what is allowed. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	TH_REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= SLOW + 200, "RLIMIT_NOFILE %llu",
	           (unsigned long long)rl.rlim_cur);
	test_refuses_open_listener();
	test_insecure_on_purpose(&red, &k);
	test_slow_connections(&red, &k);
	test_cap(&red, &k);
	test_cap_all_busy(&red, &k);
	dt_servers_stop(c, &k);
	return th_done();
}
