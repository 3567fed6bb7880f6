"""Device memory planned across an item's processes (measure/memory.py, item_memory.py): the plan's
arithmetic, the streams that let a sandbox hold one input set at a time, the probes' domain, and one CPU session
with a declared device memory (``--autotune-device-memory``) in which an item runs in half-rounds with one input
set per sample and another is refused before anything runs, naming the bytes it needs against the bytes free."""

from __future__ import annotations

import json
from pathlib import Path

import e2e_files as F
import pytest
import torch

from conftest import REPO, fast_protocol_text
from pytest_autotune.gates.probe_domain import bounded, max_magnitude
from pytest_autotune.gates.probes import explicit_recipes
from pytest_autotune.measure.memory import (
    GIB,
    LAYOUT_BUILD,
    CallFootprint,
    DeviceMemory,
    DoesNotFit,
    parse_bytes,
    plan_memory,
    timing_need,
)
from pytest_autotune.measure.sampling import memory_cap
from pytest_autotune.problems.inputs import iter_stream, materialize_stream
from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile

MIB = 1 << 20


def h100(free_gib: float = 79.0) -> DeviceMemory:
    total = 80 * GIB
    return DeviceMemory(free_bytes=int(free_gib * GIB), total_bytes=total, headroom_bytes=int(0.05 * total),
                        process_bytes=GIB, what="H100")


def test_a_published_relu_fits_an_h100_with_two_groups_of_one_set_and_nothing_given_up() -> None:
    # KernelBench level1/19_ReLU: 4096 x 393216 float32 in and out (6 GiB each)
    fp = CallFootprint(input_bytes=6 * GIB, output_bytes=6 * GIB)
    plan = plan_memory(fp, h100(), k_wanted=1)
    assert plan.budgeted and plan.groups_held == 2 and plan.sets_cap is None and plan.golden_concurrent
    assert plan.layouts == ("contiguous", "offset", "transpose", "stride") and plan.patterns
    assert max(plan.needs.values()) <= plan.available_bytes
    # every stage's peak fits: the two timing sandboxes and the controller's verification together
    assert timing_need(fp, GIB, 1, 2) <= plan.available_bytes
    # ... and k as large as a 3 ms sample could want is capped at what fits (the reference takes ~4 ms there)
    capped = plan_memory(fp, h100(), k_wanted=200)
    assert capped.sets_cap == 1 and capped.calibration_sets == 1


def test_sixteen_gib_inputs_fall_back_to_half_rounds_and_sequential_golden_outputs() -> None:
    # level1/45_Average_Pooling_2D: a 16 GiB input, a 0.13 GiB output
    fp = CallFootprint(input_bytes=16 * GIB, output_bytes=int(0.13 * GIB))
    plan = plan_memory(fp, h100(), k_wanted=8)
    assert plan.groups_held == 1 and plan.sets_cap == 1
    assert any("half-rounds" in n for n in plan.notes)
    assert plan.needs["timing"] <= plan.available_bytes < timing_need(fp, GIB, 1, 2)
    # the probes' strided layout (a buffer twice the input) fits only with the golden output computed after the
    # candidate's call: every layout is kept, and the golden outputs wait (the probes' coverage comes first)
    assert plan.layouts == tuple(LAYOUT_BUILD) and not plan.golden_concurrent and plan.release_between_calls
    assert plan.needs["probes"] <= plan.available_bytes
    # on a device with 58 GiB free, a value pattern's temporaries (mixed_magnitude's int64 exponents: 4 inputs'
    # worth with the draw) do not fit beside the call: the probes are skipped, and say so
    tight = plan_memory(fp, h100(free_gib=58), k_wanted=8)
    assert not tight.golden_concurrent and tight.release_between_calls and not tight.patterns
    assert any(n.startswith("probes skipped") for n in tight.notes)


def test_a_problem_that_cannot_fit_gets_one_error_naming_bytes_needed_and_free() -> None:
    fp = CallFootprint(input_bytes=40 * GIB, output_bytes=40 * GIB)
    with pytest.raises(DoesNotFit) as e:
        plan_memory(fp, h100())
    msg = str(e.value)
    assert e.value.needed > e.value.available
    assert "GiB of device memory" in msg and "is free on H100" in msg and "AUTOTUNE_SIZES" in msg


def test_the_runtime_cap_counts_the_groups_a_sandbox_holds() -> None:
    replies = {"A": {"memory": {"set_bytes": GIB, "free_bytes": 40 * GIB}}}
    assert memory_cap(replies, groups=1) == 2 * memory_cap(replies, groups=2)


@pytest.mark.parametrize("text, value", [("40GiB", 40 * GIB), ("512 MiB", 512 * MIB), ("80GB", 80 * 10**9),
                                         ("1e9", 10**9)])
def test_sizes_parse(text: str, value: int) -> None:
    assert parse_bytes(text) == value


def test_bad_sizes_name_the_fix() -> None:
    with pytest.raises(ValueError, match="write e.g. 40GiB"):
        parse_bytes("lots")


def _problem(path: Path) -> LoadedProblem:
    return LoadedProblem.load(SourceFile.read(path))


def test_a_stream_built_one_set_at_a_time_is_the_stream_built_at_once(tmp_path: Path) -> None:
    p = tmp_path / "relu.py"
    p.write_text(F.RELU)
    problem = _problem(p)
    whole = materialize_stream(problem, {"seed": 7, "count": 4})
    lazy = []
    for xs in iter_stream(problem, {"seed": 7, "count": 4}):
        torch.randn(16)  # whatever runs between two sets (a call) draws nothing from the stream
        lazy.append(xs)
    assert len(lazy) == 4 and all(torch.equal(a[0], b[0]) for a, b in zip(whole, lazy))
    # a problem whose get_inputs() re-seeds torch gets per-set seeds in both
    reseeding = tmp_path / "reseed.py"
    reseeding.write_text(F.RELU.replace("    return [torch.randn(batch_size, dim)]",
                                        "    torch.manual_seed(1)\n    return [torch.randn(batch_size, dim)]"))
    rp = _problem(reseeding)
    whole = materialize_stream(rp, {"seed": 7, "count": 3})
    lazy = list(iter_stream(rp, {"seed": 7, "count": 3}))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(whole, lazy))


def test_probe_magnitudes_stay_where_a_sum_of_squares_is_finite(tmp_path: Path) -> None:
    p = tmp_path / "relu.py"
    p.write_text(F.RELU)
    problem = _problem(p)
    big = [{"tensor": True, "floating": True, "dtype": "float32", "shape": [4096, 393216]}]
    cap = max_magnitude("overflow-safe", problem, big)
    assert cap is not None and 1e13 < cap < 1e15
    n = 4096 * 393216
    assert n * cap ** 2 <= torch.finfo(torch.float32).max / 16 * 1.0001
    # protocols 1-5 ("any") and problems that declare their own domain keep the old, unbounded scales
    assert max_magnitude("any", problem, big) is None
    declared = tmp_path / "declared.py"
    declared.write_text(F.RELU + '\nAUTOTUNE_INPUT_DOMAIN = "nonnegative"\n')
    assert max_magnitude("overflow-safe", _problem(declared), big) is None
    # 16-bit inputs accumulate in float32, within their own range
    half = max_magnitude("overflow-safe", problem, [{**big[0], "dtype": "float16"}])
    assert half is not None and half <= torch.finfo(torch.float16).max / 64
    assert bounded({"name": "large", "scale": 1e30}, cap)["scale"] == cap / 8  # type: ignore[index]
    assert bounded({"name": "constant", "scale": 1e30}, cap)["scale"] == cap  # type: ignore[index]
    assert bounded({"name": "negative"}, cap) == {"name": "negative"}


def test_explicit_probes_keep_a_strided_input_where_the_plan_allows_one() -> None:
    sig = [{"tensor": True, "floating": True, "dtype": "float32", "shape": [4, 4]}]
    layouts = [r.get("layout") for r in explicit_recipes(sig, 0, ("contiguous", "offset"))]
    assert ["offset"] in layouts
    assert not any(r.get("layout") for r in explicit_recipes(sig, 0, ("contiguous",)))


# ------------------------------------------------------------------------------------------- one CPU session

BIG_RELU = F.RELU.replace("dim = 4096", "dim = 32768")  # 8 MiB in, 8 MiB out: cannot fit in 7 MiB


@pytest.fixture(scope="module")
def planned_session(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``--autotune-device-memory=7MiB`` on the CPU: relu (1 MiB in, 1 MiB out) fits only in half-rounds with one
    set per sample, its golden outputs computed after each candidate call (the probes' strided layout fits only
    so); big_relu (8 + 8 MiB) does not fit at all."""
    import subprocess
    import sys

    base = tmp_path_factory.mktemp("memplan")
    (base / "protocol.toml").write_text(fast_protocol_text())
    for rel, text in (("suite/relu.py", F.RELU), ("suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP),
                      ("suite/big_relu.py", BIG_RELU), ("suite/candidates/big_relu/clamp.py", F.CAND_RELU_CLAMP)):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--autotune", "--autotune-exploratory",
         "--autotune-aa", "--problems=suite", "--autotune-device-memory=7MiB", "--autotune-json=r.json",
         "--autotune-db=r.db", "-q", "-k", "suite and (clamp or reference-aa)", "--rootdir", str(base)],
        cwd=base, capture_output=True, text=True, timeout=600)
    report = json.loads((base / "r.json").read_text())
    return {"items": {(i["problem"], i["candidate"]): i for i in report["items"]}, "out": out.stdout + out.stderr}


def test_an_item_that_fits_only_in_half_rounds_is_measured_and_its_timed_outputs_checked(planned_session) -> None:
    it = planned_session["items"][("relu", "clamp")]
    assert it["verdict"] == "accepted", planned_session["out"][-3000:]
    mem = it["details"]["memory"]
    assert mem["groups_held"] == 1 and mem["sets_cap"] == 1 and "stride" in mem["layouts"]
    assert not mem["golden_concurrent"] and mem["release_between_calls"]
    assert it["details"]["timing"]["calls_per_sample"] == 1
    assert it["details"]["timing"]["calibration"]["memory"] == {"groups_held": 1, "sets_cap": 1}
    assert it["details"]["verified_rounds"], "the timed outputs of half-rounds were checked against golden outputs"
    probes = it["details"]["probes"]
    # the explicit recipes: six value patterns, then one a non-contiguous layout the plan lets the probes build (inside
    # the contract or beyond it: gates/probes.py explicit_recipes)
    strided = [lay for lay in probes["layouts"] + probes.get("beyond_contract_layouts", []) if lay != "contiguous"]
    assert probes["status"] == "passed" and probes["explicit"] == 6 + len(strided), probes
    assert any("half-rounds" in w for w in it["warnings"])
    # each stage's need was checked against the memory free when it started (item_memory.stage_start)
    stages = it["details"]["memory_stages"]
    assert {"correctness", "probes", "timing"} <= set(stages)
    assert all(0 < s["need_bytes"] <= s["free_bytes"] for s in stages.values())


def test_an_item_that_cannot_fit_is_an_error_naming_its_bytes_before_anything_runs(planned_session) -> None:
    it = planned_session["items"][("big_relu", "clamp")]
    assert it["verdict"] == "error" and it["gate"] == "memory"
    assert "needs" in it["reason"] and "MiB of device memory" in it["reason"] and "MiB is free on cpu" in it["reason"]
    assert "sandbox_start_s" not in it["details"], "no sandbox started"
    assert "it fits at batch_size = " in it["reason"], "the sizes that would fit are named"
    assert "Traceback" not in it["reason"]


def test_aa_items_skip_the_probes_of_the_reference_against_itself(planned_session) -> None:
    it = planned_session["items"][("relu", "reference-aa")]
    assert it["verdict"] == "accepted", planned_session["out"][-3000:]
    assert it["details"]["probes"] == {"status": "disabled", "reason": "A/A: the candidate is the reference"}


def test_the_protocol_plans_memory_and_bounds_probe_magnitudes() -> None:
    from pytest_autotune.protocol import load_protocol

    p = load_protocol(REPO / "protocol.toml")
    assert p.memory.headroom > 0 and p.memory.process_overhead_mb >= 512
    assert p.probes.magnitudes == "overflow-safe"
