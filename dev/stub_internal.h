/*
 * dev/stub_internal.h - what the stub's files share and nothing else
 * includes: the state (runs, blobs, pending answers, the stub itself) and
 * the functions one file defines for another.  dev/stub.h is the API.
 *
 * Locking: every field of dev_stub_t but the event-thread ones (pending,
 * stop_ev) is read and written under mu; the route handlers run on the
 * event thread and take mu for the decision only.
 */
#ifndef RUNNEL_DEV_STUB_INTERNAL_H
#define RUNNEL_DEV_STUB_INTERNAL_H

#include "dev/stub.h"

#include <event2/event.h>
#include <event2/http.h>
#include <pthread.h>
#include <stddef.h>

#define STUB_URL_PLACEHOLDER "${RUNNEL_STUB_URL}"
#define STUB_NAME_MAX        128

typedef struct stub_fault {
	int delay_ms;
	int close;
	char *redirect;
	int status;
	char *body;
} stub_fault_t;

typedef struct stub_file {
	char *name;
	char *data; /* NULL when over max_store (counted, not kept) */
	size_t len;
} stub_file_t;

typedef struct stub_run {
	struct stub_run *next;
	char session[72];
	char otp[DEV_STUB_EP_COUNT][40];
	int spent[DEV_STUB_EP_COUNT];
	char *env_body;
	char *config_body;
	stub_fault_t faults[DEV_STUB_EP_COUNT];
	int results_status;
	dev_stub_ep_stats_t stats[DEV_STUB_EP_COUNT];
	stub_file_t *files;
	size_t nfiles, files_cap;
	size_t stored;
} stub_run_t;

typedef struct stub_blob {
	struct stub_blob *next;
	char name[STUB_NAME_MAX];
	char *data;
	size_t len;
	stub_fault_t fault;
	dev_stub_blob_stats_t stats;
} stub_blob_t;

/* An answer decided under the lock and sent (maybe later) without it. */
typedef struct stub_reply {
	struct stub_reply *next; /* pending list (delayed answers) */
	struct stub_reply *prev;
	dev_stub_t *stub;
	struct evhttp_request *req; /* NULL once the connection died */
	struct event *timer;
	int close;
	int status;
	char *body;
	size_t len;
	const char *ctype;
	char *location;
} stub_reply_t;

struct dev_stub {
	pthread_mutex_t mu;
	struct event_base *base;
	struct evhttp *http;
	pthread_t thread;
	int thread_started;
	char url[96];
	int port;
	char *agents_dir;
	char *results_dir;
	char *blobs_dir;
	size_t max_body;
	size_t max_store;
	int enable_mint;
	char cors_origin[128]; /* "" = no CORS */
	char **env_values;     /* dev_stub_opts_t.env_values, copied */
	stub_run_t *runs;
	stub_blob_t *blobs;
	int unknown;
	stub_reply_t *pending; /* event thread only */
	struct event *stop_ev; /* activated by dev_stub_stop */
};

/* One part of a multipart body (stub_multipart.c). */
typedef struct stub_part {
	const char *data;
	size_t len;
	char name[64];
	char *filename; /* malloc'd, NULL when the part has none */
} stub_part_t;

/* What stub_upload_part stores into: the run an upload belongs to. */
typedef struct stub_upload {
	dev_stub_t *stub;
	stub_run_t *run;
	int files;
} stub_upload_t;

/* stub_state.c: small checks and lookups; the lookups need mu held. */
int stub_name_ok(const char *s, int allow_dot);
int stub_token_eq(const char *given, size_t glen, const char *want);
void stub_fault_clear(stub_fault_t *f);
int stub_fault_active(const stub_fault_t *f);
void stub_run_free(stub_run_t *r);
stub_run_t *stub_find_run(dev_stub_t *s, const char *session);
stub_blob_t *stub_find_blob(dev_stub_t *s, const char *name);

/* stub_reply.c: answers, built under mu and sent on the event thread. */
stub_reply_t *stub_reply_new(dev_stub_t *s, struct evhttp_request *req);
void stub_reply_set(stub_reply_t *rp, int status, const char *ctype, const char *body);
void stub_reply_free(stub_reply_t *rp);
void stub_pending_unlink(stub_reply_t *rp);
void stub_reply_dispatch(stub_reply_t *rp, int delay_ms);
int stub_apply_fault(dev_stub_t *s, const stub_fault_t *f, stub_reply_t *rp);

/* stub_multipart.c: parsing /results bodies and storing their files. */
int stub_multipart_each(const char *body, size_t len, const char *boundary,
                        int (*cb)(const stub_part_t *, void *), void *arg);
int stub_upload_part(const stub_part_t *part, void *arg);
int stub_boundary(const char *ctype, char *out, size_t size);

/* stub_http.c: the evhttp callback for every route. */
void stub_request_cb(struct evhttp_request *req, void *arg);

#endif
