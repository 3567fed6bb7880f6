"""The subcommands of ``autotune`` (the dispatcher is cli.py): each module registers its parsers with
:func:`.registry.command` when imported (docs/reference/store.md, docs/guide/studies.md, docs/guide/anchors.md)."""

from . import anchors, audit, export, kb_import, plot, remeasure, search, store, study  # noqa: F401
