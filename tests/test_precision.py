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
    FEW_PAIRS_UNDERREAD,
    FIVE_SIXTHS,
    MOST_PAIRS,
    PROFILE,
    PROFILE_KURTOSIS,
    SIZING_CONFIDENCE,
    SPREAD,
    TIME_RANGE,
    C,
    PrecisionModel,
    chi2_quantile,
    scatter_from,
    summarize_precision,
)
from pytest_autotune.result import ItemOutcome, Measurement

Z = NormalDist().inv_cdf(0.975)


def test_the_chi_square_quantiles_are_the_tables():
    assert chi2_quantile(0.95, 10) == pytest.approx(18.307, abs=1e-3)
    assert chi2_quantile(0.05, 20) == pytest.approx(10.851, abs=1e-3)
    assert chi2_quantile(0.2, 2) == pytest.approx(-2 * math.log(0.8), abs=1e-6)
    assert chi2_quantile(0.5, 9.6) < 9.6 < chi2_quantile(0.6, 9.6)


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
    # each item's own variance over 71 degrees of freedom: the bound the cap is sized for is a few percent up
    assert 1.0 < sc.variance_factor(SIZING_CONFIDENCE) < 1.15
    sized = sc.five_sixths() * math.sqrt(sc.variance_factor(SIZING_CONFIDENCE))
    assert s.pair_sd_sized == pytest.approx(sized)
    assert s.suggested == PrecisionModel(z=Z, pair_sd=sized, offset_sd=0.025).pairs_for(0.03, SPREAD)
    needs = [PrecisionModel(z=Z, pair_sd=x, offset_sd=0.025).pairs_for(0.03) for x in sc.per_item or ()]
    assert s.predicted_reached >= 10
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
    # 18 items of one degree of freedom each, which differ as PROFILE does: about 9.6 effective degrees of freedom
    assert s.scatter_dof == pytest.approx(18 / PROFILE_KURTOSIS) and 8 < s.scatter_dof < 11
    bound = math.sqrt(18 / PROFILE_KURTOSIS / chi2_quantile(1 - SIZING_CONFIDENCE, 18 / PROFILE_KURTOSIS))
    sized = FEW_PAIRS_UNDERREAD * FIVE_SIXTHS * rms * bound
    assert s.pair_sd_sized == pytest.approx(sized, rel=0.02)
    assert s.suggested == PrecisionModel(z=Z, pair_sd=s.pair_sd_sized, offset_sd=0.025).pairs_for(0.03, SPREAD)
    # the profile's items that need no more than the cap, as a share of these 18: most, at the measured scatter
    needs = [PrecisionModel(z=Z, pair_sd=FEW_PAIRS_UNDERREAD * q * rms, offset_sd=0.025).pairs_for(0.03)
             for q in PROFILE]
    assert sum(1 for n in needs if n <= s.suggested) == len(PROFILE)
    assert 15 <= s.predicted_reached <= 18
    # time: 2 s outside timing, 2 s a pair of processes (4 s for two); about: the profile's stops, at most: the cap
    mean_pairs = sum(min(n, s.suggested) for n in needs) / len(needs)
    assert s.expected_seconds == pytest.approx(18 * (2.0 + 2.0 * mean_pairs))
    assert s.most_seconds == pytest.approx(18 * (2.0 + 2.0 * s.suggested))
    assert s.expected_seconds_low < s.expected_seconds < s.expected_seconds_high <= s.most_seconds
    line = s.line()
    assert "\n" not in line
    assert line.startswith("precision: 0 of 18 item(s) reached the 3.0% CI target (median CI 9.7% wide")
    assert f"--autotune-max-pairs={s.suggested} (sized for {s.pair_sd_sized:.1%}: " in line
    assert f"would reach 3.0% on about {s.predicted_reached} of 18" in line
    assert "at most" in line and "[devices.cpu].process_offset_sd" in line and "docs/guide/precision.md" in line
    assert f"{TIME_RANGE:.0%} range " in line and f"the {SIZING_CONFIDENCE:.0%} bound of the scatter" in line


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
    assert f"--autotune-max-pairs={MOST_PAIRS} (sized for " in s.line()
    assert "would reach 0.0% on about 0 of 6" in s.line() and "range" not in s.line()


def test_the_sizing_bound_is_the_chi_square_one_and_none_without_stated_degrees_of_freedom():
    from pytest_autotune.report.precision import Scatter

    sc = Scatter(rms=0.05, items=20, dof=10.0)
    assert sc.variance_factor(0.95) == pytest.approx(10.0 / 3.9403, rel=1e-3)
    assert sc.variance_factor(0.05) == pytest.approx(10.0 / 18.307, rel=1e-3)
    assert Scatter(rms=0.05, items=20, per_item=(0.05,) * 20).variance_factor(0.8) == 1.0


def test_the_bounds_hold_as_often_as_they_say_over_simulated_two_pair_runs():
    """Items that differ as PROFILE says, two pairs each that read their scatter FEW_PAIRS_UNDERREAD low, 400 runs:
    the sizing bound lies above the true rms in about SIZING_CONFIDENCE of the runs, and the time's range holds
    the time at the true scatters in about TIME_RANGE of them. Alike items would need far fewer degrees of freedom
    of margin: the kurtosis is what makes a two-pair run's scatter this uncertain."""
    import random

    rng = random.Random(5)
    truth = [q * 0.063 for q in PROFILE] * 2  # 24 items
    true_rms = math.sqrt(sum(t * t for t in truth) / len(truth))
    covered_rms = covered_time = 0
    runs = 400
    for _ in range(runs):
        read = [t / FEW_PAIRS_UNDERREAD for t in truth]
        outs = [outcome(i, 0.09, False, [rng.gauss(0, r), rng.gauss(0, r)]) for i, r in enumerate(read)]
        s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
        assert s is not None and s.pair_sd is not None and s.pair_sd_sized is not None
        covered_rms += s.pair_sd_sized / FIVE_SIXTHS >= true_rms
        # the time at the true scatters, with this run's cap: each item's own need
        needs = [PrecisionModel(z=Z, pair_sd=q * true_rms, offset_sd=0.025).pairs_for(0.03) for q in PROFILE]
        at_truth = len(truth) * (2.0 + 2.0 * sum(min(n, s.suggested) for n in needs) / len(needs))
        covered_time += s.expected_seconds_low <= at_truth <= s.expected_seconds_high
    assert abs(covered_rms / runs - SIZING_CONFIDENCE) < 0.08
    assert abs(covered_time / runs - TIME_RANGE) < 0.07


def test_identical_pairs_give_no_infinite_degrees_of_freedom_to_the_json():
    """Every item's pairs alike (a scatter of zero): the degrees of freedom are unbounded, and the JSON says null,
    never a non-standard Infinity."""
    import json

    outs = [outcome(i, 0.05, False, [0.01] * 8, pairs=8) for i in range(4)]
    s = summarize_precision(outs, target=0.03, offset_sd=0.025, ci_level=0.95)
    assert s is not None and s.scatter_dof is None
    json.dumps(s.__dict__, allow_nan=False)
