/*
 * common/runqueue.c - the Lua scripts of the run-time queue and the
 * synchronous hiredis calls that run them (see runqueue.h).
 */
#include "runqueue.h"

#include "common/redis.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


#define LUA_NOW \
	"local t = redis.call('TIME')\n" \
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

/*
 * The ring is served from its tail (RPOPLPUSH moves the served tenant to
 * the head), so a tenant that joins at the head waits exactly one round:
 * classic round robin.  LPOS needs Redis 6.0.6+.
 */
/*
 * A tenant's queue is ten lists, one per priority; priority 5 (the
 * default) keeps the plain name "t:<tenant>" that queues had before
 * priorities, so a queue upgraded in place keeps its runs.  A take pops
 * the highest non-empty list: higher first, FIFO within one priority.
 */
#define LUA_TQ \
	"local function tkey(q, t, p)\n" \
	"  if p == 5 then return q .. 't:' .. t end\n" \
	"  return q .. 't:' .. t .. ':' .. p\n" \
	"end\n" \
	"local function tlen(q, t)\n" \
	"  local n = 0\n" \
	"  for p = 0, 9 do n = n + redis.call('LLEN', tkey(q, t, p)) end\n" \
	"  return n\n" \
	"end\n" \
	"local function tpop(q, t)\n" \
	"  for p = 9, 0, -1 do\n" \
	"    local id = redis.call('LPOP', tkey(q, t, p))\n" \
	"    if id then return id end\n" \
	"  end\n" \
	"  return nil\n" \
	"end\n"

#define LUA_RING \
	"local function ring_add(ring, t)\n" \
	"  if not redis.call('LPOS', ring, t) then redis.call('LPUSH', ring, t) end\n" \
	"end\n" \
	"local function wake(k)\n" \
	"  redis.call('LPUSH', k, '1')\n" \
	"  redis.call('LTRIM', k, 0, 63)\n" \
	"end\n"

/* KEYS: state.  ARGV: tenant enqueued_at ttl [field value]... */
static const char lua_mark[] =
        "local st = redis.call('HGET', KEYS[1], 'status')\n"
        "if st and st ~= 'queued' then\n"
        "  redis.call('HSETNX', KEYS[1], 'tenant', ARGV[1])\n"
        "  return 0\n"
        "end\n"
        "redis.call('HSET', KEYS[1], 'status', 'queued', 'tenant', ARGV[1])\n"
        "if tonumber(ARGV[2]) > 0 then redis.call('HSETNX', KEYS[1], 'enqueued_at', ARGV[2]) end\n"
        "for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end\n"
        "redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))\n"
        "return 1\n";

const char rn_idem_claim_lua[] =
        "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then return {ARGV[1], 1} end\n"
        "return {redis.call('GET', KEYS[1]) or ARGV[1], 0}\n";

const char rn_idem_release_lua[] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end\n"
        "return 1\n";

/*
 * KEYS: jobs tenant ring age depth wake tlist prio.
 * ARGV: run_id tenant entry priority.
 */
static const char lua_push[] =
        LUA_NOW LUA_RING
        "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end\n"
        "redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])\n"
        "if ARGV[4] ~= '5' then redis.call('HSET', KEYS[8], ARGV[1], ARGV[4]) end\n"
        "redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
        "redis.call('RPUSH', KEYS[7], ARGV[1])\n"
        "ring_add(KEYS[3], ARGV[2])\n"
        "redis.call('ZADD', KEYS[4], 'NX', now, ARGV[1])\n"
        "redis.call('RPUSH', KEYS[5], '1')\n"
        "wake(KEYS[6])\n"
        "return 1\n";

/*
 * KEYS: jobs tenant ring age depth inflight prio.
 * ARGV: qprefix ("<prefix>:{q}:") inflight_ms lease_ms default_cap
 *       [tenant cap]...
 * Returns {} or {run_id, tenant, entry, queued_ms, now}.
 */
static const char lua_take[] =
        LUA_NOW LUA_RING LUA_TQ
        "local q = ARGV[1]\n"
        "local caps, toks, tokdef = {}, {}, 0\n"
        /* Pairs: tenant cap, "~tok:<tenant>" budget, "~tokdef" budget
         * (tenant names never hold '~'). */
        "for i = 5, #ARGV, 2 do\n"
        "  local k, v = ARGV[i], tonumber(ARGV[i + 1])\n"
        "  if k == '~tokdef' then tokdef = v\n"
        "  elseif string.sub(k, 1, 5) == '~tok:' then toks[string.sub(k, 6)] = v\n"
        "  else caps[k] = v end\n"
        "end\n"
        "local hour = math.floor(now / 3600000)\n"
        "local def = tonumber(ARGV[4])\n"
        /* Runs a dead worker took but never claimed go back in front. */
        "local late = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 100)\n"
        "for _, id in ipairs(late) do\n"
        "  redis.call('ZREM', KEYS[6], id)\n"
        "  local t = redis.call('HGET', KEYS[2], id)\n"
        "  if t and redis.call('HEXISTS', KEYS[1], id) == 1 then\n"
        "    redis.call('ZREM', q .. 'run:' .. t, id)\n"
        "    redis.call('LPUSH', tkey(q, t, tonumber(redis.call('HGET', KEYS[7], id) or '5')), id)\n"
        "    ring_add(KEYS[3], t)\n"
        "    redis.call('RPUSH', KEYS[5], '1')\n"
        "  end\n"
        "end\n"
        "local n = redis.call('LLEN', KEYS[3])\n"
        "for i = 1, n do\n"
        "  local t = redis.call('RPOPLPUSH', KEYS[3], KEYS[3])\n"
        "  if not t then break end\n"
        "  local rk = q .. 'run:' .. t\n"
        "  local cap = caps[t] or def\n"
        "  local room = true\n"
        "  if cap and cap > 0 then\n"
        "    redis.call('ZREMRANGEBYSCORE', rk, '-inf', now)\n"
        "    if redis.call('ZCARD', rk) >= cap then room = false end\n"
        "  end\n"
        /* A tenant over its hourly token budget waits for the next hour. */
        "  local tb = toks[t] or tokdef\n"
        "  if room and tb and tb > 0 then\n"
        "    local used = tonumber(redis.call('GET', q .. 'tok:' .. t .. ':' .. hour) or '0') or 0\n"
        "    if used >= tb then room = false end\n"
        "  end\n"
        "  if room then\n"
        "    while true do\n"
        "      local id = tpop(q, t)\n"
        "      if not id then break end\n"
        "      redis.call('LPOP', KEYS[5])\n"
        "      local e = redis.call('HGET', KEYS[1], id)\n"
        "      if e then\n"
        "        if tlen(q, t) == 0 then redis.call('LREM', KEYS[3], 0, t) end\n"
        "        redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), id)\n"
        "        redis.call('ZADD', rk, now + tonumber(ARGV[3]), id)\n"
        "        local qa = redis.call('ZSCORE', KEYS[4], id) or '0'\n"
        "        return {id, t, e, qa, now}\n"
        "      end\n"
        "      redis.call('ZREM', KEYS[4], id)\n"
        "      redis.call('HDEL', KEYS[7], id)\n"
        "    end\n"
        "  end\n"
        "  if tlen(q, t) == 0 then redis.call('LREM', KEYS[3], 0, t) end\n"
        "end\n"
        "return {}\n";

/* KEYS: jobs tenant age inflight wake runset prio.  ARGV: run_id running. */
static const char lua_ack[] =
        LUA_RING
        "redis.call('HDEL', KEYS[1], ARGV[1])\n"
        "redis.call('HDEL', KEYS[7], ARGV[1])\n"
        "redis.call('HDEL', KEYS[2], ARGV[1])\n"
        "redis.call('ZREM', KEYS[3], ARGV[1])\n"
        "redis.call('ZREM', KEYS[4], ARGV[1])\n"
        "if ARGV[2] ~= '1' then\n"
        "  redis.call('ZREM', KEYS[6], ARGV[1])\n"
        "  wake(KEYS[5])\n"
        "end\n"
        "return 1\n";

/* KEYS: runset wake.  ARGV: run_id. */
static const char lua_release[] =
        LUA_RING
        "redis.call('ZREM', KEYS[1], ARGV[1])\n"
        "wake(KEYS[2])\n"
        "return 1\n";

/*
 * KEYS: runset.  ARGV: run_id lease_ms.  Adds as well as renews: a run a
 * late take skipped ("held") was removed from the set, and this puts it
 * back within one heartbeat, so a cap is never undercounted for long.
 */
static const char lua_touch[] =
        LUA_NOW
        "return redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])\n";

/*
 * KEYS: ring age inflight depth.  ARGV: qprefix.
 * Returns {depth, inflight, oldest_age, now, ntenants, p0..p9, t1,
 * queued1, running1, oldest1, ...}: at most the first 1000 tenants of the
 * ring are looked at, so a call stays cheap however many tenants queue;
 * p0..p9 (queued runs per priority) count those tenants.
 */
static const char lua_stats[] =
        LUA_NOW LUA_TQ
        "local q = ARGV[1]\n"
        "local out = {redis.call('LLEN', KEYS[4]), redis.call('ZCARD', KEYS[3]), 0, now, redis.call('LLEN', KEYS[1])}\n"
        "local o = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"
        "if o[2] then out[3] = now - tonumber(o[2]) end\n"
        "local byp = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}\n"
        "local rows = {}\n"
        "local ts = redis.call('LRANGE', KEYS[1], 0, 999)\n"
        "for _, t in ipairs(ts) do\n"
        "  local rk = q .. 'run:' .. t\n"
        "  local age, n = 0, 0\n"
        "  for p = 0, 9 do\n"
        "    local tk = tkey(q, t, p)\n"
        "    local l = redis.call('LLEN', tk)\n"
        "    n = n + l\n"
        "    byp[p + 1] = byp[p + 1] + l\n"
        "    local head = redis.call('LINDEX', tk, 0)\n"
        "    if head then\n"
        "      local s = redis.call('ZSCORE', KEYS[2], head)\n"
        "      if s and now - tonumber(s) > age then age = now - tonumber(s) end\n"
        "    end\n"
        "  end\n"
        "  table.insert(rows, t)\n"
        "  table.insert(rows, n)\n"
        "  table.insert(rows, redis.call('ZCOUNT', rk, now, '+inf'))\n"
        "  table.insert(rows, age)\n"
        "end\n"
        "for p = 1, 10 do table.insert(out, byp[p]) end\n"
        "for _, v in ipairs(rows) do table.insert(out, v) end\n"
        "return out\n";

typedef struct qkeys {
	char q[96]; /* "<prefix>:{q}:" */
	char jobs[112], tenant[112], ring[112], age[112], depth[112], inflight[112], wake[112], prio[112];
} qkeys_t;

static int qkeys_make(qkeys_t *k, const char *prefix, char *errstr, size_t errstr_size)
{
	size_t pl = strlen(prefix);
	if (pl == 0 || pl > 64) {
		snprintf(errstr, errstr_size, "invalid key prefix");
		return -1;
	}
	snprintf(k->q, sizeof(k->q), "%s:{q}:", prefix);
	snprintf(k->jobs, sizeof(k->jobs), "%sjobs", k->q);
	snprintf(k->tenant, sizeof(k->tenant), "%stenant", k->q);
	snprintf(k->ring, sizeof(k->ring), "%sring", k->q);
	snprintf(k->age, sizeof(k->age), "%sage", k->q);
	snprintf(k->depth, sizeof(k->depth), "%sdepth", k->q);
	snprintf(k->inflight, sizeof(k->inflight), "%sinflight", k->q);
	snprintf(k->wake, sizeof(k->wake), "%swake", k->q);
	snprintf(k->prio, sizeof(k->prio), "%sprio", k->q);
	return 0;
}

static int id_ok(const char *run_id, const char *tenant, char *errstr, size_t errstr_size)
{
	size_t rl = strlen(run_id), tl = tenant ? strlen(tenant) : 1;
	if (rl == 0 || rl > 64 || tl == 0 || tl > RN_TENANT_MAX) {
		snprintf(errstr, errstr_size, "invalid run id or tenant");
		return -1;
	}
	return 0;
}

/* The queue's keys for one run, and its per-tenant key "<q><kind><tenant>"
 * (kind "t:" the tenant's list, "run:" its running set). */
static int run_keys(qkeys_t *k, const char *prefix, const char *run_id, const char *tenant,
                    const char *kind, char *tkey, size_t tkey_size, char *errstr, size_t errstr_size)
{
	if (qkeys_make(k, prefix, errstr, errstr_size) < 0 || id_ok(run_id, tenant, errstr, errstr_size) < 0)
		return -1;
	snprintf(tkey, tkey_size, "%s%s%s", k->q, kind, tenant);
	return 0;
}

/* rn_redis_reply_check, freeing a failed reply. */
static int check(rn_rcluster_t *c, redisReply *r, const char *what, char *errstr, size_t errstr_size)
{
	if (rn_rcluster_reply_check(c, r, what, errstr, errstr_size) == 0)
		return 0;
	if (r)
		freeReplyObject(r);
	return -1;
}

static int eval_int(rn_rcluster_t *c, int argc, const char **argv, const size_t *lens,
                    const char *what, char *errstr, size_t errstr_size)
{
	return (int)rn_rcluster_command_ll(c, 0, argc, argv, lens, what, errstr, errstr_size);
}

int rn_runqueue_depth_key(const char *prefix, char *buf, size_t size)
{
	qkeys_t k;
	char e[8];
	if (qkeys_make(&k, prefix, e, sizeof(e)) < 0)
		return -1;
	return snprintf(buf, size, "%s", k.depth) < (int)size ? 0 : -1;
}

int rn_runqueue_mark(rn_rcluster_t *c, const char *prefix, const char *run_id,
                     const char *tenant, int64_t enqueued_at, int64_t ttl_sec,
                     const rn_queue_fields_t *f, char *errstr, size_t errstr_size)
{
	char state[160], a_enq[24], a_ttl[24], a_prio[8];
	const char *argv[15] = { "EVAL", lua_mark, "1", state, tenant, a_enq, a_ttl };
	int argc = 7;
	if (id_ok(run_id, tenant, errstr, errstr_size) < 0 || strlen(prefix) > 64)
		return -1;
	snprintf(state, sizeof(state), "%s:{%s}:state", prefix, run_id);
	snprintf(a_enq, sizeof(a_enq), "%" PRId64, enqueued_at > 0 ? enqueued_at : 0);
	snprintf(a_ttl, sizeof(a_ttl), "%" PRId64, ttl_sec > 0 ? ttl_sec : 86400);
	if (f) {
		snprintf(a_prio, sizeof(a_prio), "%d", f->priority);
		argv[argc++] = "priority";
		argv[argc++] = a_prio;
		if (f->traceparent && f->traceparent[0]) {
			argv[argc++] = "traceparent";
			argv[argc++] = f->traceparent;
		}
		if (f->webhook && f->webhook[0]) {
			argv[argc++] = "webhook";
			argv[argc++] = f->webhook;
		}
		if (f->idem_key && f->idem_key[0]) {
			argv[argc++] = "idempotency_key";
			argv[argc++] = f->idem_key;
		}
	}
	return eval_int(c, argc, argv, NULL, "queue mark", errstr, errstr_size) < 0 ? -1 : 0;
}

int rn_idem_claim(rn_rcluster_t *c, const char *idem_rkey, const char *run_id, int64_t ttl_sec,
                  char owner[65], char *errstr, size_t errstr_size)
{
	char a_ttl[24];
	snprintf(a_ttl, sizeof(a_ttl), "%" PRId64, ttl_sec > 0 ? ttl_sec : 86400);
	const char *argv[] = { "EVAL", rn_idem_claim_lua, "1", idem_rkey, run_id, a_ttl };
	redisReply *r = rn_rcluster_argv(c, 0, 6, argv, NULL);
	if (check(c, r, "idempotency claim", errstr, errstr_size) < 0)
		return -1;
	int ret = -1;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[0]->len < 65) {
		memcpy(owner, r->element[0]->str, r->element[0]->len);
		owner[r->element[0]->len] = '\0';
		ret = strcmp(owner, run_id) == 0 ? 1 : 0;
	} else {
		snprintf(errstr, errstr_size, "redis idempotency claim: unexpected reply");
	}
	freeReplyObject(r);
	return ret;
}

int rn_runqueue_push(rn_rcluster_t *c, const char *prefix, const char *run_id,
                     const char *tenant, int priority, const void *entry, size_t len,
                     char *errstr, size_t errstr_size)
{
	qkeys_t k;
	char tlist[192], a_prio[8];
	if (priority < 0 || priority > 9) {
		snprintf(errstr, errstr_size, "invalid priority");
		return -1;
	}
	if (run_keys(&k, prefix, run_id, tenant, "t:", tlist, sizeof(tlist), errstr, errstr_size) < 0)
		return -1;
	/* Priority 5 keeps the list's pre-priority name (see LUA_TQ). */
	if (priority != 5)
		snprintf(tlist + strlen(tlist), sizeof(tlist) - strlen(tlist), ":%d", priority);
	snprintf(a_prio, sizeof(a_prio), "%d", priority);
	const char *argv[] = { "EVAL", lua_push, "8", k.jobs, k.tenant, k.ring, k.age, k.depth,
		               k.wake, tlist, k.prio, run_id, tenant, entry, a_prio };
	size_t lens[15];
	for (int i = 0; i < 15; i++)
		lens[i] = strlen(argv[i]);
	lens[13] = len;
	return eval_int(c, 15, argv, lens, "queue push", errstr, errstr_size);
}

void rn_queue_item_clear(rn_queue_item_t *it)
{
	if (it->entry) {
		explicit_bzero(it->entry, it->len);
		free(it->entry);
	}
	memset(it, 0, sizeof(*it));
}

int rn_runqueue_take(rn_rcluster_t *c, const char *prefix, const rn_tenant_caps_t *caps,
                     int64_t inflight_ms, int64_t lease_ms, rn_queue_item_t *it,
                     char *errstr, size_t errstr_size)
{
	qkeys_t k;
	memset(it, 0, sizeof(*it));
	if (qkeys_make(&k, prefix, errstr, errstr_size) < 0)
		return -1;
	size_t ncaps = caps ? caps->n : 0, ntok = caps ? caps->ntok : 0;
	/* EVAL, script, numkeys, 7 keys, 4 args, cap pairs, token pairs, the
	 * default token budget */
	size_t argc = 16 + 2 * ncaps + 2 * ntok;
	const char **argv = calloc(argc, sizeof(*argv));
	char(*nums)[24] = calloc(4 + ncaps + 2 * ntok, sizeof(*nums));
	if (!argv || !nums) {
		free(argv);
		free(nums);
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	snprintf(nums[0], 24, "%" PRId64, inflight_ms);
	snprintf(nums[1], 24, "%" PRId64, lease_ms);
	snprintf(nums[2], 24, "%ld", caps ? caps->def : 0L);
	size_t a = 0;
	argv[a++] = "EVAL";
	argv[a++] = lua_take;
	argv[a++] = "7";
	argv[a++] = k.jobs;
	argv[a++] = k.tenant;
	argv[a++] = k.ring;
	argv[a++] = k.age;
	argv[a++] = k.depth;
	argv[a++] = k.inflight;
	argv[a++] = k.prio;
	argv[a++] = k.q;
	argv[a++] = nums[0];
	argv[a++] = nums[1];
	argv[a++] = nums[2];
	for (size_t i = 0; i < ncaps; i++) {
		snprintf(nums[3 + i], 24, "%ld", caps->caps[i]);
		argv[a++] = caps->names[i];
		argv[a++] = nums[3 + i];
	}
	/* "~tok:<tenant>" names fit in a number's slot's neighbour: tenants
	 * are at most 64 characters, so they get their own buffers. */
	char(*tnames)[80] = ntok ? calloc(ntok, sizeof(*tnames)) : NULL;
	if (ntok && !tnames) {
		free(argv);
		free(nums);
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < ntok; i++) {
		snprintf(tnames[i], sizeof(tnames[i]), "~tok:%s", caps->tok_names[i]);
		snprintf(nums[3 + ncaps + i], 24, "%" PRId64, caps->toks[i]);
		argv[a++] = tnames[i];
		argv[a++] = nums[3 + ncaps + i];
	}
	if (caps && caps->tok_def > 0) {
		snprintf(nums[3 + ncaps + ntok], 24, "%lld", caps->tok_def);
		argv[a++] = "~tokdef";
		argv[a++] = nums[3 + ncaps + ntok];
	}
	redisReply *r = rn_rcluster_argv(c, 0, (int)a, argv, NULL);
	free(argv);
	free(nums);
	free(tnames);
	if (check(c, r, "queue take", errstr, errstr_size) < 0)
		return -1;
	int ret = 0;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 5 &&
	    r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[2]->type == REDIS_REPLY_STRING) {
		snprintf(it->run_id, sizeof(it->run_id), "%s", r->element[0]->str);
		snprintf(it->tenant, sizeof(it->tenant), "%s", r->element[1]->str);
		it->entry = malloc(r->element[2]->len + 1);
		if (!it->entry) {
			snprintf(errstr, errstr_size, "out of memory");
			ret = -1;
		} else {
			memcpy(it->entry, r->element[2]->str, r->element[2]->len);
			it->entry[r->element[2]->len] = '\0';
			it->len = r->element[2]->len;
			it->queued_ms = rn_redis_reply_ll(r->element[3]);
			it->now_ms = rn_redis_reply_ll(r->element[4]);
			ret = 1;
		}
		explicit_bzero(r->element[2]->str, r->element[2]->len);
	} else if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(errstr, errstr_size, "redis queue take: unexpected reply");
		ret = -1;
	}
	freeReplyObject(r);
	return ret;
}

int rn_runqueue_ack(rn_rcluster_t *c, const char *prefix, const char *run_id,
                    const char *tenant, int running, char *errstr, size_t errstr_size)
{
	qkeys_t k;
	char runset[192];
	if (run_keys(&k, prefix, run_id, tenant, "run:", runset, sizeof(runset), errstr, errstr_size) < 0)
		return -1;
	const char *argv[] = { "EVAL", lua_ack, "7", k.jobs, k.tenant, k.age, k.inflight, k.wake,
		               runset, k.prio, run_id, running ? "1" : "0" };
	return eval_int(c, 12, argv, NULL, "queue ack", errstr, errstr_size) < 0 ? -1 : 0;
}

int rn_runqueue_release(rn_rcluster_t *c, const char *prefix, const char *run_id,
                        const char *tenant, char *errstr, size_t errstr_size)
{
	qkeys_t k;
	char runset[192];
	if (run_keys(&k, prefix, run_id, tenant, "run:", runset, sizeof(runset), errstr, errstr_size) < 0)
		return -1;
	const char *argv[] = { "EVAL", lua_release, "2", runset, k.wake, run_id };
	return eval_int(c, 6, argv, NULL, "queue release", errstr, errstr_size) < 0 ? -1 : 0;
}

int rn_runqueue_touch(rn_rcluster_t *c, const char *prefix, const char *const *run_ids,
                      const char *const *tenants, size_t n, int64_t lease_ms,
                      char *errstr, size_t errstr_size)
{
	qkeys_t k;
	char a_lease[24];
	if (qkeys_make(&k, prefix, errstr, errstr_size) < 0)
		return -1;
	snprintf(a_lease, sizeof(a_lease), "%" PRId64, lease_ms);
	size_t sent = 0;
	for (size_t i = 0; i < n; i++) {
		char runset[192];
		if (id_ok(run_ids[i], tenants[i], errstr, errstr_size) < 0)
			continue;
		snprintf(runset, sizeof(runset), "%srun:%s", k.q, tenants[i]);
		const char *argv[] = { "EVAL", lua_touch, "1", runset, run_ids[i], a_lease };
		if (rn_rcluster_append_argv(c, 0, 6, argv, NULL) < 0) {
			snprintf(errstr, errstr_size, "redis queue touch: %s", rn_rcluster_errstr(c));
			return -1;
		}
		sent++;
	}
	int ret = 0;
	for (size_t i = 0; i < sent; i++) {
		redisReply *r = NULL;
		if (rn_rcluster_get_reply(c, &r) < 0)
			return rn_rcluster_reply_check(c, NULL, "queue touch", errstr, errstr_size);
		if (rn_rcluster_reply_check(c, r, "queue touch", errstr, errstr_size) < 0)
			ret = -1;
		freeReplyObject(r);
	}
	return ret;
}

int rn_runqueue_wait(rn_rcluster_t *c, const char *prefix, int timeout_ms,
                     char *errstr, size_t errstr_size)
{
	qkeys_t k;
	char secs[32];
	if (qkeys_make(&k, prefix, errstr, errstr_size) < 0)
		return -1;
	snprintf(secs, sizeof(secs), "%d.%03d", timeout_ms / 1000, timeout_ms % 1000);
	const char *argv[] = { "BLPOP", k.wake, secs };
	redisReply *r = rn_rcluster_argv(c, 0, 3, argv, NULL);
	if (check(c, r, "queue wait", errstr, errstr_size) < 0)
		return -1;
	int ret = r->type == REDIS_REPLY_ARRAY ? 1 : 0;
	freeReplyObject(r);
	return ret;
}

static int cmp_depth(const void *a, const void *b)
{
	const rn_queue_tenant_t *x = a, *y = b;
	if (x->queued != y->queued)
		return x->queued > y->queued ? -1 : 1;
	return strcmp(x->name, y->name);
}

int rn_runqueue_stats(rn_rcluster_t *c, const char *prefix, size_t max_tenants,
                      rn_queue_stats_t *st, char *errstr, size_t errstr_size)
{
	qkeys_t k;
	memset(st, 0, sizeof(*st));
	if (qkeys_make(&k, prefix, errstr, errstr_size) < 0)
		return -1;
	const char *argv[] = { "EVAL", lua_stats, "4", k.ring, k.age, k.inflight, k.depth, k.q };
	redisReply *r = rn_rcluster_argv(c, 0, 8, argv, NULL);
	if (check(c, r, "queue stats", errstr, errstr_size) < 0)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 15 || (r->elements - 15) % 4) {
		freeReplyObject(r);
		snprintf(errstr, errstr_size, "redis queue stats: unexpected reply");
		return -1;
	}
	st->depth = rn_redis_reply_ll(r->element[0]);
	st->inflight = rn_redis_reply_ll(r->element[1]);
	st->oldest_ms = rn_redis_reply_ll(r->element[2]);
	int64_t ring = rn_redis_reply_ll(r->element[4]);
	for (int p = 0; p < 10; p++)
		st->by_priority[p] = rn_redis_reply_ll(r->element[5 + p]);
	size_t n = (r->elements - 15) / 4;
	rn_queue_tenant_t *all = n ? calloc(n, sizeof(*all)) : NULL;
	if (n && !all) {
		freeReplyObject(r);
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		const redisReply *nm = r->element[15 + 4 * i];
		if (nm->type != REDIS_REPLY_STRING)
			continue;
		snprintf(all[m].name, sizeof(all[m].name), "%s", nm->str);
		all[m].queued = rn_redis_reply_ll(r->element[16 + 4 * i]);
		all[m].running = rn_redis_reply_ll(r->element[17 + 4 * i]);
		all[m].oldest_ms = rn_redis_reply_ll(r->element[18 + 4 * i]);
		m++;
	}
	freeReplyObject(r);
	if (m)
		qsort(all, m, sizeof(*all), cmp_depth);
	st->nscanned = m;
	st->ntenants = ring > (int64_t)m ? (size_t)ring : m;
	st->nlisted = m < max_tenants ? m : max_tenants;
	st->tenants = all;
	return 0;
}

void rn_queue_stats_clear(rn_queue_stats_t *st)
{
	free(st->tenants);
	memset(st, 0, sizeof(*st));
}
