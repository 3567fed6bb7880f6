"""The sandbox jail: what a candidate's process may see and touch (docs/threat-model.md, "The jail").

A :class:`JailPlan` is decided once per sandbox pool, in the controller, by :func:`plan_jail`: what this
machine and this user allow, each part tried for real in a throwaway process (:func:`probe`) before a
candidate ever runs under it. The zygote applies the session's part once (:func:`enter_session`: a user
namespace for a non-root user, its own pid namespace, a read-only mount view with the store hidden), and every
sandbox forked from it gets fresh namespaces of its own and drops what it may not keep (:func:`fork_jailed`):

* identity -- as root on the CPU an unprivileged uid of its own (``uid``); as a normal user, root of a user
  namespace that maps to the caller, every capability dropped (``userns``); as root on CUDA, where CUDA IPC
  needs the controller's uid and user namespaces break CUDA (measured on the H200, docs/threat-model.md), the
  same uid with every capability dropped, ``no_new_privs`` and the controller non-dumpable (``same-uid``);
* namespaces -- pid (it is init of its own: every descendant, ``setsid`` or not, dies with it; it cannot name
  the controller or the zygote), net (its own loopback only), mount, ipc, uts;
* view -- everything read-only, ``/tmp`` and ``/dev/shm`` private (size-limited tmpfs), ``/run`` and the store
  hidden, a ``/proc`` of its own pid namespace;
* limits -- a cgroup per sandbox (memory, pids, CPU time of every descendant; :mod:`.cgroups`), else rlimits;
* seccomp -- :mod:`.seccomp_filter`, installed last.

Order inside a new sandbox (every step before any candidate code; a failed step ends the sandbox with the step
named, never a sandbox that runs with less than its plan): namespaces → private mounts → loopback → rlimits →
bounding set → uid/gid → capabilities → no_new_privs → seccomp → status to the zygote.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
from pathlib import Path
from typing import Callable, Optional

from . import linux
from .jail_plan import ENV_PLAN, JailError, JailPlan

_NS_FLAGS = {"net": linux.CLONE_NEWNET, "mount": linux.CLONE_NEWNS, "ipc": linux.CLONE_NEWIPC,
             "uts": linux.CLONE_NEWUTS}


# ---------------------------------------------------------------------------------------------- zygote side


def enter_session(plan: JailPlan) -> Optional[int]:
    """In the zygote, first thing (single-threaded, nothing imported): the user namespace, the zygote's own pid
    namespace (the process that called this stays behind, waits and mirrors the zygote's exit), the read-only
    view. Returns an fd of the zygote's pid namespace (for :func:`fork_jailed`), or None without one."""
    if plan.level == "off":
        return None
    if "user" in plan.namespaces:
        _enter_userns(plan.uid, plan.gid)
    p0 = None
    if "pid" in plan.namespaces:
        try:
            linux.unshare(linux.CLONE_NEWPID)
        except OSError as e:
            raise JailError("pid", str(e)) from None
        pid = os.fork()
        if pid:
            _mirror_child(pid)  # never returns
        # the zygote dies with the process the controller started (getppid() is 0 here: the parent is outside)
        linux.set_parent_death_signal(signal.SIGKILL)
        p0 = os.open("/proc/self/ns/pid", os.O_RDONLY)
    if plan.view:
        _session_view(plan.hide, plan.expose if plan.identity == "uid" else ())
    return p0


def _enter_userns(uid: int, gid: int) -> None:
    try:
        linux.unshare(linux.CLONE_NEWUSER)
        linux.write_file("/proc/self/setgroups", "deny")
        linux.write_file("/proc/self/uid_map", f"0 {uid} 1")
        linux.write_file("/proc/self/gid_map", f"0 {gid} 1")
    except OSError as e:
        raise JailError("userns", str(e)) from None


def _mirror_child(pid: int) -> None:
    """The process left outside the zygote's pid namespace: hold nothing, wait, exit as the zygote did."""
    os.closerange(3, 1 << 16)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(70)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _session_view(hide: tuple[str, ...], expose: tuple[str, ...] = ()) -> None:
    """A mount namespace for the zygote and its sandboxes: the interpreter reachable by the sandbox's uid, the
    store hidden, /run hidden, everything read-only."""
    try:
        linux.unshare(linux.CLONE_NEWNS)
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    except OSError as e:
        raise JailError("mount", str(e)) from None
    try:
        _expose(expose)
    except OSError as e:
        raise JailError("identity", f"exposing the interpreter to the sandbox's uid: {e}") from None
    try:
        stage = "/run" if os.path.isdir("/run") else None
        if stage:  # an empty tmpfs over /run: daemons' sockets are out of reach (a read-only mount allows connect)
            linux.mount("tmpfs", stage, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=64k,mode=755")
            empty_file = os.path.join(stage, ".autotune-hidden")
            os.close(os.open(empty_file, os.O_CREAT | os.O_WRONLY, 0o444))
            empty_dir = os.path.join(stage, ".autotune-hidden-dir")
            os.mkdir(empty_dir, 0o555)
            for path in hide:
                if os.path.isdir(path):
                    linux.mount(empty_dir, path, None, linux.MS_BIND)
                elif os.path.exists(path):
                    linux.mount(empty_file, path, None, linux.MS_BIND)
        elif hide:
            raise OSError(2, "no /run to stage the hiding mounts in")
        _minimal_dev()
        _read_only_tree("/")
    except OSError as e:
        raise JailError("view", str(e)) from None


def _expose(paths: tuple[str, ...]) -> None:
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


def _minimal_dev() -> None:
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


def _read_only_tree(root: str) -> None:
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


def fork_jailed(plan: JailPlan, p0: Optional[int], run: Callable[[], int], keep_fds: tuple[int, ...] = (),
                timeout_s: float = 30.0) -> tuple[int, Optional[int], Optional[dict]]:
    """Fork a sandbox with fresh namespaces; the child jails itself, then calls ``run`` (its exit code is the
    process's). Returns (pid in the zygote's namespace, pidfd or None, None or the failure: {"step", "error"}).
    A child whose jail fails reports the step and exits 71 without calling ``run``."""
    r, w = os.pipe()
    new_pid = plan.level != "off" and "pid" in plan.namespaces
    if new_pid:
        linux.unshare(linux.CLONE_NEWPID)
    try:
        pid = os.fork()
    finally:
        if new_pid and p0 is not None:
            try:
                linux.setns(p0, linux.CLONE_NEWPID)  # later forks of the zygote stay outside this namespace
            except OSError:
                pass
    if pid == 0:
        code = 71
        try:
            os.close(r)
            if p0 is not None:
                os.close(p0)
            try:
                enter_sandbox(plan)
            except JailError as e:
                os.write(w, json.dumps({"error": str(e), "step": e.step}).encode())
                os._exit(71)
            except Exception as e:  # noqa: BLE001
                os.write(w, json.dumps({"error": f"jail: {type(e).__name__}: {e}", "step": "jail"}).encode())
                os._exit(71)
            os.write(w, b'{"ok": true}')
            os.close(w)
            code = run()
        finally:
            os._exit(code)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], timeout_s)
        data = os.read(r, 1 << 16) if ready else b""
    finally:
        os.close(r)
    try:
        status = json.loads(data) if data else {"error": "the sandbox ended before its jail was set up"}
    except ValueError:
        status = {"error": f"unreadable jail status {data[:80]!r}"}
    if status.get("ok"):
        failure = None
    else:
        failure = {"step": str(status.get("step") or "jail"), "error": str(status.get("error"))}
    pidfd = None
    if failure is None and hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    return pid, pidfd, failure


# ---------------------------------------------------------------------------------------------- sandbox side


def enter_sandbox(plan: JailPlan) -> None:
    """In a freshly forked sandbox, before any candidate code. Raises :class:`JailError` naming the step."""
    if plan.level == "off":
        return
    flags = 0
    for name, flag in _NS_FLAGS.items():
        if name in plan.namespaces:
            flags |= flag
    if flags:
        try:
            linux.unshare(flags)
        except OSError as e:
            raise JailError("+".join(n for n in _NS_FLAGS if n in plan.namespaces), str(e)) from None
    if "mount" in plan.namespaces:
        _sandbox_mounts(plan)
    if "net" in plan.namespaces:
        try:
            linux.loopback_up()
        except OSError as e:
            raise JailError("net", f"loopback: {e}") from None
    if "uts" in plan.namespaces:
        try:
            socket.sethostname("autotune-sandbox")
        except OSError as e:
            raise JailError("uts", str(e)) from None
    _rlimits(plan)
    _drop_identity(plan)
    if plan.seccomp:
        from .seccomp_filter import load_filter

        try:
            load_filter()
        except Exception as e:  # noqa: BLE001
            raise JailError("seccomp", str(e)) from None
    os.environ.update({"HOME": "/tmp", "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache",
                       "TRITON_CACHE_DIR": "/tmp/.triton", "TORCHINDUCTOR_CACHE_DIR": "/tmp/.inductor"})
    if plan.identity == "uid":
        os.environ.update({"USER": "autotune-sandbox", "LOGNAME": "autotune-sandbox"})


def _sandbox_mounts(plan: JailPlan) -> None:
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
        if "pid" in plan.namespaces:
            linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
        if plan.view:
            os.chdir("/tmp")
    except OSError as e:
        raise JailError("view", str(e)) from None


def _rlimits(plan: JailPlan) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if plan.limits == "rlimit" and plan.pids_max and plan.identity in ("uid", "userns"):
            # counted per uid (per user namespace since Linux 5.14): only sandboxes run as this uid there
            resource.setrlimit(resource.RLIMIT_NPROC, (plan.pids_max, plan.pids_max))
    except (OSError, ValueError) as e:
        raise JailError("limits", f"rlimit: {e}") from None


def _drop_identity(plan: JailPlan) -> None:
    if plan.identity == "none":
        try:
            linux.set_no_new_privs()
        except OSError as e:
            raise JailError("identity", str(e)) from None
        return
    try:
        for cap in range(linux.last_capability() + 1):  # needs CAP_SETPCAP: before the uid changes
            try:
                linux.prctl(linux.PR_CAPBSET_DROP, cap)
            except OSError:
                pass
        if plan.identity == "uid":
            os.setgroups([])
            os.setresgid(plan.gid, plan.gid, plan.gid)
            os.setresuid(plan.uid, plan.uid, plan.uid)
        linux.drop_all_capabilities()
        linux.set_no_new_privs()
    except OSError as e:
        raise JailError("identity", str(e)) from None
    caps = linux.capabilities_now()
    if any(caps.get(k, 0) for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")):
        raise JailError("identity", f"capabilities left after dropping them: {caps}")


# ---------------------------------------------------------------------------------------------- probe program


def _probe_checks(plan: JailPlan) -> dict:
    """Inside the probe's sandbox: what the candidate would see."""
    checks: dict = {"uid": os.getuid(), "ppid": os.getppid()}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp"):
                checks[k] = v.strip()
    for p in plan.expose:
        if not os.access(p, os.R_OK | os.X_OK):
            raise JailError("identity", f"uid {os.getuid()} cannot read {p}")
    for p in plan.keep:
        if not os.access(p, os.R_OK):
            raise JailError("view", f"{p} (the interpreter or this package, under a private folder) is not readable")
    checks["devices"] = sorted(os.listdir("/dev")) if os.path.isdir("/dev") else None
    checks["visible_pids"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    try:
        with open("/proc/net/dev") as f:
            checks["interfaces"] = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
    except OSError:
        checks["interfaces"] = None
    try:
        with open("/tmp/.probe", "w") as f:
            f.write("x")
        checks["tmp_writable"] = True
    except OSError:
        checks["tmp_writable"] = False
    if plan.device == "cuda":
        try:
            import torch

            x = torch.arange(1024, device="cuda", dtype=torch.float32)
            checks["cuda_sum"] = float((x * 2).sum().item())
        except Exception as e:  # noqa: BLE001
            raise JailError("cuda", f"{type(e).__name__}: {e}") from None
    for p in plan.hide:
        checks.setdefault("hidden", {})[p] = not os.path.exists(p) or (os.path.isfile(p) and os.path.getsize(p) == 0) \
            or (os.path.isdir(p) and not os.listdir(p))
    return checks


def _probe_main() -> int:
    plan = JailPlan.from_json(json.loads(os.environ[ENV_PLAN]))
    try:
        p0 = enter_session(plan)
    except JailError as e:
        print(json.dumps({"ok": False, "step": e.step, "error": e.detail}))
        return 0
    r, w = os.pipe()

    def child() -> int:
        os.close(r)
        try:
            os.write(w, json.dumps(_probe_checks(plan)).encode())
        except JailError as e:
            os.write(w, json.dumps({"failed": {"step": e.step, "error": e.detail}}).encode())
        return 0

    try:
        pid, pidfd, failure = fork_jailed(plan, p0, child)
    except OSError as e:
        print(json.dumps({"ok": False, "step": "pid", "error": str(e)}))
        return 0
    os.close(w)
    if failure is not None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        print(json.dumps({"ok": False, **failure}))
        return 0
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    if "pid" in plan.namespaces and pidfd is None:
        print(json.dumps({"ok": False, "step": "pidfd", "error": "pidfd_open failed"}))
        return 0
    checks = json.loads(data or b'{"failed": {"step": "jail", "error": "the probe sandbox sent nothing"}}')
    if "failed" in checks:
        print(json.dumps({"ok": False, **checks["failed"]}))
        return 0
    print(json.dumps({"ok": True, "checks": checks}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["probe"]:
        sys.exit(_probe_main())
    print("usage: python -m pytest_autotune.sandbox.jail probe  (plan JSON in $AUTOTUNE_JAIL_PLAN)", file=sys.stderr)
    sys.exit(2)
