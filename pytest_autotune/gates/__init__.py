"""Gates: the checks an item must pass, each a plugin of the ``pytest_autotune_gates`` hook.

Write one by subclassing :class:`Gate` (see pytest_autotune/hookspec.py and docs/architecture.md):
``name``, the ``stages`` it runs in (``correctness``, ``probe``, ``integrity``, ``breaker``), ``needs_timing``
if it only makes sense with ``--autotune``, and ``check(ctx, stage)`` returning ``None`` (pass) or a
:class:`GateOutcome`. Importing this package stays light (no torch): the built-in gates live in submodules.
"""

from .base import STAGES, Gate, GateContext, GateOutcome

__all__ = ["Gate", "GateContext", "GateOutcome", "STAGES"]
