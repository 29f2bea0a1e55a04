/*
 * agent/tools.c - bash, read_file, write_file, list_files (see tools.h).
 */
#include "agent/tools.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/ctl.h"
#include "agent/emit.h"
#include "common/dynbuf.h"
#include "common/io.h"
#include "common/sandbox_layout.h"
#include "common/strv.h"
#include "common/util.h"

#define STEP_RESULT_MAX 4096 /* bytes of output shown in a step */
#define READ_MAX        (8 * 1024 * 1024)
#define WRITE_MAX       (16 * 1024 * 1024)
#define LIST_MAX        2000
#define BASH_KEEP_MAX   (4 * 1024 * 1024)

void agent_tool_out_free(agent_tool_out_t *o)
{
	free(o->text);
	json_decref(o->result);
	memset(o, 0, sizeof(*o));
}

json_t *agent_tools_defs(void)
{
	return json_pack(
	        "[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:s}},s:[s]}}},"
	        " {s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s}},s:[s]}}},"
	        " {s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:s}},s:[s,s]}}},"
	        " {s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:s}}}}}]",
	        "type", "function", "function", "name", "bash", "description",
	        "Run a shell command with bash in the workspace (" RN_SANDBOX_WORKSPACE ") and return its exit code "
	        "and combined output. Skills' scripts run this way.",
	        "parameters", "type", "object", "properties",
	        "command", "type", "string", "description", "the command line",
	        "timeout_sec", "type", "integer", "description", "optional timeout in seconds (capped)",
	        "required", "command",
	        "type", "function", "function", "name", "read_file", "description",
	        "Read a text file in the workspace (relative paths) or under " RN_SANDBOX_SKILLS ".",
	        "parameters", "type", "object", "properties",
	        "path", "type", "string", "description", "file path",
	        "required", "path",
	        "type", "function", "function", "name", "write_file", "description",
	        "Write a file in the workspace, creating parent directories. Files meant for the caller go "
	        "in assets/.",
	        "parameters", "type", "object", "properties",
	        "path", "type", "string", "description", "file path",
	        "content", "type", "string", "description", "the whole new content",
	        "required", "path", "content",
	        "type", "function", "function", "name", "list_files", "description",
	        "List a directory in the workspace or under " RN_SANDBOX_SKILLS " (directories end with /).",
	        "parameters", "type", "object", "properties",
	        "path", "type", "string", "description", "directory (default: the workspace)",
	        "recursive", "type", "boolean", "description", "walk subdirectories too");
}

int agent_tools_has(const char *name)
{
	return !strcmp(name, "bash") || !strcmp(name, "read_file") || !strcmp(name, "write_file") ||
	        !strcmp(name, "list_files");
}

int agent_tools_needs_approval(const char *name)
{
	return !strcmp(name, "bash") || !strcmp(name, "write_file");
}

static int openat2_beneath(int dirfd, const char *rel, int flags, int mode)
{
	struct open_how how;
	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC);
	how.mode = (flags & O_CREAT) ? (uint64_t)mode : 0;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
}

/* Splits path into a root directory and a path relative to it. */
static int path_root(const agent_tools_cfg_t *cfg, const char *path, int write, const char **root,
                     const char **rel, char *errstr, size_t errstr_size)
{
	if (!path || !*path) {
		snprintf(errstr, errstr_size, "the path is empty");
		return -1;
	}
	if (path[0] != '/') {
		*root = cfg->workspace;
		*rel = path;
		return 0;
	}
	const char *roots[2] = { cfg->workspace, write ? NULL : cfg->skills };
	for (int i = 0; i < 2; i++) {
		const char *r = roots[i];
		if (!r)
			continue;
		size_t n = strlen(r);
		if (!strncmp(path, r, n) && (path[n] == '/' || path[n] == '\0')) {
			*root = r;
			*rel = path + n;
			while (**rel == '/')
				(*rel)++;
			if (!**rel)
				*rel = ".";
			return 0;
		}
	}
	snprintf(errstr, errstr_size, "path \"%.200s\" is outside the workspace", path);
	return -1;
}

static void open_error(const char *path, int err, char *errstr, size_t errstr_size)
{
	if (err == EXDEV || err == ELOOP)
		snprintf(errstr, errstr_size, "path \"%.200s\" is outside the workspace", path);
	else
		snprintf(errstr, errstr_size, "%.200s: %s", path, strerror(err));
}

int agent_tools_open(const agent_tools_cfg_t *cfg, const char *path, int flags, int mode, int write,
                     char *errstr, size_t errstr_size)
{
	const char *root, *rel;
	if (path_root(cfg, path, write, &root, &rel, errstr, errstr_size) < 0)
		return -1;
	int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0) {
		snprintf(errstr, errstr_size, "%.200s: %s", root, strerror(errno));
		return -1;
	}
	int fd = openat2_beneath(rfd, rel, flags, mode);
	if (fd < 0 && errno == ENOENT && write && (flags & O_CREAT)) {
		/* Create the missing parents, each resolved beneath the root. */
		char *dup = strdup(rel);
		if (!dup) {
			close(rfd);
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
		for (char *slash = strchr(dup, '/'); slash; slash = strchr(slash + 1, '/')) {
			*slash = '\0';
			if (*dup) {
				char *last = strrchr(dup, '/');
				int pfd = rfd;
				int own = 0;
				if (last) {
					*last = '\0';
					pfd = openat2_beneath(rfd, dup, O_PATH | O_DIRECTORY, 0);
					*last = '/';
					own = 1;
				}
				if (pfd >= 0) {
					if (mkdirat(pfd, last ? last + 1 : dup, 0755) < 0 && errno != EEXIST)
						(void)0;
					if (own)
						close(pfd);
				}
			}
			*slash = '/';
		}
		free(dup);
		fd = openat2_beneath(rfd, rel, flags, mode);
	}
	int err = errno;
	close(rfd);
	if (fd < 0)
		open_error(path, err, errstr, errstr_size);
	return fd;
}

static json_t *str_or_null(const json_t *args, const char *key)
{
	const json_t *v = json_object_get(args, key);
	return json_is_string(v) ? (json_t *)v : NULL;
}

static void fail(agent_tool_out_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(agent_tool_out_t *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	out->ok = 0;
	vsnprintf(out->error, sizeof(out->error), fmt, ap);
	va_end(ap);
	free(out->text);
	out->text = strdup(out->error);
}

static void tool_read(const agent_tools_cfg_t *cfg, const json_t *args, agent_tool_out_t *out)
{
	const json_t *p = str_or_null(args, "path");
	char err[512];
	if (!p)
		return fail(out, "%s", "read_file needs a string \"path\"");
	int fd = agent_tools_open(cfg, json_string_value(p), O_RDONLY, 0, 0, err, sizeof(err));
	if (fd < 0)
		return fail(out, "%s", err);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return fail(out, "%s is not a regular file", json_string_value(p));
	}
	/* One byte past the cap tells a cut file from one that fits. */
	size_t want = (size_t)st.st_size < cfg->output_max ? (size_t)st.st_size : cfg->output_max + 1;
	char *buf = malloc(want + 1);
	size_t got = buf ? rn_read_full(fd, buf, want) : 0;
	close(fd);
	if (!buf)
		return fail(out, "out of memory");
	/* Bigger files are cut for the model; the marker says so. */
	out->text = agent_cap_text(buf, got, cfg->output_max);
	free(buf);
	out->ok = 1;
	out->result = json_pack("{s:s,s:I}", "path", json_string_value(p), "bytes", (json_int_t)st.st_size);
}

static void tool_write(const agent_tools_cfg_t *cfg, const json_t *args, agent_tool_out_t *out)
{
	const json_t *p = str_or_null(args, "path");
	const json_t *c = str_or_null(args, "content");
	char err[512];
	if (!p || !c)
		return fail(out, "%s", "write_file needs string \"path\" and \"content\"");
	size_t len = json_string_length(c);
	if (len > WRITE_MAX)
		return fail(out, "%s", "the content is over the 16 MiB limit");
	int fd = agent_tools_open(cfg, json_string_value(p), O_WRONLY | O_CREAT | O_TRUNC, 0644, 1, err, sizeof(err));
	if (fd < 0)
		return fail(out, "%s", err);
	const char *s = json_string_value(c);
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, s + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = errno;
			close(fd);
			return fail(out, "%s", strerror(e));
		}
		off += (size_t)n;
	}
	close(fd);
	char msg[512];
	snprintf(msg, sizeof(msg), "wrote %zu bytes to %.400s", len, json_string_value(p));
	out->ok = 1;
	out->text = strdup(msg);
	out->result = json_pack("{s:s,s:I}", "path", json_string_value(p), "bytes", (json_int_t)len);
}

/* A listing's text: LIST_MAX entries of at most a path each. */
#define LIST_BYTES_MAX ((size_t)LIST_MAX * (PATH_MAX + 2))

typedef struct listing {
	rn_dynbuf_t buf; /* "name\n" or "dir/\n" per entry */
	int n;
	int cut;
} listing_t;

static void list_add(listing_t *l, const char *prefix, const char *name, int dir)
{
	if (l->n >= LIST_MAX) {
		l->cut = 1;
		return;
	}
	/* The entry whole or not at all. */
	if (rn_dynbuf_reserve(&l->buf, strlen(prefix) + strlen(name) + 2) < 0 || rn_dynbuf_adds(&l->buf, prefix) < 0 ||
	    rn_dynbuf_adds(&l->buf, name) < 0 || rn_dynbuf_adds(&l->buf, dir ? "/\n" : "\n") < 0)
		return;
	l->n++;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists dirfd (taken) in name order; recurses without following links. */
static void list_dir(int dfd, const char *prefix, int recursive, int depth, listing_t *l)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	rn_strv_t list = { 0 };
	struct dirent *e;
	while ((e = readdir(d)) && list.n < LIST_MAX + 1) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (rn_strv_add(&list, e->d_name) < 0)
			break;
	}
	char **names = list.v;
	size_t n = list.n;
	if (n)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		int isdir = fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
		list_add(l, prefix, names[i], isdir);
		if (isdir && recursive && depth < 16 && l->n < LIST_MAX) {
			int sub = openat(dirfd(d), names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				char *np = malloc(strlen(prefix) + strlen(names[i]) + 2);
				if (np) {
					snprintf(np, strlen(prefix) + strlen(names[i]) + 2, "%s%s/", prefix, names[i]);
					list_dir(sub, np, recursive, depth + 1, l);
					free(np);
				} else {
					close(sub);
				}
			}
		}
	}
	rn_strv_free(&list);
	closedir(d);
}

static void tool_list(const agent_tools_cfg_t *cfg, const json_t *args, agent_tool_out_t *out)
{
	const json_t *p = str_or_null(args, "path");
	const char *path = p ? json_string_value(p) : ".";
	char err[512];
	int fd = agent_tools_open(cfg, path, O_RDONLY | O_DIRECTORY, 0, 0, err, sizeof(err));
	if (fd < 0)
		return fail(out, "%s", err);
	listing_t l = { .n = 0 };
	rn_dynbuf_init(&l.buf, LIST_BYTES_MAX);
	list_dir(fd, "", json_is_true(json_object_get(args, "recursive")), 0, &l);
	out->ok = 1;
	out->text = agent_cap_text(l.buf.p ? l.buf.p : "", l.buf.len, cfg->output_max);
	if (l.cut && out->text) {
		char *t = NULL;
		if (asprintf(&t, "%s[... more than %d entries]\n", out->text, LIST_MAX) >= 0) {
			free(out->text);
			out->text = t;
		}
	}
	out->result = json_pack("{s:s,s:i}", "path", path, "entries", l.n);
	rn_dynbuf_free(&l.buf);
}

/*
 * bash: its own process group, so a timeout or a stop kills everything it
 * started; stdout and stderr share one pipe, read while it runs so a chatty
 * command never blocks, the first bytes kept.
 */
static void tool_bash(const agent_tools_cfg_t *cfg, const json_t *args, agent_tool_out_t *out)
{
	const json_t *c = str_or_null(args, "command");
	if (!c)
		return fail(out, "%s", "bash needs a string \"command\"");
	int64_t timeout = cfg->bash_timeout_ms;
	const json_t *t = json_object_get(args, "timeout_sec");
	if (json_is_integer(t) && json_integer_value(t) > 0 && json_integer_value(t) * 1000 < timeout)
		timeout = json_integer_value(t) * 1000;

	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return fail(out, "%s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return fail(out, "%s", strerror(errno));
	}
	if (pid == 0) {
		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		if (chdir(cfg->workspace) < 0)
			_exit(126);
		execl("/bin/bash", "bash", "-c", json_string_value(c), (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid); /* both sides: no race with the kill below */
	close(pfd[1]);
	int pidfd = pidfd_open(pid, 0);
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);

	char *buf = malloc(BASH_KEEP_MAX);
	size_t kept = 0;
	int64_t start = rn_mono_ms();
	int timed_out = 0, stopped = 0, exited = 0, pipe_open = 1;
	int status = 0;
	while (pipe_open || !exited) {
		if (agent_ctl_stopped()) {
			stopped = 1;
			break;
		}
		int64_t left = start + timeout - rn_mono_ms();
		if (left <= 0) {
			timed_out = 1;
			break;
		}
		struct pollfd fds[3] = {
			{ pipe_open ? pfd[0] : -1, POLLIN, 0 },
			{ exited ? -1 : pidfd, POLLIN, 0 },
			{ agent_ctl_stop_fd(), POLLIN, 0 },
		};
		/* Once bash exited, what it left in the background gets a short
		 * while to finish writing. */
		int wait = exited ? 200 : (left > 1000 ? 1000 : (int)left);
		int pr = poll(fds, 3, wait);
		if (pr == 0 && exited)
			break;
		if (fds[0].revents) {
			char tmp[8192];
			ssize_t n = read(pfd[0], tmp, sizeof(tmp));
			if (n > 0) {
				size_t take = (size_t)n;
				if (kept + take > BASH_KEEP_MAX)
					take = BASH_KEEP_MAX - kept;
				if (buf && take) {
					memcpy(buf + kept, tmp, take);
					kept += take;
				}
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				pipe_open = 0;
			}
		}
		if (!exited && (fds[1].revents || pidfd < 0)) {
			if (waitpid(pid, &status, WNOHANG) == pid)
				exited = 1;
			else if (pidfd < 0)
				usleep(10000);
		}
	}
	/* Whatever is still running in the group goes now. */
	kill(-pid, SIGKILL);
	if (!exited)
		waitpid(pid, &status, 0);
	if (pidfd >= 0)
		close(pidfd);
	close(pfd[0]);

	char *text = agent_cap_text(buf ? buf : "", kept, cfg->output_max);
	char *shown = agent_cap_text(buf ? buf : "", kept, STEP_RESULT_MAX);
	free(buf);
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	if (stopped) {
		out->stopped = 1;
		out->ok = 0;
		snprintf(out->error, sizeof(out->error), "stopped");
	} else if (timed_out) {
		out->ok = 0;
		snprintf(out->error, sizeof(out->error), "the command timed out after %lld s",
		         (long long)(timeout / 1000));
	} else {
		out->ok = code == 0;
		if (!out->ok)
			snprintf(out->error, sizeof(out->error), "the command exited with status %d", code);
	}
	json_t *res = json_object();
	if (!timed_out && !stopped)
		json_object_set_new(res, "exitCode", json_integer(code));
	json_object_set_new(res, "output", json_string(shown ? shown : ""));
	out->result = res;
	char *msg = NULL;
	if (timed_out || stopped) {
		if (asprintf(&msg, "%s\n%s", out->error, text ? text : "") < 0)
			msg = NULL;
	} else if (asprintf(&msg, "exit code %d\n%s", code, text ? text : "") < 0) {
		msg = NULL;
	}
	out->text = msg ? msg : strdup("");
	free(text);
	free(shown);
}

void agent_tools_run(const agent_tools_cfg_t *cfg, const char *name, const json_t *args, agent_tool_out_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!json_is_object(args))
		return fail(out, "%s", "the tool's arguments are not a JSON object");
	if (!strcmp(name, "bash"))
		tool_bash(cfg, args, out);
	else if (!strcmp(name, "read_file"))
		tool_read(cfg, args, out);
	else if (!strcmp(name, "write_file"))
		tool_write(cfg, args, out);
	else if (!strcmp(name, "list_files"))
		tool_list(cfg, args, out);
	else
		fail(out, "there is no tool \"%.100s\"", name);
	if (!out->text)
		out->text = strdup(out->ok ? "" : out->error);
}
