"""Which candidates get a build stage: one whose source names a compiling API. Every other candidate skips it at
the cost of one substring search, and a compile attempt in its sandboxes is refused
(sandbox/ext_loaders.py ``refuse_compiling``)."""

from __future__ import annotations

#: a candidate whose source holds one of these gets a build stage (``from torch.utils.cpp_extension import
#: load_inline``, ``import triton``, ``torch.utils.cpp_extension.load(...)``)
MARKERS = (b"cpp_extension", b"load_inline", b"triton")


def needs_build(source: bytes) -> bool:
    return any(m in source for m in MARKERS)
