/*
 * tests/stages/test_common.c - the helpers in common/ every program shares:
 * the string vector (order, NULL terminator, setenv replacement), the
 * reconnect backoff's bounds, and rn_redis_connect against a real
 * redis-server: a good URL, a wrong password, no password, a database that
 * does not exist and a port nobody listens on, each with its exact error words and
 * never the password.
 */
#include <stdio.h>
#include <string.h>

#include "common/redis.h"
#include "common/strv.h"
#include "common/util.h"
#include "tests/support/harness.h"

static void test_strv(void)
{
	rn_strv_t s = { 0 };

	TH_CHECK(rn_strv_add(&s, "a") == 0);
	TH_CHECK(rn_strv_addf(&s, "%s=%d", "N", 1) == 0);
	TH_CHECK(rn_strv_setenv(&s, "HOME", "/root") == 0);
	TH_CHECK(rn_strv_setenv(&s, "N", "2") == 0, "replace");
	for (int i = 0; i < 100; i++)
		TH_CHECK(rn_strv_addf(&s, "x%d", i) == 0);
	TH_REQUIRE(s.n == 103 && s.v != NULL && s.v[103] == NULL, "n %zu", s.n);
	TH_CHECK(th_streq(s.v[0], "a"));
	TH_CHECK(th_streq(s.v[1], "N=2"), "%s", s.v[1]);
	TH_CHECK(th_streq(s.v[2], "HOME=/root"), "%s", s.v[2]);
	TH_CHECK(th_streq(s.v[102], "x99"));
	TH_CHECK(!s.oom);
	rn_strv_free(&s);
	TH_CHECK(s.v == NULL && s.n == 0 && s.cap == 0);

	/* After a failed add the vector stays failed. */
	s.oom = 1;
	TH_CHECK(rn_strv_add(&s, "b") == -1 && s.n == 0);
	rn_strv_free(&s);
}

static void test_backoff(void)
{
	static const struct {
		unsigned attempt;
		long min, max, want; /* the delay before jitter */
	} cases[] = {
		{ 0, 50, 2000, 50 },
		{ 1, 50, 2000, 100 },
		{ 5, 50, 2000, 1600 },
		{ 6, 50, 2000, 2000 },
		{ 40, 50, 2000, 2000 },
		{ 3, 100, 2000, 800 },
		{ 9, 50, 1000, 1000 },
		{ 0, 1, 1, 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long lo = cases[i].want - cases[i].want / 2, hi = cases[i].want;
		int spread = 0;
		long first = -1;
		for (int k = 0; k < 200; k++) {
			long d = rn_backoff_ms(cases[i].attempt, cases[i].min, cases[i].max);
			TH_CHECK(d >= lo && d <= hi, "attempt %u: %ld not in [%ld, %ld]", cases[i].attempt,
			         d, lo, hi);
			if (first < 0)
				first = d;
			else if (d != first)
				spread = 1;
		}
		TH_CHECK(spread || lo == hi, "attempt %u: no jitter", cases[i].attempt);
	}
}

static void connect_fails(const char *url, const char *want)
{
	rn_redis_url_t u;
	char err[256] = "";

	TH_REQUIRE(rn_redis_url_parse(url, &u, err, sizeof(err)) == 0, "%s", err);
	redisContext *c = rn_redis_connect(&u, 1000, 1000, err, sizeof(err));
	TH_CHECK(c == NULL, "%s connected", url);
	if (c)
		redisFree(c);
	TH_CHECK(th_streq(err, want), "%s: got \"%s\", want \"%s\"", url, err, want);
	TH_CHECK(strstr(err, "hunter2") == NULL && strstr(err, "s3cret-pw") == NULL, "%s", err);
}

static void test_connect(void)
{
	th_redis_t r;
	rn_redis_url_t u;
	char err[256] = "";

	TH_REQUIRE(th_redis_start(&r, "requirepass s3cret-pw\n") == 0, "redis");

	TH_REQUIRE(rn_redis_url_parse(th_strf("redis://:s3cret-pw@127.0.0.1:%d/3", r.port), &u, err,
	                              sizeof(err)) == 0,
	           "%s", err);
	redisContext *c = rn_redis_connect(&u, 1000, 1000, err, sizeof(err));
	TH_REQUIRE(c != NULL, "%s", err);
	redisReply *rep = redisCommand(c, "CLIENT INFO");
	TH_CHECK(rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, " db=3 "), "%s",
	         rep && rep->str ? rep->str : "no reply");
	if (rep)
		freeReplyObject(rep);
	redisFree(c);

	connect_fails(th_strf("redis://:hunter2@127.0.0.1:%d", r.port), "authentication failed");
	connect_fails(th_strf("redis://127.0.0.1:%d/3", r.port), "SELECT 3 failed");
	connect_fails(th_strf("redis://:s3cret-pw@127.0.0.1:%d/99", r.port), "SELECT 99 failed");
	int port = th_free_port();
	TH_REQUIRE(port > 0);
	connect_fails(th_strf("redis://127.0.0.1:%d", port), "Connection refused");
	th_redis_stop(&r);
}

int main(void)
{
	test_strv();
	test_backoff();
	test_connect();
	return th_done();
}
