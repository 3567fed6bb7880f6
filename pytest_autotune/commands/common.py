"""Helpers shared by the study subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..protocol import Protocol, find_protocol, load_protocol
from .registry import DEFAULT_DB


def root_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=None, metavar="DIR",
                   help="the project's rootdir: registry files, problem paths and node ids are relative to it "
                        "(default: the current directory)")


def root_of(args: argparse.Namespace) -> Path:
    return (args.root or Path.cwd()).resolve()


def db_of(args: argparse.Namespace) -> Path:
    return args.db if args.db is not None else root_of(args) / DEFAULT_DB


def protocol_of(args: argparse.Namespace) -> Protocol:
    return load_protocol(find_protocol(root_of(args)))


def calls_arg(values: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for v in values or []:
        arm, sep, path = v.partition("=")
        if not sep or not arm or not path:
            raise argparse.ArgumentTypeError(f"--calls {v!r}: write ARM=PATH (the arm's model-call log, JSON lines)")
        out[arm] = Path(path)
    return out
