"""``autotune search``: a seeded search baseline (docs/guide/studies.md#seeded-search-baselines-autotune-search)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from .common import db_of, protocol_of, root_arg, root_of
from .registry import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, command, db_arg
from .search_llm import llm_args, next_iteration


def _run(args: argparse.Namespace) -> int:
    from ..problems.discovery import BUNDLED_ROOT
    from ..study.recorder import valid_name
    from ..study.search.runner import (
        SearchPlan,
        check_inside_surface,
        default_out,
        pytest_command,
        resolve_template,
        run_pytest,
        summarize,
        write_candidates,
    )
    from ..study.search.space import parse_fix
    from ..study.search.tuners import tuner_class

    root = root_of(args)
    protocol = protocol_of(args)
    valid_name(args.study, "--study")
    valid_name(args.arm, "--arm")
    tuner_cls = tuner_class(args.tuner)
    if tuner_cls.writes_code:  # the LLM tuner: its adaptive loop (docs/guide/llm-tuner.md)
        from .search_llm import run_llm

        return run_llm(args, tuner_cls, root, protocol)
    if args.engine:
        print(f"autotune: --engine={args.engine} with --tuner={args.tuner}: template tuners search kernel templates; "
              "engine flag spaces are searched by --tuner=llm (the seam: pytest_autotune.engines.space)",
              file=sys.stderr)
        return EXIT_USAGE
    if args.problem is None:
        print("autotune: --problem=PATH is required (the KernelBench problem file whose template is searched)",
              file=sys.stderr)
        return EXIT_USAGE
    tuner = tuner_cls(args.seed, {"endpoint": args.endpoint, "model": args.model})
    if tuner.adaptive:
        print(f"autotune: tuner {args.tuner} is adaptive (one point per measured iteration); this runner measures "
              "non-adaptive tuners in one session", file=sys.stderr)
        return EXIT_USAGE
    problem = (root / args.problem).resolve() if not args.problem.is_absolute() else args.problem
    if not problem.is_file():
        print(f"autotune: --problem={args.problem}: no such file under {root}", file=sys.stderr)
        return EXIT_USAGE
    template = resolve_template(problem, args.template)
    fixed = parse_fix(args.fix)
    space = template.space.restricted(fixed)
    template = dataclasses.replace(template, space=space)
    points = tuner.propose(space, args.budget, [])
    out = (root / (args.out or default_out(args.study, args.arm))).resolve()
    check_inside_surface(root, out, protocol)
    db = db_of(args).resolve()
    plan = SearchPlan(root=root, problem=problem, template=template, tuner=tuner, study=args.study, arm=args.arm,
                      budget=args.budget, seed=args.seed, out=out,
                      first_iteration=next_iteration(db, args.study, args.arm, problem.stem), fixed=fixed)
    print(f"search: tuner {tuner.name}, seed {args.seed}, {len(points)} of {space.size} point(s) of "
          f"{template.path} (space {space.to_json()})")
    entries = write_candidates(plan, points)
    print(f"wrote {len(entries)} candidate(s) to {plan.folder} (iterations {entries[0]['iteration']}-"
          f"{entries[-1]['iteration']}), manifest {plan.manifest_path}")
    if args.dry_run:
        return EXIT_OK
    with tempfile.TemporaryDirectory(prefix="autotune-search-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = pytest_command(plan, db=db, device=args.device, report=report, bundled_root=root / BUNDLED_ROOT,
                             extra=args.pytest_args)
        rc = run_pytest(cmd, root)
        print()
        print(f"search {args.study}/{args.arm} on {args.device} (pytest exit {rc}):")
        for line in summarize(report, entries):
            print(line)
    print(f"verdict of the study: autotune study report {args.study}")
    return EXIT_OK if rc in (0, 1) else EXIT_PROBLEMS


@command
def _search(sub) -> None:
    p = sub.add_parser(
        "search", help="generate candidates from a template's search space and measure them as a study arm",
        description="A tuner proposes --budget points of the problem's template search space; each becomes a "
                    "candidate file inside the modification surface, measured by pytest --autotune through the same "
                    "gates and recorded with its study, arm and iteration. Arguments after -- go to pytest.")
    p.add_argument("--tuner", default="random", help="random or llm (built in; docs/guide/llm-tuner.md), or a tuner "
                                                     "registered under the pytest_autotune.tuners entry points")
    p.add_argument("--problem", type=Path, default=None, metavar="PATH", help="the problem file")
    p.add_argument("--template", type=Path, default=None, metavar="PATH",
                   help="the template (default: the one in <suite>/templates/<problem>/)")
    p.add_argument("--budget", type=int, required=True, metavar="N", help="candidates to generate and measure")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the tuner's seed (default 0)")
    p.add_argument("--study", required=True, metavar="NAME")
    p.add_argument("--arm", required=True, metavar="NAME")
    p.add_argument("--fix", action="append", default=[], metavar="KEY=VALUE",
                   help="pin a dimension of the space (repeatable), e.g. --fix algorithm='library'")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="--candidates folder to write (default candidates/search/<study>/<arm>; must be inside "
                        "[surface].modifiable)")
    p.add_argument("--device", default="cpu", help="where to measure (default cpu)")
    p.add_argument("--engine", default=None, metavar="NAME",
                   help="search an engine's declared flag space (--tuner=llm): the declaration is --problem=PATH.toml, "
                        "else benchmarks/engines/NAME.toml")
    p.add_argument("--workload", default=None, metavar="NAME", help="--engine: the workload (default: the first)")
    llm_args(p)
    p.add_argument("--dry-run", action="store_true", help="write the candidates and the manifest, measure nothing "
                                                          "(--tuner=llm: print the first prompt, call nothing)")
    db_arg(p)
    root_arg(p)
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="extra pytest arguments (after --)")
    p.set_defaults(func=_run)
