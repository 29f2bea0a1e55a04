/*
 * dispatcher/janitor.c - the dispatcher's background thread: the lost-lease
 * sweep (common/runstate.h), so that a run whose worker died still ends
 * with worker_lost even when no worker is alive, and the Kafka readiness
 * probe (rd_kafka_metadata blocks, so it stays off the loop).  It has its
 * own synchronous Redis connection.
 */
#include "dispatcher/dispatcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bg.h"
#include "common/log.h"
#include "common/redis.h"
#include "common/runstate.h"

#define KAFKA_PROBE_MS 2000

struct dispatcher_janitor {
	dispatcher_t *d;
	rn_bg_t bg; /* the janitor thread */
	_Atomic int kafka_ok;
	rn_redis_conn_t rc;
};

static void on_lost(const char *run_id, void *arg)
{
	dispatcher_janitor_t *j = arg;

	rn_counter_add(j->d->c_lost, 1);
	rn_log_warn(run_id, "run_lost", "the run's lease expired: ended worker_lost");
}

static void sweep(dispatcher_janitor_t *j)
{
	char err[256];

	rn_rcluster_t *c = rn_redis_conn_get(&j->rc, NULL);
	if (!c)
		return; /* the next sweep tries again */
	if (rn_runstate_sweep(c, j->d->cfg->key_prefix, j->d->cfg->retention_sec, 100, on_lost, j, err,
	                      sizeof(err)) < 0)
		rn_redis_conn_failed(&j->rc, "sweep", err);
}

static void probe_kafka(dispatcher_janitor_t *j)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err;

	err = rd_kafka_metadata(dispatcher_producer_handle(j->d->producer), 0, NULL, &md, KAFKA_PROBE_MS);
	if (md)
		rd_kafka_metadata_destroy(md);
	atomic_store(&j->kafka_ok, err == RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void *janitor_main(void *arg)
{
	dispatcher_janitor_t *j = arg;
	int64_t next_probe = 0;

	pthread_mutex_lock(&j->bg.mu);
	while (!j->bg.stop) {
		int64_t now;

		pthread_mutex_unlock(&j->bg.mu);
		now = rn_mono_ms();
		if (now >= next_probe) {
			probe_kafka(j);
			next_probe = rn_mono_ms() + KAFKA_PROBE_MS;
		}
		sweep(j);
		pthread_mutex_lock(&j->bg.mu);
		if (j->bg.stop)
			break;
		rn_bg_wait_ms(&j->bg, j->d->cfg->sweep_ms);
	}
	pthread_mutex_unlock(&j->bg.mu);
	rn_redis_conn_close(&j->rc);
	return NULL;
}

dispatcher_janitor_t *dispatcher_janitor_start(dispatcher_t *d, char *errstr, size_t errstr_size)
{
	dispatcher_janitor_t *j = calloc(1, sizeof(*j));
	int rc;

	if (!j) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	j->d = d;
	rn_bg_init(&j->bg);
	rn_redis_conn_init(&j->rc, &d->redis_url, "sweep", "runnel-dispatcher-sweep", 1000);
	rc = rn_bg_start(&j->bg, "runnel-janitor", 0, janitor_main, j);
	if (rc != 0) {
		snprintf(errstr, errstr_size, "pthread_create: %s", strerror(rc));
		rn_bg_destroy(&j->bg);
		free(j);
		return NULL;
	}
	return j;
}

int dispatcher_janitor_kafka_ok(dispatcher_janitor_t *j)
{
	return j && atomic_load(&j->kafka_ok);
}

void dispatcher_janitor_stop(dispatcher_janitor_t *j)
{
	if (!j)
		return;
	rn_bg_stop(&j->bg, NULL, NULL, NULL);
	rn_bg_destroy(&j->bg);
	free(j);
}
