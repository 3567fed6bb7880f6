"""``--autotune-max-pairs``: the rule that stops adding pairs of processes once an item's CI reaches the target
(pytest_autotune/measure/until_target.py). The end-to-end run (the stop in a real session, the reason on the item,
the provenance) is tests/test_plugin_e2e.py::test_max_pairs_stops_each_item_at_its_target."""

from __future__ import annotations

import math
import random

import pytest

from pytest_autotune.measure.stats import clustered_estimate, with_process_offsets
from pytest_autotune.measure.until_target import MIN_STEP, RECHECK_SHARE, UntilTarget
from pytest_autotune.report.precision import PrecisionModel

Z = 1.959963984540054


def rule(**kw: float) -> UntilTarget:
    args = dict(target=0.03, offset_sd=0.025, ci_level=0.95, min_pairs=2)
    args.update(kw)
    return UntilTarget(**args)  # type: ignore[arg-type]


def test_no_stop_before_the_protocols_own_pairs():
    calls = []
    r = rule(min_pairs=2)
    assert r.reached([0.1], lambda: calls.append(1) or 0.0) is False  # type: ignore[func-returns-value]
    assert calls == [] and r.readings == []


def test_the_protocols_ci_is_not_read_while_a_normal_mean_would_still_be_too_wide():
    """The cheap width (a normal mean of the pairs' log speedups, plus the offset term) is never above the
    protocol's bootstrap of a median of medians; while it exceeds the target, the bootstrap is not computed."""
    r = rule()
    logs = [0.0, 0.1, -0.1, 0.05]  # sd ~8%: a normal mean's CI alone is ~16% wide
    assert r.cheap_width(logs) is not None and r.cheap_width(logs) > 0.03  # type: ignore[operator]
    assert r.reached(logs, lambda: pytest.fail("the protocol's CI was computed")) is False
    assert r.readings == []


def test_a_reading_at_or_below_the_target_stops_the_item():
    r = rule(offset_sd=0.0)
    logs = [0.001 * (i % 3) for i in range(12)]
    assert r.reached(logs, lambda: 0.029) is True
    assert r.readings == [(12, 0.029)]


def test_after_a_reading_above_the_target_the_next_is_half_way_to_the_pairs_it_projects():
    r = rule(offset_sd=0.0)
    logs = [0.001 * (i % 3) for i in range(20)]
    assert r.reached(logs, lambda: 0.045) is False
    want = 20 + math.ceil(RECHECK_SHARE * (20 * (0.045 / 0.03) ** 2 - 20))  # 45 projected: 33
    assert r.next_full_at == want == 33
    for n in range(21, want):
        assert r.reached(logs[:1] * n, lambda: pytest.fail(f"read again at {n} pairs")) is False
    assert r.reached(logs[:1] * want, lambda: 0.031) is False  # just above: the next is MIN_STEP of 33 on, 2 pairs
    assert r.next_full_at == want + max(1, math.ceil(RECHECK_SHARE * (want * (0.031 / 0.03) ** 2 - want)),
                                        math.ceil(MIN_STEP * want)) == 35
    assert r.reached(logs[:1] * 35, lambda: 0.03) is True
    assert r.readings == [(20, 0.045), (33, 0.031), (35, 0.03)]


def test_a_reading_is_not_held_back_by_how_the_last_one_compared_with_the_cheap_width():
    """The cheap width alone gates a reading once the re-check's pairs are in: a bootstrap that read far above the
    cheap width early (a few tens of pairs) does not hold the next reading back."""
    r = rule(offset_sd=0.0)
    calm = [0.001 * (i % 3) for i in range(40)]  # cheap width well under the target
    assert r.reached(calm, lambda: 0.06) is False  # twice the target: projects 160 pairs
    assert r.next_full_at == 40 + math.ceil(RECHECK_SHARE * (160 - 40)) == 100
    # at 100 pairs the cheap width is what it was, far under the target, though the bootstrap read 2x the target at 40
    # pairs: the reading happens (the rule before 2026-12-05 waited until the cheap width had halved, 160 pairs)
    assert r.reached((calm * 3)[:100], lambda: 0.029) is True
    assert [n for n, _ in r.readings] == [40, 100]


def _pair(rng: random.Random, log_speedup: float, offset_sd: float, noise_sd: float, ratios: int) -> tuple:
    """One pair of processes: ``ratios`` paired samples whose ratios scatter by ``noise_sd`` around the pair's own
    offset from the true speedup."""
    centre = log_speedup + rng.gauss(0.0, offset_sd)
    base = [1e-3 * math.exp(rng.gauss(0.0, 0.01)) for _ in range(ratios)]
    cand = [b / math.exp(centre + rng.gauss(0.0, noise_sd)) for b in base]
    return base, cand


@pytest.mark.parametrize("scatter", [0.01, 0.03, 0.06])
def test_items_stop_near_the_pairs_the_model_gives_and_read_the_target(scatter: float):
    """Simulated items, the protocol's own estimator (bootstrap of pairs of processes, then the offset term): each
    stops with a CI at most the target, after about the pairs the precision model says it needs, and far fewer
    than a cap sized for an item that scatters more; an item that scatters more needs more. Seeded: the same
    numbers every run."""
    rng = random.Random(int(scatter * 1000))
    target, offset = 0.03, 0.025
    r = rule(target=target, offset_sd=offset)
    groups: list = []
    logs: list = []
    full = []

    def width() -> float:
        est = clustered_estimate(groups, level=0.95, resamples=400, seed=len(groups))
        w = with_process_offsets(est, offset, len(groups), 0.95).rel_width
        full.append(w)
        return w

    while not r.reached(logs, width):
        base, cand = _pair(rng, 0.3, scatter, 0.02, 24)
        groups.append((base, cand))
        logs.append(math.log(sorted(b / c for b, c in zip(base, cand))[12]))
        assert len(groups) < 2000
    need = PrecisionModel(z=Z, pair_sd=math.hypot(scatter, 0.02 / math.sqrt(24) * 1.25), offset_sd=offset).pairs_for(
        target)
    assert r.readings and r.readings[-1][1] <= target
    assert 0.4 * need <= len(groups) <= 1.6 * need, (len(groups), need)
    assert len(full) <= 10 < len(groups)  # the bootstrap ran a few times, not once a pair
