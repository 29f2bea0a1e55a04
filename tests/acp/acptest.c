/*
 * tests/acp/acptest.c - the acp worker tests' fixture (see acptest.h).
 */
#include "tests/acp/acptest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/sandbox.h"

int at_setup(at_t *t, int argc, char **argv, const char *redis_extra)
{
	memset(t, 0, sizeof(*t));
	TH_REQUIRE(argc >= 3, "usage: %s PREFIX NODE", argv[0]);
	t->prefix = argv[1];
	t->node = argv[2];
	TH_REQUIRE(access(th_strf("%s/node_modules/@zed-industries/claude-agent-acp/dist/index.js", t->prefix), R_OK) == 0,
	           "agents installed in %s (agents/install.sh)", t->prefix);
	char err[256];
	if (worker_sandbox_probe(WORKER_SANDBOX_BWRAP, NULL, err, sizeof(err)) < 0) {
		printf("SKIP: %s\n", err);
		return 77;
	}
	t->anthropic = fp_start(FP_ANTHROPIC);
	t->openai = fp_start(FP_OPENAI);
	TH_REQUIRE(t->anthropic && t->openai, "fake providers");
	wt_setup(&t->w, redis_extra, 1);
	return 0;
}

void at_teardown(at_t *t)
{
	wt_teardown(&t->w);
	fp_stop(t->anthropic);
	fp_stop(t->openai);
}

pid_t at_worker(at_t *t, const char *name, const char *const *extra)
{
	const char *env[32];
	size_t n = 0;
	env[n++] = th_strf("RUNNEL_ACP_PREFIX=%s", t->prefix);
	env[n++] = th_strf("RUNNEL_NODE=%s", t->node);
	/* The adapters do not exit after their turn: stop them soon after. */
	env[n++] = "RUNNEL_KILL_GRACE_MS=300";
	/* The fake providers are loopback servers: a run's base URL reaches
	 * them only because the operator's list names them exactly. */
	env[n++] = th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,%s,%s", fp_url(t->anthropic) + strlen("http://"),
	                   fp_url(t->openai) + strlen("http://"));
	for (size_t i = 0; extra && extra[i] && n < 31; i++)
		env[n++] = extra[i];
	env[n] = NULL;
	return wt_worker(&t->w, name, env);
}

void at_submit(at_t *t, const char *run_id, const char *agent_json, const char *permission_mode,
               const char *prompt, dev_stub_otps_t *o)
{
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config(agent_json);
	if (permission_mode)
		json_object_set_new(run.config, "permission_mode", json_string(permission_mode));
	json_object_set_new(run.config, "system_prompt", json_string("You run inside runnel's tests."));
	/* A model each agent knows (Codex warns in its answer about others). */
	json_object_set_new(run.config, "model", json_string(strstr(agent_json, "codex") ? "gpt-5.5" : "haiku"));
	run.env = json_pack("{s:{s:s,s:s,s:s,s:s,s:s},s:n}", "variables",
	                    "ANTHROPIC_BASE_URL", fp_url(t->anthropic),
	                    "ANTHROPIC_API_KEY", AT_ANTHROPIC_KEY,
	                    "CLAUDE_CODE_MAX_RETRIES", "0",
	                    "OPENAI_BASE_URL", th_strf("%s/v1", fp_url(t->openai)),
	                    "OPENAI_API_KEY", AT_OPENAI_KEY,
	                    "setup_script");
	wt_submit(&t->w, run_id, &run, prompt, 1, 0, o);
	json_decref(run.config);
	json_decref(run.env);
}

typedef struct wait_ref {
	at_t *t;
	const char *run_id, *type, *status;
	long idx;
} wait_ref_t;

static int line_there(void *arg)
{
	wait_ref_t *r = arg;
	size_t n = 0;
	char **l = wt_lines(&r->t->w, r->run_id, &n);
	r->idx = th_lines_find(l, n, 0, r->type, r->status);
	th_strv_free(l, n);
	return r->idx >= 0;
}

long at_wait_line(at_t *t, const char *run_id, const char *type, const char *status, int timeout_ms)
{
	wait_ref_t r = { t, run_id, type, status, -1 };
	if (!th_wait_until(line_there, &r, timeout_ms))
		return -1;
	return r.idx;
}

const char *at_upload(at_t *t, const dev_stub_otps_t *o, const char *name)
{
	char *data = NULL;
	size_t len = 0;
	if (dev_stub_file_get(t->w.stub, o->session, name, &data, &len) != 1) {
		free(data);
		return NULL;
	}
	char *copy = th_strf("%s", data);
	free(data);
	return copy;
}

int at_each_process_with(const char *needle, int (*fn)(const char *pid, void *arg), void *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int hit = 0;
	while (d && !hit && (e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		size_t len = 0;
		char *c = th_file_read(th_strf("/proc/%s/cmdline", e->d_name), &len);
		for (size_t i = 0; c && i < len; i++)
			if (!c[i])
				c[i] = ' ';
		if (c && strstr(c, needle))
			hit = fn ? fn(e->d_name, arg) : 1;
		free(c);
	}
	if (d)
		closedir(d);
	return hit;
}

int at_process_with(const char *needle)
{
	return at_each_process_with(needle, NULL, NULL);
}
