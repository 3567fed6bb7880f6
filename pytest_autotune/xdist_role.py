"""Which part this pytest process plays under pytest-xdist, decided by xdist's own rule.

xdist distributes items only when a ``--dist`` mode is set **and** there is at least one ``--tx`` target (``-n N``
sets both); that process is the controller and runs no item, its workers (``config.workerinput``) run them. A
``--dist`` mode without ``-n`` or ``--tx`` -- say ``--dist loadfile`` in a project's ``addopts``, so that its own
``-n 2`` test runs keep a file on one worker -- distributes nothing: this process then runs every item itself and
needs what an item needs (the sandboxes' zygote, the build pool). Reading ``--dist`` alone took such a process for
a controller and skipped both (docs/guide/compiled-candidates.md, "Builds in parallel").
"""

from __future__ import annotations

import pytest


def is_worker(config: pytest.Config) -> bool:
    """An xdist worker: it runs the items the controller sends it."""
    return hasattr(config, "workerinput")


def hands_items_to_workers(config: pytest.Config) -> bool:
    """An xdist controller that distributes the items (xdist's ``_is_distribution_mode``: a ``--dist`` mode and a
    ``--tx`` target; ``-n 0`` clears both). False without xdist, in a worker, and for ``--dist`` alone."""
    if is_worker(config):
        return False
    opt = config.option
    return getattr(opt, "dist", "no") != "no" and bool(getattr(opt, "tx", None))


def runs_items_here(config: pytest.Config) -> bool:
    """Whether this process runs the session's items itself (a worker, or no distribution at all)."""
    return not hands_items_to_workers(config)
