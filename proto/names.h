/*
 * proto/names.h - the one owner of every name check runnel applies to a
 * name that ends up in a key, a path or an environment: run ids and tenants
 * (proto/keys.h, proto/job.h declare those; they use the rule below), /env variable names, skill names
 * and MCP server names.  Pure functions; any thread.
 */
#ifndef RUNNEL_PROTO_NAMES_H
#define RUNNEL_PROTO_NAMES_H

#include <stddef.h>

#define PROTO_RUN_ID_MAX     64  /* [A-Za-z0-9_-]{1,64} */
#define PROTO_ENV_NAME_MAX   256 /* [A-Za-z_][A-Za-z0-9_]{0,255} */
#define PROTO_SKILL_NAME_MAX 128 /* [A-Za-z0-9_.-]{1,128}, not "." or ".." */
#define PROTO_MCP_NAME_MAX   32  /* [A-Za-z0-9_-]{1,32} */

/* The rule under every check here: 1 when s is 1..max ASCII letters,
 * digits and characters of extra; 0 otherwise (NULL included). */
int proto_name_chars_ok(const char *s, size_t max, const char *extra);

/* 1 when name is a portable environment variable name (a shell can set it
 * and it cannot hold '='), 0 otherwise (NULL included). */
int proto_env_name_valid(const char *name);

/* 1 when name can be a directory under the skills root: no '/', not "." or
 * "..", nothing a shell would expand.  0 otherwise (NULL included). */
int proto_skill_name_valid(const char *name);

/* 1 when name can name an MCP server (it prefixes the server's tool names
 * as "mcp__NAME__tool").  0 otherwise (NULL included). */
int proto_mcp_name_valid(const char *name);

#endif
