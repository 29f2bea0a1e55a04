/*
 * agent/tools.h - the built-in tools runnel-agent offers the model: bash
 * (a shell command in the workspace, with a timeout and capped output),
 * read_file, write_file and list_files.  File tools are confined: paths
 * resolve beneath the workspace (or, read-only, beneath the skills
 * directory) with openat2(RESOLVE_BENEATH), so "..", absolute symlinks and
 * symlinks that climb out are refused by the kernel, not by string checks.
 */
#ifndef RUNNEL_AGENT_TOOLS_H
#define RUNNEL_AGENT_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct agent_tools_cfg {
	const char *workspace; /* /root/workspace */
	const char *skills;    /* /root/skills (read-only for tools) */
	int64_t bash_timeout_ms;
	size_t output_max; /* bytes of a tool's output the model sees */
} agent_tools_cfg_t;

/* What one tool call produced. */
typedef struct agent_tool_out {
	int ok;
	int stopped;     /* ended by agent_ctl_stop() */
	char *text;      /* what the model is told (owned) */
	json_t *result;  /* the step's result (owned; may be NULL) */
	char error[512]; /* when !ok: the step's error message */
} agent_tool_out_t;

void agent_tool_out_free(agent_tool_out_t *o);

/* The tool definitions (Chat Completions "tools" entries).  New reference. */
json_t *agent_tools_defs(void);
/* 1 when name is one of the built-in tools. */
int agent_tools_has(const char *name);
/* 1 when the tool changes things and needs approval in ask mode. */
int agent_tools_needs_approval(const char *name);
/* Runs a built-in tool.  Always fills out (text set). */
void agent_tools_run(const agent_tools_cfg_t *cfg, const char *name, const json_t *args, agent_tool_out_t *out);

/*
 * Opens path for a file tool: relative paths and absolute ones under the
 * workspace resolve beneath the workspace; absolute ones under the skills
 * directory beneath it (only when !write).  Returns an fd or -1 with errstr
 * ("path \"../x\" is outside the workspace").  flags/mode as for openat.
 * Exposed for the tests.
 */
int agent_tools_open(const agent_tools_cfg_t *cfg, const char *path, int flags, int mode, int write,
                     char *errstr, size_t errstr_size);

#endif
