/*
 * tests/stages/test_warm.c - the warm sandbox pool against the real
 * bubblewrap: a warm sandbox serves one run and is never reused, nothing
 * of one run (environment, /tmp, workspace, processes) is visible to the
 * next, a discarded sandbox ends quietly, what does not fit is refused,
 * the pool refills and drains to zero leaving no run directory behind.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/stages/stages_support.h"
#include "tests/support/harness.h"
#include "worker/sandbox.h"
#include "worker/warm.h"

static const char *warm_init;
static const char *work_dir;

static worker_warm_pool_t *pool_new(size_t size, int share_net)
{
	worker_warm_pool_opts_t o;
	memset(&o, 0, sizeof(o));
	o.size = size;
	o.init_path = warm_init;
	o.work_dir = work_dir;
	o.share_net = share_net;
	o.rlimit_nofile = 4096;
	char err[256] = "";
	worker_warm_pool_t *p = worker_warm_pool_new(&o, err, sizeof(err));
	TH_REQUIRE(p, "%s", err);
	return p;
}

struct ready_arg {
	worker_warm_pool_t *p;
	unsigned long want;
};

static int started_cond(void *arg)
{
	struct ready_arg *a = arg;
	unsigned long t, m, s;
	worker_warm_pool_stats(a->p, &t, &m, &s);
	return s >= a->want;
}

/* Takes a sandbox, waiting for the pool to have one. */
static worker_warm_sb_t *take(worker_warm_pool_t *p, unsigned long started)
{
	struct ready_arg a = { p, started };
	TH_REQUIRE(th_wait_until(started_cond, &a, 10000), "the pool did not start %lu sandbox(es)", started);
	worker_warm_sb_t *w = worker_warm_pool_take(p, 0);
	TH_REQUIRE(w, "no warm sandbox");
	return w;
}

static void spec_init(worker_sandbox_spec_t *s, const worker_warm_sb_t *w, char **argv, char **envp)
{
	*s = sbx_spec(WORKER_SANDBOX_BWRAP, w->ws.workspace, argv, envp);
	s->rlimit_nofile = 4096;
}

static int run_in(worker_warm_sb_t *w, const char *script, char **envp, sbx_out_t *o)
{
	char *argv[] = { "/bin/sh", "-c", (char *)script, NULL };
	worker_sandbox_spec_t s;
	spec_init(&s, w, argv, envp);
	worker_sandbox_t sb;
	char err[256] = "";
	int rc = worker_warm_launch(w, &s, &sb, err, sizeof(err));
	TH_REQUIRE(rc == 0, "launch: %s", err);
	rc = sbx_collect(&sb, NULL, 1, 10000, o);
	worker_sandbox_destroy(&sb);
	return rc;
}

static int count_warm_dirs(void)
{
	DIR *d = opendir(work_dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, "warm.", 5))
			n++;
	if (d)
		closedir(d);
	return n;
}

/* Two runs in two warm sandboxes of one pool see nothing of each other. */
static void test_isolation(void)
{
	worker_warm_pool_t *p = pool_new(2, 0);
	worker_warm_sb_t *a = take(p, 2);
	worker_warm_sb_t *b = take(p, 3); /* the pool refilled behind a */
	TH_CHECK(strcmp(a->ws.workspace, b->ws.workspace) != 0, "two sandboxes share a workspace");

	char *env_a[] = { "PATH=/usr/bin:/bin", "HOME=/root", "RUN_A_SECRET=warm-secret-a", NULL };
	char *env_b[] = { "PATH=/usr/bin:/bin", "HOME=/root", NULL };
	/* Waiting, the sandbox holds nothing of any run: bwrap and the init
	 * have empty environments. */
	pid_t bw = a->sb.pid;
	size_t elen = 99;
	char *environ_bw = th_file_read(th_strf("/proc/%ld/environ", (long)bw), &elen);
	TH_CHECK(environ_bw && elen == 0, "bwrap's environment is not empty (%zu bytes)", elen);
	free(environ_bw);

	sbx_out_t o;
	/* Run a leaves traces everywhere it can, and a process behind.  Its
	 * secret never reaches bwrap's command line or environment. */
	TH_REQUIRE(run_in(a, "echo a > /tmp/trace-a; echo a > /root/workspace/trace-a; "
	                     "(sleep 30 &) ; env",
	                  env_a, &o) == 0);
	TH_CHECK(strstr(o.out, "RUN_A_SECRET=warm-secret-a\n"), "env: %s", o.out);
	sbx_out_free(&o);
	TH_CHECK(!th_file_contains(th_strf("/proc/%ld/cmdline", (long)b->sb.pid), "warm-secret-a"));

	/* While a run's agent waits, its secret is in neither bwrap's command
	 * line nor its environment (only in the agent's own). */
	worker_warm_sb_t *c = take(p, 4);
	char *argv_c[] = { "/bin/sh", "-c", "read x; echo done", NULL };
	worker_sandbox_spec_t sc;
	spec_init(&sc, c, argv_c, env_a);
	worker_sandbox_t sbc;
	char errc[256] = "";
	TH_REQUIRE(worker_warm_launch(c, &sc, &sbc, errc, sizeof(errc)) == 0, "%s", errc);
	TH_CHECK(!th_file_contains(th_strf("/proc/%ld/cmdline", (long)sbc.pid), "warm-secret-a"));
	TH_CHECK(!th_file_contains(th_strf("/proc/%ld/environ", (long)sbc.pid), "warm-secret-a"));
	TH_CHECK(sbx_collect(&sbc, "go\n", 1, 10000, &o) == 0);
	TH_CHECK(th_streq(o.out, "done\n"), "out: %s", o.out);
	sbx_out_free(&o);
	worker_sandbox_destroy(&sbc);
	worker_warm_free(c, 0);

	TH_REQUIRE(run_in(b, "ls -A /tmp /root/workspace; env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; "
	                     "ls /proc | grep -c '^[0-9]'",
	                  env_b, &o) == 0);
	TH_CHECK(!strstr(o.out, "trace-a"), "run b sees run a's files: %s", o.out);
	TH_CHECK(!strstr(o.out, "warm-secret-a"), "run b sees run a's environment: %s", o.out);
	TH_CHECK(!strstr(o.out, "sleep"), "run b sees run a's process: %s", o.out);
	sbx_out_free(&o);

	/* One run each: a used sandbox does not launch again. */
	char *argv[] = { "/bin/true", NULL };
	worker_sandbox_spec_t s;
	spec_init(&s, a, argv, env_b);
	worker_sandbox_t sb;
	char err[256] = "";
	TH_CHECK(worker_warm_launch(a, &s, &sb, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "warm: the run does not fit this sandbox"), "err: %s", err);
	TH_CHECK(sb.pid == -1 && sb.stdin_fd == -1);

	worker_warm_free(a, 0);
	worker_warm_free(b, 0);
	worker_warm_pool_free(p);
	TH_CHECK(count_warm_dirs() == 0, "%d warm run directories left", count_warm_dirs());
}

static int group_gone(void *arg)
{
	return sbx_group_count(*(pid_t *)arg) == 0;
}

/* What does not match the sandbox is refused (the run starts cold). */
static void test_fits(void)
{
	worker_warm_pool_t *p = pool_new(1, 0);
	/* Another network mode: the pool has none. */
	TH_CHECK(!worker_warm_pool_take(p, 1));
	worker_warm_sb_t *w = take(p, 1);
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { NULL };
	worker_sandbox_spec_t s;
	spec_init(&s, w, argv, envp);
	TH_CHECK(worker_warm_fits(w, &s));
	s.share_net = 1;
	TH_CHECK(!worker_warm_fits(w, &s), "network mode");
	s.share_net = 0;
	s.skills_dir = w->ws.skills;
	TH_CHECK(!worker_warm_fits(w, &s), "skills");
	s.skills_dir = NULL;
	char *binds[] = { "/usr/bin/env:/run/runnel/extra", NULL };
	s.ro_binds = binds;
	TH_CHECK(!worker_warm_fits(w, &s), "extra bind");
	s.ro_binds = NULL;
	s.rlimit_nofile = 77;
	TH_CHECK(!worker_warm_fits(w, &s), "rlimits");
	s.rlimit_nofile = 4096;
	s.workspace_dir = work_dir;
	TH_CHECK(!worker_warm_fits(w, &s), "another workspace");
	s.workspace_dir = w->ws.workspace;
	s.driver = WORKER_SANDBOX_PROCESS;
	TH_CHECK(!worker_warm_fits(w, &s), "process driver");

	/* Discarded unused: its init ends quietly, the tree goes. */
	pid_t pgid = w->sb.pid;
	worker_warm_free(w, 0);
	TH_CHECK(th_wait_until(group_gone, &pgid, 2000), "%d processes left", sbx_group_count(pgid));
	worker_warm_pool_free(p);
}

/* The pool keeps its size, stops on drain, and leaves nothing behind. */
static void test_drain(void)
{
	worker_warm_pool_t *p = pool_new(3, 0);
	struct ready_arg a = { p, 3 };
	TH_REQUIRE(th_wait_until(started_cond, &a, 10000), "pool not filled");
	TH_CHECK(count_warm_dirs() == 3, "%d warm run directories", count_warm_dirs());
	worker_warm_pool_drain(p);
	TH_CHECK(!worker_warm_pool_take(p, 0), "a draining pool handed out a sandbox");
	TH_CHECK(count_warm_dirs() == 0, "%d warm run directories after the drain", count_warm_dirs());
	unsigned long t, m, s;
	worker_warm_pool_stats(p, &t, &m, &s);
	TH_CHECK(t == 0 && s == 3, "taken %lu started %lu", t, s);
	worker_warm_pool_free(p);
}

/* The bwrap of an idle sandbox of ours (its command line names work_dir). */
static pid_t find_idle_bwrap(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = -1;
	while (d && (de = readdir(d)) && found < 0) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		if (*end || v <= 0 || getppid() == (pid_t)v)
			continue;
		size_t len = 0;
		char *cmd = th_file_read(th_strf("/proc/%ld/cmdline", v), &len);
		for (size_t i = 0; cmd && i < len; i++)
			if (!cmd[i])
				cmd[i] = ' ';
		char *st = th_file_read(th_strf("/proc/%ld/stat", v), NULL);
		const char *p = st ? strrchr(st, ')') : NULL;
		char state;
		long ppid = -1;
		if (p && sscanf(p + 1, " %c %ld", &state, &ppid) != 2)
			ppid = -1;
		/* Ours (a child of this process): the work directory is not on
		 * its command line, the binds go through fds. */
		if (cmd && strstr(cmd, "bwrap") && ppid == (long)getpid()) {
			TH_CHECK(!strstr(cmd, work_dir), "bwrap's command line names the run directory: %s", cmd);
			found = (pid_t)v;
		}
		free(st);
		free(cmd);
	}
	if (d)
		closedir(d);
	return found;
}

static int zombie_cond(void *arg)
{
	pid_t pid = *(pid_t *)arg;
	char *st = th_file_read(th_strf("/proc/%ld/stat", (long)pid), NULL);
	const char *p = st ? strrchr(st, ')') : NULL;
	int z = !p || p[2] == 'Z';
	free(st);
	return z;
}

/* A sandbox that died while waiting is never handed out. */
static void test_dead(void)
{
	worker_warm_pool_t *p = pool_new(1, 0);
	struct ready_arg a = { p, 1 };
	TH_REQUIRE(th_wait_until(started_cond, &a, 10000), "pool not filled");
	pid_t bw = find_idle_bwrap();
	TH_REQUIRE(bw > 0, "idle sandbox not found");
	kill(-bw, SIGKILL);
	TH_CHECK(th_wait_until(zombie_cond, &bw, 5000), "the killed sandbox did not die");
	worker_warm_sb_t *x = worker_warm_pool_take(p, 0);
	TH_CHECK(!x || x->sb.pid != bw, "a dead warm sandbox was handed out");
	if (x) {
		sbx_out_t o;
		char *envp[] = { "PATH=/usr/bin:/bin", NULL };
		TH_CHECK(run_in(x, "echo alive", envp, &o) == 0);
		TH_CHECK(th_streq(o.out, "alive\n"), "out: %s", o.out);
		sbx_out_free(&o);
		worker_warm_free(x, 0);
	}
	worker_warm_pool_free(p);
	TH_CHECK(count_warm_dirs() == 0, "%d warm run directories left", count_warm_dirs());
}

int main(int argc, char **argv)
{
	th_init("stages_warm");
	TH_REQUIRE(argc == 2, "usage: test_warm WARM_INIT");
	warm_init = argv[1];
	signal(SIGPIPE, SIG_IGN);
	const char *tmp = th_tmpdir();
	TH_REQUIRE(tmp);
	work_dir = th_strf("%s/work", tmp);
	TH_REQUIRE(mkdir(work_dir, 0711) == 0); /* the sandbox uid binds from it */

	test_isolation();
	test_fits();
	test_drain();
	test_dead();
	return th_done();
}
