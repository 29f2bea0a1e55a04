/*
 * cli/reply.c - `runnel reply RUN ASK OPTION|--text T|--reject`: answers an
 * open `ask` line of a run.  Writes {"type":"reply",...} to
 * <prefix>:{RUN}:ctl only when the ask is open (the same Redis script as
 * the dispatcher), or asks the dispatcher to
 * (POST /v1/runs/{id}/replies/{ask_id}).
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

/* Expiry of a control stream when the run's keys have none (as cancel). */
#define REPLY_DEFAULT_TTL_SEC (28800 + 86400)

static struct {
	char *text;
	int reject;
	char *via;
	char *redis_url;
	char *prefix;
	char *dispatcher_url;
	char *api_token;
} g_opt;

static const rn_opt_t reply_opts[] = {
	{ "text", 0, "RUNNEL_REPLY_TEXT", RN_OPT_STR, &g_opt.text, NULL, "TEXT",
	  "answer with free text (a question) instead of an option", 0, 0 },
	{ "reject", 0, "RUNNEL_REPLY_REJECT", RN_OPT_BOOL, &g_opt.reject, "false", NULL,
	  "reject the ask", 0, 0 },
	{ "via", 0, "RUNNEL_REPLY_VIA", RN_OPT_STR, &g_opt.via, "redis", "redis|dispatcher",
	  "write the reply to Redis, or ask the dispatcher", 0, 0 },
	CLI_OPT_REDIS_URL(&g_opt.redis_url, CLI_REDIS_URL_DEFAULT, "Redis holding the run streams"),
	CLI_OPT_KEY_PREFIX(&g_opt.prefix),
	CLI_OPT_DISPATCHER_URL(&g_opt.dispatcher_url, "dispatcher base URL (--via dispatcher)"),
	CLI_OPT_API_TOKEN(&g_opt.api_token, "dispatcher bearer token (prefer the variable: flags show in ps)"),
	RN_OPT_END,
};

static const cli_verb_t reply_verb = {
	.name = "reply",
	.synopsis = "[options] RUN ASK OPTION | RUN ASK --text TEXT | RUN ASK --reject",
	.summary = "Answer a run's open ask (shown by runnel tail): choose an option, give text, or reject.",
	.epilog = "example: runnel reply run_8Jd3kQ ask_1 allow_once\n"
	          "exit status: 0 reply sent, 1 the ask is already settled (or the option is not one of its\n"
	          "options, or the dispatcher refused), 2 usage, 3 unknown run or ask,\n"
	          "4 Redis or dispatcher unreachable\n",
	.pos_name = "RUN ASK [OPTION]",
	.opts = reply_opts,
	.pos_min = 2,
	.pos_max = 3,
};

static int reply_redis(const char *run_id, const char *ask_id, const char *msg, const char *option)
{
	char err[320], kctl[PROTO_KEY_MAX], kstate[PROTO_KEY_MAX], kout[PROTO_KEY_MAX], ttl[24];
	int rc;

	proto_key(kctl, sizeof(kctl), g_opt.prefix, run_id, PROTO_KEY_CTL);
	proto_key(kstate, sizeof(kstate), g_opt.prefix, run_id, PROTO_KEY_STATE);
	proto_key(kout, sizeof(kout), g_opt.prefix, run_id, PROTO_KEY_OUT);
	snprintf(ttl, sizeof(ttl), "%d", REPLY_DEFAULT_TTL_SEC);
	rn_rcluster_t *c = cli_rconn_open(g_opt.redis_url, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "runnel reply: %s\n", err);
		return CLI_EXIT_UNREACHABLE;
	}
	redisReply *r = rn_rcluster_command(c, 0, "EVAL %s 3 %s %s %s %s %s %s %s", proto_ctl_reply_lua, kstate, kout, kctl,
	                                    ask_id, msg, ttl, option ? option : "");
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
		cli_rconn_error(c, r, err, sizeof(err));
		fprintf(stderr, "runnel reply: %s\n", err);
		rc = CLI_EXIT_UNREACHABLE;
	} else if (!strcmp(r->element[0]->str, "absent")) {
		fprintf(stderr, "runnel reply: run %s not found\n", run_id);
		rc = CLI_EXIT_NOT_FOUND;
	} else if (!strcmp(r->element[0]->str, "unknown")) {
		fprintf(stderr, "runnel reply: run %s has no ask %s\n", run_id, ask_id);
		rc = CLI_EXIT_NOT_FOUND;
	} else if (!strcmp(r->element[0]->str, "settled")) {
		fprintf(stderr, "runnel reply: ask %s of run %s is already settled\n", ask_id, run_id);
		rc = CLI_EXIT_RUN_ERROR;
	} else if (!strcmp(r->element[0]->str, "bad_option")) {
		fprintf(stderr, "runnel reply: \"%s\" is not an option of ask %s (options: %s)\n", option ? option : "",
		        ask_id, r->element[1]->str);
		rc = CLI_EXIT_RUN_ERROR;
	} else {
		printf("reply sent to ask %s of run %s\n", ask_id, run_id);
		rc = CLI_EXIT_OK;
	}
	if (r)
		freeReplyObject(r);
	rn_rcluster_free(c);
	return rc;
}

static int reply_dispatcher(const char *run_id, const char *ask_id, const proto_ctl_t *ctl)
{
	char err[512], url[1024], msg[256];
	cli_http_resp_t resp;

	cli_http_url(url, sizeof(url), g_opt.dispatcher_url, "/v1/runs/%s/replies/%s", run_id, ask_id);
	json_t *body = ctl->reply == PROTO_REPLY_OPTION ? json_pack("{s:s}", "option", ctl->option) : ctl->reply == PROTO_REPLY_TEXT ? json_pack("{s:s}", "text", ctl->text)
	                                                                                                                             : json_pack("{s:b}", "reject", 1);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text) {
		fprintf(stderr, "runnel reply: out of memory\n");
		return CLI_EXIT_RUN_ERROR;
	}
	int rc = cli_http_request("POST", url, g_opt.api_token, text, &resp, err, sizeof(err));
	free(text);
	if (rc < 0) {
		fprintf(stderr, "runnel reply: %s\n", err);
		return CLI_EXIT_UNREACHABLE;
	}
	if (resp.status == 404) {
		fprintf(stderr, "runnel reply: %s\n", cli_http_error_message(&resp, msg, sizeof(msg)));
		rc = CLI_EXIT_NOT_FOUND;
	} else if (resp.status >= 200 && resp.status < 300) {
		printf("reply sent to ask %s of run %s (via the dispatcher)\n", ask_id, run_id);
		rc = CLI_EXIT_OK;
	} else {
		fprintf(stderr, "runnel reply: the dispatcher answered %ld: %s\n", resp.status,
		        cli_http_error_message(&resp, msg, sizeof(msg)));
		rc = resp.status >= 500 ? CLI_EXIT_UNREACHABLE : CLI_EXIT_RUN_ERROR;
	}
	cli_http_resp_free(&resp);
	return rc;
}

int cli_reply_main(int argc, char **argv)
{
	char msg[PROTO_CTL_MAX_BYTES + 1], err[128];
	cli_args_t a;
	proto_ctl_t *ctl = NULL;
	int rc;

	if (cli_args_begin(&reply_verb, argc, argv, &a, &rc))
		return rc;
	if (cli_args_check_run_id(&reply_verb, a.pos[0]) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	if (!proto_ctl_id_ok(a.pos[1])) {
		rc = cli_args_usage_error(&reply_verb, "ASK: must be 1-%d characters of A-Z a-z 0-9 _ . : -",
		                          PROTO_CTL_ID_MAX);
		goto out;
	}
	const char *option = a.npos > 2 ? a.pos[2] : NULL;
	if (!!option + !!g_opt.text + (g_opt.reject != 0) != 1) {
		rc = cli_args_usage_error(&reply_verb, "give exactly one of OPTION, --text, --reject");
		goto out;
	}
	if (cli_args_check_choice(&reply_verb, "via", g_opt.via, "redis", "dispatcher") < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	if (cli_args_check_redis(&reply_verb, g_opt.redis_url, g_opt.prefix) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	ctl = malloc(sizeof(*ctl));
	if (!ctl) {
		fprintf(stderr, "runnel reply: out of memory\n");
		rc = CLI_EXIT_RUN_ERROR;
		goto out;
	}
	if (proto_ctl_reply_set(ctl, a.pos[1], option, g_opt.text, g_opt.reject, err, sizeof(err)) < 0) {
		/* "option: ..." names OPTION, "text: ..." --text. */
		rc = cli_args_usage_error(&reply_verb, "%s%s", !strncmp(err, "text:", 5) ? "--" : "", err);
		goto out;
	}
	if (proto_ctl_serialize(ctl, msg, sizeof(msg)) < 0 || strlen(msg) > PROTO_CTL_MAX_BYTES) {
		rc = cli_args_usage_error(&reply_verb, "--text: too long once encoded (over %d bytes)", PROTO_CTL_MAX_BYTES);
		goto out;
	}
	rc = !strcmp(g_opt.via, "dispatcher") ? reply_dispatcher(a.pos[0], a.pos[1], ctl)
	                                      : reply_redis(a.pos[0], a.pos[1], msg,
	                                                    ctl->reply == PROTO_REPLY_OPTION ? ctl->option : NULL);
out:
	free(ctl);
	rn_conf_free(reply_opts);
	return rc;
}
