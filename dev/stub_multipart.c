/*
 * dev/stub_multipart.c - multipart/form-data (RFC 7578) uploads to
 * /results, enough for curl's and browsers' forms, stored under the run.
 */
#include "dev/stub_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * multipart/form-data (RFC 7578), enough for curl's and browsers' forms
 * ------------------------------------------------------------------------ */

/* Copies the value of param (name= or filename=) from a Content-Disposition
 * line, unquoting "..." with backslash escapes.  malloc'd or NULL. */
static char *stub_cd_param(const char *line, size_t llen, const char *param)
{
	size_t plen = strlen(param);
	for (size_t i = 0; i + plen < llen; i++) {
		if (strncasecmp(line + i, param, plen) != 0 || line[i + plen] != '=')
			continue;
		/* A whole word: preceded by ';', ' ' or '\t'. */
		if (i > 0 && line[i - 1] != ';' && line[i - 1] != ' ' && line[i - 1] != '\t')
			continue;
		const char *p = line + i + plen + 1, *end = line + llen;
		char *out = malloc(llen + 1);
		if (!out)
			return NULL;
		size_t o = 0;
		if (p < end && *p == '"') {
			p++;
			while (p < end && *p != '"') {
				if (*p == '\\' && p + 1 < end)
					p++;
				out[o++] = *p++;
			}
		} else {
			while (p < end && *p != ';' && *p != ' ')
				out[o++] = *p++;
		}
		out[o] = 0;
		return out;
	}
	return NULL;
}

/*
 * Calls cb for each part.  Returns the number of parts, or -1 when the
 * body is not well-formed multipart with that boundary.
 */
int stub_multipart_each(const char *body, size_t len, const char *boundary,
                        int (*cb)(const stub_part_t *, void *), void *arg)
{
	char delim[200];
	int dl = snprintf(delim, sizeof(delim), "--%s", boundary);
	if (dl < 0 || (size_t)dl >= sizeof(delim))
		return -1;
	const char *end = body + len;
	const char *p = memmem(body, len, delim, (size_t)dl);
	if (!p)
		return -1;
	int count = 0;
	for (;;) {
		p += dl;
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			return count; /* closing delimiter */
		/* Transport padding, then CRLF. */
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
			return -1;
		p += 2;
		const char *hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
		if (!hend)
			return -1;
		stub_part_t part;
		memset(&part, 0, sizeof(part));
		for (const char *l = p; l < hend;) {
			const char *le = memmem(l, (size_t)(hend - l), "\r\n", 2);
			if (!le)
				le = hend;
			size_t ll = (size_t)(le - l);
			if (ll > 20 && strncasecmp(l, "Content-Disposition:", 20) == 0) {
				char *nm = stub_cd_param(l, ll, "name");
				if (nm) {
					snprintf(part.name, sizeof(part.name), "%s", nm);
					free(nm);
				}
				free(part.filename);
				part.filename = stub_cd_param(l, ll, "filename");
			}
			l = le + 2;
		}
		const char *data = hend + 4;
		char close_delim[210];
		int cl = snprintf(close_delim, sizeof(close_delim), "\r\n%s", delim);
		const char *next = memmem(data, (size_t)(end - data), close_delim, (size_t)cl);
		if (!next) {
			free(part.filename);
			return -1;
		}
		part.data = data;
		part.len = (size_t)(next - data);
		int rc = cb(&part, arg);
		free(part.filename);
		if (rc < 0)
			return -1;
		count++;
		p = next + 2;
	}
}

/* mkdir -p of path's parent dirs, under a root that exists. */
static int stub_mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		int rc = mkdir(path, 0700);
		*p = '/';
		if (rc < 0 && errno != EEXIST)
			return -1;
	}
	return 0;
}

/* A relative path without "..", "." or empty segments. */
static int stub_relpath_ok(const char *name)
{
	if (!*name || name[0] == '/' || strlen(name) > 1024)
		return 0;
	const char *p = name;
	while (*p) {
		const char *seg = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - seg);
		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return 0;
		if (*p)
			p++;
	}
	return 1;
}

/* Called with the lock held. */
int stub_upload_part(const stub_part_t *part, void *arg)
{
	stub_upload_t *u = arg;
	if (strcmp(part->name, "files") != 0 || !part->filename)
		return 0;
	stub_run_t *r = u->run;
	if (r->nfiles == r->files_cap) {
		size_t cap = r->files_cap ? r->files_cap * 2 : 8;
		stub_file_t *nf = realloc(r->files, cap * sizeof(*nf));
		if (!nf)
			return -1;
		r->files = nf;
		r->files_cap = cap;
	}
	stub_file_t *f = &r->files[r->nfiles];
	memset(f, 0, sizeof(*f));
	if (!(f->name = strdup(part->filename)))
		return -1;
	f->len = part->len;
	if (r->stored + part->len <= u->stub->max_store) {
		f->data = malloc(part->len + 1);
		if (!f->data) {
			free(f->name);
			return -1;
		}
		memcpy(f->data, part->data, part->len);
		f->data[part->len] = 0;
		r->stored += part->len;
	}
	r->nfiles++;
	u->files++;
	if (u->stub->results_dir && stub_relpath_ok(part->filename)) {
		char *path = NULL;
		if (asprintf(&path, "%s/%s/%s", u->stub->results_dir, r->session, part->filename) >= 0) {
			if (stub_mkdirs(path) == 0) {
				int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
				if (fd >= 0) {
					size_t off = 0;
					while (off < part->len) {
						ssize_t w = write(fd, part->data + off, part->len - off);
						if (w <= 0 && errno != EINTR)
							break;
						if (w > 0)
							off += (size_t)w;
					}
					close(fd);
				}
			}
			free(path);
		}
	}
	return 0;
}

/* The boundary parameter of a multipart/form-data Content-Type, or -1. */
int stub_boundary(const char *ctype, char *out, size_t size)
{
	if (!ctype || strncasecmp(ctype, "multipart/form-data", 19) != 0)
		return -1;
	const char *b = strcasestr(ctype, "boundary=");
	if (!b)
		return -1;
	b += 9;
	size_t n = 0;
	if (*b == '"') {
		b++;
		while (b[n] && b[n] != '"')
			n++;
	} else {
		while (b[n] && b[n] != ';' && b[n] != ' ')
			n++;
	}
	if (n == 0 || n > 70 || n >= size)
		return -1;
	memcpy(out, b, n);
	out[n] = 0;
	return 0;
}
