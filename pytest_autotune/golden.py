"""Golden outputs: what the reference computes on a recipe's inputs, in the controller, where no candidate can reach.

They never leave the controller (a sandbox only ever receives recipes). On a torch device they are computed and
kept ON that device -- on a GPU no full-size tensor crosses to the host -- and compared there
(:mod:`pytest_autotune.gates.compare`). The held-out MLX leg is judged against the torch reference on the CPU.
Computed outputs are cached per recipe, within a byte budget (a few GiB on a GPU, where one output can be 512 MiB).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional

import torch

from .measure.devices.base import Device
from .problems.inputs import iter_stream, materialize
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
    """``golden(recipe)`` → the reference's output on the recipe's inputs (a tensor or a tuple of tensors).

    The last output computed is kept whatever its size (a gate asks for it once while the sandbox computes and
    once to compare); others are cached within :attr:`cache_bytes`, which the item's memory plan sets
    (measure/memory.py). :meth:`clear` drops them all, and gives the allocator's cached blocks back to the device,
    before the item's next stage."""

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
        self._last: Optional[tuple[str, Any]] = None
        #: cleared with the golden outputs (the float64 oracle's outputs and models: pytest_autotune/oracle.py)
        self.dependents: list[Callable[[], None]] = []
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

    def iter_stream(self, recipe: dict, only: Optional[list[int]] = None) -> Iterator[Any]:
        """The golden outputs of a stream recipe's input sets, in order, one at a time: each set is built, run and
        dropped before the next (a timing group's sets are each seen once; at published sizes one set is GBs).
        ``only``: the outputs of just those sets."""
        r = dict(recipe)
        r["sizes"] = {**self.sizes, **(recipe.get("sizes") or {})}
        model = self._model(r["sizes"])
        sets = (iter_stream(self.problem, r, self.device.to_device, self.device.generation_device(), only=only)
                if self.on_device else iter_stream(self.problem, r, only=only))
        for xs in sets:
            with torch.no_grad():
                box = [_detached(model(*xs))]
            del xs
            yield box.pop()  # the frame keeps no reference while suspended

    def stream(self, recipe: dict) -> list:
        """All of :meth:`iter_stream` at once (small problems, tests)."""
        return list(self.iter_stream(recipe))

    def __call__(self, recipe: dict) -> Any:
        key = json.dumps(recipe, sort_keys=True)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        self._last = None  # the previous output goes before the next one is computed
        sizes = {**self.sizes, **(recipe.get("sizes") or {})}
        model = self._model(sizes)
        inputs = self.inputs(recipe)
        with torch.no_grad():
            out = model(*inputs)
        del inputs
        out = _detached(out)
        size = output_bytes(out)
        while self._cache and self._cached + size > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cached -= output_bytes(old)
        if size <= self.cache_bytes:
            self._cache[key] = out
            self._cached += size
        self._last = (key, out)
        return out

    def clear(self) -> None:
        """Drop every golden output held, and the allocator's cached blocks with them (the models stay)."""
        self._cache.clear()
        self._cached = 0
        self._last = None
        for clear in self.dependents:
            clear()
        if self.on_device:
            self.device.release_cached_memory()

    def measure(self, recipe: dict) -> tuple[Any, Optional[int]]:
        """Compute ``recipe``'s golden output and what the reference's call held on the device beyond its
        inputs, its output and its parameters (its transient workspace), or None where the device cannot say."""
        sizes = {**self.sizes, **(recipe.get("sizes") or {})}
        self._model(sizes)
        self.clear()
        self.device.reset_peak_memory()
        before = self.device.peak_memory()
        inputs = self.inputs(recipe)
        in_bytes = output_bytes(inputs)
        del inputs
        out = self(recipe)
        after = self.device.peak_memory()
        if before is None or after is None:
            return out, None
        return out, max(0, after[1] - before[0] - in_bytes - output_bytes(out))


def _detached(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (list, tuple)):
        return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out)
    return out


__all__ = ["Golden", "output_bytes"]
