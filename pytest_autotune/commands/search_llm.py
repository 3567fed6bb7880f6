"""``autotune search --tuner=llm``: the LLM tuner's options and its run (docs/guide/llm-tuner.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import db_of
from .registry import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE

ENGINE_DECLARATIONS = Path("benchmarks") / "engines"


def llm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--tuner=llm (docs/guide/llm-tuner.md)")
    g.add_argument("--endpoint", default=None, metavar="URL",
                   help="base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--model", default=None, metavar="NAME", help="the model name the endpoint serves")
    g.add_argument("--calls-log", type=Path, default=None, metavar="PATH",
                   help="the JSON-lines log of every model call (default: calls.jsonl beside the candidates; an "
                        "existing log is continued)")
    g.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="the completion token cap of each call (default 8192); replies cut off by it are unusable")
    g.add_argument("--temperature", type=float, default=None, metavar="T", help="sampling temperature (default 0.7)")
    g.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="the environment variable holding the API key (default OPENAI_API_KEY; the key is read "
                        "from the environment only and written nowhere)")
    g.add_argument("--call-timeout", type=float, default=None, metavar="S",
                   help="per-call timeout in seconds (default 600, the protocol's [studies].call_timeout_s)")
    g.add_argument("--retries", type=int, default=None, metavar="N",
                   help="retries of a call after a transport error, a timeout, HTTP 408, 429 or 5xx (default 3, "
                        "with exponential backoff)")
    g.add_argument("--token-budget", type=int, default=None, metavar="N",
                   help="tokens (prompt + completion) the study may spend, counting the study's calls already in "
                        "the calls log; iterations after it is spent are recorded as unusable, not attempted")


def next_iteration(db: Path, study: str, arm: str, problem: str) -> int:
    """1 + the last iteration the arm recorded on this problem (a second search continues the trajectory)."""
    if not db.exists():
        return 1
    from ..store import ResultStore
    from ..store.studies import last_iteration

    with ResultStore.open(db, readonly=True) as store:
        return last_iteration(store, study, arm, problem) + 1


def run_llm(args: argparse.Namespace, tuner_cls: Any, root: Path, protocol: Any) -> int:
    from ..problems.discovery import BUNDLED_ROOT
    from ..study.agent.loop import AgentSearch
    from ..study.agent.targets import EngineTarget, KernelTarget, Target, rel
    from ..study.audit import audit_file
    from ..study.search.runner import check_inside_surface, default_out

    if args.template is not None or args.fix:
        print("autotune: --template and --fix are for template tuners; the llm tuner writes candidates itself",
              file=sys.stderr)
        return EXIT_USAGE
    if args.budget < 1:
        print("autotune: --budget must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    tuner = tuner_cls(args.seed, {
        "endpoint": args.endpoint, "model": args.model, "max_tokens": args.max_tokens,
        "temperature": args.temperature, "api_key_env": args.api_key_env,
        "timeout_s": args.call_timeout or protocol.studies.call_timeout_s, "retries": args.retries})
    out = (root / (args.out or default_out(args.study, args.arm))).resolve()
    check_inside_surface(root, out, protocol)
    target: Target
    if args.engine:
        decl = (root / args.problem if args.problem is not None and args.problem.suffix == ".toml"
                else root / ENGINE_DECLARATIONS / f"{args.engine}.toml")
        target = EngineTarget(root, out, decl.resolve(), args.workload)
        if target.decl.engine != args.engine:
            print(f"autotune: --engine={args.engine} but {decl} declares engine {target.decl.engine}", file=sys.stderr)
            return EXIT_USAGE
    else:
        if args.problem is None:
            print("autotune: --problem=PATH is required (the KernelBench problem the model writes candidates for), "
                  "or --engine=NAME", file=sys.stderr)
            return EXIT_USAGE
        problem = (root / args.problem).resolve()
        if not problem.is_file():
            print(f"autotune: --problem={args.problem}: no such file under {root}", file=sys.stderr)
            return EXIT_USAGE
        target = KernelTarget(root, out, problem, args.device, root / BUNDLED_ROOT)
    log_path = (root / args.calls_log).resolve() if args.calls_log else target.folder / "calls.jsonl"
    db = db_of(args).resolve()
    first = next_iteration(db, args.study, args.arm, target.problem)
    s = tuner.settings
    if args.dry_run:
        print(f"search: tuner llm, model {s.model} at {s.endpoint}: the first prompt (iteration {first}); nothing "
              "is called, written or measured (--dry-run)")
        for m in target.messages([], first, 1, args.budget, s.max_tokens):
            print(f"--- {m['role']} ---")
            print(m["content"])
        return EXIT_OK
    client, redactor = tuner.connect(log_path)
    print(f"search: tuner llm, model {s.model} at {s.endpoint} (max_tokens {s.max_tokens}, temperature "
          f"{s.temperature:g}, seed {args.seed}), {args.budget} iteration(s) from {first} of {target.source()}; "
          f"calls logged in {rel(log_path, root)}")
    search = AgentSearch(root=root, target=target, complete=client.complete, settings=s, log=client.log,
                         redactor=redactor, study=args.study, arm=args.arm, budget=args.budget, seed=args.seed, first_iteration=first, db=db, device=args.device,
        extra=args.pytest_args, token_budget=args.token_budget)
    rc = search.run()
    audit = audit_file(log_path, protocol.studies)
    print(audit.render())
    print(f"verdict of the study: autotune study report {args.study} --calls {args.arm}={rel(log_path, root)}")
    return EXIT_OK if rc == 0 else EXIT_PROBLEMS
