"""CUDA device: CUDA events around each sample, an L2 flush before it, a host-clock cross-check with a
device-wide synchronisation, CUDA graphs for calls too short to time one launch at a time, and no persisting-L2
carve-out left over from anyone's earlier calls.

Modules: :mod:`.device` (``CudaDevice``: setup, L2 flush, fingerprint, outputs), :mod:`.timing` (one sample,
eager or as a graph, and the choice between them), :mod:`.head_start` (the hold around a sample's first call and
the max(event, enqueue) rule), :mod:`.hold` (the hold kernel), :mod:`.graphs` (capture helpers),
:mod:`.fingerprint` (PCI address, nvidia-smi), :mod:`.driver` (the driver API through ctypes), :mod:`.ipc`
(outputs by handle).

Graph mode is chosen for both arms alike (each arm runs in its own sandbox: docs/architecture.md#arms-in-separate-processes). During calibration each single-call sample is also captured once into a throw-away graph
and replayed once, which tests whether the arm can be captured and gives its GPU time without launch overhead;
``CudaDevice.timing_info`` reports it, the controller decides from both sandboxes' reports and tells both
(``configure_timing``): graphs if the faster arm's replay is under ``graph_below_s`` and both arms could be
captured, eager otherwise. If a later capture fails, that sandbox falls back to eager and says so, and the
controller refuses to pair samples taken in different modes. A device used on its own (tests, outside timers)
decides alone at its first sample of ``k > 1`` calls.

Outputs cross to the controller as CUDA IPC handles (:mod:`.ipc`): no full-size tensor is copied to the host.
Where the driver cannot export an allocation, the output falls back to a host copy (counted in
``timing_info`` as ``host_exports``).
"""

from __future__ import annotations

from .device import CudaDevice

__all__ = ["CudaDevice"]
