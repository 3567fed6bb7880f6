"""A candidate call as the controller received it: the outputs opened from their handles, and the facts around it.

The sandbox answers an ``outputs`` request with handles (docs/architecture.md#outputs-cross-by-handle); this
module opens them on the controller's device, takes the snapshot that is judged, and finds late writers: on a
device whose handles map live memory (CUDA IPC) the controller itself reads the output again after
``[correctness].recheck_delay_s``; elsewhere the sandbox sent a second sealed snapshot taken after that delay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..measure.devices.base import Device
from ..sandbox.outputs import bits_equal
from ..sandbox.wire import close_passed_fds


@dataclass
class CandidateCall:
    recipe: dict
    #: why there is no output (the candidate raised, returned something that is not a plain tensor, ...)
    error: Optional[str] = None
    #: the output is refused for its type (a tensor subclass, a lazy or meta tensor, a non-tensor)
    output_type: bool = False
    output: Any = None  # the controller's tensors: one tensor, or a tuple of them
    location: str = ""
    mutated_inputs: list = field(default_factory=list)
    new_threads: int = 0
    changed_after_return: bool = False


def _open_all(device: Device, metas: list) -> list:
    exports = []
    try:
        for meta in metas:
            exports.append(device.open_export(meta))
    except BaseException:
        for e in exports:
            e.close()
        raise
    return exports


def _shape(structure: str, tensors: list) -> Any:
    return tensors[0] if structure == "tensor" and len(tensors) == 1 else tuple(tensors)


def receive_calls(device: Device, recipes: list, results: list, delay: float) -> list[CandidateCall]:
    """Open every result's outputs; raises ``ExportError`` when a handle is not what it claims to be."""
    calls = []
    try:
        for recipe, res in zip(recipes, results):
            if "error" in res:
                calls.append(CandidateCall(recipe, error=str(res["error"]), output_type=bool(res.get("output_type"))))
                continue
            metas = res.get("output")
            if not isinstance(metas, list) or not metas:
                calls.append(CandidateCall(recipe, error="the sandbox sent no output handles"))
                continue
            exports = _open_all(device, metas)
            try:
                first = [e.snapshot() for e in exports]
                if delay and exports[0].live:
                    if device.name == "cuda":
                        torch.cuda.synchronize(device.index)
                    time.sleep(delay)
                    later = [e.snapshot() for e in exports]
                elif res.get("recheck"):
                    rechecks = _open_all(device, res["recheck"])
                    try:
                        later = [e.snapshot() for e in rechecks]
                    finally:
                        for e in rechecks:
                            e.close()
                else:
                    later = first
            finally:
                for e in exports:
                    e.close()
            calls.append(CandidateCall(
                recipe, output=_shape(str(res.get("structure")), first), location=str(res.get("location", "")),
                mutated_inputs=list(res.get("mutated_inputs") or []), new_threads=int(res.get("new_threads", 0)),
                changed_after_return=not bits_equal(first, later)))
    finally:
        close_passed_fds(results)
    return calls


__all__ = ["CandidateCall", "receive_calls"]
