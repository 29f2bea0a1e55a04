/*
 * agent/mcp.c - the MCP client over stdio and streamable HTTP (see mcp.h).
 */
#include "agent/mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "agent/ctl.h"
#include "agent/emit.h"
#include "agent/http.h"
#include "agent/sse.h"
#include "proto/names.h"
#include "common/io.h"
#include "common/strv.h"
#include "common/dynbuf.h"
#include "common/util.h"

extern char **environ;

#define MCP_PROTOCOL    "2025-03-26"
#define MCP_LINE_MAX    (16 * 1024 * 1024)
#define MCP_SERVERS_MAX 32
#define MCP_TOOLS_MAX   1024
#define MCP_STEP_MAX    4096

typedef struct mcp_server {
	char name[33];
	int http;
	/* stdio */
	pid_t pid;
	int to_fd, from_fd;
	rn_dynbuf_t rbuf; /* stdout read ahead: under MCP_LINE_MAX plus a read */
	/* http */
	char *url;
	struct curl_slist *headers;
	char session[256];
	char version[32];
	int next_id;
} mcp_server_t;

typedef struct mcp_tool {
	char exposed[65];
	char *tool;
	int server;
} mcp_tool_t;

struct agent_mcp {
	mcp_server_t servers[MCP_SERVERS_MAX];
	int nservers;
	mcp_tool_t *tools;
	int ntools;
	json_t *defs;
	int64_t timeout_ms;
};

/* ------------------------------------------------------------------ stdio */

static int mcp_fork(mcp_server_t *s, const char *cmd, char **argv, char **envp, const char *cwd, char *errstr,
                    size_t errstr_size);

static int stdio_spawn(mcp_server_t *s, const json_t *cfg, const char *cwd, char *errstr, size_t errstr_size)
{
	const char *cmd = json_string_value(json_object_get(cfg, "command"));
	const json_t *args = json_object_get(cfg, "args");
	const json_t *env = json_object_get(cfg, "env");
	size_t nargs = json_is_array(args) ? json_array_size(args) : 0;
	/* A line over MCP_LINE_MAX is refused; one read may come on top. */
	rn_dynbuf_init(&s->rbuf, (size_t)MCP_LINE_MAX + 65536);
	if (!cmd || !*cmd) {
		snprintf(errstr, errstr_size, "it has neither a command nor a url");
		return -1;
	}
	if (nargs > 256) {
		snprintf(errstr, errstr_size, "it has more than 256 args");
		return -1;
	}
	rn_strv_t av = { 0 }, envv = { 0 };
	rn_strv_add(&av, cmd);
	for (size_t i = 0; i < nargs; i++) {
		const char *a = json_string_value(json_array_get(args, i));
		if (!a) {
			rn_strv_free(&av);
			snprintf(errstr, errstr_size, "its args must be strings");
			return -1;
		}
		rn_strv_add(&av, a);
	}
	/* The child's environment is built here: after fork() only
	 * async-signal-safe calls are allowed (the control reader is a thread
	 * that may hold malloc's lock).  Ours, with the server's "env" set
	 * over it. */
	for (size_t i = 0; environ[i]; i++)
		rn_strv_add(&envv, environ[i]);
	const char *ek;
	const json_t *ev;
	json_object_foreach((json_t *)env, ek, ev)
	{
		if (json_is_string(ev) && *ek && !strchr(ek, '='))
			rn_strv_setenv(&envv, ek, json_string_value(ev));
	}
	int rc = -1;
	if (av.oom || envv.oom)
		snprintf(errstr, errstr_size, "out of memory");
	else
		rc = mcp_fork(s, cmd, av.v, envv.v, cwd, errstr, errstr_size);
	rn_strv_free(&av);
	rn_strv_free(&envv);
	return rc;
}

static int mcp_fork(mcp_server_t *s, const char *cmd, char **argv, char **envp, const char *cwd, char *errstr,
                    size_t errstr_size)
{
	int in[2], out[2], rep[2];
	if (pipe2(in, O_CLOEXEC) < 0) {
		snprintf(errstr, errstr_size, "%s", strerror(errno));
		return -1;
	}
	if (pipe2(out, O_CLOEXEC) < 0) {
		close(in[0]);
		close(in[1]);
		snprintf(errstr, errstr_size, "%s", strerror(errno));
		return -1;
	}
	/* The exec-report pipe: closed on a successful exec, carries errno
	 * otherwise, so "no such command" is told, not guessed. */
	if (pipe2(rep, O_CLOEXEC) < 0) {
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		snprintf(errstr, errstr_size, "%s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (cwd && chdir(cwd) < 0) {
			/* Start where we are. */
		}
		execvpe(cmd, argv, envp);
		int e = errno;
		ssize_t w = write(rep[1], &e, sizeof(e));
		(void)w;
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(rep[1]);
	if (pid < 0) {
		close(in[1]);
		close(out[0]);
		close(rep[0]);
		snprintf(errstr, errstr_size, "%s", strerror(errno));
		return -1;
	}
	setpgid(pid, pid);
	int e = 0;
	ssize_t r;
	do
		r = read(rep[0], &e, sizeof(e));
	while (r < 0 && errno == EINTR);
	close(rep[0]);
	s->pid = pid;
	s->to_fd = in[1];
	s->from_fd = out[0];
	if (r == (ssize_t)sizeof(e)) {
		snprintf(errstr, errstr_size, "%.100s: %s", cmd, strerror(e));
		return -1;
	}
	fcntl(s->from_fd, F_SETFL, O_NONBLOCK);
	return 0;
}

static int stdio_send(mcp_server_t *s, json_t *msg)
{
	char *t = json_dumps(msg, JSON_COMPACT);
	if (!t)
		return -1;
	size_t n = strlen(t);
	t[n] = '\0';
	int rc = rn_write_all(s->to_fd, t, n, RN_IO_WAIT);
	if (rc == 0)
		rc = rn_write_all(s->to_fd, "\n", 1, RN_IO_WAIT);
	free(t);
	return rc;
}

/*
 * Reads lines until the answer to id.  Requests from the server (ping and
 * anything we do not offer) are answered; notifications are dropped.
 */
static json_t *stdio_wait(mcp_server_t *s, json_int_t id, int64_t deadline, int *stopped, char *errstr,
                          size_t errstr_size)
{
	for (;;) {
		/* A whole line already buffered? */
		char *nl = s->rbuf.len ? memchr(s->rbuf.p, '\n', s->rbuf.len) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - s->rbuf.p);
			json_t *o = json_loadb(s->rbuf.p, n, 0, NULL);
			rn_dynbuf_consume(&s->rbuf, n + 1);
			if (!json_is_object(o)) {
				json_decref(o);
				continue; /* stray output: not ours to judge */
			}
			const json_t *jid = json_object_get(o, "id");
			const char *method = json_string_value(json_object_get(o, "method"));
			if (method && jid) {
				json_t *ans = !strcmp(method, "ping")
				        ? json_pack("{s:s,s:O,s:{}}", "jsonrpc", "2.0", "id", jid, "result")
				        : json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", jid, "error",
				                    "code", -32601, "message", "not supported");
				if (ans)
					stdio_send(s, ans);
				json_decref(ans);
				json_decref(o);
				continue;
			}
			if (json_is_integer(jid) && json_integer_value(jid) == id)
				return o;
			json_decref(o);
			continue;
		}
		if (s->rbuf.len >= MCP_LINE_MAX) {
			snprintf(errstr, errstr_size, "it sent a line over %d bytes", MCP_LINE_MAX);
			return NULL;
		}
		if (agent_ctl_stopped()) {
			*stopped = 1;
			snprintf(errstr, errstr_size, "stopped");
			return NULL;
		}
		int64_t left = deadline - rn_mono_ms();
		if (left <= 0) {
			snprintf(errstr, errstr_size, "it did not answer in time");
			return NULL;
		}
		struct pollfd fds[2] = { { s->from_fd, POLLIN, 0 }, { agent_ctl_stop_fd(), POLLIN, 0 } };
		poll(fds, 2, left > 1000 ? 1000 : (int)left);
		if (fds[0].revents) {
			char chunk[65536];
			ssize_t r = read(s->from_fd, chunk, sizeof(chunk));
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				snprintf(errstr, errstr_size, "it exited");
				return NULL;
			}
			if (r > 0 && rn_dynbuf_add(&s->rbuf, chunk, (size_t)r) < 0) {
				snprintf(errstr, errstr_size, "out of memory");
				return NULL;
			}
		}
	}
}

/* ------------------------------------------------------------------- http */

typedef struct http_call {
	mcp_server_t *s;
	CURL *easy;
	json_int_t id;
	json_t *answer;
	agent_sse_t sse;
	int is_sse;
	long status;
	rn_dynbuf_t body; /* a JSON answer, at most MCP_LINE_MAX bytes */
} http_call_t;

static int http_event(void *arg, const char *event, const char *data, size_t len)
{
	http_call_t *c = arg;
	json_t *o = json_loadb(data, len, 0, NULL);
	const json_t *jid = json_object_get(o, "id");
	if (json_is_object(o) && json_is_integer(jid) && json_integer_value(jid) == c->id &&
	    !json_object_get(o, "method")) {
		c->answer = o;
		return 1;
	}
	json_decref(o);
	return 0;
}

static size_t http_header(char *buf, size_t size, size_t n, void *arg)
{
	http_call_t *c = arg;
	size_t len = size * n;
	agent_http_touch();
	if (len > 15 && !strncasecmp(buf, "Mcp-Session-Id:", 15)) {
		const char *v = buf + 15;
		size_t vl = len - 15;
		while (vl > 0 && (*v == ' ' || *v == '\t')) {
			v++;
			vl--;
		}
		while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		if (vl < sizeof(c->s->session)) {
			memcpy(c->s->session, v, vl);
			c->s->session[vl] = '\0';
		}
	} else if (len > 13 && !strncasecmp(buf, "Content-Type:", 13)) {
		c->is_sse = !!memmem(buf, len, "event-stream", 12);
	}
	return len;
}

static size_t http_body(char *buf, size_t size, size_t n, void *arg)
{
	http_call_t *c = arg;
	size_t len = size * n;
	agent_http_touch();
	if (c->is_sse) {
		if (agent_sse_feed(&c->sse, buf, len) != 0) {
			agent_http_abort();
			return 0;
		}
		return len;
	}
	if (rn_dynbuf_add(&c->body, buf, len) < 0)
		return 0;
	return len;
}

/* POSTs msg; for a request (id >= 0) returns the answer. */
static json_t *http_post(mcp_server_t *s, json_t *msg, json_int_t id, int64_t timeout_ms, int *stopped,
                         char *errstr, size_t errstr_size)
{
	char *body = json_dumps(msg, JSON_COMPACT);
	if (!body) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	http_call_t c;
	memset(&c, 0, sizeof(c));
	c.s = s;
	c.id = id;
	rn_dynbuf_init(&c.body, MCP_LINE_MAX);
	agent_sse_init(&c.sse, MCP_LINE_MAX, http_event, &c);
	struct curl_slist *h = NULL;
	for (struct curl_slist *p = s->headers; p; p = p->next)
		h = curl_slist_append(h, p->data);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Accept: application/json, text/event-stream");
	h = curl_slist_append(h, "Expect:");
	char line[512];
	if (s->session[0]) {
		snprintf(line, sizeof(line), "Mcp-Session-Id: %s", s->session);
		h = curl_slist_append(h, line);
	}
	if (s->version[0]) {
		snprintf(line, sizeof(line), "MCP-Protocol-Version: %s", s->version);
		h = curl_slist_append(h, line);
	}
	CURL *e = curl_easy_init();
	json_t *answer = NULL;
	if (!e) {
		snprintf(errstr, errstr_size, "out of memory");
		goto out;
	}
	c.easy = e;
	curl_easy_setopt(e, CURLOPT_URL, s->url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, http_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, &c);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &c);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	char terr[256];
	agent_http_rc_t hr = agent_http_perform(e, timeout_ms, terr, sizeof(terr));
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &c.status);
	curl_easy_cleanup(e);
	if (hr == AGENT_HTTP_STOPPED) {
		*stopped = 1;
		snprintf(errstr, errstr_size, "stopped");
		goto out;
	}
	if (hr == AGENT_HTTP_IDLE) {
		snprintf(errstr, errstr_size, "it did not answer within %lld s", (long long)(timeout_ms / 1000));
		goto out;
	}
	if (hr != AGENT_HTTP_OK) {
		snprintf(errstr, errstr_size, "%s", terr);
		goto out;
	}
	if (c.status >= 400) {
		snprintf(errstr, errstr_size, "it answered HTTP %ld", c.status);
		goto out;
	}
	if (id < 0)
		goto out; /* a notification: 202 and no body */
	if (c.is_sse) {
		if (!c.answer)
			agent_sse_finish(&c.sse);
		answer = c.answer;
		c.answer = NULL;
	} else if (c.body.len) {
		answer = json_loadb(c.body.p, c.body.len, 0, NULL);
	}
	if (!json_is_object(answer)) {
		json_decref(answer);
		answer = NULL;
		snprintf(errstr, errstr_size, "it sent no answer to request %lld", (long long)id);
	}
out:
	json_decref(c.answer);
	agent_sse_free(&c.sse);
	rn_dynbuf_free(&c.body);
	curl_slist_free_all(h);
	free(body);
	return answer;
}

/* ------------------------------------------------------------- JSON-RPC */

/* One request; returns its result (new reference) or NULL with errstr.
 * Steals params. */
static json_t *rpc(agent_mcp_t *m, mcp_server_t *s, const char *method, json_t *params, int *stopped,
                   char *errstr, size_t errstr_size)
{
	json_int_t id = ++s->next_id;
	json_t *msg = json_pack("{s:s,s:I,s:s,s:o}", "jsonrpc", "2.0", "id", id, "method", method, "params",
	                        params ? params : json_object());
	if (!msg) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	json_t *ans;
	if (s->http) {
		ans = http_post(s, msg, id, m->timeout_ms, stopped, errstr, errstr_size);
	} else if (stdio_send(s, msg) < 0) {
		snprintf(errstr, errstr_size, "it closed its input");
		ans = NULL;
	} else {
		ans = stdio_wait(s, id, rn_mono_ms() + m->timeout_ms, stopped, errstr, errstr_size);
		if (!ans && !strncmp(errstr, "it did not answer", 17))
			snprintf(errstr, errstr_size, "it did not answer within %lld s", (long long)(m->timeout_ms / 1000));
	}
	json_decref(msg);
	if (!ans)
		return NULL;
	const json_t *err = json_object_get(ans, "error");
	if (err && !json_is_null(err)) {
		const char *em = json_string_value(json_object_get(err, "message"));
		snprintf(errstr, errstr_size, "%.300s", em ? em : "error");
		json_decref(ans);
		return NULL;
	}
	json_t *res = json_object_get(ans, "result");
	if (!json_is_object(res)) {
		snprintf(errstr, errstr_size, "its answer has no result");
		json_decref(ans);
		return NULL;
	}
	json_incref(res);
	json_decref(ans);
	return res;
}

static void notify(agent_mcp_t *m, mcp_server_t *s, const char *method)
{
	json_t *msg = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", method);
	if (!msg)
		return;
	if (s->http) {
		int stopped = 0;
		char err[256];
		json_decref(http_post(s, msg, -1, m->timeout_ms, &stopped, err, sizeof(err)));
	} else {
		stdio_send(s, msg);
	}
	json_decref(msg);
}

static void server_close(mcp_server_t *s)
{
	if (!s->http && s->pid > 0) {
		if (s->to_fd >= 0)
			close(s->to_fd);
		s->to_fd = -1;
		/* Closing stdin is the polite way out; then signals.  After a stop
		 * there is no time for politeness. */
		int status;
		int64_t until = rn_mono_ms() + 300;
		if (agent_ctl_stopped()) {
			kill(-s->pid, SIGKILL);
			kill(s->pid, SIGKILL);
		}
		while (waitpid(s->pid, &status, WNOHANG) == 0) {
			if (rn_mono_ms() >= until) {
				kill(-s->pid, SIGTERM);
				kill(s->pid, SIGTERM);
				until = rn_mono_ms() + 1000;
				for (;;) {
					if (waitpid(s->pid, &status, WNOHANG) != 0)
						goto reaped;
					if (rn_mono_ms() >= until)
						break;
					usleep(10000);
				}
				kill(-s->pid, SIGKILL);
				kill(s->pid, SIGKILL);
				waitpid(s->pid, &status, 0);
				break;
			}
			usleep(5000);
		}
	reaped:
		kill(-s->pid, SIGKILL); /* what it left behind */
		s->pid = 0;
	}
	if (s->to_fd >= 0)
		close(s->to_fd);
	if (s->from_fd >= 0)
		close(s->from_fd);
	s->to_fd = s->from_fd = -1;
	rn_dynbuf_free(&s->rbuf);
	free(s->url);
	s->url = NULL;
	curl_slist_free_all(s->headers);
	s->headers = NULL;
}

/* Turns a tool name into one the Chat Completions API accepts. */
static void exposed_name(const char *server, const char *tool, char *out, size_t size)
{
	snprintf(out, size, "%s__%s", server, tool);
	for (char *p = out; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
		      *p == '-'))
			*p = '_';
}

static int add_tools(agent_mcp_t *m, int si, const json_t *list, char *errstr, size_t errstr_size)
{
	size_t i;
	const json_t *t;
	json_array_foreach(list, i, t)
	{
		const char *tn = json_string_value(json_object_get(t, "name"));
		if (!tn)
			continue;
		if (m->ntools >= MCP_TOOLS_MAX) {
			snprintf(errstr, errstr_size, "more than %d MCP tools", MCP_TOOLS_MAX);
			return -1;
		}
		mcp_tool_t *nt = &m->tools[m->ntools];
		exposed_name(m->servers[si].name, tn, nt->exposed, sizeof(nt->exposed));
		nt->tool = strdup(tn);
		nt->server = si;
		if (!nt->tool)
			return -1;
		const json_t *schema = json_object_get(t, "inputSchema");
		const char *desc = json_string_value(json_object_get(t, "description"));
		json_t *params = json_is_object(schema) ? json_incref((json_t *)schema)
		                                        : json_pack("{s:s}", "type", "object");
		json_t *def = json_pack("{s:s,s:{s:s,s:s,s:o}}", "type", "function", "function", "name", nt->exposed,
		                        "description", desc ? desc : "", "parameters", params);
		json_array_append_new(m->defs, def);
		m->ntools++;
	}
	return 0;
}

static int server_start(agent_mcp_t *m, mcp_server_t *s, int si, const json_t *cfg, const char *cwd,
                        char *errstr, size_t errstr_size)
{
	const char *url = json_string_value(json_object_get(cfg, "url"));
	s->to_fd = s->from_fd = -1;
	if (url) {
		if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
			snprintf(errstr, errstr_size, "its url is not http(s)");
			return -1;
		}
		s->http = 1;
		s->url = strdup(url);
		const char *k;
		const json_t *v;
		json_object_foreach((json_t *)json_object_get(cfg, "headers"), k, v)
		{
			if (!json_is_string(v) || strpbrk(k, ":\r\n") || strpbrk(json_string_value(v), "\r\n"))
				continue;
			char *line = NULL;
			if (asprintf(&line, "%s: %s", k, json_string_value(v)) >= 0) {
				s->headers = curl_slist_append(s->headers, line);
				free(line);
			}
		}
	} else if (stdio_spawn(s, cfg, cwd, errstr, errstr_size) < 0) {
		return -1;
	}
	int stopped = 0;
	json_t *init = rpc(m, s, "initialize",
	                   json_pack("{s:s,s:{},s:{s:s,s:s}}", "protocolVersion", MCP_PROTOCOL, "capabilities",
	                             "clientInfo", "name", "runnel-agent", "version", RUNNEL_VERSION),
	                   &stopped, errstr, errstr_size);
	if (!init)
		return -1;
	const char *ver = json_string_value(json_object_get(init, "protocolVersion"));
	snprintf(s->version, sizeof(s->version), "%s", ver ? ver : MCP_PROTOCOL);
	json_decref(init);
	notify(m, s, "notifications/initialized");
	char cursor[1024] = "";
	for (int page = 0; page < 64; page++) {
		json_t *params = cursor[0] ? json_pack("{s:s}", "cursor", cursor) : json_object();
		json_t *res = rpc(m, s, "tools/list", params, &stopped, errstr, errstr_size);
		if (!res)
			return -1;
		int rc = add_tools(m, si, json_object_get(res, "tools"), errstr, errstr_size);
		const char *next = json_string_value(json_object_get(res, "nextCursor"));
		snprintf(cursor, sizeof(cursor), "%s", next ? next : "");
		json_decref(res);
		if (rc < 0)
			return -1;
		if (!cursor[0])
			break;
	}
	return 0;
}

agent_mcp_t *agent_mcp_start(const json_t *servers, const char *cwd, int64_t timeout_ms)
{
	agent_mcp_t *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->timeout_ms = timeout_ms;
	m->defs = json_array();
	m->tools = calloc(MCP_TOOLS_MAX, sizeof(*m->tools));
	if (!m->defs || !m->tools) {
		agent_mcp_free(m);
		return NULL;
	}
	size_t i;
	const json_t *cfg;
	json_array_foreach(servers, i, cfg)
	{
		if (agent_ctl_stopped())
			break;
		const char *name = json_string_value(json_object_get(cfg, "name"));
		if (!json_is_object(cfg) || !proto_mcp_name_valid(name)) {
			agent_emit_log("warn", "MCP server %zu skipped: its name must be 1-32 of [A-Za-z0-9_-]", i + 1);
			continue;
		}
		if (m->nservers >= MCP_SERVERS_MAX) {
			agent_emit_log("warn", "MCP server \"%s\" skipped: more than %d servers", name, MCP_SERVERS_MAX);
			continue;
		}
		int dup = 0;
		for (int k = 0; k < m->nservers; k++)
			if (!strcmp(m->servers[k].name, name))
				dup = 1;
		if (dup) {
			agent_emit_log("warn", "MCP server \"%s\" skipped: another server has that name", name);
			continue;
		}
		int si = m->nservers;
		mcp_server_t *s = &m->servers[si];
		memset(s, 0, sizeof(*s));
		snprintf(s->name, sizeof(s->name), "%s", name);
		int before = m->ntools;
		size_t defs_before = json_array_size(m->defs);
		char err[512];
		if (server_start(m, s, si, cfg, cwd, err, sizeof(err)) < 0) {
			/* A stop is not the server's fault: no warning then. */
			if (!agent_ctl_stopped())
				agent_emit_log("warn", "MCP server \"%s\" did not start: %s", name, err);
			/* Drop what it had listed before failing. */
			for (int t = before; t < m->ntools; t++)
				free(m->tools[t].tool);
			m->ntools = before;
			while (json_array_size(m->defs) > defs_before)
				json_array_remove(m->defs, json_array_size(m->defs) - 1);
			server_close(s);
			continue;
		}
		m->nservers++;
	}
	return m;
}

int agent_mcp_servers(const agent_mcp_t *m)
{
	return m ? m->nservers : 0;
}

int agent_mcp_tools(const agent_mcp_t *m)
{
	return m ? m->ntools : 0;
}

const json_t *agent_mcp_defs(const agent_mcp_t *m)
{
	return m ? m->defs : NULL;
}

static mcp_tool_t *find(const agent_mcp_t *m, const char *name)
{
	for (int i = 0; m && i < m->ntools; i++)
		if (!strcmp(m->tools[i].exposed, name))
			return &m->tools[i];
	return NULL;
}

int agent_mcp_has(const agent_mcp_t *m, const char *name)
{
	return !!find(m, name);
}

void agent_mcp_call(agent_mcp_t *m, const char *name, const json_t *args, size_t output_max,
                    agent_tool_out_t *out)
{
	memset(out, 0, sizeof(*out));
	mcp_tool_t *t = find(m, name);
	if (!t) {
		snprintf(out->error, sizeof(out->error), "there is no tool \"%.100s\"", name);
		out->text = strdup(out->error);
		return;
	}
	mcp_server_t *s = &m->servers[t->server];
	int stopped = 0;
	char err[512];
	json_t *a = json_is_object(args) ? json_incref((json_t *)args) : json_object();
	json_t *res = rpc(m, s, "tools/call", json_pack("{s:s,s:o}", "name", t->tool, "arguments", a), &stopped,
	                  err, sizeof(err));
	if (!res) {
		out->stopped = stopped;
		snprintf(out->error, sizeof(out->error), "MCP server \"%s\": %.400s", s->name, err);
		out->text = strdup(out->error);
		return;
	}
	/* The text parts joined; other parts named by their type. */
	char *joined = NULL;
	size_t jl = 0;
	FILE *f = open_memstream(&joined, &jl);
	size_t i;
	const json_t *c;
	json_array_foreach(json_object_get(res, "content"), i, c)
	{
		const char *type = json_string_value(json_object_get(c, "type"));
		const char *text = json_string_value(json_object_get(c, "text"));
		if (f) {
			if (i)
				fputc('\n', f);
			if (type && !strcmp(type, "text") && text)
				fputs(text, f);
			else
				fprintf(f, "[%s]", type ? type : "content");
		}
	}
	if (f)
		fclose(f);
	int is_error = json_is_true(json_object_get(res, "isError"));
	out->ok = !is_error;
	out->text = agent_cap_text(joined ? joined : "", jl, output_max);
	char *shown = agent_cap_text(joined ? joined : "", jl, MCP_STEP_MAX);
	out->result = json_pack("{s:s}", "content", shown ? shown : "");
	if (is_error)
		snprintf(out->error, sizeof(out->error), "%.400s", shown ? shown : "the tool reported an error");
	free(shown);
	free(joined);
	json_decref(res);
}

void agent_mcp_free(agent_mcp_t *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->nservers; i++)
		server_close(&m->servers[i]);
	for (int i = 0; m->tools && i < m->ntools; i++)
		free(m->tools[i].tool);
	free(m->tools);
	json_decref(m->defs);
	free(m);
}
