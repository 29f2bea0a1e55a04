/*
 * cli/interrupt.h - Ctrl-C and SIGTERM for the CLI: a flag the long-running
 * loops (tail, dev) poll, so they stop cleanly and restore the terminal.
 */
#ifndef RUNNEL_CLI_INTERRUPT_H
#define RUNNEL_CLI_INTERRUPT_H

/* Installs SIGINT/SIGTERM handlers (no SA_RESTART, so blocking calls
 * return) and ignores SIGPIPE.  Idempotent. */
void cli_interrupt_install(void);
/* The signal number that arrived first, or 0. */
int cli_interrupted(void);

#endif
