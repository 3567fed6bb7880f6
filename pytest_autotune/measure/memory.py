"""Device memory, planned across every process of an item (docs/architecture.md#memory-planned-per-device).

An item's processes share one device: the controller (golden outputs, comparisons), the candidate's correctness
sandbox, the probe sandboxes, and two timing sandboxes at once. KernelBench's published Level-1 sizes hold 6-16 GB
per input set, so what each of them holds at each stage must be planned before anything runs, and a problem that
cannot fit at all gets one error naming the bytes it needs against the bytes free.

The plan is a pure function of four things the controller knows before any sandbox starts:

- the footprint of one call (:class:`CallFootprint`): its inputs ``I``, its output ``O``, the reference's
  parameters ``P`` and the reference's transient workspace ``W`` (measured in the controller on the device);
- the device's memory (:class:`DeviceMemory`): what is free at the item's start, minus the protocol's headroom;
- what one process costs beyond its tensors (``X``: a sandbox's CUDA context, libraries and L2 flush buffer; the
  controller's comparison scratch);
- the protocol's layouts and patterns for probes.

Per stage, in bytes (``build(L)``: the peak of building one input set with probe layout ``L`` -- a value
pattern draws a second copy; ``stride`` views live in a buffer twice the input):

| stage | controller | sandboxes |
|---|---|---|
| correctness / probes, concurrent | ``X + P + max(build, held + O + W, 3 O)`` | ``X + max(build, held + I (the input's clone for the mutation check) + O + W)`` |
| correctness / probes, sequential | the same, with the sandbox holding ``X + O`` | the same, with the controller holding ``X + P`` |
| graph probes (one sandbox at a time, sets streamed) | ``X + P`` | ``X + P + I + O + W`` |
| timing, ``g`` groups of ``k`` sets held | ``X + P + I + O + W`` (timed outputs verified one set at a time) | ``2 (X + P + g k (I + O) + W)`` |

``3 O``: once the candidate's call returned, the controller holds the golden output and two copies of the
candidate's (the snapshot it judges and the one it reads again after ``recheck_delay_s``: gates/received.py).
*Sequential* means the controller computes the golden output only after the candidate's call returned: the two
peaks never overlap. ``g = 1`` is a half-round schedule: each sandbox builds one input group, both arms sample
it, then the next group is built (measure/schedule.py).

**Caches.** Each process's caching allocator keeps what it freed, and a block one process caches is memory no
other process can have: a sandbox that built a strided probe input (a buffer twice the input) after contiguous
ones holds both sizes reserved, and the controller beside it the same (on an 80 GB H100, 47_Sum_reduction's
8 GiB inputs ran the candidate's sandbox out of memory in a probe the plan said fit twice over). Where a second
copy of the largest correctness or probe stage would not fit (``2 x need > available``), or the calls run
sequentially, or the golden outputs are not cached, every process gives its cached blocks back after each call
(``release_between_calls``: the sandbox after its call, the controller before and after each golden output:
item_memory.PlannedGolden), so what each holds between two calls is what it still uses.

**Measured again at every stage.** The plan is made once, from the free memory at the item's start; before each
stage starts (correctness, the probes, the baseline's probe sandbox, every pair of timing sandboxes) the
controller gives its own cached blocks back, waits (bounded) for the memory of the item's sandboxes that closed,
and checks the stage's need against what is free *then* (item_memory.stage_start): a process the plan did not
know about is an error before the stage runs, naming who holds the memory, never an out-of-memory inside it.

Why no input set is ever reused across the calls of a sample (the other route to long samples at large sizes): a
candidate that remembers its last answer would return it for free on the second call of the same input, and an
answer it replays is a correct one, so no output check can tell. The plan instead makes ``k`` as large as memory
allows; for calls that move their own bytes through HBM, memory and call time grow together, so the ``k`` that
makes a 3 ms sample fits wherever one set does (docs/results/h200-2026-12-02.md#kernelbench-level-1-at-published-sizes-aa).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

GIB = 1 << 30

#: build(L) / I and held(L) / I for a probe input layout (problems/inputs.py apply_layout), a value pattern aside
LAYOUT_BUILD = {"contiguous": (1, 1), "offset": (2, 1), "transpose": (2, 1), "stride": (3, 2)}


def pattern_peak(float_bytes: int) -> int:
    """Peak of building one input with a value pattern (problems/inputs.py apply_pattern), in multiples of the
    input: the draw, then ``mixed_magnitude``'s int64 exponents (8 bytes an element) and their copy in the input's
    dtype, or ``subnormal``'s sign, uniform draw and product -- 4 for float32 and float64 inputs, 6 for 16-bit ones
    (tests/test_memory_stages.py measures every pattern and layout against it)."""
    return max(4, -(-(2 * float_bytes + 8) // max(1, float_bytes)))


def fmt_bytes(n: float) -> str:
    """Bytes for messages: GiB above 1 GiB, MiB below."""
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class CallFootprint:
    """What one call of the problem holds on the device. ``source``: "meta" (shapes only, before anything ran) or
    "measured" (the controller ran the reference once on the device and read its allocator's peak)."""

    input_bytes: int
    output_bytes: int
    param_bytes: int = 0
    work_bytes: int = 0
    source: str = "meta"
    #: bytes an element of the smallest floating input (a value pattern's temporaries scale with it: pattern_peak)
    float_bytes: int = 4

    @property
    def set_bytes(self) -> int:
        """One timed call's input set and its output."""
        return self.input_bytes + self.output_bytes

    def to_json(self) -> dict:
        return {"input_bytes": self.input_bytes, "output_bytes": self.output_bytes, "param_bytes": self.param_bytes,
                "work_bytes": self.work_bytes, "source": self.source, "float_bytes": self.float_bytes}


@dataclass(frozen=True)
class DeviceMemory:
    """The device as the plan sees it at the item's start. ``free_bytes``: free now (every other process's use
    already subtracted, the controller's context and parameters included); ``headroom_bytes``: what the plan
    leaves free (allocator rounding and fragmentation, the runtime's own); ``process_bytes``: what one sandbox
    process costs beyond its tensors."""

    free_bytes: int
    total_bytes: int
    headroom_bytes: int
    process_bytes: int
    what: str = "the device"

    @property
    def available(self) -> int:
        return max(0, self.free_bytes - self.headroom_bytes)


class DoesNotFit(Exception):
    """The item cannot run on this device at its sizes, whatever the plan gives up. ``held``: who holds the rest
    (a stage checked at its start: item_memory.stage_start); ``fits``: sizes at which it would fit, where known."""

    def __init__(self, needed: int, available: int, stage: str, detail: str, memory: DeviceMemory,
                 held: str = "", fits: str = "") -> None:
        self.needed, self.available, self.stage, self.detail = needed, available, stage, detail
        self.memory, self.held, self.fits = memory, held, fits
        super().__init__(self.message())

    def message(self) -> str:
        mem = self.memory
        fix = (f"declare smaller sizes for this device in the problem's AUTOTUNE_SIZES (it fits at {self.fits})"
               if self.fits else "declare smaller sizes for this device in the problem's AUTOTUNE_SIZES")
        return (f"needs {fmt_bytes(self.needed)} of device memory ({self.stage}: {self.detail}) but "
                f"{fmt_bytes(self.available)} is free on {mem.what} ({fmt_bytes(mem.free_bytes)} free of "
                f"{fmt_bytes(mem.total_bytes)}, less {fmt_bytes(mem.headroom_bytes)} of headroom"
                + (f"; {self.held}" if self.held else "") + f"): run it on a device with more memory, {fix}, "
                "or free the device")

    def with_fits(self, fits: str) -> "DoesNotFit":
        """The same error, naming the sizes that would fit."""
        return DoesNotFit(self.needed, self.available, self.stage, self.detail, self.memory, self.held, fits)


@dataclass(frozen=True)
class MemoryPlan:
    """What every process of an item may hold, decided before anything runs (the flow follows it)."""

    budgeted: bool
    available_bytes: int = 0
    footprint: Optional[CallFootprint] = None
    #: most input sets one timing group may hold (the memory bound on ``k``); None: not bounded here
    sets_cap: Optional[int] = None
    #: input groups a timing sandbox holds at once: 2 (a round's both groups) or 1 (half-rounds)
    groups_held: int = 2
    #: the controller computes golden outputs while the sandbox runs the candidate
    golden_concurrent: bool = True
    #: sandboxes and controller give cached device blocks back between correctness and probe calls
    release_between_calls: bool = False
    #: the probes' input layouts whose inputs fit (the others are skipped, with the reason in ``notes``)
    layouts: tuple[str, ...] = tuple(LAYOUT_BUILD)
    #: value patterns (a second copy of each input while it is drawn) fit
    patterns: bool = True
    #: warm-up and calibration input sets a timing sandbox holds at once (None: all of them, as before)
    calibration_sets: Optional[int] = None
    #: bytes of golden outputs the controller may keep cached between requests
    golden_cache_bytes: int = 4 * GIB
    needs: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"budgeted": self.budgeted, "available_bytes": self.available_bytes,
                "footprint": self.footprint.to_json() if self.footprint else None, "sets_cap": self.sets_cap,
                "groups_held": self.groups_held, "golden_concurrent": self.golden_concurrent,
                "release_between_calls": self.release_between_calls, "layouts": list(self.layouts),
                "patterns": self.patterns, "calibration_sets": self.calibration_sets,
                "golden_cache_bytes": self.golden_cache_bytes, "needs": dict(self.needs), "notes": list(self.notes)}


UNBUDGETED = MemoryPlan(budgeted=False)


def _call_stage(fp: CallFootprint, x: int, build: int, held: int, sequential: bool) -> int:
    """Peak of one correctness or probe call: the controller's golden output (and, once the call returned, its two
    copies of the candidate's) and the sandbox's call (module docstring)."""
    p, i, o, w = fp.param_bytes, fp.input_bytes, fp.output_bytes, fp.work_bytes
    # x: the comparison's float64 chunks, the reshape of a strided output
    golden = x + p + max(build, held + o + w, 3 * o)
    sandbox = x + max(build, held + i + o + w)
    if not sequential:
        return golden + sandbox
    return max(golden + x + o, sandbox + x + p)


def timing_need(fp: CallFootprint, x: int, k: int, groups: int) -> int:
    """Both timing sandboxes holding ``groups`` groups of ``k`` sets, and the controller verifying one set."""
    p, w = fp.param_bytes, fp.work_bytes
    return 2 * (x + p + groups * k * fp.set_bytes + w) + (x + p + fp.set_bytes + w)


def _timing(fp: CallFootprint, mem: DeviceMemory, k_wanted: int,
            needs: dict[str, int]) -> tuple[int, Optional[int], list[str]]:
    """The timing stage on ``mem``: input groups held at once, the memory bound on ``k`` (None: not bounded),
    notes; its needs written into ``needs``. :class:`DoesNotFit` where one set each does not fit."""
    avail, x = mem.available, mem.process_bytes
    notes: list[str] = []
    least = timing_need(fp, x, 1, 1)
    needs["timing_least"] = least
    if least > avail:
        raise DoesNotFit(least, avail, "timing", f"two timing sandboxes holding one input set and its output "
                         f"({fmt_bytes(fp.set_bytes)}) each, and the controller verifying one", mem)
    fixed = timing_need(fp, x, 0, 1)
    groups = 2 if timing_need(fp, x, 1, 2) <= avail else 1
    cap = max(1, (avail - fixed) // (2 * groups * max(1, fp.set_bytes)))
    if groups == 1:
        notes.append(f"half-rounds: one input group held at a time (two need "
                     f"{fmt_bytes(timing_need(fp, x, 1, 2))}, {fmt_bytes(avail)} free)")
    sets_cap: Optional[int] = int(cap)
    if cap >= k_wanted:
        sets_cap = None
    else:
        notes.append(f"at most {cap} input set(s) per sample ({fmt_bytes(fp.set_bytes)} each)")
    needs["timing"] = timing_need(fp, x, min(int(cap), k_wanted), groups)
    return groups, sets_cap, notes


def replan_timing(plan: MemoryPlan, mem: DeviceMemory, k_wanted: int) -> MemoryPlan:
    """``plan`` with its timing stage planned again on the memory free now (``mem``: measured at the stage's start,
    item_memory.stage_start): never more groups or sets than the item's plan allowed, fewer where less is free.
    :class:`DoesNotFit` where one set each no longer fits."""
    if not plan.budgeted or plan.footprint is None:
        return plan
    needs = dict(plan.needs)
    groups, cap, notes = _timing(plan.footprint, mem, k_wanted, needs)
    groups = min(groups, plan.groups_held)
    if plan.sets_cap is not None:
        cap = plan.sets_cap if cap is None else min(cap, plan.sets_cap)
    if (groups, cap) == (plan.groups_held, plan.sets_cap):
        return plan
    needs["timing"] = timing_need(plan.footprint, mem.process_bytes, min(cap or k_wanted, k_wanted), groups)
    cal = None if cap is None else max(1, int(cap))
    return dataclasses.replace(plan, groups_held=groups, sets_cap=cap, calibration_sets=cal, needs=needs,
                               notes=plan.notes + tuple(f"timing, replanned on {fmt_bytes(mem.free_bytes)} free at "
                                                        f"its start: {n}" for n in notes))


def plan_memory(fp: CallFootprint, mem: DeviceMemory, k_wanted: int = 1) -> MemoryPlan:
    """The plan for one item, or :class:`DoesNotFit`. ``k_wanted``: the most calls a sample could want (the
    protocol's ``max_calls_per_sample``); the plan bounds ``k`` only where memory is short of it."""
    avail, x, i = mem.available, mem.process_bytes, fp.input_bytes
    notes: list[str] = []
    needs: dict[str, int] = {}
    # -- correctness and probes: the golden output computed during the candidate's call where both fit (the probes'
    # plain adversarial set: drawn, then patterned), else after it; where even that cannot run, the item cannot

    pattern = pattern_peak(fp.float_bytes)

    def probe_need(layout: str, sequential: bool) -> int:
        b, h = LAYOUT_BUILD[layout]
        return _call_stage(fp, x, max(b, pattern) * i, h * i, sequential)

    # concurrent where the correctness calls and every probe layout that fits at all fit so: the probes' coverage
    # comes before the golden output's head start
    fitting = [n for n in LAYOUT_BUILD if probe_need(n, True) <= avail] or ["contiguous"]
    concurrent = max([_call_stage(fp, x, i, i, sequential=False)]
                     + [probe_need(n, False) for n in fitting]) <= avail
    plain = _call_stage(fp, x, i, i, sequential=not concurrent)
    if not concurrent:
        notes.append(f"golden outputs computed after each candidate call, not during it (together they need "
                     f"{fmt_bytes(max(probe_need(n, False) for n in fitting))}, {fmt_bytes(avail)} free)")
    needs["correctness"] = plain
    if plain > avail:
        raise DoesNotFit(plain, avail, "correctness", f"the golden output and one candidate call with its input "
                         f"set of {fmt_bytes(i)} and output of {fmt_bytes(fp.output_bytes)}", mem)
    # -- timing: two groups of k sets if one set each fits, else half-rounds; k as memory allows
    groups, sets_cap, timing_notes = _timing(fp, mem, k_wanted, needs)
    notes += timing_notes
    # the baseline's graph-capture probe: a sandbox of its own, its sets streamed, the controller idle beside it
    needs["graph_probe"] = 2 * x + 2 * fp.param_bytes + i + fp.output_bytes + fp.work_bytes
    # -- probes: the layouts and value patterns whose inputs fit
    layouts = [name for name in LAYOUT_BUILD if probe_need(name, not concurrent) <= avail]
    patterns = "contiguous" in layouts
    if not patterns:
        layouts = []
        notes.append("probes skipped: an adversarial input set (drawn, then patterned) does not fit "
                     f"({fmt_bytes(probe_need('contiguous', not concurrent))}, {fmt_bytes(avail)} free)")
    elif len(layouts) < len(LAYOUT_BUILD):
        notes.append(f"probe layouts {', '.join(n for n in LAYOUT_BUILD if n not in layouts)} skipped: their inputs "
                     "do not fit beside the call")
    needs["probes"] = max((probe_need(n, not concurrent) for n in layouts), default=0)
    # -- calibration: as many sets alive as one group may hold
    cal = None if sets_cap is None else max(1, int(sets_cap))  # one group's worth: a per-call estimate, no more
    # golden outputs cached only where a second one fits beside everything (never more than 4 GiB)
    spare = avail - max(needs["correctness"], needs["probes"])
    cache = int(min(4 * GIB, max(0, spare)))
    # caches given back between calls unless a second copy of every call's peak would fit beside it (module
    # docstring, "Caches")
    crowded = 2 * max(needs["correctness"], needs["probes"]) > avail
    if crowded and concurrent and cache >= fp.output_bytes:
        notes.append("every process gives its cached blocks back after each correctness and probe call (a second "
                     f"copy of the largest call's {fmt_bytes(max(needs['correctness'], needs['probes']))} would not "
                     f"fit in {fmt_bytes(avail)})")
    return MemoryPlan(budgeted=True, available_bytes=avail, footprint=fp, sets_cap=sets_cap, groups_held=groups,
                      golden_concurrent=concurrent,
                      release_between_calls=not concurrent or cache < fp.output_bytes or crowded,
                      layouts=tuple(layouts), patterns=patterns, calibration_sets=cal, golden_cache_bytes=cache,
                      needs=needs, notes=tuple(notes))


def parse_bytes(text: str) -> int:
    """``"40GiB"``, ``"512MiB"``, ``"80GB"``, ``"1e9"`` -> bytes (for ``--autotune-device-memory``)."""
    s = text.strip().replace("_", "")
    units = {"tib": 1 << 40, "gib": 1 << 30, "mib": 1 << 20, "kib": 1 << 10, "tb": 10**12, "gb": 10**9, "mb": 10**6,
             "kb": 10**3, "b": 1}
    low = s.lower()
    for unit, mult in units.items():
        if low.endswith(unit):
            number = low[: -len(unit)].strip()
            break
    else:
        number, mult = low, 1
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size: write e.g. 40GiB, 512MiB, 80GB or a number of bytes") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r}: a size must be a positive number of bytes")
    return int(value * mult)


__all__ = ["CallFootprint", "DeviceMemory", "DoesNotFit", "MemoryPlan", "UNBUDGETED", "plan_memory", "replan_timing",
           "timing_need",
           "fmt_bytes", "parse_bytes", "pattern_peak", "GIB", "LAYOUT_BUILD"]
