"""The session's side of the jail: build the sandbox pool with the protocol's isolation, refuse or warn once,
and the ``isolation`` provenance key of every run and every result (docs/design/threat-model.md#the-jail)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pytest

from ..errors import AutotuneUsageError
from ..provenance import ProvenanceKey

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol import Protocol
    from .runner import SandboxPool

#: sqlite's files beside a database
_STORE_SIDECARS = ("", "-wal", "-shm", "-journal")


def hidden_paths(db: Optional[Path]) -> tuple[str, ...]:
    """What the sandbox must not see: the store. Its folder when it is the plugin's own ``.autotune``, else the
    database file, sqlite's files beside it (a folder the user chose may hold anything) and the build cache's
    folder (build/cache.py ``build_root``). A path created after the session's view (the build cache in a session
    that does not record) is hidden in each sandbox's own view (jail_mounts.py ``rehide``)."""
    if db is None:
        return ()
    db = db.resolve()
    if db.parent.name == ".autotune":
        return (str(db.parent),)
    from ..build.cache import build_root

    return tuple(str(db) + s for s in _STORE_SIDECARS) + (str(build_root(db)),)


#: [sandbox].malloc = "reuse": glibc serves blocks up to 32 MiB from its heap and keeps freed memory, so a call's
#: temporaries cost the same whichever arm ran before it (read by glibc when the zygote starts)
MALLOC_REUSE_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                    "MALLOC_TOP_PAD_": str(64 << 20)}
#: [sandbox].malloc = "steady" (protocol 9): as "reuse", and the heap is never given back to the system within a
#: sandbox's life. Under "reuse" a round holding more than 1 GiB had its heap trimmed when it was freed, and the
#: next round's outputs faulted in fresh pages inside its samples: 02_relu's reference took 3.8 ms a call at k = 64
#: against 0.54 ms at k = 4 (118,000 page faults a sample; never trimmed: 0.54 ms at both;
#: docs/results/cpu.md, "The sample's shape")
MALLOC_STEADY_ENV = {**MALLOC_REUSE_ENV, "MALLOC_TRIM_THRESHOLD_": str(1 << 62)}


def sandbox_env(protocol: "Protocol", device: str) -> dict[str, str]:
    """Environment variables every sandbox of the session starts with."""
    env: dict[str, str] = {}
    if protocol.sandbox.malloc == "reuse":
        env.update(MALLOC_REUSE_ENV)
    elif protocol.sandbox.malloc == "steady":
        env.update(MALLOC_STEADY_ENV)
    if device == "cuda":
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


def make_pool(p: "Protocol", device: str, db: Optional[Path], config: pytest.Config) -> "SandboxPool":
    """The session's pool. Its jail is decided here, once: with ``[sandbox].isolation = "required"`` and less
    than the full jail, nothing runs (a usage error naming what is missing); with ``"preferred"``, one warning."""
    from .runner import SandboxPool

    pool = SandboxPool(threads=p.timing.cpu_threads, timeout_s=p.sandbox.timeout_s, memory_mb=p.sandbox.memory_mb,
                       start_timeout_s=p.sandbox.start_timeout_s, env_extra=sandbox_env(p, device),
                       isolation=p.sandbox.isolation, hide=hidden_paths(db),
                       max_processes=p.sandbox.max_processes, device=device)
    plan = pool.plan
    if p.sandbox.isolation == "required" and plan.level != "full":
        pool.close()
        missing = "; ".join(f"{m.part}: {m.why} -> {m.fix}" for m in plan.missing) or "?"
        raise AutotuneUsageError(
            f"[sandbox].isolation = \"required\" ({p.path}) but the full jail cannot be set up here "
            f"({plan.describe()}). Missing: {missing}. Fix that, or use isolation = \"preferred\" to run with "
            "what this machine allows (recorded in every result's provenance)")
    if plan.level in ("partial", "none"):
        config.issue_config_time_warning(pytest.PytestWarning(plan.warning()), stacklevel=2)
    return pool


def isolation_keys(config: Any) -> list[ProvenanceKey]:
    """``isolation`` on every result: the jail its sandbox ran in (the pool's plan, decided by the controller
    or the xdist worker that measured it -- never reported by the sandbox)."""
    from ..keys import SESSION_KEY

    def collect(_facts: Any) -> Optional[dict]:
        session = config.stash.get(SESSION_KEY, None)
        return session.isolation_provenance() if session is not None else None

    return [
        ProvenanceKey("isolation", "run", dict, "the sandbox jail of this run: level, identity, namespaces, view, "
                      "limits, seccomp, what is missing (docs/design/threat-model.md)", lambda c: c.get("isolation")),
        ProvenanceKey("isolation", "item", dict, "the sandbox jail this result was measured in", collect),
    ]
