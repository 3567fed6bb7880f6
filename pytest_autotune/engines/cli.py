"""``autotune engine ...``: install engines, make the tiny model, list adapters, draw from a flag space.

    autotune engine install vllm|llamacpp|sglang [--force]
    autotune engine make-model [--seed N] [--layers N] [--hidden N] ... [--gguf] [--out DIR] [--force]
    autotune engine list
    autotune engine space benchmarks/engines/vllm.toml [--sample N --seed S]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from ..commands.registry import EXIT_OK, EXIT_USAGE, command


def _adapters() -> dict:
    from .adapters import builtin_adapters

    return {a.name: a for a in builtin_adapters()}


def _run_install(args: argparse.Namespace) -> int:
    from .install import EngineInstallError, engine_dir, install

    adapters = _adapters()
    a = adapters[args.engine]
    print(f"installing {a.title} into {engine_dir(a.name)} (log: {engine_dir(a.name) / 'install.log'})", flush=True)
    t0 = time.perf_counter()
    try:
        inst = install(a, force=args.force, echo=lambda s: print(s, flush=True))
    except EngineInstallError as e:
        print(f"autotune: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{a.name} {inst.version} ready in {time.perf_counter() - t0:.0f} s: {inst.root}")
    if a.untested_reason:
        print(f"note: the {a.title} adapter is untested: {a.untested_reason}")
    return EXIT_OK


def _run_make_model(args: argparse.Namespace) -> int:
    from .install import cache_root, find_installation
    from .model import ModelSpec, make_model

    fields = {f.name for f in dataclasses.fields(ModelSpec)}
    spec_kw = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    try:
        spec = ModelSpec(**spec_kw)
    except ValueError as e:
        print(f"autotune: {e}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out) if args.out else cache_root() / "models"
    t0 = time.perf_counter()
    model = make_model(spec, out, force=args.force)
    print(f"{model.path}  ({spec.n_params():,} parameters, digest {model.digest}, {time.perf_counter() - t0:.1f} s)")
    if args.gguf:
        from .adapters.llamacpp import LlamaCppAdapter
        from .gguf import ensure_gguf, gguf_digest

        inst = find_installation(LlamaCppAdapter())
        if inst is None:
            print("autotune: the GGUF conversion needs llama.cpp's converter: autotune engine install llamacpp",
                  file=sys.stderr)
            return EXIT_USAGE
        model = ensure_gguf(model, inst)
        print(f"{model.gguf}  (sha256 {gguf_digest(model)})")
    if args.json:
        print(json.dumps(model.manifest(), indent=2, sort_keys=True))
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    from .install import engine_dir, find_installation

    for name, a in _adapters().items():
        inst = find_installation(a)
        why = a.install_unsupported_reason()
        state = (f"installed {inst.version} ({inst.root})" if inst else
                 f"cannot run here: {why}" if why else f"not installed: autotune engine install {name}")
        print(f"{name:9} {a.title:18} {state}")
        if a.untested_reason:
            print(f"{'':9} untested: {a.untested_reason}")
    print(f"engine cache: {engine_dir('x').parent}")
    return EXIT_OK


def _run_space(args: argparse.Namespace) -> int:
    from .declaration import DeclarationError, load_declaration
    from .space import config_from_assignment, flag_space

    try:
        decl = load_declaration(Path(args.declaration))
        space = flag_space(decl)
    except (DeclarationError, ValueError, OSError) as e:
        print(f"autotune: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{decl.engine}: {len(space.choices)} flags, {space.size():,} assignments")
    for flag, choices in sorted(space.choices.items()):
        print(f"  --{flag}: {', '.join(json.dumps(c) for c in choices)}")
    if args.sample:
        rng = random.Random(args.seed)
        for _ in range(args.sample):
            a = space.sample(rng)
            c = config_from_assignment(decl, a)
            print(f"{c.name}: {json.dumps(a, sort_keys=True)}")
    return EXIT_OK


@command
def _engine(sub) -> None:
    p = sub.add_parser("engine", help="serving engines: install, make the tiny model, list, flag space",
                       description="Serving-engine helpers (docs/guide/engines.md).")
    es = p.add_subparsers(dest="engine_command", metavar="SUBCOMMAND")
    es.required = True
    pi = es.add_parser("install", help="install an engine into its own venv / build folder (cached, idempotent)")
    pi.add_argument("engine", choices=sorted(_adapters()))
    pi.add_argument("--force", action="store_true", help="rebuild even when the cached install is current")
    pi.set_defaults(func=_run_install)
    pm = es.add_parser("make-model", help="make the tiny random-weight Llama + tokenizer (deterministic from a seed)")
    from .model import ModelSpec

    defaults = ModelSpec()
    for f in dataclasses.fields(ModelSpec):
        pm.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=type(getattr(defaults, f.name)),
                        default=None, help=f"default {getattr(defaults, f.name)}")
    pm.add_argument("--out", default=None, metavar="DIR", help="parent folder (default: the engine cache's models/)")
    pm.add_argument("--gguf", action="store_true", help="also convert to GGUF for llama.cpp (needs it installed)")
    pm.add_argument("--force", action="store_true", help="make it again even if an intact copy exists")
    pm.add_argument("--json", action="store_true", help="print the model's manifest")
    pm.set_defaults(func=_run_make_model)
    pl = es.add_parser("list", help="engines, whether installed, and their versions")
    pl.set_defaults(func=_run_list)
    ps = es.add_parser("space", help="show a declaration's flag space; --sample N draws assignments")
    ps.add_argument("declaration")
    ps.add_argument("--sample", type=int, default=0)
    ps.add_argument("--seed", type=int, default=0)
    ps.set_defaults(func=_run_space)
