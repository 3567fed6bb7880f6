"""The fixtures for hand-written tests: device, paired_seeds, frozen_baseline, autotune (run and probe)."""

from __future__ import annotations

import json

import e2e_files as F
import pytest

from conftest import fast_protocol_text

HAND_WRITTEN = '''
import pytest
import torch
import torch.nn as nn


class ClampRelu(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)


class IdentityRelu(nn.Module):
    def forward(self, x):
        return x


def test_device_and_seeds(device, paired_seeds):
    assert device.name == "cpu"
    assert len(paired_seeds) == 5 and len(set(paired_seeds)) == 5
    assert all(0 <= s < 2**63 for s in paired_seeds)


@pytest.mark.autotune_problem("suite/relu.py")
def test_frozen_baseline_is_the_strongest(frozen_baseline):
    assert frozen_baseline.name == "reference"
    model = frozen_baseline.build(0)
    assert torch.equal(model(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))


@pytest.mark.autotune_problem("suite/relu.py")
def test_run_a_candidate_file(autotune):
    outcome = autotune.run("suite/candidates/relu/clamp.py")
    assert outcome.verdict == "accepted", outcome.reason
    bad = autotune.run("suite/candidates/relu/bf16.py")
    assert bad.verdict == "rejected" and bad.gate == "correctness"


@pytest.mark.autotune_problem("suite/relu_nonneg.py")
def test_probe_accepts_an_honest_callable(autotune):
    ran = autotune.probe(ClampRelu)
    assert ran["explicit"] >= 1


@pytest.mark.autotune_problem("suite/relu_nonneg.py")
def test_probe_catches_the_identity(autotune):
    with pytest.raises(AssertionError, match="probe failed.*seed="):
        autotune.probe(IdentityRelu)
'''


def test_fixtures_in_a_hand_written_test(pytester: pytest.Pytester):
    (pytester.path / "suite" / "candidates" / "relu").mkdir(parents=True)
    (pytester.path / "suite" / "relu.py").write_text(F.RELU)
    (pytester.path / "suite" / "relu_nonneg.py").write_text(F.RELU_NONNEG)
    (pytester.path / "suite" / "candidates" / "relu" / "clamp.py").write_text(F.CAND_RELU_CLAMP)
    (pytester.path / "suite" / "candidates" / "relu" / "bf16.py").write_text(F.CAND_RELU_BF16)
    (pytester.path / "protocol.toml").write_text(fast_protocol_text())
    pytester.makepyfile(test_hand=HAND_WRITTEN)
    res = pytester.runpytest_subprocess("test_hand.py", "--autotune", "--autotune-exploratory",
                                        "--autotune-json=r.json", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=5)
    report = json.loads((pytester.path / "r.json").read_text())
    runs = {i["candidate"]: i for i in report["items"]}
    # a hand-written autotune.run is measured and recorded like a collected item
    assert runs["clamp"]["verdict"] == "accepted" and runs["clamp"]["speedup"] is not None
    assert runs["bf16"]["gate"] == "correctness"
