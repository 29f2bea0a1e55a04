/*
 * worker/limits.h - what bounds one run (SPEC §6): memory, processes, CPU,
 * workspace disk, /tmp, and where its sandbox may connect to.
 *
 * The worker's flags give the maxima; a run's config ("limits", "network",
 * "allow_hosts") may lower them, never raise them: a value above the
 * worker's is ignored, the worker's value is used, and the run gets a
 * `log` line saying so ("limits.memory_mb 4096 is above this worker's
 * limit of 512; using 512").
 *
 * A run's guard (worker_guard_t) owns the run's cgroup (worker/cgroup.h),
 * its size-limited workspace (a tmpfs mounted on the workspace directory,
 * or a periodic walk where the worker may not mount), and its egress proxy
 * (worker/egress.h).  The run's loop asks it, between reads, whether a
 * limit was hit (worker_guard_tick); a hit ends the run `resource_limit`
 * with worker_guard_message: "The run used more than 512 MiB of memory.",
 * "The run started more than 256 processes.", "The run wrote more than
 * 1024 MiB to its workspace.", "The run printed more than 64 MiB of output
 * (its output cap).".
 *
 * The output cap (limits.output_mb) counts the bytes of every line the run
 * publishes before its terminal line (the agent's lines, stderr, notes):
 * a line that would take the total past the cap is not published, and the
 * run ends resource_limit at the guard's next look, so the stream holds at
 * most the cap plus the terminal line.
 *
 * @locality worker_limits_setup: main thread, once.  A guard: its run's
 * thread.
 */
#ifndef RUNNEL_WORKER_LIMITS_H
#define RUNNEL_WORKER_LIMITS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/netaddr.h"
#include "worker/cgroup.h"
#include "worker/sandbox.h"
#include "worker/workspace.h"

typedef enum {
	WORKER_EGRESS_NONE = 0,  /* own network namespace, nothing reachable */
	WORKER_EGRESS_ALLOWLIST, /* own namespace, only the proxy, only listed hosts */
	WORKER_EGRESS_FULL,      /* the host's network */
} worker_egress_mode_t;

typedef enum {
	WORKER_LIMIT_NONE = 0,
	WORKER_LIMIT_MEMORY,
	WORKER_LIMIT_PROCESSES,
	WORKER_LIMIT_DISK,
	WORKER_LIMIT_OUTPUT,
	WORKER_LIMIT_COUNT,
} worker_limit_t;

/* How the workspace cap is enforced. */
typedef enum {
	WORKER_DISK_TMPFS = 0, /* a size-limited tmpfs on the workspace: the kernel refuses the excess */
	WORKER_DISK_WATCH,     /* no mount permission: a walk every second, then a kill */
} worker_disk_mode_t;

/* Resource limits; 0 = unlimited.  The worker's and, resolved, a run's. */
typedef struct worker_limits {
	long memory_mb;
	long pids;
	long cpu_millis; /* 1000 = one CPU */
	long disk_mb;
	long tmp_mb;
	long output_mb; /* bytes of lines published to the run's stream */
} worker_limits_t;

/* Everything the worker decided at start; lives as long as the worker. */
typedef struct worker_limits_env {
	worker_limits_t max;
	worker_cgroup_root_t cgroup;
	worker_disk_mode_t disk_mode;
	/* Where the workspace tmpfs mounts live: 0 the host's mount namespace,
	 * 1 a private one (a root worker: they vanish with it), 2 the worker's
	 * own user and mount namespace (a worker that may not mount). */
	int mount_ns;
	worker_egress_mode_t egress; /* the worker's policy: runs may narrow it */
	char **egress_allow;         /* the worker's host[:port] patterns (owned) */
	size_t egress_nallow;
	/* The worker's own services (its Redis, metrics listener, Kafka
	 * brokers): a run reaches them only where egress_allow names them
	 * exactly (common/netaddr.h).  Filled by the caller after setup;
	 * freed by worker_limits_env_free. */
	rn_netaddr_set_t own;
	worker_egress_mode_t default_command; /* kinds with WORKER_AGENT_COMMAND_EGRESS, without "network" */
	const char *bridge_path;              /* runnel-egress-bridge on the host, "" if absent */
} worker_limits_env_t;

/*
 * Probes the cgroup hierarchy (cgroup: "auto", "v1", "v2", "off") and
 * whether a tmpfs can be mounted under work_dir, taking a mount namespace
 * of the worker's own for that (a user namespace too when not root; only
 * while single-threaded; see docs/sandbox.md); parses the egress settings
 * (egress: none|allowlist|full, allow: comma-separated patterns).  0, or -1
 * with errstr for a bad setting.  Warnings that do not stop the worker
 * (no cgroup, no mount) go to *warn (one line each, "" when none).
 */
int worker_limits_setup(worker_limits_env_t *env, const worker_limits_t *max,
                        const char *cgroup, const char *work_dir,
                        const char *egress, const char *allow, const char *sandbox_net,
                        char *warn, size_t warn_size, char *errstr, size_t errstr_size);
void worker_limits_env_free(worker_limits_env_t *env);

/* What of limits a cgroup enforces (memory, processes, CPU). */
worker_cgroup_limits_t worker_limits_cgroup(const worker_limits_t *l);

/*
 * For a sandbox started before its run is known (a warm sandbox): mounts
 * the workspace tmpfs on dir with the worker's disk cap before the sandbox
 * binds it.  The run's guard then resizes it to the run's cap (and removes
 * it at the end).  0 (also when there is no cap or no mounting), or -1
 * with errstr.  Such a sandbox starts in a cgroup of its own, which its
 * run's guard takes over (worker_guard_args_t.cgroup), and may only serve
 * runs without the egress bridge (network none or full): the proxy socket
 * is bound at start.
 */
int worker_limits_mount_workspace(const worker_limits_env_t *env, const char *dir,
                                  char *errstr, size_t errstr_size);

/* "none", "allowlist", "full"; -1 for anything else. */
int worker_egress_mode_parse(const char *s);
const char *worker_egress_mode_name(worker_egress_mode_t m);
const char *worker_limit_name(worker_limit_t l); /* "memory", "processes", "disk", "output" */

/* Called with each note for the run's stream (a `log` line) and log. */
typedef void (*worker_guard_note_fn)(const char *level, const char *message, void *arg);

typedef struct worker_guard worker_guard_t;

/* What a guard needs from the run. */
typedef struct worker_guard_args {
	const char *run_id;
	int command_egress;      /* the kind's WORKER_AGENT_COMMAND_EGRESS (agent.h) */
	const json_t *config;    /* the /config answer (limits, network, allow_hosts) */
	const json_t *variables; /* the /env variables (model base URLs) */
	const char *ws_api_url;  /* workspace_api.url or NULL */
	/* The run directory (worker/workspace.h): workspace/ is bound at
	 * /root/workspace and exists; assets/ is made again on the tmpfs, meta/
	 * holds the proxy socket (an empty path: none made). */
	worker_ws_t *ws;
	worker_sandbox_driver_t driver;
	/* A cgroup made ahead of the run, its sandbox already inside (a warm
	 * one's): the guard takes it over (*cgroup is left empty), writes the
	 * run's limits into it and renames it after the run, instead of making
	 * one.  NULL: a new cgroup. */
	worker_cgroup_t *cgroup;
	/* 1: the proxy socket goes into ws's sock/ (a warm agent's socket
	 * directory, bound into its sandbox before the run) instead of meta/. */
	int sock_dir;
} worker_guard_args_t;

/*
 * Resolves the run's limits and egress against the worker's (notes for
 * each refused value), mounts the workspace, creates the cgroup and starts
 * the proxy.  NULL with errstr on failure (nothing left behind).
 */
worker_guard_t *worker_guard_new(const worker_limits_env_t *env, const worker_guard_args_t *a,
                                 worker_guard_note_fn note, void *arg,
                                 char *errstr, size_t errstr_size);

/* The run's resolved limits. */
const worker_limits_t *worker_guard_limits(const worker_guard_t *g);
worker_egress_mode_t worker_guard_egress(const worker_guard_t *g);

/* 1 when the guard mounted the run's workspace tmpfs in the worker's
 * namespace and it is still there. */
int worker_guard_workspace_mounted(const worker_guard_t *g);

/* The workspace tmpfs left the worker's namespace (worker_ws_detach):
 * root reaches it now, and nothing is unmounted at the end. */
void worker_guard_workspace_detached(worker_guard_t *g, const char *root);

/* Fills the sandbox spec's limit and network fields (cgroup fds, tmpfs
 * size, rlimit fallbacks, network sharing, the egress bridge). */
void worker_guard_sandbox_spec(worker_guard_t *g, worker_sandbox_spec_t *spec);

/* An fd that becomes readable when the guard has something to say (an
 * egress refusal), or -1.  Poll it beside the agent's pipes. */
int worker_guard_fd(const worker_guard_t *g);

/* The procs files of the run's cgroup (for worker_cgroup_call), *n of
 * them; NULL with *n = 0 when the host has no cgroups. */
const int *worker_guard_cgroup_fds(const worker_guard_t *g, int *n);

/*
 * Between reads: passes pending egress notes to note() and checks the
 * limits (at most every 100 ms; the rest return the last answer).  The
 * limit hit, or WORKER_LIMIT_NONE.  *next_ms: when to call again.
 */
worker_limit_t worker_guard_tick(worker_guard_t *g, int64_t now_ms, int64_t *next_ms);

/*
 * Before a line of len bytes is published: 0 to publish it, 1 when it
 * would take the run past its output cap (it is then dropped, and the
 * guard reports WORKER_LIMIT_OUTPUT from now on).  g may be NULL (no
 * guard yet: 0).
 */
int worker_guard_output(worker_guard_t *g, size_t len);

/* After the sandbox ended: one last look (an OOM kill of the agent itself). */
worker_limit_t worker_guard_final(worker_guard_t *g);

/* "The run used more than 512 MiB of memory." */
void worker_guard_message(const worker_guard_t *g, worker_limit_t l, char *buf, size_t size);

/* Stops the proxy, removes the cgroup (killing what is left) and unmounts
 * the workspace.  Call after writeback, before removing the run directory. */
void worker_guard_free(worker_guard_t *g);

#endif
