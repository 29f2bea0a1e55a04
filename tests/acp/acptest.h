/*
 * tests/acp/acptest.h - what the acp worker tests share: the worker fixture
 * (tests/worker/wtest.h) with the two fake providers and a runnel-worker
 * that has the ACP agents (RUNNEL_ACP_PREFIX, RUNNEL_NODE), and helpers to
 * submit an acp run and find lines in its stream.
 *
 * Every test program takes the agents' prefix and Node.js as arguments:
 *   test_acp_X PREFIX NODE
 */
#ifndef RUNNEL_TESTS_ACP_ACPTEST_H
#define RUNNEL_TESTS_ACP_ACPTEST_H

#include "tests/acp/fakeprov.h"
#include "tests/worker/wtest.h"

#define AT_ANTHROPIC_KEY "sk-ant-acp-test-key-5e6f7a8b9c"
#define AT_OPENAI_KEY    "sk-oai-acp-test-key-1a2b3c4d5e"

typedef struct at {
	wt_t w;
	fp_t *anthropic;
	fp_t *openai;
	const char *prefix;
	const char *node;
} at_t;

/* Checks the arguments, starts the fixture and the fakes (no worker yet).
 * Returns 77 (skip) when bwrap cannot run here, else 0. */
int at_setup(at_t *t, int argc, char **argv, const char *redis_extra);
void at_teardown(at_t *t);

/* A worker named name with the ACP settings plus extra env (may be NULL). */
pid_t at_worker(at_t *t, const char *name, const char *const *extra);

/*
 * Submits run_id with config.agent = agent_json, permission_mode (NULL =
 * none in the config) and the provider variables for the preset in /env
 * (both providers' base URL and key).  Fills *o.
 */
void at_submit(at_t *t, const char *run_id, const char *agent_json, const char *permission_mode,
               const char *prompt, dev_stub_otps_t *o);

/* Waits for a line of type (and status, may be NULL) in the run's stream;
 * returns its index, or -1 at the deadline. */
long at_wait_line(at_t *t, const char *run_id, const char *type, const char *status, int timeout_ms);

/* The content of file name the run of o uploaded (harness-owned), or NULL
 * when the workspace stub received none. */
const char *at_upload(at_t *t, const dev_stub_otps_t *o, const char *name);

/* 1 when some process on the machine has needle in its command line. */
int at_process_with(const char *needle);

/* fn(pid, arg) for each process with needle in its command line, until
 * it returns non-zero; that value, or 0. */
int at_each_process_with(const char *needle, int (*fn)(const char *pid, void *arg), void *arg);

#endif
