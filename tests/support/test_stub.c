/*
 * tests/support/test_stub.c - the workspace stub against a real HTTP client
 * (libcurl): bearer checks, single-use OTPs, every fault kind, multipart
 * uploads, blobs, the body cap, folder mode and the runnel-workspace-stub
 * program.
 */
#include "tests/support/body.h"
#include "tests/support/harness.h"
#include "dev/stub.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef STUB_PROGRAM
#error STUB_PROGRAM must name the runnel-workspace-stub binary
#endif
#ifndef EXAMPLES_AGENTS_DIR
#error EXAMPLES_AGENTS_DIR must name examples/agents
#endif

typedef struct resp {
	CURLcode rc;
	long status;
	th_body_t rx; /* TH_BODY_FAIL at TH_BODY_MAX */
	char location[512];
} resp_t;

static void resp_free(resp_t *r)
{
	th_body_free(&r->rx);
	memset(r, 0, sizeof(*r));
}

/* One request.  mime non-NULL makes it a multipart POST; post_empty a POST
 * without body. */
static void http(resp_t *r, const char *url, const char *bearer, curl_mime *mime,
                 int post_empty, long timeout_ms, int follow)
{
	memset(r, 0, sizeof(*r));
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	if (bearer) {
		char line[256];
		snprintf(line, sizeof(line), "Authorization: Bearer %s", bearer);
		h = curl_slist_append(h, line);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_body_sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->rx);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, (long)follow);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (mime)
		curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
	else if (post_empty)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	r->rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	char *loc = NULL;
	if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
		snprintf(r->location, sizeof(r->location), "%s", loc);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

static char *ep_url(const dev_stub_otps_t *o, const char *ep)
{
	return th_strf("%s/%s", o->agent_url, ep);
}

static void test_auth(dev_stub_t *s)
{
	dev_stub_otps_t o;
	json_t *env = json_pack("{s:{s:s}}", "variables", "GREETING", "hi");
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	run.env = env;
	TH_REQUIRE(dev_stub_add_run(s, &run, &o) == 0);
	json_decref(env);
	TH_CHECK(strncmp(o.otp_setup, "otp_", 4) == 0 && strlen(o.otp_setup) == 36, "otp shape");
	TH_CHECK(strcmp(o.otp_setup, o.otp_run) != 0 && strcmp(o.otp_run, o.otp_upload) != 0);
	TH_CHECK(strncmp(o.agent_url, dev_stub_url(s), strlen(dev_stub_url(s))) == 0);

	resp_t r;
	/* Missing, wrong, and another endpoint's OTP: 401 bad token. */
	http(&r, ep_url(&o, "env"), NULL, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 401 && th_streq(r.rx.body, "{\"error\":\"bad token\"}"), "%ld %s", r.status, r.rx.body);
	resp_free(&r);
	http(&r, ep_url(&o, "env"), o.otp_run, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 401, "otp of another endpoint: %ld", r.status);
	resp_free(&r);

	http(&r, ep_url(&o, "env"), o.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 200, "env %ld", r.status);
	json_t *j = r.rx.body ? json_loads(r.rx.body, 0, NULL) : NULL;
	TH_CHECK(j && th_streq(json_string_value(json_object_get(json_object_get(j, "variables"), "GREETING")), "hi"));
	TH_CHECK(j && json_is_null(json_object_get(j, "setup_script")), "default setup_script null");
	json_decref(j);
	resp_free(&r);

	/* Second use of the same OTP. */
	http(&r, ep_url(&o, "env"), o.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 401 && th_streq(r.rx.body, "{\"error\":\"token already used\"}"), "%ld %s", r.status, r.rx.body);
	resp_free(&r);

	dev_stub_ep_stats_t st;
	TH_CHECK(dev_stub_stats(s, o.session, DEV_STUB_EP_ENV, &st) == 0);
	TH_CHECK(st.calls == 4 && st.ok == 1 && st.bad_token == 2 && st.reused == 1 && st.last_status == 401,
	         "calls %d ok %d bad %d reused %d", st.calls, st.ok, st.bad_token, st.reused);

	/* Config defaults. */
	http(&r, ep_url(&o, "config"), o.otp_run, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 200);
	j = r.rx.body ? json_loads(r.rx.body, 0, NULL) : NULL;
	json_t *agent = json_object_get(j, "agent");
	TH_CHECK(th_streq(json_string_value(json_object_get(agent, "kind")), "mock"));
	TH_CHECK(th_streq(json_string_value(json_object_get(agent, "script")), "demo"));
	TH_CHECK(json_is_array(json_object_get(j, "skills")) && json_is_array(json_object_get(j, "mcp_servers")));
	TH_CHECK(json_is_string(json_object_get(j, "system_prompt")) && json_is_string(json_object_get(j, "model")));
	json_decref(j);
	resp_free(&r);

	/* Wrong method, unknown session, unknown route. */
	http(&r, ep_url(&o, "config"), o.otp_run, NULL, 1, 5000, 0);
	TH_CHECK(r.status == 405, "POST /config %ld", r.status);
	resp_free(&r);
	http(&r, th_strf("%s/ws/sess_nope/env", dev_stub_url(s)), o.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 404);
	resp_free(&r);
	int unknown = dev_stub_unknown_requests(s);
	http(&r, th_strf("%s/nothing", dev_stub_url(s)), NULL, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 404 && dev_stub_unknown_requests(s) == unknown + 1);
	resp_free(&r);
	TH_CHECK(dev_stub_total_calls(s, o.session) == 6, "total %d", dev_stub_total_calls(s, o.session));
}

static void test_faults(dev_stub_t *s)
{
	dev_stub_otps_t o;
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].status = 500;
	run.faults[DEV_STUB_EP_CONFIG].body = "this is not json";
	TH_REQUIRE(dev_stub_add_run(s, &run, &o) == 0);

	resp_t r;
	http(&r, ep_url(&o, "env"), o.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 500 && th_streq(r.rx.body, "{\"error\":\"injected\"}"), "%ld", r.status);
	resp_free(&r);
	http(&r, ep_url(&o, "config"), o.otp_run, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 200 && th_streq(r.rx.body, "this is not json"));
	resp_free(&r);
	dev_stub_ep_stats_t st;
	dev_stub_stats(s, o.session, DEV_STUB_EP_ENV, &st);
	TH_CHECK(st.faulted == 1 && st.ok == 0 && st.last_status == 500);
	/* A faulted call has spent the OTP. */
	http(&r, ep_url(&o, "env"), o.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 401);
	resp_free(&r);

	/* Delay: a short client timeout gives up; a patient client gets it. */
	dev_stub_otps_t d;
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].delay_ms = 1500;
	run.faults[DEV_STUB_EP_CONFIG].delay_ms = 150;
	TH_REQUIRE(dev_stub_add_run(s, &run, &d) == 0);
	int64_t t0 = th_now_ms();
	http(&r, ep_url(&d, "env"), d.otp_setup, NULL, 0, 200, 0);
	TH_CHECK(r.rc == CURLE_OPERATION_TIMEDOUT, "rc %d", (int)r.rc);
	resp_free(&r);
	t0 = th_now_ms();
	http(&r, ep_url(&d, "config"), d.otp_run, NULL, 0, 5000, 0);
	int64_t took = th_now_ms() - t0;
	TH_CHECK(r.status == 200 && took >= 140, "status %ld after %lld ms", r.status, (long long)took);
	resp_free(&r);

	/* Redirect to a blob: not followed, the 302 and its Location show;
	 * followed by a client that keeps the header, the blob records the
	 * forwarded Authorization. */
	TH_REQUIRE(dev_stub_add_blob(s, "target.txt", "blob!", 5) == 0);
	dev_stub_otps_t rd;
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].redirect = "/blobs/target.txt";
	run.faults[DEV_STUB_EP_CONFIG].redirect = "/blobs/target.txt";
	TH_REQUIRE(dev_stub_add_run(s, &run, &rd) == 0);
	http(&r, ep_url(&rd, "env"), rd.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 302 && th_streq(r.location, th_strf("%s/blobs/target.txt", dev_stub_url(s))),
	         "%ld %s", r.status, r.location);
	resp_free(&r);
	http(&r, ep_url(&rd, "config"), rd.otp_run, NULL, 0, 5000, 1);
	TH_CHECK(r.status == 200 && th_streq(r.rx.body, "blob!"), "followed %ld", r.status);
	resp_free(&r);
	dev_stub_blob_stats_t bs;
	TH_CHECK(dev_stub_blob_stats(s, "target.txt", &bs) == 0 && bs.calls == 1 && bs.with_authorization == 1,
	         "blob calls %d auth %d", bs.calls, bs.with_authorization);

	/* Close without an answer, at once and after a delay. */
	dev_stub_otps_t c;
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_ENV].close = 1;
	run.faults[DEV_STUB_EP_CONFIG].close = 1;
	run.faults[DEV_STUB_EP_CONFIG].delay_ms = 100;
	TH_REQUIRE(dev_stub_add_run(s, &run, &c) == 0);
	http(&r, ep_url(&c, "env"), c.otp_setup, NULL, 0, 5000, 0);
	TH_CHECK(r.rc == CURLE_GOT_NOTHING, "rc %d", (int)r.rc);
	resp_free(&r);
	http(&r, ep_url(&c, "config"), c.otp_run, NULL, 0, 5000, 0);
	TH_CHECK(r.rc == CURLE_GOT_NOTHING, "rc %d", (int)r.rc);
	resp_free(&r);
	dev_stub_stats(s, c.session, DEV_STUB_EP_CONFIG, &st);
	TH_CHECK(st.faulted == 1 && st.last_status == 0);

	/* A fault set after the run was added. */
	dev_stub_fault_t f = { .status = 503 };
	TH_CHECK(dev_stub_set_fault(s, c.session, DEV_STUB_EP_RESULTS, &f) == 0);
	http(&r, ep_url(&c, "results"), c.otp_upload, NULL, 1, 5000, 0);
	TH_CHECK(r.status == 503);
	resp_free(&r);
	TH_CHECK(dev_stub_set_fault(s, "sess_unknown", DEV_STUB_EP_ENV, &f) == -1);
}

/* Many clients at once (curl multi), and one keep-alive connection
 * carrying several requests, a delayed answer among them. */
static void test_concurrency(dev_stub_t *s)
{
	enum { N = 24 };
	dev_stub_otps_t o[N];
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	CURLM *multi = curl_multi_init();
	CURL *e[N];
	struct curl_slist *h[N];
	resp_t r[N];
	for (int i = 0; i < N; i++) {
		run.faults[DEV_STUB_EP_ENV].delay_ms = (i % 3) * 50;
		TH_REQUIRE(dev_stub_add_run(s, &run, &o[i]) == 0);
		memset(&r[i], 0, sizeof(r[i]));
		e[i] = curl_easy_init();
		h[i] = curl_slist_append(NULL, th_strf("Authorization: Bearer %s", o[i].otp_setup));
		curl_easy_setopt(e[i], CURLOPT_URL, ep_url(&o[i], "env"));
		curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, h[i]);
		curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, th_body_sink);
		curl_easy_setopt(e[i], CURLOPT_WRITEDATA, &r[i].rx);
		curl_easy_setopt(e[i], CURLOPT_TIMEOUT_MS, 10000L);
		curl_multi_add_handle(multi, e[i]);
	}
	int running = 1;
	while (running) {
		curl_multi_perform(multi, &running);
		if (running)
			curl_multi_poll(multi, NULL, 0, 100, NULL);
	}
	int ok = 0;
	for (int i = 0; i < N; i++) {
		long st = 0;
		curl_easy_getinfo(e[i], CURLINFO_RESPONSE_CODE, &st);
		ok += st == 200 && r[i].rx.body && strstr(r[i].rx.body, "variables");
		curl_multi_remove_handle(multi, e[i]);
		curl_easy_cleanup(e[i]);
		curl_slist_free_all(h[i]);
		resp_free(&r[i]);
	}
	curl_multi_cleanup(multi);
	TH_CHECK(ok == N, "%d of %d parallel answers", ok, N);

	/* Keep-alive: one handle, one connection, four requests. */
	dev_stub_otps_t k;
	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_CONFIG].delay_ms = 100;
	TH_REQUIRE(dev_stub_add_run(s, &run, &k) == 0);
	CURL *c = curl_easy_init();
	const char *urls[] = { ep_url(&k, "env"), ep_url(&k, "env"), ep_url(&k, "config"), ep_url(&k, "config") };
	const char *toks[] = { "wrong", k.otp_setup, k.otp_run, k.otp_run };
	long want[] = { 401, 200, 200, 401 };
	for (int i = 0; i < 4; i++) {
		resp_t rr;
		memset(&rr, 0, sizeof(rr));
		struct curl_slist *hh = curl_slist_append(NULL, th_strf("Authorization: Bearer %s", toks[i]));
		curl_easy_setopt(c, CURLOPT_URL, urls[i]);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hh);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_body_sink);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &rr.rx);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
		CURLcode rc = curl_easy_perform(c);
		long st = 0, conns = -1;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
		curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &conns);
		TH_CHECK(rc == CURLE_OK && st == want[i], "request %d: rc %d status %ld", i, (int)rc, st);
		if (i > 0)
			TH_CHECK(conns == 0, "request %d reused the connection (%ld new)", i, conns);
		curl_slist_free_all(hh);
		resp_free(&rr);
	}
	curl_easy_cleanup(c);
}

/* Adds a part called name to m: a file part when filename is set, else a
 * plain field; len may be CURL_ZERO_TERMINATED. */
static void mime_part(curl_mime *m, const char *name, const char *filename, const char *data, size_t len)
{
	curl_mimepart *p = curl_mime_addpart(m);
	curl_mime_name(p, name);
	if (filename)
		curl_mime_filename(p, filename);
	curl_mime_data(p, data, len);
}

static const char bin[] = "\x00\x01\r\n--not-a-boundary\r\n\xff";

static void test_upload(dev_stub_t *s, const char *results_dir)
{
	dev_stub_otps_t o;
	TH_REQUIRE(dev_stub_add_run(s, NULL, &o) == 0);
	CURL *c = curl_easy_init();
	curl_mime *m = curl_mime_init(c);
	mime_part(m, "files", "out.txt", "hello assets\n", CURL_ZERO_TERMINATED);
	mime_part(m, "files", "sub/dir/data.bin", bin, sizeof(bin) - 1);
	mime_part(m, "note", NULL, "not a file", CURL_ZERO_TERMINATED);

	resp_t r;
	http(&r, ep_url(&o, "results"), o.otp_upload, m, 0, 5000, 0);
	TH_CHECK(r.status == 200 && th_streq(r.rx.body, "{\"ok\":true,\"files\":2}"), "%ld %s", r.status, r.rx.body);
	resp_free(&r);
	size_t n = 0;
	char **names = dev_stub_file_names(s, o.session, &n);
	TH_CHECK(n == 2 && th_streq(names[0], "out.txt") && th_streq(names[1], "sub/dir/data.bin"), "%zu files", n);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	char *data;
	size_t len;
	TH_CHECK(dev_stub_file_get(s, o.session, "out.txt", &data, &len) == 1 && len == 13 &&
	         memcmp(data, "hello assets\n", 13) == 0);
	free(data);
	TH_CHECK(dev_stub_file_get(s, o.session, "sub/dir/data.bin", &data, &len) == 1 &&
	                 len == sizeof(bin) - 1 && memcmp(data, bin, len) == 0,
	         "binary part intact (%zu)", len);
	free(data);
	TH_CHECK(dev_stub_file_get(s, o.session, "leak.txt", &data, &len) == 0);
	/* Written under results_dir/<session>/ too. */
	char *disk = th_file_read(th_strf("%s/%s/sub/dir/data.bin", results_dir, o.session), &len);
	TH_CHECK(disk && len == sizeof(bin) - 1 && memcmp(disk, bin, len) == 0);
	free(disk);

	curl_mime_free(m);

	/* The upload OTP is spent now. */
	m = curl_mime_init(c);
	mime_part(m, "files", "again.txt", "again", CURL_ZERO_TERMINATED);
	http(&r, ep_url(&o, "results"), o.otp_upload, m, 0, 5000, 0);
	TH_CHECK(r.status == 401, "%ld rc %d", r.status, (int)r.rc);
	resp_free(&r);
	curl_mime_free(m);
	curl_easy_cleanup(c);

	/* Not multipart: 400, recorded. */
	dev_stub_otps_t b;
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	run.results_status = 500;
	TH_REQUIRE(dev_stub_add_run(s, &run, &b) == 0);
	http(&r, ep_url(&b, "results"), b.otp_upload, NULL, 1, 5000, 0);
	TH_CHECK(r.status == 400);
	resp_free(&r);
	dev_stub_ep_stats_t st;
	dev_stub_stats(s, b.session, DEV_STUB_EP_RESULTS, &st);
	TH_CHECK(st.bad_request == 1);
}

static void test_results_status_and_cap(void)
{
	char err[256];
	dev_stub_opts_t opts = { .max_body = 4096 };
	dev_stub_t *s = dev_stub_start(&opts, err, sizeof(err));
	TH_REQUIRE(s, "%s", err);
	dev_stub_otps_t o, big;
	dev_stub_run_t run;
	memset(&run, 0, sizeof(run));
	run.results_status = 500;
	TH_REQUIRE(dev_stub_add_run(s, &run, &o) == 0);
	TH_REQUIRE(dev_stub_add_run(s, NULL, &big) == 0);

	CURL *c = curl_easy_init();
	curl_mime *m = curl_mime_init(c);
	mime_part(m, "files", "a.txt", "a", CURL_ZERO_TERMINATED);
	resp_t r;
	http(&r, ep_url(&o, "results"), o.otp_upload, m, 0, 5000, 0);
	TH_CHECK(r.status == 500, "results_status %ld", r.status);
	resp_free(&r);
	curl_mime_free(m);

	char *blob = malloc(8192);
	memset(blob, 'x', 8192);
	m = curl_mime_init(c);
	mime_part(m, "files", "big.txt", blob, 8192);
	http(&r, ep_url(&big, "results"), big.otp_upload, m, 0, 5000, 0);
	TH_CHECK(r.status == 413, "over the cap: %ld", r.status);
	resp_free(&r);
	curl_mime_free(m);
	free(blob);
	curl_easy_cleanup(c);
	dev_stub_stop(s);

	/* A 2 MiB upload (curl sends Expect: 100-continue) under a bigger cap;
	 * max_store keeps the small file in memory, counts the big one. */
	dev_stub_opts_t big_opts = { .max_body = 4u << 20, .max_store = 1024 };
	s = dev_stub_start(&big_opts, err, sizeof(err));
	TH_REQUIRE(s, "%s", err);
	TH_REQUIRE(dev_stub_add_run(s, NULL, &o) == 0);
	size_t blen = 2u << 20;
	blob = malloc(blen);
	for (size_t i = 0; i < blen; i++)
		blob[i] = (char)('a' + i % 26);
	c = curl_easy_init();
	m = curl_mime_init(c);
	mime_part(m, "files", "small.txt", "small", CURL_ZERO_TERMINATED);
	mime_part(m, "files", "big.bin", blob, blen);
	http(&r, ep_url(&o, "results"), o.otp_upload, m, 0, 10000, 0);
	TH_CHECK(r.status == 200 && th_streq(r.rx.body, "{\"ok\":true,\"files\":2}"), "2 MiB upload: %ld %s", r.status, r.rx.body);
	resp_free(&r);
	curl_mime_free(m);
	curl_easy_cleanup(c);
	free(blob);
	size_t n = 0;
	char **names = dev_stub_file_names(s, o.session, &n);
	TH_CHECK(n == 2, "%zu names", n);
	th_strv_free(names, n);
	char *data;
	size_t len;
	TH_CHECK(dev_stub_file_get(s, o.session, "small.txt", &data, &len) == 1 && len == 5);
	free(data);
	TH_CHECK(dev_stub_file_get(s, o.session, "big.bin", &data, &len) == 0, "over max_store: not kept");
	dev_stub_stop(s);

	/* Only loopback. */
	dev_stub_opts_t wide = { .listen = "0.0.0.0:0" };
	TH_CHECK(!dev_stub_start(&wide, err, sizeof(err)) && strstr(err, "loopback"), "%s", err);
}

static void test_blob_faults(dev_stub_t *s)
{
	unsigned char zip[300];
	for (size_t i = 0; i < sizeof(zip); i++)
		zip[i] = (unsigned char)i;
	TH_REQUIRE(dev_stub_add_blob(s, "bag.zip", zip, sizeof(zip)) == 0);
	char url[256];
	TH_REQUIRE(dev_stub_blob_url(s, "bag.zip", url, sizeof(url)) == 0);
	resp_t r;
	http(&r, url, NULL, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 200 && r.rx.len == sizeof(zip) && memcmp(r.rx.body, zip, sizeof(zip)) == 0);
	resp_free(&r);
	dev_stub_fault_t f = { .status = 403 };
	TH_CHECK(dev_stub_set_blob_fault(s, "bag.zip", &f) == 0);
	http(&r, url, NULL, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 403);
	resp_free(&r);
	dev_stub_blob_stats_t bs;
	TH_CHECK(dev_stub_blob_stats(s, "bag.zip", &bs) == 0 && bs.calls == 2 && bs.with_authorization == 0);
	http(&r, th_strf("%s/blobs/missing.zip", dev_stub_url(s)), NULL, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 404);
	resp_free(&r);
	TH_CHECK(dev_stub_add_blob(s, "../x", "a", 1) == -1);
}

static void test_folder(void)
{
	const char *dir = th_tmpdir();
	TH_REQUIRE(dir);
	const char *def = "{\"env\":{\"variables\":{\"A\":\"1\"}},"
	                  "\"config\":{\"assets\":{\"zip_url\":\"${RUNNEL_STUB_URL}/blobs/bag.zip\"}}}";
	TH_REQUIRE(th_file_write(th_strf("%s/mine.json", dir), def, strlen(def)) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/broken.json", dir), "{", 1) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/bag.zip", dir), "PK-bytes", 8) == 0);
	char err[256];
	dev_stub_opts_t opts = { .agents_dir = dir, .enable_mint = 1, .blobs_dir = dir };
	dev_stub_t *s = dev_stub_start(&opts, err, sizeof(err));
	TH_REQUIRE(s, "%s", err);
	dev_stub_otps_t o;
	TH_CHECK(dev_stub_add_run_from_agent(s, "nope", &o) == -1);
	TH_CHECK(dev_stub_add_run_from_agent(s, "broken", &o) == -1);
	TH_CHECK(dev_stub_add_run_from_agent(s, "../mine", &o) == -1);
	TH_REQUIRE(dev_stub_add_run_from_agent(s, "mine", &o) == 0);
	resp_t r;
	http(&r, ep_url(&o, "config"), o.otp_run, NULL, 0, 5000, 0);
	json_t *j = r.rx.body ? json_loads(r.rx.body, 0, NULL) : NULL;
	const char *zip = json_string_value(json_object_get(json_object_get(j, "assets"), "zip_url"));
	zip = zip ? th_strf("%s", zip) : NULL; /* outlives j */
	TH_CHECK(th_streq(zip, th_strf("%s/blobs/bag.zip", dev_stub_url(s))), "placeholder: %s", zip);
	TH_CHECK(th_streq(json_string_value(json_object_get(json_object_get(j, "agent"), "kind")), "mock"));
	json_decref(j);
	resp_free(&r);
	/* ... and that URL serves the file from blobs_dir. */
	if (zip) {
		http(&r, zip, NULL, NULL, 0, 5000, 0);
		TH_CHECK(r.status == 200 && r.rx.len == 8 && memcmp(r.rx.body, "PK-bytes", 8) == 0, "blob from dir: %ld", r.status);
		resp_free(&r);
		dev_stub_blob_stats_t bs;
		TH_CHECK(dev_stub_blob_stats(s, "bag.zip", &bs) == 0 && bs.calls == 1);
	}
	http(&r, th_strf("%s/blobs/..", dev_stub_url(s)), NULL, NULL, 0, 5000, 0);
	TH_CHECK(r.status == 404, "dotdot blob %ld", r.status);
	resp_free(&r);

	/* POST /mint. */
	http(&r, th_strf("%s/mint?agent=mine", dev_stub_url(s)), NULL, NULL, 1, 5000, 0);
	TH_CHECK(r.status == 200);
	j = r.rx.body ? json_loads(r.rx.body, 0, NULL) : NULL;
	const char *au = json_string_value(json_object_get(j, "agent_url"));
	const char *otp = json_string_value(json_object_get(j, "otp_setup"));
	TH_CHECK(au && otp && json_is_string(json_object_get(j, "otp_run")) &&
	         json_is_string(json_object_get(j, "otp_upload")));
	if (au && otp) {
		resp_t e;
		http(&e, th_strf("%s/env", au), otp, NULL, 0, 5000, 0);
		TH_CHECK(e.status == 200 && e.rx.body && strstr(e.rx.body, "\"A\":\"1\""), "%ld", e.status);
		resp_free(&e);
	}
	json_decref(j);
	resp_free(&r);
	http(&r, th_strf("%s/mint?agent=nope", dev_stub_url(s)), NULL, NULL, 1, 5000, 0);
	TH_CHECK(r.status == 404);
	resp_free(&r);
	dev_stub_stop(s);

	/* The shipped examples all mint. */
	dev_stub_opts_t ex = { .agents_dir = EXAMPLES_AGENTS_DIR };
	s = dev_stub_start(&ex, err, sizeof(err));
	TH_REQUIRE(s);
	const char *names[] = { "demo", "echo", "command", "ask", "builtin", "claude", "codex" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		TH_CHECK(dev_stub_add_run_from_agent(s, names[i], &o) == 0, "examples/agents/%s.json", names[i]);
	dev_stub_stop(s);
}

/* The env values: "${NAME}" variables from the caller's environment, left
 * out when the caller has none; anything else as written. */
static void test_env_values(void)
{
	const char *dir = th_tmpdir();
	TH_REQUIRE(dir);
	const char *def = "{\"env\":{\"variables\":{\"ANTHROPIC_API_KEY\":\"${ANTHROPIC_API_KEY}\","
	                  "\"OPENAI_API_KEY\":\"${OPENAI_API_KEY}\",\"KEEP\":\"x${ANTHROPIC_API_KEY}\","
	                  "\"OTHER\":\"${ANTHROPIC_API_KEYS}\",\"PLAIN\":\"v\"}}}";
	TH_REQUIRE(th_file_write(th_strf("%s/keys.json", dir), def, strlen(def)) == 0);
	/* A key with characters JSON must escape stays one string. */
	const char *vals[] = { "ANTHROPIC_API_KEY=sk-\"quoted\"\\key", "OPENAI_API_KEY", NULL };
	char err[256];
	dev_stub_opts_t opts = { .agents_dir = dir, .env_values = vals };
	dev_stub_t *s = dev_stub_start(&opts, err, sizeof(err));
	TH_REQUIRE(s, "%s", err);
	dev_stub_otps_t o;
	TH_REQUIRE(dev_stub_add_run_from_agent(s, "keys", &o) == 0);
	resp_t r;
	http(&r, ep_url(&o, "env"), o.otp_setup, NULL, 0, 5000, 0);
	json_t *j = r.rx.body ? json_loads(r.rx.body, 0, NULL) : NULL;
	json_t *v = json_object_get(j, "variables");
	TH_CHECK(r.status == 200 && json_is_object(v), "%ld %s", r.status, r.rx.body ? r.rx.body : "");
	TH_CHECK(th_streq(json_string_value(json_object_get(v, "ANTHROPIC_API_KEY")), "sk-\"quoted\"\\key"));
	TH_CHECK(!json_object_get(v, "OPENAI_API_KEY"), "an unset key is left out");
	TH_CHECK(th_streq(json_string_value(json_object_get(v, "KEEP")), "x${ANTHROPIC_API_KEY}"));
	TH_CHECK(th_streq(json_string_value(json_object_get(v, "OTHER")), "${ANTHROPIC_API_KEYS}"));
	TH_CHECK(th_streq(json_string_value(json_object_get(v, "PLAIN")), "v"));
	json_decref(j);
	resp_free(&r);
	dev_stub_stop(s);
}

typedef struct url_wait {
	const char *log;
	char url[128];
} url_wait_t;

static int stub_listening(void *arg)
{
	url_wait_t *w = arg;
	char *s = th_file_read(w->log, NULL);
	const char *p = s ? strstr(s, "listening on ") : NULL;
	int ok = 0;
	if (p && sscanf(p, "listening on %127s", w->url) == 1)
		ok = 1;
	free(s);
	return ok;
}

static int file_nonempty(void *arg)
{
	size_t len = 0;
	char *s = th_file_read(arg, &len);
	free(s);
	return s && len > 0;
}

static void test_program(void)
{
	const char *dir = th_tmpdir();
	TH_REQUIRE(dir);
	url_wait_t w = { th_strf("%s/stub.log", dir), "" };
	char *argv[] = { STUB_PROGRAM, "--listen", "127.0.0.1:0", "--agents", EXAMPLES_AGENTS_DIR,
		         "--results", th_strf("%s/results", dir), NULL };
	pid_t pid = th_spawn(argv, NULL, w.log);
	TH_REQUIRE(pid > 0);
	TH_REQUIRE(th_wait_until(stub_listening, &w, 10000), "stub program did not start");

	char *out = th_strf("%s/mint.out", dir);
	char *margv[] = { STUB_PROGRAM, "--url", w.url, "mint", "command", NULL };
	pid_t m = th_spawn(margv, NULL, out);
	int st;
	TH_CHECK(th_wait_exit(m, 10000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	TH_CHECK(th_wait_until(file_nonempty, out, 2000));
	char *text = th_file_read(out, NULL);
	json_t *j = text ? json_loads(text, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
	const char *au = json_string_value(json_object_get(j, "agent_url"));
	const char *otp = json_string_value(json_object_get(j, "otp_run"));
	TH_CHECK(au && otp, "mint printed %s", text ? text : "(nothing)");
	if (au && otp) {
		resp_t r;
		http(&r, th_strf("%s/config", au), otp, NULL, 0, 5000, 0);
		TH_CHECK(r.status == 200 && r.rx.body && strstr(r.rx.body, "\"kind\":\"command\""));
		resp_free(&r);
	}
	/* The program never logs an OTP. */
	if (otp)
		TH_CHECK(!th_file_contains(w.log, otp), "OTP in the stub's log");
	json_decref(j);
	free(text);

	char *bad[] = { STUB_PROGRAM, "--url", w.url, "mint", "no-such-agent", NULL };
	m = th_spawn(bad, NULL, th_strf("%s/mint-bad.out", dir));
	TH_CHECK(th_wait_exit(m, 10000, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 1);

	st = th_stop(pid, 5000);
	TH_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "stub exit status %d", st);
}

int main(void)
{
	th_init("stub_basics");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const char *results = th_tmpdir();
	TH_REQUIRE(results);
	char err[256];
	dev_stub_opts_t opts = { .results_dir = results };
	dev_stub_t *s = dev_stub_start(&opts, err, sizeof(err));
	TH_REQUIRE(s, "%s", err);
	TH_CHECK(strncmp(dev_stub_url(s), "http://127.0.0.1:", 17) == 0 && dev_stub_port(s) > 0);

	test_auth(s);
	test_faults(s);
	test_concurrency(s);
	test_upload(s, results);
	test_blob_faults(s);
	dev_stub_stop(s);
	test_results_status_and_cap();
	test_folder();
	test_env_values();
	test_program();
	curl_global_cleanup();
	return th_done();
}
