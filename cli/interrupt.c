/*
 * cli/interrupt.c - the process-wide stop flag set by SIGINT/SIGTERM.
 */
#include "interrupt.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
	if (!g_signal)
		g_signal = sig;
}

void cli_interrupt_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int cli_interrupted(void)
{
	return g_signal;
}
