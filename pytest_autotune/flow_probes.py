"""The graph-capture probes of an item's flow (docs/architecture.md#the-flow): the candidate's, in the sandbox that
ran correctness, and the baseline's, in a sandbox of its own; neither sandbox is timed. A part of
:class:`pytest_autotune.flow.KernelFlow`, which starts the sandboxes (``_start``, ``_init``)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .gates.base import CandidateFailure, GateContext
from .item_memory import settle, stage_start
from .item_run import ItemRun
from .sandbox.runner import Sandbox


class ProbeStage:
    """Mixed into KernelFlow, whose ``env``, ``_start`` and ``_init`` it uses."""

    env: Any
    _start: Callable[..., Any]
    _init: Callable[..., dict]

    def _probe_graphs(self, box: Sandbox, ctx: GateContext) -> Optional[dict]:
        """The candidate's graph-capture probe, in the sandbox that ran correctness (it is not timed): a capture
        that fails can leave the candidate's own streams capturing for good, and that process with them."""
        if not float(self.env.device.options.get("graph_below_s", 0.0) or 0.0):
            return None
        if ctx.memory.release_between_calls:  # the correctness calls' outputs and cached blocks go first
            box.request({"cmd": "release", "fingerprint": None, "release_memory": True}, phase="graph probe")
        reply = box.request({"cmd": "probe_graphs",
                             "warmup": {"seed": ctx.seeds.seed("graph-probe"), "count": 3}}, phase="graph probe")
        if not reply.get("ok"):
            raise CandidateFailure(str(reply.get("error")))
        return dict(reply.get("timing_info") or {})

    def _baseline_probe(self, item: ItemRun) -> dict:
        """The baseline's graph-capture probe, as the candidate's: in a sandbox of its own that is not timed, once per
        problem, baseline and device in this process (the baseline's code and sizes decide it)."""
        env = self.env
        key = (str(item.spec.problem.path), item.baseline_sha, env.device_spec.name)
        if key not in env.baseline_probes:
            init = self._init(item.problem_src, item.sizes, item.init_seed, "baseline", item.baseline_src, "ModelNew")
            with env.lock.shared():
                stage_start(env, item, "the baseline's graph probe", "graph_probe")
                with self._start(init, f"baseline-{item.spec.item_key}-probe") as box:
                    try:
                        env.baseline_probes[key] = self._probe_graphs(box, item.ctx) or {}
                    except CandidateFailure:  # the baseline cannot be probed: no graph timing known for it -> eager
                        env.baseline_probes[key] = {}
            settle(env, item, "the baseline's probe sandbox")
        return env.baseline_probes[key]


__all__ = ["ProbeStage"]
