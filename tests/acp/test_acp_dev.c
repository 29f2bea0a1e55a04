/*
 * tests/acp/test_acp_dev.c - the newcomer's path to a real agent: `runnel
 * dev --with-agents` (what `scripts/dev.sh --agents` runs) installs the
 * pinned ACP agents into the build tree beside cli/ (agents/install.sh:
 * the acp_agents fixture already did, so this install returns at once, as
 * a second `scripts/dev.sh --agents` would), hands them to its worker, and
 * runs a Claude Code run end to end whose key comes from the caller's own
 * ANTHROPIC_API_KEY ("${ANTHROPIC_API_KEY}" in the definition), against
 * the fake Anthropic provider on loopback.  Without the flag the same run
 * ends with the worker's "no ACP agents installed".  With it the worker
 * keeps one warm claude and one warm codex agent (`runnel status` shows
 * them ready); with one slot, the stack starts without them and says why;
 * the caller's own RUNNEL_WARM_AGENTS (empty: none) wins.
 *
 *   test_acp_dev PREFIX NODE RUNNEL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/acp/fakeprov.h"
#include "tests/cli/clirun.h"
#include "tests/support/harness.h"
#include "worker/sandbox.h"

#define KEY "sk-ant-dev-test-key-0f1e2d3c4b"

static const char *g_bin;
static char *g_tmp, *g_defs;
static fp_t *g_prov;

/* A claude definition like examples/agents/claude.json, with the fake
 * provider as its base URL. */
static void write_defs(void)
{
	g_defs = th_strf("%s/defs", g_tmp);
	TH_REQUIRE(mkdir(g_defs, 0700) == 0);
	char *def = th_strf("{\"env\":{\"variables\":{\"ANTHROPIC_API_KEY\":\"${ANTHROPIC_API_KEY}\","
	                    "\"ANTHROPIC_BASE_URL\":\"%s\",\"CLAUDE_CODE_MAX_RETRIES\":\"0\"},\"setup_script\":null},"
	                    "\"config\":{\"system_prompt\":\"You run inside runnel's tests.\",\"model\":\"haiku\","
	                    "\"permission_mode\":\"ask\",\"agent\":{\"kind\":\"acp\",\"preset\":\"claude\"}}}",
	                    fp_url(g_prov));
	TH_REQUIRE(th_file_write(th_strf("%s/claude.json", g_defs), def, strlen(def)) == 0);
}

static int run_dev(int with_agents, clirun_t *p)
{
	const char *env[] = {
		th_strf("TMPDIR=%s", g_tmp),
		"ANTHROPIC_API_KEY=" KEY,
		/* The adapter does not exit after its turn: stop it soon after. */
		"RUNNEL_KILL_GRACE_MS=300",
		/* The fake provider is a loopback server: the operator names it. */
		th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,%s", fp_url(g_prov) + strlen("http://")),
		NULL,
	};
	const char *argv_with[] = { g_bin, "dev", "--demo", "--once", "--port", "0", "--agents", g_defs,
		                    "--agent", "claude", "--prompt", "Say hello", "--with-agents", NULL };
	if (!with_agents)
		argv_with[12] = NULL;
	int64_t t0 = th_now_ms();
	int rc = clirun(argv_with, env, 240000, p);
	TH_NOTE("runnel dev%s --demo --once --agent claude: exit %d in %lld ms", with_agents ? " --with-agents" : "",
	        rc, (long long)(th_now_ms() - t0));
	return rc;
}

static const char *const *dev_env(const char *extra)
{
	static const char *env[4];
	env[0] = th_strf("TMPDIR=%s", g_tmp);
	env[1] = th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,%s", fp_url(g_prov) + strlen("http://"));
	env[2] = extra;
	env[3] = NULL;
	return env;
}

static int banner_done(void *arg)
{
	clirun_t *p = arg;
	clirun_pump(p, 20);
	return strstr(p->out, "runnel submit --otp-file -") || waitpid(p->pid, NULL, WNOHANG) != 0;
}

/* The value after "  label" in the banner. */
static char *banner_field(const char *out, const char *label)
{
	const char *at = strstr(out, th_strf("\n  %s", label));
	if (!at)
		return NULL;
	at += strlen(label) + 3;
	while (*at == ' ')
		at++;
	return th_strf("%.*s", (int)strcspn(at, " \n"), at);
}

static const char *g_redis;

/* `runnel status` against the dev stack's Redis shows both agents ready. */
static int status_ready(void *arg)
{
	(void)arg;
	clirun_t p;
	const char *env[] = { th_strf("RUNNEL_REDIS_URL=%s", g_redis), NULL };
	clirun(ARGS(g_bin, "status"), env, 20000, &p);
	int ok = !!strstr(p.out, "claude 1/1 ready, codex 1/1 ready");
	clirun_free(&p);
	return ok;
}

/* `runnel dev --with-agents` in the background until its banner; extra is
 * one more NAME=value or NULL.  Returns the banner (stdout). */
static void dev_up(const char *extra, clirun_t *p)
{
	TH_REQUIRE(clirun_start(p, ARGS(g_bin, "dev", "--port", "0", "--agents", g_defs, "--with-agents"),
	                        dev_env(extra), 0, 0) == 0);
	TH_REQUIRE(th_wait_until(banner_done, p, 120000), "no banner");
	TH_REQUIRE(strstr(p->out, "runnel submit --otp-file -"), "the stack did not start:\n%s\n%s", p->out, p->err);
}

static void dev_down(clirun_t *p)
{
	clirun_signal(p, SIGINT);
	int rc = clirun_wait(p, 60000);
	TH_CHECK(rc == 0, "runnel dev stopped: exit %d\n%s", rc, p->err);
	clirun_free(p);
}

/* The worker of `runnel dev --with-agents` keeps warm agents, unless it
 * cannot or the caller says otherwise. */
static void test_warm_agents(void)
{
	clirun_t p;
	dev_up(NULL, &p);
	TH_CHECK(strstr(p.out, ", warm agents claude:1,codex:1\n"), "banner:\n%s", p.out);
	TH_CHECK(!strstr(p.err, "no warm"), "%s", p.err);
	g_redis = banner_field(p.out, "redis");
	TH_REQUIRE(g_redis, "%s", p.out);
	TH_CHECK(th_wait_until(status_ready, NULL, 180000), "runnel status shows the warm agents ready");
	dev_down(&p);

	/* One slot cannot hold two warm agents: said, and the stack runs. */
	dev_up("RUNNEL_SLOTS=1", &p);
	TH_CHECK(strstr(p.err, "runnel dev: no warm agents: they need 2 slots (RUNNEL_SLOTS=1)\n"), "%s", p.err);
	TH_CHECK(!strstr(p.out, "warm agents"), "banner:\n%s", p.out);
	dev_down(&p);

	/* The caller's own setting wins; empty turns them off. */
	dev_up("RUNNEL_WARM_AGENTS=", &p);
	TH_CHECK(!strstr(p.out, "warm agents") && !strstr(p.err, "warm agents"), "%s\n%s", p.out, p.err);
	dev_down(&p);
	dev_up("RUNNEL_WARM_AGENTS=codex:1", &p);
	TH_CHECK(strstr(p.out, ", warm agents codex:1\n"), "banner:\n%s", p.out);
	dev_down(&p);
}

int main(int argc, char **argv)
{
	th_init("acp_dev");
	TH_REQUIRE(argc == 4, "usage: test_acp_dev PREFIX NODE RUNNEL");
	g_bin = argv[3];
	TH_REQUIRE(access(th_strf("%s/node_modules/@zed-industries/claude-agent-acp/dist/index.js", argv[1]), R_OK) == 0,
	           "agents installed in %s (agents/install.sh)", argv[1]);
	char err[256];
	if (worker_sandbox_probe(WORKER_SANDBOX_BWRAP, NULL, err, sizeof(err)) < 0) {
		printf("SKIP: %s\n", err);
		return 77;
	}
	g_tmp = (char *)th_tmpdir();
	TH_REQUIRE(g_tmp);
	g_prov = fp_start(FP_ANTHROPIC);
	TH_REQUIRE(g_prov, "fake provider");
	fp_script_t script = { .final = "Hello from the fake provider." };
	fp_set(g_prov, &script);
	write_defs();

	/* Without --with-agents (and no RUNNEL_ACP_PREFIX): the worker has
	 * none, and says so. */
	clirun_t p;
	int rc = run_dev(0, &p);
	TH_CHECK(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, p.out, p.err);
	TH_CHECK(strstr(p.out, "this worker has no ACP agents installed"), "%s", p.out);
	TH_CHECK(fp_calls(g_prov) == 0);
	clirun_free(&p);

	/* With it: installed (already, by the fixture) into the build tree,
	 * and a Claude Code run from prompt to result. */
	rc = run_dev(1, &p);
	TH_CHECK(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, p.out, p.err);
	TH_CHECK(strstr(p.err, "installing the ACP agents into "), "%s", p.err);
	TH_CHECK(strstr(p.out, "\nresult  "), "no result line:\n%s", p.out);
	TH_CHECK(strstr(p.out, "Hello from the fake provider."), "%s", p.out);
	TH_CHECK(fp_calls(g_prov) >= 1, "%d model calls", fp_calls(g_prov));
	/* The caller's key reached the provider, and nothing printed it. */
	TH_CHECK(fp_seen(g_prov, KEY), "the provider saw the caller's key");
	TH_CHECK(!strstr(p.out, KEY) && !strstr(p.err, KEY), "the key is not in runnel dev's output");
	clirun_free(&p);

	test_warm_agents();

	fp_stop(g_prov);
	return th_done();
}
