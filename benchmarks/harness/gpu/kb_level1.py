"""KernelBench's Level 1 at its published sizes, each problem against itself (A/A), on a GPU.

    python3 benchmarks/harness/gpu/kb_level1.py stage --kernelbench PATH [--out .kb-level1]
    python3 benchmarks/harness/gpu/kb_level1.py plan [--dir .kb-level1] --capacity 80GiB [--capacity 141GiB]
    python3 benchmarks/harness/gpu/kb_level1.py choose --seed N [--count 20] [--dir .kb-level1] [--json OUT.json]
    python3 benchmarks/harness/gpu/kb_level1.py choose --shard I/N [--dir .kb-level1] [--json OUT.json]
    python3 benchmarks/harness/gpu/kb_level1.py summarize PARTIAL.jsonl [...] [--md OUT.md] [--json OUT.json]

``stage``: copies the 100 problem files of a KernelBench checkout (``KernelBench/level1/*.py``), byte for byte, into
a folder git ignores, with ``MANIFEST.json`` (the checkout's commit, each file's sha256). Copy the folder to the GPU
host with the repository; nothing of KernelBench is committed here.
``plan``: the memory plan every problem gets at its published sizes on a device of each ``--capacity`` (shapes from
the meta device, the reference's workspace taken as 0, one process's overhead and the headroom from protocol.toml):
which fit, in how many input groups, with which probe layouts -- before any GPU time is spent.
``choose``: ``--count`` of the staged problems drawn with ``random.Random(seed)`` (sorted by number), printed with the
seed, one stem a line after a header line; ``run_h200.sh kb20`` measures them and keeps the seed in its report.
``--shard I/N`` instead: every N-th problem in number order from the I-th (``h100_jobs.sh kb-l1 --shard 1/2`` and
``2/2``: all 100 in two ten-minute calls).
``summarize``: the A/A items of one or more partial JSONL files (``run_h200.sh kb-l1`` / ``kb20`` write them): how
many ran, were accepted, CIs containing 1.0, median |1 - ratio|, out-of-memory anywhere.

The A/A run itself is ``bash benchmarks/harness/gpu/run_h200.sh kb-l1 OUT_DIR`` (see there): ``pytest --autotune
--autotune-aa --device=cuda --problems=.kb-level1 -k reference-aa``, each finished item appended to
``OUT_DIR/kb-l1.partial.jsonl``; a later run given the earlier files (``KB_DONE``) skips the items they hold.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def cmd_stage(args: argparse.Namespace) -> int:
    src = Path(args.kernelbench) / "KernelBench" / "level1"
    files = sorted(src.glob("*.py"), key=lambda p: int(p.name.split("_", 1)[0]))
    if len(files) != 100:
        print(f"kb_level1: {src} holds {len(files)} problem files, not 100: point --kernelbench at a KernelBench "
              "checkout (its KernelBench/level1 folder)", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    commit = subprocess.run(["git", "-C", str(args.kernelbench), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    manifest = {"source": "ScalingIntelligence/KernelBench", "commit": commit, "folder": "KernelBench/level1",
                "files": {}}
    for f in files:
        data = f.read_bytes()
        (out / f.name).write_bytes(data)
        manifest["files"][f.name] = hashlib.sha256(data).hexdigest()
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"staged {len(files)} problems of KernelBench {commit or '(unknown commit)'} in {out}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from pytest_autotune.measure.memory import (
        GIB,
        DeviceMemory,
        DoesNotFit,
        fmt_bytes,
        parse_bytes,
        plan_memory,
    )
    from pytest_autotune.problems.footprint import meta_footprint
    from pytest_autotune.problems.loader import LoadedProblem
    from pytest_autotune.problems.model import SourceFile
    from pytest_autotune.protocol import load_protocol

    proto = load_protocol(REPO / "protocol.toml")
    caps = [parse_bytes(c) for c in args.capacity]
    rows = []
    for f in sorted(Path(args.dir).glob("*.py"), key=lambda p: int(p.name.split("_", 1)[0])):
        problem = LoadedProblem.load(SourceFile.read(f))
        fp, why = meta_footprint(problem, {}, 0)
        row = {"problem": f.stem, "input_bytes": fp.input_bytes, "output_bytes": fp.output_bytes, "meta": why,
               "plans": {}}
        for cap in caps:
            mem = DeviceMemory(free_bytes=cap - GIB, total_bytes=cap,
                               headroom_bytes=int(proto.memory.headroom * cap),
                               process_bytes=proto.memory.process_overhead_mb << 20, what=fmt_bytes(cap))
            try:
                plan = plan_memory(fp, mem, k_wanted=proto.devices.cuda.max_calls_per_sample)
                row["plans"][fmt_bytes(cap)] = {"groups": plan.groups_held, "sets_cap": plan.sets_cap,
                                                "concurrent": plan.golden_concurrent, "layouts": list(plan.layouts)}
            except DoesNotFit as e:
                row["plans"][fmt_bytes(cap)] = {"does_not_fit": str(e)}
        rows.append(row)
        cells = "  ".join(
            ("DOES NOT FIT" if "does_not_fit" in p else
             f"g{p['groups']} k<={p['sets_cap'] or '-'} {'conc' if p['concurrent'] else 'seq '} "
             f"{len(p['layouts'])} layouts") for p in row["plans"].values())
        print(f"{f.stem[:44]:<44} in {fmt_bytes(fp.input_bytes):>10} out {fmt_bytes(fp.output_bytes):>10}  {cells}")
    fits = {c: sum("does_not_fit" not in r["plans"][c] for r in rows) for c in (rows[0]["plans"] if rows else {})}
    print("fit: " + ", ".join(f"{n}/{len(rows)} on {c}" for c, n in fits.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"capacities": args.capacity, "rows": rows}, indent=1))
    return 0


def choose(stems: list[str], seed: int, count: int) -> list[str]:
    """``count`` of ``stems`` drawn by ``seed``, in problem-number order."""
    import random

    picked = random.Random(seed).sample(sorted(stems), min(count, len(stems)))
    return sorted(picked, key=lambda s: int(s.split("_", 1)[0]))


def shard(stems: list[str], spec: str) -> list[str]:
    """Shard ``I/N`` of ``stems``: the problems whose place in problem-number order is I, I + N, I + 2N, ... (1-based),
    so every shard holds the same mix of small and large problems and the N shards together hold all of them."""
    try:
        i, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise SystemExit(f"kb_level1: --shard {spec!r}: write I/N, e.g. 1/2") from None
    if not 1 <= i <= n:
        raise SystemExit(f"kb_level1: --shard {spec!r}: I must be between 1 and N")
    ordered = sorted(stems, key=lambda s: int(s.split("_", 1)[0]))
    return ordered[i - 1::n]


def cmd_choose(args: argparse.Namespace) -> int:
    stems = [f.stem for f in Path(args.dir).glob("*.py")]
    if not stems:
        print(f"kb_level1: no problem files in {args.dir}: stage them first (kb_level1.py stage)", file=sys.stderr)
        return 2
    if args.shard:
        picked = shard(stems, args.shard)
        print(f"shard {args.shard}: {len(picked)} of {len(stems)} problems")
        record = {"shard": args.shard, "of": len(stems), "problems": picked}
    elif args.seed is not None:
        picked = choose(stems, args.seed, args.count)
        print(f"seed {args.seed}: {len(picked)} of {len(stems)} problems")
        record = {"seed": args.seed, "count": args.count, "of": len(stems), "problems": picked}
    else:
        print("kb_level1 choose: give --seed N (a draw of --count) or --shard I/N", file=sys.stderr)
        return 2
    print("\n".join(picked))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return 0


def load_items(paths: list[str]) -> list[dict]:
    items: dict[str, dict] = {}
    for p in paths:
        if not Path(p).is_file():  # a call that finished no item wrote none
            continue
        for line in Path(p).read_text().splitlines():
            if line.strip():
                it = json.loads(line)
                items[it["nodeid"]] = it  # a later file's record of an item wins
    return list(items.values())


def summary(items: list[dict]) -> dict:
    aa = [i for i in items if i.get("candidate") == "reference-aa"]
    acc = [i for i in aa if i["verdict"] == "accepted"]
    contains = [i for i in acc if i["ci"][0] <= 1.0 <= i["ci"][1]]
    dev = [abs(1 - i["speedup"]) for i in acc]
    oom = [i["nodeid"] for i in aa if "out of memory" in (i.get("reason") or "").lower()
           or "out of device memory" in (i.get("reason") or "").lower()]
    secs = [i["details"].get("item_seconds") for i in aa if (i.get("details") or {}).get("item_seconds")]
    return {"items": len(aa), "accepted": len(acc), "ci_contains_1": len(contains),
            "ci_contains_1_share": len(contains) / len(acc) if acc else None,
            "median_abs_deviation": statistics.median(dev) if dev else None, "max_abs_deviation": max(dev, default=None),
            "median_ci_width": statistics.median([i["ci"][1] - i["ci"][0] for i in acc]) if acc else None,
            "out_of_memory": oom, "median_item_s": statistics.median(secs) if secs else None,
            "not_accepted": [{"problem": i["problem"], "verdict": i["verdict"], "gate": i.get("gate"),
                              "reason": (i.get("reason") or "")[:300]} for i in aa if i["verdict"] != "accepted"],
            "outside_ci": [{"problem": i["problem"], "speedup": i["speedup"], "ci": i["ci"]}
                           for i in acc if i not in contains]}


def cmd_summarize(args: argparse.Namespace) -> int:
    items = load_items(args.partial)
    s = summary(items)
    lines = [f"KernelBench Level 1 A/A at published sizes: {s['items']} item(s), {s['accepted']} accepted, "
             f"CI contains 1.0 in {s['ci_contains_1']} ({(s['ci_contains_1_share'] or 0):.1%}), median |1 - r| "
             f"{(s['median_abs_deviation'] or 0):.2%} (max {(s['max_abs_deviation'] or 0):.2%}), median CI width "
             f"{(s['median_ci_width'] or 0):.2%}, median item {s['median_item_s'] or 0:.1f} s, out of memory: "
             f"{len(s['out_of_memory'])}"]
    for r in s["not_accepted"]:
        lines.append(f"  not accepted: {r['problem']}: {r['verdict']} ({r['gate']}): {r['reason']}")
    for r in s["outside_ci"]:
        lines.append(f"  CI without 1.0: {r['problem']}: {r['speedup']:.4f} [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=1))
    if args.md:
        rows = ["| problem | verdict | ratio [95% CI] | pairs | item s |", "|---|---|---|---|---|"]
        for i in sorted(items, key=lambda i: int(i["problem"].split("_", 1)[0])):
            ci = f"{i['speedup']:.4f} [{i['ci'][0]:.4f}, {i['ci'][1]:.4f}]" if i["verdict"] == "accepted" else \
                f"{i.get('gate')}: {(i.get('reason') or '')[:80]}"
            rows.append(f"| {i['problem']} | {i['verdict']} | {ci} | {i.get('n_pairs') or '-'} | "
                        f"{(i.get('details') or {}).get('item_seconds', 0):.1f} |")
        Path(args.md).write_text(lines[0] + "\n\n" + "\n".join(rows) + "\n")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage")
    s.add_argument("--kernelbench", required=True, help="a KernelBench checkout")
    s.add_argument("--out", default=".kb-level1")
    p = sub.add_parser("plan")
    p.add_argument("--dir", default=".kb-level1")
    p.add_argument("--capacity", action="append", required=True, help="a device memory size, e.g. 80GiB (repeat)")
    p.add_argument("--json")
    c = sub.add_parser("choose")
    c.add_argument("--seed", type=int)
    c.add_argument("--count", type=int, default=20)
    c.add_argument("--shard", help="I/N: every N-th problem in number order, from the I-th (all N shards: all 100)")
    c.add_argument("--dir", default=".kb-level1")
    c.add_argument("--json")
    m = sub.add_parser("summarize")
    m.add_argument("partial", nargs="+")
    m.add_argument("--json")
    m.add_argument("--md")
    args = ap.parse_args(argv)
    return {"stage": cmd_stage, "plan": cmd_plan, "choose": cmd_choose, "summarize": cmd_summarize}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
