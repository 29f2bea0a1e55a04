/*
 * dispatcher/store.c - run state reads and writes on one async Redis
 * connection (see store.h).  The scripts keep each step atomic so that two
 * dispatchers racing on one run_id cannot both create it.
 */
#include "dispatcher/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/runqueue.h"
#include "proto/control.h"
#include "proto/job.h"
#include "proto/keys.h"

/* A fire-and-forget cancel that could not be sent while Redis was down. */
typedef struct deferred {
	struct deferred *next;
	char run_id[PROTO_RUN_ID_MAX + 1];
	char reason[PROTO_CTL_REASON_MAX + 1];
	int must_exist;
	int64_t ttl_sec;
} deferred_t;

struct dispatcher_store {
	dispatcher_rroute_t *rc;
	char prefix[PROTO_KEY_PREFIX_MAX + 1];
	struct event *ev_ping;
	int ping_ok;
	int ping_pending;
	deferred_t *deferred, **deferred_tail;
	size_t ndeferred;
};

static void flush_deferred(dispatcher_store_t *s);

/* KEYS: state out.  ARGV: enqueued_at ttl_sec.  1 created, 0 taken. */
static const char lua_create[] =
        "if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end\n"
        "redis.call('HSET', KEYS[1], 'status', 'queued', 'enqueued_at', ARGV[1])\n"
        "redis.call('EXPIRE', KEYS[1], ARGV[2])\n"
        "return 1\n";

/* KEYS: state. */
static const char lua_uncreate[] =
        "if redis.call('HGET', KEYS[1], 'status') == 'queued' then redis.call('DEL', KEYS[1]) end\n"
        "return 1\n";

/* KEYS: state out.  {exists, last_id, last_line}. */
static const char lua_probe[] =
        "local n = redis.call('EXISTS', KEYS[1]) + redis.call('EXISTS', KEYS[2])\n"
        "local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)\n"
        "if top[1] then\n"
        "  local f = top[1][2]\n"
        "  for i = 1, #f, 2 do\n"
        "    if f[i] == 'line' then return {n, top[1][1], f[i + 1]} end\n"
        "  end\n"
        "  return {n, top[1][1], ''}\n"
        "end\n"
        "return {n, '', ''}\n";

/* KEYS: state out ctl.  ARGV: msg must_exist ttl_sec.  {0|1, status}. */
static const char lua_cancel[] =
        "if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then\n"
        "  return {0, ''}\n"
        "end\n"
        "redis.call('XADD', KEYS[3], '*', 'msg', ARGV[1])\n"
        "local ttl = redis.call('PTTL', KEYS[1])\n"
        "if ttl < 0 then ttl = redis.call('PTTL', KEYS[2]) end\n"
        "if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) else redis.call('EXPIRE', KEYS[3], ARGV[3]) end\n"
        "return {1, redis.call('HGET', KEYS[1], 'status') or ''}\n";

static void on_ping(redisReply *r, void *arg)
{
	dispatcher_store_t *s = arg;

	s->ping_pending = 0;
	s->ping_ok = r && r->type == REDIS_REPLY_STATUS;
}

static void ping_tick(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_store_t *s = arg;
	const char *argv[] = { "PING" };

	(void)fd;
	(void)what;
	if (!dispatcher_rroute_up(s->rc)) {
		s->ping_ok = 0;
		return;
	}
	/* A PING still unanswered a second later means Redis is stuck. */
	if (s->ping_pending) {
		s->ping_ok = 0;
		return;
	}
	if (dispatcher_rroute_cmd(s->rc, on_ping, s, 1, argv, NULL) == 0)
		s->ping_pending = 1;
}

static void on_state(int up, void *arg)
{
	dispatcher_store_t *s = arg;

	s->ping_pending = 0;
	s->ping_ok = 0;
	if (up) {
		ping_tick(-1, 0, s);
		flush_deferred(s);
	}
}

dispatcher_store_t *dispatcher_store_new(struct event_base *base, const rn_redis_url_t *url, int cluster,
                                         const char *prefix, char *errstr, size_t errstr_size)
{
	dispatcher_store_t *s = calloc(1, sizeof(*s));
	struct timeval sec = { 1, 0 };

	if (!s) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
	s->deferred_tail = &s->deferred;
	s->ev_ping = event_new(base, -1, EV_PERSIST, ping_tick, s);
	s->rc = dispatcher_rroute_new(base, url, cluster, "runnel-dispatcher-cmd", on_state, s);
	if (!s->ev_ping || !s->rc || event_add(s->ev_ping, &sec) < 0) {
		snprintf(errstr, errstr_size, "cannot set up the Redis connection");
		dispatcher_store_free(s);
		return NULL;
	}
	return s;
}

void dispatcher_store_free(dispatcher_store_t *s)
{
	if (!s)
		return;
	dispatcher_rroute_free(s->rc);
	if (s->ev_ping)
		event_free(s->ev_ping);
	while (s->deferred) {
		deferred_t *n = s->deferred->next;

		rn_log_error(s->deferred->run_id, "cancel_failed",
		             "Redis stayed down until shutdown: the %s cancel was not written", s->deferred->reason);
		free(s->deferred);
		s->deferred = n;
	}
	free(s);
}

int dispatcher_store_ready(const dispatcher_store_t *s)
{
	return dispatcher_rroute_up(s->rc) && s->ping_ok;
}

/* A callback and its argument, carried through a reply. */
typedef struct call {
	void (*fn)(void);
	void *arg;
} call_t;

static call_t *call_new(void (*fn)(void), void *arg)
{
	call_t *c = malloc(sizeof(*c));

	if (c) {
		c->fn = fn;
		c->arg = arg;
	}
	return c;
}

static int eval(dispatcher_store_t *s, const char *script, const char *run_id,
                const proto_key_kind_t *kinds, int nkeys, const char **args, int nargs,
                dispatcher_rconn_reply_cb cb, call_t *call)
{
	char keys[3][PROTO_KEY_MAX];
	char nk[8];
	const char *argv[16];
	int argc = 0;

	if (!call)
		return -1;
	snprintf(nk, sizeof(nk), "%d", nkeys);
	argv[argc++] = "EVAL";
	argv[argc++] = script;
	argv[argc++] = nk;
	for (int i = 0; i < nkeys; i++) {
		if (proto_key(keys[i], sizeof(keys[i]), s->prefix, run_id, kinds[i]) < 0) {
			free(call);
			return -1;
		}
		argv[argc++] = keys[i];
	}
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	if (dispatcher_rroute_cmd(s->rc, cb, call, argc, argv, NULL) < 0) {
		free(call);
		return -1;
	}
	return 0;
}

static int reply_failed(const redisReply *r, const char *what)
{
	if (!r)
		return 1;
	if (r->type == REDIS_REPLY_ERROR) {
		rn_log_error(NULL, "redis_error", "%s: %.200s", what, r->str);
		return 1;
	}
	return 0;
}

static void on_create(redisReply *r, void *arg)
{
	call_t *c = arg;
	dispatcher_store_cb cb = (dispatcher_store_cb)c->fn;

	if (reply_failed(r, "create") || r->type != REDIS_REPLY_INTEGER)
		cb(DISPATCHER_STORE_ERROR, c->arg);
	else
		cb(r->integer == 1 ? DISPATCHER_STORE_OK : DISPATCHER_STORE_ABSENT, c->arg);
	free(c);
}

int dispatcher_store_create(dispatcher_store_t *s, const char *run_id, int64_t enqueued_at,
                            int64_t ttl_sec, dispatcher_store_cb cb, void *arg)
{
	static const proto_key_kind_t kinds[] = { PROTO_KEY_STATE, PROTO_KEY_OUT };
	char at[32], ttl[32];
	const char *args[] = { at, ttl };

	snprintf(at, sizeof(at), "%" PRId64, enqueued_at);
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_sec);
	return eval(s, lua_create, run_id, kinds, 2, args, 2, on_create,
	            call_new((void (*)(void))cb, arg));
}

static void on_idem(redisReply *r, void *arg)
{
	call_t *c = arg;
	dispatcher_store_idem_cb cb = (dispatcher_store_idem_cb)c->fn;

	if (reply_failed(r, "idempotency claim") || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len > PROTO_RUN_ID_MAX)
		cb(DISPATCHER_STORE_ERROR, NULL, 0, c->arg);
	else
		cb(DISPATCHER_STORE_OK, r->element[0]->str, r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer == 1,
		   c->arg);
	free(c);
}

int dispatcher_store_idem_claim(dispatcher_store_t *s, const char *tenant, const char *key, const char *run_id,
                                int64_t ttl_sec, dispatcher_store_idem_cb cb, void *arg)
{
	char rkey[PROTO_IDEM_REDIS_KEY_MAX], ttl[32];
	call_t *c;

	if (proto_idem_redis_key(rkey, sizeof(rkey), s->prefix, tenant, key) < 0)
		return -1;
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_sec);
	const char *argv[] = { "EVAL", rn_idem_claim_lua, "1", rkey, run_id, ttl };
	c = call_new((void (*)(void))cb, arg);
	if (!c)
		return -1;
	if (dispatcher_rroute_cmd(s->rc, on_idem, c, 6, argv, NULL) < 0) {
		free(c);
		return -1;
	}
	return 0;
}

void dispatcher_store_idem_release(dispatcher_store_t *s, const char *tenant, const char *key, const char *run_id)
{
	char rkey[PROTO_IDEM_REDIS_KEY_MAX];

	if (proto_idem_redis_key(rkey, sizeof(rkey), s->prefix, tenant, key) < 0)
		return;
	const char *argv[] = { "EVAL", rn_idem_release_lua, "1", rkey, run_id };
	if (dispatcher_rroute_cmd(s->rc, NULL, NULL, 5, argv, NULL) < 0)
		rn_log_warn(run_id, "idempotency_release_failed",
		            "Redis is down: the idempotency key stays taken until it expires");
}

static void on_uncreate(redisReply *r, void *arg)
{
	reply_failed(r, "uncreate");
	free(arg);
}

void dispatcher_store_uncreate(dispatcher_store_t *s, const char *run_id)
{
	static const proto_key_kind_t kinds[] = { PROTO_KEY_STATE };

	if (eval(s, lua_uncreate, run_id, kinds, 1, NULL, 0, on_uncreate, call_new(NULL, NULL)) < 0)
		rn_log_warn(run_id, "uncreate_failed", "Redis is down: the queued state hash stays until it expires");
}

/* Numbers in the hash are given back as JSON numbers. */
static int numeric_field(const char *k)
{
	return strcmp(k, "lease_until") == 0 || strcmp(k, "enqueued_at") == 0 ||
	        strcmp(k, "started_at") == 0 || strcmp(k, "ended_at") == 0 ||
	        strcmp(k, "out_seq_base") == 0 || strcmp(k, "priority") == 0 || strcmp(k, "webhook_attempts") == 0;
}

static void on_get(redisReply *r, void *arg)
{
	call_t *c = arg;
	dispatcher_store_get_cb cb = (dispatcher_store_get_cb)c->fn;
	json_t *o;

	if (reply_failed(r, "get") || r->type != REDIS_REPLY_ARRAY) {
		cb(DISPATCHER_STORE_ERROR, NULL, c->arg);
		free(c);
		return;
	}
	if (r->elements == 0) {
		cb(DISPATCHER_STORE_ABSENT, NULL, c->arg);
		free(c);
		return;
	}
	o = json_object();
	for (size_t i = 0; o && i + 1 < r->elements; i += 2) {
		const redisReply *k = r->element[i], *v = r->element[i + 1];
		json_t *jv = NULL;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (numeric_field(k->str)) {
			char *end = NULL;
			long long n = strtoll(v->str, &end, 10);

			if (end != v->str && *end == '\0')
				jv = json_integer(n);
		}
		/* The model usage (SPEC §4) is an object, written by the worker. */
		if (strcmp(k->str, "usage") == 0) {
			jv = json_loadb(v->str, v->len, 0, NULL);
			if (!json_is_object(jv)) {
				json_decref(jv);
				jv = NULL;
			}
		}
		if (!jv)
			jv = json_stringn_nocheck(v->str, v->len);
		json_object_set_new(o, k->str, jv);
	}
	cb(o ? DISPATCHER_STORE_OK : DISPATCHER_STORE_ERROR, o, c->arg);
	free(c);
}

int dispatcher_store_get(dispatcher_store_t *s, const char *run_id,
                         dispatcher_store_get_cb cb, void *arg)
{
	char key[PROTO_KEY_MAX];
	const char *argv[2] = { "HGETALL", key };
	call_t *c;

	if (proto_key(key, sizeof(key), s->prefix, run_id, PROTO_KEY_STATE) < 0)
		return -1;
	c = call_new((void (*)(void))cb, arg);
	if (!c)
		return -1;
	if (dispatcher_rroute_cmd(s->rc, on_get, c, 2, argv, NULL) < 0) {
		free(c);
		return -1;
	}
	return 0;
}

static void on_probe(redisReply *r, void *arg)
{
	call_t *c = arg;
	dispatcher_store_probe_cb cb = (dispatcher_store_probe_cb)c->fn;

	if (reply_failed(r, "probe") || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[2]->type != REDIS_REPLY_STRING) {
		cb(DISPATCHER_STORE_ERROR, "", "", 0, c->arg);
	} else {
		cb(r->element[0]->integer > 0 ? DISPATCHER_STORE_OK : DISPATCHER_STORE_ABSENT,
		   r->element[1]->str, r->element[2]->str, r->element[2]->len, c->arg);
	}
	free(c);
}

int dispatcher_store_probe(dispatcher_store_t *s, const char *run_id,
                           dispatcher_store_probe_cb cb, void *arg)
{
	static const proto_key_kind_t kinds[] = { PROTO_KEY_STATE, PROTO_KEY_OUT };

	return eval(s, lua_probe, run_id, kinds, 2, NULL, 0, on_probe,
	            call_new((void (*)(void))cb, arg));
}

static void on_cancel(redisReply *r, void *arg)
{
	call_t *c = arg;
	dispatcher_store_cancel_cb cb = (dispatcher_store_cancel_cb)c->fn;

	if (reply_failed(r, "cancel") || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING) {
		if (cb)
			cb(DISPATCHER_STORE_ERROR, "", c->arg);
	} else if (cb) {
		cb(r->element[0]->integer == 1 ? DISPATCHER_STORE_OK : DISPATCHER_STORE_ABSENT,
		   r->element[1]->str, c->arg);
	}
	free(c);
}

static int cancel_now(dispatcher_store_t *s, const char *run_id, const char *reason,
                      int must_exist, int64_t ttl_sec,
                      dispatcher_store_cancel_cb cb, void *arg)
{
	static const proto_key_kind_t kinds[] = { PROTO_KEY_STATE, PROTO_KEY_OUT, PROTO_KEY_CTL };
	proto_ctl_t ctl;
	char msg[PROTO_CTL_MAX_BYTES], ttl[32];
	const char *args[] = { msg, must_exist ? "1" : "0", ttl };

	memset(&ctl, 0, sizeof(ctl));
	ctl.type = PROTO_CTL_CANCEL;
	snprintf(ctl.reason, sizeof(ctl.reason), "%s", reason);
	if (proto_ctl_serialize(&ctl, msg, sizeof(msg)) < 0)
		return -1;
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_sec);
	return eval(s, lua_cancel, run_id, kinds, 3, args, 3, on_cancel,
	            call_new((void (*)(void))cb, arg));
}

/*
 * Sends the kept cancels, oldest first.  Only cancels that were never sent
 * are kept (a command lost with its connection may have run), so none is
 * written twice.
 */
static void flush_deferred(dispatcher_store_t *s)
{
	while (s->deferred) {
		deferred_t *q = s->deferred;

		if (cancel_now(s, q->run_id, q->reason, q->must_exist, q->ttl_sec, NULL, NULL) < 0)
			return; /* down again: keep the rest for the next time */
		rn_log_info(q->run_id, "cancel_written", "the %s cancel kept while Redis was down is written",
		            q->reason);
		s->deferred = q->next;
		if (!s->deferred)
			s->deferred_tail = &s->deferred;
		s->ndeferred--;
		free(q);
	}
}

int dispatcher_store_cancel(dispatcher_store_t *s, const char *run_id, const char *reason,
                            int must_exist, int64_t ttl_sec,
                            dispatcher_store_cancel_cb cb, void *arg)
{
	deferred_t *q;

	/* Kept ones go first (a fire-and-forget cancel waits its turn). */
	if (s->deferred)
		flush_deferred(s);
	if ((!s->deferred || cb) && cancel_now(s, run_id, reason, must_exist, ttl_sec, cb, arg) == 0)
		return 0;
	if (cb || s->ndeferred >= DISPATCHER_STORE_DEFERRED_MAX ||
	    !proto_run_id_valid(run_id) || strlen(reason) > PROTO_CTL_REASON_MAX)
		return -1;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -1;
	snprintf(q->run_id, sizeof(q->run_id), "%s", run_id);
	snprintf(q->reason, sizeof(q->reason), "%s", reason);
	q->must_exist = must_exist;
	q->ttl_sec = ttl_sec;
	*s->deferred_tail = q;
	s->deferred_tail = &q->next;
	s->ndeferred++;
	rn_log_warn(run_id, "cancel_deferred", "Redis is down: the %s cancel is written once it is back", reason);
	return 0;
}

static void on_reply(redisReply *r, void *arg)
{
	call_t *c = arg;
	dispatcher_store_reply_cb cb = (dispatcher_store_reply_cb)c->fn;

	if (reply_failed(r, "reply") || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
		cb(DISPATCHER_STORE_ERROR, "", "", c->arg);
	else if (strcmp(r->element[0]->str, "absent") == 0)
		cb(DISPATCHER_STORE_ABSENT, "", "", c->arg);
	else
		cb(DISPATCHER_STORE_OK, r->element[0]->str, r->element[1]->str, c->arg);
	free(c);
}

int dispatcher_store_reply(dispatcher_store_t *s, const char *run_id, const char *ask_id,
                           const char *msg, const char *option, int64_t ttl_sec,
                           dispatcher_store_reply_cb cb, void *arg)
{
	static const proto_key_kind_t kinds[] = { PROTO_KEY_STATE, PROTO_KEY_OUT, PROTO_KEY_CTL };
	char ttl[32];
	const char *args[] = { ask_id, msg, ttl, option ? option : "" };

	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_sec);
	return eval(s, proto_ctl_reply_lua, run_id, kinds, 3, args, 4, on_reply,
	            call_new((void (*)(void))cb, arg));
}

static void on_unblock(redisReply *r, void *arg)
{
	call_t *c = arg;
	void (*cb)(int, void *) = (void (*)(int, void *))c->fn;

	/* NULL: the connection went (or the store is being freed, and the
	 * caller with it): nothing to report. */
	if (cb && r && r->type == REDIS_REPLY_INTEGER)
		cb(r->integer == 1, c->arg);
	free(c);
}

int dispatcher_store_unblock(dispatcher_store_t *s, long long client_id,
                             void (*cb)(int unblocked, void *arg), void *arg)
{
	char id[32];
	const char *argv[] = { "CLIENT", "UNBLOCK", id };
	call_t *c = call_new((void (*)(void))cb, arg);

	if (!c)
		return -1;
	snprintf(id, sizeof(id), "%lld", client_id);
	if (dispatcher_rroute_cmd(s->rc, on_unblock, c, 3, argv, NULL) < 0) {
		free(c);
		return -1;
	}
	return 0;
}

dispatcher_rroute_t *dispatcher_store_conn(dispatcher_store_t *s)
{
	return s->rc;
}
