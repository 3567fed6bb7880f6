"""Exceptions that carry the fix.

Every error a user can meet names what went wrong *and* what to do about it. The plugin turns
:class:`AutotuneUsageError` into ``pytest.UsageError`` (exit code 4, before collection).
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class for errors raised by pytest-autotune."""


class AutotuneWarning(UserWarning):
    """Something about an item deserves a look (weak problem, a loaded machine, baseline ignored...)."""


class AutotuneUsageError(AutotuneError):
    """Bad configuration or environment, detected before anything is measured."""


class ProtocolError(AutotuneUsageError):
    """protocol.toml is invalid (unknown key, wrong type, out-of-range value) or not frozen."""


class StoreError(AutotuneUsageError):
    """The results database cannot be used safely (locked, read-only, corrupt, newer schema...)."""


class ValidatorRefusal(AutotuneError):
    """The database's own validator refused a row; ``rule`` is the name of the violated rule."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


class ProblemLoadError(AutotuneError):
    """A problem or candidate file cannot be used; carries the file and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
