"""CUDA device: CUDA events around each sample, an L2 flush before it, a host-clock cross-check with a
device-wide synchronisation, CUDA graphs for calls too short to time one launch at a time, and no persisting-L2
carve-out left over from anyone's earlier calls.

One sample (``timed``), in order, all of it inside ``host_seconds``:

1. graph mode only: copy the sample's inputs into the graph's static input buffers;
2. reset the persisting-L2 state (``cuCtxResetPersistingL2Cache``, the carve-out limit back to 0, the current
   stream's access-policy window cleared), then write a buffer of ``l2_flush_factor`` x the L2 size, and wait
   for it (a device-wide synchronisation, so nothing of the flush overlaps the timed region);
3. start event, the ``k`` calls (eager) or one replay of the graph that holds the ``k`` calls, end event;
4. graph mode only: copy the outputs out of the graph's memory (these copies are the sample's outputs, the
   ones the controller fingerprints) and overwrite the graph-owned outputs (NaN / 0), so the next replay
   cannot clobber what is kept and no answer is left lying in graph memory for the other arm to find;
5. ``torch.cuda.synchronize()`` -- device-wide: work a call left running on another stream is waited for
   here, so it shows up in the host time and not in the event time (``DeviceClockGate``).

``seconds`` is the event time of step 3. In graph mode the two events are nodes *inside* the graph, so the
graph's launch latency is not timed (it is the same for both arms and would only pull every ratio towards 1);
where this torch/driver cannot time events recorded in a graph, the events around the replay are used.

Graph mode is chosen for both arms alike (each arm runs in its own sandbox: docs/architecture.md, "Arms in
separate processes"). During calibration each single-call sample is also captured once into a throw-away graph
and replayed once, which tests whether the arm can be captured and gives its GPU time without launch overhead;
:meth:`timing_info` reports it, the controller decides from both sandboxes' reports and tells both
(:meth:`configure_timing`): graphs if the faster arm's replay is under ``graph_below_s`` and both arms could be
captured, eager otherwise. If a later capture fails, that sandbox falls back to eager and says so, and the
controller refuses to pair samples taken in different modes. A device used on its own (tests, outside timers)
decides alone at its first sample of ``k > 1`` calls.

Outputs cross to the controller as CUDA IPC handles (:mod:`.ipc`): no full-size tensor is copied to the host.
Where the driver cannot export an allocation, the output falls back to a host copy (counted in
:meth:`timing_info` as ``host_exports``).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from typing import Any, Callable, Optional, Sequence

import torch

from ....tree import tensors
from ..base import Device, Sample
from ..memfd import HostExport, export_host_tensor
from .driver import (
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
    CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
    Driver,
    DriverError,
)
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
from .ipc import CudaIpcExport, export_cuda_tensor

#: calibration samples that are also test-captured (the schedule calibrates each arm on up to 3 inputs)
_MAX_CALIBRATION_CAPTURES = 8
#: graphs kept per sandbox (one per input group is all a timing run needs)
_MAX_GRAPHS = 4


class CudaDevice(Device):
    name = "cuda"
    #: outputs are read through IPC mappings of the candidate's live memory (a later read shows later writes)
    live_exports = True

    def __init__(self, index: int = 0, options: Optional[dict] = None) -> None:
        super().__init__(index, options)
        self._flush: Optional[torch.Tensor] = None
        self._driver: Optional[Driver] = None
        self._side: Any = None  # the stream graphs are captured on
        self._graphs: list[Graph] = []
        self._fp: Optional[dict] = None
        #: None until the first sample of more than one call; then True (graphs) or False (eager)
        self._use_graphs: Optional[bool] = None
        self._calibration_captures = 0
        self._fastest_graph_call_s = math.inf
        self._fastest_eager_call_s = math.inf
        self._capture_failures: list[str] = []
        self._capture_probes = True
        self._mode_reason = "undecided"
        self._counts: dict[str, Any] = {
            "eager_samples": 0, "graph_samples": 0, "captures": 0, "inner_event_samples": 0,
            "persisting_limit_resets": 0, "persisting_l2_errors": 0, "access_window_errors": 0, "host_exports": 0}

    # ------------------------------------------------------------------------------------------ setup
    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        if not torch.cuda.is_available():
            return (
                f"--device=cuda: torch {torch.__version__} sees no CUDA GPU on this machine "
                "(torch.cuda.is_available() is False); run on a GPU host with a CUDA build of torch, or use --device=cpu"
            )
        return None

    @classmethod
    def count(cls) -> int:
        return torch.cuda.device_count()

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda", self.index)

    @property
    def graph_below_s(self) -> float:
        return float(self.options.get("graph_below_s", 10e-6) or 0.0)

    def setup(self, threads: int) -> None:
        super().setup(threads)
        torch.cuda.set_device(self.index)
        # fp32 means fp32: TF32 would be a precision downgrade the correctness gate must see
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def warm_runtime(self) -> None:
        """Create the context, the flush buffer, the capture stream and the driver handle before the sandbox
        counts threads and takes its tamper snapshot (all of them are part of the measuring machinery)."""
        torch.cuda.set_device(self.index)
        torch.ones(8, device=self.torch_device).add_(1)
        self._flush_buffer()
        self._capture_stream()
        drv = self._drv()
        # the persisting-L2 carve-out starts at 0 before anything is snapshotted: a candidate that raises it
        # changes a watched setting (and every sample puts it back to 0 anyway)
        if drv.ok and drv.persisting_limit():
            drv.set_persisting_limit(0)
        if drv.ok:
            drv.reset_persisting_lines()
        torch.cuda.synchronize(self.index)

    def _drv(self) -> Driver:
        if self._driver is None:
            self._driver = Driver()
        return self._driver

    def _capture_stream(self) -> Any:
        if self._side is None:
            self._side = torch.cuda.Stream(device=self.torch_device)
        return self._side

    def l2_bytes(self) -> int:
        p = torch.cuda.get_device_properties(self.index)
        l2 = int(getattr(p, "L2_cache_size", 0) or 0)
        if l2 <= 0:
            l2 = int(self._drv().device_attribute(self.index, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) or 0)
        return l2 if l2 > 0 else 64 << 20

    def flush_bytes(self) -> int:
        """Bytes written before every sample: ``l2_flush_factor`` (at least 1) times the L2 size."""
        factor = max(float(self.options.get("l2_flush_factor", 2) or 2), 1.0)
        return int(math.ceil(self.l2_bytes() * factor / 4096.0)) * 4096

    def _flush_buffer(self) -> torch.Tensor:
        if self._flush is None:
            self._flush = torch.empty(self.flush_bytes() // 4, dtype=torch.int32, device=self.torch_device)
        return self._flush

    # ------------------------------------------------------------------------------------------ fingerprint
    def fingerprint(self) -> dict[str, Any]:
        if self._fp is not None:
            return dict(self._fp)
        fp = super().fingerprint()
        p = torch.cuda.get_device_properties(self.index)
        drv = self._drv()
        uuid = getattr(p, "uuid", None)
        fp.update(
            name=p.name,
            index=self.index,
            capability=f"{p.major}.{p.minor}",
            sms=p.multi_processor_count,
            total_memory=p.total_memory,
            l2_bytes=self.l2_bytes(),
            persisting_l2_max_bytes=drv.device_attribute(self.index, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE),
            uuid=f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else (str(uuid) if uuid else None),
            pci_bus_id=_pci_bus_id(p),
            torch=torch.__version__,
            torch_cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            cuda_driver_api=drv.driver_version(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            cuda_device_order=os.environ.get("CUDA_DEVICE_ORDER"),
            l2_flush_bytes=self.flush_bytes(),
            graph_below_s=self.graph_below_s,
        )
        smi = _nvidia_smi(fp.get("uuid") or fp.get("pci_bus_id") or str(self.index))
        fp["driver"] = smi.pop("driver_version", None)
        fp["nvidia_smi"] = smi
        self._fp = fp
        return dict(fp)

    # ------------------------------------------------------------------------------------------ data
    def generation_device(self) -> Optional[torch.device]:
        return self.torch_device

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(self.torch_device)
        return value

    def prepare_model(self, model: Any) -> Any:
        return model.to(self.torch_device) if hasattr(model, "to") else model

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)

    def to_host(self, out: Any) -> Any:
        self.synchronize()
        if isinstance(out, torch.Tensor):
            return out.detach().to("cpu", copy=True)
        if isinstance(out, (list, tuple)):
            return tuple(self.to_host(o) for o in out)
        return out

    # ------------------------------------------------------------------------------------------ outputs by handle
    def export_tensor(self, t: torch.Tensor) -> dict[str, Any]:
        if t.device.type == "cuda":
            try:
                return export_cuda_tensor(self._drv(), t)
            except DriverError as e:
                self._counts["host_exports"] += 1
                self._counts.setdefault("ipc_errors", []).append(str(e)[:200])  # type: ignore[attr-defined]
            return export_host_tensor(t.detach().to("cpu", copy=True))
        return export_host_tensor(t)

    def open_export(self, meta: dict[str, Any]) -> Any:
        if meta.get("via") in ("cuda-ipc", "empty"):
            return CudaIpcExport(self._drv(), meta, self.torch_device)
        return HostExport(meta)

    # ------------------------------------------------------------------------------------------ L2
    def reset_persisting_l2(self) -> None:
        """No persisting-L2 carve-out survives into a sample: persisting lines are demoted to normal (so the
        flush evicts them), the carve-out limit goes back to 0 if anyone raised it, and the current stream's
        access-policy window is cleared."""
        drv = self._drv()
        if not drv.ok:
            return
        errors = 0
        limit = drv.persisting_limit()
        if limit:
            self._counts["persisting_limit_resets"] += 1
            errors += drv.set_persisting_limit(0) != 0
        errors += drv.reset_persisting_lines() != 0
        if errors:
            self._counts["persisting_l2_errors"] += int(errors)
        if drv.clear_access_policy_window(torch.cuda.current_stream(self.index).cuda_stream) != 0:
            self._counts["access_window_errors"] += 1

    def flush_l2(self) -> None:
        self.reset_persisting_l2()
        self._flush_buffer().zero_()

    # ------------------------------------------------------------------------------------------ timing
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
        start.record()
        for i, b in enumerate(batches):
            outs[i] = fn(*b)
        end.record()
        torch.cuda.synchronize(self.index)  # device-wide: side streams included
        h1 = clock()
        self._counts["eager_samples"] += 1
        return Sample(seconds=start.elapsed_time(end) * 1e-3, host_seconds=(h1 - h0) * 1e-9, outputs=outs)

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
        preroll()
        outer0.record()
        entry.graph.replay()
        outer1.record()
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
        return Sample(seconds=seconds, host_seconds=(h1 - h0) * 1e-9, outputs=outs)

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
            self.flush_l2()
            torch.cuda.synchronize(self.index)
            preroll()
            s0.record()
            g.graph.replay()
            s1.record()
            torch.cuda.synchronize(self.index)
            t = s0.elapsed_time(s1) * 1e-3
            inner = inner_seconds(g.inner, s0, s1) if g.inner is not None else None
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
        with them; the probe ran in another sandbox), then ``{"graphs": bool, "reason": str}`` for both arms."""
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
        return fns


# ---------------------------------------------------------------------------------------------- helpers


def _pci_bus_id(p: Any) -> Optional[str]:
    try:
        return f"{int(p.pci_domain_id):08X}:{int(p.pci_bus_id):02X}:{int(p.pci_device_id):02X}.0"
    except (AttributeError, TypeError, ValueError):
        return None


_SMI_FIELDS = ("driver_version", "name", "pci.bus_id", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "clocks.applications.graphics", "power.limit", "temperature.gpu", "persistence_mode", "compute_mode",
               "mig.mode.current", "ecc.mode.current", "memory.total")


def _nvidia_smi(gpu_id: str) -> dict[str, Any]:
    """Clocks and settings of the GPU as nvidia-smi reports them (read only; empty if nvidia-smi fails)."""
    out: dict[str, Any] = {}
    try:
        got = subprocess.run(
            ["nvidia-smi", f"--id={gpu_id}", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=15,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"nvidia-smi: {e}"}
    line = got.stdout.strip().splitlines()[0] if got.returncode == 0 and got.stdout.strip() else ""
    if not line:
        return {"error": f"nvidia-smi exited {got.returncode}: {got.stderr.strip()[:200]}"}
    values = [v.strip() for v in line.split(",")]
    for k, v in zip(_SMI_FIELDS, values):
        out[k] = v
    return out
