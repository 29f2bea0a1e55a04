/*
 * worker/egress_bridge.c - runnel-egress-bridge, the sandbox's side of the
 * `allowlist` egress policy (see worker/egress.h).
 *
 *   runnel-egress-bridge PORT SOCKET COMMAND [ARG...]
 *
 * Listens on 127.0.0.1:PORT in the sandbox's network namespace, forks a
 * listener that forwards each connection to the unix SOCKET (the worker's
 * proxy, bound into the sandbox), then executes COMMAND in its own place:
 * the agent keeps the process the worker started, and the port is open
 * before the agent runs.  The listener has no stdin/stdout (the agent's
 * pipes stay the agent's) and dies with the sandbox.
 *
 * Clients find it through HTTPS_PROXY / HTTP_PROXY; a program that ignores
 * those variables gets no network at all, which is the point.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/io.h"

#define CHUNK (16 * 1024)

static void relay(int a, int b)
{
	static char buf[CHUNK];
	rn_relay(a, b, buf, sizeof(buf));
}

static void serve(int lfd, const char *sock)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
				continue;
			_exit(1);
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(lfd);
			int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (u >= 0 && connect(u, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				relay(c, u);
			_exit(0);
		}
		close(c);
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: runnel-egress-bridge PORT SOCKET COMMAND [ARG...]\n");
		return 2;
	}
	char *end;
	long port = strtol(argv[1], &end, 10);
	if (*end || port < 1 || port > 65535) {
		fprintf(stderr, "runnel-egress-bridge: bad port %s\n", argv[1]);
		return 2;
	}
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in in;
	memset(&in, 0, sizeof(in));
	in.sin_family = AF_INET;
	in.sin_port = htons((unsigned short)port);
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&in, sizeof(in)) != 0 || listen(lfd, 64) != 0) {
		fprintf(stderr, "runnel-egress-bridge: cannot listen on 127.0.0.1:%ld: %s\n", port, strerror(errno));
		return 98;
	}
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "runnel-egress-bridge: fork: %s\n", strerror(errno));
		return 98;
	}
	if (pid == 0) {
		/* The listener: off the agent's pipes, reaping its children
		 * automatically, gone when the agent is. */
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
		}
		signal(SIGCHLD, SIG_IGN);
		signal(SIGPIPE, SIG_IGN);
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		serve(lfd, argv[2]);
		_exit(0);
	}
	close(lfd);
	execvp(argv[3], argv + 3);
	fprintf(stderr, "runnel-egress-bridge: cannot exec %s: %s\n", argv[3], strerror(errno));
	return 127;
}
