"""The shipped anchors (benchmarks/kernels/anchors, docs/guide/anchors.md) are what they say they are, and the anchor
verdicts follow their rules."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from pytest_autotune.study.anchors import Anchor, anchor_verdict, parse_anchors
from pytest_autotune.study.registry import RegistryError

REPO = Path(__file__).resolve().parents[1]
ANCHORS = REPO / "benchmarks" / "kernels" / "anchors"
ENTRIES = parse_anchors(ANCHORS / "anchors.toml")
#: the published ratios the anchors were chosen for, read from KernelBench's timing files (docs/guide/anchors.md)
CHOSEN = {"kb-l1-40-layernorm": 17.6, "kb-l1-36-rmsnorm": 1.81, "kb-l1-23-softmax": 1.30,
         "kb-l1-88-mingpt-gelu": 7.7, "kb-l1-19-relu": 0.98, "kb-l1-63-conv2d": 0.56}


def module_ints(path: Path) -> dict[str, int]:
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                out[node.targets[0].id] = value
    return out


def test_the_chosen_anchors_are_there_with_the_published_ratios():
    assert len(ENTRIES) >= 6
    for aid, ratio in CHOSEN.items():
        assert ENTRIES[aid].published_ratio == pytest.approx(ratio, rel=0.006), aid  # rounded when they were chosen


@pytest.mark.parametrize("aid", sorted(ENTRIES))
def test_each_anchor_is_kernelbench_verbatim_at_the_published_shapes(aid):
    a = ENTRIES[aid]
    problem = ANCHORS / f"{a.problem}.py"
    data = problem.read_bytes()
    original = data.split(b"\n\n# ---- pytest-autotune additions.", 1)[0]
    assert hashlib.sha256(original).hexdigest() == a.extra["kernelbench_sha256"], "not KernelBench's bytes"
    assert a.extra["kernelbench_problem"].endswith(problem.name)
    ints = module_ints(problem)
    assert {k: ints[k] for k in a.sizes} == dict(a.sizes)  # the module globals are the published sizes
    cpu = ast.literal_eval(data.decode().split("AUTOTUNE_SIZES = ", 1)[1].split("\n", 1)[0])
    assert set(cpu) == {"cpu"}, "the published sizes are what every GPU measures"
    assert a.published_ratio == pytest.approx(a.extra["published_eager_ms"] / a.extra["published_compiled_ms"],
                                              rel=2e-3)
    assert a.device == "cuda" and a.dtype == "float32" and "H100" in a.hardware
    cand = (ANCHORS / "candidates" / a.problem / f"{a.candidate}.py").read_text()
    assert 'torch.compile(self.reference, backend="inductor", mode="default")' in cand
    assert "prepare_torch_compile()" in data.decode()


def test_anchor_verdicts():
    a = ENTRIES["kb-l1-40-layernorm"]  # expected_direction = "higher"
    band = 0.10
    assert anchor_verdict(a, a.published_ratio * 1.08, "cuda", band, True).verdict == "in band (±10%)"
    assert anchor_verdict(a, a.published_ratio * 0.92, "cuda", band, False).verdict == "in band (±10%)"
    up = anchor_verdict(a, a.published_ratio * 1.5, "cuda", band, True)
    assert up.verdict == "divergent (pre-registered mechanism)" and up.relative == pytest.approx(1.5)
    # the predicted direction, but the mechanism was not committed before measuring (or was edited since)
    late = anchor_verdict(a, a.published_ratio * 1.5, "cuda", band, False, "entry edited")
    assert late.verdict == "divergent, unexplained" and "not pre-registered (entry edited)" in late.detail
    down = anchor_verdict(a, a.published_ratio * 0.5, "cuda", band, True)
    assert down.verdict == "divergent, unexplained" and "predicted higher" in down.detail
    relu = ENTRIES["kb-l1-19-relu"]  # "none": predicted in band, any divergence is unexplained
    assert anchor_verdict(relu, 0.5, "cuda", band, True).verdict == "divergent, unexplained"
    assert anchor_verdict(a, 0.4, "cpu", band, True).verdict == "dry run on cpu: not comparable"
    assert anchor_verdict(a, None, "cuda", band, True).verdict == "not measured"


def test_an_anchor_without_its_mechanism_is_refused(tmp_path):
    text = (ANCHORS / "anchors.toml").read_text()
    body = text.split("[anchor.kb-l1-19-relu]", 1)[1].split("\n[anchor.", 1)[0]
    for broken, message in [(body.replace("mechanism = ", "mechanizm = "), "missing mechanism"),
                            (body.replace('expected_direction = "none"', 'expected_direction = "sideways"'),
                             "expected_direction must be"),
                            (body.replace("published_ratio = 0.9839", "published_ratio = -1"), "positive")]:
        f = tmp_path / "anchors.toml"
        f.write_text("[anchor.x]" + broken)
        with pytest.raises(RegistryError, match=message):
            parse_anchors(f)
    assert isinstance(ENTRIES["kb-l1-19-relu"], Anchor)


def test_an_anchor_the_breaker_quarantined_reads_as_such_not_as_not_measured():
    from pytest_autotune.commands.anchors import _quarantined

    a = ENTRIES["kb-l1-40-layernorm"]
    row = {"id": 2, "run_id": "r" * 32, "study": a.study, "device": "cuda", "speedup": 24.1, "ci_low": 23.6,
           "ci_high": 24.5, "releases": []}

    class Store:
        def __init__(self, rows):
            self.rows = rows

        def quarantine_list(self):
            return self.rows

    got = _quarantined(Store([row]), a, measured=set())
    assert [g["verdict"] for g in got] == ["quarantined by the breaker"]
    assert "autotune quarantine release 2" in got[0]["detail"] and got[0]["measured_ratio"] == 24.1
    # a released row is a result by then, and a device with a result needs no quarantine verdict
    assert _quarantined(Store([{**row, "releases": [{"id": 1}]}]), a, measured=set()) == []
    assert _quarantined(Store([row]), a, measured={"cuda"}) == []
    assert _quarantined(Store([{**row, "study": "another"}]), a, measured=set()) == []
