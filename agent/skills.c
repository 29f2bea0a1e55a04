/*
 * agent/skills.c - skill discovery (see skills.h).
 */
#include "agent/skills.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/emit.h"

#define SKILL_MD_MAX (64 * 1024) /* front matter sits at the top */

/* One "key: value" line, value unquoted. */
static void take_value(const char *v, size_t n, char *out, size_t size)
{
	while (n > 0 && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r'))
		n--;
	if (n >= 2 && ((v[0] == '"' && v[n - 1] == '"') || (v[0] == '\'' && v[n - 1] == '\''))) {
		v++;
		n -= 2;
	}
	if (n >= size)
		n = size - 1;
	memcpy(out, v, n);
	out[n] = '\0';
	/* One line in the prompt. */
	for (char *p = out; *p; p++)
		if (*p == '\n' || (unsigned char)*p < 0x20)
			*p = ' ';
}

int agent_skills_front_matter(const char *text, size_t len, char *name, size_t name_size, char *desc,
                              size_t desc_size)
{
	name[0] = desc[0] = '\0';
	/* An optional UTF-8 BOM, then "---" on the first line. */
	if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {
		text += 3;
		len -= 3;
	}
	if (len < 3 || memcmp(text, "---", 3))
		return -1;
	const char *p = memchr(text, '\n', len);
	if (!p)
		return -1;
	p++;
	const char *end = text + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		size_t t = n;
		while (t > 0 && (p[t - 1] == '\r' || p[t - 1] == ' '))
			t--;
		if (t == 3 && !memcmp(p, "---", 3))
			return 0;
		if (n > 5 && !memcmp(p, "name:", 5) && !name[0])
			take_value(p + 5, n - 5, name, name_size);
		else if (n > 12 && !memcmp(p, "description:", 12) && !desc[0])
			take_value(p + 12, n - 12, desc, desc_size);
		if (!nl)
			break;
		p = nl + 1;
	}
	return -1; /* no closing line */
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int agent_skills_scan(const char *dir, char **prompt)
{
	*prompt = NULL;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	char *names[AGENT_SKILLS_MAX];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < AGENT_SKILLS_MAX) {
		if (e->d_name[0] == '.')
			continue;
		names[n] = strdup(e->d_name);
		if (names[n])
			n++;
	}
	closedir(d);
	qsort(names, (size_t)n, sizeof(names[0]), name_cmp);

	char *out = NULL;
	size_t out_len = 0;
	FILE *f = open_memstream(&out, &out_len);
	int found = 0;
	for (int i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s/SKILL.md", dir, names[i]);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			char *buf = malloc(SKILL_MD_MAX);
			ssize_t got = 0;
			while (buf && got < SKILL_MD_MAX) {
				ssize_t r = read(fd, buf + got, (size_t)(SKILL_MD_MAX - got));
				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0)
					break;
				got += r;
			}
			close(fd);
			char name[128], desc[1024];
			if (buf && agent_skills_front_matter(buf, (size_t)got, name, sizeof(name), desc, sizeof(desc)) < 0)
				name[0] = desc[0] = '\0';
			if (buf && f) {
				if (!found)
					fprintf(f, "Skills are installed under %s. Each has a SKILL.md with its instructions "
					           "(read it with read_file before using the skill); run a skill's scripts with "
					           "bash.\n",
					        dir);
				fprintf(f, "- %s: %s (%s/%s/SKILL.md)\n", name[0] ? name : names[i],
				        desc[0] ? desc : "no description", dir, names[i]);
				found++;
			}
			free(buf);
		}
		free(names[i]);
	}
	if (f)
		fclose(f);
	if (found && out) {
		/* SKILL.md files are anyone's bytes; the prompt must be UTF-8. */
		*prompt = agent_cap_text(out, out_len, out_len);
		free(out);
	} else {
		free(out);
	}
	return found;
}
