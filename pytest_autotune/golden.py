"""Golden outputs: what the reference computes on a recipe's inputs, in the controller, where no candidate can reach.

They never leave the controller (a sandbox only ever receives recipes). On a torch device they are computed and
kept ON that device -- on a GPU no full-size tensor crosses to the host -- and compared there
(:mod:`pytest_autotune.gates.compare`). The held-out MLX leg is judged against the torch reference on the CPU.
Computed outputs are cached per recipe, within a byte budget (a few GiB on a GPU, where one output can be 512 MiB).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import torch

from .measure.devices.base import Device
from .problems.inputs import materialize, materialize_stream
from .problems.loader import LoadedProblem

#: bytes of golden outputs kept per item (the least recently used go first)
CACHE_BYTES = 4 << 30


def output_bytes(out: Any) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, (list, tuple)):
        return sum(output_bytes(o) for o in out)
    return 0


class Golden:
    """``golden(recipe)`` → the reference's output on the recipe's inputs (a tensor or a tuple of tensors)."""

    def __init__(self, problem: LoadedProblem, device: Device, sizes: dict, init_seed: int,
                 cache_bytes: int = CACHE_BYTES) -> None:
        self.problem = problem
        self.device = device
        self.sizes = sizes
        self.init_seed = init_seed
        self.cache_bytes = cache_bytes
        self._models: dict[str, Any] = {}
        self._cache: "OrderedDict[str, Any]" = OrderedDict()
        self._cached = 0
        # MLX is the held-out leg: its golden outputs come from the torch reference on the CPU
        self.on_device = device.framework == "torch"

    def _model(self, sizes: dict) -> Any:
        key = json.dumps(sorted(sizes.items()))
        if key not in self._models:
            with self.problem.sizes(sizes):
                m = self.problem.build_reference(self.init_seed)
            self._models[key] = self.device.prepare_model(m) if self.on_device else m
        return self._models[key]

    def inputs(self, recipe: dict) -> list:
        """The recipe's inputs exactly as the sandboxes build them (same generation device, same values)."""
        r = dict(recipe)
        r["sizes"] = {**self.sizes, **(recipe.get("sizes") or {})}
        if self.on_device:
            return materialize(self.problem, r, self.device.to_device, self.device.generation_device())
        return materialize(self.problem, r)

    def stream(self, recipe: dict) -> list:
        """The golden outputs of a stream recipe's input sets, in order (not cached: a timing group's sets are
        each seen once)."""
        r = dict(recipe)
        r["sizes"] = {**self.sizes, **(recipe.get("sizes") or {})}
        model = self._model(r["sizes"])
        if self.on_device:
            sets = materialize_stream(self.problem, r, self.device.to_device, self.device.generation_device())
        else:
            sets = materialize_stream(self.problem, r)
        outs = []
        with torch.no_grad():
            for xs in sets:
                out = model(*xs)
                outs.append(out.detach() if isinstance(out, torch.Tensor) else tuple(
                    o.detach() if isinstance(o, torch.Tensor) else o for o in out))
        return outs

    def __call__(self, recipe: dict) -> Any:
        key = json.dumps(recipe, sort_keys=True)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        sizes = {**self.sizes, **(recipe.get("sizes") or {})}
        model = self._model(sizes)
        inputs = self.inputs(recipe)
        with torch.no_grad():
            out = model(*inputs)
        del inputs
        if isinstance(out, torch.Tensor):
            out = out.detach()
        elif isinstance(out, (list, tuple)):
            out = tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out)
        size = output_bytes(out)
        while self._cache and self._cached + size > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cached -= output_bytes(old)
        if size <= self.cache_bytes:
            self._cache[key] = out
            self._cached += size
        return out


__all__ = ["Golden", "output_bytes"]
