"""Shared helpers of the engine tests: an engine cache with the fake engine "installed" and a small model made,
declaration files, and a look at /proc for servers that survived."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pytest_autotune.engines.install import CACHE_ENV, install
from pytest_autotune.engines.model import ModelSpec, make_model

HERE = Path(__file__).resolve().parent
FAKE_SERVER = HERE / "fake_server.py"

#: a model small enough to make in about a second (tokenizer trained on 150 kB of generated text)
SMALL_MODEL = {"seed": 3, "layers": 1, "hidden": 64, "heads": 2, "kv_heads": 1, "intermediate": 128,
               "vocab_size": 400, "max_position": 512, "corpus_chars": 150_000}

CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from fake_adapter import FakeAdapter

def pytest_autotune_engines(config):
    return [FakeAdapter()]
"""


def prepare_cache(cache: Path) -> Path:
    """``cache`` as an engine cache holding the fake engine's installation and the small model."""
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(cache)
    try:
        import sys

        sys.path.insert(0, str(HERE))
        from fake_adapter import FakeAdapter

        install(FakeAdapter())
        make_model(ModelSpec(**SMALL_MODEL), cache / "models")
    finally:
        if old is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = old
    return cache


def model_table() -> str:
    return "[model]\n" + "\n".join(f"{k} = {v}" for k, v in SMALL_MODEL.items()) + "\n"


def processes_matching(needle: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``needle``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd and state != "Z":
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(cond, timeout_s: float, step: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
