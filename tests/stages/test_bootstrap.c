/*
 * tests/stages/test_bootstrap.c - GET /env and GET /config against the real
 * workspace stub over HTTP: success, every failure with its exact message,
 * OTPs never in a message, and one-time OTPs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "dev/stub.h"
#include "tests/support/harness.h"
#include "worker/bootstrap.h"

static dev_stub_t *stub;

/* Every message is checked for both OTPs of the run. */
static void no_secret(const char *err, const dev_stub_otps_t *o)
{
	TH_CHECK(!strstr(err, o->otp_setup), "setup OTP in \"%s\"", err);
	TH_CHECK(!strstr(err, o->otp_run), "run OTP in \"%s\"", err);
	TH_CHECK(!strstr(err, o->otp_upload), "upload OTP in \"%s\"", err);
}

static void add_run(const dev_stub_run_t *run, dev_stub_otps_t *o)
{
	TH_REQUIRE(dev_stub_add_run(stub, run, o) == 0);
}

/* Fetches with the run's OTPs and expects the exact error. */
static void expect_error(const char *what, const dev_stub_otps_t *o,
                         const worker_boot_opts_t *opts, const char *want)
{
	worker_boot_t boot;
	char err[512] = "";
	int rc = worker_bootstrap_fetch(o->agent_url, o->otp_setup, o->otp_run, opts, &boot,
	                                err, sizeof(err));
	TH_CHECK(rc == -1, "%s: succeeded", what);
	TH_CHECK(th_streq(err, want), "%s: \"%s\", want \"%s\"", what, err, want);
	TH_CHECK(!boot.config && !boot.variables, "%s: boot not cleared", what);
	no_secret(err, o);
}

static void test_success(void)
{
	json_t *env = json_pack("{s:{s:s,s:s},s:s}", "variables", "API_KEY", "k-123", "MODE", "test",
	                        "setup_script", "echo setting up\n");
	json_t *cfg = json_pack(
	        "{s:s,s:s,s:[{s:s,s:s}],s:[],s:[{s:s}],s:{s:s},s:{s:s,s:s},s:{s:s,s:s},s:i}",
	        "system_prompt", "You are helpful.", "model", "m-1",
	        "skills", "name", "tables", "zip_url", "http://127.0.0.1:1/blobs/tables.zip",
	        "mcp_servers", "history", "role", "user",
	        "assets", "zip_url", "http://127.0.0.1:1/blobs/bag.zip?sig=abc",
	        "workspace_api", "url", "http://ws.example/api", "token", "asbx_tok",
	        "agent", "kind", "mock", "script", "echo",
	        "max_runtime_sec", 600);
	dev_stub_run_t run = { .env = env, .config = cfg };
	dev_stub_otps_t o;
	add_run(&run, &o);
	json_decref(env);
	json_decref(cfg);

	worker_boot_t boot;
	char err[512] = "";
	TH_REQUIRE(worker_bootstrap_fetch(o.agent_url, o.otp_setup, o.otp_run, NULL, &boot,
	                                  err, sizeof(err)) == 0,
	           "%s", err);
	TH_CHECK(th_streq(json_string_value(json_object_get(boot.variables, "API_KEY")), "k-123"));
	TH_CHECK(json_object_size(boot.variables) == 2);
	TH_CHECK(th_streq(boot.setup_script, "echo setting up\n"));
	TH_CHECK(th_streq(boot.system_prompt, "You are helpful."));
	TH_CHECK(th_streq(boot.model, "m-1"));
	TH_CHECK(json_array_size(boot.skills) == 1);
	TH_CHECK(json_is_array(boot.mcp_servers) && json_array_size(boot.mcp_servers) == 0);
	TH_CHECK(json_array_size(boot.history) == 1);
	TH_CHECK(th_streq(json_string_value(json_object_get(boot.agent, "script")), "echo"));
	TH_CHECK(th_streq(boot.zip_url, "http://127.0.0.1:1/blobs/bag.zip?sig=abc"));
	TH_CHECK(th_streq(boot.ws_api_url, "http://ws.example/api"));
	TH_CHECK(th_streq(boot.ws_api_token, "asbx_tok"));
	TH_CHECK(boot.max_runtime_sec == 600);
	worker_boot_clear(&boot);
	TH_CHECK(!boot.config);

	dev_stub_ep_stats_t st;
	TH_CHECK(dev_stub_stats(stub, o.session, DEV_STUB_EP_ENV, &st) == 0 && st.calls == 1 && st.ok == 1);
	TH_CHECK(dev_stub_stats(stub, o.session, DEV_STUB_EP_CONFIG, &st) == 0 && st.calls == 1 && st.ok == 1);

	/* One-time OTPs: the same pair again is refused, and sent only once. */
	expect_error("reuse", &o, NULL, "GET /env answered HTTP 401");
	TH_CHECK(dev_stub_stats(stub, o.session, DEV_STUB_EP_ENV, &st) == 0 && st.calls == 2 && st.reused == 1);

	/* Defaults: empty env, config without optional fields. */
	add_run(NULL, &o);
	TH_REQUIRE(worker_bootstrap_fetch(o.agent_url, o.otp_setup, o.otp_run, NULL, &boot,
	                                  err, sizeof(err)) == 0,
	           "%s", err);
	TH_CHECK(json_is_object(boot.variables) && json_object_size(boot.variables) == 0);
	TH_CHECK(!boot.setup_script && !boot.zip_url && boot.max_runtime_sec == 0);
	worker_boot_clear(&boot);
}

static void test_http_failures(void)
{
	dev_stub_otps_t o;
	worker_boot_t boot;
	char err[512];

	add_run(NULL, &o);
	TH_CHECK(worker_bootstrap_fetch(o.agent_url, "otp_wrong", o.otp_run, NULL, &boot,
	                                err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "GET /env answered HTTP 401"), "%s", err);
	no_secret(err, &o);

	dev_stub_run_t run = { 0 };
	run.faults[DEV_STUB_EP_CONFIG].status = 500;
	add_run(&run, &o);
	expect_error("500", &o, NULL, "GET /config answered HTTP 500");

	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_CONFIG].body = "<html>not json</html>";
	add_run(&run, &o);
	expect_error("non-JSON", &o, NULL, "GET /config: answer is not JSON");

	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].body = "[1,2]";
	add_run(&run, &o);
	expect_error("not an object", &o, NULL, "GET /env: answer is not a JSON object");

	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_CONFIG].redirect = "/blobs/elsewhere";
	add_run(&run, &o);
	expect_error("redirect", &o, NULL,
	             "GET /config answered a redirect (HTTP 302); redirects are not followed");

	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].close = 1;
	add_run(&run, &o);
	expect_error("dropped", &o, NULL, "GET /env: the server closed the connection without answering");

	/* A short timeout: the stub answers after 3 s. */
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_CONFIG].delay_ms = 3000;
	add_run(&run, &o);
	worker_boot_opts_t fast = { .timeout_ms = 300 };
	int64_t t0 = th_now_ms();
	expect_error("timeout", &o, &fast, "GET /config: timed out after 300 ms");
	TH_CHECK(th_now_ms() - t0 < 2000, "took %lld ms", (long long)(th_now_ms() - t0));

	/* The abort flag ends the wait promptly. */
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].delay_ms = 3000;
	add_run(&run, &o);
	worker_stopword_t abort_now;
	worker_stopword_init(&abort_now);
	worker_stopword_request(&abort_now, WORKER_STOP_CANCEL);
	worker_boot_opts_t ab = { .stop = &abort_now };
	t0 = th_now_ms();
	expect_error("abort", &o, &ab, "cancelled");
	TH_CHECK(th_now_ms() - t0 < 1000, "took %lld ms", (long long)(th_now_ms() - t0));

	/* Body cap. */
	add_run(NULL, &o);
	worker_boot_opts_t tiny = { .max_body = 16 };
	expect_error("body cap", &o, &tiny, "GET /env: answer is larger than 16 bytes");
}

static void test_unreachable(void)
{
	dev_stub_otps_t o;
	add_run(NULL, &o);
	worker_boot_t boot;
	char err[512];
	/* A port just released by th_free_port(): nothing listens there.  Port 1
	 * is not safe for this: tests run as root and anything may bind it. */
	int closed = th_free_port();
	const char *url = th_strf("http://127.0.0.1:%d/ws/sess?sig=QUERY-SECRET", closed);
	TH_CHECK(worker_bootstrap_fetch(url, o.otp_setup, o.otp_run, NULL, &boot,
	                                err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, th_strf("GET /env: could not connect to 127.0.0.1:%d (Connection refused)", closed)),
	         "%s", err);
	TH_CHECK(!strstr(err, "QUERY-SECRET"));
	no_secret(err, &o);

	TH_CHECK(worker_bootstrap_fetch("ftp://127.0.0.1/x", o.otp_setup, o.otp_run, NULL, &boot,
	                                err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "agent_url is not a valid http(s) URL"), "%s", err);
	TH_CHECK(worker_bootstrap_fetch("not a url", o.otp_setup, o.otp_run, NULL, &boot,
	                                err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "agent_url is not a valid http(s) URL"), "%s", err);
}

static void test_shapes(void)
{
	static const struct {
		const char *env, *config, *want;
	} cases[] = {
		{ "{\"variables\":[1]}", NULL, "GET /env: \"variables\" is not an object" },
		{ "{\"variables\":{\"A\":1}}", NULL, "GET /env: variable \"A\" is not a string" },
		{ "{\"variables\":{\"A=B\":\"x\"}}", NULL, "GET /env: variable name \"A=B\" is not valid" },
		{ "{\"variables\":{},\"setup_script\":5}", NULL,
		  "GET /env: \"setup_script\" is not a string or null" },
		{ NULL, "{\"skills\":{}}", "GET /config: \"skills\" is not an array" },
		{ NULL, "{\"skills\":[{\"name\":\"x\"}]}",
		  "GET /config: skills[0] is not {\"name\":\"...\",\"zip_url\":\"...\"}" },
		{ NULL, "{\"skills\":[{\"name\":\"../up\",\"zip_url\":\"http://x/\"}]}",
		  "GET /config: skill name \"../up\" is not valid" },
		{ NULL, "{\"model\":7}", "GET /config: \"model\" is not a string" },
		{ NULL, "{\"agent\":\"mock\"}", "GET /config: \"agent\" is not an object" },
		{ NULL, "{\"assets\":{\"zip_url\":1}}", "GET /config: \"assets.zip_url\" is not a string" },
		{ NULL, "{\"max_runtime_sec\":\"1h\"}",
		  "GET /config: \"max_runtime_sec\" is not a non-negative integer" },
		{ NULL, "{\"a\":1,\"a\":2}", "GET /config: answer is not JSON" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dev_stub_run_t run = { .env_json = cases[i].env, .config_json = cases[i].config };
		dev_stub_otps_t o;
		add_run(&run, &o);
		expect_error(cases[i].want, &o, NULL, cases[i].want);
	}
}

/* /env and /config are independent: both are in flight at once. */
static void test_concurrent(void)
{
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].delay_ms = 600;
	run.faults[DEV_STUB_EP_CONFIG].delay_ms = 600;
	dev_stub_otps_t o;
	add_run(&run, &o);
	worker_boot_t boot;
	char err[512] = "";
	int64_t t0 = th_now_ms();
	int rc = worker_bootstrap_fetch(o.agent_url, o.otp_setup, o.otp_run, NULL, &boot, err, sizeof(err));
	int64_t took = th_now_ms() - t0;
	TH_CHECK(rc == 0, "%s", err);
	/* One after the other would take 1200 ms. */
	TH_CHECK(took >= 600 && took < 1100, "took %lld ms", (long long)took);
	worker_boot_clear(&boot);
}

int main(void)
{
	th_init("stages_bootstrap");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	char err[256];
	stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(stub, "stub: %s", err);

	test_success();
	test_http_failures();
	test_unreachable();
	test_shapes();
	test_concurrent();

	dev_stub_stop(stub);
	curl_global_cleanup();
	return th_done();
}
