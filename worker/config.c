/*
 * worker/config.c - the flag table of runnel-worker and the checks that
 * turn it into a worker_config_t.
 */
#include "worker/config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "common/log.h"
#include "proto/keys.h"
#include "proto/names.h"
#include "worker/agent.h"

#define OPTS_N 62

void worker_config_wipe_env(const char *name)
{
	/* unsetenv() only drops the pointer: the string itself stays in the
	 * original environment block, which /proc/<pid>/environ shows to every
	 * process of the same user.  Overwrite it in place first. */
	char *v = getenv(name);
	if (v)
		sodium_memzero(v, strlen(v));
	unsetenv(name);
}

/* Fills the option table for cfg (a table per call so cfg may live anywhere). */
static void opts_fill(rn_opt_t *o, worker_config_t *c)
{
	const rn_opt_t t[] = {
		{ "kafka-brokers", 0, "RUNNEL_KAFKA_BROKERS", RN_OPT_STR, &c->kafka_brokers, "localhost:9092", "HOSTS", "Kafka bootstrap servers", 0, 0 },
		{ "jobs-topic", 0, "RUNNEL_JOBS_TOPIC", RN_OPT_STR, &c->jobs_topic, "runnel.jobs", "TOPIC", "job topic (the DLQ is <topic>.dlq)", 0, 0 },
		{ "group", 0, "RUNNEL_GROUP", RN_OPT_STR, &c->group, "runnel-workers", "GROUP", "Kafka consumer group", 0, 0 },
		{ "redis-url", 0, "RUNNEL_REDIS_URL", RN_OPT_STR, &c->redis_url, "redis://127.0.0.1:6379", "URL", "redis://[:password@]host:port[/db]", 0, 0 },
		{ "key-prefix", 0, "RUNNEL_KEY_PREFIX", RN_OPT_STR, &c->key_prefix, "runnel", "PREFIX", "Redis key prefix", 0, 0 },
		{ "slots", 0, "RUNNEL_SLOTS", RN_OPT_INT, &c->slots, "8", "N", "runs at once", 1, 256 },
		{ "lease-sec", 0, "RUNNEL_LEASE_SEC", RN_OPT_INT, &c->lease_sec, "15", "SEC", "run lease; renewed every third of it", 1, 3600 },
		{ "drain-sec", 0, "RUNNEL_DRAIN_SEC", RN_OPT_INT, &c->drain_sec, "25", "SEC", "on SIGTERM, how long runs may finish", 0, 86400 },
		{ "sandbox", 0, "RUNNEL_SANDBOX", RN_OPT_STR, &c->sandbox, "bwrap", "DRIVER", "bwrap, or process (isolates nothing)", 0, 0 },
		{ "sandbox-net", 0, "RUNNEL_SANDBOX_NET", RN_OPT_STR, &c->sandbox_net, "none", "MODE", "none (empty network namespace) or host", 0, 0 },
		{ "rootfs", 0, "RUNNEL_ROOTFS", RN_OPT_STR, &c->rootfs, NULL, "DIR", "root filesystem for bwrap (default: the host's /usr, /bin, /lib*, /etc read-only)", 0, 0 },
		{ "bwrap", 0, "RUNNEL_BWRAP", RN_OPT_STR, &c->bwrap_path, NULL, "PATH", "bubblewrap binary (default: bwrap on PATH)", 0, 0 },
		{ "mock-agent", 0, "RUNNEL_MOCK_AGENT", RN_OPT_STR, &c->mock_agent, NULL, "PATH", "runnel-mock-agent binary (default: next to runnel-worker)", 0, 0 },
		/* builtin agent kind */
		{ "builtin-agent", 0, "RUNNEL_BUILTIN_AGENT", RN_OPT_STR, &c->builtin_agent, NULL, "PATH", "runnel-agent binary, the builtin model loop (default: next to runnel-worker)", 0, 0 },
		{ "max-runtime-sec", 0, "RUNNEL_MAX_RUNTIME_SEC", RN_OPT_INT, &c->max_runtime_sec, "28800", "SEC", "hard cap per run", 1, 7 * 86400 },
		{ "kill-grace-ms", 0, "RUNNEL_KILL_GRACE_MS", RN_OPT_INT, &c->kill_grace_ms, "2000", "MS", "SIGTERM to SIGKILL grace", 0, 600000 },
		{ "retention-sec", 0, "RUNNEL_RETENTION_SEC", RN_OPT_INT, &c->retention_sec, "86400", "SEC", "key expiry after the terminal line", 1, 365L * 86400 },
		{ "line-max", 0, "RUNNEL_LINE_MAX", RN_OPT_INT, &c->line_max, "1048576", "BYTES", "longest agent stdout line; longer is invalid", 1024, 64L << 20 },
		{ "stderr-max", 0, "RUNNEL_STDERR_MAX", RN_OPT_INT, &c->stderr_max, "1048576", "BYTES", "agent stderr published per run, then one truncation notice", 0, 1L << 30 },
		/* asks (docs/protocol.md) */
		{ "ask-timeout-sec", 0, "RUNNEL_ASK_TIMEOUT_SEC", RN_OPT_INT, &c->ask_timeout_sec, "600", "SEC", "an ask open this long expires (counts as rejected)", 1, 7 * 86400 },
		{ "work-dir", 0, "RUNNEL_WORK_DIR", RN_OPT_STR, &c->work_dir, NULL, "DIR", "run directories (default $TMPDIR/runnel or /tmp/runnel)", 0, 0 },
		{ "worker-id", 0, "RUNNEL_WORKER_ID", RN_OPT_STR, &c->worker_id, NULL, "ID", "name in the state hash (default hostname-pid)", 0, 0 },
		{ "require-sealed", 0, "RUNNEL_REQUIRE_SEALED", RN_OPT_BOOL, &c->require_sealed, "false", NULL, "refuse jobs whose secrets are not sealed", 0, 0 },
		{ "metrics-listen", 0, "RUNNEL_METRICS_LISTEN", RN_OPT_STR, &c->metrics_listen, "127.0.0.1:9464", "ADDR", "/healthz and /metrics address (port 0: any; \"off\": none)", 0, 0 },
		{ "log-level", 0, "RUNNEL_LOG_LEVEL", RN_OPT_STR, &c->log_level, "info", "LEVEL", "debug, info, warn, error", 0, 0 },
		/* queue: fair shares between tenants */
		{ "tenant-max-runs", 0, "RUNNEL_TENANT_MAX_RUNS", RN_OPT_INT, &c->tenant_max_runs, "0", "N", "runs one tenant may have claimed or running in the fleet (0: no cap)", 0, 1000000 },
		{ "tenant-max-runs-for", 0, "RUNNEL_TENANT_MAX_RUNS_FOR", RN_OPT_STR, &c->tenant_max_runs_for, NULL, "LIST", "per-tenant caps overriding it, \"acme=20,bulk=2\" (0: no cap)", 0, 0 },
		{ "queue-wait-replicas", 0, "RUNNEL_QUEUE_WAIT_REPLICAS", RN_OPT_INT, &c->queue_wait_replicas, "0", "N", "replicas that must have a queued job (Redis WAIT) before its Kafka offset is stored", 0, 16 },
		{ "redis-wait-replicas", 0, "RUNNEL_REDIS_WAIT_REPLICAS", RN_OPT_INT, &c->redis_wait_replicas, "0", "N", "replicas that must have each batch of output lines and the terminal line (Redis WAIT) before they count as written (0: off)", 0, 16 },
		{ "redis-wait-timeout-ms", 0, "RUNNEL_REDIS_WAIT_TIMEOUT_MS", RN_OPT_INT, &c->redis_wait_timeout_ms, "1000", "MS", "longest one such WAIT may take; on timeout the lines count anyway, with a warning", 10, 5000 },
		{ "kafka-property", 'X', "RUNNEL_KAFKA_PROPERTIES", RN_OPT_KV, &c->kafka_props, NULL, "KEY=VALUE", "librdkafka property (repeatable; env \"k=v;k=v\")", 0, 0 },
		/* acp agents */
		{ "acp-prefix", 0, "RUNNEL_ACP_PREFIX", RN_OPT_STR, &c->acp_prefix, NULL, "DIR", "ACP agents installed by agents/install.sh (bound read-only into sandboxes)", 0, 0 },
		{ "node", 0, "RUNNEL_NODE", RN_OPT_STR, &c->node, NULL, "PATH", "Node.js for ACP agents (default: node on PATH)", 0, 0 },
		/* Per-run limits and egress (worker/limits.h, docs/sandbox.md). */
		{ "run-memory-mb", 0, "RUNNEL_RUN_MEMORY_MB", RN_OPT_INT, &c->run_memory_mb, "2048", "MIB", "memory per run (0: no limit); a run's config may lower it", 0, 1L << 30 },
		{ "run-pids", 0, "RUNNEL_RUN_PIDS", RN_OPT_INT, &c->run_pids, "512", "N", "processes and threads per run at once (0: no limit)", 0, 1L << 22 },
		{ "run-cpus", 0, "RUNNEL_RUN_CPUS", RN_OPT_STR, &c->run_cpus, "2", "CPUS", "CPU share per run, in CPUs (e.g. 0.5; 0: no limit)", 0, 0 },
		{ "run-disk-mb", 0, "RUNNEL_RUN_DISK_MB", RN_OPT_INT, &c->run_disk_mb, "4096", "MIB", "workspace size per run: bag, assets/, anything written (0: no limit)", 0, 1L << 30 },
		{ "run-tmp-mb", 0, "RUNNEL_RUN_TMP_MB", RN_OPT_INT, &c->run_tmp_mb, "256", "MIB", "size of the sandbox's /tmp (and /root, /run) (0: the kernel's default)", 0, 1L << 30 },
		{ "run-output-mb", 0, "RUNNEL_RUN_OUTPUT_MB", RN_OPT_INT, &c->run_output_mb, "64", "MIB", "lines a run may publish to its stream, in MiB, then resource_limit (0: no cap)", 0, 1L << 20 },
		{ "cgroup", 0, "RUNNEL_CGROUP", RN_OPT_STR, &c->cgroup, "auto", "MODE", "per-run cgroups: auto, v2, v1 or off (rlimits only)", 0, 0 },
		{ "egress", 0, "RUNNEL_EGRESS", RN_OPT_STR, &c->egress, NULL, "POLICY", "network the runs may have at most: none, allowlist or full (default allowlist; full with --sandbox-net host)", 0, 0 },
		{ "egress-allow", 0, "RUNNEL_EGRESS_ALLOW", RN_OPT_STR, &c->egress_allow, "@model,@workspace_api", "LIST", "hosts allowlist runs may reach: host[:port], *.domain[:port], @model, @workspace_api (an internal address only through an exact host[:port])", 0, 0 },
		{ "egress-bridge", 0, "RUNNEL_EGRESS_BRIDGE", RN_OPT_STR, &c->egress_bridge, NULL, "PATH", "runnel-egress-bridge binary (default: next to runnel-worker)", 0, 0 },
		{ "unpack", 0, "RUNNEL_UNPACK", RN_OPT_STR, &c->unpack, NULL, "PATH", "runnel-unpack binary, which unpacks bags inside the run's cgroup (default: next to runnel-worker)", 0, 0 },
		/* Warm sandboxes (worker/warm.h). */
		{ "warm", 0, "RUNNEL_WARM", RN_OPT_INT, &c->warm, "-1", "N", "warm sandboxes kept ready (-1: a quarter of the slots, at least 1; 0: off)", -1, 256 },
		{ "warm-init", 0, "RUNNEL_WARM_INIT", RN_OPT_STR, &c->warm_init, NULL, "PATH", "runnel-warm-init binary, every bwrap sandbox's first program (default: next to runnel-worker)", 0, 0 },
		{ "warm-agents", 0, "RUNNEL_WARM_AGENTS", RN_OPT_STR, &c->warm_agents, NULL, "LIST", "agents kept started per preset, handshake done, \"claude:2,codex:1\" (default: none)", 0, 0 },
		/* A root worker's sandboxes never hold the host's uid 0 (docs/sandbox.md). */
		{ "sandbox-uid", 0, "RUNNEL_SANDBOX_UID", RN_OPT_INT, &c->sandbox_uid, "65534", "UID", "host uid bwrap and the sandbox run as when the worker is root", 1, 4294967294L },
		{ "sandbox-gid", 0, "RUNNEL_SANDBOX_GID", RN_OPT_INT, &c->sandbox_gid, "65534", "GID", "host gid bwrap and the sandbox run as when the worker is root", 1, 4294967294L },
		/* Completion webhooks (worker/webhook.h); the secret is RUNNEL_WEBHOOK_SECRET, environment only. */
		{ "webhook-allow-http", 0, "RUNNEL_WEBHOOK_ALLOW_HTTP", RN_OPT_BOOL, &c->webhook_allow_http, "false", NULL, "accept and call plain http:// webhooks, and send them unsigned without a secret (tests, dev)", 0, 0 },
		{ "webhook-allow-private", 0, "RUNNEL_WEBHOOK_ALLOW_PRIVATE", RN_OPT_BOOL, &c->webhook_allow_private, "false", NULL, "call webhooks on loopback, private and link-local addresses (tests, dev)", 0, 0 },
		{ "webhook-timeout-sec", 0, "RUNNEL_WEBHOOK_TIMEOUT_SEC", RN_OPT_INT, &c->webhook_timeout_sec, "10", "SEC", "longest webhook attempt, connect included", 1, 300 },
		{ "webhook-give-up-sec", 0, "RUNNEL_WEBHOOK_GIVE_UP_SEC", RN_OPT_INT, &c->webhook_give_up_sec, "3900", "SEC", "a webhook still undelivered this long after the run ended is dropped", 1, 7 * 86400 },
		{ "webhook-parallel", 0, "RUNNEL_WEBHOOK_PARALLEL", RN_OPT_INT, &c->webhook_parallel, "16", "N", "webhook attempts in flight at once per worker", 1, 1024 },
		/* The model gateway (worker/gateway.h, docs/sandbox.md). */
		{ "anthropic-base-url", 0, "RUNNEL_ANTHROPIC_BASE_URL", RN_OPT_STR, &c->anthropic_base, NULL, "URL", "Anthropic API for runs whose /env names none (default https://api.anthropic.com)", 0, 0 },
		{ "openai-base-url", 0, "RUNNEL_OPENAI_BASE_URL", RN_OPT_STR, &c->openai_base, NULL, "URL", "OpenAI-compatible API for runs whose /env names none (default https://api.openai.com/v1)", 0, 0 },
		{ "model-secrets", 0, "RUNNEL_MODEL_SECRETS", RN_OPT_STR, &c->model_secrets, NULL, "LIST", "more /env variable names kept out of sandboxes as model credentials, comma-separated", 0, 0 },
		{ "gateway-body-max", 0, "RUNNEL_GATEWAY_BODY_MAX", RN_OPT_INT, &c->gateway_body_max, "33554432", "BYTES", "largest request body the model gateway forwards", 1024, 1L << 30 },
		{ "gateway-timeout-sec", 0, "RUNNEL_GATEWAY_TIMEOUT_SEC", RN_OPT_INT, &c->gateway_timeout_sec, "600", "SEC", "a model call whose provider sends nothing for this long fails", 1, 86400 },
		{ "tenant-tokens-per-hour", 0, "RUNNEL_TENANT_TOKENS_PER_HOUR", RN_OPT_INT, &c->tenant_tokens_per_hour, "0", "N", "input + output tokens one tenant's runs may use per hour, fleet-wide (0: no budget)", 0, 1L << 50 },
		{ "tenant-tokens-per-hour-for", 0, "RUNNEL_TENANT_TOKENS_PER_HOUR_FOR", RN_OPT_STR, &c->tenant_tokens_for, NULL, "LIST", "per-tenant hourly token budgets overriding it, \"acme=500000,bulk=0\" (0: no budget)", 0, 0 },
		RN_OPT_END,
	};
	_Static_assert(sizeof(t) / sizeof(t[0]) == OPTS_N, "OPTS_N must match the table");
	memcpy(o, t, sizeof(t));
}

void worker_config_usage(FILE *f)
{
	worker_config_t c;
	rn_opt_t o[OPTS_N];
	memset(&c, 0, sizeof(c));
	opts_fill(o, &c);
	fprintf(f, "usage: runnel-worker [options]\n\n"
	           "Consumes runs from Kafka, runs each in a sandbox and publishes its output to Redis.\n\n");
	rn_conf_usage(f, o);
	fprintf(f, "  %-34s %s\n", "", "");
	fprintf(f, "  %-34s %s\n", "(environment only)", "RUNNEL_JOB_KEY: 64 hex digits, key of sealed jobs");
	fprintf(f, "  %-34s %s\n", "(environment only)", "RUNNEL_WEBHOOK_SECRET: key that signs completion webhooks");
	fprintf(f, "  %-34s %s\n", "(environment only)", "RUNNEL_ANTHROPIC_API_KEY: Anthropic key for runs whose /env has none");
	fprintf(f, "  %-34s %s\n", "(environment only)", "RUNNEL_OPENAI_API_KEY: OpenAI key for runs whose /env has none");
}

/* The directory of this binary, for finding the programs installed next to it. */
static int self_dir(char *buf, size_t size)
{
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	if (n <= 0)
		return -1;
	path[n] = '\0';
	char *slash = strrchr(path, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	if ((size_t)snprintf(buf, size, "%s", path) >= size)
		return -1;
	return 0;
}

/*
 * The host path of a program the worker hands to runs (runnel-mock-agent,
 * runnel-agent, runnel-warm-init, runnel-egress-bridge, runnel-unpack): the one given,
 * which must be executable, else name next to this binary, else "" (the
 * runs that need it then fail with a clear message).
 */
static int program_path(char *out, size_t size, const char *given, const char *name,
                        const char *option, char *errstr, size_t errstr_size)
{
	if (given) {
		snprintf(out, size, "%s", given);
		if (access(out, X_OK) != 0) {
			snprintf(errstr, errstr_size, "%s: %.200s is not an executable file", option, given);
			return -1;
		}
		return 0;
	}
	char dir[PATH_MAX];
	out[0] = '\0';
	if (self_dir(dir, sizeof(dir)) == 0) {
		int n = snprintf(out, size, "%s/%s", dir, name);
		if (n < 0 || (size_t)n >= size || access(out, X_OK) != 0)
			out[0] = '\0';
	}
	return 0;
}

static int listen_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	const char *v = c->metrics_listen;
	if (!v || !*v || !strcmp(v, "off")) {
		c->metrics_host[0] = '\0';
		return 0;
	}
	const char *colon = strrchr(v, ':');
	char *end = NULL;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || colon == v || (size_t)(colon - v) >= sizeof(c->metrics_host) ||
	    !end || *end || port < 0 || port > 65535) {
		snprintf(errstr, errstr_size,
		         "RUNNEL_METRICS_LISTEN/--metrics-listen: \"%.64s\" is not host:port", v);
		return -1;
	}
	memcpy(c->metrics_host, v, (size_t)(colon - v));
	c->metrics_host[colon - v] = '\0';
	c->metrics_port = (int)port;
	return 0;
}

/* "acme=20,bulk=2" into tenant_cap_names/tenant_caps. */
static int tenant_caps_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	const char *v = c->tenant_max_runs_for;
	if (!v || !*v)
		return 0;
	char *copy = strdup(v);
	if (!copy) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		char *eq = strchr(tok, '=');
		char *end = NULL;
		long n = eq ? strtol(eq + 1, &end, 10) : -1;
		int name_ok = 0;
		if (eq) {
			*eq = '\0';
			name_ok = proto_tenant_valid(tok);
			*eq = '=';
		}
		if (!name_ok || !end || end == eq + 1 || *end || n < 0 || n > 1000000) {
			snprintf(errstr, errstr_size,
			         "RUNNEL_TENANT_MAX_RUNS_FOR/--tenant-max-runs-for: \"%.64s\" is not tenant=N "
			         "(tenant [A-Za-z0-9_.-]{1,64}, N 0..1000000)",
			         tok);
			free(copy);
			return -1;
		}
		if (c->n_tenant_caps >= WORKER_TENANT_CAPS_MAX) {
			snprintf(errstr, errstr_size, "RUNNEL_TENANT_MAX_RUNS_FOR/--tenant-max-runs-for: more than %d tenants",
			         WORKER_TENANT_CAPS_MAX);
			free(copy);
			return -1;
		}
		*eq = '\0';
		snprintf(c->tenant_cap_names[c->n_tenant_caps], sizeof(c->tenant_cap_names[0]), "%s", tok);
		c->tenant_caps[c->n_tenant_caps++] = n;
	}
	free(copy);
	return 0;
}

/* A comma-separated list into a NULL-terminated array (empty entries
 * skipped).  0 or -1. */
static int list_split(const char *v, char ***out, size_t *n)
{
	*out = calloc(1, sizeof(char *));
	*n = 0;
	if (!*out)
		return -1;
	if (!v)
		return 0;
	const char *p = v;
	while (*p) {
		size_t l = strcspn(p, ",");
		const char *s = p;
		size_t sl = l;
		while (sl && *s == ' ') {
			s++;
			sl--;
		}
		while (sl && s[sl - 1] == ' ')
			sl--;
		if (sl) {
			char **nv = realloc(*out, (*n + 2) * sizeof(char *));
			if (!nv)
				return -1;
			*out = nv;
			if (!(nv[*n] = strndup(s, sl)))
				return -1;
			nv[++*n] = NULL;
		}
		p += l;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* Reads an environment-only secret and removes it from the environment. */
static char *env_secret(const char *name)
{
	const char *v = getenv(name);
	char *copy = v && *v ? strdup(v) : NULL;
	worker_config_wipe_env(name);
	return copy;
}

/* The model gateway's settings (worker/gateway.h). */
static int gateway_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	c->anthropic_key = env_secret("RUNNEL_ANTHROPIC_API_KEY");
	c->openai_key = env_secret("RUNNEL_OPENAI_API_KEY");
	if (list_split(c->model_secrets, &c->secret_names, &c->nsecret_names) < 0) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < c->nsecret_names; i++)
		if (!proto_env_name_valid(c->secret_names[i])) {
			snprintf(errstr, errstr_size, "RUNNEL_MODEL_SECRETS/--model-secrets: \"%.64s\" is not a variable name",
			         c->secret_names[i]);
			return -1;
		}
	static const char *const names[] = { "RUNNEL_ANTHROPIC_BASE_URL/--anthropic-base-url",
		                             "RUNNEL_OPENAI_BASE_URL/--openai-base-url" };
	const char *bases[] = { c->anthropic_base, c->openai_base };
	for (size_t i = 0; i < 2; i++)
		if (bases[i] && strncmp(bases[i], "https://", 8) && strncmp(bases[i], "http://", 7)) {
			snprintf(errstr, errstr_size, "%s: \"%.64s\" is not an http(s) URL", names[i], bases[i]);
			return -1;
		}
	char **tok = NULL;
	size_t nt = 0;
	if (list_split(c->tenant_tokens_for, &tok, &nt) < 0) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; i < nt && rc == 0; i++) {
		char *eq = strchr(tok[i], '=');
		char *end = NULL;
		long long n = eq ? strtoll(eq + 1, &end, 10) : -1;
		if (eq)
			*eq = '\0';
		if (!eq || !proto_tenant_valid(tok[i]) || !end || end == eq + 1 || *end || n < 0 ||
		    c->n_tenant_tokens >= WORKER_TENANT_CAPS_MAX) {
			snprintf(errstr, errstr_size,
			         "RUNNEL_TENANT_TOKENS_PER_HOUR_FOR/--tenant-tokens-per-hour-for: \"%.64s\" is not tenant=N",
			         tok[i]);
			rc = -1;
			break;
		}
		snprintf(c->tenant_token_names[c->n_tenant_tokens], sizeof(c->tenant_token_names[0]), "%s", tok[i]);
		c->tenant_token_ptrs[c->n_tenant_tokens] = c->tenant_token_names[c->n_tenant_tokens];
		c->tenant_tokens[c->n_tenant_tokens++] = n;
	}
	for (size_t i = 0; i < nt; i++)
		free(tok[i]);
	free(tok);
	if (rc < 0)
		return -1;
	worker_gateway_conf_t *g = &c->gateway;
	g->anthropic_key = c->anthropic_key;
	g->openai_key = c->openai_key;
	g->anthropic_base = c->anthropic_base;
	g->openai_base = c->openai_base;
	g->secrets = c->secret_names;
	g->nsecrets = c->nsecret_names;
	g->body_max = (size_t)c->gateway_body_max;
	g->timeout_sec = c->gateway_timeout_sec;
	g->bridge_path = c->egress_bridge_path;
	g->tenant_tokens_per_hour = c->tenant_tokens_per_hour;
	g->tenant_names = c->tenant_token_ptrs;
	g->tenant_budgets = c->tenant_tokens;
	g->ntenant = c->n_tenant_tokens;
	g->redis = &c->redis;
	g->key_prefix = c->key_prefix;
	return 0;
}

/* The acp agents' prefix and the Node.js binary, resolved to real paths
 * (bwrap binds them read-only).  A missing default node is not an error:
 * runs of the claude preset then fail with a clear message. */
static int acp_paths(worker_config_t *c, char *errstr, size_t errstr_size)
{
	char buf[PATH_MAX], nm[PATH_MAX + 16];
	if (c->acp_prefix && *c->acp_prefix) {
		snprintf(nm, sizeof(nm), "%s/node_modules", c->acp_prefix);
		if (c->acp_prefix[0] != '/' || !realpath(c->acp_prefix, buf) || access(nm, R_OK | X_OK) != 0) {
			snprintf(errstr, errstr_size,
			         "RUNNEL_ACP_PREFIX/--acp-prefix: %.200s is not an absolute directory with node_modules (run agents/install.sh)",
			         c->acp_prefix);
			return -1;
		}
		char *r = strdup(buf);
		if (!r) {
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
		free(c->acp_prefix);
		c->acp_prefix = r;
	}
	if (c->node) {
		if (!realpath(c->node, buf) || access(buf, X_OK) != 0) {
			snprintf(errstr, errstr_size, "RUNNEL_NODE/--node: %.200s is not an executable file", c->node);
			return -1;
		}
		snprintf(c->node_path, sizeof(c->node_path), "%s", buf);
		return 0;
	}
	const char *path = getenv("PATH");
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);
		if (n && n < sizeof(nm) - 6) {
			snprintf(nm, sizeof(nm), "%.*s/node", (int)n, path);
			if (access(nm, X_OK) == 0 && realpath(nm, buf)) {
				snprintf(c->node_path, sizeof(c->node_path), "%s", buf);
				return 0;
			}
		}
		path = colon ? colon + 1 : NULL;
	}
	return 0;
}

/* "1", "0.5", "2.25": CPUs with at most three decimals, as millicpus. */
static int cpus_parse(const char *s, long *millis)
{
	long whole = 0, frac = 0, scale = 1000;
	const char *p = s;
	if (!*p)
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		whole = whole * 10 + (*p - '0');
		if (whole > 4096)
			return -1;
	}
	if (*p == '.') {
		p++;
		for (; *p >= '0' && *p <= '9' && scale > 1; p++) {
			scale /= 10;
			frac += (*p - '0') * scale;
		}
	}
	if (*p)
		return -1;
	*millis = whole * 1000 + frac;
	return 0;
}

/* The limit and egress flags that need more than the table's checks. */
static int limits_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	if (cpus_parse(c->run_cpus, &c->run_cpu_millis) < 0 ||
	    (c->run_cpu_millis > 0 && c->run_cpu_millis < 10)) {
		snprintf(errstr, errstr_size, "RUNNEL_RUN_CPUS/--run-cpus: \"%.32s\" is not a number of CPUs (0, or 0.01 to 4096)", c->run_cpus);
		return -1;
	}
	if (strcmp(c->cgroup, "auto") && strcmp(c->cgroup, "v1") && strcmp(c->cgroup, "v2") && strcmp(c->cgroup, "off")) {
		snprintf(errstr, errstr_size, "RUNNEL_CGROUP/--cgroup: \"%.32s\" is not auto, v2, v1 or off", c->cgroup);
		return -1;
	}
	if (!c->egress && !(c->egress = strdup(c->share_net ? "full" : "allowlist"))) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	if (worker_egress_mode_parse(c->egress) < 0) {
		snprintf(errstr, errstr_size, "RUNNEL_EGRESS/--egress: \"%.32s\" is not none, allowlist or full", c->egress);
		return -1;
	}
	if (program_path(c->unpack_path, sizeof(c->unpack_path), c->unpack, "runnel-unpack", "RUNNEL_UNPACK/--unpack",
	                 errstr, errstr_size) < 0)
		return -1;
	return program_path(c->egress_bridge_path, sizeof(c->egress_bridge_path), c->egress_bridge,
	                    "runnel-egress-bridge", "RUNNEL_EGRESS_BRIDGE/--egress-bridge", errstr, errstr_size);
}

int worker_config_limits(worker_config_t *c, char *warn, size_t warn_size,
                         char *errstr, size_t errstr_size)
{
	worker_limits_t max = {
		.memory_mb = c->run_memory_mb,
		.pids = c->run_pids,
		.cpu_millis = c->run_cpu_millis,
		.disk_mb = c->run_disk_mb,
		.tmp_mb = c->run_tmp_mb,
		.output_mb = c->run_output_mb,
	};
	if (worker_limits_setup(&c->limits, &max, c->cgroup, c->work_dir, c->egress, c->egress_allow,
	                        c->sandbox_net, warn, warn_size, errstr, errstr_size) < 0)
		return -1;
	c->limits.bridge_path = c->egress_bridge_path;
	/* A run's bag is unpacked in its cgroup, by runnel-unpack. */
	if (c->limits.cgroup.mode != WORKER_CGROUP_NONE && !c->unpack_path[0]) {
		snprintf(errstr, errstr_size, "runnel-unpack not found (RUNNEL_UNPACK/--unpack): the runs' cgroups need it "
		                              "to unpack bags (RUNNEL_CGROUP=off does without)");
		return -1;
	}
	/* The worker's own services, which a run's host never reaches unless
	 * RUNNEL_EGRESS_ALLOW names it exactly.  Most are loopback or private
	 * addresses, refused anyway; this covers the ones on public addresses.
	 * A name that does not resolve now is left out with a warning: it is
	 * then no address a run could reach either, barring DNS changes. */
	char why[300];
	size_t wl = strlen(warn);
	if (rn_netaddr_set_add(&c->limits.own, c->redis.host, c->redis.port, why, sizeof(why)) < 0 ||
	    (c->metrics_host[0] &&
	     rn_netaddr_set_add(&c->limits.own, c->metrics_host, c->metrics_port, why, sizeof(why)) < 0) ||
	    rn_netaddr_set_add_list(&c->limits.own, c->kafka_brokers, 9092, why, sizeof(why)) < 0) {
		if (wl < warn_size)
			snprintf(warn + wl, warn_size - wl,
			         "egress: cannot resolve one of the worker's own services (%s); runs are kept "
			         "from the others\n",
			         why);
	}
	return 0;
}

/* Where the worker connects: Redis, its key prefix, the Kafka topics and group. */
static int connect_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	char err[256];

	if (rn_redis_url_parse(c->redis_url, &c->redis, err, sizeof(err)) < 0) {
		snprintf(errstr, errstr_size, "RUNNEL_REDIS_URL/--redis-url: %s", err);
		return -1;
	}
	if (!proto_key_prefix_valid(c->key_prefix)) {
		snprintf(errstr, errstr_size,
		         "RUNNEL_KEY_PREFIX/--key-prefix: must be 1..64 of [A-Za-z0-9_.:-]");
		return -1;
	}
	if (!*c->jobs_topic || strlen(c->jobs_topic) > 200) {
		snprintf(errstr, errstr_size, "RUNNEL_JOBS_TOPIC/--jobs-topic: must be 1..200 characters");
		return -1;
	}
	snprintf(c->dlq_topic, sizeof(c->dlq_topic), "%s.dlq", c->jobs_topic);
	if (!*c->group || !*c->kafka_brokers) {
		snprintf(errstr, errstr_size, "RUNNEL_GROUP and RUNNEL_KAFKA_BROKERS must not be empty");
		return -1;
	}
	return 0;
}

/* The sandbox driver and its network. */
static int sandbox_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	if (!strcmp(c->sandbox, "bwrap")) {
		c->driver = WORKER_SANDBOX_BWRAP;
	} else if (!strcmp(c->sandbox, "process")) {
		c->driver = WORKER_SANDBOX_PROCESS;
	} else {
		snprintf(errstr, errstr_size, "RUNNEL_SANDBOX/--sandbox: \"%.32s\" is not bwrap or process", c->sandbox);
		return -1;
	}
	if (!strcmp(c->sandbox_net, "none")) {
		c->share_net = 0;
	} else if (!strcmp(c->sandbox_net, "host")) {
		c->share_net = 1;
	} else {
		snprintf(errstr, errstr_size, "RUNNEL_SANDBOX_NET/--sandbox-net: \"%.32s\" is not none or host", c->sandbox_net);
		return -1;
	}
	return 0;
}

/* The work directory and the worker id, with their defaults. */
static int identity_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	if (!c->work_dir) {
		const char *tmp = getenv("TMPDIR");
		char buf[PATH_MAX];
		snprintf(buf, sizeof(buf), "%s/runnel", tmp && *tmp ? tmp : "/tmp");
		c->work_dir = strdup(buf);
		if (!c->work_dir) {
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
	}
	if (c->work_dir[0] != '/') {
		snprintf(errstr, errstr_size, "RUNNEL_WORK_DIR/--work-dir: must be an absolute path");
		return -1;
	}
	if (!c->worker_id) {
		char host[128] = "worker", buf[200];
		if (gethostname(host, sizeof(host)) < 0)
			snprintf(host, sizeof(host), "worker");
		host[sizeof(host) - 1] = '\0';
		snprintf(buf, sizeof(buf), "%s-%ld", host, (long)getpid());
		c->worker_id = strdup(buf);
		if (!c->worker_id) {
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
	}
	if (!*c->worker_id || strlen(c->worker_id) > 128) {
		snprintf(errstr, errstr_size, "RUNNEL_WORKER_ID/--worker-id: must be 1..128 characters");
		return -1;
	}
	return 0;
}

/* Warm sandboxes: bwrap only, and only with runnel-warm-init at hand. */
static int warm_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	if (c->warm < 0)
		c->warm = (c->slots + 3) / 4;
	if (c->driver != WORKER_SANDBOX_BWRAP)
		c->warm = 0;
	if (program_path(c->warm_init_path, sizeof(c->warm_init_path), c->warm_init, "runnel-warm-init",
	                 "RUNNEL_WARM_INIT/--warm-init", errstr, errstr_size) < 0)
		return -1;
	if (!c->warm_init_path[0])
		c->warm = 0;
	/* Every bwrap sandbox starts with the init: the run's environment
	 * reaches the agent through it, never through bwrap. */
	if (c->driver == WORKER_SANDBOX_BWRAP && !c->warm_init_path[0]) {
		snprintf(errstr, errstr_size, "runnel-warm-init not found (RUNNEL_WARM_INIT/--warm-init): "
		                              "the bwrap sandbox needs it");
		return -1;
	}
	return 0;
}

/* One NAME:COUNT of RUNNEL_WARM_AGENTS (item is NUL-terminated). */
static int warm_agent_item(worker_config_t *c, const char *item, char *errstr, size_t errstr_size)
{
	const char *colon = strchr(item, ':');
	char *end = NULL;
	long n = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || colon == item || !end || end == colon + 1 || *end || colon[1] == '+' || colon[1] == '-' ||
	    colon[1] == ' ') {
		snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: \"%.64s\" is not NAME:COUNT", item);
		return -1;
	}
	char name[32];
	size_t nl = (size_t)(colon - item);
	if (nl < sizeof(name)) {
		memcpy(name, item, nl);
		name[nl] = '\0';
	}
	if (nl >= sizeof(name) || !worker_agent_warm_kind(name)) {
		char names[128];
		worker_agent_warm_names(names, sizeof(names));
		snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: \"%.*s\" is not an agent that starts warm (%s)",
		         (int)(colon - item > 64 ? 64 : colon - item), item, names);
		return -1;
	}
	if (n < 1 || n > WORKER_WARM_AGENT_MAX) {
		snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: \"%.64s\": COUNT must be 1 to %d", item,
		         WORKER_WARM_AGENT_MAX);
		return -1;
	}
	for (size_t i = 0; i < c->n_warm_agents; i++)
		if (!strcmp(c->warm_agent_names[i], name)) {
			snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: %s is listed twice", name);
			return -1;
		}
	snprintf(c->warm_agent_names[c->n_warm_agents], sizeof(c->warm_agent_names[0]), "%s", name);
	c->warm_agent_counts[c->n_warm_agents++] = n;
	return 0;
}

/*
 * Warm agents: "claude:2,codex:1", each name a warm name of some kind
 * (worker/agent.h) listed once, each count 1..WORKER_WARM_AGENT_MAX, and
 * no more agents than slots (a warm agent is a run waiting to happen).
 * Strict: no spaces, no empty items.  bwrap only.
 */
static int warm_agents_parse(worker_config_t *c, char *errstr, size_t errstr_size)
{
	const char *v = c->warm_agents;
	c->n_warm_agents = 0;
	if (!v)
		return 0;
	long total = 0;
	const char *p = v;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char item[128];
		if (len == 0 || len >= sizeof(item)) {
			snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: \"%.64s\" is not a list of NAME:COUNT", v);
			return -1;
		}
		if (c->n_warm_agents >= WORKER_WARM_AGENT_KINDS) {
			snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: more than %d agents", WORKER_WARM_AGENT_KINDS);
			return -1;
		}
		memcpy(item, p, len);
		item[len] = '\0';
		if (warm_agent_item(c, item, errstr, errstr_size) < 0)
			return -1;
		total += c->warm_agent_counts[c->n_warm_agents - 1];
		if (!comma)
			break;
		p = comma + 1;
	}
	if (total > c->slots) {
		snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: %ld warm agents are more than the %ld slot(s)",
		         total, c->slots);
		return -1;
	}
	if (c->driver != WORKER_SANDBOX_BWRAP) {
		snprintf(errstr, errstr_size, "RUNNEL_WARM_AGENTS/--warm-agents: warm agents need the bwrap sandbox");
		return -1;
	}
	return 0;
}

/* The secrets read from the environment (and removed from it). */
static int secrets_read(worker_config_t *c, char *errstr, size_t errstr_size)
{
	char err[256];

	/* The job key: environment only, removed once read. */
	const char *hex = getenv("RUNNEL_JOB_KEY");
	if (hex && *hex) {
		if (proto_sodium_init() < 0) {
			snprintf(errstr, errstr_size, "libsodium failed to initialise");
			return -1;
		}
		if (proto_job_key_parse(hex, c->job_key, err, sizeof(err)) < 0) {
			snprintf(errstr, errstr_size, "RUNNEL_JOB_KEY: must be 64 hex digits");
			worker_config_wipe_env("RUNNEL_JOB_KEY");
			return -1;
		}
		c->have_job_key = 1;
	}
	worker_config_wipe_env("RUNNEL_JOB_KEY");
	/* The webhook secret: environment only too, any bytes, removed once read. */
	const char *ws = getenv("RUNNEL_WEBHOOK_SECRET");
	if (ws && *ws) {
		size_t n = strlen(ws);
		if (n > sizeof(c->webhook_secret)) {
			snprintf(errstr, errstr_size, "RUNNEL_WEBHOOK_SECRET: longer than %zu bytes", sizeof(c->webhook_secret));
			worker_config_wipe_env("RUNNEL_WEBHOOK_SECRET");
			return -1;
		}
		memcpy(c->webhook_secret, ws, n);
		c->webhook_secret_len = n;
	}
	worker_config_wipe_env("RUNNEL_WEBHOOK_SECRET");
	if (c->require_sealed && !c->have_job_key) {
		snprintf(errstr, errstr_size, "RUNNEL_REQUIRE_SEALED needs RUNNEL_JOB_KEY");
		return -1;
	}
	return 0;
}

int worker_config_load(worker_config_t *c, int argc, char **argv,
                       char *errstr, size_t errstr_size)
{
	rn_opt_t o[OPTS_N];
	char err[256];
	int argi = 1;

	memset(c, 0, sizeof(*c));
	opts_fill(o, c);
	int rc = rn_conf_parse(o, argc, argv, &argi, err, sizeof(err));
	if (rc == 1) {
		worker_config_usage(stdout);
		return 1;
	}
	if (rc < 0) {
		snprintf(errstr, errstr_size, "%s", err);
		return -1;
	}
	if (argi < argc) {
		snprintf(errstr, errstr_size, "unexpected argument \"%.64s\" (see --help)", argv[argi]);
		return -1;
	}

	if (connect_parse(c, errstr, errstr_size) < 0)
		return -1;
	if (sandbox_parse(c, errstr, errstr_size) < 0)
		return -1;
	c->log_level_num = rn_log_level_parse(c->log_level);
	if (c->log_level_num < 0) {
		snprintf(errstr, errstr_size, "RUNNEL_LOG_LEVEL/--log-level: \"%.32s\" is not debug, info, warn or error", c->log_level);
		return -1;
	}
	if (listen_parse(c, errstr, errstr_size) < 0)
		return -1;

	if (identity_parse(c, errstr, errstr_size) < 0)
		return -1;

	if (program_path(c->mock_agent_path, sizeof(c->mock_agent_path), c->mock_agent, "runnel-mock-agent",
	                 "RUNNEL_MOCK_AGENT/--mock-agent", errstr, errstr_size) < 0)
		return -1;

	if (tenant_caps_parse(c, errstr, errstr_size) < 0)
		return -1;
	/* runnel-agent (agent kind builtin), found like the mock agent. */
	if (program_path(c->builtin_agent_path, sizeof(c->builtin_agent_path), c->builtin_agent, "runnel-agent",
	                 "RUNNEL_BUILTIN_AGENT/--builtin-agent", errstr, errstr_size) < 0)
		return -1;
	if (acp_paths(c, errstr, errstr_size) < 0)
		return -1;
	if (limits_parse(c, errstr, errstr_size) < 0)
		return -1;
	if (gateway_parse(c, errstr, errstr_size) < 0)
		return -1;
	if (warm_parse(c, errstr, errstr_size) < 0)
		return -1;
	if (warm_agents_parse(c, errstr, errstr_size) < 0)
		return -1;
	return secrets_read(c, errstr, errstr_size);
}

void worker_config_free(worker_config_t *c)
{
	rn_opt_t o[OPTS_N];
	opts_fill(o, c);
	rn_conf_free(o);
	worker_limits_env_free(&c->limits);
	char *keys[] = { c->anthropic_key, c->openai_key };
	for (size_t i = 0; i < 2; i++)
		if (keys[i]) {
			sodium_memzero(keys[i], strlen(keys[i]));
			free(keys[i]);
		}
	for (size_t i = 0; c->secret_names && c->secret_names[i]; i++)
		free(c->secret_names[i]);
	free(c->secret_names);
	sodium_memzero(c->job_key, sizeof(c->job_key));
	sodium_memzero(c->webhook_secret, sizeof(c->webhook_secret));
	sodium_memzero(&c->redis, sizeof(c->redis));
}
