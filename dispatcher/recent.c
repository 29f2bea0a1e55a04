/*
 * dispatcher/recent.c - the recent-runs index behind GET /v1/runs and the
 * viewer's runs list.  The index is one sorted set, <prefix>:{runs}:recent,
 * member = run_id, score = enqueue time in ms.  Every command touches that
 * one key or one run's state hash, never both, so it works unchanged on a
 * Redis Cluster.  Only runs enqueued through this dispatcher's API are in it
 * (a job produced to Kafka directly has no entry).
 */
#include "dispatcher/dispatcher.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/keyvalq_struct.h>

#include "common/log.h"
#include "common/util.h"
#include "proto/keys.h"

#define RECENT_LIST_DEFAULT 50

/*
 * KEYS: index.  ARGV: run_id score_ms oldest_ms bound ttl_sec.  Drops what
 * is older than the runs can live, keeps the newest `bound`, and lets the
 * index expire with the last run it names.
 */
static const char lua_add[] =
        "redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])\n"
        "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])\n"
        "redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -1 - tonumber(ARGV[4]))\n"
        "redis.call('EXPIRE', KEYS[1], ARGV[5])\n"
        "return 1\n";

static void recent_key(const dispatcher_t *d, char *buf, size_t size)
{
	snprintf(buf, size, "%s:{runs}:recent", d->cfg->key_prefix);
}

/* Runs live up to their max runtime after they start, then keep their keys
 * for the retention: the index keeps an entry as long as that. */
static int64_t lifetime_sec(const dispatcher_t *d)
{
	return d->cfg->max_runtime_sec + d->cfg->retention_sec;
}

static void on_added(redisReply *r, void *arg)
{
	(void)arg;
	if (r && r->type == REDIS_REPLY_ERROR)
		rn_log_warn(NULL, "recent_failed", "recent-runs index: %.200s", r->str);
}

void dispatcher_recent_add(dispatcher_t *d, const char *run_id, int64_t enqueued_at_ms)
{
	char key[PROTO_KEY_PREFIX_MAX + 32], score[32], oldest[32], bound[32], ttl[32];
	const char *argv[] = { "EVAL", lua_add, "1", key, run_id, score, oldest, bound, ttl };

	recent_key(d, key, sizeof(key));
	snprintf(score, sizeof(score), "%" PRId64, enqueued_at_ms);
	snprintf(oldest, sizeof(oldest), "%" PRId64, rn_now_ms() - lifetime_sec(d) * 1000);
	snprintf(bound, sizeof(bound), "%ld", d->cfg->recent_runs);
	snprintf(ttl, sizeof(ttl), "%" PRId64, lifetime_sec(d));
	if (dispatcher_rroute_cmd(dispatcher_store_conn(d->store), on_added, NULL,
	                          (int)(sizeof(argv) / sizeof(argv[0])), argv, NULL) < 0)
		rn_log_warn(run_id, "recent_failed", "Redis is down: the run is not in the recent-runs index");
}

/* ---- GET /v1/runs ---- */

/*
 * One listing: the index's newest ids, then one HGETALL per id.  The op
 * lives until every reply came back (pending == 0), even when the caller
 * left before; runs[i] keeps the index order.
 */
typedef struct list_op {
	dispatcher_t *d;
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	json_t *runs; /* array, one slot per id (null until read) */
	size_t pending;
	int failed;
} list_op_t;

typedef struct list_slot {
	list_op_t *op;
	size_t i;
	char run_id[PROTO_RUN_ID_MAX + 1];
} list_slot_t;

static void list_close(struct evhttp_connection *evcon, void *arg)
{
	list_op_t *op = arg;

	(void)evcon;
	dispatcher_request_abandon(op->req);
	op->req = NULL;
}

static struct evhttp_request *list_take_req(list_op_t *op)
{
	struct evhttp_request *req = op->req;

	if (req)
		dispatcher_conn_on_close(op->d, op->evcon, NULL, NULL);
	op->req = NULL;
	return req;
}

static void list_finish(list_op_t *op)
{
	dispatcher_t *d = op->d;
	struct evhttp_request *req = list_take_req(op);
	json_t *out;
	size_t i;
	json_t *v;

	if (req && op->failed) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUNS_LIST, 503, "redis_unavailable",
		                       "redis: cannot read the recent runs");
	} else if (req) {
		out = json_array();
		json_array_foreach(op->runs, i, v)
		{
			if (json_is_object(v))
				json_array_append(out, v);
		}
		dispatcher_reply_json(d, req, DISPATCHER_ROUTE_RUNS_LIST, 200, json_pack("{s:o}", "runs", out));
	}
	json_decref(op->runs);
	free(op);
}

static void on_forgot(redisReply *r, void *arg)
{
	(void)r;
	(void)arg;
}

static void on_state(int rc, json_t *state, void *arg)
{
	list_slot_t *slot = arg;
	list_op_t *op = slot->op;

	if (rc == DISPATCHER_STORE_OK) {
		json_object_set_new(state, "run_id", json_string(slot->run_id));
		json_array_set_new(op->runs, slot->i, state);
	} else if (rc == DISPATCHER_STORE_ABSENT) {
		/* Its keys expired (or Kafka refused it): drop it from the index. */
		char key[PROTO_KEY_PREFIX_MAX + 32];
		const char *argv[] = { "ZREM", key, slot->run_id };

		recent_key(op->d, key, sizeof(key));
		dispatcher_rroute_cmd(dispatcher_store_conn(op->d->store), on_forgot, NULL, 3, argv, NULL);
	} else {
		op->failed = 1;
	}
	free(slot);
	if (--op->pending == 0)
		list_finish(op);
}

static void on_ids(redisReply *r, void *arg)
{
	list_op_t *op = arg;

	if (!r || r->type != REDIS_REPLY_ARRAY) {
		if (r && r->type == REDIS_REPLY_ERROR)
			rn_log_error(NULL, "redis_error", "recent runs: %.200s", r->str);
		op->failed = 1;
		list_finish(op);
		return;
	}
	/* pending counts the reads queued, plus one for this loop, so that a
	 * reply arriving early cannot finish the op under it. */
	op->pending = 1;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];
		list_slot_t *slot;

		json_array_append_new(op->runs, json_null());
		if (e->type != REDIS_REPLY_STRING || !proto_run_id_valid(e->str))
			continue;
		slot = calloc(1, sizeof(*slot));
		if (!slot) {
			op->failed = 1;
			break;
		}
		slot->op = op;
		slot->i = i;
		snprintf(slot->run_id, sizeof(slot->run_id), "%s", e->str);
		op->pending++;
		if (dispatcher_store_get(op->d->store, slot->run_id, on_state, slot) < 0) {
			op->pending--;
			op->failed = 1;
			free(slot);
			break;
		}
	}
	if (--op->pending == 0)
		list_finish(op);
}

void dispatcher_runs_list(dispatcher_t *d, struct evhttp_request *req)
{
	long limit = RECENT_LIST_DEFAULT;
	char key[PROTO_KEY_PREFIX_MAX + 32], stop[32];
	const char *argv[] = { "ZREVRANGE", key, "0", stop };
	struct evkeyvalq q;
	const char *l;
	list_op_t *op;

	if (limit > d->cfg->recent_runs)
		limit = d->cfg->recent_runs;
	if (dispatcher_query(d, req, DISPATCHER_ROUTE_RUNS_LIST, &q) < 0)
		return;
	l = evhttp_find_header(&q, "limit");
	if (l) {
		char *end = NULL;

		limit = strtol(l, &end, 10);
		if (end == l || *end != '\0' || limit < 1 || limit > d->cfg->recent_runs) {
			evhttp_clear_headers(&q);
			dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUNS_LIST, 400, "bad_request",
			                       "limit: must be an integer 1..%ld", d->cfg->recent_runs);
			return;
		}
	}
	evhttp_clear_headers(&q);
	op = calloc(1, sizeof(*op));
	if (!op || !(op->runs = json_array())) {
		free(op);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUNS_LIST, 500, "internal", "out of memory");
		return;
	}
	op->d = d;
	op->req = req;
	op->evcon = evhttp_request_get_connection(req);
	recent_key(d, key, sizeof(key));
	snprintf(stop, sizeof(stop), "%ld", limit - 1);
	if (dispatcher_rroute_cmd(dispatcher_store_conn(d->store), on_ids, op, 4, argv, NULL) < 0) {
		json_decref(op->runs);
		free(op);
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_RUNS_LIST, 503, "redis_unavailable",
		                       "redis: not connected");
		return;
	}
	dispatcher_conn_on_close(d, op->evcon, list_close, op);
}
