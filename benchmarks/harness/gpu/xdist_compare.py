"""The bundled GPU suite under ``-n 0`` against ``-n 2`` on a two-GPU host (docs/guide/parallel.md).

    python benchmarks/harness/gpu/xdist_compare.py OUT_DIR     # reads n0.json n2.json, /tmp/n0.db /tmp/n2.db

Prints, and writes OUT_DIR/xdist.json: which GPU (UUID) each worker measured on and whether the workers' sets are
disjoint; whether the verdicts agree item by item; whether each speedup of one run lies inside the other's CI
(and whether the two CIs overlap); the summed item seconds of each run.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path


def _items(path: Path) -> dict[str, dict]:
    return {it["nodeid"]: it for it in json.loads(path.read_text())["items"]}


def _devices(db: Path) -> dict[str, set[str]]:
    by_worker: dict[str, set[str]] = defaultdict(set)
    with sqlite3.connect(str(db)) as con:
        for (prov,) in con.execute("SELECT provenance FROM results UNION ALL SELECT provenance FROM quarantine"):
            p = json.loads(prov)
            by_worker[str(p.get("worker") or "controller")].add(f"{p.get('device_index')}:{p.get('device_uuid')}")
    return {k: set(v) for k, v in by_worker.items()}


def main(out: Path) -> int:
    n0, n2 = _items(out / "n0.json"), _items(out / "n2.json")
    dev0, dev2 = _devices(Path("/tmp/n0.db")), _devices(Path("/tmp/n2.db"))
    workers = sorted(dev2)
    disjoint = all(not (dev2[a] & dev2[b]) for i, a in enumerate(workers) for b in workers[i + 1:])
    rows, same_verdict, inside, overlap, both = [], 0, 0, 0, 0
    for nodeid in sorted(set(n0) & set(n2)):
        a, b = n0[nodeid], n2[nodeid]
        same = (a["verdict"], a["gate"]) == (b["verdict"], b["gate"])
        same_verdict += same
        row = {"nodeid": nodeid, "n0": [a["verdict"], a.get("speedup"), a.get("ci")],
               "n2": [b["verdict"], b.get("speedup"), b.get("ci")]}
        if a.get("speedup") and b.get("speedup") and a.get("ci") and b.get("ci"):
            both += 1
            ins = a["ci"][0] <= b["speedup"] <= a["ci"][1] or b["ci"][0] <= a["speedup"] <= b["ci"][1]
            ovl = a["ci"][0] <= b["ci"][1] and b["ci"][0] <= a["ci"][1]
            inside += ins
            overlap += ovl
            row.update(ratio=b["speedup"] / a["speedup"], inside=ins, overlap=ovl)
        rows.append(row)
    secs = {k: round(sum((it.get("details") or {}).get("item_seconds", 0) for it in v.values()), 1)
            for k, v in (("n0", n0), ("n2", n2))}
    summary = {"devices_n0": {k: sorted(v) for k, v in dev0.items()}, "devices_n2": {k: sorted(v) for k, v in dev2.items()},
               "workers_disjoint": disjoint, "items": len(rows), "same_verdict": same_verdict,
               "timed_in_both": both, "speedup_inside_other_ci": inside, "cis_overlap": overlap,
               "item_seconds": secs, "rows": rows}
    (out / "xdist.json").write_text(json.dumps(summary, indent=1))
    print(f"devices -n 0: {summary['devices_n0']}")
    print(f"devices -n 2: {summary['devices_n2']} (disjoint across workers: {disjoint})")
    print(f"verdicts equal: {same_verdict}/{len(rows)}; timed in both: {both}; a speedup inside the other's CI: "
          f"{inside}/{both}; CIs overlap: {overlap}/{both}; summed item seconds {secs}")
    for r in rows:
        if "ratio" in r:
            print(f"  {r['nodeid'][-60:]:60s} n2/n0 {r['ratio']:.4f} inside={r['inside']} overlap={r['overlap']}")
        else:
            print(f"  {r['nodeid'][-60:]:60s} {r['n0'][0]} / {r['n2'][0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/h200-out")))
