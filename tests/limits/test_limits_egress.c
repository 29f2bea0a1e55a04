/*
 * tests/limits/test_limits_egress.c - the egress policies end to end: a
 * real runnel-worker (egress policy `full`, allowlist 127.0.0.1:A), real
 * bwrap, curl inside the sandbox, and two loopback HTTP servers A and B on
 * the host.
 *   allowlist: A answers through the proxy, B is refused (403 and a log
 *              line naming it), curl https://A goes through CONNECT (A sees
 *              a TLS ClientHello), a direct connection to B fails;
 *   none:      nothing answers;
 *   full:      both answer.
 */
#include "tests/worker/wtest.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static wt_t T;

/* A loopback HTTP server that records what reaches it. */
typedef struct srv {
	int lfd;
	int port;
	pthread_t thread;
	pthread_mutex_t mu;
	char seen[8192]; /* first line of each request, or "TLS" */
	int stop;
} srv_t;

static void *srv_main(void *arg)
{
	srv_t *s = arg;
	for (;;) {
		struct pollfd p = { s->lfd, POLLIN, 0 };
		if (poll(&p, 1, 200) <= 0) {
			if (s->stop)
				return NULL;
			continue;
		}
		int c = accept(s->lfd, NULL, NULL);
		if (c < 0)
			continue;
		char buf[2048];
		size_t got = 0;
		int64_t deadline = th_now_ms() + 3000;
		while (got < sizeof(buf) - 1 && th_now_ms() < deadline) {
			struct pollfd q = { c, POLLIN, 0 };
			if (poll(&q, 1, 100) <= 0)
				continue;
			ssize_t n = recv(c, buf + got, sizeof(buf) - 1 - got, 0);
			if (n <= 0)
				break;
			got += (size_t)n;
			buf[got] = '\0';
			if ((unsigned char)buf[0] == 0x16 || strstr(buf, "\r\n\r\n"))
				break;
		}
		buf[got] = '\0';
		pthread_mutex_lock(&s->mu);
		size_t l = strlen(s->seen);
		if (got && (unsigned char)buf[0] == 0x16) {
			snprintf(s->seen + l, sizeof(s->seen) - l, "TLS\n");
		} else {
			int closing = !!strstr(buf, "\r\nConnection: close\r\n");
			char *eol = strstr(buf, "\r\n");
			if (eol)
				*eol = '\0';
			snprintf(s->seen + l, sizeof(s->seen) - l, "%s%s\n", buf, closing ? " (close)" : "");
		}
		pthread_mutex_unlock(&s->mu);
		if (got && (unsigned char)buf[0] != 0x16) {
			static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
			ssize_t w = send(c, ans, sizeof(ans) - 1, MSG_NOSIGNAL);
			(void)w;
		}
		close(c);
	}
}

static void srv_start(srv_t *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->lfd = th_listen_loopback(16, &s->port);
	TH_REQUIRE(s->lfd >= 0, "test server");
	TH_REQUIRE(pthread_create(&s->thread, NULL, srv_main, s) == 0, "server thread");
}

static void srv_stop(srv_t *s)
{
	s->stop = 1;
	pthread_join(s->thread, NULL);
	close(s->lfd);
}

static int srv_saw(srv_t *s, const char *needle)
{
	pthread_mutex_lock(&s->mu);
	int r = !!strstr(s->seen, needle);
	pthread_mutex_unlock(&s->mu);
	return r;
}

static srv_t A, B;

/* What the sandbox tries; $1 = A's port, $2 = B's.  The result message
 * lists each HTTP status (000: no connection). */
static const char *const PROBE =
        "read t; "
        "a=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://127.0.0.1:$1/a); "
        "b=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://127.0.0.1:$2/b); "
        "curl -sk -o /dev/null --max-time 10 https://127.0.0.1:$1/tls; "
        "r=$(curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 5 http://127.0.0.1:$2/raw); "
        "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"a=$a b=$b raw=$r\\\"}\"";

static void run_probe(const char *run_id, const char *network, char *msg, size_t msgsz)
{
	char pa[16], pb[16];
	snprintf(pa, sizeof(pa), "%d", A.port);
	snprintf(pb, sizeof(pb), "%d", B.port);
	json_t *argv = json_pack("[s,s,s,s,s,s]", "/bin/sh", "-c", PROBE, "sh", pa, pb);
	json_t *cfg = json_pack("{s:{s:s,s:o},s:s}", "agent", "kind", "command", "argv", argv,
	                        "network", network);
	dev_stub_run_t run = { 0 };
	run.config = cfg;
	dev_stub_otps_t o;
	wt_submit(&T, run_id, &run, "p", 0, 0, &o);
	json_decref(cfg);
	msg[0] = '\0';
	TH_REQUIRE(wt_wait_terminal(&T, run_id, 60000), "%s ended", run_id);
	size_t n;
	char **l = wt_lines(&T, run_id, &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "%s: result", run_id);
	if (n)
		snprintf(msg, msgsz, "%s", wt_field(l[n - 1], "message"));
	th_strv_free(l, n);
	fprintf(stderr, "# %s (%s): %s\n", run_id, network, msg);
}


static void test_allowlist(void)
{
	char msg[256];
	run_probe("run_allow", "allowlist", msg, sizeof(msg));
	TH_CHECK(th_streq(msg, "a=200 b=403 raw=000"), "allowlist: %s", msg);
	TH_CHECK(srv_saw(&A, "GET /a HTTP/1.1 (close)"),
	         "A got the request in origin form through the proxy, one per connection");
	TH_CHECK(srv_saw(&A, "TLS"), "curl https:// reached A through a CONNECT tunnel");
	TH_CHECK(wt_log_has(&T, "w1", th_strf("CONNECT 127.0.0.1:%d", A.port)), "the proxy logged the CONNECT");
	TH_CHECK(!srv_saw(&B, "/b") && !srv_saw(&B, "/raw"), "B was never reached");
	char *refusal = th_strf("egress refused: 127.0.0.1:%d is not on the run's allowlist", B.port);
	TH_CHECK(wt_stream_has(&T, "run_allow", refusal), "a log line names the refused host");
	TH_CHECK(wt_log_has(&T, "w1", refusal), "the worker log names it too");
}

static void test_none(void)
{
	char msg[256];
	run_probe("run_none", "none", msg, sizeof(msg));
	TH_CHECK(th_streq(msg, "a=000 b=000 raw=000"), "none: %s", msg);
}

static void test_full(void)
{
	char msg[256];
	run_probe("run_full", "full", msg, sizeof(msg));
	TH_CHECK(th_streq(msg, "a=200 b=200 raw=200"), "full: %s", msg);
	TH_CHECK(srv_saw(&B, "GET /b HTTP/1.1"), "B reached under full");
}

int main(void)
{
	th_init("limits_egress");
	srv_start(&A);
	srv_start(&B);
	char *allow = th_strf("RUNNEL_EGRESS_ALLOW=127.0.0.1:%d", A.port);
	const char *env[] = { "RUNNEL_EGRESS=full", allow, NULL };
	pid_t w = wt_start(&T, "limits_egress", 4, "w1", env);

	test_allowlist();
	test_none();
	test_full();

	th_stop(w, 20000);
	wt_teardown(&T);
	srv_stop(&A);
	srv_stop(&B);
	return th_done();
}
