/*
 * dispatcher/rroute.c - slot routing over asynchronous connections (see
 * rroute.h).
 *
 * A command on a cluster travels as an op: its arguments copied (so it
 * can be sent again), its slot, the node an ASK named, its deadline.  An
 * op that cannot be sent now (no map, its node down, a transient error)
 * waits in one list that a timer retries with backoff after re-reading
 * the map; ops past their deadline get NULL.
 */
#include "dispatcher/rroute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/rcluster.h"
#include "common/redis.h"

#define RR_MAX_NODES      1024
#define RR_BUDGET_MS      20000
#define RR_BACKOFF_MIN_MS 20
#define RR_BACKOFF_MAX_MS 1000
#define RR_MAX_REDIRECTS  8

typedef struct rr_node {
	dispatcher_rroute_t *rr;
	int idx;
	char host[256];
	int port;
	char name[96];
	dispatcher_rconn_t *rc;
	int up;
} rr_node_t;

typedef struct rr_op {
	struct rr_op *next;
	dispatcher_rroute_t *rr;
	dispatcher_rconn_reply_cb cb;
	void *arg;
	int slot; /* -1 keyless */
	int ask;  /* node an ASK named, or -1 */
	int redirects;
	unsigned attempt;
	int64_t deadline;
	int argc;
	char **argv;
	size_t *lens;
} rr_op_t;

struct dispatcher_rroute {
	struct event_base *base;
	rn_redis_url_t url;
	const char *name;
	dispatcher_rroute_state_cb state_cb;
	void *arg;
	int cluster; /* 1, 0, -1 unknown */
	int up;
	int freeing;
	rr_node_t **nodes;
	size_t nn, cap;
	uint16_t map[RN_RCLUSTER_SLOTS];
	uint16_t fresh[RN_RCLUSTER_SLOTS];
	int have_map;
	int refreshing;
	int stale;
	size_t refresh_from;
	int last_node;
	unsigned long version;
	unsigned retry_attempt;
	rr_op_t *waiting, **waiting_tail;
	struct event *ev_retry;
	dispatcher_rroute_stats_t stats;
};

static void rr_send(rr_op_t *op);
static void rr_refresh(dispatcher_rroute_t *rr);

static void rr_op_free(rr_op_t *op)
{
	for (int i = 0; i < op->argc; i++)
		free(op->argv[i]);
	free(op->argv);
	free(op->lens);
	free(op);
}

static void rr_op_done(rr_op_t *op, redisReply *r)
{
	if (op->cb)
		op->cb(r, op->arg);
	rr_op_free(op);
}

static void rr_set_up(dispatcher_rroute_t *rr, int up)
{
	if (rr->up == up || rr->freeing)
		return;
	rr->up = up;
	if (rr->state_cb)
		rr->state_cb(up, rr->arg);
}

/* Cluster: up when there is a map and a node to send to. */
static void rr_recompute(dispatcher_rroute_t *rr)
{
	int any = 0;

	for (size_t i = 0; i < rr->nn && !any; i++)
		any = rr->nodes[i]->up;
	rr_set_up(rr, rr->have_map && any);
}

static void rr_arm_retry(dispatcher_rroute_t *rr)
{
	long ms = rn_backoff_ms(rr->retry_attempt++, RR_BACKOFF_MIN_MS, RR_BACKOFF_MAX_MS);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (!rr->freeing && !event_pending(rr->ev_retry, EV_TIMEOUT, NULL))
		event_add(rr->ev_retry, &tv);
}

static void rr_park(rr_op_t *op)
{
	dispatcher_rroute_t *rr = op->rr;

	op->next = NULL;
	*rr->waiting_tail = op;
	rr->waiting_tail = &op->next;
	rr->stats.retries++;
	rr->stale = 1;
	rr_arm_retry(rr);
}

/* Sends every waiting op again (those past their deadline get NULL). */
static void rr_flush_waiting(dispatcher_rroute_t *rr)
{
	rr_op_t *list = rr->waiting;
	int64_t now = rn_mono_ms();

	rr->waiting = NULL;
	rr->waiting_tail = &rr->waiting;
	while (list) {
		rr_op_t *op = list;

		list = op->next;
		if (now >= op->deadline) {
			rn_log_warn(NULL, "redis_cluster_gave_up", "%s: no node answered for slot %d within %d ms",
			            rr->name, op->slot, RR_BUDGET_MS);
			rr_op_done(op, NULL);
		} else {
			rr_send(op);
		}
	}
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_rroute_t *rr = arg;

	(void)fd;
	(void)what;
	if (rr->stale || !rr->have_map)
		rr_refresh(rr);
	if (!rr->refreshing)
		rr_flush_waiting(rr);
	else
		rr_arm_retry(rr);
}

static void on_node_state(dispatcher_rconn_t *c, int up, void *arg);

static int rr_node_index(void *arg, const char *host, int port)
{
	dispatcher_rroute_t *rr = arg;
	rr_node_t *n;
	rn_redis_url_t u;

	for (size_t i = 0; i < rr->nn; i++)
		if (rr->nodes[i]->port == port && strcmp(rr->nodes[i]->host, host) == 0)
			return (int)i;
	if (rr->nn >= RR_MAX_NODES || strlen(host) >= sizeof(n->host))
		return -1;
	if (rr->nn == rr->cap) {
		size_t cap = rr->cap ? rr->cap * 2 : 8;
		rr_node_t **g = realloc(rr->nodes, cap * sizeof(*g));

		if (!g)
			return -1;
		rr->nodes = g;
		rr->cap = cap;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -1;
	n->rr = rr;
	n->idx = (int)rr->nn;
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	if (rr->nn == 0)
		snprintf(n->name, sizeof(n->name), "%s", rr->name);
	else
		snprintf(n->name, sizeof(n->name), "%s@%.40s:%d", rr->name, host, port);
	u = rr->url;
	snprintf(u.host, sizeof(u.host), "%s", host);
	u.port = port;
	/* Only the URL's node may select a database (a cluster has db 0). */
	if (rr->nn > 0)
		u.db = 0;
	rr->nodes[rr->nn++] = n;
	n->rc = dispatcher_rconn_new(rr->base, &u, n->name, on_node_state, n);
	if (!n->rc) {
		rr->nn--;
		free(n);
		return -1;
	}
	return n->idx;
}

static void on_slots(redisReply *r, void *arg)
{
	rr_node_t *n = arg;
	dispatcher_rroute_t *rr = n->rr;
	char host[sizeof(n->host)];

	rr->refreshing = 0;
	if (rr->freeing)
		return;
	if (rr->cluster == -1 && r && r->type == REDIS_REPLY_ERROR) {
		/* "This instance has cluster support disabled": standalone. */
		rr->cluster = 0;
		rr_set_up(rr, n->up);
		return;
	}
	snprintf(host, sizeof(host), "%s", n->host);
	if (!r || rn_rcluster_parse_slots(r, host, rr_node_index, rr, rr->fresh) < 0) {
		if (r)
			rn_log_warn(NULL, "redis_cluster_slots", "%s: %s:%d: CLUSTER SLOTS: %.120s", rr->name, host,
			            n->port, r->type == REDIS_REPLY_ERROR ? r->str : "not a slot table");
		rr->refresh_from++;
		rr_arm_retry(rr);
		return;
	}
	rr->cluster = 1;
	if (!rr->have_map || memcmp(rr->map, rr->fresh, sizeof(rr->map)) != 0)
		rr->version++;
	memcpy(rr->map, rr->fresh, sizeof(rr->map));
	rr->have_map = 1;
	rr->stale = 0;
	rr->retry_attempt = 0;
	rr_recompute(rr);
	rr_flush_waiting(rr);
}

/* Asks the first node that is up, from the one after the last asked. */
static void rr_refresh(dispatcher_rroute_t *rr)
{
	const char *argv[] = { "CLUSTER", "SLOTS" };

	if (rr->refreshing || rr->freeing)
		return;
	for (size_t k = 0; k < rr->nn; k++) {
		rr_node_t *n = rr->nodes[(rr->refresh_from + k) % rr->nn];

		if (!n->up)
			continue;
		if (dispatcher_rconn_cmd(n->rc, on_slots, n, 2, argv, NULL) == 0) {
			rr->refresh_from = (size_t)n->idx;
			rr->refreshing = 1;
			rr->stats.refreshes++;
			return;
		}
	}
}

static void on_node_state(dispatcher_rconn_t *c, int up, void *arg)
{
	rr_node_t *n = arg;
	dispatcher_rroute_t *rr = n->rr;

	(void)c;
	n->up = up;
	if (rr->cluster == 0) {
		rr_set_up(rr, up);
		return;
	}
	if (up) {
		if (rr->cluster == -1 || rr->stale || !rr->have_map)
			rr_refresh(rr);
		if (rr->waiting)
			rr_arm_retry(rr);
	} else {
		/* A primary went: its slots move to a replica soon. */
		rr->stale = 1;
		rr_refresh(rr);
		rr_arm_retry(rr);
	}
	if (rr->cluster == 1)
		rr_recompute(rr);
}

static void on_op_reply(redisReply *r, void *arg)
{
	rr_op_t *op = arg;
	dispatcher_rroute_t *rr = op->rr;
	int slot, port, kind, idx;
	char host[256];

	if (!r || rr->freeing) {
		/* Lost after sending: it may have run.  The map may be old. */
		if (!rr->freeing) {
			rr->stale = 1;
			rr_arm_retry(rr);
		}
		rr_op_done(op, NULL);
		return;
	}
	if (r->type != REDIS_REPLY_ERROR) {
		rr_op_done(op, r);
		return;
	}
	kind = rn_rcluster_parse_redirect(r->str, r->len, &slot, host, sizeof(host), &port);
	if (kind && op->redirects++ < RR_MAX_REDIRECTS && (idx = rr_node_index(rr, host, port)) >= 0) {
		if (kind == 1) {
			rr->stats.moved++;
			rr->map[slot] = (uint16_t)idx;
			rr->version++;
			rr->stale = 1;
			rr_arm_retry(rr);
			op->ask = -1;
		} else {
			rr->stats.ask++;
			op->ask = idx;
		}
		rr_send(op);
		return;
	}
	if (!kind && rn_rcluster_transient_error(r->str) && rn_mono_ms() < op->deadline) {
		/* TRYAGAIN after an ASK: the slot is half moved; ask the owner
		 * again after the wait (the budget bounds the rounds). */
		op->ask = -1;
		op->redirects = 0;
		rr_park(op);
		return;
	}
	rr_op_done(op, r);
}

static int rr_pick_node(dispatcher_rroute_t *rr, const rr_op_t *op)
{
	if (op->ask >= 0)
		return op->ask;
	if (op->slot >= 0)
		return rr->have_map ? (int)rr->map[op->slot] : -1;
	/* Keyless: where the last one went, else any node that is up. */
	if (rr->last_node >= 0 && (size_t)rr->last_node < rr->nn && rr->nodes[rr->last_node]->up)
		return rr->last_node;
	for (size_t i = 0; i < rr->nn; i++)
		if (rr->nodes[i]->up)
			return (int)i;
	return -1;
}

static void rr_send(rr_op_t *op)
{
	dispatcher_rroute_t *rr = op->rr;
	int idx = rr_pick_node(rr, op);
	rr_node_t *n;
	static const char *asking[] = { "ASKING" };

	if (idx < 0 || (unsigned)idx == RN_RCLUSTER_UNSERVED || (size_t)idx >= rr->nn || !rr->nodes[idx]->up) {
		rr_park(op);
		return;
	}
	n = rr->nodes[idx];
	if (op->ask >= 0 && dispatcher_rconn_cmd(n->rc, NULL, NULL, 1, asking, NULL) < 0) {
		rr_park(op);
		return;
	}
	if (dispatcher_rconn_cmd(n->rc, on_op_reply, op, op->argc, (const char **)op->argv, op->lens) < 0) {
		rr_park(op);
		return;
	}
	rr->stats.sent++;
	rr->last_node = idx;
}

static rr_op_t *rr_op_new(dispatcher_rroute_t *rr, dispatcher_rconn_reply_cb cb, void *arg, int slot, int argc,
                          const char **argv, const size_t *argvlen)
{
	rr_op_t *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->rr = rr;
	op->cb = cb;
	op->arg = arg;
	op->slot = slot;
	op->ask = -1;
	op->deadline = rn_mono_ms() + RR_BUDGET_MS;
	op->argv = calloc((size_t)argc, sizeof(*op->argv));
	op->lens = calloc((size_t)argc, sizeof(*op->lens));
	if (!op->argv || !op->lens) {
		rr_op_free(op);
		return NULL;
	}
	for (int i = 0; i < argc; i++) {
		size_t len = argvlen ? argvlen[i] : strlen(argv[i]);

		op->argv[i] = malloc(len + 1);
		if (!op->argv[i]) {
			rr_op_free(op);
			return NULL;
		}
		memcpy(op->argv[i], argv[i], len);
		op->argv[i][len] = '\0';
		op->lens[i] = len;
		op->argc = i + 1;
	}
	return op;
}

int dispatcher_rroute_cmd(dispatcher_rroute_t *rr, dispatcher_rconn_reply_cb cb, void *arg, int argc,
                          const char **argv, const size_t *argvlen)
{
	rr_op_t *op;
	int slot;

	if (rr->cluster != 1) {
		if (rr->cluster == -1 && !rr->up)
			return -1;
		return dispatcher_rconn_cmd(rr->nodes[0]->rc, cb, arg, argc, argv, argvlen);
	}
	if (!rr->up)
		return -1;
	slot = rn_rcluster_command_slot(argc, argv, argvlen);
	if (slot == -2) {
		rn_log_error(NULL, "redis_crossslot", "%s: %.40s: keys in different slots", rr->name, argv[0]);
		return -1;
	}
	op = rr_op_new(rr, cb, arg, slot, argc, argv, argvlen);
	if (!op)
		return -1;
	rr->stats.commands++;
	rr_send(op);
	return 0;
}

dispatcher_rroute_t *dispatcher_rroute_new(struct event_base *base, const rn_redis_url_t *url, int cluster,
                                           const char *name, dispatcher_rroute_state_cb state_cb, void *arg)
{
	dispatcher_rroute_t *rr = calloc(1, sizeof(*rr));

	if (!rr)
		return NULL;
	rr->base = base;
	rr->url = *url;
	rr->name = name;
	rr->state_cb = state_cb;
	rr->arg = arg;
	rr->cluster = cluster;
	rr->last_node = -1;
	rr->waiting_tail = &rr->waiting;
	rr->ev_retry = evtimer_new(base, on_retry, rr);
	if (!rr->ev_retry || rr_node_index(rr, url->host, url->port) != 0) {
		dispatcher_rroute_free(rr);
		return NULL;
	}
	return rr;
}

void dispatcher_rroute_free(dispatcher_rroute_t *rr)
{
	if (!rr)
		return;
	rr->freeing = 1;
	/* Pending callbacks run now with NULL, then the waiting ones. */
	for (size_t i = 0; i < rr->nn; i++) {
		dispatcher_rconn_free(rr->nodes[i]->rc);
		free(rr->nodes[i]);
	}
	while (rr->waiting) {
		rr_op_t *op = rr->waiting;

		rr->waiting = op->next;
		rr_op_done(op, NULL);
	}
	free(rr->nodes);
	if (rr->ev_retry)
		event_free(rr->ev_retry);
	explicit_bzero(&rr->url, sizeof(rr->url));
	free(rr);
}

int dispatcher_rroute_up(const dispatcher_rroute_t *rr)
{
	return rr->up;
}

int dispatcher_rroute_is_cluster(const dispatcher_rroute_t *rr)
{
	return rr->cluster == 1;
}

int dispatcher_rroute_slot_node(const dispatcher_rroute_t *rr, unsigned slot, char *host, size_t host_size,
                                int *port)
{
	if (rr->cluster != 1 || !rr->have_map || slot >= RN_RCLUSTER_SLOTS ||
	    rr->map[slot] == RN_RCLUSTER_UNSERVED || rr->map[slot] >= rr->nn)
		return -1;
	snprintf(host, host_size, "%s", rr->nodes[rr->map[slot]]->host);
	*port = rr->nodes[rr->map[slot]]->port;
	return 0;
}

unsigned long dispatcher_rroute_map_version(const dispatcher_rroute_t *rr)
{
	return rr->version;
}

void dispatcher_rroute_stale(dispatcher_rroute_t *rr)
{
	if (rr->cluster != 1)
		return;
	rr->stale = 1;
	rr_arm_retry(rr);
}

void dispatcher_rroute_stats(const dispatcher_rroute_t *rr, dispatcher_rroute_stats_t *out)
{
	*out = rr->stats;
}
