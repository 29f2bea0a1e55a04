/*
 * dispatcher/tail.c - the tail pool (see tail.h).
 *
 * Bookkeeping: a run (one out stream) lives on one connection and holds the
 * callers following it.  While an XREAD is in flight each run in it
 * remembers the id it was read from ("inflight_from"); when the reply
 * arrives a caller takes the entries only if its cursor is at or after that
 * id, so a caller that joined with an older cursor meanwhile is never
 * handed entries with a gap before them: it is served by the next read,
 * which starts from the smallest cursor of the run's callers.
 */
#include "dispatcher/tail.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/list.h"
#include "common/log.h"
#include "dispatcher/rconn.h"
#include "dispatcher/wake.h"
#include "proto/job.h"
#include "proto/keys.h"

typedef struct tail_conn tail_conn_t;
typedef struct tail_run tail_run_t;

struct dispatcher_tail_sub {
	tail_run_t *run;
	dispatcher_sid_t cursor;
	int paused;
	int dead;
	dispatcher_tail_entry_cb cb;
	void *arg;
	dispatcher_tail_sub_t *next, *prev;
};

struct tail_run {
	char run_id[PROTO_RUN_ID_MAX + 1];
	char key[PROTO_KEY_MAX];
	dispatcher_tail_t *t;
	tail_conn_t *conn; /* NULL on a cluster: the run is on t->cruns */
	dispatcher_wake_chan_t *wake;
	int again;        /* woken while a read was in flight: read again */
	int64_t woken_ms; /* last wake-up: the channel worked then */
	dispatcher_tail_sub_t *subs;
	size_t nsubs; /* not counting dead ones */
	int inflight;
	dispatcher_sid_t inflight_from;
	tail_run_t *next, *prev;
};

struct tail_conn {
	dispatcher_tail_t *t;
	int idx;
	char name[48];
	dispatcher_rconn_t *rc;
	long long client_id;
	int have_id;
	int reading;
	int dirty;
	int unblock_sent;
	tail_run_t *runs;
	size_t nruns;
	tail_run_t **inflight;
	size_t ninflight;
	struct event *ev_kick;
	struct event *ev_retry;
};

struct dispatcher_tail {
	struct event_base *base;
	char prefix[PROTO_KEY_PREFIX_MAX + 1];
	long block_ms;
	long batch;
	dispatcher_store_t *store;
	tail_conn_t *conns;
	int nconns;
	/* On a cluster: the runs, read one by one when woken and polled. */
	dispatcher_rroute_t *rr;
	dispatcher_wake_t *wake;
	tail_run_t *cruns;
	struct event *ev_poll;
	int freeing;
	/* Nothing answered at start: the first connection asks CLUSTER SLOTS
	 * before any read, and a cluster switches the pool (on_switch). */
	int unknown, detecting;
	rn_redis_url_t url;
	struct event *ev_switch;
	int depth; /* > 0 while delivering: detach defers frees */
	size_t nsubs;
	rn_gauge_t *g_callers;
	rn_gauge_t *g_runs;
	rn_gauge_t *g_conns;
	rn_counter_t *c_reads;
	rn_counter_t *c_entries;
	rn_counter_t *c_unblocks;
	rn_counter_t *c_wakes;
};

int dispatcher_sid_parse(const char *s, dispatcher_sid_t *out)
{
	const char *p = s;
	uint64_t v[2] = { 0, 0 };

	for (int part = 0; part < 2; part++) {
		const char *start = p;

		while (*p >= '0' && *p <= '9') {
			uint64_t d = (uint64_t)(*p - '0');

			if (v[part] > (UINT64_MAX - d) / 10)
				return -1;
			v[part] = v[part] * 10 + d;
			p++;
		}
		if (p == start)
			return -1;
		if (*p == '\0')
			break;
		if (part == 1 || *p != '-')
			return -1;
		p++;
	}
	out->ms = v[0];
	out->seq = v[1];
	return 0;
}

int dispatcher_sid_cmp(dispatcher_sid_t a, dispatcher_sid_t b)
{
	if (a.ms != b.ms)
		return a.ms < b.ms ? -1 : 1;
	if (a.seq != b.seq)
		return a.seq < b.seq ? -1 : 1;
	return 0;
}

static void kick(tail_conn_t *c)
{
	event_active(c->ev_kick, EV_TIMEOUT, 0);
}

static int sub_active(const dispatcher_tail_sub_t *s)
{
	return !s->dead && !s->paused;
}

/* Where a read of run starts: its active callers' smallest cursor.  0 when
 * no caller is active (nothing to read for). */
static int run_from(const tail_run_t *run, dispatcher_sid_t *from)
{
	int any = 0;

	for (const dispatcher_tail_sub_t *s = run->subs; s; s = s->next) {
		if (!sub_active(s))
			continue;
		if (!any || dispatcher_sid_cmp(s->cursor, *from) < 0)
			*from = s->cursor;
		any = 1;
	}
	return any;
}

static void run_free(tail_run_t *r)
{
	tail_conn_t *c = r->conn;
	dispatcher_tail_sub_t *s = r->subs;

	while (s) {
		dispatcher_tail_sub_t *n = s->next;

		free(s);
		s = n;
	}
	if (c) {
		RN_LIST_UNLINK(c->runs, r);
		c->nruns--;
	} else {
		RN_LIST_UNLINK(r->t->cruns, r);
		dispatcher_wake_remove(r->wake);
	}
	rn_gauge_add(r->t->g_runs, -1);
	free(r);
}

/* Frees dead subscriptions and runs nobody follows (outside deliveries). */
static void run_gc(tail_run_t *r)
{
	dispatcher_tail_sub_t *s = r->subs;

	if (r->t->depth > 0)
		return;
	while (s) {
		dispatcher_tail_sub_t *n = s->next;

		if (s->dead) {
			RN_LIST_UNLINK(r->subs, s);
			free(s);
		}
		s = n;
	}
	if (r->nsubs == 0 && !r->inflight)
		run_free(r);
}

static void on_xread(redisReply *r, void *arg);

static void arm(tail_conn_t *c)
{
	dispatcher_tail_t *t = c->t;
	const char **argv;
	size_t *argvlen;
	char(*ids)[48];
	char count[24], block[24];
	size_t n = 0, argc = 0;
	tail_run_t *r;

	if (c->reading || c->t->unknown || !dispatcher_rconn_up(c->rc))
		return;
	for (r = c->runs; r; r = r->next)
		for (dispatcher_tail_sub_t *s = r->subs; s; s = s->next)
			if (sub_active(s)) {
				n++;
				break;
			}
	if (n == 0)
		return;
	{
		/* On failure the old array stays valid (and owned by c). */
		tail_run_t **grown = realloc(c->inflight, n * sizeof(*c->inflight));

		if (grown)
			c->inflight = grown;
		argv = calloc(6 + 2 * n, sizeof(*argv));
		argvlen = calloc(6 + 2 * n, sizeof(*argvlen));
		ids = calloc(n, sizeof(*ids));
		if (!grown) {
			free(ids);
			ids = NULL;
		}
	}
	if (!argv || !argvlen || !ids) {
		free(argv);
		free(argvlen);
		free(ids);
		event_add(c->ev_retry, &(struct timeval){ 0, 100 * 1000 });
		return;
	}
	snprintf(count, sizeof(count), "%ld", t->batch);
	snprintf(block, sizeof(block), "%ld", t->block_ms);
	argv[argc++] = "XREAD";
	argv[argc++] = "COUNT";
	argv[argc++] = count;
	argv[argc++] = "BLOCK";
	argv[argc++] = block;
	argv[argc++] = "STREAMS";
	c->ninflight = 0;
	for (r = c->runs; r; r = r->next) {
		dispatcher_sid_t from;

		if (!run_from(r, &from))
			continue;
		r->inflight = 1;
		r->inflight_from = from;
		snprintf(ids[c->ninflight], sizeof(ids[0]), "%" PRIu64 "-%" PRIu64, from.ms, from.seq);
		c->inflight[c->ninflight++] = r;
	}
	for (size_t i = 0; i < c->ninflight; i++)
		argv[argc++] = c->inflight[i]->key;
	for (size_t i = 0; i < c->ninflight; i++)
		argv[argc++] = ids[i];
	for (size_t i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);
	if (dispatcher_rconn_cmd(c->rc, on_xread, c, (int)argc, argv, argvlen) == 0) {
		c->reading = 1;
		c->dirty = 0;
		c->unblock_sent = 0;
		rn_counter_add(t->c_reads, 1);
	} else {
		for (size_t i = 0; i < c->ninflight; i++)
			c->inflight[i]->inflight = 0;
		c->ninflight = 0;
	}
	free(argv);
	free(argvlen);
	free(ids);
}

/* 1 when line is a result or error envelope: the run's last line. */
static int line_terminal(const char *line, size_t len)
{
	json_t *o;
	const char *type;
	int term = 0;

	/* Most lines are logs and steps: skip the parse unless the line can
	 * be a result or an error at all.  The worker publishes the agent's
	 * bytes as they are, so the type may be spelled with \u escapes
	 * ("\u0072esult"): any escape means the line must be parsed. */
	if (!memmem(line, len, "\"result\"", 8) && !memmem(line, len, "\"error\"", 7) &&
	    !memmem(line, len, "\\u", 2))
		return 0;
	o = json_loadb(line, len, 0, NULL);
	if (!o)
		return 0;
	type = json_string_value(json_object_get(o, "type"));
	if (type && (strcmp(type, "result") == 0 || strcmp(type, "error") == 0))
		term = 1;
	json_decref(o);
	return term;
}

static void deliver(tail_run_t *run, const redisReply *entries)
{
	dispatcher_tail_t *t = run->t;
	size_t n = entries->elements;
	dispatcher_sid_t *sids;
	const redisReply **lines;
	int *term;

	if (n == 0)
		return;
	sids = calloc(n, sizeof(*sids));
	lines = calloc(n, sizeof(*lines));
	term = calloc(n, sizeof(*term));
	if (!sids || !lines || !term)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const redisReply *e = entries->element[i], *f;

		if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
		    e->element[0]->type != REDIS_REPLY_STRING ||
		    dispatcher_sid_parse(e->element[0]->str, &sids[i]) < 0) {
			/* Never happens with a real stream; keep the order by stopping here. */
			n = i;
			break;
		}
		f = e->element[1];
		for (size_t j = 0; f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements; j += 2) {
			if (f->element[j]->type == REDIS_REPLY_STRING && strcmp(f->element[j]->str, "line") == 0 &&
			    f->element[j + 1]->type == REDIS_REPLY_STRING) {
				lines[i] = f->element[j + 1];
				term[i] = line_terminal(lines[i]->str, lines[i]->len);
				break;
			}
		}
	}
	rn_counter_add(t->c_entries, n);
	for (dispatcher_tail_sub_t *s = run->subs; s; s = s->next) {
		if (!sub_active(s) || dispatcher_sid_cmp(s->cursor, run->inflight_from) < 0)
			continue;
		for (size_t i = 0; i < n && sub_active(s); i++) {
			if (dispatcher_sid_cmp(sids[i], s->cursor) <= 0)
				continue;
			s->cursor = sids[i];
			if (!lines[i])
				continue; /* an entry without a line: nothing to show */
			s->cb(s->arg, entries->element[i]->element[0]->str, lines[i]->str, lines[i]->len, term[i]);
			if (term[i])
				break;
		}
	}
out:
	free(sids);
	free(lines);
	free(term);
}

static void on_xread(redisReply *r, void *arg)
{
	tail_conn_t *c = arg;
	dispatcher_tail_t *t = c->t;
	size_t pos = 0;

	c->reading = 0;
	if (r && r->type == REDIS_REPLY_ERROR)
		rn_log_error(NULL, "tail_read_failed", "%s: %.200s", c->name, r->str);
	if (r && r->type == REDIS_REPLY_ARRAY) {
		t->depth++;
		for (size_t i = 0; i < r->elements; i++) {
			const redisReply *kv = r->element[i];

			if (kv->type != REDIS_REPLY_ARRAY || kv->elements != 2 ||
			    kv->element[0]->type != REDIS_REPLY_STRING ||
			    kv->element[1]->type != REDIS_REPLY_ARRAY)
				continue;
			/* Redis answers in the order we asked: search onwards. */
			for (size_t k = 0; k < c->ninflight; k++) {
				tail_run_t *run = c->inflight[(pos + k) % c->ninflight];

				if (strcmp(run->key, kv->element[0]->str) == 0) {
					pos = (pos + k + 1) % c->ninflight;
					deliver(run, kv->element[1]);
					break;
				}
			}
		}
		t->depth--;
	}
	for (size_t i = 0; i < c->ninflight; i++) {
		tail_run_t *run = c->inflight[i];

		run->inflight = 0;
		run_gc(run);
	}
	c->ninflight = 0;
	if (!r)
		return; /* connection lost: re-armed when it is back */
	if (r->type == REDIS_REPLY_ERROR) {
		/* Do not spin on a persistent error (e.g. a key of the wrong type). */
		event_add(c->ev_retry, &(struct timeval){ 1, 0 });
		return;
	}
	arm(c);
}

/*
 * On a cluster: one run's stream read without blocking, from its callers'
 * smallest cursor, when the run is attached, woken (wake.c), polled, or a
 * caller resumes.  A wake-up while a read is out asks for one more read
 * after it (the entries may have come after the read ran).
 */
static void on_cread(redisReply *r, void *arg);

static void cread(tail_run_t *run)
{
	dispatcher_tail_t *t = run->t;
	dispatcher_sid_t from;
	char id[48], count[24];

	if (run->inflight) {
		run->again = 1;
		return;
	}
	if (!run_from(run, &from))
		return;
	snprintf(id, sizeof(id), "%" PRIu64 "-%" PRIu64, from.ms, from.seq);
	snprintf(count, sizeof(count), "%ld", t->batch);
	const char *argv[] = { "XREAD", "COUNT", count, "STREAMS", run->key, id };

	/* Redis down: the poll tries again. */
	if (dispatcher_rroute_cmd(t->rr, on_cread, run, 6, argv, NULL) == 0) {
		run->inflight = 1;
		run->inflight_from = from;
		run->again = 0;
		rn_counter_add(t->c_reads, 1);
	}
}

static void on_cread(redisReply *r, void *arg)
{
	tail_run_t *run = arg;
	dispatcher_tail_t *t = run->t;
	int more = 0;

	run->inflight = 0;
	if (r && r->type == REDIS_REPLY_ERROR)
		rn_log_error(run->run_id, "tail_read_failed", "%.200s", r->str);
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
		const redisReply *kv = r->element[0];

		if (kv->type == REDIS_REPLY_ARRAY && kv->elements == 2 && kv->element[1]->type == REDIS_REPLY_ARRAY) {
			t->depth++;
			deliver(run, kv->element[1]);
			t->depth--;
			more = kv->element[1]->elements >= (size_t)t->batch;
		}
	}
	/* A lost connection: the read may be sent again (it writes nothing). */
	if (!t->freeing && (more || run->again || !r))
		cread(run);
	run_gc(run);
}

static void on_wake(void *arg)
{
	tail_run_t *run = arg;

	rn_counter_add(run->t->c_wakes, 1);
	run->woken_ms = rn_mono_ms();
	cread(run);
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_tail_t *t = arg;

	(void)fd;
	(void)what;
	int64_t now = rn_mono_ms();

	dispatcher_wake_sync(t->wake);
	/* A run woken within the period has a working channel: its poll can
	 * wait for the next one. */
	for (tail_run_t *r = t->cruns; r; r = r->next)
		if (now - r->woken_ms >= DISPATCHER_TAIL_POLL_MS)
			cread(r);
}

static void on_client_id(redisReply *r, void *arg)
{
	tail_conn_t *c = arg;

	if (r && r->type == REDIS_REPLY_INTEGER) {
		c->client_id = r->integer;
		c->have_id = 1;
		if (c->dirty)
			kick(c);
	}
}

static void on_detect(redisReply *r, void *arg)
{
	dispatcher_tail_t *t = arg;

	t->detecting = 0;
	if (!r || t->freeing)
		return; /* lost: the next connection asks again */
	if (r->type == REDIS_REPLY_ARRAY) {
		event_active(t->ev_switch, EV_TIMEOUT, 0);
		return;
	}
	t->unknown = 0; /* "cluster support disabled": standalone */
	for (int i = 0; i < t->nconns; i++)
		arm(&t->conns[i]);
}

static void on_conn_state(dispatcher_rconn_t *rc, int up, void *arg)
{
	tail_conn_t *c = arg;
	dispatcher_tail_t *t = c->t;
	const char *argv[] = { "CLIENT", "ID" };
	const char *slots[] = { "CLUSTER", "SLOTS" };

	(void)rc;
	c->have_id = 0;
	c->reading = 0;
	c->unblock_sent = 0;
	rn_gauge_add(t->g_conns, up ? 1 : -1);
	if (!up)
		return;
	dispatcher_rconn_cmd(c->rc, on_client_id, c, 2, argv, NULL);
	if (t->unknown) {
		if (!t->detecting && dispatcher_rconn_cmd(c->rc, on_detect, t, 2, slots, NULL) == 0)
			t->detecting = 1;
		return;
	}
	arm(c);
}

/*
 * The UNBLOCK travels on the command connection, the XREAD on the tail's
 * own: Redis may run the UNBLOCK before the XREAD it should interrupt has
 * blocked (it was just sent).  Then nothing was unblocked and the new
 * caller would wait a whole block_ms: try again shortly, as long as that
 * read is still out and still lacks the caller (dirty; arm() clears it).
 */
static void on_unblocked(int unblocked, void *arg)
{
	tail_conn_t *c = arg;

	if (unblocked || !c->reading || !c->dirty)
		return;
	c->unblock_sent = 0;
	event_add(c->ev_retry, &(struct timeval){ 0, 5 * 1000 });
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
	tail_conn_t *c = arg;

	(void)fd;
	(void)what;
	if (!c->reading) {
		arm(c);
		return;
	}
	if (c->dirty && c->have_id && !c->unblock_sent) {
		if (dispatcher_store_unblock(c->t->store, c->client_id, on_unblocked, c) == 0) {
			c->unblock_sent = 1;
			rn_counter_add(c->t->c_unblocks, 1);
		}
	}
}

/* The tail pool's series, in /metrics order. */
static const rn_metric_def_t tail_metrics[] = {
	{ offsetof(dispatcher_tail_t, g_callers), RN_METRIC_GAUGE, "runnel_dispatcher_tail_callers",
	  "Callers following a run's stream (events and /stream)" },
	{ offsetof(dispatcher_tail_t, g_runs), RN_METRIC_GAUGE, "runnel_dispatcher_tail_runs", "Distinct runs being tailed" },
	{ offsetof(dispatcher_tail_t, g_conns), RN_METRIC_GAUGE, "runnel_dispatcher_tail_connections",
	  "Tail pool Redis connections that are up (on a Redis Cluster: its sharded pub/sub connections)" },
	{ offsetof(dispatcher_tail_t, c_reads), RN_METRIC_COUNTER, "runnel_dispatcher_tail_reads_total",
	  "XREAD commands issued by the tail pool" },
	{ offsetof(dispatcher_tail_t, c_entries), RN_METRIC_COUNTER, "runnel_dispatcher_tail_entries_total",
	  "Stream entries read by the tail pool" },
	{ offsetof(dispatcher_tail_t, c_unblocks), RN_METRIC_COUNTER, "runnel_dispatcher_tail_unblocks_total",
	  "CLIENT UNBLOCKs sent to re-arm a tail connection" },
	{ offsetof(dispatcher_tail_t, c_wakes), RN_METRIC_COUNTER, "runnel_dispatcher_tail_wakeups_total",
	  "Sharded pub/sub wake-ups received by the tail pool (Redis Cluster)" },
};

/* The cluster's reader: its own router, the wake-ups, the slow poll. */
static int tail_cluster_init(dispatcher_tail_t *t, const rn_redis_url_t *url)
{
	struct timeval poll = { DISPATCHER_TAIL_POLL_MS / 1000, (DISPATCHER_TAIL_POLL_MS % 1000) * 1000 };

	t->rr = dispatcher_rroute_new(t->base, url, 1, "runnel-dispatcher-tail", NULL, NULL);
	if (!t->rr)
		return -1;
	t->wake = dispatcher_wake_new(t->base, url, t->rr, t->g_conns);
	t->ev_poll = event_new(t->base, -1, EV_PERSIST, on_poll, t);
	if (!t->wake || !t->ev_poll || event_add(t->ev_poll, &poll) < 0)
		return -1;
	return 0;
}

static tail_run_t *cluster_run_wake(dispatcher_tail_t *t, tail_run_t *run);

/* The URL turned out to name a cluster: the blocking pool goes, its runs
 * are read the cluster's way from now on. */
static void on_switch(evutil_socket_t fd, short what, void *arg)
{
	dispatcher_tail_t *t = arg;
	tail_run_t *moved = NULL;

	(void)fd;
	(void)what;
	rn_log_info(NULL, "redis_cluster", "the tails' Redis is a cluster: reading each run when woken");
	t->unknown = 0;
	if (tail_cluster_init(t, &t->url) < 0)
		rn_log_error(NULL, "tail_setup_failed", "cannot set up the cluster's tail connections");
	for (int i = 0; i < t->nconns; i++) {
		tail_conn_t *c = &t->conns[i];

		if (dispatcher_rconn_up(c->rc))
			rn_gauge_add(t->g_conns, -1);
		/* Reads in flight get NULL (no delivery); runs stay. */
		dispatcher_rconn_free(c->rc);
		c->rc = NULL;
		while (c->runs) {
			tail_run_t *r = c->runs;

			RN_LIST_UNLINK(c->runs, r);
			c->nruns--;
			r->conn = NULL;
			r->inflight = 0;
			RN_LIST_PUSH(moved, r);
		}
		free(c->inflight);
		event_free(c->ev_kick);
		event_free(c->ev_retry);
	}
	free(t->conns);
	t->conns = NULL;
	t->nconns = 0;
	while (moved) {
		tail_run_t *r = moved;

		RN_LIST_UNLINK(moved, r);
		RN_LIST_PUSH(t->cruns, r);
		if (t->wake)
			cluster_run_wake(t, r);
		if (t->rr)
			cread(r);
	}
}

dispatcher_tail_t *dispatcher_tail_new(struct event_base *base, const rn_redis_url_t *url, int cluster,
                                       const char *prefix, int nconns, long block_ms,
                                       long batch, dispatcher_store_t *store,
                                       rn_metrics_t *metrics)
{
	dispatcher_tail_t *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->base = base;
	snprintf(t->prefix, sizeof(t->prefix), "%s", prefix);
	t->block_ms = block_ms;
	t->batch = batch;
	t->store = store;
	rn_metrics_register(metrics, t, tail_metrics, sizeof(tail_metrics) / sizeof(tail_metrics[0]));
	if (cluster == 1) {
		if (tail_cluster_init(t, url) < 0) {
			dispatcher_tail_free(t);
			return NULL;
		}
		return t;
	}
	if (cluster == -1) {
		t->unknown = 1;
		t->url = *url;
		t->ev_switch = event_new(base, -1, 0, on_switch, t);
		if (!t->ev_switch) {
			free(t);
			return NULL;
		}
	}
	t->conns = calloc((size_t)nconns, sizeof(*t->conns));
	if (!t->conns) {
		free(t);
		return NULL;
	}
	t->nconns = nconns;
	for (int i = 0; i < nconns; i++) {
		tail_conn_t *c = &t->conns[i];

		c->t = t;
		c->idx = i;
		snprintf(c->name, sizeof(c->name), "runnel-dispatcher-tail-%d", i);
		c->ev_kick = event_new(base, -1, 0, on_kick, c);
		c->ev_retry = evtimer_new(base, on_kick, c);
		c->rc = dispatcher_rconn_new(base, url, c->name, on_conn_state, c);
		if (!c->ev_kick || !c->ev_retry || !c->rc) {
			dispatcher_tail_free(t);
			return NULL;
		}
	}
	return t;
}

void dispatcher_tail_free(dispatcher_tail_t *t)
{
	if (!t)
		return;
	t->freeing = 1;
	/* Reads in flight get NULL now: no delivery, no new read. */
	dispatcher_rroute_free(t->rr);
	while (t->cruns)
		run_free(t->cruns);
	dispatcher_wake_free(t->wake);
	if (t->ev_poll)
		event_free(t->ev_poll);
	if (t->ev_switch)
		event_free(t->ev_switch);
	explicit_bzero(&t->url, sizeof(t->url));
	for (int i = 0; i < t->nconns; i++) {
		tail_conn_t *c = &t->conns[i];

		/* Pending XREAD callbacks run now with NULL: no delivery. */
		dispatcher_rconn_free(c->rc);
		c->rc = NULL;
		while (c->runs)
			run_free(c->runs);
		free(c->inflight);
		if (c->ev_kick)
			event_free(c->ev_kick);
		if (c->ev_retry)
			event_free(c->ev_retry);
	}
	free(t->conns);
	free(t);
}

/* Subscribes the run's wake-up channel: run, or NULL. */
static tail_run_t *cluster_run_wake(dispatcher_tail_t *t, tail_run_t *run)
{
	char chan[PROTO_KEY_MAX];

	if (proto_key(chan, sizeof(chan), t->prefix, run->run_id, PROTO_KEY_WAKE) < 0)
		return NULL;
	run->wake = dispatcher_wake_add(t->wake, chan, on_wake, run);
	return run->wake ? run : NULL;
}

static tail_run_t *cluster_run_new(dispatcher_tail_t *t, const char *run_id)
{
	tail_run_t *run = calloc(1, sizeof(*run));

	if (!run)
		return NULL;
	snprintf(run->run_id, sizeof(run->run_id), "%s", run_id);
	if (proto_key(run->key, sizeof(run->key), t->prefix, run_id, PROTO_KEY_OUT) < 0) {
		free(run);
		return NULL;
	}
	run->t = t;
	if (!cluster_run_wake(t, run)) {
		free(run);
		return NULL;
	}
	RN_LIST_PUSH(t->cruns, run);
	rn_gauge_add(t->g_runs, 1);
	return run;
}

dispatcher_tail_sub_t *dispatcher_tail_attach(dispatcher_tail_t *t, const char *run_id,
                                              dispatcher_sid_t after,
                                              dispatcher_tail_entry_cb cb, void *arg)
{
	tail_run_t *run = NULL;
	tail_conn_t *c;
	dispatcher_tail_sub_t *s;

	if (!proto_run_id_valid(run_id))
		return NULL;
	for (int i = 0; i < t->nconns && !run; i++)
		for (tail_run_t *r = t->conns[i].runs; r; r = r->next)
			if (strcmp(r->run_id, run_id) == 0) {
				run = r;
				break;
			}
	for (tail_run_t *r = t->cruns; r && !run; r = r->next)
		if (strcmp(r->run_id, run_id) == 0)
			run = r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (!run && t->rr) {
		run = cluster_run_new(t, run_id);
		if (!run) {
			free(s);
			return NULL;
		}
	}
	if (!run) {
		c = &t->conns[0];
		for (int i = 1; i < t->nconns; i++)
			if (t->conns[i].nruns < c->nruns)
				c = &t->conns[i];
		run = calloc(1, sizeof(*run));
		if (!run) {
			free(s);
			return NULL;
		}
		snprintf(run->run_id, sizeof(run->run_id), "%s", run_id);
		proto_key(run->key, sizeof(run->key), t->prefix, run_id, PROTO_KEY_OUT);
		run->t = t;
		run->conn = c;
		RN_LIST_PUSH(c->runs, run);
		c->nruns++;
		rn_gauge_add(t->g_runs, 1);
	}
	c = run->conn;
	s->run = run;
	s->cursor = after;
	s->cb = cb;
	s->arg = arg;
	RN_LIST_PUSH(run->subs, s);
	run->nsubs++;
	t->nsubs++;
	rn_gauge_add(t->g_callers, 1);
	if (!c) {
		/* A read in flight from after this cursor does not serve it:
		 * cread() asks for one more then. */
		cread(run);
		return s;
	}
	/* The read in flight covers this caller only if it reads from at or
	 * before the caller's cursor; otherwise interrupt it. */
	if (!run->inflight || dispatcher_sid_cmp(after, run->inflight_from) < 0) {
		c->dirty = 1;
		kick(c);
	}
	return s;
}

void dispatcher_tail_detach(dispatcher_tail_sub_t *s)
{
	tail_run_t *run;
	dispatcher_tail_t *t;

	if (!s || s->dead)
		return;
	run = s->run;
	t = run->t;
	s->dead = 1;
	run->nsubs--;
	t->nsubs--;
	rn_gauge_add(t->g_callers, -1);
	run_gc(run);
}

void dispatcher_tail_pause(dispatcher_tail_sub_t *s, int paused)
{
	if (s->dead || s->paused == paused)
		return;
	s->paused = paused;
	if (!paused && !s->run->conn) {
		cread(s->run);
	} else if (!paused) {
		s->run->conn->dirty = 1;
		kick(s->run->conn);
	}
}

size_t dispatcher_tail_count(const dispatcher_tail_t *t)
{
	return t->nsubs;
}
