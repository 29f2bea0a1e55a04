/*
 * tests/stages/test_workspace.c - the run's directory tree and bag
 * extraction: each refused archive (zip slip, absolute path, links leaving
 * the tree, hard links, fifos, a zip bomb, too many entries) gives its exact
 * reason and writes nothing outside the destination; a good bag comes out
 * right; removal never follows links.  Archives are built here with
 * libarchive's writer.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "dev/stub.h"
#include "tests/support/harness.h"
#include "worker/workspace.h"

enum ent_kind { E_FILE,
	        E_DIR,
	        E_LINK,
	        E_HARD,
	        E_FIFO,
	        E_ZEROS };

typedef struct ent {
	enum ent_kind kind;
	const char *name;
	const char *data; /* file content, link target */
	size_t size;      /* E_ZEROS: bytes of zeros */
	int mode;         /* permission bits, 0 = default; E_ZEROS: -1 = no size */
} ent_t;

/* Writes the entries to path as a zip (tar when tar is set: zip cannot
 * carry hard links or fifos). */
static int build_archive(const char *path, const ent_t *ents, size_t n, int tar)
{
	struct archive *a = archive_write_new();
	if (tar)
		archive_write_set_format_pax_restricted(a);
	else
		archive_write_set_format_zip(a);
	if (archive_write_open_filename(a, path) != ARCHIVE_OK) {
		TH_NOTE("open %s: %s", path, archive_error_string(a));
		archive_write_free(a);
		return -1;
	}
	static char zeros[1 << 16];
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const ent_t *e = &ents[i];
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e->name);
		switch (e->kind) {
		case E_FILE:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, e->mode ? e->mode : 0644);
			archive_entry_set_size(ae, (la_int64_t)strlen(e->data));
			break;
		case E_ZEROS:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, 0644);
			if (e->mode != -1) /* -1: leave the size undeclared */
				archive_entry_set_size(ae, (la_int64_t)e->size);
			break;
		case E_DIR:
			archive_entry_set_filetype(ae, AE_IFDIR);
			archive_entry_set_perm(ae, 0755);
			break;
		case E_LINK:
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_perm(ae, 0777);
			archive_entry_set_symlink(ae, e->data);
			break;
		case E_HARD:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, 0644);
			archive_entry_set_hardlink(ae, e->data);
			archive_entry_set_size(ae, 0);
			break;
		case E_FIFO:
			archive_entry_set_filetype(ae, AE_IFIFO);
			archive_entry_set_perm(ae, 0644);
			break;
		}
		if (archive_write_header(a, ae) != ARCHIVE_OK) {
			TH_NOTE("header %s: %s", e->name, archive_error_string(a));
			rc = -1;
		} else if (e->kind == E_FILE) {
			archive_write_data(a, e->data, strlen(e->data));
		} else if (e->kind == E_ZEROS) {
			for (size_t off = 0; off < e->size; off += sizeof(zeros)) {
				size_t k = e->size - off < sizeof(zeros) ? e->size - off : sizeof(zeros);
				archive_write_data(a, zeros, k);
			}
		}
		archive_entry_free(ae);
	}
	if (archive_write_close(a) != ARCHIVE_OK)
		rc = -1;
	archive_write_free(a);
	return rc;
}

/* Names in dir, sorted, joined by ',' (into a harness-owned string). */
static char *list_dir(const char *dir)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	if (n < 0)
		return th_strf("<%s>", strerror(errno));
	char buf[4096] = "";
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		const char *nm = names[i]->d_name;
		if (strcmp(nm, ".") != 0 && strcmp(nm, "..") != 0)
			off += (size_t)snprintf(buf + off, off < sizeof(buf) ? sizeof(buf) - off : 0,
			                        "%s%s", off ? "," : "", nm);
		free(names[i]);
	}
	free(names);
	return th_strf("%s", buf);
}

static const char *base;
static int case_no;

/*
 * Builds the archive, extracts it into a fresh <case>/ws and returns the
 * result; errstr gets the reason.  *parent_out is the case dir (holding
 * only ws/ and the archive before extraction).
 */
static int try_extract(const ent_t *ents, size_t n, int tar, const worker_bag_limits_t *lim,
                       char *errstr, size_t errstr_size, const char **case_dir)
{
	const char *dir = th_strf("%s/case%d", base, ++case_no);
	const char *ws = th_strf("%s/ws", dir);
	const char *zip = th_strf("%s/bag%d.zip", base, case_no);
	TH_REQUIRE(mkdir(dir, 0700) == 0 && mkdir(ws, 0700) == 0);
	TH_REQUIRE(build_archive(zip, ents, n, tar) == 0, "building %s", zip);
	errstr[0] = '\0';
	int rc = worker_ws_extract_file(zip, ws, lim, errstr, errstr_size);
	*case_dir = dir;
	return rc;
}

struct feeder {
	int fd;
	char *data;
	size_t len;
};

static void *feed(void *arg)
{
	struct feeder *f = arg;
	size_t off = 0;
	while (off < f->len) {
		ssize_t n = write(f->fd, f->data + off, f->len - off);
		if (n <= 0)
			break; /* the reader stopped early (EPIPE): fine */
		off += (size_t)n;
	}
	close(f->fd);
	return NULL;
}

/* Extracts the archive at zip_path streamed through a pipe (no seeking). */
static int extract_via_pipe(const char *zip_path, const worker_bag_limits_t *lim,
                            char *errstr, size_t errstr_size, const char **case_dir)
{
	const char *dir = th_strf("%s/case%d", base, ++case_no);
	const char *ws = th_strf("%s/ws", dir);
	TH_REQUIRE(mkdir(dir, 0700) == 0 && mkdir(ws, 0700) == 0);
	struct feeder f;
	f.data = th_file_read(zip_path, &f.len);
	TH_REQUIRE(f.data);
	int p[2];
	TH_REQUIRE(pipe(p) == 0);
	f.fd = p[1];
	signal(SIGPIPE, SIG_IGN);
	pthread_t t;
	TH_REQUIRE(pthread_create(&t, NULL, feed, &f) == 0);
	int rc = worker_ws_extract_file(th_strf("/proc/self/fd/%d", p[0]), ws, lim, errstr, errstr_size);
	close(p[0]);
	pthread_join(t, NULL);
	free(f.data);
	*case_dir = dir;
	return rc;
}

static void expect_refused(const char *what, const ent_t *ents, size_t n, int tar,
                           const worker_bag_limits_t *lim, const char *reason)
{
	char err[512];
	const char *dir;
	int rc = try_extract(ents, n, tar, lim, err, sizeof(err), &dir);
	TH_CHECK(rc == -1, "%s: accepted", what);
	TH_CHECK(th_streq(err, reason), "%s: reason \"%s\", want \"%s\"", what, err, reason);
	/* Nothing next to the destination, nothing above it. */
	char *l = list_dir(dir);
	TH_CHECK(th_streq(l, "ws"), "%s: written outside the workspace: %s", what, l);
	l = list_dir(base);
	TH_CHECK(!strstr(l, "evil"), "%s: written into the parent: %s", what, l);
}

static void test_refusals(void)
{
	worker_bag_limits_t lim = { 0 };

	ent_t slip[] = { { E_FILE, "ok.txt", "fine", 0, 0 }, { E_FILE, "../evil", "pwned", 0, 0 } };
	expect_refused("zip slip", slip, 2, 0, &lim, "entry \"../evil\" leaves the workspace");

	ent_t slip2[] = { { E_FILE, "a/b/../../../evil", "pwned", 0, 0 } };
	expect_refused("nested zip slip", slip2, 1, 0, &lim,
	               "entry \"a/b/../../../evil\" leaves the workspace");

	ent_t abs[] = { { E_FILE, "/etc/evil", "pwned", 0, 0 } };
	expect_refused("absolute path", abs, 1, 0, &lim, "entry \"/etc/evil\" is an absolute path");
	TH_CHECK(access("/etc/evil", F_OK) != 0);

	ent_t link_out[] = { { E_LINK, "link", "../../evil-target", 0, 0 } };
	expect_refused("symlink outside", link_out, 1, 0, &lim,
	               "entry \"link\" is a symlink leaving the workspace");

	ent_t link_abs[] = { { E_LINK, "etc", "/etc", 0, 0 }, { E_FILE, "etc/evil", "pwned", 0, 0 } };
	expect_refused("absolute symlink then file", link_abs, 2, 0, &lim,
	               "entry \"etc\" is a symlink leaving the workspace");

	/* A link that stays inside is fine, but nothing is written through it. */
	ent_t link_through[] = {
		{ E_DIR, "sub/", NULL, 0, 0 },
		{ E_LINK, "ln", "sub", 0, 0 },
		{ E_FILE, "ln/evil", "through the link", 0, 0 },
	};
	expect_refused("symlink then file through it", link_through, 3, 0, &lim,
	               "entry \"ln/evil\" goes through a symlink or a file");

	ent_t link_dot[] = { { E_LINK, "up", "a/../..", 0, 0 } };
	expect_refused("symlink climbing via a/../..", link_dot, 1, 0, &lim,
	               "entry \"up\" is a symlink leaving the workspace");

	ent_t dup[] = { { E_LINK, "x", "y", 0, 0 }, { E_FILE, "x", "overwrite through link", 0, 0 } };
	expect_refused("file over a symlink", dup, 2, 0, &lim, "entry \"x\" is already there");

	/* zip cannot carry hard links or fifos: these two are tar archives. */
	ent_t hard[] = { { E_FILE, "target", "data", 0, 0 }, { E_HARD, "hard", "target", 0, 0 } };
	expect_refused("hard link", hard, 2, 1, &lim, "entry \"hard\" is a hard link");

	ent_t fifo[] = { { E_FIFO, "fifo", NULL, 0, 0 } };
	expect_refused("fifo", fifo, 1, 1, &lim, "entry \"fifo\" is a fifo");

	/* A zip bomb: 100 MB of zeros compresses to ~100 KB; cap at 10 MB. */
	worker_bag_limits_t small = { .max_bytes = 10u << 20 };
	ent_t bomb[] = { { E_ZEROS, "zeros.bin", NULL, 100u << 20, 0 } };
	char err[512];
	const char *dir;
	TH_CHECK(try_extract(bomb, 1, 0, &small, err, sizeof(err), &dir) == -1);
	TH_CHECK(th_streq(err, "archive unpacks to more than 10485760 bytes"), "bomb: %s", err);
	struct stat st;
	const char *zeros = th_strf("%s/ws/zeros.bin", dir);
	TH_CHECK(stat(zeros, &st) != 0 || st.st_size <= (off_t)(10u << 20), "bomb wrote %lld bytes",
	         (long long)st.st_size);
	char *zip = th_strf("%s/bag%d.zip", base, case_no);
	TH_CHECK(stat(zip, &st) == 0 && st.st_size < (1 << 20), "bomb archive is %lld bytes",
	         (long long)st.st_size);

	/* Several files each under the cap, together over it. */
	ent_t many_big[] = {
		{ E_ZEROS, "a.bin", NULL, 4u << 20, 0 },
		{ E_ZEROS, "b.bin", NULL, 4u << 20, 0 },
		{ E_ZEROS, "c.bin", NULL, 4u << 20, 0 },
	};
	expect_refused("cumulative size", many_big, 3, 0, &small,
	               "archive unpacks to more than 10485760 bytes");

	/* A bomb whose header does not declare its size: the cap stops the
	 * copy itself, and what was written stays within it. */
	ent_t bomb2[] = { { E_ZEROS, "nosize.bin", NULL, 100u << 20, -1 } };
	TH_CHECK(try_extract(bomb2, 1, 0, &small, err, sizeof(err), &dir) == -1);
	TH_CHECK(th_streq(err, "archive unpacks to more than 10485760 bytes"), "bomb2: %s", err);
	zeros = th_strf("%s/ws/nosize.bin", dir);
	TH_CHECK(stat(zeros, &st) != 0 || st.st_size <= (off_t)(10u << 20), "bomb2 wrote %lld bytes",
	         (long long)st.st_size);

	/* Read from a pipe, libarchive cannot seek to the central directory
	 * and sees no size for that entry: only the copy's own count stops it. */
	char *zip2 = th_strf("%s/bag%d.zip", base, case_no);
	TH_CHECK(extract_via_pipe(zip2, &small, err, sizeof(err), &dir) == -1);
	TH_CHECK(th_streq(err, "archive unpacks to more than 10485760 bytes"), "piped bomb: %s", err);
	zeros = th_strf("%s/ws/nosize.bin", dir);
	memset(&st, 0, sizeof(st));
	TH_CHECK(stat(zeros, &st) == 0 && st.st_size > 0 && st.st_size <= (off_t)(10u << 20),
	         "piped bomb wrote %lld bytes", (long long)st.st_size);
	TH_NOTE("piped bomb stopped after %lld bytes", (long long)st.st_size);

	worker_bag_limits_t few = { .max_entries = 10 };
	ent_t many[11];
	char names[11][16];
	for (int i = 0; i < 11; i++) {
		snprintf(names[i], sizeof(names[i]), "f%02d.txt", i);
		many[i] = (ent_t){ E_FILE, names[i], "x", 0, 0 };
	}
	expect_refused("too many entries", many, 11, 0, &few, "archive has more than 10 entries");
	TH_CHECK(try_extract(many, 10, 0, &few, err, sizeof(err), &dir) == 0, "10 entries: %s", err);

	/* Not an archive at all. */
	const char *junk = th_strf("%s/junk.zip", base);
	TH_REQUIRE(th_file_write(junk, "this is not a zip file at all", 29) == 0);
	const char *ws = th_strf("%s/junkws", base);
	TH_REQUIRE(mkdir(ws, 0700) == 0);
	TH_CHECK(worker_ws_extract_file(junk, ws, NULL, err, sizeof(err)) == -1);
	TH_CHECK(strncmp(err, "not a zip archive (", 19) == 0, "junk: %s", err);
}

static void test_good_bag(void)
{
	ent_t good[] = {
		{ E_DIR, "docs/", NULL, 0, 0 },
		{ E_FILE, "docs/readme.md", "# hello\n", 0, 0 },
		{ E_FILE, "deep/er/still/file.txt", "nested\n", 0, 0 },
		{ E_FILE, "bin/run.sh", "#!/bin/sh\necho hi\n", 0, 04755 },
		{ E_FILE, "shared.txt", "group write\n", 0, 0666 },
		{ E_LINK, "docs/latest", "readme.md", 0, 0 },
		{ E_LINK, "deep/er/up", "../../docs", 0, 0 },
		{ E_DIR, "./", NULL, 0, 0 },
		{ E_DIR, "empty/", NULL, 0, 0 },
	};
	char err[512];
	const char *dir;
	TH_CHECK(try_extract(good, sizeof(good) / sizeof(good[0]), 0, NULL, err, sizeof(err), &dir) == 0,
	         "good bag: %s", err);
	const char *ws = th_strf("%s/ws", dir);
	TH_CHECK(th_file_contains(th_strf("%s/docs/readme.md", ws), "# hello"));
	TH_CHECK(th_file_contains(th_strf("%s/deep/er/still/file.txt", ws), "nested"));
	TH_CHECK(th_file_contains(th_strf("%s/docs/latest", ws), "# hello"), "internal symlink");
	char target[64] = "";
	ssize_t tl = readlink(th_strf("%s/deep/er/up", ws), target, sizeof(target) - 1);
	TH_CHECK(tl > 0 && (target[tl] = '\0', th_streq(target, "../../docs")), "link %s", target);
	struct stat st;
	TH_CHECK(stat(th_strf("%s/bin/run.sh", ws), &st) == 0);
	TH_CHECK((st.st_mode & 07777) == 0755, "run.sh mode %o (setuid must go)", st.st_mode & 07777);
	TH_CHECK(stat(th_strf("%s/shared.txt", ws), &st) == 0);
	TH_CHECK((st.st_mode & 07777) == 0644, "shared.txt mode %o", st.st_mode & 07777);
	TH_CHECK(stat(th_strf("%s/empty", ws), &st) == 0 && S_ISDIR(st.st_mode));
	TH_CHECK(th_streq(list_dir(dir), "ws"), "temp files left: %s", list_dir(dir));
	TH_CHECK(th_streq(list_dir(ws), "bin,deep,docs,empty,shared.txt"), "ws: %s", list_dir(ws));

	/* tar.gz works too (skills may ship that way). */
	const char *tgz = th_strf("%s/skill.tar.gz", base);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_add_filter_gzip(a);
	TH_REQUIRE(archive_write_open_filename(a, tgz) == ARCHIVE_OK);
	struct archive_entry *ae = archive_entry_new();
	archive_entry_set_pathname(ae, "SKILL.md");
	archive_entry_set_filetype(ae, AE_IFREG);
	archive_entry_set_perm(ae, 0644);
	archive_entry_set_size(ae, 6);
	archive_write_header(a, ae);
	archive_write_data(a, "skill\n", 6);
	archive_entry_free(ae);
	archive_write_close(a);
	archive_write_free(a);
	const char *sk = th_strf("%s/skillws", base);
	TH_REQUIRE(mkdir(sk, 0700) == 0);
	TH_CHECK(worker_ws_extract_file(tgz, sk, NULL, err, sizeof(err)) == 0, "tgz: %s", err);
	TH_CHECK(th_file_contains(th_strf("%s/SKILL.md", sk), "skill"));
}

static void test_tree(void)
{
	const char *root = th_strf("%s/runs/nested", base);
	worker_ws_t ws;
	char err[512];
	TH_REQUIRE(worker_ws_create(&ws, root, "run_tree1", err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_streq(ws.dir, th_strf("%s/run_tree1", root)));
	TH_CHECK(th_streq(ws.workspace, th_strf("%s/workspace", ws.dir)));
	TH_CHECK(th_streq(ws.assets, th_strf("%s/workspace/assets", ws.dir)));
	TH_CHECK(th_streq(ws.skills, th_strf("%s/skills", ws.dir)));
	TH_CHECK(th_streq(ws.meta, th_strf("%s/meta", ws.dir)));
	struct stat st;
	/* Searchable by the sandbox's uid (bwrap binds from it), never listable. */
	TH_CHECK(stat(ws.dir, &st) == 0 && (st.st_mode & 0777) == 0711, "mode %o", st.st_mode & 0777);
	TH_CHECK(stat(ws.assets, &st) == 0 && S_ISDIR(st.st_mode));

	worker_ws_t again;
	TH_CHECK(worker_ws_create(&again, root, "run_tree1", err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, th_strf("workspace: cannot create %s: File exists", ws.dir)), "%s", err);
	TH_CHECK(worker_ws_create(&again, root, "../escape", err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "workspace: invalid run id"), "%s", err);

	/* Removal: links are removed, never followed; unreadable dirs go too. */
	const char *outside = th_strf("%s/outside", base);
	TH_REQUIRE(mkdir(outside, 0700) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/keep.txt", outside), "keep", 4) == 0);
	TH_CHECK(symlink(outside, th_strf("%s/link-dir", ws.workspace)) == 0);
	TH_CHECK(symlink(th_strf("%s/keep.txt", outside), th_strf("%s/link-file", ws.assets)) == 0);
	const char *locked = th_strf("%s/locked", ws.workspace);
	TH_CHECK(mkdir(locked, 0700) == 0);
	TH_CHECK(th_file_write(th_strf("%s/inner", locked), "x", 1) == 0);
	TH_CHECK(chmod(locked, 0) == 0);
	TH_CHECK(worker_ws_remove(&ws) == 0);
	TH_CHECK(access(ws.dir, F_OK) != 0, "run dir still there");
	TH_CHECK(th_file_contains(th_strf("%s/keep.txt", outside), "keep"), "followed a link");
	TH_CHECK(th_streq(list_dir(root), ""), "left: %s", list_dir(root));
}

/* Every other directory of a run is made by worker_ws_make on first need,
 * each with its mode; the worker's own trees have names no run id spells. */
static void test_subdirs(void)
{
	const char *root = th_strf("%s/subdirs", base);
	worker_ws_t ws;
	char err[512];
	struct stat st;
	TH_REQUIRE(worker_ws_create(&ws, root, "run_sub1", err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_streq(list_dir(ws.dir), "workspace"), "made at once: %s", list_dir(ws.dir));
	const char *home = worker_ws_make(&ws, WORKER_WS_HOME);
	TH_CHECK(home && th_streq(home, th_strf("%s/meta/home", ws.dir)), "home %s", home ? home : "(null)");
	/* Searchable: a root worker's bwrap binds the proxy socket from it. */
	TH_CHECK(stat(ws.meta, &st) == 0 && (st.st_mode & 0777) == 0711, "meta/ mode %o", st.st_mode & 0777);
	TH_CHECK(stat(ws.home, &st) == 0 && (st.st_mode & 0777) == 0700, "meta/home/ mode %o", st.st_mode & 0777);
	TH_CHECK(worker_ws_make(&ws, WORKER_WS_META) == ws.meta, "made again: the same");
	char skill[WORKER_PATH_MAX + 160];
	TH_CHECK(worker_ws_make_skill(&ws, "pdf", skill, sizeof(skill)) == 0);
	TH_CHECK(th_streq(skill, th_strf("%s/skills/pdf", ws.dir)), "%s", skill);
	TH_CHECK(stat(ws.skills, &st) == 0 && (st.st_mode & 0777) == 0755, "skills/ mode %o", st.st_mode & 0777);
	TH_CHECK(stat(skill, &st) == 0 && (st.st_mode & 0777) == 0700, "skills/pdf/ mode %o", st.st_mode & 0777);
	TH_CHECK(worker_ws_make_skill(&ws, "..", skill, sizeof(skill)) == -1, "..");
	TH_CHECK(worker_ws_make_skill(&ws, "a/b", skill, sizeof(skill)) == -1, "a/b");
	TH_CHECK(rmdir(ws.assets) == 0 && worker_ws_make(&ws, WORKER_WS_ASSETS) == ws.assets &&
	                 stat(ws.assets, &st) == 0 && (st.st_mode & 0777) == 0755,
	         "assets/ made again");
	/* The workspace descriptor reaches the tree the path names. */
	int fd = worker_ws_open(&ws);
	TH_CHECK(fd >= 0, "open: %s", strerror(errno));
	if (fd >= 0) {
		struct stat a, b;
		TH_CHECK(fstat(fd, &a) == 0 && stat(ws.workspace, &b) == 0 && a.st_ino == b.st_ino);
		close(fd);
	}
	TH_CHECK(worker_ws_remove(&ws) == 0);

	/* A warm sandbox's tree: "warm.<pid>.<n>", which no run id spells. */
	char name[64];
	TH_REQUIRE(worker_ws_create_own(&ws, root, "warm", 7, name, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_streq(name, th_strf("warm.%ld.7", (long)getpid())), "%s", name);
	TH_CHECK(th_streq(ws.dir, th_strf("%s/%s", root, name)));
	TH_CHECK(stat(ws.assets, &st) == 0 && S_ISDIR(st.st_mode));
	worker_ws_t run;
	TH_CHECK(worker_ws_create(&run, root, name, err, sizeof(err)) == -1 && th_streq(err, "workspace: invalid run id"),
	         "a run named like a warm tree: %s", err);
	/* The old spelling is a run id like any other: a tree of its own. */
	const char *old = th_strf("warm-%ld-7", (long)getpid());
	TH_CHECK(worker_ws_create(&run, root, old, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(!th_streq(run.dir, ws.dir));
	TH_CHECK(worker_ws_remove(&run) == 0 && worker_ws_remove(&ws) == 0);
	TH_CHECK(th_streq(list_dir(root), ""), "left: %s", list_dir(root));

	/* A scratch directory of the worker's own: ".<tag>-<pid>". */
	char scratch[WORKER_PATH_MAX];
	TH_CHECK(worker_ws_scratch(root, "probe", scratch, sizeof(scratch)) == 0);
	TH_CHECK(th_streq(scratch, th_strf("%s/.probe-%ld", root, (long)getpid())), "%s", scratch);
	TH_CHECK(rmdir(scratch) == 0);
	/* The work directory: made with its parents, 0711 (the sandboxes' uid
	 * binds from below it); one of ours made 0700 gets the search bits. */
	const char *deep = th_strf("%s/a/b/c", root);
	TH_CHECK(worker_ws_root(deep, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(stat(deep, &st) == 0 && (st.st_mode & 0777) == 0711, "mode %o", st.st_mode & 0777);
	TH_CHECK(chmod(deep, 0700) == 0 && worker_ws_root(deep, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(stat(deep, &st) == 0 && (st.st_mode & 0777) == 0711, "mode again %o", st.st_mode & 0777);
	TH_CHECK(worker_ws_root("relative", err, sizeof(err)) == -1 &&
	                 th_streq(err, "workspace: root must be an absolute path"),
	         "%s", err);
}

/*
 * A finished run's tree is kept for the next run only when nothing of the
 * run can be in it (its workspace was a detached tmpfs: here a stand-in
 * descriptor), and only with exactly the empty workspace/assets/ left.
 */
/* As if the workspace were a detached tmpfs: a descriptor to let go of. */
static void stand_in_detached(worker_ws_t *ws)
{
	ws->detached = 1;
	ws->detached_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void test_recycle(void)
{
	const char *root = th_strf("%s/recycle", base);
	worker_ws_t ws;
	char err[512];
	TH_REQUIRE(worker_ws_create(&ws, root, "run_rc1", err, sizeof(err)) == 0, "%s", err);
	TH_REQUIRE(mkdir(ws.meta, 0700) == 0 && th_file_write(th_strf("%s/setup.sh", ws.meta), "s", 1) == 0);
	stand_in_detached(&ws);
	TH_CHECK(worker_ws_recycle(&ws) == 0);
	char *left = list_dir(root);
	TH_CHECK(!strncmp(left, ".recycled-", 10) && !strchr(left, ','), "left: %s", left);
	TH_CHECK(th_streq(list_dir(th_strf("%s/%s", root, left)), "workspace"), "kept: %s",
	         list_dir(th_strf("%s/%s", root, left)));

	/* The next run gets that tree, renamed. */
	TH_REQUIRE(worker_ws_create(&ws, root, "run_rc2", err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_streq(list_dir(root), "run_rc2"), "left: %s", list_dir(root));
	struct stat st;
	TH_CHECK(stat(ws.assets, &st) == 0 && S_ISDIR(st.st_mode));
	TH_CHECK(th_streq(list_dir(ws.assets), ""), "assets: %s", list_dir(ws.assets));

	/* Not a detached workspace, or anything more in it: removed. */
	TH_CHECK(worker_ws_recycle(&ws) == 0);
	TH_CHECK(th_streq(list_dir(root), ""), "left: %s", list_dir(root));
	TH_REQUIRE(worker_ws_create(&ws, root, "run_rc3", err, sizeof(err)) == 0, "%s", err);
	TH_REQUIRE(th_file_write(th_strf("%s/stray", ws.workspace), "x", 1) == 0);
	stand_in_detached(&ws);
	TH_CHECK(worker_ws_recycle(&ws) == 0);
	TH_CHECK(th_streq(list_dir(root), ""), "left: %s", list_dir(root));

	/* The drain removes every kept tree. */
	TH_REQUIRE(worker_ws_create(&ws, root, "run_rc4", err, sizeof(err)) == 0, "%s", err);
	stand_in_detached(&ws);
	TH_CHECK(worker_ws_recycle(&ws) == 0);
	TH_CHECK(strncmp(list_dir(root), ".recycled-", 10) == 0, "left: %s", list_dir(root));
	worker_ws_recycle_drain();
	TH_CHECK(th_streq(list_dir(root), ""), "left: %s", list_dir(root));
}

/* worker_ws_fetch_zip against the stub's blobs. */
static void test_fetch(void)
{
	char err[512];
	dev_stub_t *stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(stub, "stub: %s", err);

	const char *zip = th_strf("%s/fetch.zip", base);
	ent_t good[] = { { E_FILE, "hello.txt", "hello from the bag\n", 0, 0 } };
	TH_REQUIRE(build_archive(zip, good, 1, 0) == 0);
	TH_REQUIRE(dev_stub_add_blob_file(stub, "bag.zip", zip) == 0);
	char url[256];
	TH_REQUIRE(dev_stub_blob_url(stub, "bag.zip", url, sizeof(url)) == 0);
	char *signed_url = th_strf("%s?X-Signature=SIG-SECRET", url);

	const char *dest = th_strf("%s/fetch1", base);
	TH_REQUIRE(mkdir(dest, 0700) == 0);
	int reject = -1;
	TH_CHECK(worker_ws_fetch_zip(signed_url, dest, NULL, &reject, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(th_file_contains(th_strf("%s/hello.txt", dest), "hello from the bag"));
	dev_stub_blob_stats_t bs;
	TH_CHECK(dev_stub_blob_stats(stub, "bag.zip", &bs) == 0 && bs.calls == 1 && bs.with_authorization == 0);

	/* A download over the cap: refused, nothing extracted. */
	const char *dest2 = th_strf("%s/fetch2", base);
	TH_REQUIRE(mkdir(dest2, 0700) == 0);
	struct stat st;
	TH_REQUIRE(stat(zip, &st) == 0);
	worker_bag_limits_t small = { .max_download = (uint64_t)st.st_size - 1 };
	TH_CHECK(worker_ws_fetch_zip(signed_url, dest2, &small, &reject, err, sizeof(err)) == -1);
	TH_CHECK(reject == 1);
	TH_CHECK(th_streq(err, th_strf("download of %s is larger than %llu bytes", url, (unsigned long long)st.st_size - 1)), "%s", err);
	TH_CHECK(th_streq(list_dir(dest2), ""), "extracted: %s", list_dir(dest2));

	/* A refused archive over HTTP reports reject = 1 too. */
	ent_t slip[] = { { E_FILE, "../evil", "x", 0, 0 } };
	const char *slipzip = th_strf("%s/slip.zip", base);
	TH_REQUIRE(build_archive(slipzip, slip, 1, 0) == 0);
	TH_REQUIRE(dev_stub_add_blob_file(stub, "slip.zip", slipzip) == 0);
	TH_REQUIRE(dev_stub_blob_url(stub, "slip.zip", url, sizeof(url)) == 0);
	TH_CHECK(worker_ws_fetch_zip(url, dest2, NULL, &reject, err, sizeof(err)) == -1);
	TH_CHECK(reject == 1 && th_streq(err, "entry \"../evil\" leaves the workspace"), "%s", err);

	/* HTTP failures are not refusals; the query string never shows. */
	dev_stub_fault_t f = { .status = 404 };
	TH_REQUIRE(dev_stub_set_blob_fault(stub, "bag.zip", &f) == 0);
	TH_REQUIRE(dev_stub_blob_url(stub, "bag.zip", url, sizeof(url)) == 0);
	TH_CHECK(worker_ws_fetch_zip(signed_url, dest2, NULL, &reject, err, sizeof(err)) == -1);
	TH_CHECK(reject == 0);
	TH_CHECK(th_streq(err, th_strf("download of %s answered HTTP 404", url)), "%s", err);
	TH_CHECK(!strstr(err, "SIG-SECRET"));

	f = (dev_stub_fault_t){ .delay_ms = 3000 };
	TH_REQUIRE(dev_stub_set_blob_fault(stub, "bag.zip", &f) == 0);
	worker_bag_limits_t fast = { .timeout_ms = 300 };
	TH_CHECK(worker_ws_fetch_zip(signed_url, dest2, &fast, &reject, err, sizeof(err)) == -1);
	TH_CHECK(reject == 0 && th_streq(err, th_strf("download of %s: timed out after 300 ms", url)),
	         "%s", err);

	/* Redirects: up to 3 are followed for a bag (it carries no OTP). */
	TH_REQUIRE(dev_stub_set_blob_fault(stub, "bag.zip", NULL) == 0);
	const char *names[] = { "r1", "r2", "r3", "r4" };
	const char *next = "/blobs/bag.zip";
	for (int i = 0; i < 4; i++) {
		TH_REQUIRE(dev_stub_add_blob(stub, names[i], "x", 1) == 0);
		f = (dev_stub_fault_t){ .redirect = next };
		TH_REQUIRE(dev_stub_set_blob_fault(stub, names[i], &f) == 0);
		next = th_strf("/blobs/%s", names[i]);
	}
	const char *dest3 = th_strf("%s/fetch3", base);
	TH_REQUIRE(mkdir(dest3, 0700) == 0);
	TH_REQUIRE(dev_stub_blob_url(stub, "r3", url, sizeof(url)) == 0);
	TH_CHECK(worker_ws_fetch_zip(url, dest3, NULL, &reject, err, sizeof(err)) == 0, "3 redirects: %s", err);
	TH_CHECK(th_file_contains(th_strf("%s/hello.txt", dest3), "hello from the bag"));
	TH_REQUIRE(dev_stub_blob_url(stub, "r4", url, sizeof(url)) == 0);
	TH_CHECK(worker_ws_fetch_zip(url, dest2, NULL, &reject, err, sizeof(err)) == -1);
	TH_CHECK(reject == 0 && th_streq(err, th_strf("download of %s: too many redirects", url)), "%s", err);

	int closed = th_free_port(); /* nothing listens there; port 1 may be bound by anything under root */
	TH_CHECK(worker_ws_fetch_zip(th_strf("http://127.0.0.1:%d/bag.zip?sig=S", closed), dest2, NULL, &reject,
	                             err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, th_strf("download of http://127.0.0.1:%d/bag.zip: could not connect to "
	                               "127.0.0.1:%d (Connection refused)",
	                               closed, closed)),
	         "%s", err);
	TH_CHECK(worker_ws_fetch_zip("file:///etc/passwd", dest2, NULL, &reject, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "download of (invalid URL): unsupported URL scheme (only http and "
	                       "https are allowed)"),
	         "%s", err);
	TH_CHECK(th_streq(list_dir(dest2), ""), "extracted: %s", list_dir(dest2));
	dev_stub_stop(stub);
}

/*
 * A zip_url is the run's: the download reaches an inside address only for
 * the workspace API's own origin or a host the operator names exactly.
 * The worker's Redis (here a loopback listener), other spellings of
 * loopback and a redirect from the named origin to an inside address are
 * refused before any connection, with the host and its address named.
 */
static void test_fetch_reach(void)
{
	char err[512];
	dev_stub_t *stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(stub, "stub: %s", err);
	const char *zip = th_strf("%s/reach.zip", base);
	ent_t good[] = { { E_FILE, "hello.txt", "hello from the bag\n", 0, 0 } };
	TH_REQUIRE(build_archive(zip, good, 1, 0) == 0);
	TH_REQUIRE(dev_stub_add_blob_file(stub, "bag.zip", zip) == 0);
	char url[256], origin[300];
	TH_REQUIRE(dev_stub_blob_url(stub, "bag.zip", url, sizeof(url)) == 0);
	worker_httpc_host_port(url, origin, sizeof(origin));
	int port = 0;
	int lfd = th_listen_loopback(16, &port); /* the worker's own service */
	TH_REQUIRE(lfd >= 0, "listener");
	rn_netaddr_set_t own = { 0 };
	TH_REQUIRE(rn_netaddr_set_add(&own, "127.0.0.1", port, err, sizeof(err)) == 0, "%s", err);
	char *named[] = { "*:443", "@model", "intranet.example:8443" };
	worker_bag_limits_t lim = { .reach = { .on = 1, .named = named, .nnamed = 3, .own = &own } };
	snprintf(lim.reach.origin, sizeof(lim.reach.origin), "%s", origin);
	int reject = -1;

	/* The workspace API's own origin: a loopback stub, reached. */
	const char *dest = th_strf("%s/reach1", base);
	TH_REQUIRE(mkdir(dest, 0700) == 0);
	TH_CHECK(worker_ws_fetch_zip(url, dest, &lim, &reject, err, sizeof(err)) == 0, "the origin: %s", err);
	TH_CHECK(th_file_contains(th_strf("%s/hello.txt", dest), "hello from the bag"));

	/* The worker's own service, and loopback spelled otherwise. */
	const char *dest2 = th_strf("%s/reach2", base);
	TH_REQUIRE(mkdir(dest2, 0700) == 0);
	static const char *const hosts[] = { "127.0.0.1", "localhost", "127.1", "2130706433", "[::ffff:127.0.0.1]", "0" };
	for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		char *u = th_strf("http://%s:%d/bag.zip?X-Signature=SIG-SECRET", hosts[i], port);
		TH_CHECK(worker_ws_fetch_zip(u, dest2, &lim, &reject, err, sizeof(err)) == -1, "%s", hosts[i]);
		TH_CHECK(reject == 0 && strstr(err, "which a run's URL may not reach") &&
		                 (strstr(err, "(a loopback address)") || strstr(err, "(an unspecified address)")),
		         "%s: %s", hosts[i], err);
		TH_CHECK(!strstr(err, "SIG-SECRET"), "no query string: %s", err);
	}
	TH_CHECK(th_streq(err, th_strf("download of http://0.0.0.0:%d/bag.zip: 0.0.0.0:%d resolves to 0.0.0.0:%d "
	                               "(an unspecified address), which a run's URL may not reach",
	                               port, port, port)) ||
	                 th_streq(err, th_strf("download of http://0:%d/bag.zip: 0:%d resolves to 0.0.0.0:%d "
	                                       "(an unspecified address), which a run's URL may not reach",
	                                       port, port, port)),
	         "%s", err);
	/* A redirect from the named origin to an inside address. */
	dev_stub_fault_t f = { .redirect = th_strf("http://127.0.0.1:%d/x", port) };
	TH_REQUIRE(dev_stub_add_blob(stub, "hop", "x", 1) == 0);
	TH_REQUIRE(dev_stub_set_blob_fault(stub, "hop", &f) == 0);
	TH_REQUIRE(dev_stub_blob_url(stub, "hop", url, sizeof(url)) == 0);
	TH_CHECK(worker_ws_fetch_zip(url, dest2, &lim, &reject, err, sizeof(err)) == -1);
	TH_CHECK(strstr(err, th_strf("127.0.0.1:%d (a loopback address)", port)), "redirect: %s", err);
	struct pollfd p = { lfd, POLLIN, 0 };
	TH_CHECK(poll(&p, 1, 0) == 0, "the worker's service was never dialled");
	/* Named exactly by the operator: reached (here: refused by nobody, the
	 * listener accepts, the transfer then times out quickly). */
	char *exact[] = { th_strf("127.0.0.1:%d", port) };
	worker_bag_limits_t lim2 = { .reach = { .on = 1, .named = exact, .nnamed = 1, .own = &own }, .timeout_ms = 300 };
	TH_CHECK(worker_ws_fetch_zip(th_strf("http://127.0.0.1:%d/bag.zip", port), dest2, &lim2, &reject, err,
	                             sizeof(err)) == -1);
	TH_CHECK(strstr(err, "timed out"), "named: connected, then %s", err);
	TH_CHECK(th_streq(list_dir(dest2), ""), "extracted: %s", list_dir(dest2));
	rn_netaddr_set_free(&own);
	close(lfd);
	dev_stub_stop(stub);
}

int main(void)
{
	th_init("stages_workspace");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	base = th_tmpdir();
	TH_REQUIRE(base);
	test_refusals();
	test_good_bag();
	test_tree();
	test_subdirs();
	test_recycle();
	test_fetch();
	test_fetch_reach();
	curl_global_cleanup();
	return th_done();
}
