/*
 * agent/mcp.h - the Model Context Protocol client: the config's mcp_servers,
 * each over stdio (a child process speaking newline-delimited JSON-RPC) or
 * streamable HTTP (JSON-RPC POSTed to one URL, answered with JSON or an SSE
 * stream, the session carried in Mcp-Session-Id).  Each server's tools/list
 * becomes tools named <server>__<tool>; calls go through tools/call.
 *
 * A server that fails to start, initialise or list is dropped with a warn
 * log line; the run goes on without it.  Every wait ends on stop.
 */
#ifndef RUNNEL_AGENT_MCP_H
#define RUNNEL_AGENT_MCP_H

#include <stdint.h>

#include <jansson.h>

#include "agent/tools.h"

typedef struct agent_mcp agent_mcp_t;

/* Starts or connects every server of the array (NULL or empty: none).
 * cwd is where stdio servers start.  Never NULL except on OOM. */
agent_mcp_t *agent_mcp_start(const json_t *servers, const char *cwd, int64_t timeout_ms);
/* Number of servers up and of tools they offer. */
int agent_mcp_servers(const agent_mcp_t *m);
int agent_mcp_tools(const agent_mcp_t *m);
/* The tool definitions (Chat Completions "tools" entries), borrowed. */
const json_t *agent_mcp_defs(const agent_mcp_t *m);
/* 1 when name is one of the servers' tools. */
int agent_mcp_has(const agent_mcp_t *m, const char *name);
/* Calls a tool (name as offered to the model).  Always fills out. */
void agent_mcp_call(agent_mcp_t *m, const char *name, const json_t *args, size_t output_max,
                    agent_tool_out_t *out);
/* Ends the stdio servers (stdin closed, SIGTERM, then SIGKILL) and frees. */
void agent_mcp_free(agent_mcp_t *m);

#endif
