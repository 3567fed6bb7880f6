"""Outputs as trees: a tensor, or nested tuples/lists of tensors (and the odd non-tensor a broken candidate
returns). The one flattener every part of the harness uses."""

from __future__ import annotations

from typing import Any

import torch


def leaves(out: Any) -> list:
    """Every leaf of ``out`` in order, tensors or not (a non-sequence is its own single leaf)."""
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in leaves(o)]
    return [out]


def tensors(out: Any) -> list[torch.Tensor]:
    """The tensor leaves of ``out``, in order."""
    return [x for x in leaves(out) if isinstance(x, torch.Tensor)]


__all__ = ["leaves", "tensors"]
