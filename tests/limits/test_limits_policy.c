/*
 * tests/limits/test_limits_policy.c - the rules of worker/limits.c and
 * worker/egress.c without a sandbox: host[:port] patterns, a run's config
 * lowering (never raising) the worker's limits and egress, and the exact
 * notes a refused value produces.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/support/harness.h"
#include "worker/cgroup.h"
#include "worker/egress.h"
#include "worker/limits.h"

typedef struct notes {
	char text[16][512];
	int n;
} notes_t;

static void collect(const char *level, const char *message, void *arg)
{
	notes_t *n = arg;
	(void)level;
	if (n->n < 16)
		snprintf(n->text[n->n++], sizeof(n->text[0]), "%s", message);
}

static int has_note(const notes_t *n, const char *want)
{
	for (int i = 0; i < n->n; i++)
		if (!strcmp(n->text[i], want))
			return 1;
	return 0;
}

static void test_patterns(void)
{
	TH_CHECK(worker_egress_match("api.example.com", "api.example.com", 443));
	TH_CHECK(worker_egress_match("api.example.com", "API.Example.com", 80));
	TH_CHECK(!worker_egress_match("api.example.com", "api.example.com", 8443));
	TH_CHECK(worker_egress_match("api.example.com:8443", "api.example.com", 8443));
	TH_CHECK(!worker_egress_match("api.example.com:8443", "api.example.com", 443));
	TH_CHECK(worker_egress_match("*.example.org", "a.b.example.org", 443));
	TH_CHECK(!worker_egress_match("*.example.org", "example.org", 443));
	TH_CHECK(!worker_egress_match("*.example.org", "evilexample.org", 443));
	TH_CHECK(worker_egress_match("127.0.0.1:9000", "127.0.0.1", 9000));
	TH_CHECK(worker_egress_match("[::1]:9000", "::1", 9000));
	TH_CHECK(worker_egress_match("*", "anything.example", 22) == 0, "* keeps the default ports");
	TH_CHECK(worker_egress_match("*:22", "anything.example", 22));
	TH_CHECK(worker_egress_pattern_ok("::1") < 0, "bare IPv6 needs brackets");
	TH_CHECK(worker_egress_pattern_ok("a b") < 0);
	TH_CHECK(worker_egress_pattern_ok("host:0") < 0);
	TH_CHECK(worker_egress_pattern_ok("host:70000") < 0);
	TH_CHECK(worker_egress_pattern_ok("*.") < 0);
	TH_CHECK(worker_egress_pattern_ok("") < 0);

	TH_CHECK(worker_egress_covers("*.example.org", "a.example.org:443"));
	TH_CHECK(worker_egress_covers("*.example.org", "*.a.example.org"));
	TH_CHECK(!worker_egress_covers("a.example.org", "*.example.org"));
	TH_CHECK(!worker_egress_covers("a.example.org:443", "a.example.org"), "80 is not covered by :443");
	TH_CHECK(worker_egress_covers("a.example.org", "a.example.org:443"));
	TH_CHECK(!worker_egress_covers("a.example.org", "a.example.org:8080"));
	TH_CHECK(worker_egress_covers("*", "x.y"));
}

static worker_limits_env_t env_of(worker_egress_mode_t egress, const char *allow)
{
	worker_limits_env_t e;
	char warn[512], err[256];
	worker_limits_t max = { .memory_mb = 512, .pids = 256, .cpu_millis = 1000, .disk_mb = 0, .tmp_mb = 64 };
	const char *names[] = { "none", "allowlist", "full" };
	int rc = worker_limits_setup(&e, &max, "off", th_tmpdir(), names[egress], allow, "none",
	                             warn, sizeof(warn), err, sizeof(err));
	TH_REQUIRE(rc == 0, "setup: %s", err);
	e.bridge_path = "/bin/true";
	return e;
}

/* A run directory whose parts are where the test wants them (assets NULL:
 * none made). */
static void ws_at(worker_ws_t *w, const char *workspace, const char *assets, const char *meta)
{
	memset(w, 0, sizeof(*w));
	snprintf(w->workspace, sizeof(w->workspace), "%s", workspace);
	snprintf(w->assets, sizeof(w->assets), "%s", assets ? assets : "");
	snprintf(w->meta, sizeof(w->meta), "%s", meta);
}

static worker_guard_t *guard(const worker_limits_env_t *env, int command_egress, const char *config_json,
                             const char *variables_json, notes_t *notes)
{
	json_error_t je;
	json_t *cfg = json_loads(config_json, 0, &je);
	json_t *vars = json_loads(variables_json ? variables_json : "{}", 0, &je);
	TH_REQUIRE(cfg && vars, "json");
	static worker_ws_t ws;
	ws_at(&ws, th_tmpdir(), NULL, th_strf("%s/meta", th_tmpdir()));
	worker_guard_args_t a = {
		.run_id = "run_policy",
		.command_egress = command_egress,
		.config = cfg,
		.variables = vars,
		.ws_api_url = "https://ws.example.com/api",
		.ws = &ws,
		.driver = WORKER_SANDBOX_BWRAP,
	};
	char err[256];
	memset(notes, 0, sizeof(*notes));
	worker_guard_t *g = worker_guard_new(env, &a, collect, notes, err, sizeof(err));
	TH_CHECK(g, "guard: %s", err);
	json_decref(cfg);
	json_decref(vars);

	return g;
}

/* A guard of a command run over the given dirs (assets may be NULL), no
 * notes: what the disk and cgroup tests need.  NULL when refused (a failed
 * check). */
static worker_guard_t *guard_at(const worker_limits_env_t *env, const char *run_id, const char *config_json,
                                const char *ws, const char *assets, const char *meta, worker_cgroup_t *cg)
{
	json_error_t je;
	json_t *cfg = json_loads(config_json, 0, &je);
	TH_REQUIRE(cfg, "json");
	static worker_ws_t w;
	ws_at(&w, ws, assets, meta);
	worker_guard_args_t a = {
		.run_id = run_id,
		.command_egress = 1,
		.config = cfg,
		.ws = &w,
		.driver = WORKER_SANDBOX_BWRAP,
		.cgroup = cg,
	};
	char err[256];
	worker_guard_t *g = worker_guard_new(env, &a, NULL, NULL, err, sizeof(err));
	TH_CHECK(g, "guard: %s", err);
	json_decref(cfg);
	return g;
}

static void test_limits_lowered_not_raised(void)
{
	worker_limits_env_t env = env_of(WORKER_EGRESS_NONE, "");
	notes_t n;
	worker_guard_t *g = guard(&env, 1,
	                          "{\"limits\":{\"memory_mb\":4096,\"pids\":64,\"cpus\":0.5,\"tmp_mb\":\"big\"}}", NULL, &n);
	if (g) {
		const worker_limits_t *l = worker_guard_limits(g);
		TH_CHECK(l->memory_mb == 512, "memory %ld", l->memory_mb);
		TH_CHECK(l->pids == 64, "pids %ld", l->pids);
		TH_CHECK(l->cpu_millis == 500, "cpu %ld", l->cpu_millis);
		TH_CHECK(l->tmp_mb == 64, "tmp %ld", l->tmp_mb);
		TH_CHECK(has_note(&n, "limits.memory_mb 4096 is above this worker's limit of 512 MiB; using 512 MiB"),
		         "note: %s", n.n ? n.text[0] : "(none)");
		TH_CHECK(has_note(&n, "limits.tmp_mb must be a positive number; using this worker's limit of 64 MiB"),
		         "notes %d", n.n);
		TH_CHECK(n.n == 2, "%d notes", n.n);
		char msg[128];
		worker_guard_message(g, WORKER_LIMIT_MEMORY, msg, sizeof(msg));
		TH_CHECK(th_streq(msg, "The run used more than 512 MiB of memory."), "%s", msg);
		worker_guard_message(g, WORKER_LIMIT_PROCESSES, msg, sizeof(msg));
		TH_CHECK(th_streq(msg, "The run tried to run more than 64 processes at once."), "%s", msg);
		worker_guard_free(g);
	}
	g = guard(&env, 1, "{\"limits\":{\"cpus\":2}}", NULL, &n);
	if (g) {
		TH_CHECK(worker_guard_limits(g)->cpu_millis == 1000);
		TH_CHECK(has_note(&n, "limits.cpus 2 is above this worker's limit of 1 CPUs; using 1 CPUs"),
		         "%s", n.n ? n.text[0] : "(none)");
		worker_guard_free(g);
	}
	g = guard(&env, 1, "{\"limits\":[1]}", NULL, &n);
	if (g) {
		TH_CHECK(has_note(&n, "limits must be an object; ignored"));
		worker_guard_free(g);
	}
	worker_limits_env_free(&env);
}

static void test_egress_narrowing(void)
{
	/* A worker with the allowlist policy: "full" is refused, listed hosts
	 * must be within the worker's list. */
	worker_limits_env_t env = env_of(WORKER_EGRESS_ALLOWLIST, "*.example.com,@model");
	notes_t n;
	worker_guard_t *g = guard(&env, 1, "{\"network\":\"full\"}", NULL, &n);
	if (g) {
		TH_CHECK(worker_guard_egress(g) == WORKER_EGRESS_ALLOWLIST);
		TH_CHECK(has_note(&n, "network \"full\" is above this worker's egress policy \"allowlist\"; using allowlist"),
		         "%s", n.n ? n.text[0] : "(none)");
		worker_guard_free(g);
	}
	g = guard(&env, 1,
	          "{\"network\":\"allowlist\",\"allow_hosts\":[\"a.example.com\",\"evil.org:443\",7]}", NULL, &n);
	if (g) {
		TH_CHECK(has_note(&n, "allow_hosts entry \"evil.org:443\" is not allowed by this worker's egress allowlist; ignored"),
		         "%s", n.n ? n.text[0] : "(none)");
		TH_CHECK(has_note(&n, "allow_hosts entry 2 is not a host[:port] pattern; ignored"));
		TH_CHECK(n.n == 2, "%d notes", n.n);
		worker_guard_free(g);
	}
	/* Kind defaults: command without "network" stays offline; builtin and
	 * acp get the allowlist (the model by name). */
	g = guard(&env, 1, "{}", NULL, &n);
	if (g) {
		TH_CHECK(worker_guard_egress(g) == WORKER_EGRESS_NONE);
		TH_CHECK(n.n == 0);
		worker_guard_free(g);
	}
	g = guard(&env, 0, "{}", "{\"OPENAI_BASE_URL\":\"http://127.0.0.1:1/v1\"}", &n);
	if (g) {
		TH_CHECK(worker_guard_egress(g) == WORKER_EGRESS_ALLOWLIST);
		worker_guard_free(g);
	}
	g = guard(&env, 0, "{\"network\":\"none\"}", NULL, &n);
	if (g) {
		TH_CHECK(worker_guard_egress(g) == WORKER_EGRESS_NONE, "a run may narrow to none");
		worker_guard_free(g);
	}
	worker_limits_env_free(&env);

	char warn[256], err[256];
	worker_limits_t max = { 0 };
	TH_CHECK(worker_limits_setup(&env, &max, "off", th_tmpdir(), "open", "", "none", warn, sizeof(warn),
	                             err, sizeof(err)) < 0);
	TH_CHECK(th_streq(err, "RUNNEL_EGRESS/--egress: \"open\" is not none, allowlist or full"), "%s", err);
	worker_limits_env_free(&env);
	TH_CHECK(worker_limits_setup(&env, &max, "off", th_tmpdir(), "allowlist", "ok.com,bad host", "none",
	                             warn, sizeof(warn), err, sizeof(err)) < 0);
	TH_CHECK(th_streq(err, "RUNNEL_EGRESS_ALLOW/--egress-allow: \"bad host\" is not a host[:port] pattern, @model or @workspace_api"),
	         "%s", err);
	worker_limits_env_free(&env);
	TH_CHECK(worker_limits_setup(&env, &max, "v3", th_tmpdir(), "none", "", "none", warn, sizeof(warn),
	                             err, sizeof(err)) < 0);
	TH_CHECK(th_streq(err, "RUNNEL_CGROUP/--cgroup: \"v3\" is not auto, v1, v2 or off"), "%s", err);
	worker_limits_env_free(&env);
}

typedef struct got_notes {
	char text[8][256];
	int n;
} got_notes_t;

static void take_note(const char *note, void *arg)
{
	got_notes_t *g = arg;
	if (g->n < 8)
		snprintf(g->text[g->n++], sizeof(g->text[0]), "%s", note);
}

static void count_note(const char *note, void *arg)
{
	(void)note;
	(*(int *)arg)++;
}

/* Sends req to the proxy and returns its answer's status line. */
static char *ask_proxy(const char *sock, const char *req, size_t len)
{
	static char line[128];
	line[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (fd >= 0)
			close(fd);
		return line;
	}
	ssize_t w = send(fd, req, len, MSG_NOSIGNAL);
	(void)w;
	char buf[512];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		char *eol = strstr(buf, "\r\n");
		if (eol)
			*eol = '\0';
		snprintf(line, sizeof(line), "%.120s", buf);
	}
	return line;
}

/* The proxy's answers to bad requests, and its caps. */
static void test_proxy_requests(void)
{
	char *sock = th_strf("%s/p.sock", th_tmpdir());
	char *allow[] = { "127.0.0.1:1", "*:80" };
	/* The operator names 127.0.0.1:1 (and, as a wildcard, *:80, which
	 * opens nothing inside). */
	worker_egress_rules_t rules = { .allow = allow, .nallow = 2, .named = allow, .nnamed = 2 };
	char err[256];
	worker_egress_t *e = worker_egress_start(sock, &rules, "run_proxy", err, sizeof(err));
	TH_REQUIRE(e, "proxy: %s", err);
	const char *refused = "CONNECT evil.example.com:443 HTTP/1.1\r\nHost: evil.example.com:443\r\n\r\n";
	/* The metadata address through a wildcard: never dialled. */
	const char *meta = "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, meta, strlen(meta)), "HTTP/1.1 403 Forbidden"));
	const char *meta6 = "CONNECT [fe80::1]:80 HTTP/1.1\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, meta6, strlen(meta6)), "HTTP/1.1 403 Forbidden"));
	TH_CHECK(th_streq(ask_proxy(sock, refused, strlen(refused)), "HTTP/1.1 403 Forbidden"));
	const char *plain = "GET http://evil.example.com:8080/x HTTP/1.1\r\nHost: evil.example.com\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, plain, strlen(plain)), "HTTP/1.1 403 Forbidden"));
	const char *origin = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, origin, strlen(origin)), "HTTP/1.1 400 Bad Request"));
	const char *noport = "CONNECT evil.example.com HTTP/1.1\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, noport, strlen(noport)), "HTTP/1.1 400 Bad Request"));
	const char *userinfo = "GET http://u:p@127.0.0.1:1/ HTTP/1.1\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, userinfo, strlen(userinfo)), "HTTP/1.1 400 Bad Request"));
	/* An allowed host that does not answer: 502 and a note. */
	const char *dead = "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(sock, dead, strlen(dead)), "HTTP/1.1 502 Bad Gateway"));
	/* The head is capped at WORKER_EGRESS_HEAD_MAX bytes. */
	size_t big = WORKER_EGRESS_HEAD_MAX + 100;
	char *huge = malloc(big);
	memcpy(huge, "CONNECT a:443 HTTP/1.1\r\nX: ", 27);
	memset(huge + 27, 'x', big - 27);
	TH_CHECK(th_streq(ask_proxy(sock, huge, big), "HTTP/1.1 431 Request Header Fields Too Large"));
	free(huge);

	got_notes_t g;
	memset(&g, 0, sizeof(g));
	worker_egress_drain(e, take_note, &g);
	TH_CHECK(g.n == 5, "%d notes", g.n);
	TH_CHECK(g.n > 0 && th_streq(g.text[0], "egress refused: 169.254.169.254:80 resolves to a link-local address (169.254.169.254:80), which only the worker's own allowlist may name"),
	         "%s", g.text[0]);
	TH_CHECK(g.n > 1 && th_streq(g.text[1], "egress refused: [fe80::1]:80 resolves to a link-local address ([fe80::1]:80), which only the worker's own allowlist may name"),
	         "%s", g.text[1]);
	TH_CHECK(g.n > 2 && th_streq(g.text[2], "egress refused: evil.example.com:443 is not on the run's allowlist"),
	         "%s", g.text[2]);
	TH_CHECK(g.n > 3 && th_streq(g.text[3], "egress refused: evil.example.com:8080 is not on the run's allowlist"),
	         "%s", g.text[3]);
	TH_CHECK(g.n > 4 && th_streq(g.text[4], "egress: could not reach 127.0.0.1:1 (Connection refused)"),
	         "%s", g.text[4]);

	/* Notes are capped: the rest is counted in one last note. */
	for (int i = 0; i < 105; i++)
		ask_proxy(sock, refused, strlen(refused));
	int total = 0;
	worker_egress_drain(e, count_note, &total);
	TH_CHECK(total == 101, "100 notes and a summary: %d", total);

	/* At most WORKER_EGRESS_CONN_MAX connections at once: the next one is
	 * turned away at once. */
	int idle[WORKER_EGRESS_CONN_MAX];
	for (int i = 0; i < WORKER_EGRESS_CONN_MAX; i++) {
		idle[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa;
		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
		TH_CHECK(connect(idle[i], (struct sockaddr *)&sa, sizeof(sa)) == 0, "idle %d", i);
	}
	/* Each idle connection is being served (its thread waits for a head). */
	int64_t deadline = th_now_ms() + 5000;
	const char *over = "";
	while (th_now_ms() < deadline) {
		over = ask_proxy(sock, refused, strlen(refused));
		if (th_streq(over, "HTTP/1.1 503 Service Unavailable"))
			break;
	}
	TH_CHECK(th_streq(over, "HTTP/1.1 503 Service Unavailable"), "connection %d: %s",
	         WORKER_EGRESS_CONN_MAX + 1, over);
	/* Stop ends the idle connections too. */
	int64_t t0 = th_now_ms();
	worker_egress_stop(e);
	TH_CHECK(th_now_ms() - t0 < 3000, "stop waited %lld ms", (long long)(th_now_ms() - t0));
	for (int i = 0; i < WORKER_EGRESS_CONN_MAX; i++)
		close(idle[i]);
	TH_CHECK(access(sock, F_OK) != 0, "the socket is removed at stop");
}

/*
 * Hosts inside the worker's host, asked for through patterns a run could
 * have supplied (a wildcard, its base URL's host:port): every spelling of
 * loopback, 0, a private address, both as CONNECT and as a plain request.
 * Each is refused with 403 and a note naming the host as asked; the
 * listener behind them never sees a connection.  Only the operator's
 * exact entry opens the address, and only in that spelling.
 */
static void test_proxy_inside(void)
{
	int port = 0;
	int lfd = th_listen_loopback(16, &port);
	TH_REQUIRE(lfd >= 0, "listener");
	static const char *const hosts[] = {
		"localhost",
		"127.0.0.1",
		"127.1",
		"2130706433",
		"0x7f000001",
		"0177.0.0.1",
		"0",
		"0.0.0.0",
		"[::1]",
		"[::ffff:127.0.0.1]",
		"10.0.0.1",
		"100.64.0.1",
	};
	size_t nh = sizeof(hosts) / sizeof(hosts[0]);
	char *allow[32];
	size_t na = 0;
	allow[na++] = th_strf("*:%d", port);
	for (size_t i = 0; i < nh; i++)
		allow[na++] = th_strf("%s:%d", hosts[i], port);
	char *named[] = { th_strf("*:%d", port), "*.example.com", "@model" };
	worker_egress_rules_t rules = { .allow = allow, .nallow = na, .named = named, .nnamed = 3 };
	char *sock = th_strf("%s/inside.sock", th_tmpdir());
	char err[256];
	worker_egress_t *e = worker_egress_start(sock, &rules, "run_inside", err, sizeof(err));
	TH_REQUIRE(e, "proxy: %s", err);
	for (size_t i = 0; i < nh; i++) {
		char *req = th_strf("CONNECT %s:%d HTTP/1.1\r\nHost: x\r\n\r\n", hosts[i], port);
		TH_CHECK(th_streq(ask_proxy(sock, req, strlen(req)), "HTTP/1.1 403 Forbidden"), "CONNECT %s", hosts[i]);
		req = th_strf("GET http://%s:%d/x HTTP/1.1\r\nHost: x\r\n\r\n", hosts[i], port);
		TH_CHECK(th_streq(ask_proxy(sock, req, strlen(req)), "HTTP/1.1 403 Forbidden"), "GET %s", hosts[i]);
	}
	/* A notes' check: each names the host as asked and the address. */
	got_notes_t g;
	memset(&g, 0, sizeof(g));
	worker_egress_drain(e, take_note, &g);
	TH_CHECK(g.n == 8, "%d notes kept of the first", g.n);
	TH_CHECK(th_streq(g.text[0], th_strf("egress refused: localhost:%d resolves to a loopback address "
	                                     "(127.0.0.1:%d), which only the worker's own allowlist may name",
	                                     port, port)) ||
	                 th_streq(g.text[0], th_strf("egress refused: localhost:%d resolves to a loopback address "
	                                             "([::1]:%d), which only the worker's own allowlist may name",
	                                             port, port)),
	         "%s", g.text[0]);
	TH_CHECK(th_streq(g.text[4], th_strf("egress refused: 127.1:%d resolves to a loopback address "
	                                     "(127.0.0.1:%d), which only the worker's own allowlist may name",
	                                     port, port)),
	         "%s", g.text[4]);
	int total = 0;
	worker_egress_drain(e, count_note, &total);
	struct pollfd p = { lfd, POLLIN, 0 };
	TH_CHECK(poll(&p, 1, 0) == 0, "the loopback listener was never dialled");
	worker_egress_stop(e);

	/* The operator names 127.0.0.1:port: that spelling connects, 127.1 does not. */
	char *exact[] = { th_strf("127.0.0.1:%d", port) };
	rules.named = exact;
	rules.nnamed = 1;
	e = worker_egress_start(sock, &rules, "run_inside", err, sizeof(err));
	TH_REQUIRE(e, "proxy: %s", err);
	char *req = th_strf("CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port);
	TH_CHECK(th_streq(ask_proxy(sock, req, strlen(req)), "HTTP/1.1 200 Connection established"), "named");
	req = th_strf("CONNECT 127.1:%d HTTP/1.1\r\n\r\n", port);
	TH_CHECK(th_streq(ask_proxy(sock, req, strlen(req)), "HTTP/1.1 403 Forbidden"), "another spelling");
	worker_egress_stop(e);

	/* The worker's own service on a public address: refused unless named. */
	rn_netaddr_set_t own = { 0 };
	TH_CHECK(rn_netaddr_set_add(&own, "127.0.0.1", port, err, sizeof(err)) == 0, "%s", err);
	rules.own = &own;
	e = worker_egress_start(sock, &rules, "run_inside", err, sizeof(err));
	TH_REQUIRE(e, "proxy: %s", err);
	req = th_strf("CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port);
	TH_CHECK(th_streq(ask_proxy(sock, req, strlen(req)), "HTTP/1.1 200 Connection established"),
	         "the operator named it: open even though it is the worker's own");
	worker_egress_stop(e);
	rn_netaddr_set_free(&own);
	close(lfd);
}

/* A run directory deeper than a unix socket path may be long. */
static void test_proxy_long_path(void)
{
	char *dir = th_strf("%s/%0120d", th_tmpdir(), 7);
	TH_REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
	char *sock = th_strf("%s/egress.sock", dir);
	TH_CHECK(strlen(sock) > 108, "long path %zu", strlen(sock));
	char *allow[] = { "127.0.0.1:1" };
	worker_egress_rules_t rules = { .allow = allow, .nallow = 1, .named = allow, .nnamed = 1 };
	char err[256];
	worker_egress_t *e = worker_egress_start(sock, &rules, "run_long", err, sizeof(err));
	TH_REQUIRE(e, "proxy on a long path: %s", err);
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	char *short_path = th_strf("/proc/self/fd/%d/egress.sock", dfd);
	const char *refused = "CONNECT evil.example.com:443 HTTP/1.1\r\n\r\n";
	TH_CHECK(th_streq(ask_proxy(short_path, refused, strlen(refused)), "HTTP/1.1 403 Forbidden"));
	close(dfd);
	worker_egress_stop(e);
	TH_CHECK(access(sock, F_OK) != 0, "removed at stop");
}

/* A model base URL with credentials in it gives only host:port. */
static void test_model_url_credentials(void)
{
	worker_limits_env_t env = env_of(WORKER_EGRESS_ALLOWLIST, "api.example.com");
	notes_t n;
	worker_guard_t *g = guard(&env, 0, "{\"allow_hosts\":[\"@model\"]}",
	                          "{\"OPENAI_BASE_URL\":\"https://key:s3cr3t@llm.example.com:8443/v1?token=t0k\"}", &n);
	if (g) {
		TH_CHECK(n.n == 1, "%d notes", n.n);
		TH_CHECK(has_note(&n, "allow_hosts entry \"llm.example.com:8443\" is not allowed by this worker's egress allowlist; ignored"),
		         "%s", n.n ? n.text[0] : "(none)");
		for (int i = 0; i < n.n; i++)
			TH_CHECK(!strstr(n.text[i], "s3cr3t") && !strstr(n.text[i], "t0k"), "a secret in a note: %s", n.text[i]);
		worker_guard_free(g);
	}
	worker_limits_env_free(&env);
}

static char *slurp(const char *dir, const char *file)
{
	size_t len;
	char *s = th_file_read(th_strf("%s/%s", dir, file), &len);
	if (s && len && s[len - 1] == '\n')
		s[len - 1] = '\0';
	return s;
}

/* Checks that dir/file holds want (a trailing newline aside). */
static void check_file(const char *dir, const char *file, const char *want)
{
	char *v = slurp(dir, file);
	TH_CHECK(th_streq(v, want), "%s: %s, not %s", file, v ? v : "(missing)", want);
	free(v);
}

/*
 * The cgroup v2 files a run's cgroup gets, and the counters read back,
 * against a directory laid out like one (this machine may have no
 * delegated v2 hierarchy to try it on).
 */
static void test_cgroup_v2_files(void)
{
	const char *base = th_tmpdir();
	char *dir = th_strf("%s/runnel-%ld-run_v2", base, (long)getpid());
	mkdir(dir, 0755);
	static const char *const files[] = {
		"cgroup.procs",
		"memory.max",
		"memory.swap.max",
		"memory.oom.group",
		"pids.max",
		"cpu.max",
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		TH_REQUIRE(th_file_write(th_strf("%s/%s", dir, files[i]), "", 0) == 0, "fake %s", files[i]);
	worker_cgroup_root_t root;
	memset(&root, 0, sizeof(root));
	root.mode = WORKER_CGROUP_V2;
	root.have_cpu = 1;
	snprintf(root.v2_base, sizeof(root.v2_base), "%s", base);
	worker_cgroup_limits_t lim = { .memory_bytes = 512ULL << 20, .pids = 256, .cpu_millis = 1500 };
	worker_cgroup_t cg;
	char err[256];
	TH_REQUIRE(worker_cgroup_create(&cg, &root, "run_v2", &lim, 0, err, sizeof(err)) == 0, "create: %s", err);
	TH_CHECK(cg.ndirs == 1 && cg.procs_fd[0] >= 0);
	check_file(dir, "memory.max", "536870912");
	check_file(dir, "memory.oom.group", "1");
	check_file(dir, "memory.swap.max", "0");
	check_file(dir, "pids.max", "256");
	check_file(dir, "cpu.max", "150000 100000");

	/* (A cgroup file takes each write whole; these stand-ins are emptied.) */
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		th_file_write(th_strf("%s/%s", dir, files[i]), "", 0);
	/* Taken over by a run with the same limits: nothing is written. */
	TH_REQUIRE(worker_cgroup_set_limits(&cg, &lim, err, sizeof(err)) == 0, "set: %s", err);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		check_file(dir, files[i], "");

	/* Taken over by a run without limits: every limit lifted again. */
	worker_cgroup_limits_t lifted = { 0 };
	TH_REQUIRE(worker_cgroup_set_limits(&cg, &lifted, err, sizeof(err)) == 0, "set: %s", err);
	check_file(dir, "memory.max", "max");
	check_file(dir, "pids.max", "max");
	check_file(dir, "cpu.max", "max 100000");

	worker_cgroup_events_t ev;
	static const char *const counters[][2] = {
		{ "memory.events", "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n" },
		{ "pids.events", "max 3\n" },
		{ "cpu.stat", "usage_usec 10\nthrottled_usec 4242\n" },
	};
	for (size_t i = 0; i < 3; i++)
		th_file_write(th_strf("%s/%s", dir, counters[i][0]), counters[i][1], strlen(counters[i][1]));
	TH_CHECK(worker_cgroup_events(&cg, &ev) == 0);
	TH_CHECK(ev.oom_kills == 2 && ev.memory_max_hits == 7 && ev.pids_max_hits == 3 &&
	                 ev.cpu_throttled_us == 4242,
	         "events %llu %llu %llu %llu",
	         (unsigned long long)ev.oom_kills, (unsigned long long)ev.memory_max_hits,
	         (unsigned long long)ev.pids_max_hits, (unsigned long long)ev.cpu_throttled_us);
	worker_cgroup_destroy(&cg, 0);
	TH_CHECK(cg.ndirs == 0 && cg.procs_fd[0] < 0, "destroy closes and forgets");

	/* Without limits nothing is written. */
	th_file_write(th_strf("%s/pids.max", dir), "", 0);
	worker_cgroup_limits_t none = { 0 };
	TH_REQUIRE(worker_cgroup_create(&cg, &root, "run_v2", &none, 0, err, sizeof(err)) == 0, "create: %s", err);
	check_file(dir, "pids.max", "");
	worker_cgroup_destroy(&cg, 0);

	/* A base that is not there: a clear error, nothing left open. */
	snprintf(root.v2_base, sizeof(root.v2_base), "%s/missing/deeper", base);
	TH_CHECK(worker_cgroup_create(&cg, &root, "run_v2", &lim, 0, err, sizeof(err)) < 0);
	TH_CHECK(strstr(err, "cannot create cgroup "), "%s", err);
}

static uint64_t fs_size(const char *dir)
{
	struct statvfs sv;
	return statvfs(dir, &sv) == 0 ? (uint64_t)sv.f_blocks * sv.f_frsize : 0;
}

/*
 * A workspace mounted ahead of its run (a warm sandbox's) is resized to
 * the run's cap by the run's guard, and unmounted at its end.  Needs the
 * right to mount: in a mount namespace of this test's own, as root.
 */
static void test_workspace_resize(void)
{
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) {
		fprintf(stderr, "# skipped the workspace resize: cannot take a mount namespace (%s)\n", strerror(errno));
		return;
	}
	worker_limits_env_t env = env_of(WORKER_EGRESS_NONE, "");
	env.max.disk_mb = 64;
	env.disk_mode = WORKER_DISK_TMPFS;
	const char *base = th_tmpdir();
	char *ws = th_strf("%s/workspace", base), *assets = th_strf("%s/workspace/assets", base);
	char *meta = th_strf("%s/meta", base);
	mkdir(ws, 0755);
	mkdir(meta, 0700);
	char err[256];
	TH_REQUIRE(worker_limits_mount_workspace(&env, ws, err, sizeof(err)) == 0, "mount: %s", err);
	TH_CHECK(fs_size(ws) == 64ULL << 20, "warm workspace %llu bytes", (unsigned long long)fs_size(ws));
	worker_guard_t *g = guard_at(&env, "run_resize", "{\"limits\":{\"disk_mb\":16}}", ws, assets, meta, NULL);
	if (g) {
		TH_CHECK(fs_size(ws) == 16ULL << 20, "the run's workspace %llu bytes", (unsigned long long)fs_size(ws));
		struct stat st;
		TH_CHECK(stat(assets, &st) == 0 && S_ISDIR(st.st_mode), "assets/ on the tmpfs");
		worker_guard_free(g);
		struct statfs sf;
		TH_CHECK(statfs(ws, &sf) == 0 && sf.f_type != TMPFS_MAGIC, "unmounted at the end");
	}
	worker_limits_env_free(&env);
}

/* Where the worker may not mount: the workspace is measured, single files
 * are capped with RLIMIT_FSIZE, and a workspace over its cap is a hit. */
static void test_disk_watch(void)
{
	worker_limits_env_t env = env_of(WORKER_EGRESS_NONE, "");
	env.max.disk_mb = 1;
	env.disk_mode = WORKER_DISK_WATCH;
	const char *ws = th_tmpdir();
	worker_guard_t *g = guard_at(&env, "run_watch", "{}", ws, NULL, ws, NULL);
	TH_REQUIRE(g, "guard");
	worker_sandbox_spec_t spec;
	memset(&spec, 0, sizeof(spec));
	worker_guard_sandbox_spec(g, &spec);
	TH_CHECK(spec.rlimit_fsize_mb == 1, "RLIMIT_FSIZE %ld", spec.rlimit_fsize_mb);
	TH_CHECK(spec.rlimit_nproc == 256, "RLIMIT_NPROC without a cgroup: %ld", spec.rlimit_nproc);
	TH_CHECK(spec.rlimit_as_mb == 0, "no RLIMIT_AS");
	TH_CHECK(worker_guard_final(g) == WORKER_LIMIT_NONE, "an empty workspace");
	char *big = calloc(1, 768 * 1024);
	TH_REQUIRE(big && th_file_write(th_strf("%s/a", ws), big, 768 * 1024) == 0 &&
	                   th_file_write(th_strf("%s/b", ws), big, 768 * 1024) == 0,
	           "fill");
	free(big);
	TH_CHECK(worker_guard_final(g) == WORKER_LIMIT_DISK, "1.5 MiB in a 1 MiB workspace");
	char msg[128];
	worker_guard_message(g, WORKER_LIMIT_DISK, msg, sizeof(msg));
	TH_CHECK(th_streq(msg, "The run wrote more than 1 MiB to its workspace."), "%s", msg);
	worker_guard_free(g);
	worker_limits_env_free(&env);
}

/* 1 when pid's pids-cgroup line names name. */
static int in_cgroup(pid_t pid, const char *name)
{
	size_t len;
	char *s = th_file_read(th_strf("/proc/%ld/cgroup", (long)pid), &len);
	int r = s && strstr(s, name);
	free(s);
	return r;
}

/*
 * A cgroup made ahead of its run with a process tree inside (a warm
 * sandbox's): the run's guard takes it over, writes the run's limits into
 * it and renames it after the run (v1), and the tree dies with it at the
 * end.  Needs a writable cgroup hierarchy (skipped without one).
 */
static void test_adopt_cgroup(void)
{
	worker_limits_env_t env;
	char warn[1024], err[256];
	worker_limits_t max = { .memory_mb = 256, .pids = 64 };
	TH_REQUIRE(worker_limits_setup(&env, &max, "auto", th_tmpdir(), "none", "", "none",
	                               warn, sizeof(warn), err, sizeof(err)) == 0,
	           "setup: %s", err);
	if (env.cgroup.mode == WORKER_CGROUP_NONE) {
		fprintf(stderr, "# skipped the cgroup takeover: %s", warn);
		worker_limits_env_free(&env);
		return;
	}
	worker_cgroup_t cg;
	worker_cgroup_limits_t cl = { .memory_bytes = 256u << 20, .pids = 64 };
	TH_REQUIRE(worker_cgroup_create(&cg, &env.cgroup, "warm_adopt", &cl, 1, err, sizeof(err)) == 0,
	           "cgroup: %s", err);
	int ready[2];
	TH_REQUIRE(pipe(ready) == 0, "pipe");
	pid_t child = fork();
	if (child == 0) {
		/* Enters the cgroup as a sandbox's first process does, then a
		 * leader with a child of its own, both idle. */
		for (int i = 0; i < cg.ndirs; i++)
			if (write(cg.procs_fd[i], "0", 1) != 1)
				_exit(1);
		if (fork() == 0) {
			close(ready[0]);
			ssize_t w = write(ready[1], "g", 1);
			(void)w;
			for (;;)
				pause();
		}
		for (;;)
			pause();
	}
	close(ready[1]);
	char c;
	TH_REQUIRE(read(ready[0], &c, 1) == 1, "grandchild started");
	close(ready[0]);
	/* The grandchild: the only other child of `child`. */
	size_t len;
	char *kids = th_file_read(th_strf("/proc/%ld/task/%ld/children", (long)child, (long)child), &len);
	pid_t grand = kids ? (pid_t)strtol(kids, NULL, 10) : 0;
	free(kids);
	TH_CHECK(grand > 0 && in_cgroup(grand, th_strf("runnel-%ld-warm_adopt", (long)getpid())),
	         "the tree starts in the cgroup made ahead");

	const char *ws = th_tmpdir();
	worker_guard_t *g = guard_at(&env, "run_attach", "{\"limits\":{\"pids\":16,\"memory_mb\":64}}", ws, NULL, ws, &cg);
	TH_REQUIRE(g, "guard");
	TH_CHECK(cg.ndirs == 0 && cg.procs_fd[0] == -1, "the guard owns the cgroup now");
	int v1 = env.cgroup.mode == WORKER_CGROUP_V1;
	char *name = th_strf("runnel-%ld-%s", (long)getpid(), v1 ? "run_attach" : "warm_adopt");
	TH_CHECK(in_cgroup(child, name), "the leader is in the run's cgroup (%s)", name);
	TH_CHECK(in_cgroup(grand, name), "its child too");
	char *pids = th_file_read(v1 ? th_strf("%s/%s/pids.max", env.cgroup.v1_pids, name)
	                             : th_strf("%s/%s/pids.max", env.cgroup.v2_base, name),
	                          &len);
	TH_CHECK(pids && strtol(pids, NULL, 10) == 16, "the run's pids limit replaced the worker's: %s", pids ? pids : "(none)");
	free(pids);
	worker_guard_free(g); /* removes the cgroup, killing what is in it */
	int st = 0;
	TH_CHECK(waitpid(child, &st, 0) == child && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	         "the tree died with the run's cgroup");
	worker_limits_env_free(&env);
}

int main(void)
{
	th_init("limits_policy");
	test_patterns();
	test_limits_lowered_not_raised();
	test_egress_narrowing();
	test_proxy_requests();
	test_proxy_inside();
	test_proxy_long_path();
	test_model_url_credentials();
	test_cgroup_v2_files();
	test_disk_watch();
	test_adopt_cgroup();
	test_workspace_resize();
	return th_done();
}
