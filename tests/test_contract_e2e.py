"""The contract, end to end (docs/guide/contract.md): KernelBench-format problems and candidates through the plugin.

One module-scoped correctness-only session (nothing is timed: the contract and the accuracy rule decide there) reads
every case; a second runs the same files with ``--autotune-strict-contract``; a third measures the contiguous-only
candidate, so that its finding reaches the store. Unit tests of the parts: tests/test_contract.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import ModuleRequest, fast_protocol_text

ROWSUM = '''import torch
import torch.nn as nn
{declare}

class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)

batch, dim = 64, 512

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return []
'''

#: reads the input's storage as if it were contiguous: what a CUDA kernel indexing data_ptr() does
CAND_CONTIGUOUS_ONLY = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        flat = torch.as_strided(x, x.shape, (x.shape[1], 1), x.storage_offset())
        return flat.sum(dim=1)
'''

CAND_FLOAT64 = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x.double().sum(dim=1).to(x.dtype)  # more accurate than the float32 reference
'''

#: right on KernelBench's five trials (they come first, from a public seed), wrong on every later call
CHEAT_KERNELBENCH_FIRST = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x.sum(dim=1) if self.calls <= 5 else torch.zeros(x.shape[0])
'''

#: a reference less accurate than its candidate: one-pass variance, E[x^2] - E[x]^2, of rows whose mean is 100 loses
#: ~1e-3 of the answer to cancellation in float32
VARIANCE_ONE_PASS = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return (x * x).mean(dim=1) - x.mean(dim=1) ** 2

def get_inputs():
    return [torch.randn(64, 4096) + 100]

def get_init_inputs():
    return []
'''

CAND_TWO_PASS = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.var(x, dim=1, unbiased=False)
'''

MSE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return torch.nn.functional.mse_loss(a, b)

def get_inputs():
    return [torch.randn(65536), torch.randn(65536)]

def get_init_inputs():
    return []
'''

#: bfloat16 has float32's range: the shortcut never overflows to Inf, so what refuses it is the accuracy rule itself
CAND_MSE_HALF = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.nn.functional.mse_loss(a.bfloat16().float(), b.bfloat16().float())  # half the bytes read
'''

CAND_MSE_BLOCKED = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        parts = (a - b).square().reshape(256, -1).sum(dim=1)
        return parts.sum() / a.numel()
'''

FILES = {
    "suite/rowsum.py": ROWSUM.format(declare=""),
    "suite/candidates/rowsum/contiguous_only.py": CAND_CONTIGUOUS_ONLY,
    "suite/candidates/rowsum/float64.py": CAND_FLOAT64,
    "suite/candidates/rowsum/kernelbench_first.py": CHEAT_KERNELBENCH_FIRST,
    "suite/rowsum_any_layout.py": ROWSUM.format(declare='AUTOTUNE_LAYOUTS = ("contiguous", "transpose", "stride")'),
    "suite/candidates/rowsum_any_layout/contiguous_only.py": CAND_CONTIGUOUS_ONLY,
    "suite/variance_one_pass.py": VARIANCE_ONE_PASS,
    "suite/candidates/variance_one_pass/two_pass.py": CAND_TWO_PASS,
    "suite/mse.py": MSE,
    "suite/candidates/mse/half.py": CAND_MSE_HALF,
    "suite/candidates/mse/blocked.py": CAND_MSE_BLOCKED,
}


def _pytester(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
              mp: pytest.MonkeyPatch) -> pytest.Pytester:
    pt = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
    for rel, text in FILES.items():
        path = pt.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (pt.path / "protocol.toml").write_text(fast_protocol_text())
    return pt


def _items(path: Path) -> dict:
    return {(i["problem"], i["candidate"]): i for i in json.loads(path.read_text())["items"]}


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    mp = pytest.MonkeyPatch()
    try:
        pt = _pytester(tmp_path_factory, request, mp)
        # in fresh processes: these sessions import torch modules (torch._inductor among them) that pytester would drop
        # from this process when an in-process session ends, and torch cannot register them twice
        default = pt.runpytest_subprocess("--problems=suite", "--autotune-exploratory", "--autotune-json=default.json")
        strict = pt.runpytest_subprocess("--problems=suite", "--autotune-exploratory", "--autotune-strict-contract",
                                         "--autotune-json=strict.json", "-k", "rowsum")
        yield {"pytester": pt, "default": _items(pt.path / "default.json"), "strict": _items(pt.path / "strict.json"),
               "default_out": default.stdout.str(), "strict_out": strict.stdout.str()}
    finally:
        mp.undo()


def test_a_kernel_assuming_contiguous_input_is_accepted_with_a_finding(sessions):
    item = sessions["default"][("rowsum", "contiguous_only")]
    assert item["verdict"] == "accepted", item["reason"]
    clauses = {f["clause"] for f in item["findings"]}
    assert clauses <= {"layout transpose", "layout stride", "layout offset"} and "layout transpose" in clauses
    finding = next(f for f in item["findings"] if f["clause"] == "layout transpose")
    assert ".contiguous()" in finding["fix"] and "layout=transpose" in finding["input"]
    assert item["details"]["contract"]["layouts_from"] == "get_inputs()"
    out = sessions["default_out"]
    assert "findings beyond the contract" in out and "rowsum/contiguous_only: wrong on layout transpose" in out


def test_under_the_strict_setting_the_same_kernel_is_refused_naming_its_clause_and_fix(sessions):
    item = sessions["strict"][("rowsum", "contiguous_only")]
    assert item["verdict"] == "rejected" and item["gate"] == "probe", item
    assert item["clause"].startswith("layout ")
    assert "beyond the contract" in item["reason"] and "(refused: the contract is strict)" in item["reason"]
    assert "fix: the kernel assumes contiguous memory: call .contiguous()" in item["reason"]
    assert sessions["strict"][("rowsum", "float64")]["verdict"] == "accepted"


def test_a_layout_the_problem_declares_is_inside_the_contract_and_refuses(sessions):
    item = sessions["default"][("rowsum_any_layout", "contiguous_only")]
    assert item["verdict"] == "rejected" and item["gate"] == "probe", item
    assert item["clause"].startswith("declared layout") and "beyond the contract" not in item["reason"]
    assert item["findings"] == []


def test_a_candidate_more_accurate_than_its_reference_is_accepted(sessions):
    """The one-pass variance is ~1e-3 off; the two-pass candidate ~1e-7: protocol 9's rtol of 1e-4 against the
    reference refused the better answer (tests/test_contract.py has the same for log1p)."""
    item = sessions["default"][("variance_one_pass", "two_pass")]
    assert item["verdict"] == "accepted", item["reason"]
    acc = item["details"]["accuracy"]
    assert acc["rule"] == "float64-oracle" and acc["oracle"] == "float64"
    assert acc["worst_rms_ulp"] < acc["worst_reference_rms_ulp"]
    assert sessions["default"][("rowsum", "float64")]["verdict"] == "accepted"


def test_a_half_precision_loss_is_refused_by_the_accuracy_rule_and_a_blocked_sum_is_not(sessions):
    half = sessions["default"][("mse", "half")]
    assert half["verdict"] == "rejected" and half["gate"] in ("correctness", "probe"), half
    assert "less accurate than the reference against the float64 oracle" in half["reason"]
    assert "fix: compute in the output's dtype with float32" in half["reason"]
    assert half["details"]["kind"] == "accuracy"
    assert sessions["default"][("mse", "blocked")]["verdict"] == "accepted"


def test_kernelbench_verdict_beside_ours(sessions):
    """KernelBench's check passes a candidate that is right on its five public trials only; the gates refuse it on
    the run's own seeds, and the report shows both."""
    item = sessions["default"][("rowsum", "kernelbench_first")]
    assert item["kernelbench"]["verdict"] == "correct" and item["kernelbench"]["passed"] == 5
    assert item["verdict"] == "rejected" and item["gate"] == "correctness"
    assert item["clause"] == "declared inputs"
    honest = sessions["default"][("rowsum", "float64")]["kernelbench"]
    assert honest["verdict"] == "correct" and honest["trials"] == 5 and honest["verdict_v0"] == "correct"
    assert "KernelBench" in sessions["default_out"]


def test_a_finding_reaches_the_store_with_the_measurement(sessions):
    pt = sessions["pytester"]
    res = pt.runpytest_subprocess("--problems=suite", "--autotune", "--autotune-exploratory",
                                  "--autotune-json=timed.json", "-k", "rowsum and contiguous_only and not any")
    item = _items(pt.path / "timed.json")[("rowsum", "contiguous_only")]
    assert item["verdict"] == "accepted", res.stdout.str()[-3000:]
    con = sqlite3.connect(pt.path / ".autotune" / "results.db")
    (contract,) = con.execute("select contract from results where candidate = 'contiguous_only'").fetchone()
    stored = json.loads(contract)
    assert stored["beyond"] == "finding" and stored["findings"] and stored["kernelbench"]["verdict"] == "correct"
    assert stored["accuracy"]["rule"] == "float64-oracle"
