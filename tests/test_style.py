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
