"""The registry of ``autotune`` subcommands and what they share (exit codes, the default database, ``--db``):
a leaf module, so that cli.py and every module that adds a subcommand import it and not each other."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2

DEFAULT_DB = Path(".autotune") / "results.db"

_Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
_COMMANDS: list[_Registrar] = []


def command(register: _Registrar) -> _Registrar:
    """Register a function that adds one subcommand parser (with ``set_defaults(func=handler)``)."""
    _COMMANDS.append(register)
    return register


def db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"results database (default: {DEFAULT_DB} under the current directory)",
    )


def registered() -> list[_Registrar]:
    return list(_COMMANDS)
