"""Input recipes: a small JSON-able description from which the controller and the sandbox build bit-identical
inputs, so no input tensor ever has to cross the boundary and golden outputs never do.

A recipe is ``{"seed": int, "values": [pattern|None per input], "layout": [layout|None per input],
"sizes": {global: int}}``; only ``seed`` is required. Patterns (adversarial values for probes) and layouts
(non-contiguous views) only touch floating-point tensors; integer inputs (indices, counts) are left as the
problem made them. A stream recipe ``{"seed": int, "count": k, "sizes": ..., "derive": spread?}`` stands for k
sets: ``get_inputs()`` called k times after one seeding, or, with ``derive``, one draw and k sets derived from it
(problems/derived.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from .derived import DerivedBase, DerivedSets, derive_spread
from .loader import LoadedProblem, seed_everything

PATTERNS = (
    "as_is",
    "negative",
    "nonnegative",
    "zeros",
    "ones",
    "constant",
    "large",
    "tiny",
    "subnormal",
    "mixed_magnitude",
    "alternating_sign",
    "spikes",
    "rounding_bias",
)

#: ``rounding_bias`` (float32 inputs): every value g on the bfloat16 grid (2^E <= |g| < 2^(E+1)) moved away from zero
#: by 2^(E-10) + 2^(E-13) + r 2^(E-23), r a random integer below 2^7 -- bits 13 and 10 of its significand set, and
#: seven random low bits. That is less than half a bfloat16 step, so bfloat16 rounds every value back towards zero
#: by ~2^-10 of itself; and, past the float16 (and TF32) grid point g + 2^(E-10), less than half a float16 step, so
#: float16 rounds every value towards zero too, by ~2^-13 -- the same sign everywhere: a reduction cannot average a
#: narrower type's rounding away (a half-precision scalar loss). The values are otherwise randn's, signs and
#: magnitudes (gates/accuracy.py, docs/design/accuracy.md). Set as bits, in place: the pattern's peak stays within
#: what the memory plan counts for a value pattern (measure/memory.py pattern_peak). Other dtypes: the bfloat16 grid.
ROUNDING_BIAS_BITS = (1 << 13) | (1 << 10)
ROUNDING_BIAS_NOISE = 1 << 7
LAYOUTS = ("contiguous", "stride", "transpose", "offset")


def _finfo(dtype: torch.dtype) -> torch.finfo:
    return torch.finfo(dtype)


def apply_pattern(t: torch.Tensor, pattern: dict, domain: Optional[str]) -> torch.Tensor:
    """Return a tensor of ``t``'s shape/dtype whose values follow ``pattern`` (deterministic given its seed).
    Computed in ``t``'s own dtype (scales are clamped to stay finite in it)."""
    name = pattern.get("name", "as_is")
    if not t.is_floating_point() or name == "as_is":
        out = t.clone()
    else:
        gen = torch.Generator(device=t.device).manual_seed(int(pattern.get("seed", 0)))
        fi = _finfo(t.dtype)
        scale = float(pattern.get("scale", 1.0))
        safe_scale = min(scale, fi.max / 64)
        if name == "negative":
            out = -t.abs()
        elif name == "nonnegative":
            out = t.abs()
        elif name == "zeros":
            out = torch.zeros_like(t)
        elif name == "ones":
            out = torch.ones_like(t)
        elif name == "constant":
            out = torch.full_like(t, safe_scale)
        elif name == "large":
            out = t * safe_scale
        elif name == "tiny":
            out = t * max(fi.tiny * 64, 1e-30 if t.dtype in (torch.float32, torch.float64) else fi.tiny * 64)
        elif name == "subnormal":
            out = t.sign() * (torch.rand(t.shape, generator=gen, dtype=t.dtype, device=t.device) * (fi.tiny * 0.5))
        elif name == "mixed_magnitude":
            exps = torch.randint(-6, 7, t.shape, generator=gen, device=t.device).to(t.dtype)
            out = t * torch.pow(torch.tensor(10.0, dtype=t.dtype, device=t.device), exps)
        elif name == "alternating_sign":
            out = t.abs().reshape(-1).clone()
            out[1::2] *= -1
            out = out.reshape(t.shape)
        elif name == "rounding_bias":
            out = (t * safe_scale).to(torch.bfloat16).to(t.dtype)  # on the bfloat16 grid
            if t.dtype == torch.float32:
                bits = out.view(torch.int32)
                moved = torch.randint(0, ROUNDING_BIAS_NOISE, t.shape, generator=gen, dtype=torch.int32,
                                      device=t.device)
                moved.bitwise_or_(ROUNDING_BIAS_BITS).mul_(bits != 0)  # zero stays zero
                bits.bitwise_or_(moved)
                del moved, bits
        elif name == "spikes":
            out = torch.zeros_like(t)
            mask = torch.rand(t.shape, generator=gen, device=t.device) < 0.01
            out[mask] = t[mask] * safe_scale
        else:
            raise ValueError(f"unknown value pattern {name!r}")
    if t.is_floating_point() and domain in ("nonnegative", "positive"):
        out = out.abs()
        if domain == "positive":
            out = out + _finfo(t.dtype).tiny * 16
            out[out == 0] = 1.0
    return out


def apply_layout(t: torch.Tensor, layout: Optional[str]) -> torch.Tensor:
    """Same values and shape, different memory layout (non-contiguous views)."""
    if layout in (None, "contiguous") or t.dim() == 0 or t.numel() == 0:
        return t
    if layout == "transpose" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout in ("stride", "transpose"):
        shape = list(t.shape)
        big = torch.empty(shape[:-1] + [shape[-1] * 2], dtype=t.dtype, device=t.device)
        big[..., ::2] = t
        return big[..., ::2]
    if layout == "offset":
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = flat[1:].view(t.shape)
        view.copy_(t)
        return view
    raise ValueError(f"unknown layout {layout!r}")


def materialize(problem: LoadedProblem, recipe: dict[str, Any], to_device=None,
                generate_on: Optional[torch.device] = None, between: Optional[Callable[[], None]] = None) -> list:
    """Build the inputs of ``recipe``: from the seed (on ``generate_on`` when given: ``get_inputs()`` then runs
    under that default device, so a GPU draws its own inputs instead of waiting ~1 s per 128M-element randn on
    one CPU thread), then ``to_device``, then the layout. Controller and sandbox must pass the same
    ``generate_on`` to get the same values. ``between``: called after each pattern and layout step (the item's
    memory plan gives the allocator's cached blocks back there: a pattern's temporaries freed, then a strided
    buffer twice the input would otherwise sit beside them; measure/memory.py, "Caches")."""
    sizes = recipe.get("sizes") or {}
    with problem.sizes(sizes):
        if generate_on is not None:
            with generate_on:
                inputs = problem.raw_inputs(int(recipe["seed"]))
        else:
            inputs = problem.raw_inputs(int(recipe["seed"]))
    values: Sequence[Optional[dict]] = recipe.get("values") or []
    layouts: Sequence[Optional[str]] = recipe.get("layout") or []
    domain = problem.input_domain
    out = []
    for i in range(len(inputs)):
        # each raw input is dropped as soon as it is transformed: at published sizes (6-16 GB an input) a raw
        # copy, its patterned copy and a strided layout alive at once is what ran a GPU out of memory
        x, inputs[i] = inputs[i], None
        if isinstance(x, torch.Tensor):
            pattern = values[i] if i < len(values) else None
            if pattern:
                x = apply_pattern(x, pattern, domain)
                if between is not None:
                    between()
            if to_device is not None:
                x = to_device(x)
            layout = layouts[i] if i < len(layouts) else None
            if layout not in (None, "contiguous"):
                x = apply_layout(x, layout)
                if between is not None:
                    between()
        out.append(x)
    return out


def materialize_stream(problem: LoadedProblem, recipe: dict[str, Any], to_device=None,
                       generate_on: Optional[torch.device] = None) -> list[list]:
    """The ``recipe["count"]`` input sets of a stream recipe ``{"seed": s, "count": k}``: the problem's
    ``get_inputs()`` called k times in a row after one seeding, so a timing round's k distinct input sets cost one
    seeding, not k (seeding every RNG of the process costs more than drawing a small input on a GPU). Both sides
    draw the same sets in the same order. A problem whose ``get_inputs()`` seeds the RNG itself would repeat one set;
    then each set gets its own seed derived from the stream's, as a single recipe would."""
    seed, count = int(recipe["seed"]), int(recipe["count"])
    sizes = recipe.get("sizes") or {}
    if derive_spread(recipe) is not None:
        return list(iter_stream(problem, recipe, to_device, generate_on))
    with problem.sizes(sizes):
        if generate_on is not None:
            with generate_on:
                sets = problem.input_stream(seed, count)
        else:
            sets = problem.input_stream(seed, count)
    if count >= 2 and (_same_set(sets[0], sets[1]) or torch.initial_seed() != seed):
        return [materialize(problem, {"seed": (seed + 0x9E3779B97F4A7C15 * (j + 1)) % (1 << 63), "sizes": sizes},
                            to_device, generate_on) for j in range(count)]
    if to_device is not None:
        sets = [[to_device(x) if isinstance(x, torch.Tensor) else x for x in xs] for xs in sets]
    return sets


def _base_seed(recipe: dict[str, Any]) -> int:
    """The seed of a derived stream recipe's draw: its ``base`` (shared by the groups of a round), else its own."""
    return int(recipe.get("base", recipe["seed"]))


def draw_base(problem: LoadedProblem, recipe: dict[str, Any], to_device=None,
              generate_on: Optional[torch.device] = None) -> list:
    """The one ``get_inputs()`` draw a derived stream recipe's sets come from (seeded by :func:`_base_seed`)."""
    return materialize(problem, {"seed": _base_seed(recipe), "sizes": recipe.get("sizes") or {}}, to_device,
                       generate_on)


def materialize_groups(problem: LoadedProblem, recipes: dict[str, dict[str, Any]], to_device=None,
                       generate_on: Optional[torch.device] = None) -> dict[str, list[list]]:
    """A round's groups at once (name -> stream recipe): as :func:`materialize_stream` each, except that derived
    groups with the same ``base`` share one draw (a round's two groups: one ``get_inputs()`` a round, not two)."""
    bases: dict[tuple, DerivedBase] = {}
    out: dict[str, list[list]] = {}
    for name, recipe in recipes.items():
        if derive_spread(recipe) is None:
            out[name] = materialize_stream(problem, recipe, to_device, generate_on)
            continue
        key = (_base_seed(recipe), repr(sorted((recipe.get("sizes") or {}).items())))
        if key not in bases:
            bases[key] = DerivedBase(draw_base(problem, recipe, to_device, generate_on))
        out[name] = list(iter_stream(problem, recipe, to_device, generate_on, base=bases[key]))
    return out


def iter_stream(problem: LoadedProblem, recipe: dict[str, Any], to_device=None,
                generate_on: Optional[torch.device] = None, base: Optional[DerivedBase] = None,
                only: Optional[Sequence[int]] = None) -> Iterator[list]:
    """The sets of :func:`materialize_stream`, one at a time, for callers that free each set before the next (a
    set of KernelBench's published sizes is 6-16 GB). The random generators' states are kept between sets, so
    whatever runs between two sets draws nothing from the stream: the sets are the same as
    :func:`materialize_stream`'s. A problem whose ``get_inputs()`` re-seeds torch gets per-set seeds, as there.
    ``only``: yield just the sets of those indices, in order (drawn streams still draw the ones before them)."""
    seed, count = int(recipe["seed"]), int(recipe["count"])
    sizes = recipe.get("sizes") or {}
    spread = derive_spread(recipe)
    if spread is not None:  # one draw, the group's sets derived from it (problems/derived.py)
        derived = DerivedSets(base if base is not None else draw_base(problem, recipe, to_device, generate_on),
                              seed, spread)
        yield from derived.sets(count, only)
        return
    if only is not None:
        wanted = set(int(j) for j in only)
        for j, xs in enumerate(iter_stream(problem, recipe, to_device, generate_on)):
            if j in wanted:
                box = [xs]
                del xs
                yield box.pop()
        return
    state: tuple = ()
    for j in range(count):
        with problem.sizes(sizes):
            if j == 0:
                seed_everything(seed)
            else:
                _restore(state)
            if generate_on is not None:
                with generate_on:
                    xs = problem.next_inputs()
            else:
                xs = problem.next_inputs()
            state = _rng_state(generate_on)
        if j == 0 and count >= 2 and torch.initial_seed() != seed:
            yield from (materialize(problem, {"seed": (seed + 0x9E3779B97F4A7C15 * (i + 1)) % (1 << 63),
                                              "sizes": sizes}, to_device, generate_on) for i in range(count))
            return
        # handed over through a box the frame empties: a suspended generator holding the set would keep it alive
        # after its consumer dropped it (a 6-16 GB input set at published sizes)
        box = [[to_device(x) if (to_device is not None and isinstance(x, torch.Tensor)) else x for x in xs]]
        del xs
        yield box.pop()


def _rng_state(generate_on: Optional[torch.device]) -> tuple:
    import random

    import numpy as np

    cuda = None
    if generate_on is not None and generate_on.type == "cuda":
        cuda = (generate_on, torch.cuda.get_rng_state(generate_on))
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _restore(state: tuple) -> None:
    import random

    import numpy as np

    py, npy, cpu, cuda = state
    random.setstate(py)
    np.random.set_state(npy)
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda[1], cuda[0])


def _same_set(a: Sequence[Any], b: Sequence[Any]) -> bool:
    ta = [x for x in a if isinstance(x, torch.Tensor)]
    tb = [x for x in b if isinstance(x, torch.Tensor)]
    return bool(ta) and len(ta) == len(tb) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(ta, tb))


def inputs_signature(inputs: Sequence[Any]) -> list[dict]:
    """Shapes/dtypes of the inputs (for probe strategies and reports)."""
    sig = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            sig.append({"tensor": True, "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
                        "floating": bool(x.is_floating_point())})
        else:
            sig.append({"tensor": False, "type": type(x).__name__})
    return sig


__all__ = ["PATTERNS", "LAYOUTS", "materialize", "materialize_stream", "materialize_groups", "draw_base", "iter_stream",
           "apply_pattern", "apply_layout", "inputs_signature", "seed_everything"]
