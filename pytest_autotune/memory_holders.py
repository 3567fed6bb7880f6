"""Who holds the device's memory while an item runs, and waiting for what closed sandboxes still hold
(docs/architecture.md#memory-planned-per-device).

Every process of an item shares one device: the controller (its caching allocator, golden outputs, the copies of
the candidate's outputs it judges), the zygote (which must hold nothing: it never creates a context), the
candidate's correctness sandbox, the probe sandboxes, the timing sandboxes -- and sandboxes already closed whose
memory the driver has not yet taken back (a process's device memory goes when the driver has torn its context
down, after the process is gone). The driver's view (NVML, :mod:`.measure.gpu_processes`) names each by its pid;
the pool knows which pids are its sandboxes (``SandboxPool.started``), so a closed sandbox's memory is waited for by
its own pid, not guessed from the free total. Where the driver cannot be asked (no NVML, pids that are not the
controller's namespace's, a device without processes: the CPU with ``--autotune-device-memory``), the wait falls
back to the free memory the item started with.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any, Optional

from .measure.memory import GIB, fmt_bytes

#: free memory a closed sandbox's exit may still owe the device when the next process starts (the fallback wait)
SETTLE_SLACK_BYTES = GIB // 2
#: how long the controller waits for a closed sandbox's memory
SETTLE_TIMEOUT_S = 10.0
POLL_S = 0.05

def release(env) -> None:
    """The controller's own device memory back to the device: what only a reference cycle still holds (a frame an
    exception's traceback kept, with the tensors it held) is collected, then the allocator's cached blocks go."""
    if env.device.memory_info() is None:
        return
    gc.collect()
    env.device.release_cached_memory()


def gpu_view(env) -> Optional[Any]:
    """The driver's list of processes on the GPU (``pid -> (device, bytes)``), where its pids are this controller's
    (NVML names processes in the initial pid namespace); None where it cannot be trusted or asked."""
    src: Any = getattr(env, "gpu_processes", None)
    if src is None:
        if getattr(env.device, "name", "") != "cuda":
            return None
        from .measure.gpu_processes import open_nvml

        src, _ = open_nvml()
        if src is None:
            return None
    known = getattr(src, "controller_pids_match", None)
    if known is None:
        check = getattr(src, "pids_match", None)
        known = check() if check is not None else True
        if known is None:  # the controller holds no context yet: ask again later
            return None
        try:
            setattr(src, "controller_pids_match", bool(known))
        except AttributeError:
            pass
    return src if known else None


def _started(env) -> dict:
    return getattr(getattr(env, "pool", None), "started", None) or {}


def roles(env) -> dict[int, str]:
    """pid -> what it is to this controller: itself, its zygote, a sandbox it started (open or closed)."""
    out = {os.getpid(): "the controller"}
    zpid = getattr(getattr(env, "pool", None), "zygote_pid", None)
    if zpid:
        out[int(zpid)] = "the sandbox zygote (it must hold no device memory)"
    for pid, (label, box) in _started(env).items():
        out[pid] = f"sandbox {label!r}" + (" (closed)" if getattr(box, "closed", False) else "")
    return out


def holders(env) -> dict:
    """Who holds the device's memory now (for the record of a shortfall or a stage that does not fit): the
    controller's own allocation and large tensors, and every process the driver lists with its bytes, its state
    and what it is to this controller."""
    out: dict = {}
    mine = env.device.peak_memory()
    if mine is not None:
        out["controller_allocated_bytes"] = mine[0]
        if getattr(env.device, "name", "") == "cuda":
            out["controller_tensors"] = _large_tensors()
    view = gpu_view(env)
    if view is not None:
        names = roles(env)
        procs = []
        for pid, (dev, used) in sorted(view.running().items()):
            procs.append({"pid": pid, "device": dev, "bytes": used, "state": _state(pid),
                          "role": names.get(pid, "another process")})
        out["gpu_processes"] = procs
    return out


def describe(env) -> str:
    """One line for an error: each process holding device memory, largest first, named by what it is."""
    procs = [p for p in holders(env).get("gpu_processes", []) if p.get("bytes")]
    if not procs:
        return ""
    procs.sort(key=lambda p: -int(p["bytes"]))
    return "held now: " + ", ".join(f"{p['role']} (pid {p['pid']}, {p['state']}) {fmt_bytes(int(p['bytes']))}"
                                    for p in procs[:8])


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("State:")), "?")
    except OSError:
        return "gone"


def owed_by_closed(env, view) -> dict[int, tuple[str, int]]:
    """Closed sandboxes the driver still lists: pid -> (label, bytes). Those it no longer lists are forgotten."""
    running = view.running()
    started = _started(env)
    owed: dict[int, tuple[str, int]] = {}
    for pid, (label, box) in list(started.items()):
        if not getattr(box, "closed", False):
            continue
        if pid in running:
            owed[pid] = (label, int(running[pid][1] or 0))
        else:
            started.pop(pid, None)
    return owed


def settle(env, item, after: str, timeout_s: Optional[float] = None) -> float:
    """After a sandbox closed (or before a stage starts): the controller's cached blocks go back, then wait (at
    most ``timeout_s``) until no closed sandbox of this controller holds device memory -- by pid, where the
    driver's view can be trusted; else until the device has back the memory that was free when the item began.
    A shortfall past the wait is recorded (``details.memory_settle``, with who holds what); the stage that follows
    checks its own need against what is free then (item_memory.stage_start). Returns the seconds waited."""
    if not item.ctx.memory.budgeted:
        return 0.0
    release(env)
    timeout_s = SETTLE_TIMEOUT_S if timeout_s is None else timeout_s
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    waits = item.ctx.details.setdefault("memory_settle", [])
    view = gpu_view(env)
    if view is not None:
        owed = owed_by_closed(env, view)
        while owed and time.monotonic() < deadline:
            time.sleep(POLL_S)
            owed = owed_by_closed(env, view)
        waited = time.monotonic() - t0
        if owed:
            total = sum(b for _, b in owed.values())
            waits.append({"after": after, "short_bytes": total, "waited_s": round(waited, 3), **holders(env)})
            item.ctx.warnings.append(
                f"memory: {len(owed)} closed sandbox(es) still held {fmt_bytes(total)} of the device's memory "
                f"{timeout_s:g} s after {after} ({', '.join(f'{lab} pid {p}' for p, (lab, _) in owed.items())})")
        elif waited >= 0.1:
            waits.append({"after": after, "short_bytes": 0, "waited_s": round(waited, 3)})
        return waited
    if item.free_at_start is None:
        return 0.0
    target = item.free_at_start - SETTLE_SLACK_BYTES
    info = env.device.memory_info()
    while info is not None and info[0] < target and time.monotonic() < deadline:
        time.sleep(POLL_S)
        info = env.device.memory_info()
    waited = time.monotonic() - t0
    if info is not None and info[0] < target:
        waits.append({"after": after, "short_bytes": target - info[0], "waited_s": round(waited, 3), **holders(env)})
        item.ctx.warnings.append(f"memory: {fmt_bytes(target - info[0])} of the device's memory had not come back "
                                 f"{timeout_s:g} s after {after}")
    return waited


def live_bytes(env, boxes: list, each: int) -> int:
    """What the item's live sandboxes ``boxes`` hold on the device now (the stage about to start counts them in its
    own need): the driver's bytes for each, else ``each`` (a context and the last output)."""
    view = gpu_view(env)
    running = view.running() if view is not None else {}
    total = 0
    for box in boxes:
        held = running.get(box.pid, (None, None))[1]
        total += int(held) if held is not None else int(each)
    return total


def _large_tensors(least: int = 256 << 20) -> list[dict]:
    """The controller's live device tensors of at least ``least`` bytes and what refers to them (a shortfall's
    record: which of the controller's objects still holds memory the plan thought given back)."""
    import warnings

    import torch

    found: list[tuple[int, dict]] = []
    with warnings.catch_warnings():  # isinstance on torch's deprecated aliases warns
        warnings.simplefilter("ignore")
        objects = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for obj in objects:
        try:
            if obj.device.type == "cpu":
                continue
            size = obj.untyped_storage().nbytes()
        except Exception:  # noqa: BLE001 - a half-built or exotic object
            continue
        if size >= least:
            refs = sorted({type(r).__name__ for r in gc.get_referrers(obj)} - {"list", "frame"})
            frames = [f"{r.f_code.co_name}@{r.f_code.co_filename.rsplit('/', 1)[-1]}:{r.f_lineno}"
                      for r in gc.get_referrers(obj) if type(r).__name__ == "frame"]
            found.append((size, {"bytes": size, "shape": list(obj.shape), "dtype": str(obj.dtype),
                                 "referrers": refs, "frames": frames[:4]}))
    return [d for _, d in sorted(found, key=lambda t: -t[0])[:12]]


__all__ = ["SETTLE_SLACK_BYTES", "SETTLE_TIMEOUT_S", "describe", "gpu_view", "holders", "live_bytes",
           "owed_by_closed", "release", "roles", "settle"]
