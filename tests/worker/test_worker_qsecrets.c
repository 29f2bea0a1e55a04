/*
 * tests/worker/test_worker_qsecrets.c - no OTP or prompt reaches Redis
 * through the run-time queue, in either entry mode, checked while the runs
 * wait in the queue and afterwards in every key and in the AOF (which
 * keeps every write ever made):
 *   - sealed mode (RUNNEL_JOB_KEY set): an unsealed record is sealed by the
 *     worker before it is queued; a sealed record stays sealed;
 *   - reference mode (no key): the entry only points at the Kafka record,
 *     which the claiming worker reads back;
 *   - with a key, a job that sealing would push over the job size cap (a
 *     512 KiB prompt and a large meta) is queued by reference instead.
 * Both runs still start and finish normally.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "proto/job.h"

#define KEY_HEX "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static wt_t T;
static const char *secrets[32];
static size_t nsecrets;

static void remember(const char *s)
{
	secrets[nsecrets++] = th_strf("%s", s);
}

/* Produces a job for a fresh stub run; sealed with key when there is one. */
static void submit_meta(const char *id, const char *script, const char *prompt, const uint8_t *key,
                        json_t *meta)
{
	dev_stub_otps_t o;
	wt_add_agent_run(&T, th_strf("{\"kind\":\"mock\",\"script\":\"%s\"}", script), &o);
	proto_job_t j;
	memset(&j, 0, sizeof(j));
	j.v = 1;
	snprintf(j.run_id, sizeof(j.run_id), "%s", id);
	j.agent_url = o.agent_url;
	j.otp_setup = o.otp_setup;
	j.otp_run = o.otp_run;
	j.otp_upload = o.otp_upload;
	j.prompt = (char *)prompt;
	j.enqueued_at = rn_now_ms();
	snprintf(j.tenant, sizeof(j.tenant), "sec");
	j.meta = meta;
	char err[256];
	size_t len = 0;
	char *s = proto_job_serialize(&j, key, &len, err, sizeof(err));
	TH_REQUIRE(s, "serialize: %s", err);
	wt_produce_raw(&T, id, s, len);
	free(s);
	remember(o.otp_setup);
	remember(o.otp_run);
	remember(o.otp_upload);
	remember(strlen(prompt) > 64 ? th_strf("%.64s", prompt) : prompt);
}

static void submit(const char *id, const char *script, const char *prompt, const uint8_t *key)
{
	submit_meta(id, script, prompt, key, NULL);
}

static const char *entry_of(const char *id)
{
	static char buf[4096];
	buf[0] = '\0';
	redisReply *r = redisCommand(wt_rc_key(&T, "runnel:{q}:jobs"), "HGET runnel:{q}:jobs %s", id);
	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(buf, sizeof(buf), "%s", r->str);
	if (r)
		freeReplyObject(r);
	return buf;
}

static const char *waiting_id;
static int is_queued(void *arg)
{
	return entry_of(waiting_id)[0] != '\0';
}

static void scan_all(const char *when)
{
	for (size_t i = 0; i < nsecrets; i++) {
		TH_CHECK(wt_scan_contains(&T, secrets[i]) == 0, "%s: secret %zu in a Redis key", when, i);
		TH_CHECK(!wt_aof_contains(&T, secrets[i]),
		         "%s: secret %zu in Redis's files", when, i);
	}
}

static void mode(const char *name, const char *const *env, const uint8_t *key)
{
	pid_t w = wt_worker(&T, name, env);
	wt_warmup(&T);
	char *busy = th_strf("run_%s_busy", name), *q1 = th_strf("run_%s_q1", name), *q2 = th_strf("run_%s_q2", name);
	submit(busy, "sleep 2", th_strf("prompt-busy-%s-%ld", name, (long)getpid()), NULL);
	TH_REQUIRE(wt_wait_started(&T, busy, 20000), "slot filled");
	submit(q1, "sleep 1", th_strf("prompt-q1-%s-%ld", name, (long)getpid()), NULL);
	char *q3 = th_strf("run_%s_q3", name);
	if (key) {
		submit(q2, "sleep 1", th_strf("prompt-q2-%s-%ld", name, (long)getpid()), key);
		/* 500 KiB of prompt (starting with a unique marker) and 380 KiB of
		 * meta: fine in plaintext, over the cap once sealed. */
		size_t pn = 500 * 1024, mn = 380 * 1024;
		char *big = malloc(pn + 1), *pad = malloc(mn + 1);
		TH_REQUIRE(big && pad);
		int k = snprintf(big, pn + 1, "prompt-q3-%s-%ld-", name, (long)getpid());
		memset(big + k, 'p', pn - (size_t)k);
		big[pn] = '\0';
		memset(pad, 'm', mn);
		pad[mn] = '\0';
		json_t *meta = json_pack("{s:s}", "pad", pad);
		submit_meta(q3, "sleep 1", big, NULL, meta);
		json_decref(meta);
		free(big);
		free(pad);
	}
	waiting_id = key ? q3 : q1;
	TH_REQUIRE(th_wait_until(is_queued, NULL, 10000), "%s: runs wait in the queue", name);
	if (key)
		TH_CHECK(!strncmp(entry_of(q3), "{\"ref\":", 7), "%s: too big to seal: queued by reference: %.80s",
		         name, entry_of(q3));
	const char *e = entry_of(q1);
	if (key)
		TH_CHECK(strstr(e, "\"sealed\":"), "%s: the unsealed record was sealed for the queue: %.80s", name, e);
	else
		TH_CHECK(!strncmp(e, "{\"ref\":", 7), "%s: the entry is a reference: %.80s", name, e);
	scan_all(th_strf("%s, queued", name));
	TH_CHECK(wt_wait_terminal(&T, q1, 30000), "%s: q1 ran", name);
	TH_CHECK(th_streq(wt_run_code(&T, q1, NULL), ""), "%s: q1 succeeded", name);
	if (key) {
		TH_CHECK(wt_wait_terminal(&T, q2, 30000) && th_streq(wt_state(&T, q2, "status"), "succeeded"),
		         "%s: q2 ran", name);
		TH_CHECK(wt_wait_terminal(&T, q3, 30000) && th_streq(wt_state(&T, q3, "status"), "succeeded"),
		         "%s: q3 (by reference) ran", name);
	}
	wt_stop_worker(w, 20000, name);
}

int main(void)
{
	th_init("worker_qsecrets");
	wt_setup(&T, "appendonly yes\nappendfsync always\n", 2);
	uint8_t key[PROTO_JOB_KEY_BYTES];
	char err[128];
	TH_REQUIRE(proto_job_key_parse(KEY_HEX, key, err, sizeof(err)) == 0);
	const char *env_k[] = { "RUNNEL_SLOTS=1", "RUNNEL_JOB_KEY=" KEY_HEX, NULL };
	mode("sk", env_k, key);
	const char *env_n[] = { "RUNNEL_SLOTS=1", NULL };
	mode("sn", env_n, NULL);
	scan_all("after both");
	wt_teardown(&T);
	return th_done();
}
