"""The sandbox's seccomp filter, built with libseccomp's Python bindings (docs/design/threat-model.md#the-jail).

A deny list, answered with ``EPERM`` (a candidate sees a ``PermissionError``, the item goes on): every system
call that reads or writes another process (``ptrace``, ``process_vm_readv/writev``, ``pidfd_getfd``, ``kcmp``),
watches hardware counters (``perf_event_open``), moves the sandbox between CPUs (``sched_setaffinity``), or
undoes the jail (``mount``, ``unshare``, ``setns``, namespace flags of ``clone``, ``chroot``, ``pivot_root``), and
the kernel interfaces a benchmark never needs (modules, ``kexec``, keyrings, ``bpf``, ``userfaultfd``,
``io_uring``, clocks, swap, reboot). ``clone3`` answers ``ENOSYS``: its flags live in memory a filter cannot
read, and glibc falls back to ``clone``, whose flags the filter checks. Calls of any other architecture (32-bit
``int 0x80``, x32) kill the process: that is libseccomp's default for foreign architectures.

The bindings are libseccomp's own (``import seccomp``, Debian ``python3-seccomp``) where importable, else
``pyseccomp`` (PyPI, the same API over ctypes). Both need ``libseccomp.so.2`` (Debian ``libseccomp2``, which
``apt`` itself depends on).
"""

from __future__ import annotations

import errno
from types import ModuleType
from typing import Optional

from . import linux

#: refused with EPERM
DENIED = (
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
    "move_pages", "migrate_pages",
    # counters and placement
    "perf_event_open", "sched_setaffinity",
    # undoing the jail
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "open_by_handle_at", "name_to_handle_at",
    # kernel interfaces a benchmark never needs
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
    "swapoff", "syslog", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl",
    "ioperm", "keyctl", "add_key", "request_key", "bpf", "userfaultfd", "quotactl", "lookup_dcookie",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "vhangup", "fanotify_init",
)


class SeccompUnavailable(RuntimeError):
    pass


def bindings() -> ModuleType:
    """libseccomp's Python bindings, or :class:`SeccompUnavailable` saying how to get them."""
    errors = []
    for name in ("seccomp", "pyseccomp"):
        try:
            return __import__(name)
        except Exception as e:  # noqa: BLE001 - ImportError, or RuntimeError("Unable to find libseccomp")
            errors.append(f"{name}: {e}")
    raise SeccompUnavailable(
        "libseccomp's Python bindings are not importable (" + "; ".join(errors) + "): "
        "pip install pyseccomp (and apt-get install libseccomp2 if libseccomp.so.2 is missing)")


def load_filter(sc: Optional[ModuleType] = None) -> int:
    """Install the filter on the calling thread and the threads it starts later. Needs no_new_privs (or
    CAP_SYS_ADMIN). Returns the number of rules. Call it last: it refuses ``mount`` and ``unshare`` too."""
    sc = sc or bindings()
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    try:  # no speculative-store-bypass mitigation forced by the filter: the jail must not change how code runs
        f.set_attr(sc.Attr.CTL_SSB, 1)
    except (AttributeError, OSError, ValueError, RuntimeError):
        pass  # libseccomp < 2.5: kernels >= 5.16 do not force it for seccomp anyway
    n = 0
    for name in DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
            n += 1
        except (OSError, ValueError, RuntimeError):
            pass  # a call this kernel/libseccomp does not know: nothing to refuse
    for flag in (linux.CLONE_NEWNS, linux.CLONE_NEWCGROUP, linux.CLONE_NEWUTS, linux.CLONE_NEWIPC,
                 linux.CLONE_NEWUSER, linux.CLONE_NEWPID, linux.CLONE_NEWNET):
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        n += 1
    try:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        n += 1
    except (OSError, ValueError, RuntimeError):
        pass
    f.load()
    return n
