/*
 * worker/config.h - runnel-worker's settings: one flag table (flags with
 * RUNNEL_* twins, SPEC §8), validated once at start into a plain struct.
 *
 * The job key is read from the environment only (RUNNEL_JOB_KEY), never
 * from argv, so it does not show in `ps`; it is never echoed.
 *
 * @locality load, limits and free: the main thread, before any other thread
 * starts / after every thread was joined; in between the struct is
 * read-only and every thread reads it.
 */
#ifndef RUNNEL_WORKER_CONFIG_H
#define RUNNEL_WORKER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/conf.h"
#include "common/util.h"
#include "proto/job.h"
#include "worker/gateway.h"
#include "worker/limits.h"
#include "worker/sandbox.h"

typedef struct worker_config {
	/* Raw option values (owned; freed by worker_config_free). */
	char *kafka_brokers;
	char *jobs_topic;
	char *group;
	char *redis_url;
	char *key_prefix;
	long slots;
	long lease_sec;
	long drain_sec;
	char *sandbox;
	long max_runtime_sec;
	long retention_sec;
	char *metrics_listen;
	char *work_dir;
	char *worker_id;
	char *log_level;
	int require_sealed;
	long kill_grace_ms;
	long line_max;
	long stderr_max;
	long ask_timeout_sec;
	char *sandbox_net;
	char *rootfs;
	char *bwrap_path;
	char *mock_agent;
	char *builtin_agent; /* runnel-agent (agent kind builtin) */
	rn_kv_list_t kafka_props;
	/* queue: per-tenant caps */
	long tenant_max_runs;
	char *tenant_max_runs_for;
	long queue_wait_replicas;
	/* acknowledged output (worker/publish.h worker_pub_set_wait) */
	long redis_wait_replicas;
	long redis_wait_timeout_ms;
	/* acp agents (worker/agent_acp.c) */
	char *acp_prefix; /* agents/install.sh prefix, or NULL */
	char *node;       /* Node.js binary, or NULL = node on PATH */
	/* Per-run limits and egress (worker/limits.h). */
	long run_memory_mb;
	long run_pids;
	char *run_cpus;
	long run_disk_mb;
	long run_tmp_mb;
	long run_output_mb;
	char *cgroup;
	char *egress;
	char *egress_allow;
	char *egress_bridge;
	char *unpack;
	long warm; /* warm sandboxes; -1 until derived */
	char *warm_init;
	char *warm_agents;             /* RUNNEL_WARM_AGENTS, parsed into warm_agent_* */
	long sandbox_uid, sandbox_gid; /* host ids of a root worker's sandboxes */
	/* Completion webhooks (worker/webhook.h). */
	int webhook_allow_http;
	int webhook_allow_private;
	long webhook_timeout_sec;
	long webhook_give_up_sec;
	long webhook_parallel;
	/* The model gateway (worker/gateway.h). */
	char *anthropic_base;
	char *openai_base;
	char *model_secrets;
	long gateway_body_max;
	long gateway_timeout_sec;
	long tenant_tokens_per_hour;
	char *tenant_tokens_for;

	/* Derived. */
	rn_redis_url_t redis; /* holds the password: never log */
	worker_sandbox_driver_t driver;
	int share_net;
	int have_job_key;
	uint8_t job_key[PROTO_JOB_KEY_BYTES];
	uint8_t webhook_secret[256]; /* RUNNEL_WEBHOOK_SECRET: never log */
	size_t webhook_secret_len;   /* 0: none */
	char dlq_topic[256];
	char mock_agent_path[4096];    /* resolved host path; "" when absent */
	char builtin_agent_path[4096]; /* runnel-agent, resolved; "" when absent */
	int log_level_num;
	char metrics_host[256]; /* "" when metrics are off */
	int metrics_port;
	/* queue: parsed RUNNEL_TENANT_MAX_RUNS_FOR */
#define WORKER_TENANT_CAPS_MAX 256
	size_t n_tenant_caps;
	char tenant_cap_names[WORKER_TENANT_CAPS_MAX][PROTO_TENANT_MAX + 1];
	long tenant_caps[WORKER_TENANT_CAPS_MAX];
	char node_path[4096]; /* resolved host path; "" when none */
	long run_cpu_millis;
	char egress_bridge_path[4096]; /* resolved host path; "" when absent */
	char unpack_path[4096];        /* resolved runnel-unpack; "" when absent */
	worker_limits_env_t limits;    /* filled by worker_config_limits */
	char warm_init_path[4096];     /* resolved runnel-warm-init; "" when absent */
	                               /* RUNNEL_WARM_AGENTS: per warm name (worker/agent.h), how many agents
	 * the pool keeps started (worker/warm_agent.h). */
#define WORKER_WARM_AGENT_KINDS 8
#define WORKER_WARM_AGENT_MAX   64
	size_t n_warm_agents;
	char warm_agent_names[WORKER_WARM_AGENT_KINDS][32];
	long warm_agent_counts[WORKER_WARM_AGENT_KINDS];
	/* The model gateway: the operator's keys (environment only, removed
	 * from it at load; wiped by worker_config_free), the secret names, the
	 * tenants' hourly token budgets, and the gateway's view of them. */
	char *anthropic_key;
	char *openai_key;
	char **secret_names;
	size_t nsecret_names;
	size_t n_tenant_tokens;
	char tenant_token_names[WORKER_TENANT_CAPS_MAX][PROTO_TENANT_MAX + 1];
	char *tenant_token_ptrs[WORKER_TENANT_CAPS_MAX];
	int64_t tenant_tokens[WORKER_TENANT_CAPS_MAX];
	worker_gateway_conf_t gateway;
} worker_config_t;

/*
 * Parses argv and the environment into cfg.  Returns 0, 1 when --help was
 * asked (usage printed to stdout), or -1 with a one-line errstr naming the
 * flag and its variable.  Removes RUNNEL_JOB_KEY from the environment
 * (worker_config_wipe_env).
 */
int worker_config_load(worker_config_t *cfg, int argc, char **argv,
                       char *errstr, size_t errstr_size);

/*
 * Probes cgroups and mount permission and fills cfg->limits (once, at
 * start, while single-threaded, after the work directory exists).  It may
 * change the process: in cgroup v2 mode it moves the worker into a leaf of
 * its own cgroup, and with a disk cap it moves the worker into a mount
 * namespace of its own (and a user namespace when it is not root).  0, or
 * -1 with errstr.
 * Warnings that do not stop the worker go to warn, one per line.
 */
int worker_config_limits(worker_config_t *cfg, char *warn, size_t warn_size,
                         char *errstr, size_t errstr_size);

void worker_config_free(worker_config_t *cfg);

/* Overwrites the variable's value in place (so /proc/<pid>/environ no
 * longer shows it), then removes it from the environment. */
void worker_config_wipe_env(const char *name);

/* Prints the option table (for docs and --help). */
void worker_config_usage(FILE *f);

#endif
