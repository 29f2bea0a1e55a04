/*
 * worker/sandbox.h - starting the agent in a fresh sandbox (SPEC §6).
 *
 * Two drivers: "bwrap" (bubblewrap: read-only root, /root/workspace
 * read-write, tmpfs /tmp, new user/pid/ipc/uts namespaces, optional new net
 * namespace, no nested user namespaces, a seccomp filter (worker/seccomp.h),
 * --die-with-parent, a new session, a fixed environment for bwrap and the
 * run's own handed over inside, never host uid 0, rlimits) and "process" (a
 * plain child in its own process group; isolates nothing and says so
 * loudly at worker start).
 *
 * The setup script, when present, runs first in the same sandbox, with its
 * stdout sent to stderr so it cannot forge envelope lines; a failing setup
 * script exits the sandbox with WORKER_SANDBOX_SETUP_FAILED.
 *
 * The spawn reports an exec failure instead of guessing it (a CLOEXEC pipe
 * from the child): "cannot exec bwrap: No such file or directory".
 *
 * The child calls setsid(): the sandbox is a session and a process group of
 * its own (pgid == pid, no controlling terminal) holding bwrap, its init and
 * everything the agent starts.  It gets PR_SET_PDEATHSIG(SIGKILL), which the
 * kernel sends when the *thread* that called worker_sandbox_spawn exits:
 * spawn, kill, reap and destroy a sandbox from one thread that outlives it.
 * Writing to stdin_fd after the agent exited raises SIGPIPE: the worker
 * ignores SIGPIPE.  See docs/sandbox.md for every flag and why.
 *
 * @locality the run's thread.
 */
#ifndef RUNNEL_WORKER_SANDBOX_H
#define RUNNEL_WORKER_SANDBOX_H

#include <stddef.h>
#include <sys/types.h>

#include "common/sandbox_layout.h"

#define WORKER_SANDBOX_SETUP_FAILED RN_SANDBOX_SETUP_FAILED /* exit status when setup fails */

/* The setup script and its wrapper: see common/sandbox_layout.h. */
#define WORKER_SANDBOX_SETUP_PATH    RN_SANDBOX_SETUP_PATH
#define WORKER_SANDBOX_SETUP_WRAPPER RN_SANDBOX_SETUP_WRAPPER

typedef enum {
	WORKER_SANDBOX_BWRAP = 0,
	WORKER_SANDBOX_PROCESS,
} worker_sandbox_driver_t;

typedef struct worker_sandbox_spec {
	worker_sandbox_driver_t driver;
	const char *bwrap_path;    /* NULL = "bwrap" from PATH */
	const char *rootfs;        /* NULL = bind the host's /usr, /bin, /lib*, /etc read-only */
	const char *workspace_dir; /* host dir -> /root/workspace (rw) */
	const char *skills_dir;    /* host dir -> /root/skills (ro), or NULL */
	const char *setup_script;  /* host file -> run first, or NULL */
	char *const *argv;         /* the agent, as seen inside the sandbox */
	char *const *envp;         /* the complete environment (built by the caller) */
	char *const *ro_binds;     /* extra "host:sandbox" read-only binds (the mock agent), or NULL */
	int share_net;             /* 1: share the host network; 0: new empty net namespace */
	long rlimit_nofile;        /* 0 = leave */
	long rlimit_nproc;         /* 0 = leave */
	long rlimit_as_mb;         /* 0 = leave */
	long rlimit_fsize_mb;      /* 0 = leave */
	/* Limits and egress (worker/limits.h fills these). */
	const int *cgroup_fds; /* cgroup.procs files the child enters before exec, or NULL */
	int ncgroup_fds;
	long tmp_mb;               /* size of /tmp, /root and /run tmpfs; 0 = the kernel's default */
	const char *egress_bridge; /* host path of runnel-egress-bridge: run the agent behind it, or NULL */
	const char *egress_socket; /* host path of the run's egress proxy socket (with egress_bridge) */
	/* A warm agent's socket directory (host), bound read-only at
	 * RN_SANDBOX_SOCK_DIR; with it the egress bridge connects to the
	 * proxy socket there (created at claim time) and egress_socket is
	 * neither needed nor bound. */
	const char *sock_dir;
	/* bwrap only.  The host's runnel-warm-init: the first program of every
	 * bwrap sandbox, cold or warm, which receives the agent's argv,
	 * environment and setup script over stdin (worker_sandbox_launch). */
	const char *init_path;
	/* Host ids bwrap and everything in the sandbox run as when the worker
	 * runs as root (a sandbox never holds the host's uid 0); 0 = 65534
	 * (WORKER_SANDBOX_ID_DEFAULT).  Ignored otherwise: an unprivileged
	 * worker's sandboxes run as the worker's own uid. */
	long uid, gid;
} worker_sandbox_spec_t;

#define WORKER_SANDBOX_ID_DEFAULT 65534L /* "nobody" on Debian */

typedef struct worker_sandbox {
	pid_t pid;     /* the process we started (bwrap or the agent); process group leader */
	int stdin_fd;  /* write end, O_CLOEXEC, blocking */
	int stdout_fd; /* read end, O_CLOEXEC|O_NONBLOCK */
	int stderr_fd; /* read end, O_CLOEXEC|O_NONBLOCK */
	int info_fd;   /* bwrap's --info-fd, read end (worker_sandbox_wait_cloned); -1 */
	int exited;
	int status;                     /* waitpid status once exited */
	worker_sandbox_driver_t driver; /* set by worker_sandbox_spawn */
} worker_sandbox_t;

/*
 * Starts the sandbox.  0, or -1 with errstr (exec failure included).
 *
 * No host process ever carries the run's environment: under bwrap, bwrap
 * gets a fixed one (nothing the run chose reaches the host's dynamic
 * loader, SPEC §6) and the agent's environment, argv and setup script go
 * to the sandbox's init over its stdin (worker_sandbox_launch) once it
 * runs inside the namespaces.  When the worker is root, bwrap itself runs
 * as spec->uid/gid, so the sandbox's uid 0 maps onto that unprivileged
 * host uid; the workspace (and skills) are handed to that uid first.
 */
int worker_sandbox_spawn(const worker_sandbox_spec_t *spec, worker_sandbox_t *sb,
                         char *errstr, size_t errstr_size);

/*
 * The two halves of worker_sandbox_spawn for bwrap (warm sandboxes):
 * worker_sandbox_start starts bwrap with the init waiting on stdin
 * (spec's argv, envp and setup_script unused); worker_sandbox_launch hands
 * the workspace to the sandbox's uid and sends spec's argv, environment
 * (with the egress proxy variables when spec has a bridge) and setup
 * script to the init.  The message is wiped from memory once written: it
 * carries the run's secrets.  0, or -1 with errstr ("the sandbox is gone"
 * when nothing reads it).
 */
int worker_sandbox_start(const worker_sandbox_spec_t *spec, worker_sandbox_t *sb,
                         char *errstr, size_t errstr_size);
int worker_sandbox_launch(worker_sandbox_t *sb, const worker_sandbox_spec_t *spec,
                          char *errstr, size_t errstr_size);

/* Gives spec's workspace and skills trees to the sandbox's ids (a root
 * worker's; nothing otherwise), as worker_sandbox_launch does before the
 * agent starts: a warm agent's run, whose agent started before the run's
 * files were written, calls it before the prompt.  0, or -1 with errstr. */
int worker_sandbox_hand_over(const worker_sandbox_spec_t *spec, char *errstr, size_t errstr_size);

/*
 * The host uid and gid the sandbox of spec runs as: spec's (or the
 * default) when this process is root, 1 returned; our own ids otherwise,
 * 0 returned.  Files the worker writes into a running sandbox's workspace
 * belong to these ids.
 */
int worker_sandbox_ids(const worker_sandbox_spec_t *spec, uid_t *uid, gid_t *gid);

/*
 * 1 when a variable of this name (NAME or NAME=VALUE) is never passed to
 * an agent: the dynamic loader's and libc's own variables, which make any
 * program load code or read files they name (glibc's "unsecure"
 * environment list, without TMPDIR, LOCALDOMAIN and RES_OPTIONS).  The
 * worker drops them from a run's environment with a log line.
 */
int worker_sandbox_env_refused(const char *name);

/*
 * Waits up to timeout_ms until bwrap has made the sandbox's namespaces
 * (its --info-fd said so): from then on the sandbox has its own copy of
 * every mount, and the worker may unmount its own without touching the
 * sandbox's.  1 when it has, 0 otherwise (the process driver, bwrap
 * ended first, or not yet).  Once per sandbox: it closes the pipe.
 */
int worker_sandbox_wait_cloned(worker_sandbox_t *sb, int timeout_ms);

/*
 * Sends sig to the whole tree (process group; the pid namespace dies with its
 * init).  SIGKILL goes to the group and the pid.  Any other signal goes to
 * every member of the group except the leader: under bwrap that leaves bwrap
 * alive, so a SIGTERM reaches the agent and gives it its grace period
 * instead of tearing the namespace down at once.  No-op once reaped.
 */
void worker_sandbox_kill(worker_sandbox_t *sb, int sig);

/*
 * Reaps without blocking; 1 when it has exited (sb->status set), 0 if not yet, -1 on error.
 * When the leader has exited, what is left of its process group is killed
 * (SIGKILL) before the leader is reaped, so nothing the agent started
 * outlives it.  Under bwrap the exit status is the agent's (bwrap reports
 * 128 + N for an agent killed by signal N).
 */
int worker_sandbox_reap(worker_sandbox_t *sb);

/*
 * The sandbox's init outlives bwrap's outer process by a moment and is then
 * orphaned.  worker_sandbox_adopt_orphans() makes this process a child
 * subreaper (PR_SET_CHILD_SUBREAPER), so those inits come to it wherever it
 * runs, as they do when it is a container's pid 1; 0 or -1 (errno).
 * worker_sandbox_reap_orphans() reaps the ones that have exited (zombies in
 * a nested pid namespace, never a child this process started itself);
 * worker_sandbox_reap() and worker_sandbox_destroy() call it after each
 * sandbox.  Thread-safe, never blocks.
 */
int worker_sandbox_adopt_orphans(void);
void worker_sandbox_reap_orphans(void);

/* Closes the fds, SIGKILLs the tree if it still runs, and reaps it (blocking). */
void worker_sandbox_destroy(worker_sandbox_t *sb);

/*
 * 0 when the driver can run here (bwrap present, user namespaces allowed),
 * -1 with errstr.  worker_sandbox_probe_as runs the test sandbox as the
 * ids a sandbox of ids_of would run as (worker_sandbox_ids: a root
 * worker's sandboxes need unprivileged user namespaces too);
 * worker_sandbox_probe as the default ones.
 */
int worker_sandbox_probe(worker_sandbox_driver_t driver, const char *bwrap_path,
                         char *errstr, size_t errstr_size);
int worker_sandbox_probe_as(worker_sandbox_driver_t driver, const char *bwrap_path,
                            const worker_sandbox_spec_t *ids_of, char *errstr, size_t errstr_size);

#endif
