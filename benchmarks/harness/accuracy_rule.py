"""How the float64-oracle accuracy rule (gates/accuracy.py, ``[accuracy]`` of protocol.toml) treats honest float32
kernels and lower-precision shortcuts: the numbers behind the protocol's multiplier and floor
(docs/design/accuracy.md).

For each op, the float32 reference (torch's own kernel on the CPU), its float64 oracle and a set of variants that
compute the same op another way -- honest float32 algorithms an agent writes (one running float32 total per output,
a random summation order, a 256-way strided reduction, K-chunked matmuls, a fast exp of a few ulps, a one-pass
variance) and shortcuts (inputs or arithmetic in bfloat16, float16, TF32) -- are judged by the same code the gate
runs (``oracle_errors`` and the protocol's thresholds), on several seeds; the worst seed is reported. Sequential
float32 sums are numpy's ``add.accumulate`` (a plain loop in float32; ``np.sum`` is pairwise).

    python benchmarks/harness/accuracy_rule.py --out docs/data/accuracy-rule-cpu-<date>/rule.json

Prints a Markdown table: per variant, the reference's and the candidate's rms and largest error against the oracle
in ulps (eps x the oracle's rms or largest value), their ratio, and the verdict under the protocol.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pytest_autotune.gates.accuracy import oracle_errors, sensitivity  # noqa: E402
from pytest_autotune.problems.inputs import apply_pattern  # noqa: E402
from pytest_autotune.protocol import load_protocol  # noqa: E402

f32 = torch.float32


def seq_sum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """One running float32 total per output, in index order (a thread looping over its row)."""
    return torch.from_numpy(np.asarray(np.add.accumulate(x.numpy(), axis=dim).take(-1, axis=dim)).copy())


def bf(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(f32)


def hf(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).to(f32)


def tf32(x: torch.Tensor) -> torch.Tensor:
    """Round to TF32's 10-bit significand (nearest, ties away), as a tensor core reads a float32."""
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(f32)


def rounding_bias(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """The probes' ``rounding_bias`` pattern (problems/inputs.py apply_pattern)."""
    return apply_pattern(x, {"name": "rounding_bias", "seed": int(torch.randint(0, 2**31, (1,), generator=g))}, None)


def fast_exp(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """exp with CUDA's ``__expf`` error bound (2 + 1.16|x| ulp), drawn uniformly inside it."""
    u = torch.rand(x.shape, generator=gen) * 2 - 1
    return torch.exp(x) * (1 + u * (2 + 1.16 * x.abs()) * torch.finfo(f32).eps)


#: (op name, inputs from a generator, reference fn (float32 and float64 alike), {variant: (kind, fn)})
Case = tuple[str, Callable[[torch.Generator], list], Callable, dict[str, tuple[str, Callable]]]


def cases() -> list[Case]:
    out: list[Case] = []
    for n in (256, 4096, 32768):
        def inp(g, n=n):
            return [torch.randn(32, n, generator=g)]
        out.append((f"sum over {n}", inp, lambda x: x.sum(1), {
            "one float32 total a row": ("honest", lambda x: seq_sum(x)),
            "random order": ("honest", lambda x: seq_sum(x[:, torch.randperm(x.shape[1])])),
            "256 strided + tree": ("honest", lambda x: seq_sum(x.reshape(32, -1, 256), 1).sum(1)),
            "bfloat16 inputs": ("shortcut", lambda x: bf(x).sum(1)),
            "float16 inputs": ("shortcut", lambda x: hf(x).sum(1)),
        }))
        out.append((f"sum of |x| over {n}", lambda g, n=n: [torch.randn(32, n, generator=g).abs() + 0.1],
                    lambda x: x.sum(1), {
                        "one float32 total a row": ("honest", lambda x: seq_sum(x)),
                        "256 strided + tree": ("honest", lambda x: seq_sum(x.reshape(32, -1, 256), 1).sum(1)),
                        "bfloat16 inputs": ("shortcut", lambda x: bf(x).sum(1)),
                    }))
    for n in (1 << 16, 1 << 20):
        def mse_in(g, n=n):
            return [torch.randn(n, generator=g), torch.randn(n, generator=g)]

        out.append((f"mse loss over {n}", mse_in, lambda a, b: F.mse_loss(a, b), {
            "one float32 total": ("honest", lambda a, b: seq_sum((a - b).square()) / a.numel()),
            "256 strided + tree": ("honest", lambda a, b: seq_sum((a - b).square().reshape(-1, 256), 0).sum()
                                   / a.numel()),
            "bfloat16 inputs": ("shortcut", lambda a, b: F.mse_loss(bf(a), bf(b))),
            "float16 inputs": ("shortcut", lambda a, b: F.mse_loss(hf(a), hf(b))),
        }))
        def biased(g, n=n):
            return [rounding_bias(torch.randn(n, generator=g), g), rounding_bias(torch.randn(n, generator=g), g)]

        out.append((f"mse loss over {n}, rounding_bias inputs", biased, lambda a, b: F.mse_loss(a, b), {
            "one float32 total": ("honest", lambda a, b: seq_sum((a - b).square()) / a.numel()),
            "256 strided + tree": ("honest", lambda a, b: seq_sum((a - b).square().reshape(-1, 256), 0).sum()
                                   / a.numel()),
            "bfloat16 inputs": ("shortcut", lambda a, b: F.mse_loss(bf(a), bf(b))),
            "float16 inputs": ("shortcut", lambda a, b: F.mse_loss(hf(a), hf(b))),
        }))
        out.append((f"sum over {n}, rounding_bias inputs", lambda g, n=n: [rounding_bias(torch.randn(32, n // 32,
                                                                                               generator=g), g)],
                    lambda x: x.sum(1), {
                        "one float32 total a row": ("honest", lambda x: seq_sum(x)),
                        "bfloat16 inputs": ("shortcut", lambda x: bf(x).sum(1)),
                        "float16 inputs": ("shortcut", lambda x: hf(x).sum(1)),
                        "TF32 inputs": ("shortcut", lambda x: tf32(x).sum(1)),
                    }))
        out.append((f"mse loss over {n}, constant 1/3 vs 0", lambda g, n=n: [torch.full((n,), 1 / 3), torch.zeros(n)],
                    lambda a, b: F.mse_loss(a, b), {
                        "256 strided + tree": ("honest", lambda a, b: seq_sum((a - b).square().reshape(-1, 256), 0)
                                               .sum() / a.numel()),
                        "bfloat16 inputs": ("shortcut", lambda a, b: F.mse_loss(bf(a), bf(b))),
                        "float16 inputs": ("shortcut", lambda a, b: F.mse_loss(hf(a), hf(b))),
                    }))
    for k in (256, 4096):
        def mm_in(g, k=k):
            return [torch.randn(128, k, generator=g), torch.randn(k, 128, generator=g)]

        out.append((f"matmul K={k}", mm_in, lambda a, b: a @ b, {
            "K in chunks of 64": ("honest", lambda a, b: sum(a[:, i:i + 64] @ b[i:i + 64] for i in range(0, a.shape[1], 64))),
            "one float32 total per output": ("honest", lambda a, b: seq_sum(a.unsqueeze(1) * b.t().unsqueeze(0))),
            "TF32": ("shortcut", lambda a, b: tf32(a) @ tf32(b)),
            "bfloat16": ("shortcut", lambda a, b: bf(a) @ bf(b)),
            "float16": ("shortcut", lambda a, b: hf(a) @ hf(b)),
        }))

    def rows(scale: float = 3.0):
        return lambda g: [torch.randn(32, 4096, generator=g) * scale]

    gen = torch.Generator().manual_seed(7)
    out.append(("softmax", rows(), lambda x: torch.softmax(x, 1), {
        "exp(x - max) / one float32 total": ("honest", lambda x: (lambda e: e / seq_sum(e).unsqueeze(1))(
            torch.exp(x - x.max(1, keepdim=True).values))),
        "__expf + tree sum": ("honest", lambda x: (lambda e: e / e.sum(1, keepdim=True))(
            fast_exp(x - x.max(1, keepdim=True).values, gen))),
        "__expf + one float32 total": ("honest", lambda x: (lambda e: e / seq_sum(e).unsqueeze(1))(
            fast_exp(x - x.max(1, keepdim=True).values, gen))),
        "bfloat16": ("shortcut", lambda x: torch.softmax(bf(x), 1).to(torch.bfloat16).float()),
        "bfloat16 inputs": ("shortcut", lambda x: torch.softmax(bf(x), 1)),
    }))
    out.append(("log_softmax", rows(), lambda x: torch.log_softmax(x, 1), {
        "x - max - log(one float32 total)": ("honest", lambda x: (lambda z: z - torch.log(seq_sum(torch.exp(z))
                                                                                           ).unsqueeze(1))(
            x - x.max(1, keepdim=True).values)),
        "bfloat16 inputs": ("shortcut", lambda x: torch.log_softmax(bf(x), 1)),
    }))
    for off in (0.0, 100.0):
        def ln_in(g, off=off):
            return [torch.randn(32, 4096, generator=g) + off]

        def two_pass(x):
            m = seq_sum(x) / x.shape[1]
            v = seq_sum((x - m[:, None]) ** 2) / x.shape[1]
            return (x - m[:, None]) / torch.sqrt(v[:, None] + 1e-5)

        def one_pass(x):
            m = seq_sum(x) / x.shape[1]
            v = seq_sum(x * x) / x.shape[1] - m * m
            return (x - m[:, None]) / torch.sqrt(v[:, None] + 1e-5)

        out.append((f"layer norm, mean {off:g}", ln_in, lambda x: F.layer_norm(x, (x.shape[-1],)), {
            "two passes, one float32 total a row": ("honest", two_pass),
            "one pass, E[x^2] - E[x]^2": ("honest", one_pass),
            "bfloat16 inputs": ("shortcut", lambda x: F.layer_norm(bf(x), (x.shape[-1],))),
        }))
    out.append(("layer norm, constant 1/3 rows", lambda g: [torch.full((32, 4096), 1 / 3)],
                lambda x: F.layer_norm(x, (x.shape[-1],)), {
                    "two passes, one float32 total a row": ("honest", lambda x: (lambda m: (x - m) / torch.sqrt(
                        seq_sum((x - m) ** 2).unsqueeze(1) / x.shape[1] + 1e-5))(seq_sum(x).unsqueeze(1) / x.shape[1])),
                }))
    out.append(("gelu (tanh)", rows(), lambda x: F.gelu(x, approximate="tanh"), {
        "the formula in float32": ("honest", lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi)
                                                                              * (x + 0.044715 * x ** 3)))),
        "bfloat16": ("shortcut", lambda x: F.gelu(bf(x), approximate="tanh").to(torch.bfloat16).float()),
        "float16": ("shortcut", lambda x: F.gelu(hf(x), approximate="tanh").to(torch.float16).float()),
    }))
    out.append(("relu", rows(), torch.relu, {
        "clamp": ("honest", lambda x: x.clamp_min(0)),
        "bfloat16": ("shortcut", lambda x: torch.relu(bf(x))),
    }))
    out.append(("conv2d 3x3, 16->32 channels", lambda g: [torch.randn(8, 16, 32, 32, generator=g),
                                                         torch.randn(32, 16, 3, 3, generator=g)],
                lambda x, w: F.conv2d(x, w), {
                    "im2col + matmul": ("honest", lambda x, w: (w.reshape(32, -1) @ F.unfold(x, 3))
                                        .reshape(8, 32, 30, 30)),
                    "TF32": ("shortcut", lambda x, w: F.conv2d(tf32(x), tf32(w))),
                    "bfloat16": ("shortcut", lambda x, w: F.conv2d(bf(x), bf(w))),
                }))
    return out


def perturbed(ref_fn: Callable, xs: list, gen: torch.Generator) -> torch.Tensor:
    eps = torch.finfo(f32).eps
    moved = [x.double() * (1 + eps * (torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1)) for x in xs]
    return ref_fn(*moved)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    rule = load_protocol(ROOT / "protocol.toml").accuracy
    torch.set_num_threads(1)
    rows = []
    for op, make, ref_fn, variants in cases():
        for name, (kind, fn) in variants.items():
            worst = None
            for seed in range(args.seeds):
                g = torch.Generator().manual_seed(1000 + seed)
                xs = make(g)
                ref = ref_fn(*xs)
                oracle = ref_fn(*[x.double() for x in xs])
                e = oracle_errors(fn(*xs).to(f32), ref, oracle)
                if not e.passes(rule):  # the gate asks for the input-rounding sensitivity only here
                    rms_s, max_s = sensitivity(oracle, perturbed(ref_fn, xs, g))
                    if rms_s > e.ulp or max_s > e.max_ulp:
                        e = e.in_units(max(e.ulp, rms_s), max(e.max_ulp, max_s), "sensitivity")
                rms_ok, max_ok = e.allowed(rule)
                margin = min(rms_ok / max(e.candidate_rms, 1e-30), max_ok / max(e.candidate_max, 1e-30))
                row = {"op": op, "variant": name, "kind": kind, "seed": seed, "unit": e.unit,
                       "reference_rms_ulp": e.reference_rms, "candidate_rms_ulp": e.candidate_rms,
                       "reference_max_ulp": e.reference_max, "candidate_max_ulp": e.candidate_max,
                       "rms_ratio": e.candidate_rms / e.reference_rms if e.reference_rms else math.inf,
                       "margin": margin, "passes": e.passes(rule)}
                # the worst seed: an honest variant's smallest margin, a shortcut's largest
                if worst is None or (margin < worst["margin"] if kind == "honest" else margin > worst["margin"]):
                    worst = row
            assert worst is not None
            rows.append(worst)
    print(f"rule: rms <= {rule.multiplier:g} x reference + {rule.floor_ulps:g} ulp; largest <= "
          f"{rule.max_multiplier:g} x reference + {rule.max_floor_ulps:g} ulp (worst of {args.seeds} seeds)\n")
    print("| op | variant | kind | reference rms / max (ulp) | candidate rms / max (ulp) | rms ratio | verdict |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        verdict = ("passes" if r["passes"] else "refused") + (f" ({r['margin']:.2g}x)" if r["passes"] else "")
        print(f"| {r['op']} | {r['variant']} | {r['kind']} | {r['reference_rms_ulp']:.3g} / "
              f"{r['reference_max_ulp']:.3g} | {r['candidate_rms_ulp']:.3g} / {r['candidate_max_ulp']:.3g} | "
              f"{r['rms_ratio']:.3g} | {verdict} |")
    honest = [r for r in rows if r["kind"] == "honest"]
    shortcuts = [r for r in rows if r["kind"] == "shortcut"]
    print(f"\nhonest variants passing: {sum(r['passes'] for r in honest)} of {len(honest)}; "
          f"shortcuts refused: {sum(not r['passes'] for r in shortcuts)} of {len(shortcuts)}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rule": {"multiplier": rule.multiplier, "floor_ulps": rule.floor_ulps,
                                                 "max_multiplier": rule.max_multiplier,
                                                 "max_floor_ulps": rule.max_floor_ulps},
                                        "seeds": args.seeds, "torch": torch.__version__, "rows": rows},
                                       indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
