"""Timing on the CUDA device: one sample, eager or as a CUDA graph, and the choice between the two.

One sample (``timed``), in order, all of it inside ``host_seconds``:

1. graph mode only: copy the sample's inputs into the graph's static input buffers;
2. reset the persisting-L2 state (``cuCtxResetPersistingL2Cache``, the carve-out limit back to 0, the current
   stream's access-policy window cleared), then write a buffer of ``l2_flush_factor`` x the L2 size, and wait
   for it (a device-wide synchronisation, so nothing of the flush overlaps the timed region);
3. the hold (``[devices.cuda].head_start``, :mod:`.head_start`): queued on the stream, so the GPU waits while
   the host gets to its first kernel (graph mode without a hold: a short GPU spin, the pre-roll, hides the
   replay's launch);
4. start event, the first call (eager) or the replay of the graph that holds the ``k`` calls, the hold's release,
   the other calls, end event -- the host's clock around these launches is the sample's enqueue time;
5. graph mode only: copy the outputs out of the graph's memory (these copies are the sample's outputs, the
   ones the controller fingerprints) and overwrite the graph-owned outputs (NaN / 0), so the next replay
   cannot clobber what is kept and no answer is left lying in graph memory for the other arm to find;
6. ``torch.cuda.synchronize()`` -- device-wide: work a call left running on another stream is waited for
   here, so it shows up in the host time and not in the event time (``DeviceClockGate``).

``seconds`` is the event time of step 4 -- with a head start, the larger of it and the enqueue time
(:func:`.head_start.sample_seconds`). In graph mode the two events are nodes *inside* the graph, so the graph's
launch latency is not timed (it is the same for both arms and would only pull every ratio towards 1); where this
torch/driver cannot time events recorded in a graph, the events around the replay are used.

The graph helpers are in :mod:`.graphs`; the L2 flush and persisting-L2 reset that step 2 calls are
:meth:`CudaDevice.flush_l2 <pytest_autotune.measure.devices.cuda.device.CudaDevice.flush_l2>`. This module's
functions and classes are in the sandbox's tamper snapshot (``CudaDevice.tamper_modules``).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional, Sequence

import torch

from ....tree import tensors
from ..base import Sample
from .driver import Driver
from .graphs import (
    CaptureFailed,
    Graph,
    copy_tree,
    external_events,
    inner_seconds,
    poison,
    preroll,
    signature,
    stage,
    static_copies,
)
from .head_start import HeadStart

#: calibration samples that are also test-captured (the schedule calibrates each arm on up to 3 inputs)
_MAX_CALIBRATION_CAPTURES = 8
#: graphs kept per sandbox (one per input group is all a timing run needs)
_MAX_GRAPHS = 4



def replay_differs(fn: Callable[..., Any], g: Graph) -> Optional[str]:
    """Why the graph's replay is not the call (None where it is): its outputs against the same call run eagerly on
    the graph's own inputs. A kernel launched on another stream than the current one (the legacy default stream, a
    stream of its own) runs once while the capture is under way and is not in the graph: every replay then leaves
    the outputs as they were, and a graph-timed sample would time nothing (an H100 run of the public KernelBench
    leaderboard's ReLU, Swish and ELU kernels read zeros in timed outputs). Such an arm is timed eagerly, with the
    other (a candidate may refuse to be captured: docs/architecture.md, "The sample's shape")."""
    with torch.no_grad():
        eager = fn(*g.static[0])
    torch.cuda.synchronize()
    return outputs_differ(tensors(g.outputs[0]), tensors(eager))


def outputs_differ(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> Optional[str]:
    """Why a graph's replayed outputs ``got`` are not the eager call's ``want`` (None where they agree): floating
    outputs within 1e-3 relative of the eager call's largest finite magnitude (NaN matching NaN: a call that answers
    NaN, or returns the poisoned buffer the probe replays onto, is judged by the gates, not here), others exactly."""
    if len(got) != len(want):
        return "its graph's replay returned another number of tensors than its call"
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            return "its graph's replay returned other shapes or dtypes than its call"
        if a.is_floating_point() or a.is_complex():
            wide = torch.complex128 if a.is_complex() else torch.float64
            a64, b64 = a.to(wide), b.to(wide)
            finite = b64.abs()[torch.isfinite(b64)]
            scale = float(finite.max()) if finite.numel() else 0.0
            close = bool(torch.isclose(a64, b64, rtol=1e-3, atol=1e-3 * scale, equal_nan=True).all())
        else:
            close = bool(torch.equal(a, b))
        if not close:
            return ("its graph's replay does not compute what its call does (work on another stream than the "
                    "current one is not captured)")
    return None


class CudaTiming(HeadStart):
    """The timing half of :class:`~pytest_autotune.measure.devices.cuda.device.CudaDevice` (a mixin: the state
    lives on the device instance, never in module globals -- the module is in the tamper snapshot)."""

    # set by CudaDevice.__init__
    index: int
    options: dict
    _flush: Optional[torch.Tensor]
    _driver: Optional[Driver]
    _side: Any
    _graphs: list[Graph]
    _use_graphs: Optional[bool]
    _calibration_captures: int
    _fastest_graph_call_s: float
    _fastest_eager_call_s: float
    _capture_failures: list[str]
    _capture_probes: bool
    _mode_reason: str
    _counts: dict[str, Any]

    # provided by CudaDevice
    @property
    def graph_below_s(self) -> float:
        raise NotImplementedError

    def flush_l2(self) -> None:
        raise NotImplementedError

    def _capture_stream(self) -> Any:
        raise NotImplementedError

    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        if self._use_graphs is None and len(batches) > 1:
            self._decide()
        if self._use_graphs:
            try:
                return self._timed_graph(fn, batches)
            except CaptureFailed as e:
                self._fall_back(f"capturing {len(batches)} calls failed: {e}")
        sample = self._timed_eager(fn, batches)
        if self._use_graphs is None and len(batches) == 1:
            self._calibration_probe(fn, batches, sample)
        return sample

    def _timed_eager(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        outs: list = [None] * len(batches)
        clock = time.perf_counter_ns
        h0 = clock()
        self.flush_l2()
        torch.cuda.synchronize(self.index)
        ticket = self._hold_begin()
        start.record()
        e0 = clock()
        for i, b in enumerate(batches[:1]):
            outs[i] = fn(*b)
        er = clock()
        self._hold_release(ticket)  # the first call's launches are queued: the GPU may start
        for i in range(1, len(batches)):
            outs[i] = fn(*batches[i])
        end.record()
        e1 = clock()
        torch.cuda.synchronize(self.index)  # device-wide: side streams included
        h1 = clock()
        self._counts["eager_samples"] += 1
        return self._held_sample(start.elapsed_time(end) * 1e-3, (e1 - e0) * 1e-9, (h1 - h0) * 1e-9, outs,
                                 ticket, start, (er - e0) * 1e-9)

    def _timed_graph(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        key = signature(batches)
        if key is None:
            raise CaptureFailed("an input is not a CUDA tensor of this device or a plain value")
        entry = next((g for g in self._graphs if g.fn is fn and g.key == key), None)
        if entry is None:
            entry = self._capture(fn, batches, key)
            self._graphs.append(entry)
            while len(self._graphs) > _MAX_GRAPHS:
                self._graphs.pop(0)
        outer0 = torch.cuda.Event(enable_timing=True)
        outer1 = torch.cuda.Event(enable_timing=True)
        clock = time.perf_counter_ns
        h0 = clock()
        stage(entry.static, batches)
        self.flush_l2()
        torch.cuda.synchronize(self.index)
        ticket = self._hold_begin()
        if ticket is None:
            preroll()
        outer0.record()
        e0 = clock()
        entry.graph.replay()
        self._hold_release(ticket)
        outer1.record()
        e1 = clock()
        outs = [copy_tree(o) for o in entry.outputs]
        poison(entry.outputs)
        torch.cuda.synchronize(self.index)
        h1 = clock()
        outer = outer0.elapsed_time(outer1) * 1e-3
        seconds = outer
        if entry.inner is not None and entry.inner_ok is not False:
            inner = inner_seconds(entry.inner, outer0, outer1)
            entry.inner_ok = inner is not None
            if inner is not None:
                seconds = inner
                self._counts["inner_event_samples"] += 1
        entry.replays += 1
        self._counts["graph_samples"] += 1
        return self._held_sample(seconds, (e1 - e0) * 1e-9, (h1 - h0) * 1e-9, outs, ticket, outer0, (e1 - e0) * 1e-9)

    # ------------------------------------------------------------------------------------------ graphs
    def _capture(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]], key: tuple,
                 inner_events: bool = True) -> Graph:
        """Capture ``fn`` on each batch into one graph, on static copies of the batches' inputs. Raises
        :class:`CaptureFailed` (and leaves the process usable) if the calls cannot be captured."""
        static = static_copies(batches)
        side = self._capture_stream()
        prev = torch.cuda.current_stream(self.index)
        torch.cuda.synchronize(self.index)
        # a warm-up call on the capture stream: lazy per-stream state (library handles, workspaces) is created
        # here, not inside the capture
        try:
            side.wait_stream(prev)
            with torch.cuda.stream(side):
                warm = fn(*static[0])
            del warm
            torch.cuda.synchronize(self.index)
        except Exception as e:  # noqa: BLE001
            raise CaptureFailed(f"the warm-up call on the capture stream raised {type(e).__name__}: {e}") from None
        inner = external_events(side) if inner_events else None
        graph = torch.cuda.CUDAGraph()
        outputs: list = []
        error: Optional[BaseException] = None
        begun = False
        with torch.cuda.stream(side):
            try:
                graph.capture_begin()
                begun = True
                if inner is not None:
                    inner[0].record()
                for b in static:
                    outputs.append(fn(*b))
                if inner is not None:
                    inner[1].record()
            except Exception as e:  # noqa: BLE001
                error = e
            if begun:
                try:
                    graph.capture_end()
                except Exception as e:  # noqa: BLE001
                    error = error or e
        if error is None and not any(tensors(o) for o in outputs):
            error = RuntimeError("the calls returned no tensor")
        if error is not None:
            try:
                torch.cuda.synchronize(self.index)
            except Exception:  # noqa: BLE001 - a capture error may surface once more here
                pass
            self._side = None  # the allocator may still route that stream's allocations to the dead pool
            del outputs, graph
            self._reset_rng()
            raise CaptureFailed(f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
        self._counts["captures"] += 1
        return Graph(fn, key, graph, static, outputs, inner)

    def _reset_rng(self) -> None:
        """A capture that failed leaves the default CUDA generator believing a capture is under way, and every
        later draw raises ("Offset increment outside graph capture"): the sandbox draws its inputs on this GPU, so
        give the generator a fresh state with the same seed and offset."""
        try:
            gen = torch.cuda.default_generators[self.index]
            gen.graphsafe_set_state(gen.clone_state())
        except (AttributeError, IndexError, RuntimeError) as e:
            self._counts.setdefault("rng_reset_errors", []).append(str(e)[:200])

    def _calibration_probe(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]], sample: Sample) -> None:
        """During calibration (single-call samples before any sample of ``k > 1`` calls): can this call be
        captured, and how long does it take on the GPU without launch overhead?"""
        if self.graph_below_s <= 0 or not self._capture_probes:
            return
        self._fastest_eager_call_s = min(self._fastest_eager_call_s, sample.seconds)
        if (self._capture_failures or self._calibration_captures >= _MAX_CALIBRATION_CAPTURES
                or sample.seconds > 100 * self.graph_below_s):
            return
        self._calibration_captures += 1
        key = signature(batches)
        if key is None:
            self._capture_failures.append("an input is not a CUDA tensor of this device or a plain value")
            return
        try:
            g = self._capture(fn, batches, key)
        except CaptureFailed as e:
            self._capture_failures.append(str(e))
            return
        try:
            s0 = torch.cuda.Event(enable_timing=True)
            s1 = torch.cuda.Event(enable_timing=True)
            stage(g.static, batches)
            poison(g.outputs)  # a replay that computes nothing leaves NaN / 0 there, not what the capture left
            self.flush_l2()
            torch.cuda.synchronize(self.index)
            preroll()
            s0.record()
            g.graph.replay()
            s1.record()
            torch.cuda.synchronize(self.index)
            t = s0.elapsed_time(s1) * 1e-3
            inner = inner_seconds(g.inner, s0, s1) if g.inner is not None else None
            why = replay_differs(fn, g)
            if why:
                self._capture_failures.append(why)
                return
            self._fastest_graph_call_s = min(self._fastest_graph_call_s, t if inner is None else inner)
        finally:
            poison(g.outputs)
            del g

    def _decide(self) -> None:
        below = self.graph_below_s
        fastest = self._fastest_graph_call_s
        if below <= 0:
            self._use_graphs, self._mode_reason = False, "graphs off (graph_below_s = 0)"
        elif self._capture_failures:
            self._use_graphs = False
            self._mode_reason = f"eager: a calibration call could not be captured ({self._capture_failures[0]})"
        elif not math.isfinite(fastest):
            self._use_graphs = False
            self._mode_reason = "eager: no calibration call was short enough to try a graph"
        elif fastest < below:
            self._use_graphs = True
            self._mode_reason = f"graph: fastest calibration call {fastest * 1e6:.2f} us < {below * 1e6:g} us"
        else:
            self._use_graphs = False
            self._mode_reason = f"eager: fastest calibration call {fastest * 1e6:.2f} us >= {below * 1e6:g} us"

    def configure_timing(self, options: dict[str, Any]) -> None:
        """The controller's decisions: ``{"capture_probes": False}`` before calibration (this sandbox must not
        test-capture its arm: a failed capture can leave the arm's own streams capturing for good, and its memory
        with them; the probe ran in another sandbox), then ``{"graphs": bool, "reason": str}`` for both arms, with
        ``{"head_start": "off", "head_start_reason": str}`` where the baseline's sandbox stopped holding."""
        if options.get("head_start") == "off":  # the baseline's sandbox stopped holding (sampling.decide_head_start)
            self._stop_holding(str(options.get("head_start_reason") or "the controller turned the hold off"))
        if "capture_probes" in options:
            self._capture_probes = bool(options["capture_probes"])
        if "graphs" in options:
            self._use_graphs = bool(options["graphs"])
            self._mode_reason = str(options.get("reason") or ("graph" if self._use_graphs else "eager"))
            if not self._use_graphs:
                self._graphs.clear()

    def _fall_back(self, why: str) -> None:
        self._capture_failures.append(why)
        self._use_graphs = False
        self._mode_reason = f"eager after graphs: {why}"
        self._graphs.clear()

    def timing_info(self) -> dict[str, Any]:
        """How this sandbox timed: mode and why, calibration numbers, sample counts (for reports and tests)."""
        return {
            "mode": "graph" if self._use_graphs else ("eager" if self._use_graphs is False else "undecided"),
            "reason": self._mode_reason,
            "fastest_graph_call_s": self._fastest_graph_call_s if math.isfinite(self._fastest_graph_call_s) else None,
            "fastest_eager_call_s": self._fastest_eager_call_s if math.isfinite(self._fastest_eager_call_s) else None,
            "capture_failures": list(self._capture_failures),
            "l2_flush_bytes": self._flush.numel() * 4 if self._flush is not None else None,
            **self.head_start_info(),
            **self._counts,
        }

    def timer_functions(self) -> dict[str, Any]:
        fns: dict[str, Any] = {
            "torch.cuda.Event": torch.cuda.Event,
            "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
            "torch.cuda.Event.record": torch.cuda.Event.record,
            "torch.cuda.synchronize": torch.cuda.synchronize,
            "torch.cuda.CUDAGraph": torch.cuda.CUDAGraph,
            "torch.cuda.CUDAGraph.replay": torch.cuda.CUDAGraph.replay,
            "torch.cuda.CUDAGraph.capture_begin": torch.cuda.CUDAGraph.capture_begin,
            "torch.cuda.CUDAGraph.capture_end": torch.cuda.CUDAGraph.capture_end,
            "torch.cuda.stream": torch.cuda.stream,
            "torch.cuda.current_stream": torch.cuda.current_stream,
            "torch.Tensor.copy_": torch.Tensor.copy_,
            "torch.Tensor.zero_": torch.Tensor.zero_,
            "torch.Tensor.fill_": torch.Tensor.fill_,
            "torch.Tensor.clone": torch.Tensor.clone,
            "time.perf_counter_ns": time.perf_counter_ns,
            # the measuring state a candidate could reach through the heap: replaced or resized is a tamper
            "cuda.options": tuple(sorted((str(k), repr(v)) for k, v in self.options.items())),
        }
        if self._flush is not None:
            fns["cuda.flush_buffer"] = self._flush
            fns["cuda.flush_buffer.numel"] = self._flush.numel()
        if self._driver is not None:
            fns["cuda.driver"] = self._driver
            fns["cuda.driver.lib"] = self._driver.lib
        fns.update(self.head_start_watch())
        return fns
