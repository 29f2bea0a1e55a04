/*
 * agent/loop.c - the model loop (see loop.h).
 */
#include "agent/loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/answer.h"
#include "agent/ctl.h"
#include "agent/emit.h"
#include "agent/mcp.h"
#include "agent/skills.h"
#include "common/util.h"

#define ARG_SHOWN_MAX 1024 /* bytes of one string argument in a step or ask */
#define TEXT_LOG_MAX  2000
#define HISTORY_MAX   200

typedef enum { PERM_BYPASS,
	       PERM_ASK,
	       PERM_DENY } perm_t;

typedef struct loop {
	const agent_loop_cfg_t *cfg;
	agent_mcp_t *mcp;
	perm_t perm;
	int64_t ask_timeout_ms;
	int steps; /* step ids */
	int asks;  /* ask ids */
	int stopped;
} loop_t;

/* A copy of args fit for the envelope: long strings cut. */
static json_t *shown_args(const json_t *args)
{
	json_t *c = json_deep_copy(args);
	const char *k;
	json_t *v;
	json_object_foreach(c, k, v)
	{
		if (json_is_string(v) && json_string_length(v) > ARG_SHOWN_MAX) {
			char *t = agent_cap_text(json_string_value(v), json_string_length(v), ARG_SHOWN_MAX);
			if (t)
				json_object_set_new(c, k, json_string(t));
			free(t);
		}
	}
	return c;
}

static int needs_approval(const loop_t *l, const char *name)
{
	return agent_tools_needs_approval(name) || agent_mcp_has(l->mcp, name);
}

/* A human title for an ask. */
static void ask_title(const char *name, const json_t *args, char *out, size_t size)
{
	const char *cmd = json_string_value(json_object_get(args, "command"));
	const char *path = json_string_value(json_object_get(args, "path"));
	if (!strcmp(name, "bash") && cmd)
		snprintf(out, size, "Run: %.200s", cmd);
	else if (!strcmp(name, "write_file") && path)
		snprintf(out, size, "Write: %.200s", path);
	else
		snprintf(out, size, "Call: %.200s", name);
	/* Titles are one line. */
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
}

/* 1 allowed, 0 refused (reason set), -1 stopped. */
static int approve(loop_t *l, const char *name, const json_t *args, char *reason, size_t reason_size)
{
	if (l->perm == PERM_BYPASS || !needs_approval(l, name))
		return 1;
	if (l->perm == PERM_DENY) {
		snprintf(reason, reason_size, "refused: the run's permission mode is deny");
		return 0;
	}
	char id[32], title[256];
	snprintf(id, sizeof(id), "ask_%d", ++l->asks);
	ask_title(name, args, title, sizeof(title));
	json_t *ask = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:[{s:s,s:s},{s:s,s:s}],s:s}", "type", "ask", "id", id,
	                        "kind", "permission", "title", title, "tool", name, "args", shown_args(args),
	                        "options", "id", "allow_once", "label", "Allow", "id", "reject_once", "label", "Reject",
	                        "status", "open");
	agent_emit(ask);
	/* The runner expires the ask at ask_timeout_sec and sends a
	 * rejection; our own limit only guards against a runner that never
	 * answers. */
	agent_reply_t r;
	int got = agent_ctl_wait_reply(id, (int)(l->ask_timeout_ms + 5000), &r);
	if (got < 0 && agent_ctl_stopped())
		return -1;
	if (got == 1 && !r.rejected && !strcmp(r.option, "allow_once"))
		return 1;
	if (got == 1 && r.expired)
		snprintf(reason, reason_size, "refused: nobody answered the permission request in time");
	else
		snprintf(reason, reason_size, "refused: the user rejected this tool call");
	return 0;
}

/* Runs one tool call and appends the tool message.  -1 when stopped. */
static int run_call(loop_t *l, const agent_call_t *c, json_t *messages)
{
	char sid[32];
	snprintf(sid, sizeof(sid), "step_%d", ++l->steps);
	const char *name = c->name.p;
	json_error_t jerr;
	json_t *args = json_loadb(c->args.p, c->args.len, 0, &jerr);
	agent_tool_out_t out;
	memset(&out, 0, sizeof(out));
	int64_t start = rn_mono_ms();
	json_t *shown = NULL;
	if (!json_is_object(args)) {
		json_decref(args);
		args = NULL;
		shown = json_object();
		char *raw = agent_cap_text(c->args.p, c->args.len, ARG_SHOWN_MAX);
		json_object_set_new(shown, "raw", json_string(raw ? raw : ""));
		free(raw);
		agent_emit_step_running(sid, name, shown);
		snprintf(out.error, sizeof(out.error), "the tool's arguments are not a JSON object");
		out.text = strdup("error: the arguments are not a JSON object; send them as a JSON object");
	} else {
		shown = shown_args(args);
		char reason[256];
		int ok = approve(l, name, args, reason, sizeof(reason));
		if (ok < 0) {
			json_decref(args);
			json_decref(shown);
			return -1;
		}
		agent_emit_step_running(sid, name, shown);
		start = rn_mono_ms();
		if (!ok) {
			snprintf(out.error, sizeof(out.error), "%s", reason);
			out.text = strdup(reason);
		} else if (agent_tools_has(name)) {
			agent_tools_run(&l->cfg->tools, name, args, &out);
		} else if (agent_mcp_has(l->mcp, name)) {
			agent_mcp_call(l->mcp, name, args, l->cfg->tools.output_max, &out);
		} else {
			snprintf(out.error, sizeof(out.error), "there is no tool \"%.100s\"", name);
			out.text = strdup(out.error);
		}
	}
	if (out.stopped || agent_ctl_stopped()) {
		/* The runner closes the step when it ends the run. */
		agent_tool_out_free(&out);
		json_decref(args);
		json_decref(shown);
		return -1;
	}
	agent_emit_step_done(sid, name, out.ok, shown, json_incref(out.result), out.error, rn_mono_ms() - start);
	json_array_append_new(messages, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", c->id.p, "content", out.text ? out.text : ""));
	agent_tool_out_free(&out);
	json_decref(args);
	json_decref(shown);
	return 0;
}

static json_t *assistant_message(const agent_answer_t *a)
{
	json_t *m = json_pack("{s:s}", "role", "assistant");
	json_object_set_new(m, "content", a->text.p ? json_string(a->text.p) : json_null());
	if (a->ncalls) {
		json_t *calls = json_array();
		for (int i = 0; i < a->ncalls; i++)
			json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", a->calls[i].id.p, "type", "function", "function", "name", a->calls[i].name.p, "arguments", a->calls[i].args.p));
		json_object_set_new(m, "tool_calls", calls);
	}
	return m;
}

/* The conversation's start: system, history, prompt. */
static json_t *first_messages(const json_t *turn, const char *skills_prompt)
{
	json_t *msgs = json_array();
	const char *sys = json_string_value(json_object_get(turn, "system_prompt"));
	if ((sys && *sys) || skills_prompt) {
		char *text = NULL;
		if (asprintf(&text, "%s%s%s", sys ? sys : "", sys && *sys && skills_prompt ? "\n\n" : "",
		             skills_prompt ? skills_prompt : "") >= 0) {
			json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", text));
			free(text);
		}
	}
	size_t i;
	const json_t *h;
	size_t n = json_array_size(json_object_get(turn, "history"));
	json_array_foreach(json_object_get(turn, "history"), i, h)
	{
		/* The caller sends at most its replay limit; keep the last ones. */
		if (n > HISTORY_MAX && i < n - HISTORY_MAX)
			continue;
		const char *role = json_string_value(json_object_get(h, "role"));
		const char *content = json_string_value(json_object_get(h, "content"));
		if (!role || !content || (strcmp(role, "user") && strcmp(role, "assistant")))
			continue;
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", role, "content", content));
	}
	const char *prompt = json_string_value(json_object_get(turn, "prompt"));
	json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", prompt ? prompt : ""));
	return msgs;
}

int agent_loop_run(const agent_loop_cfg_t *cfg, const json_t *turn)
{
	loop_t l;
	memset(&l, 0, sizeof(l));
	l.cfg = cfg;
	const char *pm = json_string_value(json_object_get(turn, "permission_mode"));
	l.perm = (pm && !strcmp(pm, "ask")) ? PERM_ASK : (pm && !strcmp(pm, "deny")) ? PERM_DENY
	                                                                             : PERM_BYPASS;
	json_int_t ats = json_integer_value(json_object_get(turn, "ask_timeout_sec"));
	l.ask_timeout_ms = (ats > 0 && ats < 86400 * 7 ? ats : 600) * 1000;

	const char *model = json_string_value(json_object_get(turn, "model"));
	if (!model || !*model) {
		agent_emit_error("model_error", "The config names no model (set \"model\" in the workspace config)");
		return 1;
	}

	char *skills_prompt = NULL;
	int nskills = agent_skills_scan(cfg->tools.skills, &skills_prompt);
	const json_t *servers = json_object_get(turn, "mcp_servers");
	if (json_array_size(servers) > 0)
		l.mcp = agent_mcp_start(servers, cfg->tools.workspace, cfg->mcp_timeout_ms);
	if (agent_ctl_stopped()) {
		free(skills_prompt);
		agent_mcp_free(l.mcp);
		return 0;
	}
	if (nskills || json_array_size(servers) > 0)
		agent_emit_log("info", "Loaded %d skill%s, %d MCP tool%s", nskills, nskills == 1 ? "" : "s",
		               agent_mcp_tools(l.mcp), agent_mcp_tools(l.mcp) == 1 ? "" : "s");

	json_t *messages = first_messages(turn, skills_prompt);
	free(skills_prompt);
	json_t *tools = agent_tools_defs();
	if (l.mcp)
		json_array_extend(tools, (json_t *)agent_mcp_defs(l.mcp));
	json_t *req = json_pack("{s:s,s:o,s:o,s:s,s:b}", "model", model, "messages", messages, "tools", tools,
	                        "tool_choice", "auto", "stream", 1);

	int rc = 0;
	int answered = 0;
	for (int step = 0; step < cfg->max_steps; step++) {
		char *body = json_dumps(req, JSON_COMPACT);
		if (!body) {
			agent_emit_error("model_error", "out of memory");
			answered = 1;
			break;
		}
		agent_answer_t ans;
		agent_answer_init(&ans);
		char err[1024];
		agent_chat_rc_t cr = agent_chat_complete(&cfg->chat, body, &ans, err, sizeof(err));
		free(body);
		if (cr == AGENT_CHAT_OK && agent_answer_finish(&ans, err, sizeof(err)) < 0)
			cr = AGENT_CHAT_ERROR;
		if (cr != AGENT_CHAT_OK) {
			if (cr == AGENT_CHAT_TIMEOUT)
				agent_emit_error("model_timeout", "%s", err);
			else if (cr == AGENT_CHAT_ERROR)
				agent_emit_error("model_error", "%s", err);
			agent_answer_free(&ans);
			answered = 1;
			break;
		}
		if (ans.ncalls == 0) {
			agent_emit_result(ans.text.p ? ans.text.p : "");
			agent_answer_free(&ans);
			answered = 1;
			break;
		}
		if (ans.text.p && ans.text.len) {
			char *t = agent_cap_text(ans.text.p, ans.text.len, TEXT_LOG_MAX);
			agent_emit_log("info", "%s", t ? t : "");
			free(t);
		}
		json_array_append_new(messages, assistant_message(&ans));
		for (int i = 0; i < ans.ncalls; i++) {
			if (run_call(&l, &ans.calls[i], messages) < 0) {
				l.stopped = 1;
				break;
			}
		}
		agent_answer_free(&ans);
		if (l.stopped) {
			answered = 1;
			break;
		}
	}
	if (!answered && !agent_ctl_stopped())
		agent_emit_error("max_steps", "The model was still calling tools after %d steps (the limit)", cfg->max_steps);
	json_decref(req);
	agent_mcp_free(l.mcp);
	return rc;
}
