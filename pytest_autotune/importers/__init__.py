"""Importers of agents' published solutions into problems and candidates the plugin runs (docs/reference/cli.md,
``autotune import``)."""
