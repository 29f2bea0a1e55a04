/*
 * worker/warm_agent.h - warm agents (RUNNEL_WARM_AGENTS=claude:2,codex:1):
 * per warm name of a WORKER_AGENT_WARM kind (worker/agent.h), a few
 * sandboxes started ahead of need with the agent already running inside
 * and the part of its handshake that does not depend on the run done
 * (for ACP: initialize and session/new).  A run that takes one sends only
 * what is its own (mode, model, prompt).  See docs/worker.md ("Warm
 * agents").
 *
 * What a warm agent has before any run exists, and how the run binds it:
 *   - its sandbox is a warm sandbox's (worker/warm.h: own run directory,
 *     workspace bound, skills/ bound empty at /root/skills for the run's
 *     skills, own cgroup under the worker's limits) with its own
 *     network namespace, the egress bridge in front of the agent, and a
 *     socket directory (the run directory's sock/) bound at
 *     /run/runnel/sock; the bridges connect to egress.sock and
 *     gateway.sock there, which only the run that takes the agent creates
 *     (its egress proxy and model gateway);
 *   - its environment is what a run whose /env holds nothing but its
 *     provider gets: the gateway's in-sandbox base URL and a placeholder
 *     minted for this agent (worker_gateway_placeholder).  The run that
 *     takes it opens its gateway with that placeholder, bound to the run's
 *     real key, budget and usage: no key ever enters the sandbox, and the
 *     placeholder is worthless until its run exists;
 *   - a run fits only when the launch it would get cold is exactly this
 *     one (argv, binds, sandbox shape; environment but for RUNNEL_RUN_ID,
 *     TRACEPARENT and the gateway variables of providers the agent does
 *     not use; the kind's own rules: worker_agent_ops_t.warm_fits);
 *     anything else (a system prompt, MCP servers, project notes in the
 *     bag, other /env variables, a setup script, another network) starts
 *     cold, the warm agent discarded.
 *
 * A warm agent serves one run and is never returned: the run's end (any
 * end, cancel and failure included) removes its sandbox, run directory
 * and cgroup like a cold run's.  The pool's thread forks every sandbox and
 * refills one agent at a time, the kind with the fewest ready first.
 * While the worker has runs in flight, every agent of the pool (starting
 * or idle) has the lowest CPU weight, so a refill yields to those runs;
 * with none it has the default weight, so that other load on the machine
 * does not starve it.  The run that takes an agent gives it the default.
 *
 * @locality take/fits/use/free: any run thread; new/busy/drain/free/stats:
 * the main thread.
 */
#ifndef RUNNEL_WORKER_WARM_AGENT_H
#define RUNNEL_WORKER_WARM_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/strv.h"
#include "worker/agent.h"
#include "worker/config.h"
#include "worker/metrics.h"
#include "worker/warm.h"

typedef struct worker_warm_agent {
	worker_warm_sb_t w; /* the sandbox (agent running), run directory, cgroup */
	const worker_agent_ops_t *ops;
	char name[32];             /* its warm name ("claude") */
	char token[96];            /* the gateway placeholder in its environment (secret until its run ends) */
	rn_strv_t argv;            /* the agent's argv as the kind's prepare makes it (no bridges) */
	rn_strv_t env;             /* its environment, without the proxy variables */
	rn_strv_t binds;           /* the launch's read-only binds (no gateway bridge) */
	const char *egress_bridge; /* the worker's bridge (cfg) */
	void *hs;                  /* the kind's warm_handshake state */
	int64_t ready_ms;          /* monotonic: handshake done */
} worker_warm_agent_t;

typedef struct worker_warm_agents worker_warm_agents_t;

/*
 * Starts the pool of cfg's warm agents (cfg->n_warm_agents names) and its
 * refill thread, after checking that each kind can build its launch on
 * this worker (agents installed, the egress bridge there, network
 * allowlist).  NULL with errstr ("warm agents: ...").  cfg and m outlive
 * the pool; m's warm_agent series must have been made (worker_metrics_warm_agents).
 */
worker_warm_agents_t *worker_warm_agents_new(const worker_config_t *cfg, worker_metrics_t *m, char *errstr,
                                             size_t errstr_size);

/* A ready agent of that warm name (still running), or NULL; the caller
 * owns it (worker_warm_agent_free) and the thread starts a replacement. */
worker_warm_agent_t *worker_warm_agents_take(worker_warm_agents_t *p, const char *name);

/*
 * 1 when spec (the run's cold sandbox, with launch_argv the kind's argv
 * before the gateway's bridge and spec->envp the run's environment) is
 * exactly what a runs in; else 0 with why ("the environment differs: FOO").
 */
int worker_warm_agent_fits(const worker_warm_agent_t *a, const worker_sandbox_spec_t *spec,
                           char *const *launch_argv, char *why, size_t why_size);

/* Moves the running sandbox into *sb.  0, or -1 when it ended meanwhile
 * (then a is left to worker_warm_agent_free). */
int worker_warm_agent_use(worker_warm_agent_t *a, worker_sandbox_t *sb);

/* Kills what is left of a, frees it; keeps the run directory when keep_ws
 * (the run that took it owns it).  m counts a discard when not used. */
void worker_warm_agent_free(worker_warm_agent_t *a, int keep_ws);

/* The worker has runs runs in flight (claimed, not yet ended): above 0
 * the pool's agents get the lowest CPU weight, at 0 the default. */
void worker_warm_agents_busy(worker_warm_agents_t *p, size_t runs);

/* Stops refilling and removes every ready agent (draining). */
void worker_warm_agents_drain(worker_warm_agents_t *p);

/* For `runnel status` and the logs: per name, ready and wanted. */
size_t worker_warm_agents_count(worker_warm_agents_t *p, size_t *ready, size_t *wanted);

/* Drains, stops the thread, frees.  After every run ended. */
void worker_warm_agents_free(worker_warm_agents_t *p);

#endif
