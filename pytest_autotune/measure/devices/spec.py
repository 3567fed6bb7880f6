"""What ``--device`` can name: a light description (no torch import) of a device class the sandbox loads."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .base import Device


@dataclass(frozen=True)
class DeviceSpec:
    name: str  # --device value
    target: str  # "package.module:ClassName", importable in a fresh interpreter
    description: str = ""
    framework: str = "torch"  # "torch" | "mlx": which model family runs there (ModelNew / ModelNewMLX)

    def load(self) -> type["Device"]:
        mod, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(mod), cls)
