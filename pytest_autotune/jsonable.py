"""One conversion of the harness's own values (details, provenance) into what JSON can hold, for kernel and engine
items alike. torch is not imported here: engine items never load it, and a tensor can only reach this function
where torch was already imported."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any


def jsonable(x: Any) -> Any:
    """``x`` as JSON can hold it: mappings and sequences recursively, non-finite floats as null, paths as text,
    a tensor as a short list or its shape, anything else as its text."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, Path):
        return str(x)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.tolist() if x.numel() <= 16 else f"tensor{tuple(x.shape)}"
    return str(x)


__all__ = ["jsonable"]
