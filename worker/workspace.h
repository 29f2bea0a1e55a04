/*
 * worker/workspace.h - the run's private directory tree on the host, and
 * the bag (assets.zip_url) and skill bundles unpacked into it (SPEC §5, §6).
 *
 * Layout of a run directory <root>/<run_id>/:
 *   workspace/          -> /root/workspace in the sandbox (read-write)
 *   workspace/assets/   files written back after a result
 *   skills/<name>/      -> /root/skills/<name> (read-only)
 *   meta/               worker-private (setup script, proxy socket); never
 *                       bound into the sandbox except the files it names
 *   meta/home/          the agent's HOME when there is no bwrap
 *   sock/               a warm agent's sockets (the run's egress proxy and
 *                       model gateway), bound at /run/runnel/sock
 * This file makes every directory of a run and of the work directory:
 * worker_ws_create makes the top, workspace/ and assets/; worker_ws_make
 * makes the others on first need (skills/, meta/, meta/home/, and assets/
 * again on the run's tmpfs), worker_ws_make_skill each skills/<name>/.
 *
 * Names in the work directory: a run's directory is its run id, which is
 * [A-Za-z0-9_-]{1,64} (proto/keys.h); every directory of the worker's own
 * (warm sandboxes, recycled trees, the mount probe) has a '.' in its name,
 * which no run id can spell, so no run can be given another's tree.
 *
 * Extraction refuses absolute paths, "..", links whose target leaves the
 * tree, hard links, devices and fifos, more than max_entries entries, and
 * more than max_bytes of unpacked data (a zip bomb stops at the cap, not
 * after writing it).  A refusal reports reject=1 and the reason; the caller
 * ends the run bag_rejected.  Reasons (no "bag_rejected" prefix):
 *   entry "../evil" leaves the workspace
 *   entry "/etc/evil" is an absolute path
 *   entry "link" is a symlink leaving the workspace
 *   entry "ln/evil" goes through a symlink or a file
 *   entry "x" is already there
 *   entry "hard" is a hard link           (also: is a device, fifo, socket)
 *   archive has more than 10000 entries
 *   archive unpacks to more than 1073741824 bytes
 *   download of https://host/path is larger than 268435456 bytes
 *   not a zip archive (...), archive is damaged: ...
 *   archive does not fit the run's memory limit
 * Zip, tar and tar.gz are read.  Files get 0755 (any x bit) or 0644, dirs
 * 0755; nothing else of the archive's metadata is applied.  See
 * docs/sandbox.md.
 *
 * @locality the run's thread (blocking).
 */
#ifndef RUNNEL_WORKER_WORKSPACE_H
#define RUNNEL_WORKER_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/httpc.h"
#include "worker/stop.h"

#define WORKER_PATH_MAX 4096

typedef struct worker_bag_limits {
	uint64_t max_download; /* bytes of the zip itself; default 256 MiB */
	uint64_t max_bytes;    /* unpacked bytes; default 1 GiB */
	uint64_t max_entries;  /* default 10000 */
	long timeout_ms;       /* download; default 120000 */
	/* Any stop ends the download (error "cancelled"); NULL = never. */
	const worker_stopword_t *stop;
	/* Where the download may connect (worker/httpc.h): the URL is the
	 * run's, so inside addresses only for named hosts.  reach.on 0 =
	 * anywhere. */
	worker_httpc_reach_t reach;
	/* The run's cgroup (worker_guard_cgroup_fds): the unpacking runs in
	 * runnel-unpack (unpack_path), started inside it, so the run is
	 * charged for the files' tmpfs pages (worker_cgroup_exec).  NULL:
	 * unpacked by this thread. */
	const int *cgroup_fds;
	int ncgroup_fds;
	const char *unpack_path; /* runnel-unpack; required with cgroup_fds */
} worker_bag_limits_t;

typedef struct worker_ws {
	char dir[WORKER_PATH_MAX];       /* <root>/<run_id> */
	char workspace[WORKER_PATH_MAX]; /* .../workspace */
	char assets[WORKER_PATH_MAX];    /* .../workspace/assets */
	char skills[WORKER_PATH_MAX];    /* .../skills */
	char meta[WORKER_PATH_MAX];      /* .../meta */
	char home[WORKER_PATH_MAX];      /* .../meta/home */
	char sock[WORKER_PATH_MAX];      /* .../sock */
	/* worker_ws_detach: the workspace tmpfs, no longer mounted in the
	 * worker's namespace, held open here (assets then reads through it). */
	int detached;
	int detached_fd;
} worker_ws_t;

/* The subdirectories worker_ws_make makes (see the layout above). */
typedef enum worker_ws_sub {
	WORKER_WS_ASSETS, /* workspace/assets/, 0755 */
	WORKER_WS_SKILLS, /* skills/, 0755 */
	WORKER_WS_META,   /* meta/, 0711 (searchable: the proxy socket is bound from it) */
	WORKER_WS_HOME,   /* meta/home/, 0700 (meta/ first) */
	WORKER_WS_SOCK,   /* sock/, 0711 (a warm agent's: bound whole, holds sockets only) */
} worker_ws_sub_t;

/* Makes sub unless it is there; its path (in ws), or NULL with errno. */
const char *worker_ws_make(worker_ws_t *ws, worker_ws_sub_t sub);

/* Makes skills/<name>/ (0700; name checked by the caller, no '/'), its
 * path in out.  0, or -1 with errno. */
int worker_ws_make_skill(worker_ws_t *ws, const char *name, char *out, size_t out_size);

/* Makes the work directory root (mkdir -p, 0711: the sandboxes' uid binds
 * from below it).  0, or -1 with errstr. */
int worker_ws_root(const char *root, char *errstr, size_t errstr_size);

/* Makes "<root>/.<tag>-<pid>" (0700) for a short-lived directory of the
 * worker's own, its path in out.  0, or -1 with errno. */
int worker_ws_scratch(const char *root, const char *tag, char *out, size_t out_size);

/*
 * Opens the run's workspace/ as an O_PATH directory descriptor (the
 * caller's, close-on-exec): file access on the run's behalf (an ACP
 * agent's fs requests) goes beneath it, so it reaches the same tmpfs the
 * sandbox sees, also after worker_ws_detach.  Open it once the tmpfs is
 * mounted.  The descriptor, or -1 with errno.
 */
int worker_ws_open(const worker_ws_t *ws);

/*
 * Takes the workspace's own mount (a tmpfs) out of the worker's mount
 * namespace once a sandbox has its copy: every bwrap copies, and unmounts
 * again, each mount of the namespace it starts from, so each one left
 * there costs every later sandbox.  The tmpfs lives on in the sandbox and
 * in a descriptor kept here: ws->assets becomes "/proc/self/fd/N/assets"
 * and *root (size WORKER_PATH_MAX) the tmpfs's root.  worker_ws_remove()
 * closes it.  0, or -1 with errstr and ws unchanged.
 */
int worker_ws_detach(worker_ws_t *ws, char *root, char *errstr, size_t errstr_size);

/*
 * Ends a run's directory like worker_ws_remove(), but keeps the tree for a
 * later worker_ws_create() when nothing of the run can be in it: its
 * workspace was a detached tmpfs, meta/ and skills/ are removed, and the
 * rest must be exactly the empty workspace/assets/ the worker made (else
 * it is removed).  A kept tree is renamed ".recycled-<pid>-<n>" in the same
 * work directory (64 at most); worker_ws_recycle_drain() removes them.
 */
int worker_ws_recycle(worker_ws_t *ws);
void worker_ws_recycle_drain(void);

/* Creates a run's fresh tree <root>/<run_id> (mode 0700 at the top), or
 * renames a recycled one into place.  Fails when it exists or run_id is
 * not a run id. */
int worker_ws_create(worker_ws_t *ws, const char *root, const char *run_id,
                     char *errstr, size_t errstr_size);

/* The same for a tree of the worker's own that a run takes over later (a
 * warm sandbox's): "<root>/<tag>.<pid>.<seq>", a name no run id spells;
 * *name (size 64, may be NULL) gets its last component. */
int worker_ws_create_own(worker_ws_t *ws, const char *root, const char *tag, unsigned long seq,
                         char *name, char *errstr, size_t errstr_size);

/*
 * Downloads url and extracts it under dest_dir (which must exist).
 * Returns 0, or -1 with *reject = 1 for a refused archive (bag_rejected) or
 * *reject = 0 for a download failure.  errstr never contains the URL's
 * query string (signed URLs carry credentials).  http/https only, at most 3
 * redirects, no Authorization header.  The download goes to an unnamed
 * O_TMPFILE next to dest_dir (in its parent directory), never into it.
 */
int worker_ws_fetch_zip(const char *url, const char *dest_dir,
                        const worker_bag_limits_t *limits, int *reject,
                        char *errstr, size_t errstr_size);

/* runnel-unpack's exit statuses (2: it was called wrongly). */
#define WORKER_UNPACK_OK       0
#define WORKER_UNPACK_FAILED   1 /* its answer says why */
#define WORKER_UNPACK_REJECTED 3 /* a refused archive; its answer says why */

/* Extracts the archive open on fd (read from its offset) under dest_dir,
 * by this thread, whatever limits->cgroup_fds says (runnel-unpack's
 * work).  0, or -1 with errstr and *reject as above. */
int worker_ws_extract_fd(int fd, const char *dest_dir, const worker_bag_limits_t *limits, int *reject,
                         char *errstr, size_t errstr_size);

/* Extracts an archive already on disk (tests, bench).  Same contract. */
int worker_ws_extract_file(const char *zip_path, const char *dest_dir,
                           const worker_bag_limits_t *limits,
                           char *errstr, size_t errstr_size);

/* Removes the whole tree, never following symlinks.  0 or -1. */
int worker_ws_remove(worker_ws_t *ws);

#endif
