"""The sandbox process: loads ONE arm -- the candidate, or the baseline -- and runs what the controller asks.

The two arms of an item run in two sandboxes (docs/architecture.md#arms-in-separate-processes): the baseline's
never imports the candidate, so nothing the candidate leaves behind (patched instances, finalizers, modes, hooks,
signal handlers) can run while the baseline is timed. The controller times each sample by asking one sandbox for
it, alternating arms.

A sandbox never receives golden outputs, the database path, statistics or the run's nonce: only the problem and
its arm's bytes, input recipes (seeds drawn by the controller) and commands. It answers with handles to raw
outputs and raw timing samples; the controller decides. Everything here may be patched by the candidate, which is
why every answer is checked by the controller (docs/design/threat-model.md).

Between the candidate's calls no candidate code may run (docs/architecture.md#no-candidate-code-outside-its-calls): the garbage collector stays off (collected only at fixed points before inputs exist, so ``gc.isenabled()``
tells a timed call nothing), torch mode stacks must be empty whenever the harness builds or reads tensors, outputs
must be plain tensors and are read with torch functions disabled, and the process leaves with ``os._exit``
(atexit handlers never run).

Commands (one JSON message each; replies carry ``ok``): ``outputs`` (correctness and probes: one call per recipe,
outputs exported by handle), ``calibrate``, ``configure``, ``prepare`` (build a round's two input groups, after
fingerprinting the previous round's outputs), ``sample`` (one timed sample on a group), ``fingerprint``,
``tamper``, ``ping``, ``bye``; in the item's build sandbox, ``build`` (sandbox/child_build.py).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

from ..problems.inputs import iter_stream, materialize, materialize_groups
from ..problems.loader import LoadedProblem, load_class, short_exc
from ..problems.model import SourceFile
from .child_build import h_build, prepare_compiled
from .child_timing import (
    THREAD_SETTLE_S,
    h_calibrate,
    h_configure,
    h_fingerprint,
    h_prepare,
    h_probe_graphs,
    h_release,
    h_sample,
    new_threads_after,
)
from .outputs import (
    HarnessRefusal,
    bits_equal,
    export_output,
    harness_reads,
    leaves,
    mode_stack_depths,
    modes_left,
    output_problem,
    structure,
)
from .tamper import TamperSnapshot, os_thread_count
from .wire import Channel, PeerGone

#: build: the item's build sandbox (sandbox/child_build.py), which imports the candidate only when asked to build
ROLES = ("candidate", "baseline", "build")


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
        from . import child_timing as child_timing_module
        from . import outputs as outputs_module
        from . import wire as wire_module

        # the collector stays off from here on: candidate calls never see it on (no tell of a timed call), and it
        # runs only where the harness calls it, before any input exists (sandbox/child.py h_prepare)
        if bool(init.get("disable_gc", True)):
            gc.disable()
        watched = [child_module, child_timing_module, outputs_module, wire_module, inputs_module, self.problem.module,
                   *self.device.tamper_modules()]
        self.arm_cls = self._arm_class()
        self.ext = prepare_compiled(init, self.role)  # compiled code; before the snapshot: the harness's own patches
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
                what = "baseline" if self.role == "baseline" else "ModelNew"
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

    def inputs(self, recipe: dict, release_memory: bool = False) -> list:
        """The recipe's inputs. Built with torch functions enabled: drawing them on a GPU goes through
        ``torch.device``'s own mode; the callers require the mode stacks empty before and after, so no mode of the
        candidate's can see them being built. ``release_memory``: cached blocks go back after each pattern and
        layout step (the item's memory plan)."""
        r = dict(recipe)
        sizes = dict(self.sizes)
        sizes.update(r.get("sizes") or {})
        r["sizes"] = sizes
        if self.framework == "mlx":
            return [self.device.to_device(x) for x in materialize(self.problem, r)]
        return materialize(self.problem, r, self.device.to_device, self.device.generation_device(),
                           self.device.release_cached_memory if release_memory else None)

    def input_stream(self, recipe: dict) -> list[list]:
        """A stream recipe's input sets (calibration); see ``inputs.materialize_stream``."""
        return self.input_groups({"sets": recipe})["sets"]

    def input_groups(self, recipes: dict[str, dict]) -> dict[str, list[list]]:
        """A round's groups (``inputs.materialize_groups``: derived groups of one round share a draw)."""
        rs = {g: {**r, "sizes": {**self.sizes, **(r.get("sizes") or {})}} for g, r in recipes.items()}
        if self.framework == "mlx":
            return {g: [[self.device.to_device(x) for x in xs] for xs in sets]
                    for g, sets in materialize_groups(self.problem, rs).items()}
        return materialize_groups(self.problem, rs, self.device.to_device, self.device.generation_device())

    def iter_inputs(self, recipe: dict) -> Iterator[list]:
        """A stream recipe's input sets one at a time (``inputs.iter_stream``): the caller drops each before the
        next is built."""
        r = dict(recipe)
        r["sizes"] = {**self.sizes, **(recipe.get("sizes") or {})}
        if self.framework == "mlx":
            for xs in iter_stream(self.problem, r):
                yield [self.device.to_device(x) for x in xs]
            return
        yield from iter_stream(self.problem, r, self.device.to_device, self.device.generation_device())

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
        inputs = st.inputs(recipe, bool(msg.get("release_memory")))
        with harness_reads():
            originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        threads0 = os_thread_count()
        try:
            out = st.call(model, inputs)
            st.device.synchronize()
        except torch.OutOfMemoryError:
            raise  # not the arm's answer: the item's memory plan did not hold (serve() says so)
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
            "mutated_inputs": mutated, "new_threads": new_threads_after(threads0, THREAD_SETTLE_S),
        })
        st.exported.append(out)  # alive until the controller's next request: it may be reading it
        del inputs, originals
        if msg.get("release_memory"):  # the item's memory plan: the cached blocks go back before the next stage
            st.device.release_cached_memory()
    return {"results": results, "tamper": st.tamper_changes()}


HANDLERS = {
    "outputs": h_outputs,
    "build": h_build,
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
        except torch.OutOfMemoryError as e:
            st.release()
            st.batches = {}
            reply = {"ok": False, "oom": True, "free_bytes": _free_after_oom(st),
                     "error": f"out of device memory during {cmd}: {str(e).splitlines()[0][:300]}"}
        except Exception as e:  # noqa: BLE001
            reply = {"ok": False, "error": short_exc(e), "trace": traceback.format_exc(limit=8)}
        chan.send(reply)


def _free_after_oom(st: ChildState) -> Optional[int]:
    try:
        st.device.release_cached_memory()
        return st.device.free_memory_bytes()
    except Exception:  # noqa: BLE001 - the report of a failure must not fail
        return None


def main(fd: int) -> int:
    """Spawn mode (no zygote): what the zygote sets up once, done here."""
    from .environment import no_progress_monitor

    no_progress_monitor()
    chan = Channel.from_fd(fd)
    try:
        return serve(chan)
    finally:
        chan.close()


__all__ = ["ChildState", "HarnessRefusal", "HANDLERS", "serve", "main", "h_outputs", "h_prepare", "h_sample",
           "h_release", "h_calibrate", "h_configure", "h_probe_graphs", "h_fingerprint"]


if __name__ == "__main__":  # spawn mode: python -m pytest_autotune.sandbox.child FD
    code = main(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # atexit handlers (the candidate's included) never run


__all__ = ["ChildState", "HANDLERS", "serve", "main", "leaves"]
