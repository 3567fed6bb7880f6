"""What the CUDA device records about the GPU in every result's provenance (``CudaDevice.fingerprint``): the
parts read outside torch -- the PCI address and nvidia-smi's clocks and settings."""

from __future__ import annotations

import subprocess
from typing import Any, Optional


def pci_bus_id(p: Any) -> Optional[str]:
    try:
        return f"{int(p.pci_domain_id):08X}:{int(p.pci_bus_id):02X}:{int(p.pci_device_id):02X}.0"
    except (AttributeError, TypeError, ValueError):
        return None


_SMI_FIELDS = ("driver_version", "name", "pci.bus_id", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "clocks.applications.graphics", "power.limit", "temperature.gpu", "persistence_mode", "compute_mode",
               "mig.mode.current", "ecc.mode.current", "memory.total")


def nvidia_smi(gpu_id: str) -> dict[str, Any]:
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
