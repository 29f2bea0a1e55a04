/*
 * worker/gateway.h - the model gateway: the only way a run's agent reaches
 * its model provider, so that provider keys never enter the sandbox and
 * every call's tokens are counted and capped (SPEC §4-§6; docs/sandbox.md
 * "Model gateway").
 *
 * Before the agent starts, worker_gateway_open rewrites the run's /env
 * variables:
 *   - ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, OPENAI_API_KEY and every
 *     name of RUNNEL_MODEL_SECRETS leave them (always, gateway or not);
 *   - for each provider with a key (from /env, else the operator's
 *     RUNNEL_ANTHROPIC_API_KEY / RUNNEL_OPENAI_API_KEY) or a base URL in
 *     /env, the agent gets ANTHROPIC_BASE_URL=http://localhost:3129/anthropic
 *     or OPENAI_BASE_URL=http://localhost:3129/openai and, in place of the
 *     key, the run's placeholder ("rgw-" and 43 random characters), which
 *     means nothing outside this run's gateway.
 * The gateway listens on a unix socket in the run's private directory,
 * which the sandbox reaches through runnel-egress-bridge on 127.0.0.1:3129
 * (a network namespace of its own: network none or allowlist; the egress
 * proxy's NO_PROXY names localhost), or on an ephemeral 127.0.0.1 port
 * (in the URLs too) when the sandbox shares the host's network
 * (network full, the process driver).
 *
 * Each request: origin-form target under /anthropic or /openai, Host
 * 127.0.0.1 or localhost, the placeholder in x-api-key or Authorization
 * (compared in constant time), a body of at most body_max bytes (length or
 * chunked), and a model call or the model list (nothing else the
 * provider's API offers).  Anything else is refused with a provider-shaped JSON error and
 * a note (a `log` line of the run), and nothing is forwarded.  Accepted
 * requests go to the real base URL with the real key (x-api-key, or
 * Authorization: Bearer for ANTHROPIC_AUTH_TOKEN and OpenAI) through
 * libcurl; the answer streams back chunk by chunk as it arrives.  Model
 * calls (POST .../messages, .../chat/completions, .../responses) are
 * metered with proto/usage.h; a streamed Chat Completions call without
 * stream_options.include_usage gets it added, so its usage is reported.
 *
 * A base URL the run supplied must be https and resolve to public
 * addresses only, unless the operator's allowlist (RUNNEL_EGRESS_ALLOW)
 * names its host and port explicitly (the rule of common/netaddr.h, the
 * worker's own services included); it is checked at open (the run ends
 * bootstrap_failed naming the variable) and on every address a call
 * connects to (worker_httpc_reach).
 *
 * Budgets: a call is refused once the run's input + output tokens reached
 * max_tokens or its tenant's hourly budget is used up; the call that
 * crosses the budget completes (its size is known only afterwards), then
 * worker_gateway_over_budget turns non-zero and the run ends
 * budget_exceeded.  The tenant's count lives in the run-time queue's slot
 * (RN_RUNQUEUE_TOKENS_FMT): the claim script holds the tenant's queued
 * runs back while it is over.
 *
 * One thread per connection (at most WORKER_GATEWAY_CONN_MAX); a call
 * blocks in libcurl with a connect timeout, an idle timeout and a stop
 * check every second.  Stopping shuts every client socket down, aborts
 * the transfers and waits for the threads.
 *
 * @locality open/wrap/stop and the getters: the run's thread.  The
 * gateway's own threads share its state under its mutex.
 */
#ifndef RUNNEL_WORKER_GATEWAY_H
#define RUNNEL_WORKER_GATEWAY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/metrics.h"
#include "common/netaddr.h"
#include "common/redis.h"
#include "common/sandbox_layout.h"
#include "common/strv.h"
#include "proto/usage.h"

#define WORKER_GATEWAY_CONN_MAX           32
#define WORKER_GATEWAY_HEAD_MAX           32768
#define WORKER_GATEWAY_PORT               RN_SANDBOX_GATEWAY_PORT
#define WORKER_GATEWAY_PLACEHOLDER_PREFIX "rgw-"

/* What the operator configured; lives as long as the worker. */
typedef struct worker_gateway_conf {
	const char *anthropic_key;  /* RUNNEL_ANTHROPIC_API_KEY, or NULL */
	const char *openai_key;     /* RUNNEL_OPENAI_API_KEY, or NULL */
	const char *anthropic_base; /* RUNNEL_ANTHROPIC_BASE_URL, or NULL (https://api.anthropic.com) */
	const char *openai_base;    /* RUNNEL_OPENAI_BASE_URL, or NULL (https://api.openai.com/v1) */
	char *const *secrets;       /* RUNNEL_MODEL_SECRETS names */
	size_t nsecrets;
	char *const *allow; /* the operator's egress allowlist (explicit entries admit private upstreams) */
	size_t nallow;
	const rn_netaddr_set_t *own; /* the worker's own services (common/netaddr.h), or NULL */
	size_t body_max;             /* request body cap, bytes */
	long timeout_sec;            /* no byte from the provider for this long ends the call */
	const char *bridge_path;     /* runnel-egress-bridge on the host, "" when absent */
	rn_metrics_t *metrics;       /* or NULL */
	/* Per-tenant hourly token budgets (0: none): the default and the
	 * overrides; the counts live in Redis under key_prefix. */
	int64_t tenant_tokens_per_hour;
	char *const *tenant_names;
	const int64_t *tenant_budgets;
	size_t ntenant;
	const rn_redis_url_t *redis;
	const char *key_prefix;
} worker_gateway_conf_t;

typedef struct worker_gateway worker_gateway_t;

/* What one run brings. */
typedef struct worker_gateway_args {
	const char *run_id;
	const char *tenant;   /* "default" when NULL */
	json_t *variables;    /* the /env variables: rewritten in place */
	const char *meta_dir; /* the run's private directory (the socket goes there) */
	int host_net;         /* the agent shares the host's network */
	int64_t max_tokens;   /* the run's budget, 0 for none */
	int wake_fd;          /* an eventfd written when a note or the budget needs the run's attention */
	/* A placeholder minted ahead of the run (worker_gateway_placeholder)
	 * for a warm agent that started with it in its environment, or NULL:
	 * the gateway mints the run's own. */
	const char *token;
} worker_gateway_args_t;

/* A new random placeholder ("rgw-" and 43 characters) into out (at least
 * 80 bytes): what a warm agent starts with before its run exists. */
void worker_gateway_placeholder(char *out, size_t size);

/*
 * Takes the model credentials out of a->variables and, when the run uses
 * a provider, starts its gateway (*out; NULL when the run uses none).
 * 0, or -1 with errstr in words for the run's caller (a bad or private
 * base URL names its variable); nothing is left running then.
 */
int worker_gateway_open(const worker_gateway_conf_t *conf, const worker_gateway_args_t *a,
                        worker_gateway_t **out, char *errstr, size_t errstr_size);

/*
 * Puts the sandbox side in front of the agent's command: for a sandbox
 * with its own network, the bridge (argv gains a prefix) and the binds of
 * the bridge and the socket ("host:sandbox" entries in ro_binds).  Nothing
 * for a host-network gateway.  0, or -1 (out of memory).
 */
int worker_gateway_wrap(const worker_gateway_t *g, rn_strv_t *argv, rn_strv_t *ro_binds);

/* A sandbox that runs as another uid (a root worker's): the socket
 * (0600) becomes that uid's, so its bridge may connect.  0, or -1. */
int worker_gateway_hand_to(worker_gateway_t *g, uid_t uid, gid_t gid);

/* The usage so far (every finished call). */
void worker_gateway_usage(worker_gateway_t *g, proto_usage_t *out);

/* 0 while within budget; 1 over the run's budget, 2 over its tenant's. */
int worker_gateway_over_budget(worker_gateway_t *g);

/* "The run used 612 tokens, over its budget of 500 tokens." (or the
 * tenant's hourly budget). */
void worker_gateway_budget_message(worker_gateway_t *g, char *buf, size_t size);

/* Hands every waiting note (refusals, upstream failures) to fn. */
void worker_gateway_drain(worker_gateway_t *g, void (*fn)(const char *note, void *arg), void *arg);

/* Stops listening, ends every call and waits for the threads; the usage,
 * the notes and the budget state stay readable. */
void worker_gateway_stop_calls(worker_gateway_t *g);

/* worker_gateway_stop_calls, then frees everything and wipes the keys. */
void worker_gateway_stop(worker_gateway_t *g);

/* Checks a base URL as the gateway would for a run-supplied one: 0 when
 * usable, -1 with why ("resolves to 127.0.0.1, a loopback address"). */
int worker_gateway_check_url(const worker_gateway_conf_t *conf, const char *url, char *why, size_t why_size);

#endif
