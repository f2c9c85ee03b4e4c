"""The sandbox's seccomp filter, built with libseccomp (through `pyseccomp`) and handed to bwrap as BPF.

Default allow, with a deny list in the spirit of Flatpak's: syscalls a Python program has no business making
and that widen the kernel's attack surface or reach other processes — tracing and reading other processes'
memory, kernel keyrings, BPF, perf, io_uring, userfaultfd, mounting and namespace creation (`unshare`,
`setns`, `clone` with any CLONE_NEW* flag; `clone3`, whose flags a filter cannot read, answers ENOSYS so that
libc falls back to `clone`), module loading, reboot/kexec/swap, clock and host name changes, handle-based
opens; every socket family but AF_UNIX; the terminal-injection ioctls. Syscalls of any other ABI (i386 or x32
on x86-64) kill the process.
"""

from __future__ import annotations

import errno
import functools
import os

from swarmrl.tasks.errors import SandboxError

DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "perf_event_open",
    "bpf",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "name_to_handle_at",
    "open_by_handle_at",
    "iopl",
    "ioperm",
    "uselib",
    "personality",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "fanotify_init",
    "mbind",
    "migrate_pages",
    "move_pages",
    "set_mempolicy",
    "nfsservctl",
    "vhangup",
)
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (clone has no NEWTIME: low byte = signal)
CLONE_NAMESPACE_FLAGS = (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000)
AF_UNIX = 1
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


@functools.cache
def seccomp_bpf() -> bytes:
    """The compiled filter (raw BPF for `bwrap --seccomp FD`); SandboxError when libseccomp is missing."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError) as exc:
        raise SandboxError(
            f"the seccomp filter needs libseccomp and its Python binding ({exc}); install them with "
            "`apt-get install -y libseccomp2` and `pip install pyseccomp`"
        ) from exc
    deny = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    for name in DENIED:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0:  # unknown to this arch: nothing to deny
            rules.add_rule(deny, name)
    for flag in CLONE_NAMESPACE_FLAGS:  # rules for one syscall are OR-ed: any namespace flag is refused
        rules.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.NE, AF_UNIX))
    for request in (TIOCSTI, TIOCLINUX):
        rules.add_rule(deny, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    try:
        with os.fdopen(os.memfd_create("seccomp-bpf"), "w+b") as sink:
            rules.export_bpf(sink)
            sink.seek(0)
            return sink.read()
    except OSError as exc:
        raise SandboxError(f"building the seccomp filter failed: {exc}") from exc
