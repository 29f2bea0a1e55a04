/*
 * cli/cancel.c - `runnel cancel RUN`: writes the cancel control message
 * {"type":"cancel","reason":R} to <prefix>:{RUN}:ctl, or asks the
 * dispatcher to (POST /v1/runs/{id}/cancel).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "args.h"
#include "cli.h"
#include "http.h"
#include "proto/control.h"
#include "proto/keys.h"
#include "rconn.h"

/* Expiry of a control stream when the run has no key to take it from: the
 * default largest runtime (8 h) plus the default retention (24 h). */
#define CANCEL_DEFAULT_TTL_SEC (28800 + 86400)

static struct {
	char *reason;
	char *via;
	int force;
	char *redis_url;
	char *prefix;
	char *dispatcher_url;
	char *api_token;
} g_opt;

static const rn_opt_t cancel_opts[] = {
	{ "reason", 0, "RUNNEL_CANCEL_REASON", RN_OPT_STR, &g_opt.reason, "cli", "TEXT",
	  "why, recorded in the control message (at most 128 bytes)", 0, 0 },
	{ "via", 0, "RUNNEL_CANCEL_VIA", RN_OPT_STR, &g_opt.via, "redis", "redis|dispatcher",
	  "write the control message to Redis, or ask the dispatcher", 0, 0 },
	{ "force", 0, "RUNNEL_CANCEL_FORCE", RN_OPT_BOOL, &g_opt.force, "false", NULL,
	  "write the cancel even when Redis knows no such run yet (a job still in Kafka)", 0, 0 },
	CLI_OPT_REDIS_URL(&g_opt.redis_url, CLI_REDIS_URL_DEFAULT, "Redis holding the run streams"),
	CLI_OPT_KEY_PREFIX(&g_opt.prefix),
	CLI_OPT_DISPATCHER_URL(&g_opt.dispatcher_url, "dispatcher base URL (--via dispatcher)"),
	CLI_OPT_API_TOKEN(&g_opt.api_token, "dispatcher bearer token (prefer the variable: flags show in ps)"),
	RN_OPT_END,
};

static const cli_verb_t cancel_verb = {
	.name = "cancel",
	.synopsis = "[options] RUN",
	.summary = "Ask a run to stop: the worker ends it with error code \"cancelled\".",
	.epilog = "exit status: 0 cancel sent (or the run had already ended), 1 refused by the dispatcher,\n"
	          "2 usage, 3 unknown run, 4 Redis or dispatcher unreachable\n",
	.pos_name = "RUN",
	.opts = cancel_opts,
	.pos_min = 1,
	.pos_max = 1,
};

static int is_terminal(const char *st)
{
	return st && (!strcmp(st, "succeeded") || !strcmp(st, "failed") || !strcmp(st, "cancelled") || !strcmp(st, "lost"));
}

static int cancel_redis(const char *run_id, const char *msg)
{
	char err[320], kctl[PROTO_KEY_MAX], kstate[PROTO_KEY_MAX];
	int rc;

	proto_key(kctl, sizeof(kctl), g_opt.prefix, run_id, PROTO_KEY_CTL);
	proto_key(kstate, sizeof(kstate), g_opt.prefix, run_id, PROTO_KEY_STATE);
	rn_rcluster_t *c = cli_rconn_open(g_opt.redis_url, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "runnel cancel: %s\n", err);
		return CLI_EXIT_UNREACHABLE;
	}
	if (!g_opt.force) {
		int found = cli_rconn_run_exists(c, g_opt.prefix, run_id, err, sizeof(err));
		if (found < 0) {
			fprintf(stderr, "runnel cancel: %s\n", err);
			rc = CLI_EXIT_UNREACHABLE;
			goto out;
		}
		if (!found) {
			fprintf(stderr, "runnel cancel: run %s not found (use --force for a job not yet claimed)\n",
			        run_id);
			rc = CLI_EXIT_NOT_FOUND;
			goto out;
		}
		redisReply *r = rn_rcluster_command(c, 0, "HGET %s status", kstate);
		if (r && r->type == REDIS_REPLY_STRING && is_terminal(r->str)) {
			printf("run %s already ended (%s); nothing to cancel\n", run_id, r->str);
			freeReplyObject(r);
			rc = CLI_EXIT_OK;
			goto out;
		}
		if (r)
			freeReplyObject(r);
	}
	/* The control stream expires with the run (the dispatcher does the
	 * same): a cancel for a run not yet claimed, or one that ends without
	 * having had a control message, must not leave a key for ever. */
	static const char lua[] =
	        "local id = redis.call('XADD', KEYS[1], '*', 'msg', ARGV[1])\n"
	        "local ttl = redis.call('PTTL', KEYS[2])\n"
	        "if ttl < 0 then ttl = redis.call('PTTL', KEYS[3]) end\n"
	        "if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl)\n"
	        "elseif redis.call('PTTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end\n"
	        "return id\n";
	char kout[PROTO_KEY_MAX], ttl[24];
	proto_key(kout, sizeof(kout), g_opt.prefix, run_id, PROTO_KEY_OUT);
	snprintf(ttl, sizeof(ttl), "%d", CANCEL_DEFAULT_TTL_SEC);
	redisReply *r = rn_rcluster_command(c, 0, "EVAL %s 3 %s %s %s %s %s", lua, kctl, kstate, kout, msg, ttl);
	if (!r || r->type != REDIS_REPLY_STRING) {
		cli_rconn_error(c, r, err, sizeof(err));
		fprintf(stderr, "runnel cancel: %s\n", err);
		if (r)
			freeReplyObject(r);
		rc = CLI_EXIT_UNREACHABLE;
		goto out;
	}
	printf("cancel sent to run %s (control entry %s)\n", run_id, r->str);
	freeReplyObject(r);
	rc = CLI_EXIT_OK;
out:
	rn_rcluster_free(c);
	return rc;
}

static int cancel_dispatcher(const char *run_id)
{
	char err[512], url[1024], msg[256];
	cli_http_resp_t resp;

	cli_http_url(url, sizeof(url), g_opt.dispatcher_url, "/v1/runs/%s/cancel", run_id);
	json_t *body = json_pack("{s:s}", "reason", g_opt.reason);
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	int rc = cli_http_request("POST", url, g_opt.api_token, text, &resp, err, sizeof(err));
	free(text);
	if (rc < 0) {
		fprintf(stderr, "runnel cancel: %s\n", err);
		return CLI_EXIT_UNREACHABLE;
	}
	if (resp.status == 404) {
		fprintf(stderr, "runnel cancel: run %s not found\n", run_id);
		rc = CLI_EXIT_NOT_FOUND;
	} else if (resp.status >= 200 && resp.status < 300) {
		printf("cancel sent to run %s (via the dispatcher)\n", run_id);
		rc = CLI_EXIT_OK;
	} else {
		fprintf(stderr, "runnel cancel: the dispatcher answered %ld: %s\n", resp.status,
		        cli_http_error_message(&resp, msg, sizeof(msg)));
		rc = CLI_EXIT_RUN_ERROR;
	}
	cli_http_resp_free(&resp);
	return rc;
}

int cli_cancel_main(int argc, char **argv)
{
	char msg[PROTO_CTL_MAX_BYTES];
	cli_args_t a;
	int rc;

	if (cli_args_begin(&cancel_verb, argc, argv, &a, &rc))
		return rc;
	if (cli_args_check_run_id(&cancel_verb, a.pos[0]) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	if (cli_args_check_choice(&cancel_verb, "via", g_opt.via, "redis", "dispatcher") < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	if (!g_opt.reason[0] || strlen(g_opt.reason) > PROTO_CTL_REASON_MAX) {
		rc = cli_args_usage_error(&cancel_verb, "--reason: must be 1 to %d bytes", PROTO_CTL_REASON_MAX);
		goto out;
	}
	if (cli_args_check_redis(&cancel_verb, g_opt.redis_url, g_opt.prefix) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	proto_ctl_t ctl = { .type = PROTO_CTL_CANCEL };
	snprintf(ctl.reason, sizeof(ctl.reason), "%s", g_opt.reason);
	if (proto_ctl_serialize(&ctl, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "runnel cancel: cannot build the control message\n");
		rc = CLI_EXIT_RUN_ERROR;
		goto out;
	}
	rc = !strcmp(g_opt.via, "dispatcher") ? cancel_dispatcher(a.pos[0]) : cancel_redis(a.pos[0], msg);
out:
	rn_conf_free(cancel_opts);
	return rc;
}
