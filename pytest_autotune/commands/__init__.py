"""The subcommands of ``autotune`` (the dispatcher is cli.py): each module registers its parsers with
:func:`.registry.command` when imported (docs/schema.md, docs/studies.md, docs/anchors.md)."""

from . import anchors, audit, export, plot, remeasure, search, store, study  # noqa: F401
