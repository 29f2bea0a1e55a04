/*
 * tests/kafka/test_kafka_kcat.c - a job produced by plain kcat (no runnel
 * code on the producing side) to the real broker runs to its result.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/util.h"

static wt_t T;

int main(void)
{
	th_init("kafka_kcat");
	wt_setup(&T, NULL, 2);
	pid_t w = wt_worker(&T, "wk", NULL);

	dev_stub_otps_t o;
	wt_add_agent_run(&T, "{\"kind\":\"mock\",\"script\":\"echo\"}", &o);
	json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:I}", "v", 1, "run_id", "run_kcat",
	                      "agent_url", o.agent_url, "otp_setup", o.otp_setup, "otp_run", o.otp_run,
	                      "prompt", "from kcat", "caller", "kcat", "enqueued_at", (json_int_t)rn_now_ms());
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	const char *file = th_strf("%s/job.json", T.dir);
	/* One line: kcat -l sends each line as one message. */
	char *line = th_strf("%s\n", s);
	TH_REQUIRE(th_file_write(file, line, strlen(line)) == 0);
	free(s);
	char *argv[] = { "kcat", "-P", "-b", T.kafka.bootstrap, "-t", T.topic, "-k", "run_kcat",
		         "-l", (char *)file, NULL };
	pid_t k = th_spawn(argv, NULL, th_strf("%s/kcat.log", T.dir));
	TH_REQUIRE(k > 0, "kcat started");
	int st = 0;
	TH_REQUIRE(th_wait_exit(k, 30000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	           "kcat produced (status %d)", st);

	TH_CHECK(wt_wait_terminal(&T, "run_kcat", 60000), "the kcat job ran");
	size_t n;
	char **l = wt_lines(&T, "run_kcat", &n);
	TH_CHECK(n == 1 && th_streq(wt_check_terminal(l, n), ""), "%zu lines", n);
	if (n)
		TH_CHECK(th_streq(wt_field(l[n - 1], "message"), "from kcat"), "%s", l[n - 1]);
	th_strv_free(l, n);
	TH_CHECK(th_streq(wt_state(&T, "run_kcat", "status"), "succeeded"));
	wt_stop_worker(w, 10000, "worker");
	wt_teardown(&T);
	return th_done();
}
