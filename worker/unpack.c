/*
 * worker/unpack.c - runnel-unpack, which unpacks a run's bag or skill
 * inside the run's cgroup (worker_cgroup_exec, worker/workspace.h), so
 * that the run pays for the files' tmpfs pages.  The worker starts it
 * with posix_spawn rather than forking itself: a fork of a multi-threaded
 * process may not allocate, and unpacking does.
 *
 *   runnel-unpack DEST_DIR MAX_BYTES MAX_ENTRIES PARENT_PID NCGROUP
 *
 * fd 0 is the archive (zip, tar, tar.gz), read from its offset; fd 1 gets
 * the answer (why it failed, one line); fd 2 is the worker's stderr; fds
 * 3 .. 3+NCGROUP-1 are the run's cgroup procs files, entered before
 * anything is allocated.  It dies with the worker's thread that started
 * it (PR_SET_PDEATHSIG; PARENT_PID closes the race).  Exit status:
 * WORKER_UNPACK_OK, _FAILED, _REJECTED, or 2 when called wrongly.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "worker/workspace.h"

static int number(const char *s, unsigned long long max, unsigned long long *v)
{
	char *end;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || end == s || *end || *s == '-' || *v > max ? -1 : 0;
}

int main(int argc, char **argv)
{
	unsigned long long bytes, entries, parent, ncg;
	if (argc != 6 || number(argv[2], UINT64_MAX, &bytes) < 0 || number(argv[3], UINT64_MAX, &entries) < 0 ||
	    number(argv[4], 1ULL << 31, &parent) < 0 || number(argv[5], 60, &ncg) < 0 || argv[1][0] != '/') {
		fprintf(stderr, "usage: runnel-unpack DEST_DIR MAX_BYTES MAX_ENTRIES PARENT_PID NCGROUP\n"
		                "  (the worker's: fd 0 the archive, fd 1 the answer, fds 3.. the cgroup's procs files)\n");
		return 2;
	}
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != (pid_t)parent) {
		fprintf(stderr, "runnel-unpack: PARENT_PID %llu is not its parent (the worker starts it)\n", parent);
		return 2;
	}
	for (int fd = 3; fd < 3 + (int)ncg; fd++) {
		if (write(fd, "0", 1) != 1) {
			printf("cannot enter the run's cgroup: %s\n", strerror(errno));
			return WORKER_UNPACK_FAILED;
		}
		close(fd);
	}
	worker_bag_limits_t lim = { .max_bytes = bytes, .max_entries = entries };
	char err[1024] = "";
	int reject = 0;
	if (worker_ws_extract_fd(0, argv[1], &lim, &reject, err, sizeof(err)) == 0)
		return WORKER_UNPACK_OK;
	printf("%s\n", err);
	return reject ? WORKER_UNPACK_REJECTED : WORKER_UNPACK_FAILED;
}
