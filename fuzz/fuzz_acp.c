/*
 * fuzz/fuzz_acp.c - libFuzzer target for the ACP mapper
 * (worker_acp_on_line): an untrusted agent's JSON-RPC, parsed outside the
 * sandbox, which drives file reads and writes beneath the workspace.  The
 * input is split into lines and fed to a fresh session after its
 * initialize request (ask mode, so permission requests become asks; the
 * replies are answered in turn).  Every line the session emits must be a
 * valid envelope line, and everything it writes to the agent's stdin one
 * JSON object per line.  File requests work on a private temporary
 * workspace made once per process.
 */
#include "worker/agent_acp.h"

#include "proto/envelope.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static proto_env_t *checker;
static char ws[64];
static int ws_fd = -1; /* the session borrows it, as from a run */

static void emit_cb(void *loop, const char *line, size_t len)
{
	(void)loop;
	proto_env_line_t out;
	proto_env_process(checker, line, len, 1, &out);
	if (out.action != PROTO_ENV_DROP && !out.valid) {
		if (getenv("FUZZ_ACP_SHOW"))
			fprintf(stderr, "invalid: %s\n  %.*s\n", out.reason, (int)len, line);
		__builtin_trap();
	}
}

static int write_cb(void *loop, const char *buf, size_t len)
{
	(void)loop;
	if (len == 0 || buf[len - 1] != '\n' || memchr(buf, '\n', len - 1))
		__builtin_trap();
	json_t *j = json_loadb(buf, len - 1, 0, NULL);
	if (!json_is_object(j))
		__builtin_trap();
	json_decref(j);
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void ws_remove(void)
{
	nftw(ws, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ws[0]) {
		snprintf(ws, sizeof(ws), "/tmp/runnel-fuzz-acp.XXXXXX");
		if (!mkdtemp(ws))
			__builtin_trap();
		atexit(ws_remove);
		ws_fd = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (ws_fd < 0)
			__builtin_trap();
	}
	proto_env_free(checker);
	checker = proto_env_new(0);
	proto_env_allow_asks(checker, 1);

	worker_acp_opts_t o = { 0 };
	char err[128];
	o.preset = size && (data[0] & 1) ? WORKER_ACP_PRESET_CLAUDE : WORKER_ACP_PRESET_CODEX;
	o.perm = WORKER_ACP_PERM_ASK;
	o.run_id = "run_fuzz";
	o.prompt = "the prompt";
	o.model = "m";
	o.workspace_fd = ws_fd;
	worker_acp_t *s = worker_acp_new(&o, err, sizeof(err));
	if (!s)
		__builtin_trap();
	worker_agent_io_t io = { emit_cb, write_cb, NULL };
	if (worker_acp_start(s, &io) < 0)
		__builtin_trap();
	const char *p = (const char *)data, *end = p + size;
	int nth = 0;
	while (p < end && !worker_acp_done(s)) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		worker_acp_on_line(s, p, len, &io);
		/* Answer the asks as they come, with each kind of reply. */
		char id[32];
		snprintf(id, sizeof(id), "ask_%d", ++nth);
		worker_acp_on_reply(s, id, nth % 3 == 0 ? "allow_once" : NULL, nth % 3 == 1 ? "no" : NULL, nth % 3 == 2,
		                    &io);
		p += len + 1;
	}
	worker_acp_on_eof(s, &io);
	worker_acp_free(s);
	return 0;
}
