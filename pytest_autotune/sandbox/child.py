"""The sandbox process: imports a candidate and runs what the controller asks, nothing more.

It never receives golden outputs, the database path, statistics or the run's nonce: only the problem and
candidate bytes, input recipes (seeds drawn by the controller) and commands. It answers with raw outputs and raw
timing samples; the controller decides. Everything here may be patched by the candidate, which is why every
answer is checked by the controller (docs/threat-model.md).
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

from ..problems.inputs import materialize
from ..problems.loader import LoadedProblem, load_class, short_exc
from ..problems.model import SourceFile
from .tamper import TamperSnapshot, os_thread_count
from .wire import Channel, PeerGone, WireError, dtype_name

ARMS = ("baseline", "candidate")


def _src(d: Optional[dict]) -> Optional[SourceFile]:
    if not d:
        return None
    return SourceFile(Path(d["path"]), d["source"], d["sha256"])


def bits_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two outputs/inputs (NaN-safe, sign-of-zero-safe)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype == torch.bool:
            return torch.equal(a, b)
        if a.is_floating_point() or a.is_complex():
            size = a.element_size()
            if a.is_complex():
                a, b = torch.view_as_real(a), torch.view_as_real(b)
                size //= 2
            it = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[size]
            return torch.equal(a.contiguous().view(it), b.contiguous().view(it))
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(bits_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _unsendable(host: Any) -> Optional[str]:
    """Why a host copy of an output cannot be checked by the controller (``None`` if it can): every leaf must
    be a CPU tensor of a dtype the wire carries. Anything else is the candidate's error, reported as such --
    not a message the sandbox fails to send (which would read as a crash)."""
    if isinstance(host, torch.Tensor):
        if host.device.type != "cpu":
            return f"a tensor on {host.device.type!r} that cannot be read back"
        try:
            dtype_name(host.dtype)
        except WireError:
            return f"a tensor of dtype {host.dtype}, which the harness does not compare"
        if host.layout != torch.strided:
            return f"a {host.layout} tensor (outputs must be dense)"
        return None
    if isinstance(host, (list, tuple)):
        for item in host:
            why = _unsendable(item)
            if why:
                return why
        return None
    return f"a {type(host).__name__} inside its output (outputs are tensors or tuples of tensors)"


def _flat_tensors(out: Any) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat_tensors(o)]
    return []


class ChildState:
    def __init__(self, init: dict) -> None:
        self.init = init
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
        self._models: dict[str, dict[str, Any]] = {}
        self.kept: list = []  # candidate outputs of the current round, until fingerprinted
        self.pending_scrub: list = []  # baseline outputs of the round's last sample, scrubbed next command
        self.batches: dict[str, list] = {}
        self.disable_gc = bool(init.get("disable_gc", True))

        import numpy  # noqa: F401  (snapshot its namespace too)

        from . import child as child_module
        from . import wire as wire_module
        from ..problems import inputs as inputs_module

        watched = [child_module, wire_module, inputs_module, self.problem.module, sys.modules[type(self.device).__module__]]
        self.baseline_cls, self.candidate_cls = self._arm_classes_before_candidate()
        self.snapshot = TamperSnapshot.take(self.device.timer_functions(), watched)
        self.threads_before_import = os_thread_count()
        cand = init.get("candidate")
        if cand is not None:
            self.candidate_cls = load_class(_src(cand), init.get("candidate_class", "ModelNew"), "candidate")
        self.watched = watched
        self.threads_after_import = os_thread_count()
        # everything loaded so far lives as long as the process: keep it out of the collections that
        # h_prepare runs before every timed round (a full collection over torch's ~165k objects costs
        # ~150 ms; over what the calls allocate, well under a millisecond)
        gc.freeze()

    def _arm_classes_before_candidate(self) -> tuple[type, Optional[type]]:
        """Baseline class (reference, its MLX port, or a declared baseline) — loaded BEFORE the candidate."""
        base = self.init.get("baseline")
        if base is not None:
            cls = load_class(_src(base), self.init.get("baseline_class", "ModelNew"), "baseline")
        elif self.framework == "mlx":
            cls = self.problem.mlx_model
            if cls is None:
                raise RuntimeError(f"{self.problem.src.path} has no ModelMLX port; it cannot run on --device=mlx")
        else:
            cls = self.problem.module.Model
        # the candidate defaults to the baseline itself (A/A items and clean-process baseline runs)
        return cls, cls

    def tamper_changes(self) -> list[str]:
        now = TamperSnapshot.take(self.device.timer_functions(), self.watched)
        return self.snapshot.changes(now)

    def models(self, sizes_override: Optional[dict] = None) -> dict[str, Any]:
        sizes = dict(self.sizes)
        sizes.update(sizes_override or {})
        key = repr(sorted(sizes.items()))
        if key not in self._models:
            with self.problem.sizes(sizes):
                arms = {}
                for arm, cls in (("baseline", self.baseline_cls), ("candidate", self.candidate_cls)):
                    model = self.problem.build(cls, self.init_seed, "ModelNew" if arm == "candidate" else "baseline")
                    arms[arm] = self.device.prepare_model(model)
            if len(self._models) > 4:
                self._models.clear()
            self._models[key] = arms
        return self._models[key]

    def inputs(self, recipe: dict) -> list:
        r = dict(recipe)
        sizes = dict(self.sizes)
        sizes.update(r.get("sizes") or {})
        r["sizes"] = sizes
        if self.framework == "mlx":
            return [self.device.to_device(x) for x in materialize(self.problem, r)]
        return materialize(self.problem, r, self.device.to_device, self.device.generation_device())

    def call(self, arm: str, model: Any, inputs: list) -> Any:
        if self.framework == "torch":
            with torch.no_grad():
                return model(*inputs)
        return model(*inputs)


# --------------------------------------------------------------------------------------------- handlers


def h_outputs(st: ChildState, msg: dict) -> dict:
    """Run one arm on each recipe; return outputs plus the facts the controller checks."""
    arm = msg["arm"]
    delay = float(msg.get("recheck_delay", 0.0))
    results = []
    for recipe in msg["recipes"]:
        models = st.models(recipe.get("sizes"))
        inputs = st.inputs(recipe)
        originals = [st.device.to_host(x) if not isinstance(x, (int, float, bool, str)) else x for x in inputs]
        threads0 = os_thread_count()
        try:
            out = st.call(arm, models[arm], inputs)
            st.device.synchronize()
        except Exception as e:  # noqa: BLE001
            results.append({"error": f"{arm} raised {short_exc(e)}"})
            continue
        location = st.device.output_location(out)
        tensors = _flat_tensors(out) if st.framework == "torch" else None
        if st.framework == "torch" and (not tensors or not isinstance(out, (torch.Tensor, tuple, list))):
            results.append({"error": f"{arm} returned {type(out).__name__}, not a tensor"})
            continue
        try:
            first = st.device.to_host(out)
        except Exception as e:  # noqa: BLE001
            results.append({"error": f"{arm} output cannot be read: {short_exc(e)}"})
            continue
        unsendable = _unsendable(first) if st.framework == "torch" else None
        if unsendable:
            results.append({"error": f"{arm} returned {unsendable}", "location": location})
            continue
        if delay:  # late writers: re-read the output after a pause (correctness phase)
            time.sleep(delay)
            second = st.device.to_host(out)
        else:
            second = first
        threads1 = os_thread_count()
        mutated = [
            i for i, (x, o) in enumerate(zip(inputs, originals))
            if not isinstance(o, (int, float, bool, str)) and not bits_equal(st.device.to_host(x), o)
        ]
        results.append({
            "output": first if isinstance(first, torch.Tensor) else list(first),
            "structure": "tensor" if isinstance(first, torch.Tensor) else "tuple",
            "location": location,
            "changed_after_return": not bits_equal(first, second),
            "mutated_inputs": mutated,
            "new_threads": threads1 - threads0,
        })
        del out, first, second, inputs, originals
    return {"results": results, "tamper": st.tamper_changes()}


def h_calibrate(st: ChildState, msg: dict) -> dict:
    """Warm both arms up on their own inputs and estimate each arm's time per call."""
    models = st.models()
    per_arm: dict[str, float] = {}
    for arm in ARMS:
        batches = [st.inputs(r) for r in msg["warmup"]]
        for b in batches:
            out = st.call(arm, models[arm], b)
            st.device.synchronize()
            if arm == "baseline":
                st.device.scrub(out)
            del out
        times = []
        for b in batches[: max(1, min(3, len(batches)))]:
            s = st.device.timed(lambda *x, m=models[arm], a=arm: st.call(a, m, list(x)), [b])
            if arm == "baseline":
                for o in s.outputs:
                    st.device.scrub(o)
            times.append(s.seconds)
        per_arm[arm] = sorted(times)[len(times) // 2]
    return {"per_call_s": per_arm, "threads": os_thread_count(), "tamper": st.tamper_changes()}


def h_prepare(st: ChildState, msg: dict) -> dict:
    st.batches = {"p1": [st.inputs(r) for r in msg["p1"]], "p2": [st.inputs(r) for r in msg["p2"]]}
    st.kept = []
    gc.collect()
    return {"threads": os_thread_count()}


def h_go(st: ChildState, msg: dict) -> dict:
    """One round: ``ABBA`` = A(p1) B(p1) B(p2) A(p2), or ``BAAB`` = B(p1) A(p1) A(p2) B(p2) (the controller
    alternates them, so each arm takes each position equally often: the first sample of a round runs colder).

    Baseline outputs are overwritten before the next candidate sample (nothing of the answer is left for the
    candidate to find) and stay allocated until the round ends, so their freshly written block does not become
    the candidate's next output buffer, hot in cache (with that, an A/A item read 1.03).
    ``samples`` and ``stamps_ns`` come back per slot A1 B1 B2 A2, whatever the order they ran in."""
    models = st.models()
    arms = {"A": models["baseline"], "B": models["candidate"]}  # called directly under one no_grad context
    p1, p2 = st.batches["p1"], st.batches["p2"]
    order = msg.get("order", "ABBA")
    if order not in ("ABBA", "BAAB"):
        raise ValueError(f"unknown order {order!r}")
    seq = [(order[0], "1"), (order[1], "1"), (order[2], "2"), (order[3], "2")]
    batches = {"1": p1, "2": p2}
    threads0 = os_thread_count()
    clock = time.perf_counter_ns
    stamps: dict[str, tuple[int, int]] = {}
    results: dict[str, Any] = {}
    unscrubbed: list = []  # (outputs, batch) of baseline samples not yet overwritten
    held: list = []  # scrubbed baseline outputs, kept allocated until the round ends
    kept: list = []
    if st.disable_gc:
        gc.disable()
    try:
        ctx = torch.no_grad() if st.framework == "torch" else _null()
        with ctx:
            for pos, (arm, group) in enumerate(seq):
                if arm == "B":
                    for outs, batch in unscrubbed:
                        for o in outs:
                            _scrub_unless_input(st, o, batch)
                        held.append(outs)
                    unscrubbed = []
                slot = arm + group
                t0 = clock()
                sample = st.device.timed(arms[arm], batches[group])
                t1 = clock()
                stamps[slot] = (t0, t1)
                results[slot] = sample
                if arm == "A":
                    unscrubbed.append((sample.outputs, batches[group]))
                else:
                    kept.extend(sample.outputs)
                sample.outputs = []
    finally:
        if st.disable_gc:
            gc.enable()
    threads1 = os_thread_count()
    # baseline outputs still unscrubbed (ABBA's A2): at the next command, outside the round's wall-clock window
    st.pending_scrub = [o for outs, _ in unscrubbed for o in outs]
    del held
    st.kept = kept  # B(p1) outputs first, then B(p2): the order of the recipes
    st.batches = {}
    slots = ("A1", "B1", "B2", "A2")
    return {
        "samples": [[results[k].seconds, results[k].host_seconds] for k in slots],
        # [start, end] of each slot's sample on the controller's clock too (WallClockGate)
        "stamps_ns": [t for k in slots for t in stamps[k]],
        "order": order,
        "new_threads": threads1 - threads0,
    }


def h_go_baseline(st: ChildState, msg: dict) -> dict:
    """The clean-process reference for baseline sanity: the baseline alone on the round's input groups,
    A(p1) A(p2), in a sandbox that never imported the candidate, timed in the same window as the item's round."""
    base = st.models()["baseline"]
    p1, p2 = st.batches["p1"], st.batches["p2"]
    if st.disable_gc:
        gc.disable()
    try:
        ctx = torch.no_grad() if st.framework == "torch" else _null()
        with ctx:
            a1 = st.device.timed(base, p1)
            for o in a1.outputs:
                _scrub_unless_input(st, o, p1)
            a2 = st.device.timed(base, p2)
            for o in a2.outputs:
                _scrub_unless_input(st, o, p2)
    finally:
        if st.disable_gc:
            gc.enable()
    st.batches = {}
    return {"samples": [[a1.seconds, a1.host_seconds], [a2.seconds, a2.host_seconds]]}


def _scrub_unless_input(st: ChildState, out: Any, batch: list) -> bool:
    """Scrub a baseline output -- but never through memory it shares with an input of the batch (a reference
    that returns a view of its input would otherwise have the candidate's inputs overwritten with NaN)."""
    inputs = {_storage_ptr(x) for b in batch for x in b if isinstance(x, torch.Tensor)}
    if any(_storage_ptr(t) in inputs for t in _flat_tensors(out)):
        return False
    st.device.scrub(out)
    return True


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - tensors without storage (e.g. MLX arrays are not torch tensors)
        return id(t)


def h_fingerprint(st: ChildState, msg: dict) -> dict:
    """Cheap summaries of the candidate outputs just timed, at positions chosen AFTER they were produced."""
    for o in st.pending_scrub:
        st.device.scrub(o)
    st.pending_scrub = []
    gen = torch.Generator().manual_seed(int(msg["positions_seed"]))
    n_pos = int(msg.get("n_positions", 64))
    prints = []
    for out in st.kept:
        host = st.device.to_host(out)
        ts = _flat_tensors(host) if not isinstance(host, torch.Tensor) else [host]
        fp = []
        for t in ts:
            flat = t.reshape(-1)
            if flat.numel() == 0:
                fp.append({"numel": 0})
                continue
            idx = torch.randint(0, flat.numel(), (min(n_pos, flat.numel()),), generator=gen)
            f64 = flat.to(torch.float64)
            fp.append({
                "numel": flat.numel(),
                "shape": list(t.shape),
                "dtype": str(t.dtype).replace("torch.", ""),
                "sum": float(f64.sum()),
                "abs_sum": float(f64.abs().sum()),
                "index": idx,
                "values": flat[idx].to(torch.float64),
            })
        prints.append(fp)
    st.kept = []
    # the snapshot costs a few ms: the controller asks for it every few rounds and once more after the last
    return {"prints": prints, "tamper": st.tamper_changes() if msg.get("tamper", True) else []}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


HANDLERS = {
    "outputs": h_outputs,
    "calibrate": h_calibrate,
    "prepare": h_prepare,
    "go": h_go,
    "go_baseline": h_go_baseline,
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
        "tamper": st.tamper_changes(),
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
    sys.exit(main(int(sys.argv[1])))
