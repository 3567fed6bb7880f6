"""Which sandbox jails keep CUDA working, and what each part costs: every identity/namespace/view/limit combination
the jail can use (pytest_autotune/sandbox/jail.py), each with CUDA compute in the jailed process, CUDA IPC both ways
with this (unjailed) process, which plays the controller, and whether the driver (NVML) names the jailed process by
its host pid. Prints the host's facts first, then one table row per combination, then the harness's own plan.

    python3 benchmarks/harness/gpu/jail_check.py [--quick] [--json OUT.json]

Run it as root on the GPU host (as the harness runs there). Needs torch with CUDA. IPC routes: ``harness`` -- the
driver API the harness itself uses (``cuIpcGetMemHandle``/``cuIpcOpenMemHandle``,
pytest_autotune/measure/devices/cuda/driver.py); ``raw`` -- the same through CuPy when it is importable; ``torch``
-- torch's ``_share_cuda_``/``_new_shared_cuda``, which also maps the producer's ref-counter file from its
``/dev/shm`` (so it cannot open a child's buffer from a private ``/dev/shm``: that column is expected to read FAIL
under the view, and the harness does not use that route). Each jailed child is a fresh interpreter: this process
holds a CUDA context, so it never forks one.

Columns: ``compute`` (a kernel in the jailed child) and ``init s`` (its CUDA start-up there: what a part costs),
``open ctl`` (the child opens this process's buffer), ``open child`` (this process opens the child's),
``nvml`` (NVML lists the child under its host pid: what the helper watch relies on). ``-`` = not run, ``WRONG`` =
it ran and read other values than written (the diagnostics below the table say which), ``FAIL`` = an error.

History: until bf1fcc5 (2026-12-02) every IPC column read WRONG on every row, the row without a jail included: the check
expected 2x the sum of ``arange(N) * k`` (it compared with ``k * N * (N - 1)``, not ``k * N * (N - 1) / 2``) and
summed in float32. The sums are now exact (float64) and compared with ``k * N * (N - 1) / 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from pytest_autotune.sandbox import jail, jail_plan  # noqa: E402

N = 1 << 16  # floats per buffer
SUM = N * (N - 1) // 2  # sum of arange(N): every buffer holds arange(N) * k, exact in float64


def combinations(quick: bool) -> list[tuple[str, jail_plan.JailPlan]]:
    """(label, plan): from nothing to what the harness uses on CUDA (same-uid, every namespace, the view,
    seccomp, the task supervisor), one part at a time, and the identities CUDA is known to dislike."""
    full = jail_plan.wanted_plan("preferred", "cuda", (), 8 << 30, 256)  # as root: same-uid, pid/net/mount/ipc/uts
    none = replace(full, identity="none", namespaces=(), view=False, seccomp=False, limits="none")
    sup = jail_plan.SUPERVISED
    rows = [
        ("nothing (same process tree, root)", replace(none, isolation="off")),
        ("caps dropped + no_new_privs (same uid)", replace(none, identity="same-uid")),
        ("+ seccomp", replace(none, identity="same-uid", seccomp=True)),
        ("+ pid ns", replace(none, identity="same-uid", seccomp=True, namespaces=("pid",))),
        ("+ task supervisor (limits)", replace(none, identity="same-uid", seccomp=True, namespaces=("pid",),
                                               limits=sup)),
        ("+ net ns", replace(none, identity="same-uid", seccomp=True, namespaces=("pid", "net"), limits=sup)),
        ("+ ipc ns", replace(none, identity="same-uid", seccomp=True, namespaces=("pid", "net", "ipc"), limits=sup)),
        ("+ uts + mount ns (own /proc)", replace(none, identity="same-uid", seccomp=True, limits=sup,
                                                 namespaces=("pid", "net", "ipc", "uts", "mount"))),
        ("+ read-only view, private /tmp /dev/shm (HARNESS)", replace(full, limits=sup)),
        ("harness without ipc ns", replace(full, limits=sup, namespaces=tuple(n for n in full.namespaces
                                                                              if n != "ipc"))),
    ]
    if not quick:
        uid, gid = jail_plan.jail_ids()
        rows += [
            ("uid change only (no namespaces)", replace(none, identity="uid", uid=uid, gid=gid)),
            ("uid change + namespaces + view", replace(full, identity="uid", uid=uid, gid=gid,
                                                      expose=jail_plan.interpreter_paths())),
            ("user namespace + namespaces + view", replace(full, identity="userns", uid=os.geteuid(),
                                                          gid=os.getegid(), namespaces=("user",) + full.namespaces)),
        ]
    return rows


# ------------------------------------------------------------------------------------------------ the child


def _child_main() -> int:
    """Runs in a fresh interpreter: enter the jail, fork the jailed sandbox, which reports on stdout; this process
    answers its task supervisor's listener where the plan has one, and prints the sandbox's host pid."""
    plan = jail_plan.JailPlan.from_json(json.loads(os.environ["JAIL_CHECK_PLAN"]))
    ctl = json.loads(os.environ["JAIL_CHECK_CTL"])
    try:
        p0 = jail.enter_session(plan)
    except jail_plan.JailError as e:
        print(json.dumps({"jail": f"session: {e}"}), flush=True)
        return 0

    def sandbox() -> int:
        out: dict = {"jail": "ok"}
        try:
            t0 = time.perf_counter()
            import torch

            x = torch.arange(N, device="cuda", dtype=torch.float32)
            torch.cuda.synchronize()
            out["init_s"] = round(time.perf_counter() - t0, 3)
            got = int((x * 2).double().sum().item())
            out["compute"] = True if got == 2 * SUM else f"WRONG: sum {got}, expected {2 * SUM}"
        except Exception as e:  # noqa: BLE001
            out["compute"] = f"{type(e).__name__}: {e}"[:300]
            print(json.dumps(out), flush=True)
            return 0
        out.update(_ipc_child(ctl, torch))
        print(json.dumps(out), flush=True)
        sys.stdin.readline()  # the controller opens our buffers, then lets us go
        return 0

    pid, pidfd, failure, listener = jail.fork_jailed(plan, p0, sandbox)
    if failure is not None:
        print(json.dumps({"jail": f"{failure['step']}: {failure['error']}"}), flush=True)
    else:
        from pytest_autotune.sandbox import linux
        from pytest_autotune.sandbox.task_limit import TaskLimiter

        host = linux.pid_from_pidfd(pidfd) if pidfd is not None else None
        print(json.dumps({"host_pid": host if host is not None else pid}), flush=True)
        if listener is not None:
            TaskLimiter().add(listener, host if host is not None else pid, plan.pids_max or 256)
    os.waitpid(pid, 0)
    return 0


def _view(ptr: int, torch: Any) -> Any:
    """A float32 tensor over N floats of device memory at ``ptr`` (no copy)."""

    class _Mem:
        __cuda_array_interface__ = {"shape": (N,), "typestr": "<f4", "data": (ptr, False), "version": 3}

    return torch.as_tensor(_Mem(), device="cuda")


def _judge(got: float, k: int) -> Any:
    return True if int(got) == k * SUM else f"WRONG: sum {got!r}, expected {k * SUM} (arange({N}) * {k})"


def _ipc_child(ctl: dict, torch: Any) -> dict:
    from pytest_autotune.measure.devices.cuda.driver import Driver

    out: dict = {}
    keep = globals().setdefault("_KEEP", [])
    drv = Driver()
    if ctl.get("harness"):
        try:
            ptr = drv.ipc_open(bytes.fromhex(ctl["harness"])) + int(ctl.get("harness_offset", 0))
            out["harness_open_ctl"] = _judge(_view(ptr, torch).double().sum().item(), 3)
        except Exception as e:  # noqa: BLE001
            out["harness_open_ctl"] = f"{type(e).__name__}: {e}"[:300]
    try:
        mine = torch.arange(N, device="cuda", dtype=torch.float32) * 5
        torch.cuda.synchronize()
        keep.append(mine)
        base, _size = drv.address_range(mine.data_ptr())
        out["harness_child_handle"] = drv.ipc_handle(base).hex()
        out["_harness_offset"] = mine.data_ptr() - base
    except Exception as e:  # noqa: BLE001
        out["harness_export"] = f"{type(e).__name__}: {e}"[:300]
    if ctl.get("raw"):
        try:
            import cupy

            ptr = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(ctl["raw"]))
            out["raw_open_ctl"] = _judge(_view(ptr, torch).double().sum().item(), 3)
            raw = cupy.arange(N, dtype=cupy.float32) * 5
            cupy.cuda.runtime.deviceSynchronize()
            keep.append(raw)
            out["raw_child_handle"] = bytes(cupy.cuda.runtime.ipcGetMemHandle(raw.data.ptr)).hex()
        except Exception as e:  # noqa: BLE001
            out["raw_open_ctl"] = f"{type(e).__name__}: {e}"[:300]
    if ctl.get("torch"):
        try:
            st = torch.UntypedStorage._new_shared_cuda(*_decode(ctl["torch"]))
            t = torch.empty(0, dtype=torch.float32, device="cuda").set_(st, 0, (N,), (1,))
            out["torch_open_ctl"] = _judge(t.double().sum().item(), 3)
        except Exception as e:  # noqa: BLE001
            out["torch_open_ctl"] = f"{type(e).__name__}: {e}"[:300]
        try:
            tmine = torch.arange(N, device="cuda", dtype=torch.float32) * 5
            torch.cuda.synchronize()
            keep.append(tmine)
            out["torch_child_handle"] = _encode(tmine.untyped_storage()._share_cuda_())
        except Exception as e:  # noqa: BLE001
            out["torch_export"] = f"{type(e).__name__}: {e}"[:300]
    return out


def _encode(args: tuple) -> list:
    return [{"b": a.hex()} if isinstance(a, (bytes, bytearray)) else a for a in args]


def _decode(args: list) -> tuple:
    return tuple(bytes.fromhex(a["b"]) if isinstance(a, dict) else a for a in args)


# ------------------------------------------------------------------------------------------------ the controller


def _open_child(row: dict, res: dict, torch: Any, nvml: Any) -> None:
    from pytest_autotune.measure.devices.cuda.driver import Driver

    if res.get("harness_child_handle"):
        drv = Driver()
        try:
            ptr = drv.ipc_open(bytes.fromhex(res["harness_child_handle"]))
            row["harness_open_child"] = _judge(_view(ptr + int(res.get("_harness_offset", 0)), torch)
                                               .double().sum().item(), 5)
            drv.ipc_close(ptr)
        except Exception as e:  # noqa: BLE001
            row["harness_open_child"] = f"{type(e).__name__}: {e}"[:300]
    if res.get("raw_child_handle"):
        try:
            import cupy

            ptr = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(res["raw_child_handle"]))
            row["raw_open_child"] = _judge(_view(ptr, torch).double().sum().item(), 5)
            cupy.cuda.runtime.ipcCloseMemHandle(ptr)
        except Exception as e:  # noqa: BLE001
            row["raw_open_child"] = f"{type(e).__name__}: {e}"[:300]
    if res.get("torch_child_handle"):
        try:
            st = torch.UntypedStorage._new_shared_cuda(*_decode(res["torch_child_handle"]))
            t = torch.empty(0, dtype=torch.float32, device="cuda").set_(st, 0, (N,), (1,))
            row["torch_open_child"] = _judge(t.double().sum().item(), 5)
            del t, st
        except Exception as e:  # noqa: BLE001
            row["torch_open_child"] = f"{type(e).__name__}: {e}"[:300]
    if nvml is not None and row.get("host_pid"):
        running = nvml.running()
        row["nvml"] = row["host_pid"] in running
        if not row["nvml"]:
            row["nvml_pids"] = sorted(running)


def _check(label: str, plan: jail_plan.JailPlan, torch: Any, ctl: dict, nvml: Any) -> dict:
    env = dict(os.environ)
    env.update({"JAIL_CHECK_PLAN": json.dumps(plan.to_json()), "JAIL_CHECK_CTL": json.dumps(ctl),
                "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in sys.path if p])})
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--child"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row: dict = {"label": label, "plan": plan.describe()}
    try:
        res: dict = {}
        # the sandbox's line ("jail") and, where it was jailed, its host pid from the process that forked it
        while proc.stdout is not None and ("jail" not in res or (res["jail"] == "ok" and "host_pid" not in res)):
            line = proc.stdout.readline()
            if not line:
                res.setdefault("jail", "no answer")
                break
            if line.strip().startswith("{"):
                res.update(json.loads(line))
        row.update({k: v for k, v in res.items() if not k.endswith("_handle") and not k.startswith("_")})
        _open_child(row, res, torch, nvml)
        if proc.stdin:
            proc.stdin.write("done\n")
            proc.stdin.flush()
        proc.wait(timeout=60)
    except Exception as e:  # noqa: BLE001
        row.setdefault("jail", f"{type(e).__name__}: {e}")
        proc.kill()
    row["seconds"] = round(time.monotonic() - t0, 2)
    if proc.stderr:
        err = proc.stderr.read()
        if err.strip() and (row.get("jail") != "ok" or any(_mark(v) != "ok" for k, v in row.items()
                                                           if k in COLUMNS)):
            row["stderr"] = err[-600:]
    return row


COLUMNS = ("compute", "harness_open_ctl", "harness_open_child", "raw_open_ctl", "raw_open_child", "torch_open_ctl",
           "torch_open_child", "nvml")


def _mark(v: Any) -> str:
    if v is True:
        return "ok"
    if v is None:
        return "-"
    if v is False or (isinstance(v, str) and v.startswith("WRONG")):
        return "WRONG"
    return "FAIL"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="only the same-uid ladder (what the harness uses)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.child:
        return _child_main()
    from jail_facts import host_facts, plan_facts

    facts = host_facts()
    print(json.dumps(facts, indent=1))
    import torch

    if not torch.cuda.is_available():
        print("jail_check: no CUDA device here; run it on the GPU host (as root)")
        return 2
    from pytest_autotune.measure.devices.cuda.driver import Driver
    from pytest_autotune.measure.gpu_processes import open_nvml

    src = torch.arange(N, device="cuda", dtype=torch.float32) * 3
    torch.cuda.synchronize()
    nvml, why = open_nvml()
    facts["nvml"] = why or f"ok (driver {nvml.driver if nvml else '?'}), controller listed under its own pid: " \
                           f"{nvml.pids_match(timeout_s=2.0) if nvml else None}"
    drv = Driver()
    ctl: dict = {"torch": _encode(src.untyped_storage()._share_cuda_())}
    base, _ = drv.address_range(src.data_ptr())
    ctl["harness"], ctl["harness_offset"] = drv.ipc_handle(base).hex(), src.data_ptr() - base
    try:
        import cupy

        raw_src = cupy.arange(N, dtype=cupy.float32) * 3
        cupy.cuda.runtime.deviceSynchronize()
        ctl["raw"] = bytes(cupy.cuda.runtime.ipcGetMemHandle(raw_src.data.ptr)).hex()
    except Exception as e:  # noqa: BLE001
        print(f"(no raw IPC columns: CuPy unavailable: {e})")
    rows = [_check(label, plan, torch, ctl, nvml) for label, plan in combinations(args.quick)]
    head = ("combination", "jail", "compute", "init s", "harness: open ctl", "harness: open child", "raw: open ctl",
            "raw: open child", "torch: open ctl", "torch: open child", "nvml", "s")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        print(" | ".join([r["label"], "ok" if r.get("jail") == "ok" else f"FAIL ({r.get('jail')})",
                          _mark(r.get("compute")), str(r.get("init_s", "-"))]
                         + [_mark(r.get(c)) for c in COLUMNS[1:]] + [str(r["seconds"])]))
    for r in rows:
        errs = {k: v for k, v in r.items() if k in COLUMNS + ("stderr", "harness_export", "torch_export", "nvml_pids")
                and _mark(v) != "ok" and v is not None}
        if errs:
            print(f"  {r['label']}: {errs}")
    facts["plan"] = plan_facts()
    print(f"harness plan on this host: {json.dumps(facts['plan'], indent=1)}")
    print(f"nvml: {facts['nvml']}")
    if args.json:
        args.json.write_text(json.dumps({"facts": facts, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
