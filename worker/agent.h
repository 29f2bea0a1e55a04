/*
 * worker/agent.h - the agent adapter seam: what runs in the sandbox for each
 * `agent.kind` of the workspace config (SPEC §5), and how its stdout becomes
 * envelope lines.
 *
 * An adapter is a table of callbacks found by kind with worker_agent_find().
 * The run (worker/run.c) asks it to `prepare` the launch (argv, binds, env,
 * network, HOME) from the config's `agent` object and the bootstrap result;
 * the I/O loop (worker/agent_loop.c) then calls `start` once the sandbox runs,
 * `on_line` for each stdout line, `on_reply` for a settled ask the adapter
 * emitted, `on_cancel` before stopping the agent, `on_eof` when stdout closed
 * or the agent exited, and `free` at the end.  Adapters never publish or
 * write directly: they go through worker_agent_io_t, so every line they emit
 * takes the normal validation path (proto/envelope) and every stdin write
 * the loop's non-blocking output buffer.
 *
 * Asks are tracked by the worker, not by adapters: an emitted `ask` line is
 * validated and recorded; a reply for an open ask is settled (its second
 * line published) before on_reply is called.  stderr never reaches adapters.
 *
 * @locality all callbacks run on the run's own thread.
 */
#ifndef RUNNEL_WORKER_AGENT_H
#define RUNNEL_WORKER_AGENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/sandbox_layout.h"
#include "common/strv.h"
#include "proto/job.h"
#include "worker/bootstrap.h"
#include "worker/config.h"

/* Where the worker binds its own helper binaries inside the sandbox (a tmpfs
 * under /run: the read-only host /usr has no /usr/libexec/runnel). */
#define WORKER_AGENT_BIN_DIR RN_SANDBOX_BIN_DIR

/* Permission modes (SPEC §5): what an agent does when a tool needs approval. */
#define WORKER_PERM_BYPASS "bypass" /* approve: the sandbox is the boundary */
#define WORKER_PERM_ASK    "ask"    /* emit an ask line, wait for a reply */
#define WORKER_PERM_DENY   "deny"   /* refuse */

/* Option ids of the asks runnel's own agents emit (labels Allow, Reject). */
#define WORKER_ASK_ALLOW_ONCE  "allow_once"
#define WORKER_ASK_REJECT_ONCE "reject_once"

/* What prepare fills: how the sandbox starts the agent. */
typedef struct worker_agent_launch {
	rn_strv_t argv;      /* the agent's argv as seen inside the sandbox */
	rn_strv_t ro_binds;  /* extra read-only binds "host:sandbox" */
	rn_strv_t env;       /* extra NAME=value, applied after the /env variables
	                          * (RUNNEL_RUN_ID and the workspace API stay runnel's) */
	int share_net;       /* 1: the sandbox shares the host network; starts as
	                          * the worker's --sandbox-net default */
	int private_home;    /* 1: HOME is a private writable directory of the run
	                          * (under bwrap the /root tmpfs already is) */
	int stop_after_turn; /* 1: the agent does not exit after its terminal line
	                          * (an ACP agent waits for the next prompt): stop it
	                          * at once instead of after the grace period */
} worker_agent_launch_t;

void worker_agent_launch_free(worker_agent_launch_t *l);

/* Appends a job's agent.argv (1..1024 strings, the first not empty) to
 * l->argv: the command kind's argv, and an ACP agent's without a preset.
 * 0, or -1 with errstr ("agent.argv must be a non-empty array of strings",
 * or "out of memory"). */
int worker_agent_launch_argv(worker_agent_launch_t *l, const json_t *argv, char *errstr, size_t errstr_size);

/* What an adapter sees of the run (borrowed; valid for the whole run). */
typedef struct worker_agent_ctx {
	const worker_config_t *cfg;
	const char *run_id;
	const proto_job_t *job;      /* prompt: secret, never log it */
	const worker_boot_t *boot;   /* /env and /config answers */
	const json_t *agent;         /* the config's `agent` object (may be NULL) */
	const char *permission_mode; /* resolved: WORKER_PERM_* */
	int64_t ask_timeout_sec;     /* open asks expire after this */
	/* The run's /root/workspace on the host (worker/workspace.h), the one
	 * way an adapter reaches the run's files: an O_PATH directory
	 * descriptor (the run's; -1 when none) to open files beneath, and its
	 * path, only for what the agent is told (the process driver's cwd). */
	int workspace_fd;
	const char *workspace_dir;
	/* The run's cgroup's procs files (worker_guard_cgroup_fds; NULL and 0
	 * without cgroups): writes into the workspace made for the run go
	 * through a child in it (worker_cgroup_call). */
	const int *cgroup_fds;
	int ncgroup_fds;
	/* A warm agent's session state (the kind's warm_handshake made it)
	 * when the run took one: start continues that session instead of
	 * opening one.  NULL: a cold start. */
	const void *warm;
} worker_agent_ctx_t;

/* The loop's side, handed to every callback after prepare. */
typedef struct worker_agent_io {
	/* One envelope line as the agent would print it (no newline): validated,
	 * published (asks tracked, a terminal line held) like a stdout line. */
	void (*emit)(void *loop, const char *line, size_t len);
	/* Bytes for the agent's stdin, sent without blocking in order.
	 * 0, or -1 (out of memory or stdin closed). */
	int (*write)(void *loop, const char *buf, size_t len);
	void *loop;
} worker_agent_io_t;

/* A settled ask, as the adapter gets it (exactly one of option, text,
 * reject is set; expired implies reject). */
typedef struct worker_agent_reply {
	const char *ask_id;
	const char *option; /* NULL unless an option was chosen */
	const char *text;   /* NULL unless free text was given */
	int reject;
	int expired; /* the ask timed out (also reject) */
} worker_agent_reply_t;

/*
 * What a kind is, as flags in worker_agent_ops_t.flags (the way curl's
 * protocol table carries PROTOPT_* flags): the facts other files need about
 * a kind live in its table, and no file outside the adapter and the
 * registry names a kind.
 */
/* Speaks the envelope itself: the turn line and control lines on stdin,
 * envelope lines on stdout (docs/protocol.md).  start, on_line, on_reply
 * and free left NULL are the shared native ones (worker/agent_native.h). */
#define WORKER_AGENT_NATIVE (1u << 0)
/* The kind of a workspace config without `agent` (SPEC §5); one kind has it. */
#define WORKER_AGENT_DEFAULT (1u << 1)
/* Without a `network` in the config the run's egress is the worker's default
 * for command agents (worker_limits_env_t.default_command: none, or full
 * with RUNNEL_SANDBOX_NET=host); without the flag it is allowlist (the
 * kind talks to a model API outside). */
#define WORKER_AGENT_COMMAND_EGRESS (1u << 2)
/* Can be started before its run, handshake included, by the warm agent
 * pool (worker/warm_agent.h, RUNNEL_WARM_AGENTS): warm_names and the
 * warm_* callbacks are set.  Its runs never take a plain warm sandbox
 * (worker/warm.h): their launch binds the agents, Node.js and the egress
 * bridge, which those do not carry; a run without a warm agent starts
 * cold. */
#define WORKER_AGENT_WARM (1u << 3)

typedef struct worker_agent_ops {
	const char *kind;
	unsigned flags; /* WORKER_AGENT_* */
	/* The read-only binds ("host:sandbox") this kind's launch adds on this
	 * worker, which a warm sandbox must pre-bind for the kind's runs to fit
	 * it (worker_warm_fits); prepare adds the same ones.  May be NULL.
	 * 0, or -1 out of memory. */
	int (*warm_binds)(const worker_config_t *cfg, rn_strv_t *binds);
	/* Fills the launch and creates per-run state (*state may stay NULL).
	 * 0, or -1 with errstr in words for the bootstrap_failed message
	 * (never a secret). */
	int (*prepare)(const worker_agent_ctx_t *ctx, worker_agent_launch_t *launch,
	               void **state, char *errstr, size_t errstr_size);
	/* The sandbox runs: write the first stdin bytes (the turn line for
	 * envelope-native kinds).  0, or -1 (the run ends internal). */
	int (*start)(void *state, const worker_agent_ctx_t *ctx, const worker_agent_io_t *io);
	/* One stdout line (no newline; may be cut at the line cap). */
	void (*on_line)(void *state, const char *line, size_t len, const worker_agent_io_t *io);
	/* A reply to an ask this adapter emitted; its settlement is published. */
	void (*on_reply)(void *state, const worker_agent_reply_t *reply, const worker_agent_io_t *io);
	/* A graceful stop request, before the loop's SIGTERM (may be NULL). */
	void (*on_cancel)(void *state, const worker_agent_io_t *io);
	/* stdout closed or the agent exited: flush held state (may be NULL). */
	void (*on_eof)(void *state, const worker_agent_io_t *io);
	void (*free)(void *state);
	/* WORKER_AGENT_WARM kinds only.  The names RUNNEL_WARM_AGENTS may use
	 * for this kind (NULL-terminated: the presets). */
	const char *const *warm_names;
	/* The warm name a config's agent object asks for, or NULL when no
	 * warm agent can serve it (a raw argv). */
	const char *(*warm_name)(const json_t *agent);
	/* The launch of a warm agent `name`, exactly as prepare makes it for
	 * a run whose /env holds only what the model gateway puts there for
	 * this kind's provider (its base URL inside the sandbox and the
	 * placeholder token), which this fills into variables.  0, or -1 with
	 * errstr. */
	int (*warm_launch)(const worker_config_t *cfg, const char *name, const char *token, json_t *variables,
	                   worker_agent_launch_t *launch, char *errstr, size_t errstr_size);
	/* 1 when the run of ctx (prepared: boot, agent) can take a warm agent
	 * `name` as far as the handshake is concerned (what the run would send
	 * in it: for ACP no system prompt, no MCP servers); else 0 with why.
	 * The launch itself is compared by the pool (worker_warm_agent_fits). */
	int (*warm_fits)(const worker_agent_ctx_t *ctx, const char *name, char *why, size_t why_size);
	/* The part of the session that does not depend on the run, on the
	 * started agent's stdin (blocking), stdout and stderr (non-blocking),
	 * within timeout_ms, ended within a second once *cancel is set (the
	 * pool drains); *warm becomes ctx->warm of the run that takes the
	 * agent.  0, or -1 with errstr.  warm_free frees *warm. */
	int (*warm_handshake)(const char *name, int in_fd, int out_fd, int err_fd, int timeout_ms,
	                      const atomic_int *cancel, void **warm, char *errstr, size_t errstr_size);
	void (*warm_free)(void *warm);
} worker_agent_ops_t;

/* The adapter for kind (its callbacks resolved: worker_agent_ops_resolve),
 * or NULL when the kind is unknown. */
const worker_agent_ops_t *worker_agent_find(const char *kind);

/* The WORKER_AGENT_WARM kind that knows the warm name (a preset such as
 * "claude"), or NULL. */
const worker_agent_ops_t *worker_agent_warm_kind(const char *name);

/* Every warm name, "claude, codex", for error messages. */
void worker_agent_warm_names(char *buf, size_t size);

/* The kind a config's `agent` object names: its `kind` (NULL when that is
 * missing or not a string), or the WORKER_AGENT_DEFAULT kind when agent is
 * NULL (SPEC §5).  Borrowed from agent or the table. */
const char *worker_agent_kind_of(const json_t *agent);

/* 1 when the kind agent names defaults to the command egress
 * (WORKER_AGENT_COMMAND_EGRESS); 0 for other and unknown kinds. */
int worker_agent_command_egress(const json_t *agent);

/* Appends every kind's warm_binds to binds (the warm pool's sandbox
 * shape).  0, or -1 out of memory. */
int worker_agent_warm_binds(const worker_config_t *cfg, rn_strv_t *binds);

/* *out = *ops with the shared callbacks filled in for a WORKER_AGENT_NATIVE
 * kind: what the I/O loop calls (worker_agent_find returns such tables). */
void worker_agent_ops_resolve(const worker_agent_ops_t *ops, worker_agent_ops_t *out);

/* "command, mock, ..." for error messages. */
const char *worker_agent_kinds(void);

/*
 * The turn line of envelope-native agents (SPEC §6 plus permission_mode and
 * ask_timeout_sec), newline included.  malloc'd; holds the prompt: the caller
 * wipes and frees it.  NULL out of memory.
 */
char *worker_agent_turn_line(const worker_agent_ctx_t *ctx, size_t *lenp);

/*
 * The control line for a reply on an envelope-native agent's stdin
 * (contract: {"type":"reply","id":..,"option"|"text"|"reject":true[,"expired":true]}),
 * newline included.  malloc'd, NULL out of memory.
 */
char *worker_agent_reply_line(const worker_agent_reply_t *reply, size_t *lenp);

/* Resolves the permission mode: the config's `permission_mode`, else the
 * job's, else bypass.  Returns a WORKER_PERM_* constant, or NULL with
 * errstr naming the field and the bad value. */
const char *worker_agent_permission_mode(const worker_boot_t *boot, const proto_job_t *job,
                                         char *errstr, size_t errstr_size);

/* The adapters, listed in agent.c's table and worker/core.cmake. */
extern const worker_agent_ops_t worker_agent_command; /* worker/agent_command.c */
extern const worker_agent_ops_t worker_agent_mock;    /* worker/agent_mock.c */
extern const worker_agent_ops_t worker_agent_acp;     /* worker/agent_acp.c */
extern const worker_agent_ops_t worker_agent_builtin; /* worker/agent_builtin.c */

#endif
