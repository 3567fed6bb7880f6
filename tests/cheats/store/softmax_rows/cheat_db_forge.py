"""CHEAT: forge a *plausible* result row in the results database: the open run's id and protocol digest, enough
distinct seeds and pairs, a 3x speedup inside its CI, and a correct hash chain (prev_hash = the chain head,
row_hash computed with the package's own code) -- everything the in-database validator can check. The one
thing it cannot make is the row MAC: HMAC(run nonce, row), and the nonce never enters the sandbox. What happened
is written next to this file (``<name>.attempt.txt``).
Caught by: the row MAC, checked when the run finishes and by ``autotune verify`` -- the forged row is reported,
never silently trusted (the database is tamper-evident, not tamper-proof: docs/design/threat-model.md)."""
import json
import os
import secrets
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
        from pytest_autotune.store.hashing import canonical_row, row_hash
    except ImportError as e:
        return f"cannot import the hashing code: {e}"
    try:
        conn = sqlite3.connect(str(db), timeout=5)
        run_id, proto, expl = conn.execute(
            "SELECT run_id, protocol_sha256, exploratory FROM runs WHERE finished_at IS NULL "
            "ORDER BY rowid DESC LIMIT 1").fetchone()
        n_seeds, min_pairs = conn.execute(
            "SELECT n_seeds, min_pairs FROM protocols WHERE sha256 = ?", [proto]).fetchone()
        head = conn.execute("SELECT head FROM chain_state WHERE tbl = 'results'").fetchone()[0]
        row = {
            "run_id": run_id, "kind": "kernel", "nodeid": "problems/softmax_rows.py::forged[cpu]",
            "problem": "softmax_rows", "problem_sha256": secrets.token_hex(32), "candidate": "forged",
            "candidate_sha256": secrets.token_hex(32), "baseline": "reference",
            "baseline_sha256": secrets.token_hex(32), "device": "cpu",
            "seeds": json.dumps([secrets.randbits(62) for _ in range(n_seeds)]), "n_pairs": int(min_pairs) + 8,
            "candidate_s": 4e-4, "baseline_s": 1.2e-3, "speedup": 3.0, "ci_low": 2.9, "ci_high": 3.1,
            "ci_target_met": 1, "strawman_speedup": 3.0, "correctness": "passed",
            "probes": json.dumps({"status": "passed"}), "integrity": "passed", "breaker": "ok",
            "protocol_sha256": proto, "exploratory": int(expl), "study": None, "arm": None, "iteration": None,
            "provenance": "{}", "created_at": "2025-01-01T00:00:00.000000+00:00",
            "row_mac": secrets.token_hex(32),
        }
        # a plausible provenance too (the validator checks it names the row's own digests, seeds and sizes)
        row["provenance"] = json.dumps({"problem_sha256": row["problem_sha256"],
                                        "candidate_sha256": row["candidate_sha256"],
                                        "baseline_sha256": row["baseline_sha256"],
                                        "seeds": json.loads(row["seeds"]), "sizes": {}})
        row["prev_hash"] = head
        row["row_hash"] = row_hash(head, canonical_row("results", row))
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with conn:
            conn.execute(f"INSERT INTO results ({cols}) VALUES ({marks})", list(row.values()))
        return f"inserted into {db}"
    except (sqlite3.Error, TypeError) as e:
        return f"refused: {type(e).__name__}: {e}"


_RESULT = _attempt()
# one line per import: the candidate is imported in each of its sandboxes (correctness, then timing)
with open(Path(__file__).with_suffix(".attempt.txt"), "a") as _f:
    _f.write(_RESULT + "\n")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
