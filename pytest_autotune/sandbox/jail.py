"""The sandbox jail: what a candidate's process may see and touch (docs/design/threat-model.md#the-jail).

A :class:`JailPlan` is decided once per sandbox pool, in the controller, by :func:`plan_jail`: what this
machine and this user allow, each part tried for real in a throwaway process (:func:`probe`, which runs
:mod:`.jail_probe`) before a candidate ever runs under it. The zygote applies the session's part once
(:func:`enter_session`: a user namespace for a non-root user, its own pid namespace, a read-only mount view with
the store hidden: :mod:`.jail_mounts`), and every sandbox forked from it gets fresh namespaces of its own and
drops what it may not keep (:func:`fork_jailed`):

* identity -- as root on the CPU an unprivileged uid of its own (``uid``); as a normal user, root of a user
  namespace that maps to the caller, every capability dropped (``userns``); as root on CUDA, where CUDA IPC
  needs the controller's uid and user namespaces break CUDA (measured on the H200, docs/design/threat-model.md), the
  same uid with every capability dropped, ``no_new_privs`` and the controller non-dumpable (``same-uid``);
* namespaces -- pid (it is init of its own: every descendant, ``setsid`` or not, dies with it; it cannot name
  the controller or the zygote), net (its own loopback only), mount, ipc, uts;
* view -- everything read-only, ``/tmp`` and ``/dev/shm`` private (size-limited tmpfs), ``/run`` and the store
  hidden, a ``/proc`` of its own pid namespace;
* limits -- a cgroup per sandbox (memory, pids, CPU time of every descendant; :mod:`.cgroups`), else rlimits;
  where neither bounds the sandbox's tasks (root without a ``pids`` controller: the GPU host) a seccomp filter
  that hands every new task to the controller (:mod:`.task_limit`);
* seccomp -- :mod:`.seccomp_filter`, installed last.

Order inside a new sandbox (every step before any candidate code; a failed step ends the sandbox with the step
named, never a sandbox that runs with less than its plan): namespaces → private mounts → loopback → rlimits →
bounding set → uid/gid → capabilities → no_new_privs → seccomp → the task filter, whose listener goes to the
zygote (and from there to the controller's supervisor) with the status.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import socket
from typing import Callable, Optional

from . import linux
from .jail_mounts import sandbox_mounts, session_view
from .jail_plan import SUPERVISED, JailError, JailPlan

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
        session_view(plan.hide, plan.expose if plan.identity == "uid" else ())
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


def fork_jailed(plan: JailPlan, p0: Optional[int], run: Callable[[], int], keep_fds: tuple[int, ...] = (),
                timeout_s: float = 30.0) -> tuple[int, Optional[int], Optional[dict], Optional[int]]:
    """Fork a sandbox with fresh namespaces; the child jails itself, then calls ``run`` (its exit code is the
    process's). Returns (pid in the zygote's namespace, pidfd or None, None or the failure: {"step", "error"},
    the task limit's listener or None). A child whose jail fails reports the step and exits 71 without calling
    ``run``. The listener (:mod:`.task_limit`) is the caller's to pass on to a supervisor or close: until one answers
    it, the sandbox's next new task waits; once it is closed, new tasks fail with ENOSYS."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
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
            ours.close()
            if p0 is not None:
                os.close(p0)
            try:
                listener = enter_sandbox(plan)
            except JailError as e:
                theirs.sendall(json.dumps({"error": str(e), "step": e.step}).encode())
                os._exit(71)
            except Exception as e:  # noqa: BLE001
                theirs.sendall(json.dumps({"error": f"jail: {type(e).__name__}: {e}", "step": "jail"}).encode())
                os._exit(71)
            # the listener leaves this process before any candidate code: only the supervisor may hold it
            socket.send_fds(theirs, [b'{"ok": true}'], [listener] if listener is not None else [])
            if listener is not None:
                os.close(listener)
            theirs.close()
            code = run()
        finally:
            os._exit(code)
    theirs.close()
    fds: list[int] = []
    try:
        ready, _, _ = select.select([ours], [], [], timeout_s)
        data, fds, _flags, _addr = socket.recv_fds(ours, 1 << 16, 1) if ready else (b"", [], 0, None)
    finally:
        ours.close()
    try:
        status = json.loads(data) if data else {"error": "the sandbox ended before its jail was set up"}
    except ValueError:
        status = {"error": f"unreadable jail status {data[:80]!r}"}
    listener = fds[0] if fds else None
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
    return pid, pidfd, failure, listener


# ---------------------------------------------------------------------------------------------- sandbox side


def enter_sandbox(plan: JailPlan) -> Optional[int]:
    """In a freshly forked sandbox, before any candidate code. Raises :class:`JailError` naming the step. Returns
    the task limit's listener where the plan bounds tasks with it (:mod:`.task_limit`), else None."""
    if plan.level == "off":
        return None
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
        sandbox_mounts(plan)
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
    listener = None
    if SUPERVISED in plan.limits:
        from .task_limit import install

        try:
            listener = install()
        except Exception as e:  # noqa: BLE001
            raise JailError("limits", f"task limit: {e}") from None
    os.environ.update({"HOME": "/tmp", "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache",
                       "TRITON_CACHE_DIR": "/tmp/.triton", "TORCHINDUCTOR_CACHE_DIR": "/tmp/.inductor"})
    if plan.identity == "uid":
        os.environ.update({"USER": "autotune-sandbox", "LOGNAME": "autotune-sandbox"})
    return listener


def _rlimits(plan: JailPlan) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if "rlimit" in plan.limits and plan.pids_max and plan.identity in ("uid", "userns"):
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

