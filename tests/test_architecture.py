"""The package's shape (docs/architecture.md#modules-one-job-each): no module over ~400 lines, no import cycle
-- imports inside functions count, ``if TYPE_CHECKING:`` blocks do not (tests/architecture_checks.py)."""

from __future__ import annotations

from pathlib import Path

import architecture_checks as A

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_autotune"
MAX_LINES = 420

def test_no_module_is_over_the_size_limit() -> None:
    sizes = A.module_sizes(PACKAGE)
    too_long = {name: n for name, n in sorted(sizes.items())
                if n > MAX_LINES}
    assert not too_long, (f"modules over {MAX_LINES} lines (split them along their jobs): "
                          + ", ".join(f"{name} ({n})" for name, n in too_long.items()))


def test_no_import_cycle() -> None:
    cycles = A.find_cycles(PACKAGE)
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(
        " -> ".join(A.example_cycle(PACKAGE, c)) + f"   (component: {', '.join(c)})" for c in cycles)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_checker_sees_imports_inside_functions_and_submodules(tmp_path: Path) -> None:
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from .sub import b\n    return b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "from .. import c\n",
        "pkg/c.py": "import pkg.a\n",
    })
    assert A.find_cycles(pkg) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert A.example_cycle(pkg, ["pkg.a", "pkg.c", "pkg.sub.b"]) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    assert A.module_sizes(pkg)["pkg.a"] == 3


def test_the_checker_skips_type_checking_blocks(tmp_path: Path) -> None:
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import X\n",
        "pkg/b.py": "from .a import TYPE_CHECKING\n",
    })
    assert A.find_cycles(pkg) == []
    assert A.import_graph(pkg)["pkg.b"] == {"pkg.a"}
