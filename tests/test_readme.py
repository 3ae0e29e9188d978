"""Every ```python block of README.md runs.

The blocks are executed in the order they appear, in one namespace, as a reader pasting them into one
Python session would: a block may use what an earlier block defined (the NumPyro-model blocks build on each
other's imports). Each block is compiled with README.md as its file name and its own line numbers, so a
traceback points at the README's line. Shell blocks (``bayes-rbfn …``) are not run here: tests/cli runs the
quick-start commands. The blocks run as written, with the sizes the README shows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from numpyro import handlers

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def python_blocks() -> list[tuple[int, str]]:
    """(first line number, source) of each ```python block of the README, in order."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_readme_has_python_blocks():
    assert len(python_blocks()) >= 5


# The first fit is SoR on Snelson's test grid, which reaches past the data: its predictive variance
# collapses there, as SoR's does, and fit says so.
@pytest.mark.filterwarnings("ignore::bayes_rbfn.gp.sparse.VarianceCollapseWarning")
def test_readme_python_blocks_run_in_order(capsys):
    namespace: dict = {"__name__": "readme"}
    for line, source in python_blocks():
        code = compile("\n" * (line - 1) + source, str(README), "exec")
        try:
            exec(code, namespace)
        except Exception as err:
            raise AssertionError(f"the README.md block at line {line} raised {type(err).__name__}") from err
    # What the blocks promise, besides running: the fit's predictive, the analytic layer, the RBFN model.
    assert namespace["pred"].mean.shape == namespace["data"].X_test.shape[:1]
    assert namespace["post"].mean.shape == (namespace["Xs"].shape[0],)
    X, counts = namespace["X"], namespace["counts"]
    assert namespace["replicates"].shape == (500, counts.shape[0])
    # The two models the README defines but does not run: each simulates its observed site.
    for name, site, args in [("model", "y", (X, X[::10])), ("count_model", "k", (X, X[::10]))]:
        trace = handlers.trace(handlers.seed(namespace[name], 0)).get_trace(*args)
        assert trace[site]["value"].shape == counts.shape, name
