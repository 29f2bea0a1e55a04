/*
 * tests/acp/fakeprov.h - scripted fake model providers for the acp tests:
 * an Anthropic Messages API (POST /v1/messages, streaming SSE or JSON) and
 * an OpenAI Responses API (POST /v1/responses, streaming SSE), each on a
 * free 127.0.0.1 port, in the test's own process (one thread per
 * connection; every answer closes its connection).
 *
 * The script decides each model call from the conversation it is sent, so
 * extra calls an agent makes (titles, probes) get a plain text answer:
 *   - the request offers the shell tool (Anthropic "Bash"; OpenAI
 *     "exec_command" or "shell") and holds no tool result yet
 *     -> one call of that tool running script.cmd (when cmd is set);
 *   - otherwise -> the text script.final.
 *   - script.status != 0 -> every model call answers that HTTP status with
 *     the provider's error JSON ("fake provider failure");
 *   - script.delay_ms: wait before answering a model call (a slow provider).
 * HEAD and GET requests (probes, model lists) get a small 200.
 *
 * Agents in bwrap reach it because the acp kind shares the host network.
 * @locality the test's main thread for every function; the server runs on
 * its own threads.
 */
#ifndef RUNNEL_TESTS_ACP_FAKEPROV_H
#define RUNNEL_TESTS_ACP_FAKEPROV_H

typedef enum { FP_ANTHROPIC = 0,
	       FP_OPENAI } fp_kind_t;

typedef struct fp_script {
	const char *cmd;   /* shell command of the tool call; NULL = text only */
	const char *final; /* final text (NULL = "Done.") */
	int status;        /* 0, or an HTTP status for every model call */
	int delay_ms;      /* before each model answer */
} fp_script_t;

typedef struct fp fp_t;

/* Starts a provider with an empty script (text only).  NULL on failure (printed). */
fp_t *fp_start(fp_kind_t kind);
/* Replaces the script (strings copied). */
void fp_set(fp_t *p, const fp_script_t *script);
/* "http://127.0.0.1:PORT" */
const char *fp_url(const fp_t *p);
/* Model calls answered so far (POSTs to the model route). */
int fp_calls(fp_t *p);
/* 1 when some request (headers or body) received so far contained needle. */
int fp_seen(fp_t *p, const char *needle);
/* The wall-clock time (CLOCK_REALTIME, ms) at which the first model call
 * whose request held "[[tag:TAG]]" arrived, or -1 (the bench's per-run
 * marker; the first FP_TAGS_MAX tagged calls are kept). */
#define FP_TAGS_MAX 1024
long long fp_tag_ms(fp_t *p, const char *tag);
/* Stops serving; waits for connections still open (slow answers are cut). */
void fp_stop(fp_t *p);

#endif
