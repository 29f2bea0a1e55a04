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
#include "common/util.h"
#include "proto/envelope.h"
#include "proto/keys.h"
#include "worker/bootstrap.h"
#include "worker/publish.h"
#include "worker/sandbox.h"
#include "worker/warm.h"
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

#define RUN_READ_CHUNK     (16 * 1024)
#define RUN_STDERR_LINE    (8 * 1024)
#define RUN_READS_PER_FLUSH 8
#define RUN_PIPE_SIZE      (1024 * 1024)
#define RUN_ENV_MAX        4096
/* Under /run (a tmpfs in the sandbox): the read-only host /usr has no
 * /usr/libexec/runnel to bind onto. */
#define MOCK_AGENT_IN_SANDBOX WORKER_MOCK_AGENT_IN_SANDBOX
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* How the agent phase ended. */
typedef enum {
	END_NONE = 0,
	END_EXITED,     /* the agent exited (with or without a terminal line) */
	END_CANCEL,
	END_CAP,
	END_SHUTDOWN,
	END_LOST,
	END_INTERNAL,   /* the worker failed (Redis give-up, I/O error) */
} end_t;

/* A line splitter with a cap: longer lines keep their first cap+1 bytes. */
typedef struct splitter {
	char  *buf;
	size_t len, cap, limit;   /* limit = keep at most this many bytes */
	int    overflow;
} splitter_t;

/* Everything the run's thread holds; lives on the thread's stack or heap. */
typedef struct run_io {
	worker_run_t  *run;
	const worker_config_t *cfg;
	worker_metrics_t *m;
	worker_pub_t   pub;
	proto_env_t   *env;
	int            first_line_done;
	/* Terminal line the agent printed, held until writeback finished. */
	char          *held;
	size_t         held_len;
	int            held_is_result;
	char           held_code[64];
	/* stderr accounting */
	uint64_t       stderr_bytes;
	int            stderr_truncated;
	int            publish_failed;
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
	run->ctx = ctx;
	run->job = *job;
	memset(job, 0, sizeof(*job)); /* ownership moved */
	run->claim = *claim;
	run->claimed_mono_ms = rn_mono_ms();
	snprintf(run->run_id, sizeof(run->run_id), "%s", run->job.run_id);
	atomic_init(&run->stop, WORKER_STOP_NONE);
	return run;
}

void worker_run_stop(worker_run_t *run, worker_stop_t why, const char *reason)
{
	int expected = WORKER_STOP_NONE;
	if (why == WORKER_STOP_CANCEL && reason)
		snprintf(run->cancel_reason, sizeof(run->cancel_reason), "%s", reason);
	/* LOST overrides anything: no terminal line may be written then. */
	if (why == WORKER_STOP_LOST)
		atomic_store(&run->stop, WORKER_STOP_LOST);
	else
		atomic_compare_exchange_strong(&run->stop, &expected, (int)why);
	run->abort_flag = 1;
	uint64_t one = 1;
	ssize_t w = write(run->wake_fd, &one, sizeof(one));
	(void)w;
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
	if (worker_pub_add(&io->pub, line, len))
		io_pump(io);
}

static int emit_cb(const char *line, size_t len, void *arg)
{
	io_publish(arg, line, len);
	return 0;
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
	unsigned attempt = 0;
	for (;;) {
		char err[256];
		redisContext *c = worker_pub_ctx(&io->pub);
		if (!c)
			return -1;
		int rc = rn_runstate_finish(c, io->cfg->key_prefix, io->run->run_id, line, len,
		                            status, code, io->cfg->retention_sec, err, sizeof(err));
		if (rc >= 0) {
			if (rc == 0)
				rn_log_warn(io->run->run_id, "run_terminal_exists",
				            "the run already had a terminal line; %s not written", code[0] ? code : "result");
			else
				rn_counter_add(io->m->lines_published, 1);
			return rc;
		}
		rn_log_warn(io->run->run_id, "redis_finish", "%s; retrying", err);
		worker_pub_reset(&io->pub);
		rn_counter_add(io->m->redis_retries, 1);
		worker_pub_backoff(&io->pub, attempt++);
	}
}

/* Closes open steps, then writes an error terminal line. */
static void io_end_error(run_io_t *io, const char *code, const char *message, const char *why)
{
	const char *status = !strcmp(code, PROTO_ERR_CANCELLED) ? "cancelled" : "failed";
	if (io->env)
		proto_env_close_steps(io->env, rn_now_ms(), why, emit_cb, io);
	size_t len = 0;
	char *line = proto_env_make_error(code, message, rn_now_ms(), &len);
	if (!line) {
		rn_log_error(io->run->run_id, "run_terminal", "out of memory building the terminal line");
		return;
	}
	if (io->env)
		proto_env_set_terminated(io->env);
	io_finish(io, line, len, status, code);
	free(line);
	snprintf(io->run->outcome, sizeof(io->run->outcome), "%s", code);
	rn_log_info(io->run->run_id, "run_ended", "%s: %s", code, message);
}

/* ------------------------------------------------------------------------
 * Line splitting
 * ------------------------------------------------------------------------ */

static void split_init(splitter_t *s, size_t limit)
{
	memset(s, 0, sizeof(*s));
	s->limit = limit;
}

static void split_free(splitter_t *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

/* Appends bytes to the current line, keeping at most limit of them. */
static int split_append(splitter_t *s, const char *p, size_t n)
{
	if (s->len + n > s->limit) {
		s->overflow = 1;
		n = s->limit > s->len ? s->limit - s->len : 0;
	}
	if (n == 0)
		return 0;
	if (s->len + n > s->cap) {
		size_t ncap = s->cap ? s->cap : 1024;
		while (ncap < s->len + n)
			ncap *= 2;
		if (ncap > s->limit)
			ncap = s->limit;
		char *nb = realloc(s->buf, ncap);
		if (!nb)
			return -1;
		s->buf = nb;
		s->cap = ncap;
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	return 0;
}

/* After a line was handled: forget it, and give back a big buffer. */
static void split_reset(splitter_t *s)
{
	s->len = 0;
	s->overflow = 0;
	if (s->cap > 64 * 1024) {
		free(s->buf);
		s->buf = NULL;
		s->cap = 0;
	}
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
		io->held_code[0] = '\0';
		if (!io->held_is_result) {
			json_t *j = json_loadb(out.text, out.len, 0, NULL);
			const char *code = j ? json_string_value(json_object_get(j, "code")) : NULL;
			snprintf(io->held_code, sizeof(io->held_code), "%s", code ? code : "error");
			json_decref(j);
		}
		return;
	}
	io_publish(io, out.text, out.len);
}

static void handle_stderr_line(run_io_t *io, const char *line, size_t len, int cut)
{
	if (proto_env_terminated(io->env)) {
		rn_counter_add(io->m->lines_dropped, 1);
		return;
	}
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

/*
 * Reads once from fd into the splitter and handles every complete line.
 * Returns 1 at EOF, 2 when nothing was there (EAGAIN), 0 otherwise.
 */
static int read_lines(run_io_t *io, int fd, splitter_t *s, int is_stderr, char *chunk)
{
	ssize_t n = read(fd, chunk, RUN_READ_CHUNK);
	if (n < 0)
		return errno == EAGAIN ? 2 : errno == EINTR ? 0 : 1;
	if (n == 0) {
		/* A last line without newline still counts. */
		if (s->len || s->overflow) {
			if (is_stderr)
				handle_stderr_line(io, s->buf, s->len, s->overflow);
			else
				handle_stdout_line(io, s->buf ? s->buf : "", s->len);
			split_reset(s);
		}
		return 1;
	}
	const char *p = chunk, *end = chunk + n;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t take = nl ? (size_t)(nl - p) : (size_t)(end - p);
		split_append(s, p, take);
		if (!nl)
			break;
		if (is_stderr)
			handle_stderr_line(io, s->buf, s->len, s->overflow);
		else
			handle_stdout_line(io, s->buf ? s->buf : "", s->len);
		split_reset(s);
		p = nl + 1;
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Sandbox preparation
 * ------------------------------------------------------------------------ */

typedef struct strv {
	char **v;
	size_t n, cap;
} strv_t;

static int strv_add(strv_t *s, char *owned)
{
	if (!owned)
		return -1;
	if (s->n + 2 > s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 16;
		char **nv = realloc(s->v, nc * sizeof(*nv));
		if (!nv) {
			free(owned);
			return -1;
		}
		s->v = nv;
		s->cap = nc;
	}
	s->v[s->n++] = owned;
	s->v[s->n] = NULL;
	return 0;
}

static char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/* Frees the strings (wiping them: they may hold /env secrets). */
static void strv_free(strv_t *s)
{
	for (size_t i = 0; i < s->n; i++) {
		sodium_memzero(s->v[i], strlen(s->v[i]));
		free(s->v[i]);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Sets NAME=value, replacing an earlier NAME. */
static int env_set(strv_t *e, const char *name, const char *value)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i < e->n; i++) {
		if (!strncmp(e->v[i], name, nl) && e->v[i][nl] == '=') {
			char *nv = strf("%s=%s", name, value);
			if (!nv)
				return -1;
			sodium_memzero(e->v[i], strlen(e->v[i]));
			free(e->v[i]);
			e->v[i] = nv;
			return 0;
		}
	}
	return strv_add(e, strf("%s=%s", name, value));
}

static int env_name_ok(const char *k)
{
	if (!*k || strlen(k) > 256)
		return 0;
	for (const char *p = k; *p; p++)
		if (*p == '=' || (unsigned char)*p < 0x21)
			return 0;
	return 1;
}

/* The sandbox's whole environment: /env variables, then what runnel sets. */
static int build_env(const worker_run_t *run, const worker_boot_t *boot, strv_t *e,
                     char *errstr, size_t errstr_size)
{
	if (env_set(e, "HOME", "/root") < 0 || env_set(e, "PATH", DEFAULT_PATH) < 0)
		goto oom;
	const char *k;
	json_t *v;
	size_t count = 0;
	json_object_foreach(boot->variables, k, v) {
		if (!json_is_string(v))
			continue;
		if (!env_name_ok(k)) {
			snprintf(errstr, errstr_size, "the /env variable name \"%.64s\" is not usable", k);
			return -1;
		}
		if (++count > RUN_ENV_MAX) {
			snprintf(errstr, errstr_size, "/env has more than %d variables", RUN_ENV_MAX);
			return -1;
		}
		if (env_set(e, k, json_string_value(v)) < 0)
			goto oom;
	}
	if (env_set(e, "RUNNEL_RUN_ID", run->run_id) < 0)
		goto oom;
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

/* The agent's argv from config.agent.  ro_bind gets the mock's bind. */
static int build_argv(const worker_config_t *cfg, const worker_boot_t *boot, strv_t *argv,
                      strv_t *binds, char *errstr, size_t errstr_size)
{
	const json_t *agent = boot->agent;
	const char *kind = agent ? json_string_value(json_object_get(agent, "kind")) : NULL;
	if (!kind) {
		snprintf(errstr, errstr_size, "the workspace config has no agent.kind");
		return -1;
	}
	if (!strcmp(kind, "command")) {
		const json_t *a = json_object_get(agent, "argv");
		size_t i;
		const json_t *v;
		if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 1024) {
			snprintf(errstr, errstr_size, "agent.argv must be a non-empty array of strings");
			return -1;
		}
		json_array_foreach(a, i, v) {
			if (!json_is_string(v) || (i == 0 && !*json_string_value(v))) {
				snprintf(errstr, errstr_size, "agent.argv must be a non-empty array of strings");
				return -1;
			}
			if (strv_add(argv, strdup(json_string_value(v))) < 0)
				goto oom;
		}
		return 0;
	}
	if (!strcmp(kind, "mock")) {
		const char *script = json_string_value(json_object_get(agent, "script"));
		if (!script)
			script = "demo";
		if (!cfg->mock_agent_path[0]) {
			snprintf(errstr, errstr_size, "this worker has no runnel-mock-agent (set RUNNEL_MOCK_AGENT)");
			return -1;
		}
		if (cfg->driver == WORKER_SANDBOX_BWRAP) {
			if (strv_add(argv, strdup(MOCK_AGENT_IN_SANDBOX)) < 0 ||
			    strv_add(binds, strf("%s:%s", cfg->mock_agent_path, MOCK_AGENT_IN_SANDBOX)) < 0)
				goto oom;
		} else if (strv_add(argv, strdup(cfg->mock_agent_path)) < 0) {
			goto oom;
		}
		if (strv_add(argv, strdup(script)) < 0)
			goto oom;
		return 0;
	}
	snprintf(errstr, errstr_size, "agent.kind \"%.32s\" is not supported (command, mock)", kind);
	return -1;
oom:
	snprintf(errstr, errstr_size, "out of memory");
	return -1;
}

/* 1 when name is a safe single path component for a skill directory. */
static int skill_name_ok(const char *name)
{
	if (!name || !*name || strlen(name) > 128 || !strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '-' || *p == '.'))
			return 0;
	return 1;
}

/* The turn line; the caller wipes and frees it (it holds the prompt). */
static char *build_turn(const worker_run_t *run, const worker_boot_t *boot, size_t *lenp)
{
	json_t *skills = json_array();
	size_t i;
	json_t *s;
	json_array_foreach(boot->skills, i, s) {
		/* The signed zip_url stays outside the sandbox. */
		json_t *c = json_is_object(s) ? json_deep_copy(s) : NULL;
		if (!c)
			continue;
		json_object_del(c, "zip_url");
		const char *name = json_string_value(json_object_get(c, "name"));
		if (name && skill_name_ok(name)) {
			char path[256];
			snprintf(path, sizeof(path), "/root/skills/%s", name);
			json_object_set_new(c, "path", json_string(path));
		}
		json_array_append_new(skills, c);
	}
	json_t *t = json_object();
	json_object_set_new(t, "run_id", json_string(run->run_id));
	json_object_set_new(t, "prompt", run->job.prompt ? json_string(run->job.prompt) : json_string(""));
	json_object_set_new(t, "system_prompt", boot->system_prompt ? json_string(boot->system_prompt) : json_null());
	json_object_set_new(t, "model", boot->model ? json_string(boot->model) : json_null());
	json_object_set_new(t, "skills", skills);
	json_object_set_new(t, "mcp_servers", boot->mcp_servers ? json_incref(boot->mcp_servers) : json_array());
	json_object_set_new(t, "history", boot->history ? json_incref(boot->history) : json_array());
	char *text = json_dumps(t, JSON_COMPACT);
	json_decref(t);
	if (!text)
		return NULL;
	size_t n = strlen(text);
	char *line = malloc(n + 2);
	if (line) {
		memcpy(line, text, n);
		line[n] = '\n';
		line[n + 1] = '\0';
		*lenp = n + 1;
	}
	sodium_memzero(text, n);
	free(text);
	return line;
}

/* ------------------------------------------------------------------------
 * The agent phase
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
	return (worker_stop_t)atomic_load(&run->stop);
}

/*
 * Runs the agent until it exited and both pipes closed, or until a stop
 * (cancel, cap, shutdown, lost) killed it.  Returns how it ended.
 */
static end_t agent_loop(run_io_t *io, worker_sandbox_t *sb, char *turn, size_t turn_len,
                        int64_t cap_deadline)
{
	worker_run_t *run = io->run;
	const worker_config_t *cfg = io->cfg;
	splitter_t so, se;
	char *chunk = malloc(RUN_READ_CHUNK);
	size_t turn_off = 0;
	int out_open = 1, err_open = 1, exited = 0;
	end_t end = END_NONE;
	int64_t kill_at = -1;        /* SIGKILL deadline after SIGTERM */
	int killed = 0;
	int64_t term_seen_at = -1;   /* agent printed its terminal line */
	int64_t exited_at = -1;
	int64_t last_io = rn_mono_ms();   /* last read from the pipes or Redis wait */

	if (!chunk)
		return END_INTERNAL;
	split_init(&so, (size_t)cfg->line_max + 1);
	split_init(&se, RUN_STDERR_LINE);
	int pidfd = pidfd_open(sb->pid, 0);

	/* A large stdout pipe lets the agent go on printing while a batch is
	 * in flight to Redis (best effort: the kernel may refuse the size). */
	fcntl(sb->stdout_fd, F_SETPIPE_SZ, RUN_PIPE_SIZE);

	/* stdin: written without blocking; kept open afterwards. */
	int fl = fcntl(sb->stdin_fd, F_GETFL);
	if (fl >= 0)
		fcntl(sb->stdin_fd, F_SETFL, fl | O_NONBLOCK);

	for (;;) {
		int64_t now = rn_mono_ms();

		/* Decide to stop the agent. */
		if (end == END_NONE) {
			worker_stop_t st = run_stop_of(run);
			if (st == WORKER_STOP_CANCEL)
				end = END_CANCEL;
			else if (st == WORKER_STOP_SHUTDOWN)
				end = END_SHUTDOWN;
			else if (st == WORKER_STOP_LOST)
				end = END_LOST;
			else if (now >= cap_deadline)
				end = END_CAP;
			else if (io->publish_failed)
				end = END_INTERNAL;
			if (end != END_NONE && !exited) {
				worker_sandbox_kill(sb, SIGTERM);
				kill_at = now + cfg->kill_grace_ms;
			}
		}
		if (end == END_NONE && proto_env_terminated(io->env) && term_seen_at < 0)
			term_seen_at = now;
		/* After its terminal line (or its exit) the agent gets a grace period
		 * to finish; then it is stopped like any other. */
		if (!exited && kill_at < 0 && term_seen_at >= 0 && now >= term_seen_at + cfg->kill_grace_ms) {
			worker_sandbox_kill(sb, SIGTERM);
			kill_at = now + cfg->kill_grace_ms;
		}
		/* After the exit, the pipes are read until EOF; only when they stay
		 * silent for the grace period (a leftover process holds them) is
		 * the rest given up.  Time spent waiting on Redis does not count. */
		if (exited && (out_open || err_open) && exited_at >= 0 &&
		    now >= (last_io > exited_at ? last_io : exited_at) + cfg->kill_grace_ms && !killed) {
			/* Something in the sandbox still holds the pipes. */
			worker_sandbox_kill(sb, SIGKILL);
			killed = 1;
			out_open = err_open = 0;
		}
		if (kill_at >= 0 && !killed && now >= kill_at) {
			worker_sandbox_kill(sb, SIGKILL);
			killed = 1;
		}
		if (!exited) {
			int r = worker_sandbox_reap(sb);
			if (r != 0) {
				exited = 1;
				exited_at = now;
				if (killed || end != END_NONE) {
					/* Killed by us: the pipes are not worth waiting for. */
				}
			}
		}
		if (exited && (!out_open && !err_open))
			break;
		if (exited && end != END_NONE && end != END_EXITED)
			break;

		struct pollfd pfd[6];
		int np = 0, i_out = -1, i_err = -1, i_in = -1, i_wake, i_pid = -1, i_red = -1;
		/* While a stop is pending, output is no longer read into the stream:
		 * drain it only so that the agent is not blocked writing. */
		if (out_open) {
			i_out = np;
			pfd[np++] = (struct pollfd){ sb->stdout_fd, POLLIN, 0 };
		}
		if (err_open) {
			i_err = np;
			pfd[np++] = (struct pollfd){ sb->stderr_fd, POLLIN, 0 };
		}
		if (turn && turn_off < turn_len && sb->stdin_fd >= 0) {
			i_in = np;
			pfd[np++] = (struct pollfd){ sb->stdin_fd, POLLOUT, 0 };
		}
		i_wake = np;
		pfd[np++] = (struct pollfd){ run->wake_fd, POLLIN, 0 };
		if (pidfd >= 0 && !exited) {
			i_pid = np;
			pfd[np++] = (struct pollfd){ pidfd, POLLIN, 0 };
		}
		if (worker_pub_wait_fd(&io->pub) >= 0) {
			i_red = np;
			pfd[np++] = (struct pollfd){ worker_pub_wait_fd(&io->pub), POLLIN, 0 };
		}
		int64_t timeout = 1000;
		int64_t next = cap_deadline;
		if (kill_at >= 0 && !killed && kill_at < next)
			next = kill_at;
		if (term_seen_at >= 0 && kill_at < 0 && term_seen_at + cfg->kill_grace_ms < next)
			next = term_seen_at + cfg->kill_grace_ms;
		if (exited_at >= 0 && (last_io > exited_at ? last_io : exited_at) + cfg->kill_grace_ms < next)
			next = (last_io > exited_at ? last_io : exited_at) + cfg->kill_grace_ms;
		if (next - now < timeout)
			timeout = next - now < 0 ? 0 : next - now;
		if (pidfd < 0 && !exited && timeout > 20)
			timeout = 20; /* no pidfd: notice the exit by polling */
		int pr = poll(pfd, (nfds_t)np, (int)timeout);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr <= 0)
			continue;
		if (pfd[i_wake].revents) {
			uint64_t v;
			ssize_t rr = read(run->wake_fd, &v, sizeof(v));
			(void)rr;
		}
		if (i_in >= 0 && pfd[i_in].revents) {
			if (pfd[i_in].revents & (POLLERR | POLLHUP)) {
				turn_off = turn_len; /* the agent closed stdin: fine */
			} else {
				ssize_t w = write(sb->stdin_fd, turn + turn_off, turn_len - turn_off);
				if (w > 0)
					turn_off += (size_t)w;
				else if (w < 0 && errno != EAGAIN && errno != EINTR)
					turn_off = turn_len;
			}
		}
		int stopping = end != END_NONE && end != END_EXITED;
		if (i_out >= 0 && pfd[i_out].revents) {
			if (stopping) {
				ssize_t rr = read(sb->stdout_fd, chunk, RUN_READ_CHUNK);
				if (rr == 0 || (rr < 0 && errno != EAGAIN && errno != EINTR))
					out_open = 0;
			} else {
				/* A burst is read in several chunks before one pipelined
				 * flush, up to a batch; then Redis gets it. */
				for (int k = 0; k < RUN_READS_PER_FLUSH; k++) {
					int r = read_lines(io, sb->stdout_fd, &so, 0, chunk);
					if (r == 1)
						out_open = 0;
					if (r != 0 || worker_pub_pending(&io->pub) >= WORKER_PUB_BATCH_LINES / 2)
						break;
				}
			}
		}
		if (i_err >= 0 && pfd[i_err].revents) {
			if (stopping) {
				ssize_t rr = read(sb->stderr_fd, chunk, RUN_READ_CHUNK);
				if (rr == 0 || (rr < 0 && errno != EAGAIN && errno != EINTR))
					err_open = 0;
			} else if (read_lines(io, sb->stderr_fd, &se, 1, chunk) == 1) {
				err_open = 0;
			}
		}
		(void)i_pid;
		/* Send what this round produced; the replies are read while the
		 * next round is parsed.  While Redis is away this blocks, the pipe
		 * fills and the agent waits. */
		if (!stopping && (worker_pub_pending(&io->pub) > io->pub.inflight ||
		                  (i_red >= 0 && pfd[i_red].revents)))
			io_pump(io);
		last_io = rn_mono_ms();
	}
	if (end == END_NONE)
		end = END_EXITED;
	if (pidfd >= 0)
		close(pidfd);
	if (turn)
		sodium_memzero(turn, turn_len);
	split_free(&so);
	split_free(&se);
	free(chunk);
	return end;
}

/* ------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------ */

/* Marks the run running; 1 ok, 0 not ours, -1 gave up. */
static int mark_running(run_io_t *io)
{
	unsigned attempt = 0;
	for (;;) {
		char err[256];
		redisContext *c = worker_pub_ctx(&io->pub);
		if (!c)
			return -1;
		int rc = rn_runstate_start(c, io->cfg->key_prefix, io->run->run_id,
		                           io->cfg->worker_id, err, sizeof(err));
		if (rc >= 0)
			return rc;
		rn_log_warn(io->run->run_id, "redis_start", "%s; retrying", err);
		worker_pub_reset(&io->pub);
		worker_pub_backoff(&io->pub, attempt++);
	}
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
		io_end_error(io, PROTO_ERR_CANCELLED, msg, "the run was cancelled");
		return 1;
	case WORKER_STOP_SHUTDOWN:
		io_end_error(io, PROTO_ERR_WORKER_SHUTDOWN,
		             "The worker shut down before the run finished.", "the worker shut down");
		return 1;
	case WORKER_STOP_LOST:
		snprintf(io->run->outcome, sizeof(io->run->outcome), "worker_lost");
		rn_log_warn(io->run->run_id, "run_lost", "the lease was lost; stopping without a terminal line");
		return 1;
	}
	return 0;
}

static void run_pipeline(run_io_t *io)
{
	worker_run_t *run = io->run;
	const worker_config_t *cfg = io->cfg;
	char err[512], msg[768];
	worker_boot_t boot;
	worker_ws_t ws;
	int have_ws = 0;
	strv_t envv = { 0 }, argv = { 0 }, binds = { 0 };
	worker_sandbox_t sb;
	int have_sb = 0;
	worker_warm_sb_t *warm = NULL;   /* a warm sandbox this run took (it brings ws) */
	memset(&boot, 0, sizeof(boot));
	memset(&sb, 0, sizeof(sb));

	/* A cancel found at claim time ends the run before any OTP is used. */
	if (end_if_stopped(io))
		return;
	int rc = mark_running(io);
	if (rc < 0)
		return;
	if (rc == 0) {
		rn_log_warn(run->run_id, "run_not_ours", "the run is no longer claimed by this worker; not started");
		snprintf(run->outcome, sizeof(run->outcome), "skipped");
		return;
	}
	if (end_if_stopped(io))
		return;

	int64_t cap_sec = cfg->max_runtime_sec;
	if (run->job.max_runtime_sec > 0 && run->job.max_runtime_sec < cap_sec)
		cap_sec = run->job.max_runtime_sec;

	/* 1-2: redeem the setup and run OTPs. */
	worker_boot_opts_t bo = { 0 };
	bo.abort_flag = &run->abort_flag;
	if (worker_bootstrap_fetch(run->job.agent_url, run->job.otp_setup, run->job.otp_run,
	                           &bo, &boot, err, sizeof(err)) < 0) {
		if (end_if_stopped(io))
			goto out;
		snprintf(msg, sizeof(msg), "Could not load the run's setup from the workspace: %s", err);
		io_end_error(io, PROTO_ERR_BOOTSTRAP_FAILED, msg, "bootstrap failed");
		goto out;
	}
	if (boot.max_runtime_sec > 0 && boot.max_runtime_sec < cap_sec)
		cap_sec = boot.max_runtime_sec;
	rn_log_debug(run->run_id, "run_phase", "bootstrap done at +%" PRId64 " ms", rn_mono_ms() - run->claimed_mono_ms);
	if (end_if_stopped(io))
		goto out;

	/* 3: the workspace, the bag and the skills. */
	if (mkdir(cfg->work_dir, 0700) < 0 && errno != EEXIST) {
		snprintf(msg, sizeof(msg), "The worker could not create its work directory.");
		rn_log_error(run->run_id, "work_dir", "%s: %s", cfg->work_dir, strerror(errno));
		io_end_error(io, PROTO_ERR_INTERNAL, msg, "internal error");
		goto out;
	}
	/* warm: a sandbox started ahead of need brings its run directory
	 * (worker/warm.h); one with skills starts cold (no /root/skills bind). */
	if (!json_array_size(boot.skills))
		warm = worker_warm_pool_take(run->ctx->warm, cfg->share_net);
	if (warm) {
		ws = warm->ws;
	} else if (worker_ws_create(&ws, cfg->work_dir, run->run_id, err, sizeof(err)) < 0) {
		rn_log_error(run->run_id, "workspace", "%s", err);
		io_end_error(io, PROTO_ERR_INTERNAL, "The worker could not create the run's workspace.", "internal error");
		goto out;
	}
	have_ws = 1;
	/* A stop (cancel, drain timeout, lost lease) ends a download or the
	 * upload within about a second instead of waiting for its timeout. */
	worker_bag_limits_t bag_lim = { .abort_flag = &run->abort_flag };
	if (boot.zip_url) {
		int reject = 0;
		if (worker_ws_fetch_zip(boot.zip_url, ws.workspace, &bag_lim, &reject, err, sizeof(err)) < 0) {
			if (end_if_stopped(io))
				goto out;
			if (reject) {
				snprintf(msg, sizeof(msg), "The workspace bag was refused: %s", err);
				io_end_error(io, PROTO_ERR_BAG_REJECTED, msg, "bag rejected");
			} else {
				snprintf(msg, sizeof(msg), "Could not download the workspace bag: %s", err);
				io_end_error(io, PROTO_ERR_BOOTSTRAP_FAILED, msg, "bootstrap failed");
			}
			goto out;
		}
	}
	size_t si;
	json_t *skill;
	int have_skills = 0;
	json_array_foreach(boot.skills, si, skill) {
		const char *name = json_string_value(json_object_get(skill, "name"));
		const char *url = json_string_value(json_object_get(skill, "zip_url"));
		char dir[WORKER_PATH_MAX + 160]; /* skills dir + "/" + a name of <= 128 */
		if (!skill_name_ok(name)) {
			snprintf(msg, sizeof(msg), "Skill %zu has no usable name (letters, digits, . _ -).", si);
			io_end_error(io, PROTO_ERR_BOOTSTRAP_FAILED, msg, "bootstrap failed");
			goto out;
		}
		snprintf(dir, sizeof(dir), "%s/%s", ws.skills, name);
		/* skills/ is made on first need (worker_ws_create leaves it out). */
		if ((mkdir(ws.skills, 0755) < 0 && errno != EEXIST) || (mkdir(dir, 0700) < 0 && errno != EEXIST)) {
			io_end_error(io, PROTO_ERR_INTERNAL, "The worker could not create a skill directory.", "internal error");
			goto out;
		}
		have_skills = 1;
		if (!url)
			continue;
		int reject = 0;
		if (worker_ws_fetch_zip(url, dir, &bag_lim, &reject, err, sizeof(err)) < 0) {
			if (end_if_stopped(io))
				goto out;
			snprintf(msg, sizeof(msg), "%s skill \"%s\": %s",
			         reject ? "Refused the" : "Could not download the", name, err);
			io_end_error(io, reject ? PROTO_ERR_BAG_REJECTED : PROTO_ERR_BOOTSTRAP_FAILED, msg,
			             reject ? "bag rejected" : "bootstrap failed");
			goto out;
		}
	}
	if (end_if_stopped(io))
		goto out;

	/* 4: the sandbox. */
	char setup_path[WORKER_PATH_MAX + 16];
	if (boot.setup_script) {
		snprintf(setup_path, sizeof(setup_path), "%s/setup.sh", ws.meta);
		if (mkdir(ws.meta, 0700) < 0 && errno != EEXIST) {
			io_end_error(io, PROTO_ERR_INTERNAL, "The worker could not write the setup script.", "internal error");
			goto out;
		}
		int fd = open(setup_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0500);
		size_t sl = strlen(boot.setup_script);
		if (fd < 0 || write(fd, boot.setup_script, sl) != (ssize_t)sl) {
			if (fd >= 0)
				close(fd);
			io_end_error(io, PROTO_ERR_INTERNAL, "The worker could not write the setup script.", "internal error");
			goto out;
		}
		close(fd);
	}
	if (build_argv(cfg, &boot, &argv, &binds, err, sizeof(err)) < 0) {
		snprintf(msg, sizeof(msg), "The agent cannot be started: %s", err);
		io_end_error(io, PROTO_ERR_BOOTSTRAP_FAILED, msg, "bootstrap failed");
		goto out;
	}
	if (build_env(run, &boot, &envv, err, sizeof(err)) < 0) {
		snprintf(msg, sizeof(msg), "The agent's environment cannot be built: %s", err);
		io_end_error(io, PROTO_ERR_BOOTSTRAP_FAILED, msg, "bootstrap failed");
		goto out;
	}
	size_t turn_len = 0;
	char *turn = build_turn(run, &boot, &turn_len);
	if (!turn) {
		io_end_error(io, PROTO_ERR_INTERNAL, "The worker ran out of memory.", "internal error");
		goto out;
	}

	worker_sandbox_spec_t spec = { 0 };
	spec.driver = cfg->driver;
	spec.bwrap_path = cfg->bwrap_path;
	spec.rootfs = cfg->rootfs;
	spec.workspace_dir = ws.workspace;
	spec.skills_dir = have_skills ? ws.skills : NULL;
	spec.setup_script = boot.setup_script ? setup_path : NULL;
	spec.argv = argv.v;
	spec.envp = envv.v;
	spec.ro_binds = binds.n ? binds.v : NULL;
	spec.share_net = cfg->share_net;
	spec.rlimit_nofile = WORKER_RUN_RLIMIT_NOFILE;
	rn_log_debug(run->run_id, "run_phase", "workspace ready at +%" PRId64 " ms", rn_mono_ms() - run->claimed_mono_ms);
	int64_t t0 = rn_mono_us();
	/* warm: what the warm sandbox cannot match starts cold (same ws). */
	if (warm && !worker_warm_fits(warm, &spec)) {
		worker_warm_free(warm, 1);
		warm = NULL;
	}
	if (warm) {
		/*
		 * limits: the run's cgroup and limits are applied HERE for a warm
		 * sandbox, before it gets the run's argv and environment (nothing
		 * of the run runs yet).  Its processes (bwrap, bwrap's pid 1, the
		 * waiting init: process group warm->sb.pid) already exist, so they
		 * are moved into the run's cgroup (or the sandbox was started in
		 * a cgroup of its own whose limits are written now).
		 */
		rc = worker_warm_launch(warm, &spec, &sb, err, sizeof(err));
		if (rc < 0) {
			/* It died before the run got in: nothing of the run ran. */
			rn_log_warn(run->run_id, "warm_launch", "%s; starting cold", err);
			worker_warm_free(warm, 1);
			warm = NULL;
		}
	}
	if (!warm)
		rc = worker_sandbox_spawn(&spec, &sb, err, sizeof(err));
	if (rc < 0) {
		sodium_memzero(turn, turn_len);
		free(turn);
		snprintf(msg, sizeof(msg), "The sandbox could not be started: %s", err);
		io_end_error(io, PROTO_ERR_INTERNAL, msg, "internal error");
		goto out;
	}
	have_sb = 1;
	rn_hist_observe(io->m->sandbox_start, (double)(rn_mono_us() - t0) / 1e6);
	strv_free(&envv);
	rn_log_info(run->run_id, "agent_started", "pid %ld, %s start, runtime cap %" PRId64 " s", (long)sb.pid,
	            warm ? "warm" : "cold", cap_sec);

	/* 5: agent I/O until it ends. */
	end_t end = agent_loop(io, &sb, turn, turn_len, run->claimed_mono_ms + cap_sec * 1000);
	free(turn);
	if (sb.stdin_fd >= 0) {
		close(sb.stdin_fd);
		sb.stdin_fd = -1;
	}
	worker_sandbox_destroy(&sb);
	have_sb = 0;
	io_flush(io);
	rn_log_debug(run->run_id, "run_phase", "agent done at +%" PRId64 " ms", rn_mono_ms() - run->claimed_mono_ms);

	/* 6: the terminal line. */
	switch (end) {
	case END_CANCEL:
		worker_run_cancel_message(run->cancel_reason, msg, sizeof(msg));
		io_end_error(io, PROTO_ERR_CANCELLED, msg, "the run was cancelled");
		break;
	case END_CAP:
		snprintf(msg, sizeof(msg), "The run reached its runtime cap of %" PRId64 " seconds and was stopped.", cap_sec);
		io_end_error(io, PROTO_ERR_RUNTIME_CAP, msg, "the run reached its runtime cap");
		break;
	case END_SHUTDOWN:
		io_end_error(io, PROTO_ERR_WORKER_SHUTDOWN, "The worker shut down before the run finished.",
		             "the worker shut down");
		break;
	case END_LOST:
		snprintf(run->outcome, sizeof(run->outcome), "worker_lost");
		rn_log_warn(run->run_id, "run_lost", "the lease was lost; stopped without a terminal line");
		break;
	case END_INTERNAL:
		io_end_error(io, PROTO_ERR_INTERNAL, "The worker failed while running the run.", "internal error");
		break;
	case END_EXITED:
	case END_NONE:
		if (io->held && io->held_is_result) {
			size_t nfiles = 0, nskipped = 0;
			worker_stop_t st = run_stop_of(run);
			/* Never upload after a cancel.  A drain timeout before the upload
			 * lets a result without files out; an upload it interrupts ends
			 * the run worker_shutdown. */
			if (st == WORKER_STOP_CANCEL || st == WORKER_STOP_LOST) {
				end_if_stopped(io);
				break;
			}
			if (run->job.otp_upload) {
				worker_wb_limits_t wb_lim = { .abort_flag = &run->abort_flag };
				if (worker_writeback_upload(run->job.agent_url, run->job.otp_upload, ws.assets,
				                            &wb_lim, &nfiles, &nskipped, err, sizeof(err)) < 0) {
					/* A stop during the upload: cancelled / worker_shutdown /
					 * lost, never a result (the upload did not finish). */
					if (end_if_stopped(io))
						break;
					snprintf(msg, sizeof(msg), "Uploading the run's files failed: %s", err);
					io_end_error(io, PROTO_ERR_WRITEBACK_FAILED, msg, "writeback failed");
					break;
				}
				if (nfiles)
					rn_log_info(run->run_id, "writeback", "uploaded %zu file(s), skipped %zu", nfiles, nskipped);
			}
			proto_env_close_steps(io->env, rn_now_ms(), "the run ended", emit_cb, io);
			if (io_finish(io, io->held, io->held_len, "succeeded", "") >= 0) {
				snprintf(run->outcome, sizeof(run->outcome), "succeeded");
				rn_log_info(run->run_id, "run_ended", "succeeded");
			}
		} else if (io->held) {
			proto_env_close_steps(io->env, rn_now_ms(), "the run ended with an error", emit_cb, io);
			if (io_finish(io, io->held, io->held_len, "failed", io->held_code) >= 0) {
				snprintf(run->outcome, sizeof(run->outcome), "agent_error");
				rn_log_info(run->run_id, "run_ended", "agent error %s", io->held_code);
			}
		} else {
			char how[96];
			describe_exit(sb.status, how, sizeof(how));
			if (boot.setup_script && WIFEXITED(sb.status) &&
			    WEXITSTATUS(sb.status) == WORKER_SANDBOX_SETUP_FAILED) {
				snprintf(msg, sizeof(msg), "The setup script failed (the sandbox %s), so the agent did not run.", how);
				io_end_error(io, PROTO_ERR_BOOTSTRAP_FAILED, msg, "the setup script failed");
			} else {
				snprintf(msg, sizeof(msg), "The agent %s without a result.", how);
				io_end_error(io, PROTO_ERR_AGENT_EXIT, msg, "the agent exited");
			}
		}
		break;
	}

out:
	if (have_sb)
		worker_sandbox_destroy(&sb);
	worker_warm_free(warm, 1);   /* its run directory is ws, removed below */
	strv_free(&envv);
	strv_free(&argv);
	strv_free(&binds);
	worker_boot_clear(&boot);
	if (have_ws && worker_ws_remove(&ws) < 0)
		rn_log_warn(run->run_id, "workspace_remove", "could not remove %s", ws.dir);
	rn_log_debug(run->run_id, "run_phase", "cleaned up at +%" PRId64 " ms", rn_mono_ms() - run->claimed_mono_ms);
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
	snprintf(run->outcome, sizeof(run->outcome), "internal");

	if (worker_pub_init(&io.pub, &ctx->cfg->redis, ctx->cfg->key_prefix, run->run_id,
	                    run->claim.seq_base, &ctx->give_up) < 0 ||
	    !(io.env = proto_env_new((size_t)ctx->cfg->line_max))) {
		rn_log_error(run->run_id, "run_internal", "out of memory");
	} else {
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
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	size_t stack = RUN_STACK;
	pthread_attr_setstacksize(&attr, stack);
	int e = pthread_create(&run->thread, &attr, run_main, run);
	pthread_attr_destroy(&attr);
	if (e)
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
	if (run->wake_fd >= 0)
		close(run->wake_fd);
	free(run);
}
