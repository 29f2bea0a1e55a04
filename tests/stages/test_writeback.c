/*
 * tests/stages/test_writeback.c - POST /results against the real workspace
 * stub: relative names and exact bytes arrive, links and fifos are skipped
 * (never followed), caps refuse before any request, nothing to send means
 * no request, and HTTP failures give their exact message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "dev/stub.h"
#include "tests/support/harness.h"
#include "worker/writeback.h"

static dev_stub_t *stub;
static int dirs;

/* A fresh assets/ dir. */
static const char *new_assets(void)
{
	const char *d = th_strf("%s/assets%d", th_tmpdir(), ++dirs);
	TH_REQUIRE(mkdir(d, 0755) == 0);
	return d;
}

static void put(const char *dir, const char *rel, const void *data, size_t len)
{
	char *path = th_strf("%s/%s", dir, rel);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	char *mk[] = { "mkdir", "-p", path, NULL };
	TH_REQUIRE(th_run(mk, NULL, NULL, 10000) == 0);
	*slash = '/';
	TH_REQUIRE(th_file_write(path, data, len) == 0);
}

static int results_calls(const char *session)
{
	dev_stub_ep_stats_t st;
	if (dev_stub_stats(stub, session, DEV_STUB_EP_RESULTS, &st) != 0)
		return -1;
	return st.calls;
}

static void no_secret(const char *err, const dev_stub_otps_t *o)
{
	TH_CHECK(!strstr(err, o->otp_upload), "upload OTP in \"%s\"", err);
}

static void test_upload(void)
{
	const char *a = new_assets();
	static const char bin[] = { 'b', 0, 1, 2, (char)0xff, 'z' };
	put(a, "a.txt", "alpha\n", 6);
	put(a, "sub/b.bin", bin, sizeof(bin));
	put(a, "sub/deeper/c.txt", "gamma", 5);
	put(a, "empty.txt", "", 0);
	TH_REQUIRE(symlink("/etc/shadow", th_strf("%s/leak", a)) == 0);
	TH_REQUIRE(symlink("/etc", th_strf("%s/sub/etc-dir", a)) == 0);
	TH_REQUIRE(mkfifo(th_strf("%s/pipe", a), 0644) == 0);

	dev_stub_otps_t o;
	TH_REQUIRE(dev_stub_add_run(stub, NULL, &o) == 0);
	size_t nf = 99, ns = 99;
	char err[512] = "";
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, NULL, &nf, &ns,
	                                 err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(nf == 4, "nfiles %zu", nf);
	TH_CHECK(ns == 3, "nskipped %zu (leak, etc-dir, pipe)", ns);
	TH_CHECK(results_calls(o.session) == 1);

	size_t n = 0;
	char **names = dev_stub_file_names(stub, o.session, &n);
	TH_CHECK(n == 4, "%zu files received", n);
	const char *want[] = { "a.txt", "empty.txt", "sub/b.bin", "sub/deeper/c.txt" };
	for (size_t i = 0; i < n && i < 4; i++)
		TH_CHECK(th_streq(names[i], want[i]), "file %zu is %s, want %s", i, names[i], want[i]);
	th_strv_free(names, n);

	char *data = NULL;
	size_t len = 0;
	TH_CHECK(dev_stub_file_get(stub, o.session, "a.txt", &data, &len) == 1 &&
	         len == 6 && memcmp(data, "alpha\n", 6) == 0);
	free(data);
	TH_CHECK(dev_stub_file_get(stub, o.session, "sub/b.bin", &data, &len) == 1 &&
	         len == sizeof(bin) && memcmp(data, bin, sizeof(bin)) == 0);
	free(data);
	TH_CHECK(dev_stub_file_get(stub, o.session, "sub/deeper/c.txt", &data, &len) == 1 &&
	         len == 5 && memcmp(data, "gamma", 5) == 0);
	free(data);
	TH_CHECK(dev_stub_file_get(stub, o.session, "empty.txt", &data, &len) == 1 && len == 0);
	free(data);
	TH_CHECK(dev_stub_file_get(stub, o.session, "leak", &data, &len) == 0, "symlink followed");

	/* The upload OTP works once. */
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, NULL, &nf, &ns,
	                                 err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "POST /results answered HTTP 401"), "%s", err);
	no_secret(err, &o);
}

static void test_caps_and_nothing(void)
{
	dev_stub_otps_t o;
	TH_REQUIRE(dev_stub_add_run(stub, NULL, &o) == 0);
	size_t nf, ns;
	char err[512];

	const char *a = new_assets();
	for (int i = 0; i < 4; i++)
		put(a, th_strf("f%d.txt", i), "1234", 4);
	worker_wb_limits_t three = { .max_files = 3 };
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, &three, &nf, &ns,
	                                 err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "writeback: more than 3 files in assets/"), "%s", err);
	worker_wb_limits_t ten = { .max_bytes = 10 };
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, &ten, &nf, &ns,
	                                 err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "writeback: assets/ holds more than 10 bytes"), "%s", err);
	TH_CHECK(results_calls(o.session) == 0, "a refused upload made a request");

	/* Only a link and a fifo: nothing to send, no request. */
	const char *b = new_assets();
	TH_REQUIRE(symlink("/etc/shadow", th_strf("%s/leak", b)) == 0);
	TH_REQUIRE(mkfifo(th_strf("%s/pipe", b), 0644) == 0);
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, b, NULL, &nf, &ns,
	                                 err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(nf == 0 && ns == 2, "nf %zu ns %zu", nf, ns);

	/* assets/ missing, or itself a link: nothing to send. */
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, th_strf("%s/gone", th_tmpdir()),
	                                 NULL, &nf, &ns, err, sizeof(err)) == 0);
	TH_CHECK(nf == 0 && ns == 0);
	const char *ln = th_strf("%s/assets-link", th_tmpdir());
	TH_REQUIRE(symlink(a, ln) == 0);
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, ln, NULL, &nf, &ns,
	                                 err, sizeof(err)) == 0);
	TH_CHECK(nf == 0 && ns == 1, "nf %zu ns %zu", nf, ns);
	TH_CHECK(results_calls(o.session) == 0, "an empty upload made a request");

	/* The OTP was never spent: a real upload still works. */
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, NULL, &nf, &ns,
	                                 err, sizeof(err)) == 0,
	         "%s", err);
	TH_CHECK(nf == 4);
}

static void test_http_failures(void)
{
	const char *a = new_assets();
	put(a, "x.txt", "x", 1);
	size_t nf, ns;
	char err[512];

	dev_stub_run_t run = { .results_status = 500 };
	dev_stub_otps_t o;
	TH_REQUIRE(dev_stub_add_run(stub, &run, &o) == 0);
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, NULL, &nf, &ns,
	                                 err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "POST /results answered HTTP 500"), "%s", err);
	TH_CHECK(nf == 0);
	TH_CHECK(results_calls(o.session) == 1, "retried");
	no_secret(err, &o);

	memset(&run, 0, sizeof(run));
	run.faults[DEV_STUB_EP_RESULTS].redirect = "/blobs/x";
	TH_REQUIRE(dev_stub_add_run(stub, &run, &o) == 0);
	TH_CHECK(worker_writeback_upload(o.agent_url, o.otp_upload, a, NULL, &nf, &ns,
	                                 err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "POST /results answered a redirect (HTTP 302); redirects are not followed"),
	         "%s", err);
	TH_CHECK(results_calls(o.session) == 1);

	int closed = th_free_port(); /* nothing listens there; port 1 may be bound by anything under root */
	TH_CHECK(worker_writeback_upload(th_strf("http://127.0.0.1:%d/ws/s?sig=Q-SECRET", closed), o.otp_upload, a,
	                                 NULL, &nf, &ns, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, th_strf("POST /results: could not connect to 127.0.0.1:%d (Connection refused)", closed)),
	         "%s", err);
	TH_CHECK(!strstr(err, "Q-SECRET"));
	no_secret(err, &o);
}

int main(void)
{
	th_init("stages_writeback");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	char err[256];
	stub = dev_stub_start(NULL, err, sizeof(err));
	TH_REQUIRE(stub, "stub: %s", err);

	test_upload();
	test_caps_and_nothing();
	test_http_failures();

	dev_stub_stop(stub);
	curl_global_cleanup();
	return th_done();
}
