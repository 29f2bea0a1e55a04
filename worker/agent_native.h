/*
 * worker/agent_native.h - the callbacks that envelope-native adapters
 * (command, mock, builtin) share: the turn line on start, stdout lines as
 * they are, replies and cancel as control lines on stdin (contract in
 * docs/protocol.md).
 *
 * @locality the run's thread (they are adapter callbacks, worker/agent.h).
 */
#ifndef RUNNEL_WORKER_AGENT_NATIVE_H
#define RUNNEL_WORKER_AGENT_NATIVE_H

#include "worker/agent.h"

int worker_agent_native_start(void *state, const worker_agent_ctx_t *ctx, const worker_agent_io_t *io);
void worker_agent_native_on_line(void *state, const char *line, size_t len, const worker_agent_io_t *io);
void worker_agent_native_on_reply(void *state, const worker_agent_reply_t *reply, const worker_agent_io_t *io);
/* Writes {"type":"cancel"} (for agents that read control lines). */
void worker_agent_native_on_cancel(void *state, const worker_agent_io_t *io);
void worker_agent_native_free(void *state);

#endif
