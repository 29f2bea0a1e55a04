/*
 * tests/dispatcher/test_e2e.c - the dispatcher with the real worker:
 * POST /stream with a mock "demo" run served by the workspace stub streams
 * exactly the lines the worker wrote, ending with the result; closing a
 * /stream of a long run makes the run end cancelled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/runstate.h"
#include "dev/stub.h"
#include "tests/dispatcher/dtest.h"

#ifndef WORKER_BIN
#error WORKER_BIN must name runnel-worker
#endif

static dt_disp_t D;
static redisContext *C;

static char *stream_body(const dev_stub_otps_t *o, const char *run_id)
{
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "agent_url", o->agent_url, "otp_setup", o->otp_setup,
	                      "otp_run", o->otp_run, "otp_upload", o->otp_upload, "prompt", "Add an inference node",
	                      "run_id", run_id, "session", "classic-field");
	char *s = json_dumps(j, JSON_COMPACT);
	char *out = th_strf("%s", s);

	json_decref(j);
	free(s);
	return out;
}

static json_t *agent_config(const char *script)
{
	return json_pack("{s:{s:s,s:s}}", "agent", "kind", "mock", "script", script);
}

typedef struct st_arg {
	dt_stream_t *s;
	size_t lines;
} st_arg_t;

static int done(void *arg)
{
	return ((st_arg_t *)arg)->s->done;
}

static int has_lines(void *arg)
{
	st_arg_t *a = arg;

	return a->s->done || dt_stream_lines(a->s) >= a->lines;
}

static int ended(void *arg)
{
	char st[32] = "", err[128];

	return rn_runstate_get(th_rc_for(C), "runnel", arg, "status", st, sizeof(st), err, sizeof(err)) == 1 &&
	        strcmp(st, "cancelled") == 0;
}

/* SPUBLISH calls over a cluster's primaries and replicas (INFO
 * commandstats): the worker's wake-ups of the dispatcher's tails. */
static long spublish_calls(th_cluster_t *cl)
{
	long n = 0;

	for (int i = 0; i < cl->n; i++) {
		redisContext *c = th_cluster_connect(cl, i);
		redisReply *r = c ? redisCommand(c, "INFO commandstats") : NULL;
		const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_spublish:calls=") : NULL;

		if (p)
			n += strtol(p + 23, NULL, 10);
		if (r)
			freeReplyObject(r);
		if (c)
			redisFree(c);
	}
	return n;
}

int main(void)
{
	th_redis_t red;
	th_kafka_t k;
	dev_stub_t *stub;
	dev_stub_otps_t o1, o2;
	dev_stub_run_t run;
	dt_multi_t m;
	dt_stream_t s1, s2;
	st_arg_t a1 = { &s1, 0 }, a2 = { &s2, 1 };
	char err[256], **lines = NULL;
	size_t n = 0;
	pid_t worker;
	const char *const ct[] = { "Content-Type: application/json", NULL };

	dt_servers_start("dispatcher_e2e", &red, &k, 2, &C);
	stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(stub, "stub: %s", err);
	TH_REQUIRE(dt_disp_start(&D, &red, &k, NULL) == 0);
	worker = dt_worker_start(WORKER_BIN, &red, &k, th_tmpdir(), "w-e2e", 2);
	TH_REQUIRE(dt_multi_init(&m) == 0);

	/* 1. The demo run, streamed through the dispatcher. */
	memset(&run, 0, sizeof(run));
	run.config = agent_config("demo");
	TH_REQUIRE(dev_stub_add_run(stub, &run, &o1) == 0);
	json_decref(run.config);
	TH_REQUIRE(dt_stream_open(&m, &s1, th_strf("%s/stream", D.base), ct, stream_body(&o1, "e2e_demo")) == 0);
	TH_CHECK(dt_multi_until(&m, done, &a1, 90000), "demo stream did not end (see %s)", D.log);
	TH_CHECK(s1.rc == CURLE_OK && s1.status == 200, "%d %ld", s1.rc, s1.status);
	TH_REQUIRE(th_stream_read_all(C, "runnel:{e2e_demo}:out", &lines, NULL, &n) == 0);
	TH_CHECK(n >= 2, "%zu lines", n);
	{
		size_t off = 0;
		int same = 1;
		char type[16], code[32];

		for (size_t i = 0; i < n && same; i++) {
			size_t l = strlen(lines[i]);

			same = off + l + 1 <= s1.rx.len && memcmp(s1.rx.body + off, lines[i], l) == 0 && s1.rx.body[off + l] == '\n';
			off += l + 1;
		}
		TH_CHECK(same && off == s1.rx.len, "streamed lines differ from the run's stream:\n%s", s1.rx.body);
		TH_CHECK(n > 0 && th_line_type(lines[n - 1], type, sizeof(type), code, sizeof(code)) == 0 &&
		                 strcmp(type, "result") == 0,
		         "last line %s", n ? lines[n - 1] : "");
	}
	th_strv_free(lines, n);
	dt_stream_close(&m, &s1);
	if (dt_cluster()) {
		TH_CHECK(spublish_calls(dt_cluster()) > 0, "the worker woke the tails through sharded pub/sub");
	} else {
		redisReply *st = redisCommand(C, "INFO commandstats");

		TH_CHECK(st && st->type == REDIS_REPLY_STRING && strstr(st->str, "cmdstat_xadd:") &&
		                 !strstr(st->str, "cmdstat_spublish:"),
		         "a standalone server gets no wake-ups");
		if (st)
			freeReplyObject(st);
	}

	/* 2. A long run: the caller leaves after its first line -> cancelled. */
	memset(&run, 0, sizeof(run));
	run.config = agent_config("sleep 60");
	TH_REQUIRE(dev_stub_add_run(stub, &run, &o2) == 0);
	json_decref(run.config);
	TH_REQUIRE(dt_stream_open(&m, &s2, th_strf("%s/stream", D.base), ct, stream_body(&o2, "e2e_slow")) == 0);
	TH_CHECK(dt_multi_until(&m, has_lines, &a2, 60000), "no first line from the slow run");
	dt_stream_close(&m, &s2);
	TH_CHECK(th_wait_until(ended, "e2e_slow", 30000), "run not cancelled after the caller left");
	TH_CHECK(th_wait_stream_terminal(C, "runnel:{e2e_slow}:out", 10000));
	TH_REQUIRE(th_stream_read_all(C, "runnel:{e2e_slow}:out", &lines, NULL, &n) == 0 && n > 0);
	{
		char type[16], code[32];

		TH_CHECK(th_line_type(lines[n - 1], type, sizeof(type), code, sizeof(code)) == 0 &&
		                 strcmp(type, "error") == 0 && strcmp(code, "cancelled") == 0,
		         "%s", lines[n - 1]);
	}
	th_strv_free(lines, n);
	TH_CHECK(dev_stub_total_calls(stub, o2.session) >= 0);

	dt_multi_cleanup(&m);
	th_stop(worker, 30000);
	TH_CHECK(dt_disp_stop(&D), "clean exit (see %s)", D.log);
	dev_stub_stop(stub);
	dt_servers_stop(C, &k);
	return th_done();
}
