/*
 * cli/submit.c - `runnel submit`: builds one run from flags, variables or
 * an --otp-file, enqueues it through the dispatcher (POST /v1/runs) or
 * straight to Kafka (the v1 job, sealed when RUNNEL_JOB_KEY is set), prints
 * the run id, then follows the run like `runnel tail`.
 *
 * The OTPs and the prompt are secrets: they are never printed, and buffers
 * that held them are wiped before they are freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <sodium.h>

#include "args.h"
#include "cli.h"
#include "common/util.h"
#include "http.h"
#include "interrupt.h"
#include "proto/job.h"
#include "proto/keys.h"
#include "tail.h"

#define SUBMIT_FILE_MAX    (PROTO_JOB_MAX_BYTES + 4096)
#define SUBMIT_DELIVERY_MS 10000

static struct {
	char *agent_url;
	char *otp_setup;
	char *otp_run;
	char *otp_upload;
	char *otp_file;
	char *prompt;
	char *run_id;
	char *caller;
	char *tenant;
	long max_runtime_sec;
	long budget_tokens; /* 0: none */
	char *idem_key;
	long priority; /* -1: not given */
	char *traceparent;
	char *webhook;
	char *via;
	int no_tail;
	int json;
	char *dispatcher_url;
	char *api_token;
	char *kafka_brokers;
	char *jobs_topic;
	char *job_key;
	rn_kv_list_t kafka_props;
	char *redis_url;
	char *prefix;
} g_opt;

static const rn_opt_t submit_opts[] = {
	{ "agent-url", 0, "RUNNEL_AGENT_URL", RN_OPT_STR, &g_opt.agent_url, NULL, "URL",
	  "the workspace API of this run (http:// or https://)", 0, 0 },
	{ "otp-setup", 0, "RUNNEL_OTP_SETUP", RN_OPT_STR, &g_opt.otp_setup, NULL, "OTP",
	  "one-time password for GET /env (prefer the variable or --otp-file: flags show in ps)", 0, 0 },
	{ "otp-run", 0, "RUNNEL_OTP_RUN", RN_OPT_STR, &g_opt.otp_run, NULL, "OTP",
	  "one-time password for GET /config", 0, 0 },
	{ "otp-upload", 0, "RUNNEL_OTP_UPLOAD", RN_OPT_STR, &g_opt.otp_upload, NULL, "OTP",
	  "one-time password for POST /results (none: no writeback)", 0, 0 },
	{ "otp-file", 0, "RUNNEL_OTP_FILE", RN_OPT_STR, &g_opt.otp_file, NULL, "FILE",
	  "JSON object with otp_setup, otp_run, otp_upload (and agent_url, prompt); \"-\" = stdin; "
	  "fills what flags and variables left unset",
	  0, 0 },
	{ "prompt", 0, "RUNNEL_PROMPT", RN_OPT_STR, &g_opt.prompt, NULL, "TEXT",
	  "the user's turn", 0, 0 },
	{ "run-id", 0, "RUNNEL_RUN_ID", RN_OPT_STR, &g_opt.run_id, NULL, "ID",
	  "run id (default: minted, 128 random bits)", 0, 0 },
	{ "caller", 0, "RUNNEL_CALLER", RN_OPT_STR, &g_opt.caller, "cli", "NAME",
	  "who enqueued the run (the job's caller field)", 0, 0 },
	{ "tenant", 0, "RUNNEL_TENANT", RN_OPT_STR, &g_opt.tenant, NULL, "NAME",
	  "whose run it is, for fair shares and caps ([A-Za-z0-9_.-]{1,64}; default: default)", 0, 0 },
	{ "max-runtime-sec", 0, "RUNNEL_JOB_MAX_RUNTIME_SEC", RN_OPT_INT, &g_opt.max_runtime_sec, "0", "SEC",
	  "the job's runtime cap (0: the worker's)", 0, 7L * 86400 },
	{ "budget-tokens", 0, "RUNNEL_BUDGET_TOKENS", RN_OPT_INT, &g_opt.budget_tokens, "0", "N",
	  "the run's model token budget, input + output (0: none; the config's, when smaller, wins)", 0,
	  9000000000000000000L },
	{ "idempotency-key", 0, "RUNNEL_IDEMPOTENCY_KEY", RN_OPT_STR, &g_opt.idem_key, NULL, "KEY",
	  "a retried submit with the same key (per tenant) gets the first run back ([A-Za-z0-9_.:-]{1,128})", 0, 0 },
	{ "priority", 0, "RUNNEL_PRIORITY", RN_OPT_INT, &g_opt.priority, "-1", "0-9",
	  "higher starts first within the tenant's share (-1: the default, 5)", -1, 9 },
	{ "traceparent", 0, "RUNNEL_TRACEPARENT", RN_OPT_STR, &g_opt.traceparent, NULL, "TP",
	  "W3C traceparent the run joins (00-<trace id>-<span id>-<flags>)", 0, 0 },
	{ "webhook", 0, "RUNNEL_WEBHOOK", RN_OPT_STR, &g_opt.webhook, NULL, "URL",
	  "https:// URL that gets one signed POST when the run ends", 0, 0 },
	{ "via", 0, "RUNNEL_SUBMIT_VIA", RN_OPT_STR, &g_opt.via, "dispatcher", "dispatcher|kafka",
	  "enqueue through the dispatcher's POST /v1/runs, or produce the job to Kafka", 0, 0 },
	{ "no-tail", 0, "RUNNEL_NO_TAIL", RN_OPT_BOOL, &g_opt.no_tail, "false", NULL,
	  "print the run id and exit without following the run", 0, 0 },
	CLI_OPT_JSON(&g_opt.json, "print {\"run_id\",\"stream\",\"control\"}, then the raw envelope lines"),
	CLI_OPT_DISPATCHER_URL(&g_opt.dispatcher_url, "dispatcher base URL"),
	CLI_OPT_API_TOKEN(&g_opt.api_token, "dispatcher bearer token (prefer the variable)"),
	{ "kafka-brokers", 0, "RUNNEL_KAFKA_BROKERS", RN_OPT_STR, &g_opt.kafka_brokers, "localhost:9092", "LIST",
	  "Kafka bootstrap servers (--via kafka)", 0, 0 },
	{ "jobs-topic", 0, "RUNNEL_JOBS_TOPIC", RN_OPT_STR, &g_opt.jobs_topic, "runnel.jobs", "TOPIC",
	  "job topic (--via kafka)", 0, 0 },
	{ "job-key", 0, "RUNNEL_JOB_KEY", RN_OPT_STR, &g_opt.job_key, NULL, "HEX",
	  "64 hex digits: seal the job's secrets (--via kafka; prefer the variable)", 0, 0 },
	{ "kafka-property", 'X', "RUNNEL_KAFKA_PROPERTIES", RN_OPT_KV, &g_opt.kafka_props, NULL, "KEY=VALUE",
	  "librdkafka producer property (repeatable; env \"k=v;k=v\")", 0, 0 },
	CLI_OPT_REDIS_URL(&g_opt.redis_url, CLI_REDIS_URL_DEFAULT, "Redis to follow the run from"),
	CLI_OPT_KEY_PREFIX(&g_opt.prefix),
	RN_OPT_END,
};

static const cli_verb_t submit_verb = {
	.name = "submit",
	.synopsis = "[options] --agent-url URL --prompt TEXT",
	.summary = "Enqueue a run (through the dispatcher, or straight to Kafka), print its id, then follow it.",
	.epilog = "OTPs come from --otp-*, RUNNEL_OTP_* or --otp-file; they are never printed.\n"
	          "exit status: as `runnel tail` (0 result, 1 error line) after a successful submit;\n"
	          "1 the dispatcher refused the run, 2 usage, 4 dispatcher/Kafka/Redis unreachable\n",
	.pos_name = NULL,
	.opts = submit_opts,
	.pos_min = 0,
	.pos_max = 0,
};

/* Wipes and frees one secret string. */
static void secret_free(char **s)
{
	if (*s) {
		sodium_memzero(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

static int read_all(const char *path, char **out, size_t *lenp, char *err, size_t errsz)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	if (!f) {
		snprintf(err, errsz, "--otp-file: cannot open %.200s: %s", path, strerror(errno));
		return -1;
	}
	char *buf = malloc(SUBMIT_FILE_MAX + 1);
	size_t n = buf ? fread(buf, 1, SUBMIT_FILE_MAX + 1, f) : 0;
	if (f != stdin)
		fclose(f);
	if (!buf) {
		snprintf(err, errsz, "out of memory");
		return -1;
	}
	if (n > SUBMIT_FILE_MAX) {
		sodium_memzero(buf, SUBMIT_FILE_MAX + 1);
		free(buf);
		snprintf(err, errsz, "--otp-file: over %d bytes", SUBMIT_FILE_MAX);
		return -1;
	}
	buf[n] = '\0';
	*out = buf;
	*lenp = n;
	return 0;
}

/* Fills unset fields from the --otp-file JSON object (e.g. a stub's /mint answer). */
static int load_otp_file(char *err, size_t errsz)
{
	char *buf;
	size_t len;
	json_error_t jerr;

	if (read_all(g_opt.otp_file, &buf, &len, err, errsz) < 0)
		return -1;
	json_t *o = json_loadb(buf, len, 0, &jerr);
	sodium_memzero(buf, len);
	free(buf);
	if (!json_is_object(o)) {
		/* jansson's message may quote the text (an OTP): say only where. */
		if (o)
			snprintf(err, errsz, "--otp-file: not a JSON object");
		else
			snprintf(err, errsz, "--otp-file: not valid JSON (line %d)", jerr.line);
		json_decref(o);
		return -1;
	}
	static const struct {
		const char *field;
		char **dst;
	} map[] = {
		{ "agent_url", &g_opt.agent_url },
		{ "otp_setup", &g_opt.otp_setup },
		{ "otp_run", &g_opt.otp_run },
		{ "otp_upload", &g_opt.otp_upload },
		{ "prompt", &g_opt.prompt },
	};
	int rc = 0;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		json_t *v = json_object_get(o, map[i].field);
		if (!v || json_is_null(v) || *map[i].dst)
			continue;
		if (!json_is_string(v)) {
			snprintf(err, errsz, "--otp-file: %s must be a string", map[i].field);
			rc = -1;
			break;
		}
		*map[i].dst = strdup(json_string_value(v));
	}
	/* Wipe the secrets jansson holds before it frees them. */
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v) if (json_is_string(v))
	        sodium_memzero((char *)json_string_value(v), json_string_length(v));
	json_decref(o);
	return rc;
}

/* ---- via the dispatcher ---------------------------------------------------- */

static int submit_dispatcher(char *run_id_out, size_t run_id_size, json_t **answer)
{
	char err[512], url[1024], msg[300];
	cli_http_resp_t resp;

	json_t *b = json_object();
	json_object_set_new(b, "agent_url", json_string(g_opt.agent_url));
	json_object_set_new(b, "otp_setup", json_string(g_opt.otp_setup));
	json_object_set_new(b, "otp_run", json_string(g_opt.otp_run));
	if (g_opt.otp_upload && *g_opt.otp_upload)
		json_object_set_new(b, "otp_upload", json_string(g_opt.otp_upload));
	json_object_set_new(b, "prompt", json_string(g_opt.prompt));
	if (g_opt.run_id)
		json_object_set_new(b, "run_id", json_string(g_opt.run_id));
	if (g_opt.caller && *g_opt.caller)
		json_object_set_new(b, "caller", json_string(g_opt.caller));
	if (g_opt.tenant)
		json_object_set_new(b, "tenant", json_string(g_opt.tenant));
	if (g_opt.max_runtime_sec > 0)
		json_object_set_new(b, "max_runtime_sec", json_integer(g_opt.max_runtime_sec));
	if (g_opt.budget_tokens > 0)
		json_object_set_new(b, "budget", json_pack("{s:I}", "max_tokens", (json_int_t)g_opt.budget_tokens));
	if (g_opt.idem_key)
		json_object_set_new(b, "idempotency_key", json_string(g_opt.idem_key));
	if (g_opt.priority >= 0)
		json_object_set_new(b, "priority", json_integer(g_opt.priority));
	if (g_opt.traceparent)
		json_object_set_new(b, "traceparent", json_string(g_opt.traceparent));
	if (g_opt.webhook)
		json_object_set_new(b, "webhook", json_string(g_opt.webhook));
	char *body = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(b);
	if (!body) {
		fprintf(stderr, "runnel submit: cannot encode the request (is the text valid UTF-8?)\n");
		return CLI_EXIT_USAGE;
	}

	cli_http_url(url, sizeof(url), g_opt.dispatcher_url, "/v1/runs");
	int rc = cli_http_request("POST", url, g_opt.api_token, body, &resp, err, sizeof(err));
	sodium_memzero(body, strlen(body));
	free(body);
	if (rc < 0) {
		fprintf(stderr, "runnel submit: %s\n", err);
		return CLI_EXIT_UNREACHABLE;
	}
	if (resp.status != 202 && resp.status != 200 && resp.status != 201) {
		long status = resp.status;
		fprintf(stderr, "runnel submit: the dispatcher refused the run (%ld): %s\n", status,
		        cli_http_error_message(&resp, msg, sizeof(msg)));
		cli_http_resp_free(&resp);
		return status == 503 || status == 502 ? CLI_EXIT_UNREACHABLE : CLI_EXIT_RUN_ERROR;
	}
	json_error_t jerr;
	json_t *a = json_loadb(resp.body, resp.len, 0, &jerr);
	const char *id = json_string_value(json_object_get(a, "run_id"));
	if (!id || !proto_run_id_valid(id)) {
		fprintf(stderr, "runnel submit: the dispatcher's answer has no run_id\n");
		json_decref(a);
		cli_http_resp_free(&resp);
		return CLI_EXIT_UNREACHABLE;
	}
	snprintf(run_id_out, run_id_size, "%s", id);
	if (resp.status == 200 && g_opt.idem_key)
		fprintf(stderr, "runnel submit: the idempotency key was used before: following run %s\n", id);
	*answer = a;
	cli_http_resp_free(&resp);
	return CLI_EXIT_OK;
}

/* ---- straight to Kafka ------------------------------------------------------ */

typedef struct delivery {
	int done;
	rd_kafka_resp_err_t err;
} delivery_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	delivery_t *d = m->_private;
	(void)rk;
	(void)opaque;
	if (d) {
		d->err = m->err;
		d->done = 1;
	}
}

/* librdkafka's own log and error lines would clutter the terminal; the
 * delivery report says what matters. */
static void on_kafka_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	(void)level;
	(void)fac;
	(void)buf;
}

static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	(void)rk;
	(void)err;
	(void)reason;
	(void)opaque;
}

static int submit_kafka(const char *run_id)
{
	char err[512];
	uint8_t key[PROTO_JOB_KEY_BYTES];
	const uint8_t *keyp = NULL;
	proto_job_t job;
	int rc = CLI_EXIT_UNREACHABLE;

	if (g_opt.job_key && *g_opt.job_key) {
		if (proto_job_key_parse(g_opt.job_key, key, err, sizeof(err)) < 0) {
			return cli_args_usage_error(&submit_verb, "--job-key/RUNNEL_JOB_KEY: %s", err);
		}
		keyp = key;
	}
	memset(&job, 0, sizeof(job));
	job.v = PROTO_JOB_VERSION;
	snprintf(job.run_id, sizeof(job.run_id), "%s", run_id);
	job.agent_url = strdup(g_opt.agent_url);
	job.otp_setup = strdup(g_opt.otp_setup);
	job.otp_run = strdup(g_opt.otp_run);
	job.otp_upload = g_opt.otp_upload && *g_opt.otp_upload ? strdup(g_opt.otp_upload) : NULL;
	job.prompt = strdup(g_opt.prompt);
	job.caller = g_opt.caller && *g_opt.caller ? strdup(g_opt.caller) : NULL;
	job.enqueued_at = rn_now_ms();
	job.max_runtime_sec = g_opt.max_runtime_sec;
	job.max_tokens = g_opt.budget_tokens;
	if (g_opt.tenant && strlen(g_opt.tenant) > PROTO_TENANT_MAX) {
		proto_job_clear(&job);
		sodium_memzero(key, sizeof(key));
		return cli_args_usage_error(&submit_verb, "tenant: longer than %d characters", PROTO_TENANT_MAX);
	}
	if (g_opt.tenant)
		snprintf(job.tenant, sizeof(job.tenant), "%s", g_opt.tenant);
	if (g_opt.idem_key && strlen(g_opt.idem_key) > PROTO_IDEM_KEY_MAX) {
		proto_job_clear(&job);
		sodium_memzero(key, sizeof(key));
		return cli_args_usage_error(&submit_verb, "idempotency_key: longer than %d characters",
		                            PROTO_IDEM_KEY_MAX);
	}
	if (g_opt.idem_key)
		snprintf(job.idempotency_key, sizeof(job.idempotency_key), "%s", g_opt.idem_key);
	if (g_opt.priority >= 0) {
		job.has_priority = 1;
		job.priority = (int)g_opt.priority;
	}
	if (g_opt.traceparent && proto_traceparent_parse(g_opt.traceparent, job.traceparent) < 0) {
		proto_job_clear(&job);
		sodium_memzero(key, sizeof(key));
		return cli_args_usage_error(&submit_verb, "traceparent: not a W3C traceparent");
	}
	job.webhook = g_opt.webhook ? strdup(g_opt.webhook) : NULL;
	if (proto_job_validate(&job, err, sizeof(err)) < 0) {
		proto_job_clear(&job);
		sodium_memzero(key, sizeof(key));
		return cli_args_usage_error(&submit_verb, "%s", err);
	}
	size_t len = 0;
	char *value = proto_job_serialize(&job, keyp, &len, err, sizeof(err));
	proto_job_clear(&job);
	sodium_memzero(key, sizeof(key));
	if (!value) {
		fprintf(stderr, "runnel submit: %s\n", err);
		return CLI_EXIT_USAGE;
	}

	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char msgto[32];
	snprintf(msgto, sizeof(msgto), "%d", SUBMIT_DELIVERY_MS);
	if (rd_kafka_conf_set(conf, "bootstrap.servers", g_opt.kafka_brokers, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(conf, "message.timeout.ms", msgto, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(conf, "client.id", "runnel-submit", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
		fprintf(stderr, "runnel submit: kafka: %s\n", err);
		rd_kafka_conf_destroy(conf);
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	for (size_t i = 0; i < g_opt.kafka_props.n; i++) {
		if (rd_kafka_conf_set(conf, g_opt.kafka_props.items[i].key, g_opt.kafka_props.items[i].value,
		                      err, sizeof(err)) != RD_KAFKA_CONF_OK) {
			rd_kafka_conf_destroy(conf);
			rc = cli_args_usage_error(&submit_verb, "-X %s: %s", g_opt.kafka_props.items[i].key, err);
			goto out;
		}
	}
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_log_cb(conf, on_kafka_log);
	rd_kafka_conf_set_error_cb(conf, on_kafka_error);
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk) {
		/* rd_kafka_new() destroys conf only on success. */
		rd_kafka_conf_destroy(conf);
		fprintf(stderr, "runnel submit: kafka: %s\n", err);
		goto out;
	}
	conf = NULL; /* owned by rk now */
	delivery_t d = { 0 };
	rd_kafka_resp_err_t perr = rd_kafka_producev(
	        rk, RD_KAFKA_V_TOPIC(g_opt.jobs_topic), RD_KAFKA_V_KEY(run_id, strlen(run_id)),
	        RD_KAFKA_V_VALUE(value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
	        RD_KAFKA_V_OPAQUE(&d), RD_KAFKA_V_END);
	if (perr) {
		fprintf(stderr, "runnel submit: kafka: cannot queue the job: %s\n", rd_kafka_err2str(perr));
		rd_kafka_destroy(rk);
		goto out;
	}
	int64_t deadline = rn_mono_ms() + SUBMIT_DELIVERY_MS + 2000;
	while (!d.done && rn_mono_ms() < deadline && !cli_interrupted())
		rd_kafka_poll(rk, 100);
	if (!d.done) {
		/* Interrupted, or no report in time: the job may or may not be on the topic. */
		rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_poll(rk, 0);
		fprintf(stderr, "runnel submit: no delivery report from Kafka at %s; the job may not be enqueued\n",
		        g_opt.kafka_brokers);
	} else if (d.err) {
		fprintf(stderr, "runnel submit: cannot deliver the job to Kafka at %s: %s\n",
		        g_opt.kafka_brokers, rd_kafka_err2str(d.err));
	} else {
		rc = CLI_EXIT_OK;
	}
	rd_kafka_flush(rk, 1000);
	rd_kafka_destroy(rk);
out:
	sodium_memzero(value, len);
	free(value);
	return rc;
}

int cli_submit_main(int argc, char **argv)
{
	char err[512], run_id[PROTO_RUN_ID_MAX + 1] = "";
	cli_args_t a;
	json_t *answer = NULL;
	int rc;

	if (cli_args_begin(&submit_verb, argc, argv, &a, &rc))
		return rc;
	if (g_opt.otp_file && load_otp_file(err, sizeof(err)) < 0) {
		rc = cli_args_usage_error(&submit_verb, "%s", err);
		goto out;
	}
	if (cli_args_check_choice(&submit_verb, "via", g_opt.via, "dispatcher", "kafka") < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	int via_kafka = !strcmp(g_opt.via, "kafka");
	static const struct {
		const char *flag;
		char **val;
	} required[] = {
		{ "agent-url", &g_opt.agent_url },
		{ "otp-setup", &g_opt.otp_setup },
		{ "otp-run", &g_opt.otp_run },
		{ "prompt", &g_opt.prompt },
	};
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		if (!*required[i].val || !**required[i].val) {
			rc = cli_args_usage_error(&submit_verb, "--%s is required", required[i].flag);
			goto out;
		}
	}
	if (g_opt.run_id && !proto_run_id_valid(g_opt.run_id)) {
		rc = cli_args_usage_error(&submit_verb, "--run-id: invalid run id \"%.80s\" (expected 1-64 of A-Z a-z 0-9 _ -)",
		                          g_opt.run_id);
		goto out;
	}
	if (cli_args_check_redis(&submit_verb, g_opt.redis_url, g_opt.prefix) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	cli_interrupt_install();

	if (via_kafka) {
		if (g_opt.run_id) {
			snprintf(run_id, sizeof(run_id), "%s", g_opt.run_id);
		} else {
			char minted[27];
			proto_run_id_mint(minted);
			snprintf(run_id, sizeof(run_id), "%s", minted);
		}
		rc = submit_kafka(run_id);
	} else {
		rc = submit_dispatcher(run_id, sizeof(run_id), &answer);
	}
	if (rc != CLI_EXIT_OK)
		goto out;

	/* The secrets are on their way: drop them before following the run. */
	secret_free(&g_opt.otp_setup);
	secret_free(&g_opt.otp_run);
	secret_free(&g_opt.otp_upload);
	secret_free(&g_opt.prompt);
	secret_free(&g_opt.job_key);
	secret_free(&g_opt.api_token);

	cli_view_mode_t mode = cli_tail_mode(g_opt.json);
	if (g_opt.json) {
		char kout[PROTO_KEY_MAX], kctl[PROTO_KEY_MAX];
		proto_key(kout, sizeof(kout), g_opt.prefix, run_id, PROTO_KEY_OUT);
		proto_key(kctl, sizeof(kctl), g_opt.prefix, run_id, PROTO_KEY_CTL);
		json_t *o = json_pack("{s:s, s:s, s:s}", "run_id", run_id,
		                      "stream", json_string_value(json_object_get(answer, "stream")) ? json_string_value(json_object_get(answer, "stream")) : kout,
		                      "control", json_string_value(json_object_get(answer, "control")) ? json_string_value(json_object_get(answer, "control")) : kctl);
		char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		printf("%s\n", s ? s : "{}");
		free(s);
		json_decref(o);
	} else if (mode != CLI_VIEW_LIVE || g_opt.no_tail) {
		/* The live view's first row names the run already. */
		printf("%s\n", run_id);
	}
	fflush(stdout);
	if (g_opt.no_tail) {
		rc = CLI_EXIT_OK;
		goto out;
	}
	cli_tail_req_t req = {
		.verb = "submit",
		.redis_url = g_opt.redis_url,
		.prefix = g_opt.prefix,
		.run_id = run_id,
		.after = NULL,
		.mode = mode,
		/* A job sent straight to Kafka has no state until a worker claims it;
		 * the dispatcher wrote "queued" before it answered. */
		.wait_ms = via_kafka ? -1 : 3000,
	};
	rc = cli_tail_follow(&req);
out:
	json_decref(answer);
	secret_free(&g_opt.otp_setup);
	secret_free(&g_opt.otp_run);
	secret_free(&g_opt.otp_upload);
	secret_free(&g_opt.prompt);
	secret_free(&g_opt.job_key);
	secret_free(&g_opt.api_token);
	rn_conf_free(submit_opts);
	return rc;
}
