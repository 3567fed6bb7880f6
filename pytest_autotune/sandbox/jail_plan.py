"""The jail's plan: what the sandboxes of a pool may see and touch, decided once in the controller
(docs/design/threat-model.md#the-jail). :func:`plan_jail` starts from the strongest plan this platform, user and
device could have (:func:`wanted_plan`) and tries it for real in a throwaway process (:func:`probe`, which runs
the probe program of :mod:`.jail`), removing each part that fails and recording how to get it back. The
mechanism that applies a plan is :mod:`.jail`."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

from .environment import sandbox_env

ISOLATION_CHOICES = ("required", "preferred", "off")
NAMESPACES = ("user", "pid", "net", "mount", "ipc", "uts")
#: what a "full" jail must have: each closes an attack class of docs/design/threat-model.md
FULL = ("identity", "pid", "net", "mount", "view", "seccomp", "limits")
#: the sandbox's own ids on the CPU as root: the first uid from here that no account uses
JAIL_UID_BASE = 64000
ENV_PLAN = "AUTOTUNE_JAIL_PLAN"
#: a test knob: plan as the GPU host gets it (root keeps its uid, no cgroup) on a CPU machine, so that the GPU
#: host's jail -- pid-namespace process accounting without a cgroup, the task supervisor -- runs in CPU tests
ENV_EMULATE = "AUTOTUNE_JAIL_EMULATE"
#: ``limits`` parts: tasks bounded by the controller's seccomp supervisor (binds), or only counted by its watchdog
#: while it waits for the sandbox, which kills the sandbox past the bound (detects)
SUPERVISED = "task supervisor"
WATCHDOG = "task watchdog"
#: on CUDA, when the jailed probe cannot compute on the GPU, these parts go first, one at a time, strongest
#: isolation kept (benchmarks/harness/gpu/jail_check.py measures which combinations keep CUDA and CUDA IPC)
CUDA_LADDER = ("view", "ipc", "uts", "net", "mount", "limits", "seccomp", "pid")


class JailError(RuntimeError):
    """A step of the jail failed. ``step`` names it (``userns``, ``pid``, ``net``, ``mount``, ``view``, ``ipc``,
    ``uts``, ``identity``, ``seccomp``, ``limits``, ``pidfd``)."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"{step}: {detail}")
        self.step = step
        self.detail = detail


@dataclass(frozen=True)
class Missing:
    part: str
    why: str
    fix: str


@dataclass(frozen=True)
class JailPlan:
    isolation: str = "off"  # the protocol's [sandbox].isolation
    identity: str = "none"  # uid | userns | same-uid | none
    uid: int = -1  # identity uid: the sandbox's; userns: the caller's, mapped to 0 inside
    gid: int = -1
    namespaces: tuple[str, ...] = ()
    view: bool = False
    hide: tuple[str, ...] = ()  # paths absent from the view (the store)
    expose: tuple[str, ...] = ()  # identity uid: paths the sandbox must read (the interpreter, site-packages)
    keep: tuple[str, ...] = ()  # paths under /tmp or /dev/shm the sandbox needs (a checkout in /tmp): bound back
    seccomp: bool = False
    #: how memory and tasks are bounded: "cgroup v1" | "cgroup v2" (memory + pids), "rlimit", "none", or a memory-only
    #: cgroup ("cgroup v2 memory") joined by " + " with what bounds the tasks (rlimit, SUPERVISED, WATCHDOG)
    limits: str = "none"
    memory_bytes: int = 0
    pids_max: int = 0
    device: str = "cpu"
    missing: tuple[Missing, ...] = ()

    # ------------------------------------------------------------------------------------------ summary
    def has(self, part: str) -> bool:
        if part == "identity":
            return self.identity != "none"
        if part in NAMESPACES:
            return part in self.namespaces
        if part == "view":
            return self.view
        if part == "seccomp":
            return self.seccomp
        if part == "limits":
            return binds_tasks(self.limits)
        raise KeyError(part)

    @property
    def level(self) -> str:
        """``full`` (every part of :data:`FULL`), ``partial``, ``none``, or ``off`` (the protocol said so)."""
        if self.isolation == "off":
            return "off"
        have = [p for p in FULL if self.has(p)]
        if len(have) == len(FULL):
            return "full"
        return "partial" if have else "none"

    def describe(self) -> str:
        if self.level == "off":
            return "off ([sandbox].isolation = \"off\")"
        parts = []
        if self.identity == "uid":
            parts.append(f"uid {self.uid}")
        elif self.identity == "userns":
            parts.append("user namespace")
        elif self.identity == "same-uid":
            parts.append("same uid, no capabilities, controller non-dumpable")
        ns = [n for n in self.namespaces if n != "user"]
        if ns:
            parts.append("/".join(ns) + " namespaces")
        if self.view:
            parts.append("read-only view, private /tmp, store hidden")
        if self.limits != "none":
            memory = "" if self.limits.startswith("cgroup") else " (memory: the RSS watchdog)"
            parts.append(f"{self.limits} limits{memory}")
        if self.seccomp:
            parts.append("seccomp")
        return f"{self.level}: " + (", ".join(parts) if parts else "a separate process only")

    def warning(self) -> str:
        """The one loud warning of a session whose jail is not full: what is missing and how to get it."""
        lines = [f"sandbox isolation is {self.level.upper()}: candidates run with {self.describe()}.",
                 "Missing, and how to get it:"]
        lines += [f"  - {m.part}: {m.why} -> {m.fix}" for m in self.missing]
        lines.append("Set [sandbox].isolation = \"required\" in protocol.toml to refuse to run without the full jail.")
        return "\n".join(lines)

    def to_json(self) -> dict:
        d = asdict(self)
        d["namespaces"] = list(self.namespaces)
        d["hide"] = list(self.hide)
        d["expose"] = list(self.expose)
        d["keep"] = list(self.keep)
        d["missing"] = [asdict(m) for m in self.missing]
        d["level"] = self.level
        return d

    @classmethod
    def from_json(cls, d: dict) -> "JailPlan":
        d = dict(d)
        d.pop("level", None)
        d["namespaces"] = tuple(d.get("namespaces", ()))
        d["hide"] = tuple(d.get("hide", ()))
        d["expose"] = tuple(d.get("expose", ()))
        d["keep"] = tuple(d.get("keep", ()))
        d["missing"] = tuple(Missing(**m) for m in d.get("missing", ()))
        return cls(**d)

    def provenance(self) -> dict:
        """What goes on every run and every result (provenance key ``isolation``)."""
        return {"level": self.level, "isolation": self.isolation, "identity": self.identity,
                "uid": self.uid if self.identity == "uid" else None,
                "namespaces": [n for n in self.namespaces], "view": self.view, "limits": self.limits,
                "seccomp": self.seccomp, "memory_bytes": self.memory_bytes or None, "pids_max": self.pids_max or None,
                "tasks_bound": binds_tasks(self.limits),
                "missing": [m.part for m in self.missing], "summary": self.describe()}



def binds_tasks(limits: str) -> bool:
    """Does ``limits`` bound the sandbox's tasks for real (the kernel refuses the next one), not only count them?"""
    return limits in ("cgroup v1", "cgroup v2") or any(p in ("rlimit", SUPERVISED) for p in limits.split(" + "))


def _joined(*parts: str) -> str:
    return " + ".join(p for p in parts if p and p != "none") or "none"


def emulating_gpu_host() -> bool:
    return os.environ.get(ENV_EMULATE, "") == "gpu-host"


def interpreter_paths() -> tuple[str, ...]:
    """What a sandbox must be able to read: the interpreter, the standard library, site-packages, this package."""
    import sysconfig

    paths = {os.path.dirname(os.path.realpath(sys.executable)), sys.prefix, sys.base_prefix,
             str(Path(__file__).resolve().parents[2])}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    return tuple(sorted(p for p in paths if os.path.exists(p)))



# ---------------------------------------------------------------------------------------------- planning


def jail_ids() -> tuple[int, int]:
    """The sandbox's uid/gid as root on the CPU: the first id from :data:`JAIL_UID_BASE` no account uses."""
    import grp
    import pwd

    used_u = {p.pw_uid for p in pwd.getpwall()}
    used_g = {g.gr_gid for g in grp.getgrall()}
    uid = JAIL_UID_BASE
    while uid in used_u or uid in used_g:
        uid += 1
    return uid, uid


def wanted_plan(isolation: str, device: str, hide: tuple[str, ...], memory_bytes: int, pids_max: int) -> JailPlan:
    """The strongest plan this platform, user and device could have, before anything is tried."""
    base = JailPlan(isolation=isolation, device=device, hide=hide, memory_bytes=memory_bytes, pids_max=pids_max)
    if isolation == "off":
        return base
    if not sys.platform.startswith("linux"):
        return replace(base, missing=(Missing("everything", f"the jail needs Linux (this is {sys.platform})",
                                              "measure on Linux"),))
    root = os.geteuid() == 0
    missing: list[Missing] = []
    ns: tuple[str, ...] = ("pid", "net", "mount", "ipc", "uts")
    if root and (device == "cuda" or emulating_gpu_host()):
        identity, uid, gid = "same-uid", 0, 0
    elif root:
        identity, (uid, gid) = "uid", jail_ids()
        base = replace(base, expose=interpreter_paths())
    elif device == "cuda":
        identity, uid, gid, ns = "none", -1, -1, ()
        missing.append(Missing("identity and namespaces", "user namespaces break CUDA (cudaGetDeviceCount fails "
                               "with cudaErrorOperatingSystem, measured on the H200) and without one a normal user "
                               "cannot create namespaces", "run the session as root (the sandbox then keeps the "
                               "controller's uid for CUDA IPC, with every capability dropped)"))
    else:
        identity, uid, gid = "userns", os.geteuid(), os.getegid()
        ns = ("user",) + ns
    keep = tuple(p for p in interpreter_paths() if p.startswith(("/tmp/", "/dev/shm/")))
    return replace(base, identity=identity, uid=uid, gid=gid, namespaces=ns, view="mount" in ns, seccomp=True, keep=keep,
                   limits="rlimit" if identity in ("uid", "userns") else "none", missing=tuple(missing))


_FIX = {
    "userns": ("user namespaces are not allowed for this user",
               "allow them (sysctl user.max_user_namespaces=15000; kernel.unprivileged_userns_clone=1 on Debian "
               "kernels; kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04), or run as root"),
    "pid": ("no pid namespace", "run as root or allow user namespaces"),
    "pidfd": ("pidfd_open is missing (Linux < 5.3), so the controller cannot name a sandbox in its own pid namespace",
              "use Linux 5.3 or later"),
    "net": ("no network namespace", "run as root or allow user namespaces"),
    "mount": ("no mount namespace", "run as root or allow user namespaces"),
    "view": ("the read-only view could not be mounted", "run as root or allow user namespaces"),
    "ipc": ("no ipc namespace", "run as root or allow user namespaces"),
    "uts": ("no uts namespace", "run as root or allow user namespaces"),
    "identity": ("the sandbox could not change its uid or drop its capabilities",
                 "run as root (a uid of its own) or as a normal user with user namespaces"),
    "seccomp": ("libseccomp's Python bindings or the kernel's seccomp filter are missing",
                "pip install pyseccomp (and apt-get install libseccomp2)"),
    "limits": ("nothing bounds the sandbox's tasks: no cgroup pids controller, no rlimit that reaches only the "
               "sandbox, no seccomp user notification for the task supervisor",
               "give this process a writable cgroup with the memory and pids controllers: as root, a cgroup v1 "
               "hierarchy or a v2 subtree whose parent enables both (echo +memory +pids > cgroup.subtree_control); "
               "as a normal user, a delegated v2 subtree (systemd-run --user -p Delegate=yes); or a kernel with "
               "seccomp user notification (Linux >= 5.5) and a pid namespace, for the task supervisor. Root's own "
               "rlimits do not apply to root, so on CUDA (which keeps root's uid) the controller's watchdog only "
               "counts the sandbox's tasks and kills it past the bound"),
}


def _without(plan: JailPlan, step: str, detail: str) -> JailPlan:
    why, fix = _FIX.get(step, (f"{step} failed", "see docs/design/threat-model.md"))
    m = Missing(step, f"{why} ({detail})", fix)
    if step == "userns":
        return _rebound(replace(plan, identity="none", namespaces=(), view=False, missing=plan.missing + (m,)))
    if step in ("pid", "pidfd"):
        plan = replace(plan, namespaces=tuple(n for n in plan.namespaces if n != "pid"), missing=plan.missing + (m,))
        if SUPERVISED in plan.limits:  # the supervisor counts the sandbox's tree: complete only in its namespace
            plan = _without(plan, "limits", "the task supervisor needs the sandbox's own pid namespace")
        return plan
    if step in ("mount", "view"):
        return replace(plan, namespaces=tuple(n for n in plan.namespaces if n != "mount"), view=False,
                       missing=plan.missing + (m,))
    if step in ("net", "ipc", "uts"):
        return replace(plan, namespaces=tuple(n for n in plan.namespaces if n != step), missing=plan.missing + (m,))
    if "+" in step:  # several namespaces in one unshare: drop the rarest first
        for n in ("uts", "ipc", "net", "mount"):
            if n in step.split("+"):
                return _without(plan, n, detail)
    if step == "identity":
        if plan.identity == "uid":
            return _rebound(replace(plan, identity="same-uid", uid=0, gid=0, missing=plan.missing + (m,)))
        return replace(plan, identity="none", missing=plan.missing + (m,))
    if step == "seccomp":
        return replace(plan, seccomp=False, missing=plan.missing + (m,))
    if step == "limits":
        memory = [p for p in plan.limits.split(" + ") if p.startswith("cgroup") and p.endswith("memory")]
        return replace(plan, limits=_joined(*memory, WATCHDOG), missing=plan.missing + (m,))
    if step == "cuda":  # the jailed probe could not compute on the GPU: give up the next part of the ladder
        for part in CUDA_LADDER:
            if part == "view" and plan.view:
                return replace(plan, view=False, missing=plan.missing + (Missing(
                    "view", f"CUDA failed inside the read-only view ({detail})", "see docs/design/threat-model.md"),))
            if part == "limits" and SUPERVISED in plan.limits:
                return _without(plan, "limits", f"CUDA failed under the task supervisor's filter ({detail})")
            if part == "seccomp" and plan.seccomp:
                return replace(plan, seccomp=False, missing=plan.missing + (Missing(
                    "seccomp", f"CUDA failed under the seccomp filter ({detail})", "see docs/design/threat-model.md"),))
            if part in plan.namespaces:
                plan = replace(plan, namespaces=tuple(n for n in plan.namespaces if n != part),
                               view=plan.view and part != "mount", missing=plan.missing + (Missing(
                                   part, f"CUDA failed in a {part} namespace ({detail})",
                                   "see docs/design/threat-model.md"),))
                if part == "pid" and SUPERVISED in plan.limits:
                    plan = _without(plan, "limits", "the task supervisor needs the sandbox's own pid namespace")
                return plan
    return replace(plan, isolation=plan.isolation, identity="none", namespaces=(), view=False, seccomp=False,
                   limits="none", missing=plan.missing + (m,))


def _rebound(plan: JailPlan) -> JailPlan:
    """After the identity changed: an rlimit binds only a uid of the sandbox's own (or a user namespace's)."""
    if "rlimit" not in plan.limits.split(" + ") or plan.identity in ("uid", "userns"):
        return plan
    memory = " + ".join(p for p in plan.limits.split(" + ") if p.startswith("cgroup"))
    bound = _task_bound(replace(plan, limits="none"), memory or None, "")
    if binds_tasks(bound):
        return replace(plan, limits=bound)
    return _without(replace(plan, limits=bound), "limits", "the rlimit does not bind this identity")


def _task_bound(plan: JailPlan, cgroups_ok: Optional[str], cgroup_error: str) -> str:
    """``limits`` from the controller's cgroup ("cgroup v1"/"cgroup v2" with pids, "cgroup v2 memory" without) and
    what else bounds the tasks: the identity's rlimit, else the task supervisor where the kernel has it."""
    if cgroups_ok in ("cgroup v1", "cgroup v2"):
        return cgroups_ok
    if plan.limits == "rlimit":
        return _joined(cgroups_ok or "", "rlimit")
    from .task_limit import unavailable

    why = unavailable() or ("" if "pid" in plan.namespaces else "no pid namespace")
    return _joined(cgroups_ok or "", WATCHDOG if why else SUPERVISED)


def probe(plan: JailPlan, timeout_s: float = 120.0) -> dict:
    """Try ``plan`` for real in a throwaway process tree (a mini zygote without torch and one sandbox).
    Returns {"ok": True, "checks": {...}} or {"ok": False, "step": ..., "error": ...}."""
    import subprocess

    env = sandbox_env(1)
    env[ENV_PLAN] = json.dumps(plan.to_json())
    # this package first, then whatever this process imports from (the seccomp bindings may come from PYTHONPATH)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])] + [p for p in sys.path if p])
    try:
        out = subprocess.run([sys.executable, "-m", "pytest_autotune.sandbox.jail_probe", "probe"], env=env, check=False,
                             capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"ok": False, "step": "jail", "error": f"the jail probe did not finish in {timeout_s:.0f} s"}
    line = (out.stdout.strip().splitlines() or [""])[-1]
    try:
        return json.loads(line)
    except ValueError:
        return {"ok": False, "step": "jail", "error": f"the jail probe failed: {(out.stderr or out.stdout)[-400:]}"}


def plan_jail(isolation: str, device: str, hide: tuple[str, ...], memory_bytes: int, pids_max: int,
              cgroups_ok: Optional[str] = None, cgroup_error: str = "") -> JailPlan:
    """The strongest plan that works here: :func:`wanted_plan`, then each part that fails in :func:`probe`
    removed (and recorded in ``missing`` with how to get it). ``cgroups_ok``: "cgroup v1"/"cgroup v2" when the
    controller opened a cgroup session for the pool."""
    plan = wanted_plan(isolation, device, hide, memory_bytes, pids_max)
    if plan.level == "off" or not sys.platform.startswith("linux"):
        return plan
    plan = replace(plan, limits=_task_bound(plan, cgroups_ok, cgroup_error))
    if not binds_tasks(plan.limits):
        from .task_limit import unavailable

        plan = _without(plan, "limits", "; ".join(filter(None, (cgroup_error or "no cgroup", unavailable()))))
    try:
        from .seccomp_filter import bindings

        bindings()
    except Exception as e:  # noqa: BLE001
        plan = _without(plan, "seccomp", str(e))
    for _ in range(12):
        if plan.level == "none" and not plan.namespaces:
            break
        res = probe(plan)
        if res.get("ok"):
            return plan
        plan = _without(plan, str(res.get("step") or "jail"), str(res.get("error")))
    return plan


