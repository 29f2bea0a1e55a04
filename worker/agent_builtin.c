/*
 * worker/agent_builtin.c - the adapter for agent kind "builtin" (SPEC §5),
 * also used when the config has no `agent`: runnel-agent, runnel's own model
 * loop, bound into the sandbox like the mock agent.  It owns the launch
 * (binary, flags from the agent object, the host network until the egress
 * policy decides per run); the rest is envelope-native (worker/agent_native.h):
 * the turn line, then replies and cancel as stdin control lines.
 */
#include "worker/agent.h"
#include "worker/agent_native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUILTIN_IN_SANDBOX WORKER_AGENT_BIN_DIR "/runnel-agent"

/* Integer fields of the agent object that become runnel-agent flags. */
static const struct {
	const char *field, *flag;
	long min, max;
} builtin_flags[] = {
	{ "max_steps", "--max-steps", 1, 10000 },
	{ "request_timeout_sec", "--request-timeout-sec", 1, 3600 },
	{ "retries", "--retries", 0, 20 },
	{ "bash_timeout_sec", "--bash-timeout-sec", 1, 86400 },
	{ "mcp_timeout_sec", "--mcp-timeout-sec", 1, 3600 },
	{ "output_max", "--output-max", 1024, 16 * 1024 * 1024 },
};

static int builtin_prepare(const worker_agent_ctx_t *ctx, worker_agent_launch_t *launch, void **state,
                           char *errstr, size_t errstr_size)
{
	const worker_config_t *cfg = ctx->cfg;
	*state = NULL;
	if (!cfg->builtin_agent_path[0]) {
		snprintf(errstr, errstr_size, "this worker has no runnel-agent (set RUNNEL_BUILTIN_AGENT)");
		return -1;
	}
	if (cfg->driver == WORKER_SANDBOX_BWRAP) {
		if (rn_strv_add(&launch->argv, BUILTIN_IN_SANDBOX) < 0 ||
		    rn_strv_addf(&launch->ro_binds, "%s:%s", cfg->builtin_agent_path, BUILTIN_IN_SANDBOX) < 0)
			goto oom;
	} else if (rn_strv_add(&launch->argv, cfg->builtin_agent_path) < 0) {
		goto oom;
	}
	for (size_t i = 0; i < sizeof(builtin_flags) / sizeof(builtin_flags[0]); i++) {
		const json_t *v = ctx->agent ? json_object_get(ctx->agent, builtin_flags[i].field) : NULL;
		if (!v)
			continue;
		if (!json_is_integer(v) || json_integer_value(v) < builtin_flags[i].min ||
		    json_integer_value(v) > builtin_flags[i].max) {
			snprintf(errstr, errstr_size, "agent.%s must be an integer from %ld to %ld", builtin_flags[i].field,
			         builtin_flags[i].min, builtin_flags[i].max);
			return -1;
		}
		if (rn_strv_add(&launch->argv, builtin_flags[i].flag) < 0 ||
		    rn_strv_addf(&launch->argv, "%lld", (long long)json_integer_value(v)) < 0)
			goto oom;
	}
	/* The model API is outside: builtin shares the host network until the
	 * egress policy decides per run. */
	launch->share_net = 1;
	return 0;
oom:
	snprintf(errstr, errstr_size, "out of memory");
	return -1;
}

const worker_agent_ops_t worker_agent_builtin = {
	.kind = "builtin",
	.flags = WORKER_AGENT_NATIVE | WORKER_AGENT_DEFAULT,
	.prepare = builtin_prepare,
	/* The cancel line lets runnel-agent stop its model request and tools
	 * before the SIGTERM arrives. */
	.on_cancel = worker_agent_native_on_cancel,
};
