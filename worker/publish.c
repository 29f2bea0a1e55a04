/*
 * worker/publish.c - exactly-once, in-order line publishing (see publish.h).
 */
#include "worker/publish.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/redis.h"

/* RUNNEL_REDIS_WAIT_REPLICAS and its timeout: set once at start. */
static int g_wait_replicas, g_wait_timeout_ms;

void worker_pub_set_wait(int replicas, int timeout_ms)
{
	g_wait_replicas = replicas;
	g_wait_timeout_ms = timeout_ms;
}

rn_rcluster_t *worker_redis_open(const rn_redis_url_t *url, int timeout_ms, int command_timeout_ms,
                                 char *errstr, size_t errstr_size)
{
	char why[256];
	rn_rcluster_opts_t o = RN_RCLUSTER_OPTS_INIT;

	o.connect_timeout_ms = timeout_ms;
	o.command_timeout_ms = command_timeout_ms;
	/* The callers retry with their own backoff and stop word: a call
	 * waits out a short cluster hiccup, not a whole failover. */
	o.retry_budget_ms = 3000;
	o.wait_replicas = g_wait_replicas;
	o.wait_timeout_ms = g_wait_timeout_ms;
	rn_rcluster_t *c = rn_rcluster_open(url, &o, why, sizeof(why));

	if (!c) {
		/* A longer message is cut (and ends with "..."), never an error of its own. */
		int n = snprintf(errstr, errstr_size, "redis %s:%d: %s", url->host, url->port, why);
		if (n >= 0 && (size_t)n >= errstr_size && errstr_size > 4)
			memcpy(errstr + errstr_size - 4, "...", 4);
	}
	return c;
}

int worker_pub_init(worker_pub_t *p, const rn_redis_url_t *url, const char *prefix,
                    const char *run_id, int64_t seq_base, const worker_stopword_t *stop)
{
	memset(p, 0, sizeof(*p));
	p->url = url;
	p->seq_base = seq_base;
	p->next_n = 1;
	p->first_n = 1;
	p->stop = stop;
	snprintf(p->run_id, sizeof(p->run_id), "%s", run_id);
	if (proto_key(p->key, sizeof(p->key), prefix, run_id, PROTO_KEY_OUT) < 0)
		return -1;
	p->slot = rn_rcluster_key_slot(p->key, strlen(p->key));
	p->lens = malloc(WORKER_PUB_BATCH_LINES * sizeof(*p->lens));
	if (!p->lens)
		return -1;
	return 0;
}

struct worker_pub_pool {
	pthread_mutex_t mu;
	rn_rcluster_t **idle;
	size_t n, cap;
};

worker_pub_pool_t *worker_pub_pool_new(size_t cap)
{
	worker_pub_pool_t *pool = calloc(1, sizeof(*pool));
	if (!pool || !(pool->idle = calloc(cap ? cap : 1, sizeof(*pool->idle)))) {
		free(pool);
		return NULL;
	}
	pool->cap = cap;
	pthread_mutex_init(&pool->mu, NULL);
	return pool;
}

void worker_pub_pool_free(worker_pub_pool_t *pool)
{
	if (!pool)
		return;
	for (size_t i = 0; i < pool->n; i++)
		rn_rcluster_free(pool->idle[i]);
	pthread_mutex_destroy(&pool->mu);
	free(pool->idle);
	free(pool);
}

/* An idle handle with a connection the server has not closed, or NULL. */
static rn_rcluster_t *pool_take(worker_pub_pool_t *pool)
{
	for (;;) {
		pthread_mutex_lock(&pool->mu);
		rn_rcluster_t *c = pool->n ? pool->idle[--pool->n] : NULL;
		pthread_mutex_unlock(&pool->mu);
		if (!c)
			return NULL;
		if (rn_rcluster_idle_check(c))
			return c;
		rn_rcluster_free(c);
	}
}

static void pool_put(worker_pub_pool_t *pool, rn_rcluster_t *c)
{
	pthread_mutex_lock(&pool->mu);
	if (pool->n < pool->cap) {
		pool->idle[pool->n++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&pool->mu);
	if (c)
		rn_rcluster_free(c);
}

void worker_pub_free(worker_pub_t *p)
{
	/* Nothing pending on it: the next run may use it as it is. */
	if (p->rc && p->pool && !p->inflight && !(p->c && p->c->err))
		pool_put(p->pool, p->rc);
	else if (p->rc)
		rn_rcluster_free(p->rc);
	free(p->buf);
	free(p->lens);
	memset(p, 0, sizeof(*p));
}

int worker_pub_add(worker_pub_t *p, const char *line, size_t len)
{
	/*
	 * A full batch is written first.  It can only still be full when the
	 * worker gave up on Redis (the end of a drain Redis did not let
	 * finish): the run is abandoned to the lost sweep then, and its lines
	 * are dropped rather than grown without bound (lens[] has room for
	 * WORKER_PUB_BATCH_LINES).
	 */
	if (p->dropped || p->n >= WORKER_PUB_BATCH_LINES || p->len >= WORKER_PUB_BATCH_BYTES) {
		if (p->dropped || worker_pub_flush(p) < 0 || p->n >= WORKER_PUB_BATCH_LINES ||
		    p->len >= WORKER_PUB_BATCH_BYTES) {
			p->dropped++;
			return 1;
		}
	}
	if (p->len + len > p->cap) {
		size_t ncap = p->cap ? p->cap : 4096;
		while (ncap < p->len + len)
			ncap *= 2;
		char *nb = realloc(p->buf, ncap);
		if (!nb) {
			/* Out of memory: write what we have, then this line alone. */
			worker_pub_flush(p);
			nb = realloc(p->buf, len > 4096 ? len : 4096);
			if (!nb)
				abort();
			ncap = len > 4096 ? len : 4096;
		}
		p->buf = nb;
		p->cap = ncap;
	}
	memcpy(p->buf + p->len, line, len);
	p->len += len;
	p->lens[p->n++] = (uint32_t)len;
	p->next_n++;
	return p->n >= WORKER_PUB_BATCH_LINES || p->len >= WORKER_PUB_BATCH_BYTES;
}

void worker_pub_backoff(worker_pub_t *p, unsigned attempt)
{
	long ms = rn_backoff_ms(attempt, RN_REDIS_BACKOFF_MIN_MS, RN_REDIS_BACKOFF_MAX_MS);
	while (ms > 0 && !(p->stop && worker_stopword_given_up(p->stop))) {
		long slice = ms > 50 ? 50 : ms;
		struct timespec ts = { 0, slice * 1000000L };
		nanosleep(&ts, NULL);
		ms -= slice;
	}
}

void worker_pub_reset(worker_pub_t *p)
{
	/* The handle stays (its map, its other nodes); the run's node
	 * connection goes, and the map is read again before the next use. */
	if (p->rc)
		rn_rcluster_reset_slot(p->rc, p->slot);
	p->c = NULL;
	p->inflight = 0;
	p->inflight_wait = 0;
}

/*
 * Connects, and returns the connection only once the server has finished
 * loading.  A transaction is all-or-nothing only when MULTI is accepted: if
 * MULTI were refused with LOADING and the load ended a moment later, the
 * XADDs behind it would run one by one, outside any transaction, and the
 * refused ones could never be written below the new stream top.  So no
 * batch is sent before the load is over.
 */
rn_rcluster_t *worker_pub_ctx(worker_pub_t *p)
{
	unsigned attempt = 0;
	if (!p->rc && p->pool)
		p->rc = pool_take(p->pool);
	while (!p->c) {
		char err[256];
		if (p->stop && worker_stopword_given_up(p->stop))
			return NULL;
		if (!p->rc)
			p->rc = worker_redis_open(p->url, 1000, 10000, err, sizeof(err));
		/* Replies may take a while under load, but a dead server must not
		 * hang a run: the handle's command timeout is 10 s. */
		if (p->rc && (p->c = rn_rcluster_slot_context(p->rc, p->slot, err, sizeof(err)))) {
			int loading = rn_redis_loading(p->c);
			if (loading == 0)
				break;
			snprintf(err, sizeof(err), "%s",
			         loading > 0 ? "Redis is loading its dataset" : "connection lost while checking Redis");
			worker_pub_reset(p);
		}
		if (attempt == 0 || attempt % 20 == 0)
			rn_log_warn(p->run_id, "redis_unreachable", "publisher: %s; retrying", err);
		p->retries++;
		worker_pub_backoff(p, attempt++);
	}
	return p->rc;
}

/* A refusal that means "not this node (any more)": the map is behind. */
static int wrong_node(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && r->str &&
	        (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0 ||
	         strncmp(r->str, "CLUSTERDOWN", 11) == 0 || strncmp(r->str, "TRYAGAIN", 8) == 0);
}

/* 1 when the error means the entry is already in the stream. */
static int already_written(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && r->str &&
	        !!strstr(r->str, "equal or smaller than the target stream top item");
}

/* Appends decimal v to buf; returns the new end. */
static char *put_u64(char *buf, uint64_t v)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*buf++ = tmp[--n];
	return buf;
}

/* Appends one RESP bulk string. */
static char *put_bulk(char *buf, const char *s, size_t len)
{
	*buf++ = '$';
	buf = put_u64(buf, len);
	*buf++ = '\r';
	*buf++ = '\n';
	memcpy(buf, s, len);
	buf += len;
	*buf++ = '\r';
	*buf++ = '\n';
	return buf;
}

/*
 * Writes the first count lines as one transaction, MULTI, XADD..., EXEC,
 * encoded here in one buffer (the generic hiredis formatter costs more than
 * the rest of the path).  The transaction makes a batch all-or-nothing: a
 * Redis that finishes loading its AOF in the middle of a plain pipeline
 * would refuse the first XADDs (LOADING) and take the later ones, and the
 * refused lines could then never be written below the new stream top.
 * 0 or -1.
 */
static int send_lines(worker_pub_t *p, size_t count)
{
	redisContext *c = p->c;
	size_t klen = strlen(p->key);
	size_t bytes = 0;
	for (size_t i = 0; i < count; i++)
		bytes += p->lens[i];
	/* Per command: header, XADD, key, id (< 48), "line", the line; then
	 * MULTI, the wake-up (a cluster), EXEC and a WAIT. */
	size_t cap = bytes + count * (klen + 128) + klen + 256;
	int wait_ms = 0;
	int wait_n = p->rc ? rn_rcluster_wait_replicas(p->rc, &wait_ms) : 0;
	char *cmd = malloc(cap);
	if (!cmd)
		return -1;
	char *w = cmd;
	size_t off = 0;
	memcpy(w, "*1\r\n$5\r\nMULTI\r\n", 15);
	w += 15;
	for (size_t i = 0; i < count; i++) {
		char id[48];
		char *e = put_u64(id, (uint64_t)p->seq_base);
		*e++ = '-';
		e = put_u64(e, p->first_n + i);
		memcpy(w, "*5\r\n$4\r\nXADD\r\n", 14);
		w += 14;
		w = put_bulk(w, p->key, klen);
		w = put_bulk(w, id, (size_t)(e - id));
		memcpy(w, "$4\r\nline\r\n", 10);
		w += 10;
		w = put_bulk(w, p->buf + off, p->lens[i]);
		off += p->lens[i];
	}
	/* On a cluster the dispatcher's tails are woken through sharded
	 * pub/sub: the run's channel shares the key's slot, so the wake-up
	 * rides in the same transaction (docs/architecture.md). */
	p->inflight_wake = p->rc && rn_rcluster_is_cluster(p->rc);
	if (p->inflight_wake) {
		memcpy(w, "*3\r\n$8\r\nSPUBLISH\r\n", 18);
		w += 18;
		char chan[PROTO_KEY_MAX + 8]; /* <prefix>:{RUN}:out -> :wake */

		memcpy(chan, p->key, klen - 3);
		memcpy(chan + klen - 3, "wake", 4);
		w = put_bulk(w, chan, klen + 1);
		w = put_bulk(w, "1", 1);
	}
	memcpy(w, "*1\r\n$4\r\nEXEC\r\n", 14);
	w += 14;
	if (wait_n > 0) {
		/* Acknowledged writes: the lines count once wait_n replicas
		 * have them (collect() reads the answer). */
		char a[24], b[24];
		memcpy(w, "*3\r\n$4\r\nWAIT\r\n", 14);
		w += 14;
		w = put_bulk(w, a, (size_t)(put_u64(a, (uint64_t)wait_n) - a));
		w = put_bulk(w, b, (size_t)(put_u64(b, (uint64_t)(wait_ms > 0 ? wait_ms : 1)) - b));
	}
	int rc = redisAppendFormattedCommand(c, cmd, (size_t)(w - cmd));
	free(cmd);
	if (rc != REDIS_OK)
		return -1;
	int done = 0;
	while (!done)
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return -1;
	p->inflight = count;
	p->inflight_wait = wait_n;
	return 0;
}

/*
 * The WAIT answer behind a batch: 0 when it came (the replicas it counts
 * fewer than asked only warn: the lines are on the primary and a replica
 * may be down for long); -1 when the connection broke first - a failover
 * may lose the batch, so it is not counted and goes again (its explicit
 * ids keep the resend exact).
 */
static int collect_wait(worker_pub_t *p, int want)
{
	redisReply *r = NULL;
	if (redisGetReply(p->c, (void **)&r) != REDIS_OK || !r) {
		rn_log_warn(p->run_id, "redis_publish", "connection lost before WAIT answered: %s; sending again",
		            p->c->errstr[0] ? p->c->errstr : "no reply");
		worker_pub_reset(p);
		return -1;
	}
	if (r->type != REDIS_REPLY_INTEGER || r->integer < want) {
		if (p->wait_short++ % 100 == 0)
			rn_log_warn(p->run_id, "redis_wait_short", "WAIT %d: %.120s (%llu batches short so far)", want,
			            r->type == REDIS_REPLY_INTEGER         ? "fewer replicas acknowledged in time"
			                    : r->type == REDIS_REPLY_ERROR ? r->str
			                                                   : "unexpected reply",
			            (unsigned long long)p->wait_short);
	}
	freeReplyObject(r);
	return 0;
}

/*
 * Reads the replies of the transaction in flight (MULTI, one QUEUED per
 * line and for the wake-up when there is one, EXEC) and drops the acknowledged prefix from the batch.  0 when all
 * were acknowledged; -1 when some must be sent again (the connection is
 * reset when it failed).
 */
static int collect(worker_pub_t *p)
{
	redisContext *c = p->c;
	size_t count = p->inflight;
	size_t acked = 0, acked_bytes = 0;
	int failed = 0, moved = 0, want = p->inflight_wait;
	size_t wake = p->inflight_wake ? 1 : 0;

	p->inflight = 0;
	p->inflight_wait = 0;
	for (size_t i = 0; i < count + 2 + wake; i++) {
		redisReply *r = NULL;
		if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
			rn_log_warn(p->run_id, "redis_publish", "connection lost: %s; retrying",
			            c->errstr[0] ? c->errstr : "no reply");
			worker_pub_reset(p);
			return -1;
		}
		if (i == count + 1 + wake) {
			/* EXEC: one reply per XADD (and the SPUBLISH), or an error when aborted. */
			if (r->type == REDIS_REPLY_ARRAY && r->elements == count + wake) {
				for (size_t j = 0; j < count; j++) {
					const redisReply *e = r->element[j];
					if (e->type == REDIS_REPLY_ERROR && !already_written(e)) {
						rn_log_warn(p->run_id, "redis_publish", "XADD refused: %.120s; retrying", e->str);
						failed = 1;
						break;
					}
					acked++;
					acked_bytes += p->lens[j];
				}
			} else {
				if (!failed)
					rn_log_warn(p->run_id, "redis_publish", "batch not written: %.120s; retrying",
					            r->type == REDIS_REPLY_ERROR ? r->str : "transaction aborted");
				failed = 1;
			}
		} else if (r->type == REDIS_REPLY_ERROR && !failed) {
			/* MULTI or a line refused when queued (LOADING, OOM): EXEC aborts. */
			rn_log_warn(p->run_id, "redis_publish", "batch refused: %.120s; retrying", r->str);
			failed = 1;
		}
		if (wrong_node(r))
			moved = 1;
		freeReplyObject(r);
	}
	if (want > 0 && collect_wait(p, want) < 0)
		return -1;
	/* A cluster moved the run's slot (or is electing its primary): the
	 * batch was refused whole; the next attempt goes where the map says. */
	if (moved)
		worker_pub_reset(p);
	if (acked) {
		p->published += acked;
		p->first_n += acked;
		memmove(p->buf, p->buf + acked_bytes, p->len - acked_bytes);
		p->len -= acked_bytes;
		memmove(p->lens, p->lens + acked, (p->n - acked) * sizeof(*p->lens));
		p->n -= acked;
	}
	if (failed)
		return -1;
	/* A big burst grew the buffer: give the memory back. */
	if (p->n == 0 && p->cap > 4 * WORKER_PUB_BATCH_BYTES) {
		free(p->buf);
		p->buf = NULL;
		p->cap = 0;
	}
	return 0;
}

/* One attempt at writing the whole batch.  0 when all is acknowledged. */
static int flush_once(worker_pub_t *p)
{
	if (p->inflight && collect(p) < 0)
		return -1;
	if (p->n == 0)
		return 0;
	if (send_lines(p, p->n) < 0) {
		worker_pub_reset(p);
		return -1;
	}
	return collect(p);
}

int worker_pub_flush(worker_pub_t *p)
{
	unsigned attempt = 0;
	/* After a dropped line nothing more may be written: a later line (or a
	 * terminal one) would leave a gap in the stream. */
	if (p->dropped)
		return -1;
	while (p->n > 0) {
		if (!p->c)
			p->inflight = 0; /* a reset connection lost the replies: resend */
		if (!worker_pub_ctx(p))
			return -1;
		if (flush_once(p) == 0)
			return 0;
		if (p->stop && worker_stopword_given_up(p->stop))
			return -1;
		p->retries++;
		worker_pub_backoff(p, attempt++);
	}
	return 0;
}

int worker_pub_pump(worker_pub_t *p)
{
	if (p->dropped)
		return -1;
	if (p->inflight) {
		if (collect(p) < 0)
			return worker_pub_flush(p);
	}
	if (p->n == 0)
		return 0;
	if (!p->c)
		return worker_pub_flush(p);
	if (send_lines(p, p->n) < 0) {
		worker_pub_reset(p);
		return worker_pub_flush(p);
	}
	return 0;
}

int worker_pub_wait_fd(const worker_pub_t *p)
{
	return p->inflight && p->c ? p->c->fd : -1;
}
