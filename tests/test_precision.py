"""The run's precision summary and its prediction (pytest_autotune/report/precision.py, docs/guide/precision.md):
the model's width as a function of pairs of processes, the pairs it suggests, the scatter it measures from a
run's items, and the one line the terminal shows. The end-to-end check (one line in a real session, no warning per
item, ``--autotune-pairs`` recorded) is tests/test_plugin_e2e.py::test_one_precision_line_and_autotune_pairs; the
stopping rule of ``--autotune-max-pairs`` is tests/test_until_target.py."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from pytest_autotune.report.precision import (
    FIVE_SIXTHS,
    MOST_PAIRS,
    PROFILE,
    SPREAD,
    C,
    PrecisionModel,
    scatter_from,
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


def test_pairs_for_are_the_fewest_that_reach_the_target_with_the_margin():
    m = PrecisionModel(z=Z, pair_sd=0.027, offset_sd=0.025)
    for target in (0.005, 0.03, 0.1):
        for spread in (1.0, SPREAD):
            n = m.pairs_for(target, spread)
            assert spread * m.rel_width(n) <= target
            assert n == 1 or spread * m.rel_width(n - 1) > target
    # the protocol's offset term alone, z * 2.5% / sqrt(n) on each side, needs n >= (2 * 1.96 * 2.5% / 3%)^2
    alone = PrecisionModel(z=Z, pair_sd=0.0, offset_sd=0.025).pairs_for(0.03)
    assert alone in (math.ceil((2 * Z * 0.025 / 0.03) ** 2), math.ceil((2 * Z * 0.025 / 0.03) ** 2) + 1)
    assert PrecisionModel(z=Z, pair_sd=0.04, offset_sd=0.025).pairs_for(0.03) > m.pairs_for(0.03)
    assert m.pairs_for(0.06) < m.pairs_for(0.03) <= m.pairs_for(0.03, SPREAD)


def test_scatter_from_two_pairs_an_item_is_the_rms_of_the_items():
    # two pairs an item: variance d^2 / 2; the rms is the root of their mean, whatever the items' spread
    ds = (0.01, 0.02, 0.03, 0.04, 0.05)
    sc = scatter_from([[0.0, d] for d in ds] + [[0.1], [None, 0.2]])
    assert sc is not None and sc.items == 5 and sc.basis == "rms" and sc.per_item is None
    assert sc.rms == pytest.approx(math.sqrt(sum(d * d / 2 for d in ds) / 5))
    assert sc.five_sixths() == pytest.approx(FIVE_SIXTHS * sc.rms)
    assert scatter_from([[0.0, 0.01], [0.0, 0.02]]) is None  # too few items to say


def test_the_rms_of_two_pairs_an_item_is_unbiased_where_the_median_was_not():
    """Items that differ as the VM's do (PROFILE): the rms over two pairs an item comes out near the true rms of the
    items' scatters, on average over runs; the old estimate (the median item's sd) read a third low on the VM."""
    import random

    rng = random.Random(11)
    truth = [q * 0.065 for q in PROFILE for _ in range(2)]  # 24 items
    true_rms = math.sqrt(sum(s * s for s in truth) / len(truth))
    squares = []
    for _ in range(400):
        sc = scatter_from([[rng.gauss(0, s), rng.gauss(0, s)] for s in truth])
        assert sc is not None
        squares.append(sc.rms ** 2)
    assert math.sqrt(sum(squares) / len(squares)) == pytest.approx(true_rms, rel=0.05)


def test_the_profile_is_the_measured_spread_around_the_rms():
    """PROFILE and FIVE_SIXTHS come from the two runs that measured every item's own scatter (docs/data): the
    profile's mean square is about one (it is relative to the rms), and five sixths of it lies at FIVE_SIXTHS."""
    assert list(PROFILE) == sorted(PROFILE)
    assert sum(q * q for q in PROFILE) / len(PROFILE) == pytest.approx(1.0, abs=0.05)
    assert PROFILE[math.ceil(len(PROFILE) * 5 / 6) - 1] == FIVE_SIXTHS


def test_scatter_from_many_pairs_an_item_is_each_items_own():
    import random

    rng = random.Random(7)
    scatters = [0.01, 0.02, 0.02, 0.03, 0.03, 0.03, 0.04, 0.04, 0.05, 0.07, 0.08, 0.10]
    items = [[rng.gauss(0.0, s) for _ in range(72)] for s in scatters]
    sc = scatter_from(items)
    assert sc is not None and sc.basis == "each item" and sc.per_item is not None
    assert [round(s, 2) for s in sc.per_item] == pytest.approx(scatters, abs=0.02)
    assert sc.five_sixths() == pytest.approx(0.07, rel=0.2)
    # the first two pairs of the same items: the rms only
    assert scatter_from([i[:2] for i in items]).basis == "rms"  # type: ignore[union-attr]


def test_with_each_items_scatter_measured_the_cap_covers_the_item_at_five_sixths():
    """Once each item's scatter is measured, the suggestion's cap is the pairs the item at five sixths needs, and
    its time is each item's own: items that scatter little stop early."""
    import random

    rng = random.Random(7)
    scatters = [0.01, 0.02, 0.02, 0.03, 0.03, 0.03, 0.04, 0.04, 0.05, 0.07, 0.08, 0.10]
    items = [[rng.gauss(0.0, s) for _ in range(72)] for s in scatters]
    outs = [outcome(i, 0.05, False, logs, pairs=72, stage_s=144.0, item_s=146.0) for i, logs in enumerate(items)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.pair_sd_basis == "each item" and s.suggested is not None
    sc = scatter_from(items)
    assert sc is not None
    model = PrecisionModel(z=Z, pair_sd=sc.five_sixths(), offset_sd=0.025)
    assert s.suggested == model.pairs_for(0.03, SPREAD)
    needs = [PrecisionModel(z=Z, pair_sd=x, offset_sd=0.025).pairs_for(0.03) for x in sc.per_item or ()]
    assert s.predicted_reached == sum(1 for n in needs if n <= s.suggested) >= 10
    # 2 s outside timing and 2 s a pair of processes, each item
    assert s.expected_seconds == pytest.approx(sum(2.0 + 2.0 * min(n, s.suggested) for n in needs))
    assert s.most_seconds == pytest.approx(12 * (2.0 + 2.0 * s.suggested))
    assert s.expected_seconds < s.most_seconds
    assert f"{s.pair_sd_five_sixths:.1%} in the item at five sixths" in s.line()


def test_summary_of_a_two_pair_run_sizes_the_cap_for_the_item_at_five_sixths():
    outs = [outcome(i, 0.088 + 0.001 * i, False, [0.0, 0.02 + 0.002 * i]) for i in range(18)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.items == 18 and s.reached == 0 and s.pairs_now == 2
    assert s.median_width == pytest.approx(0.0965)
    rms = math.sqrt(sum((0.02 + 0.002 * i) ** 2 / 2 for i in range(18)) / 18)
    assert s.pair_sd == pytest.approx(rms) and s.pair_sd_basis == "rms"
    assert s.suggested == PrecisionModel(z=Z, pair_sd=FIVE_SIXTHS * rms, offset_sd=0.025).pairs_for(0.03, SPREAD)
    # the profile's items that need no more than the cap, as a share of these 18
    needs = [PrecisionModel(z=Z, pair_sd=q * rms, offset_sd=0.025).pairs_for(0.03) for q in PROFILE]
    assert s.predicted_reached == round(18 * sum(1 for n in needs if n <= s.suggested) / len(PROFILE))
    assert s.predicted_reached >= 15
    # time: 2 s outside timing, 2 s a pair of processes (4 s for two); about: the profile's stops, at most: the cap
    mean_pairs = sum(min(n, s.suggested) for n in needs) / len(needs)
    assert s.expected_seconds == pytest.approx(18 * (2.0 + 2.0 * mean_pairs))
    assert s.most_seconds == pytest.approx(18 * (2.0 + 2.0 * s.suggested))
    line = s.line()
    assert "\n" not in line
    assert line.startswith("precision: 0 of 18 item(s) reached the 3.0% CI target (median CI 9.7% wide")
    assert f"--autotune-max-pairs={s.suggested} would reach 3.0% on about {s.predicted_reached} of 18" in line
    assert "at most" in line and "[devices.cpu].process_offset_sd" in line and "docs/guide/precision.md" in line


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
    assert s.suggested == max(PrecisionModel(z=Z, pair_sd=0.0, offset_sd=0.025).pairs_for(0.03, SPREAD),
                              s.pairs_now + 1)
    assert "too few items with two pairs of processes" in s.line()


def test_summary_ignores_untimed_and_refused_items():
    refused = ItemOutcome(nodeid="x.py::y[cpu]", kind="kernel", problem="x", candidate="y", device="cpu",
                          verdict="rejected", gate="correctness", reason="wrong")
    assert summarize_precision([refused], target=0.03, offset_sd=0.0, ci_level=0.95) is None


def test_a_target_no_number_of_pairs_reaches_suggests_the_most_the_option_takes_and_says_none_reach():
    outs = [outcome(i, 0.09, False, [0.0, 0.03 + 0.001 * i]) for i in range(6)]
    s = summarize_precision(outs, target=0.0001, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.suggested == MOST_PAIRS and s.predicted_reached == 0
    assert f"--autotune-max-pairs={MOST_PAIRS} would reach 0.0% on about 0 of 6" in s.line()
