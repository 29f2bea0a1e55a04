/*
 * worker/mock_agent.c - runnel-mock-agent, the built-in scripted agent
 * (SPEC §5 {"kind":"mock","script":"..."}).  It reads its turn from stdin as
 * one JSON line, then prints envelope lines on stdout, one flushed write per
 * line, following a fixed script.  Demos and tests use it to exercise every
 * path of the runner without a model.
 *
 * Usage: runnel-mock-agent SCRIPT [ARG]   (or the script as one string,
 * "sleep 5").  A later control line {"type":"cancel"} on stdin ends the
 * script quietly; EOF on stdin is not a cancel.  The "ask" script follows
 * the turn's permission_mode and waits for a {"type":"reply"} line.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/sandbox_layout.h"
#include "common/dynbuf.h"
#include "common/util.h"
#include "proto/agentctl.h"

#define TURN_MAX    (4 * 1024 * 1024) /* bytes of the turn line */
#define CONTROL_MAX 4096              /* bytes of one control line */
#define FILES_MAX   100000
#define FLOOD_MAX   10000000

static int stdin_open = 1; /* 0 after EOF: stop polling it */
static char ctl_buf[CONTROL_MAX];
static size_t ctl_len;

/* Writes all of buf to fd; exits when the reader went away. */
static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			exit(3);
		buf += n;
		len -= (size_t)n;
	}
}

/* Prints obj as one line (steals the reference), adding ts. */
static void emit(json_t *obj)
{
	if (!json_object_get(obj, "ts"))
		json_object_set_new(obj, "ts", json_integer(rn_now_ms()));
	char *s = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!s)
		exit(2);
	size_t len = strlen(s);
	char *line = malloc(len + 1);
	if (!line)
		exit(2);
	memcpy(line, s, len);
	line[len] = '\n';
	write_all(1, line, len + 1);
	free(line);
	free(s);
}

static void emit_log(const char *level, const char *message)
{
	emit(json_pack("{s:s,s:s,s:s}", "type", "log", "level", level, "message", message));
}

static void emit_result(const char *message)
{
	emit(json_pack("{s:s,s:s}", "type", "result", "message", message));
}

static void emit_error(const char *code, const char *message)
{
	emit(json_pack("{s:s,s:s,s:s}", "type", "error", "code", code, "message", message));
}

static void emit_raw(const char *line)
{
	write_all(1, line, strlen(line));
}

/* The last reply line read from stdin, for wait_reply(). */
static proto_agentctl_t last_reply;
static int have_reply;

/* Handles one control line; a cancel ends the agent, a reply is kept. */
static void control_line(const char *line)
{
	proto_agentctl_t c;
	proto_agentctl_parse(line, strlen(line), &c);
	if (c.type == PROTO_AGENTCTL_REPLY) {
		last_reply = c;
		have_reply = 1;
	} else if (c.type == PROTO_AGENTCTL_CANCEL) {
		exit(0);
	}
}

/*
 * Waits ms milliseconds while watching stdin for control lines.  The
 * script's timing does not depend on the runner writing anything.
 */
static void wait_ms(int64_t ms)
{
	int64_t deadline = rn_mono_ms() + ms;
	for (;;) {
		int64_t left = deadline - rn_mono_ms();
		if (left <= 0)
			return;
		if (!stdin_open) {
			struct timespec ts = { (time_t)(left / 1000), (long)(left % 1000) * 1000000L };
			nanosleep(&ts, NULL);
			continue;
		}
		struct pollfd pfd = { 0, POLLIN, 0 };
		int pr = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (pr <= 0)
			continue;
		char tmp[1024];
		ssize_t n = read(0, tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			stdin_open = 0;
			continue;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (tmp[i] == '\n') {
				ctl_buf[ctl_len] = '\0';
				control_line(ctl_buf);
				ctl_len = 0;
			} else if (ctl_len + 1 < sizeof(ctl_buf)) {
				ctl_buf[ctl_len++] = tmp[i];
			}
		}
	}
}

/*
 * Waits for the reply to ask id on stdin (other replies are skipped).
 * 1 with *out, or 0 when stdin closed first.
 */
static int wait_reply(const char *id, proto_agentctl_t *out)
{
	for (;;) {
		if (have_reply) {
			have_reply = 0;
			if (strcmp(last_reply.id, id) == 0) {
				*out = last_reply;
				return 1;
			}
		}
		if (!stdin_open)
			return 0;
		wait_ms(50);
	}
}

/* Reads the turn line from stdin (blocking).  Caller owns the result. */
static json_t *read_turn(void)
{
	rn_dynbuf_t b;
	rn_dynbuf_init(&b, TURN_MAX - 1);
	for (;;) {
		/* One byte at a time: bytes after the newline are control lines. */
		char c;
		ssize_t n = read(0, &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			stdin_open = 0;
			break;
		}
		if (c == '\n')
			break;
		int rc = rn_dynbuf_add(&b, &c, 1);
		if (rc == RN_DYNBUF_OOM)
			exit(2);
		if (rc < 0)
			break; /* past the cap: what was read does not parse */
	}
	json_t *turn = json_loads(b.p ? b.p : "", 0, NULL);
	rn_dynbuf_free(&b);
	return turn;
}

static long parse_count(const char *s, long def, long max)
{
	if (!s || !*s)
		return def;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 0)
		return -1;
	return v > max ? max : v;
}

static void emit_step(const char *id, const char *name, const char *status,
                      int64_t duration_ms)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "type", "step", "id", id, "name", name,
	                      "status", status);
	if (strcmp(status, "running") == 0)
		json_object_set_new(o, "args", json_pack("{s:s}", "script", "demo"));
	else
		json_object_set_new(o, "result", json_pack("{s:b}", "ok", 1));
	if (duration_ms >= 0)
		json_object_set_new(o, "durationMs", json_integer(duration_ms));
	emit(o);
}

/* The final result of a scripted turn: "Done: <prompt>". */
static void emit_done(const char *prompt)
{
	size_t n = strlen(prompt) + 64;
	char *msg = malloc(n);
	if (!msg)
		exit(2);
	snprintf(msg, n, "Done: %s", prompt);
	emit_result(msg);
	free(msg);
}

static void script_demo(const char *prompt)
{
	static const char *const names[] = {
		"recipes/read-workspace.sh",
		"recipes/plan.sh",
		"recipes/apply.sh",
	};
	emit_log("info", "Loaded 3 skills");
	wait_ms(100);
	for (int i = 0; i < 3; i++) {
		char id[32];
		snprintf(id, sizeof(id), "step_%d", i + 1);
		int64_t t0 = rn_mono_ms();
		emit_step(id, names[i], "running", -1);
		wait_ms(200);
		emit_step(id, names[i], "succeeded", rn_mono_ms() - t0);
		wait_ms(100);
	}
	emit_done(prompt);
}

/* The agent writes into its workspace's assets/ folder. */
static void script_files(long n)
{
	char dir[PATH_MAX];
	struct stat st;
	if (stat(RN_SANDBOX_WORKSPACE, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(dir, sizeof(dir), RN_SANDBOX_WORKSPACE "/assets");
	else
		snprintf(dir, sizeof(dir), "assets");
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		emit_error("agent_error", "cannot create assets/");
		return;
	}
	for (long i = 0; i < n; i++) {
		char path[PATH_MAX + 32], body[64];
		snprintf(path, sizeof(path), "%s/file_%ld.txt", dir, i);
		int len = snprintf(body, sizeof(body), "file %ld\n", i);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0) {
			emit_error("agent_error", "cannot write into assets/");
			return;
		}
		write_all(fd, body, (size_t)len);
		close(fd);
	}
	char msg[64];
	snprintf(msg, sizeof(msg), "wrote %ld files", n);
	emit_result(msg);
}

static void script_garbage(void)
{
	emit_raw("this is not json\n");
	emit_raw("{\"type\":\"shout\",\"message\":\"unknown type\"}\n");
	emit_raw("{\"type\":\"log\",\"level\":\"info\"}\n");
	emit_raw("{\"type\":\"step\",\"status\":\"running\"}\n");
	emit_raw("[1,2,3]\n");
	/* A line of 2 MB: over the 1 MiB cap. */
	size_t big = 2u * 1024u * 1024u;
	char *line = malloc(big + 64);
	if (!line)
		exit(2);
	size_t off = (size_t)snprintf(line, 64, "{\"type\":\"log\",\"level\":\"info\",\"message\":\"");
	memset(line + off, 'x', big);
	off += big;
	memcpy(line + off, "\"}\n", 3);
	write_all(1, line, off + 3);
	free(line);
	/* Invalid UTF-8 inside a string. */
	emit_raw("{\"type\":\"log\",\"level\":\"info\",\"message\":\"bad \xff\xfe bytes\"}\n");
	emit_result("garbage done");
}

/*
 * A tool that needs permission: a step, then (permission_mode ask) an ask
 * line and its reply on stdin, or (deny) a refusal, or (bypass) nothing;
 * the step succeeds or fails and the run ends with a result either way.
 */
static void script_ask(json_t *turn, const char *prompt)
{
	const char *mode = json_string_value(json_object_get(turn, "permission_mode"));
	if (!mode)
		mode = "bypass";
	int64_t t0 = rn_mono_ms();
	emit_log("info", "Planning");
	emit(json_pack("{s:s,s:s,s:s,s:s,s:{s:s}}", "type", "step", "id", "step_1", "name", "Bash",
	               "status", "running", "args", "command", "mkdir -p assets"));
	const char *why = NULL;
	char whybuf[160];
	if (strcmp(mode, "ask") == 0) {
		emit(json_pack("{s:s,s:s,s:s,s:s,s:s,s:{s:s},s:[{s:s,s:s},{s:s,s:s}],s:s}",
		               "type", "ask", "id", "ask_1", "kind", "permission",
		               "title", "Run: mkdir -p assets", "tool", "Bash",
		               "args", "command", "mkdir -p assets",
		               "options", "id", "allow_once", "label", "Allow", "id", "reject_once", "label", "Reject",
		               "status", "open"));
		static proto_agentctl_t r;
		if (!wait_reply("ask_1", &r))
			why = "no reply (stdin closed)";
		else if (r.expired)
			why = "the permission request expired";
		else if (r.has_option && strcmp(r.option, "allow_once") == 0)
			why = NULL;
		else if (r.reject || r.has_option)
			why = "the user rejected the tool call";
		else {
			snprintf(whybuf, sizeof(whybuf), "the user answered instead: %.100s", r.text);
			why = whybuf;
		}
	} else if (strcmp(mode, "deny") == 0) {
		why = "permission_mode deny refuses tool calls";
	}
	if (why) {
		emit(json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "type", "step", "id", "step_1", "name", "Bash",
		               "status", "failed", "error", why, "durationMs", (json_int_t)(rn_mono_ms() - t0)));
		emit_result("Finished without running the tool");
		return;
	}
	emit(json_pack("{s:s,s:s,s:s,s:s,s:{s:b},s:I}", "type", "step", "id", "step_1", "name", "Bash",
	               "status", "succeeded", "result", "ok", 1, "durationMs", (json_int_t)(rn_mono_ms() - t0)));
	emit_done(prompt);
}

static void usage_error(const char *script)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "the mock agent has no script \"%.64s\"", script);
	emit_error("unknown_script", msg);
}

int main(int argc, char **argv)
{
	/* A vanished reader ends the agent through write_all(), not a signal. */
	signal(SIGPIPE, SIG_IGN);

	char script[256] = "";
	size_t off = 0;
	for (int i = 1; i < argc; i++) {
		int n = snprintf(script + off, sizeof(script) - off, "%s%s", i > 1 ? " " : "", argv[i]);
		if (n < 0 || (size_t)n >= sizeof(script) - off) {
			script[0] = '\0';
			break;
		}
		off += (size_t)n;
	}
	char name[64] = "", arg[64] = "";
	const char *sp = strchr(script, ' ');
	if (sp) {
		snprintf(name, sizeof(name), "%.*s", (int)(sp - script), script);
		while (*sp == ' ')
			sp++;
		snprintf(arg, sizeof(arg), "%s", sp);
	} else {
		snprintf(name, sizeof(name), "%.63s", script);
	}

	json_t *turn = read_turn();
	const char *prompt = json_string_value(json_object_get(turn, "prompt"));
	if (!prompt)
		prompt = "";

	/* The scripts that take a count: its default and its largest value. */
	static const struct {
		const char *name;
		long def, max;
	} counted[] = {
		{ "sleep", 1, 86400 },
		{ "flood", 1000, FLOOD_MAX },
		{ "files", 3, FILES_MAX },
		{ "exit", 1, 255 },
	};
	long count = 0;
	for (size_t i = 0; i < sizeof(counted) / sizeof(counted[0]); i++)
		if (strcmp(name, counted[i].name) == 0)
			count = parse_count(arg, counted[i].def, counted[i].max);

	int rc = 0;
	if (count < 0) {
		usage_error(script);
	} else if (strcmp(name, "demo") == 0) {
		script_demo(prompt);
	} else if (strcmp(name, "echo") == 0) {
		emit_result(prompt);
	} else if (strcmp(name, "error") == 0) {
		emit_error("agent_error", "the mock agent failed on purpose");
	} else if (strcmp(name, "sleep") == 0) {
		emit_log("info", "sleeping");
		wait_ms((int64_t)count * 1000);
		emit_result("slept");
	} else if (strcmp(name, "flood") == 0) {
		char line[128];
		for (long i = 0; i < count; i++) {
			int len = snprintf(line, sizeof(line),
			                   "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"line %ld\"}\n", i);
			write_all(1, line, (size_t)len);
		}
		emit_result("flood done");
	} else if (strcmp(name, "hang") == 0) {
		/* Ignores SIGTERM so the runner's SIGKILL path is exercised. */
		signal(SIGTERM, SIG_IGN);
		emit_log("info", "hanging");
		for (;;)
			pause();
	} else if (strcmp(name, "files") == 0) {
		script_files(count);
	} else if (strcmp(name, "garbage") == 0) {
		script_garbage();
	} else if (strcmp(name, "after-terminal") == 0) {
		emit_result("first and only result");
		emit_log("info", "printed after the terminal line");
		emit_result("a second result");
	} else if (strcmp(name, "exit") == 0) {
		emit_log("info", "exiting without a terminal line");
		rc = (int)count;
	} else if (strcmp(name, "stderr") == 0) {
		const char msg[] = "a line on stderr\nanother line on stderr\n";
		write_all(2, msg, sizeof(msg) - 1);
		/* stdout and stderr are separate pipes: give the runner time to
		 * read stderr before the terminal line arrives on stdout. */
		wait_ms(200);
		emit_result("wrote to stderr");
	} else if (strcmp(name, "stderr-race") == 0) {
		/* stderr right before the result, no pause: both pipes are often
		 * readable in the same poll round of the runner. */
		const char msg[] = "to stderr\n";
		write_all(2, msg, sizeof(msg) - 1);
		emit_result("done");
	} else if (strcmp(name, "ask") == 0) {
		script_ask(turn, prompt);
	} else if (strcmp(name, "open-step") == 0) {
		emit(json_pack("{s:s,s:s,s:s,s:s}", "type", "step", "id", "step_open",
		               "name", "recipes/never-finishes.sh", "status", "running"));
		emit_result("ended with a step still running");
	} else if (strcmp(name, "open-step-exit") == 0) {
		emit(json_pack("{s:s,s:s,s:s,s:s}", "type", "step", "id", "step_open",
		               "name", "recipes/never-finishes.sh", "status", "running"));
		rc = 0;
	} else {
		usage_error(script);
	}
	json_decref(turn);
	return rc;
}
