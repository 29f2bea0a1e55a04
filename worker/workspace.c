/*
 * worker/workspace.c - the run's directory tree on the host, the download of
 * bags and skill bundles, their extraction under strict rules, and the
 * removal of the tree.
 *
 * Extraction reads with libarchive but writes itself, relative to the
 * destination's directory fd (mkdirat/openat/symlinkat, O_NOFOLLOW on every
 * step): libarchive's disk writer resolves paths from the process's current
 * directory, which a worker running several runs on several threads cannot
 * change, and this way no path component is ever followed through a link.
 */
#include "worker/workspace.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "proto/keys.h"
#include "worker/cgroup.h"
#include "worker/httpc.h"

#define DEF_MAX_DOWNLOAD   (256ULL << 20)
#define DEF_MAX_BYTES      (1ULL << 30)
#define DEF_MAX_ENTRIES    10000ULL
#define DEF_TIMEOUT_MS     120000L
#define CONNECT_TIMEOUT_MS 10000L
#define MAX_REDIRECTS      3L
#define NAME_QUOTE_MAX     80  /* bytes of an entry name quoted in errors */
#define COMPONENTS_MAX     256 /* path depth inside an archive */
#define REMOVE_DEPTH_MAX   512
#define COPY_BUF           (64 * 1024)

static void limits_resolve(const worker_bag_limits_t *in, worker_bag_limits_t *out)
{
	memset(out, 0, sizeof(*out));
	if (in)
		*out = *in;
	if (!out->max_download)
		out->max_download = DEF_MAX_DOWNLOAD;
	if (!out->max_bytes)
		out->max_bytes = DEF_MAX_BYTES;
	if (!out->max_entries)
		out->max_entries = DEF_MAX_ENTRIES;
	if (out->timeout_ms <= 0)
		out->timeout_ms = DEF_TIMEOUT_MS;
}

/* mkdir -p for the worker's own root (not for archive content). */
static int mkdir_parents(const char *path, mode_t mode)
{
	char tmp[WORKER_PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s", path) >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

/*
 * Run directories made once and renamed into place for each run
 * (worker_ws_recycle): on this project's CI host, ext4 allocating and
 * freeing three directory inodes per run was a third of the run threads'
 * CPU (docs/worker.md).  Full paths, all under one work directory.
 */
#define RECYCLE_MAX 64
static pthread_mutex_t recycle_mu = PTHREAD_MUTEX_INITIALIZER;
static char recycled[RECYCLE_MAX][WORKER_PATH_MAX];
static size_t nrecycled;
static unsigned long recycle_seq;

/* Moves a recycled tree under root to dir; 1 when done. */
static int recycle_take(const char *root, const char *dir)
{
	size_t rl = strlen(root);
	int done = 0;
	pthread_mutex_lock(&recycle_mu);
	const char *from = nrecycled ? recycled[nrecycled - 1] : NULL;
	if (from && !strncmp(from, root, rl) && from[rl] == '/') {
		if (renameat2(AT_FDCWD, from, AT_FDCWD, dir, RENAME_NOREPLACE) == 0)
			done = 1, nrecycled--;
		else if (errno != EEXIST)
			nrecycled--; /* gone from under us: forgotten */
	}
	pthread_mutex_unlock(&recycle_mu);
	return done;
}

int worker_ws_root(const char *root, char *errstr, size_t errstr_size)
{
	if (!root || root[0] != '/') {
		snprintf(errstr, errstr_size, "workspace: root must be an absolute path");
		return -1;
	}
	/* 0711: searchable, never listable.  A root worker's bwrap runs as
	 * the sandbox's uid (worker/sandbox.h) and must reach the workspace
	 * to bind it; what lies below keeps its own modes.  A root of our own
	 * made 0700 earlier gets the search bits. */
	if (mkdir_parents(root, 0711) != 0) {
		snprintf(errstr, errstr_size, "workspace: cannot create %s: %s", root, strerror(errno));
		return -1;
	}
	struct stat st;
	if (stat(root, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0011) != 0011)
		chmod(root, (st.st_mode & 07777) | 0011);
	return 0;
}

/* Fills ws's paths for the tree <root>/<name>; 0, or -1 when too long. */
static int ws_layout(worker_ws_t *ws, const char *root, const char *name)
{
	memset(ws, 0, sizeof(*ws));
	if ((size_t)snprintf(ws->dir, sizeof(ws->dir), "%s/%s", root, name) >= sizeof(ws->dir) ||
	    (size_t)snprintf(ws->workspace, sizeof(ws->workspace), "%s/workspace", ws->dir) >= sizeof(ws->workspace) ||
	    (size_t)snprintf(ws->assets, sizeof(ws->assets), "%s/assets", ws->workspace) >= sizeof(ws->assets) ||
	    (size_t)snprintf(ws->skills, sizeof(ws->skills), "%s/skills", ws->dir) >= sizeof(ws->skills) ||
	    (size_t)snprintf(ws->meta, sizeof(ws->meta), "%s/meta", ws->dir) >= sizeof(ws->meta) ||
	    (size_t)snprintf(ws->home, sizeof(ws->home), "%s/home", ws->meta) >= sizeof(ws->home) ||
	    (size_t)snprintf(ws->sock, sizeof(ws->sock), "%s/sock", ws->dir) >= sizeof(ws->sock)) {
		memset(ws, 0, sizeof(*ws));
		return -1;
	}
	return 0;
}

/* The tree <root>/<name> (name checked by the caller). */
static int ws_create(worker_ws_t *ws, const char *root, const char *name, char *errstr, size_t errstr_size)
{
	if (worker_ws_root(root, errstr, errstr_size) < 0) {
		memset(ws, 0, sizeof(*ws));
		return -1;
	}
	if (ws_layout(ws, root, name) < 0) {
		snprintf(errstr, errstr_size, "workspace: path too long");
		return -1;
	}
	if (recycle_take(root, ws->dir))
		return 0; /* the same tree: dir, workspace/, workspace/assets/, all empty */
	if (mkdir(ws->dir, 0711) != 0) {
		snprintf(errstr, errstr_size, "workspace: cannot create %s: %s", ws->dir, strerror(errno));
		memset(ws, 0, sizeof(*ws));
		return -1;
	}
	/*
	 * The top is 0711 (see worker_ws_root); what the sandbox sees below is
	 * the agent's, handed to its uid at launch (worker/sandbox.h).  skills/
	 * and meta/ are made by the run when it has skills or a setup script:
	 * on a busy disk every directory made and removed per run costs CPU
	 * (ext4 skips recently freed inodes), see docs/worker.md.
	 */
	if (mkdir(ws->workspace, 0755) != 0 || mkdir(ws->assets, 0755) != 0) {
		snprintf(errstr, errstr_size, "workspace: cannot create the tree in %s: %s", ws->dir,
		         strerror(errno));
		worker_ws_remove(ws);
		return -1;
	}
	return 0;
}

int worker_ws_create(worker_ws_t *ws, const char *root, const char *run_id,
                     char *errstr, size_t errstr_size)
{
	memset(ws, 0, sizeof(*ws));
	if (!root || root[0] != '/') {
		snprintf(errstr, errstr_size, "workspace: root must be an absolute path");
		return -1;
	}
	/* The check that keeps a run out of the worker's own trees: a run id
	 * never holds the '.' every one of their names has. */
	if (!run_id || !proto_run_id_valid(run_id)) {
		snprintf(errstr, errstr_size, "workspace: invalid run id");
		return -1;
	}
	return ws_create(ws, root, run_id, errstr, errstr_size);
}

int worker_ws_create_own(worker_ws_t *ws, const char *root, const char *tag, unsigned long seq,
                         char *name, char *errstr, size_t errstr_size)
{
	char own[64];
	memset(ws, 0, sizeof(*ws));
	if (!root || root[0] != '/') {
		snprintf(errstr, errstr_size, "workspace: root must be an absolute path");
		return -1;
	}
	int n = snprintf(own, sizeof(own), "%s.%ld.%lu", tag, (long)getpid(), seq);
	if (n < 0 || (size_t)n >= sizeof(own) || strchr(tag, '/')) {
		snprintf(errstr, errstr_size, "workspace: bad name");
		return -1;
	}
	if (name)
		memcpy(name, own, (size_t)n + 1);
	return ws_create(ws, root, own, errstr, errstr_size);
}

const char *worker_ws_make(worker_ws_t *ws, worker_ws_sub_t sub)
{
	const char *path = NULL;
	mode_t mode = 0700;
	switch (sub) {
	case WORKER_WS_ASSETS:
		path = ws->assets, mode = 0755;
		break;
	case WORKER_WS_SKILLS:
		path = ws->skills, mode = 0755;
		break;
	case WORKER_WS_META:
		/* 0711: a root worker's bwrap, as the sandbox's uid, binds the
		 * proxy's socket from here; the setup script is 0500. */
		path = ws->meta, mode = 0711;
		break;
	case WORKER_WS_HOME:
		if (!worker_ws_make(ws, WORKER_WS_META))
			return NULL;
		path = ws->home;
		break;
	case WORKER_WS_SOCK:
		/* 0711: the sandbox's uid passes through to its own sockets. */
		path = ws->sock, mode = 0711;
		break;
	}
	if (!path || !path[0]) {
		errno = EINVAL;
		return NULL;
	}
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return NULL;
	return path;
}

int worker_ws_make_skill(worker_ws_t *ws, const char *name, char *out, size_t out_size)
{
	if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
		errno = EINVAL;
		return -1;
	}
	if ((size_t)snprintf(out, out_size, "%s/%s", ws->skills, name) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (!worker_ws_make(ws, WORKER_WS_SKILLS) || (mkdir(out, 0700) != 0 && errno != EEXIST))
		return -1;
	return 0;
}

int worker_ws_scratch(const char *root, const char *tag, char *out, size_t out_size)
{
	if (mkdir(root, 0700) != 0 && errno != EEXIST)
		return -1;
	int n = snprintf(out, out_size, "%s/.%s-%ld", root, tag, (long)getpid());
	if (n < 0 || (size_t)n >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (mkdir(out, 0700) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

int worker_ws_open(const worker_ws_t *ws)
{
	return open(ws->workspace, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* ------------------------------------------------------------------------
 * Extraction
 * ------------------------------------------------------------------------ */

/* Quotes an entry name for a message: printable ASCII, escaped, truncated. */
static void quote_name(const char *name, char *out, size_t out_size)
{
	size_t o = 0;
	int truncated = 0;
	for (size_t i = 0; name[i]; i++) {
		unsigned char c = (unsigned char)name[i];
		char esc[8];
		if (c == '"' || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			snprintf(esc, sizeof(esc), "\\x%02x", c);
		else
			snprintf(esc, sizeof(esc), "%c", c);
		size_t el = strlen(esc);
		if (o + el + 4 >= out_size || i >= NAME_QUOTE_MAX) {
			truncated = 1;
			break;
		}
		memcpy(out + o, esc, el);
		o += el;
	}
	if (truncated && o + 4 < out_size) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

typedef struct extract {
	int root_fd;
	worker_bag_limits_t lim;
	uint64_t entries;
	uint64_t bytes;
	int reject; /* 1: the archive is refused (bag_rejected) */
	char *errstr;
	size_t errstr_size;
} extract_t;

static int refuse(extract_t *x, const char *name, const char *why)
{
	char q[NAME_QUOTE_MAX * 4 + 8];
	quote_name(name, q, sizeof(q));
	snprintf(x->errstr, x->errstr_size, "entry \"%s\" %s", q, why);
	x->reject = 1;
	return -1;
}

static int local_error(extract_t *x, const char *name, const char *what, int err)
{
	char q[NAME_QUOTE_MAX * 4 + 8];
	quote_name(name, q, sizeof(q));
	snprintf(x->errstr, x->errstr_size, "cannot %s \"%s\": %s", what, q, strerror(err));
	x->reject = 0;
	return -1;
}

/*
 * Splits an entry name into components, refusing absolute paths, "..",
 * and names too long or too deep.  comps point into buf.
 */
static int split_name(extract_t *x, const char *name, char *buf, size_t buf_size,
                      char **comps, int *ncomps)
{
	if (!name || !*name)
		return refuse(x, "", "has an empty name");
	if (name[0] == '/')
		return refuse(x, name, "is an absolute path");
	if ((size_t)snprintf(buf, buf_size, "%s", name) >= buf_size)
		return refuse(x, name, "has a name that is too long");
	int n = 0;
	char *c = buf;
	while (c) {
		char *slash = strchr(c, '/');
		if (slash)
			*slash = '\0';
		char *comp = c;
		c = slash ? slash + 1 : NULL;
		if (!*comp || strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0)
			return refuse(x, name, "leaves the workspace");
		if (strlen(comp) > NAME_MAX)
			return refuse(x, name, "has a name that is too long");
		if (n >= COMPONENTS_MAX)
			return refuse(x, name, "is nested too deep");
		comps[n++] = comp;
	}
	*ncomps = n;
	return 0;
}

/*
 * Opens (creating as needed) the directory holding the last component,
 * never following a link.  Returns an fd the caller closes, or -1.
 */
static int open_parent(extract_t *x, const char *name, char **comps, int ncomps)
{
	int fd = dup(x->root_fd);
	if (fd < 0)
		return local_error(x, name, "open the destination for", errno);
	for (int i = 0; i < ncomps - 1; i++) {
		if (mkdirat(fd, comps[i], 0755) != 0 && errno != EEXIST) {
			int e = errno;
			close(fd);
			return local_error(x, name, "create a directory for", e);
		}
		int next = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(fd);
		if (next < 0) {
			if (e == ELOOP || e == ENOTDIR)
				return refuse(x, name, "goes through a symlink or a file");
			return local_error(x, name, "open a directory for", e);
		}
		fd = next;
	}
	return fd;
}

/*
 * A symlink target is allowed when it is relative and, resolved lexically
 * from the link's own directory, never climbs above the archive's root.
 */
static int symlink_stays_inside(const char *target, int parent_depth)
{
	if (!*target || target[0] == '/')
		return 0;
	int depth = parent_depth;
	const char *p = target;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			if (--depth < 0)
				return 0;
		} else if (len > 0 && !(len == 1 && p[0] == '.')) {
			depth++;
		}
		if (!slash)
			break;
		p = slash + 1;
	}
	return 1;
}

static int write_file_data(extract_t *x, struct archive *a, int fd, const char *name)
{
	char *buf = malloc(COPY_BUF);
	if (!buf)
		return local_error(x, name, "allocate a buffer for", ENOMEM);
	int rc = 0;
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, COPY_BUF);
		if (n == 0)
			break;
		if (n < 0) {
			snprintf(x->errstr, x->errstr_size, "archive is damaged: %s",
			         archive_error_string(a) ? archive_error_string(a) : "read error");
			x->reject = 1;
			rc = -1;
			break;
		}
		/* Count before writing: a zip bomb stops at the cap. */
		if ((uint64_t)n > x->lim.max_bytes - x->bytes) {
			snprintf(x->errstr, x->errstr_size, "archive unpacks to more than %llu bytes",
			         (unsigned long long)x->lim.max_bytes);
			x->reject = 1;
			rc = -1;
			break;
		}
		x->bytes += (uint64_t)n;
		size_t off = 0;
		while (off < (size_t)n) {
			ssize_t w = write(fd, buf + off, (size_t)n - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				rc = local_error(x, name, "write", w < 0 ? errno : EIO);
				break;
			}
			off += (size_t)w;
		}
		if (rc)
			break;
	}
	free(buf);
	return rc;
}

static int extract_entry(extract_t *x, struct archive *a, struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e);
	if (!name)
		name = archive_entry_pathname_utf8(e);
	if (!name)
		return refuse(x, "?", "has a name that cannot be read");

	char buf[WORKER_PATH_MAX];
	char *comps[COMPONENTS_MAX];
	int ncomps = 0;
	if (split_name(x, name, buf, sizeof(buf), comps, &ncomps) != 0)
		return -1;

	if (archive_entry_hardlink(e))
		return refuse(x, name, "is a hard link");
	mode_t type = archive_entry_filetype(e);
	switch (type) {
	case AE_IFREG:
	case AE_IFDIR:
	case AE_IFLNK:
		break;
	case AE_IFCHR:
	case AE_IFBLK:
		return refuse(x, name, "is a device");
	case AE_IFIFO:
		return refuse(x, name, "is a fifo");
	case AE_IFSOCK:
		return refuse(x, name, "is a socket");
	default:
		return refuse(x, name, "has an unknown file type");
	}
	if (ncomps == 0) {
		if (type == AE_IFDIR)
			return 0; /* "./" */
		return refuse(x, name, "has an empty name");
	}

	int parent = open_parent(x, name, comps, ncomps);
	if (parent < 0)
		return -1;
	const char *leaf = comps[ncomps - 1];
	int rc = 0;

	if (type == AE_IFDIR) {
		if (mkdirat(parent, leaf, 0755) != 0) {
			struct stat st;
			if (errno != EEXIST || fstatat(parent, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
			    !S_ISDIR(st.st_mode))
				rc = refuse(x, name, "is already there as something else");
		}
	} else if (type == AE_IFLNK) {
		const char *target = archive_entry_symlink(e);
		if (!target)
			target = archive_entry_symlink_utf8(e);
		if (!target || !symlink_stays_inside(target, ncomps - 1))
			rc = refuse(x, name, "is a symlink leaving the workspace");
		else if (symlinkat(target, parent, leaf) != 0)
			rc = errno == EEXIST ? refuse(x, name, "is already there")
			                     : local_error(x, name, "create the symlink", errno);
	} else {
		if (archive_entry_size_is_set(e) &&
		    (uint64_t)archive_entry_size(e) > x->lim.max_bytes - x->bytes) {
			close(parent);
			snprintf(x->errstr, x->errstr_size, "archive unpacks to more than %llu bytes",
			         (unsigned long long)x->lim.max_bytes);
			x->reject = 1;
			return -1;
		}
		/* Executable bits survive; setuid, setgid, sticky and group or
		 * world write never do. */
		mode_t mode = (archive_entry_perm(e) & 0111) ? 0755 : 0644;
		int fd = openat(parent, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		if (fd < 0) {
			rc = errno == EEXIST ? refuse(x, name, "is already there")
			                     : local_error(x, name, "create", errno);
		} else {
			rc = write_file_data(x, a, fd, name);
			if (close(fd) != 0 && rc == 0)
				rc = local_error(x, name, "write", errno);
		}
	}
	close(parent);
	return rc;
}

int worker_ws_extract_fd(int fd, const char *dest_dir, const worker_bag_limits_t *limits, int *reject,
                         char *errstr, size_t errstr_size)
{
	extract_t x;
	memset(&x, 0, sizeof(x));
	limits_resolve(limits, &x.lim);
	x.errstr = errstr;
	x.errstr_size = errstr_size;
	*reject = 0;

	x.root_fd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (x.root_fd < 0) {
		snprintf(errstr, errstr_size, "cannot open %s: %s", dest_dir, strerror(errno));
		return -1;
	}
	struct archive *a = archive_read_new();
	if (!a) {
		close(x.root_fd);
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	archive_read_support_format_zip(a);
	archive_read_support_format_tar(a);
	archive_read_support_filter_gzip(a);

	int rc = 0;
	if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK) {
		snprintf(errstr, errstr_size, "not a zip archive (%s)",
		         archive_error_string(a) ? archive_error_string(a) : "unknown format");
		x.reject = 1;
		rc = -1;
		goto out;
	}
	for (;;) {
		struct archive_entry *e;
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			snprintf(errstr, errstr_size, "archive is damaged: %s",
			         archive_error_string(a) ? archive_error_string(a) : "read error");
			x.reject = 1;
			rc = -1;
			break;
		}
		if (++x.entries > x.lim.max_entries) {
			snprintf(errstr, errstr_size, "archive has more than %llu entries",
			         (unsigned long long)x.lim.max_entries);
			x.reject = 1;
			rc = -1;
			break;
		}
		if (extract_entry(&x, a, e) != 0) {
			rc = -1;
			break;
		}
	}
out:
	archive_read_free(a);
	close(x.root_fd);
	*reject = x.reject;
	return rc;
}

/*
 * worker_ws_extract_fd, in the run's cgroup when lim names one: tmpfs pages
 * are charged to the process that writes them, so runnel-unpack, started
 * in the cgroup, unpacks (never a fork of this multi-threaded worker: the
 * unpacking allocates, and a lock another thread held at the fork would
 * stay held in the child for good).  An unpacking the kernel kills
 * (SIGKILL: the run's memory limit, with memory.oom.group) is a refused
 * bag; the files it wrote stay charged to the run.
 */
static int extract_charged(int fd, const char *dest_dir, const worker_bag_limits_t *lim, int *reject,
                           char *errstr, size_t errstr_size)
{
	*reject = 0;
	if (!lim->cgroup_fds || lim->ncgroup_fds <= 0)
		return worker_ws_extract_fd(fd, dest_dir, lim, reject, errstr, errstr_size);
	if (!lim->unpack_path || !*lim->unpack_path) {
		snprintf(errstr, errstr_size, "unpacking: no runnel-unpack to unpack in the run's cgroup");
		return -1;
	}
	char bytes[32], entries[32], parent[32], ncg[16];
	snprintf(bytes, sizeof(bytes), "%llu", (unsigned long long)lim->max_bytes);
	snprintf(entries, sizeof(entries), "%llu", (unsigned long long)lim->max_entries);
	snprintf(parent, sizeof(parent), "%ld", (long)getpid());
	snprintf(ncg, sizeof(ncg), "%d", lim->ncgroup_fds);
	char *argv[] = { "runnel-unpack", (char *)dest_dir, bytes, entries, parent, ncg, NULL };
	int sig = 0;
	int rc = worker_cgroup_exec(lim->cgroup_fds, lim->ncgroup_fds, lim->stop, (int)lim->timeout_ms,
	                            lim->unpack_path, argv, fd, errstr, errstr_size, &sig);
	if (rc == WORKER_UNPACK_OK)
		return 0;
	if (rc == WORKER_UNPACK_REJECTED || rc == WORKER_UNPACK_FAILED) {
		*reject = rc == WORKER_UNPACK_REJECTED;
		if (!errstr[0])
			snprintf(errstr, errstr_size, "unpacking failed");
		return -1;
	}
	if (rc == WORKER_CGROUP_CALL_DIED && sig == SIGKILL) {
		snprintf(errstr, errstr_size, "archive does not fit the run's memory limit");
		*reject = 1;
	} else if (rc == WORKER_CGROUP_CALL_DIED && strcmp(errstr, "cancelled") != 0) {
		char why[256];
		snprintf(why, sizeof(why), "%s", errstr);
		snprintf(errstr, errstr_size, "unpacking: %s", why);
	} else if (rc != WORKER_CGROUP_CALL_DIED) {
		snprintf(errstr, errstr_size, "unpacking: runnel-unpack exited with status %d", rc);
	}
	return -1;
}

int worker_ws_extract_file(const char *zip_path, const char *dest_dir,
                           const worker_bag_limits_t *limits,
                           char *errstr, size_t errstr_size)
{
	int fd = open(zip_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(errstr, errstr_size, "cannot open %s: %s", zip_path, strerror(errno));
		return -1;
	}
	int reject;
	worker_bag_limits_t lim;
	limits_resolve(limits, &lim);
	int rc = extract_charged(fd, dest_dir, &lim, &reject, errstr, errstr_size);
	close(fd);
	return rc;
}

/* ------------------------------------------------------------------------
 * Download
 * ------------------------------------------------------------------------ */

typedef struct dl {
	int fd;
	uint64_t got;
	uint64_t max;
	int too_big;
	int io_errno;
} dl_t;

static size_t dl_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	dl_t *d = userdata;
	size_t n = size * nmemb;
	if ((uint64_t)n > d->max - d->got) {
		d->too_big = 1;
		return 0;
	}
	size_t off = 0;
	while (off < n) {
		ssize_t w = write(d->fd, ptr + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			d->io_errno = w < 0 ? errno : EIO;
			return 0;
		}
		off += (size_t)w;
	}
	d->got += n;
	return n;
}

/* The directory that holds path ("/" for a top-level one), in parent
 * (WORKER_PATH_MAX). */
static void parent_dir(const char *path, char *parent)
{
	snprintf(parent, WORKER_PATH_MAX, "%s", path);
	size_t len = strlen(parent);
	while (len > 1 && parent[len - 1] == '/')
		parent[--len] = '\0';
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	else if (slash)
		slash[1] = '\0';
}

/*
 * An unnamed temp file next to dest_dir (O_TMPFILE: nothing to clean up,
 * even after a crash, and invisible in the directory).
 */
static int open_temp_near(const char *dest_dir)
{
	char parent[WORKER_PATH_MAX];
	parent_dir(dest_dir, parent);
	int fd = open(parent, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd;
	char tmpl[WORKER_PATH_MAX];
	if ((size_t)snprintf(tmpl, sizeof(tmpl), "%s/.download-XXXXXX", parent) >= sizeof(tmpl)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = mkostemp(tmpl, O_CLOEXEC);
	if (fd >= 0)
		unlink(tmpl);
	return fd;
}

int worker_ws_fetch_zip(const char *url, const char *dest_dir,
                        const worker_bag_limits_t *limits, int *reject,
                        char *errstr, size_t errstr_size)
{
	worker_bag_limits_t lim;
	limits_resolve(limits, &lim);
	*reject = 0;
	char safe[512];
	worker_httpc_safe_url(url, safe, sizeof(safe));

	int fd = open_temp_near(dest_dir);
	if (fd < 0) {
		snprintf(errstr, errstr_size, "cannot create a temporary file next to %s: %s",
		         dest_dir, strerror(errno));
		return -1;
	}
	CURL *h = curl_easy_init();
	if (!h) {
		close(fd);
		snprintf(errstr, errstr_size, "download: out of memory");
		return -1;
	}
	dl_t d = { .fd = fd, .max = lim.max_download };
	worker_httpc_setup(h, CONNECT_TIMEOUT_MS, lim.timeout_ms);
	/* A signed URL carries no OTP, so a few redirects (to a CDN) are fine;
	 * no Authorization header is ever sent here. */
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, dl_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &d);
	curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)lim.max_download);
	worker_httpc_abort_on(h, lim.stop);
	worker_httpc_reach_state_t reach;
	worker_httpc_reach(h, limits ? &limits->reach : NULL, &reach);
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);

	int ret = -1;
	if (rc == CURLE_ABORTED_BY_CALLBACK && lim.stop && worker_stopword_any(lim.stop)) {
		snprintf(errstr, errstr_size, "cancelled");
	} else if (d.too_big || rc == CURLE_FILESIZE_EXCEEDED) {
		snprintf(errstr, errstr_size, "download of %s is larger than %llu bytes", safe,
		         (unsigned long long)lim.max_download);
		*reject = 1;
	} else if (d.io_errno) {
		snprintf(errstr, errstr_size, "download of %s: cannot write: %s", safe,
		         strerror(d.io_errno));
	} else if (rc != CURLE_OK && reach.refused[0]) {
		/* The host, never the URL's query: a signed URL carries a secret. */
		char hp[300];
		worker_httpc_host_port(url, hp, sizeof(hp));
		snprintf(errstr, errstr_size, "download of %s: %s resolves to %s, which a run's URL may not reach",
		         safe, hp, reach.refused);
	} else if (rc != CURLE_OK) {
		char why[256];
		worker_httpc_describe(h, rc, url, CONNECT_TIMEOUT_MS, lim.timeout_ms, why, sizeof(why));
		snprintf(errstr, errstr_size, "download of %s: %s", safe, why);
	} else if (status < 200 || status > 299) {
		snprintf(errstr, errstr_size, "download of %s answered HTTP %ld", safe, status);
	} else if (lseek(fd, 0, SEEK_SET) != 0) {
		snprintf(errstr, errstr_size, "download of %s: cannot rewind: %s", safe, strerror(errno));
	} else {
		ret = extract_charged(fd, dest_dir, &lim, reject, errstr, errstr_size);
	}
	curl_easy_cleanup(h);
	close(fd);
	return ret;
}

/* ------------------------------------------------------------------------
 * Removal
 * ------------------------------------------------------------------------ */

/*
 * Empties the directory open on dfd (which it closes), never following a
 * link: entries are removed with unlinkat and subdirectories are opened
 * with O_NOFOLLOW relative to their parent.  Directories the agent made
 * unreadable are made readable first.
 */
static int remove_contents(int dfd, int depth)
{
	if (depth > REMOVE_DEPTH_MAX) {
		close(dfd);
		errno = ELOOP;
		return -1;
	}
	fchmod(dfd, 0700);
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -1;
	}
	int rc = 0;
	struct dirent *de;
	/* Removing while reading: rewind after each pass until empty. */
	for (int pass = 0; pass < 2; pass++) {
		int removed_any = 0;
		while ((de = readdir(d))) {
			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			if (unlinkat(dirfd(d), de->d_name, 0) == 0) {
				removed_any = 1;
				continue;
			}
			if (errno != EISDIR) {
				rc = -1;
				continue;
			}
			int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				/* Unreadable: give ourselves access, then retry. */
				fchmodat(dirfd(d), de->d_name, 0700, 0);
				sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			}
			if (sub < 0 || remove_contents(sub, depth + 1) != 0 ||
			    unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) != 0)
				rc = -1;
			else
				removed_any = 1;
		}
		if (!removed_any)
			break;
		rewinddir(d);
	}
	closedir(d);
	return rc;
}

int worker_ws_detach(worker_ws_t *ws, char *root, char *errstr, size_t errstr_size)
{
	if (ws->detached) {
		snprintf(errstr, errstr_size, "the workspace is detached already");
		return -1;
	}
	int fd = open(ws->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(errstr, errstr_size, "cannot open %s: %s", ws->workspace, strerror(errno));
		return -1;
	}
	char assets[WORKER_PATH_MAX];
	snprintf(assets, sizeof(assets), "/proc/self/fd/%d/assets", fd);
	if (umount2(ws->workspace, MNT_DETACH) != 0) {
		snprintf(errstr, errstr_size, "cannot unmount %s: %s", ws->workspace, strerror(errno));
		close(fd);
		return -1;
	}
	/* "/." : the last component is no link, for opens with O_NOFOLLOW. */
	snprintf(root, WORKER_PATH_MAX, "/proc/self/fd/%d/.", fd);
	memcpy(ws->assets, assets, sizeof(assets));
	ws->detached = 1;
	ws->detached_fd = fd;
	return 0;
}

/* 1 when the directory open on dfd (consumed) holds exactly the names in
 * want (NULL-terminated, possibly empty), each of them a directory. */
static int holds_only(int dfd, const char *const *want)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0;
	}
	size_t n = 0, seen = 0;
	while (want[n])
		n++;
	int ok = 1;
	struct dirent *de;
	while (ok && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		ok = 0;
		for (size_t i = 0; i < n; i++)
			if (!strcmp(de->d_name, want[i]) && de->d_type == DT_DIR)
				ok = 1, seen++;
	}
	closedir(d);
	return ok && seen == n;
}

/* Removes dir/name and everything under it; 0 when it is gone. */
static int remove_sub(int dir, const char *name)
{
	int sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return errno == ENOENT ? 0 : -1;
	if (remove_contents(sub, 1) != 0)
		return -1;
	return unlinkat(dir, name, AT_REMOVEDIR);
}

/* Lets go of a detached workspace tmpfs (freed once its sandbox is gone
 * too); then opens the run directory: its fd, or -1 (errno). */
static int release_and_open(worker_ws_t *ws)
{
	if (ws->detached) {
		close(ws->detached_fd);
		ws->detached = 0;
		ws->detached_fd = -1;
	}
	return open(ws->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int worker_ws_recycle(worker_ws_t *ws)
{
	if (!ws || !ws->dir[0] || !ws->detached)
		return worker_ws_remove(ws);
	/* The run's files were in its tmpfs, gone now; what is left here is
	 * the worker's own: meta/ and skills/ go, the rest must be exactly the
	 * empty workspace/assets/ it made. */
	int dfd = release_and_open(ws);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -1;
	static const char *const top[] = { "workspace", NULL }, *const in_ws[] = { "assets", NULL },
	                         *const none[] = { NULL };
	int ok = remove_sub(dfd, "meta") == 0 && remove_sub(dfd, "skills") == 0 &&
	        holds_only(dup(dfd), top);
	int wfd = ok ? openat(dfd, "workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	ok = wfd >= 0 && holds_only(dup(wfd), in_ws);
	int afd = ok ? openat(wfd, "assets", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	ok = afd >= 0 && holds_only(afd, none);
	if (wfd >= 0)
		close(wfd);
	close(dfd);
	if (ok) {
		char root[WORKER_PATH_MAX];
		parent_dir(ws->dir, root);
		pthread_mutex_lock(&recycle_mu);
		if (nrecycled < RECYCLE_MAX) {
			char *to = recycled[nrecycled];
			int n = snprintf(to, WORKER_PATH_MAX, "%s/.recycled-%ld-%lu", root, (long)getpid(), ++recycle_seq);
			if (n > 0 && n < WORKER_PATH_MAX &&
			    renameat2(AT_FDCWD, ws->dir, AT_FDCWD, to, RENAME_NOREPLACE) == 0) {
				nrecycled++;
				pthread_mutex_unlock(&recycle_mu);
				return 0;
			}
		}
		pthread_mutex_unlock(&recycle_mu);
	}
	return worker_ws_remove(ws);
}

void worker_ws_recycle_drain(void)
{
	pthread_mutex_lock(&recycle_mu);
	while (nrecycled > 0) {
		worker_ws_t ws;
		memset(&ws, 0, sizeof(ws));
		snprintf(ws.dir, sizeof(ws.dir), "%s", recycled[--nrecycled]);
		worker_ws_remove(&ws);
	}
	pthread_mutex_unlock(&recycle_mu);
}

int worker_ws_remove(worker_ws_t *ws)
{
	if (!ws || !ws->dir[0])
		return -1;
	int dfd = release_and_open(ws);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -1;
	int rc = remove_contents(dfd, 0);
	if (rmdir(ws->dir) != 0)
		rc = -1;
	return rc;
}
