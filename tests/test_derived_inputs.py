"""Derived input sets (problems/derived.py, measure/input_sets.py): a timing group's sets come from one
``get_inputs()`` draw, each set a fresh multiple of it. What must hold: every process that builds a set gets the same
bits (the two sandboxes and the controller's golden outputs), each set stays in the draw's domain, sets differ
from each other (and from any earlier set) by far more than a tolerance, inputs that are labels are left alone, and
where an op ignores the derivation the item's sets are drawn instead."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from pytest_autotune.golden import Golden
from pytest_autotune.measure.devices.cpu import CpuDevice
from pytest_autotune.measure.input_sets import choose_input_sets
from pytest_autotune.problems.derived import DerivedSets
from pytest_autotune.problems.inputs import iter_stream, materialize_groups, materialize_stream
from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.protocol import load_protocol

REPO = Path(__file__).resolve().parents[1]
PROTO = load_protocol(REPO / "protocol.toml")
SPREAD = 0.0625

PROBLEM = """
import torch
from torch import nn

class Model(nn.Module):
    def forward(self, *xs):
        return {op}

def get_inputs():
    return {inputs}

def get_init_inputs():
    return []
"""


def problem(tmp_path: Path, op: str, inputs: str, name: str = "p") -> LoadedProblem:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(PROBLEM.format(op=op, inputs=inputs)))
    return LoadedProblem.load(SourceFile.read(path))


def groups(p: LoadedProblem, k: int = 4, seed: int = 11) -> dict:
    return {"p1": {"seed": seed, "count": k, "derive": SPREAD, "base": seed},
            "p2": {"seed": seed + 1, "count": k, "derive": SPREAD, "base": seed}}


def test_every_path_builds_the_same_sets(tmp_path):
    """The sandbox builds a round's groups at once (materialize_groups: one draw for both), the controller's golden
    outputs one set at a time (iter_stream, also of chosen sets only): the same bits either way."""
    p = problem(tmp_path, "xs[0] + xs[1]", "[torch.randn(8, 64), torch.rand(8, 64) + 1.0]")
    rs = groups(p)
    together = materialize_groups(p, rs)
    for g, r in rs.items():
        alone = materialize_stream(p, r)
        streamed = list(iter_stream(p, r))
        chosen = list(iter_stream(p, r, only=[3, 1]))
        for a, b, c in zip(together[g], alone, streamed):
            assert all(torch.equal(x, y) and torch.equal(x, z) for x, y, z in zip(a, b, c))
        assert all(torch.equal(x, y) for x, y in zip(chosen[0], together[g][1]))
        assert all(torch.equal(x, y) for x, y in zip(chosen[1], together[g][3]))


def test_sets_stay_in_the_draws_domain_and_move_far_beyond_any_tolerance(tmp_path):
    """Signs are kept, magnitudes shrink by at most (1 - spread)^2, a one-signed range is never left, and any two
    sets differ in (nearly) every element by much more than float32's rtol."""
    p = problem(tmp_path, "xs[0]", "[torch.randn(32, 256), torch.rand(32, 256) + 1.0, torch.rand(16, 16)]")
    base = p.raw_inputs(5)
    sets = list(DerivedSets(base, 5, SPREAD).sets(6))
    for xs in sets:
        for x, b in zip(xs, base):
            assert x.shape == b.shape and x.dtype == b.dtype and x.is_contiguous()
            assert torch.equal(torch.sign(x), torch.sign(b))
            ratio = x / b
            assert float(ratio.min()) >= (1 - SPREAD) ** 2 - 1e-6 and float(ratio.max()) <= 1 + 1e-6
            assert float(x.min()) >= float(b.min()) and float(x.max()) <= float(b.max())
    for a, b in zip(sets, sets[1:]):
        rel = ((a[0] - b[0]).abs() / b[0].abs()).flatten()
        assert float((rel > 10 * PROTO.tolerance_for("float32").rtol).float().mean()) > 0.9


def test_labels_and_whole_numbers_are_copied_unchanged_into_every_set(tmp_path):
    """Integer tensors and floats holding whole numbers (class labels, +-1 targets) are not derived: each set gets
    its own copy, so a call that writes its inputs in place cannot change the next set."""
    p = problem(tmp_path, "xs[0]",
                "[torch.randn(4, 8), torch.randint(0, 5, (4,)), torch.randint(0, 2, (4, 8)).float() * 2 - 1]")
    base = p.raw_inputs(3)
    a, b = list(DerivedSets(base, 3, SPREAD).sets(2))
    assert not torch.equal(a[0], b[0])
    for i in (1, 2):
        assert torch.equal(a[i], base[i]) and torch.equal(b[i], base[i])
        assert a[i].data_ptr() != b[i].data_ptr() != base[i].data_ptr()


def test_one_set_is_built_without_the_ones_before_it(tmp_path):
    p = problem(tmp_path, "xs[0]", "[torch.randn(64, 32)]")
    d = DerivedSets(p.raw_inputs(9), 9, SPREAD)
    all_sets = list(d.sets(5))
    assert torch.equal(next(d.sets(5, only=[4]))[0], all_sets[4][0])
    assert torch.equal(d.set_at(2)[0], all_sets[2][0])


def _golden(p: LoadedProblem) -> Golden:
    return Golden(p, CpuDevice(), {}, init_seed=1)


@pytest.mark.parametrize("op, inputs, derived", [
    ("torch.softmax(xs[0], -1)", "[torch.randn(16, 128)]", True),
    ("xs[0].sum(dim=1)", "[torch.randn(16, 128)]", True),
    ("torch.argmax(xs[0], dim=1)", "[torch.randn(64, 256)]", True),
    # ignores positive scaling: a replayed answer would pass for every set
    ("torch.sign(xs[0])", "[torch.randn(16, 128)]", False),
    ("(xs[0] > 0).float()", "[torch.randn(16, 128)]", False),
    # nothing to derive: every set would be the same
    ("xs[0] * 2", "[torch.randint(0, 9, (16, 128))]", False),
])
def test_items_whose_op_ignores_the_derivation_draw_every_set(tmp_path, op, inputs, derived):
    """measure/input_sets.py: the controller asks of three derived sets whether the previous set's output would
    pass the timed-output check for the next one; where it would, the item's sets are drawn."""
    choice = choose_input_sets(_golden(problem(tmp_path, op, inputs)), PROTO, SPREAD, seed=21, positions_seed=4)
    assert (choice.spread is not None) is derived, choice.why
    assert choice.details()["mode"] == ("derived" if derived else "drawn")


def test_a_protocol_that_draws_is_left_drawing(tmp_path):
    choice = choose_input_sets(_golden(problem(tmp_path, "xs[0]", "[torch.randn(4, 4)]")), PROTO, None, 1, 2)
    assert choice.spread is None and "draws every set" in choice.why
