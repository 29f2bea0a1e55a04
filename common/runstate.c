/*
 * common/runstate.c - the Lua scripts of the run state machine and the
 * synchronous hiredis calls that run them (see runstate.h).
 */
#include "runstate.h"

#include "common/redis.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Script-wide helper: the server's clock in ms. */
#define LUA_NOW \
	"local t = redis.call('TIME')\n" \
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

#define LUA_TERMINAL \
	"local function terminal(s)\n" \
	"  return s == 'succeeded' or s == 'failed' or s == 'cancelled' or s == 'lost'\n" \
	"end\n"

/*
 * Ends a run with one terminal line.  Shared by finish, the sweep and a
 * claim that finds a dead owner.  KEYS: state out ctl [leases].
 *
 * KEYS[4], the fleet-wide leases index, is passed on a standalone server
 * only: on a cluster it lives in another slot than the run's keys, so the
 * C side keeps it up to date around the script (see index_write below).
 * The scripts decide only from the state hash's lease_until either way.
 */
/*
 * with_trace: a run with a traceparent gets "trace_id" on its terminal line
 * (SPEC §2), spliced in before the closing brace so that the rest of the
 * line stays byte for byte what its writer made (cjson would re-encode
 * numbers).  The traceparent was validated at intake: 55 characters of
 * lowercase hex and dashes, safe to paste.
 */
#define LUA_END \
	"local function with_trace(line)\n" \
	"  local tp = redis.call('HGET', KEYS[1], 'traceparent')\n" \
	"  if not tp or string.len(tp) ~= 55 or string.len(line) < 3 or string.sub(line, -1) ~= '}' then return line end\n" \
	"  local ok, o = pcall(cjson.decode, line)\n" \
	"  if not ok or type(o) ~= 'table' or o['trace_id'] ~= nil then return line end\n" \
	"  return string.sub(line, 1, -2) .. ',\"trace_id\":\"' .. string.sub(tp, 4, 35) .. '\"}'\n" \
	"end\n" \
	"local function finish(line, status, code, retention, run_id, now)\n" \
	"  redis.call('XADD', KEYS[2], '*', 'line', with_trace(line))\n" \
	"  redis.call('HSET', KEYS[1], 'status', status, 'ended_at', now, 'code', code)\n" \
	"  if redis.call('HEXISTS', KEYS[1], 'webhook') == 1 then redis.call('HSET', KEYS[1], 'webhook_state', 'pending') end\n" \
	"  if KEYS[4] then redis.call('ZREM', KEYS[4], run_id) end\n" \
	"  redis.call('EXPIRE', KEYS[1], retention)\n" \
	"  redis.call('EXPIRE', KEYS[2], retention)\n" \
	"  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('EXPIRE', KEYS[3], retention) end\n" \
	"end\n" \
	"local function lostline(now)\n" \
	"  return '{\"type\":\"error\",\"code\":\"worker_lost\",\"message\":\"" RN_RUNSTATE_LOST_MESSAGE "\",\"ts\":' .. now .. '}'\n" \
	"end\n"

/*
 * KEYS: state out ctl [leases].
 * ARGV: run_id worker lease_ms enqueued_at ttl_sec retention_sec
 * Returns {kind, seq_base, now, detail}.
 */
static const char lua_claim[] =
        LUA_NOW LUA_TERMINAL LUA_END
        "local st = redis.call('HGET', KEYS[1], 'status')\n"
        "if st and terminal(st) then return {'done', 0, now, st} end\n"
        "local lu = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0') or 0\n"
        "if st == 'claimed' or st == 'running' then\n"
        "  if lu > now then\n"
        "    return {'held', 0, now, redis.call('HGET', KEYS[1], 'worker') or ''}\n"
        "  end\n"
        "  if st == 'running' then\n"
        "    finish(lostline(now), 'lost', 'worker_lost', tonumber(ARGV[6]), ARGV[1], now)\n"
        "    return {'lost', 0, now, ''}\n"
        "  end\n"
        "end\n"
        "local T = now\n"
        "local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)\n"
        "if top[1] then\n"
        "  local ms = tonumber(string.match(top[1][1], '^(%d+)-'))\n"
        "  if ms and ms >= T then T = ms + 1 end\n"
        "end\n"
        "local lease = now + tonumber(ARGV[3])\n"
        "redis.call('HSET', KEYS[1], 'status', 'claimed', 'worker', ARGV[2], 'lease_until', lease, 'out_seq_base', T)\n"
        "if tonumber(ARGV[4]) > 0 then redis.call('HSETNX', KEYS[1], 'enqueued_at', ARGV[4]) end\n"
        "redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))\n"
        "if KEYS[4] then redis.call('ZADD', KEYS[4], lease, ARGV[1]) end\n"
        "local ctl = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1000)\n"
        "for _, e in ipairs(ctl) do\n"
        "  local f = e[2]\n"
        "  for i = 1, #f, 2 do\n"
        "    if f[i] == 'msg' then\n"
        "      local ok, m = pcall(cjson.decode, f[i + 1])\n"
        "      if ok and type(m) == 'table' and m['type'] == 'cancel' then\n"
        "        local r = m['reason']\n"
        "        if type(r) ~= 'string' then r = '' end\n"
        "        return {'cancel', T, now, r}\n"
        "      end\n"
        "    end\n"
        "  end\n"
        "end\n"
        "return {'ok', T, now, ''}\n";

/* KEYS: state.  ARGV: worker.  1 running for us, 0 otherwise. */
static const char lua_start[] =
        LUA_NOW
        "local st = redis.call('HGET', KEYS[1], 'status')\n"
        "local w = redis.call('HGET', KEYS[1], 'worker')\n"
        "if w ~= ARGV[1] then return 0 end\n"
        "if st == 'running' then return 1 end\n"
        "if st ~= 'claimed' then return 0 end\n"
        "redis.call('HSET', KEYS[1], 'status', 'running', 'started_at', now)\n"
        "return 1\n";

/* KEYS: state [leases].  ARGV: run_id worker lease_ms.  The new
 * lease_until (ms) when renewed, 0 when not ours. */
static const char lua_heartbeat[] =
        LUA_NOW
        "local st = redis.call('HGET', KEYS[1], 'status')\n"
        "if st ~= 'claimed' and st ~= 'running' then return 0 end\n"
        "if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[2] then return 0 end\n"
        "local lease = now + tonumber(ARGV[3])\n"
        "redis.call('HSET', KEYS[1], 'lease_until', lease)\n"
        "if KEYS[2] then redis.call('ZADD', KEYS[2], lease, ARGV[1]) end\n"
        "return lease\n";

/*
 * KEYS: state out ctl leases.
 * ARGV: line status code retention_sec run_id only_if_expired
 * 1 written, 0 already terminal (or, for the sweep, not expired).
 */
static const char lua_finish[] =
        LUA_NOW LUA_TERMINAL LUA_END
        "local st = redis.call('HGET', KEYS[1], 'status')\n"
        "if ARGV[6] == '1' then\n"
        "  if not st or terminal(st) then\n"
        "    if KEYS[4] then redis.call('ZREM', KEYS[4], ARGV[5]) end\n"
        "    return 0\n"
        "  end\n"
        "  local lu = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0') or 0\n"
        "  if lu > now then return lu end\n"
        "  finish(lostline(now), 'lost', 'worker_lost', tonumber(ARGV[4]), ARGV[5], now)\n"
        "  return 1\n"
        "end\n"
        "if st and terminal(st) then return 0 end\n"
        "if ARGV[7] and ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'usage', ARGV[7]) end\n"
        "finish(ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], now)\n"
        "return 1\n";

static void outbox_bump(rn_rcluster_t *c, const char *prefix, const char *run_id);

typedef struct keys {
	char state[256];
	char out[256];
	char ctl[256];
	char leases[160];
} keys_t;

static int keys_make(keys_t *k, const char *prefix, const char *run_id,
                     char *errstr, size_t errstr_size)
{
	size_t pl = strlen(prefix), rl = strlen(run_id);
	if (pl == 0 || pl > 64 || rl == 0 || rl > 64) {
		snprintf(errstr, errstr_size, "invalid key prefix or run id");
		return -1;
	}
	snprintf(k->state, sizeof(k->state), "%s:{%s}:state", prefix, run_id);
	snprintf(k->out, sizeof(k->out), "%s:{%s}:out", prefix, run_id);
	snprintf(k->ctl, sizeof(k->ctl), "%s:{%s}:ctl", prefix, run_id);
	snprintf(k->leases, sizeof(k->leases), "%s:leases", prefix);
	return 0;
}

/*
 * The scripts' last key, the leases index, goes with them on a standalone
 * server (one node: the index moves atomically with the state, as it
 * always has) and is left out on a cluster, where it lives in another
 * slot.  Drops argv[2 + nkeys] (and its length) when clustered and sets
 * the key count; the new argc.
 */
static int fit_leases_key(const rn_rcluster_t *c, const char **argv, size_t *lens, int argc, int nkeys)
{
	static const char *const counts[] = { "0", "1", "2", "3", "4" };

	if (!rn_rcluster_is_cluster(c))
		return argc;
	for (int i = 2 + nkeys; i + 1 < argc; i++) {
		argv[i] = argv[i + 1];
		if (lens)
			lens[i] = lens[i + 1];
	}
	argv[2] = counts[nkeys - 1];
	if (lens)
		lens[2] = 1;
	return argc - 1;
}

/*
 * On a cluster the leases index is kept by the caller, next to the
 * scripts, on whichever node serves it: "ZADD leases score run" before a
 * claim (NX, score 0: an entry the sweep looks at at once and puts right)
 * and after a claim or heartbeat (the lease the script set), "ZREM" once
 * a run is terminal.  Best effort: the sweep's per-run script reads only
 * the state hash, drops entries of ended runs and repairs early scores,
 * so a lost index write only makes the sweep look sooner or once more.
 * The one write that matters is the NX before the claim: it is there
 * before any lease is, so a worker that dies after claiming is found.
 */
static void index_write(rn_rcluster_t *c, const keys_t *k, const char *op, const char *flag, int64_t score,
                        const char *run_id)
{
	char a_score[24];
	const char *argv[5];
	int argc = 0;
	redisReply *r;

	snprintf(a_score, sizeof(a_score), "%" PRId64, score);
	argv[argc++] = op;
	argv[argc++] = k->leases;
	if (flag)
		argv[argc++] = flag;
	if (strcmp(op, "ZADD") == 0)
		argv[argc++] = a_score;
	argv[argc++] = run_id;
	r = rn_rcluster_argv(c, 0, argc, argv, NULL);
	if (r)
		freeReplyObject(r);
}

/* The index follows the renewed leases, in one ZADD (plain: it also puts
 * back an entry a failover of the index's node lost). */
static void index_renew(rn_rcluster_t *c, const char *prefix, const char *const *run_ids, size_t n,
                        const int64_t *leases)
{
	size_t m = 0;
	char key[160];
	const char **argv = calloc(2 + 2 * n, sizeof(*argv));
	char(*scores)[24] = calloc(n ? n : 1, sizeof(*scores));

	snprintf(key, sizeof(key), "%s:leases", prefix);
	if (argv && scores) {
		argv[m++] = "ZADD";
		argv[m++] = key;
		for (size_t i = 0; i < n; i++) {
			if (leases[i] <= 0)
				continue;
			snprintf(scores[i], sizeof(scores[i]), "%" PRId64, leases[i]);
			argv[m++] = scores[i];
			argv[m++] = run_ids[i];
		}
		if (m > 2) {
			redisReply *r = rn_rcluster_argv(c, 0, (int)m, argv, NULL);
			if (r)
				freeReplyObject(r);
		}
	}
	free(argv);
	free(scores);
}

int rn_runstate_claim(rn_rcluster_t *c, const char *prefix, const char *run_id,
                      const char *worker_id, int64_t lease_ms, int64_t enqueued_at,
                      int64_t ttl_sec, rn_claim_t *out,
                      char *errstr, size_t errstr_size)
{
	keys_t k;
	char a_lease[24], a_enq[24], a_ttl[24], a_ret[24];

	memset(out, 0, sizeof(*out));
	if (keys_make(&k, prefix, run_id, errstr, errstr_size) < 0)
		return -1;
	snprintf(a_lease, sizeof(a_lease), "%" PRId64, lease_ms);
	snprintf(a_enq, sizeof(a_enq), "%" PRId64, enqueued_at > 0 ? enqueued_at : 0);
	snprintf(a_ttl, sizeof(a_ttl), "%" PRId64, ttl_sec > 0 ? ttl_sec : 86400);
	/* A run found dead at claim keeps its keys for a day at least. */
	snprintf(a_ret, sizeof(a_ret), "%" PRId64, ttl_sec > 0 ? ttl_sec : 86400);

	const char *argv[] = { "EVAL", lua_claim, "4", k.state, k.out, k.ctl, k.leases,
		               run_id, worker_id, a_lease, a_enq, a_ttl, a_ret };
	int argc = fit_leases_key(c, argv, NULL, 13, 4);
	int clustered = rn_rcluster_is_cluster(c);
	if (clustered)
		index_write(c, &k, "ZADD", "NX", 0, run_id);
	redisReply *r = rn_rcluster_argv(c, 0, argc, argv, NULL);
	if (rn_rcluster_reply_check(c, r, "claim", errstr, errstr_size) < 0) {
		if (r)
			freeReplyObject(r);
		return -1;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
	    r->element[0]->type != REDIS_REPLY_STRING) {
		snprintf(errstr, errstr_size, "redis claim: unexpected reply");
		freeReplyObject(r);
		return -1;
	}
	const char *kind = r->element[0]->str;
	if (!strcmp(kind, "lost"))
		outbox_bump(c, prefix, run_id);
	if (!strcmp(kind, "ok"))
		out->status = RN_CLAIM_OK;
	else if (!strcmp(kind, "done"))
		out->status = RN_CLAIM_DONE;
	else if (!strcmp(kind, "held"))
		out->status = RN_CLAIM_HELD;
	else if (!strcmp(kind, "lost"))
		out->status = RN_CLAIM_LOST;
	else
		out->status = RN_CLAIM_CANCEL;
	out->seq_base = rn_redis_reply_ll(r->element[1]);
	out->now_ms = rn_redis_reply_ll(r->element[2]);
	if (clustered && (out->status == RN_CLAIM_OK || out->status == RN_CLAIM_CANCEL))
		index_write(c, &k, "ZADD", NULL, out->now_ms + lease_ms, run_id);
	else if (clustered && (out->status == RN_CLAIM_LOST || out->status == RN_CLAIM_DONE))
		index_write(c, &k, "ZREM", NULL, 0, run_id);
	if (r->element[3]->type == REDIS_REPLY_STRING)
		snprintf(out->detail, sizeof(out->detail), "%s", r->element[3]->str);
	freeReplyObject(r);
	return 0;
}

int rn_runstate_start(rn_rcluster_t *c, const char *prefix, const char *run_id,
                      const char *worker_id, char *errstr, size_t errstr_size)
{
	keys_t k;
	if (keys_make(&k, prefix, run_id, errstr, errstr_size) < 0)
		return -1;
	const char *argv[] = { "EVAL", lua_start, "1", k.state, worker_id };
	long long v = rn_rcluster_command_ll(c, 0, 5, argv, NULL, "start", errstr, errstr_size);
	return v < 0 ? -1 : v == 1;
}

int rn_runstate_heartbeat(rn_rcluster_t *c, const char *prefix,
                          const char *const *run_ids, size_t n,
                          const char *worker_id, int64_t lease_ms, int *owned,
                          char *errstr, size_t errstr_size)
{
	char a_lease[24];
	snprintf(a_lease, sizeof(a_lease), "%" PRId64, lease_ms);
	/* On a cluster: the new leases, for the index (0: not renewed). */
	int64_t *leases = rn_rcluster_is_cluster(c) && n ? calloc(n, sizeof(*leases)) : NULL;

	for (size_t i = 0; i < n; i++) {
		keys_t k;
		if (keys_make(&k, prefix, run_ids[i], errstr, errstr_size) < 0) {
			free(leases);
			return -1;
		}
		const char *argv[] = { "EVAL", lua_heartbeat, "2", k.state, k.leases,
			               run_ids[i], worker_id, a_lease };
		int argc = fit_leases_key(c, argv, NULL, 8, 2);
		if (rn_rcluster_append_argv(c, 0, argc, argv, NULL) < 0) {
			snprintf(errstr, errstr_size, "redis heartbeat: %s", rn_rcluster_errstr(c));
			free(leases);
			return -1;
		}
	}
	int ret = 0;
	for (size_t i = 0; i < n; i++) {
		redisReply *r = NULL;
		if (rn_rcluster_get_reply(c, &r) < 0) {
			free(leases);
			return rn_rcluster_reply_check(c, NULL, "heartbeat", errstr, errstr_size);
		}
		if (r->type == REDIS_REPLY_ERROR) {
			if (ret == 0)
				rn_rcluster_reply_check(c, r, "heartbeat", errstr, errstr_size);
			ret = -1;
			owned[i] = 1; /* unknown: do not stop a run on a script error */
		} else {
			int64_t lease = rn_redis_reply_ll(r);
			owned[i] = lease > 0;
			if (leases)
				leases[i] = lease;
		}
		freeReplyObject(r);
	}
	if (leases)
		index_renew(c, prefix, run_ids, n, leases);
	free(leases);
	return ret;
}

int rn_webhook_outbox_key(const char *prefix, char *buf, size_t size)
{
	size_t pl = strlen(prefix);
	if (pl == 0 || pl > 64)
		return -1;
	return snprintf(buf, size, "%s:{wh}:outbox", prefix) < (int)size ? 0 : -1;
}

int rn_webhook_arm(rn_rcluster_t *c, const char *prefix, const char *run_id, int64_t due_ms,
                   char *errstr, size_t errstr_size)
{
	char key[96], a_due[24];
	if (rn_webhook_outbox_key(prefix, key, sizeof(key)) < 0) {
		snprintf(errstr, errstr_size, "invalid key prefix");
		return -1;
	}
	snprintf(a_due, sizeof(a_due), "%" PRId64, due_ms);
	const char *argv[] = { "ZADD", key, "NX", a_due, run_id };
	return rn_rcluster_command_ll(c, 0, 5, argv, NULL, "webhook arm", errstr, errstr_size) < 0 ? -1 : 0;
}

/*
 * A terminal line was just written: make the run's webhook (if it has one:
 * XX) due now.  Best effort: the entry exists since intake and comes due
 * by itself within a poll interval, so a failure here only delays it.
 */
static void outbox_bump(rn_rcluster_t *c, const char *prefix, const char *run_id)
{
	char key[96];
	if (rn_webhook_outbox_key(prefix, key, sizeof(key)) < 0)
		return;
	redisReply *r = rn_rcluster_command(c, 0, "ZADD %s XX 0 %s", key, run_id);
	if (r)
		freeReplyObject(r);
}

/* The finish script: 1 written, 0 nothing to do, -1 error, and for the
 * sweep a live lease's lease_until (> 1). */
static long long finish_eval(rn_rcluster_t *c, const keys_t *k, const char *run_id,
                             const char *line, size_t len, const char *status,
                             const char *code, int64_t retention_sec, int only_expired,
                             const char *usage, char *errstr, size_t errstr_size)
{
	char a_ret[24];
	snprintf(a_ret, sizeof(a_ret), "%" PRId64, retention_sec > 0 ? retention_sec : 86400);
	const char *argv[] = { "EVAL", lua_finish, "4", k->state, k->out, k->ctl, k->leases,
		               line, status, code, a_ret, run_id, only_expired ? "1" : "0", usage ? usage : "" };
	size_t lens[14];
	for (size_t i = 0; i < 14; i++)
		lens[i] = strlen(argv[i]);
	lens[7] = len;
	int argc = fit_leases_key(c, argv, lens, 14, 4);
	long long v = rn_rcluster_command_ll(c, 0, argc, argv, lens, "finish", errstr, errstr_size);
	/*
	 * Acknowledged writes: the terminal line counts once the replicas have
	 * it.  No answer means a failover may lose it, so the call fails and
	 * the caller runs the script again: on the promoted replica it writes
	 * the line if it was lost, else answers "already ended" (0).
	 */
	if (v == 1 && rn_rcluster_wait(c) < 0) {
		snprintf(errstr, errstr_size, "redis finish: written, but no WAIT answer (%s)", rn_rcluster_errstr(c));
		return -2;
	}
	/* On a cluster the index entry of an ended (or gone) run goes now. */
	if (rn_rcluster_is_cluster(c) && (v == 0 || v == 1))
		index_write(c, k, "ZREM", NULL, 0, run_id);
	return v;
}

int rn_runstate_finish(rn_rcluster_t *c, const char *prefix, const char *run_id,
                       const char *line, size_t len, const char *status,
                       const char *code, int64_t retention_sec,
                       char *errstr, size_t errstr_size)
{
	return rn_runstate_finish_usage(c, prefix, run_id, line, len, status, code, retention_sec, NULL, errstr,
	                                errstr_size);
}

int rn_runstate_finish_usage(rn_rcluster_t *c, const char *prefix, const char *run_id, const char *line, size_t len,
                             const char *status, const char *code, int64_t retention_sec, const char *usage,
                             char *errstr, size_t errstr_size)
{
	keys_t k;
	if (keys_make(&k, prefix, run_id, errstr, errstr_size) < 0)
		return -1;
	long long rc = finish_eval(c, &k, run_id, line, len, status, code ? code : "", retention_sec, 0, usage, errstr,
	                           errstr_size);
	if (rc == 1)
		outbox_bump(c, prefix, run_id);
	return rc < 0 ? (int)rc : rc == 1;
}

int rn_runstate_sweep(rn_rcluster_t *c, const char *prefix, int64_t retention_sec,
                      size_t max, void (*on_lost)(const char *run_id, void *arg),
                      void *arg, char *errstr, size_t errstr_size)
{
	char leases[160], a_max[24], a_now[24];
	if (max == 0)
		max = 100;
	snprintf(leases, sizeof(leases), "%s:leases", prefix);

	redisReply *t = rn_rcluster_command(c, 0, "TIME");
	if (rn_rcluster_reply_check(c, t, "sweep", errstr, errstr_size) < 0) {
		if (t)
			freeReplyObject(t);
		return -1;
	}
	if (t->type != REDIS_REPLY_ARRAY || t->elements != 2) {
		snprintf(errstr, errstr_size, "redis sweep: unexpected TIME reply");
		freeReplyObject(t);
		return -1;
	}
	long long now = rn_redis_reply_ll(t->element[0]) * 1000 + rn_redis_reply_ll(t->element[1]) / 1000;
	freeReplyObject(t);

	snprintf(a_now, sizeof(a_now), "%lld", now);
	snprintf(a_max, sizeof(a_max), "%zu", max);
	const char *argv[] = { "ZRANGEBYSCORE", leases, "-inf", a_now, "LIMIT", "0", a_max };
	redisReply *r = rn_rcluster_argv(c, 0, 7, argv, NULL);
	if (rn_rcluster_reply_check(c, r, "sweep", errstr, errstr_size) < 0) {
		if (r)
			freeReplyObject(r);
		return -1;
	}
	int ended = 0;
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
		const redisReply *m = r->element[i];
		keys_t k;
		char kerr[64];
		if (m->type != REDIS_REPLY_STRING)
			continue;
		if (keys_make(&k, prefix, m->str, kerr, sizeof(kerr)) < 0) {
			/* Not a run id this code would write: drop it from the set. */
			redisReply *z = rn_rcluster_command(c, 0, "ZREM %s %b", leases, m->str, (size_t)m->len);
			if (z)
				freeReplyObject(z);
			continue;
		}
		long long rc = finish_eval(c, &k, m->str, "", 0, "lost", "worker_lost",
		                           retention_sec, 1, NULL, errstr, errstr_size);
		if (rc < 0) {
			freeReplyObject(r);
			return -1;
		}
		/* Alive after all: on a cluster the index was behind the lease
		 * (a heartbeat's index write lost), so it is put right. */
		if (rc > 1 && rn_rcluster_is_cluster(c))
			index_write(c, &k, "ZADD", NULL, rc, m->str);
		if (rc == 1) {
			ended++;
			outbox_bump(c, prefix, m->str);
			if (on_lost)
				on_lost(m->str, arg);
		}
	}
	freeReplyObject(r);
	return ended;
}

int rn_runstate_get(rn_rcluster_t *c, const char *prefix, const char *run_id,
                    const char *field, char *buf, size_t size,
                    char *errstr, size_t errstr_size)
{
	keys_t k;
	if (keys_make(&k, prefix, run_id, errstr, errstr_size) < 0)
		return -1;
	redisReply *r = rn_rcluster_command(c, 0, "HGET %s %s", k.state, field);
	if (rn_rcluster_reply_check(c, r, "hget", errstr, errstr_size) < 0) {
		if (r)
			freeReplyObject(r);
		return -1;
	}
	int ret = 0;
	if (r->type == REDIS_REPLY_STRING) {
		snprintf(buf, size, "%s", r->str);
		ret = 1;
	} else if (size) {
		buf[0] = '\0';
	}
	freeReplyObject(r);
	return ret;
}
