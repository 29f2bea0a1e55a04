/*
 * worker/seccomp.c - builds the sandbox's system-call filter with
 * libseccomp and hands copies of it to bwrap (see seccomp.h; the list and
 * the reasons are in docs/sandbox.md, "System-call filter").
 *
 * Allow by default, deny a list: a job runs compilers, interpreters, Node
 * and whatever its setup script installs, so an allowlist of calls would
 * break programs nobody tested; what is removed is the kernel surface that
 * only privilege escalations and container escapes use (the Docker and
 * Flatpak default sets are the reference).
 */
#include "worker/seccomp.h"

#include <errno.h>
#include <linux/sched.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/io.h"

#define SECCOMP_PROG_MAX (256u << 10) /* far above any filter built here */

/* Calls denied outright with EPERM, by name (a name this libseccomp or
 * architecture does not know is skipped). */
static const char *const denied[] = {
	/* The kernel keyring is not namespaced: keys of other users' sessions. */
	"keyctl",
	"add_key",
	"request_key",
	/* eBPF, perf and userfaultfd: verifier bugs, kernel pointers leaked,
	 * race windows held open - the tools of most recent local exploits. */
	"bpf",
	"perf_event_open",
	"userfaultfd",
	/* io_uring: a second system-call interface the filter cannot see into,
	 * and a long list of CVEs; libuv and others fall back to threads. */
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
	/* The machine's own state. */
	"kexec_load",
	"kexec_file_load",
	"reboot",
	"init_module",
	"finit_module",
	"delete_module",
	"create_module",
	"get_kernel_syms",
	"query_module",
	"swapon",
	"swapoff",
	"acct",
	"syslog",
	"settimeofday",
	"clock_settime",
	"clock_adjtime",
	"iopl",
	"ioperm",
	"quotactl",
	"quotactl_fd",
	"lookup_dcookie",
	"nfsservctl",
	"uselib",
	"ustat",
	"sysfs",
	"_sysctl",
	"vm86",
	"vm86old",
	/* Mounts: bwrap has made every mount the sandbox will have. */
	"mount",
	"umount",
	"umount2",
	"pivot_root",
	"chroot",
	"move_mount",
	"open_tree",
	"fsopen",
	"fsconfig",
	"fsmount",
	"fspick",
	"mount_setattr",
	/* Other namespaces and file handles that bypass the mount tree
	 * (open_by_handle_at was the classic container escape). */
	"setns",
	"name_to_handle_at",
	"open_by_handle_at",
	"fanotify_init",
};
/*
 * ptrace stays: sanitizers (LeakSanitizer stops the world with it),
 * debuggers and strace are a job's ordinary tools, the pid namespace shows
 * only the run's own processes, every one of them has the same uid and no
 * capability, and since Linux 4.8 a tracer can no longer skip this filter.
 */

/* Socket families a job may open: unix, IPv4, IPv6, netlink (route only,
 * below).  Every other one fails with EAFNOSUPPORT, as on a kernel built
 * without it. */
static const int denied_families_low[] = { 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15 };

static int add(scmp_filter_ctx c, uint32_t action, const char *name, unsigned n,
               const struct scmp_arg_cmp *cmp)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not a call of this architecture */
	int rc = seccomp_rule_add_array(c, action, nr, n, cmp);
	/* A call libseccomp cannot filter on this architecture (a pseudo
	 * number on x86's multiplexed socketcall): skipped, not fatal. */
	return rc == -EDOM || rc == -EOPNOTSUPP ? 0 : rc;
}

static int build(scmp_filter_ctx c)
{
	int rc = 0;
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]) && !rc; i++)
		rc = add(c, eperm, denied[i], 0, NULL);

	/* Nested user namespaces: bwrap's --disable-userns already caps their
	 * number; this refuses the call itself (belt and braces). */
	struct scmp_arg_cmp newuser = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
	if (!rc)
		rc = add(c, eperm, "unshare", 1, &newuser);
	if (!rc)
		rc = add(c, eperm, "clone", 1, &newuser);
	/* clone3 passes its flags in memory the filter cannot read: ENOSYS
	 * makes libc fall back to clone, whose flags it can. */
	if (!rc)
		rc = add(c, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);

	/* personality: PER_LINUX, PER_LINUX32 and UNAME26 only (all <=
	 * 0x20008); ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC and MMAP_PAGE_ZERO
	 * undo exploit mitigations.  The query form (0xffffffff) is refused
	 * too: one comparison per argument is all libseccomp allows. */
	struct scmp_arg_cmp pers = SCMP_A0(SCMP_CMP_GT, 0x20008, 0);
	if (!rc)
		rc = add(c, eperm, "personality", 1, &pers);

	/* Pushing input into a terminal (TIOCSTI, TIOCLINUX): the sandbox has
	 * none of its own, but never the worker's either.  Masked: the
	 * kernel reads a 32-bit command. */
	struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
	struct scmp_arg_cmp linux_ = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX);
	if (!rc)
		rc = add(c, eperm, "ioctl", 1, &sti);
	if (!rc)
		rc = add(c, eperm, "ioctl", 1, &linux_);

	/* Socket families, then netlink beyond NETLINK_ROUTE (interface
	 * lists): netfilter, audit, uevents, xfrm, crypto... */
	const uint32_t eafno = SCMP_ACT_ERRNO(EAFNOSUPPORT);
	struct scmp_arg_cmp high = SCMP_A0(SCMP_CMP_GT, AF_NETLINK, 0);
	if (!rc)
		rc = add(c, eafno, "socket", 1, &high);
	if (!rc)
		rc = add(c, eafno, "socketpair", 1, &high);
	for (size_t i = 0; i < sizeof(denied_families_low) / sizeof(denied_families_low[0]) && !rc; i++) {
		struct scmp_arg_cmp fam = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)denied_families_low[i], 0);
		rc = add(c, eafno, "socket", 1, &fam);
	}
	struct scmp_arg_cmp nl[2] = { SCMP_A0(SCMP_CMP_EQ, AF_NETLINK, 0), SCMP_A2(SCMP_CMP_NE, 0 /* NETLINK_ROUTE */, 0) };
	if (!rc)
		rc = add(c, eperm, "socket", 2, nl);
	return rc;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static unsigned char *prog; /* the exported BPF program, kept for the process */
static size_t prog_len;
static char prog_err[160];

static void build_once(void)
{
	scmp_filter_ctx c = seccomp_init(SCMP_ACT_ALLOW);
	if (!c) {
		snprintf(prog_err, sizeof(prog_err), "seccomp: cannot start a filter");
		return;
	}
	/* 32-bit programs on a 64-bit kernel get the same rules (they would
	 * otherwise hit the filter's bad-architecture action). */
	if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
		seccomp_arch_add(c, SCMP_ARCH_X86);
		seccomp_arch_add(c, SCMP_ARCH_X32);
	}
	int rc = build(c);
	int fd = rc ? -1 : memfd_create("runnel-seccomp", MFD_CLOEXEC);
	if (!rc && fd < 0)
		rc = -errno;
	if (!rc)
		rc = seccomp_export_bpf(c, fd);
	if (!rc && lseek(fd, 0, SEEK_SET) != 0)
		rc = -errno;
	if (!rc) {
		prog = (unsigned char *)rn_read_alloc(fd, SECCOMP_PROG_MAX, &prog_len, 0);
		if (!prog || !prog_len)
			rc = -EIO;
	}
	if (fd >= 0)
		close(fd);
	seccomp_release(c);
	if (rc) {
		free(prog);
		prog = NULL;
		snprintf(prog_err, sizeof(prog_err), "seccomp: cannot build the filter: %s", strerror(-rc));
	}
}

int worker_seccomp_fd(char *errstr, size_t errstr_size)
{
	pthread_once(&once, build_once);
	if (!prog) {
		snprintf(errstr, errstr_size, "%s", prog_err);
		return -1;
	}
	int fd = memfd_create("runnel-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		snprintf(errstr, errstr_size, "seccomp: memfd: %s", strerror(errno));
		return -1;
	}
	if (rn_write_all(fd, prog, prog_len, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
		snprintf(errstr, errstr_size, "seccomp: cannot write the filter: %s", strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}
