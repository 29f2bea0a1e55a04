/*
 * worker/agent.c - the adapter registry and what adapters share: string
 * vectors for the launch, the turn line and reply lines of envelope-native
 * agents, the permission mode (see agent.h).
 */
#include "worker/agent.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "common/sandbox_layout.h"
#include "proto/agentctl.h"
#include "proto/names.h"
#include "worker/agent_native.h"

static const worker_agent_ops_t *const agents[] = {
	&worker_agent_command,
	&worker_agent_mock,
	&worker_agent_acp,
	&worker_agent_builtin,
};

#define NAGENTS (sizeof(agents) / sizeof(agents[0]))

/* The tables as the I/O loop calls them (worker_agent_ops_resolve), built
 * once from the constant ones. */
static worker_agent_ops_t resolved[NAGENTS];
static pthread_once_t resolved_once = PTHREAD_ONCE_INIT;

static void resolve_all(void)
{
	for (size_t i = 0; i < NAGENTS; i++)
		worker_agent_ops_resolve(agents[i], &resolved[i]);
}

const worker_agent_ops_t *worker_agent_find(const char *kind)
{
	if (!kind)
		return NULL;
	pthread_once(&resolved_once, resolve_all);
	for (size_t i = 0; i < NAGENTS; i++)
		if (!strcmp(resolved[i].kind, kind))
			return &resolved[i];
	return NULL;
}

const worker_agent_ops_t *worker_agent_warm_kind(const char *name)
{
	if (!name)
		return NULL;
	pthread_once(&resolved_once, resolve_all);
	for (size_t i = 0; i < NAGENTS; i++)
		for (size_t j = 0; (resolved[i].flags & WORKER_AGENT_WARM) && resolved[i].warm_names[j]; j++)
			if (!strcmp(resolved[i].warm_names[j], name))
				return &resolved[i];
	return NULL;
}

void worker_agent_warm_names(char *buf, size_t size)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < NAGENTS; i++)
		for (size_t j = 0; (agents[i]->flags & WORKER_AGENT_WARM) && agents[i]->warm_names[j]; j++) {
			int n = snprintf(buf + off, size - off, "%s%s", off ? ", " : "", agents[i]->warm_names[j]);
			if (n < 0 || (size_t)n >= size - off)
				return;
			off += (size_t)n;
		}
}

const char *worker_agent_kind_of(const json_t *agent)
{
	if (agent)
		return json_string_value(json_object_get(agent, "kind"));
	for (size_t i = 0; i < NAGENTS; i++)
		if (agents[i]->flags & WORKER_AGENT_DEFAULT)
			return agents[i]->kind;
	return NULL;
}

int worker_agent_command_egress(const json_t *agent)
{
	const worker_agent_ops_t *ops = worker_agent_find(worker_agent_kind_of(agent));
	return ops && (ops->flags & WORKER_AGENT_COMMAND_EGRESS);
}

int worker_agent_warm_binds(const worker_config_t *cfg, rn_strv_t *binds)
{
	for (size_t i = 0; i < NAGENTS; i++)
		if (agents[i]->warm_binds && agents[i]->warm_binds(cfg, binds) < 0)
			return -1;
	return 0;
}

void worker_agent_ops_resolve(const worker_agent_ops_t *ops, worker_agent_ops_t *out)
{
	*out = *ops;
	if (!(ops->flags & WORKER_AGENT_NATIVE))
		return;
	if (!out->start)
		out->start = worker_agent_native_start;
	if (!out->on_line)
		out->on_line = worker_agent_native_on_line;
	if (!out->on_reply)
		out->on_reply = worker_agent_native_on_reply;
	if (!out->free)
		out->free = worker_agent_native_free;
}

static char kinds_buf[128];
static pthread_once_t kinds_once = PTHREAD_ONCE_INIT;

static void kinds_build(void)
{
	size_t off = 0;
	for (size_t i = 0; i < NAGENTS && off < sizeof(kinds_buf); i++)
		off += (size_t)snprintf(kinds_buf + off, sizeof(kinds_buf) - off, "%s%s", i ? ", " : "",
		                        agents[i]->kind);
}

const char *worker_agent_kinds(void)
{
	/* Built once from the constant table, whichever run thread asks first. */
	pthread_once(&kinds_once, kinds_build);
	return kinds_buf;
}

void worker_agent_launch_free(worker_agent_launch_t *l)
{
	rn_strv_free(&l->argv);
	rn_strv_free(&l->ro_binds);
	rn_strv_free(&l->env);
}

int worker_agent_launch_argv(worker_agent_launch_t *l, const json_t *argv, char *errstr, size_t errstr_size)
{
	size_t i;
	const json_t *v;
	if (!json_is_array(argv) || json_array_size(argv) == 0 || json_array_size(argv) > 1024) {
		snprintf(errstr, errstr_size, "agent.argv must be a non-empty array of strings");
		return -1;
	}
	json_array_foreach(argv, i, v)
	{
		if (!json_is_string(v) || (i == 0 && !*json_string_value(v))) {
			snprintf(errstr, errstr_size, "agent.argv must be a non-empty array of strings");
			return -1;
		}
		if (rn_strv_add(&l->argv, json_string_value(v)) < 0) {
			snprintf(errstr, errstr_size, "out of memory");
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Envelope-native agents: the turn and the control lines
 * ------------------------------------------------------------------------ */

char *worker_agent_turn_line(const worker_agent_ctx_t *ctx, size_t *lenp)
{
	const worker_boot_t *boot = ctx->boot;
	json_t *skills = json_array();
	size_t i;
	json_t *s;
	json_array_foreach(boot->skills, i, s)
	{
		/* The signed zip_url stays outside the sandbox. */
		json_t *c = json_is_object(s) ? json_deep_copy(s) : NULL;
		if (!c)
			continue;
		json_object_del(c, "zip_url");
		const char *name = json_string_value(json_object_get(c, "name"));
		if (name && proto_skill_name_valid(name)) {
			char path[256];
			snprintf(path, sizeof(path), RN_SANDBOX_SKILLS "/%s", name);
			json_object_set_new(c, "path", json_string(path));
		}
		json_array_append_new(skills, c);
	}
	json_t *t = json_object();
	json_object_set_new(t, "run_id", json_string(ctx->run_id));
	json_object_set_new(t, "prompt", ctx->job->prompt ? json_string(ctx->job->prompt) : json_string(""));
	json_object_set_new(t, "system_prompt", boot->system_prompt ? json_string(boot->system_prompt) : json_null());
	json_object_set_new(t, "model", boot->model ? json_string(boot->model) : json_null());
	json_object_set_new(t, "skills", skills);
	json_object_set_new(t, "mcp_servers", boot->mcp_servers ? json_incref(boot->mcp_servers) : json_array());
	json_object_set_new(t, "history", boot->history ? json_incref(boot->history) : json_array());
	json_object_set_new(t, "permission_mode", json_string(ctx->permission_mode));
	json_object_set_new(t, "ask_timeout_sec", json_integer(ctx->ask_timeout_sec));
	return proto_agentctl_line(t, lenp);
}

char *worker_agent_reply_line(const worker_agent_reply_t *r, size_t *lenp)
{
	return proto_agentctl_reply_line(r->ask_id, r->option, r->option ? NULL : r->text, r->expired, lenp);
}

const char *worker_agent_permission_mode(const worker_boot_t *boot, const proto_job_t *job,
                                         char *errstr, size_t errstr_size)
{
	const json_t *v = boot->config ? json_object_get(boot->config, "permission_mode") : NULL;
	const char *mode = NULL;
	if (v && !json_is_null(v)) {
		mode = json_string_value(v);
		if (!proto_permission_mode_ok(mode)) {
			snprintf(errstr, errstr_size, "permission_mode must be bypass, ask or deny (got %s%.32s%s)",
			         mode ? "\"" : "", mode ? mode : "a non-string", mode ? "\"" : "");
			return NULL;
		}
	} else if (job->permission_mode[0]) {
		mode = job->permission_mode;
	}
	if (!mode || !strcmp(mode, "bypass"))
		return WORKER_PERM_BYPASS;
	return !strcmp(mode, "ask") ? WORKER_PERM_ASK : WORKER_PERM_DENY;
}
