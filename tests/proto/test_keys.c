/*
 * tests/proto/test_keys.c - Redis key names (SPEC §3) and run id minting:
 * format, alphabet, and uniqueness over 10 000 ids.
 */
#include "proto/keys.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

static int cmp_ids(const void *a, const void *b)
{
	return memcmp(a, b, 27);
}

static void test_key_names(void)
{
	char buf[PROTO_KEY_MAX];
	char small[8];
	char id64[65], prefix64[65];

	TH_CHECK(proto_key(buf, sizeof(buf), "runnel", "run_8Jd3kQ", PROTO_KEY_OUT) == 23, "out len");
	TH_CHECK_STR("out", buf, "runnel:{run_8Jd3kQ}:out");
	TH_CHECK(proto_key(buf, sizeof(buf), "runnel", "run_8Jd3kQ", PROTO_KEY_CTL) == 23, "ctl len");
	TH_CHECK_STR("ctl", buf, "runnel:{run_8Jd3kQ}:ctl");
	TH_CHECK(proto_key(buf, sizeof(buf), "my.app:v2", "r-1_x", PROTO_KEY_STATE) == 23, "state len");
	TH_CHECK_STR("state", buf, "my.app:v2:{r-1_x}:state");
	TH_CHECK(proto_key(buf, sizeof(buf), PROTO_KEY_PREFIX_DEFAULT, "a", PROTO_KEY_OUT) > 0 &&
	                 strcmp(buf, "runnel:{a}:out") == 0,
	         "default prefix");

	/* The longest key fits PROTO_KEY_MAX. */
	memset(id64, 'i', 64);
	id64[64] = '\0';
	memset(prefix64, 'p', 64);
	prefix64[64] = '\0';
	TH_CHECK(proto_key(buf, sizeof(buf), prefix64, id64, PROTO_KEY_STATE) == 64 + 2 + 64 + 7,
	         "longest key");

	TH_CHECK(proto_key(small, sizeof(small), "runnel", "r", PROTO_KEY_OUT) == -1, "too small");
	TH_CHECK(proto_key(buf, sizeof(buf), "runnel", "bad id", PROTO_KEY_OUT) == -1, "bad id");
	TH_CHECK(proto_key(buf, sizeof(buf), "runnel", "", PROTO_KEY_OUT) == -1, "empty id");
	TH_CHECK(proto_key(buf, sizeof(buf), "run{x}", "r", PROTO_KEY_OUT) == -1, "brace in prefix");
	TH_CHECK(proto_key(buf, sizeof(buf), "", "r", PROTO_KEY_OUT) == -1, "empty prefix");
	TH_CHECK(proto_key(buf, sizeof(buf), "runnel", "r", (proto_key_kind_t)42) == -1, "bad kind");
	TH_CHECK(proto_key(buf, sizeof(buf), NULL, "r", PROTO_KEY_OUT) == -1, "null prefix");
	TH_CHECK(proto_key(buf, sizeof(buf), "runnel", NULL, PROTO_KEY_OUT) == -1, "null id");
}

static void test_mint(void)
{
	enum { N = 10000 };
	char(*ids)[27] = calloc(N, sizeof(*ids));
	int i, j, dups = 0;

	for (i = 0; i < N; i++) {
		proto_run_id_mint(ids[i]);
		TH_CHECK(strlen(ids[i]) == 26 && memcmp(ids[i], "run_", 4) == 0, "format %s", ids[i]);
		TH_CHECK(proto_run_id_valid(ids[i]), "valid %s", ids[i]);
		for (j = 4; j < 26; j++) {
			char c = ids[i][j];

			if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			      (c >= '0' && c <= '9') || c == '-' || c == '_')) {
				TH_CHECK(0, "alphabet %s", ids[i]);
				break;
			}
		}
	}
	qsort(ids, N, sizeof(*ids), cmp_ids);
	for (i = 1; i < N; i++)
		dups += memcmp(ids[i - 1], ids[i], 27) == 0;
	TH_CHECK(dups == 0, "%d duplicate ids", dups);
	free(ids);
}

int main(void)
{
	test_key_names();
	test_mint();
	return th_done();
}
