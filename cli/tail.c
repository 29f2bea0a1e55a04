/*
 * cli/tail.c - `runnel tail RUN`: XREAD BLOCK on <prefix>:{RUN}:out from
 * Redis until the run's terminal line.  Ctrl-C stops tailing only; the run
 * goes on.
 */
#include "tail.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "cli.h"
#include "common/util.h"
#include "interrupt.h"
#include "proto/keys.h"
#include "rconn.h"

#define TAIL_BATCH          256
#define TAIL_BLOCK_MS       500  /* bounds how late Ctrl-C is noticed */
#define TAIL_LIVE_TICK_MS   100  /* spinner frame */
#define TAIL_STATE_POLL_MS  1000 /* footer status refresh (LIVE) */
#define TAIL_ID_MAX         64
#define TAIL_RECONNECT_MS   10000 /* how long a lost Redis connection is retried */
#define TAIL_EXISTS_POLL_MS 200

cli_view_mode_t cli_tail_mode(int json)
{
	if (json)
		return CLI_VIEW_JSON;
	/* A terminal that cannot move its cursor gets the plain view. */
	const char *term = getenv("TERM");
	if (term && !strcmp(term, "dumb"))
		return CLI_VIEW_PLAIN;
	return isatty(STDOUT_FILENO) ? CLI_VIEW_LIVE : CLI_VIEW_PLAIN;
}

/* Footer word for the LIVE view, from the state hash. */
static void refresh_status(rn_rcluster_t *c, const char *kstate, cli_view_t *view)
{
	redisReply *r = rn_rcluster_command(c, 0, "HGET %s status", kstate);
	if (r && r->type == REDIS_REPLY_STRING) {
		if (!strcmp(r->str, "queued"))
			cli_view_status(view, "queued, waiting for a worker");
		else if (!strcmp(r->str, "claimed"))
			cli_view_status(view, "claimed by a worker, starting");
		else if (!strcmp(r->str, "running"))
			cli_view_status(view, "running");
	}
	if (r)
		freeReplyObject(r);
}

/* Handles one XREAD reply.  Returns the view's terminal code (0, 1, 2) or
 * -1 for a reply of an unexpected shape. */
static int handle_reply(redisReply *r, char *last_id, cli_view_t *view)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
		return -1;
	redisReply *stream = r->element[0];
	if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2 ||
	    stream->element[1]->type != REDIS_REPLY_ARRAY)
		return -1;
	redisReply *entries = stream->element[1];
	for (size_t i = 0; i < entries->elements; i++) {
		redisReply *e = entries->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
		    e->element[0]->type != REDIS_REPLY_STRING)
			return -1;
		snprintf(last_id, TAIL_ID_MAX, "%s", e->element[0]->str);
		redisReply *f = e->element[1];
		if (f->type != REDIS_REPLY_ARRAY)
			continue;
		for (size_t k = 0; k + 1 < f->elements; k += 2) {
			if (f->element[k]->type != REDIS_REPLY_STRING || strcmp(f->element[k]->str, "line") ||
			    f->element[k + 1]->type != REDIS_REPLY_STRING)
				continue;
			int term = cli_view_line(view, f->element[k + 1]->str, f->element[k + 1]->len);
			if (term)
				return term;
		}
	}
	return 0;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/*
 * Waits for the run to exist (state hash or stream).  Returns 0 when it
 * does, CLI_EXIT_NOT_FOUND, CLI_EXIT_UNREACHABLE or CLI_EXIT_INTERRUPTED.
 */
static int await_run(rn_rcluster_t *c, const cli_tail_req_t *req)
{
	char err[320];
	int64_t end = req->wait_ms > 0 ? rn_mono_ms() + req->wait_ms : 0;
	for (;;) {
		int found = cli_rconn_run_exists(c, req->prefix, req->run_id, err, sizeof(err));
		if (found < 0) {
			fprintf(stderr, "runnel %s: %s\n", req->verb, err);
			return CLI_EXIT_UNREACHABLE;
		}
		if (found)
			return 0;
		if (req->wait_ms == 0 || (req->wait_ms > 0 && rn_mono_ms() >= end)) {
			fprintf(stderr, "runnel %s: run %s not found\n", req->verb, req->run_id);
			return CLI_EXIT_NOT_FOUND;
		}
		if (cli_interrupted())
			return CLI_EXIT_INTERRUPTED;
		sleep_ms(TAIL_EXISTS_POLL_MS);
	}
}

/* Parses "<ms>-<seq>" or "<ms>".  0 or -1. */
static int parse_id(const char *s, unsigned long long *ms, unsigned long long *seq)
{
	char *end = NULL;

	*ms = strtoull(s, &end, 10);
	*seq = 0;
	if (end == s)
		return -1;
	if (*end == '-') {
		const char *p = end + 1;

		*seq = strtoull(p, &end, 10);
		if (end == p)
			return -1;
	}
	return *end == '\0' ? 0 : -1;
}

/*
 * Resuming at or after the run's terminal line: XREAD would wait forever
 * for entries that never come.  Returns 1 (result) or 2 (error) when the
 * stream's last entry is terminal and not after `after`, 0 otherwise
 * (including any doubt: then the tail simply follows), -1 when the
 * connection broke.
 */
static int ended_before(rn_rcluster_t *c, const char *kout, const char *after)
{
	unsigned long long ams, aseq, lms, lseq;
	int term = 0;

	if (parse_id(after, &ams, &aseq) < 0)
		return 0;
	redisReply *r = rn_rcluster_command(c, 0, "XREVRANGE %s + - COUNT 1", kout);
	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
	    r->element[0]->elements == 2 && r->element[0]->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[0]->element[1]->type == REDIS_REPLY_ARRAY &&
	    parse_id(r->element[0]->element[0]->str, &lms, &lseq) == 0 &&
	    (lms < ams || (lms == ams && lseq <= aseq))) {
		redisReply *f = r->element[0]->element[1];

		for (size_t k = 0; k + 1 < f->elements; k += 2) {
			if (f->element[k]->type != REDIS_REPLY_STRING || strcmp(f->element[k]->str, "line") ||
			    f->element[k + 1]->type != REDIS_REPLY_STRING)
				continue;
			json_t *o = json_loadb(f->element[k + 1]->str, f->element[k + 1]->len, 0, NULL);
			const char *type = json_string_value(json_object_get(o, "type"));
			if (type && !strcmp(type, "result"))
				term = 1;
			else if (type && !strcmp(type, "error"))
				term = 2;
			json_decref(o);
			break;
		}
	}
	freeReplyObject(r);
	return term;
}

/* Replaces a broken connection, retrying until TAIL_RECONNECT_MS passes. */
static rn_rcluster_t *reconnect(const cli_tail_req_t *req, cli_view_t *view, char *err, size_t errsz)
{
	int64_t end = rn_mono_ms() + TAIL_RECONNECT_MS;
	cli_view_status(view, "reconnecting to Redis");
	while (rn_mono_ms() < end && !cli_interrupted()) {
		cli_view_tick(view);
		sleep_ms(TAIL_LIVE_TICK_MS * 2);
		rn_rcluster_t *c = cli_rconn_open(req->redis_url, err, errsz);
		if (c) {
			cli_view_status(view, "running");
			return c;
		}
	}
	return NULL;
}

int cli_tail_follow(const cli_tail_req_t *req)
{
	char err[320], kout[PROTO_KEY_MAX], kstate[PROTO_KEY_MAX];
	char last_id[TAIL_ID_MAX];
	int rc = CLI_EXIT_UNREACHABLE;

	if (proto_key(kout, sizeof(kout), req->prefix, req->run_id, PROTO_KEY_OUT) < 0 ||
	    proto_key(kstate, sizeof(kstate), req->prefix, req->run_id, PROTO_KEY_STATE) < 0) {
		fprintf(stderr, "runnel %s: invalid run id or key prefix\n", req->verb);
		return CLI_EXIT_USAGE;
	}
	snprintf(last_id, sizeof(last_id), "%s", req->after ? req->after : "0-0");

	rn_rcluster_t *c = cli_rconn_open(req->redis_url, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "runnel %s: %s\n", req->verb, err);
		return CLI_EXIT_UNREACHABLE;
	}
	rc = await_run(c, req);
	if (rc != 0) {
		rn_rcluster_free(c);
		return rc;
	}
	if (req->after) {
		int ended = ended_before(c, kout, req->after);
		if (ended != 0) {
			if (ended < 0) {
				cli_rconn_error(c, NULL, err, sizeof(err));
				fprintf(stderr, "runnel %s: %s\n", req->verb, err);
			}
			rn_rcluster_free(c);
			return ended < 0 ? CLI_EXIT_UNREACHABLE : ended == 1 ? CLI_EXIT_OK
			                                                     : CLI_EXIT_RUN_ERROR;
		}
	}

	cli_view_t *view = cli_view_new(req->mode, stdout, req->run_id, 0, 0);
	if (!view) {
		fprintf(stderr, "runnel %s: out of memory\n", req->verb);
		rn_rcluster_free(c);
		return CLI_EXIT_RUN_ERROR;
	}
	int live = req->mode == CLI_VIEW_LIVE;
	int block = live ? TAIL_LIVE_TICK_MS : TAIL_BLOCK_MS;
	int64_t next_poll = 0, loading_since = 0;
	for (;;) {
		if (cli_interrupted()) {
			rc = CLI_EXIT_INTERRUPTED;
			break;
		}
		if (live && rn_mono_ms() >= next_poll) {
			refresh_status(c, kstate, view);
			next_poll = rn_mono_ms() + TAIL_STATE_POLL_MS;
		}
		redisReply *r = rn_rcluster_command(c, 0, "XREAD COUNT %d BLOCK %d STREAMS %s %s",
		                                    TAIL_BATCH, block, kout, last_id);
		if (!r) {
			/* The connection broke: resume after last_id on a new one. */
			if (r)
				freeReplyObject(r);
			if (cli_interrupted()) {
				rc = CLI_EXIT_INTERRUPTED;
				break;
			}
			cli_rconn_error(c, NULL, err, sizeof(err));
			rn_rcluster_free(c);
			c = reconnect(req, view, err, sizeof(err));
			if (!c) {
				if (cli_interrupted()) {
					rc = CLI_EXIT_INTERRUPTED;
					break;
				}
				cli_view_finish(view);
				fprintf(stderr, "runnel %s: lost the connection to Redis: %s\n", req->verb, err);
				rc = CLI_EXIT_UNREACHABLE;
				break;
			}
			continue;
		}
		if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "LOADING", 7) &&
		    (loading_since == 0 || rn_mono_ms() - loading_since < TAIL_RECONNECT_MS)) {
			/* A restarted Redis reading its data back: wait, then ask again. */
			if (loading_since == 0)
				loading_since = rn_mono_ms();
			freeReplyObject(r);
			cli_view_tick(view);
			sleep_ms(TAIL_LIVE_TICK_MS);
			continue;
		}
		loading_since = 0;
		if (r->type == REDIS_REPLY_ERROR) {
			cli_view_finish(view);
			cli_rconn_error(c, r, err, sizeof(err));
			fprintf(stderr, "runnel %s: %s\n", req->verb, err);
			freeReplyObject(r);
			rc = CLI_EXIT_UNREACHABLE;
			break;
		}
		if (r->type == REDIS_REPLY_NIL) {
			freeReplyObject(r);
			cli_view_tick(view);
			continue;
		}
		int term = handle_reply(r, last_id, view);
		freeReplyObject(r);
		if (term < 0) {
			cli_view_finish(view);
			fprintf(stderr, "runnel %s: unexpected XREAD reply from Redis\n", req->verb);
			rc = CLI_EXIT_UNREACHABLE;
			break;
		}
		if (term) {
			rc = term == 1 ? CLI_EXIT_OK : CLI_EXIT_RUN_ERROR;
			break;
		}
	}
	cli_view_finish(view);
	cli_view_free(view);
	if (c)
		rn_rcluster_free(c);
	return rc;
}

/* ---- the verb ----------------------------------------------------------- */

static struct {
	char *redis_url;
	char *prefix;
	char *after;
	int json;
	int wait;
} g_opt;

static const rn_opt_t tail_opts[] = {
	{ "after", 0, "RUNNEL_TAIL_AFTER", RN_OPT_STR, &g_opt.after, NULL, "ID",
	  "resume after this stream entry id (exclusive)", 0, 0 },
	CLI_OPT_JSON(&g_opt.json, "print the raw envelope lines, one per line"),
	{ "wait", 0, "RUNNEL_TAIL_WAIT", RN_OPT_BOOL, &g_opt.wait, "false", NULL,
	  "wait for a run that does not exist yet (a job still in Kafka) instead of exiting 3", 0, 0 },
	CLI_OPT_REDIS_URL(&g_opt.redis_url, CLI_REDIS_URL_DEFAULT, "Redis holding the run streams"),
	CLI_OPT_KEY_PREFIX(&g_opt.prefix),
	RN_OPT_END,
};

static const cli_verb_t tail_verb = {
	.name = "tail",
	.synopsis = "[options] RUN",
	.summary = "Follow a run's output from Redis until its result or error.",
	.epilog = "exit status: 0 result, 1 error line, 2 usage, 3 unknown run, 4 Redis unreachable,\n"
	          "130 interrupted (Ctrl-C stops tailing; the run goes on)\n",
	.pos_name = "RUN",
	.opts = tail_opts,
	.pos_min = 1,
	.pos_max = 1,
};

/* Stream ids are "<ms>-<seq>" (or "<ms>"); anything else would make XREAD fail later. */
static int stream_id_valid(const char *s)
{
	size_t n = strspn(s, "0123456789");
	if (n == 0 || n > 20)
		return 0;
	if (s[n] == '\0')
		return 1;
	if (s[n] != '-')
		return 0;
	size_t m = strspn(s + n + 1, "0123456789");
	return m > 0 && m <= 20 && s[n + 1 + m] == '\0';
}

int cli_tail_main(int argc, char **argv)
{
	cli_args_t a;
	int rc;

	if (cli_args_begin(&tail_verb, argc, argv, &a, &rc))
		return rc;
	if (cli_args_check_run_id(&tail_verb, a.pos[0]) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	if (g_opt.after && !stream_id_valid(g_opt.after)) {
		rc = cli_args_usage_error(&tail_verb, "--after: \"%.40s\" is not a stream id (like 1700000000000-3)",
		                          g_opt.after);
		goto out;
	}
	if (cli_args_check_redis(&tail_verb, g_opt.redis_url, g_opt.prefix) < 0) {
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	cli_interrupt_install();
	cli_tail_req_t req = {
		.verb = "tail",
		.redis_url = g_opt.redis_url,
		.prefix = g_opt.prefix,
		.run_id = a.pos[0],
		.after = g_opt.after,
		.mode = cli_tail_mode(g_opt.json),
		.wait_ms = g_opt.wait ? -1 : 0,
	};
	rc = cli_tail_follow(&req);
out:
	rn_conf_free(tail_opts);
	return rc;
}
