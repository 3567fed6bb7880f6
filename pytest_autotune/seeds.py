"""The run's nonce and the paired seeds derived from it.

A fresh 256-bit nonce is drawn per run from the OS. Seeds are ``HMAC-SHA256(nonce, "<item>|<purpose>|<i>")``
truncated to 63 bits: unpredictable before the run (a candidate cannot precompute answers for them), identical
for baseline and candidate of one item (paired), and re-derivable after the run once the nonce is revealed
(``autotune verify`` checks them).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

NONCE_BYTES = 32


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def nonce_commitment(nonce: bytes) -> str:
    """``runs.nonce_sha256``: sha256 of the raw nonce bytes (hex). Written at begin, checked at finish and by
    verify against the nonce revealed at finish (stored as ``nonce.hex()``)."""
    return hashlib.sha256(nonce).hexdigest()


def derive_seed(nonce: bytes, item_key: str, purpose: str, index: int) -> int:
    msg = f"{item_key}|{purpose}|{index}".encode()
    digest = hmac.new(nonce, msg, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def derive_seeds(nonce: bytes, item_key: str, purpose: str, count: int) -> tuple[int, ...]:
    return tuple(derive_seed(nonce, item_key, purpose, i) for i in range(count))


def problem_init_seed(nonce: bytes, problem: str, device: str) -> int:
    """The seed both arms of every item of ``problem`` on ``device`` build their modules from (so a problem's items
    share parameters), and the build sandbox its candidate's."""
    return SeedSource(nonce, f"{problem}|@init|{device}").seed("init")


class SeedSource:
    """Seeds for one item. ``item_key`` is stable across processes (problem, candidate, device), so xdist workers
    derive the same seeds as the controller would."""

    def __init__(self, nonce: bytes, item_key: str) -> None:
        self._nonce = nonce
        self.item_key = item_key

    def seeds(self, purpose: str, count: int) -> tuple[int, ...]:
        return derive_seeds(self._nonce, self.item_key, purpose, count)

    def seed(self, purpose: str, index: int = 0) -> int:
        return derive_seed(self._nonce, self.item_key, purpose, index)
