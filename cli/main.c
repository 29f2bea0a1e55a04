/*
 * cli/main.c - `runnel`: picks the verb and hands it the rest of argv.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *summary;
} verbs[] = {
	{ "submit", cli_submit_main, "enqueue a run (dispatcher or Kafka), then follow it" },
	{ "tail", cli_tail_main, "follow a run's output until its result or error" },
	{ "cancel", cli_cancel_main, "ask a run to stop" },
	{ "reply", cli_reply_main, "answer a run's open ask (allow, reject, or text)" },
	{ "status", cli_status_main, "show a run's state" },
	{ "dev", cli_dev_main, "run the whole stack locally (Kafka mock, Redis, dispatcher, worker, workspace stub)" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: runnel VERB [options] [args]\n\n"
	           "runnel runs agent jobs in throwaway sandboxes, fed by Kafka, streamed through Redis.\n\n"
	           "verbs:\n");
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		fprintf(f, "  %-8s %s\n", verbs[i].name, verbs[i].summary);
	fprintf(f, "\nrunnel VERB --help shows a verb's options; every option has a RUNNEL_* variable twin.\n"
	           "exit status: 0 ok, 1 run ended with an error, 2 usage, 3 unknown run,\n"
	           "4 Redis/Kafka/dispatcher unreachable\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "runnel: missing verb\n");
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	const char *verb = argv[1];
	if (!strcmp(verb, "-h") || !strcmp(verb, "--help") || !strcmp(verb, "help")) {
		usage(stdout);
		return CLI_EXIT_OK;
	}
	if (!strcmp(verb, "--version") || !strcmp(verb, "version")) {
		printf("runnel %s\n", RUNNEL_VERSION);
		return CLI_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (!strcmp(verb, verbs[i].name))
			return verbs[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "runnel: unknown verb \"%.40s\"\n", verb);
	usage(stderr);
	return CLI_EXIT_USAGE;
}
