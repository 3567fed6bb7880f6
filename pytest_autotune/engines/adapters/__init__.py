"""Engine adapters (one interface: :class:`~pytest_autotune.engines.adapters.base.EngineAdapter`)."""

from __future__ import annotations

from .base import EffectiveConfig, EngineAdapter, Finding, FlagSet, LaunchEvidence


def builtin_adapters() -> list[EngineAdapter]:
    from .llamacpp import LlamaCppAdapter
    from .sglang import SGLangAdapter
    from .vllm import VllmAdapter

    return [VllmAdapter(), LlamaCppAdapter(), SGLangAdapter()]


__all__ = ["EffectiveConfig", "EngineAdapter", "FlagSet", "Finding", "LaunchEvidence", "builtin_adapters"]
