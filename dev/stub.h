/*
 * dev/stub.h - a local stand-in for the caller's workspace API (SPEC §5):
 * a real HTTP/1.1 server (libevent evhttp) that mints one-time passwords
 * per run and serves GET /env, GET /config and POST /results for them,
 * plus static blobs (bag and skill zips).  Tests program faults into it
 * and read back what the worker did; `runnel dev` and the
 * runnel-workspace-stub program serve runs from a folder of agent
 * definitions.
 *
 * Routes (BASE = dev_stub_url()):
 *   GET  BASE/ws/<session>/env       Bearer otp_setup  -> env JSON
 *   GET  BASE/ws/<session>/config    Bearer otp_run    -> config JSON
 *   POST BASE/ws/<session>/results   Bearer otp_upload -> multipart, parts
 *                                    named "files", filename = path
 *                                    relative to assets/; answers
 *                                    {"ok":true,"files":N}
 *   GET  BASE/blobs/<name>           the blob's bytes (no auth)
 *   POST BASE/mint?agent=NAME        (opts.enable_mint only) mints a run
 *                                    from agents_dir/NAME.json; answers
 *                                    {"agent_url","otp_setup","otp_run",
 *                                     "otp_upload","session"}
 *   GET  BASE/agents                 (opts.enable_mint only) the names
 *                                    of agents_dir: {"agents":[...]}
 *   GET  BASE/healthz                "ok"
 *
 * Auth: "Authorization: Bearer <otp>" must equal the endpoint's OTP, else
 * 401 {"error":"bad token"}.  Each OTP works once; a second use is 401
 * {"error":"token already used"}.  Both are recorded.  The order per
 * request is: route -> auth (401) -> OTP spent -> programmed fault ->
 * normal answer, so a faulted call has redeemed its OTP (like a workspace
 * that accepted the token and then failed).
 *
 * OTPs are "otp_" + 32 hex chars from getrandom(2).  The stub never logs
 * an OTP or a request's Authorization header.
 *
 * Placeholders: in served env/config text, the string ${RUNNEL_STUB_URL}
 * is replaced by BASE, so agent definitions can point assets.zip_url at
 * BASE/blobs/... .
 *
 * Threads: the server runs on its own thread with its own event_base.
 * Every function here is thread-safe and may be called from any thread
 * while the server runs (one mutex guards the state), except
 * dev_stub_stop, which must not race with other calls on the same stub.
 * dev_stub_start calls evthread_use_pthreads(); a program that also uses
 * libevent elsewhere should call it first thing in main, before creating
 * any event_base.
 */
#ifndef RUNNEL_DEV_STUB_H
#define RUNNEL_DEV_STUB_H

#include <stddef.h>
#include <jansson.h>

typedef struct dev_stub dev_stub_t;

/* The three workspace endpoints of one run. */
typedef enum dev_stub_ep {
	DEV_STUB_EP_ENV = 0,
	DEV_STUB_EP_CONFIG,
	DEV_STUB_EP_RESULTS,
	DEV_STUB_EP_COUNT
} dev_stub_ep_t;

#define DEV_STUB_MAX_BODY_DEFAULT  (64u << 20) /* request body cap: 64 MiB */
#define DEV_STUB_MAX_STORE_DEFAULT (64u << 20) /* in-memory files per run */

typedef struct dev_stub_opts {
	/* "127.0.0.1:PORT", "127.0.0.1" or NULL; port 0 / NULL = ephemeral.
	 * Only loopback addresses are accepted (the stub hands out OTPs). */
	const char *listen;
	/* Folder of agent definitions NAME.json, each
	 * {"env":{"variables":{...},"setup_script":...},"config":{...}}
	 * (either part may be missing: defaults apply).  NULL = none. */
	const char *agents_dir;
	/* When set, files uploaded to /results are also written to
	 * results_dir/<session>/<relative path> (created as needed). */
	const char *results_dir;
	/* When set, GET BASE/blobs/<name> for a name not added with
	 * dev_stub_add_blob serves the file blobs_dir/<name> (read on first
	 * request, then kept; at most 256 MiB).  NULL = none. */
	const char *blobs_dir;
	size_t max_body;  /* 0 = DEV_STUB_MAX_BODY_DEFAULT; a larger body
	                              gets 413 from the HTTP layer before routing,
	                              so it shows in no run's stats */
	size_t max_store; /* 0 = DEV_STUB_MAX_STORE_DEFAULT; files beyond
	                              it are counted but not kept in memory */
	int enable_mint;  /* 1: serve POST /mint (needs agents_dir) */
	/* With enable_mint: a browser origin ("http://127.0.0.1:8080", the
	 * dispatcher serving /ui/) allowed to call /mint and /agents (CORS;
	 * "http://localhost:8080" too).  NULL = none. */
	const char *cors_origin;
	/* Values from the caller's own environment for the definitions read
	 * from agents_dir (NULL-terminated, may be NULL): for an entry
	 * "NAME=value", a variable of env.variables whose value is exactly
	 * "${NAME}" gets value; for an entry "NAME" (unset by the caller)
	 * such a variable is left out.  runnel dev passes the provider keys
	 * this way (ANTHROPIC_API_KEY, OPENAI_API_KEY), so that no example
	 * file holds a key.  Copied; wiped when the stub is freed. */
	const char *const *env_values;
} dev_stub_opts_t;

/*
 * A programmed fault for one endpoint (all zero = none).  Fields combine:
 * delay_ms applies first, then close, redirect, status/body in that order
 * of precedence.
 */
typedef struct dev_stub_fault {
	int delay_ms;         /* wait this long before answering (timeouts) */
	int close;            /* 1: drop the connection without any answer */
	const char *redirect; /* answer 302 with Location: this URL (absolute,
	                           or a path such as "/blobs/x" on the stub) */
	int status;           /* answer this status instead (401, 500, ...);
	                           body {"error":"injected"} unless body is set */
	const char *body;     /* answer this raw body (status, or 200), as
	                           text/plain: e.g. not JSON at all */
} dev_stub_fault_t;

/*
 * One run's answers.  The stub copies everything it is given; the caller
 * keeps ownership of its strings and json_t values.
 */
typedef struct dev_stub_run {
	/* Body of /env.  env_json (served verbatim, may be invalid on purpose)
	 * wins over env; both NULL -> {"variables":{},"setup_script":null}. */
	const char *env_json;
	json_t *env;
	/* Body of /config.  config_json is served verbatim (may be invalid on
	 * purpose).  config (an object) gets defaults for missing keys:
	 * system_prompt, model, skills [], mcp_servers [],
	 * agent {"kind":"mock","script":"demo"}.  Both NULL -> the defaults. */
	const char *config_json;
	json_t *config;
	dev_stub_fault_t faults[DEV_STUB_EP_COUNT]; /* indexed by dev_stub_ep_t */
	int results_status;                         /* status /results answers; 0 = 200 */
	const char *session;                        /* NULL = a fresh "sess_" + 16 hex */
} dev_stub_run_t;

/* What dev_stub_add_run hands back.  Secrets: never log the otp_* fields. */
typedef struct dev_stub_otps {
	char session[72];
	char agent_url[192]; /* BASE/ws/<session> */
	char otp_setup[40];
	char otp_run[40];
	char otp_upload[40];
} dev_stub_otps_t;

/* What happened at one endpoint of one run (counts since the run was added). */
typedef struct dev_stub_ep_stats {
	int calls;       /* every request routed to this endpoint */
	int ok;          /* answered normally (2xx, or results_status) */
	int bad_token;   /* 401: missing or wrong bearer */
	int reused;      /* 401: the right OTP, already spent */
	int faulted;     /* answered (or dropped) by the programmed fault */
	int bad_request; /* 400: e.g. a /results body that is not multipart */
	int last_status; /* last status answered; 0 = none / dropped */
} dev_stub_ep_stats_t;

typedef struct dev_stub_blob_stats {
	int calls;              /* GETs of this blob */
	int with_authorization; /* of which carried an Authorization header
	                            (an OTP forwarded where it does not belong) */
} dev_stub_blob_stats_t;

/*
 * Binds and starts serving on a new thread.  opts may be NULL (ephemeral
 * loopback port, no folder).  Returns the stub, or NULL with errstr.
 */
dev_stub_t *dev_stub_start(const dev_stub_opts_t *opts, char *errstr, size_t errstr_size);

/* Stops the server thread, closes every connection and frees everything
 * (NULL ok).  Requests still delayed are dropped. */
void dev_stub_stop(dev_stub_t *stub);

/* "http://127.0.0.1:PORT" (no trailing slash); owned by the stub. */
const char *dev_stub_url(const dev_stub_t *stub);
int dev_stub_port(const dev_stub_t *stub);

/*
 * Registers a run with three fresh OTPs and fills *out.  run may be NULL
 * (all defaults).  0, or -1 when run->env/config is not an object, the
 * session exists already, or out of memory.
 */
int dev_stub_add_run(dev_stub_t *stub, const dev_stub_run_t *run, dev_stub_otps_t *out);

/*
 * Registers a run from opts.agents_dir/<agent>.json (agent: [A-Za-z0-9_-]+).
 * 0, or -1 when the agent is unknown or its definition is not
 * {"env":{...},"config":{...}}.
 */
int dev_stub_add_run_from_agent(dev_stub_t *stub, const char *agent, dev_stub_otps_t *out);

/* Replaces the fault of one endpoint of an existing run (f NULL = none).
 * 0 or -1 (unknown session). */
int dev_stub_set_fault(dev_stub_t *stub, const char *session, dev_stub_ep_t ep,
                       const dev_stub_fault_t *f);

/* Copies the counters of one endpoint.  0 or -1 (unknown session). */
int dev_stub_stats(dev_stub_t *stub, const char *session, dev_stub_ep_t ep,
                   dev_stub_ep_stats_t *out);

/* Sum of calls over the three endpoints of a run (0 for unknown). */
int dev_stub_total_calls(dev_stub_t *stub, const char *session);

/*
 * Names (relative paths) of the files received on /results for a run, in
 * arrival order, across all uploads.  Returns a malloc'd array of malloc'd
 * strings (free each and the array), *n entries; NULL with *n = 0 when
 * none or unknown session.
 */
char **dev_stub_file_names(dev_stub_t *stub, const char *session, size_t *n);

/*
 * A copy of the content of file name received for a run: 1 with *data
 * (malloc'd, NUL-terminated for convenience; caller frees) and *len, or 0
 * when not received (or received beyond max_store and not kept).
 */
int dev_stub_file_get(dev_stub_t *stub, const char *session, const char *name,
                      char **data, size_t *len);

/* Serves GET BASE/blobs/<name> with a copy of bytes.  name: [A-Za-z0-9._-]+.
 * Replaces an existing blob of that name.  0 or -1. */
int dev_stub_add_blob(dev_stub_t *stub, const char *name, const void *bytes, size_t len);

/* Same, reading the bytes from a file.  0 or -1. */
int dev_stub_add_blob_file(dev_stub_t *stub, const char *name, const char *path);

/* Programs a fault for a blob (f NULL = none).  0 or -1 (unknown blob). */
int dev_stub_set_blob_fault(dev_stub_t *stub, const char *name, const dev_stub_fault_t *f);

/* Writes BASE/blobs/<name> into buf.  0 or -1 (too small). */
int dev_stub_blob_url(const dev_stub_t *stub, const char *name, char *buf, size_t size);

/* Copies a blob's counters.  0 or -1 (unknown blob). */
int dev_stub_blob_stats(dev_stub_t *stub, const char *name, dev_stub_blob_stats_t *out);

/* Requests to routes the stub does not know (typos in agent_url etc). */
int dev_stub_unknown_requests(dev_stub_t *stub);

/* "env", "config", "results". */
const char *dev_stub_ep_name(dev_stub_ep_t ep);

#endif
