/*
 * tests/acp/test_acp_warm.c - warm agents (RUNNEL_WARM_AGENTS) with the
 * real Claude Code and Codex ACP adapters against the fake providers:
 *   - the same runs on a worker without warm agents and on one with them
 *     (claude with a bag and an ask answered through the ctl stream,
 *     codex): the same lines (types and statuses), ask, result text,
 *     uploaded file (the bag's) and usage; the bag's CLAUDE.md reached the
 *     model both times; the warm worker's runs said "warm agent start";
 *   - a cancelled run and a failed run (provider 500) never give their
 *     agent back: the next run gets another session, and the pool started
 *     another agent;
 *   - a run with a skill takes a warm agent and finds it in /root/skills;
 *   - no state leaks: a run that writes into $HOME, /tmp and Claude's own
 *     session files leaves nothing the next warm run can find;
 *   - the sandbox of a warm agent holds the gateway's placeholder only:
 *     no provider key in any process's environment or file there, in
 *     Redis or in the worker's log, and the provider got the real key;
 *   - runs that do not match start cold: a system prompt (claude), a model
 *     (codex, on its command line), another network;
 *   - an acp run without a warm agent leaves the plain warm sandbox
 *     (RUNNEL_WARM) in its pool;
 *   - /metrics shows the pool (ready, started, taken, discarded, age);
 *   - bad RUNNEL_WARM_AGENTS values stop the worker with the exact message.
 * Waits are on conditions with deadlines, never on time.
 */
#include "tests/acp/acptest.h"

#include <archive.h>
#include <archive_entry.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static at_t T;

#define RUN_MS 120000

/* The workspace bag and a skill "tables" of the next submit, or NULL. */
static const char *g_bag_url, *g_skill_url;

/* A zip of data.txt and, when notes_name is set, that file with notes
 * (CLAUDE.md, AGENTS.md: the agents' project notes). */
static void make_bag(const char *path, const char *data, const char *notes_name, const char *notes)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_zip(a);
	TH_REQUIRE(archive_write_open_filename(a, path) == ARCHIVE_OK);
	const char *names[] = { "data.txt", notes_name }, *contents[] = { data, notes };
	for (int i = 0; i < (notes_name ? 2 : 1); i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, names[i]);
		archive_entry_set_size(e, (la_int64_t)strlen(contents[i]));
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0644);
		archive_write_header(a, e);
		archive_write_data(a, contents[i], strlen(contents[i]));
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
}

/* The bag's URL at the stub, made as name (notes_name may be NULL). */
static const char *bag(const char *name, const char *notes_name, const char *notes)
{
	char url[256];
	const char *zip = th_strf("%s/%s", T.w.dir, name);
	make_bag(zip, "same\n", notes_name, notes);
	TH_REQUIRE(dev_stub_add_blob_file(T.w.stub, name, zip) == 0);
	dev_stub_blob_url(T.w.stub, name, url, sizeof(url));
	return th_strf("%s", url);
}

/* A run of preset with both providers in /env (as at_submit, without the
 * system prompt, model and retry variable that no warm agent matches). */
static void submit(const char *run_id, const char *preset, const char *perm, const char *system_prompt,
                   const char *model, const char *network, const char *prompt, dev_stub_otps_t *o)
{
	dev_stub_run_t run = { 0 };
	run.config = wt_agent_config(th_strf("{\"kind\":\"acp\",\"preset\":\"%s\"}", preset));
	if (perm)
		json_object_set_new(run.config, "permission_mode", json_string(perm));
	/* null: the stub's defaults (a system prompt, model "mock") would not fit. */
	json_object_set_new(run.config, "system_prompt", system_prompt ? json_string(system_prompt) : json_null());
	json_object_set_new(run.config, "model", model ? json_string(model) : json_null());
	if (network)
		json_object_set_new(run.config, "network", json_string(network));
	if (g_bag_url)
		json_object_set_new(run.config, "assets", json_pack("{s:s}", "zip_url", g_bag_url));
	if (g_skill_url)
		json_object_set_new(run.config, "skills", json_pack("[{s:s,s:s}]", "name", "tables", "zip_url", g_skill_url));
	run.env = json_pack("{s:{s:s,s:s,s:s,s:s},s:n}", "variables", "ANTHROPIC_BASE_URL", fp_url(T.anthropic),
	                    "ANTHROPIC_API_KEY", AT_ANTHROPIC_KEY, "OPENAI_BASE_URL", th_strf("%s/v1", fp_url(T.openai)),
	                    "OPENAI_API_KEY", AT_OPENAI_KEY, "setup_script");
	wt_submit(&T.w, run_id, &run, prompt, 1, 0, o);
	json_decref(run.config);
	json_decref(run.env);
}

/* The next line of the text at *cur, cut at its newline, or NULL at the
 * end; *cur moves past it. */
static char *next_line(char **cur)
{
	char *line = *cur;
	if (!line || !*line)
		return NULL;
	char *nl = strchr(line, '\n');
	if (nl)
		*nl = '\0';
	*cur = nl ? nl + 1 : NULL;
	return line;
}

/* How the worker's log says run_id's agent started: "warm agent", "warm",
 * "cold", or "" when it did not. */
static const char *start_kind(const char *worker, const char *run_id)
{
	size_t len = 0;
	char *log = th_file_read(wt_log_path(&T.w, worker), &len);
	const char *kind = "";
	for (char *cur = log, *line; (line = next_line(&cur));) {
		if (strstr(line, run_id) && strstr(line, "agent_started"))
			kind = strstr(line, "warm agent start") ? "warm agent" : strstr(line, "warm start") ? "warm"
			                                                                                    : "cold";
	}
	free(log);
	return kind;
}

/* Prints the worker's log lines that hold needle (after a failed check). */
static void show_log(const char *worker, const char *needle)
{
	size_t len = 0;
	char *log = th_file_read(wt_log_path(&T.w, worker), &len);
	for (char *cur = log, *line; (line = next_line(&cur));) {
		if (strstr(line, needle))
			printf("# %s: %s\n", worker, line);
	}
	free(log);
}

static long metric(const char *worker, const char *series)
{
	return wt_metric(&T.w, worker, series);
}

typedef struct ready_ref {
	const char *worker, *series;
	long want;
} ready_ref_t;

static int metric_at_least(void *arg)
{
	ready_ref_t *r = arg;
	return metric(r->worker, r->series) >= r->want;
}

/* Waits until the pool has n ready agents of name (Claude's handshake takes
 * seconds under load). */
static void wait_ready(const char *worker, const char *name, long n)
{
	ready_ref_t r = { worker, th_strf("runnel_worker_warm_agents{agent=\"%s\"}", name), n };
	TH_REQUIRE(th_wait_until(metric_at_least, &r, RUN_MS), "%ld warm %s agent(s) ready", n, name);
}

/* 1 when `runnel status`'s view of the worker (the warm_agents hash)
 * names at least one ready agent of every kind it keeps. */
static int status_shows(void *arg)
{
	redisReply *r = redisCommand(T.w.rc, "HGET runnel:warm_agents %s", (const char *)arg);
	int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "\"claude\":{\"ready\":1,\"wanted\":1}") &&
	        strstr(r->str, "\"codex\":{\"ready\":1,\"wanted\":1}");
	if (r)
		freeReplyObject(r);
	return ok;
}

static int status_gone(void *arg)
{
	redisReply *r = redisCommand(T.w.rc, "HEXISTS runnel:warm_agents %s", (const char *)arg);
	int gone = r && r->type == REDIS_REPLY_INTEGER && r->integer == 0;
	if (r)
		freeReplyObject(r);
	return gone;
}

/* What two runs must share: the non-log lines' types and statuses, the
 * result text; "" when the run has no lines. */
static char *shape(const char *run_id)
{
	size_t n;
	char **l = wt_lines(&T.w, run_id, &n);
	char *s = th_strf("%s", "");
	for (size_t i = 0; i < n; i++) {
		/* wt_field's answer lasts until its next call. */
		const char *type = th_strf("%s", wt_field(l[i], "type") ? wt_field(l[i], "type") : "");
		if (th_streq(type, "log"))
			continue;
		const char *status = th_strf("%s", wt_field(l[i], "status") ? wt_field(l[i], "status") : "");
		s = th_strf("%s%s/%s ", s, type, status);
	}
	if (n)
		s = th_strf("%s| %s", s, wt_field(l[n - 1], "message") ? wt_field(l[n - 1], "message") : "");
	th_strv_free(l, n);
	return s;
}

/* The id of the ask line of run_id, waiting for it. */
static const char *wait_ask(const char *run_id)
{
	TH_REQUIRE(at_wait_line(&T, run_id, "ask", "open", RUN_MS) >= 0, "%s asked", run_id);
	size_t n;
	char **l = wt_lines(&T.w, run_id, &n);
	long i = th_lines_find(l, n, 0, "ask", "open");
	const char *id = th_strf("%s", i >= 0 ? wt_field(l[i], "id") : "");
	th_strv_free(l, n);
	return id;
}

/* The ACP session id of run_id (its "ACP session ..." log line). */
static const char *session_of(const char *run_id)
{
	size_t n;
	char **l = wt_lines(&T.w, run_id, &n);
	const char *sid = "";
	for (size_t i = 0; i < n; i++) {
		const char *m = wt_field(l[i], "message");
		if (m && !strncmp(m, "ACP session ", 12)) {
			sid = th_strf("%.*s", (int)strcspn(m + 12, ","), m + 12);
			break;
		}
	}
	th_strv_free(l, n);
	return sid;
}

/* For warm_weight: 2 at the lowest, 1 at the default, 0 when the process
 * pid is in no warm agent's cgroup ("agent.<pid>.<seq>"). */
static int cgroup_weight(const char *pid, void *arg)
{
	(void)arg;
	char *cg = th_file_read(th_strf("/proc/%s/cgroup", pid), NULL);
	int w = 0;
	/* "0::/path" (v2), or "N:cpu,cpuacct:/path" (v1). */
	for (char *cur = cg, *line; !w && (line = next_line(&cur));) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 && strstr(c2, "agent.")) {
			*c2 = '\0';
			const char *ctl = c1 + 1;
			char *v = NULL;
			if (!*ctl)
				v = th_file_read(th_strf("/sys/fs/cgroup%s/cpu.weight", c2 + 1), NULL);
			else if (!strcmp(ctl, "cpu") || !strncmp(ctl, "cpu,", 4) || strstr(ctl, ",cpu,"))
				v = th_file_read(th_strf("/sys/fs/cgroup/%s%s/cpu.shares", ctl, c2 + 1), NULL);
			if (v)
				w = strtol(v, NULL, 10) == (*ctl ? 2 : 1) ? 2 : 1;
			free(v);
		}
	}
	free(cg);
	return w;
}

/* The CPU weight of the warm agent whose processes have needle in their
 * command line: 1 at the lowest (cpu.weight 1, v1 cpu.shares 2), 0 at the
 * default, -1 when there is none or no cgroups (a worker run without
 * root). */
static int warm_weight(const char *needle)
{
	return at_each_process_with(needle, cgroup_weight, NULL) - 1;
}

typedef struct pair {
	char *claude, *codex;
	const char *claude_file, *codex_file, *claude_usage, *codex_usage;
} pair_t;

/* The two comparison runs on worker: claude asking (answered allow), codex. */
static void comparison_runs(const char *worker, const char *tag, pair_t *out)
{
	dev_stub_otps_t o;
	const char *rc = th_strf("run_cmp_claude_%s", tag), *rx = th_strf("run_cmp_codex_%s", tag);
	/* The bag's data.txt becomes the uploaded file: the run's bag is in
	 * the warm agent's workspace, readable by it. */
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets && cat data.txt > assets/c.txt", .final = "Claude did it." });
	g_bag_url = bag(th_strf("bag_%s.zip", tag), NULL, NULL);
	submit(rc, "claude", "ask", NULL, NULL, NULL, "make c.txt", &o);
	g_bag_url = NULL;
	const char *ask = wait_ask(rc);
	/* A run in flight: the idle codex agent yields the CPU to it. */
	int weight = th_streq(tag, "warm") ? warm_weight("codex-acp") : -1;
	if (weight >= 0)
		TH_CHECK(weight == 1, "the idle warm agent has the lowest CPU weight beside a run");
	wt_ctl(&T.w, rc, th_strf("{\"type\":\"reply\",\"id\":\"%s\",\"option\":\"allow\"}", ask));
	TH_REQUIRE(wt_wait_terminal(&T.w, rc, RUN_MS), "%s ended", rc);
	out->claude = shape(rc);
	out->claude_file = at_upload(&T, &o, "c.txt");
	out->claude_usage = th_strf("%s", wt_state(&T.w, rc, "usage"));
	fp_set(T.openai, &(fp_script_t){ .cmd = "mkdir -p assets && echo same > assets/x.txt", .final = "Codex did it." });
	submit(rx, "codex", NULL, NULL, NULL, NULL, "make x.txt", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, rx, RUN_MS), "%s ended", rx);
	out->codex = shape(rx);
	out->codex_file = at_upload(&T, &o, "x.txt");
	out->codex_usage = th_strf("%s", wt_state(&T.w, rx, "usage"));
	const char *want = th_streq(tag, "warm") ? "warm agent" : "cold";
	if (!th_streq(start_kind(worker, rc), want))
		show_log(worker, "warm");
	TH_CHECK(th_streq(start_kind(worker, rc), want), "%s: %s start (%s)", rc, want, start_kind(worker, rc));
	TH_CHECK(th_streq(start_kind(worker, rx), want), "%s: %s start (%s)", rx, want, start_kind(worker, rx));
}

/* From the worker's log: its warm-up runs (mock runs, which may take a
 * plain warm sandbox) and its exit's warm_stats (taken, and runs that
 * found the plain pool empty). */
static void plain_warm_stats(const char *worker, int *mock_runs, long *taken, long *missed)
{
	char *log = th_file_read(wt_log_path(&T.w, worker), NULL);
	for (char *cur = log, *line; (line = next_line(&cur));) {
		const char *m = strstr(line, "warm sandboxes: ");
		long started = 0;
		if (strstr(line, "\"run_ended\"") && strstr(line, "\"run_warmup_"))
			(*mock_runs)++;
		else if (strstr(line, "\"warm_stats\"") && m)
			sscanf(m, "warm sandboxes: %ld started, %ld taken, %ld runs", &started, taken, missed);
	}
	free(log);
}

static void test_same_as_cold(pid_t *warm_worker)
{
	/* One plain warm sandbox, which no acp run can use: the runs without
	 * a warm agent leave it in the pool instead of wasting it. */
	const char *cold_env[] = { "RUNNEL_WARM=1", NULL };
	pid_t w = at_worker(&T, "wcold", cold_env);
	wt_warmup(&T.w);
	pair_t cold = { 0 }, warm = { 0 };
	comparison_runs("wcold", "cold", &cold);
	wt_stop_worker(w, 20000, "wcold");
	int mock_runs = 0;
	long taken = -1, missed = -1;
	plain_warm_stats("wcold", &mock_runs, &taken, &missed);
	TH_CHECK(mock_runs >= 1 && taken + missed == mock_runs,
	         "only the %d warm-up runs asked the plain pool: %ld taken, %ld found none", mock_runs, taken, missed);
	TH_CHECK(!wt_log_has(&T.w, "wcold", "warm_unfit"), "no warm sandbox was thrown away");
	if (taken + missed != mock_runs)
		show_log("wcold", "warm");

	const char *warm_env[] = { "RUNNEL_WARM=0", "RUNNEL_WARM_AGENTS=claude:1,codex:1", NULL };
	*warm_worker = at_worker(&T, "ww", warm_env);
	wait_ready("ww", "claude", 1);
	wait_ready("ww", "codex", 1);
	/* No run in flight: the default weight, which other load on the
	 * machine cannot starve. */
	int weight = warm_weight("codex-acp");
	if (weight >= 0)
		TH_CHECK(weight == 0, "an idle worker's warm agent has the default CPU weight");
	else
		fprintf(stderr, "# no cgroups here: the warm agents' CPU weight is not checked\n");
	TH_CHECK(th_wait_until(status_shows, "ww", RUN_MS), "the worker publishes its warm agents for runnel status");
	char *argv[] = { CLI_BIN, "status", NULL };
	const char *cli_env[] = { th_strf("RUNNEL_REDIS_URL=%s", T.w.redis.url), NULL };
	const char *out = th_strf("%s/status.log", T.w.dir);
	TH_CHECK(th_run(argv, cli_env, out, 20000) == 0, "runnel status exits 0");
	TH_CHECK(th_file_contains(out, "warm agents  ww: claude 1/1 ready, codex 1/1 ready"), "runnel status: %s",
	         th_file_read(out, NULL));
	comparison_runs("ww", "warm", &warm);
	TH_CHECK(metric("ww", "runnel_worker_warm_agent_age_seconds_count{agent=\"claude\"}") == 1,
	         "the age of the agent taken");
	TH_CHECK(strstr(cold.claude, "ask/open ask/answered ") && strstr(cold.claude, "step/succeeded"),
	         "claude cold asked and ran: %s", cold.claude);
	TH_CHECK(th_streq(cold.claude, warm.claude), "claude lines: cold %s, warm %s", cold.claude, warm.claude);
	TH_CHECK(th_streq(cold.codex, warm.codex), "codex lines: cold %s, warm %s", cold.codex, warm.codex);
	TH_CHECK(th_streq(cold.claude_file, "same\n") && th_streq(warm.claude_file, "same\n"), "claude writeback");

	TH_CHECK(th_streq(cold.codex_file, "same\n") && th_streq(warm.codex_file, "same\n"), "codex writeback");
	TH_CHECK(th_streq(cold.claude_usage, warm.claude_usage), "claude usage: cold %s, warm %s", cold.claude_usage,
	         warm.claude_usage);
	TH_CHECK(th_streq(cold.codex_usage, warm.codex_usage), "codex usage: cold %s, warm %s", cold.codex_usage,
	         warm.codex_usage);
	TH_CHECK(metric("ww", "runnel_worker_warm_agents_taken_total{agent=\"claude\"}") == 1 &&
	                 metric("ww", "runnel_worker_warm_agents_taken_total{agent=\"codex\"}") == 1,
	         "taken counted");
}

/* A cancelled run and a failed one: their agents never come back. */
static void test_never_returned(void)
{
	wait_ready("ww", "claude", 1);
	long started = metric("ww", "runnel_worker_warm_agents_started_total{agent=\"claude\"}");
	fp_set(T.anthropic, &(fp_script_t){ .final = "slow", .delay_ms = 60000 });
	dev_stub_otps_t o;
	submit("run_warm_cancel", "claude", NULL, NULL, NULL, NULL, "wait", &o);
	TH_REQUIRE(wt_wait_started(&T.w, "run_warm_cancel", RUN_MS), "the run started");
	TH_REQUIRE(at_wait_line(&T, "run_warm_cancel", "log", NULL, RUN_MS) >= 0, "the agent speaks");
	wt_ctl(&T.w, "run_warm_cancel", "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_warm_cancel", RUN_MS), "cancelled run ended");
	TH_CHECK(th_streq(wt_state(&T.w, "run_warm_cancel", "status"), "cancelled"), "cancelled");
	TH_CHECK(th_streq(start_kind("ww", "run_warm_cancel"), "warm agent"), "the cancelled run was warm");

	wait_ready("ww", "claude", 1);
	fp_set(T.anthropic, &(fp_script_t){ .status = 500 });
	submit("run_warm_fail", "claude", NULL, NULL, NULL, NULL, "fail", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_warm_fail", RUN_MS), "failed run ended");
	TH_CHECK(!th_streq(wt_state(&T.w, "run_warm_fail", "status"), "succeeded"), "the run failed");
	TH_CHECK(th_streq(start_kind("ww", "run_warm_fail"), "warm agent"), "the failed run was warm");

	wait_ready("ww", "claude", 1);
	fp_set(T.anthropic, &(fp_script_t){ .final = "after" });
	submit("run_warm_after", "claude", NULL, NULL, NULL, NULL, "after", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_warm_after", RUN_MS), "next run ended");
	const char *s1 = session_of("run_warm_cancel"), *s2 = session_of("run_warm_fail"),
	           *s3 = session_of("run_warm_after");
	TH_CHECK(*s1 && *s2 && *s3 && strcmp(s1, s2) && strcmp(s2, s3) && strcmp(s1, s3),
	         "three sessions of three agents: %s %s %s", s1, s2, s3);
	TH_CHECK(metric("ww", "runnel_worker_warm_agents_started_total{agent=\"claude\"}") >= started + 2,
	         "the pool started an agent for each run");
}

/* What one warm run writes, the next cannot find. */
static void test_no_leak(void)
{
	wait_ready("ww", "claude", 1);
	dev_stub_otps_t o;
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "echo leakmark7 > ~/leak_home; echo leakmark7 > /tmp/leak_tmp; "
	                                           "mkdir -p assets; ls ~/.claude/projects/*/ > assets/mine.txt",
	                                    .final = "wrote" });
	submit("run_leak_a", "claude", NULL, NULL, NULL, NULL, "leak it leakmark7", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_leak_a", RUN_MS), "run_leak_a ended");
	const char *sid_a = session_of("run_leak_a");
	const char *mine = at_upload(&T, &o, "mine.txt");
	TH_CHECK(mine && *sid_a && strstr(mine, sid_a), "run_leak_a saw its own session file (%s): %s", sid_a,
	         mine ? mine : "(none)");
	wait_ready("ww", "claude", 1);
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets; { ls -a ~ /tmp; ls -R ~/.claude; "
	                                           "grep -rl leakmar[k]7 / --exclude-dir=proc --exclude-dir=sys; } "
	                                           "> assets/seen.txt 2>&1; true",
	                                    .final = "looked" });
	submit("run_leak_b", "claude", NULL, NULL, NULL, NULL, "look", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_leak_b", RUN_MS), "run_leak_b ended");
	const char *seen = at_upload(&T, &o, "seen.txt");
	TH_CHECK(th_streq(start_kind("ww", "run_leak_b"), "warm agent"), "run_leak_b was warm");
	TH_CHECK(seen && !strstr(seen, "leak_home") && !strstr(seen, "leak_tmp") && !strstr(seen, sid_a) &&
	                 !strstr(seen, "leakmark7"),
	         "nothing of run_leak_a in run_leak_b: %s", seen ? seen : "(no upload)");
}

/* A run with a skill takes a warm agent: the skill is in /root/skills. */
static void test_skill(void)
{
	wait_ready("ww", "claude", 1);
	dev_stub_otps_t o;
	fp_set(T.anthropic, &(fp_script_t){ .cmd = "mkdir -p assets; cat /root/skills/tables/data.txt > assets/skill.txt", .final = "skilled" });
	g_skill_url = bag("skill_tables.zip", NULL, NULL);
	submit("run_warm_skill", "claude", NULL, NULL, NULL, NULL, "use the skill", &o);
	g_skill_url = NULL;
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_warm_skill", RUN_MS), "run_warm_skill ended");
	TH_CHECK(th_streq(start_kind("ww", "run_warm_skill"), "warm agent"), "a run with skills is warm");
	TH_CHECK(th_streq(at_upload(&T, &o, "skill.txt"), "same\n"), "the skill was in /root/skills");
}

/* Key custody in a warm agent's sandbox. */
static void test_secrets(void)
{
	wait_ready("ww", "codex", 1);
	dev_stub_otps_t o;
	fp_set(T.openai, &(fp_script_t){ .cmd = "mkdir -p assets; { env; for p in /proc/[0-9]*; do cat $p/environ; echo; cat $p/cmdline; "
	                                        "echo; done; grep -rIl acp-tes[t]-key /root /tmp /run | sed s/^/FOUND$((1+1)):/; } "
	                                        "> assets/dump.txt 2>/dev/null",
	                                 .final = "dumped" });
	submit("run_warm_dump", "codex", NULL, NULL, NULL, NULL, "dump", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_warm_dump", RUN_MS), "dump run ended");
	TH_CHECK(th_streq(start_kind("ww", "run_warm_dump"), "warm agent"), "the dump run was warm");
	const char *dump = at_upload(&T, &o, "dump.txt");
	TH_CHECK(dump && strstr(dump, "OPENAI_API_KEY=rgw-") && !strstr(dump, AT_OPENAI_KEY) &&
	                 !strstr(dump, AT_ANTHROPIC_KEY) && !strstr(dump, "FOUND2:"),
	         "placeholders only in the warm sandbox");
	TH_CHECK(fp_seen(T.openai, "Bearer " AT_OPENAI_KEY), "the provider got the real key");
	TH_CHECK(th_redis_scan_contains(T.w.rc, AT_OPENAI_KEY) == 0 && th_redis_scan_contains(T.w.rc, AT_ANTHROPIC_KEY) == 0,
	         "no key in Redis");
	TH_CHECK(!wt_log_has(&T.w, "ww", AT_OPENAI_KEY) && !wt_log_has(&T.w, "ww", AT_ANTHROPIC_KEY) &&
	                 !wt_log_has(&T.w, "ww", "rgw-"),
	         "no key or placeholder in the worker log");
}

/* Runs a warm agent cannot serve start cold, and still work. */
static void test_cold_when_different(void)
{
	dev_stub_otps_t o;
	wait_ready("ww", "claude", 1);
	long discarded = metric("ww", "runnel_worker_warm_agents_discarded_total{agent=\"claude\"}");
	fp_set(T.anthropic, &(fp_script_t){ .final = "prompted" });
	submit("run_cold_sys", "claude", NULL, "Warm agents have no system prompt.", NULL, NULL, "sys", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_cold_sys", RUN_MS), "run_cold_sys ended");
	TH_CHECK(th_streq(start_kind("ww", "run_cold_sys"), "cold"), "a system prompt starts cold");
	TH_CHECK(th_streq(wt_state(&T.w, "run_cold_sys", "status"), "succeeded"), "and succeeds");
	TH_CHECK(fp_seen(T.anthropic, "Warm agents have no system prompt."), "with its system prompt");
	TH_CHECK(metric("ww", "runnel_worker_warm_agents_discarded_total{agent=\"claude\"}") == discarded + 1,
	         "the agent it took was discarded");
	TH_CHECK(wt_log_has(&T.w, "ww", "the warm claude agent is not used (the run has a system prompt); starting cold"),
	         "the log says why");

	/* Project notes the agent reads when its session starts: a warm
	 * session began without them. */
	static const char *const notes[][3] = { { "claude", "CLAUDE.md", "claudemd-marker-17" },
		                                { "codex", "AGENTS.md", "agentsmd-marker-18" } };
	for (int i = 0; i < 2; i++) {
		const char *id = th_strf("run_cold_notes_%s", notes[i][0]);
		wait_ready("ww", notes[i][0], 1);
		fp_set(i ? T.openai : T.anthropic, &(fp_script_t){ .final = "noted" });
		g_bag_url = bag(th_strf("notes_%s.zip", notes[i][0]), notes[i][1], th_strf("Project notes: %s.", notes[i][2]));
		submit(id, notes[i][0], NULL, NULL, NULL, NULL, "notes", &o);
		g_bag_url = NULL;
		TH_REQUIRE(wt_wait_terminal(&T.w, id, RUN_MS), "%s ended", id);
		TH_CHECK(th_streq(start_kind("ww", id), "cold"), "%s: a bag with %s starts cold", id, notes[i][1]);
		TH_CHECK(th_streq(wt_state(&T.w, id, "status"), "succeeded"), "%s succeeds", id);
		TH_CHECK(wt_log_has(&T.w, "ww", th_strf("the workspace has %s, which the agent reads when its session starts", notes[i][1])),
		         "%s: the log says why", id);
		TH_CHECK(fp_seen(i ? T.openai : T.anthropic, notes[i][2]), "the %s of the bag reached the model", notes[i][1]);
	}

	wait_ready("ww", "codex", 1);
	fp_set(T.openai, &(fp_script_t){ .final = "modelled" });
	submit("run_cold_model", "codex", NULL, NULL, "gpt-5.5", NULL, "model", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_cold_model", RUN_MS), "run_cold_model ended");
	TH_CHECK(th_streq(start_kind("ww", "run_cold_model"), "cold"), "a codex model starts cold");
	TH_CHECK(th_streq(wt_state(&T.w, "run_cold_model", "status"), "succeeded"), "and succeeds");

	wait_ready("ww", "claude", 1);
	submit("run_cold_net", "claude", NULL, NULL, NULL, "none", "net", &o);
	TH_REQUIRE(wt_wait_terminal(&T.w, "run_cold_net", RUN_MS), "run_cold_net ended");
	TH_CHECK(!th_streq(start_kind("ww", "run_cold_net"), "warm agent"), "another network is not warm");
}

static void test_bad_values(void)
{
	static const char *const cases[][2] = {
		{ "claude", "RUNNEL_WARM_AGENTS/--warm-agents: \\\"claude\\\" is not NAME:COUNT" },
		{ "claude:2,,codex:1", "RUNNEL_WARM_AGENTS/--warm-agents: \\\"claude:2,,codex:1\\\" is not a list of NAME:COUNT" },
		{ "gemini:1", "RUNNEL_WARM_AGENTS/--warm-agents: \\\"gemini\\\" is not an agent that starts warm (claude, codex)" },
		{ "claude:0", "RUNNEL_WARM_AGENTS/--warm-agents: \\\"claude:0\\\": COUNT must be 1 to 64" },
		{ "claude:x", "RUNNEL_WARM_AGENTS/--warm-agents: \\\"claude:x\\\" is not NAME:COUNT" },
		{ "claude:1,claude:1", "RUNNEL_WARM_AGENTS/--warm-agents: claude is listed twice" },
		{ "claude:3,codex:2", "RUNNEL_WARM_AGENTS/--warm-agents: 5 warm agents are more than the 4 slot(s)" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *name = th_strf("wbad%zu", i);
		const char *env[] = { th_strf("RUNNEL_WARM_AGENTS=%s", cases[i][0]), NULL };
		pid_t p = at_worker(&T, name, env);
		int s = 0;
		TH_CHECK(th_wait_exit(p, 20000, &s) == 0 && WIFEXITED(s) && WEXITSTATUS(s) == 2, "%s: exit 2", cases[i][0]);
		TH_CHECK(wt_log_has(&T.w, name, cases[i][1]), "%s: exact message", cases[i][0]);
	}
	/* A worker without the agents cannot keep them warm: it says so. */
	const char *env[] = { "RUNNEL_WARM_AGENTS=claude:1", NULL };
	pid_t p = wt_worker(&T.w, "wbadprefix", env);
	int s = 0;
	TH_CHECK(th_wait_exit(p, 20000, &s) == 0 && WIFEXITED(s) && WEXITSTATUS(s) == 2, "no prefix: exit 2");
	TH_CHECK(wt_log_has(&T.w, "wbadprefix",
	                    "warm agents: claude cannot start: this worker has no ACP agents installed (set RUNNEL_ACP_PREFIX)"),
	         "no prefix: exact message");
}

/* A worker stopped while its pool starts an agent exits cleanly and
 * leaves no warm agent's directory behind. */
static void test_drain_while_starting(void)
{
	const char *env[] = { "RUNNEL_WARM=0", "RUNNEL_WARM_AGENTS=claude:2", NULL };
	pid_t p = at_worker(&T, "wdrain", env);
	TH_REQUIRE(wt_wait_log(&T.w, "wdrain", "worker_started", 60000), "the worker started");
	int st = th_stop(p, 30000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "drained worker exit status %d", st);
	DIR *d = opendir(th_strf("%s/work-wdrain", T.w.dir));
	struct dirent *e;
	int left = 0;
	while (d && (e = readdir(d)))
		left += !strncmp(e->d_name, "agent.", 6);
	if (d)
		closedir(d);
	TH_CHECK(left == 0, "%d warm agent directories left", left);
}

int main(int argc, char **argv)
{
	th_init("acp_warm");
	if (at_setup(&T, argc, argv, NULL) == 77)
		return 77;
	test_bad_values();
	test_drain_while_starting();
	pid_t w = -1;
	test_same_as_cold(&w);
	test_never_returned();
	test_no_leak();
	test_skill();
	test_secrets();
	test_cold_when_different();
	int st = th_stop(w, 20000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker exit status %d", st);
	TH_CHECK(status_gone("ww"), "a worker that exits takes its warm agents out of runnel status");
	at_teardown(&T);
	return th_done();
}
