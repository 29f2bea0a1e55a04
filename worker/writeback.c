/*
 * worker/writeback.c - POST /results with the files under assets/.
 */
#include "worker/writeback.h"

#include <stdio.h>

int worker_writeback_upload(const char *agent_url, const char *otp_upload,
                            const char *assets_dir, const worker_wb_limits_t *limits,
                            size_t *nfiles, size_t *nskipped,
                            char *errstr, size_t errstr_size)
{
	*nfiles = 0;
	*nskipped = 0;
	snprintf(errstr, errstr_size, "writeback: not available yet");
	return -1;
}
