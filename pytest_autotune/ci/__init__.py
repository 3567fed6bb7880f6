"""Gating a kernel PR in CI (docs/guide/ci.md): compare each item with a stored run, fail on a regression beyond noise,
write what CI systems read (junitxml properties, a Markdown summary, a ``compare`` section in the JSON report).

* ``compare.py``: the rule, pure (two results in, one outcome out);
* ``stored.py``: a stored run, from the store or from a committed JSON report, and the refusal to compare across
  protocols, devices or torch versions;
* ``export.py``: a recorded run as a committable JSON report (``autotune export RUN --json``);
* ``markdown.py``: the old vs new table;
* ``plugin.py``: the pytest hooks.
"""
