/*
 * tests/stages/test_sandbox.c - the bwrap and process drivers against the
 * real bubblewrap: what the agent can see and write, the setup script,
 * exec failures, signals and killing the whole tree.  Given the path of
 * runnel-warm-init as a second argument, every bwrap sandbox starts warm
 * (worker/warm.h: started first, the run's argv and environment sent
 * later) and must behave the same.
 */
#include <dirent.h>
#include <errno.h>
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

static const char *ws_dir;
static const char *mock_agent;
static const char *warm_init; /* set: bwrap sandboxes start warm */

/* worker_sandbox_spawn, or a warm start then the launch (same contract). */
static int sbx_spawn(const worker_sandbox_spec_t *s, worker_sandbox_t *sb, char *err, size_t errsz)
{
	if (!warm_init || s->driver != WORKER_SANDBOX_BWRAP)
		return worker_sandbox_spawn(s, sb, err, errsz);
	worker_warm_sb_t w;
	memset(&w, 0, sizeof(w));
	if (worker_warm_start(s, warm_init, &w, err, errsz) != 0) {
		memset(sb, 0, sizeof(*sb));
		sb->pid = -1;
		sb->stdin_fd = sb->stdout_fd = sb->stderr_fd = -1;
		return -1;
	}
	/* Started ahead of need: the init waits for its run. */
	TH_CHECK(worker_sandbox_reap(&w.sb) == 0, "the warm sandbox did not wait");
	TH_CHECK(worker_warm_fits(&w, s), "a spec does not fit the sandbox made from it");
	int rc = worker_warm_launch(&w, s, sb, err, errsz);
	TH_CHECK(w.sb.pid == -1 && w.sb.stdin_fd == -1, "the warm sandbox kept its process");
	worker_warm_discard(&w, 1);
	return rc;
}

static char *env_base[] = {
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=/root",
	"FOO=bar baz",
	"RUNNEL_RUN_ID=run_sbx",
	NULL,
};

static worker_sandbox_spec_t spec_for(worker_sandbox_driver_t driver, char *const *argv)
{
	return sbx_spec(driver, ws_dir, argv, env_base);
}

/* Starts s (sbx_spawn); the test ends when it cannot. */
static void spawn_ok(const worker_sandbox_spec_t *s, worker_sandbox_t *sb)
{
	char err[256];
	TH_REQUIRE(sbx_spawn(s, sb, err, sizeof(err)) == 0, "%s", err);
}

/* Runs argv in the sandbox to completion; output in *o. */
static int run_sh(worker_sandbox_driver_t driver, const char *script, const char *setup,
                  sbx_out_t *o)
{
	char *argv[] = { "/bin/sh", "-c", (char *)script, NULL };
	worker_sandbox_spec_t s = spec_for(driver, argv);
	s.setup_script = setup;
	return sbx_run(sbx_spawn, &s, NULL, 1, 10000, o);
}

static int exit_code(const sbx_out_t *o)
{
	return o->exited && WIFEXITED(o->status) ? WEXITSTATUS(o->status) : -1;
}

static void test_env(void)
{
	sbx_out_t o;
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "env", NULL, &o) == 0);
	TH_CHECK(exit_code(&o) == 0, "status %d, stderr %s", o.status, o.err);
	TH_CHECK(strstr(o.out, "FOO=bar baz\n"), "env: %s", o.out);
	TH_CHECK(strstr(o.out, "RUNNEL_RUN_ID=run_sbx\n"));
	TH_CHECK(!strstr(o.out, "RUNNEL_REDIS_URL"), "worker env leaked: %s", o.out);
	TH_CHECK(!strstr(o.out, "sandbox-test-secret"), "worker env leaked: %s", o.out);
	sbx_out_free(&o);

	/* bwrap's command line does not carry the values either. */
	char *argv[] = { "/bin/sh", "-c", "cat /proc/1/cmdline /proc/2/cmdline | tr '\\0' ' '", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	worker_sandbox_t sb;
	spawn_ok(&s, &sb);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)sb.pid);
	size_t len = 0;
	char *cmd = th_file_read(path, &len);
	TH_CHECK(cmd);
	for (size_t i = 0; cmd && i < len; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	TH_CHECK(cmd && !strstr(cmd, "bar baz"), "env value on bwrap's command line: %s", cmd);
	free(cmd);
	TH_CHECK(sbx_collect(&sb, NULL, 1, 10000, &o) == 0);
	worker_sandbox_destroy(&sb);
	sbx_out_free(&o);
}

/*
 * A run's environment never reaches a host process: an LD_PRELOAD naming a
 * library that leaves a file wherever it is loaded loads nothing on the
 * host (bwrap's outer process was one, as the worker's uid, before any
 * namespace existed).  The agent still receives the variable.
 */
static void test_loader_env(void)
{
	const char *marks = th_tmpdir();
	TH_REQUIRE(marks);
	char *envp[] = {
		"PATH=/usr/local/bin:/usr/bin:/bin",
		th_strf("LD_PRELOAD=%s", RUNNEL_TEST_PRELOAD_SO),
		th_strf("RUNNEL_TEST_MARKER_DIR=%s", marks),
		NULL,
	};
	char *argv[] = { "/bin/sh", "-c", "echo \"preload=$LD_PRELOAD\"", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.envp = envp;
	sbx_out_t o;
	TH_REQUIRE(sbx_run(sbx_spawn, &s, NULL, 1, 10000, &o) == 0);
	TH_CHECK(exit_code(&o) == 0, "status %d, stderr %s", o.status, o.err);
	TH_CHECK(strstr(o.out, "preload=" RUNNEL_TEST_PRELOAD_SO), "the agent's env: %s", o.out);
	TH_CHECK(th_count_files(marks) == 0, "a host process loaded the run's LD_PRELOAD (%d marker(s))",
	         th_count_files(marks));
	sbx_out_free(&o);

	/* The same library loaded by a host process does leave its marker:
	 * the check above can see one. */
	char *probe_env[] = { envp[1], envp[2], NULL };
	char *probe_argv[] = { "/bin/true", NULL };
	pid_t pid = fork();
	if (pid == 0) {
		execve("/bin/true", probe_argv, probe_env);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	TH_CHECK(th_count_files(marks) == 1, "the marker library left %d marker(s)", th_count_files(marks));

	/* The loader's variables are refused by name (run.c drops them). */
	TH_CHECK(worker_sandbox_env_refused("LD_PRELOAD"));
	TH_CHECK(worker_sandbox_env_refused("LD_LIBRARY_PATH=/x"));
	TH_CHECK(worker_sandbox_env_refused("LD_AUDIT"));
	TH_CHECK(worker_sandbox_env_refused("GCONV_PATH"));
	TH_CHECK(worker_sandbox_env_refused("GLIBC_TUNABLES"));
	TH_CHECK(worker_sandbox_env_refused("LOCPATH"));
	TH_CHECK(!worker_sandbox_env_refused("TMPDIR"));
	TH_CHECK(!worker_sandbox_env_refused("LD"));
	TH_CHECK(!worker_sandbox_env_refused("OPENAI_API_KEY"));
	TH_CHECK(!worker_sandbox_env_refused("GCONV_PATHS"));
}

/*
 * A sandbox never holds the host's uid 0 (the test runs as root, as CI
 * does): what it creates belongs to the sandbox's uid, and the kernel's
 * knobs refuse open(O_WRONLY) - the kernel decides sysctl writes by owner
 * bits for uid 0, which dropping capabilities does not change.
 */
static void test_host_root(void)
{
	const char *script =
	        "for f in /proc/sys/kernel/core_pattern /proc/sys/vm/drop_caches /proc/sysrq-trigger; do "
	        "perl -e 'use Fcntl; if (sysopen(my $h, $ARGV[0], O_WRONLY)) { print \"OPEN $ARGV[0]\\n\" } "
	        "else { print \"refused $ARGV[0]\\n\" }' \"$f\"; done; "
	        "touch /root/workspace/owned-by; echo done";
	sbx_out_t o;
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, script, NULL, &o) == 0);
	TH_CHECK(exit_code(&o) == 0, "status %d, stderr %s", o.status, o.err);
	TH_CHECK(!strstr(o.out, "OPEN"), "a kernel knob opened for writing: %s", o.out);
	TH_CHECK(strstr(o.out, "refused /proc/sys/kernel/core_pattern\n"), "out: %s", o.out);
	TH_CHECK(strstr(o.out, "refused /proc/sys/vm/drop_caches\n"), "out: %s", o.out);
	TH_CHECK(strstr(o.out, "refused /proc/sysrq-trigger\n"), "out: %s", o.out);
	TH_CHECK(strstr(o.out, "done\n"), "out: %s", o.out);
	sbx_out_free(&o);
	struct stat st;
	char *owned = th_strf("%s/owned-by", ws_dir);
	TH_REQUIRE(stat(owned, &st) == 0, "the sandbox's file: %s", strerror(errno));
	if (geteuid() == 0)
		TH_CHECK(st.st_uid == (uid_t)WORKER_SANDBOX_ID_DEFAULT && st.st_gid == (gid_t)WORKER_SANDBOX_ID_DEFAULT,
		         "a root worker's sandbox wrote as host uid %ld gid %ld", (long)st.st_uid, (long)st.st_gid);
	else
		TH_CHECK(st.st_uid == geteuid(), "owner %ld", (long)st.st_uid);
	unlink(owned);

	/* From the host, the sandbox's init maps uid 0 onto that uid alone. */
	char *argv[] = { "/bin/sh", "-c", "read x", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	worker_sandbox_t sb;
	spawn_ok(&s, &sb);
	TH_CHECK(worker_sandbox_wait_cloned(&sb, 5000) == 1, "no sandbox");
	/* The init is bwrap's only child; /proc files read line by line. */
	char maps[256] = "";
	for (int i = 0; i < 200 && !maps[0]; i++) {
		char kids[64] = "";
		FILE *f = fopen(th_strf("/proc/%d/task/%d/children", (int)sb.pid, (int)sb.pid), "r");
		if (f && !fgets(kids, sizeof(kids), f))
			kids[0] = '\0';
		if (f)
			fclose(f);
		long init = strtol(kids, NULL, 10);
		f = init > 0 ? fopen(th_strf("/proc/%ld/uid_map", init), "r") : NULL;
		if (f && !fgets(maps, sizeof(maps), f))
			maps[0] = '\0';
		if (f)
			fclose(f);
		if (!maps[0])
			usleep(10000);
	}
	long inner = -1, outer = -1, count = -1;
	TH_CHECK(sscanf(maps, "%ld %ld %ld", &inner, &outer, &count) == 3, "uid_map \"%s\"", maps);
	TH_CHECK(inner == 0 && outer != 0 && count == 1, "uid_map maps onto host uid 0: %s", maps);
	if (geteuid() == 0)
		TH_CHECK(outer == WORKER_SANDBOX_ID_DEFAULT, "uid_map: %s", maps);
	TH_CHECK(sbx_collect(&sb, "\n", 1, 10000, &o) == 0);
	sbx_out_free(&o);
	worker_sandbox_destroy(&sb);
}

/*
 * No nested user namespace (the surface of most kernel escalations), and
 * the seccomp filter answers a denied call with EPERM: the job goes on.
 */
static void test_syscalls(void)
{
	const char *script =
	        "unshare -U true 2>/dev/null && echo userns=yes || echo userns=no; "
	        /* keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), bpf(BPF_PROG_LOAD...) */
	        "perl -e 'require \"syscall.ph\"; my $r = syscall(&SYS_keyctl, 0, -3, 0); "
	        "print \"keyctl=$r \", ($! + 0), \"\\n\"; $r = syscall(&SYS_bpf, 5, 0, 0); "
	        "print \"bpf=$r \", ($! + 0), \"\\n\"' 2>&1; "
	        "echo still-running";
	sbx_out_t o;
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, script, NULL, &o) == 0);
	TH_CHECK(exit_code(&o) == 0, "status %d, stderr %s", o.status, o.err);
	TH_CHECK(strstr(o.out, "userns=no\n"), "a nested user namespace: %s", o.out);
	TH_CHECK(strstr(o.out, th_strf("keyctl=-1 %d\n", EPERM)), "keyctl: %s", o.out);
	TH_CHECK(strstr(o.out, th_strf("bpf=-1 %d\n", EPERM)), "bpf: %s", o.out);
	TH_CHECK(strstr(o.out, "still-running\n"), "the run stopped: %s", o.out);
	sbx_out_free(&o);
}

/* bwrap's command line (the sandbox's /proc/1/cmdline) names no host path
 * of the run. */
static void test_no_host_paths(void)
{
	sbx_out_t o;
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "tr '\\0' ' ' < /proc/1/cmdline", NULL, &o) == 0);
	TH_CHECK(exit_code(&o) == 0, "status %d, stderr %s", o.status, o.err);
	TH_CHECK(strstr(o.out, "bwrap"), "cmdline: %s", o.out);
	TH_CHECK(!strstr(o.out, ws_dir), "the workspace's host path on bwrap's command line: %s", o.out);
	TH_CHECK(!strstr(o.out, RUNNEL_TEST_SANDBOX_INIT), "a host path on bwrap's command line: %s", o.out);
	sbx_out_free(&o);
}

static void test_filesystem(void)
{
	const char *tmp = th_tmpdir();
	TH_REQUIRE(tmp);
	char *secret = th_strf("%s/host-secret.txt", tmp);
	TH_REQUIRE(th_file_write(secret, "top secret\n", 11) == 0);

	sbx_out_t o;
	/* A host file outside the workspace does not exist in the sandbox. */
	char *script = th_strf("cat %s; echo rc=$?", secret);
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, script, NULL, &o) == 0);
	TH_CHECK(!strstr(o.out, "top secret"), "host file readable: %s", o.out);
	TH_CHECK(strstr(o.out, "rc=1"), "out %s", o.out);
	sbx_out_free(&o);

	/* /root is a fresh tmpfs holding only the workspace. */
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "ls -A /root; echo end", NULL, &o) == 0);
	TH_CHECK(th_streq(o.out, "workspace\nend\n"), "ls /root: %s", o.out);
	sbx_out_free(&o);

	/* The host's /etc/shadow is not there (only a few /etc files are). */
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "cat /etc/shadow; echo rc=$?", NULL, &o) == 0);
	TH_CHECK(!strstr(o.out, "root:"), "shadow readable: %s", o.out);
	TH_CHECK(strstr(o.out, "rc=1"), "out %s", o.out);
	sbx_out_free(&o);

	/* The system is read-only; the workspace is writable and shared. */
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP,
	                  "touch /usr/evil 2>/dev/null; echo usr=$?; "
	                  "echo hello > /root/workspace/out.txt; echo ws=$?; "
	                  "echo private > /tmp/sbx-private; ls -A /tmp; echo tmp-end; pwd",
	                  NULL, &o) == 0);
	TH_CHECK(strstr(o.out, "usr=1"), "out %s", o.out);
	TH_CHECK(strstr(o.out, "ws=0"), "out %s", o.out);
	/* /tmp is private: the host's /tmp entries (our temp dir) are absent. */
	TH_CHECK(strstr(o.out, "sbx-private\ntmp-end\n"), "ls /tmp: %s", o.out);
	TH_CHECK(!strstr(o.out, "runnel-th-"), "host /tmp visible: %s", o.out);
	TH_CHECK(strstr(o.out, "/root/workspace\n"), "pwd: %s", o.out);
	sbx_out_free(&o);
	char *out_path = th_strf("%s/out.txt", ws_dir);
	TH_CHECK(th_file_contains(out_path, "hello"));
	TH_CHECK(access("/tmp/sbx-private", F_OK) != 0, "sandbox /tmp reached the host");

	/* No network namespace shared: only lo. */
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "cat /proc/net/dev", NULL, &o) == 0);
	TH_CHECK(strstr(o.out, "lo:") && !strstr(o.out, "eth0"), "net: %s", o.out);
	sbx_out_free(&o);
}

static void test_setup_script(void)
{
	const char *tmp = th_tmpdir();
	TH_REQUIRE(tmp);
	char *setup = th_strf("%s/setup.sh", tmp);
	const char *body = "echo SETUP-STDOUT\necho setup-ran > setup-flag\n"
	                   "if read line; then echo ate-stdin; fi\n";
	TH_REQUIRE(th_file_write(setup, body, strlen(body)) == 0);

	char *argv[] = { "/bin/sh", "-c", "cat /root/workspace/setup-flag; read turn; echo got=$turn", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.setup_script = setup;
	worker_sandbox_t sb;
	spawn_ok(&s, &sb);
	sbx_out_t o;
	TH_CHECK(sbx_collect(&sb, "the-turn\n", 1, 10000, &o) == 0);
	worker_sandbox_destroy(&sb);
	TH_CHECK(exit_code(&o) == 0, "status %d err %s", o.status, o.err);
	TH_CHECK(th_streq(o.out, "setup-ran\ngot=the-turn\n"), "stdout: %s", o.out);
	TH_CHECK(strstr(o.err, "SETUP-STDOUT"), "stderr: %s", o.err);
	TH_CHECK(!strstr(o.err, "ate-stdin"), "setup read the agent's stdin");
	sbx_out_free(&o);

	/* A failing setup script: the agent never runs, exit 97. */
	const char *bad = "echo failing >&2\nexit 3\n";
	TH_REQUIRE(th_file_write(setup, bad, strlen(bad)) == 0);
	TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "echo agent-ran", setup, &o) == 0);
	TH_CHECK(exit_code(&o) == WORKER_SANDBOX_SETUP_FAILED, "status %d", o.status);
	TH_CHECK(!strstr(o.out, "agent-ran"));
	sbx_out_free(&o);

	/* Same with the process driver. */
	TH_REQUIRE(th_file_write(setup, body, strlen(body)) == 0);
	TH_REQUIRE(run_sh(WORKER_SANDBOX_PROCESS, "cat setup-flag", setup, &o) == 0);
	TH_CHECK(exit_code(&o) == 0, "status %d err %s", o.status, o.err);
	TH_CHECK(th_streq(o.out, "setup-ran\n"), "stdout: %s", o.out);
	TH_CHECK(strstr(o.err, "SETUP-STDOUT"), "stderr: %s", o.err);
	sbx_out_free(&o);
}

static void test_exec_failure(void)
{
	char *argv[] = { "/bin/true", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.bwrap_path = "/nonexistent/bwrap";
	worker_sandbox_t sb;
	char err[256] = "";
	TH_CHECK(sbx_spawn(&s, &sb, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "cannot exec bwrap: No such file or directory"), "err: %s", err);
	TH_CHECK(sb.stdin_fd == -1 && sb.stdout_fd == -1 && sb.stderr_fd == -1);

	/* Found on disk but not executable: reported by the child, after fork. */
	const char *tmp = th_tmpdir();
	char *noexec = th_strf("%s/not-executable", tmp);
	TH_REQUIRE(th_file_write(noexec, "x", 1) == 0);
	s.bwrap_path = noexec;
	TH_CHECK(sbx_spawn(&s, &sb, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "cannot exec bwrap: Permission denied"), "err: %s", err);

	char *argv2[] = { "/nonexistent/agent", NULL };
	s = spec_for(WORKER_SANDBOX_PROCESS, argv2);
	TH_CHECK(sbx_spawn(&s, &sb, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "cannot exec /nonexistent/agent: No such file or directory"), "err: %s", err);

	char *argv3[] = { "no-such-agent-program", NULL };
	s = spec_for(WORKER_SANDBOX_PROCESS, argv3);
	TH_CHECK(sbx_spawn(&s, &sb, err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "cannot exec no-such-agent-program: No such file or directory"), "err: %s", err);

	/* Inside bwrap, a missing agent is bwrap's exit, not a spawn error. */
	char *argv4[] = { "/nonexistent/agent", NULL };
	s = spec_for(WORKER_SANDBOX_BWRAP, argv4);
	spawn_ok(&s, &sb);
	sbx_out_t o;
	TH_CHECK(sbx_collect(&sb, NULL, 1, 10000, &o) == 0);
	worker_sandbox_destroy(&sb);
	TH_CHECK(exit_code(&o) != 0, "status %d", o.status);
	sbx_out_free(&o);
}

/* Open descriptors of this process. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	if (d)
		closedir(d);
	return n;
}

/* A start refused with exactly want: the handle is cleared and nothing the
 * start opened (pipes, bwrap's info pipe, seccomp and --args fds) is left. */
static void refused(const worker_sandbox_spec_t *s, const char *want)
{
	int before = count_fds();
	worker_sandbox_t sb;
	char err[256] = "";
	TH_CHECK(worker_sandbox_spawn(s, &sb, err, sizeof(err)) == -1, "started: want %s", want);
	TH_CHECK(th_streq(err, want), "err: %s (want %s)", err, want);
	TH_CHECK(sb.pid == -1 && sb.stdin_fd == -1 && sb.stdout_fd == -1 && sb.stderr_fd == -1 &&
	                 sb.info_fd == -1,
	         "handle not cleared: %s", want);
	TH_CHECK(count_fds() == before, "%d fds before, %d after: %s", before, count_fds(), want);
}

/* Every way a start is refused, before the fork and in the child. */
static void test_refusals(void)
{
	char *argv[] = { "/bin/true", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_PROCESS, NULL);
	refused(&s, "sandbox: no agent command");

	s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.workspace_dir = NULL;
	refused(&s, "sandbox: no workspace directory");

	s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.init_path = NULL;
	refused(&s, "sandbox: no runnel-warm-init for the sandbox");

	s = spec_for((worker_sandbox_driver_t)42, argv);
	refused(&s, "sandbox: unknown driver 42");

	/* After the info pipe and the seccomp fd exist. */
	char *bad_binds[] = { "no-colon", NULL };
	s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.ro_binds = bad_binds;
	refused(&s, "sandbox: read-only bind \"no-colon\" is not host:/path");

	/* After bwrap's --args memfd exists: the proxy's socket goes to the
	 * sandbox's uid only when the worker is root. */
	if (geteuid() == 0) {
		s = spec_for(WORKER_SANDBOX_BWRAP, argv);
		s.egress_bridge = "/bin/true";
		s.egress_socket = "/nonexistent/egress.sock";
		refused(&s, "sandbox: cannot hand the egress socket to uid 65534: No such file or directory");
	}

	/* Reported by the child after the fork. */
	s = spec_for(WORKER_SANDBOX_PROCESS, argv);
	s.workspace_dir = "/nonexistent/workspace";
	refused(&s, "cannot enter the workspace: No such file or directory");

	/* Above fs.nr_open: refused even to root. */
	s = spec_for(WORKER_SANDBOX_PROCESS, argv);
	s.rlimit_nofile = 1L << 30;
	refused(&s, "cannot set resource limits: Operation not permitted");
	s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	s.rlimit_nofile = 1L << 30;
	refused(&s, "cannot set resource limits: Operation not permitted");
}

struct group_arg {
	pid_t pgid;
	int want; /* wait for count >= want, or == 0 when want is 0 */
};

static int group_cond(void *p)
{
	struct group_arg *a = p;
	int n = sbx_group_count(a->pgid);
	return a->want ? n >= a->want : n == 0;
}

static void test_kill_tree(worker_sandbox_driver_t driver)
{
	char *argv[] = { "/bin/sh", "-c", "sleep 1000 & sleep 1000", NULL };
	worker_sandbox_spec_t s = spec_for(driver, argv);
	worker_sandbox_t sb;
	spawn_ok(&s, &sb);
	/* bwrap: bwrap, its init, sh, two sleeps.  process: sh + two sleeps. */
	struct group_arg a = { sb.pid, driver == WORKER_SANDBOX_BWRAP ? 5 : 3 };
	TH_CHECK(th_wait_until(group_cond, &a, 5000), "only %d processes", sbx_group_count(sb.pid));
	TH_CHECK(worker_sandbox_reap(&sb) == 0);
	int64_t t0 = th_now_ms();
	worker_sandbox_kill(&sb, SIGKILL);
	a.want = 0;
	TH_CHECK(th_wait_until(group_cond, &a, 2000), "%d processes left", sbx_group_count(sb.pid));
	TH_NOTE("tree gone in %lld ms", (long long)(th_now_ms() - t0));
	int r = 0;
	for (int i = 0; i < 1000 && (r = worker_sandbox_reap(&sb)) == 0; i++)
		usleep(2000);
	TH_CHECK(r == 1);
	TH_CHECK(sb.exited);
	worker_sandbox_destroy(&sb);
	TH_CHECK(sbx_group_count(sb.pid) == 0);
}

/* Starts the mock agent, hands it its turn and waits for its first line,
 * which must contain want: the agent is up. */
static void start_mock(const worker_sandbox_spec_t *s, worker_sandbox_t *sb, const char *want)
{
	spawn_ok(s, sb);
	const char *turn = "{\"run_id\":\"run_sbx\",\"prompt\":\"p\"}\n";
	TH_CHECK(write(sb->stdin_fd, turn, strlen(turn)) == (ssize_t)strlen(turn));
	char buf[4096];
	size_t got = 0;
	int64_t deadline = th_now_ms() + 5000;
	while (th_now_ms() < deadline && !memchr(buf, '\n', got)) {
		struct pollfd p = { sb->stdout_fd, POLLIN, 0 };
		if (poll(&p, 1, 50) > 0) {
			ssize_t n = read(sb->stdout_fd, buf + got, sizeof(buf) - 1 - got);
			if (n > 0)
				got += (size_t)n;
		}
	}
	buf[got] = '\0';
	TH_CHECK(strstr(buf, want), "first line: %s", buf);
}

/* SIGTERM reaches the agent (its grace period), SIGKILL ends a hang. */
static void test_signals(worker_sandbox_driver_t driver)
{
	int bw = driver == WORKER_SANDBOX_BWRAP;
	char *bind = th_strf("%s:/run/runnel/mock-agent", mock_agent);
	char *binds[] = { bind, NULL };
	char *agent = bw ? "/run/runnel/mock-agent" : (char *)mock_agent;
	char *argv[] = { agent, "sleep", "100", NULL };
	worker_sandbox_spec_t s = spec_for(driver, argv);
	s.ro_binds = bw ? binds : NULL;
	worker_sandbox_t sb;
	start_mock(&s, &sb, "sleeping");
	worker_sandbox_kill(&sb, SIGTERM);
	sbx_out_t o;
	TH_CHECK(sbx_collect(&sb, NULL, 0, 5000, &o) == 0, "SIGTERM did not end the agent");
	/* bwrap reports the agent's death by SIGTERM as 128 + 15. */
	if (bw)
		TH_CHECK(exit_code(&o) == 128 + SIGTERM, "status %d", o.status);
	else
		TH_CHECK(o.exited && WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGTERM,
		         "status %d", o.status);
	sbx_out_free(&o);
	worker_sandbox_destroy(&sb);

	char *argv2[] = { agent, "hang", NULL };
	s.argv = argv2;
	start_mock(&s, &sb, "hanging");
	worker_sandbox_kill(&sb, SIGTERM);
	TH_CHECK(sbx_collect(&sb, NULL, 0, 500, &o) == -1, "hang ended on SIGTERM");
	sbx_out_free(&o);
	worker_sandbox_kill(&sb, SIGKILL);
	TH_CHECK(sbx_collect(&sb, NULL, 0, 5000, &o) == 0, "SIGKILL did not end the hang");
	TH_CHECK(o.exited && WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGKILL, "status %d", o.status);
	sbx_out_free(&o);
	worker_sandbox_destroy(&sb);
}

static void test_process_driver(void)
{
	sbx_out_t o;
	TH_REQUIRE(run_sh(WORKER_SANDBOX_PROCESS, "env; pwd; exit 7", NULL, &o) == 0);
	TH_CHECK(exit_code(&o) == 7, "status %d", o.status);
	TH_CHECK(strstr(o.out, "FOO=bar baz\n"), "env: %s", o.out);
	TH_CHECK(!strstr(o.out, "RUNNEL_REDIS_URL"), "worker env leaked: %s", o.out);
	char *pwd = th_strf("%s\n", ws_dir);
	TH_CHECK(strstr(o.out, pwd), "pwd: %s", o.out);
	sbx_out_free(&o);

	/* A background child left behind dies with the run. */
	char *argv[] = { "/bin/sh", "-c", "sleep 1000 & echo started", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_PROCESS, argv);
	worker_sandbox_t sb;
	spawn_ok(&s, &sb);
	pid_t pgid = sb.pid;
	/* stdout stays open in the sleep, so wait for the exit, not EOF. */
	int r = 0;
	for (int i = 0; i < 2500 && (r = worker_sandbox_reap(&sb)) == 0; i++)
		usleep(2000);
	TH_CHECK(r == 1);
	struct group_arg a = { pgid, 0 };
	TH_CHECK(th_wait_until(group_cond, &a, 2000), "%d processes left", sbx_group_count(pgid));
	worker_sandbox_destroy(&sb);

	/* rlimits apply to the agent. */
	char *argv2[] = { "/bin/sh", "-c", "ulimit -n; ulimit -f", NULL };
	s = spec_for(WORKER_SANDBOX_BWRAP, argv2);
	s.rlimit_nofile = 77;
	s.rlimit_fsize_mb = 1;
	spawn_ok(&s, &sb);
	TH_CHECK(sbx_collect(&sb, NULL, 1, 10000, &o) == 0);
	worker_sandbox_destroy(&sb);
	TH_CHECK(th_streq(o.out, "77\n2048\n"), "ulimits: %s", o.out);
	sbx_out_free(&o);
}

/* bwrap says when the sandbox's namespaces exist; the process driver has
 * none to wait for. */
static void test_wait_cloned(void)
{
	char *argv[] = { "/bin/sh", "-c", "read t; echo up", NULL };
	worker_sandbox_spec_t s = spec_for(WORKER_SANDBOX_BWRAP, argv);
	worker_sandbox_t sb;
	spawn_ok(&s, &sb);
	TH_CHECK(sb.info_fd >= 0);
	TH_CHECK(worker_sandbox_wait_cloned(&sb, 10000) == 1, "bwrap never said it had cloned");
	TH_CHECK(sb.info_fd == -1, "the pipe is closed once read");
	sbx_out_t o;
	TH_CHECK(sbx_collect(&sb, "go\n", 1, 10000, &o) == 0);
	TH_CHECK(th_streq(o.out, "up\n"), "out %s", o.out);
	sbx_out_free(&o);
	worker_sandbox_destroy(&sb);

	s = spec_for(WORKER_SANDBOX_PROCESS, argv);
	spawn_ok(&s, &sb);
	TH_CHECK(sb.info_fd == -1);
	TH_CHECK(worker_sandbox_wait_cloned(&sb, 10000) == 0);
	worker_sandbox_destroy(&sb);
}

static int reap_any(void *arg)
{
	(void)arg;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	return th_zombies_of(getpid()) == 0;
}

static int orphans_reaped(void *arg)
{
	(void)arg;
	worker_sandbox_reap_orphans();
	return th_zombies_of(getpid()) == 0;
}

/*
 * bwrap's outer process exits before the sandbox's init; the init comes
 * to this process (a subreaper, as the worker is) and must not stay a
 * zombie.  The scan must not take a child it did not orphan: a zombie of
 * our own keeps its status for waitpid.
 */
static void test_orphans(void)
{
	/* What the earlier tests orphaned (the process driver's sleeps). */
	TH_REQUIRE(th_wait_until(reap_any, NULL, 5000), "%d zombie(s) before the test", th_zombies_of(getpid()));
	for (int i = 0; i < 5; i++) {
		sbx_out_t o;
		TH_REQUIRE(run_sh(WORKER_SANDBOX_BWRAP, "echo ok", NULL, &o) == 0);
		TH_CHECK(exit_code(&o) == 0 && th_streq(o.out, "ok\n"), "out %s", o.out);
		sbx_out_free(&o);
		/* At most the last init, still exiting when bwrap was reaped. */
		int z = th_zombies_of(getpid());
		TH_CHECK(z >= 0 && z <= 1, "%d zombie(s) after %d sandbox(es)", z, i + 1);
	}
	TH_CHECK(th_wait_until(orphans_reaped, NULL, 5000), "%d zombie(s) left", th_zombies_of(getpid()));

	pid_t own = fork();
	TH_REQUIRE(own >= 0);
	if (own == 0)
		_exit(7);
	siginfo_t si;
	TH_REQUIRE(waitid(P_PID, (id_t)own, &si, WEXITED | WNOWAIT) == 0); /* a zombie now */
	worker_sandbox_reap_orphans();
	int st = 0;
	TH_CHECK(waitpid(own, &st, 0) == own && WIFEXITED(st) && WEXITSTATUS(st) == 7,
	         "the scan took a child of our own (status %d)", st);
}

static void test_probe(void)
{
	char err[256] = "";
	TH_CHECK(worker_sandbox_probe(WORKER_SANDBOX_BWRAP, NULL, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(worker_sandbox_probe(WORKER_SANDBOX_PROCESS, NULL, err, sizeof(err)) == 0);
	TH_CHECK(worker_sandbox_probe(WORKER_SANDBOX_BWRAP, "/nonexistent/bwrap", err, sizeof(err)) == -1);
	TH_CHECK(th_streq(err, "cannot exec bwrap: No such file or directory"), "err: %s", err);
}

int main(int argc, char **argv)
{
	th_init("stages_sandbox");
	TH_REQUIRE(argc == 2 || argc == 3, "usage: test_sandbox MOCK_AGENT [WARM_INIT]");
	mock_agent = argv[1];
	warm_init = argc == 3 ? argv[2] : NULL;
	/* The worker's own environment must never reach the agent. */
	setenv("RUNNEL_REDIS_URL", "redis://:sandbox-test-secret@127.0.0.1:1", 1);
	ws_dir = th_tmpdir();
	TH_REQUIRE(ws_dir);

	test_probe();
	test_env();
	test_loader_env();
	test_host_root();
	test_syscalls();
	test_no_host_paths();
	test_filesystem();
	test_setup_script();
	test_exec_failure();
	test_refusals();
	test_kill_tree(WORKER_SANDBOX_BWRAP);
	test_kill_tree(WORKER_SANDBOX_PROCESS);
	test_signals(WORKER_SANDBOX_BWRAP);
	test_signals(WORKER_SANDBOX_PROCESS);
	test_process_driver();
	test_wait_cloned();
	test_orphans();
	return th_done();
}
