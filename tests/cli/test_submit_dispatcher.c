/*
 * tests/cli/test_submit_dispatcher.c - `runnel submit` and `runnel cancel
 * --via dispatcher` against a small HTTP server in this test (on
 * tests/support/httpd.h) that records each request and answers what the
 * case programs: the exact request (route, bearer token, JSON body), the
 * answer handling (202, a refusal with the dispatcher's error message, an
 * answer over the 1 MiB cap, an answer without run_id, 404, 401).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli/clirun.h"
#include "tests/support/harness.h"
#include "tests/support/httpd.h"

static const char *g_bin;

/* What the server answers next, and what it last received. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_status;
static char *g_answer;
static char *g_request; /* request line + headers + body as received */

static void serve(th_httpd_t *srv, void *arg, int fd, th_http_req_t *req)
{
	(void)srv;
	(void)arg;
	size_t hl = strlen(req->head);
	char *got = malloc(hl + req->body_len + 1);
	if (got) {
		memcpy(got, req->head, hl);
		memcpy(got + hl, req->body, req->body_len + 1);
	}
	pthread_mutex_lock(&g_mu);
	free(g_request);
	g_request = got;
	int status = g_status;
	const char *ans = g_answer;
	pthread_mutex_unlock(&g_mu);
	th_httpd_writef(fd,
	                "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
	                "Connection: close\r\n\r\n%s",
	                status, strlen(ans), ans);
}

static void program(int status, const char *answer)
{
	pthread_mutex_lock(&g_mu);
	g_status = status;
	g_answer = th_strf("%s", answer);
	free(g_request);
	g_request = NULL;
	pthread_mutex_unlock(&g_mu);
}

static char *received(void)
{
	pthread_mutex_lock(&g_mu);
	char *r = th_strf("%s", g_request ? g_request : "");
	pthread_mutex_unlock(&g_mu);
	return r;
}

static const char *body_of(const char *req)
{
	const char *b = strstr(req, "\r\n\r\n");
	return b ? b + 4 : "";
}

static int run(const char *const *args, const char *const *env, clirun_t *p)
{
	return clirun_argv(g_bin, NULL, args, NULL, env, 30000, p);
}

int main(int argc, char **argv)
{
	clirun_t p;
	TH_REQUIRE(argc == 2, "usage: test_cli_submit_dispatcher RUNNEL_BINARY");
	g_bin = argv[1];

	th_httpd_opts_t hopts = { serve, NULL, 0, 10000 };
	th_httpd_t *srv = th_httpd_start("fake dispatcher", &hopts);
	TH_REQUIRE(srv);
	char *url = th_strf("http://127.0.0.1:%d", th_httpd_port(srv));

	char *env_url = th_strf("RUNNEL_DISPATCHER_URL=%s/", url); /* a trailing slash is fine */
	const char *const env[] = { env_url, "RUNNEL_API_TOKEN=tok_5ecret", "RUNNEL_OTP_SETUP=otp_s",
		                    "RUNNEL_OTP_RUN=otp_r", "RUNNEL_OTP_UPLOAD=otp_u", NULL };
	const char *const sub[] = { "submit", "--agent-url", "http://h/ws/sess_1", "--prompt", "Add a node",
		                    "--no-tail", "--json", "--run-id", "run_fake1", "--max-runtime-sec", "60",
		                    NULL };

	/* 1. Accepted: the exact request, and the answer printed as JSON. */
	program(202, "{\"run_id\":\"run_fake1\",\"stream\":\"runnel:{run_fake1}:out\",\"control\":\"runnel:{run_fake1}:ctl\"}");
	int rc = run(sub, env, &p);
	TH_CHECK(rc == 0, "exit %d: %s", rc, p.err);
	TH_CHECK(th_streq(p.out, "{\"run_id\":\"run_fake1\",\"stream\":\"runnel:{run_fake1}:out\","
	                         "\"control\":\"runnel:{run_fake1}:ctl\"}\n"),
	         "%s", p.out);
	TH_CHECK(!strstr(p.out, "5ecret") && !strstr(p.err, "5ecret") && !strstr(p.out, "otp_"));
	clirun_free(&p);
	char *req = received();
	TH_CHECK(strncmp(req, "POST /v1/runs HTTP/1.1\r\n", 24) == 0, "%s", req);
	TH_CHECK(strstr(req, "\r\nAuthorization: Bearer tok_5ecret\r\n"), "%s", req);
	TH_CHECK(strstr(req, "\r\nContent-Type: application/json\r\n"), "%s", req);
	TH_CHECK(th_streq(body_of(req),
	                  "{\"agent_url\":\"http://h/ws/sess_1\",\"otp_setup\":\"otp_s\",\"otp_run\":\"otp_r\","
	                  "\"otp_upload\":\"otp_u\",\"prompt\":\"Add a node\",\"run_id\":\"run_fake1\","
	                  "\"caller\":\"cli\",\"max_runtime_sec\":60}"),
	         "%s", body_of(req));

	/* Plain output: the bare run id; no token without RUNNEL_API_TOKEN. */
	program(202, "{\"run_id\":\"run_minted_by_dispatcher\"}");
	rc = run(ARGS("submit", "--agent-url", "http://h/ws", "--prompt", "p", "--no-tail",
	              "--otp-setup", "a", "--otp-run", "b"),
	         ARGS(env_url), &p);
	TH_CHECK(rc == 0 && th_streq(p.out, "run_minted_by_dispatcher\n"), "%d %s %s", rc, p.out, p.err);
	clirun_free(&p);
	req = received();
	TH_CHECK(!strstr(req, "Authorization"), "%s", req);
	TH_CHECK(th_streq(body_of(req), "{\"agent_url\":\"http://h/ws\",\"otp_setup\":\"a\",\"otp_run\":\"b\","
	                                "\"prompt\":\"p\",\"caller\":\"cli\"}"),
	         "%s", body_of(req));

	/* The backends' fields, and a repeat of an idempotency key (200). */
	program(200, "{\"run_id\":\"run_first\"}");
	rc = run(ARGS("submit", "--agent-url", "http://h/ws", "--prompt", "p", "--no-tail", "--otp-setup", "a",
	              "--otp-run", "b", "--budget-tokens", "500", "--idempotency-key", "turn-1", "--priority", "8", "--traceparent",
	              "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "--webhook", "https://b.example/h"),
	         ARGS(env_url), &p);
	TH_CHECK(rc == 0 && th_streq(p.out, "run_first\n") &&
	                 strstr(p.err, "runnel submit: the idempotency key was used before: following run run_first"),
	         "%d %s %s", rc, p.out, p.err);
	clirun_free(&p);
	req = received();
	TH_CHECK(th_streq(body_of(req), "{\"agent_url\":\"http://h/ws\",\"otp_setup\":\"a\",\"otp_run\":\"b\","
	                                "\"prompt\":\"p\",\"caller\":\"cli\",\"budget\":{\"max_tokens\":500},"
	                                "\"idempotency_key\":\"turn-1\",\"priority\":8,"
	                                "\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\","
	                                "\"webhook\":\"https://b.example/h\"}"),
	         "%s", body_of(req));
	rc = run(ARGS("submit", "--agent-url", "http://h/ws", "--prompt", "p", "--no-tail", "--otp-setup", "a",
	              "--otp-run", "b", "--priority", "10"),
	         ARGS(env_url), &p);
	TH_CHECK(rc == 2, "--priority 10 is a usage error: %d %s", rc, p.err);
	clirun_free(&p);
	rc = run(ARGS("submit", "--agent-url", "http://h/ws", "--prompt", "p", "--no-tail", "--otp-setup", "a",
	              "--otp-run", "b", "--budget-tokens", "-1"),
	         ARGS(env_url), &p);
	TH_CHECK(rc == 2 && strstr(p.err, "--budget-tokens"), "--budget-tokens -1 is a usage error: %d %s", rc, p.err);
	clirun_free(&p);

	/* 2. Refused: the dispatcher's code and message, exit 1. */
	program(400, "{\"error\":{\"code\":\"bad_request\",\"message\":\"prompt: must not be empty\"}}");
	rc = run(sub, env, &p);
	TH_CHECK(rc == 1, "exit %d", rc);
	TH_CHECK(th_streq(p.err, "runnel submit: the dispatcher refused the run (400): bad_request: prompt: must not be empty\n"),
	         "%s", p.err);
	clirun_free(&p);
	program(503, "{\"error\":{\"code\":\"unavailable\",\"message\":\"kafka is down\"}}");
	rc = run(sub, env, &p);
	TH_CHECK(rc == 4, "503: exit %d", rc);
	clirun_free(&p);

	/* 3. An answer over the 1 MiB cap: read up to the cap, quoted short. */
	char *big = malloc((2u << 20) + 1);
	memset(big, 'x', 2u << 20);
	big[2u << 20] = '\0';
	program(500, big);
	free(big);
	rc = run(sub, env, &p);
	TH_CHECK(rc == 1, "exit %d", rc);
	char xs[201];
	memset(xs, 'x', 200);
	xs[200] = '\0';
	char *want = th_strf("runnel submit: the dispatcher refused the run (500): %s\n", xs);
	TH_CHECK(th_streq(p.err, want), "%.300s", p.err);
	clirun_free(&p);

	/* 4. 202 without a run id: exit 4. */
	program(202, "{}");
	rc = run(sub, env, &p);
	TH_CHECK(rc == 4 && th_streq(p.err, "runnel submit: the dispatcher's answer has no run_id\n"), "%d %s", rc, p.err);
	clirun_free(&p);

	/* 5. cancel --via dispatcher: route, body, and 202 / 404 / 401. */
	program(202, "{}");
	rc = run(ARGS("cancel", "run_c1", "--via", "dispatcher", "--reason", "stop it"), env, &p);
	TH_CHECK(rc == 0 && th_streq(p.out, "cancel sent to run run_c1 (via the dispatcher)\n"), "%d %s %s", rc, p.out, p.err);
	clirun_free(&p);
	req = received();
	TH_CHECK(strncmp(req, "POST /v1/runs/run_c1/cancel HTTP/1.1\r\n", 38) == 0, "%s", req);
	TH_CHECK(strstr(req, "\r\nAuthorization: Bearer tok_5ecret\r\n"));
	TH_CHECK(th_streq(body_of(req), "{\"reason\":\"stop it\"}"), "%s", body_of(req));
	program(404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such run\"}}");
	rc = run(ARGS("cancel", "run_c2", "--via", "dispatcher"), env, &p);
	TH_CHECK(rc == 3 && th_streq(p.err, "runnel cancel: run run_c2 not found\n"), "%d %s", rc, p.err);
	clirun_free(&p);
	program(401, "{\"error\":{\"code\":\"unauthorized\",\"message\":\"bad token\"}}");
	rc = run(ARGS("cancel", "run_c3", "--via", "dispatcher"), env, &p);
	TH_CHECK(rc == 1 && th_streq(p.err, "runnel cancel: the dispatcher answered 401: unauthorized: bad token\n"),
	         "%d %s", rc, p.err);
	TH_CHECK(!strstr(p.err, "5ecret"));
	clirun_free(&p);

	th_httpd_stop(srv);
	return th_done();
}
