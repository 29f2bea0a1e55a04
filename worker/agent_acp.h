/*
 * worker/agent_acp.h - the "acp" agent kind (SPEC §5): runnel as the client
 * of the Agent Client Protocol (JSON-RPC 2.0, one object per line, on the
 * agent's stdin and stdout), and the presets that start Claude Code and
 * Codex through their ACP adapters.
 *
 * The session is a small state machine driven by the agent's stdout lines:
 *
 *   initialize -> session/new (cwd /root/workspace, mcpServers)
 *     -> session/set_mode, session/set_model (presets only, when offered)
 *     -> session/prompt (history, then the prompt) -> {stopReason}
 *
 * and it turns what the agent says into envelope lines:
 *   tool_call / tool_call_update      -> step running, then succeeded/failed
 *                                        (durationMs measured here)
 *   agent_message_chunk               -> the text of the result
 *   agent_thought_chunk, plan         -> log at debug
 *   stopReason end_turn               -> result
 *   other stop reasons                -> error max_tokens, agent_refused, ...
 *   a JSON-RPC error on the prompt    -> error agent_error (its message)
 *   session/request_permission        -> per permission_mode: allowed at once
 *                                        (bypass), refused (deny), or an ask
 *                                        line whose reply becomes the answer
 *
 * Requests from the agent for fs/read_text_file and fs/write_text_file are
 * served only when the run's workspace descriptor is given, and only beneath it
 * (openat2 RESOLVE_BENEATH: no "..", no symlink out); the terminal methods
 * are not offered.
 *
 * Secrets: the prompt goes to the agent's stdin only and its buffers are
 * wiped.  Values of /env variables that look like credentials (names with
 * KEY, TOKEN, SECRET, PASSWORD, AUTH) are replaced by "[redacted]" in every
 * line this adapter emits, so an agent that quotes its API key in an error
 * message does not publish it.
 *
 * @locality the run's thread; nothing here blocks or does I/O except the
 * callbacks it is given and the fs requests (bounded, on the workspace).
 */
#ifndef RUNNEL_WORKER_AGENT_ACP_H
#define RUNNEL_WORKER_AGENT_ACP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "worker/agent.h"

/* Where the agents' prefix and Node.js appear inside the sandbox. */
#define WORKER_ACP_PREFIX_IN_SANDBOX WORKER_AGENT_BIN_DIR "/agents"
#define WORKER_ACP_NODE_IN_SANDBOX   WORKER_AGENT_BIN_DIR "/node"

#define WORKER_ACP_TEXT_MAX   (512 * 1024) /* result text kept; the rest is cut */
#define WORKER_ACP_RESULT_MAX (64 * 1024)  /* a step's result as published */

typedef enum {
	WORKER_ACP_PERM_BYPASS = 0,
	WORKER_ACP_PERM_ASK,
	WORKER_ACP_PERM_DENY,
} worker_acp_perm_t;

typedef enum {
	WORKER_ACP_PRESET_NONE = 0, /* raw argv: no mode or model calls */
	WORKER_ACP_PRESET_CLAUDE,
	WORKER_ACP_PRESET_CODEX,
} worker_acp_preset_t;

/* What the session needs from the run (borrowed for the session's life). */
typedef struct worker_acp_opts {
	worker_acp_preset_t preset;
	worker_acp_perm_t perm;
	const char *run_id;        /* for the worker's own log */
	const char *prompt;        /* secret: written to stdin only */
	const char *system_prompt; /* may be NULL */
	const char *model;         /* may be NULL */
	const json_t *mcp_servers; /* config array (SPEC §5 shape) or NULL */
	const json_t *history;     /* [{role, content}] or NULL */
	const json_t *variables;   /* /env variables, for redaction; or NULL */
	int workspace_fd;          /* the run's workspace: a directory descriptor
	                             * (borrowed), or -1: no fs requests */
	const char *cwd;           /* the workspace as the agent sees it; NULL = /root/workspace */
	/* The run's cgroup (worker_guard_cgroup_fds): fs/write_text_file
	 * writes from a child inside it, so the run is charged for the file's
	 * tmpfs pages (worker_cgroup_call).  NULL: written by this thread. */
	const int *cgroup_fds;
	int ncgroup_fds;
	/* A file fs/write_text_file creates belongs to these host ids (the
	 * sandbox's, worker_sandbox_ids), so the agent can change it later. */
	int chown_files;
	uid_t file_uid;
	gid_t file_gid;
	/* A warm agent's handshake, before any run (worker/warm_agent.h): the
	 * fs methods are declared (the run that takes it has a workspace), and
	 * the session stops once session/new is answered (worker_acp_ready). */
	int warm;
} worker_acp_opts_t;

typedef struct worker_acp worker_acp_t;

/* NULL with errstr when the options are not usable (or out of memory). */
worker_acp_t *worker_acp_new(const worker_acp_opts_t *opts, char *errstr, size_t errstr_size);
void worker_acp_free(worker_acp_t *s);

/* Writes the initialize request.  0 or -1. */
int worker_acp_start(worker_acp_t *s, const worker_agent_io_t *io);

/* One line of the agent's stdout (without its newline). */
void worker_acp_on_line(worker_acp_t *s, const char *line, size_t len, const worker_agent_io_t *io);

/*
 * A reply to an ask this session emitted: option (an option id the ask
 * offered, or a generic kind allow_once / allow_always / reject_once /
 * reject_always, for callers other than the worker, which passes only the
 * ask's own ids), or text (taken as an option id), or reject.  Anything
 * that picks no option is answered with the agent's reject option.
 * 0, or -1 when the ask is not open here.
 */
int worker_acp_on_reply(worker_acp_t *s, const char *ask_id, const char *option,
                        const char *text, int reject, const worker_agent_io_t *io);

/* A cancel: session/cancel, and every open permission request answered
 * "cancelled".  The turn's end is then not reported (the worker writes the
 * cancelled line). */
void worker_acp_on_cancel(worker_acp_t *s, const worker_agent_io_t *io);

/* stdout closed: open steps are closed failed; no terminal line (the worker
 * reports the exit as agent_exit). */
void worker_acp_on_eof(worker_acp_t *s, const worker_agent_io_t *io);

/* 1 once a warm session (opts.warm) has its session: ready for a run. */
int worker_acp_ready(const worker_acp_t *s);

/*
 * Starts the run's session on a warm agent instead of worker_acp_start:
 * the session warm opened (its id, modes and the agent's name) becomes
 * s's, the log lines a cold start emits for initialize and session/new
 * are emitted, and the setup calls and the prompt follow as after a cold
 * session/new.  warm is only read.  0 or -1.
 */
int worker_acp_resume(worker_acp_t *s, const worker_acp_t *warm, const worker_agent_io_t *io);

/* 1 once the turn ended (result or error emitted, or cancelled). */
int worker_acp_done(const worker_acp_t *s);

/* Parses "bypass" | "ask" | "deny" (NULL = bypass).  0 or -1. */
int worker_acp_perm_parse(const char *s, worker_acp_perm_t *out);

#endif
