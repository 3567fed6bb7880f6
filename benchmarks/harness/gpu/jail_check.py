"""Which sandbox jails keep CUDA working: every identity/namespace/view combination the jail can use
(pytest_autotune/sandbox/jail.py), each with CUDA compute in the jailed process and CUDA IPC both ways with this
(unjailed) process, which plays the controller. Prints one table row per combination.

    python3 benchmarks/harness/gpu/jail_check.py [--quick] [--json OUT.json]

Run it as root on the GPU host (as the harness runs there). Needs torch with CUDA; the raw-IPC columns use CuPy
when it is importable (cudaIpcGetMemHandle/cudaIpcOpenMemHandle, nothing of torch's), the torch-IPC columns
torch's own ``_share_cuda_``/``_new_shared_cuda`` (which also maps the producer's ref-counter file in
/dev/shm). Each jailed child is a fresh interpreter: this process holds a CUDA context, so it never forks one.

Columns: ``compute`` (a kernel in the jailed child), ``open ctl`` (the child opens this process's buffer),
``open child`` (this process opens the child's buffer); ``raw``/``torch`` name the IPC route. ``-`` = not run.
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

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from pytest_autotune.sandbox import jail, jail_plan  # noqa: E402

N = 1 << 16  # floats per buffer


def combinations(quick: bool) -> list[tuple[str, jail_plan.JailPlan]]:
    """(label, plan): from nothing to what the harness uses on CUDA (same-uid, every namespace, the view,
    seccomp), one part at a time, and the identities CUDA is known to dislike."""
    full = jail_plan.wanted_plan("preferred", "cuda", (), 8 << 30, 256)  # as root: same-uid, pid/net/mount/ipc/uts
    none = replace(full, identity="none", namespaces=(), view=False, seccomp=False, limits="none")
    rows = [
        ("nothing (same process tree, root)", replace(none, isolation="off")),
        ("caps dropped + no_new_privs (same uid)", replace(none, identity="same-uid")),
        ("+ seccomp", replace(none, identity="same-uid", seccomp=True)),
        ("+ pid ns", replace(none, identity="same-uid", seccomp=True, namespaces=("pid",))),
        ("+ net ns", replace(none, identity="same-uid", seccomp=True, namespaces=("pid", "net"))),
        ("+ ipc ns", replace(none, identity="same-uid", seccomp=True, namespaces=("pid", "net", "ipc"))),
        ("+ uts + mount ns (own /proc)", replace(none, identity="same-uid", seccomp=True,
                                                 namespaces=("pid", "net", "ipc", "uts", "mount"))),
        ("+ read-only view, private /tmp /dev/shm (HARNESS)", full),
        ("harness without ipc ns", replace(full, namespaces=tuple(n for n in full.namespaces if n != "ipc"))),
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
    """Runs in a fresh interpreter: enter the jail, fork the jailed sandbox, which reports on stdout."""
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
            import torch

            x = torch.arange(N, device="cuda", dtype=torch.float32)
            torch.cuda.synchronize()
            out["compute"] = float((x * 2).sum().item()) == float(N * (N - 1))
        except Exception as e:  # noqa: BLE001
            out["compute"] = f"{type(e).__name__}: {e}"[:200]
            print(json.dumps(out), flush=True)
            return 0
        out.update(_ipc_child(ctl, torch))
        print(json.dumps(out), flush=True)
        sys.stdin.readline()  # the controller opens our buffers, then lets us go
        return 0

    pid, _pidfd, failure = jail.fork_jailed(plan, p0, sandbox)
    if failure is not None:
        print(json.dumps({"jail": f"{failure['step']}: {failure['error']}"}), flush=True)
    os.waitpid(pid, 0)
    return 0


def _ipc_child(ctl: dict, torch) -> dict:
    out: dict = {}
    if ctl.get("raw"):
        try:
            import cupy

            ptr = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(ctl["raw"]))
            mem = cupy.cuda.UnownedMemory(ptr, N * 4, None)
            arr = cupy.ndarray((N,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))
            out["raw_open_ctl"] = bool(float(arr.sum()) == float(N * (N - 1)) * 3)
            mine = cupy.arange(N, dtype=cupy.float32) * 5
            out["_keep_raw"] = id(mine)
            globals()["_RAW_KEEP"] = mine
            out["raw_child_handle"] = bytes(cupy.cuda.runtime.ipcGetMemHandle(mine.data.ptr)).hex()
        except Exception as e:  # noqa: BLE001
            out["raw_open_ctl"] = f"{type(e).__name__}: {e}"[:200]
    if ctl.get("torch"):
        try:
            args = _decode(ctl["torch"])
            st = torch.UntypedStorage._new_shared_cuda(*args)
            t = torch.empty(0, dtype=torch.float32, device="cuda").set_(st, 0, (N,), (1,))
            out["torch_open_ctl"] = bool(float(t.sum().item()) == float(N * (N - 1)) * 3)
        except Exception as e:  # noqa: BLE001
            out["torch_open_ctl"] = f"{type(e).__name__}: {e}"[:200]
        try:
            mine = torch.arange(N, device="cuda", dtype=torch.float32) * 5
            globals()["_TORCH_KEEP"] = mine
            out["torch_child_handle"] = _encode(mine.untyped_storage()._share_cuda_())
        except Exception as e:  # noqa: BLE001
            out["torch_child_handle"] = None
            out["torch_export"] = f"{type(e).__name__}: {e}"[:200]
    return out


def _encode(args: tuple) -> list:
    return [{"b": a.hex()} if isinstance(a, (bytes, bytearray)) else a for a in args]


def _decode(args: list) -> tuple:
    return tuple(bytes.fromhex(a["b"]) if isinstance(a, dict) else a for a in args)


# ------------------------------------------------------------------------------------------------ the controller


def _check(label: str, plan: jail_plan.JailPlan, torch, ctl: dict) -> dict:
    env = {k: v for k, v in os.environ.items()}
    env.update({"JAIL_CHECK_PLAN": json.dumps(plan.to_json()), "JAIL_CHECK_CTL": json.dumps(ctl),
                "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in sys.path if p])})
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--child"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row: dict = {"label": label, "plan": plan.describe()}
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        res = json.loads(line) if line.strip() else {"jail": "no answer"}
        row.update({k: v for k, v in res.items() if not k.endswith("_handle") and not k.startswith("_")})
        if res.get("raw_child_handle"):
            try:
                import cupy

                ptr = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(res["raw_child_handle"]))
                mem = cupy.cuda.UnownedMemory(ptr, N * 4, None)
                arr = cupy.ndarray((N,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))
                row["raw_open_child"] = bool(float(arr.sum()) == float(N * (N - 1)) * 5)
                cupy.cuda.runtime.ipcCloseMemHandle(ptr)
            except Exception as e:  # noqa: BLE001
                row["raw_open_child"] = f"{type(e).__name__}: {e}"[:200]
        if res.get("torch_child_handle"):
            try:
                st = torch.UntypedStorage._new_shared_cuda(*_decode(res["torch_child_handle"]))
                t = torch.empty(0, dtype=torch.float32, device="cuda").set_(st, 0, (N,), (1,))
                row["torch_open_child"] = bool(float(t.sum().item()) == float(N * (N - 1)) * 5)
                del t, st
            except Exception as e:  # noqa: BLE001
                row["torch_open_child"] = f"{type(e).__name__}: {e}"[:200]
        if proc.stdin:
            proc.stdin.write("done\n")
            proc.stdin.flush()
        proc.wait(timeout=120)
    except Exception as e:  # noqa: BLE001
        row.setdefault("jail", f"{type(e).__name__}: {e}")
        proc.kill()
    row["seconds"] = round(time.monotonic() - t0, 2)
    if proc.stderr:
        err = proc.stderr.read()
        if err.strip() and row.get("jail") != "ok":
            row["stderr"] = err[-400:]
    return row


def _mark(v) -> str:
    if v is True:
        return "ok"
    if v is None:
        return "-"
    if v is False:
        return "WRONG"
    return "FAIL"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="only the same-uid ladder (what the harness uses)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.child:
        return _child_main()
    import torch

    if not torch.cuda.is_available():
        print("jail_check: no CUDA device here; run it on the GPU host (as root)")
        return 2
    src = torch.arange(N, device="cuda", dtype=torch.float32) * 3
    ctl: dict = {"torch": _encode(src.untyped_storage()._share_cuda_())}
    try:
        import cupy

        raw_src = cupy.arange(N, dtype=cupy.float32) * 3
        ctl["raw"] = bytes(cupy.cuda.runtime.ipcGetMemHandle(raw_src.data.ptr)).hex()
    except Exception as e:  # noqa: BLE001
        print(f"(no raw IPC columns: CuPy unavailable: {e})")
    rows = [_check(label, plan, torch, ctl) for label, plan in combinations(args.quick)]
    head = ("combination", "jail", "compute", "raw: open ctl", "raw: open child", "torch: open ctl",
            "torch: open child", "s")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        print(" | ".join([r["label"], "ok" if r.get("jail") == "ok" else f"FAIL ({r.get('jail')})",
                          _mark(r.get("compute")), _mark(r.get("raw_open_ctl")), _mark(r.get("raw_open_child")),
                          _mark(r.get("torch_open_ctl")), _mark(r.get("torch_open_child")), str(r["seconds"])]))
    for r in rows:
        errs = {k: v for k, v in r.items() if isinstance(v, str) and k not in ("label", "plan", "jail")
                and v not in ("ok",)}
        if errs:
            print(f"  {r['label']}: {errs}")
    print(f"harness plan on this host: {jail_plan.plan_jail('preferred', 'cuda', (), 8 << 30, 256).describe()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
