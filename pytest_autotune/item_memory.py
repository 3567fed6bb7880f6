"""An item's device memory, from the controller's side (docs/architecture.md#memory-planned-per-device): the
footprint of one call (shapes on the meta device, then the reference's workspace measured once on the device),
the plan for the item (measure/memory.py), and waiting for a closed sandbox's memory to come back before the next
process starts."""

from __future__ import annotations

import gc
import os
import time
from typing import Optional

from .measure.memory import (
    GIB,
    UNBUDGETED,
    CallFootprint,
    DeviceMemory,
    DoesNotFit,
    MemoryPlan,
    fmt_bytes,
    plan_memory,
)
from .problems.footprint import meta_footprint

#: free memory a closed sandbox's exit may still owe the device when the next process starts
SETTLE_SLACK_BYTES = GIB // 2
#: how long the controller waits for it
SETTLE_TIMEOUT_S = 10.0


def release(env) -> None:
    """The controller's own device memory back to the device: what only a reference cycle still holds (a frame an
    exception's traceback kept, with the tensors it held) is collected, then the allocator's cached blocks go."""
    if env.device.memory_info() is None:
        return
    gc.collect()
    env.device.release_cached_memory()


def device_memory(env) -> Optional[DeviceMemory]:  # env: FlowEnv (typed loosely: flow imports this module)
    """The device as the plan sees it now, after the controller gave its own cached blocks back."""
    release(env)
    info = env.device.memory_info()
    if info is None:
        return None
    free, total = info
    mem = env.protocol.memory
    fp = env.device.fingerprint()
    what = f"{fp.get('name') or env.device.name} (device {env.device.index})"
    return DeviceMemory(free_bytes=free, total_bytes=total, headroom_bytes=int(mem.headroom * total),
                        process_bytes=env.device.process_overhead_bytes(), what=what)


def footprint(env, item) -> CallFootprint:
    """One call's footprint at the item's sizes: the meta device's shapes, checked against the device before the
    reference runs, then the reference run once on the device to measure its workspace (cached per problem)."""
    key = (item.problem_src.sha256, repr(sorted(item.sizes.items())), env.device_spec.name, env.device.index)
    if key in env.footprints:
        return env.footprints[key]
    fp, why = meta_footprint(item.problem, item.sizes, item.init_seed)
    if why:
        item.ctx.warnings.append(f"memory plan: {why}; its output was taken to be as large as its inputs until it "
                                 "was measured")
    mem = device_memory(env)
    if mem is not None:  # the controller alone computes a golden output first: that much must fit
        need = fp.param_bytes + fp.input_bytes + fp.output_bytes + mem.process_bytes
        if need > mem.available:
            raise DoesNotFit(need, mem.available, "golden outputs", "the reference's parameters, one input set and "
                             "its output in the controller", mem)
    try:
        out, work = item.golden.measure({"seed": item.ctx.seeds.seed("correctness", 0)})
    except Exception as e:  # noqa: BLE001 - torch.OutOfMemoryError above all: never a CUDA traceback
        if type(e).__name__ != "OutOfMemoryError" or mem is None:
            raise
        raise DoesNotFit(fp.param_bytes + fp.input_bytes + fp.output_bytes, mem.available, "golden outputs",
                         f"the reference ran out of device memory in the controller ({str(e).splitlines()[0][:160]})",
                         mem) from None
    from .golden import output_bytes

    measured = CallFootprint(input_bytes=fp.input_bytes, output_bytes=output_bytes(out), param_bytes=fp.param_bytes,
                             work_bytes=work or 0, source="measured" if work is not None else "meta")
    del out
    item.golden.clear()
    env.footprints[key] = measured
    return measured


def plan_item(env, item) -> MemoryPlan:
    """The item's memory plan (:class:`DoesNotFit` where it cannot run at all), recorded in its details and its
    golden cache budget set; unbudgeted where the device has no memory to plan."""
    mem = device_memory(env)
    if mem is None:
        return UNBUDGETED
    fp = footprint(env, item)
    mem = device_memory(env) or mem  # after the measurement gave its blocks back
    item.free_at_start = mem.free_bytes
    plan = plan_memory(fp, mem, k_wanted=env.protocol.timing_plan(env.device_spec.name).max_calls_per_sample)
    item.golden.cache_bytes = plan.golden_cache_bytes
    item.ctx.details["memory"] = {**plan.to_json(), "device": mem.what, "free_bytes": mem.free_bytes,
                                  "total_bytes": mem.total_bytes, "headroom_bytes": mem.headroom_bytes,
                                  "process_bytes": mem.process_bytes}
    for note in plan.notes:
        item.ctx.warnings.append(f"memory plan: {note}")
    return plan


def settle(env, item, after: str) -> None:
    """After a sandbox closed: wait (at most :data:`SETTLE_TIMEOUT_S`) until the device has the memory back that was
    free when the item began, so the next process starts on the plan's numbers. A shortfall past the wait is
    recorded; the next stage's own out-of-memory report names the rest."""
    if not item.ctx.memory.budgeted or item.free_at_start is None:
        return
    release(env)
    target = item.free_at_start - SETTLE_SLACK_BYTES
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    info = env.device.memory_info()
    while info is not None and info[0] < target and time.monotonic() < deadline:
        time.sleep(0.05)
        info = env.device.memory_info()
    waits = item.ctx.details.setdefault("memory_settle", [])
    if info is not None and info[0] < target:
        waits.append({"after": after, "short_bytes": target - info[0], **holders(env)})
        item.ctx.warnings.append(f"memory: {fmt_bytes(target - info[0])} of the device's memory had not come back "
                                 f"{SETTLE_TIMEOUT_S:g} s after {after} closed")


def holders(env) -> dict:
    """Who holds the device's memory now (for the record of a shortfall): the controller's own allocation, and every
    process the driver lists with its bytes and state."""
    out: dict = {}
    mine = env.device.peak_memory()
    if mine is not None:
        out["controller_allocated_bytes"] = mine[0]
        out["controller_tensors"] = _large_tensors()
    from .measure.gpu_processes import open_nvml

    nv, _ = open_nvml()
    if nv is not None:
        procs = []
        for pid, (dev, used) in sorted(nv.running().items()):
            try:
                with open(f"/proc/{pid}/status") as f:
                    state = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("State:")), "?")
            except OSError:
                state = "gone"
            procs.append({"pid": pid, "device": dev, "bytes": used, "state": state,
                          "controller": pid == os.getpid()})
        out["gpu_processes"] = procs
    return out


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


__all__ = ["device_memory", "holders", "release", "footprint", "plan_item", "settle", "DoesNotFit"]
