"""The build pool in a pytest session (docs/guide/compiled-candidates.md, "Builds in parallel"): when the run loop
starts -- collection and selection (``-k``, ``-m``, ``--lf``, a study's manifest) done, no item run yet -- every
selected kernel item's build is made by the pool (:mod:`.pool`), and each item then reads its build from the cache.

Where it runs: the process that runs items (pytest alone, or each xdist worker; never the xdist controller), not
under ``--collect-only``, ``--setup-plan`` or after collection errors. Under ``-x`` every selected item is built,
since which one fails first is not known in advance; what is built stays in the cache for the next run. A pool that
cannot start (the device or the sandboxes fail to come up) leaves each item to build its own, where the error is
reported. Registered by the plugin (``pytest_plugins`` in plugin.py).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any, Optional

import pytest

from ..keys import SESSION_KEY
from ..problems.model import KernelItemSpec
from ..xdist_role import runs_items_here

if TYPE_CHECKING:  # pragma: no cover
    from ..session import AutotuneSession
    from .builder import BuildResult


def _workers(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r}: give the number of builds to run at once (0: no build pool)")
    return int(value)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("autotune")
    g.addoption("--autotune-build-workers", dest="autotune_build_workers", default=None, type=_workers, metavar="N",
                help="build compiled candidates N at a time before the first item (default: as many as the cores "
                     "and the host memory against [build].memory_mb allow; 0: no pool, each item builds its own). "
                     "docs/guide/compiled-candidates.md#builds-in-parallel")


def _runs_items(config: pytest.Config, session: pytest.Session) -> bool:
    opt = config.option
    if any(getattr(opt, name, False) for name in ("collectonly", "setupplan", "setuponly")):
        return False
    if session.testsfailed and not getattr(opt, "continue_on_collection_errors", False):
        return False
    return runs_items_here(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    config = session.config
    s = config.stash.get(SESSION_KEY, None)
    override = config.getoption("autotune_build_workers", None)
    if s is None or override == 0 or not _runs_items(config, session):
        return
    tr = config.pluginmanager.get_plugin("terminalreporter")
    write = tr.write_line if tr is not None and config.option.verbose >= 0 else None
    prebuild(s, session.items, override, write)


def prebuild(s: "AutotuneSession", items: list, override: Optional[int], write: Any = None) -> None:
    """Every selected item's build, made by the pool; the results go to the flow (``FlowEnv.prebuilt``)."""
    specs = [spec for spec in (getattr(item, "spec", None) for item in items) if isinstance(spec, KernelItemSpec)]
    if not specs:
        return
    from .pool import apart, available_memory, host_cores, one_at_a_time, plan_pool, run_pool, spread
    from .shared import clear_stale

    try:
        flow = s.flow()
    except Exception:  # noqa: BLE001 - the first item reports the same error where it belongs
        return
    jobs: dict[str, Any] = {}
    for spec in specs:
        job = flow.build_job(spec)
        if job is not None:
            jobs.setdefault(job.key, job)
    if not jobs:
        return
    env = flow.env
    if env.build_root is not None:
        clear_stale(env.build_root)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1) if s.is_worker else 1
    plan = plan_pool(len(jobs), host_cores(), available_memory(), env.protocol.build.memory_mb, workers, override)
    if plan.width > 1 and not apart(env.pool.plan):
        plan = one_at_a_time(plan, "one at a time: the jail here gives build sandboxes no private /tmp or no pid "
                                   "namespace, so two at once could reach each other's objects")
    if write is not None:
        write(f"autotune: building {len(jobs)} compiled candidate(s) before the first item, {plan.width} at a time, "
              f"MAX_JOBS={plan.jobs} each ({plan.why})")
    t0 = time.perf_counter()
    results = run_pool(flow.builder(), spread(list(jobs.values()), s.worker_number(), workers), plan,
                       device_shared=env.device_spec.name != "cpu")
    env.prebuilt.update(results)
    if write is not None:
        write(summary(results.values(), time.perf_counter() - t0))


def summary(results: Any, seconds: float) -> str:
    rs: list["BuildResult"] = list(results)
    built = sum(1 for r in rs if r.built_by == "pool" and r.failure is None)
    failed = sum(1 for r in rs if r.failure is not None)
    return (f"autotune: build pool done in {seconds:.1f} s: {built} built here, {failed} failed, "
            f"{sum(1 for r in rs if r.built_by == 'cache')} found in the cache, "
            f"{sum(1 for r in rs if r.built_by == 'other_process' and r.failure is None)} built by another process")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller clears the run's records of builds the cache does not keep (failures, builds cut short)."""
    s = session.config.stash.get(SESSION_KEY, None)
    if s is None or s.is_worker or s.opts.db is None:
        return
    from .cache import build_root
    from .shared import clear_run

    clear_run(build_root(s.opts.db), s.run_id)
