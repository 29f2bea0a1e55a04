/*
 * common/rcluster.c - one blocking Redis connection for a standalone server
 * or a Redis Cluster: slot map, routing, redirects and retries (see
 * rcluster.h).
 */
#include "common/rcluster.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/redis.h"

#define RC_NONE RN_RCLUSTER_UNSERVED
/* A cluster larger than this is not one runnel was built for; the cap
 * keeps a confused server from growing the node table without bound. */
#define RC_MAX_NODES 1024
/* Redirects one call follows before it calls the map unsettled. */
#define RC_MAX_REDIRECTS 16

/* One queued command of a cluster pipeline. */
typedef struct rc_pending {
	char *cmd; /* formatted (RESP), redisFreeCommand */
	size_t len;
	int slot;
	int flags;
	int state; /* 0 queued, 1 answered, 2 run again alone, 3 failed */
	redisReply *reply;
} rc_pending_t;

typedef struct rc_node {
	char host[256];
	int port;
	redisContext *c;
	unsigned opened; /* connections opened so far */
} rc_node_t;

struct rn_rcluster {
	rn_redis_url_t url;
	rn_rcluster_opts_t opts;
	int cluster;
	rc_node_t *nodes;
	size_t nn, cap;
	uint16_t slot_node[RN_RCLUSTER_SLOTS];
	uint16_t fresh[RN_RCLUSTER_SLOTS]; /* the map being read */
	int stale;                         /* re-read the map before routing */
	int last_node;                     /* where the last command went */
	size_t refresh_from;               /* the node asked first next refresh */
	char err[256];
	char node_name[280];
	rc_pending_t *pq; /* the cluster pipeline */
	size_t pq_n, pq_cap, pq_next;
	int pq_ran;
	size_t sa_n; /* standalone pipeline: replies owed */
	rn_rcluster_stats_t stats;
};

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0, no reflection - the
 * checksum Redis Cluster's keyHashSlot uses. */
static uint16_t rc_crc16(const unsigned char *p, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned rn_rcluster_key_slot(const void *key, size_t len)
{
	const unsigned char *k = key;
	size_t open = 0;

	while (open < len && k[open] != '{')
		open++;
	if (open < len) {
		size_t close = open + 1;

		while (close < len && k[close] != '}')
			close++;
		/* "{}" or an unclosed '{' hash the whole key, as in Redis. */
		if (close < len && close > open + 1)
			return rc_crc16(k + open + 1, close - open - 1) & 0x3FFF;
	}
	return rc_crc16(k, len) & 0x3FFF;
}

static size_t rc_len(const char **argv, const size_t *lens, int i)
{
	return lens ? lens[i] : strlen(argv[i]);
}

static int rc_is(const char **argv, const size_t *lens, int i, const char *name)
{
	size_t n = strlen(name);

	return rc_len(argv, lens, i) == n && strncasecmp(argv[i], name, n) == 0;
}

/* Commands with no key: any node answers them. */
static const char *const rc_keyless[] = {
	"PING",
	"INFO",
	"SCRIPT",
	"CLUSTER",
	"CLIENT",
	"TIME",
	"WAIT",
	"PUBLISH",
	"AUTH",
	"SELECT",
	"ECHO",
	"CONFIG",
	"DBSIZE",
	"COMMAND",
	"HELLO",
	"READONLY",
	"READWRITE",
	"FLUSHALL",
	"FLUSHDB",
	"ROLE",
	"LASTSAVE",
	"MULTI",
	"EXEC",
	"DISCARD",
	"FUNCTION",
	"SCAN",
	"RANDOMKEY",
	"KEYS",
	"MEMORY",
	"SUBSCRIBE",
	"PSUBSCRIBE",
	"PUBSUB",
	"QUIT",
};

/* Commands whose every argument is a key. */
static const char *const rc_allkeys[] = { "DEL", "UNLINK", "EXISTS", "MGET", "TOUCH", "WATCH" };

/* Folds keys argv[from..to) into *slot; -2 on a second slot. */
static int rc_fold(int slot, const char **argv, const size_t *lens, int from, int to)
{
	for (int i = from; i < to; i++) {
		int s = (int)rn_rcluster_key_slot(argv[i], rc_len(argv, lens, i));

		if (slot >= 0 && s != slot)
			return -2;
		slot = s;
	}
	return slot;
}

int rn_rcluster_command_slot(int argc, const char **argv, const size_t *lens)
{
	if (argc < 1)
		return -1;
	if (rc_is(argv, lens, 0, "EVAL") || rc_is(argv, lens, 0, "EVALSHA") || rc_is(argv, lens, 0, "EVAL_RO") ||
	    rc_is(argv, lens, 0, "EVALSHA_RO") || rc_is(argv, lens, 0, "FCALL") || rc_is(argv, lens, 0, "FCALL_RO")) {
		if (argc < 3)
			return -1;
		char num[24];
		size_t nl = rc_len(argv, lens, 2);

		if (nl == 0 || nl >= sizeof(num))
			return -1;
		memcpy(num, argv[2], nl);
		num[nl] = '\0';
		long nk = strtol(num, NULL, 10);

		if (nk <= 0)
			return -1;
		if (nk > argc - 3)
			nk = argc - 3;
		return rc_fold(-1, argv, lens, 3, 3 + (int)nk);
	}
	if (rc_is(argv, lens, 0, "XREAD") || rc_is(argv, lens, 0, "XREADGROUP")) {
		for (int i = 1; i < argc; i++) {
			if (rc_is(argv, lens, i, "STREAMS")) {
				int rest = argc - i - 1;

				return rest < 2 ? -1 : rc_fold(-1, argv, lens, i + 1, i + 1 + rest / 2);
			}
		}
		return -1;
	}
	if (rc_is(argv, lens, 0, "XGROUP") || rc_is(argv, lens, 0, "XINFO") || rc_is(argv, lens, 0, "OBJECT") ||
	    (rc_is(argv, lens, 0, "MEMORY") && argc > 2 && rc_is(argv, lens, 1, "USAGE")))
		return argc > 2 ? rc_fold(-1, argv, lens, 2, 3) : -1;
	for (size_t i = 0; i < sizeof(rc_keyless) / sizeof(rc_keyless[0]); i++)
		if (rc_is(argv, lens, 0, rc_keyless[i]))
			return -1;
	for (size_t i = 0; i < sizeof(rc_allkeys) / sizeof(rc_allkeys[0]); i++)
		if (rc_is(argv, lens, 0, rc_allkeys[i]))
			return rc_fold(-1, argv, lens, 1, argc);
	return argc > 1 ? rc_fold(-1, argv, lens, 1, 2) : -1;
}

int rn_rcluster_parse_redirect(const char *err, size_t len, int *slot, char *host, size_t host_size,
                               int *port)
{
	int kind;
	size_t i;

	if (len > 6 && memcmp(err, "MOVED ", 6) == 0) {
		kind = 1;
		i = 6;
	} else if (len > 4 && memcmp(err, "ASK ", 4) == 0) {
		kind = 2;
		i = 4;
	} else {
		return 0;
	}
	long s = 0;
	size_t digits = 0;

	while (i < len && err[i] >= '0' && err[i] <= '9' && digits < 6) {
		s = s * 10 + (err[i++] - '0');
		digits++;
	}
	if (digits == 0 || s >= RN_RCLUSTER_SLOTS || i >= len || err[i] != ' ')
		return 0;
	i++;
	/* host:port, the port after the last ':' (an IPv6 host has more). */
	size_t colon = len;

	for (size_t j = len; j > i; j--) {
		if (err[j - 1] == ':') {
			colon = j - 1;
			break;
		}
	}
	if (colon == len || colon == i || colon - i >= host_size)
		return 0;
	long p = 0;
	size_t pd = 0;

	for (size_t j = colon + 1; j < len; j++) {
		if (err[j] < '0' || err[j] > '9' || pd >= 5)
			return 0;
		p = p * 10 + (err[j] - '0');
		pd++;
	}
	if (pd == 0 || p < 1 || p > 65535)
		return 0;
	for (size_t j = i; j < colon; j++)
		if (err[j] == ' ' || err[j] == '\0')
			return 0;
	memcpy(host, err + i, colon - i);
	host[colon - i] = '\0';
	*slot = (int)s;
	*port = (int)p;
	return kind;
}

static void rc_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	/* A signal cuts the wait short; the caller's deadline still holds. */
	nanosleep(&ts, NULL);
}

static long rc_now_ms(void)
{
	return (long)(rn_mono_us() / 1000);
}

/* The index of host:port in the node table, added when new; -1 when the
 * table is full or out of memory. */
static int rc_node_index(rn_rcluster_t *rc, const char *host, int port)
{
	for (size_t i = 0; i < rc->nn; i++)
		if (rc->nodes[i].port == port && strcmp(rc->nodes[i].host, host) == 0)
			return (int)i;
	if (rc->nn >= RC_MAX_NODES || strlen(host) >= sizeof(rc->nodes[0].host))
		return -1;
	if (rc->nn == rc->cap) {
		size_t cap = rc->cap ? rc->cap * 2 : 8;
		rc_node_t *n = realloc(rc->nodes, cap * sizeof(*n));

		if (!n)
			return -1;
		rc->nodes = n;
		rc->cap = cap;
	}
	rc_node_t *n = &rc->nodes[rc->nn];

	memset(n, 0, sizeof(*n));
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	return (int)rc->nn++;
}

static void rc_node_drop(rn_rcluster_t *rc, int i)
{
	if (rc->nodes[i].c) {
		redisFree(rc->nodes[i].c);
		rc->nodes[i].c = NULL;
	}
}

/* Node i's connection, opened when missing or broken; NULL with rc->err. */
static redisContext *rc_node_conn(rn_rcluster_t *rc, int i)
{
	rc_node_t *n = &rc->nodes[i];

	if (n->c && n->c->err == 0)
		return n->c;
	rc_node_drop(rc, i);
	rn_redis_url_t u = rc->url;
	char why[200];

	snprintf(u.host, sizeof(u.host), "%s", n->host);
	u.port = n->port;
	n->c = rn_redis_connect(&u, rc->opts.connect_timeout_ms, rc->opts.command_timeout_ms, why, sizeof(why));
	if (!n->c) {
		snprintf(rc->err, sizeof(rc->err), "%s:%d: %s", n->host, n->port, why);
		return NULL;
	}
	if (n->opened++ > 0)
		rc->stats.reconnects++;
	return n->c;
}

int rn_rcluster_parse_slots(const redisReply *r, const char *asked_host,
                            int (*node_index)(void *arg, const char *host, int port), void *arg, uint16_t *map)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	for (size_t s = 0; s < RN_RCLUSTER_SLOTS; s++)
		map[s] = RN_RCLUSTER_UNSERVED;
	for (size_t k = 0; k < r->elements; k++) {
		const redisReply *e = r->element[k];

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
		    e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
		    e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
			return -1;
		long long from = e->element[0]->integer, to = e->element[1]->integer;
		const char *host = e->element[2]->element[0]->str;
		long long port = e->element[2]->element[1]->integer;

		if (from < 0 || to >= RN_RCLUSTER_SLOTS || from > to || port < 1 || port > 65535)
			return -1;
		/* An empty host means "the address you reached me at"; '?' is
		 * a node whose address is unknown: leave its slots unserved. */
		if (host[0] == '\0')
			host = asked_host;
		if (strcmp(host, "?") == 0)
			continue;
		int idx = node_index(arg, host, (int)port);

		if (idx < 0 || idx >= (int)RN_RCLUSTER_UNSERVED)
			return -1;
		for (long long s = from; s <= to; s++)
			map[s] = (uint16_t)idx;
	}
	return 0;
}

static int rc_node_index_cb(void *arg, const char *host, int port)
{
	return rc_node_index(arg, host, port);
}

/* Reads CLUSTER SLOTS reply r (asked of node asked) into rc->fresh.
 * 0, or -1 when the reply is not a slot table. */
static int rc_parse_slots(rn_rcluster_t *rc, int asked, const redisReply *r)
{
	char host[sizeof(rc->nodes[0].host)];

	/* rc_node_index may move rc->nodes: keep the asked node's name. */
	snprintf(host, sizeof(host), "%s", rc->nodes[asked].host);
	return rn_rcluster_parse_slots(r, host, rc_node_index_cb, rc, rc->fresh);
}

/* Re-reads the slot map from the first node that answers, starting after
 * the one asked last time so a dead node is not always tried first.
 * 0, or -1 with rc->err. */
static int rc_refresh(rn_rcluster_t *rc)
{
	size_t nn = rc->nn;

	rc->stats.refreshes++;
	for (size_t k = 0; k < nn; k++) {
		int i = (int)((rc->refresh_from + k) % nn);
		redisContext *c = rc_node_conn(rc, i);

		if (!c)
			continue;
		redisReply *r = redisCommand(c, "CLUSTER SLOTS");

		if (!r) {
			snprintf(rc->err, sizeof(rc->err), "%s:%d: %s", rc->nodes[i].host, rc->nodes[i].port,
			         c->errstr[0] ? c->errstr : "connection lost");
			rc_node_drop(rc, i);
			continue;
		}
		int ok = rc_parse_slots(rc, i, r) == 0;

		if (!ok)
			snprintf(rc->err, sizeof(rc->err), "%s:%d: CLUSTER SLOTS: %.120s", rc->nodes[i].host,
			         rc->nodes[i].port, r->type == REDIS_REPLY_ERROR ? r->str : "not a slot table");
		freeReplyObject(r);
		if (!ok)
			continue;
		memcpy(rc->slot_node, rc->fresh, sizeof(rc->slot_node));
		rc->stale = 0;
		rc->refresh_from = (size_t)i;
		return 0;
	}
	return -1;
}

static size_t rc_unserved(const rn_rcluster_t *rc, int *first)
{
	size_t n = 0;

	*first = -1;
	for (int s = 0; s < RN_RCLUSTER_SLOTS; s++) {
		if (rc->slot_node[s] == RC_NONE) {
			if (n++ == 0)
				*first = s;
		}
	}
	return n;
}

rn_rcluster_t *rn_rcluster_open(const rn_redis_url_t *url, const rn_rcluster_opts_t *opts, char *errstr,
                                size_t errstr_size)
{
	static const rn_rcluster_opts_t defaults = RN_RCLUSTER_OPTS_INIT;
	rn_rcluster_t *rc = calloc(1, sizeof(*rc));

	if (!rc) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	rc->url = *url;
	rc->opts = opts ? *opts : defaults;
	rc->last_node = -1;
	for (size_t s = 0; s < RN_RCLUSTER_SLOTS; s++)
		rc->slot_node[s] = RC_NONE;
	if (rc_node_index(rc, url->host, url->port) != 0) {
		snprintf(errstr, errstr_size, "out of memory");
		rn_rcluster_free(rc);
		return NULL;
	}
	char why[200];
	redisContext *c = rn_redis_connect(url, rc->opts.connect_timeout_ms, rc->opts.command_timeout_ms, why,
	                                   sizeof(why));

	if (!c) {
		snprintf(errstr, errstr_size, "%s", why);
		rn_rcluster_free(rc);
		return NULL;
	}
	rc->nodes[0].c = c;
	rc->nodes[0].opened = 1;
	redisReply *r = redisCommand(c, "INFO cluster");

	if (!r || r->type != REDIS_REPLY_STRING) {
		if (!r)
			snprintf(errstr, errstr_size, "not a Redis server (%s)",
			         c->errstr[0] ? c->errstr : "no reply");
		else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0)
			snprintf(errstr, errstr_size, "authentication required (the URL has no password)");
		else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOPERM", 6) == 0)
			snprintf(errstr, errstr_size, "the Redis user may not run INFO (its ACL needs +info)");
		else
			snprintf(errstr, errstr_size, "not a Redis server (INFO cluster: %.100s)",
			         r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		if (r)
			freeReplyObject(r);
		rn_rcluster_free(rc);
		return NULL;
	}
	rc->cluster = !!strstr(r->str, "cluster_enabled:1");
	freeReplyObject(r);
	if (!rc->cluster)
		return rc;
	if (url->db != 0) {
		snprintf(errstr, errstr_size, "a cluster has only database 0 (the URL asks for %d)", url->db);
		rn_rcluster_free(rc);
		return NULL;
	}
	if (rc_refresh(rc) < 0) {
		snprintf(errstr, errstr_size, "cannot read the slot map: %s", rc->err);
		rn_rcluster_free(rc);
		return NULL;
	}
	int first;
	size_t unserved = rc_unserved(rc, &first);

	if (unserved > 0) {
		snprintf(errstr, errstr_size, "cluster has %zu of %d slots unserved (first: %d)", unserved,
		         RN_RCLUSTER_SLOTS, first);
		rn_rcluster_free(rc);
		return NULL;
	}
	return rc;
}

static void rc_pq_clear(rn_rcluster_t *rc)
{
	for (size_t i = 0; i < rc->pq_n; i++) {
		redisFreeCommand(rc->pq[i].cmd);
		if (rc->pq[i].reply)
			freeReplyObject(rc->pq[i].reply);
	}
	rc->pq_n = rc->pq_next = 0;
	rc->pq_ran = 0;
}

void rn_rcluster_free(rn_rcluster_t *rc)
{
	if (!rc)
		return;
	for (size_t i = 0; i < rc->nn; i++)
		rc_node_drop(rc, (int)i);
	rc_pq_clear(rc);
	free(rc->pq);
	free(rc->nodes);
	memset(rc->url.password, 0, sizeof(rc->url.password));
	free(rc);
}

int rn_rcluster_is_cluster(const rn_rcluster_t *rc)
{
	return rc->cluster;
}

const char *rn_rcluster_errstr(const rn_rcluster_t *rc)
{
	return rc->err;
}

int rn_rcluster_wait_replicas(const rn_rcluster_t *rc, int *timeout_ms)
{
	if (timeout_ms)
		*timeout_ms = rc->opts.wait_timeout_ms;
	return rc->opts.wait_replicas > 0 ? rc->opts.wait_replicas : 0;
}

long long rn_rcluster_wait(rn_rcluster_t *rc)
{
	if (rc->opts.wait_replicas <= 0)
		return 0;
	/* Keyless: rc_route sends it where the write went.  A timeout of 0
	 * would block for ever: at least 1 ms. */
	int t = rc->opts.wait_timeout_ms > 0 ? rc->opts.wait_timeout_ms : 1;
	redisReply *r = rn_rcluster_command(rc, 0, "WAIT %d %d", rc->opts.wait_replicas, t);
	if (!r)
		return -1;
	long long got = -1;
	if (r->type == REDIS_REPLY_INTEGER)
		got = r->integer;
	else
		snprintf(rc->err, sizeof(rc->err), "WAIT: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
	freeReplyObject(r);
	if (got >= 0 && got < rc->opts.wait_replicas)
		rc->stats.wait_short++;
	return got;
}

void rn_rcluster_stats(const rn_rcluster_t *rc, rn_rcluster_stats_t *out)
{
	*out = rc->stats;
}

const char *rn_rcluster_node_of(const rn_rcluster_t *rc, unsigned slot)
{
	rn_rcluster_t *w = (rn_rcluster_t *)rc;

	w->node_name[0] = '\0';
	if (rc->cluster && slot < RN_RCLUSTER_SLOTS && rc->slot_node[slot] != RC_NONE) {
		const rc_node_t *n = &rc->nodes[rc->slot_node[slot]];

		snprintf(w->node_name, sizeof(w->node_name), "%s:%d", n->host, n->port);
	}
	return w->node_name;
}

int rn_rcluster_transient_error(const char *err)
{
	return strncmp(err, "TRYAGAIN", 8) == 0 || strncmp(err, "CLUSTERDOWN", 11) == 0 ||
	        strncmp(err, "LOADING", 7) == 0 || strncmp(err, "MASTERDOWN", 10) == 0;
}

/* Errors that mean "not run; the cluster is settling: ask again soon". */
static int rc_is_transient(const redisReply *r)
{
	return rn_rcluster_transient_error(r->str);
}

/* The node a command for slot goes to now (RC_NONE when unserved). */
static unsigned rc_route(const rn_rcluster_t *rc, int slot)
{
	if (!rc->cluster)
		return 0;
	if (slot >= 0)
		return rc->slot_node[slot];
	/* No key: where the last command went (WAIT counts the replicas
	 * of that node), else slot 0's primary. */
	if (rc->last_node >= 0 && (size_t)rc->last_node < rc->nn)
		return (unsigned)rc->last_node;
	return rc->slot_node[0];
}

/* Sends the formatted command cmd (len bytes) for slot and returns its
 * reply, following redirects and waiting out a settling cluster. */
static redisReply *rc_run(rn_rcluster_t *rc, int flags, int slot, const char *cmd, size_t len)
{
	long deadline = rc_now_ms() + rc->opts.retry_budget_ms;
	unsigned attempt = 0;
	int redirects = 0, target = -1, asking = 0;
	redisReply *last = NULL; /* the transient error to return if time runs out */

	rc->stats.commands++;
	rc->err[0] = '\0';
	for (;;) {
		if (rc->cluster && rc->stale && target < 0)
			rc_refresh(rc);
		unsigned node = target >= 0 ? (unsigned)target : rc_route(rc, slot);
		redisContext *c = NULL;

		if (node == RC_NONE) {
			snprintf(rc->err, sizeof(rc->err), "slot %d is not served", slot);
			rc->stale = 1;
		} else if (!(c = rc_node_conn(rc, (int)node))) {
			/* Never sent: a standalone caller hears it now (it has
			 * its own reconnect loop); a cluster may be failing over. */
			if (!rc->cluster)
				goto fail;
			rc->stale = 1;
			target = -1;
			/* A keyless command does not stay with a dead node. */
			if ((int)node == rc->last_node)
				rc->last_node = -1;
		}
		if (c) {
			redisReply *r = NULL;
			int ok = 1;

			if (asking)
				redisAppendCommand(c, "ASKING");
			redisAppendFormattedCommand(c, cmd, len);
			if (asking) {
				ok = redisGetReply(c, (void **)&r) == REDIS_OK && r;
				if (r)
					freeReplyObject(r);
				r = NULL;
			}
			if (ok)
				ok = redisGetReply(c, (void **)&r) == REDIS_OK && r;
			if (!ok) {
				snprintf(rc->err, sizeof(rc->err), "connection lost (%s:%d: %s)", rc->nodes[node].host,
				         rc->nodes[node].port, c->errstr[0] ? c->errstr : "no reply");
				rc_node_drop(rc, (int)node);
				rc->stale = rc->cluster;
				target = -1;
				asking = 0;
				if ((int)node == rc->last_node)
					rc->last_node = -1;
				if (!rc->cluster || !(flags & RN_RCLUSTER_IDEMPOTENT))
					goto fail;
				goto wait;
			}
			rc->last_node = (int)node;
			target = -1;
			asking = 0;
			if (!rc->cluster || r->type != REDIS_REPLY_ERROR) {
				if (last)
					freeReplyObject(last);
				return r;
			}
			char host[256];
			int rslot, rport;
			int kind = rn_rcluster_parse_redirect(r->str, r->len, &rslot, host, sizeof(host), &rport);

			if (kind > 0) {
				int idx = rc_node_index(rc, host, rport);

				freeReplyObject(r);
				if (idx < 0) {
					snprintf(rc->err, sizeof(rc->err), "redirect to %s:%d: node table full", host,
					         rport);
					goto fail;
				}
				if (++redirects > RC_MAX_REDIRECTS) {
					snprintf(rc->err, sizeof(rc->err), "too many redirects for slot %d", slot);
					goto fail;
				}
				target = idx;
				if (kind == 1) {
					/* The map is behind: this slot now, the rest on
					 * the next call's refresh. */
					rc->stats.moved++;
					rc->slot_node[rslot] = (uint16_t)idx;
					rc->stale = 1;
				} else {
					rc->stats.ask++;
					asking = 1;
				}
				continue;
			}
			if (!rc_is_transient(r)) {
				if (last)
					freeReplyObject(last);
				return r;
			}
			if (strncmp(r->str, "CLUSTERDOWN", 11) == 0)
				rc->stale = 1;
			snprintf(rc->err, sizeof(rc->err), "%.200s", r->str);
			if (last)
				freeReplyObject(last);
			last = r;
		}
	wait:;
		long delay = rn_backoff_ms(attempt++, rc->opts.backoff_min_ms, rc->opts.backoff_max_ms);

		if (rc_now_ms() + delay > deadline) {
			if (last)
				return last;
			char why[256];

			snprintf(why, sizeof(why), "%s", rc->err);
			snprintf(rc->err, sizeof(rc->err), "no node reachable for slot %d within %d ms (%.180s)", slot,
			         rc->opts.retry_budget_ms, why);
			return NULL;
		}
		rc->stats.retries++;
		rc_sleep_ms(delay);
	}
fail:
	if (last)
		freeReplyObject(last);
	return NULL;
}

redisReply *rn_rcluster_argv(rn_rcluster_t *rc, int flags, int argc, const char **argv, const size_t *lens)
{
	int slot = rc->cluster ? rn_rcluster_command_slot(argc, argv, lens) : -1;

	if (slot == -2) {
		snprintf(rc->err, sizeof(rc->err), "CROSSSLOT: keys in different slots");
		return NULL;
	}
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, lens);

	if (len < 0) {
		snprintf(rc->err, sizeof(rc->err), "out of memory");
		return NULL;
	}
	redisReply *r = rc_run(rc, flags, slot, cmd, (size_t)len);

	redisFreeCommand(cmd);
	return r;
}

/*
 * The arguments of a command this process formatted itself (RESP: *N then
 * N bulk strings): pointers into cmd.  0, or -1 when out of memory.
 */
static int rc_split(const char *cmd, size_t len, int *argc, const char ***argv, size_t **lens)
{
	const char *p = cmd, *end = cmd + len;
	long n = 0;

	if (p >= end || *p != '*')
		return -1;
	n = strtol(p + 1, NULL, 10);
	if (n < 0 || n > 1 << 20)
		return -1;
	p = memchr(p, '\n', (size_t)(end - p));
	if (!p)
		return -1;
	p++;
	*argv = calloc((size_t)n + 1, sizeof(**argv));
	*lens = calloc((size_t)n + 1, sizeof(**lens));
	if (!*argv || !*lens)
		return -1;
	for (long i = 0; i < n; i++) {
		if (p >= end || *p != '$')
			return -1;
		long l = strtol(p + 1, NULL, 10);
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		if (l < 0 || !nl || (size_t)(end - nl - 1) < (size_t)l + 2)
			return -1;
		(*argv)[i] = nl + 1;
		(*lens)[i] = (size_t)l;
		p = nl + 1 + l + 2;
	}
	*argc = (int)n;
	return 0;
}

redisReply *rn_rcluster_command(rn_rcluster_t *rc, int flags, const char *fmt, ...)
{
	char *cmd = NULL;
	va_list ap;

	va_start(ap, fmt);
	int len = redisvFormatCommand(&cmd, fmt, ap);

	va_end(ap);
	if (len < 0) {
		snprintf(rc->err, sizeof(rc->err), "bad command format or out of memory");
		return NULL;
	}
	int slot = -1;

	if (rc->cluster) {
		int argc = 0;
		const char **argv = NULL;
		size_t *lens = NULL;

		if (rc_split(cmd, (size_t)len, &argc, &argv, &lens) < 0)
			slot = -3;
		else
			slot = rn_rcluster_command_slot(argc, argv, lens);
		free(argv);
		free(lens);
	}
	redisReply *r = NULL;

	if (slot == -2)
		snprintf(rc->err, sizeof(rc->err), "CROSSSLOT: keys in different slots");
	else if (slot == -3)
		snprintf(rc->err, sizeof(rc->err), "out of memory");
	else
		r = rc_run(rc, flags, slot, cmd, (size_t)len);
	redisFreeCommand(cmd);
	return r;
}

int rn_rcluster_each_primary(rn_rcluster_t *rc, int argc, const char **argv, const size_t *lens,
                             int (*fn)(void *arg, const char *node, redisReply *r), void *arg)
{
	int replied = 0;

	if (rc->cluster && rc->stale)
		rc_refresh(rc);
	size_t nn = rc->cluster ? rc->nn : 1;

	for (size_t i = 0; i < nn; i++) {
		/* Only nodes that serve a slot are primaries. */
		int serves = !rc->cluster;

		for (int s = 0; s < RN_RCLUSTER_SLOTS && !serves; s++)
			serves = rc->slot_node[s] == i;
		if (!serves)
			continue;
		char name[280];

		snprintf(name, sizeof(name), "%s:%d", rc->nodes[i].host, rc->nodes[i].port);
		redisContext *c = rc_node_conn(rc, (int)i);
		redisReply *r = c ? redisCommandArgv(c, argc, argv, lens) : NULL;

		if (c && !r) {
			snprintf(rc->err, sizeof(rc->err), "connection lost (%s: %s)", name,
			         c->errstr[0] ? c->errstr : "no reply");
			rc_node_drop(rc, (int)i);
			rc->stale = rc->cluster;
		}
		if (r && r->type != REDIS_REPLY_ERROR)
			replied++;
		int stop = fn ? fn(arg, name, r) : 0;

		if (r)
			freeReplyObject(r);
		if (stop)
			break;
	}
	return replied;
}

int rn_rcluster_append_argv(rn_rcluster_t *rc, int flags, int argc, const char **argv, const size_t *lens)
{
	char *cmd = NULL;
	int len;

	if (!rc->cluster) {
		/* hiredis's own pipeline on the one connection. */
		redisContext *c = rc_node_conn(rc, 0);

		if (!c)
			return -1;
		if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) {
			snprintf(rc->err, sizeof(rc->err), "%s", c->errstr[0] ? c->errstr : "out of memory");
			return -1;
		}
		rc->sa_n++;
		return 0;
	}
	/* A pipeline already sent starts afresh: replies a caller gave up
	 * reading (after an error) are dropped. */
	if (rc->pq_ran)
		rc_pq_clear(rc);
	int slot = rn_rcluster_command_slot(argc, argv, lens);

	if (slot == -2) {
		snprintf(rc->err, sizeof(rc->err), "CROSSSLOT: keys in different slots");
		return -1;
	}
	if (rc->pq_n == rc->pq_cap) {
		size_t cap = rc->pq_cap ? rc->pq_cap * 2 : 16;
		rc_pending_t *q = realloc(rc->pq, cap * sizeof(*q));

		if (!q) {
			snprintf(rc->err, sizeof(rc->err), "out of memory");
			return -1;
		}
		rc->pq = q;
		rc->pq_cap = cap;
	}
	len = redisFormatCommandArgv(&cmd, argc, argv, lens);
	if (len < 0) {
		snprintf(rc->err, sizeof(rc->err), "out of memory");
		return -1;
	}
	rc->pq[rc->pq_n++] = (rc_pending_t){ cmd, (size_t)len, slot, flags, 0, NULL };
	return 0;
}

/* Sends node's queued commands as one batch and reads their replies. */
static void rc_pq_node(rn_rcluster_t *rc, unsigned node)
{
	redisContext *c = rc_node_conn(rc, (int)node);
	size_t sent = 0;

	for (size_t i = 0; i < rc->pq_n; i++) {
		rc_pending_t *p = &rc->pq[i];

		if (p->state != 0 || rc_route(rc, p->slot) != node)
			continue;
		/* Not reachable: each runs alone later, with the waiting. */
		if (!c || redisAppendFormattedCommand(c, p->cmd, p->len) != REDIS_OK) {
			p->state = 2;
			continue;
		}
		p->state = 4; /* sent, reply owed */
		sent++;
	}
	int lost = 0;

	for (size_t i = 0; i < rc->pq_n && sent > 0; i++) {
		rc_pending_t *p = &rc->pq[i];

		if (p->state != 4)
			continue;
		sent--;
		redisReply *r = NULL;

		if (lost || redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
			if (!lost)
				snprintf(rc->err, sizeof(rc->err), "connection lost (%s:%d: %s)", rc->nodes[node].host,
				         rc->nodes[node].port, c->errstr[0] ? c->errstr : "no reply");
			lost = 1;
			p->state = (p->flags & RN_RCLUSTER_IDEMPOTENT) ? 2 : 3;
			continue;
		}
		char host[256];
		int rs, rp;

		if (r->type == REDIS_REPLY_ERROR &&
		    (rn_rcluster_parse_redirect(r->str, r->len, &rs, host, sizeof(host), &rp) || rc_is_transient(r))) {
			freeReplyObject(r);
			p->state = 2;
			continue;
		}
		p->reply = r;
		p->state = 1;
	}
	if (lost) {
		rc_node_drop(rc, (int)node);
		rc->stale = 1;
	} else if (c) {
		rc->last_node = (int)node;
	}
}

static void rc_pq_run(rn_rcluster_t *rc)
{
	rc->pq_ran = 1;
	if (rc->stale)
		rc_refresh(rc);
	/* One batch per node, in the order nodes first appear. */
	for (size_t i = 0; i < rc->pq_n; i++) {
		if (rc->pq[i].state != 0)
			continue;
		unsigned node = rc_route(rc, rc->pq[i].slot);

		if (node == RC_NONE)
			rc->pq[i].state = 2;
		else
			rc_pq_node(rc, node);
	}
	for (size_t i = 0; i < rc->pq_n; i++) {
		rc_pending_t *p = &rc->pq[i];

		if (p->state != 2)
			continue;
		p->reply = rc_run(rc, p->flags, p->slot, p->cmd, p->len);
		p->state = p->reply ? 1 : 3;
		rc->stats.commands--; /* counted once, below */
	}
	rc->stats.commands += rc->pq_n;
}

int rn_rcluster_get_reply(rn_rcluster_t *rc, redisReply **out)
{
	*out = NULL;
	if (!rc->cluster) {
		redisContext *c = rc->nodes[0].c;

		if (rc->sa_n == 0 || !c) {
			snprintf(rc->err, sizeof(rc->err), "no reply owed");
			return -1;
		}
		rc->sa_n--;
		if (redisGetReply(c, (void **)out) != REDIS_OK || !*out) {
			snprintf(rc->err, sizeof(rc->err), "connection lost (%s)", c->errstr[0] ? c->errstr : "no reply");
			rc_node_drop(rc, 0);
			rc->sa_n = 0;
			*out = NULL;
			return -1;
		}
		rc->stats.commands++;
		return 0;
	}
	if (!rc->pq_ran)
		rc_pq_run(rc);
	if (rc->pq_next >= rc->pq_n) {
		snprintf(rc->err, sizeof(rc->err), "no reply owed");
		return -1;
	}
	rc_pending_t *p = &rc->pq[rc->pq_next++];

	*out = p->reply;
	p->reply = NULL;
	if (rc->pq_next == rc->pq_n)
		rc_pq_clear(rc);
	return *out ? 0 : -1;
}

int rn_rcluster_slot_url(rn_rcluster_t *rc, unsigned slot, int stale, rn_redis_url_t *out, char *errstr,
                         size_t errstr_size)
{
	*out = rc->url;
	if (!rc->cluster)
		return 0;
	if ((stale || rc->stale) && rc_refresh(rc) < 0) {
		snprintf(errstr, errstr_size, "cannot read the slot map: %s", rc->err);
		return -1;
	}
	unsigned node = slot < RN_RCLUSTER_SLOTS ? rc->slot_node[slot] : RC_NONE;

	if (node == RC_NONE) {
		snprintf(errstr, errstr_size, "slot %u is not served", slot);
		return -1;
	}
	snprintf(out->host, sizeof(out->host), "%s", rc->nodes[node].host);
	out->port = rc->nodes[node].port;
	out->db = 0;
	return 0;
}

int rn_rcluster_reply_check(const rn_rcluster_t *rc, const redisReply *r, const char *what, char *errstr,
                            size_t errstr_size)
{
	if (!r) {
		snprintf(errstr, errstr_size, "redis %s: %s", what, rc->err[0] ? rc->err : "connection lost");
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		snprintf(errstr, errstr_size, "redis %s: %.160s", what, r->str);
		return -1;
	}
	return 0;
}

long long rn_rcluster_command_ll(rn_rcluster_t *rc, int flags, int argc, const char **argv, const size_t *lens,
                                 const char *what, char *errstr, size_t errstr_size)
{
	redisReply *r = rn_rcluster_argv(rc, flags, argc, argv, lens);
	long long v = -1;

	if (rn_rcluster_reply_check(rc, r, what, errstr, errstr_size) == 0)
		v = rn_redis_reply_ll(r);
	if (r)
		freeReplyObject(r);
	return v;
}

redisContext *rn_rcluster_slot_context(rn_rcluster_t *rc, unsigned slot, char *errstr, size_t errstr_size)
{
	unsigned node = 0;

	if (rc->cluster) {
		if (rc->stale && rc_refresh(rc) < 0) {
			snprintf(errstr, errstr_size, "cannot read the slot map: %s", rc->err);
			return NULL;
		}
		node = slot < RN_RCLUSTER_SLOTS ? rc->slot_node[slot] : RC_NONE;
		if (node == RC_NONE) {
			snprintf(errstr, errstr_size, "slot %u is not served", slot);
			rc->stale = 1;
			return NULL;
		}
	}
	redisContext *c = rc_node_conn(rc, (int)node);

	if (!c) {
		snprintf(errstr, errstr_size, "%s", rc->err);
		rc->stale = rc->cluster;
	}
	return c;
}

void rn_rcluster_reset_slot(rn_rcluster_t *rc, unsigned slot)
{
	unsigned node = 0;

	if (rc->cluster) {
		node = slot < RN_RCLUSTER_SLOTS ? rc->slot_node[slot] : RC_NONE;
		rc->stale = 1;
	}
	if (node != RC_NONE && node < rc->nn)
		rc_node_drop(rc, (int)node);
}

int rn_rcluster_idle_check(rn_rcluster_t *rc)
{
	int open = 0;

	for (size_t i = 0; i < rc->nn; i++) {
		redisContext *c = rc->nodes[i].c;

		if (!c)
			continue;
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };

		if (c->err || poll(&pfd, 1, 0) != 0)
			rc_node_drop(rc, (int)i);
		else
			open = 1;
	}
	return open;
}

int rn_rcluster_probe(const rn_redis_url_t *url, int connect_timeout_ms, char *errstr, size_t errstr_size)
{
	rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;

	o.connect_timeout_ms = connect_timeout_ms;
	o.command_timeout_ms = connect_timeout_ms;
	rn_rcluster_t *rc = rn_rcluster_open(url, &o, errstr, errstr_size);

	if (rc) {
		int cluster = rc->cluster;

		rn_rcluster_free(rc);
		return cluster;
	}
	/* The open's own words (above) that mean "wrong", not "not yet". */
	static const char *const wrong[] = { "authentication", "not a Redis server (Protocol", "not a Redis server (INFO",
		                             "cluster has", "a cluster has only", "SELECT", "the Redis user may not" };

	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++)
		if (strncmp(errstr, wrong[i], strlen(wrong[i])) == 0)
			return -1;
	return -2;
}
