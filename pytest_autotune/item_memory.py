"""An item's device memory, from the controller's side (docs/architecture.md, "Memory planned per device"): the
footprint of one call (shapes on the meta device, then the reference's workspace measured once on the device),
the plan for the item (measure/memory.py), and waiting for a closed sandbox's memory to come back before the next
process starts."""

from __future__ import annotations

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


def device_memory(env) -> Optional[DeviceMemory]:  # env: FlowEnv (typed loosely: flow imports this module)
    """The device as the plan sees it now, after the controller gave its own cached blocks back."""
    env.device.release_cached_memory()
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
    env.device.release_cached_memory()
    target = item.free_at_start - SETTLE_SLACK_BYTES
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    info = env.device.memory_info()
    while info is not None and info[0] < target and time.monotonic() < deadline:
        time.sleep(0.05)
        info = env.device.memory_info()
    waits = item.ctx.details.setdefault("memory_settle", [])
    if info is not None and info[0] < target:
        waits.append({"after": after, "short_bytes": target - info[0]})
        item.ctx.warnings.append(f"memory: {fmt_bytes(target - info[0])} of the device's memory had not come back "
                                 f"{SETTLE_TIMEOUT_S:g} s after {after} closed")


__all__ = ["device_memory", "footprint", "plan_item", "settle", "DoesNotFit"]
