"""The build stage's parts without a compiler (docs/guide/compiled-candidates.md): which candidates get one, the
compiler's first error, the cache (digests, atomic entries, paths that stay inside it), torch's loaders as the build
sandbox records them and as later sandboxes replay or refuse them, Triton's cache moved between sandboxes, the
store's folder hidden when it appears after the session's view, and the LLM tuner's prompt."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from pytest_autotune.build.cache import BuildCache, CacheError, build_root, safe_relative
from pytest_autotune.build.compiler_log import excerpt, first_error, keep, strip_scratch
from pytest_autotune.build.detect import needs_build
from pytest_autotune.build.toolchain import build_key, compiler_text
from pytest_autotune.sandbox import ext_loaders
from pytest_autotune.sandbox.child_build import materialize, triton_failure

GCC_LOG = """RuntimeError: Error building extension 'relu_broken': [1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=x \
-isystem /venv/torch/include -fPIC -std=c++20 -c /tmp/autotune-build-ab12_x/ext/0123abcd/main.cpp -o main.o
FAILED: [code=1] main.o
c++ -MMD -MF main.o.d -fPIC -std=c++20 -c /tmp/autotune-build-ab12_x/ext/0123abcd/main.cpp -o main.o
/tmp/autotune-build-ab12_x/ext/0123abcd/main.cpp: In function 'void relu_f32(const float*, float*, long int)':
/tmp/autotune-build-ab12_x/ext/0123abcd/main.cpp:3:66: error: expected ';' before '}' token
    3 |     for (long i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i]
      |                                                                  ^
/tmp/autotune-build-ab12_x/ext/0123abcd/main.cpp:7:1: error: second error
ninja: build stopped: subcommand failed.
"""
NVCC_LOG = """[1/3] /usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o
cuda.cu(12): error: identifier "blockIdy" is undefined
1 error detected in the compilation of "cuda.cu".
"""
LINK_LOG = """[2/2] c++ main.o -shared -o x.so
FAILED: x.so
/usr/bin/ld: main.o: in function `run':
main.cpp:(.text+0x12): undefined reference to `missing_fn'
collect2: error: ld returned 1 exit status
"""


def test_which_candidates_get_a_build_stage() -> None:
    assert needs_build(b"from torch.utils.cpp_extension import load_inline")
    assert needs_build(b"import torch.utils.cpp_extension as ce\nce.load(...)")
    assert needs_build(b"import triton\nimport triton.language as tl")
    assert not needs_build(b"import torch\nx = torch.load('w.pt')\nclass ModelNew: ...")


def test_the_first_error_names_file_line_and_message() -> None:
    assert first_error(GCC_LOG) == "main.cpp:3:66: error: expected ';' before '}' token"
    assert first_error(NVCC_LOG) == 'cuda.cu:12: error: identifier "blockIdy" is undefined'
    assert first_error(LINK_LOG) == "main.cpp:(.text+0x12): undefined reference to `missing_fn'"
    assert first_error("nothing to see") is None
    assert "autotune-build-" not in strip_scratch(GCC_LOG)
    shown = excerpt(GCC_LOG, 2000)  # the next prompt: messages, not commands
    assert "error: expected ';'" in shown and "-isystem" not in shown and "FAILED" not in shown
    long = "x" * (3 << 20)
    kept = keep(long)
    assert len(kept) < len(long) and "characters cut" in kept


def test_cache_entries_are_verified_and_stay_inside_their_folder(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "build")
    assert cache.load("k1") is None
    entry = cache.store("k1", {"calls": [{"call": "c", "file": "a/x.so"}], "compiler": "c++"},
                        {"ext/a/x.so": b"\x7fELF...", "triton/K/__grp__k.json": b"{}"})
    again = cache.load("k1")
    assert again is not None and again.files == entry.files and again.manifest["compiler"] == "c++"
    assert not [p for p in (tmp_path / "build").iterdir() if p.name.startswith(".tmp-")]
    payload = again.payload()
    assert payload["files"]["ext/a/x.so"].dtype == torch.uint8 and payload["calls"][0]["call"] == "c"
    (tmp_path / "build" / "k1" / "files" / "ext" / "a" / "x.so").write_bytes(b"tampered")
    with pytest.raises(CacheError, match="do not match"):
        cache.load("k1")
    cache.store("k1", {"calls": []}, {"ext/a/x.so": b"rebuilt"})  # a broken entry is replaced
    assert cache.load("k1").files == {"ext/a/x.so": b"rebuilt"}  # type: ignore[union-attr]
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(ValueError):
            safe_relative(bad)
    assert build_root(tmp_path / ".autotune" / "results.db") == tmp_path / ".autotune" / "build"
    assert build_root(tmp_path / "mine.db") == tmp_path / "mine.db.build"


def test_the_key_moves_with_every_input_and_the_compiler_is_named() -> None:
    tc = (("cxx", "c++ 12"), ("torch", "2.13"))
    base = build_key("c" * 64, "p" * 64, {"n": 1}, "cpu", tc)
    assert base == build_key("c" * 64, "p" * 64, {"n": 1}, "cpu", tc)
    assert len({base, build_key("d" * 64, "p" * 64, {"n": 1}, "cpu", tc),
                build_key("c" * 64, "p" * 64, {"n": 2}, "cpu", tc),
                build_key("c" * 64, "p" * 64, {"n": 1}, "cuda", tc),
                build_key("c" * 64, "p" * 64, {"n": 1}, "cpu", (("cxx", "c++ 13"), ("torch", "2.13")))}) == 5
    assert compiler_text((("cxx", "c++ 12"), ("ninja", "1.13"), ("nvcc", "release 13.0")), cuda=True,
                         triton="3.5") == "c++ 12; ninja 1.13; nvcc: release 13.0; triton 3.5"


def _fake_ext() -> types.SimpleNamespace:
    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, extra_ldflags=None,
                    build_directory=None, verbose=False, is_python_module=True):
        if "syntax error" in str(cpp_sources):
            raise RuntimeError(f"Error building extension '{name}': main.cpp:1:1: error: syntax error")
        d = Path(build_directory)
        (d / f"{name}.so").write_bytes(b"built " + str(cpp_sources).encode())
        return types.SimpleNamespace(__file__=str(d / f"{name}.so")) if is_python_module else str(d / f"{name}.so")

    def load(name, sources, extra_cflags=None, build_directory=None, verbose=False, is_python_module=True,
             is_standalone=False):
        raise AssertionError("not called here")

    return types.SimpleNamespace(load_inline=load_inline, load=load, _jit_compile=lambda *a: "compiled")


def test_the_recorder_builds_each_call_apart_and_keeps_what_failed(tmp_path: Path) -> None:
    ext = _fake_ext()
    rec = ext_loaders.Recorder(tmp_path / "ext")
    rec.install(ext)
    m = ext.load_inline("relu", "int f();", extra_cflags=["-O3"], build_directory="/somewhere/else")
    assert ext.load_inline("relu", cpp_sources="int f();", extra_cflags=["-O3"], verbose=True) is m  # same call
    lib = ext.load_inline("relu", "int g();", is_python_module=False)
    with pytest.raises(RuntimeError):
        ext.load_inline("broken", "syntax error")
    calls = list(rec.calls.values())
    assert [(c["name"], c["kind"], c["flags"]) for c in calls] == [("relu", "module", ["-O3"]),
                                                                    ("relu", "library", [])]
    assert Path(m.__file__).parent.parent == tmp_path / "ext" and lib.startswith(str(tmp_path / "ext"))
    assert rec.failures[0]["name"] == "broken" and "error: syntax error" in rec.failures[0]["error"]


def test_a_later_sandbox_replays_what_was_built_and_refuses_the_rest(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ext_loaders, "load_built", lambda path, entry: ("loaded", path.name, entry["kind"]))
    ext = _fake_ext()
    rec = ext_loaders.Recorder(tmp_path / "build")
    rec.install(ext)
    ext.load_inline("tool", "int main(){}", is_python_module=False)
    built = list(rec.calls.values())
    later = _fake_ext()
    ext_loaders.Replayer(tmp_path / "build", built).install(later)
    got = later.load_inline("tool", "int main(){}", is_python_module=False, verbose=True)
    assert got == ("loaded", "tool.so", "library")
    assert later.load_inline(name="tool", cpp_sources="int main(){}", is_python_module=False) is got
    with pytest.raises(RuntimeError, match=r"load_inline\('tool'\) was not built in the build stage"):
        later.load_inline("tool", "int main(){ return 1; }", is_python_module=False)
    with pytest.raises(RuntimeError, match="compiling outside the build stage is refused"):
        later._jit_compile()
    plain = _fake_ext()
    ext_loaders.refuse_compiling(plain)
    with pytest.raises(RuntimeError, match="had no build stage"):
        plain.load_inline("x", "")


def test_call_keys_read_load_sources_by_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "k.cpp", tmp_path / "b" / "k.cpp"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text("int f();")
    key = ext_loaders.call_key("load", {"name": "k", "sources": [str(a)], "build_directory": "x", "verbose": True})
    assert key == ext_loaders.call_key("load", {"name": "k", "sources": [str(b)], "build_directory": "y"})
    b.write_text("int g();")
    assert key != ext_loaders.call_key("load", {"name": "k", "sources": [str(b)]})
    assert ext_loaders.call_key("load_inline", {"name": "k", "cpp_sources": "s"}) == \
        ext_loaders.call_key("load_inline", {"name": "k", "cpp_sources": ["s"]})


def test_a_module_is_patched_when_it_is_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "autotune_fake_ext_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ext.py").write_text("def load_inline(*a, **k):\n    return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in ("autotune_fake_ext_pkg", "autotune_fake_ext_pkg.ext"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    seen = []
    ext_loaders.on_import("autotune_fake_ext_pkg.ext", lambda m: seen.append(m.load_inline()))
    import autotune_fake_ext_pkg.ext  # noqa: F401

    assert seen == ["real"]
    del sys.modules["autotune_fake_ext_pkg.ext"]
    import autotune_fake_ext_pkg.ext as again  # noqa: F401  - a re-import is patched too

    assert seen == ["real", "real"]


def test_triton_groups_move_to_the_later_sandbox_and_its_errors_are_build_failures(tmp_path: Path) -> None:
    old = "/tmp/autotune-build-x/triton"
    grp = json.dumps({"child_paths": {"k.cubin": f"{old}/ABC/k.cubin", "k.json": f"{old}/ABC/k.json"}}).encode()
    materialize(tmp_path, {"triton/ABC/__grp__k.json": torch.frombuffer(bytearray(grp), dtype=torch.uint8),
                           "triton/ABC/k.cubin": torch.tensor([1, 2], dtype=torch.uint8),
                           "ext/0a/x.so": torch.tensor([7], dtype=torch.uint8)}, old)
    moved = json.loads((tmp_path / "triton" / "ABC" / "__grp__k.json").read_text())
    assert moved["child_paths"]["k.cubin"] == str(tmp_path / "triton" / "ABC" / "k.cubin")
    assert (tmp_path / "triton" / "ABC" / "k.cubin").read_bytes() == b"\x01\x02"
    assert not os.access(tmp_path / "ext" / "0a" / "x.so", os.W_OK) or os.geteuid() == 0
    with pytest.raises(ValueError):
        materialize(tmp_path, {"../escape": torch.tensor([1], dtype=torch.uint8)}, None)

    CompilationError = type("CompilationError", (Exception,), {"__module__": "triton.compiler.errors"})
    try:
        try:
            raise CompilationError("at 3:4: NameError")
        except Exception as e:
            raise RuntimeError("forward failed") from e
    except RuntimeError as outer:
        assert triton_failure(outer)
    assert not triton_failure(ValueError("plain"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount namespaces are Linux's")
def test_a_hidden_path_created_after_the_view_is_hidden_in_each_sandbox(tmp_path: Path) -> None:
    """The store's folder appears after the zygote's view was made (a session that does not record creates
    ``.autotune/build`` for its first compiled candidate): every sandbox hides it in its own mount namespace."""
    from pytest_autotune.sandbox import linux
    from pytest_autotune.sandbox.jail_mounts import HIDDEN_DIR, HIDDEN_FILE, rehide

    store = tmp_path / ".autotune"
    (store / "build").mkdir(parents=True)
    (store / "results.db").write_text("secret")
    stage = tmp_path / "stage"
    stage.mkdir()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            uid, gid = os.geteuid(), os.getegid()
            try:  # as a sandbox of a normal user is: root of a user namespace, the host's mounts locked
                linux.unshare(linux.CLONE_NEWUSER)
                linux.write_file("/proc/self/setgroups", "deny")
                linux.write_file("/proc/self/uid_map", f"0 {uid} 1")
                linux.write_file("/proc/self/gid_map", f"0 {gid} 1")
            except OSError:
                if uid != 0:
                    raise
            linux.unshare(linux.CLONE_NEWNS)
            linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
            linux.mount("tmpfs", str(stage), "tmpfs", 0, "size=64k")
            (stage / HIDDEN_DIR).mkdir()
            (stage / HIDDEN_FILE).write_text("")
            rehide((str(store), str(tmp_path / "absent")), stage=str(stage))
            rehide((str(store),), stage=str(stage))  # twice: already hidden, left as it is
            try:
                (store / "x").write_text("x")
                wrote = "wrote"
            except OSError as e:
                wrote = type(e).__name__
            os.write(w, json.dumps({"seen": sorted(os.listdir(store)), "wrote": wrote}).encode())
        except Exception as e:  # noqa: BLE001
            os.write(w, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        finally:
            os._exit(code)
    os.close(w)
    os.waitpid(pid, 0)
    out = json.loads(os.read(r, 65536) or b"{}")
    os.close(r)
    if "error" in out:
        pytest.skip(f"no private mount namespace here: {out['error']}")
    assert out == {"seen": [], "wrote": "OSError"}
    assert sorted(os.listdir(store)) == ["build", "results.db"]  # outside the namespace, nothing changed


def test_the_prompt_names_the_forms_and_shows_a_failed_build() -> None:
    from pytest_autotune.study.agent.history import IterationOutcome
    from pytest_autotune.study.agent.prompt import forms

    assert "load_inline" in forms("cpu") and "Triton" not in forms("cpu")
    assert "Triton" in forms("cuda") and "cuda_sources" in forms("cuda")
    o = IterationOutcome(2, "llm_s0_i002", "rejected", "build", "main.cpp:3:66: error: expected ';'",
                         build_log=GCC_LOG)
    assert "REJECTED by the build gate: main.cpp:3:66" in o.describe()
    shown = o.compiler_output()
    assert "main.cpp:3:66: error: expected ';' before '}' token" in shown and "-isystem" not in shown
    assert IterationOutcome(1, "a", "rejected", "correctness", "x", build_log="ignored").compiler_output() == ""


def test_cuda_only_candidates_are_collected_on_cuda_alone(tmp_path: Path) -> None:
    from pytest_autotune.problems.discovery import candidates_for, is_problem_file
    from pytest_autotune.problems.model import ProblemRef

    (tmp_path / "candidates" / "relu" / "cuda").mkdir(parents=True)
    for rel in ("relu.py", "candidates/relu/fast.py", "candidates/relu/cuda/relu_cuda.py"):
        (tmp_path / rel).write_text("")
    ref = ProblemRef("relu", tmp_path / "relu.py")
    assert [c.name for c in candidates_for(ref, [], "torch")] == ["fast"]
    assert [c.name for c in candidates_for(ref, [], "torch", "cuda")] == ["fast", "relu_cuda"]
    assert [c.name for c in candidates_for(ref, [], "mlx", "cuda")] == []
    assert not is_problem_file(tmp_path / "candidates" / "relu" / "cuda" / "relu_cuda.py", [tmp_path])
