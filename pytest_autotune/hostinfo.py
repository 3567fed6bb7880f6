"""The host CPU as ``/proc/cpuinfo`` describes it: read by the CPU device (its fingerprint), the build stage (the
cache key of code built for this CPU) and the SGLang adapter (whether its CPU backend can run here)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def cpuinfo() -> dict[str, str]:
    """The first processor's fields (``model name``, ``flags`` on x86 or ``Features`` on Arm, ...); empty where
    the file cannot be read."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends here
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields
