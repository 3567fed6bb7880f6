"""An honest item's speedup does not move with the calls per sample (docs/architecture.md, "The sample's shape").

One synthetic problem -- ReLU written naively, a full-size temporary of zeros and two passes, 4 MiB an input --
against ``torch.relu``, timed at the protocol's floor of 8 calls a sample and at 64 (``--autotune-k``, exploratory),
in two sessions. At 64 calls a round holds over 1 GiB of inputs and outputs in each sandbox: under protocol 8's
allocator settings the heap was given back to the system when a round was freed and the next round's outputs
faulted in fresh pages inside its samples (02_relu's reference: 0.54 ms a call at k = 4, 3.8 ms at k = 64), and
with few sets alive a round's inputs sat in the last-level cache. Either moved this ratio far past its CI
(benchmarks/harness/k_invariance.py measures every bundled item the same way).
"""

from __future__ import annotations

import json
import math

import pytest

PROBLEM = '''
import torch
from torch import nn

batch_size = 256
dim = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.maximum(x, torch.zeros_like(x))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''

#: two ratios of one item agree when their log distance is within their CIs' half-widths together, or this. A 4x
#: regime effect is what the test is for (02_relu's reference read 7x slower a call at k = 64 under protocol 8).
#: A memory-bound elementwise item like this one scatters by ~10% a pair of processes on the 2-vCPU VM (02_relu
#: 9.9%, 01_scaled_add 7.5-10.2%: docs/results/cpu.md), four times the protocol's offset term, so two sessions of
#: two pairs each differ by ~10% (sd) and their CIs do not cover it: a fresh-clone run at 3bd0a2f read 1.54 and
#: 1.17 (log distance 0.27, the naive reference 565 us a call in one session and 426 us in the other). 1.5x is
#: four of those sds, and a third of a 4x effect's log.
FLOOR = math.log(1.5)


def _session(pytester: pytest.Pytester, fast_protocol, k: str) -> dict:
    root = pytester.path
    if not (root / "suite").exists():
        (root / "suite" / "candidates" / "relu_naive").mkdir(parents=True)
        (root / "suite" / "relu_naive.py").write_text(PROBLEM)
        (root / "suite" / "candidates" / "relu_naive" / "relu.py").write_text(CANDIDATE)
        (root / "protocol.toml").write_text(fast_protocol(**{
            "timing.item_budget_s": "1.2", "timing.min_sample_s": "0.002", "timing.process_pairs": "2",
            "timing.min_pairs": "12", "probes.max_examples": "0", "probes.shape_examples": "0"}))
    out = root / f"k{k}.json"
    res = pytester.runpytest_subprocess(
        "--problems=suite", "suite", "--autotune", "--autotune-exploratory", f"--autotune-k={k}",
        f"--autotune-json={out}", f"--autotune-db={root / 'k.db'}", "-p", "no:cacheprovider", timeout=300)
    assert out.exists(), res.stdout.str()[-3000:] + res.stderr.str()[-3000:]
    (item,) = json.loads(out.read_text())["items"]
    assert item["verdict"] == "accepted", item["reason"]
    return item


def _half_width(item: dict) -> float:
    lo, hi = item["ci"]
    return (math.log(hi) - math.log(lo)) / 2


def test_speedup_at_8_and_64_calls_a_sample_agree(pytester: pytest.Pytester, fast_protocol):
    few = _session(pytester, fast_protocol, "8")
    many = _session(pytester, fast_protocol, "64")
    assert few["details"]["timing"]["calls_per_sample"] == 8
    assert many["details"]["timing"]["calls_per_sample"] == 64
    gap = abs(math.log(few["speedup"]) - math.log(many["speedup"]))
    allowed = max(_half_width(few) + _half_width(many), FLOOR)
    faults = {k: it["details"]["timing"]["samples_with_page_faults"] for k, it in (("8", few), ("64", many))}
    per_call = {k: it["details"]["timing"]["per_call_s"] for k, it in (("8", few), ("64", many))}
    assert gap <= allowed, (f"8 calls a sample: {few['speedup']:.3f} {few['ci']}; 64: {many['speedup']:.3f} "
                            f"{many['ci']}; per call {per_call}; samples with page faults {faults}")

