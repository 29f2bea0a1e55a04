/*
 * tests/stages/test_common.c - the helpers in common/ every program shares:
 * the reconnecting Redis connection, the background thread shape, the capped buffer and the HTTP body (the cap is enforced), the string vector (order, NULL terminator, setenv replacement), the
 * reconnect backoff's bounds, and rn_redis_connect against a real
 * redis-server: a good URL, a wrong password, no password, a database that
 * does not exist and a port nobody listens on, each with its exact error words and
 * never the password.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bg.h"
#include "common/dynbuf.h"
#include "common/rcluster.h"
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
	TH_REQUIRE(s.n == 103 && s.v && !s.v[103], "n %zu", s.n);
	TH_CHECK(th_streq(s.v[0], "a"));
	TH_CHECK(th_streq(s.v[1], "N=2"), "%s", s.v[1]);
	TH_CHECK(th_streq(s.v[2], "HOME=/root"), "%s", s.v[2]);
	TH_CHECK(th_streq(s.v[102], "x99"));
	TH_CHECK(!s.oom);
	rn_strv_free(&s);
	TH_CHECK(!s.v && s.n == 0 && s.cap == 0);

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
	TH_CHECK(!c, "%s connected", url);
	if (c)
		redisFree(c);
	TH_CHECK(th_streq(err, want), "%s: got \"%s\", want \"%s\"", url, err, want);
	TH_CHECK(!strstr(err, "hunter2") && !strstr(err, "s3cret-pw"), "%s", err);
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
	TH_REQUIRE(c, "%s", err);
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

/* The cap is the maximum given at init: reached exactly, never passed, and
 * a refused add leaves the buffer as it was. */
static void test_dynbuf(void)
{
	rn_dynbuf_t b;
	rn_dynbuf_init(&b, 100);
	TH_CHECK(!b.p && b.len == 0, "empty at init");
	char chunk[33];
	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 3; i++)
		TH_CHECK(rn_dynbuf_add(&b, chunk, 33) == 0, "add %d", i);
	TH_CHECK(b.len == 99 && b.p[99] == '\0' && b.cap <= 101, "99 bytes, NUL-terminated (cap %zu)", b.cap);
	TH_CHECK(rn_dynbuf_add(&b, chunk, 2) == RN_DYNBUF_TOO_BIG, "one byte over the cap is refused");
	TH_CHECK(b.len == 99 && b.p[99] == '\0', "a refused add changes nothing");
	TH_CHECK(rn_dynbuf_add(&b, "y", 1) == 0 && b.len == 100 && b.p[99] == 'y' && b.p[100] == '\0',
	         "the cap itself is reached");
	TH_CHECK(b.cap == 101, "never allocated past max + 1 (%zu)", b.cap);
	TH_CHECK(rn_dynbuf_add(&b, "", 0) == 0, "nothing more is still fine");
	TH_CHECK(rn_dynbuf_add(&b, "z", 1) == RN_DYNBUF_TOO_BIG, "full");
	TH_CHECK(rn_dynbuf_reserve(&b, 1) == RN_DYNBUF_TOO_BIG, "no room to reserve");
	/* A huge add does not wrap around the arithmetic. */
	TH_CHECK(rn_dynbuf_add(&b, chunk, (size_t)-1) == RN_DYNBUF_TOO_BIG, "SIZE_MAX bytes refused");
	rn_dynbuf_reset(&b);
	TH_CHECK(b.len == 0 && b.p && b.p[0] == '\0', "reset keeps the memory");
	TH_CHECK(rn_dynbuf_adds(&b, "abc") == 0 && th_streq(b.p, "abc"), "adds");
	size_t len = 0;
	char *t = rn_dynbuf_take(&b, &len);
	TH_CHECK(t && len == 3 && th_streq(t, "abc") && !b.p && b.len == 0 && b.max == 100, "take");
	free(t);
	t = rn_dynbuf_take(&b, &len);
	TH_CHECK(t && len == 0 && t[0] == '\0', "take of an empty buffer is \"\"");
	free(t);
	rn_dynbuf_free(&b);

	/* Consuming a line keeps the rest, NUL-terminated. */
	rn_dynbuf_init(&b, 16);
	TH_CHECK(rn_dynbuf_adds(&b, "one\ntwo") == 0, "add");
	rn_dynbuf_consume(&b, 4);
	TH_CHECK(b.len == 3 && th_streq(b.p, "two"), "consume");
	rn_dynbuf_consume(&b, 10);
	TH_CHECK(b.len == 0 && b.p[0] == '\0', "consume all");
	rn_dynbuf_free(&b);

	/* printf output: whole, or refused whole at the cap. */
	rn_dynbuf_init(&b, 10);
	TH_CHECK(rn_dynbuf_addf(&b, "%s-%d", "ab", 12) == 0 && th_streq(b.p, "ab-12"), "addf");
	TH_CHECK(rn_dynbuf_addf(&b, "%06d", 7) == RN_DYNBUF_TOO_BIG && th_streq(b.p, "ab-12"), "addf over the cap");
	TH_CHECK(rn_dynbuf_addf(&b, "%05d", 7) == 0 && b.len == 10 && th_streq(b.p, "ab-1200007"), "addf to the cap");
	rn_dynbuf_free(&b);

	/* A buffer with max 0 holds nothing but its NUL. */
	rn_dynbuf_init(&b, 0);
	TH_CHECK(rn_dynbuf_add(&b, "a", 1) == RN_DYNBUF_TOO_BIG && rn_dynbuf_add(&b, "", 0) == 0 && b.cap == 1,
	         "max 0");
	rn_dynbuf_free(&b);

	/* The HTTP body: stop at the cap, or keep its head and read on. */
	rn_body_t body;
	rn_body_init(&body, 10, 0);
	TH_CHECK(rn_body_write(chunk, 1, 6, &body) == 6 && rn_body_write(chunk, 1, 4, &body) == 4, "10 bytes fit");
	TH_CHECK(rn_body_write(chunk, 1, 1, &body) == 0 && body.too_big && body.buf.len == 10, "the 11th stops it");
	rn_body_free(&body);
	rn_body_init(&body, 10, 1);
	TH_CHECK(rn_body_write(chunk, 3, 3, &body) == 9 && rn_body_write(chunk, 1, 5, &body) == 5, "read on");
	TH_CHECK(body.too_big && body.buf.len == 10 && body.buf.p[10] == '\0', "the head is kept");
	rn_body_free(&body);
}

static void *bg_waiter(void *arg)
{
	rn_bg_t *b = arg;
	pthread_mutex_lock(&b->mu);
	while (!rn_bg_wait_ms(b, -1))
		;
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

static int poked;
static void bg_poke(void *arg)
{
	(void)arg;
	poked++;
}

/* The thread shape: a timed wait times out on its own, and one stop wakes
 * every waiter (on cv and on the second condition), pokes, and joins. */
static void test_bg(void)
{
	rn_bg_t b;
	TH_REQUIRE(rn_bg_init(&b) == 0);
	pthread_mutex_lock(&b.mu);
	int64_t t0 = rn_mono_ms();
	TH_CHECK(rn_bg_wait_ms(&b, 50) == 0, "not stopped");
	TH_CHECK(rn_mono_ms() - t0 >= 40, "a timed wait waits");
	pthread_mutex_unlock(&b.mu);
	for (int i = 0; i < 3; i++)
		TH_REQUIRE(rn_bg_start(&b, "test-bg", 0, bg_waiter, &b) == 0);
	pthread_cond_t also;
	pthread_cond_init(&also, NULL);
	rn_bg_stop(&b, &also, bg_poke, NULL);
	TH_CHECK(b.stop == 1 && b.nthreads == 0 && poked == 1, "stopped, poked once, joined");
	pthread_cond_destroy(&also);
	rn_bg_destroy(&b);
}

/* The reconnecting connection: down while nobody listens (with a wait
 * within the backoff), up once the server is there, and a failed command
 * drops the router for the next get to replace. */
static void test_conn(void)
{
	rn_redis_url_t u;
	char err[256] = "";
	int port = th_free_port();
	TH_REQUIRE(port > 0);
	TH_REQUIRE(rn_redis_url_parse(th_strf("redis://127.0.0.1:%d", port), &u, err, sizeof(err)) == 0, "%s", err);
	rn_redis_conn_t rc;
	rn_redis_conn_init(&rc, &u, "test", "runnel-test", 500);
	long wait = -1;
	TH_CHECK(!rn_redis_conn_get(&rc, &wait), "nobody listens");
	TH_CHECK(wait >= 0 && wait <= RN_REDIS_BACKOFF_MIN_MS, "first wait %ld ms", wait);
	TH_CHECK(!rn_redis_conn_get(&rc, &wait) && rc.attempt == 1, "no second try within the backoff");

	th_redis_t r;
	TH_REQUIRE(th_redis_start(&r, "") == 0, "redis");
	TH_REQUIRE(rn_redis_url_parse(th_strf("redis://127.0.0.1:%d", r.port), &u, err, sizeof(err)) == 0, "%s", err);
	int64_t deadline = rn_mono_ms() + 5000;
	rn_rcluster_t *c = NULL;
	while (!(c = rn_redis_conn_get(&rc, &wait)) && rn_mono_ms() < deadline) {
		struct timespec ts = { 0, (wait > 0 ? wait : 1) * 1000000L };
		nanosleep(&ts, NULL);
	}
	TH_REQUIRE(c, "connected once the server is there");
	TH_CHECK(rc.attempt == 0 && !rc.down, "the backoff starts over");
	redisReply *rep = rn_rcluster_command(c, 0, "CLIENT GETNAME");
	TH_CHECK(rep && rep->type == REDIS_REPLY_STRING && th_streq(rep->str, "runnel-test"), "named");
	if (rep)
		freeReplyObject(rep);
	rn_redis_conn_failed(&rc, "test", "a failure");
	TH_CHECK(!rc.c && rc.down, "a failure drops the router");
	rn_redis_conn_close(&rc);
	th_redis_stop(&r);
}

int main(void)
{
	test_conn();
	test_bg();
	test_dynbuf();
	test_strv();
	test_backoff();
	test_connect();
	return th_done();
}
