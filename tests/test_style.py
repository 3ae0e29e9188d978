"""The code's style is checked, not hoped for: ruff's lint rules of ``pyproject.toml`` (pycodestyle,
pyflakes, isort, bugbear, pyupgrade, NumPy, ruff's own, and the docstring rules: one style, Google
sections) pass on the whole repository, and ``ruff format`` would change nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_passes(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


#: The longest a function of the package or the collection may be, in lines from its ``def`` to its last
#: line (decorators excluded, docstring included).
MAX_FUNCTION_LINES = 80

#: Functions still longer than :data:`MAX_FUNCTION_LINES`, each with its length now as a ceiling and the
#: reason it is not yet split. The list only shrinks: an entry that grows fails, one split to size must go.
LONG_FUNCTIONS: dict[str, tuple[int, str]] = {}


def _function_lengths() -> dict[str, int]:
    """``{"path::qualified.name": lines}`` of every function in ``bayes_rbfn/`` and ``models/``."""
    import ast

    lengths: dict[str, int] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    lengths[f"{path}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, path, name + ".")
            else:
                visit(child, path, prefix)

    for top in ("bayes_rbfn", "models"):
        for file in sorted((ROOT / top).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            visit(ast.parse(file.read_text(encoding="utf-8")), path, "")
    return lengths


def test_no_function_is_too_long():
    lengths = _function_lengths()
    assert len(lengths) > 100  # the walk found the package's functions
    too_long = {
        name: n
        for name, n in lengths.items()
        if n > MAX_FUNCTION_LINES and (name not in LONG_FUNCTIONS or n > LONG_FUNCTIONS[name][0])
    }
    assert not too_long, (
        f"functions over {MAX_FUNCTION_LINES} lines (or longer than their allowlisted length): {too_long}; "
        "split them into named steps"
    )
    stale = sorted(name for name in LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not stale, f"now within {MAX_FUNCTION_LINES} lines or gone: remove from LONG_FUNCTIONS: {stale}"
