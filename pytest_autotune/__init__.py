"""pytest-autotune: benchmarks as pytest tests, with speedups that can be trusted."""

__version__ = "0.1.0"
