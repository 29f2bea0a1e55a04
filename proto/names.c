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

int proto_env_name_valid(const char *name)
{
	size_t i;

	if (name == NULL || (!is_alpha(name[0]) && name[0] != '_'))
		return 0;
	for (i = 0; name[i] != '\0'; i++) {
		if (i >= PROTO_ENV_NAME_MAX)
			return 0;
		if (!is_alpha(name[i]) && !is_digit(name[i]) && name[i] != '_')
			return 0;
	}
	return 1;
}

int proto_skill_name_valid(const char *name)
{
	size_t i;

	if (name == NULL || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	for (i = 0; name[i] != '\0'; i++) {
		char c = name[i];
		if (i >= PROTO_SKILL_NAME_MAX)
			return 0;
		if (!is_alpha(c) && !is_digit(c) && c != '_' && c != '-' && c != '.')
			return 0;
	}
	return i > 0;
}

int proto_mcp_name_valid(const char *name)
{
	size_t i;

	if (name == NULL)
		return 0;
	for (i = 0; name[i] != '\0'; i++) {
		char c = name[i];
		if (i >= PROTO_MCP_NAME_MAX)
			return 0;
		if (!is_alpha(c) && !is_digit(c) && c != '_' && c != '-')
			return 0;
	}
	return i > 0;
}
