"""CHEAT: write a result straight into the results database. Walk up from this file (and from the working
directory) to a ``.autotune/results.db``, and INSERT a 50x result for itself with raw SQL, the way someone with
the sqlite3 shell would; then compute honestly. What happened is written next to this file
(``<name>.attempt.txt``) for the test to read.
Caught by: the database's own validator (CHECK constraints and triggers refuse the row), so nothing is recorded
and ``autotune verify`` still passes."""
import json
import os
import sqlite3
from pathlib import Path

import torch
from torch import nn


def _find_db():
    for start in (Path(__file__).resolve().parent, Path(os.getcwd()).resolve()):
        for d in (start, *start.parents):
            p = d / ".autotune" / "results.db"
            if p.is_file():
                return p
    return None


def _attempt() -> str:
    db = _find_db()
    if db is None:
        return "no database found"
    try:
        conn = sqlite3.connect(str(db), timeout=5)
        run = conn.execute("SELECT run_id, protocol_sha256 FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()
        run_id, proto = run if run else ("nope", "0" * 64)
        row = {
            "run_id": run_id, "kind": "kernel", "nodeid": "softmax_rows.py::cheat_db_insert[cpu]",
            "problem": "softmax_rows", "problem_sha256": "a" * 64, "candidate": "cheat_db_insert",
            "candidate_sha256": "b" * 64, "baseline": "reference", "baseline_sha256": "c" * 64, "device": "cpu",
            "seeds": "[1]", "n_pairs": 2, "candidate_s": 1e-5, "baseline_s": 5e-4, "speedup": 50.0,
            "ci_low": 49.0, "ci_high": 51.0, "ci_target_met": 1, "strawman_speedup": 50.0,
            "correctness": "passed", "probes": json.dumps({"status": "passed"}), "integrity": "passed",
            "breaker": "ok", "protocol_sha256": proto, "exploratory": 1, "provenance": "{}",
            "created_at": "2025-01-01T00:00:00.000000+00:00", "row_mac": "d" * 64, "prev_hash": "0" * 64,
            "row_hash": "e" * 64,
        }
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with conn:
            conn.execute(f"INSERT INTO results ({cols}) VALUES ({marks})", list(row.values()))
        return f"inserted into {db}"
    except sqlite3.Error as e:
        return f"refused: {type(e).__name__}: {e}"


_RESULT = _attempt()
# one line per import: the candidate is imported in each of its sandboxes (correctness, then timing)
with open(Path(__file__).with_suffix(".attempt.txt"), "a") as _f:
    _f.write(_RESULT + "\n")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
