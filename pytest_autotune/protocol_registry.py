"""The frozen-protocol registry: which digest each protocol version must have.

This file is part of the harness (outside the modification surface). A protocol is *frozen* when the sha256 of
its exact bytes is the one pinned here for its ``[protocol].version``. Pinning a new version is a deliberate
release step: edit protocol.toml, bump the version, run ``autotune protocol digest`` and add the line below.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ProtocolError
from .protocol import Protocol

#: version -> sha256 of protocol.toml's bytes
FROZEN_PROTOCOLS: dict[str, str] = {
    "1": "64a820a6175f7f96e162d9613c2b4ed18c938d54e8652b6b4bc21e8e3a2b2670",
    "2": "82a8d86b7a2a53b8875ac6607a992c8df4e72b8b6eb1a26507a2065983e73d9d",
    # 3: [timing].process_pairs = 2 (two pairs of processes, CI resampling them); [integrity] prepare rule on
    # other threads (abs), whole-CPU ratio 3.0 (a gross bound)
    "3": "4d325d0d656aa290b14fafc3805b05ef4edd630bedd7e2f167d5b490427736f0",
    # 4: [devices.cuda].min_sample_s 1 ms -> 3 ms (the first launch after the pre-sample sync cost both arms ~45 us
    # per sample on the H200 and pulled ratios ~2% towards 1; docs/results/h200.md); max_calls_per_sample 512 -> 200
    "4": "766df226a01ef042fc15c5d14e95b9aa236e6fed60c90e4f431f682da31eb653",
    # 5: [timing].process_pairs 2 -> 6 and item_budget_s 4 -> 12 (2 s a pair of processes, as before): the offset a
    # pair of processes carries was most of a short call's A/A deviation on the CPU; [statistics].pooling =
    # "process-medians" (new, optional key); [devices.cuda].process_pairs = 2 (new, optional key: two pairs on
    # the GPU, as under protocol 4). docs/design/protocol.md#pairs-of-processes
    "5": "29787bbfb6603e0dafa84e2ef10c1c1446f72b7756489f5438b0b0739f4f84c9",
    # 6: [memory] (new, optional section): device memory planned across an item's processes, headroom 5%, 1 GiB a
    # process; [probes].magnitudes = "overflow-safe" (new, optional key): probe values within the range where a sum
    # of squares stays finite (KernelBench at published sizes, docs/results/h200.md)
    "6": "c9ecd4d8d6d5e1ccb85ba48e1861f8d4c9c57bdde48c85fbb61b29d605127570",
    # 7: [devices.cpu].placement_span_kib = 1024 (new, optional key): every CPU timing round's data on fresh
    # placements inside its sandbox, the heap written before the round so that no page fault lands in a sample
    # (docs/design/protocol.md#fresh-placements). Nothing else changes; the GPU leg does not read it.
    "7": "8560bebb87a2018111866760397bec2369ec6c26cd0baf6da7990496632d1ffb",
    # 8: the CPU's timing rounds derive their input sets from one get_inputs() draw a round ([devices.cpu].input_sets,
    # derived_spread; new, optional keys), fingerprint two timed outputs of each group chosen after the round and
    # check 8 rounds (prints_per_group, verify_rounds: new, optional); the pooled CI allows for a between-process
    # offset of 2.5% (process_offset_sd: new, optional); [timing].process_pairs 6 -> 2 and item_budget_s 12 -> 4.
    # docs/design/protocol.md#derived-input-sets. The GPU leg reads none of it.
    "8": "822298aa02a998f082bc2f66498b40216e30e774d8ef9b929a124979b53e7a3e",
    # 9: the sample's shape is the protocol's. k from the baseline's calibration alone, every calibration call on a
    # fresh input set, re-checked against the baseline's timed calls ([timing].k_recheck_ratio: new, optional);
    # at least 8 calls a sample on the CPU ([timing].min_calls_per_sample: new, optional); on the CPU the heap is
    # never given back within a sandbox ([sandbox].malloc = "steady") and the last-level cache is flushed once a
    # round's inputs are built ([devices.cpu].llc_flush_factor: new, optional). docs/architecture.md, "The sample's
    # shape". On CUDA ([devices.cuda].head_start = "spin", head_start_max_s = 0.003: new, optional keys) every
    # sample's stream is held behind the L2 flush until the host has enqueued its first call, the start event
    # behind the hold, and a sample's time is max(event time, host enqueue time) (measure/devices/cuda/head_start.py;
    # docs/architecture.md, "The CUDA sample"). [build] (new, optional section): the budget of the sandbox that
    # compiles a candidate's extensions once per item (docs/guide/compiled-candidates.md).
    "9": "70863bb643d2459ce3e6021c713ca38ccca3829e0ed57ae68ac375ab2e345225",
    # 10: a candidate is judged by its problem's contract (docs/guide/contract.md). [accuracy] (new, optional
    # section): floating outputs against the reference run in float64, the candidate's error at most 100x the
    # reference's own plus a floor (gates/accuracy.py, docs/design/accuracy.md). [contract] (new, optional): a
    # problem that declares no layouts is judged on those its get_inputs() produces, and a wrong answer on another
    # layout is a finding, not a refusal (problems/contract.py). [kernelbench] (new, optional): KernelBench's own
    # verdict on its 5 trials recorded beside ours (gates/kernelbench.py).
    # the sample's length does not depend on which arm is faster. On CUDA k is still chosen from the baseline's
    # calls alone, now long enough that an arm [breaker].max_speedup times faster holds
    # [devices.cuda].fast_arm_sample_s (new, optional: 2 ms; the baseline's sample 20 ms), within
    # max_calls_per_sample and the memory bound (measure/sampling.py choose_calls_per_sample;
    # docs/design/protocol.md, "The sample's length").
    "10": "f2aed71b055a07826f30d6c8cbdae09761199b56150a3a479fe376e2b68b6602",
}


@dataclass(frozen=True)
class FreezeStatus:
    frozen: bool
    message: str  # empty when frozen; otherwise what is wrong and the fix


def freeze_status(proto: Protocol, extra: dict[str, str] | None = None) -> FreezeStatus:
    """Is ``proto`` the pinned protocol of its version? ``extra`` adds pins (from the
    ``pytest_autotune_frozen_protocols`` hook)."""
    pins = dict(FROZEN_PROTOCOLS)
    if extra:
        for version, digest in extra.items():
            if version in pins and pins[version] != digest:
                raise ProtocolError(
                    f"protocol version {version!r} is pinned twice with different digests; "
                    "give your protocol its own version string"
                )
            pins[version] = digest
    pinned = pins.get(proto.version)
    if pinned is None:
        return FreezeStatus(
            False,
            f"protocol version {proto.version!r} ({proto.path}) is not frozen: pin its digest {proto.sha256} "
            "in pytest_autotune/protocol_registry.py (or through the pytest_autotune_frozen_protocols hook), "
            "or run with --autotune-exploratory",
        )
    if pinned != proto.sha256:
        return FreezeStatus(
            False,
            f"protocol.toml changed without a version bump ({proto.path}: sha256 {proto.sha256[:12]}..., "
            f"version {proto.version!r} is pinned to {pinned[:12]}...): bump [protocol].version and pin the new "
            "digest, or restore the file; --autotune-exploratory records it as exploratory",
        )
    return FreezeStatus(True, "")
