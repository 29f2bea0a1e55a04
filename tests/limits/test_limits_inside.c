/*
 * tests/limits/test_limits_inside.c - a run aiming the egress proxy at the
 * worker's own host, end to end: a real runnel-worker under the allowlist
 * policy, real bwrap, curl inside the sandbox, and the worker's own
 * redis-server (the fixture's) as the target.
 *   base URLs: the run sets OPENAI_BASE_URL and ANTHROPIC_BASE_URL to the
 *              worker's Redis (127.0.0.1 and localhost); the operator's
 *              list has @model, so their host:port join the run's list, yet
 *              every spelling of loopback (localhost, 127.1, 2130706433,
 *              [::ffff:127.0.0.1], 0, …) is refused, by CONNECT and by a
 *              plain request, each with a log line naming the host;
 *   wildcard:  the operator's list has *:PORT; a run with allow_hosts
 *              ["*:PORT"] reaches none of them either;
 *   bag:       a run whose assets.zip_url is the worker's Redis ends
 *              bootstrap_failed without the worker connecting to it.
 * Redis never sees a client from the sandbox: its connection count is
 * compared before and after (the worker's own connections are steady).
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wt_t T;

static const char *const HOSTS[] = {
	"127.0.0.1",
	"localhost",
	"127.1",
	"2130706433",
	"0x7f000001",
	"0177.0.0.1",
	"0",
	"[::ffff:127.0.0.1]",
	"[::1]",
};
#define NHOSTS (sizeof(HOSTS) / sizeof(HOSTS[0]))

/* The sandbox asks the proxy (the bridge at 127.0.0.1:3128) for each host
 * on $1 (Redis's port) exactly as spelled (curl would normalise 127.1 to
 * 127.0.0.1), first as a plain request, then as a CONNECT tunnel, and
 * prints the two status codes per host. */
static char *probe_script(void)
{
	char *s = th_strf("read t; out=''; for h in");
	for (size_t i = 0; i < NHOSTS; i++)
		s = th_strf("%s '%s'", s, HOSTS[i]);
	return th_strf("%s; do "
	               "exec 3<>/dev/tcp/127.0.0.1/3128; "
	               "printf 'GET http://%%s:%%s/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' \"$h\" \"$1\" >&3; "
	               "read -t 15 -r v p rest <&3; exec 3>&-; "
	               "exec 3<>/dev/tcp/127.0.0.1/3128; "
	               "printf 'CONNECT %%s:%%s HTTP/1.1\\r\\n\\r\\n' \"$h\" \"$1\" >&3; "
	               "read -t 15 -r v c rest <&3; exec 3>&-; "
	               "out=\"$out $p/$c\"; done; "
	               "echo \"{\\\"type\\\":\\\"result\\\",\\\"message\\\":\\\"$out\\\"}\"",
	               s);
}

static long redis_clients_total(void)
{
	redisReply *r = redisCommand(T.rc, "INFO stats");
	long n = -1;
	if (r && r->type == REDIS_REPLY_STRING) {
		const char *p = strstr(r->str, "total_connections_received:");
		if (p)
			n = strtol(p + strlen("total_connections_received:"), NULL, 10);
	}
	if (r)
		freeReplyObject(r);
	return n;
}

static void run_probe(const char *run_id, json_t *variables, json_t *allow_hosts)
{
	char port[16];
	snprintf(port, sizeof(port), "%d", T.redis.port);
	json_t *argv = json_pack("[s,s,s,s,s]", "/bin/bash", "-c", probe_script(), "sh", port);
	json_t *cfg = json_pack("{s:{s:s,s:o},s:s}", "agent", "kind", "command", "argv", argv, "network",
	                        "allowlist");
	if (allow_hosts)
		json_object_set_new(cfg, "allow_hosts", allow_hosts);
	json_t *env = json_pack("{s:o,s:n}", "variables", variables ? variables : json_object(), "setup_script");
	dev_stub_run_t run = { 0 };
	run.config = cfg;
	run.env = env;
	long before = redis_clients_total();
	dev_stub_otps_t o;
	wt_submit(&T, run_id, &run, "p", 0, 0, &o);
	json_decref(cfg);
	json_decref(env);
	size_t n;
	char **l = wt_ended_lines(&T, run_id, 120000, &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""), "%s: result", run_id);
	const char *msg = n ? wt_field(l[n - 1], "message") : "";
	fprintf(stderr, "# %s: %s\n", run_id, msg);
	char *want = th_strf("");
	for (size_t i = 0; i < NHOSTS; i++)
		want = th_strf("%s 403/403", want);
	TH_CHECK(th_streq(msg, want), "%s: every host refused by both forms: got \"%s\"", run_id, msg);
	for (size_t i = 0; i < NHOSTS; i++) {
		char *needle = th_strf("egress refused: %s:%d resolves to a", HOSTS[i], T.redis.port);
		TH_CHECK(wt_stream_has(&T, run_id, needle), "%s: a log line names %s", run_id, HOSTS[i]);
	}
	th_strv_free(l, n);
	/* The worker's own connections (its publisher, its claimers) may come
	 * and go; a sandbox client would show as many new ones as hosts. */
	long after = redis_clients_total();
	TH_CHECK(after - before < (long)NHOSTS, "%s: Redis saw %ld new connections", run_id, after - before);
}

static void test_base_urls(void)
{
	/* Base URLs at the worker's own Redis: the model gateway refuses them
	 * before any sandbox starts (they would otherwise come in through
	 * @model), naming the variable; nothing of the run connects to Redis. */
	json_t *vars = json_pack("{s:s,s:s}", "OPENAI_BASE_URL", th_strf("http://127.0.0.1:%d/v1", T.redis.port),
	                         "ANTHROPIC_BASE_URL", th_strf("http://localhost:%d", T.redis.port));
	json_t *argv = json_pack("[s,s,s,s,s]", "/bin/bash", "-c", probe_script(), "sh", "1");
	dev_stub_run_t run = { 0 };
	run.config = json_pack("{s:{s:s,s:o},s:s}", "agent", "kind", "command", "argv", argv, "network", "allowlist");
	run.env = json_pack("{s:o,s:n}", "variables", vars, "setup_script");
	long before = redis_clients_total();
	dev_stub_otps_t o;
	wt_submit(&T, "run_base_url", &run, "p", 0, 0, &o);
	json_decref(run.config);
	json_decref(run.env);
	char msg[512];
	const char *code = wt_ended(&T, "run_base_url", 120000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, "bootstrap_failed") && strstr(msg, "ANTHROPIC_BASE_URL resolves to") &&
	                 strstr(msg, "a loopback address"),
	         "run_base_url: %s %s", code, msg);
	long after = redis_clients_total();
	TH_CHECK(after - before < (long)NHOSTS, "run_base_url: Redis saw %ld new connections", after - before);
}

static void test_wildcard(void)
{
	run_probe("run_wildcard", NULL, json_pack("[s]", th_strf("*:%d", T.redis.port)));
}

static void test_bag_url(void)
{
	json_t *cfg = wt_agent_config("{\"kind\":\"mock\",\"script\":\"demo\"}");
	json_object_set_new(cfg, "assets",
	                    json_pack("{s:s}", "zip_url", th_strf("http://localhost:%d/bag.zip?sig=S3CRET", T.redis.port)));
	dev_stub_run_t run = { 0 };
	run.config = cfg;
	dev_stub_otps_t o;
	long before = redis_clients_total();
	wt_submit(&T, "run_bag_url", &run, "p", 0, 0, &o);
	json_decref(cfg);
	char msg[512];
	const char *code = wt_ended(&T, "run_bag_url", 60000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, "bootstrap_failed"), "bag from the worker's Redis: %s", code);
	TH_CHECK(th_streq(msg, th_strf("Could not download the workspace bag: download of http://localhost:%d/bag.zip: "
	                               "localhost:%d resolves to 127.0.0.1:%d (a loopback address), which a run's URL "
	                               "may not reach",
	                               T.redis.port, T.redis.port, T.redis.port)) ||
	                 th_streq(msg, th_strf("Could not download the workspace bag: download of http://localhost:%d/bag.zip: "
	                                       "localhost:%d resolves to [::1]:%d (a loopback address), which a run's URL "
	                                       "may not reach",
	                                       T.redis.port, T.redis.port, T.redis.port)),
	         "%s", msg);
	TH_CHECK(!strstr(msg, "S3CRET"), "no query string");
	TH_CHECK(redis_clients_total() - before < 3, "Redis saw no download");
}

int main(void)
{
	th_init("limits_inside");
	wt_setup(&T, NULL, 4);
	/* The operator's list: @model (hosts from the run) and a wildcard on
	 * Redis's port; nothing names the loopback address exactly. */
	char *allow = th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,*,*:%d", T.redis.port);
	const char *env[] = { "RUNNEL_EGRESS=allowlist", allow, NULL };
	pid_t w = wt_worker(&T, "w1", env);
	wt_warmup(&T);

	test_base_urls();
	test_wildcard();
	test_bag_url();

	wt_stop_worker(w, 20000, "w1");
	wt_teardown(&T);
	return th_done();
}
