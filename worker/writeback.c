/*
 * worker/writeback.c - POST {agent_url}/results with the regular files
 * under assets/ as one multipart/form-data request (SPEC §5).
 *
 * The agent is gone when this runs, but what it left behind is untrusted:
 * the walk never follows a link (fstatat AT_SYMLINK_NOFOLLOW, openat
 * O_NOFOLLOW relative to each directory's fd), and each file is opened only
 * when curl reads its part, again relative to its directory without
 * following links, and must still be the inode the walk saw.  So at most one
 * file is open at a time, and a file swapped for a link after the walk is
 * refused, not followed.
 */
#include "worker/writeback.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "worker/httpc.h"

#define DEF_MAX_FILES      1000
#define DEF_MAX_BYTES      (256ULL << 20)
#define DEF_TIMEOUT_MS     120000L
#define CONNECT_TIMEOUT_MS 10000L
#define MAX_DEPTH          64
#define ANSWER_MAX         (64 * 1024)
#define ROUTE              "POST /results"

typedef struct wb_file {
	char *rel; /* path relative to assets/ (malloc'd) */
	dev_t dev;
	ino_t ino;
	uint64_t size;
	int fd; /* -1 until curl reads the part */
	uint64_t sent;
	struct wb_ctx *ctx;
} wb_file_t;

typedef struct wb_ctx {
	int root_fd; /* assets/ */
	worker_wb_limits_t lim;
	wb_file_t *files;
	size_t nfiles, cap;
	uint64_t bytes;
	size_t skipped;
	int failed; /* a cap, or a local error: errstr is set */
	char *errstr;
	size_t errstr_size;
	char changed[256]; /* set by the read callback */
} wb_ctx_t;

static int wb_fail(wb_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int wb_fail(wb_ctx_t *c, const char *fmt, ...)
{
	if (!c->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->errstr, c->errstr_size, fmt, ap);
		va_end(ap);
	}
	c->failed = 1;
	return -1;
}

static int add_file(wb_ctx_t *c, const char *rel, const struct stat *st)
{
	if (c->nfiles >= c->lim.max_files)
		return wb_fail(c, "writeback: more than %llu files in assets/",
		               (unsigned long long)c->lim.max_files);
	if ((uint64_t)st->st_size > c->lim.max_bytes - c->bytes)
		return wb_fail(c, "writeback: assets/ holds more than %llu bytes",
		               (unsigned long long)c->lim.max_bytes);
	if (c->nfiles == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 32;
		wb_file_t *nf = realloc(c->files, ncap * sizeof(*nf));
		if (!nf)
			return wb_fail(c, "writeback: out of memory");
		c->files = nf;
		c->cap = ncap;
	}
	char *dup = strdup(rel);
	if (!dup)
		return wb_fail(c, "writeback: out of memory");
	c->files[c->nfiles++] = (wb_file_t){
		.rel = dup,
		.dev = st->st_dev,
		.ino = st->st_ino,
		.size = (uint64_t)st->st_size,
		.fd = -1,
		.ctx = c,
	};
	c->bytes += (uint64_t)st->st_size;
	return 0;
}

/* Walks the directory open on dfd (not closed here), names sorted. */
static int walk(wb_ctx_t *c, int dfd, const char *prefix, int depth)
{
	struct dirent **names = NULL;
	int n = scandirat(dfd, ".", &names, NULL, alphasort);
	if (n < 0)
		return wb_fail(c, "writeback: cannot read assets/%s", prefix);
	int rc = 0;
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;
		if (rc != 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		char rel[PATH_MAX];
		if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", prefix, *prefix ? "/" : "", name) >= sizeof(rel)) {
			c->skipped++;
			continue;
		}
		struct stat st;
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			c->skipped++;
			continue;
		}
		if (S_ISREG(st.st_mode)) {
			rc = add_file(c, rel, &st);
		} else if (S_ISDIR(st.st_mode) && depth < MAX_DEPTH) {
			int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				c->skipped++;
				continue;
			}
			rc = walk(c, sub, rel, depth + 1);
			close(sub);
		} else {
			/* Links, fifos, sockets, devices, directories nested too deep. */
			c->skipped++;
		}
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/* Opens f again, relative to assets/, never through a link; -1 if it is
 * no longer the file the walk saw. */
static int reopen(wb_file_t *f)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof(buf), "%s", f->rel);
	int dfd = dup(f->ctx->root_fd);
	char *p = buf;
	for (char *slash; dfd >= 0 && (slash = strchr(p, '/')); p = slash + 1) {
		*slash = '\0';
		int next = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dfd);
		dfd = next;
	}
	if (dfd < 0)
		return -1;
	/* O_NONBLOCK: a fifo put in its place must not block the worker. */
	int fd = openat(dfd, p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != f->dev || st.st_ino != f->ino) {
		close(fd);
		return -1;
	}
	return fd;
}

static size_t part_read(char *buffer, size_t size, size_t nitems, void *arg)
{
	wb_file_t *f = arg;
	size_t want = size * nitems;
	if (f->sent >= f->size)
		return 0;
	if (f->fd < 0) {
		f->fd = reopen(f);
		if (f->fd < 0) {
			snprintf(f->ctx->changed, sizeof(f->ctx->changed), "%s", f->rel);
			return CURL_READFUNC_ABORT;
		}
	}
	if (want > f->size - f->sent)
		want = (size_t)(f->size - f->sent);
	ssize_t n;
	do {
		n = read(f->fd, buffer, want);
	} while (n < 0 && errno == EINTR);
	if (n <= 0) {
		/* Shorter than when the walk saw it. */
		snprintf(f->ctx->changed, sizeof(f->ctx->changed), "%s", f->rel);
		return CURL_READFUNC_ABORT;
	}
	f->sent += (uint64_t)n;
	if (f->sent >= f->size) {
		/* One file open at a time: curl reads the parts in order. */
		close(f->fd);
		f->fd = -1;
	}
	return (size_t)n;
}

static int part_seek(void *arg, curl_off_t offset, int origin)
{
	wb_file_t *f = arg;
	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > f->size)
		return CURL_SEEKFUNC_CANTSEEK;
	if (f->fd >= 0 && lseek(f->fd, (off_t)offset, SEEK_SET) != (off_t)offset)
		return CURL_SEEKFUNC_FAIL;
	if (f->fd < 0 && offset != 0)
		return CURL_SEEKFUNC_CANTSEEK;
	f->sent = (uint64_t)offset;
	return CURL_SEEKFUNC_OK;
}

static void ctx_free(wb_ctx_t *c)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		free(c->files[i].rel);
		if (c->files[i].fd >= 0)
			close(c->files[i].fd);
	}
	free(c->files);
	if (c->root_fd >= 0)
		close(c->root_fd);
}

static int post(wb_ctx_t *c, const char *agent_url, const char *otp)
{
	char *url = worker_httpc_join(agent_url, "results", c->errstr, c->errstr_size);
	if (!url)
		return -1;
	int rc = -1;
	CURL *h = curl_easy_init();
	curl_mime *mime = h ? curl_mime_init(h) : NULL;
	struct curl_slist *hdr = worker_httpc_bearer(otp ? otp : "");
	/* No "Expect: 100-continue" round trip. */
	if (hdr)
		hdr = curl_slist_append(hdr, "Expect:");
	rn_body_t answer;
	rn_body_init(&answer, ANSWER_MAX, 0);
	if (!h || !mime || !hdr) {
		snprintf(c->errstr, c->errstr_size, "writeback: out of memory");
		goto out;
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		wb_file_t *f = &c->files[i];
		curl_mimepart *part = curl_mime_addpart(mime);
		if (!part || curl_mime_name(part, "files") != CURLE_OK ||
		    curl_mime_filename(part, f->rel) != CURLE_OK ||
		    curl_mime_type(part, "application/octet-stream") != CURLE_OK ||
		    curl_mime_data_cb(part, (curl_off_t)f->size, part_read, part_seek, NULL, f) != CURLE_OK) {
			snprintf(c->errstr, c->errstr_size, "writeback: out of memory");
			goto out;
		}
	}
	worker_httpc_setup(h, CONNECT_TIMEOUT_MS, c->lim.timeout_ms);
	worker_httpc_abort_on(h, c->lim.stop);
	worker_httpc_send_once(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, rn_body_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &answer);

	CURLcode cr = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (cr == CURLE_ABORTED_BY_CALLBACK && c->lim.stop && worker_stopword_any(c->lim.stop)) {
		snprintf(c->errstr, c->errstr_size, "cancelled");
	} else if (c->changed[0]) {
		snprintf(c->errstr, c->errstr_size, "writeback: assets/%s changed during the upload",
		         c->changed);
	} else if (cr != CURLE_OK && !(cr == CURLE_WRITE_ERROR && answer.too_big && status)) {
		char why[256];
		worker_httpc_describe(h, cr, url, CONNECT_TIMEOUT_MS, c->lim.timeout_ms, why, sizeof(why));
		snprintf(c->errstr, c->errstr_size, ROUTE ": %s", why);
	} else if (status >= 300 && status <= 399) {
		snprintf(c->errstr, c->errstr_size,
		         ROUTE " answered a redirect (HTTP %ld); redirects are not followed", status);
	} else if (status < 200 || status > 299) {
		snprintf(c->errstr, c->errstr_size, ROUTE " answered HTTP %ld", status);
	} else {
		rc = 0;
	}
out:
	rn_body_free(&answer);
	curl_mime_free(mime);
	curl_slist_free_all(hdr);
	if (h)
		curl_easy_cleanup(h);
	free(url);
	return rc;
}

int worker_writeback_upload(const char *agent_url, const char *otp_upload,
                            const char *assets_dir, const worker_wb_limits_t *limits,
                            size_t *nfiles, size_t *nskipped,
                            char *errstr, size_t errstr_size)
{
	*nfiles = 0;
	*nskipped = 0;
	wb_ctx_t c;
	memset(&c, 0, sizeof(c));
	c.root_fd = -1;
	c.errstr = errstr;
	c.errstr_size = errstr_size;
	if (limits)
		c.lim = *limits;
	if (!c.lim.max_files)
		c.lim.max_files = DEF_MAX_FILES;
	if (!c.lim.max_bytes)
		c.lim.max_bytes = DEF_MAX_BYTES;
	if (c.lim.timeout_ms <= 0)
		c.lim.timeout_ms = DEF_TIMEOUT_MS;

	c.root_fd = open(assets_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (c.root_fd < 0) {
		if (errno == ENOENT)
			return 0; /* the agent removed assets/: nothing to send */
		if (errno == ELOOP || errno == ENOTDIR) {
			*nskipped = 1; /* assets/ itself replaced by a link or a file */
			return 0;
		}
		snprintf(errstr, errstr_size, "writeback: cannot open assets/: %s", strerror(errno));
		return -1;
	}
	int rc = walk(&c, c.root_fd, "", 0);
	*nskipped = c.skipped;
	if (rc == 0 && c.nfiles > 0) {
		rc = post(&c, agent_url, otp_upload);
		if (rc == 0)
			*nfiles = c.nfiles;
	}
	ctx_free(&c);
	return rc;
}
