/*
 * worker/bootstrap.c - redeems the setup and run OTPs (GET /env, GET /config).
 */
#include "worker/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int worker_bootstrap_fetch(const char *agent_url, const char *otp_setup,
                           const char *otp_run, const worker_boot_opts_t *opts,
                           worker_boot_t *boot, char *errstr, size_t errstr_size)
{
	memset(boot, 0, sizeof(*boot));
	snprintf(errstr, errstr_size, "bootstrap: not available yet");
	return -1;
}

void worker_boot_clear(worker_boot_t *boot)
{
	json_decref(boot->variables);
	json_decref(boot->config);
	free(boot->setup_script);
	memset(boot, 0, sizeof(*boot));
}
