/*
 * tests/gateway/test_gateway_unit.c - the model gateway (worker/gateway.h)
 * in this process, against the scripted fake Chat Completions server:
 * the /env rewrite (keys out, placeholders and gateway URLs in, the
 * operator's keys, ANTHROPIC_AUTH_TOKEN, RUNNEL_MODEL_SECRETS, no gateway
 * without a provider), keep-alive and chunked requests, a 413 that an
 * agent still sending its body reads, and a stop that
 * ends a call the provider never finishes, at once.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "tests/builtin/fakechat.h"
#include "tests/support/check.h"
#include "worker/gateway.h"

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *var(json_t *v, const char *name)
{
	return json_string_value(json_object_get(v, name));
}

static int dial(const char *url)
{
	int port = (int)strtol(strrchr(url, ':') + 1, NULL, 10);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	TH_REQUIRE(connect(fd, (struct sockaddr *)&in, sizeof(in)) == 0, "connect");
	struct timeval tv = { 10, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Reads until needle arrived (or EOF/timeout); what came, in buf. */
static size_t read_until(int fd, char *buf, size_t cap, const char *needle)
{
	size_t n = 0;
	buf[0] = '\0';
	while (n + 1 < cap && !strstr(buf, needle)) {
		ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
		if (r <= 0)
			break;
		n += (size_t)r;
		buf[n] = '\0';
	}
	return n;
}

static void test_env(void)
{
	char *secrets[] = { "MY_TOKEN", NULL };
	worker_gateway_conf_t conf = { .secrets = secrets, .nsecrets = 1, .body_max = 4096, .timeout_sec = 5, .bridge_path = "/bin/true", .openai_key = "sk-operator" };
	char err[256];
	worker_gateway_t *g = NULL;

	/* No provider at all (and no operator key for it): no gateway, but
	 * the credential names still leave. */
	worker_gateway_conf_t none = conf;
	none.openai_key = NULL;
	json_t *v = json_pack("{s:s,s:s}", "MY_TOKEN", "t0p", "OTHER", "kept");
	worker_gateway_args_t a = { .run_id = "r1", .variables = v, .meta_dir = "/tmp", .host_net = 1, .wake_fd = -1 };
	TH_CHECK(worker_gateway_open(&none, &a, &g, err, sizeof(err)) == 0 && !g, "%s", err);
	TH_CHECK(!var(v, "MY_TOKEN") && th_streq(var(v, "OTHER"), "kept") && !var(v, "OPENAI_BASE_URL"), "no gateway");
	json_decref(v);

	/* ANTHROPIC_AUTH_TOKEN stays a bearer token's name; the operator's
	 * OpenAI key serves a run without one; both get this run's
	 * placeholder, which differs from run to run. */
	v = json_pack("{s:s}", "ANTHROPIC_AUTH_TOKEN", "sk-ant-oauth");
	a.variables = v;
	TH_REQUIRE(worker_gateway_open(&conf, &a, &g, err, sizeof(err)) == 0 && g, "%s", err);
	const char *tok = var(v, "ANTHROPIC_AUTH_TOKEN");
	TH_CHECK(tok && !strncmp(tok, "rgw-", 4) && strlen(tok) == 47, "placeholder %s", tok ? tok : "-");
	TH_CHECK(!var(v, "ANTHROPIC_API_KEY") && th_streq(var(v, "OPENAI_API_KEY"), tok), "one placeholder per run");
	TH_CHECK(var(v, "ANTHROPIC_BASE_URL") && strstr(var(v, "ANTHROPIC_BASE_URL"), "/anthropic") &&
	                 !strncmp(var(v, "OPENAI_BASE_URL"), "http://127.0.0.1:", 17),
	         "gateway URLs");
	char first[64];
	snprintf(first, sizeof(first), "%s", tok);
	worker_gateway_stop(g);
	json_decref(v);
	v = json_pack("{s:s}", "OPENAI_API_KEY", "sk-x");
	a.variables = v;
	a.host_net = 0;
	a.meta_dir = "/tmp";
	TH_REQUIRE(worker_gateway_open(&conf, &a, &g, err, sizeof(err)) == 0 && g, "%s", err);
	TH_CHECK(strcmp(var(v, "OPENAI_API_KEY"), first), "another run, another placeholder");
	TH_CHECK(th_streq(var(v, "OPENAI_BASE_URL"), "http://localhost:3129/openai"), "%s", var(v, "OPENAI_BASE_URL"));
	rn_strv_t argv = { 0 }, binds = { 0 };
	rn_strv_add(&argv, "agent");
	TH_CHECK(worker_gateway_wrap(g, &argv, &binds) == 0 && argv.n == 4 &&
	                 th_streq(argv.v[0], RN_SANDBOX_GATEWAY_BRIDGE) && th_streq(argv.v[1], "3129") &&
	                 th_streq(argv.v[3], "agent") && binds.n == 2,
	         "the bridge in front of the agent");
	rn_strv_free(&argv);
	rn_strv_free(&binds);
	worker_gateway_stop(g);
	json_decref(v);

	/* Without the bridge, a sandbox of its own cannot reach a gateway. */
	worker_gateway_conf_t nob = conf;
	nob.bridge_path = "";
	v = json_pack("{s:s}", "OPENAI_API_KEY", "sk-x");
	a.variables = v;
	TH_CHECK(worker_gateway_open(&nob, &a, &g, err, sizeof(err)) == -1 && !g && strstr(err, "runnel-egress-bridge"),
	         "%s", err);
	TH_CHECK(!var(v, "OPENAI_API_KEY") || strncmp(var(v, "OPENAI_API_KEY"), "sk-x", 4), "the key left anyway");
	json_decref(v);
}

static void test_calls(void)
{
	static const fc_resp_t script[] = {
		{ .content_type = "application/json", .body = "{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}" },
		{ .content_type = "application/json", .body = "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}" },
		{ .body = "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n", .stall = 1 },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 3) == 0);
	char allow_s[64];
	snprintf(allow_s, sizeof(allow_s), "127.0.0.1:%d", f.port);
	char *allow[] = { allow_s, NULL };
	worker_gateway_conf_t conf = { .allow = allow, .nallow = 1, .body_max = 4096, .timeout_sec = 30, .bridge_path = "" };
	json_t *v = json_pack("{s:s,s:s}", "OPENAI_BASE_URL", f.base_url, "OPENAI_API_KEY", "sk-unit-real");
	worker_gateway_args_t a = { .run_id = "r2", .variables = v, .meta_dir = "/tmp", .host_net = 1, .wake_fd = -1 };
	worker_gateway_t *g = NULL;
	char err[256];
	TH_REQUIRE(worker_gateway_open(&conf, &a, &g, err, sizeof(err)) == 0 && g, "%s", err);
	const char *tok = var(v, "OPENAI_API_KEY");
	int fd = dial(var(v, "OPENAI_BASE_URL"));
	char req[512], buf[8192];
	/* Two calls on one connection: one with a length, one chunked. */
	int n = snprintf(req, sizeof(req),
	                 "POST /openai/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
	                 "Content-Length: 13\r\n\r\n{\"model\":\"m\"}",
	                 tok);
	TH_REQUIRE(send(fd, req, (size_t)n, 0) == n);
	read_until(fd, buf, sizeof(buf), "0\r\n\r\n");
	TH_CHECK(!strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "Transfer-Encoding: chunked") &&
	                 strstr(buf, "prompt_tokens\":3"),
	         "%s", buf);
	n = snprintf(req, sizeof(req),
	             "POST /openai/chat/completions HTTP/1.1\r\nHost: localhost:3129\r\nx-api-key: %s\r\n"
	             "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"mod\r\n8\r\nel\":\"m\"}\r\n0\r\n\r\n",
	             tok);
	TH_REQUIRE(send(fd, req, (size_t)n, 0) == n);
	read_until(fd, buf, sizeof(buf), "0\r\n\r\n");
	TH_CHECK(strstr(buf, "prompt_tokens\":5"), "kept alive, chunked body: %s", buf);
	TH_CHECK(fakechat_requests(&f) == 2 && th_streq(f.bodies[1], "{\"model\":\"m\"}") &&
	                 th_streq(f.auth[1], "Bearer sk-unit-real"),
	         "the provider got the body and the real key");
	proto_usage_t u;
	worker_gateway_usage(g, &u);
	TH_CHECK(u.requests == 2 && u.input_tokens == 8 && u.output_tokens == 3, "usage %llu %llu %llu",
	         (unsigned long long)u.requests, (unsigned long long)u.input_tokens, (unsigned long long)u.output_tokens);
	/* A body over the cap from an agent that sends all of it before it
	 * reads: every byte is taken, then the 413 comes (not a reset). */
	{
		size_t big_n = 8u << 20;
		char *big = malloc(big_n);
		int bfd = dial(var(v, "OPENAI_BASE_URL"));
		struct timeval tv = { 10, 0 };

		TH_REQUIRE(big);
		memset(big, 'a', big_n);
		setsockopt(bfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		n = snprintf(req, sizeof(req),
		             "POST /openai/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
		             "Content-Length: %zu\r\n\r\n",
		             tok, big_n);
		TH_CHECK(rn_write_all(bfd, req, (size_t)n, RN_IO_SOCKET) == 0 && rn_write_all(bfd, big, big_n, RN_IO_SOCKET) == 0, "sent the whole body");
		read_until(bfd, buf, sizeof(buf), "}}");
		TH_CHECK(!strncmp(buf, "HTTP/1.1 413", 12) && strstr(buf, "\"request_too_large\""), "%s", buf);
		close(bfd);
		free(big);
	}
	/* A call the provider never finishes: the stop ends it at once. */
	n = snprintf(req, sizeof(req),
	             "POST /openai/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
	             "Content-Length: 27\r\n\r\n{\"model\":\"m\",\"stream\":true}",
	             tok);
	TH_REQUIRE(send(fd, req, (size_t)n, 0) == n);
	read_until(fd, buf, sizeof(buf), "completion_tokens");
	TH_CHECK(strstr(buf, "completion_tokens"), "the first event streamed before the answer ended: %s", buf);
	long long t0 = mono_ms();
	worker_gateway_stop_calls(g);
	TH_CHECK(mono_ms() - t0 < 3000, "stopped in %lld ms", mono_ms() - t0);
	worker_gateway_usage(g, &u);
	TH_CHECK(u.requests == 3 && u.input_tokens == 9, "the cut call counts what it reported");
	TH_CHECK(recv(fd, buf, sizeof(buf), 0) <= 0, "the agent's connection was closed");
	close(fd);
	worker_gateway_stop(g);
	json_decref(v);
	fakechat_stop(&f);
}

int main(void)
{
	th_check_name("gateway_unit");
	test_env();
	test_calls();
	return th_done();
}
