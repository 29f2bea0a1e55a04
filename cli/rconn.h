/*
 * cli/rconn.h - the CLI's blocking Redis connection (hiredis 0.14, one
 * request at a time) and the run-existence check every verb needs.
 */
#ifndef RUNNEL_CLI_RCONN_H
#define RUNNEL_CLI_RCONN_H

#include <stddef.h>
#include <hiredis/hiredis.h>

#include "common/rcluster.h"

/*
 * Connects to a redis:// URL (a standalone server or any node of a Redis
 * Cluster), authenticates and selects the database.  Returns a handle the
 * caller frees with rn_rcluster_free(), or NULL with errstr
 * ("cannot reach Redis at HOST:PORT: REASON"; never the password).
 */
rn_rcluster_t *cli_rconn_open(const char *url, char *errstr, size_t errstr_size);

/* 1 when the run has a state hash or an output stream, 0 when neither, -1
 * on a Redis error (errstr filled). */
int cli_rconn_run_exists(rn_rcluster_t *c, const char *prefix, const char *run_id,
                         char *errstr, size_t errstr_size);

/* Fills errstr from a failed command: the context's error or the reply's. */
void cli_rconn_error(rn_rcluster_t *c, const redisReply *r, char *errstr, size_t errstr_size);

#endif
