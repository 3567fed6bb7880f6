"""An item's device memory, from the controller's side (docs/architecture.md#memory-planned-per-device): the
footprint of one call (shapes on the meta device, then the reference's workspace measured once on the device),
the plan for the item (measure/memory.py), the plan checked again against what is free at each stage's start
(:func:`stage_start`), the sizes at which a problem that does not fit would, and the controller's golden outputs
giving their cached blocks back where the plan says so (:class:`PlannedGolden`). Who holds the device's memory,
and the wait for a closed sandbox's, are :mod:`.memory_holders`."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from .golden import Golden
from .measure.memory import (
    UNBUDGETED,
    CallFootprint,
    DeviceMemory,
    DoesNotFit,
    MemoryPlan,
    plan_memory,
    replan_timing,
)
from .memory_holders import describe, holders, live_bytes, release, settle
from .problems.footprint import meta_footprint
from .problems.inputs import materialize

#: integer sizes of a problem tried for :func:`fitting_sizes`, and bisection steps each
FIT_NAMES = 3
FIT_STEPS = 16


class PlannedGolden(Golden):
    """Golden outputs under the item's memory plan: where the plan gives cached blocks back between calls
    (``release_between_calls``), the controller's own go back before and after each golden output it is asked
    for -- the blocks its last comparison and copies of the candidate's output freed, then its computation's
    inputs and workspace -- so that between two calls it holds what it still uses (measure/memory.py, "Caches")."""

    release_each = False

    def inputs(self, recipe: dict) -> list:
        if not self.release_each or not self.on_device:
            return super().inputs(recipe)
        r = dict(recipe)
        r["sizes"] = {**self.sizes, **(recipe.get("sizes") or {})}
        return materialize(self.problem, r, self.device.to_device, self.device.generation_device(),
                           self.device.release_cached_memory)

    def __call__(self, recipe: dict) -> Any:
        if not self.release_each or not self.on_device:
            return super().__call__(recipe)
        self.device.release_cached_memory()
        out = super().__call__(recipe)
        self.device.release_cached_memory()
        return out


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
                             "its output in the controller", mem).with_fits(fitting_sizes(env, item, fp, mem))
    try:
        out, work = item.golden.measure({"seed": item.ctx.seeds.seed("correctness", 0)})
    except Exception as e:  # noqa: BLE001 - torch.OutOfMemoryError above all: never a CUDA traceback
        if type(e).__name__ != "OutOfMemoryError" or mem is None:
            raise
        raise DoesNotFit(fp.param_bytes + fp.input_bytes + fp.output_bytes, mem.available, "golden outputs",
                         f"the reference ran out of device memory in the controller ({str(e).splitlines()[0][:160]})",
                         mem, held=describe(env)) from None
    from .golden import output_bytes

    measured = dataclasses.replace(fp, output_bytes=output_bytes(out), work_bytes=work or 0,
                                   source="measured" if work is not None else "meta")
    del out
    item.golden.clear()
    env.footprints[key] = measured
    return measured


def _k_wanted(env) -> int:
    return env.protocol.timing_plan(env.device_spec.name).max_calls_per_sample


def plan_item(env, item) -> MemoryPlan:
    """The item's memory plan (:class:`DoesNotFit` where it cannot run at all, naming the sizes that would fit),
    recorded in its details and its golden cache budget set; unbudgeted where the device has no memory to plan."""
    mem = device_memory(env)
    if mem is None:
        return UNBUDGETED
    fp = footprint(env, item)
    mem = device_memory(env) or mem  # after the measurement gave its blocks back
    item.free_at_start = mem.free_bytes
    try:
        plan = plan_memory(fp, mem, k_wanted=_k_wanted(env))
    except DoesNotFit as e:
        raise e.with_fits(fitting_sizes(env, item, fp, mem)) from None
    item.memory_plan = plan
    item.golden.cache_bytes = plan.golden_cache_bytes
    if isinstance(item.golden, PlannedGolden):
        item.golden.release_each = plan.release_between_calls
    item.ctx.details["memory"] = {**plan.to_json(), "device": mem.what, "free_bytes": mem.free_bytes,
                                  "total_bytes": mem.total_bytes, "headroom_bytes": mem.headroom_bytes,
                                  "process_bytes": mem.process_bytes}
    for note in plan.notes:
        item.ctx.warnings.append(f"memory plan: {note}")
    return plan


def stage_start(env, item, stage: str, need_key: str, live: Sequence = ()) -> Optional[DeviceMemory]:
    """Before ``stage`` starts its sandboxes: the controller's cached blocks go back, the memory of the item's closed
    sandboxes is waited for (bounded: :func:`memory_holders.settle`), and the stage's need in the item's plan
    (``needs[need_key]``) is checked against what is free *now* -- plus what ``live``, the item's sandboxes that
    the stage goes on using, hold already. A timing stage (``need_key == "timing"``) is planned again on it
    instead (fewer sets a sample, or half-rounds, where less is free than at the item's start). Where it does not
    fit, :class:`DoesNotFit` names the need, the free bytes, who holds the rest and the sizes that would fit, before
    anything of the stage runs. Recorded in ``details.memory_stages``."""
    plan: MemoryPlan = item.ctx.memory
    if not plan.budgeted:
        return None
    golden = getattr(item, "golden", None)
    if golden is not None:  # the last stage's golden outputs are not this one's
        golden.clear()
    waited = settle(env, item, f"the sandboxes closed before {stage}")
    mem = device_memory(env)
    if mem is None:
        return None
    base = getattr(item, "memory_plan", None) or plan
    # a live sandbox holds its context and, until its next request, its last output (what the driver does not say)
    each = mem.process_bytes + (base.footprint.output_bytes if base.footprint is not None else 0)
    alive = live_bytes(env, list(live), each) if live else 0
    here = dataclasses.replace(mem, free_bytes=mem.free_bytes + alive)
    need = int(base.needs.get(need_key, 0))
    record = {"free_bytes": mem.free_bytes, "live_bytes": alive, "need_bytes": need, "waited_s": round(waited, 3)}
    item.ctx.details.setdefault("memory_stages", {})[stage] = record
    try:
        if need_key == "timing":
            item.ctx.memory = replan_timing(base, here, _k_wanted(env))
            record["need_bytes"] = int(item.ctx.memory.needs.get("timing", need))
            record["groups_held"], record["sets_cap"] = item.ctx.memory.groups_held, item.ctx.memory.sets_cap
        elif need > here.available:
            raise DoesNotFit(need, here.available, stage, "the item's plan for it, checked against the memory "
                             "free when it starts", here)
    except DoesNotFit as e:
        item.ctx.details["memory_holders"] = holders(env)
        err = DoesNotFit(e.needed, e.available, e.stage, e.detail, e.memory, held=describe(env))
        fp = base.footprint
        raise (err.with_fits(fitting_sizes(env, item, fp, here)) if fp is not None else err) from None
    return here


def _size_names(problem, sizes: dict) -> list[str]:
    """The problem's integer sizes worth shrinking, ``batch_size`` first, then the largest."""
    module = getattr(problem, "module", None)
    values = {k: v for k, v in vars(module).items()
              if not k.startswith("_") and not k.isupper() and type(v) is int and v >= 2} if module else {}
    values.update({k: v for k, v in sizes.items() if type(v) is int and v >= 2})
    return sorted(values, key=lambda k: (k != "batch_size", -values[k]))[:FIT_NAMES]


def fitting_sizes(env, item, fp: CallFootprint, mem: DeviceMemory) -> str:
    """The sizes at which the item would fit ``mem`` -- each of the problem's largest integer sizes alone, bisected
    on shapes from the meta device, its workspace scaled with its inputs -- e.g. ``"batch_size = 56, or dim1 = 256"``;
    "" where none is found."""
    names = _size_names(item.problem, item.sizes)
    found: list[str] = []
    module = getattr(item.problem, "module", None)
    for name in names:
        current = item.sizes.get(name, getattr(module, name, None))
        if type(current) is not int:
            continue

        def fits(value: int) -> bool:
            try:
                small, _ = meta_footprint(item.problem, {**item.sizes, name: value}, item.init_seed)
                scale = small.input_bytes / max(1, fp.input_bytes)
                small = dataclasses.replace(small, work_bytes=int(fp.work_bytes * scale))
                plan_memory(small, mem, k_wanted=_k_wanted(env))
                return True
            except Exception:  # noqa: BLE001 - DoesNotFit, or a size the problem cannot take
                return False

        lo, hi = 0, current  # fits(lo) known (or 0: none), not fits(hi)
        for _ in range(FIT_STEPS):
            if hi - lo <= max(1, hi // 64):
                break
            mid = (lo + hi) // 2
            if mid >= 1 and fits(mid):
                lo = mid
            else:
                hi = mid
        if lo >= 1:
            found.append(f"{name} = {lo}")
    return ", or ".join(found)


__all__ = ["PlannedGolden", "device_memory", "fitting_sizes", "footprint", "holders", "plan_item", "release",
           "settle", "stage_start", "DoesNotFit"]
