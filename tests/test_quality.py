"""The code stays ruff-clean, ruff-formatted and mypy --strict-clean, checked by the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("bridge", "tests", "ext_adapters_example", "bench", "docs/config_table.py")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied() -> None:
    result = run("ruff", "format", "--check", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = run("mypy", "--strict", "bridge")
    assert result.returncode == 0, result.stdout + result.stderr


def assigned_twice(source: str) -> list[str]:
    """Names a module's top level binds more than once (an assignment, a def or a class): the
    second silently replaces the first. ``@overload`` stubs are not bindings that count."""
    import ast

    seen: dict[str, int] = {}
    twice: list[str] = []
    for node in ast.parse(source).body:
        names: list[str] = []
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for t in node.targets:
                if isinstance(t, ast.Tuple):
                    names += [e.id for e in t.elts if isinstance(e, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            names = [node.target.id] if isinstance(node.target, ast.Name) else []
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            decorators = {getattr(d, "id", getattr(d, "attr", None)) for d in node.decorator_list}
            names = [] if "overload" in decorators else [node.name]
        for name in names:
            if name in seen:
                twice.append(f"{name} (lines {seen[name]} and {node.lineno})")
            seen.setdefault(name, node.lineno)
    return twice


def test_no_module_level_name_is_bound_twice() -> None:
    found = {
        str(path.relative_to(ROOT)): twice
        for path in sorted((ROOT / "bridge").rglob("*.py"))
        if (twice := assigned_twice(path.read_text()))
    }
    assert not found, found
    assert assigned_twice("A = 1\nB = 2\nA = frozenset()\n") == ["A (lines 1 and 3)"]
    assert assigned_twice("X, Y = 1, 2\ndef Y(): pass\n") == ["Y (lines 1 and 2)"]
