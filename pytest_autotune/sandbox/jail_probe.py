"""The jail's probe program (``python -m pytest_autotune.sandbox.jail_probe probe``, plan JSON in
``$AUTOTUNE_JAIL_PLAN``): a mini zygote and one sandbox under the plan, which reports what it sees.
:func:`pytest_autotune.sandbox.jail_plan.probe` runs it in a throwaway process before a candidate ever runs under
a plan, and removes each part that fails (docs/design/threat-model.md#the-jail).
"""

from __future__ import annotations

import json
import os
import sys
import threading

from . import linux
from .jail import enter_session, fork_jailed
from .jail_plan import ENV_PLAN, SUPERVISED, JailError, JailPlan
from .task_limit import TaskLimiter


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
    if SUPERVISED in plan.limits:  # a new process and a new thread, each answered by the task supervisor
        try:
            kid = os.fork()
            if kid == 0:
                os._exit(0)
            os.waitpid(kid, 0)
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()
        except (OSError, RuntimeError) as e:
            raise JailError("limits", f"the task supervisor did not let a fork or a thread through: {e}") from None
        checks["task_supervisor"] = True
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


def main() -> int:
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
        pid, pidfd, failure, listener = fork_jailed(plan, p0, child)
    except OSError as e:
        print(json.dumps({"ok": False, "step": "pid", "error": str(e)}))
        return 0
    os.close(w)
    if listener is not None:  # this probe is the sandbox's supervisor (its /proc is the host's: the host pid)
        host = linux.pid_from_pidfd(pidfd) if pidfd is not None else None
        limiter = TaskLimiter()
        limiter.add(listener, host if host is not None else pid, plan.pids_max or 64)
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
        sys.exit(main())
    print("usage: python -m pytest_autotune.sandbox.jail_probe probe  (plan JSON in $AUTOTUNE_JAIL_PLAN)",
          file=sys.stderr)
    sys.exit(2)
