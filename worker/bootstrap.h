/*
 * worker/bootstrap.h - step 1 of a run inside the sandbox runner: redeem the
 * setup and run OTPs against the workspace (GET {agent_url}/env and
 * GET {agent_url}/config, SPEC §5), concurrently, with timeouts.
 *
 * An OTP request is sent at most once: no retry once the request may have
 * reached the server, no redirect followed.  Errors are written in words a
 * user can read and never contain an OTP or the URL:
 *   "GET /env answered HTTP 401"
 *   "GET /config answered a redirect (HTTP 302); redirects are not followed"
 *   "GET /config: timed out after 30000 ms"
 *   "GET /env: could not connect to 127.0.0.1:1 (Connection refused)"
 *   "GET /config: answer is not JSON", "GET /env: \"variables\" is not an object"
 *   "agent_url is not a valid http(s) URL", "cancelled"
 *
 * main calls curl_global_init(CURL_GLOBAL_DEFAULT) once before any thread
 * runs a stage.
 *
 * @locality the run's thread (blocking; uses its own curl multi handle).
 */
#ifndef RUNNEL_WORKER_BOOTSTRAP_H
#define RUNNEL_WORKER_BOOTSTRAP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/stop.h"

typedef struct worker_boot_opts {
	long connect_timeout_ms; /* default 5000 */
	long timeout_ms;         /* whole request; default 30000 */
	size_t max_body;         /* bytes per answer; default 4 MiB */
	/* Checked while waiting: any stop aborts with errstr "cancelled"
	 * (NULL = never). */
	const worker_stopword_t *stop;
} worker_boot_opts_t;

typedef struct worker_boot {
	/* From /env */
	json_t *variables;  /* object of string values (owned) */
	char *setup_script; /* NULL when absent or null */
	/* From /config */
	json_t *config;            /* the whole answer (owned) */
	const char *system_prompt; /* borrowed from config, may be NULL */
	const char *model;         /* borrowed, may be NULL */
	json_t *skills;            /* borrowed array or NULL */
	json_t *mcp_servers;       /* borrowed array or NULL */
	json_t *history;           /* borrowed array or NULL */
	json_t *agent;             /* borrowed object or NULL */
	const char *zip_url;       /* assets.zip_url, borrowed, may be NULL */
	const char *ws_api_url;    /* workspace_api.url, may be NULL */
	const char *ws_api_token;  /* workspace_api.token (secret), may be NULL */
	int64_t max_runtime_sec;   /* 0 when absent */
} worker_boot_t;

/*
 * Fetches /env and /config.  0 on success (*boot filled, free with
 * worker_boot_clear()); -1 with errstr on any failure (HTTP status other
 * than 200, transport error, timeout, body over max_body, JSON that does
 * not have the documented shape).
 */
int worker_bootstrap_fetch(const char *agent_url, const char *otp_setup,
                           const char *otp_run, const worker_boot_opts_t *opts,
                           worker_boot_t *boot, char *errstr, size_t errstr_size);

void worker_boot_clear(worker_boot_t *boot);

#endif
