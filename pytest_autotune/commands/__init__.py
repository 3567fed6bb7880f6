"""Subcommands of ``autotune`` beyond the store's own (cli.py): each module registers its parser with
:func:`pytest_autotune.cli.command` when imported (docs/studies.md, docs/anchors.md)."""

from . import anchors, audit, plot, remeasure, search, study  # noqa: F401
