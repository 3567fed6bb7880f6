"""The run's precision summary and its prediction (pytest_autotune/report/precision.py, docs/guide/precision.md):
the model's width as a function of pairs of processes, the pairs it suggests, the scatter it measures from a
run's items, and the one line the terminal shows. The end-to-end check (one line in a real session, no warning per
item, ``--autotune-pairs`` recorded) is tests/test_plugin_e2e.py::test_one_precision_line_and_autotune_pairs."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from pytest_autotune.report.precision import (
    SPREAD,
    C,
    PrecisionModel,
    pair_sd_from,
    summarize_precision,
)
from pytest_autotune.result import ItemOutcome, Measurement

Z = NormalDist().inv_cdf(0.975)


def outcome(i: int, width: float, met: bool, logs: list, *, item_s: float = 6.0, stage_s: float = 4.0,
            pairs: int = 2) -> ItemOutcome:
    m = Measurement(n_pairs=72, candidate_s=1e-3, baseline_s=2e-3, speedup=2.0, ci_low=2.0 * (1 - width / 2),
                    ci_high=2.0 * (1 + width / 2), ci_target_met=met, strawman_speedup=2.0)
    details = {"item_seconds": item_s,
               "precision": {"ci_rel_width": width, "target": 0.03, "met": met, "pairs_of_processes": pairs,
                             "planned": pairs, "pair_log_speedups": logs, "timing_stage_s": stage_s}}
    return ItemOutcome(nodeid=f"p{i}.py::c[cpu]", kind="kernel", problem=f"p{i}", candidate="c", device="cpu",
                       verdict="accepted", gate=None, reason="", measurement=m, details=details)


def test_the_width_is_the_stated_formula_and_falls_as_one_over_root_pairs():
    m = PrecisionModel(z=Z, pair_sd=0.027, offset_sd=0.025)
    assert m.half_width(2) == pytest.approx(Z * math.hypot(C * 0.027, 0.025) / math.sqrt(2))
    assert m.half_width(8) == pytest.approx(m.half_width(2) / 2)
    assert m.rel_width(2) == pytest.approx(2 * math.sinh(m.half_width(2)))
    widths = [m.rel_width(n) for n in range(1, 60)]
    assert all(a > b for a, b in zip(widths, widths[1:]))


def test_suggested_pairs_are_the_fewest_that_reach_the_target_with_the_margin():
    m = PrecisionModel(z=Z, pair_sd=0.027, offset_sd=0.025)
    for target in (0.005, 0.03, 0.1):
        n = m.pairs_for(target)
        assert SPREAD * m.rel_width(n) <= target
        assert n == 1 or SPREAD * m.rel_width(n - 1) > target
    # the protocol's offset term alone, z * 2.5% / sqrt(n) on each side, needs n >= (2 * 1.96 * 2.5% * 1.1 / 3%)^2
    alone = PrecisionModel(z=Z, pair_sd=0.0, offset_sd=0.025).pairs_for(0.03)
    assert alone == math.ceil((2 * Z * 0.025 * SPREAD / 0.03) ** 2) or alone == math.ceil(
        (2 * Z * 0.025 * SPREAD / 0.03) ** 2) + 1  # sinh rounds it up by at most one
    # more scatter: more pairs; a wider target: fewer
    assert PrecisionModel(z=Z, pair_sd=0.04, offset_sd=0.025).pairs_for(0.03) > m.pairs_for(0.03)
    assert m.pairs_for(0.06) < m.pairs_for(0.03)


def test_pair_scatter_from_two_pairs_an_item():
    # |d| = 1%, 2%, 3%, 4%, 5%: median 3% -> sd = 3% / (0.6745 * sqrt(2))
    logs = [[0.0, d] for d in (0.01, 0.02, 0.03, 0.04, 0.05)]
    sd, n, basis = pair_sd_from(logs + [[0.1], [None, 0.2]])
    assert n == 5 and basis == "median"
    assert sd == pytest.approx(0.03 / (NormalDist().inv_cdf(0.75) * math.sqrt(2)))
    assert pair_sd_from([[0.0, 0.01], [0.0, 0.02]]) == (None, 2, "median")  # too few items to say


def test_pair_scatter_from_many_pairs_an_item_uses_them_all():
    """With many pairs of processes an item (--autotune-pairs), each item's sd has many degrees of freedom: the
    estimate is close to the true scatter, where two pairs an item would give it one degree of freedom each."""
    import random

    rng = random.Random(5)
    items = [[rng.gauss(0.0, 0.03) for _ in range(72)] for _ in range(6)]
    sd, n, basis = pair_sd_from(items)
    assert n == 6 and basis == "five sixths" and sd == pytest.approx(0.03, rel=0.15)
    # the first two pairs of the same items only: far noisier (one degree of freedom an item)
    two, _, basis2 = pair_sd_from([i[:2] for i in items])
    assert basis2 == "median" and two is not None and abs(two - 0.03) > abs(sd - 0.03)


def test_with_many_pairs_an_item_the_items_that_scatter_most_decide():
    """Items differ (on the 2-vCPU VM one pair's scatter ran from 1% to 10% over the main job's items at 72 pairs):
    once each item's scatter is measured, the suggestion follows the item at five sixths, not the median one."""
    import random

    rng = random.Random(7)
    scatters = [0.01, 0.02, 0.02, 0.03, 0.03, 0.03, 0.04, 0.04, 0.05, 0.07, 0.08, 0.10]
    items = [[rng.gauss(0.0, s) for _ in range(72)] for s in scatters]
    sd, _, basis = pair_sd_from(items)
    assert basis == "five sixths" and sd == pytest.approx(0.07, rel=0.2)
    outs = [outcome(i, 0.03, False, logs, pairs=72, stage_s=150.0, item_s=152.0) for i, logs in enumerate(items)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.pair_sd_basis == "five sixths" and s.suggested is not None and s.suggested > 72
    assert "in the item at five sixths of the 12" in s.line()


def test_summary_of_a_run_that_missed_the_target_names_the_pairs_and_their_cost():
    outs = [outcome(i, 0.088 + 0.001 * i, False, [0.0, 0.02 + 0.002 * i]) for i in range(18)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.items == 18 and s.reached == 0 and s.pairs_now == 2
    assert s.median_width == pytest.approx(0.0965)
    model = PrecisionModel(z=Z, pair_sd=s.pair_sd or 0.0, offset_sd=0.025)
    assert s.suggested == model.pairs_for(0.03) and s.suggested > 2
    # time: 2 s outside timing, plus 2 s a pair of processes (4 s for two), each item
    assert s.item_seconds == pytest.approx(2.0 + 2.0 * s.suggested)
    assert s.total_seconds == pytest.approx(18 * (2.0 + 2.0 * s.suggested))
    line = s.line()
    assert "\n" not in line
    assert line.startswith("precision: 0 of 18 item(s) reached the 3.0% CI target (median CI 9.7% wide")
    assert f"--autotune-pairs={s.suggested} would reach 3.0%" in line
    assert "[devices.cpu].process_offset_sd" in line and "docs/guide/precision.md" in line


def test_summary_when_every_item_reached_the_target_suggests_nothing():
    outs = [outcome(i, 0.02, True, [0.0, 0.01]) for i in range(4)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.suggested is None and s.reached == 4
    assert s.line() == "precision: 4 of 4 item(s) reached the 3.0% CI target (median CI 2.0% wide, 2 pair(s) of " \
                       "processes an item)"


def test_summary_without_a_measured_scatter_uses_the_protocol_term_and_says_so():
    outs = [outcome(0, 0.09, False, [0.0]), outcome(1, 0.08, False, [0.0], pairs=1)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.pair_sd is None
    assert s.suggested == max(PrecisionModel(z=Z, pair_sd=0.0, offset_sd=0.025).pairs_for(0.03), s.pairs_now + 1)
    assert "too few items with two pairs of processes" in s.line()


def test_summary_ignores_untimed_and_refused_items():
    refused = ItemOutcome(nodeid="x.py::y[cpu]", kind="kernel", problem="x", candidate="y", device="cpu",
                          verdict="rejected", gate="correctness", reason="wrong")
    assert summarize_precision([refused], target=0.03, offset_sd=0.0, ci_level=0.95) is None
