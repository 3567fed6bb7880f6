"""Seeded search baselines (``autotune search``, docs/guide/studies.md): a candidate template declares a search space,
a tuner proposes points in it, and each point becomes a candidate file inside the modification surface that is
measured through the same gates as any other candidate."""
