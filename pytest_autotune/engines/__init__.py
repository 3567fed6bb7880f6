"""Serving-engine items (engine × configuration): the extension point's types.

An :class:`EngineSpec` is what a ``pytest_autotune_engines`` hook implementation returns: a named engine, the
configurations to measure, and how to start one. The collection and load generator for engine items are a
later issue; the hook and its types are fixed now so plugins can be written against them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class EngineSpec:
    name: str  # e.g. "vllm", "sglang"
    #: configuration name -> engine arguments (each becomes one item: engine × configuration)
    configs: Mapping[str, Mapping[str, Any]]
    #: start(config) -> base URL of an OpenAI-compatible server; the harness stops it with stop(url)
    start: Callable[[Mapping[str, Any]], str]
    stop: Callable[[str], None]
    #: the frozen baseline configuration's name (the strongest known one, never a strawman)
    baseline: str = "default"
    description: str = ""
    tags: Sequence[str] = field(default_factory=tuple)
