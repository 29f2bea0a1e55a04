/*
 * worker/seccomp.h - the system-call filter every bwrap sandbox runs under
 * (SPEC §6: "a seccomp filter removes the system calls a job has no use
 * for").  Built once with libseccomp, handed to bwrap as a BPF program on
 * a file descriptor (`--seccomp FD`); bwrap installs it just before it
 * executes the sandbox's first program, after its own mounts.
 *
 * Denied calls fail with EPERM (socket families with EAFNOSUPPORT, clone3
 * with ENOSYS so that libc falls back to clone, whose flags the filter can
 * see); nothing is killed, so a job that probes for a feature goes on.
 * The list and the reason for each entry are in docs/sandbox.md
 * ("System-call filter").
 *
 * @locality any thread.
 */
#ifndef RUNNEL_WORKER_SECCOMP_H
#define RUNNEL_WORKER_SECCOMP_H

#include <stddef.h>

/*
 * A new memfd (O_CLOEXEC, offset 0) holding the filter's BPF program, for
 * one sandbox: bwrap reads it to the end, so each sandbox needs its own.
 * The program itself is built on the first call and kept.  The fd, or -1
 * with errstr ("seccomp: ...").
 */
int worker_seccomp_fd(char *errstr, size_t errstr_size);

#endif
