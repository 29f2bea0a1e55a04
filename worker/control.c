/*
 * worker/control.c - the control-stream watcher (see control.h).
 */
#include "worker/control.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/bg.h"
#include "common/log.h"
#include "common/redis.h"
#include "common/util.h"
#include "proto/keys.h"
#include "worker/publish.h"

/* A changed set of runs interrupts the block (CLIENT UNBLOCK), so this
 * only bounds how long one XREAD stays armed. */
#define CTL_BLOCK_MS 2000
/* Where CLIENT ID / CLIENT UNBLOCK are refused (an ACL), short blocks. */
#define CTL_SHORT_BLOCK_MS 200
/* No reply this long after the block ended: the connection is dead. */
#define CTL_REPLY_SLACK_MS 10000
#define CTL_UNBLOCK_TRIES  20
/* On a Redis Cluster, how often each watched :ctl stream is read (a new
 * run is read at once). */
#define CTL_CLUSTER_POLL_MS 250

typedef struct watch {
	char run_id[PROTO_RUN_ID_MAX + 1];
	char key[PROTO_KEY_MAX];
	char last_id[48];
	int used;
} watch_t;

struct worker_control {
	const worker_config_t *cfg;
	worker_control_cb cb;
	void *arg;
	rn_bg_t bg; /* the control thread; mu guards what follows */
	size_t max;
	watch_t *w; /* max entries */
	size_t nused;
	int dirty;      /* the set changed since the XREAD in flight was armed */
	int no_unblock; /* control thread only: CLIENT UNBLOCK is refused here */
	int wake_fd;    /* eventfd: written when dirty or stop is set */
};

static void wake(worker_control_t *wc)
{
	uint64_t one = 1;
	ssize_t w = write(wc->wake_fd, &one, sizeof(one));
	(void)w;
}

int worker_control_watch(worker_control_t *wc, const char *run_id)
{
	int ret = -1;
	pthread_mutex_lock(&wc->bg.mu);
	for (size_t i = 0; i < wc->max; i++) {
		if (wc->w[i].used)
			continue;
		if (proto_key(wc->w[i].key, sizeof(wc->w[i].key), wc->cfg->key_prefix,
		              run_id, PROTO_KEY_CTL) < 0)
			break;
		snprintf(wc->w[i].run_id, sizeof(wc->w[i].run_id), "%s", run_id);
		snprintf(wc->w[i].last_id, sizeof(wc->w[i].last_id), "0-0");
		wc->w[i].used = 1;
		wc->nused++;
		wc->dirty = 1;
		ret = 0;
		break;
	}
	pthread_cond_signal(&wc->bg.cv);
	pthread_mutex_unlock(&wc->bg.mu);
	if (ret == 0)
		wake(wc);
	return ret;
}

void worker_control_unwatch(worker_control_t *wc, const char *run_id)
{
	pthread_mutex_lock(&wc->bg.mu);
	for (size_t i = 0; i < wc->max; i++) {
		if (wc->w[i].used && !strcmp(wc->w[i].run_id, run_id)) {
			wc->w[i].used = 0;
			wc->nused--;
			break;
		}
	}
	pthread_mutex_unlock(&wc->bg.mu);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Handles one stream of an XREAD reply: [key, [[id, [f, v, ...]], ...]]. */
static void handle_stream(worker_control_t *wc, const redisReply *s)
{
	if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
	    s->element[0]->type != REDIS_REPLY_STRING || s->element[1]->type != REDIS_REPLY_ARRAY)
		return;
	const char *key = s->element[0]->str;
	const redisReply *entries = s->element[1];
	for (size_t i = 0; i < entries->elements; i++) {
		const redisReply *e = entries->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
		    e->element[0]->type != REDIS_REPLY_STRING)
			continue;
		char run_id[PROTO_RUN_ID_MAX + 1] = "";
		int live = 0;
		pthread_mutex_lock(&wc->bg.mu);
		for (size_t j = 0; j < wc->max; j++) {
			if (wc->w[j].used && !strcmp(wc->w[j].key, key)) {
				snprintf(wc->w[j].last_id, sizeof(wc->w[j].last_id), "%s", e->element[0]->str);
				snprintf(run_id, sizeof(run_id), "%s", wc->w[j].run_id);
				live = 1;
				break;
			}
		}
		pthread_mutex_unlock(&wc->bg.mu);
		if (!live)
			return;
		const redisReply *f = e->element[1];
		for (size_t k = 0; f->type == REDIS_REPLY_ARRAY && k + 1 < f->elements; k += 2) {
			if (f->element[k]->type != REDIS_REPLY_STRING || strcmp(f->element[k]->str, "msg") ||
			    f->element[k + 1]->type != REDIS_REPLY_STRING)
				continue;
			proto_ctl_t ctl;
			char err[128];
			if (proto_ctl_parse(f->element[k + 1]->str, f->element[k + 1]->len, &ctl, err, sizeof(err)) < 0) {
				rn_log_warn(run_id, "control_invalid", "ignored a control message: %s", err);
				continue;
			}
			wc->cb(run_id, &ctl, wc->arg);
		}
	}
}

/* CLIENT UNBLOCK on the side connection: 1 unblocked, 0 not blocked, -1
 * connection error, -2 refused by the server. */
static int unblock(const worker_control_t *wc, rn_rcluster_t **u, long long cid)
{
	if (!*u) {
		char err[256];
		*u = worker_redis_open(&wc->cfg->redis, 1000, 10000, err, sizeof(err));
		if (!*u)
			return -1;
	}
	redisReply *r = rn_rcluster_command(*u, 0, "CLIENT UNBLOCK %lld", cid);
	if (r && r->type == REDIS_REPLY_ERROR) {
		freeReplyObject(r);
		return -2;
	}
	if (!r || r->type != REDIS_REPLY_INTEGER) {
		if (r)
			freeReplyObject(r);
		rn_rcluster_free(*u);
		*u = NULL;
		return -1;
	}
	int ret = r->integer == 1;
	freeReplyObject(r);
	return ret;
}

/*
 * Sends the XREAD and waits for its reply.  When a run is added (or the
 * watcher stops) meanwhile, the block is ended at once with CLIENT UNBLOCK
 * from a second connection, so the caller re-arms with the new set: a
 * cancel for a run claimed a moment ago is not held up by the old block.
 * Returns the reply, or NULL when the connection failed.
 */
static redisReply *xread(worker_control_t *wc, redisContext *c, rn_rcluster_t **u,
                         long long cid, int ac, const char **argv)
{
	if (redisAppendCommandArgv(c, ac, argv, NULL) != REDIS_OK)
		return NULL;
	int done = 0;
	while (!done)
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return NULL;
	int want = 0, tries = 0;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		void *reply = NULL;
		if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
			return NULL;
		if (reply)
			return reply;
		if (want && cid >= 0 && tries < CTL_UNBLOCK_TRIES) {
			/* 0: the XREAD is not blocked yet (or just answered); try again. */
			int ub = unblock(wc, u, cid);
			tries++;
			if (ub == -2)
				wc->no_unblock = 1;
			if (ub != 0)
				tries = CTL_UNBLOCK_TRIES;
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long waited = (now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000L;
		long left = CTL_BLOCK_MS + CTL_REPLY_SLACK_MS - waited;
		if (left <= 0)
			return NULL;
		int timeout = want && tries < CTL_UNBLOCK_TRIES ? 5 : (int)left;
		struct pollfd p[2] = { { c->fd, POLLIN, 0 }, { wc->wake_fd, POLLIN, 0 } };
		int pr = poll(p, 2, timeout);
		if (pr < 0 && errno != EINTR)
			return NULL;
		if (pr > 0 && p[1].revents) {
			uint64_t v;
			ssize_t rr = read(wc->wake_fd, &v, sizeof(v));
			(void)rr;
			pthread_mutex_lock(&wc->bg.mu);
			if ((wc->dirty || wc->bg.stop) && !want) {
				want = 1;
				tries = 0;
			}
			pthread_mutex_unlock(&wc->bg.mu);
		}
		if (pr > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) && redisBufferRead(c) != REDIS_OK)
			return NULL;
	}
}

/*
 * A cluster refuses one XREAD over streams of different slots, so there
 * each watched :ctl stream is read on its own, without blocking, in one
 * pipeline (a batch per primary), and the loop waits CTL_CLUSTER_POLL_MS
 * or until a run is added.  0, or -1 when a read failed (the handle
 * reconnects by itself; the caller backs off).
 */
static int poll_cluster(worker_control_t *wc, rn_rcluster_t *h, char (*keys)[PROTO_KEY_MAX],
                        char (*ids)[48], size_t n)
{
	size_t sent = 0;
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		const char *argv[] = { "XREAD", "COUNT", "16", "STREAMS", keys[i], ids[i] };
		if (rn_rcluster_append_argv(h, RN_RCLUSTER_IDEMPOTENT, 6, argv, NULL) == 0)
			sent++;
	}
	for (size_t i = 0; i < sent; i++) {
		redisReply *r = NULL;
		if (rn_rcluster_get_reply(h, &r) < 0 || r->type == REDIS_REPLY_ERROR) {
			if (ret == 0)
				rn_log_warn(NULL, "control_read", "%.160s",
				            r ? r->str : rn_rcluster_errstr(h));
			ret = -1;
		}
		for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++)
			handle_stream(wc, r->element[j]);
		if (r)
			freeReplyObject(r);
	}
	struct pollfd p = { wc->wake_fd, POLLIN, 0 };
	if (poll(&p, 1, CTL_CLUSTER_POLL_MS) > 0) {
		uint64_t v;
		ssize_t rr = read(wc->wake_fd, &v, sizeof(v));
		(void)rr;
	}
	return ret;
}

static void *control_main(void *arg)
{
	worker_control_t *wc = arg;
	rn_redis_conn_t conn;
	rn_rcluster_t *h = NULL, *u = NULL; /* h: conn's, while it lasts */
	redisContext *c = NULL;             /* h's connection (standalone) */
	long long cid = -1;                 /* CLIENT ID of c, for CLIENT UNBLOCK */
	int have_cid = 0;
	unsigned attempt = 0; /* cluster polls failed in a row */
	rn_redis_conn_init(&conn, &wc->cfg->redis, "control", NULL, 1000);
	/* argv: XREAD COUNT 16 BLOCK ms STREAMS k1..kn id1..idn */
	size_t argc_max = 6 + 2 * wc->max;
	const char **argv = calloc(argc_max, sizeof(*argv));
	char(*keys)[PROTO_KEY_MAX] = calloc(wc->max, sizeof(*keys));
	char(*ids)[48] = calloc(wc->max, sizeof(*ids));
	char block[16];
	if (!argv || !keys || !ids) {
		rn_log_error(NULL, "control", "out of memory: control messages are not watched");
		goto out;
	}

	for (;;) {
		size_t n = 0;
		pthread_mutex_lock(&wc->bg.mu);
		while (!wc->bg.stop && wc->nused == 0)
			rn_bg_wait_ms(&wc->bg, 1000);
		if (wc->bg.stop) {
			pthread_mutex_unlock(&wc->bg.mu);
			break;
		}
		for (size_t i = 0; i < wc->max; i++) {
			if (!wc->w[i].used)
				continue;
			memcpy(keys[n], wc->w[i].key, sizeof(keys[n]));
			memcpy(ids[n], wc->w[i].last_id, sizeof(ids[n]));
			n++;
		}
		wc->dirty = 0;
		pthread_mutex_unlock(&wc->bg.mu);

		if (!h) {
			long wait = 0;
			char err[256];
			h = rn_redis_conn_get(&conn, &wait);
			if (!h) {
				sleep_ms(wait);
				continue;
			}
			if (!rn_rcluster_is_cluster(h) && !(c = rn_rcluster_slot_context(h, 0, err, sizeof(err)))) {
				rn_redis_conn_failed(&conn, "connect", err);
				h = NULL;
				continue;
			}
		}
		if (rn_rcluster_is_cluster(h)) {
			if (poll_cluster(wc, h, keys, ids, n) < 0)
				sleep_ms(rn_backoff_ms(attempt++, RN_REDIS_BACKOFF_MIN_MS, RN_REDIS_BACKOFF_MAX_MS));
			else
				attempt = 0;
			continue;
		}
		if (!have_cid) {
			have_cid = 1;
			redisReply *ir = redisCommand(c, "CLIENT ID");
			cid = ir && ir->type == REDIS_REPLY_INTEGER ? ir->integer : -1;
			if (ir)
				freeReplyObject(ir);
		}
		size_t ac = 0;
		argv[ac++] = "XREAD";
		argv[ac++] = "COUNT";
		argv[ac++] = "16";
		argv[ac++] = "BLOCK";
		snprintf(block, sizeof(block), "%d",
		         cid < 0 || wc->no_unblock ? CTL_SHORT_BLOCK_MS : CTL_BLOCK_MS);
		argv[ac++] = block;
		argv[ac++] = "STREAMS";
		for (size_t i = 0; i < n; i++)
			argv[ac++] = keys[i];
		for (size_t i = 0; i < n; i++)
			argv[ac++] = ids[i];
		redisReply *r = xread(wc, c, &u, cid, (int)ac, argv);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			char err[256];
			snprintf(err, sizeof(err), "%.160s", r ? r->str : c->errstr[0] ? c->errstr
			                                                               : "connection lost");
			if (r)
				freeReplyObject(r);
			rn_redis_conn_failed(&conn, "read", err);
			h = NULL;
			c = NULL;
			cid = -1;
			have_cid = 0;
			continue;
		}
		for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
			handle_stream(wc, r->element[i]);
		freeReplyObject(r);
	}
out:
	rn_redis_conn_close(&conn);
	rn_rcluster_free(u);
	free(argv);
	free(keys);
	free(ids);
	return NULL;
}

worker_control_t *worker_control_start(const worker_config_t *cfg, size_t max_runs,
                                       worker_control_cb cb, void *arg,
                                       char *errstr, size_t errstr_size)
{
	worker_control_t *wc = calloc(1, sizeof(*wc));
	if (!wc || !(wc->w = calloc(max_runs, sizeof(*wc->w)))) {
		free(wc);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	wc->cfg = cfg;
	wc->cb = cb;
	wc->arg = arg;
	wc->max = max_runs;
	wc->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wc->wake_fd < 0) {
		snprintf(errstr, errstr_size, "control: eventfd: %s", strerror(errno));
		free(wc->w);
		free(wc);
		return NULL;
	}
	rn_bg_init(&wc->bg);
	int e = rn_bg_start(&wc->bg, "runnel-control", 512 * 1024, control_main, wc);
	if (e) {
		snprintf(errstr, errstr_size, "control thread: %s", strerror(e));
		rn_bg_destroy(&wc->bg);
		close(wc->wake_fd);
		free(wc->w);
		free(wc);
		return NULL;
	}
	return wc;
}

static void wake_cb(void *wc)
{
	wake(wc);
}

void worker_control_stop(worker_control_t *wc)
{
	if (!wc)
		return;
	/* The wake fd interrupts the thread's blocking read of the streams. */
	rn_bg_stop(&wc->bg, NULL, wake_cb, wc);
	close(wc->wake_fd);
	rn_bg_destroy(&wc->bg);
	free(wc->w);
	free(wc);
}
