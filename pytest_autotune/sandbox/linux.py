"""Thin wrappers over the Linux system calls the sandbox jail needs (namespaces, mounts, capabilities, prctl).

Hand-rolled on purpose (docs/design/threat-model.md#the-jail): Python 3.11 has no ``os.unshare``/``os.setns`` and
no ``mount`` at all; the well-kept tools that wrap them (bubblewrap, nsjail) start a *new program*, so a
sandbox could no longer be forked from the pre-warmed zygote (2 s of torch import per item instead of a fork),
and neither is installed on the GPU host. Each function is one system call, named after it, and raises
``OSError`` with the errno, so the jail can say exactly which step the kernel refused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
import sys
from typing import Optional

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
#: every namespace flag (seccomp refuses them to the sandbox)
CLONE_NEW_ANY = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
                 | CLONE_NEWNET)

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long
if sys.platform.startswith("linux"):  # importable elsewhere (macOS spawns sandboxes without a jail)
    _libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    _libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
    _libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def unshare(flags: int) -> None:
    if hasattr(os, "unshare"):  # Python >= 3.12
        os.unshare(flags)
        return
    _libc.unshare.argtypes = (ctypes.c_int,)
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, nstype)
        return
    _libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
    _check(_libc.setns(fd, nstype), f"setns({nstype:#x})")


def mount(source: Optional[str], target: str, fstype: Optional[str], flags: int, data: Optional[str] = None) -> None:
    def enc(s: Optional[str]) -> Optional[bytes]:
        return s.encode() if s is not None else None

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount({source!r} on {target!r}, {fstype or ''} flags={flags:#x})")


def umount(target: str, flags: int = MNT_DETACH) -> None:
    _check(_libc.umount2(target.encode(), flags), f"umount({target!r})")


def prctl(option: int, a2: int = 0, a3: int = 0, a4: int = 0, a5: int = 0) -> int:
    return _check(_libc.prctl(option, a2, a3, a4, a5), f"prctl({option})")


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_dumpable(on: bool) -> None:
    prctl(PR_SET_DUMPABLE, 1 if on else 0)


def set_parent_death_signal(sig: int) -> None:
    prctl(PR_SET_PDEATHSIG, sig)


def set_child_subreaper() -> None:
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


def drop_all_capabilities() -> None:
    """Empty the bounding and ambient sets, then the effective/permitted/inheritable sets: even uid 0 gains
    nothing back on ``execve`` (the bounding set caps what a root exec receives)."""
    for cap in range(last_capability() + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            pass  # not in the set, or no CAP_SETPCAP left: the set check below is what matters
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    nr = _SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        raise OSError(0, f"capset: unknown system call number on {os.uname().machine}")
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(nr, ctypes.byref(hdr), ctypes.byref(data)), "capset(0)")


def capabilities_now() -> dict[str, int]:
    """CapEff/CapPrm/CapBnd/CapAmb of this process, from /proc/self/status."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:", "CapAmb:", "CapInh:")):
                k, v = line.split(":", 1)
                out[k] = int(v.strip(), 16)
    return out


def loopback_up() -> None:
    """Bring ``lo`` up in a fresh network namespace (it starts down): the sandbox keeps a loopback of its own."""
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | IFF_UP))


def write_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def pid_from_pidfd(fd: int) -> Optional[int]:
    """The pid a pidfd refers to, as the *reader's* pid namespace numbers it (``Pid:`` in its fdinfo)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError, IndexError):
        return None
    return None
