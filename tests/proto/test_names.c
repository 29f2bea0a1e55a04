/*
 * tests/proto/test_names.c - every name check in proto/ against a table of
 * names: run ids, Redis key prefixes, tenants, /env variable names, skill
 * names, MCP server names, each at its length limit and one past it; and
 * the JSON failure words.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/support/check.h"
#include "proto/job.h"
#include "proto/jsonerr.h"
#include "proto/keys.h"
#include "proto/names.h"

typedef struct {
	const char *name;
	int ok;
} name_case_t;

typedef struct {
	const char *what;
	int (*valid)(const char *);
	char fill;
	size_t max;
	const name_case_t *cases;
} name_rule_t;

static const name_case_t run_id_cases[] = {
	{ "a", 1 },
	{ "A-z_0-9", 1 },
	{ "", 0 },
	{ "a b", 0 },
	{ "a.b", 0 },
	{ "a{b}", 0 },
	{ "a:b", 0 },
	{ "a/b", 0 },
	{ "caf\xc3\xa9", 0 },
	{ NULL, 0 },
};

static const name_case_t tenant_cases[] = {
	{ "default", 1 },
	{ "acme.eu-1_x", 1 },
	{ ".", 1 },
	{ "", 0 },
	{ "a b", 0 },
	{ "a/b", 0 },
	{ "a:b", 0 },
	{ "a{b}", 0 },
	{ "caf\xc3\xa9", 0 },
	{ NULL, 0 },
};

static const name_case_t env_cases[] = {
	{ "PATH", 1 },
	{ "_x", 1 },
	{ "a1_B2", 1 },
	{ "_", 1 },
	{ "", 0 },
	{ "1A", 0 },
	{ "A-B", 0 },
	{ "A=B", 0 },
	{ "A B", 0 },
	{ "A.B", 0 },
	{ "A\tB", 0 },
	{ "caf\xc3\xa9", 0 },
	{ NULL, 0 },
};

static const name_case_t skill_cases[] = {
	{ "pdf", 1 },
	{ "my-skill_2.0", 1 },
	{ "...", 1 },
	{ ".hidden", 1 },
	{ "", 0 },
	{ ".", 0 },
	{ "..", 0 },
	{ "a/b", 0 },
	{ "a b", 0 },
	{ "a$b", 0 },
	{ "caf\xc3\xa9", 0 },
	{ NULL, 0 },
};

static const name_case_t mcp_cases[] = {
	{ "github", 1 },
	{ "my-server_2", 1 },
	{ "", 0 },
	{ "a.b", 0 },
	{ "a b", 0 },
	{ "a/b", 0 },
	{ "a__b", 1 },
	{ "caf\xc3\xa9", 0 },
	{ NULL, 0 },
};

static const name_case_t prefix_cases[] = {
	{ "runnel", 1 },
	{ "a.b:c-d_e", 1 },
	{ "", 0 },
	{ "a b", 0 },
	{ "a{", 0 },
	{ NULL, 0 },
};

static const name_rule_t rules[] = {
	{ "run id", proto_run_id_valid, 'r', PROTO_RUN_ID_MAX, run_id_cases },
	{ "key prefix", proto_key_prefix_valid, 'p', PROTO_KEY_PREFIX_MAX, prefix_cases },
	{ "tenant", proto_tenant_valid, 't', PROTO_TENANT_MAX, tenant_cases },
	{ "env name", proto_env_name_valid, 'E', PROTO_ENV_NAME_MAX, env_cases },
	{ "skill", proto_skill_name_valid, 's', PROTO_SKILL_NAME_MAX, skill_cases },
	{ "mcp", proto_mcp_name_valid, 'm', PROTO_MCP_NAME_MAX, mcp_cases },
};

static void test_rule(const name_rule_t *r)
{
	const name_case_t *c;
	char *s;

	for (c = r->cases; c->name; c++)
		TH_CHECK(r->valid(c->name) == c->ok, "%s \"%s\": want %s", r->what, c->name,
		         c->ok ? "valid" : "invalid");
	TH_CHECK(!r->valid(NULL), "%s NULL", r->what);

	s = malloc(r->max + 2);
	if (!s)
		abort();
	memset(s, r->fill, r->max + 1);
	s[r->max] = '\0';
	TH_CHECK(r->valid(s), "%s at its limit (%zu)", r->what, r->max);
	s[r->max] = r->fill;
	s[r->max + 1] = '\0';
	TH_CHECK(!r->valid(s), "%s past its limit (%zu)", r->what, r->max + 1);
	free(s);
}

static void test_json_words(void)
{
	static const struct {
		const char *text;
		const char *words;
	} cases[] = {
		{ "{\"a\":1,\"a\":2}", "duplicate key" },
		{ "{\"a\":\"\xff\"}", "invalid UTF-8" },
		{ "{\"a\":\"\\u0000\"}", "contains a NUL byte" },
		{ "{\"a\":1e999}", "number out of range" },
		{ "{\"a\":", "other" },
		{ "secret-otp", "other" },
	};
	json_error_t jerr;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *v = json_loads(cases[i].text, JSON_REJECT_DUPLICATES, &jerr);
		TH_CHECK(!v, "%s parses", cases[i].text);
		json_decref(v);
		TH_CHECK_STR(cases[i].text, proto_json_error_words(&jerr, "other"), cases[i].words);
	}
}

int main(void)
{
	size_t i;

	for (i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		test_rule(&rules[i]);
	test_json_words();
	return th_done();
}
