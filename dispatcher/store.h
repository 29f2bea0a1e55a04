/*
 * dispatcher/store.h - the dispatcher's writes and reads of run state in
 * Redis (the keys of SPEC §3): create the state hash of a new run, undo it
 * when Kafka refused the job, read the hash, probe a run before tailing it,
 * write cancel control messages, and CLIENT UNBLOCK for the tail pool.
 * Every call is one atomic command or Lua script (keys of one run share
 * the {RUN} hash tag) on one shared async connection, or on a Redis
 * Cluster on the connection to the primary of the keys' slot
 * (dispatcher/rroute.h).
 *
 * @locality main (loop) thread.
 */
#ifndef RUNNEL_DISPATCHER_STORE_H
#define RUNNEL_DISPATCHER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "common/util.h"
#include "dispatcher/rroute.h"

typedef struct dispatcher_store dispatcher_store_t;

/* cluster: as dispatcher_rroute_new (1 cluster, 0 standalone, -1 not
 * known yet). */
dispatcher_store_t *dispatcher_store_new(struct event_base *base, const rn_redis_url_t *url, int cluster,
                                         const char *prefix, char *errstr, size_t errstr_size);
void dispatcher_store_free(dispatcher_store_t *s);

/* 1 when connected and the last PING (every second) was answered. */
int dispatcher_store_ready(const dispatcher_store_t *s);

/* Result codes of the calls below, passed to their callbacks. */
enum {
	DISPATCHER_STORE_ERROR = -1, /* Redis unreachable or refused */
	DISPATCHER_STORE_ABSENT = 0, /* the run does not exist / already exists (create) */
	DISPATCHER_STORE_OK = 1,
};

typedef void (*dispatcher_store_cb)(int rc, void *arg);

/*
 * Creates <prefix>:{id}:state = {status: queued, enqueued_at} with expiry
 * ttl_sec, unless the run already has a state hash or an out stream
 * (rc ABSENT then: the id is taken).  Returns -1 when Redis is down (cb not
 * called), else 0 and cb runs later.
 */
int dispatcher_store_create(dispatcher_store_t *s, const char *run_id, int64_t enqueued_at,
                            int64_t ttl_sec, dispatcher_store_cb cb, void *arg);

/*
 * Idempotent enqueue (SPEC §2): claims (tenant, key) for run_id with SET NX
 * and an expiry of ttl_sec (rn_idem_claim_lua, the script the workers run
 * at intake).  cb gets OK and the owning run id (run_id itself when the key
 * was free or already ours; valid during the callback only) with fresh = 1
 * when this call took the key, or ERROR.  -1 when Redis is down (cb not
 * called).
 */
typedef void (*dispatcher_store_idem_cb)(int rc, const char *owner, int fresh, void *arg);
int dispatcher_store_idem_claim(dispatcher_store_t *s, const char *tenant, const char *key, const char *run_id,
                                int64_t ttl_sec, dispatcher_store_idem_cb cb, void *arg);
/* Frees the key again if run_id still owns it (Kafka refused the job). */
void dispatcher_store_idem_release(dispatcher_store_t *s, const char *tenant, const char *key, const char *run_id);

/* Deletes the state hash again if it is still "queued" (fire and forget). */
void dispatcher_store_uncreate(dispatcher_store_t *s, const char *run_id);

/* The state hash as an object (new reference owned by the callee's
 * callback, which must json_decref it; NULL when absent or on error). */
typedef void (*dispatcher_store_get_cb)(int rc, json_t *state, void *arg);
int dispatcher_store_get(dispatcher_store_t *s, const char *run_id,
                         dispatcher_store_get_cb cb, void *arg);

/*
 * What a tail needs to know first: whether the run exists (state hash or out
 * stream), and the id and line of the last entry of the out stream ("" when
 * empty).  The strings are valid during the callback only.
 */
typedef void (*dispatcher_store_probe_cb)(int rc, const char *last_id, const char *last_line,
                                          size_t last_len, void *arg);
int dispatcher_store_probe(dispatcher_store_t *s, const char *run_id,
                           dispatcher_store_probe_cb cb, void *arg);

/*
 * XADDs {"type":"cancel","reason":reason} to <prefix>:{id}:ctl.  With
 * must_exist, nothing is written for an unknown run (rc ABSENT).  The
 * control stream gets the state hash's expiry (or ttl_sec).  status (may be
 * "") is the run's status at that moment.  cb may be NULL: such a cancel
 * (a caller that left) is kept while Redis is down, up to
 * DISPATCHER_STORE_DEFERRED_MAX of them, and written once it is back, so it
 * is not lost; 0 then means "written or kept".
 */
#define DISPATCHER_STORE_DEFERRED_MAX 4096
typedef void (*dispatcher_store_cancel_cb)(int rc, const char *status, void *arg);
int dispatcher_store_cancel(dispatcher_store_t *s, const char *run_id, const char *reason,
                            int must_exist, int64_t ttl_sec,
                            dispatcher_store_cancel_cb cb, void *arg);

/*
 * Writes a reply control message (msg, serialized by the caller) for ask
 * ask_id of run_id, but only when the ask is open: the out stream is read
 * for the ask's lines (the worker publishes an ask's settlement as its
 * second line).  rc: DISPATCHER_STORE_OK (written), _ABSENT (no such run),
 * or _ERROR; on OK, what is one of "written", "unknown" (no such ask),
 * "settled" (already settled, or the run ended), "bad_option" (option is
 * not one of the ask's; options then lists them, comma-separated).  The
 * strings are valid during the callback only.  -1 when Redis is down.
 */
typedef void (*dispatcher_store_reply_cb)(int rc, const char *what, const char *options, void *arg);
int dispatcher_store_reply(dispatcher_store_t *s, const char *run_id, const char *ask_id,
                           const char *msg, const char *option, int64_t ttl_sec,
                           dispatcher_store_reply_cb cb, void *arg);

/* CLIENT UNBLOCK id (fire and forget).  -1 when down. */
/* cb (may be NULL) gets 1 when a blocked client was unblocked, 0 when the
 * client was not blocked (yet); it is not called when the reply is lost. */
int dispatcher_store_unblock(dispatcher_store_t *s, long long client_id,
                             void (*cb)(int unblocked, void *arg), void *arg);

/* The shared connection, for modules with keys of their own (recent.c). */
dispatcher_rroute_t *dispatcher_store_conn(dispatcher_store_t *s);

#endif
