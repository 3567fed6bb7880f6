"""The CI comparison's pure parts (docs/guide/ci.md): the regression rule, the margin, each item outcome, the refusal to
compare across protocols / device fingerprints / torch versions, the stored-run round trip and the Markdown."""

from __future__ import annotations

import pytest

from pytest_autotune.ci.compare import (
    Numbers,
    compare_item,
    compare_numbers,
    compare_session,
    counts,
    parse_margin,
)
from pytest_autotune.ci.markdown import render
from pytest_autotune.ci.plugin import changed_keys
from pytest_autotune.ci.stored import StoredItem, StoredRun, check_compatible
from pytest_autotune.errors import AutotuneUsageError
from pytest_autotune.result import ItemOutcome, Measurement

SHA = "a" * 64
FP = {"device": "cpu", "cpu_model": "X", "logical_cpus": 2}


def outcome(cand: str, verdict: str = "accepted", nums: tuple[float, float, float] | None = (2.0, 1.9, 2.1),
            gate: str | None = None, reason: str = "ok") -> ItemOutcome:
    m = None if nums is None else Measurement(n_pairs=16, candidate_s=1e-4, baseline_s=2e-4, speedup=nums[0],
                                               ci_low=nums[1], ci_high=nums[2], ci_target_met=True,
                                               strawman_speedup=nums[0])
    return ItemOutcome(nodeid=f"s/p.py::{cand}[cpu]", kind="kernel", problem="p", candidate=cand, device="cpu",
                       verdict=verdict, gate=gate, reason=reason, measurement=m)  # type: ignore[arg-type]


def stored_item(cand: str, verdict: str = "accepted", nums: tuple[float, float, float] | None = (2.0, 1.9, 2.1),
                gate: str | None = None) -> StoredItem:
    return StoredItem("p", cand, "cpu", f"s/p.py::{cand}[cpu]", verdict, gate, "r", None if nums is None else Numbers(*nums))


def stored_run(*items: StoredItem) -> StoredRun:
    return StoredRun(run_id="r" * 32, source="test", protocol_sha256=SHA, protocol_version="2", device="cpu",
                     device_fingerprint=dict(FP), torch_version="2.13.0",
                     items={(i.problem, i.candidate, i.device): i for i in items})


@pytest.mark.parametrize("new, old, margin, expected", [
    ((2.0, 1.9, 2.1), (2.0, 1.9, 2.1), 0.0, "same"),           # unchanged
    ((1.85, 1.8, 1.95), (2.0, 1.9, 2.1), 0.0, "same"),         # moved by noise: the CIs overlap
    ((1.0, 0.95, 1.05), (2.0, 1.9, 2.1), 0.0, "regression"),   # the new CI entirely below the stored one
    ((1.8, 1.75, 1.85), (2.0, 1.9, 2.1), 0.0, "regression"),   # small but beyond noise
    ((1.8, 1.75, 1.85), (2.0, 1.9, 2.1), 0.05, "same"),        # ...which a 5% margin ignores (1.85 >= 1.805)
    ((1.7, 1.65, 1.75), (2.0, 1.9, 2.1), 0.05, "regression"),  # ...and this it does not (1.75 < 1.805)
    ((3.0, 2.9, 3.1), (2.0, 1.9, 2.1), 0.0, "improved"),
    ((1.0, 0.5, 3.0), (2.0, 1.9, 2.1), 0.0, "same"),           # a wide new CI cannot call anything
])
def test_rule(new, old, margin, expected):
    assert compare_numbers(Numbers(*new), Numbers(*old), margin) == expected


def test_rule_boundary_is_strict():
    assert compare_numbers(Numbers(1.5, 1.4, 1.9), Numbers(2.0, 1.9, 2.1)) == "same"  # touching CIs: noise


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("5", 0.05), ("0", 0.0), (" 12.5 % ", 0.125)])
def test_margin(text, value):
    assert parse_margin(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-1%", "100%", "abc", "nan"])
def test_bad_margin(text):
    with pytest.raises(ValueError):
        parse_margin(text)


def test_item_outcomes_and_messages():
    run = stored_run(stored_item("same"), stored_item("slow"), stored_item("refused"), stored_item("err"),
                     stored_item("fixed", "rejected", None, "correctness"), stored_item("gone"))
    got = {c.candidate: c for c in compare_session([
        outcome("same", nums=(2.02, 1.95, 2.1)),
        outcome("slow", nums=(1.0, 0.95, 1.05)),
        outcome("refused", "rejected", None, "correctness", "12 elements outside tolerance"),
        outcome("err", "error", None, "sandbox", "killed"),
        outcome("fixed"),
        outcome("new"),
    ], run, 0.0)}
    assert {k: c.outcome for k, c in got.items()} == {"same": "same", "slow": "regression", "refused": "refused",
                                                      "err": "error", "fixed": "now-accepted", "new": "new",
                                                      "gone": "missing"}
    assert [c.candidate for c in got.values() if c.fails] == ["slow"]
    msg = got["slow"].message
    assert "1.000x [0.950, 1.050]" in msg and "2.000x [1.900, 2.100]" in msg and "1.050 < 1.900" in msg
    assert "correctness" in got["refused"].message and "12 elements" in got["refused"].message
    assert "accepted, 2.000x" in got["refused"].message
    assert counts(list(got.values()))["missing"] == 1
    j = got["slow"].to_json()
    assert j["new"] == {"speedup": 1.0, "ci": [0.95, 1.05]} and j["stored"]["ci"] == [1.9, 2.1]


def test_unmeasured_items_are_not_compared():
    c = compare_item(outcome("a", nums=None), stored_item("a"), 0.0, "r" * 32)
    assert c.outcome == "unmeasured" and not c.fails


def test_refusals_across_protocol_device_and_torch():
    run = stored_run()
    ok = dict(protocol_sha256=SHA, protocol_version="2", device="cpu", fingerprint=dict(FP), torch_version="2.13.0")
    check_compatible(run, **ok)  # type: ignore[arg-type]
    # which device of a kind measured (a GPU pool, CUDA_VISIBLE_DEVICES) is not what decides a number
    check_compatible(run, **{**ok, "fingerprint": {**FP, "uuid": "GPU-1", "index": 3, "pci_bus_id": "x"}})  # type: ignore[arg-type]
    for change, words in [({"protocol_sha256": "b" * 64}, "protocol digest"), ({"device": "cuda"}, "this session on cuda"),
                          ({"fingerprint": {**FP, "cpu_model": "Y"}}, "cpu_model"),
                          ({"torch_version": "2.12.0"}, "torch 2.12.0")]:
        with pytest.raises(AutotuneUsageError, match=words) as e:
            check_compatible(run, **{**ok, **change})  # type: ignore[arg-type]
        assert "autotune export" in str(e.value)


def test_stored_run_round_trip_and_bad_reports():
    run = stored_run(stored_item("a"), stored_item("b", "rejected", None, "probe"))
    again = StoredRun.from_report(run.to_json(), "again")
    assert again.items == run.items and again.protocol_sha256 == SHA and again.device_fingerprint == FP
    with pytest.raises(AutotuneUsageError, match="not a pytest-autotune JSON report"):
        StoredRun.from_report({"schema": "other"}, "x.json")
    with pytest.raises(AutotuneUsageError, match="without --autotune"):
        StoredRun.from_report({"schema": "pytest-autotune/report/1", "run": {"run_id": "x"}, "items": []}, "x.json")


def test_markdown_has_old_and_new_numbers():
    run = stored_run(stored_item("a"), stored_item("b"))
    outs = [outcome("a", nums=(1.0, 0.9, 1.1)), outcome("c", nums=(1.5, 1.4, 1.6))]
    text = render(outs, compare_session(outs, run, 0.05), run, 0.05, True, "z" * 32, "cpu")
    assert "gate failed" in text and "1.000x [0.900, 1.100]" in text and "2.000x [1.900, 2.100]" in text
    assert "regression" in text and "new (not gated)" in text and "missing" in text and "(1 - 5%)" in text
    plain = render(outs, None, None, 0.0, False, "z" * 32, "cpu")
    assert "1.500x [1.400, 1.600]" in plain and "stored" not in plain


def test_changed_files_name_their_candidates():
    keys = changed_keys(["benchmarks/kernels/level1/candidates/05_softmax/fused_softmax.py",
                         "benchmarks/kernels/level1/candidates/02_relu/mlx/relu.py", "more/relu/other.py",
                         "benchmarks/kernels/level1/candidates/05_softmax/README.md",
                         "benchmarks/kernels/level1/candidates/05_softmax/cuda/softmax_triton.py",
                         "benchmarks/kernels/level1/candidates/02_relu/cpu/cpp_relu.py"])
    assert keys == {("05_softmax", "fused_softmax"), ("02_relu", "relu"), ("relu", "other"),
                    ("05_softmax", "softmax_triton"), ("02_relu", "cpp_relu")}


def test_export_writes_a_loadable_report_and_refuses_unfinished_or_unknown_runs(tmp_path, capsys):
    import json

    import jsonschema
    from test_store_schema import fill, make_run, new_store, nonce_for

    from conftest import REPO
    from pytest_autotune import cli

    schema = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())
    run = make_run()
    store = new_store(tmp_path / "results.db", run)
    fill(store, run, 3)
    db = str(tmp_path / "results.db")
    assert cli.main(["export", "latest", "--json", "--db", db]) == 2  # 'latest' is the newest *finished* run
    assert "no finished run" in capsys.readouterr().err
    assert cli.main(["export", run.run_id, "--json", "--db", db]) == 2
    assert "never closed" in capsys.readouterr().err
    store.finish_run(run.run_id, nonce_for(run.run_id))
    store.close()
    assert cli.main(["export", "nosuchrun", "--json", "--db", db]) == 2
    assert "is not in" in capsys.readouterr().err
    out = tmp_path / "baseline.json"
    assert cli.main(["export", run.run_id[:8], "--json", "--db", db, "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema)
    stored = StoredRun.from_report(report, str(out))
    assert stored.run_id == run.run_id and stored.protocol_sha256 == run.protocol_sha256
    assert stored.device_fingerprint == run.device_fingerprint and len(stored.items) == 3
    assert all(i.verdict == "accepted" and i.numbers is not None for i in stored.items.values())
    # JSON is the only format, so it is also the default: --json may be left out
    again = tmp_path / "again.json"
    assert cli.main(["export", "latest", "--db", db, "-o", str(again)]) == 0
    assert json.loads(again.read_text()) == report
