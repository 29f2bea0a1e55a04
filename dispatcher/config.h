/*
 * dispatcher/config.h - the dispatcher's settings: one flag table with
 * RUNNEL_* environment twins (common/conf.h), parsed once at start.
 */
#ifndef RUNNEL_DISPATCHER_CONFIG_H
#define RUNNEL_DISPATCHER_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/conf.h"
#include "proto/job.h"

typedef struct dispatcher_config {
	char *listen; /* host:port (port 0 = ephemeral) */
	char *kafka_brokers;
	char *jobs_topic;
	char *redis_url;
	char *key_prefix;
	char *job_key_hex;  /* secret; NULL = unsealed jobs */
	char *api_token;    /* secret; NULL = no auth */
	char *cors_origins; /* comma-separated origins, "*" or NULL */
	char *log_level;
	long retention_sec;
	long max_runtime_sec;
	long max_body;
	long tail_connections;
	long tail_block_ms;
	long tail_batch;
	long heartbeat_sec;
	long enqueue_timeout_ms;
	long sweep_ms;
	long http_timeout_sec;
	long head_timeout_ms; /* a whole request within this of accept or the last answer */
	long max_connections;
	int insecure_no_auth;      /* listen beyond loopback without a token, on purpose */
	rn_kv_list_t kafka_props;  /* -X key=value */
	long recent_runs;          /* bound of the recent-runs index */
	char *ui_dev_stub;         /* dev workspace stub the viewer mints runs from */
	int webhook_allow_http;    /* accept http:// webhooks (tests, dev) */
	int webhook_allow_private; /* accept loopback/private webhook targets */

	/* Derived by dispatcher_config_parse. */
	int sealed;
	uint8_t job_key[PROTO_JOB_KEY_BYTES];
} dispatcher_config_t;

/*
 * Parses argv and the environment into *cfg.  Returns 0, 1 when --help was
 * asked (usage already printed on out), or -1 with errstr.  The caller
 * releases it with dispatcher_config_free() in every case.
 */
int dispatcher_config_parse(dispatcher_config_t *cfg, int argc, char **argv, FILE *out,
                            char *errstr, size_t errstr_size);

/* Frees the strings and wipes the secrets. */
void dispatcher_config_free(dispatcher_config_t *cfg);

#endif
