"""pytest plugin for run_h200.sh (``-p harness_plugin`` with this folder on PYTHONPATH).

- ``AUTOTUNE_PARTIAL=FILE``: append each finished item's outcome (the JSON report's item record) to FILE as
  one JSON line, so a run that is cut short (timeout) still leaves what it measured;
- ``AUTOTUNE_SKIP_DONE="FILE [FILE ...]"``: deselect the items those partial JSONL files already hold (a later
  run goes on where an earlier one stopped: kb_level1.py, run_h200.sh kb-l1);
- ``AUTOTUNE_ONLY_PROBLEMS="STEM [STEM ...]"``: keep only the items of those problem files (by file stem, exactly:
  ``-k`` would match ``9_...`` inside ``19_...``): run_h200.sh kb20;
- ``XDIST_PROBE_DIR=DIR``: at the end of the session each process (xdist worker or controller) writes which GPU
  it measured on, to check that worker gwN used GPU N mod count (pytest_autotune/session.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_written = {"n": 0}


def _session(config):
    from pytest_autotune.keys import SESSION_KEY

    return config.stash.get(SESSION_KEY, None)


def pytest_runtest_logfinish(nodeid, location):
    path = os.environ.get("AUTOTUNE_PARTIAL")
    if not path:
        return
    s = _CONFIG.get("config")
    session = _session(s) if s is not None else None
    if session is None:
        return
    new = session.outcomes[_written["n"]:]
    _written["n"] = len(session.outcomes)
    if new:
        with open(path, "a") as f:
            for o in new:
                f.write(json.dumps(o.to_json(), default=str) + "\n")


_CONFIG: dict = {}


def pytest_collection_modifyitems(session, config, items):
    only = set(os.environ.get("AUTOTUNE_ONLY_PROBLEMS", "").split())
    if only:
        out = [i for i in items if Path(i.nodeid.split("::", 1)[0]).stem not in only]
        if out:
            config.hook.pytest_deselected(items=out)
            items[:] = [i for i in items if i not in out]
        print(f"harness_plugin: {len(items)} item(s) of {len(only)} chosen problem(s) kept, {len(out)} deselected")
    files = os.environ.get("AUTOTUNE_SKIP_DONE", "").split()
    done = set()
    for f in files:
        p = Path(f)
        if p.is_file():
            done |= {json.loads(line)["nodeid"] for line in p.read_text().splitlines() if line.strip()}
    if not done:
        return
    keep = [i for i in items if i.nodeid not in done]
    skipped = [i for i in items if i.nodeid in done]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = keep
        print(f"harness_plugin: {len(skipped)} item(s) already measured in {' '.join(files)} deselected")


def pytest_configure(config):
    _CONFIG["config"] = config


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("XDIST_PROBE_DIR")
    if not out:
        return
    import torch

    config = session.config
    s = _session(config)
    worker = getattr(config, "workerinput", {}).get("workerid", "controller")
    rec = {"worker": worker, "pid": os.getpid(),
           "autotune_device_index": getattr(s, "device_index", None) if s is not None else None,
           "torch_current_device": torch.cuda.current_device() if torch.cuda.is_available() else None,
           "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
           "items": [o.nodeid for o in (s.outcomes if s is not None else [])]}
    if torch.cuda.is_available() and s is not None:
        try:
            fp = s.device.fingerprint()
            rec["gpu_uuid"], rec["pci_bus_id"] = fp.get("uuid"), fp.get("pci_bus_id")
        except Exception as e:  # noqa: BLE001
            rec["fingerprint_error"] = repr(e)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"worker-{worker}.json").write_text(json.dumps(rec))
