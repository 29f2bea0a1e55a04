/*
 * bench/bench_limits.c - what per-run limits and egress cost at the start
 * of a run: the run's cgroup (create + limits + remove), the size-limited
 * workspace (tmpfs mount + unmount), the egress proxy (start + stop), and
 * a whole bwrap sandbox running /bin/true plain, inside its cgroup, and
 * behind the egress bridge.  Prints medians and p90 in microseconds;
 * asserts nothing.  Needs what the worker needs (bwrap; root or a
 * delegated cgroup for the cgroup figures).
 *
 *   build/bench/bench_limits [iterations]
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "worker/cgroup.h"
#include "worker/egress.h"
#include "worker/sandbox.h"

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, int64_t *us, int n)
{
	if (n <= 0) {
		printf("%-44s skipped\n", what);
		return;
	}
	qsort(us, (size_t)n, sizeof(us[0]), cmp64);
	printf("%-44s p50 %7" PRId64 " us   p90 %7" PRId64 " us   (n=%d)\n", what, us[n / 2],
	       us[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1], n);
}

/* Spawns bwrap running /bin/true with the given extras; microseconds
 * until it has been reaped, or -1. */
static int64_t sandbox_true(const char *ws, const int *cg_fds, int ncg,
                            const char *bridge, const char *sock)
{
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { "PATH=/usr/bin:/bin", NULL };
	worker_sandbox_spec_t spec = {
		.driver = WORKER_SANDBOX_BWRAP,
		.init_path = RUNNEL_TEST_SANDBOX_INIT,
		.workspace_dir = ws,
		.argv = argv,
		.envp = envp,
		.cgroup_fds = cg_fds,
		.ncgroup_fds = ncg,
		.tmp_mb = 64,
		.egress_bridge = bridge,
		.egress_socket = sock,
	};
	worker_sandbox_t sb;
	char err[256];
	int64_t t0 = rn_mono_us();
	if (worker_sandbox_spawn(&spec, &sb, err, sizeof(err)) < 0) {
		fprintf(stderr, "spawn: %s\n", err);
		return -1;
	}
	while (worker_sandbox_reap(&sb) == 0)
		usleep(200);
	int64_t dt = rn_mono_us() - t0;
	worker_sandbox_destroy(&sb);
	return dt;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 50;
	if (n < 1)
		n = 1;
	char dir[] = "/tmp/runnel-bench-limits-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char ws[256], meta[256], sock[300], bridge[4096];
	snprintf(ws, sizeof(ws), "%s/ws", dir);
	snprintf(meta, sizeof(meta), "%s/meta", dir);
	snprintf(sock, sizeof(sock), "%s/egress.sock", meta);
	mkdir(ws, 0755);
	mkdir(meta, 0711); /* a root run's bwrap (the sandbox's uid) binds the socket */
	chmod(dir, 0711);
	/* runnel-egress-bridge sits next to this program's build tree. */
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[sl > 0 ? sl : 0] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(bridge, sizeof(bridge), "%.3000s/../worker/runnel-egress-bridge", self);

	int64_t *us = calloc((size_t)n, sizeof(*us));
	char err[512];
	worker_cgroup_root_t root;
	worker_cgroup_mode_t mode = worker_cgroup_probe(&root, "auto", err, sizeof(err));
	printf("cgroup mode: %s%s%s\n", worker_cgroup_mode_name(mode), mode ? "" : " - ", mode ? "" : err);

	int k = 0;
	worker_cgroup_limits_t lim = { .memory_bytes = 512ULL << 20, .pids = 256, .cpu_millis = 1000 };
	for (int i = 0; mode && i < n; i++) {
		worker_cgroup_t cg;
		char id[32];
		snprintf(id, sizeof(id), "bench%d", i);
		int64_t t0 = rn_mono_us();
		if (worker_cgroup_create(&cg, &root, id, &lim, 0, err, sizeof(err)) < 0) {
			fprintf(stderr, "cgroup: %s\n", err);
			break;
		}
		worker_cgroup_destroy(&cg, 1000);
		us[k++] = rn_mono_us() - t0;
	}
	report("cgroup create + limits + remove", us, k);

	k = 0;
	for (int i = 0; i < n; i++) {
		int64_t t0 = rn_mono_us();
		if (mount("tmpfs", ws, "tmpfs", MS_NOSUID | MS_NODEV, "size=1073741824,nr_inodes=263168,mode=0755") != 0)
			break;
		umount2(ws, MNT_DETACH);
		us[k++] = rn_mono_us() - t0;
	}
	report("workspace tmpfs mount + unmount", us, k);

	k = 0;
	char *allow[] = { "api.example.com:443" };
	worker_egress_rules_t rules = { .allow = allow, .nallow = 1 };
	for (int i = 0; i < n; i++) {
		int64_t t0 = rn_mono_us();
		worker_egress_t *e = worker_egress_start(sock, &rules, "bench", err, sizeof(err));
		if (!e) {
			fprintf(stderr, "egress: %s\n", err);
			break;
		}
		worker_egress_stop(e);
		us[k++] = rn_mono_us() - t0;
	}
	report("egress proxy start + stop", us, k);

	k = 0;
	for (int i = 0; i < n; i++) {
		int64_t t = sandbox_true(ws, NULL, 0, NULL, NULL);
		if (t < 0)
			break;
		us[k++] = t;
	}
	report("bwrap /bin/true, no limits", us, k);

	k = 0;
	for (int i = 0; mode && i < n; i++) {
		worker_cgroup_t cg;
		char id[32];
		snprintf(id, sizeof(id), "benchsb%d", i);
		if (worker_cgroup_create(&cg, &root, id, &lim, 0, err, sizeof(err)) < 0)
			break;
		int64_t t = sandbox_true(ws, cg.procs_fd, cg.ndirs, NULL, NULL);
		worker_cgroup_destroy(&cg, 1000);
		if (t < 0)
			break;
		us[k++] = t;
	}
	report("bwrap /bin/true inside its cgroup", us, k);

	k = 0;
	worker_egress_t *e = access(bridge, X_OK) == 0
	        ? worker_egress_start(sock, &rules, "bench", err, sizeof(err))
	        : NULL;
	for (int i = 0; e && i < n; i++) {
		int64_t t = sandbox_true(ws, NULL, 0, bridge, sock);
		if (t < 0)
			break;
		us[k++] = t;
	}
	worker_egress_stop(e);
	report("bwrap /bin/true behind the egress bridge", us, k);

	free(us);
	rmdir(ws);
	rmdir(meta);
	rmdir(dir);
	return 0;
}
