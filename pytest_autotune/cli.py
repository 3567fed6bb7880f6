"""The ``autotune`` command: a small dispatcher of subcommands.

Exit codes: 0 ok; 1 ``verify``/``merge`` found problems; 2 usage or store errors (the message names the fix).

Adding a subcommand: a module in pytest_autotune/commands/ (imported by :func:`build_parser`) that does::

    from .registry import command

    @command
    def _mycmd(sub):
        p = sub.add_parser("mycmd", help="...")
        p.add_argument(...)
        p.set_defaults(func=run_mycmd)   # run_mycmd(args) -> int exit code
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .commands.registry import EXIT_USAGE, registered
from .errors import AutotuneError, StoreError

# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    from .engines import cli as _engine_commands  # noqa: F401 - registers `autotune engine ...`

    parser = argparse.ArgumentParser(
        prog="autotune",
        description="pytest-autotune: the results store (verify, show, merge, quarantine), studies (study, "
                    "remeasure, search, audit, anchors) and plots.",
        epilog="exit codes: 0 ok, 1 verify/merge found problems, 2 usage or store error",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    from . import commands  # noqa: F401  (registers the store's commands, study, remeasure, search, ...)

    for register in registered():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on usage errors
    try:
        return int(args.func(args))
    except StoreError as e:
        print(f"autotune: {e}", file=sys.stderr)
        return EXIT_USAGE
    except AutotuneError as e:
        print(f"autotune: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover
        return 130


if __name__ == "__main__":
    # run the canonical module's main: subcommand modules register into pytest_autotune.cli, not into __main__
    from pytest_autotune.cli import main as _main

    sys.exit(_main())
