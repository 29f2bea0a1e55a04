/*
 * tests/proto/test_queueentry.c - the run-time queue's entry by reference:
 * written and read back, jobs told apart from references, and every broken
 * reference refused with its exact error.
 */
#include "proto/queueentry.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_round_trip(void)
{
	proto_queue_ref_t r = { .partition = 7, .offset = 123456789012LL }, back;
	char err[128];
	size_t len = 0;
	snprintf(r.topic, sizeof(r.topic), "runnel.jobs");
	char *s = proto_queue_ref_write(&r, &len);
	TH_REQUIRE(s, "write");
	TH_CHECK_STR("the wire shape", s, "{\"ref\":{\"t\":\"runnel.jobs\",\"p\":7,\"o\":123456789012}}");
	TH_CHECK(len == strlen(s), "length");
	TH_CHECK(proto_queue_ref_parse(s, len, &back, err, sizeof(err)) == 1, "parse: %s", err);
	TH_CHECK_STR("topic back", back.topic, "runnel.jobs");
	TH_CHECK(back.partition == 7 && back.offset == 123456789012LL, "partition and offset back");
	free(s);

	/* Without a topic the reader's own job topic applies: "t" left out. */
	r.topic[0] = '\0';
	s = proto_queue_ref_write(&r, &len);
	TH_REQUIRE(s, "write");
	TH_CHECK_STR("no topic", s, "{\"ref\":{\"p\":7,\"o\":123456789012}}");
	TH_CHECK(proto_queue_ref_parse(s, len, &back, err, sizeof(err)) == 1 && !back.topic[0], "parse no topic");
	free(s);
}

static void test_not_a_ref(void)
{
	static const char *const jobs[] = {
		"{\"v\":1,\"run_id\":\"r\"}", /* a job */
		"{\"sealed\":\"abc\"}",       /* a sealed job */
		"not json",
		"[1,2]",
		"",
		"{\"ref\":{\"t\":\"a\\u0000b\",\"p\":0,\"o\":0}}", /* jansson refuses NUL: no JSON */
	};
	proto_queue_ref_t r;
	char err[128];
	for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++)
		TH_CHECK(proto_queue_ref_parse(jobs[i], strlen(jobs[i]), &r, err, sizeof(err)) == 0,
		         "not a reference: %s", jobs[i]);
}

static void test_bad_refs(void)
{
	static const struct {
		const char *entry, *err;
	} bad[] = {
		{ "{\"ref\":null}", "ref: not an object" },
		{ "{\"ref\":[1]}", "ref: not an object" },
		{ "{\"ref\":{\"t\":5,\"p\":0,\"o\":0}}", "ref: t must be a topic name of 1-249 characters" },
		{ "{\"ref\":{\"t\":\"\",\"p\":0,\"o\":0}}", "ref: t must be a topic name of 1-249 characters" },
		{ "{\"ref\":{\"o\":0}}", "ref: p must be a partition number (0-2147483647)" },
		{ "{\"ref\":{\"p\":-1,\"o\":0}}", "ref: p must be a partition number (0-2147483647)" },
		{ "{\"ref\":{\"p\":2147483648,\"o\":0}}", "ref: p must be a partition number (0-2147483647)" },
		{ "{\"ref\":{\"p\":\"1\",\"o\":0}}", "ref: p must be a partition number (0-2147483647)" },
		{ "{\"ref\":{\"p\":1}}", "ref: o must be an offset (a non-negative integer)" },
		{ "{\"ref\":{\"p\":1,\"o\":-5}}", "ref: o must be an offset (a non-negative integer)" },
		{ "{\"ref\":{\"p\":1,\"o\":1.5}}", "ref: o must be an offset (a non-negative integer)" },
	};
	proto_queue_ref_t r;
	char err[128];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		TH_CHECK(proto_queue_ref_parse(bad[i].entry, strlen(bad[i].entry), &r, err, sizeof(err)) == -1,
		         "refused: %s", bad[i].entry);
		TH_CHECK_STR(bad[i].entry, err, bad[i].err);
	}
	/* A topic of 250 characters is one too many; 249 fit. */
	char big[400], t[251];
	memset(t, 'a', 250);
	t[250] = '\0';
	snprintf(big, sizeof(big), "{\"ref\":{\"t\":\"%s\",\"p\":0,\"o\":0}}", t);
	TH_CHECK(proto_queue_ref_parse(big, strlen(big), &r, err, sizeof(err)) == -1, "250-character topic");
	t[249] = '\0';
	snprintf(big, sizeof(big), "{\"ref\":{\"t\":\"%s\",\"p\":0,\"o\":0}}", t);
	TH_CHECK(proto_queue_ref_parse(big, strlen(big), &r, err, sizeof(err)) == 1 && strlen(r.topic) == 249,
	         "249-character topic");
}

int main(void)
{
	test_round_trip();
	test_not_a_ref();
	test_bad_refs();
	return th_done();
}
