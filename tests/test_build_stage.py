"""The build stage's controller side against a scripted build sandbox (no compiler, no GPU): what each answer of
the sandbox becomes -- a cached build handed to the candidate's later sandboxes only, a Triton kernel that does not
compile, built objects over the protocol's limit, a candidate that raised before its build was complete, a sandbox
that hung -- and a cache hit that starts no sandbox."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
import torch

from pytest_autotune.build.cache import BuildCache
from pytest_autotune.build.stage import BuildStage
from pytest_autotune.gates.base import GateOutcome
from pytest_autotune.measure.memory import UNBUDGETED
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.protocol import PACKAGED_PROTOCOL, load_protocol
from pytest_autotune.sandbox.runner import SandboxFailure

TRITON_SOURCE = b"import triton\nimport triton.language as tl\nclass ModelNew: ...\n"


class FakeBox:
    def __init__(self, reply: Any) -> None:
        self.hello = {"ok": True}
        self.reply = reply
        self.chan = SimpleNamespace(stats=SimpleNamespace(as_dict=lambda: {}))
        self.sent: list = []

    def __enter__(self) -> "FakeBox":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def request(self, msg: dict, timeout: Optional[float] = None, phase: str = "") -> dict:
        self.sent.append((msg, timeout))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


class FakePool:
    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.started: list = []

    def start(self, init: dict, label: str = "", **limits: Any) -> FakeBox:
        self.started.append((init, label, limits))
        return FakeBox(self.reply)


class Stage(BuildStage):
    def __init__(self, env: Any) -> None:
        self.env = env

    def _init(self, problem_src, sizes, init_seed, role, source, class_name) -> dict:
        return {"role": role, "build": self.build_payload(problem_src, role, source)}

    def _refused(self, item, refused: GateOutcome):
        return SimpleNamespace(outcome=SimpleNamespace(verdict=refused.verdict, gate=refused.gate,
                                                       reason=refused.reason))


def _env(tmp_path: Path, reply: Any) -> SimpleNamespace:
    return SimpleNamespace(pool=FakePool(reply), protocol=load_protocol(PACKAGED_PROTOCOL),
                           device=SimpleNamespace(framework="torch", fingerprint=lambda: {}),
                           device_spec=SimpleNamespace(name="cpu"), build_root=tmp_path / "build", builds={},
                           prebuilt={}, run_id=uuid.uuid4().hex, lock=SimpleNamespace(shared=contextlib.nullcontext))


def _item(source: bytes = TRITON_SOURCE) -> SimpleNamespace:
    ctx = SimpleNamespace(details={}, warnings=[], seeds=SimpleNamespace(seed=lambda purpose, i=0: 7),
                          memory=UNBUDGETED, evidence=SimpleNamespace(as_json=lambda: {}), candidate_sha256=None,
                          timing=None)
    spec = SimpleNamespace(item_key="p|c|cpu", nodeid="x::c[cpu]", candidate=SimpleNamespace(class_name="ModelNew",
                           name="c"), problem=SimpleNamespace(name="p"), device="cpu")
    return SimpleNamespace(spec=spec, ctx=ctx, cand_src=SourceFile(Path("c.py"), source, "c" * 64),
                           problem_src=SourceFile(Path("p.py"), b"", "p" * 64), sizes={"n": 4}, init_seed=1, boxes={},
                           free_at_start=None, started=0.0)


def _entries(root: Path) -> list[str]:
    """The cache's entries (its dot-folders are the keys' locks and the run's records, not entries)."""
    return [p.name for p in root.iterdir() if not p.name.startswith(".")] if root.is_dir() else []


def _u8(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _reply(**kw: Any) -> dict:
    return {"ok": True, "calls": [], "failures": [], "files": {}, "bytes": 0, "raised": None, "trace": "",
            "triton_failed": False, "triton_root": "/tmp/autotune-build-x/triton", "triton": "3.5.0",
            "seconds": 1.5, **kw}


def test_a_triton_build_is_cached_and_goes_to_the_candidates_sandboxes_only(tmp_path: Path) -> None:
    files = {"triton/ABC/_softmax_rows.cubin": _u8(b"\x01cubin"), "triton/ABC/__grp___softmax_rows.json": _u8(b"{}")}
    env = _env(tmp_path, _reply(files=files, bytes=8))
    stage, item = Stage(env), _item()
    assert stage.build(item) is None
    (init, label, limits), = env.pool.started
    assert init["role"] == "build" and init["build"] is None and label == "p|c|cpu-build"
    assert limits == {"memory_mb": 8192, "max_processes": 512, "limits_key": "[build]"}
    info = item.ctx.details["build"]
    assert info["cache"] == "miss" and info["compiler"].endswith("triton 3.5.0") and info["build_seconds"] == 1.5
    payload = stage.build_payload(item.problem_src, "candidate", item.cand_src)
    assert payload is not None and bytes(payload["files"]["triton/ABC/_softmax_rows.cubin"].numpy()) == b"\x01cubin"
    assert stage.build_payload(item.problem_src, "baseline", item.cand_src) is None
    entry = BuildCache(tmp_path / "build").load(info["key"])
    assert entry is not None and entry.manifest["triton_root"] == "/tmp/autotune-build-x/triton"
    again = Stage(_env(tmp_path, AssertionError("no build sandbox on a hit")))
    item2 = _item()
    assert again.build(item2) is None and item2.ctx.details["build"]["cache"] == "hit"
    assert again.env.pool.started == []


def test_what_the_build_refuses(tmp_path: Path) -> None:
    triton = _reply(triton_failed=True, raised="CompilationError: at 3:4: NameError('blockIdy') (at /x/c.py:9)",
                    trace="Traceback ...\ntriton.compiler.errors.CompilationError: at 3:4:")
    v = Stage(_env(tmp_path, triton)).build(_item())
    assert (v.outcome.verdict, v.outcome.gate) == ("rejected", "build")
    assert v.outcome.reason.startswith("Triton could not compile a kernel: CompilationError: at 3:4")
    big = _reply(files={"triton/a": _u8(b"x")}, bytes=600 << 20)
    v = Stage(_env(tmp_path, big)).build(_item())
    assert v.outcome.gate == "build" and "over the protocol's 512 MiB ([build].max_artifact_mb)" in v.outcome.reason
    assert not _entries(tmp_path / "build")  # nothing refused is kept


def test_a_build_cut_short_by_the_candidate_is_used_but_not_cached(tmp_path: Path) -> None:
    env = _env(tmp_path, _reply(raised="RuntimeError: boom (at c.py:3)"))
    item = _item(b"from torch.utils.cpp_extension import load_inline\n")
    assert Stage(env).build(item) is None
    assert item.ctx.details["build"]["raised"] == "RuntimeError: boom (at c.py:3)"
    assert not _entries(tmp_path / "build")


def test_a_plain_candidate_has_no_build_stage_and_a_hung_build_is_an_error(tmp_path: Path) -> None:
    env = _env(tmp_path, AssertionError("never started"))
    plain = _item(b"import torch\nclass ModelNew: ...\n")
    assert Stage(env).build(plain) is None and "build" not in plain.ctx.details and env.pool.started == []
    hung = Stage(_env(tmp_path, SandboxFailure("timeout", "no answer within 600 s during build ([build].timeout_s)")))
    v = hung.build(_item())
    assert (v.outcome.verdict, v.outcome.gate) == ("error", "build") and "[build].timeout_s" in v.outcome.reason


@pytest.mark.parametrize("source", [b"import triton\n", b"from torch.utils import cpp_extension\n"])
def test_the_build_request_carries_the_protocols_budget(tmp_path: Path, source: bytes) -> None:
    box_reply = _reply()
    env = _env(tmp_path, box_reply)
    boxes: list = []
    start = env.pool.start

    def record(init: dict, label: str = "", **limits: Any) -> FakeBox:
        box = start(init, label, **limits)
        boxes.append(box)
        return box

    env.pool.start = record
    Stage(env).build(_item(source))
    (msg, timeout), = boxes[0].sent
    assert msg["cmd"] == "build" and msg["seed"] == 7 and msg["max_bytes"] == 512 << 20 and timeout == 600.0


@pytest.mark.parametrize("bad", [
    {"files": {"a": "not a tensor"}},
    {"calls": [1]},
    {"bytes": "many"},
    {"failures": [1]},
    {"files": {"../outside.so": _u8(b"x")}},
    {"files": {"/etc/passwd": _u8(b"x")}},
], ids=["file-not-a-tensor", "call-not-a-dict", "bytes-not-a-number", "failure-not-a-dict", "path-escapes",
        "absolute-path"])
def test_a_malformed_build_reply_is_the_sandboxs_error_not_the_controllers(tmp_path: Path, bad: dict) -> None:
    """The build sandbox's reply comes from the candidate's process: any shape it should not have gives the item
    an error verdict naming it, and nothing lands in the cache or outside it."""
    v = Stage(_env(tmp_path, _reply(**bad))).build(_item())
    assert (v.outcome.verdict, v.outcome.gate) == ("error", "build")
    assert "malformed" in v.outcome.reason or "plain relative path" in v.outcome.reason, v.outcome.reason
    assert not _entries(tmp_path / "build")
    assert not (tmp_path / "outside.so").exists()


def test_an_empty_compiler_log_still_names_the_refusal(tmp_path: Path) -> None:
    v = Stage(_env(tmp_path, _reply(failures=[{"error": "", "fn": "load_inline", "name": "ext"}]))).build(
        _item(b"from torch.utils.cpp_extension import load_inline\n"))
    assert (v.outcome.verdict, v.outcome.gate) == ("rejected", "build")
    assert v.outcome.reason.startswith("(the compiler printed nothing)")


def test_a_cache_that_cannot_be_written_warns_and_the_item_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "build"
    root.write_text("a file where the cache's folder should be")  # mkdir fails: an OSError like a full disk
    env = _env(tmp_path, _reply(files={"triton/ABC/k.cubin": _u8(b"\x01")}, bytes=1))
    item = _item()
    assert Stage(env).build(item) is None and item.ctx.details["build"]["cache"] == "miss"
    assert any("could not be cached" in w for w in item.ctx.warnings)
    assert Stage(env).build_payload(item.problem_src, "candidate", item.cand_src) is not None


def test_a_cache_folder_without_its_manifest_is_replaced(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "build")
    (tmp_path / "build" / "k1").mkdir(parents=True)  # a copy cut short, a folder made by hand
    assert cache.load("k1") is None
    cache.store("k1", {"calls": []}, {"ext/x.so": b"built"})
    assert cache.load("k1").files == {"ext/x.so": b"built"}  # type: ignore[union-attr]
