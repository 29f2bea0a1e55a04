/*
 * tests/support/preload_marker.c - a shared library that leaves a file in
 * $RUNNEL_TEST_MARKER_DIR in every process that loads it, for the tests
 * that check a run's LD_PRELOAD loads nothing on the host.  Built without
 * sanitizers: it must load into any program (bwrap, /bin/true).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void preload_marker_loaded(void)
{
	const char *dir = getenv("RUNNEL_TEST_MARKER_DIR");
	if (!dir)
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s/loaded-%ld", dir, (long)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
}
