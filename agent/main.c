/*
 * agent/main.c - runnel-agent, runnel's own model loop (SPEC §5 agent kind
 * "builtin").  It reads the turn line from stdin, talks to an
 * OpenAI-compatible Chat Completions API at OPENAI_BASE_URL with
 * OPENAI_API_KEY (both from the run's environment), and prints envelope
 * lines on stdout.  Later stdin lines are control lines (replies to asks,
 * cancel).  SIGTERM stops the model request and any tool at once.
 *
 * Usage: runnel-agent [options]   (every option has a RUNNEL_AGENT_* twin)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/chat.h"
#include "agent/ctl.h"
#include "agent/emit.h"
#include "agent/loop.h"
#include "common/conf.h"
#include "common/dynbuf.h"
#include "common/sandbox_layout.h"
#include "proto/jsonerr.h"

#define TURN_MAX (16 * 1024 * 1024)

/* Reads the first line of fd.  Returns it (NUL-terminated, without the
 * newline) and the bytes read past it. */
static char *read_turn(int fd, char **rest, size_t *rest_len)
{
	rn_dynbuf_t b;
	char chunk[64 * 1024];
	size_t scanned = 0;
	rn_dynbuf_init(&b, TURN_MAX);
	*rest = NULL;
	*rest_len = 0;
	for (;;) {
		char *nl = b.len > scanned ? memchr(b.p + scanned, '\n', b.len - scanned) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - b.p);
			*rest_len = b.len - n - 1;
			if (*rest_len) {
				*rest = malloc(*rest_len);
				if (*rest)
					memcpy(*rest, nl + 1, *rest_len);
				else
					*rest_len = 0;
			}
			b.p[n] = '\0';
			return rn_dynbuf_take(&b, NULL);
		}
		scanned = b.len;
		/* Never past the cap: a turn without a newline by then is refused. */
		size_t room = b.max - b.len;
		if (room == 0)
			break;
		ssize_t r = read(fd, chunk, room < sizeof(chunk) ? room : sizeof(chunk));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (b.len == 0)
				break;
			return rn_dynbuf_take(&b, NULL); /* a turn without its newline, then EOF */
		}
		if (rn_dynbuf_add(&b, chunk, (size_t)r) < 0)
			break;
	}
	rn_dynbuf_free(&b);
	return NULL;
}

int main(int argc, char **argv)
{
	char *workspace = NULL, *skills = NULL;
	long max_steps = 0, req_timeout = 0, retries = 0, retry_max = 0, backoff = 0, bash_timeout = 0,
	     output_max = 0, mcp_timeout = 0;
	const rn_opt_t opts[] = {
		{ "workspace", 0, "RUNNEL_AGENT_WORKSPACE", RN_OPT_STR, &workspace, NULL, "DIR",
		  "the workspace the tools work in and are confined to (default: the current directory, where the sandbox starts the agent)", 0, 0 },
		{ "skills-dir", 0, "RUNNEL_AGENT_SKILLS_DIR", RN_OPT_STR, &skills, NULL, "DIR",
		  "where skills are found, */SKILL.md (default: skills beside the workspace, " RN_SANDBOX_SKILLS " in the sandbox)", 0, 0 },
		{ "max-steps", 0, "RUNNEL_AGENT_MAX_STEPS", RN_OPT_INT, &max_steps, "50", "N",
		  "model answers per run before error max_steps", 1, 10000 },
		{ "request-timeout-sec", 0, "RUNNEL_AGENT_REQUEST_TIMEOUT_SEC", RN_OPT_INT, &req_timeout, "120", "SEC",
		  "a model request that sends nothing for this long ends model_timeout", 1, 3600 },
		{ "retries", 0, "RUNNEL_AGENT_RETRIES", RN_OPT_INT, &retries, "3", "N",
		  "retries of a model request answered 429/5xx or unreachable", 0, 20 },
		{ "retry-max-sec", 0, "RUNNEL_AGENT_RETRY_MAX_SEC", RN_OPT_INT, &retry_max, "60", "SEC",
		  "longest wait before a retry (a longer Retry-After gives up)", 0, 3600 },
		{ "backoff-ms", 0, "RUNNEL_AGENT_BACKOFF_MS", RN_OPT_INT, &backoff, "1000", "MS",
		  "first retry wait without Retry-After (doubles per retry)", 0, 600000 },
		{ "bash-timeout-sec", 0, "RUNNEL_AGENT_BASH_TIMEOUT_SEC", RN_OPT_INT, &bash_timeout, "300", "SEC",
		  "limit of one bash tool call", 1, 86400 },
		{ "output-max", 0, "RUNNEL_AGENT_OUTPUT_MAX", RN_OPT_INT, &output_max, "30000", "BYTES",
		  "bytes of one tool's output the model sees", 1024, 16 * 1024 * 1024 },
		{ "mcp-timeout-sec", 0, "RUNNEL_AGENT_MCP_TIMEOUT_SEC", RN_OPT_INT, &mcp_timeout, "60", "SEC",
		  "limit of one MCP request (start-up and tool calls)", 1, 3600 },
		RN_OPT_END,
	};
	char err[512];
	int argi = 1;
	int pr = rn_conf_parse(opts, argc, argv, &argi, err, sizeof(err));
	if (pr == 1) {
		printf("Usage: runnel-agent [options] < turn\n"
		       "runnel's own model loop: reads the turn line on stdin, prints envelope lines.\n"
		       "Provider: OPENAI_BASE_URL (default https://api.openai.com/v1), OPENAI_API_KEY.\n\n");
		rn_conf_usage(stdout, opts);
		rn_conf_free(opts);
		return 0;
	}
	if (pr < 0 || argi < argc) {
		fprintf(stderr, "runnel-agent: %s\n", pr < 0 ? err : "unexpected argument");
		rn_conf_free(opts);
		return 2;
	}

	/* The key is for the model request only: tools and MCP servers do not
	 * inherit it, and no output line may carry it. */
	char *key = getenv("OPENAI_API_KEY") ? strdup(getenv("OPENAI_API_KEY")) : NULL;
	if (getenv("OPENAI_API_KEY")) {
		char *v = getenv("OPENAI_API_KEY");
		explicit_bzero(v, strlen(v));
	}
	unsetenv("OPENAI_API_KEY");
	agent_emit_secret(key);
	const char *base = getenv("OPENAI_BASE_URL");
	/* Without a key the default provider can only answer 401, after the
	 * retries and their backoff: say what is missing at once instead.  A
	 * base URL of its own may need no key (a local vLLM or Ollama). */
	int no_key = (!key || !*key) && (!base || !*base);
	if (!base || !*base)
		base = "https://api.openai.com/v1";

	int rc = 1;
	char *rest = NULL;
	size_t rest_len = 0;
	char *line = NULL;
	json_t *turn = NULL;
	if (agent_ctl_init() < 0 || agent_chat_global_init() < 0) {
		fprintf(stderr, "runnel-agent: cannot set up: %s\n", strerror(errno));
		goto out;
	}
	line = read_turn(0, &rest, &rest_len);
	if (!line) {
		agent_emit_error("model_error", "runnel-agent got no turn line on stdin");
		goto out;
	}
	json_error_t jerr;
	turn = json_loads(line, 0, &jerr);
	explicit_bzero(line, strlen(line)); /* it holds the prompt */
	if (!json_is_object(turn)) {
		/* jansson's text may quote the line, which holds the prompt. */
		agent_emit_error("model_error", "runnel-agent could not read its turn line: %s",
		                 turn ? "not a JSON object" : proto_json_error_words(&jerr, "not valid JSON"));
		goto out;
	}
	if (no_key) {
		agent_emit_error("model_error", "runnel-agent has no model key configured: the run's environment "
		                                "sets neither OPENAI_API_KEY nor OPENAI_BASE_URL");
		goto out;
	}
	if (agent_ctl_start(0, rest, rest_len) < 0) {
		agent_emit_error("model_error", "runnel-agent could not start its control reader");
		goto out;
	}

	/* Both sandbox drivers start the agent in the run's workspace
	 * (/root/workspace under bwrap) with the skills beside it
	 * (/root/skills). */
	char ws_buf[4096], sk_buf[4200];
	if (workspace)
		snprintf(ws_buf, sizeof(ws_buf), "%s", workspace);
	else if (!getcwd(ws_buf, sizeof(ws_buf)))
		snprintf(ws_buf, sizeof(ws_buf), ".");
	if (skills) {
		snprintf(sk_buf, sizeof(sk_buf), "%s", skills);
	} else {
		/* dirname(workspace)/skills, spelled without ".." so that the
		 * prompt shows /root/skills. */
		snprintf(sk_buf, sizeof(sk_buf), "%s", ws_buf);
		char *slash = strrchr(sk_buf, '/');
		if (slash && slash != sk_buf)
			snprintf(slash, sizeof(sk_buf) - (size_t)(slash - sk_buf), "/skills");
		else
			snprintf(sk_buf, sizeof(sk_buf), "%s/../skills", ws_buf);
	}

	agent_loop_cfg_t cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.chat.base_url = base;
	cfg.chat.api_key = key;
	cfg.chat.timeout_ms = req_timeout * 1000;
	cfg.chat.retries = (int)retries;
	cfg.chat.backoff_ms = backoff;
	cfg.chat.retry_max_ms = retry_max * 1000;
	cfg.tools.workspace = ws_buf;
	cfg.tools.skills = sk_buf;
	cfg.tools.bash_timeout_ms = bash_timeout * 1000;
	cfg.tools.output_max = (size_t)output_max;
	cfg.max_steps = (int)max_steps;
	cfg.mcp_timeout_ms = mcp_timeout * 1000;
	rc = agent_loop_run(&cfg, turn);
out:
	agent_ctl_shutdown();
	json_decref(turn);
	free(line);
	free(rest);
	if (key) {
		explicit_bzero(key, strlen(key));
		free(key);
	}
	agent_emit_free();
	agent_chat_global_free();
	rn_conf_free(opts);
	return rc;
}
