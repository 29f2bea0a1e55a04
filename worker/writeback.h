/*
 * worker/writeback.h - POST {agent_url}/results with the files under
 * assets/ (SPEC §5): one multipart/form-data request, one part named
 * "files" per regular file, filename = path relative to assets/.
 *
 * Never follows a symlink (files are opened with O_NOFOLLOW relative to
 * their directory fd), skips devices, fifos and sockets, and refuses more
 * than max_files files or max_bytes bytes in all.  No request at all when
 * there is nothing to upload.  The OTP is sent once and never retried.
 * Messages: "writeback: more than 1000 files in assets/",
 * "writeback: assets/ holds more than 268435456 bytes",
 * "POST /results answered HTTP 500", "POST /results: timed out after 120000 ms".
 *
 * @locality the run's thread (blocking).
 */
#ifndef RUNNEL_WORKER_WRITEBACK_H
#define RUNNEL_WORKER_WRITEBACK_H

#include <stddef.h>
#include <stdint.h>

#include "worker/stop.h"

typedef struct worker_wb_limits {
	uint64_t max_files; /* default 1000 */
	uint64_t max_bytes; /* default 256 MiB */
	long timeout_ms;    /* default 120000 */
	/* Any stop ends the upload (error "cancelled"); NULL = never. */
	const worker_stopword_t *stop;
} worker_wb_limits_t;

/*
 * Uploads.  Returns 0 (*nfiles = files sent, 0 when nothing to send and no
 * request was made; *nskipped = entries skipped as links or special files)
 * or -1 with errstr (caps exceeded, HTTP status, transport error), never
 * quoting the OTP.
 */
int worker_writeback_upload(const char *agent_url, const char *otp_upload,
                            const char *assets_dir, const worker_wb_limits_t *limits,
                            size_t *nfiles, size_t *nskipped,
                            char *errstr, size_t errstr_size);

#endif
