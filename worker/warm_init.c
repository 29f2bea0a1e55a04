/*
 * worker/warm_init.c - runnel-warm-init, the first program of every bwrap
 * sandbox, warm (worker/warm.h) or cold: the run's environment reaches the
 * agent only through it, never through a host process (worker/sandbox.h).
 * bwrap starts it with an empty environment; it waits on stdin for the
 * run's launch message, then becomes the agent with execvp(), so the agent
 * keeps the same stdin (the turn line follows the message on the same
 * pipe), stdout and stderr.
 *
 * The message (all integers little-endian u32):
 *   "RNW1" argc {len bytes}*argc envc {len bytes}*envc setup_len setup_bytes
 * A non-empty setup script is written to /run/runnel/setup.sh (mode 0500)
 * before the exec; the worker then sends the setup wrapper as argv.
 *
 * EOF before a complete message means the worker discarded the sandbox:
 * exit 0 without a word.  A missing agent prints what bwrap prints for it
 * ("bwrap: execvp NAME: REASON") and exits 1, so a warm start fails like a
 * cold one.  Stdin is read with read(2) exactly up to the message's end:
 * nothing of the turn line is consumed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "common/sandbox_layout.h"

#define WARM_MAGIC      "RNW1"
#define WARM_ARGV_MAX   4096u
#define WARM_ENV_MAX    8192u
#define WARM_STR_MAX    (1u << 20)
#define WARM_TOTAL_MAX  (32u << 20)
#define WARM_SETUP_PATH RN_SANDBOX_SETUP_PATH

extern char **environ;

static size_t total;

/* Reads exactly n bytes; 0, or -1 at EOF/error (the worker went away). */
static int read_full(void *buf, size_t n)
{
	return rn_read_full(0, buf, n) == n ? 0 : -1;
}

static int read_u32(uint32_t *v)
{
	unsigned char b[4];
	if (read_full(b, 4) != 0)
		return -1;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 0;
}

static void bad(const char *what) __attribute__((noreturn));
static void bad(const char *what)
{
	fprintf(stderr, "runnel-warm-init: bad launch message (%s)\n", what);
	_exit(126);
}

/* One length-prefixed string (NUL added); NULL at EOF. */
static char *read_str(uint32_t max)
{
	uint32_t len;
	if (read_u32(&len) != 0)
		return NULL;
	if (len > max || (total += len) > WARM_TOTAL_MAX)
		bad("string too long");
	char *s = malloc((size_t)len + 1);
	if (!s)
		bad("out of memory");
	if (len && read_full(s, len) != 0)
		_exit(0);
	s[len] = '\0';
	return s;
}

static char **read_vec(uint32_t max, int allow_empty)
{
	uint32_t n;
	if (read_u32(&n) != 0)
		_exit(0);
	if (n > max || (!allow_empty && n == 0))
		bad("count");
	char **v = calloc((size_t)n + 1, sizeof(*v));
	if (!v)
		bad("out of memory");
	for (uint32_t i = 0; i < n; i++) {
		v[i] = read_str(WARM_STR_MAX);
		if (!v[i])
			_exit(0);
		if (strlen(v[i]) == 0 && !allow_empty)
			bad("empty argument");
	}
	return v;
}

int main(void)
{
	char magic[4];
	if (read_full(magic, 4) != 0)
		return 0;
	if (memcmp(magic, WARM_MAGIC, 4) != 0)
		bad("magic");
	char **argv = read_vec(WARM_ARGV_MAX, 0);
	char **envp = read_vec(WARM_ENV_MAX, 1);
	char *setup = read_str(WARM_STR_MAX);
	if (!setup)
		return 0;
	size_t sl = strlen(setup);
	if (sl) {
		int fd = open(WARM_SETUP_PATH, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0500);
		if (fd < 0 || write(fd, setup, sl) != (ssize_t)sl) {
			fprintf(stderr, "runnel-warm-init: cannot write %s: %s\n", WARM_SETUP_PATH, strerror(errno));
			_exit(126);
		}
		close(fd);
	}
	free(setup);
	environ = envp;
	execvp(argv[0], argv);
	/* bwrap's own words for the same failure. */
	fprintf(stderr, "bwrap: execvp %s: %s\n", argv[0], strerror(errno));
	return 1;
}
