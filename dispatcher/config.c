/*
 * dispatcher/config.c - the dispatcher's flag table and the checks that
 * make a bad setting fail at start, naming the flag and its variable.
 */
#include "dispatcher/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "common/log.h"
#include "common/netaddr.h"
#include "dispatcher/ui.h"
#include "proto/keys.h"

/* The table points into a config struct, so it is built per parse. */
static void table(dispatcher_config_t *c, rn_opt_t *o)
{
	rn_opt_t t[] = {
		{ "listen", 0, "RUNNEL_LISTEN", RN_OPT_STR, &c->listen, "127.0.0.1:8080", "ADDR",
		  "HTTP listen address host:port (port 0 = any free port)", 0, 0 },
		{ "kafka-brokers", 0, "RUNNEL_KAFKA_BROKERS", RN_OPT_STR, &c->kafka_brokers, "localhost:9092", "LIST",
		  "Kafka bootstrap servers", 0, 0 },
		{ "jobs-topic", 0, "RUNNEL_JOBS_TOPIC", RN_OPT_STR, &c->jobs_topic, "runnel.jobs", "TOPIC",
		  "Kafka topic jobs are produced to", 0, 0 },
		{ "redis-url", 0, "RUNNEL_REDIS_URL", RN_OPT_STR, &c->redis_url, "redis://127.0.0.1:6379", "URL",
		  "redis://[:password@]host:port[/db]", 0, 0 },
		{ "key-prefix", 0, "RUNNEL_KEY_PREFIX", RN_OPT_STR, &c->key_prefix, "runnel", "PREFIX",
		  "Redis key prefix", 0, 0 },
		{ "retention-sec", 0, "RUNNEL_RETENTION_SEC", RN_OPT_INT, &c->retention_sec, "86400", "SEC",
		  "key expiry after the terminal line", 1, 365L * 86400 },
		{ "max-runtime-sec", 0, "RUNNEL_MAX_RUNTIME_SEC", RN_OPT_INT, &c->max_runtime_sec, "28800", "SEC",
		  "largest max_runtime_sec a run may ask for", 1, 30L * 86400 },
		{ "job-key", 0, "RUNNEL_JOB_KEY", RN_OPT_STR, &c->job_key_hex, NULL, "HEX",
		  "32-byte key (64 hex digits) sealing the secrets of every job (prefer the variable)", 0, 0 },
		{ "api-token", 0, "RUNNEL_API_TOKEN", RN_OPT_STR, &c->api_token, NULL, "TOKEN",
		  "bearer token every route but /healthz requires (prefer the variable)", 0, 0 },
		{ "cors-origins", 0, "RUNNEL_CORS_ORIGINS", RN_OPT_STR, &c->cors_origins, NULL, "LIST",
		  "comma-separated browser origins allowed by CORS, or *", 0, 0 },
		{ "max-body", 0, "RUNNEL_MAX_BODY", RN_OPT_INT, &c->max_body, "1048576", "BYTES",
		  "request body cap (larger -> 413)", 1024, 64L << 20 },
		{ "tail-connections", 0, "RUNNEL_TAIL_CONNECTIONS", RN_OPT_INT, &c->tail_connections, "2", "N",
		  "Redis connections shared by all stream tails (standalone Redis)", 1, 16 },
		{ "tail-block-ms", 0, "RUNNEL_TAIL_BLOCK_MS", RN_OPT_INT, &c->tail_block_ms, "5000", "MS",
		  "XREAD BLOCK timeout of a tail connection (standalone Redis)", 10, 60000 },
		{ "tail-batch", 0, "RUNNEL_TAIL_BATCH", RN_OPT_INT, &c->tail_batch, "256", "N",
		  "XREAD COUNT per stream", 1, 10000 },
		{ "heartbeat-sec", 0, "RUNNEL_HEARTBEAT_SEC", RN_OPT_INT, &c->heartbeat_sec, "15", "SEC",
		  "SSE heartbeat comment interval", 1, 3600 },
		{ "enqueue-timeout-ms", 0, "RUNNEL_ENQUEUE_TIMEOUT_MS", RN_OPT_INT, &c->enqueue_timeout_ms, "10000", "MS",
		  "longest wait for Kafka to take a job (message.timeout.ms) before 503", 100, 300000 },
		{ "sweep-ms", 0, "RUNNEL_SWEEP_MS", RN_OPT_INT, &c->sweep_ms, "1000", "MS",
		  "interval of the lost-lease sweep", 100, 60000 },
		{ "http-timeout-sec", 0, "RUNNEL_HTTP_TIMEOUT_SEC", RN_OPT_INT, &c->http_timeout_sec, "60", "SEC",
		  "idle timeout reading a request, and writing to a caller that stopped reading", 1, 3600 },
		{ "head-timeout-ms", 0, "RUNNEL_HEAD_TIMEOUT_MS", RN_OPT_INT, &c->head_timeout_ms, "10000", "MS",
		  "a connection that sends no whole request within this of its accept (or of its last answer) is closed", 100, 600000 },
		{ "max-connections", 0, "RUNNEL_MAX_CONNECTIONS", RN_OPT_INT, &c->max_connections, "4096", "N",
		  "open connections at most; past it the oldest idle one is closed, or the new one answered 503", 16, 1000000 },
		{ "insecure-no-auth", 0, "RUNNEL_INSECURE_NO_AUTH", RN_OPT_BOOL, &c->insecure_no_auth, "false", NULL,
		  "listen beyond loopback without RUNNEL_API_TOKEN (every route open to anyone who reaches it)", 0, 0 },
		{ "log-level", 0, "RUNNEL_LOG_LEVEL", RN_OPT_STR, &c->log_level, "info", "LEVEL",
		  "debug, info, warn or error", 0, 0 },
		{ "kafka-property", 'X', "RUNNEL_KAFKA_PROPERTIES", RN_OPT_KV, &c->kafka_props, NULL, "KEY=VALUE",
		  "librdkafka producer property (repeatable; env: \"k=v;k=v\")", 0, 0 },
		/* The recent-runs index and the /ui/ viewer. */
		{ "recent-runs", 0, "RUNNEL_RECENT_RUNS", RN_OPT_INT, &c->recent_runs, "500", "N",
		  "runs kept in the recent-runs index (GET /v1/runs, the /ui/ runs list)", 1, 100000 },
		{ "ui-dev-stub", 0, "RUNNEL_UI_DEV_STUB", RN_OPT_STR, &c->ui_dev_stub, NULL, "URL",
		  "loopback workspace stub (http://127.0.0.1:PORT) the /ui/ viewer mints runs from (runnel dev)", 0, 0 },
		/* Completion webhooks (SPEC §2): the same policy as the workers. */
		{ "webhook-allow-http", 0, "RUNNEL_WEBHOOK_ALLOW_HTTP", RN_OPT_BOOL, &c->webhook_allow_http, "false",
		  NULL, "accept plain http:// webhook URLs (tests, dev)", 0, 0 },
		{ "webhook-allow-private", 0, "RUNNEL_WEBHOOK_ALLOW_PRIVATE", RN_OPT_BOOL, &c->webhook_allow_private,
		  "false", NULL, "accept webhook URLs on loopback, private and link-local addresses (tests, dev)", 0, 0 },
		RN_OPT_END,
	};
	memcpy(o, t, sizeof(t));
}

#define NOPTS 29

/* 1 when the host of listen ("host:port", "[v6]:port") is a loopback
 * address or localhost: nobody off this machine can connect. */
static int listen_is_loopback(const char *listen)
{
	char host[256];
	const char *end;
	struct sockaddr_storage ss;

	if (listen[0] == '[') {
		end = strchr(listen, ']');
		listen++;
	} else {
		end = strrchr(listen, ':');
	}
	if (!end || (size_t)(end - listen) >= sizeof(host))
		return 0;
	memcpy(host, listen, (size_t)(end - listen));
	host[end - listen] = '\0';
	if (strcasecmp(host, "localhost") == 0)
		return 1;
	if (rn_netaddr_literal(host, &ss) < 0)
		return 0; /* a name, "", "*": it may reach beyond this machine */
	return rn_netaddr_classify((struct sockaddr *)&ss) == RN_ADDR_LOOPBACK;
}

int dispatcher_config_parse(dispatcher_config_t *cfg, int argc, char **argv, FILE *out,
                            char *errstr, size_t errstr_size)
{
	rn_opt_t opts[NOPTS];
	int argi = 1, rc;

	_Static_assert(NOPTS == 29, "table size");
	table(cfg, opts);
	rc = rn_conf_parse(opts, argc, argv, &argi, errstr, errstr_size);
	if (rc == 1) {
		fprintf(out, "usage: runnel-dispatcher [options]\n\n"
		             "The HTTP API in front of the runnel job queue (Kafka) and run streams (Redis).\n\n");
		rn_conf_usage(out, opts);
		return 1;
	}
	if (rc < 0)
		return -1;
	if (argi < argc) {
		snprintf(errstr, errstr_size, "unexpected argument \"%.64s\" (see --help)", argv[argi]);
		return -1;
	}
	if (!proto_key_prefix_valid(cfg->key_prefix)) {
		snprintf(errstr, errstr_size, "--key-prefix/RUNNEL_KEY_PREFIX: must be 1..%d of [A-Za-z0-9_.:-]",
		         PROTO_KEY_PREFIX_MAX);
		return -1;
	}
	if (rn_log_level_parse(cfg->log_level) < 0) {
		snprintf(errstr, errstr_size, "--log-level/RUNNEL_LOG_LEVEL: \"%.16s\" is not debug, info, warn or error",
		         cfg->log_level);
		return -1;
	}
	if (cfg->job_key_hex && cfg->job_key_hex[0] != '\0') {
		char kerr[128];

		if (proto_job_key_parse(cfg->job_key_hex, cfg->job_key, kerr, sizeof(kerr)) < 0) {
			snprintf(errstr, errstr_size, "--job-key/RUNNEL_JOB_KEY: %s", kerr);
			return -1;
		}
		cfg->sealed = 1;
	}
	if (cfg->api_token && cfg->api_token[0] == '\0') {
		free(cfg->api_token);
		cfg->api_token = NULL;
	}
	if (cfg->ui_dev_stub && cfg->ui_dev_stub[0] == '\0') {
		free(cfg->ui_dev_stub);
		cfg->ui_dev_stub = NULL;
	}
	if (cfg->ui_dev_stub && !dispatcher_ui_stub_url_ok(cfg->ui_dev_stub)) {
		snprintf(errstr, errstr_size, "--ui-dev-stub/RUNNEL_UI_DEV_STUB: expected http://127.0.0.1:PORT "
		                              "(a loopback host and a port, no path)");
		return -1;
	}
	if (!strchr(cfg->listen, ':')) {
		snprintf(errstr, errstr_size, "--listen/RUNNEL_LISTEN: expected host:port");
		return -1;
	}
	/* An open dispatcher lets anyone who reaches it start runs, read every
	 * run's output and cancel them: beyond loopback, only on purpose. */
	if (!cfg->api_token && !cfg->insecure_no_auth && !listen_is_loopback(cfg->listen)) {
		snprintf(errstr, errstr_size,
		         "--listen/RUNNEL_LISTEN: %.100s is not a loopback address and RUNNEL_API_TOKEN is not set; "
		         "set a token, or --insecure-no-auth/RUNNEL_INSECURE_NO_AUTH to serve every route "
		         "without one",
		         cfg->listen);
		return -1;
	}
	return 0;
}

void dispatcher_config_free(dispatcher_config_t *cfg)
{
	rn_opt_t opts[NOPTS];

	if (cfg->job_key_hex)
		sodium_memzero(cfg->job_key_hex, strlen(cfg->job_key_hex));
	if (cfg->api_token)
		sodium_memzero(cfg->api_token, strlen(cfg->api_token));
	sodium_memzero(cfg->job_key, sizeof(cfg->job_key));
	table(cfg, opts);
	rn_conf_free(opts);
}
