/*
 * cli/cli.h - the verbs of the `runnel` program and the exit codes they share.
 *
 * Each verb lives in its own file and is called by main.c with argv[0] set
 * to the verb's name.  Verbs print their own messages (they are the "main"
 * of the program for their part); the helpers they use do not.
 */
#ifndef RUNNEL_CLI_CLI_H
#define RUNNEL_CLI_CLI_H

/* Exit codes every verb uses (docs/cli.md lists them). */
#define CLI_EXIT_OK          0   /* success; for tail: the run ended with a result */
#define CLI_EXIT_RUN_ERROR   1   /* the run ended with an error line; or a refused request */
#define CLI_EXIT_USAGE       2   /* bad flags or arguments */
#define CLI_EXIT_NOT_FOUND   3   /* no such run (no state hash and no stream) */
#define CLI_EXIT_UNREACHABLE 4   /* cannot reach Redis, Kafka or the dispatcher */
#define CLI_EXIT_INTERRUPTED 130 /* Ctrl-C while tailing */

int cli_submit_main(int argc, char **argv);
int cli_tail_main(int argc, char **argv);
int cli_cancel_main(int argc, char **argv);
int cli_reply_main(int argc, char **argv);
int cli_status_main(int argc, char **argv);
int cli_dev_main(int argc, char **argv);

#endif
