/*
 * agent/loop.h - the model loop: from the turn line (SPEC §6) to a terminal
 * envelope line.  It builds the conversation (system prompt with the skills,
 * the caller's history, the prompt), offers the built-in and MCP tools,
 * sends the conversation, runs the tool calls of each answer (asking first
 * when the permission mode says so) and stops at the first answer without
 * tool calls (its text is the result) or after max_steps answers.
 */
#ifndef RUNNEL_AGENT_LOOP_H
#define RUNNEL_AGENT_LOOP_H

#include <stdint.h>

#include <jansson.h>

#include "agent/chat.h"
#include "agent/tools.h"

typedef struct agent_loop_cfg {
	agent_chat_opts_t chat;
	agent_tools_cfg_t tools;
	int max_steps; /* model answers per run */
	int64_t mcp_timeout_ms;
} agent_loop_cfg_t;

/*
 * Runs the turn.  Prints the envelope on stdout.  Returns 0 once a terminal
 * line was printed or the agent was stopped (the runner writes the terminal
 * line then), 1 when the turn itself was unusable (an error line was
 * printed too).
 */
int agent_loop_run(const agent_loop_cfg_t *cfg, const json_t *turn);

#endif
