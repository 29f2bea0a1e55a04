/*
 * worker/config.h - runnel-worker's settings: one flag table (flags with
 * RUNNEL_* twins, SPEC §8), validated once at start into a plain struct.
 *
 * The job key is read from the environment only (RUNNEL_JOB_KEY), never
 * from argv, so it does not show in `ps`; it is never echoed.
 */
#ifndef RUNNEL_WORKER_CONFIG_H
#define RUNNEL_WORKER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/conf.h"
#include "common/util.h"
#include "proto/job.h"
#include "worker/sandbox.h"

typedef struct worker_config {
	/* Raw option values (owned; freed by worker_config_free). */
	char *kafka_brokers;
	char *jobs_topic;
	char *group;
	char *redis_url;
	char *key_prefix;
	long  slots;
	long  lease_sec;
	long  drain_sec;
	char *sandbox;
	long  max_runtime_sec;
	long  retention_sec;
	char *metrics_listen;
	char *work_dir;
	char *worker_id;
	char *log_level;
	int   require_sealed;
	long  kill_grace_ms;
	long  line_max;
	long  stderr_max;
	char *sandbox_net;
	char *rootfs;
	char *bwrap_path;
	char *mock_agent;
	rn_kv_list_t kafka_props;
	/* queue: per-tenant caps */
	long  tenant_max_runs;
	char *tenant_max_runs_for;
	long  queue_wait_replicas;

	/* Derived. */
	rn_redis_url_t redis;               /* holds the password: never log */
	worker_sandbox_driver_t driver;
	int      share_net;
	int      have_job_key;
	uint8_t  job_key[PROTO_JOB_KEY_BYTES];
	char     dlq_topic[256];
	char     mock_agent_path[4096];     /* resolved host path; "" when absent */
	int      log_level_num;
	char     metrics_host[256];         /* "" when metrics are off */
	int      metrics_port;
	/* queue: parsed RUNNEL_TENANT_MAX_RUNS_FOR */
#define WORKER_TENANT_CAPS_MAX 256
	size_t   n_tenant_caps;
	char     tenant_cap_names[WORKER_TENANT_CAPS_MAX][PROTO_TENANT_MAX + 1];
	long     tenant_caps[WORKER_TENANT_CAPS_MAX];
} worker_config_t;

/*
 * Parses argv and the environment into cfg.  Returns 0, 1 when --help was
 * asked (usage printed to stdout), or -1 with a one-line errstr naming the
 * flag and its variable.  Removes RUNNEL_JOB_KEY from the environment
 * (worker_config_wipe_env).
 */
int worker_config_load(worker_config_t *cfg, int argc, char **argv,
                       char *errstr, size_t errstr_size);

void worker_config_free(worker_config_t *cfg);

/* Overwrites the variable's value in place (so /proc/<pid>/environ no
 * longer shows it), then removes it from the environment. */
void worker_config_wipe_env(const char *name);

/* Prints the option table (for docs and --help). */
void worker_config_usage(FILE *f);

#endif
