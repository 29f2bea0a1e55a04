/*
 * tests/limits/test_limits_unpriv.c - the worker as an ordinary user (what a
 * Kubernetes pod gives it): no writable cgroup, no right to mount.  It must
 * say so at start, move into a user and mount namespace of its own so that
 * the workspace cap is still a tmpfs, stop a disk filler with
 * resource_limit (disk) while a normal run beside it succeeds, and run an
 * allowlisted run through the proxy.  Runs the worker as uid 65534 with
 * setpriv; skipped (77) when this machine cannot run bwrap as that user or
 * when the test does not run as root.
 */
#include "tests/worker/wtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY "65534"

static wt_t T;

/* 0 when setpriv and bwrap work for the unprivileged user here. */
static int can_run_unprivileged(void)
{
	if (geteuid() != 0)
		return -1;
	char *argv[] = { "setpriv", "--reuid=" NOBODY, "--regid=" NOBODY, "--clear-groups",
		         "bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/",
		         "--proc", "/proc", "--dev", "/dev", "true", NULL };
	const char *log = th_strf("%s/probe.log", th_tmpdir());
	return th_run(argv, NULL, log, 20000) == 0 ? 0 : -1;
}

static pid_t worker_as_nobody(const char *name, const char *const *extra)
{
	/* The fixture's directory is root's 0700: let the user through, and
	 * give it a work directory of its own. */
	chmod(T.dir, 0711);
	char *work = th_strf("%s/work-%s", T.dir, name);
	mkdir(work, 0700);
	TH_REQUIRE(chown(work, 65534, 65534) == 0, "chown work dir");
	const char *env[32];
	size_t n = 0;
	env[n++] = th_strf("RUNNEL_KAFKA_BROKERS=%s", T.kafka.bootstrap);
	env[n++] = th_strf("RUNNEL_JOBS_TOPIC=%s", T.topic);
	env[n++] = th_strf("RUNNEL_GROUP=%s", T.group);
	env[n++] = th_strf("RUNNEL_REDIS_URL=%s", T.redis.url);
	env[n++] = th_strf("RUNNEL_WORK_DIR=%s", work);
	env[n++] = th_strf("RUNNEL_WORKER_ID=%s", name);
	env[n++] = "RUNNEL_METRICS_LISTEN=127.0.0.1:0";
	env[n++] = "RUNNEL_KILL_GRACE_MS=500";
	env[n++] = "RUNNEL_LOG_LEVEL=debug";
	env[n++] = "RUNNEL_KAFKA_PROPERTIES=topic.metadata.refresh.interval.ms=1000;session.timeout.ms=6000;heartbeat.interval.ms=500";
	for (size_t i = 0; extra && extra[i] && n < 30; i++)
		env[n++] = extra[i];
	env[n] = NULL;
	char *argv[] = { "setpriv", "--reuid=" NOBODY, "--regid=" NOBODY, "--clear-groups", WORKER_BIN, NULL };
	pid_t pid = th_spawn(argv, env, wt_log_path(&T, name));
	TH_REQUIRE(pid > 0, "spawn worker");
	return pid;
}

/* A mock agent (script NULL: demo) or /bin/sh -c script. */
static void submit(const char *run_id, const char *script, const char *network)
{
	dev_stub_run_t run = { 0 };
	if (script) {
		run.config = json_pack("{s:{s:s,s:[s,s,s]}}", "agent", "kind", "command", "argv",
		                       "/bin/sh", "-c", script);
	} else {
		run.config = wt_agent_config("{\"kind\":\"mock\",\"script\":\"demo\"}");
	}
	if (network)
		json_object_set_new(run.config, "network", json_string(network));
	dev_stub_otps_t o;
	wt_submit(&T, run_id, &run, "p", 0, 0, &o);
	json_decref(run.config);
}


int main(void)
{
	th_init("limits_unpriv");
	if (can_run_unprivileged() != 0) {
		fprintf(stderr, "# skipped: needs root to switch to uid " NOBODY ", and bwrap usable by that user\n");
		return 77;
	}
	wt_setup(&T, NULL, 4);
	const char *env[] = { "RUNNEL_RUN_DISK_MB=16", "RUNNEL_EGRESS=full", "RUNNEL_EGRESS_ALLOW=example.invalid", NULL };
	pid_t w = worker_as_nobody("w1", env);
	wt_warmup(&T);
	TH_CHECK(wt_log_has(&T, "w1", "disk tmpfs (own user and mount namespace)"),
	         "the worker mounts workspaces in a namespace of its own");
	TH_CHECK(wt_log_has(&T, "w1", "\"event\":\"limits_degraded\""), "no writable cgroup: a warning at start");

	submit("run_fill", "read t; head -c 1073741824 /dev/zero > /root/workspace/big; sleep 60", NULL);
	submit("run_ok", NULL, NULL);
	char msg[256];
	const char *code = wt_ended(&T, "run_fill", 60000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, "resource_limit"), "disk filler as an ordinary user: %s %s", code, msg);
	TH_CHECK(th_streq(msg, "The run wrote more than 16 MiB to its workspace."), "%s", msg);
	code = wt_ended(&T, "run_ok", 60000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, ""), "normal run: %s %s", code, msg);

	/* The proxy works for an ordinary user too: a refused host is a 403
	 * and a log line. */
	submit("run_allow",
	       "read t; c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://127.0.0.1:9/); "
	       "printf '{\"type\":\"result\",\"message\":\"%s\"}\\n' \"$c\"",
	       "allowlist");
	code = wt_ended(&T, "run_allow", 60000, msg, sizeof(msg));
	TH_CHECK(th_streq(code, "") && th_streq(msg, "403"), "allowlist as an ordinary user: %s %s", code, msg);
	TH_CHECK(wt_log_has(&T, "w1", "egress refused: 127.0.0.1:9 is not on the run's allowlist"));

	th_stop(w, 20000);
	wt_teardown(&T);
	return th_done();
}
