"""The sandbox process: loads ONE arm -- the candidate, or the baseline -- and runs what the controller asks.

The two arms of an item run in two sandboxes (docs/architecture.md, "Arms in separate processes"): the baseline's
never imports the candidate, so nothing the candidate leaves behind (patched instances, finalizers, modes, hooks,
signal handlers) can run while the baseline is timed. The controller times each sample by asking one sandbox for
it, alternating arms.

A sandbox never receives golden outputs, the database path, statistics or the run's nonce: only the problem and
its arm's bytes, input recipes (seeds drawn by the controller) and commands. It answers with handles to raw
outputs and raw timing samples; the controller decides. Everything here may be patched by the candidate, which is
why every answer is checked by the controller (docs/threat-model.md).

Between the candidate's calls no candidate code may run (docs/threat-model.md, "no candidate code outside its
calls"): the garbage collector stays off (collected only at fixed points before inputs exist, so ``gc.isenabled()``
tells a timed call nothing), torch mode stacks must be empty whenever the harness builds or reads tensors, outputs
must be plain tensors and are read with torch functions disabled, and the process leaves with ``os._exit``
(atexit handlers never run).

Commands (one JSON message each; replies carry ``ok``): ``outputs`` (correctness and probes: one call per recipe,
outputs exported by handle), ``calibrate``, ``configure``, ``prepare`` (build a round's two input groups, after
fingerprinting the previous round's outputs), ``sample`` (one timed sample on a group), ``fingerprint``,
``tamper``, ``ping``, ``bye``.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

import torch

from ..problems.inputs import materialize, materialize_stream
from ..problems.loader import LoadedProblem, load_class, short_exc
from ..problems.model import SourceFile
from .outputs import (
    bits_equal,
    export_output,
    fingerprint,
    harness_reads,
    leaves,
    mode_stack_depths,
    modes_left,
    output_problem,
    structure,
)
from .tamper import TamperSnapshot, os_thread_count
from .wire import Channel, PeerGone

ROLES = ("candidate", "baseline")


class HarnessRefusal(Exception):
    """The candidate left the process in a state the harness will not work in (a mode pushed, ...)."""


def _src(d: dict) -> SourceFile:
    return SourceFile(Path(d["path"]), d["source"], d["sha256"])


def _no_huge_pages() -> None:
    """[sandbox].thp = "off": no transparent huge pages for this process (whether a buffer got one was luck, and
    moved one sandbox's times against the other's). prctl(PR_SET_THP_DISABLE); Linux only, best effort."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
    except (OSError, AttributeError):
        pass


class ChildState:
    def __init__(self, init: dict) -> None:
        self.init = init
        self.role = init.get("role", "candidate")
        if self.role not in ROLES:
            raise ValueError(f"unknown sandbox role {self.role!r}")
        if init.get("thp") == "off":
            _no_huge_pages()
        self.threads = int(init["threads"])
        spec = init["device"]
        mod, _, cls = spec["target"].partition(":")
        __import__(mod)
        device_cls = getattr(sys.modules[mod], cls)
        self.device = device_cls(index=int(spec.get("index", 0)), options=spec.get("options") or {})
        self.device.setup(self.threads)
        self.device.warm_runtime()  # runtime threads (MLX's stream thread, CUDA's) exist before any count
        self.problem = LoadedProblem.load(_src(init["problem"]))
        self.sizes = dict(init.get("sizes") or {})
        self.init_seed = int(init["init_seed"])
        self.framework = self.device.framework
        self.expected_location = "mlx" if self.framework == "mlx" else self.device.name
        self._models: dict[str, Any] = {}
        self.batches: dict[str, list] = {}
        self.kept: list = []  # this arm's outputs of the current round, until fingerprinted
        self.exported: list = []  # outputs whose handles the controller may still be reading
        self.k = 1

        import numpy  # noqa: F401  (snapshot its namespace too)

        from ..problems import inputs as inputs_module
        from . import child as child_module
        from . import outputs as outputs_module
        from . import wire as wire_module

        # the collector stays off from here on: candidate calls never see it on (no tell of a timed call), and it
        # runs only where the harness calls it, before any input exists (sandbox/child.py h_prepare)
        if bool(init.get("disable_gc", True)):
            gc.disable()
        watched = [child_module, outputs_module, wire_module, inputs_module, self.problem.module,
                   *self.device.tamper_modules()]
        self.arm_cls = self._arm_class()
        self.snapshot = TamperSnapshot.take(self.device.timer_functions(), watched)
        self.threads_before_import = os_thread_count()
        if self.role == "candidate" and init.get("source") is not None:
            self.arm_cls = load_class(_src(init["source"]), init.get("class_name", "ModelNew"), "candidate")
        self.watched = watched
        self.threads_after_import = os_thread_count()
        # everything loaded so far lives as long as the process: keep it out of later collections (a full one
        # over torch's ~165k objects costs ~150 ms; over what the calls allocate, well under a millisecond)
        gc.freeze()

    def _arm_class(self) -> type:
        """The baseline class (reference, its MLX port, or a declared baseline file), loaded before anything else.
        A candidate sandbox without a candidate file runs the reference too (A/A items)."""
        if self.role == "baseline" and self.init.get("source") is not None:
            return load_class(_src(self.init["source"]), self.init.get("class_name", "ModelNew"), "baseline")
        if self.framework == "mlx":
            cls = self.problem.mlx_model
            if cls is None:
                raise RuntimeError(f"{self.problem.src.path} has no ModelMLX port; it cannot run on --device=mlx")
            return cls
        return self.problem.module.Model

    def tamper_changes(self) -> list[str]:
        now = TamperSnapshot.take(self.device.timer_functions(), self.watched)
        return self.snapshot.changes(now)

    def model(self, sizes_override: Optional[dict] = None) -> Any:
        sizes = dict(self.sizes)
        sizes.update(sizes_override or {})
        key = repr(sorted(sizes.items()))
        if key not in self._models:
            with self.problem.sizes(sizes):
                what = "ModelNew" if self.role == "candidate" else "baseline"
                model = self.problem.build(self.arm_cls, self.init_seed, what)
                if len(self._models) > 4:
                    self._models.clear()
                self._models[key] = self.device.prepare_model(model)
        return self._models[key]

    def require_no_modes(self, when: str) -> None:
        left = modes_left(mode_stack_depths())
        if left:
            raise HarnessRefusal(f"the candidate left {left} pushed {when}: a mode sees every tensor the harness "
                                 "builds or reads (work outside the candidate's calls)")

    def inputs(self, recipe: dict) -> list:
        """The recipe's inputs. Built with torch functions enabled: drawing them on a GPU goes through
        ``torch.device``'s own mode; the callers require the mode stacks empty before and after, so no mode of the
        candidate's can see them being built."""
        r = dict(recipe)
        sizes = dict(self.sizes)
        sizes.update(r.get("sizes") or {})
        r["sizes"] = sizes
        if self.framework == "mlx":
            return [self.device.to_device(x) for x in materialize(self.problem, r)]
        return materialize(self.problem, r, self.device.to_device, self.device.generation_device())

    def input_stream(self, recipe: dict) -> list[list]:
        """A stream recipe's input sets (timing groups, calibration); see ``inputs.materialize_stream``."""
        r = dict(recipe)
        r["sizes"] = {**self.sizes, **(recipe.get("sizes") or {})}
        if self.framework == "mlx":
            return [[self.device.to_device(x) for x in xs] for xs in materialize_stream(self.problem, r)]
        return materialize_stream(self.problem, r, self.device.to_device, self.device.generation_device())

    def call(self, model: Any, inputs: list) -> Any:
        if self.framework == "torch":
            with torch.no_grad():
                return model(*inputs)
        return model(*inputs)

    def plain_problem(self, out: Any) -> Optional[str]:
        if self.framework == "torch":
            return output_problem(out, self.expected_location)
        return None  # MLX arrays are immutable values; read through to_host

    def release(self) -> None:
        """Drop what the controller may have been reading and what the last round produced."""
        self.exported = []
        self.kept = []


# --------------------------------------------------------------------------------------------- handlers


def h_outputs(st: ChildState, msg: dict) -> dict:
    """One call per recipe; outputs come back as handles, plus the facts the controller checks."""
    delay = float(msg.get("recheck_delay", 0.0))
    st.release()
    results: list[dict[str, Any]] = []
    for recipe in msg["recipes"]:
        st.require_no_modes("before its inputs were built")
        gc.collect()
        model = st.model(recipe.get("sizes"))
        inputs = st.inputs(recipe)
        with harness_reads():
            originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        threads0 = os_thread_count()
        try:
            out = st.call(model, inputs)
            st.device.synchronize()
        except Exception as e:  # noqa: BLE001
            results.append({"error": f"{st.role} raised {short_exc(e)}"})
            continue
        problem = st.plain_problem(out)
        if problem:
            results.append({"error": f"{st.role} returned {problem}", "output_type": "yes"})
            continue
        st.require_no_modes("after its call")
        location = st.device.output_location(out)
        if st.framework != "torch":
            out = st.device.to_host(out)
        try:
            handles = export_output(st.device, out)
            recheck = None
            if delay:
                time.sleep(delay)  # late writers: the controller compares what it reads now and later
                if not getattr(st.device, "live_exports", False):
                    recheck = export_output(st.device, out)
        except Exception as e:  # noqa: BLE001
            results.append({"error": f"{st.role} output cannot be read: {short_exc(e)}"})
            continue
        with harness_reads():
            mutated = [i for i, (x, o) in enumerate(zip(inputs, originals))
                       if isinstance(o, torch.Tensor) and not bits_equal(x, o)]
        results.append({
            "output": handles, "recheck": recheck, "structure": structure(out), "location": location,
            "mutated_inputs": mutated, "new_threads": _new_threads_after(threads0, THREAD_SETTLE_S),
        })
        st.exported.append(out)  # alive until the controller's next request: it may be reading it
        del inputs, originals
    return {"results": results, "tamper": st.tamper_changes()}


def h_calibrate(st: ChildState, msg: dict) -> dict:
    """Warm the arm up, then estimate its steady time per call: single-call samples (cold; on CUDA also
    test-captured as graphs) and three samples of all warm-up inputs back to back, of which the fastest counts
    (preemption only ever adds time)."""
    st.release()
    gc.collect()
    model = st.model()
    st.require_no_modes("before calibration inputs were built")
    batches = st.input_stream(msg["warmup"])
    for b in batches:
        out = st.call(model, b)
        st.device.synchronize()
        del out
    singles = []
    for b in batches[: max(1, min(3, len(batches)))]:
        s = st.device.timed(lambda *x: st.call(model, list(x)), [b])
        singles.append(s.seconds)
    steady = []
    for _ in range(3):
        sample = st.device.timed(lambda *x: st.call(model, list(x)), batches)
        steady.append(sample.seconds)
        del sample
    per_call = min(steady) / max(1, len(batches))
    del batches
    return {"per_call_s": per_call, "single_call_s": sorted(singles)[len(singles) // 2],
            "timing_info": st.device.timing_info(), "threads": os_thread_count(), "tamper": st.tamper_changes()}


def h_probe_graphs(st: ChildState, msg: dict) -> dict:
    """Can this arm be captured as a CUDA graph, and how fast is one call then? Single-call samples that the device
    also test-captures (a device without graphs reports nothing). Run in a sandbox that will not be timed."""
    st.release()
    gc.collect()
    model = st.model()
    st.require_no_modes("before probe inputs were built")
    batches = st.input_stream(msg["warmup"])
    for b in batches:
        st.device.timed(lambda *x: st.call(model, list(x)), [b])
    return {"timing_info": st.device.timing_info()}


def h_configure(st: ChildState, msg: dict) -> dict:
    st.k = int(msg.get("k", 1))
    st.device.configure_timing(dict(msg.get("timing") or {}))
    return {"timing_info": st.device.timing_info()}


def _prints(st: ChildState, msg: Optional[dict]) -> list:
    if not msg:
        return []
    gen = torch.Generator().manual_seed(int(msg["positions_seed"]))
    n = int(msg.get("n_positions", 64))
    # MLX arrays are read through host torch copies (unified memory: a copy, no transfer); torch outputs are
    # summarised where they live
    outs = st.kept if st.framework == "torch" else [st.device.to_host(o) for o in st.kept]
    return [fingerprint(out, gen, n) for out in outs]


#: how long a thread the candidate started may take to finish after its call returned before it counts as left
#: running (correctness calls only: nothing is timed then; during timing, threads are counted per sample and their
#: CPU between requests is idle CPU). torch.compile's first call starts short-lived helper threads that a loaded
#: machine can leave alive for a few hundred milliseconds.
THREAD_SETTLE_S = 2.0


def _new_threads_after(threads0: int, within_s: float) -> int:
    """Threads beyond ``threads0`` still alive once they had ``within_s`` to finish (returns as soon as none are)."""
    deadline = time.monotonic() + within_s
    new = os_thread_count() - threads0
    while new > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        new = os_thread_count() - threads0
    return new


def h_release(st: ChildState, msg: dict) -> dict:
    """End of a round: fingerprint its outputs (positions chosen by the controller now), free everything of it
    and collect garbage while no input exists. The candidate's own code may run here (finalizers of what it
    returned): nothing is timed meanwhile, and this CPU is not compared with the baseline's."""
    prints = _prints(st, msg.get("fingerprint"))
    st.release()
    st.batches = {}
    gc.collect()
    return {"prints": prints, "tamper": st.tamper_changes() if msg.get("tamper") else []}


def h_prepare(st: ChildState, msg: dict) -> dict:
    """Build the round's two input groups with the collector off: the same harness code on the same recipes in
    both sandboxes, whose CPU the controller compares (gates/integrity.py IdleGate)."""
    st.require_no_modes("before the round's inputs were built")
    st.batches = {"p1": st.input_stream(msg["p1"]), "p2": st.input_stream(msg["p2"])}
    st.device.synchronize()
    st.require_no_modes("while the round's inputs were built")
    return {"threads": os_thread_count()}


def h_sample(st: ChildState, msg: dict) -> dict:
    """One timing sample of this sandbox's arm: its calls on every input set of one group, timed as one."""
    model = st.model()
    batch = st.batches[msg["group"]]
    threads0 = os_thread_count()
    clock = time.perf_counter_ns
    with (torch.no_grad() if st.framework == "torch" else _null()):
        t0 = clock()
        sample = st.device.timed(model, batch)
        t1 = clock()
    for out in sample.outputs:
        problem = st.plain_problem(out)
        if problem:
            raise HarnessRefusal(f"a timed call returned {problem}")
    st.kept.extend(sample.outputs)
    st.require_no_modes("after a timed call")
    return {"s": sample.seconds, "host_s": sample.host_seconds, "stamps_ns": [t0, t1],
            "new_threads": os_thread_count() - threads0}


def h_fingerprint(st: ChildState, msg: dict) -> dict:
    prints = _prints(st, msg)
    st.release()
    return {"prints": prints, "tamper": st.tamper_changes() if msg.get("tamper", True) else []}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


HANDLERS = {
    "outputs": h_outputs,
    "calibrate": h_calibrate,
    "configure": h_configure,
    "probe_graphs": h_probe_graphs,
    "release": h_release,
    "prepare": h_prepare,
    "sample": h_sample,
    "fingerprint": h_fingerprint,
    "tamper": lambda st, msg: {"tamper": st.tamper_changes()},
    "ping": lambda st, msg: {},
}


def serve(chan: Channel) -> int:
    try:
        init = chan.recv()
    except PeerGone:
        return 3
    try:
        st = ChildState(init)
    except Exception as e:  # noqa: BLE001
        from ..errors import ProblemLoadError

        if isinstance(e, ProblemLoadError):
            chan.send({"ok": False, "stage": "load", "path": e.path, "error": e.reason})
        else:
            chan.send({"ok": False, "stage": "load", "path": None, "error": short_exc(e),
                       "trace": traceback.format_exc(limit=6)})
        return 0
    chan.send({
        "ok": True,
        "role": st.role,
        "tamper": st.tamper_changes(),
        "modes": mode_stack_depths(),
        "threads_before_import": st.threads_before_import,
        "threads_after_import": st.threads_after_import,
        "fingerprint": st.device.fingerprint(),
        "pid": os.getpid(),
    })
    while True:
        try:
            msg = chan.recv()
        except PeerGone:
            return 0
        cmd = msg.get("cmd")
        if cmd == "bye":
            chan.send({"ok": True})
            return 0
        handler = HANDLERS.get(cmd)
        if handler is None:
            chan.send({"ok": False, "error": f"unknown command {cmd!r}"})
            continue
        try:
            reply = handler(st, msg)
            reply["ok"] = True
        except HarnessRefusal as e:
            reply = {"ok": False, "refusal": True, "error": str(e)}
        except Exception as e:  # noqa: BLE001
            reply = {"ok": False, "error": short_exc(e), "trace": traceback.format_exc(limit=8)}
        chan.send(reply)


def main(fd: int) -> int:
    chan = Channel.from_fd(fd)
    try:
        return serve(chan)
    finally:
        chan.close()


if __name__ == "__main__":  # spawn mode: python -m pytest_autotune.sandbox.child FD
    code = main(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # atexit handlers (the candidate's included) never run


__all__ = ["ChildState", "HANDLERS", "serve", "main", "leaves"]
