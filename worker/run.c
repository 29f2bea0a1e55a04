/*
 * worker/run.c - the pipeline of one run on its own thread (see run.h):
 *
 *   start (status=running) -> bootstrap (/env, /config) -> workspace (bag,
 *   skills) -> sandbox -> agent I/O (validate, publish) -> writeback ->
 *   terminal line (runstate Lua) -> remove the run directory.
 */
#include "worker/run.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "common/log.h"
#include "common/sandbox_layout.h"
#include "common/util.h"
#include "proto/envelope.h"
#include "proto/keys.h"
#include "proto/names.h"
#include "worker/agent.h"
#include "worker/agent_loop.h"
#include "worker/bootstrap.h"
#include "worker/claim.h"
#include "worker/consumer.h"
#include "worker/gateway.h"
#include "worker/limits.h"
#include "worker/publish.h"
#include "worker/sandbox.h"
#include "worker/reaper.h"
#include "worker/warm.h"
#include "worker/warm_agent.h"
#include "worker/webhook.h"
#include "worker/workspace.h"
#include "worker/writeback.h"

/* Run threads are small; sanitizers need more room. */
#if defined(__SANITIZE_ADDRESS__)
#define RUN_STACK (2 * 1024 * 1024)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RUN_STACK (2 * 1024 * 1024)
#endif
#endif
#ifndef RUN_STACK
#define RUN_STACK (256 * 1024)
#endif

#define RUN_ENV_MAX        4096
#define WEBHOOK_RESOLVE_MS 5000  /* the boot check of a webhook's name, at most */
#define DLQ_SEND_MS        10000 /* a refused job's DLQ delivery report, at most */

/* Everything the run's thread holds; lives on the thread's stack or heap. */
typedef struct run_io {
	worker_run_t *run;
	const worker_config_t *cfg;
	worker_metrics_t *m;
	worker_pub_t pub;
	proto_env_t *env;
	int first_line_done;
	/* Terminal line the agent printed, held until writeback finished. */
	char *held;
	size_t held_len;
	int held_is_result;
	char held_code[64];
	/* stderr accounting */
	uint64_t stderr_bytes;
	int stderr_truncated;
	int publish_failed;
	/* Limits and egress of the run (worker/limits.h). */
	worker_guard_t *guard;
	worker_limit_t limit_hit;
	/* The model gateway (worker/gateway.h): its usage goes on the terminal
	 * line once it stopped; budget_hit ends the run budget_exceeded. */
	worker_gateway_t *gw;
	int budget_hit;
	int have_usage;
	proto_usage_t usage;
	/* What the stages build, in their order; run_release frees it. */
	int64_t cap_sec;    /* the runtime cap in force (stage_boot) */
	worker_boot_t boot; /* /env and /config (stage_boot) */
	worker_ws_t ws;     /* the run directory (stage_workspace) */
	int have_ws;
	int ws_fd;              /* its workspace/, for the adapter (worker_ws_open); -1 */
	worker_warm_sb_t *warm; /* a warm sandbox the run took (it brings ws) */
	/* A warm agent the run took (it brings ws; worker/warm_agent.h): its
	 * sandbox runs the agent, handshake done, until it proves not to fit. */
	worker_warm_agent_t *wagent;
	int have_skills;
	char setup_path[WORKER_PATH_MAX + 16];
	worker_agent_ctx_t actx; /* stage_agent */
	const worker_agent_ops_t *ops;
	void *astate;
	worker_agent_launch_t launch;
	rn_strv_t envv;
	worker_sandbox_t sb; /* stage_sandbox */
	int have_sb;
	worker_loop_end_t end; /* stage_io */
} run_io_t;

worker_run_t *worker_run_new(worker_ctx_t *ctx, proto_job_t *job, const rn_claim_t *claim)
{
	worker_run_t *run = calloc(1, sizeof(*run));
	if (!run)
		return NULL;
	run->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (run->wake_fd < 0) {
		free(run);
		return NULL;
	}
	run->inbox = worker_inbox_new(run->wake_fd);
	if (!run->inbox) {
		close(run->wake_fd);
		free(run);
		return NULL;
	}
	run->ctx = ctx;
	run->job = *job;
	memset(job, 0, sizeof(*job)); /* ownership moved */
	run->claim = *claim;
	run->claimed_mono_ms = rn_mono_ms();
	snprintf(run->run_id, sizeof(run->run_id), "%s", run->job.run_id);
	worker_stopword_init(&run->stop);
	return run;
}

void worker_run_stop(worker_run_t *run, worker_stop_t why, const char *reason)
{
	/* Only the control thread cancels; the reason is written before the
	 * stop word publishes it, and never once a stop is in force (the run's
	 * thread may be reading it). */
	if (why == WORKER_STOP_CANCEL && reason && worker_stopword_reason(&run->stop) == WORKER_STOP_NONE)
		snprintf(run->cancel_reason, sizeof(run->cancel_reason), "%s", reason);
	/* LOST overrides anything: no terminal line may be written then. */
	worker_stopword_request(&run->stop, why);
	uint64_t one = 1;
	ssize_t w = write(run->wake_fd, &one, sizeof(one));
	(void)w;
}

void worker_run_give_up(worker_run_t *run)
{
	worker_stopword_give_up(&run->stop);
	uint64_t one = 1;
	ssize_t w = write(run->wake_fd, &one, sizeof(one));
	(void)w;
}

void worker_run_control(worker_run_t *run, const proto_ctl_t *ctl)
{
	if (ctl->type == PROTO_CTL_CANCEL)
		worker_run_stop(run, WORKER_STOP_CANCEL, ctl->reason);
	else if (ctl->type != PROTO_CTL_REPLY)
		return;
	if (worker_inbox_push(run->inbox, ctl) < 0 && ctl->type == PROTO_CTL_REPLY)
		rn_log_warn(run->run_id, "reply_dropped", "the run's inbox is full; a reply to ask %s was dropped", ctl->id);
}

void worker_run_cancel_message(const char *reason, char *buf, size_t size)
{
	if (reason && *reason)
		snprintf(buf, size, "The run was cancelled (%s).", reason);
	else
		snprintf(buf, size, "The run was cancelled.");
}

/* ------------------------------------------------------------------------
 * Publishing helpers
 * ------------------------------------------------------------------------ */

static void io_account(run_io_t *io, uint64_t before)
{
	rn_counter_add(io->m->lines_published, io->pub.published - before);
	if (!io->first_line_done && io->pub.published > 0) {
		io->first_line_done = 1;
		rn_hist_observe(io->m->first_line, (double)(rn_mono_ms() - io->run->claimed_mono_ms) / 1000.0);
	}
}

/* Sends what is batched without waiting (one batch in flight). */
static void io_pump(run_io_t *io)
{
	uint64_t before = io->pub.published;
	if (worker_pub_pump(&io->pub) < 0)
		io->publish_failed = 1;
	io_account(io, before);
}

/* Blocks until Redis holds every line added so far. */
static void io_flush(run_io_t *io)
{
	if (worker_pub_pending(&io->pub) == 0)
		return;
	uint64_t before = io->pub.published;
	if (worker_pub_flush(&io->pub) < 0)
		io->publish_failed = 1;
	io_account(io, before);
}

static void io_publish(run_io_t *io, const char *line, size_t len)
{
	/* Past the output cap a line is dropped; the guard ends the run. */
	if (worker_guard_output(io->guard, len))
		return;
	if (worker_pub_add(&io->pub, line, len))
		io_pump(io);
}

static int emit_cb(const char *line, size_t len, void *arg)
{
	io_publish(arg, line, len);
	return 0;
}

/* One run-state script call on c: >= 0 its answer, -1 with err. */
typedef int (*state_call_fn)(run_io_t *io, rn_rcluster_t *c, void *arg, char *err, size_t err_size);

/* Makes a run-state call, retrying across reconnects (each retry logged as
 * event and counted in retries unless NULL); -1 once the stop word gave up. */
static int state_call(run_io_t *io, state_call_fn fn, void *arg, const char *event,
                      rn_counter_t *retries)
{
	unsigned attempt = 0;
	for (;;) {
		char err[256];
		rn_rcluster_t *c = worker_pub_ctx(&io->pub);
		if (!c)
			return -1;
		int rc = fn(io, c, arg, err, sizeof(err));
		if (rc >= 0)
			return rc;
		rn_log_warn(io->run->run_id, event, "%s; retrying", err);
		worker_pub_reset(&io->pub);
		if (retries)
			rn_counter_add(retries, 1);
		worker_pub_backoff(&io->pub, attempt++);
	}
}

typedef struct finish_args {
	const char *line, *status, *code;
	size_t len;
	const char *usage; /* the state hash's usage field, or NULL */
	int unacked;       /* an attempt wrote the line, its WAIT got no answer */
} finish_args_t;

static int finish_call(run_io_t *io, rn_rcluster_t *c, void *arg, char *err, size_t err_size)
{
	finish_args_t *f = arg;
	int rc = rn_runstate_finish_usage(c, io->cfg->key_prefix, io->run->run_id, f->line, f->len, f->status,
	                                  f->code, io->cfg->retention_sec, f->usage, err, err_size);
	if (rc == -2)
		f->unacked = 1;
	return rc;
}

/*
 * Writes the terminal line with the runstate script, retrying across
 * reconnects.  Everything published before must be flushed first.
 */
static int io_finish(run_io_t *io, const char *line, size_t len, const char *status,
                     const char *code)
{
	io_flush(io);
	if (io->publish_failed)
		return -1;
	finish_args_t f = { .line = line, .status = status, .code = code, .len = len };
	/* A run that called a model: its usage on the line and in the state
	 * hash (SPEC §4). */
	char *usage = NULL, *with = NULL;
	if (io->have_usage && (usage = proto_usage_text(&io->usage))) {
		json_t *j = json_loadb(line, len, 0, NULL);
		if (j && json_object_set_new(j, "usage", proto_usage_json(&io->usage)) == 0 &&
		    (with = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER))) {
			f.line = with;
			f.len = strlen(with);
		}
		json_decref(j);
		f.usage = usage;
	}
	int rc = state_call(io, finish_call, &f, "redis_finish", io->m->redis_retries);
	free(usage);
	if (with) {
		sodium_memzero(with, strlen(with));
		free(with);
	}
	/*
	 * A 0 after an attempt that wrote the line but got no WAIT answer is
	 * that line, kept through the failover: no other writer ends a run
	 * this worker holds the lease of.  Its webhook comes due by the
	 * outbox's own poll.
	 */
	if (rc == 0 && f.unacked)
		rc = 1;
	else if (rc == 0)
		rn_log_warn(io->run->run_id, "run_terminal_exists",
		            "the run already had a terminal line; %s not written", code[0] ? code : "result");
	if (rc > 0)
		rn_counter_add(io->m->lines_published, 1);
	return rc;
}

/* Before any terminal line: open asks are settled rejected, then open
 * steps closed failed (SPEC §4). */
static void io_close_open(run_io_t *io, const char *why)
{
	if (!io->env)
		return;
	size_t n = proto_env_close_asks(io->env, rn_now_ms(), "rejected", emit_cb, NULL, io);
	if (n)
		rn_log_info(io->run->run_id, "asks_rejected", "%zu open ask(s) settled rejected: %s", n, why);
	proto_env_close_steps(io->env, rn_now_ms(), why, emit_cb, io);
}

/* The reason open steps and asks are closed with when a run ends with
 * code: the terminal line names the code, the reason tells whoever reads a
 * step that never finished why it did not. */
static const char *close_reason(const char *code)
{
	static const struct {
		const char *code, *why;
	} reasons[] = {
		{ PROTO_ERR_CANCELLED, "the run was cancelled" },
		{ PROTO_ERR_RUNTIME_CAP, "the run reached its runtime cap" },
		{ PROTO_ERR_WORKER_SHUTDOWN, "the worker shut down" },
		{ PROTO_ERR_BOOTSTRAP_FAILED, "bootstrap failed" },
		{ PROTO_ERR_BAG_REJECTED, "bag rejected" },
		{ PROTO_ERR_AGENT_EXIT, "the agent exited" },
		{ PROTO_ERR_WRITEBACK_FAILED, "writeback failed" },
		{ PROTO_ERR_RESOURCE_LIMIT, "the run hit a resource limit" },
		{ PROTO_ERR_BUDGET_EXCEEDED, "the run went over its token budget" },
	};
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (!strcmp(code, reasons[i].code))
			return reasons[i].why;
	return "internal error";
}

/* A stage's outcome: go on with the next stage, or the run is over (its
 * terminal line written, or none owed: not ours, lost, Redis gone). */
typedef enum {
	STAGE_NEXT = 0,
	STAGE_DONE,
} stage_t;

/*
 * Ends the run with an error terminal line: open asks and steps are closed
 * with the code's reason, the status is "cancelled" for a cancel and
 * "failed" for every other code, and the message is fmt's.  STAGE_DONE.
 */
static stage_t run_fail(run_io_t *io, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static stage_t run_fail(run_io_t *io, const char *code, const char *fmt, ...)
{
	char message[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	const char *status = !strcmp(code, PROTO_ERR_CANCELLED) ? "cancelled" : "failed";
	io_close_open(io, close_reason(code));
	size_t len = 0;
	char *line = proto_env_make_error(code, message, rn_now_ms(), &len);
	if (!line) {
		rn_log_error(io->run->run_id, "run_terminal", "out of memory building the terminal line");
		return STAGE_DONE;
	}
	if (io->env)
		proto_env_set_terminated(io->env);
	io_finish(io, line, len, status, code);
	free(line);
	snprintf(io->run->outcome, sizeof(io->run->outcome), "%s", code);
	rn_log_info(io->run->run_id, "run_ended", "%s: %s", code, message);
	return STAGE_DONE;
}

/* ------------------------------------------------------------------------
 * Agent output
 * ------------------------------------------------------------------------ */

static void handle_stdout_line(run_io_t *io, const char *line, size_t len)
{
	proto_env_line_t out;
	proto_env_process(io->env, line, len, rn_now_ms(), &out);
	if (out.action == PROTO_ENV_DROP) {
		rn_counter_add(io->m->lines_dropped, 1);
		return;
	}
	if (!out.valid)
		rn_counter_add(io->m->lines_invalid, 1);
	if (out.terminal) {
		/* Held: a result waits for the writeback; either ends via runstate. */
		io->held = malloc(out.len + 1);
		if (!io->held)
			return;
		memcpy(io->held, out.text, out.len);
		io->held[out.len] = '\0';
		io->held_len = out.len;
		io->held_is_result = out.type == PROTO_ENV_RESULT;
		snprintf(io->held_code, sizeof(io->held_code), "%s", out.code);
		return;
	}
	io_publish(io, out.text, out.len);
}

static void handle_stderr_line(run_io_t *io, const char *line, size_t len, int cut)
{
	/* Taken also after the terminal line: that line is held until the loop
	 * ended, and stderr the agent wrote before it may be read after it
	 * (two pipes, one poll round). */
	if (io->stderr_truncated)
		return;
	if (io->stderr_bytes + len > (uint64_t)io->cfg->stderr_max) {
		io->stderr_truncated = 1;
		size_t n = 0;
		char msg[96];
		snprintf(msg, sizeof(msg), "stderr truncated: the agent wrote more than %ld bytes", io->cfg->stderr_max);
		char *l = proto_env_make_log("warn", msg, rn_now_ms(), &n);
		if (l) {
			io_publish(io, l, n);
			free(l);
		}
		return;
	}
	io->stderr_bytes += len;
	if (len && line[len - 1] == '\r')
		len--;
	/* The message is a C string: stop at a NUL the agent may have printed. */
	char *text = malloc(len + 5);
	if (!text)
		return;
	memcpy(text, line, len);
	for (size_t i = 0; i < len; i++)
		if (text[i] == '\0')
			text[i] = ' ';
	if (cut)
		memcpy(text + len, "...", 4);
	else
		text[len] = '\0';
	size_t n = 0;
	char *l = proto_env_make_log("warn", text, rn_now_ms(), &n);
	free(text);
	if (l) {
		io_publish(io, l, n);
		free(l);
	}
}


/* ---- the line sink of the agent loop (agent_loop.h) ---- */

static void sink_line(void *arg, const char *line, size_t len)
{
	handle_stdout_line(arg, line, len);
}

static void sink_stderr(void *arg, const char *line, size_t len, int cut)
{
	handle_stderr_line(arg, line, len, cut);
}

static int sink_terminated(void *arg)
{
	run_io_t *io = arg;
	return proto_env_terminated(io->env);
}

static int sink_settle(void *arg, const worker_agent_reply_t *r)
{
	run_io_t *io = arg;
	const char *status = r->expired ? "expired" : r->reject ? "rejected"
	                                                        : "answered";
	char *line = NULL;
	size_t len = 0;
	proto_ask_rc_t rc = proto_env_settle_ask(io->env, r->ask_id, status, r->option, r->text,
	                                         rn_now_ms(), &line, &len);
	if (rc == PROTO_ASK_SETTLED) {
		io_publish(io, line, len);
		free(line);
	}
	return (int)rc;
}

static const char *sink_oldest_ask(void *arg, int64_t *opened_ms)
{
	run_io_t *io = arg;
	return proto_env_oldest_ask(io->env, opened_ms);
}

static int sink_wait_fd(void *arg)
{
	run_io_t *io = arg;
	return worker_pub_wait_fd(&io->pub);
}

static int sink_backlog(void *arg)
{
	run_io_t *io = arg;
	return worker_pub_pending(&io->pub) >= WORKER_PUB_BATCH_LINES / 2;
}

static void sink_pump(void *arg, int readable)
{
	run_io_t *io = arg;
	if (worker_pub_pending(&io->pub) > io->pub.inflight || readable)
		io_pump(io);
}

static int sink_failed(void *arg)
{
	run_io_t *io = arg;
	return io->publish_failed;
}

static worker_stop_t stop_of(void *arg)
{
	return worker_stopword_reason(&((worker_run_t *)arg)->stop);
}

/* ------------------------------------------------------------------------
 * Limits and egress (worker/limits.h): the guard's notes become `log`
 * lines; a limit it reports ends the run resource_limit.
 * ------------------------------------------------------------------------ */

static void guard_note(const char *level, const char *message, void *arg)
{
	run_io_t *io = arg;
	if (io->env && proto_env_terminated(io->env))
		return;
	size_t n = 0;
	char *l = proto_env_make_log(level, message, rn_now_ms(), &n);
	if (l) {
		io_publish(io, l, n);
		free(l);
	}
}

/* Creates the run's guard (limits resolved, workspace mounted, cgroup,
 * proxy).  0, or -1 with errstr. */
static int guard_start(run_io_t *io, const worker_boot_t *boot, worker_ws_t *ws,
                       worker_cgroup_t *cgroup, char *errstr, size_t errstr_size)
{
	worker_guard_args_t a = {
		.run_id = io->run->run_id,
		.command_egress = worker_agent_command_egress(boot->agent),
		.config = boot->config,
		.variables = boot->variables,
		.ws_api_url = boot->ws_api_url,
		.ws = ws,
		.driver = io->cfg->driver,
		.cgroup = cgroup,
		/* A warm agent's bridge looks for the proxy in its socket directory. */
		.sock_dir = !!io->wagent,
	};
	io->guard = worker_guard_new(&io->cfg->limits, &a, guard_note, io, errstr, errstr_size);
	return io->guard ? 0 : -1;
}

static void gateway_note(const char *note, void *arg)
{
	guard_note("warn", note, arg);
}

/* The agent loop's limit check (worker_stop_source_t.limit_check): the
 * gateway's notes and budget first (it wakes the loop for them). */
static int guard_check(void *arg, int64_t now, int64_t *next_ms)
{
	run_io_t *io = arg;
	if (io->gw) {
		worker_gateway_drain(io->gw, gateway_note, io);
		if (worker_gateway_over_budget(io->gw)) {
			io->budget_hit = 1;
			return 1;
		}
	}
	worker_limit_t l = worker_guard_tick(io->guard, now, next_ms);
	if (l != WORKER_LIMIT_NONE)
		io->limit_hit = l;
	return l != WORKER_LIMIT_NONE;
}

static int guard_fd(void *arg)
{
	return worker_guard_fd(((run_io_t *)arg)->guard);
}

static void guard_end(run_io_t *io)
{
	char msg[256];
	worker_guard_message(io->guard, io->limit_hit, msg, sizeof(msg));
	if (io->limit_hit > WORKER_LIMIT_NONE && io->limit_hit < WORKER_LIMIT_COUNT)
		rn_counter_add(io->m->limit_hits[io->limit_hit], 1);
	run_fail(io, PROTO_ERR_RESOURCE_LIMIT, "%s", msg);
}

/* ------------------------------------------------------------------------
 * The model gateway (worker/gateway.h)
 * ------------------------------------------------------------------------ */

/* Takes the credentials out of the variables and starts the run's gateway
 * when it uses a provider.  0, or -1 with errstr for the caller. */
static int gateway_start(run_io_t *io, char *errstr, size_t errstr_size)
{
	worker_boot_t *boot = &io->boot;
	int64_t max = io->run->job.max_tokens;
	const json_t *b = json_object_get(boot->config, "budget");
	if (b && !json_is_null(b)) {
		const json_t *mt = json_object_get(b, "max_tokens");
		if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
			snprintf(errstr, errstr_size, "budget must be {\"max_tokens\": N} with N at least 1");
			return -1;
		}
		if (!max || json_integer_value(mt) < max)
			max = json_integer_value(mt);
	}
	/* A warm agent's bridge looks for the gateway in its socket directory. */
	const char *meta = worker_ws_make(&io->ws, io->wagent ? WORKER_WS_SOCK : WORKER_WS_META);
	if (!boot->variables)
		boot->variables = json_object();
	if (!meta || !boot->variables) {
		snprintf(errstr, errstr_size, "the worker could not prepare the run's private directory");
		return -1;
	}
	worker_gateway_args_t a = {
		.run_id = io->run->run_id,
		.tenant = io->run->job.tenant,
		.variables = boot->variables,
		.meta_dir = meta,
		.host_net = io->cfg->driver != WORKER_SANDBOX_BWRAP || worker_guard_egress(io->guard) == WORKER_EGRESS_FULL,
		.max_tokens = max,
		.wake_fd = io->run->wake_fd,
		/* The placeholder the warm agent started with becomes this run's. */
		.token = io->wagent ? io->wagent->token : NULL,
	};
	return worker_gateway_open(&io->cfg->gateway, &a, &io->gw, errstr, errstr_size);
}

/* After the agent: every call ended; its notes, usage and budget stay. */
static void gateway_close(run_io_t *io)
{
	if (!io->gw)
		return;
	worker_gateway_stop_calls(io->gw);
	worker_gateway_drain(io->gw, gateway_note, io);
	worker_gateway_usage(io->gw, &io->usage);
	io->have_usage = 1;
	if (worker_gateway_over_budget(io->gw))
		io->budget_hit = 1;
}

static void gateway_end(run_io_t *io)
{
	char msg[256];
	worker_gateway_budget_message(io->gw, msg, sizeof(msg));
	run_fail(io, PROTO_ERR_BUDGET_EXCEEDED, "%s", msg);
}

/* ------------------------------------------------------------------------
 * Sandbox preparation
 * ------------------------------------------------------------------------ */

static int env_set(rn_strv_t *e, const char *name, const char *value)
{
	return rn_strv_setenv(e, name, value);
}

/*
 * The sandbox's whole environment: /env variables, then what runnel sets.
 * The loader's variables of /env are dropped with a `log` line each
 * (worker_sandbox_env_refused): the environment reaches the agent inside
 * the sandbox only, and these would still make every program there load
 * or read what the run names; dropping them rather than failing the run
 * keeps a run that set one by habit working.
 */
static int build_env(run_io_t *io, const worker_run_t *run, const worker_boot_t *boot,
                     const worker_agent_launch_t *launch, worker_ws_t *ws, rn_strv_t *e,
                     char *errstr, size_t errstr_size)
{
	if (env_set(e, "HOME", RN_SANDBOX_HOME) < 0 || env_set(e, "PATH", RN_SANDBOX_PATH) < 0)
		goto oom;
	const char *k;
	json_t *v;
	size_t count = 0;
	json_object_foreach(boot->variables, k, v)
	{
		if (!json_is_string(v))
			continue;
		if (!proto_env_name_valid(k)) {
			snprintf(errstr, errstr_size, "the /env variable name \"%.64s\" is not usable", k);
			return -1;
		}
		if (++count > RUN_ENV_MAX) {
			snprintf(errstr, errstr_size, "/env has more than %d variables", RUN_ENV_MAX);
			return -1;
		}
		if (worker_sandbox_env_refused(k)) {
			char note[160];
			snprintf(note, sizeof(note), "the /env variable %.64s is not passed to the agent "
			                             "(loader and libc variables never are)",
			         k);
			guard_note("warn", note, io);
			continue;
		}
		if (env_set(e, k, json_string_value(v)) < 0)
			goto oom;
	}
	/* What the adapter sets (a preset's environment) wins over /env;
	 * RUNNEL_* below stays runnel's. */
	for (size_t i = 0; i < launch->env.n; i++) {
		const char *kv = launch->env.v[i], *eq = strchr(kv, '=');
		char name[257];
		if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof(name))
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(eq - kv), kv);
		if (env_set(e, name, eq + 1) < 0)
			goto oom;
	}
	if (launch->private_home && run->ctx->cfg->driver != WORKER_SANDBOX_BWRAP) {
		/* Without bwrap HOME would be the host's /root: give the agent a
		 * directory of the run instead (bwrap's /root is already a tmpfs). */
		const char *home = worker_ws_make(ws, WORKER_WS_HOME);
		if (!home) {
			snprintf(errstr, errstr_size, "cannot create the agent's home directory");
			return -1;
		}
		if (env_set(e, "HOME", home) < 0)
			goto oom;
	}
	if (env_set(e, "RUNNEL_RUN_ID", run->run_id) < 0)
		goto oom;
	/* The caller's trace, with a span id of the run's own (W3C). */
	if (run->job.traceparent[0]) {
		char tp[PROTO_TRACEPARENT_LEN + 1];
		proto_traceparent_child(run->job.traceparent, tp);
		if (env_set(e, "TRACEPARENT", tp) < 0)
			goto oom;
	}
	if (boot->ws_api_url && boot->ws_api_token) {
		if (env_set(e, "RUNNEL_WORKSPACE_API_URL", boot->ws_api_url) < 0 ||
		    env_set(e, "RUNNEL_WORKSPACE_TOKEN", boot->ws_api_token) < 0)
			goto oom;
	}
	return 0;
oom:
	snprintf(errstr, errstr_size, "out of memory");
	return -1;
}

/* ------------------------------------------------------------------------
 * The run as a list of stages.  Each stage does one step of SPEC §4's run,
 * keeps what it builds in run_io_t and returns STAGE_NEXT, or ends the run
 * (run_fail, or a stop) and returns STAGE_DONE.  run_release frees what the
 * stages built, however far they got.
 * ------------------------------------------------------------------------ */

static void describe_exit(int status, char *buf, size_t size)
{
	if (WIFEXITED(status)) {
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		const char *abbr = sigabbrev_np(WTERMSIG(status));
		snprintf(buf, size, "was killed by signal %d (SIG%s)", WTERMSIG(status), abbr ? abbr : "?");
	} else {
		snprintf(buf, size, "ended with wait status %d", status);
	}
}

static worker_stop_t run_stop_of(worker_run_t *run)
{
	return worker_stopword_reason(&run->stop);
}

static int start_call(run_io_t *io, rn_rcluster_t *c, void *arg, char *err, size_t err_size)
{
	(void)arg;
	return rn_runstate_start(c, io->cfg->key_prefix, io->run->run_id, io->cfg->worker_id, err, err_size);
}

/* Marks the run running; 1 ok, 0 not ours, -1 gave up. */
static int mark_running(run_io_t *io)
{
	return state_call(io, start_call, NULL, "redis_start", NULL);
}

/* Ends the run for a stop that came before the agent started. */
static int end_if_stopped(run_io_t *io)
{
	worker_stop_t st = run_stop_of(io->run);
	char msg[256];
	switch (st) {
	case WORKER_STOP_NONE:
		return 0;
	case WORKER_STOP_CANCEL:
		worker_run_cancel_message(io->run->cancel_reason, msg, sizeof(msg));
		run_fail(io, PROTO_ERR_CANCELLED, "%s", msg);
		return 1;
	case WORKER_STOP_SHUTDOWN:
		run_fail(io, PROTO_ERR_WORKER_SHUTDOWN, "The worker shut down before the run finished.");
		return 1;
	case WORKER_STOP_LOST:
		snprintf(io->run->outcome, sizeof(io->run->outcome), "worker_lost");
		rn_log_warn(io->run->run_id, "run_lost", "the lease was lost; stopping without a terminal line");
		return 1;
	}
	return 0;
}

static void log_phase(run_io_t *io, const char *what)
{
	rn_log_debug(io->run->run_id, "run_phase", "%s at +%" PRId64 " ms", what, rn_mono_ms() - io->run->claimed_mono_ms);
}

/* A job refused at boot goes to the DLQ like any invalid job: the record's
 * bytes as fetched (a sealed job stays sealed), keyed by its run id, with
 * the reason.  Best effort: the run ends bootstrap_failed either way. */
static void dlq_refused(run_io_t *io, const char *reason)
{
	worker_run_t *run = io->run;
	char err[512];
	if (!run->raw || !run->ctx->dlq) {
		rn_log_warn(run->run_id, "dlq_failed", "the refused job's record is not at hand; not sent to the DLQ");
		return;
	}
	if (worker_dlq_send(run->ctx->dlq, run->run_id, strlen(run->run_id), run->raw, run->raw_len, reason,
	                    DLQ_SEND_MS, err, sizeof(err)) < 0) {
		rn_log_error(run->run_id, "dlq_failed", "%s", err);
		return;
	}
	rn_counter_add(run->ctx->m->jobs_dlq, 1);
}

/* The run is marked running and its setup redeemed (the setup and run
 * OTPs); the runtime cap is the smallest of the worker's, the job's and the
 * config's. */
static stage_t stage_boot(run_io_t *io)
{
	worker_run_t *run = io->run;
	char err[512];
	/* A cancel found at claim time ends the run before any OTP is used. */
	if (end_if_stopped(io))
		return STAGE_DONE;
	int rc = mark_running(io);
	if (rc < 0)
		return STAGE_DONE;
	if (rc == 0) {
		rn_log_warn(run->run_id, "run_not_ours", "the run is no longer claimed by this worker; not started");
		snprintf(run->outcome, sizeof(run->outcome), "skipped");
		return STAGE_DONE;
	}
	if (end_if_stopped(io))
		return STAGE_DONE;
	io->cap_sec = io->cfg->max_runtime_sec;
	if (run->job.max_runtime_sec > 0 && run->job.max_runtime_sec < io->cap_sec)
		io->cap_sec = run->job.max_runtime_sec;
	/* A webhook whose name resolves to a forbidden address (the intake
	 * judged only a literal one) ends the run before any OTP is used. */
	if (run->job.webhook) {
		long wt = io->cfg->webhook_timeout_sec * 1000L;
		if (worker_webhook_resolve_check(io->cfg, run->job.webhook, wt < WEBHOOK_RESOLVE_MS ? wt : WEBHOOK_RESOLVE_MS,
		                                 err, sizeof(err)) < 0) {
			rn_log_warn(run->run_id, "job_rejected", "%s", err);
			dlq_refused(io, err);
			return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "The run was not started: %s.", err);
		}
	}
	worker_claimed_raw_clear(&run->raw, &run->raw_len);
	worker_boot_opts_t bo = { .stop = &run->stop };
	if (worker_bootstrap_fetch(run->job.agent_url, run->job.otp_setup, run->job.otp_run, &bo, &io->boot,
	                           err, sizeof(err)) < 0) {
		/* A stop interrupts the fetch: the stop, not the fetch, ends it. */
		if (end_if_stopped(io))
			return STAGE_DONE;
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "Could not load the run's setup from the workspace: %s", err);
	}
	if (io->boot.max_runtime_sec > 0 && io->boot.max_runtime_sec < io->cap_sec)
		io->cap_sec = io->boot.max_runtime_sec;
	log_phase(io, "bootstrap done");
	return end_if_stopped(io) ? STAGE_DONE : STAGE_NEXT;
}

/* The warm name the config's agent asks for (its kind's warm_name), or NULL. */
static const char *warm_agent_name(const json_t *agent)
{
	const worker_agent_ops_t *ops = worker_agent_find(worker_agent_kind_of(agent));
	if (!ops || !(ops->flags & WORKER_AGENT_WARM))
		return NULL;
	return ops->warm_name(agent);
}

/* 1 when a run of the config's agent can fit a plain warm sandbox: not one
 * of a WORKER_AGENT_WARM kind (worker/agent.h), whose launch binds what
 * those sandboxes do not carry, so that taking one would only waste it. */
static int warm_sb_may_fit(const json_t *agent)
{
	const worker_agent_ops_t *ops = worker_agent_find(worker_agent_kind_of(agent));
	return ops && !(ops->flags & WORKER_AGENT_WARM);
}

/* The run directory: a warm sandbox's (it brings one) or a new one, then
 * the guard (limits resolved, workspace mounted, cgroup, proxy). */
static stage_t ws_take(run_io_t *io)
{
	worker_run_t *run = io->run;
	const worker_config_t *cfg = io->cfg;
	char err[512];
	if (worker_ws_root(cfg->work_dir, err, sizeof(err)) < 0) {
		rn_log_error(run->run_id, "work_dir", "%s", err);
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not create its work directory.");
	}
	/* warm: an agent or a sandbox started ahead of need brings its run
	 * directory (worker/warm_agent.h, worker/warm.h); a warm agent's has
	 * /root/skills bound, a warm sandbox's not, so a run with skills
	 * starts cold unless it takes an agent, and so does a run of a kind
	 * with warm agents that finds none. */
	io->wagent = worker_warm_agents_take(run->ctx->warm_agents, warm_agent_name(io->boot.agent));
	if (!io->wagent && !json_array_size(io->boot.skills) && warm_sb_may_fit(io->boot.agent))
		io->warm = worker_warm_pool_take(run->ctx->warm, cfg->share_net);
	if (io->wagent) {
		io->ws = io->wagent->w.ws;
	} else if (io->warm) {
		io->ws = io->warm->ws;
	} else if (worker_ws_create(&io->ws, cfg->work_dir, run->run_id, err, sizeof(err)) < 0) {
		rn_log_error(run->run_id, "workspace", "%s", err);
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not create the run's workspace.");
	}
	io->have_ws = 1;
	/* A warm sandbox's cgroup becomes the run's: its processes are in it. */
	worker_cgroup_t *cg = io->wagent ? &io->wagent->w.cg : io->warm ? &io->warm->cg
	                                                                : NULL;
	if (guard_start(io, &io->boot, &io->ws, cg, err, sizeof(err)) < 0) {
		/* The details (host paths, cgroup files) are for the operator. */
		rn_log_error(run->run_id, "limits", "%s", err);
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not set up the run's limits.");
	}
	if (gateway_start(io, err, sizeof(err)) < 0)
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "The model gateway cannot start: %s", err);
	/* Opened once the run's tmpfs is in place: the adapter's file access
	 * goes beneath it (worker_ws_open), never through a path. */
	io->ws_fd = worker_ws_open(&io->ws);
	if (io->ws_fd < 0) {
		rn_log_error(run->run_id, "workspace", "cannot open %s: %s", io->ws.workspace, strerror(errno));
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not create the run's workspace.");
	}
	return STAGE_NEXT;
}

/* The limits of the bag's and the skills' downloads. */
static worker_bag_limits_t bag_limits(run_io_t *io)
{
	/* A stop (cancel, drain timeout, lost lease) ends a download or the
	 * upload within about a second instead of waiting for its timeout. */
	worker_bag_limits_t lim = { .stop = &io->run->stop };
	/* Unpacked in the run's cgroup: its files count against memory_mb. */
	lim.cgroup_fds = worker_guard_cgroup_fds(io->guard, &lim.ncgroup_fds);
	lim.unpack_path = io->cfg->unpack_path;
	/* zip_urls come from the run's /config: inside addresses only for the
	 * workspace API's own origin and the operator's exact egress entries. */
	lim.reach = (worker_httpc_reach_t){ .on = 1,
		                            .named = io->cfg->limits.egress_allow,
		                            .nnamed = io->cfg->limits.egress_nallow,
		                            .own = &io->cfg->limits.own };
	worker_httpc_host_port(io->run->job.agent_url, lim.reach.origin, sizeof(lim.reach.origin));
	/* A bag larger than the workspace cap is refused before it fills it. */
	uint64_t disk_cap = (uint64_t)worker_guard_limits(io->guard)->disk_mb * 1024 * 1024;
	if (disk_cap > 0 && disk_cap < (1ULL << 30))
		lim.max_bytes = disk_cap;
	return lim;
}

/* The bag (assets.zip_url) unpacked into the workspace. */
static stage_t ws_bag(run_io_t *io)
{
	char err[512];
	int reject = 0;
	worker_bag_limits_t lim = bag_limits(io);
	if (!io->boot.zip_url || worker_ws_fetch_zip(io->boot.zip_url, io->ws.workspace, &lim, &reject, err, sizeof(err)) == 0)
		return STAGE_NEXT;
	if (end_if_stopped(io))
		return STAGE_DONE;
	if (reject)
		return run_fail(io, PROTO_ERR_BAG_REJECTED, "The workspace bag was refused: %s", err);
	return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "Could not download the workspace bag: %s", err);
}

/* Each skill in skills/<name>/, unpacked from its zip_url when it has one. */
static stage_t ws_skills(run_io_t *io)
{
	char err[512];
	worker_bag_limits_t lim = bag_limits(io);
	size_t si;
	json_t *skill;
	json_array_foreach(io->boot.skills, si, skill)
	{
		const char *name = json_string_value(json_object_get(skill, "name"));
		const char *url = json_string_value(json_object_get(skill, "zip_url"));
		char dir[WORKER_PATH_MAX + 160]; /* skills dir + "/" + a name of <= 128 */
		if (!proto_skill_name_valid(name))
			return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "Skill %zu has no usable name (letters, digits, . _ -).", si);
		if (worker_ws_make_skill(&io->ws, name, dir, sizeof(dir)) < 0)
			return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not create a skill directory.");
		io->have_skills = 1;
		if (!url)
			continue;
		int reject = 0;
		if (worker_ws_fetch_zip(url, dir, &lim, &reject, err, sizeof(err)) < 0) {
			if (end_if_stopped(io))
				return STAGE_DONE;
			return run_fail(io, reject ? PROTO_ERR_BAG_REJECTED : PROTO_ERR_BOOTSTRAP_FAILED, "%s skill \"%s\": %s",
			                reject ? "Refused the" : "Could not download the", name, err);
		}
	}
	return end_if_stopped(io) ? STAGE_DONE : STAGE_NEXT;
}

/* The setup script, written to meta/ (bound read-only into the sandbox). */
static stage_t ws_setup(run_io_t *io)
{
	const char *script = io->boot.setup_script;
	if (!script)
		return STAGE_NEXT;
	const char *meta = worker_ws_make(&io->ws, WORKER_WS_META);
	if (!meta)
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not write the setup script.");
	snprintf(io->setup_path, sizeof(io->setup_path), "%s/setup.sh", meta);
	/* O_EXCL | O_NOFOLLOW: meta/ is the worker's, nothing may be there. */
	int fd = open(io->setup_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0500);
	size_t sl = strlen(script);
	if (fd < 0 || write(fd, script, sl) != (ssize_t)sl) {
		if (fd >= 0)
			close(fd);
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not write the setup script.");
	}
	close(fd);
	return STAGE_NEXT;
}

/* The run directory with the bag, the skills and the setup script. */
static stage_t stage_workspace(run_io_t *io)
{
	if (ws_take(io) || ws_bag(io) || ws_skills(io) || ws_setup(io))
		return STAGE_DONE;
	return STAGE_NEXT;
}

static void sandbox_spec(run_io_t *io, worker_sandbox_spec_t *spec);

/* Throws the run's warm agent away, unused (the run starts cold). */
static void warm_agent_drop(run_io_t *io, const char *why)
{
	rn_log_info(io->run->run_id, "warm_agent", "the warm %s agent is not used (%s); starting cold", io->wagent->name,
	            why);
	struct worker_metrics_warm *mw = worker_metrics_warm(io->m, io->wagent->name);
	if (mw)
		rn_counter_add(mw->discarded, 1);
	worker_warm_agent_free(io->wagent, 1); /* its run directory is ws */
	io->wagent = NULL;
}

/* Keeps the warm agent when the run's cold launch (argv before the
 * gateway's bridge, binds, environment, sandbox) is exactly its own. */
static void warm_agent_check(run_io_t *io)
{
	worker_sandbox_spec_t spec;
	char why[160] = "its kind cannot tell";
	sandbox_spec(io, &spec);
	if (!io->ops->warm_fits || !io->ops->warm_fits(&io->actx, io->wagent->name, why, sizeof(why)) ||
	    !worker_warm_agent_fits(io->wagent, &spec, io->launch.argv.v, why, sizeof(why)))
		warm_agent_drop(io, why);
}

/* The agent: its kind's adapter, the permission mode, the launch its
 * adapter prepares and the environment the sandbox gets. */
static stage_t stage_agent(run_io_t *io)
{
	worker_run_t *run = io->run;
	char err[512];
	worker_agent_ctx_t *actx = &io->actx;
	actx->cfg = io->cfg;
	actx->run_id = run->run_id;
	actx->job = &run->job;
	actx->boot = &io->boot;
	actx->agent = io->boot.agent;
	actx->ask_timeout_sec = io->cfg->ask_timeout_sec;
	actx->workspace_fd = io->ws_fd;
	actx->workspace_dir = io->ws.workspace;
	actx->cgroup_fds = worker_guard_cgroup_fds(io->guard, &actx->ncgroup_fds);
	const char *kind = worker_agent_kind_of(io->boot.agent); /* SPEC §5: none, the default kind */
	if (!kind)
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "The agent cannot be started: the workspace config has no agent.kind");
	io->ops = worker_agent_find(kind);
	if (!io->ops)
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED,
		                "The agent cannot be started: agent.kind \"%.32s\" is not supported (%s)", kind,
		                worker_agent_kinds());
	actx->permission_mode = worker_agent_permission_mode(&io->boot, &run->job, err, sizeof(err));
	if (!actx->permission_mode)
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "The agent cannot be started: %s", err);
	proto_env_allow_asks(io->env, !strcmp(actx->permission_mode, WORKER_PERM_ASK));
	io->launch.share_net = io->cfg->share_net;
	if (io->ops->prepare(actx, &io->launch, &io->astate, err, sizeof(err)) < 0)
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "The agent cannot be started: %s", err);
	if (build_env(io, run, &io->boot, &io->launch, &io->ws, &io->envv, err, sizeof(err)) < 0)
		return run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED, "The agent's environment cannot be built: %s", err);
	/* A warm agent runs the launch it was started with: the run's must be
	 * the same, else it starts cold. */
	if (io->wagent)
		warm_agent_check(io);
	if (!io->wagent && worker_gateway_wrap(io->gw, &io->launch.argv, &io->launch.ro_binds) < 0)
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not start the model gateway's bridge.");
	return STAGE_NEXT;
}

/* What the sandbox is started with. */
static void sandbox_spec(run_io_t *io, worker_sandbox_spec_t *spec)
{
	const worker_config_t *cfg = io->cfg;
	memset(spec, 0, sizeof(*spec));
	spec->driver = cfg->driver;
	spec->bwrap_path = cfg->bwrap_path;
	spec->rootfs = cfg->rootfs;
	spec->workspace_dir = io->ws.workspace;
	spec->skills_dir = io->have_skills ? io->ws.skills : NULL;
	spec->setup_script = io->boot.setup_script ? io->setup_path : NULL;
	spec->argv = io->launch.argv.v;
	spec->envp = io->envv.v;
	spec->ro_binds = io->launch.ro_binds.n ? io->launch.ro_binds.v : NULL;
	spec->share_net = io->launch.share_net;
	spec->rlimit_nofile = WORKER_RUN_RLIMIT_NOFILE;
	spec->init_path = cfg->warm_init_path[0] ? cfg->warm_init_path : NULL;
	spec->uid = cfg->sandbox_uid;
	spec->gid = cfg->sandbox_gid;
	worker_guard_sandbox_spec(io->guard, spec);
}

/* Starts the agent in the warm sandbox the run took, or cold when there is
 * none or it does not fit.  0, or -1 with err. */
static int sandbox_launch(run_io_t *io, const worker_sandbox_spec_t *spec, char *err, size_t err_size)
{
	/* warm: what the warm sandbox cannot match starts cold (same ws). */
	if (io->warm && !worker_warm_fits(io->warm, spec)) {
		rn_log_info(io->run->run_id, "warm_unfit", "the warm sandbox does not fit the run; starting cold");
		worker_warm_free(io->warm, 1);
		io->warm = NULL;
	}
	if (io->warm) {
		/*
		 * The warm sandbox was started in the cgroup that is now the
		 * run's, which the guard gave the run's limits before the run's
		 * argv and environment reach the init: nothing of the run ever
		 * runs outside its limits.  Its workspace tmpfs was mounted before
		 * bwrap bound it and the guard resized it to the run's cap
		 * (worker_limits_mount_workspace).
		 */
		if (worker_warm_launch(io->warm, spec, &io->sb, err, err_size) == 0)
			return 0;
		/* Nothing of the run ran in it: start cold instead. */
		rn_log_warn(io->run->run_id, "warm_launch", "%s; starting cold", err);
		worker_warm_free(io->warm, 1);
		io->warm = NULL;
	}
	return worker_sandbox_spawn(spec, &io->sb, err, err_size);
}

/*
 * The warm agent's running sandbox becomes the run's, its session state
 * the adapter's (actx.warm).  One that ended since the check makes the run
 * start cold: the gateway's bridge goes in front of the launch after all.
 * 0, or -1 (out of memory).
 */
static int warm_agent_take(run_io_t *io)
{
	if (worker_warm_agent_use(io->wagent, &io->sb) == 0) {
		io->have_sb = 1;
		io->actx.warm = io->wagent->hs;
		return 0;
	}
	warm_agent_drop(io, "it ended while waiting");
	return worker_gateway_wrap(io->gw, &io->launch.argv, &io->launch.ro_binds);
}

/* The proxy's socket of a warm agent's run, made at claim time (0600): the
 * sandbox's uid connects to it (a cold start hands it in plan_bwrap). */
static int warm_agent_hand_egress(const worker_sandbox_spec_t *spec, uid_t uid, gid_t gid)
{
	if (!spec->egress_socket || lchown(spec->egress_socket, uid, gid) == 0)
		return 0;
	return -1;
}

/* The sandbox runs the agent; then the workspace leaves the worker's mount
 * namespace. */
static stage_t stage_sandbox(run_io_t *io)
{
	worker_run_t *run = io->run;
	char err[512];
	worker_sandbox_spec_t spec;
	if (io->wagent && warm_agent_take(io) < 0)
		return run_fail(io, PROTO_ERR_INTERNAL, "The worker could not start the model gateway's bridge.");
	sandbox_spec(io, &spec);
	log_phase(io, "workspace ready");
	/* The gateway's socket (0600): the sandbox's uid connects to it. */
	uid_t suid;
	gid_t sgid;
	int drop_ids = spec.driver == WORKER_SANDBOX_BWRAP && worker_sandbox_ids(&spec, &suid, &sgid);
	if (io->gw && drop_ids && worker_gateway_hand_to(io->gw, suid, sgid) < 0)
		return run_fail(io, PROTO_ERR_INTERNAL, "The sandbox could not be started: the model gateway's socket");
	if (io->wagent && drop_ids && warm_agent_hand_egress(&spec, suid, sgid) < 0)
		return run_fail(io, PROTO_ERR_INTERNAL, "The sandbox could not be started: the egress proxy's socket");
	/* The bag and assets/ were written for the run after the agent started. */
	if (io->wagent && worker_sandbox_hand_over(&spec, err, sizeof(err)) < 0)
		return run_fail(io, PROTO_ERR_INTERNAL, "The sandbox could not be started: %s", err);
	int64_t t0 = rn_mono_us();
	if (!io->wagent && sandbox_launch(io, &spec, err, sizeof(err)) < 0)
		return run_fail(io, PROTO_ERR_INTERNAL, "The sandbox could not be started: %s", err);
	io->have_sb = 1;
	rn_hist_observe(io->m->sandbox_start, (double)(rn_mono_us() - t0) / 1e6);
	/* Once the sandbox has its copy, the workspace tmpfs leaves the
	 * worker's namespace, which every later sandbox copies (worker/workspace.h).
	 * When it cannot, it stays there and is unmounted at the end. */
	if (worker_guard_workspace_mounted(io->guard) && worker_sandbox_wait_cloned(&io->sb, 2000) == 1) {
		char root[WORKER_PATH_MAX];
		if (worker_ws_detach(&io->ws, root, err, sizeof(err)) == 0)
			worker_guard_workspace_detached(io->guard, root);
		else
			rn_log_debug(run->run_id, "workspace", "stays mounted: %s", err);
	}
	/* The environment holds the run's secrets: no longer needed here. */
	rn_strv_free(&io->envv);
	rn_log_info(run->run_id, "agent_started", "pid %ld, %s start, runtime cap %" PRId64 " s", (long)io->sb.pid,
	            io->wagent ? "warm agent" : io->warm ? "warm"
	                                                 : "cold",
	            io->cap_sec);
	return STAGE_NEXT;
}

/* The agent's I/O until it ends (worker/agent_loop.h); the sandbox is
 * gone and every line published when it returns. */
static stage_t stage_io(run_io_t *io)
{
	worker_run_t *run = io->run;
	const worker_config_t *cfg = io->cfg;
	worker_line_sink_t sink = {
		.arg = io,
		.line = sink_line,
		.stderr_line = sink_stderr,
		.terminated = sink_terminated,
		.settle = sink_settle,
		.oldest_ask = sink_oldest_ask,
		.wait_fd = sink_wait_fd,
		.backlog = sink_backlog,
		.pump = sink_pump,
		.failed = sink_failed,
	};
	worker_stop_source_t stop = {
		.arg = run,
		.wake_fd = run->wake_fd,
		.stop = stop_of,
		.inbox = run->inbox,
		.limit_check = guard_check,
		.limit_fd = guard_fd,
		.limit_arg = io,
	};
	worker_loop_params_t lp = {
		.run_id = run->run_id,
		.ops = io->ops,
		.state = io->astate,
		.actx = &io->actx,
		.cap_deadline = run->claimed_mono_ms + io->cap_sec * 1000,
		.kill_grace_ms = cfg->kill_grace_ms,
		.line_max = (size_t)cfg->line_max,
		.stop_after_turn = io->launch.stop_after_turn,
		.ask_timeout_ms = cfg->ask_timeout_sec * 1000,
	};
	io->end = worker_agent_loop(&lp, &io->sb, &sink, &stop);
	if (io->sb.stdin_fd >= 0) {
		close(io->sb.stdin_fd);
		io->sb.stdin_fd = -1;
	}
	worker_sandbox_destroy(&io->sb);
	io->have_sb = 0;
	gateway_close(io);
	io_flush(io);
	log_phase(io, "agent done");
	return STAGE_NEXT;
}

/* The agent printed a result: the files go back first (writeback), then
 * the held result becomes the terminal line. */
static void end_result(run_io_t *io)
{
	worker_run_t *run = io->run;
	char err[512];
	size_t nfiles = 0, nskipped = 0;
	worker_stop_t st = run_stop_of(run);
	/* Never upload after a cancel.  A drain timeout before the upload
	 * lets a result without files out; an upload it interrupts ends
	 * the run worker_shutdown. */
	if (st == WORKER_STOP_CANCEL || st == WORKER_STOP_LOST) {
		end_if_stopped(io);
		return;
	}
	if (run->job.otp_upload) {
		worker_wb_limits_t wb_lim = { .stop = &run->stop };
		if (worker_writeback_upload(run->job.agent_url, run->job.otp_upload, io->ws.assets, &wb_lim, &nfiles,
		                            &nskipped, err, sizeof(err)) < 0) {
			/* A stop during the upload: cancelled / worker_shutdown /
			 * lost, never a result (the upload did not finish). */
			if (end_if_stopped(io))
				return;
			run_fail(io, PROTO_ERR_WRITEBACK_FAILED, "Uploading the run's files failed: %s", err);
			return;
		}
		if (nfiles)
			rn_log_info(run->run_id, "writeback", "uploaded %zu file(s), skipped %zu", nfiles, nskipped);
	}
	io_close_open(io, "the run ended");
	if (io_finish(io, io->held, io->held_len, "succeeded", "") >= 0) {
		snprintf(run->outcome, sizeof(run->outcome), "succeeded");
		rn_log_info(run->run_id, "run_ended", "succeeded");
	}
}

/* The agent ended by itself: its result, its error line, or how it exited. */
static void end_exited(run_io_t *io)
{
	worker_run_t *run = io->run;
	if (io->held && io->held_is_result) {
		end_result(io);
	} else if (io->held) {
		io_close_open(io, "the run ended with an error");
		if (io_finish(io, io->held, io->held_len, "failed", io->held_code) >= 0) {
			snprintf(run->outcome, sizeof(run->outcome), "agent_error");
			rn_log_info(run->run_id, "run_ended", "agent error %s", io->held_code);
		}
	} else {
		char how[96];
		int status = io->sb.status;
		describe_exit(status, how, sizeof(how));
		/* The setup wrapper's own exit status: the agent never ran. */
		if (io->boot.setup_script && WIFEXITED(status) && WEXITSTATUS(status) == WORKER_SANDBOX_SETUP_FAILED)
			run_fail(io, PROTO_ERR_BOOTSTRAP_FAILED,
			         "The setup script failed (the sandbox %s), so the agent did not run.", how);
		else
			run_fail(io, PROTO_ERR_AGENT_EXIT, "The agent %s without a result.", how);
	}
}

/* The terminal line, from how the agent loop ended. */
static stage_t stage_end(run_io_t *io)
{
	worker_run_t *run = io->run;
	char msg[256];
	worker_loop_end_t end = io->end;
	/* A limit seen only now (the agent itself was OOM-killed) wins over
	 * how the agent ended. */
	if ((end == WORKER_LOOP_EXITED || end == WORKER_LOOP_NONE) &&
	    (io->limit_hit = worker_guard_final(io->guard)) != WORKER_LIMIT_NONE)
		end = WORKER_LOOP_LIMIT;
	/* A run that went over its token budget ends so, however the agent
	 * ended after the call that crossed it. */
	if (io->budget_hit && (end == WORKER_LOOP_EXITED || end == WORKER_LOOP_NONE || end == WORKER_LOOP_LIMIT))
		end = WORKER_LOOP_LIMIT;
	switch (end) {
	case WORKER_LOOP_LIMIT:
		if (io->budget_hit && io->limit_hit == WORKER_LIMIT_NONE)
			gateway_end(io);
		else
			guard_end(io);
		break;
	case WORKER_LOOP_CANCEL:
		worker_run_cancel_message(run->cancel_reason, msg, sizeof(msg));
		run_fail(io, PROTO_ERR_CANCELLED, "%s", msg);
		break;
	case WORKER_LOOP_CAP:
		run_fail(io, PROTO_ERR_RUNTIME_CAP, "The run reached its runtime cap of %" PRId64 " seconds and was stopped.",
		         io->cap_sec);
		break;
	case WORKER_LOOP_SHUTDOWN:
		run_fail(io, PROTO_ERR_WORKER_SHUTDOWN, "The worker shut down before the run finished.");
		break;
	case WORKER_LOOP_LOST:
		snprintf(run->outcome, sizeof(run->outcome), "worker_lost");
		rn_log_warn(run->run_id, "run_lost", "the lease was lost; stopped without a terminal line");
		break;
	case WORKER_LOOP_INTERNAL:
		run_fail(io, PROTO_ERR_INTERNAL, "The worker failed while running the run.");
		break;
	case WORKER_LOOP_EXITED:
	case WORKER_LOOP_NONE:
		end_exited(io);
		break;
	}
	return STAGE_DONE;
}

/* Frees what the stages built, however far they got. */
static void run_release(run_io_t *io)
{
	worker_run_t *run = io->run;
	if (io->have_sb)
		worker_sandbox_destroy(&io->sb);
	worker_warm_free(io->warm, 1); /* its run directory is ws, removed below */
	io->warm = NULL;
	worker_warm_agent_free(io->wagent, 1); /* likewise; never back to the pool */
	io->wagent = NULL;
	/* The cgroup, the proxy, the tmpfs and the run directory go on the
	 * reaper's thread: the slot is free once this thread returns. */
	worker_gateway_stop(io->gw);
	io->gw = NULL;
	worker_reaper_put(run->ctx->reaper, run->run_id, run->claimed_mono_ms, io->guard, io->have_ws ? &io->ws : NULL);
	io->guard = NULL;
	if (io->ws_fd >= 0)
		close(io->ws_fd);
	io->ws_fd = -1;
	rn_strv_free(&io->envv);
	worker_agent_launch_free(&io->launch);
	if (io->ops && io->ops->free)
		io->ops->free(io->astate);
	worker_boot_clear(&io->boot);
}

/* One run, stage by stage, in the order of SPEC §4 (the way nsjail chains
 * its steps): each stage either hands over to the next or ends the run. */
static void run_pipeline(run_io_t *io)
{
	static stage_t (*const stages[])(run_io_t *) = {
		stage_boot,      /* running mark, /env and /config */
		stage_workspace, /* run directory, guard, bag, skills, setup script */
		stage_agent,     /* kind, permission mode, launch, environment */
		stage_sandbox,   /* spec, warm or cold start, workspace detach */
		stage_io,        /* the agent's lines until it ends */
		stage_end,       /* writeback and the terminal line */
	};
	for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++)
		if (stages[i](io) != STAGE_NEXT)
			break;
	run_release(io);
}

static void *run_main(void *arg)
{
	worker_run_t *run = arg;
	worker_ctx_t *ctx = run->ctx;
	run_io_t io;
	memset(&io, 0, sizeof(io));
	io.run = run;
	io.cfg = ctx->cfg;
	io.m = ctx->m;
	io.ws_fd = -1;
	snprintf(run->outcome, sizeof(run->outcome), "internal");

	if (worker_pub_init(&io.pub, &ctx->cfg->redis, ctx->cfg->key_prefix, run->run_id,
	                    run->claim.seq_base, &run->stop) < 0 ||
	    !(io.env = proto_env_new((size_t)ctx->cfg->line_max))) {
		rn_log_error(run->run_id, "run_internal", "out of memory");
	} else {
		io.pub.pool = ctx->pub_pool;
		run_pipeline(&io);
	}
	if (io.publish_failed)
		rn_log_error(run->run_id, "run_abandoned",
		             "Redis stayed unreachable; the run is left to the lost sweep (%" PRIu64 " line(s) not written)",
		             io.pub.dropped + worker_pub_pending(&io.pub));
	if (io.env && proto_env_dropped(io.env))
		rn_log_info(run->run_id, "lines_dropped", "%" PRIu64 " line(s) after the terminal line dropped",
		            proto_env_dropped(io.env));
	rn_counter_add(ctx->m->redis_retries, io.pub.retries);
	if (strcmp(run->outcome, "skipped"))
		rn_counter_add(worker_metrics_outcome(ctx->m, run->outcome), 1);
	if (io.held) {
		sodium_memzero(io.held, io.held_len);
		free(io.held);
	}
	proto_env_free(io.env);
	worker_pub_free(&io.pub);
	ctx->on_done(run, ctx->arg);
	return NULL;
}

int worker_run_start(worker_run_t *run)
{
	if (rn_thread_start(&run->thread, "runnel-run", RUN_STACK, 0, run_main, run) != 0)
		return -1;
	run->started = 1;
	return 0;
}

void worker_run_join(worker_run_t *run)
{
	if (run->started) {
		pthread_join(run->thread, NULL);
		run->started = 0;
	}
}

void worker_run_free(worker_run_t *run)
{
	if (!run)
		return;
	proto_job_clear(&run->job);
	worker_claimed_raw_clear(&run->raw, &run->raw_len);
	worker_inbox_free(run->inbox);
	if (run->wake_fd >= 0)
		close(run->wake_fd);
	free(run);
}
