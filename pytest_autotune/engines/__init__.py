"""Serving engines as pytest-autotune items (docs/guide/engines.md).

An engine item is engine × flag configuration × workload, measured paired against the same engine's default in
alternating launches, through the quality gate (greedy outputs agree with the default's), treatment delivery
(the flags show in the effective configuration or the metrics), the breaker and the store (``kind = 'engine'``).

Modules, one job each: ``adapters/`` (vLLM, llama.cpp, SGLang behind one interface), ``install`` (engine venvs
and builds), ``server`` and ``supervisor`` (start, health, always stop), ``model`` and ``gguf`` (the tiny local
model), ``text`` and ``workload`` (seeded prompts), ``loadgen`` and ``metrics`` (asyncio load on httpx,
Prometheus), ``quality``, ``delivery``, ``run`` (one item), ``declaration`` and ``space`` (files and the flag
search seam), ``plugin`` and ``report`` (pytest), ``cli`` (``autotune engine ...``).

This package's ``__init__`` imports nothing: the supervisor runs as ``python -m
pytest_autotune.engines.supervisor`` and must start fast.
"""
