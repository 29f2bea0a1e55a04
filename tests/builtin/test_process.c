/*
 * tests/builtin/test_process.c - the builtin kind under the worker's
 * `process` sandbox driver (no isolation): runnel-agent starts in the run's
 * workspace on the host, finds the skills beside it, runs a skill's script
 * and its files come back on /results.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/builtin/fakechat.h"
#include "tests/builtin/skillblob.h"
#include "tests/worker/wtest.h"

static wt_t T;

int main(void)
{
	th_init("builtin_process");
	wt_setup(&T, NULL, 1);
	static const fc_resp_t script[] = {
		{ .body = FC_CALL(0, "c1", "bash", "{\\\"command\\\":\\\"sh ../skills/notes/run.sh\\\"}") FC_CALLS FC_DONE },
		{ .body = FC_TEXT("Noted.") FC_STOP FC_DONE },
	};
	fakechat_t f;
	TH_REQUIRE(fakechat_start(&f, script, 2) == 0);
	/* The fake is on loopback: the operator's allowlist names it (SPEC §6). */
	const char *env[] = { "RUNNEL_SANDBOX=process", th_strf("RUNNEL_EGRESS_ALLOW=@model,@workspace_api,127.0.0.1:%d", f.port),
		              NULL };
	pid_t w = wt_worker(&T, "w1", env);
	wt_warmup(&T);

	static const skill_file_t notes[] = {
		{ "SKILL.md", "---\nname: notes\ndescription: Write notes\n---\n", 0644 },
		{ "run.sh", "mkdir -p assets && echo noted > assets/notes.txt && pwd\n", 0644 },
	};
	char url[256];
	skill_blob(&T, "notes.zip", notes, 2, url, sizeof(url));
	dev_stub_run_t run = { 0 };
	run.env = json_pack("{s:{s:s,s:s},s:n}", "variables", "OPENAI_BASE_URL", f.base_url, "OPENAI_API_KEY",
	                    "sk-process-test", "setup_script");
	run.config = json_pack("{s:s,s:{s:s},s:[{s:s,s:s}]}", "model", "m", "agent", "kind", "builtin", "skills", "name",
	                       "notes", "zip_url", url);
	dev_stub_otps_t o;
	wt_submit(&T, "run_process", &run, "take notes", 1, 0, &o);
	json_decref(run.env);
	json_decref(run.config);
	TH_CHECK(wt_wait_terminal(&T, "run_process", 30000), "run ended");
	size_t n;
	char **l = wt_lines(&T, "run_process", &n);
	TH_CHECK(th_streq(wt_check_terminal(l, n), ""));
	TH_CHECK(n && th_streq(wt_field(l[n - 1], "message"), "Noted."), "%s", n ? l[n - 1] : "-");
	int step_ok = 0;
	for (size_t i = 0; i < n; i++)
		if (strstr(l[i], "\"status\":\"succeeded\"") && strstr(l[i], "/run_process/workspace\\n"))
			step_ok = 1;
	TH_CHECK(step_ok, "the script ran in the run's workspace");
	th_strv_free(l, n);
	TH_REQUIRE(fakechat_requests(&f) >= 1);
	/* Through the gateway: the provider got the real key. */
	TH_CHECK(th_streq(f.auth[0], "Bearer sk-process-test"), "%s", f.auth[0] ? f.auth[0] : "-");
	json_t *req = json_loads(f.bodies[0], 0, NULL);
	const char *sys = json_string_value(json_object_get(json_array_get(json_object_get(req, "messages"), 0), "content"));
	TH_CHECK(sys && strstr(sys, "/run_process/skills/notes/SKILL.md)") && !strstr(sys, "/../"), "%s", sys ? sys : "-");
	json_decref(req);
	size_t nf = 0;
	char **files = dev_stub_file_names(T.stub, o.session, &nf);
	TH_CHECK(nf == 1 && th_streq(files[0], "notes.txt"), "%zu files", nf);
	for (size_t i = 0; i < nf; i++)
		free(files[i]);
	free(files);
	th_stop(w, 10000);
	fakechat_stop(&f);
	wt_teardown(&T);
	return th_done();
}
