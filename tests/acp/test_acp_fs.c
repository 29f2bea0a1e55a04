/*
 * tests/acp/test_acp_fs.c - an ACP agent's fs/write_text_file and
 * fs/read_text_file through the real runnel-worker, warm (the default) and
 * cold (RUNNEL_WARM=0), with a scripted ACP agent (a small Node.js program
 * speaking JSON-RPC on stdin and stdout, below; the worker binds its
 * RUNNEL_NODE into every acp sandbox, so the test needs nothing more):
 *   - a write lands in the run's own workspace: the agent reads it back
 *     through fs/read_text_file and sees it in /root/workspace itself, and a
 *     file written to assets/ is uploaded;
 *   - the files it writes are charged to the run's cgroup: 2.7 MiB written
 *     raise the shmem of the run's cgroup by as much (with a cgroup);
 *   - writes past the run's disk_mb fill the run's tmpfs and end the run
 *     resource_limit, and nothing the agents wrote is on the host's disk
 *     under the work directory;
 *   - runs named like the worker's warm sandboxes of old ("warm-<pid>-<n>")
 *     plant a file through fs/write_text_file: no later run sees it.
 */
#include "tests/acp/acptest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/agent_acp.h"

static at_t T;

/* The scripted agent.  The prompt says what to do:
 *   fs     write acp_fs.txt and assets/acp_out.txt, read acp_fs.txt back
 *   big    write 900 KiB five times (past a disk_mb of 2; a line is 1 MiB
 *          at most)
 *   plant  write planted.txt
 *   mem    write 900 KiB three times, end a minute later
 *   list   list /root/workspace
 * and the result's message says what happened. */
static const char AGENT_JS[] =
        "const fs = require('fs');\n"
        "const rl = require('readline').createInterface({ input: process.stdin });\n"
        "const W = '/root/workspace';\n"
        "let n = 100;\n"
        "const waiting = new Map();\n"
        "function send(o) { process.stdout.write(JSON.stringify(o) + '\\n'); }\n"
        "function call(method, params) {\n"
        "  return new Promise((r) => { const i = ++n; waiting.set(i, r); send({ jsonrpc: '2.0', id: i, method, params }); });\n"
        "}\n"
        "async function write(path, content) {\n"
        "  const r = await call('fs/write_text_file', { sessionId: 'S1', path, content });\n"
        "  return 'result' in r ? 'ok' : 'error: ' + r.error.message;\n"
        "}\n"
        "async function read(path) {\n"
        "  const r = await call('fs/read_text_file', { sessionId: 'S1', path });\n"
        "  return 'result' in r ? r.result.content : 'error: ' + r.error.message;\n"
        "}\n"
        "async function turn(what) {\n"
        "  if (what === 'fs') {\n"
        "    const w = await write(W + '/acp_fs.txt', 'written over ACP');\n"
        "    const a = await write(W + '/assets/acp_out.txt', 'uploaded after ACP');\n"
        "    const r = await read(W + '/acp_fs.txt');\n"
        "    let seen = 'absent';\n"
        "    try { seen = fs.readFileSync(W + '/acp_fs.txt', 'utf8'); } catch (e) {}\n"
        "    return `write=${w} assets=${a} read=${r} seen=${seen}`;\n"
        "  }\n"
        "  if (what === 'big') {\n"
        "    for (let i = 0; i < 5; i++) {\n"
        "      const r = await write(W + '/big' + i + '.txt', 'x'.repeat(900 << 10));\n"
        "      if (r !== 'ok') return `big=${i} ${r}`;\n"
        "    }\n"
        "    return 'big=all written';\n"
        "  }\n"
        "  if (what === 'mem') {\n"
        "    for (let i = 0; i < 3; i++) await write(W + '/mem' + i + '.txt', 'm'.repeat(900 << 10));\n"
        "    await new Promise((r) => setTimeout(r, 60000));\n"
        "    return 'mem=done';\n"
        "  }\n"
        "  if (what === 'plant') return 'plant=' + (await write(W + '/planted.txt', 'planted'));\n"
        "  return 'list=' + fs.readdirSync(W).sort().join(',');\n"
        "}\n"
        "rl.on('line', async (l) => {\n"
        "  const m = JSON.parse(l);\n"
        "  if (!m.method && waiting.has(m.id)) { const r = waiting.get(m.id); waiting.delete(m.id); r(m); return; }\n"
        "  if (m.method === 'initialize') send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: 1 } });\n"
        "  else if (m.method === 'session/new') send({ jsonrpc: '2.0', id: m.id, result: { sessionId: 'S1' } });\n"
        "  else if (m.method === 'session/prompt') {\n"
        "    const t = m.params.prompt.filter((b) => b.type === 'text').map((b) => b.text);\n"
        "    const out = await turn(t.length ? t[t.length - 1].trim() : '');\n"
        "    send({ jsonrpc: '2.0', method: 'session/update', params: { sessionId: 'S1', update:\n"
        "      { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: out } } } });\n"
        "    send({ jsonrpc: '2.0', id: m.id, result: { stopReason: 'end_turn' } });\n"
        "  } else if ('id' in m && m.method) send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no' } });\n"
        "});\n";

/* Submits run_id running the scripted agent with prompt (and disk_mb when
 * > 0); waits for its end and returns the terminal line's message, its
 * code in *code ("" for a result; static buffers). */
static const char *run_agent_code(const char *run_id, const char *prompt, long disk_mb, dev_stub_otps_t *o,
                                  const char **code)
{
	dev_stub_run_t run = { 0 };
	run.config = json_pack("{s:{s:s,s:[s,s,s]}}", "agent", "kind", "acp", "argv", WORKER_ACP_NODE_IN_SANDBOX, "-e",
	                       AGENT_JS);
	if (disk_mb > 0)
		json_object_set_new(run.config, "limits", json_pack("{s:i}", "disk_mb", (json_int_t)disk_mb));
	wt_submit(&T.w, run_id, &run, prompt, 1, 0, o);
	json_decref(run.config);
	size_t n = 0;
	char **l = wt_ended_lines(&T.w, run_id, 60000, &n);
	static char msg[1024];
	*code = wt_check_terminal(l, n);
	snprintf(msg, sizeof(msg), "%s", n ? wt_field(l[n - 1], "message") : "");
	th_strv_free(l, n);
	return msg;
}

/* The same for a run that must end with a result: its message, or "". */
static const char *run_agent(const char *run_id, const char *prompt, long disk_mb, dev_stub_otps_t *o)
{
	const char *code;
	const char *msg = run_agent_code(run_id, prompt, disk_mb, o, &code);
	if (th_streq(code, ""))
		return msg;
	fprintf(stderr, "# %s ended %s: %s\n", run_id, code, msg);
	return "";
}

/* 1 once a run cgroup of the worker (*arg) holds the 2.7 MiB. */
static int mem_charged(void *arg)
{
	return wt_runs_max_shmem(*(pid_t *)arg) >= (long long)(2700 << 10);
}

/* 2.7 MiB written through fs/write_text_file are charged to the run's
 * cgroup, not to the worker's. */
static void test_charged(const char *mode, const char *name, pid_t w)
{
	if (!wt_log_has(&T.w, name, "cgroup v1") && !wt_log_has(&T.w, name, "cgroup v2")) {
		fprintf(stderr, "# %s: no writable cgroup on this machine: charge not checked\n", mode);
		return;
	}
	const char *mem_run = th_strf("run_mem_%s", mode);
	dev_stub_run_t run = { 0 };
	run.config = json_pack("{s:{s:s,s:[s,s,s]}}", "agent", "kind", "acp", "argv", WORKER_ACP_NODE_IN_SANDBOX, "-e",
	                       AGENT_JS);
	dev_stub_otps_t o;
	wt_submit(&T.w, mem_run, &run, "mem", 1, 0, &o);
	json_decref(run.config);
	int charged = th_wait_until(mem_charged, &w, 30000);
	long long shmem = wt_runs_max_shmem(w);
	fprintf(stderr, "# %s: 2.7 MiB written over ACP: the run's cgroup shmem is %lld KiB\n", mode, shmem / 1024);
	TH_CHECK(charged, "%s: the run's cgroup is charged for the writes: shmem %lld", mode, shmem);
	wt_ctl(&T.w, mem_run, "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
	TH_CHECK(wt_wait_terminal(&T.w, mem_run, 30000), "%s: the run ended", mode);
}

/* 1 when a file called name is anywhere under dir (not following links). */
static int tree_has(const char *dir, const char *name)
{
	DIR *d = opendir(dir);
	int hit = 0;
	struct dirent *de;
	while (d && !hit && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strcmp(de->d_name, name))
			hit = 1;
		else if (de->d_type == DT_DIR)
			hit = tree_has(th_strf("%s/%s", dir, de->d_name), name);
	}
	if (d)
		closedir(d);
	return hit;
}

/* The highest sequence number of a warm sandbox's tree in work (its name
 * "warm-<pid>-<n>" of old or "warm.<pid>.<n>"), or 0. */
static long warm_seq(const char *work)
{
	DIR *d = opendir(work);
	long best = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		const char *sep = strrchr(de->d_name, '.') > strrchr(de->d_name, '-') ? strrchr(de->d_name, '.')
		                                                                      : strrchr(de->d_name, '-');
		if (strncmp(de->d_name, "warm", 4) || !sep)
			continue;
		long n = strtol(sep + 1, NULL, 10);
		if (n > best)
			best = n;
	}
	if (d)
		closedir(d);
	return best;
}

static void test_mode(const char *mode, const char *warm)
{
	const char *env[] = { th_strf("RUNNEL_WARM=%s", warm), NULL };
	const char *name = th_strf("fs-%s", mode);
	pid_t w = at_worker(&T, name, env);
	wt_warmup(&T.w);
	const char *work = th_strf("%s/work-%s", T.w.dir, name);

	dev_stub_otps_t o;
	const char *got = run_agent(th_strf("run_fs_%s", mode), "fs", 0, &o);
	TH_CHECK(th_streq(got, "write=ok assets=ok read=written over ACP seen=written over ACP"), "%s: %s", mode, got);
	const char *up = at_upload(&T, &o, "acp_out.txt");
	TH_CHECK(up && th_streq(up, "uploaded after ACP"), "%s: the file written to assets/ is uploaded: %s", mode,
	         up ? up : "(none)");

	test_charged(mode, name, w);

	/* The third 900 KiB file no longer fits in 2 MiB: the write fails on
	 * the full tmpfs, and the guard ends the run over its disk limit. */
	const char *code;
	got = run_agent_code(th_strf("run_big_%s", mode), "big", 2, &o, &code);
	TH_CHECK(th_streq(code, "resource_limit") && th_streq(got, "The run wrote more than 2 MiB to its workspace."),
	         "%s: writes past disk_mb: %s %s", mode, code, got);

	/* Runs named like the trees of the warm sandboxes started next (as
	 * they were spelled before: "warm-<pid>-<n>") plant a file: each run
	 * takes the idle sandbox n while the pool starts n + 1. */
	long seq = warm_seq(work);
	for (long k = seq + 1; k <= seq + 2; k++) {
		const char *id = th_strf("warm-%ld-%ld", (long)w, k);
		got = run_agent(id, "plant", 0, &o);
		TH_CHECK(th_streq(got, "plant=ok"), "%s: %s: %s", mode, id, got);
	}
	for (int k = 0; k < 3; k++) {
		got = run_agent(th_strf("run_list_%s_%d", mode, k), "list", 0, &o);
		TH_CHECK(strncmp(got, "list=", 5) == 0 && !strstr(got, "planted.txt"), "%s: a later run sees %s", mode, got);
	}
	/* Everything the agents wrote was on the runs' tmpfs, none on disk. */
	TH_CHECK(!tree_has(work, "planted.txt") && !tree_has(work, "acp_fs.txt") && !tree_has(work, "big0.txt"),
	         "%s: files the agents wrote are on the host disk under %s", mode, work);
	wt_stop_worker(w, 15000, name);
}

int main(int argc, char **argv)
{
	th_init("acp_fs");
	int rc = at_setup(&T, argc, argv, NULL);
	if (rc)
		return rc;
	test_mode("warm", "1");
	test_mode("cold", "0");
	at_teardown(&T);
	return th_done();
}
