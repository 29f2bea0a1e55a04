/*
 * cli/interrupt.c - the process-wide stop flag set by SIGINT/SIGTERM.
 */
#include "interrupt.h"

#include <signal.h>
#include <string.h>

#include "common/util.h"

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
	if (!g_signal)
		g_signal = sig;
}

void cli_interrupt_install(void)
{
	rn_stop_signals_install(on_signal);
}

int cli_interrupted(void)
{
	return g_signal;
}
