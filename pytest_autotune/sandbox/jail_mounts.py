"""The sandbox jail's view of the file system (docs/design/threat-model.md#the-jail): the zygote's session view
(everything read-only, ``/run`` and the store hidden, a minimal ``/dev``, the interpreter reachable by the
sandbox's uid) and each sandbox's own mounts (private ``/tmp`` and ``/dev/shm``, a ``/proc`` of its pid
namespace). :mod:`.jail` calls these in its order of steps; each raises :class:`JailError` naming the step.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from . import linux
from .jail_plan import JailError, JailPlan

#: what hides a path: an empty file and an empty folder, staged in the view's own tmpfs over /run
HIDDEN_FILE, HIDDEN_DIR = ".autotune-hidden", ".autotune-hidden-dir"


def session_view(hide: tuple[str, ...], expose: tuple[str, ...] = ()) -> None:
    """A mount namespace for the zygote and its sandboxes: the interpreter reachable by the sandbox's uid, the
    store hidden, /run hidden, everything read-only."""
    try:
        linux.unshare(linux.CLONE_NEWNS)
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    except OSError as e:
        raise JailError("mount", str(e)) from None
    try:
        expose_paths(expose)
    except OSError as e:
        raise JailError("identity", f"exposing the interpreter to the sandbox's uid: {e}") from None
    try:
        stage = "/run" if os.path.isdir("/run") else None
        if stage:  # an empty tmpfs over /run: daemons' sockets are out of reach (a read-only mount allows connect)
            linux.mount("tmpfs", stage, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=64k,mode=755")
            empty_file = os.path.join(stage, HIDDEN_FILE)
            os.close(os.open(empty_file, os.O_CREAT | os.O_WRONLY, 0o444))
            empty_dir = os.path.join(stage, HIDDEN_DIR)
            os.mkdir(empty_dir, 0o555)
            for path in hide:
                if os.path.isdir(path):
                    linux.mount(empty_dir, path, None, linux.MS_BIND)
                elif os.path.exists(path):
                    linux.mount(empty_file, path, None, linux.MS_BIND)
        elif hide:
            raise OSError(2, "no /run to stage the hiding mounts in")
        minimal_dev()
        read_only_tree("/")
    except OSError as e:
        raise JailError("view", str(e)) from None


def expose_paths(paths: tuple[str, ...]) -> None:
    """Make ``paths`` reachable by an unprivileged uid without changing a file: where an ancestor denies others
    passage (``/root`` is 0700 and pyenv lives in ``/root/.pyenv``), cover that ancestor with an empty tmpfs
    (0755) and bind back only the children the paths go through. The rest of that ancestor is hidden. A child bound
    back may itself deny passage (a checkout in ``/root/ci/work``): the next pass covers it the same way, until
    every ancestor of every path lets others through."""
    for _ in range(64):  # one level of closed ancestors per pass; a path has far fewer levels
        covers = _closed_ancestors(paths)
        if not covers:
            return
        for anc, children in sorted(covers.items()):
            fds = {c: os.open(os.path.join(anc, c), os.O_PATH) for c in sorted(children)}
            linux.mount("tmpfs", anc, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=64k,mode=755")
            for c, fd in fds.items():
                target = os.path.join(anc, c)
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.mkdir(target, 0o755)
                else:
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o444))
                linux.mount(f"/proc/self/fd/{fd}", target, None, linux.MS_BIND | linux.MS_REC)
                os.close(fd)


def _closed_ancestors(paths: tuple[str, ...]) -> dict[str, set[str]]:
    """For each path, its shallowest ancestor that others may not pass, with the child the path goes through."""
    covers: dict[str, set[str]] = {}
    for p in paths:
        parts = Path(os.path.realpath(p)).parts
        for i in range(1, len(parts) - 1):
            anc = os.path.join(*parts[: i + 1])
            if not os.stat(anc).st_mode & 0o001:
                covers.setdefault(anc, set()).add(parts[i + 1])
                break
    return covers


#: device nodes a sandbox keeps (plus every /dev/nvidia*): no disks, no /dev/mem, no consoles -- a sandbox that
#: keeps the controller's uid (root on CUDA) would otherwise open root-owned block devices as their owner
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def minimal_dev() -> None:
    """Replace /dev with a tmpfs holding only :data:`DEVICES` and the GPU's nodes (bound from the real ones),
    ``/dev/shm`` (each sandbox mounts a private tmpfs there) and the usual links into /proc/self/fd."""
    if not os.path.isdir("/dev"):
        return
    names = [n for n in DEVICES if os.path.exists(f"/dev/{n}")]
    names += sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    fds = {n: os.open(f"/dev/{n}", os.O_PATH) for n in names}
    try:
        linux.mount("tmpfs", "/dev", "tmpfs", linux.MS_NOSUID, "size=64k,mode=755")
        for n, fd in fds.items():
            target = f"/dev/{n}"
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.mkdir(target, 0o755)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
            linux.mount(f"/proc/self/fd/{fd}", target, None, linux.MS_BIND | linux.MS_REC)
        os.mkdir("/dev/shm", 0o1777)
        os.mkdir("/dev/pts", 0o755)
        for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
            os.symlink(target, f"/dev/{link}")
    finally:
        for fd in fds.values():
            os.close(fd)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def read_only_tree(root: str) -> None:
    """Every mount under ``root`` read-only and nosuid: one ``mount_setattr(AT_RECURSIVE)`` (Linux 5.12+), else a
    bind-remount of each mount keeping the flags a user namespace may not clear."""
    MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, AT_FDCWD = 0x1, 0x2, 0x8000, -100
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(442, AT_FDCWD, root.encode(), AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret == 0:
        return
    flag_names = {"nosuid": linux.MS_NOSUID, "nodev": linux.MS_NODEV, "noexec": linux.MS_NOEXEC}
    with open("/proc/self/mountinfo") as f:
        entries = [line.split() for line in f]
    for fields in entries:
        point = fields[4].replace("\\040", " ")
        if not (point == root or point.startswith(root.rstrip("/") + "/")):
            continue
        keep = 0
        for opt in fields[5].split(","):
            keep |= flag_names.get(opt, 0)
        try:
            linux.mount(None, point, None, linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | keep)
        except OSError as e:
            if e.errno not in (2, 13):  # vanished, or a mount we cannot see into: it stays as it was
                raise

def sandbox_mounts(plan: JailPlan) -> None:
    size = f"size={max(plan.memory_bytes, 64 << 20)}" if plan.memory_bytes else "size=50%"
    try:
        if plan.view:
            for target, mode in (("/tmp", "1777"), ("/dev/shm", "1777")):
                if os.path.isdir(target):
                    kept = [p for p in plan.keep if p.startswith(target + "/") and os.path.exists(p)]
                    fds = {p: os.open(p, os.O_PATH) for p in kept}
                    linux.mount("tmpfs", target, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"{size},mode={mode}")
                    for p, fd in fds.items():  # what the sandbox imports from, read-only, nothing else of it
                        if os.path.isdir(f"/proc/self/fd/{fd}"):
                            os.makedirs(p, 0o755, exist_ok=True)
                        else:
                            os.makedirs(os.path.dirname(p), 0o755, exist_ok=True)
                            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o444))
                        linux.mount(f"/proc/self/fd/{fd}", p, None, linux.MS_BIND | linux.MS_REC)
                        linux.mount(None, p, None, linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID)
                        os.close(fd)
        if plan.view and plan.hide:
            rehide(plan.hide)
        if "pid" in plan.namespaces:
            linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
        if plan.view:
            os.chdir("/tmp")
    except OSError as e:
        raise JailError("view", str(e)) from None


def rehide(hide: tuple[str, ...], stage: str = "/run") -> None:
    """In a sandbox's own mount namespace: hide each path of ``hide`` that exists now but was not there when the
    session's view was made (the store's folder, created by the build cache after the zygote started in a session
    that does not record), read-only like the rest of the view. A path already hidden is left as it is."""
    empty_dir, empty_file = os.path.join(stage, HIDDEN_DIR), os.path.join(stage, HIDDEN_FILE)
    try:
        hidden = {(st.st_dev, st.st_ino) for st in (os.stat(empty_dir), os.stat(empty_file))}
    except OSError:
        return
    for path in hide:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in hidden:
            continue
        linux.mount(empty_dir if os.path.isdir(path) else empty_file, path, None, linux.MS_BIND)
        linux.mount(None, path, None,
                    linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV)
