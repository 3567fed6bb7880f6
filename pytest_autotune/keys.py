"""Where pytest objects carry this plugin's state (docs/architecture.md#modules-one-job-each): one module that every
other one may import, so none has to import the plugin or the session to find them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from .flow import FlowVerdict  # noqa: F401 (named in the keys' types below)
    from .session import AutotuneSession  # noqa: F401

#: ``config.stash[SESSION_KEY]``: the session of this pytest process (controller or xdist worker)
SESSION_KEY = pytest.StashKey["AutotuneSession"]()
#: ``item.stash[VERDICT_KEY]``: a kernel item's verdict, reached in its setup and read by ``runtest``
VERDICT_KEY = pytest.StashKey["FlowVerdict"]()
#: the key of this plugin's entry in xdist's ``workerinput`` / ``workeroutput`` dicts
WORKER_INPUT_KEY = "pytest_autotune"
WORKER_OUTPUT_KEY = "pytest_autotune"
