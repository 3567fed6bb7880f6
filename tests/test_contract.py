"""The contract a candidate is judged by, in parts (docs/guide/contract.md, docs/design/accuracy.md): the accuracy
rule against a float64 oracle, the oracle itself, the contract's clauses, KernelBench's verdict and the store's rule.
End to end: tests/test_contract_e2e.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO
from pytest_autotune.errors import ProblemLoadError
from pytest_autotune.gates import accuracy
from pytest_autotune.gates.compare import compare_outputs
from pytest_autotune.gates.kernelbench import judge_trial, trial_seeds
from pytest_autotune.problems.contract import Clause, contract_for, contract_record, fix_for
from pytest_autotune.problems.inputs import apply_pattern
from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.protocol import load_protocol

PROTO = load_protocol(REPO / "protocol.toml")
RULE = PROTO.accuracy


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------ the accuracy rule
def test_the_shipped_protocol_judges_floating_outputs_against_a_float64_oracle():
    assert RULE.rule == "float64-oracle" and PROTO.version == "10"
    assert RULE.multiplier >= 1 and RULE.floor_ulps > 0


def test_a_candidate_more_accurate_than_the_reference_passes_where_the_tolerance_rule_refuses_it():
    """log(1 + x) for tiny x: the float32 reference loses ~1e-2 of each value (1 + x rounds), log1p keeps them all.
    Against the reference alone (rtol 1e-4) the better answer is refused; against float64 it is the closer one."""
    x = torch.randn(4096, generator=gen()) * 1e-5
    ref, oracle = torch.log(1 + x), torch.log(1 + x.double())
    better = torch.log1p(x)
    assert not compare_outputs(better, ref, PROTO).ok  # the protocol's tolerance, no oracle
    cmp = compare_outputs(better, ref, PROTO, oracle=oracle)
    assert cmp.ok, cmp.reason
    numbers = cmp.details["output"]
    assert numbers["rms_ulp"] < numbers["reference_rms_ulp"] / 100


@pytest.mark.parametrize("narrow", [torch.bfloat16, torch.float16])
def test_a_half_precision_shortcut_is_refused_by_the_accuracy_rule_itself(narrow):
    x = torch.randn(64, 1024, generator=gen(1))
    ref, oracle = torch.exp(x), torch.exp(x.double())
    cheat = torch.exp(x.to(narrow)).float()
    cmp = compare_outputs(cheat, ref, PROTO, oracle=oracle)
    assert not cmp.ok and cmp.kind == "accuracy"
    assert "less accurate than the reference against the float64 oracle" in cmp.reason


def test_a_tf32_matmul_is_refused_and_a_reordered_float32_one_passes():
    a, b = torch.randn(128, 1024, generator=gen(2)), torch.randn(1024, 128, generator=gen(3))
    ref, oracle = a @ b, a.double() @ b.double()
    chunked = sum(a[:, i:i + 64] @ b[i:i + 64] for i in range(0, 1024, 64))
    assert compare_outputs(chunked, ref, PROTO, oracle=oracle).ok

    def tf32(t):
        return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)

    assert compare_outputs(tf32(a) @ tf32(b), ref, PROTO, oracle=oracle).kind == "accuracy"


def test_a_half_precision_scalar_loss_is_refused_on_rounding_bias_inputs():
    """A mean over 65536 values averages half-precision rounding away on randn inputs (float16 reads ~23x the
    reference's error there, inside the rule); on ``rounding_bias`` inputs every value rounds the same way and the
    loss is thousands of times off (docs/design/accuracy.md)."""
    g = gen(4)
    a = apply_pattern(torch.randn(65536, generator=g), {"name": "rounding_bias", "seed": 1}, None)
    b = apply_pattern(torch.randn(65536, generator=g), {"name": "rounding_bias", "seed": 2}, None)
    ref, oracle = F.mse_loss(a, b), F.mse_loss(a.double(), b.double())
    for narrow in (torch.float16, torch.bfloat16):
        cheat = F.mse_loss(a.to(narrow).float(), b.to(narrow).float())
        assert compare_outputs(cheat, ref, PROTO, oracle=oracle).kind == "accuracy", narrow
    blocked = (a - b).square().reshape(256, -1).sum(1).sum() / a.numel()  # honest: partial sums, then a total
    assert compare_outputs(blocked, ref, PROTO, oracle=oracle).ok


def test_rounding_bias_is_exact_in_float32_and_rounds_one_way_in_narrower_types():
    x = apply_pattern(torch.randn(10000, generator=gen(5)), {"name": "rounding_bias", "seed": 3}, None)
    assert torch.equal(x.double().float(), x)
    normal = x.abs() > torch.finfo(torch.float16).tiny  # float16's subnormals have a fixed step
    for narrow in (torch.bfloat16, torch.float16):
        towards_zero = (x.to(narrow).double().abs() - x.double().abs())[normal]
        assert bool((towards_zero < 0).all()), narrow  # every value rounds towards zero: no averaging out
        assert float((towards_zero / x.double().abs()[normal]).abs().min()) > 2.0**-14


def test_an_exact_reference_leaves_the_floor_and_an_ulp_off_candidate_passes():
    x = torch.randn(4096, generator=gen(6))
    ref, oracle = torch.relu(x), torch.relu(x.double())
    one_ulp = torch.nextafter(ref, torch.full_like(ref, math.inf))
    assert compare_outputs(one_ulp, ref, PROTO, oracle=oracle).ok
    assert not compare_outputs(ref * 1.001, ref, PROTO, oracle=oracle).ok


def test_an_output_zero_in_exact_arithmetic_is_judged_in_the_units_its_inputs_rounding_carries():
    """Layer norm of a row of 1/3s is 0 exactly; a float32 mean of 1/3s is not 1/3, and any algorithm's output is
    off by what that rounding carries through the op (~1e-5). The float64 sensitivity to the inputs' last bit is the
    unit there; an error of 1e-2 is still refused."""
    x = torch.full((8, 4096), 1 / 3)
    ref = F.layer_norm(x, (4096,))
    oracle = F.layer_norm(x.double(), (4096,))
    moved = x.double() * (1 + torch.finfo(torch.float32).eps * (torch.rand(x.shape, generator=gen(7),
                                                                             dtype=torch.float64) * 2 - 1))
    perturbed = F.layer_norm(moved, (4096,))
    noisy = ref + (torch.rand(ref.shape, generator=gen(8)) - 0.5) * 2e-5
    assert not accuracy.judge(noisy, ref, oracle, RULE, "output")[0]  # in eps x |oracle| (= 0) it fails
    ok, reason, numbers = accuracy.judge(noisy, ref, oracle, RULE, "output", lambda: perturbed)
    assert ok, reason
    assert numbers["unit"] == "input-rounding sensitivity"
    assert not accuracy.judge(ref + 1e-2, ref, oracle, RULE, "output", lambda: perturbed)[0]


def test_nan_in_the_candidate_never_passes_and_an_overflowed_oracle_falls_back_to_the_tolerance():
    x = torch.randn(256, generator=gen(9))
    ref, oracle = x * 2, x.double() * 2
    bad = ref.clone()
    bad[3] = math.nan
    assert compare_outputs(bad, ref, PROTO, oracle=oracle).kind == "nonfinite"
    inf_oracle = oracle.clone()
    inf_oracle[0] = math.inf
    assert compare_outputs(ref, ref, PROTO, oracle=inf_oracle).ok


def test_every_shortcut_in_the_benchmark_is_refused_and_every_honest_reduction_up_to_32768_passes():
    """The table behind the protocol's numbers (benchmarks/harness/accuracy_rule.py), one seed: the rule keeps its
    margins on the cases docs/design/accuracy.md cites."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy_rule", REPO / "benchmarks/harness/accuracy_rule.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    refused_shortcuts, passing_honest = [], []
    for op, make, ref_fn, variants in bench.cases():
        if "1048576" in op:  # the million-element losses take most of the benchmark's time; the docs cite both
            continue
        xs = make(gen(11))
        ref, oracle = ref_fn(*xs), ref_fn(*[x.double() for x in xs])
        for name, (kind, fn) in variants.items():
            ok = accuracy.judge(fn(*xs).float(), ref, oracle, RULE, op,
                                lambda: bench.perturbed(ref_fn, xs, gen(12)))[0]
            if kind == "shortcut" and ("rounding_bias" in op or "constant" in op or "loss" not in op):
                refused_shortcuts.append((op, name, not ok))
            if kind == "honest" and op.startswith(("sum over", "sum of", "matmul", "softmax", "gelu", "conv")):
                passing_honest.append((op, name, ok))
    assert all(r for *_, r in refused_shortcuts), [c for c in refused_shortcuts if not c[2]]
    assert all(p for *_, p in passing_honest), [c for c in passing_honest if not c[2]]


# ------------------------------------------------------------------------------------------------ the oracle
def _problem(tmp_path: Path, body: str, name: str = "p.py") -> LoadedProblem:
    path = tmp_path / name
    path.write_text("import torch\nimport torch.nn as nn\n\n" + body)
    return LoadedProblem.load(SourceFile.read(path))


PLAIN = """
class Model(nn.Module):
    def forward(self, x):
        return {expr}

def get_inputs():
    return [torch.randn(64, 32)]

def get_init_inputs():
    return []
"""


def _oracle(tmp_path: Path, expr: str, name: str = "p.py"):
    from pytest_autotune.golden import Golden
    from pytest_autotune.measure.devices.cpu import CpuDevice
    from pytest_autotune.oracle import Oracle

    problem = _problem(tmp_path, PLAIN.format(expr=expr), name)
    return Oracle(Golden(problem, CpuDevice(), {}, init_seed=1))


def test_the_oracle_is_the_reference_in_float64_on_the_same_inputs(tmp_path):
    oracle = _oracle(tmp_path, "torch.softmax(x, dim=1)")
    out = oracle({"seed": 5})
    x = oracle.golden.inputs({"seed": 5})[0]
    assert out.dtype == torch.float64 and torch.allclose(out, torch.softmax(x.double(), 1), rtol=0, atol=1e-15)


@pytest.mark.parametrize("expr, why", [
    ("torch.softmax(x.float(), dim=1)", "casts internally"),
    ("torch.softmax(x, dim=1) if x.dtype == torch.float32 else (_ for _ in ()).throw(TypeError('no double'))",
     "raised in float64"),
])
def test_an_oracle_that_cannot_be_had_says_why(tmp_path, expr, why):
    from pytest_autotune.oracle import OracleUnavailable

    oracle = _oracle(tmp_path, expr)
    with pytest.raises(OracleUnavailable, match=why):
        oracle({"seed": 1})
    assert oracle.perturbed({"seed": 1}) is None


# ------------------------------------------------------------------------------------------------ the contract
def test_an_undeclared_problem_is_judged_on_the_layouts_its_get_inputs_makes(tmp_path):
    problem = _problem(tmp_path, PLAIN.format(expr="x * 2"))
    c = contract_for(problem, PROTO.contract.undeclared_layouts, PROTO.contract.beyond)
    assert c.layouts == ("contiguous",) and c.layouts_from == "get_inputs()" and not c.strict()
    assert set(c.beyond_layouts) == {"transpose", "stride", "offset"}
    assert c.clause({"seed": 1}) == Clause("declared inputs", True)
    assert c.clause({"seed": 1, "values": [{"name": "zeros"}]}).inside
    beyond = c.clause({"seed": 1, "layout": ["transpose"]})
    assert not beyond.inside and beyond.layout == "transpose" and "beyond the contract" in beyond.describe()
    assert ".contiguous()" in fix_for(beyond, "mismatch")
    assert contract_for(problem, "as-produced", "refuse").strict()


def test_a_wrong_answer_on_a_value_pattern_names_what_that_pattern_breaks(tmp_path):
    """A refusal on patterned values names what the pattern usually breaks, not the indexing hint: a SELU computing
    exp(x) - 1 returns 0 on randn x 1e-30 inputs (expm1 keeps -1.76e-30) and was told to check its indexing."""
    c = contract_for(_problem(tmp_path, PLAIN.format(expr="x * 2")), PROTO.contract.undeclared_layouts, "finding")
    tiny = c.clause({"seed": 1, "values": [{"name": "tiny"}]})
    assert tiny.values == ("tiny",) and tiny.name == "declared values tiny"
    assert "expm1" in fix_for(tiny, "mismatch") and "indexing" not in fix_for(tiny, "mismatch")
    two = c.clause({"seed": 1, "values": [{"name": "constant"}, {"name": "alternating_sign"}, {"name": "as_is"}]})
    assert two.values == ("alternating_sign", "constant")
    assert "cancellation" in fix_for(two, "mismatch") and "Welford" in fix_for(two, "mismatch")
    negative = c.clause({"seed": 1, "values": [{"name": "negative"}]})
    assert "x < 0" in fix_for(negative, "accuracy") and "in blocks or a tree" in fix_for(negative, "accuracy")
    bias = c.clause({"seed": 1, "values": [{"name": "rounding_bias"}]})
    assert "bfloat16" in fix_for(bias, "accuracy") and fix_for(bias, "accuracy").count("TF32") == 1
    plain = c.clause({"seed": 1})
    assert plain.values == () and "indexing" in fix_for(plain, "mismatch")
    assert "NaN" in fix_for(tiny, "nonfinite") and "shape" in fix_for(tiny, "shape")


def test_declared_layouts_are_inside_the_contract_and_a_wrong_declaration_names_the_fix(tmp_path):
    problem = _problem(tmp_path, 'AUTOTUNE_LAYOUTS = ("transpose",)\n' + PLAIN.format(expr="x * 2"))
    c = contract_for(problem, "as-produced", "finding")
    assert c.layouts == ("contiguous", "transpose") and c.layouts_from == "AUTOTUNE_LAYOUTS"
    assert c.clause({"seed": 1, "layout": ["transpose"]}).inside
    assert not c.clause({"seed": 1, "layout": ["stride"]}).inside
    anyl = _problem(tmp_path, 'AUTOTUNE_LAYOUTS = "any"\n' + PLAIN.format(expr="x"), "q.py")
    assert contract_for(anyl, "as-produced", "finding").beyond_layouts == ()
    bad = _problem(tmp_path, 'AUTOTUNE_LAYOUTS = ("transposed",)\n' + PLAIN.format(expr="x"), "r.py")
    with pytest.raises(ProblemLoadError, match="unknown layout 'transposed'; use contiguous"):
        contract_for(bad, "as-produced", "finding")


def test_the_contract_record_keeps_findings_accuracy_kernelbench_and_the_clause():
    details = {"contract": {"layouts": ["contiguous"], "beyond": "finding"}, "findings": [{"clause": "layout x"}],
               "kernelbench": {"verdict": "correct"}, "clause": "declared inputs", "timing": {"k": 8}}
    rec = contract_record(details)
    assert rec is not None and rec["beyond"] == "finding" and rec["findings"] == [{"clause": "layout x"}]
    assert rec["kernelbench"] == {"verdict": "correct"} and rec["clause"] == "declared inputs" and "timing" not in rec
    assert contract_record({"timing": {}}) is None


# ------------------------------------------------------------------------------------------------ KernelBench
def test_kernelbench_trial_seeds_are_its_own():
    torch.manual_seed(42)  # src/kernelbench/eval.py run_and_check_correctness
    expected = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    assert trial_seeds(42, 5) == expected


def test_kernelbench_verdicts_at_its_tolerances():
    kb = PROTO.kernelbench
    ref = torch.ones(100)
    assert judge_trial(ref + 5e-5, ref, kb) == {"verdict": "correct", "v0": "correct", "max_difference": pytest.approx(
        5e-5, rel=1e-2)}
    off = judge_trial(ref + 1e-3, ref, kb)
    assert off["verdict"] == "incorrect" and off["v0"] == "correct"  # inside v0's 1e-2, outside today's 1e-4
    assert judge_trial(torch.ones(99), ref, kb)["verdict"] == "incorrect"
    assert judge_trial(ref.double(), ref, kb)["verdict"] == "runtime error"
    nan = ref.clone()
    nan[0] = math.nan
    assert judge_trial(nan, ref, kb)["verdict"] == "incorrect"


# ------------------------------------------------------------------------------------------------ the store
def test_the_database_refuses_a_result_with_findings_under_a_strict_contract(tmp_path):
    from test_store_schema import make_result, make_run, new_store, nonce_for  # the schema tests' builders

    from pytest_autotune.errors import ValidatorRefusal

    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    finding = [{"clause": "layout transpose", "input": "{seed=1}", "what": "wrong", "fix": "x"}]
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(make_result(run, contract={"beyond": "refuse", "findings": finding}),
                            nonce=nonce_for(run.run_id))
    assert info.value.rule == "strict_without_findings"
    store.record_result(make_result(run, 1, contract={"beyond": "finding", "findings": finding}),
                        nonce=nonce_for(run.run_id))
    store.record_result(make_result(run, 2, contract={"beyond": "refuse", "findings": []}),
                        nonce=nonce_for(run.run_id))
    assert [r["contract"] is not None for r in store.results()] == [True, True]
    store.close()


def test_a_wrong_answer_reads_as_wrong_and_a_narrower_type_as_inaccurate():
    """A LeakyReLU returned for a ReLU is 1% off in rms, inside the 1/64 a rounding error could never reach, yet a
    third of its elements are wrong: the refusal says "outside tolerance" and asks for indexing, not precision."""
    x = torch.randn(65536, generator=gen(13))
    ref, oracle = torch.relu(x), torch.relu(x.double())
    leaky = F.leaky_relu(x, 0.01)
    cmp = compare_outputs(leaky, ref, PROTO, oracle=oracle)
    assert not cmp.ok and cmp.kind == "mismatch" and "outside tolerance" in cmp.reason
    assert cmp.details["wrong_fraction"] > 0.01
    narrow = compare_outputs(torch.relu(x.to(torch.bfloat16)).float() * 1.001, ref, PROTO, oracle=oracle)
    assert not narrow.ok and narrow.kind == "accuracy"
