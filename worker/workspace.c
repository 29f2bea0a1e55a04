/*
 * worker/workspace.c - the run's directory tree and the bags unpacked into it.
 */
#include "worker/workspace.h"

#include <stdio.h>
#include <string.h>

int worker_ws_create(worker_ws_t *ws, const char *root, const char *run_id,
                     char *errstr, size_t errstr_size)
{
	memset(ws, 0, sizeof(*ws));
	snprintf(errstr, errstr_size, "workspace: not available yet");
	return -1;
}

int worker_ws_fetch_zip(const char *url, const char *dest_dir,
                        const worker_bag_limits_t *limits, int *reject,
                        char *errstr, size_t errstr_size)
{
	*reject = 0;
	snprintf(errstr, errstr_size, "workspace: not available yet");
	return -1;
}

int worker_ws_extract_file(const char *zip_path, const char *dest_dir,
                           const worker_bag_limits_t *limits,
                           char *errstr, size_t errstr_size)
{
	snprintf(errstr, errstr_size, "workspace: not available yet");
	return -1;
}

int worker_ws_remove(worker_ws_t *ws)
{
	return -1;
}
