/*
 * dev/stub_main.c - runnel-workspace-stub: the workspace stub as a program,
 * serving a folder of agent definitions (for `runnel dev` and shell-level
 * tests with curl and kcat), plus a `mint` client verb.
 *
 *   runnel-workspace-stub [--listen ADDR] [--agents DIR] [--results DIR]
 *   runnel-workspace-stub [--url URL] mint AGENT
 */
#include "common/conf.h"
#include "common/log.h"
#include "common/dynbuf.h"
#include "common/util.h"
#include "dev/stub.h"

#include <curl/curl.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *o_listen, *o_agents, *o_results, *o_blobs, *o_url, *o_log_level;
static long o_max_body;

static const rn_opt_t opts[] = {
	{ "listen", 'l', "RUNNEL_STUB_LISTEN", RN_OPT_STR, &o_listen, "127.0.0.1:8787", "ADDR",
	  "loopback address to serve on (port 0: pick a free one)", 0, 0 },
	{ "agents", 'a', "RUNNEL_STUB_AGENTS", RN_OPT_STR, &o_agents, "examples/agents", "DIR",
	  "folder of agent definitions NAME.json ({\"env\":{...},\"config\":{...}})", 0, 0 },
	{ "results", 'r', "RUNNEL_STUB_RESULTS", RN_OPT_STR, &o_results, NULL, "DIR",
	  "write files uploaded to /results under DIR/<session>/", 0, 0 },
	{ "blobs", 'b', "RUNNEL_STUB_BLOBS", RN_OPT_STR, &o_blobs, NULL, "DIR",
	  "serve the files of DIR at /blobs/<name> (bag and skill zips)", 0, 0 },
	{ "max-body", 0, "RUNNEL_STUB_MAX_BODY", RN_OPT_INT, &o_max_body, "67108864", "BYTES",
	  "largest request body accepted (larger: 413)", 1024, 1L << 34 },
	{ "url", 'u', "RUNNEL_STUB_URL", RN_OPT_STR, &o_url, "http://127.0.0.1:8787", "URL",
	  "stub to ask (mint verb)", 0, 0 },
	{ "log-level", 0, "RUNNEL_LOG_LEVEL", RN_OPT_STR, &o_log_level, "info", "LEVEL",
	  "debug, info, warn or error", 0, 0 },
	RN_OPT_END
};

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: runnel-workspace-stub [options]            serve the workspace API\n"
	        "       runnel-workspace-stub [--url URL] mint AGENT  mint a run on a running stub\n"
	        "\n"
	        "Serves GET <agent_url>/env, GET <agent_url>/config and POST <agent_url>/results\n"
	        "with one-time passwords, for runs minted from the agent definitions in --agents.\n"
	        "POST /mint?agent=NAME answers {\"agent_url\",\"otp_setup\",\"otp_run\",\"otp_upload\",\"session\"}.\n"
	        "Prints \"listening on URL\" on stdout once ready.  Stop with SIGINT or SIGTERM.\n"
	        "\noptions:\n");
	rn_conf_usage(f, opts);
}

/*
 * The mint answer is a few hundred bytes of JSON; its cap policy is to fail:
 * past STUB_MINT_BODY_MAX the callback refuses the bytes, curl ends the
 * transfer with a write error and mint reports it (a truncated answer
 * would print a run with broken OTPs).
 */
#define STUB_MINT_BODY_MAX ((size_t)1 << 20)


/* The mint verb: asks a running stub for a run and prints its JSON (which
 * holds the OTPs: it goes to stdout for the caller, never to a log). */
static int mint(const char *agent)
{
	CURL *c = curl_easy_init();
	if (!c)
		return 1;
	char *esc = curl_easy_escape(c, agent, 0);
	char url[1024];
	snprintf(url, sizeof(url), "%s/mint?agent=%s", o_url, esc ? esc : "");
	curl_free(esc);
	rn_body_t b;
	rn_body_init(&b, STUB_MINT_BODY_MAX, 0);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, rn_body_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	int ret = 0;
	if (rc != CURLE_OK) {
		fprintf(stderr, "runnel-workspace-stub: mint: %s: %s\n", o_url, curl_easy_strerror(rc));
		ret = 1;
	} else if (status != 200) {
		fprintf(stderr, "runnel-workspace-stub: mint %s: HTTP %ld %s\n", agent, status, b.buf.p ? b.buf.p : "");
		ret = 1;
	} else {
		printf("%s\n", b.buf.p ? b.buf.p : "");
	}
	rn_body_free(&b);
	return ret;
}

int main(int argc, char **argv)
{
	evthread_use_pthreads();
	char err[512];
	int argi = 1;
	int rc = rn_conf_parse(opts, argc, argv, &argi, err, sizeof(err));
	if (rc == 1) {
		usage(stdout);
		rn_conf_free(opts);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "runnel-workspace-stub: %s\n", err);
		usage(stderr);
		rn_conf_free(opts);
		return 2;
	}
	int level = rn_log_level_parse(o_log_level);
	rn_log_init("workspace-stub", level < 0 ? RN_LOG_INFO : (rn_log_level_t)level);

	if (argi < argc) {
		int ret = 2;
		if (strcmp(argv[argi], "mint") == 0 && argi + 2 == argc) {
			curl_global_init(CURL_GLOBAL_DEFAULT);
			ret = mint(argv[argi + 1]);
			curl_global_cleanup();
		} else {
			fprintf(stderr, "runnel-workspace-stub: unexpected argument %s\n", argv[argi]);
			usage(stderr);
		}
		rn_conf_free(opts);
		return ret;
	}

	/* Block the stop signals before the server thread exists, so that it
	 * inherits the mask and only sigwait below sees them. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	dev_stub_opts_t so;
	memset(&so, 0, sizeof(so));
	so.listen = o_listen;
	so.agents_dir = o_agents;
	so.results_dir = o_results;
	so.blobs_dir = o_blobs;
	so.max_body = (size_t)o_max_body;
	so.enable_mint = 1;
	dev_stub_t *stub = dev_stub_start(&so, err, sizeof(err));
	if (!stub) {
		rn_log_error(NULL, "stub_start_failed", "%s", err);
		rn_conf_free(opts);
		return 1;
	}
	rn_log_info(NULL, "stub_listening", "serving %s from %s", dev_stub_url(stub), o_agents);
	printf("listening on %s\n", dev_stub_url(stub));
	fflush(stdout);

	int sig = 0;
	sigwait(&stop, &sig);
	rn_log_info(NULL, "stub_stopping", "signal %d", sig);
	dev_stub_stop(stub);
	rn_conf_free(opts);
	return 0;
}
