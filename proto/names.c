/*
 * proto/names.c - name checks (see names.h).
 */
#include "proto/names.h"

#include <string.h>

static int is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int proto_name_chars_ok(const char *s, size_t max, const char *extra)
{
	size_t i;

	if (!s)
		return 0;
	for (i = 0; s[i] != '\0'; i++) {
		if (i >= max)
			return 0;
		if (!is_alpha(s[i]) && !is_digit(s[i]) && !strchr(extra, s[i]))
			return 0;
	}
	return i > 0;
}

int proto_env_name_valid(const char *name)
{
	if (!name || (!is_alpha(name[0]) && name[0] != '_'))
		return 0;
	return proto_name_chars_ok(name, PROTO_ENV_NAME_MAX, "_");
}

int proto_skill_name_valid(const char *name)
{
	if (!name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	return proto_name_chars_ok(name, PROTO_SKILL_NAME_MAX, "_-.");
}

int proto_mcp_name_valid(const char *name)
{
	return proto_name_chars_ok(name, PROTO_MCP_NAME_MAX, "_-");
}
