/*
 * proto/keys.h - Redis key names and run ids (SPEC §3).
 *
 * Every key of one run shares the hash tag {RUN} so that a Redis Cluster
 * keeps them in one slot and a Lua script may touch all three.
 */
#ifndef RUNNEL_PROTO_KEYS_H
#define RUNNEL_PROTO_KEYS_H

#include <stddef.h>

#define PROTO_KEY_PREFIX_DEFAULT "runnel"
#define PROTO_KEY_PREFIX_MAX     64
#define PROTO_KEY_MAX            (PROTO_KEY_PREFIX_MAX + 64 + 16)

typedef enum {
	PROTO_KEY_OUT,   /* <prefix>:{RUN}:out   stream, field "line" */
	PROTO_KEY_CTL,   /* <prefix>:{RUN}:ctl   stream, field "msg"  */
	PROTO_KEY_STATE, /* <prefix>:{RUN}:state hash */
	PROTO_KEY_WAKE,  /* <prefix>:{RUN}:wake  sharded pub/sub channel (a Redis Cluster only) */
} proto_key_kind_t;

/* 1 when run_id matches [A-Za-z0-9_-]{1,64}, else 0. */
int proto_run_id_valid(const char *run_id);

/* 1 when prefix is 1..64 chars of [A-Za-z0-9_.:-], else 0. */
int proto_key_prefix_valid(const char *prefix);

/*
 * Writes the key into buf.  Returns the key's length, or -1 when run_id or
 * prefix is invalid or buf is too small (PROTO_KEY_MAX always suffices).
 */
int proto_key(char *buf, size_t size, const char *prefix,
              const char *run_id, proto_key_kind_t kind);

/*
 * The idempotency record of one (tenant, idempotency key):
 * "<prefix>:idem:{<tenant>}:<key>", a string holding the run id that owns
 * the key.  The hash tag is the tenant, so one tenant's keys share a slot
 * and different tenants spread over the cluster.  Returns the length, or -1
 * when an argument is invalid or buf too small (PROTO_IDEM_REDIS_KEY_MAX
 * always suffices).
 */
#define PROTO_IDEM_REDIS_KEY_MAX (PROTO_KEY_PREFIX_MAX + 64 + 128 + 16)
int proto_idem_redis_key(char *buf, size_t size, const char *prefix, const char *tenant, const char *key);

/*
 * Mints a run id: "run_" followed by 22 URL-safe base64 characters of 128
 * random bits (libsodium's randombytes).  buf must hold 27 bytes.
 */
void proto_run_id_mint(char buf[27]);

#endif
