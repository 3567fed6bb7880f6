"""The sandbox's timing commands (docs/architecture.md#arms-in-separate-processes): ``calibrate``, ``configure``,
``probe_graphs``, ``release`` (fingerprint and free a round's outputs), ``prepare`` (build a round's inputs),
``sample`` (one timed sample) and ``fingerprint``. Run inside the sandbox by :mod:`.child`, whose state they act
on; in the tamper snapshot like the rest of the sandbox's harness code."""

from __future__ import annotations

import gc
import resource
import time
from typing import TYPE_CHECKING, Optional

import torch

from ..tree import tensors
from .outputs import HarnessRefusal, fingerprints
from .tamper import os_thread_count

if TYPE_CHECKING:  # pragma: no cover
    from .child import ChildState


def h_calibrate(st: ChildState, msg: dict) -> dict:
    """Warm the arm up, then estimate its steady time per call, every call on an input set it has never seen
    (measure/schedule.py: the sample's shape is the protocol's). ``warmup``: sets for untimed first calls (lazy
    initialisation, compilation); ``singles``: sets timed one call a sample (cold; on CUDA also test-captured as
    graphs); ``steady``: a list of groups of fresh sets, each timed back to back as one sample, of which the fastest
    counts (preemption only ever adds time). No set is called twice, so nothing an arm remembers of an earlier call
    (an answer cache, a first-calls fast path) can make a calibration call fast. ``alive``: the most input sets the
    item's memory plan lets this sandbox hold at once (measure/memory.py): then the sets are built one at a time
    for the untimed calls, and a steady group holds at most that many."""
    st.release()
    gc.collect()
    model = st.model()
    st.require_no_modes("before calibration inputs were built")
    alive = msg.get("alive")
    out_bytes = in_bytes = 0
    for b in st.iter_inputs(msg["warmup"]):  # one set at a time: at published sizes a set is GBs
        out = st.call(model, b)
        st.device.synchronize()
        out_bytes, in_bytes = max(out_bytes, _nbytes(out)), max(in_bytes, _nbytes(b))
        del out, b
    st.require_no_modes("while calibration inputs were built")
    # what one call of a timed sample holds on the device: its input set and its output (the schedule caps k by it)
    memory = {"set_bytes": in_bytes + out_bytes, "free_bytes": st.device.free_memory_bytes()}
    singles = []
    for b in st.iter_inputs(msg["singles"]):
        s = st.device.timed(lambda *x: st.call(model, list(x)), [b])
        singles.append(s.seconds)
        del s, b
    steady = []
    for recipe in msg["steady"]:
        count = int(recipe["count"]) if alive is None else max(1, min(int(recipe["count"]), int(alive)))
        batches = st.input_stream({**recipe, "count": count})
        st.require_no_modes("while calibration inputs were built")
        sample = st.device.timed(lambda *x: st.call(model, list(x)), batches)
        steady.append(sample.seconds / max(1, len(batches)))
        del sample, batches
    if alive is not None:  # memory-planned: the calibration's blocks go back, the rounds reserve their own
        st.device.release_cached_memory()
    return {"per_call_s": min(steady), "steady_per_call_s": steady,
            "single_call_s": sorted(singles)[len(singles) // 2] if singles else None, "memory": memory,
            "timing_info": st.device.timing_info(), "threads": os_thread_count(), "tamper": st.tamper_changes()}


def _nbytes(value: object) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(value))


def h_probe_graphs(st: ChildState, msg: dict) -> dict:
    """Can this arm be captured as a CUDA graph, and how fast is one call then? Single-call samples that the device
    also test-captures (a device without graphs reports nothing). Run in a sandbox that will not be timed."""
    st.release()
    gc.collect()
    model = st.model()
    st.require_no_modes("before probe inputs were built")
    for b in st.iter_inputs(msg["warmup"]):  # one set at a time: at published sizes a set is GBs
        st.device.timed(lambda *x: st.call(model, list(x)), [b])
        del b
    return {"timing_info": st.device.timing_info()}


def h_configure(st: ChildState, msg: dict) -> dict:
    st.k = int(msg.get("k", 1))
    st.device.configure_timing(dict(msg.get("timing") or {}))
    return {"timing_info": st.device.timing_info()}


def _prints(st: ChildState, msg: Optional[dict]) -> list:
    if not msg:
        return []
    gen = torch.Generator().manual_seed(int(msg["positions_seed"]))
    n = int(msg.get("n_positions", 64))
    kept = st.kept
    calls = msg.get("calls")
    if calls is not None:  # the few the controller chose after the round (measure/schedule.py choose_prints)
        if not all(type(i) is int and 0 <= i < len(kept) for i in calls):
            raise HarnessRefusal(f"fingerprints asked for outputs {calls} of {len(kept)} kept")
        kept = [kept[i] for i in calls]
    # MLX arrays are read through host torch copies (unified memory: a copy, no transfer); torch outputs are
    # summarised where they live
    outs = kept if st.framework == "torch" else [st.device.to_host(o) for o in kept]
    return fingerprints(outs, gen, n)


#: how long a thread the candidate started may take to finish after its call returned before it counts as left
#: running (correctness calls only: nothing is timed then; during timing, threads are counted per sample and their
#: CPU between requests is idle CPU). torch.compile's first call starts short-lived helper threads that a loaded
#: machine can leave alive for a few hundred milliseconds.
THREAD_SETTLE_S = 2.0


def new_threads_after(threads0: int, within_s: float) -> int:
    """Threads beyond ``threads0`` still alive once they had ``within_s`` to finish (returns as soon as none are)."""
    deadline = time.monotonic() + within_s
    new = os_thread_count() - threads0
    while new > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        new = os_thread_count() - threads0
    return new


def h_release(st: ChildState, msg: dict) -> dict:
    """End of a round: fingerprint its outputs (positions chosen by the controller now), free everything of it
    and collect garbage while no input exists. The candidate's own code may run here (finalizers of what it
    returned): nothing is timed meanwhile, and this CPU is not compared with the baseline's."""
    t0 = time.perf_counter()
    prints = _prints(st, msg.get("fingerprint"))
    t1 = time.perf_counter()
    st.release()
    st.batches = {}
    gc.collect()
    st.device.round_ends()
    if msg.get("release_memory"):  # the item's memory plan: cached blocks back to the device before the next stage
        st.device.release_cached_memory()
    t2 = time.perf_counter()
    tamper = st.tamper_changes() if msg.get("tamper") else []
    return {"prints": prints, "tamper": tamper,
            "steps_s": {"fingerprint": t1 - t0, "free": t2 - t1, "tamper": time.perf_counter() - t2}}


def h_prepare(st: ChildState, msg: dict) -> dict:
    """Build the round's input groups with the collector off: the same harness code on the same recipes in both
    sandboxes, whose CPU the controller compares (gates/integrity.py IdleGate). Both groups, or the one the message
    names (half-rounds, where the item's memory plan holds one group at a time: measure/schedule.py)."""
    st.require_no_modes("before the round's inputs were built")
    t0 = time.perf_counter()
    groups = [g for g in ("p1", "p2") if g in msg]
    # fresh placements for this round's data, where the device moves them (measure/devices/placement.py)
    st.device.round_begins(sum(int(msg[g].get("seed", 0)) for g in groups))
    st.batches = st.input_groups({g: msg[g] for g in groups})
    st.device.round_inputs_built()
    t1 = time.perf_counter()
    st.device.synchronize()
    t2 = time.perf_counter()
    st.require_no_modes("while the round's inputs were built")
    return {"threads": os_thread_count(), "steps_s": {"build": t1 - t0, "sync": t2 - t1}}


def h_sample(st: ChildState, msg: dict) -> dict:
    """One timing sample of this sandbox's arm: its calls on every input set of one group, timed as one."""
    model = st.model()
    batch = st.batches[msg["group"]]
    threads0 = os_thread_count()
    clock = time.perf_counter_ns
    faults0 = _page_faults()
    with (torch.no_grad() if st.framework == "torch" else _null()):
        t0 = clock()
        sample = st.device.timed(model, batch)
        t1 = clock()
    faults = _page_faults() - faults0
    for out in sample.outputs:
        problem = st.plain_problem(out)
        if problem:
            raise HarnessRefusal(f"a timed call returned {problem}")
    st.kept.extend(sample.outputs)
    st.require_no_modes("after a timed call")
    return {"s": sample.seconds, "host_s": sample.host_seconds, "stamps_ns": [t0, t1],
            "new_threads": os_thread_count() - threads0, "page_faults": faults}


def _page_faults() -> int:
    """Page faults of this process so far, every thread's (a fault inside a sample is time it pays for where its
    memory landed, not for its calls: docs/design/protocol.md#fresh-placements)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int(ru.ru_minflt + ru.ru_majflt)


def h_fingerprint(st: ChildState, msg: dict) -> dict:
    prints = _prints(st, msg)
    st.release()
    return {"prints": prints, "tamper": st.tamper_changes() if msg.get("tamper", True) else []}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
