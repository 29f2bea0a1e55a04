/* placeholder until dev lands */
#include "cli.h"
int cli_dev_main(int argc, char **argv) { (void)argc; (void)argv; return CLI_EXIT_USAGE; }
