/*
 * worker/agent_command.c - {"kind":"command","argv":[...]} (SPEC §5): a
 * program that already speaks the envelope.  Its stdout lines are the
 * envelope as they are; stdin gets the turn line, then reply lines.
 * worker_agent_native_* are shared with the mock (same protocol).
 */
#include "worker/agent.h"
#include "worker/agent_native.h"

#include "proto/agentctl.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

int worker_agent_native_start(void *state, const worker_agent_ctx_t *ctx, const worker_agent_io_t *io)
{
	(void)state;
	size_t len = 0;
	char *turn = worker_agent_turn_line(ctx, &len);
	if (!turn)
		return -1;
	int rc = io->write(io->loop, turn, len);
	sodium_memzero(turn, len);
	free(turn);
	return rc;
}

void worker_agent_native_on_line(void *state, const char *line, size_t len, const worker_agent_io_t *io)
{
	(void)state;
	io->emit(io->loop, line, len);
}

void worker_agent_native_on_reply(void *state, const worker_agent_reply_t *reply, const worker_agent_io_t *io)
{
	(void)state;
	size_t len = 0;
	char *line = worker_agent_reply_line(reply, &len);
	if (line) {
		io->write(io->loop, line, len);
		free(line);
	}
}

void worker_agent_native_on_cancel(void *state, const worker_agent_io_t *io)
{
	(void)state;
	io->write(io->loop, PROTO_AGENTCTL_CANCEL_LINE, sizeof(PROTO_AGENTCTL_CANCEL_LINE) - 1);
}

void worker_agent_native_free(void *state)
{
	(void)state;
}

static int command_prepare(const worker_agent_ctx_t *ctx, worker_agent_launch_t *launch,
                           void **state, char *errstr, size_t errstr_size)
{
	*state = NULL;
	return worker_agent_launch_argv(launch, json_object_get(ctx->agent, "argv"), errstr, errstr_size);
}

const worker_agent_ops_t worker_agent_command = {
	.kind = "command",
	.flags = WORKER_AGENT_NATIVE | WORKER_AGENT_COMMAND_EGRESS,
	.prepare = command_prepare,
	.on_cancel = NULL, /* today's contract: SIGTERM, then SIGKILL */
};
