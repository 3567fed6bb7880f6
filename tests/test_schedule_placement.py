"""Where and what the paired schedule asks of the two sandboxes between samples (measure/schedule.py).

The two asymmetries behind a CPU A/A of 1.039 on a 16-core host (docs/design/protocol.md#where-the-rounds-are-built): only the candidate's sandbox read its outputs between rounds, and the baseline's sandbox (asked first)
built its inputs on the CPU that then timed them while the candidate's built them elsewhere. Here the schedule runs
against two scripted sandboxes whose pids are real sleeping processes, so the CPU affinity the controller gives
them is read back from the kernel at every request.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from pytest_autotune.measure.schedule import run_paired_timing
from pytest_autotune.protocol import load_protocol
from pytest_autotune.seeds import SeedSource

PROTO = load_protocol(Path(__file__).resolve().parents[1] / "pytest_autotune" / "protocol.toml")

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")


class ScriptedSandbox:
    """Answers the schedule's requests like a sandbox of a 1 ms call would; the process the controller pins is a
    real one (``sleep``), whose affinity is read at each request."""

    def __init__(self, role: str, asked: Optional[list] = None) -> None:
        self.asked = asked if asked is not None else []  # (role, cmd) of every request to either sandbox, in order
        self.proc = subprocess.Popen(["sleep", "60"])
        self.pid = self.proc.pid
        self.role = role
        self.log: list[tuple[str, dict, set]] = []
        self._pending: list[dict] = []

    def send(self, msg: dict, phase: str = "") -> None:
        self.asked.append((self.role, msg["cmd"]))
        self.log.append((msg["cmd"], msg, set(os.sched_getaffinity(self.pid))))
        self._pending.append(msg)

    def receive(self, phase: str = "") -> dict:
        return self._answer(self._pending.pop(0))

    def request(self, msg: dict, phase: str = "") -> dict:
        self.send(msg, phase)
        return self.receive(phase)

    def other_processes(self) -> int:
        return 0

    def _answer(self, msg: dict) -> dict:
        cmd = msg["cmd"]
        if cmd == "calibrate":
            return {"ok": True, "per_call_s": 1e-3, "timing_info": {}}
        if cmd == "configure":
            return {"ok": True, "timing_info": {}}
        if cmd in ("release", "fingerprint"):
            return {"ok": True, "prints": [[0.0]] if msg.get("fingerprint") or cmd == "fingerprint" else [],
                    "tamper": []}
        if cmd == "prepare":
            return {"ok": True}
        if cmd == "sample":
            return {"ok": True, "s": 1e-3, "host_s": 1e-3, "stamps_ns": [0, 1]}
        raise AssertionError(f"unexpected request {cmd}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def boxes():
    asked: list = []
    made = {"A": ScriptedSandbox("baseline", asked), "B": ScriptedSandbox("candidate", asked)}
    yield made
    for b in made.values():
        b.close()


def _run(boxes: dict, sample_cpus):
    plan = PROTO.timing_plan("cpu")
    return run_paired_timing(boxes["B"], boxes["A"], PROTO, plan, SeedSource(b"n" * 16, "placement"), stats_seed=1,
                             budget_scale=0.02, sample_cpus=sample_cpus)


def test_both_sandboxes_read_their_outputs_between_rounds(boxes):
    ev = _run(boxes, None)
    assert len(ev.rounds) >= 2
    for arm, box in boxes.items():
        releases = [m for cmd, m, _ in box.log if cmd == "release" and m.get("fingerprint") is not None]
        # every round after the first releases the outputs of the one before it, fingerprinted in both arms
        assert len(releases) == len(ev.rounds) - 1, arm
    # the positions read are the same in both: the same work, not merely the same kind of work
    a = [m["fingerprint"] for cmd, m, _ in boxes["A"].log if cmd == "release" and m.get("fingerprint")]
    b = [m["fingerprint"] for cmd, m, _ in boxes["B"].log if cmd == "release" and m.get("fingerprint")]
    assert a == b


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _pid: ())(0)) < 2, reason="needs two CPUs")
def test_between_rounds_neither_sandbox_may_use_the_samples_cpu(boxes):
    allowed = sorted(os.sched_getaffinity(0))
    sample_cpu = allowed[-1]
    ev = _run(boxes, [sample_cpu])
    assert len(ev.rounds) >= 2
    for arm, box in boxes.items():
        between = [cpus for cmd, _, cpus in box.log if cmd in ("release", "prepare")]
        samples = [cpus for cmd, _, cpus in box.log if cmd == "sample"]
        assert between and samples
        # release and prepare: every CPU the controller has but the samples' one, the same set for both arms
        assert all(cpus == set(allowed) - {sample_cpu} for cpus in between), (arm, between)
        # every timed sample: the samples' CPU alone
        assert all(cpus == {sample_cpu} for cpus in samples), (arm, samples)


def test_the_sandbox_asked_first_for_a_rounds_inputs_alternates(boxes):
    """Asked in a fixed order, the baseline's sandbox always started building a round's inputs first on the CPU both
    share and the candidate's always finished last: an asymmetry of the arm (docs/design/protocol.md#the-per-process-offset). Round after round the other sandbox goes first (so too for the other requests between rounds)."""
    ev = _run(boxes, None)
    assert len(ev.rounds) >= 4
    prepares = [role for role, cmd in boxes["A"].asked if cmd == "prepare"]
    firsts = prepares[0::2]
    assert len(firsts) >= 4 and len(prepares) == 2 * len(firsts)
    assert firsts == [("baseline", "candidate")[i % 2] for i in range(len(firsts))], firsts
    assert prepares[1::2] == [("candidate", "baseline")[i % 2] for i in range(len(firsts))]


def test_with_one_cpu_the_rounds_are_built_where_they_are_timed(boxes):
    """A controller confined to one CPU has nowhere else to send the work: it stays on that CPU (both arms)."""
    me = os.sched_getaffinity(0)
    only = min(me)
    os.sched_setaffinity(0, {only})
    try:
        _run(boxes, [only])
    finally:
        os.sched_setaffinity(0, me)
    for box in boxes.values():
        assert all(cpus == {only} for cmd, _, cpus in box.log if cmd in ("release", "prepare", "sample"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_arms_probed_elsewhere_make_no_capture_probe_in_their_timing_sandboxes(boxes):
    """Where both arms' graph probes ran in sandboxes that are not timed, both timing sandboxes are told to make
    none before calibration, and the mode is decided from the probes given: with only the candidate's, the
    baseline's timing process alone test-captured graphs (the 4 us A/A's 0.998, docs/results/h200.md)."""
    plan = PROTO.timing_plan("cpu")
    probes = {"A": {"fastest_graph_call_s": 5e-6}, "B": {"fastest_graph_call_s": 6e-6}}
    ev = run_paired_timing(boxes["B"], boxes["A"], PROTO, plan, SeedSource(b"n" * 16, "probes"), stats_seed=1,
                           budget_scale=0.02, graph_below_s=10e-6, probes=probes)
    for arm, box in boxes.items():
        cmds = [(cmd, m) for cmd, m, _ in box.log]
        first_calibrate = [c for c, _ in cmds].index("calibrate")
        off = [m for c, m in cmds[:first_calibrate] if c == "configure"]
        assert off and off[0]["timing"] == {"capture_probes": False}, arm
    assert ev.mode["decision"]["graphs"] is True  # decided from the two probes (the sandboxes reported nothing)
    # only the candidate's probe given: only the candidate's timing sandbox is told so (the old behaviour's shape)
    for box in boxes.values():
        box.log.clear()
    run_paired_timing(boxes["B"], boxes["A"], PROTO, plan, SeedSource(b"n" * 16, "probes"), stats_seed=1,
                      budget_scale=0.02, graph_below_s=10e-6, probes={"B": probes["B"]})
    assert not any(c == "configure" and m.get("timing") == {"capture_probes": False} for c, m, _ in boxes["A"].log)
