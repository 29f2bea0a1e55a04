/*
 * worker/agent_mock.c - {"kind":"mock","script":"demo"} (SPEC §5): the
 * worker's own runnel-mock-agent, bound read-only into the sandbox at
 * /run/runnel/runnel-mock-agent, speaking the envelope like a command.
 */
#include "worker/agent.h"
#include "worker/agent_native.h"

#include <stdio.h>

#define MOCK_AGENT_IN_SANDBOX RN_SANDBOX_MOCK_AGENT

/* The one bind of the mock: its binary, read-only (bwrap only; the process
 * driver runs it at its host path). */
static int mock_warm_binds(const worker_config_t *cfg, rn_strv_t *binds)
{
	if (!cfg->mock_agent_path[0] || cfg->driver != WORKER_SANDBOX_BWRAP)
		return 0;
	return rn_strv_addf(binds, "%s:%s", cfg->mock_agent_path, MOCK_AGENT_IN_SANDBOX);
}

static int mock_prepare(const worker_agent_ctx_t *ctx, worker_agent_launch_t *launch,
                        void **state, char *errstr, size_t errstr_size)
{
	const worker_config_t *cfg = ctx->cfg;
	const char *script = json_string_value(json_object_get(ctx->agent, "script"));
	*state = NULL;
	if (!script)
		script = "demo";
	if (!cfg->mock_agent_path[0]) {
		snprintf(errstr, errstr_size, "this worker has no runnel-mock-agent (set RUNNEL_MOCK_AGENT)");
		return -1;
	}
	int bad;
	if (cfg->driver == WORKER_SANDBOX_BWRAP)
		bad = rn_strv_add(&launch->argv, MOCK_AGENT_IN_SANDBOX) < 0 ||
		        mock_warm_binds(cfg, &launch->ro_binds) < 0;
	else
		bad = rn_strv_add(&launch->argv, cfg->mock_agent_path) < 0;
	if (bad || rn_strv_add(&launch->argv, script) < 0) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	return 0;
}

const worker_agent_ops_t worker_agent_mock = {
	.kind = "mock",
	.flags = WORKER_AGENT_NATIVE | WORKER_AGENT_COMMAND_EGRESS,
	.warm_binds = mock_warm_binds,
	.prepare = mock_prepare,
};
