"""``autotune import kernelbench SRC --out DIR``: KernelBench-format agent solutions (the public leaderboard's
repository, or a KernelBench run's folder) as problems and candidates the plugin runs, each with the speedup
published for it and its GPU (docs/reference/cli.md#autotune-import-kernelbench; importers/)."""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from .registry import EXIT_OK, EXIT_USAGE, command


def _run(args: argparse.Namespace) -> int:
    from ..importers.kernelbench import LayoutError, detect, read_leaderboard, read_run
    from ..importers.output import MANIFEST, draw, named, write

    src: Path = args.src
    try:
        layout = detect(src)
        if layout == "leaderboard":
            found = read_leaderboard(src, args.level, args.hardware)
        else:
            found = read_run(src, args.level, args.kernelbench, args.baseline_times, args.hardware)
        if not found:
            print(f"autotune import: no level {args.level} solution with its problem file under {src}",
                  file=sys.stderr)
            return EXIT_USAGE
        items = named(found)
        sample = None
        if args.sample is not None:
            seed = args.seed if args.seed is not None else secrets.randbits(32)
            items = draw(items, args.sample, seed)
            sample = {"n": args.sample, "seed": seed, "of": len(found), "drawn": [n for n, _ in items]}
            print(f"sample: {len(items)} of {len(found)} candidates drawn with seed {seed} (random.Random(seed) over "
                  "the candidates sorted by problem and name):")
            for name, s in items:
                print(f"  {s.problem}/{name}")
        source = {"layout": layout, "path": str(src.resolve()), "level": args.level}
        manifest = write(args.out, items, source, sample, force=args.force)
    except LayoutError as e:
        print(f"autotune import: {e}", file=sys.stderr)
        return EXIT_USAGE
    gpu = sum(1 for c in manifest["candidates"] if "/cuda/" in c["file"])
    print(f"{args.out}: {len(manifest['problems'])} problems, {len(manifest['candidates'])} candidates ({gpu} for "
          f"CUDA only) from the {layout} at {src}; published numbers in {args.out / MANIFEST}")
    print(f"run them: pytest --autotune{' --device=cuda' if gpu else ''} --problems={args.out / 'problems'} "
          f"--candidates={args.out / 'candidates'}")
    return EXIT_OK


@command
def _import(sub) -> None:
    p = sub.add_parser("import", help="import agents' solutions as problems and candidates (KernelBench formats)",
                       description="Import published agent solutions as a suite the plugin runs "
                                   "(docs/reference/cli.md#autotune-import-kernelbench).")
    which = p.add_subparsers(dest="format", metavar="FORMAT")
    which.required = True
    kb = which.add_parser(
        "kernelbench", help="KernelBench's leaderboard repository, or a KernelBench run's folder",
        description="Turn KernelBench-format solutions into DIR/problems/<stem>.py (problem files unchanged), "
                    "DIR/candidates/<stem>/[cuda/]<name>.py (solutions unchanged; cuda/ for those that name CUDA or "
                    "Triton) and DIR/published.json (per candidate: published speedups, GPU, model, source path and "
                    "id, sha256). SRC is the leaderboard repository's root (docs/assets/data.json, raw_data.json, "
                    "problems/, solutions/) or a KernelBench run (runs/<name>/: level_<L>_problem_<P>_sample_<S>_"
                    "kernel.py, eval_results.json).")
    kb.add_argument("src", type=Path, metavar="SRC", help="the leaderboard repository, or a KernelBench run folder")
    kb.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder to write the suite to")
    kb.add_argument("--level", type=int, default=1, metavar="L", help="KernelBench level (default: 1)")
    kb.add_argument("--sample", type=int, default=None, metavar="N",
                    help="import N candidates drawn at random (seeded: --seed), not all; prints the seed and the draw")
    kb.add_argument("--seed", type=int, default=None, metavar="S",
                    help="the draw's seed (default: a fresh one, printed and kept in the manifest)")
    kb.add_argument("--kernelbench", type=Path, default=None, metavar="DIR",
                    help="a run's problems: a KernelBench checkout (KernelBench/level<L>/<id>_<Name>.py)")
    kb.add_argument("--baseline-times", type=Path, default=None, metavar="FILE",
                    help="a run's speedups: KernelBench's baseline times (results/timing/<GPU>/"
                         "baseline_time_torch.json); the speedup is its mean over the sample's runtime")
    kb.add_argument("--hardware", default=None, metavar="GPU",
                    help="the GPU the published numbers were measured on, where the source does not say")
    kb.add_argument("--force", action="store_true", help="replace an earlier import in DIR")
    kb.set_defaults(func=_run)
