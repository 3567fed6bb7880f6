"""What this host gives the sandbox jail, and whether a GPU run here would be measured under a weaker jail than the
protocol asks. Two uses:

    python3 benchmarks/harness/gpu/jail_facts.py [--json OUT]  # the host's facts and the harness's plan, as JSON
    python3 benchmarks/harness/gpu/jail_facts.py --gate [--json OUT]  # run_h200.sh / anchors_h200.sh, first

``--gate`` exits 4 when the run is not staged as the repository says (seccomp bindings or sqlite-utils missing:
run benchmarks/harness/gpu/fetch_wheels.sh where pip works and copy .whl/ to the GPU host), 3 when the jail the harness would use
on CUDA is not full (the warning names each missing part), 0 when it is full. jail_check.py prints the same facts.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        return f"unreadable ({e.strerror})"


def _importable(name: str) -> str:
    try:
        mod = __import__(name)
        return f"ok {getattr(mod, '__version__', '')} ({getattr(mod, '__file__', '')})".strip()
    except Exception as e:  # noqa: BLE001
        return f"MISSING: {type(e).__name__}: {e}"


def host_facts() -> dict[str, Any]:
    from pytest_autotune.sandbox import cgroups, members, task_limit

    facts: dict[str, Any] = {
        "uid": os.geteuid(), "kernel": platform.release(), "machine": platform.machine(),
        "python": sys.version.split()[0],
        "seccomp_actions": _read("/proc/sys/kernel/seccomp/actions_avail"),
        "task_supervisor": task_limit.unavailable() or "available",
        "libseccomp": ctypes.util.find_library("seccomp") or "not found",
        "seccomp_bindings": {n: _importable(n) for n in ("seccomp", "pyseccomp")},
        "sqlite_utils": _importable("sqlite_utils"), "pynvml": _importable("pynvml"),
        "pid_namespace": members.pid_namespace(os.getpid()), "nspid": members.ns_pids(os.getpid()),
        "max_user_namespaces": _read("/proc/sys/user/max_user_namespaces"),
        "yama_ptrace_scope": _read("/proc/sys/kernel/yama/ptrace_scope"),
        "proc_cgroups": _read("/proc/cgroups"), "own_cgroup": _read("/proc/self/cgroup"),
    }
    mounts = cgroups._mounts()
    facts["cgroup_mounts"] = [f"{m} {t}" for m, t, _ in mounts]
    own = cgroups._own_paths()
    for m, t, _ in mounts:
        if t == "cgroup2":
            base = Path(m) / own.get("", "/").lstrip("/")
            facts["cgroup_v2"] = {"at": str(base), "controllers": _read(str(base / "cgroup.controllers")),
                                  "subtree_control": _read(str(base / "cgroup.subtree_control")),
                                  "writable": os.access(base, os.W_OK)}
    try:
        session = cgroups.CgroupSession.open(1 << 30, 64)
        facts["cgroup_session"] = f"ok: {session.kind} ({session.describe()})"
        session.close()
    except Exception as e:  # noqa: BLE001
        facts["cgroup_session"] = f"none: {e}"
    return facts


def plan_facts(device: str = "cuda") -> dict[str, Any]:
    """The plan a CUDA session's pool would decide here (its cgroup, its probe with a CUDA kernel), and its warning."""
    from pytest_autotune.sandbox.runner import SandboxPool

    pool = SandboxPool(threads=1, timeout_s=60.0, memory_mb=8192, start_timeout_s=60.0, isolation="preferred",
                       max_processes=256, device=device)
    try:
        plan = pool.plan
        return {"level": plan.level, "summary": plan.describe(), "limits": plan.limits,
                "missing": [f"{m.part}: {m.why} -> {m.fix}" for m in plan.missing],
                "warning": plan.warning() if plan.level != "full" else ""}
    finally:
        pool.close()


def main() -> int:
    gate = "--gate" in sys.argv[1:]
    device = "cpu" if "--cpu" in sys.argv[1:] else "cuda"
    facts = host_facts()
    staged = {k: v for k, v in (("sqlite_utils", facts["sqlite_utils"]),
                                ("seccomp bindings", " / ".join(facts["seccomp_bindings"].values())))
              if "MISSING" in v and not (k == "seccomp bindings" and "ok" in v)}
    plan = plan_facts(device)
    text = json.dumps({"facts": facts, "plan": plan}, indent=1)
    if "--json" in sys.argv[1:]:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(text + "\n")
    if not gate:
        print(text)
        return 0
    print(f"jail on this host ({device}): {plan['summary']}")
    if staged:
        print("=" * 100)
        print("REFUSED: this run is not staged as the repository says: " + "; ".join(f"{k}: {v}" for k, v in
                                                                            staged.items()))
        print("Fix: where pip works, run `bash benchmarks/harness/gpu/fetch_wheels.sh` and copy .whl/ here.")
        print("=" * 100)
        return 4
    if plan["level"] != "full":
        print("=" * 100)
        print("WARNING: THE SANDBOX JAIL HERE IS WEAKER THAN THE PROTOCOL ASKS FOR")
        print(plan["warning"])
        print("=" * 100)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
