/* placeholder until submit lands */
#include "cli.h"
int cli_submit_main(int argc, char **argv) { (void)argc; (void)argv; return CLI_EXIT_USAGE; }
