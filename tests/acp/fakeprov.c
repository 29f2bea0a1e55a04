/*
 * tests/acp/fakeprov.c - the scripted fake providers (see fakeprov.h), on
 * the loopback server core of tests/support/httpd.h.
 */
#include "tests/acp/fakeprov.h"
#include "tests/support/harness.h"
#include "tests/support/httpd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#define FP_SEEN_MAX (8 * 1024 * 1024) /* bytes of requests kept for fp_seen */

struct fp {
	fp_kind_t kind;
	th_httpd_t *srv;
	char url[64];
	pthread_mutex_t mu;
	char *cmd, *final;
	int status, delay_ms;
	int calls;
	unsigned seq;
	char *seen;
	size_t seen_len;
	struct {
		long long ms;
		char tag[64];
	} tags[FP_TAGS_MAX];
	int ntags;
};

/* Notes the arrival of a model call carrying "[[tag:TAG]]" (fp_tag_ms). */
static void note_tag(fp_t *p, const char *body, size_t len)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	const char *m = memmem(body, len, "[[tag:", 6);
	if (!m)
		return;
	m += 6;
	const char *e = memmem(m, len - (size_t)(m - body), "]]", 2);
	if (!e || e - m >= 64)
		return;
	pthread_mutex_lock(&p->mu);
	if (p->ntags < FP_TAGS_MAX) {
		p->tags[p->ntags].ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
		snprintf(p->tags[p->ntags].tag, sizeof(p->tags[0].tag), "%.*s", (int)(e - m), m);
		p->ntags++;
	}
	pthread_mutex_unlock(&p->mu);
}

long long fp_tag_ms(fp_t *p, const char *tag)
{
	long long ms = -1;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->ntags && ms < 0; i++)
		if (!strcmp(p->tags[i].tag, tag))
			ms = p->tags[i].ms;
	pthread_mutex_unlock(&p->mu);
	return ms;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void remember(fp_t *p, const char *a, size_t n)
{
	pthread_mutex_lock(&p->mu);
	if (p->seen_len + n <= FP_SEEN_MAX) {
		char *s = realloc(p->seen, p->seen_len + n + 1);
		if (s) {
			p->seen = s;
			memcpy(p->seen + p->seen_len, a, n);
			p->seen_len += n;
			p->seen[p->seen_len] = '\0';
		}
	}
	pthread_mutex_unlock(&p->mu);
}

static void answer_json(int fd, int status, const char *body)
{
	th_httpd_writef(fd, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
	                    "Connection: close\r\n\r\n%s",
	                status, status == 200 ? "OK" : "Error", strlen(body), body);
}

static void sse(int fd, const char *event, json_t *data)
{
	char *d = json_dumps(data, JSON_COMPACT);
	json_decref(data);
	if (event)
		th_httpd_writef(fd, "event: %s\ndata: %s\n\n", event, d ? d : "{}");
	else
		th_httpd_writef(fd, "data: %s\n\n", d ? d : "{}");
	free(d);
}

static void sse_head(int fd)
{
	th_httpd_writef(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
	                    "Connection: close\r\n\r\n");
}

/* 1 when some element of array arr (or of its elements' content arrays)
 * has "type" == type. */
static int has_block(const json_t *arr, const char *type)
{
	size_t i, j;
	json_t *m, *b;
	json_array_foreach(arr, i, m)
	{
		const char *t = json_string_value(json_object_get(m, "type"));
		if (t && !strcmp(t, type))
			return 1;
		json_array_foreach(json_object_get(m, "content"), j, b)
		{
			t = json_string_value(json_object_get(b, "type"));
			if (t && !strcmp(t, type))
				return 1;
		}
	}
	return 0;
}

static const char *offered_tool(const json_t *tools, const char *const *names)
{
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		const char *n = json_string_value(json_object_get(t, "name"));
		for (const char *const *w = names; n && *w; w++)
			if (!strcmp(n, *w))
				return *w;
	}
	return NULL;
}

static void anthropic_answer(fp_t *p, int fd, json_t *req, const char *cmd, const char *final, unsigned seq)
{
	static const char *const bash[] = { "Bash", NULL };
	json_t *tools = json_object_get(req, "tools");
	int want_tool = cmd && offered_tool(tools, bash) && !has_block(json_object_get(req, "messages"), "tool_result");
	const char *model = json_string_value(json_object_get(req, "model"));
	const char *text = json_array_size(tools) ? final : "Fake reply.";
	char mid[48], tid[48];
	snprintf(mid, sizeof(mid), "msg_fake_%u", seq);
	snprintf(tid, sizeof(tid), "toolu_fake_%u", seq);
	json_t *usage = json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", 100, "output_tokens", 20,
	                          "cache_creation_input_tokens", 0, "cache_read_input_tokens", 0);
	json_t *block = want_tool ? json_pack("{s:s,s:s,s:s,s:{s:s,s:s}}", "type", "tool_use", "id", tid, "name", "Bash",
	                                      "input", "command", cmd, "description", "Run the scripted command")
	                          : json_pack("{s:s,s:s}", "type", "text", "text", text);
	const char *stop = want_tool ? "tool_use" : "end_turn";
	(void)p;
	if (!json_is_true(json_object_get(req, "stream"))) {
		json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[o],s:s,s:n,s:o}", "id", mid, "type", "message",
		                        "role", "assistant", "model", model ? model : "claude-fake",
		                        "content", block, "stop_reason", stop, "stop_sequence", "usage", usage);
		char *d = json_dumps(msg, JSON_COMPACT);
		answer_json(fd, 200, d ? d : "{}");
		free(d);
		json_decref(msg);
		return;
	}
	sse_head(fd);
	sse(fd, "message_start", json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:O}}", "type", "message_start", "message", "id", mid, "type", "message", "role", "assistant", "model", model ? model : "claude-fake", "content", "stop_reason", "stop_sequence", "usage", usage));
	if (want_tool) {
		sse(fd, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}", "type", "content_block_start", "index", 0, "content_block", "type", "tool_use", "id", tid, "name", "Bash", "input"));
		char *in = json_dumps(json_object_get(block, "input"), JSON_COMPACT);
		sse(fd, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", 0, "delta", "type", "input_json_delta", "partial_json", in ? in : "{}"));
		free(in);
	} else {
		sse(fd, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0, "content_block", "type", "text", "text", ""));
		sse(fd, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", 0, "delta", "type", "text_delta", "text", text));
	}
	sse(fd, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
	sse(fd, "message_delta", json_pack("{s:s,s:{s:s,s:n},s:{s:i}}", "type", "message_delta", "delta", "stop_reason", stop, "stop_sequence", "usage", "output_tokens", 20));
	sse(fd, "message_stop", json_pack("{s:s}", "type", "message_stop"));
	json_decref(block);
	json_decref(usage);
}

static void openai_ev(int fd, const char *type, json_t *obj, int *seqno)
{
	json_object_set_new(obj, "type", json_string(type));
	json_object_set_new(obj, "sequence_number", json_integer((*seqno)++));
	sse(fd, type, obj);
}

static void openai_answer(fp_t *p, int fd, json_t *req, const char *cmd, const char *final, unsigned seq)
{
	static const char *const shells[] = { "exec_command", "shell_command", "shell", NULL };
	const char *tool = cmd ? offered_tool(json_object_get(req, "tools"), shells) : NULL;
	int want_tool = tool && !has_block(json_object_get(req, "input"), "function_call_output");
	const char *model = json_string_value(json_object_get(req, "model"));
	char rid[48], iid[48], cid[48];
	int n = 0;
	(void)p;
	snprintf(rid, sizeof(rid), "resp_fake_%u", seq);
	snprintf(iid, sizeof(iid), "item_fake_%u", seq);
	snprintf(cid, sizeof(cid), "call_fake_%u", seq);
	json_t *base = json_pack("{s:s,s:s,s:i,s:s,s:s,s:[]}", "id", rid, "object", "response", "created_at", 0,
	                         "status", "in_progress", "model", model ? model : "gpt-fake", "output");
	sse_head(fd);
	openai_ev(fd, "response.created", json_pack("{s:O}", "response", base), &n);
	json_t *item;
	if (want_tool) {
		json_t *args_obj = !strcmp(tool, "exec_command") ? json_pack("{s:s}", "cmd", cmd) : !strcmp(tool, "shell_command") ? json_pack("{s:s}", "command", cmd)
		                                                                                                                   : json_pack("{s:[s,s,s]}", "command", "bash", "-lc", cmd);
		char *args = json_dumps(args_obj, JSON_COMPACT);
		json_decref(args_obj);
		item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", iid, "type", "function_call", "status", "in_progress",
		                 "name", tool, "call_id", cid, "arguments", "");
		openai_ev(fd, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", 0, "item", item), &n);
		openai_ev(fd, "response.function_call_arguments.delta",
		          json_pack("{s:s,s:i,s:s}", "item_id", iid, "output_index", 0, "delta", args), &n);
		openai_ev(fd, "response.function_call_arguments.done",
		          json_pack("{s:s,s:i,s:s}", "item_id", iid, "output_index", 0, "arguments", args), &n);
		json_object_set_new(item, "status", json_string("completed"));
		json_object_set_new(item, "arguments", json_string(args));
		free(args);
	} else {
		item = json_pack("{s:s,s:s,s:s,s:s,s:[]}", "id", iid, "type", "message", "status", "in_progress",
		                 "role", "assistant", "content");
		openai_ev(fd, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", 0, "item", item), &n);
		openai_ev(fd, "response.content_part.added",
		          json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[]}}", "item_id", iid, "output_index", 0, "content_index", 0,
		                    "part", "type", "output_text", "text", "", "annotations"),
		          &n);
		openai_ev(fd, "response.output_text.delta",
		          json_pack("{s:s,s:i,s:i,s:s}", "item_id", iid, "output_index", 0, "content_index", 0,
		                    "delta", final),
		          &n);
		openai_ev(fd, "response.output_text.done",
		          json_pack("{s:s,s:i,s:i,s:s}", "item_id", iid, "output_index", 0, "content_index", 0,
		                    "text", final),
		          &n);
		json_t *part = json_pack("{s:s,s:s,s:[]}", "type", "output_text", "text", final, "annotations");
		openai_ev(fd, "response.content_part.done",
		          json_pack("{s:s,s:i,s:i,s:O}", "item_id", iid, "output_index", 0, "content_index", 0,
		                    "part", part),
		          &n);
		json_object_set_new(item, "status", json_string("completed"));
		json_object_set_new(item, "content", json_pack("[o]", part));
	}
	openai_ev(fd, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", 0, "item", item), &n);
	json_object_set_new(base, "status", json_string("completed"));
	json_object_set_new(base, "output", json_pack("[o]", item));
	json_object_set_new(base, "usage", json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", 100, "input_tokens_details", "cached_tokens", 0, "output_tokens", 20, "output_tokens_details", "reasoning_tokens", 0, "total_tokens", 120));
	openai_ev(fd, "response.completed", json_pack("{s:o}", "response", base), &n);
}

static void serve(th_httpd_t *srv, void *arg, int fd, th_http_req_t *req)
{
	fp_t *p = arg;
	remember(p, req->head, strlen(req->head));
	remember(p, req->body, req->body_len);
	const char *route = p->kind == FP_ANTHROPIC ? "/v1/messages" : "/v1/responses";
	size_t pl = strlen(req->path), rl = strlen(route);
	if (!strcmp(req->method, "HEAD")) {
		th_httpd_writef(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
	} else if (strcmp(req->method, "POST") || pl < rl || strcmp(req->path + pl - rl, route)) {
		answer_json(fd, 200, !strcmp(req->method, "GET") ? "{\"data\":[],\"object\":\"list\"}" : "{}");
	} else {
		pthread_mutex_lock(&p->mu);
		char *cmd = p->cmd ? strdup(p->cmd) : NULL;
		char *final = strdup(p->final ? p->final : "Done.");
		int status = p->status, delay = p->delay_ms;
		unsigned seq = ++p->seq;
		p->calls++;
		pthread_mutex_unlock(&p->mu);
		note_tag(p, req->body, req->body_len);
		for (int waited = 0; waited < delay && !th_httpd_stopping(srv); waited += 20)
			sleep_ms(20);
		if (status) {
			answer_json(fd, status, p->kind == FP_ANTHROPIC ? "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"fake provider failure\"}}" : "{\"error\":{\"message\":\"fake provider failure\",\"type\":\"server_error\",\"code\":null}}");
		} else {
			json_t *jreq = json_loadb(req->body, req->body_len, 0, NULL);
			if (p->kind == FP_ANTHROPIC)
				anthropic_answer(p, fd, jreq, cmd, final, seq);
			else
				openai_answer(p, fd, jreq, cmd, final, seq);
			json_decref(jreq);
		}
		free(cmd);
		free(final);
	}
}

fp_t *fp_start(fp_kind_t kind)
{
	fp_t *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind;
	pthread_mutex_init(&p->mu, NULL);
	th_httpd_opts_t o = { serve, p, 1, -1 };
	p->srv = th_httpd_start("fakeprov", &o);
	if (!p->srv) {
		pthread_mutex_destroy(&p->mu);
		free(p);
		return NULL;
	}
	snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", th_httpd_port(p->srv));
	return p;
}

void fp_set(fp_t *p, const fp_script_t *s)
{
	pthread_mutex_lock(&p->mu);
	free(p->cmd);
	free(p->final);
	p->cmd = s->cmd ? strdup(s->cmd) : NULL;
	p->final = s->final ? strdup(s->final) : NULL;
	p->status = s->status;
	p->delay_ms = s->delay_ms;
	pthread_mutex_unlock(&p->mu);
}

const char *fp_url(const fp_t *p)
{
	return p->url;
}

int fp_calls(fp_t *p)
{
	pthread_mutex_lock(&p->mu);
	int n = p->calls;
	pthread_mutex_unlock(&p->mu);
	return n;
}

int fp_seen(fp_t *p, const char *needle)
{
	pthread_mutex_lock(&p->mu);
	int hit = p->seen && memmem(p->seen, p->seen_len, needle, strlen(needle));
	pthread_mutex_unlock(&p->mu);
	return hit;
}

void fp_stop(fp_t *p)
{
	if (!p)
		return;
	int ended = th_httpd_stop(p->srv) == 0;
	pthread_mutex_lock(&p->mu);
	free(p->cmd);
	free(p->final);
	free(p->seen);
	p->cmd = p->final = p->seen = NULL;
	p->seen_len = 0;
	pthread_mutex_unlock(&p->mu);
	if (ended) {
		pthread_mutex_destroy(&p->mu);
		free(p);
	}
	/* else: a connection thread still runs (a client that never sent its
	 * request); the struct is left to it rather than freed under it. */
}
