"""Make torch.compile's one-time changes to torch before a sandbox's tamper snapshot (docs/guide/anchors.md).

Importing ``torch._dynamo`` rewraps ``torch.manual_seed``, and dynamo's first compile patches
``torch.nn.Module.__init__`` and ``__setstate__`` (generation tagging). Done by a candidate, both read as a candidate
tampering with torch (the integrity gate compares torch's namespace before and after the candidate is imported
and run). A problem file whose candidates are compiled calls :func:`prepare_torch_compile` at import: the problem
file is frozen harness code that every sandbox loads *before* the snapshot, so the snapshot already holds torch
as dynamo leaves it, and any further change by a candidate is still caught.
"""

from __future__ import annotations


def prepare_torch_compile() -> None:
    import torch._dynamo  # noqa: F401  (wraps torch.manual_seed)
    from torch._dynamo.mutation_guard import install_generation_tagging_init

    install_generation_tagging_init()  # idempotent: patches nn.Module.__init__/__setstate__ once
