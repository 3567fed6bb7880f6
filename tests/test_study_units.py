"""Study machinery without pytest sessions (docs/guide/studies.md): registry entries and the git pre-registration check,
trajectories, treatment delivery, saturation and the other verdicts, the plumbing audit, search spaces and
templates, re-measure reports and plots. Every defence has the cheat that tries to get around it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_autotune import cli
from pytest_autotune.errors import AutotuneUsageError
from pytest_autotune.protocol import load_protocol
from pytest_autotune.study.attempts import Attempt
from pytest_autotune.study.audit import audit_lines
from pytest_autotune.study.registry import (
    RegistryError,
    StudyEntry,
    check_registration,
    entry_sha256,
    parse_registry,
)
from pytest_autotune.study.remeasure import RemeasurePair, RemeasureReport, claim, original_options
from pytest_autotune.study.search.space import SearchSpace, load_template, parse_fix
from pytest_autotune.study.trajectory import build_trajectory, format_seconds
from pytest_autotune.study.verdict import judge

REPO = Path(__file__).resolve().parents[1]
PROTO = load_protocol(REPO / "protocol.toml")
BAND = PROTO.bands.saturation

STUDY_TOML = """[study.s1]
hypothesis = "the agent finds faster kernels than random search"
arms = ["agent", "random"]
metric = "best_speedup"
direction = "higher"
min_usable = 2
success_bar = 1.10
pairs = 1
"""


def entry(**kw) -> StudyEntry:
    raw = parse_registry(STUDY_TOML, "studies.toml")["study"]["s1"]
    raw.update(kw)
    return StudyEntry.parse("s1", raw, "studies.toml")


def att(arm: str, it: int, speedup=None, *, problem="p", digest=None, verdict=None, cand_s=1e-3, ci=0.03,
        order=None, exploratory=False) -> Attempt:
    ok = speedup is not None
    return Attempt(arm=arm, iteration=it, problem=problem, candidate=f"{arm}{it}",
                   candidate_sha256=digest if digest is not None else f"{arm}-{problem}-{it}".ljust(64, "0")[:64],
                   verdict=verdict or ("accepted" if ok else "rejected"), gate=None if ok else "correctness",
                   kind="kernel", run_id="r", order=order if order is not None else it,
                   speedup=speedup, ci_low=speedup * (1 - ci) if ok else None, ci_high=speedup * (1 + ci) if ok else None,
                   candidate_s=cand_s if ok else None, baseline_s=cand_s * speedup if ok else None,
                   exploratory=exploratory)


REG = {"id": 1, "status": "registered", "detail": "committed", "registry": "studies.toml"}


DIGEST = entry_sha256(parse_registry(STUDY_TOML, "x")["study"]["s1"])


def verdict_of(attempts, e=None, *, registration="same", logs=None):
    """The verdict with the study registered (``"same"``), its entry edited since (``"edited"``), or no
    registration recorded (None)."""
    reg = None if registration is None else {**REG, "entry_sha256": DIGEST}
    current = "f" * 64 if registration == "edited" else DIGEST
    return judge("s1", attempts, PROTO, entry=e or entry(), entry_sha256=current, registration=reg, logs=logs or {})


# ---------------------------------------------------------------------------------------------- registry


def test_entry_digest_ignores_formatting_and_sees_every_value():
    a = parse_registry(STUDY_TOML, "a")["study"]["s1"]
    b = parse_registry("# a comment\n" + STUDY_TOML.replace(" = ", "=").replace("1.10", "1.1"), "b")["study"]["s1"]
    assert entry_sha256(a) == entry_sha256(b)
    c = parse_registry(STUDY_TOML.replace("1.10", "1.05"), "c")["study"]["s1"]
    assert entry_sha256(c) != entry_sha256(a)


@pytest.mark.parametrize("edit, message", [
    ({"arms": ["agent"]}, "two different names"),
    ({"arms": ["a", "a"]}, "two different names"),
    ({"metric": "vibes"}, "not supported"),
    ({"direction": "up"}, "direction must be"),
    ({"min_usable": 0}, "at least 1"),
    ({"min_usable": {"agent": 2}}, "one integer per arm"),
    ({"success_bar": 0.9}, ">= 1.0"),
    ({"pairs": 0}, "number of problems"),
    ({"problems": ["p", "q"]}, "pairs = 1"),
    ({"colour": "blue"}, "unknown key 'colour'"),
    ({"hypothesis": "yes"}, "at least 10 characters"),
])
def test_a_registration_must_state_the_comparison(edit, message):
    with pytest.raises(RegistryError, match=message):
        entry(**edit)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True,
                   capture_output=True)


def test_the_pre_registration_check_reads_git(tmp_path):
    assert check_registration(tmp_path, "studies.toml", "study", "s1").status == "unregistered"  # no file
    (tmp_path / "studies.toml").write_text(STUDY_TOML)
    c = check_registration(tmp_path, "studies.toml", "study", "s1")
    assert c.status == "uncommitted" and "not in a git checkout" in c.detail  # nothing proves when it was written
    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "empty")
    c = check_registration(tmp_path, "studies.toml", "study", "s1")
    assert c.status == "uncommitted" and "not committed" in c.detail
    git(tmp_path, "add", "studies.toml")
    git(tmp_path, "commit", "-q", "-m", "register")
    c = check_registration(tmp_path, "studies.toml", "study", "s1")
    assert c.status == "registered" and len(c.git_commit) == 40 and c.entry_sha256 == entry_sha256(c.entry)
    assert check_registration(tmp_path, "studies.toml", "study", "other").status == "unregistered"
    # cheat: edit the entry after committing it (a better-looking bar once results are in) and not commit
    (tmp_path / "studies.toml").write_text(STUDY_TOML.replace("1.10", "1.01"))
    c2 = check_registration(tmp_path, "studies.toml", "study", "s1")
    assert c2.status == "uncommitted" and "differs from the one committed" in c2.detail
    # committed later: registered now, but with another digest than the one recorded at the first result
    git(tmp_path, "commit", "-qam", "edit")
    c3 = check_registration(tmp_path, "studies.toml", "study", "s1")
    assert c3.status == "registered" and c3.entry_sha256 != c.entry_sha256


# ---------------------------------------------------------------------------------------------- trajectories


def test_trajectory_best_so_far_and_where_the_best_was_reached():
    t = build_trajectory("a", "p", [att("a", 1, 1.5), att("a", 2), att("a", 3, 2.0), att("a", 4, 1.9)])
    assert [p.best_so_far.speedup if p.best_so_far else None for p in t.points] == [1.5, 1.5, 2.0, 2.0]
    assert (t.usable, t.total) == (3, 4) and t.best.speedup == 2.0
    assert t.reached_best_at(BAND) == 3  # 1.5 is not within 10% of 2.0
    assert build_trajectory("a", "p", [att("a", 1, 1.95), att("a", 2, 2.0)]).reached_best_at(BAND) == 1
    # attempts without a recorded iteration follow in recording order
    u = build_trajectory("a", "p", [att("a", None, 1.0, order=5), att("a", 1, 1.2), att("a", None, 1.1, order=2)])
    assert [p.iteration for p in u.points] == [1, 2, 3] and u.points[1].attempts[0].speedup == 1.1
    assert format_seconds(2.48e-3) == "2.48 ms" and format_seconds(3.1e-7) == "310 ns"


# ---------------------------------------------------------------------------------------------- verdicts


def both(agent, random_, **kw):
    return [att("agent", i + 1, s, **kw) for i, s in enumerate(agent)] + \
           [att("random", i + 1, s, **kw) for i, s in enumerate(random_)]


def test_saturated_when_both_arms_peak_at_iteration_one_at_a_shared_wall():
    r = verdict_of(both([2.0, 2.02, 1.9], [1.98, 1.95, 2.0]))
    assert r.verdict == "saturated at 1 ms" and r.label == r.verdict and "no difference" not in r.render()
    assert r.pairs[0].saturated


def test_not_saturated_when_an_arm_improves_later_and_the_comparison_decides():
    r = verdict_of(both([1.2, 1.5, 2.4], [1.9, 2.0, 2.0]))
    assert r.verdict == "supported" and r.geomean_ratio == pytest.approx(1.2)
    # above a lenient success bar, but inside the ±10% band: not a difference this harness can see
    r = verdict_of(both([1.2, 1.5, 2.16], [1.9, 2.0, 2.0]), entry(success_bar=1.05))
    assert r.verdict == "not supported" and "noise band" in " ".join(r.reasons)
    r = verdict_of(both([1.0, 1.0, 1.1], [1.9, 2.0, 2.0]))
    assert r.verdict == "not supported" and "below the success bar" in " ".join(r.reasons)


def test_direction_lower_inverts_the_ratio():
    r = verdict_of(both([1.0, 1.0, 1.1], [1.9, 2.0, 2.5]), entry(direction="lower"))
    assert r.verdict == "supported"


def test_an_arm_below_its_usability_bar_is_never_compared():
    r = verdict_of(both([3.0, None, None], [1.0, 1.1, 1.2]))
    assert r.verdict.startswith("below usability bar (arm agent: 1 of 3 iterations usable, registered bar 2")
    assert not r.pairs  # no ratio was computed
    # the protocol's floor: 2 usable of 5 meets the registered bar 2 but not 50%
    r = verdict_of(both([3.0, 2.0, None, None, None], [1.0, 1.1, 1.2, 1.1, 1.1]))
    assert "below the protocol's 50%" in r.verdict


def test_identical_candidate_sets_void_the_comparison():
    """Cheat: the 'treatment' arm re-submits the control's candidates under its own label."""
    digests = ["a" * 64, "b" * 64, "c" * 64]
    atts = [att("agent", i + 1, 1.5, digest=d) for i, d in enumerate(digests)] + \
           [att("random", i + 1, 1.5, digest=d) for i, d in enumerate(reversed(digests))]
    r = verdict_of(atts)
    assert r.verdict.startswith("void: treatment not delivered (arms agent and random measured byte-identical")
    atts = [a for a in atts if a.candidate_sha256 != "c" * 64] + [att("random", 9, 1.5, digest="d" * 64)]
    assert not verdict_of(atts).verdict.startswith("void")  # overlapping sets are fine


def test_arm_markers_in_call_logs_prove_delivery():
    """Cheat: the 'tool' arm's logs show the tool was never offered (marker missing), or the arms were mixed."""
    def log(arm, marker_every=True, n=4, other=None):
        lines = []
        for i in range(n):
            content = f"answer {arm} {i}"
            system = f"you have the TOOL:{arm}" if (marker_every or i) else "no tool"
            if other:
                system += f" TOOL:{other}"
            lines.append(json.dumps({"arm": arm, "request": {"messages": [{"role": "system", "content": system}],
                                                             "max_tokens": 1000},
                                     "response": {"choices": [{"finish_reason": "stop",
                                                               "message": {"content": content}}],
                                                  "usage": {"completion_tokens": 10 + i}}}))
        return audit_lines(lines, f"{arm}.jsonl", PROTO.studies)

    e = entry(markers={"agent": "TOOL:agent", "random": "TOOL:random"})
    atts = both([1.0, 1.2, 1.5], [1.0, 1.1, 1.0])
    ok = verdict_of(atts, e, logs={"agent": log("agent"), "random": log("random")})
    assert ok.delivery.delivered and not ok.verdict.startswith("void")
    bad = verdict_of(atts, e, logs={"agent": log("agent", marker_every=False), "random": log("random")})
    assert bad.verdict.startswith("void") and "missing from 1 of 4 call(s)" in bad.verdict
    mixed = verdict_of(atts, e, logs={"agent": log("agent"), "random": log("random", other="agent")})
    assert "carry another arm's marker" in mixed.verdict
    missing = verdict_of(atts, e, logs={"agent": log("agent")})
    assert "no call log was given" in missing.verdict


def test_incomplete_when_fewer_pairs_than_registered():
    e = entry(pairs=2, problems=["p", "q"], min_usable=1)
    r = verdict_of(both([1.5, 1.6], [1.0, 1.1]), e)
    assert r.verdict == "incomplete (1 of 2 pairs)" and "missing: q" in r.reasons[0]


def test_registration_problems_make_the_verdict_exploratory_everywhere():
    atts = both([1.2, 1.5, 2.4], [1.9, 2.0, 2.0])
    r = verdict_of(atts, registration=None)
    assert r.label == "exploratory: supported" and r.to_json()["exploratory"] is True
    r = verdict_of(atts, registration="edited")
    assert r.exploratory and "edited after the study's first result" in r.exploratory_reasons[0]
    r = judge("s1", atts, PROTO, entry=entry(), entry_sha256="1" * 64,
              registration={**REG, "status": "uncommitted", "detail": "not committed", "entry_sha256": "1" * 64},
              logs={})
    assert r.label.startswith("exploratory: ") and "not registered before its first result" in r.render()
    # rows measured under an unfrozen protocol
    r = verdict_of(both([1.2, 1.5, 2.4], [1.9, 2.0, 2.0], exploratory=True))
    assert r.exploratory and "unfrozen protocol" in r.exploratory_reasons[0]


def test_only_registered_arms_problems_and_iterations_are_compared():
    """Cheats: add a third arm that happened to win; keep iterating past the registered budget until it wins."""
    atts = both([1.2, 1.3, 1.2, 3.0], [1.2, 1.3, 1.25, 1.3]) + [att("lucky", 1, 9.0)] + \
        [att("agent", 1, 9.0, problem="other")]
    r = verdict_of(atts, entry(iterations=3))
    assert any("arm lucky is not a registered arm" in x for x in r.excluded)
    assert any("after the registered 3 iterations" in x for x in r.excluded)
    assert r.verdict == "saturated at 1 ms"  # the 4th iteration's 3.0x is not part of the comparison


def test_plumbing_suspect_marks_the_label():
    lines = [json.dumps({"arm": "agent", "choices": [{"finish_reason": "length", "message": {"content": str(i)}}],
                         "usage": {"completion_tokens": 4096}}) for i in range(10)]
    r = verdict_of(both([1.2, 1.5, 2.4], [1.9, 2.0, 2.0]), logs={"agent": audit_lines(lines, "a", PROTO.studies)})
    assert r.label == "supported [plumbing suspect]"


# ---------------------------------------------------------------------------------------------- audit


def _call(finish="stop", tokens=100, **kw):
    return json.dumps({"choices": [{"finish_reason": finish, "message": {"content": "x"}}],
                       "usage": {"completion_tokens": tokens}, **kw})


def test_audit_flags_truncation_and_a_shared_ceiling_and_passes_a_clean_log(tmp_path):
    truncated = [_call("length", 4096) for _ in range(143)] + [_call("stop", 900) for _ in range(5)]
    (tmp_path / "bad.jsonl").write_text("\n".join(truncated) + "\n")
    (tmp_path / "good.jsonl").write_text("\n".join(_call("stop", 100 + i) for i in range(148)) + "\n")
    r = audit_lines(truncated, "bad", PROTO.studies)
    assert r.flagged and r.overall.truncated == 143 and r.overall.ceiling_tokens == 4096
    assert any("stopped at exactly 4096 completion tokens" in f for f in r.flags())
    assert cli.main(["audit", str(tmp_path / "bad.jsonl")]) == 1
    assert cli.main(["audit", str(tmp_path / "good.jsonl"), "--json", str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["logs"][0]["flagged"] is False


def test_audit_sees_a_cap_without_finish_reason_errors_timeouts_and_unreadable_lines():
    cap = [json.dumps({"request": {"max_tokens": 512}, "response": {"choices": [{"message": {"content": "x"}}],
                                                                   "usage": {"completion_tokens": 512}}})] * 10
    assert any("ceiling" in f for f in audit_lines(cap, "cap", PROTO.studies).flags())
    errs = [json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}, "status": 429})] * 2 + \
        [json.dumps({"error": "Read timed out"}), json.dumps({"response": {"choices": [{"finish_reason": "stop"}]},
                                                              "latency_ms": 900_000})] + [_call()] * 16
    r = audit_lines(errs + ["not json", "{\"hello\": 1}"], "errs", PROTO.studies)
    assert (r.overall.errors, r.overall.timeouts) == (2, 2) and r.unreadable == [21, 22]
    assert {f.split(":")[0] for f in r.flags()} == {"errors", "timeouts", "unreadable"}


# ---------------------------------------------------------------------------------------------- search


def test_random_sampling_is_seeded_distinct_and_bounded():
    space = SearchSpace((("a", (1, 2, 3)), ("b", ("x", "y")), ("c", (True, False))))
    assert space.size == 12 and len({json.dumps(p, sort_keys=True) for p in space.points()}) == 12
    s1 = space.sample(7, seed=5)
    assert s1 == space.sample(7, seed=5) and s1 != space.sample(7, seed=6)
    assert len({json.dumps(p, sort_keys=True) for p in s1}) == 7 and all(space.contains(p) for p in s1)
    assert len(space.sample(12, seed=1)) == 12
    with pytest.raises(AutotuneUsageError, match="exceeds the search space"):
        space.sample(13, seed=1)
    small = space.restricted(parse_fix(["a=2", "b='y'"]))
    assert small.size == 2 and all(p["a"] == 2 and p["b"] == "y" for p in small.points())
    with pytest.raises(AutotuneUsageError, match="not one of"):
        space.restricted({"a": 5})
    with pytest.raises(AutotuneUsageError, match="no dimension"):
        space.restricted({"z": 1})


def test_templates_are_read_without_running_them_and_instantiate_exactly(tmp_path):
    t = tmp_path / "t.py"
    t.write_text('raise SystemExit("a template is never executed by the harness")\n'
                 'AUTOTUNE_SEARCH_SPACE = {"v": ["a", "b"], "n": [1, 2]}\n'
                 'PARAMS = {\n    "v": "a",\n    "n": 1,\n}\n'
                 "X = PARAMS['v']\n")
    tpl = load_template(t)
    assert tpl.space.size == 4 and tpl.default == {"v": "a", "n": 1} and tpl.params_lines == (3, 6)
    text = tpl.instantiate({"v": "b", "n": 2}, "point 1")
    assert "PARAMS = {'v': 'b', 'n': 2}  # point 1\nX = PARAMS['v']\n" in text
    with pytest.raises(AutotuneUsageError):
        tpl.instantiate({"v": "c", "n": 2}, "bad")
    for body, message in [("PARAMS = {}\n", "no module-level AUTOTUNE_SEARCH_SPACE"),
                          ("AUTOTUNE_SEARCH_SPACE = {'v': [open('x')]}\nPARAMS = {}\n", "must be a literal"),
                          ("AUTOTUNE_SEARCH_SPACE = {'v': [1, 1]}\nPARAMS = {'v': 1}\n", "twice"),
                          ("AUTOTUNE_SEARCH_SPACE = {'v': [1]}\nPARAMS = {'v': 2}\n", "one point")]:
        t.write_text(body)
        with pytest.raises(AutotuneUsageError, match=message):
            load_template(t)


# ---------------------------------------------------------------------------------------------- remeasure


def test_remeasure_report_agreement_and_deviation():
    assert (claim(1.1, 1.3), claim(0.7, 0.9), claim(0.95, 1.05)) == ("faster", "slower", "indistinguishable")
    pairs = [RemeasurePair("n1", "p", "a", 2.0, (1.9, 2.1), "accepted", None, 2.1, (2.0, 2.2), True),
             RemeasurePair("n2", "p", "b", 1.0, (0.95, 1.05), "accepted", None, 1.2, (1.1, 1.3), True),
             RemeasurePair("n3", "p", "c", 1.5, (1.4, 1.6), "rejected", "integrity")]
    r = RemeasureReport("run-A", "run-B", "cpu", pairs)
    assert r.agreeing == 1 and r.stats()["median"] == pytest.approx(0.125) and r.stats()["max"] == pytest.approx(0.2)
    assert "verdicts agree: 1/3" in r.render()
    argv = json.dumps(["pytest", "--autotune", "--problems", "x/y", "--candidates=c", "--autotune-aa", "-k", "z"])
    assert original_options(argv) == ["--problems=x/y", "--candidates=c", "--autotune-aa"]


# ---------------------------------------------------------------------------------------------- plots


def test_every_plot_writes_a_png(tmp_path):
    from pytest_autotune.report import plots

    items = [{"problem": "p", "candidate": "a", "verdict": "accepted", "gate": None, "speedup": 1.8,
              "ci": [1.7, 1.9], "strawman_speedup": 2.5, "baseline": "fused", "transfer_ratio": 0.8,
              "details": {"transfer": {"origin_speedup": 2.25, "origin_device": "cpu"}}},
             {"problem": "p", "candidate": "bad", "verdict": "rejected", "gate": "correctness", "speedup": None},
             {"problem": "p", "candidate": "reference-aa", "verdict": "accepted", "speedup": 0.99, "ci": [0.97, 1.01]},
             {"problem": "q", "candidate": "reference-aa", "verdict": "accepted", "speedup": 1.03, "ci": [1.01, 1.05]}]
    report = verdict_of(both([1.2, None, 1.5], [1.9, 2.0, 2.0])).to_json()
    for path in (plots.plot_speedups(items[:2], tmp_path / "s.png"), plots.plot_aa(items, tmp_path / "aa.png"),
                 plots.plot_transfer(items, tmp_path / "t.png"), plots.plot_study(report, tmp_path / "st.png")):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, path
    with pytest.raises(AutotuneUsageError, match="--autotune-aa"):
        plots.plot_aa(items[:2], tmp_path / "none.png")


def test_held_out_verdict_follows_the_origin_ci_and_the_held_out_speedup():
    """study/transfer.py: an origin whose CI holds 1.0x is not certified, whatever the held-out leg reads; a
    certified one transfers at 1.0x or more there (tests/test_heldout.py checks each item's verdict against this
    rule, since load moves the readings it takes)."""
    from pytest_autotune.study.transfer import Origin, Transfer

    def verdict(ci_low: float, heldout: float) -> str:
        origin = Origin("results:1", "cpu", 3.0, ci_low, 4.0, "r", "this store")
        return Transfer(origin, heldout, heldout / 3.0).verdict()

    assert verdict(1.2, 2.5) == "transfers" and verdict(1.2, 1.0) == "transfers"
    assert verdict(1.2, 0.99) == "does not transfer"
    assert verdict(1.0, 2.5) == verdict(0.9, 0.5) == "origin not certified (its CI includes 1.0x)"
