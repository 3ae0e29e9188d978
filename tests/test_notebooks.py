"""Execute every notebook in notebooks/ (jupytext percent scripts) and fail if a cell raises.

Each ``notebooks/*.py`` is converted with jupytext (``jupytext.read`` → an nbformat notebook) and run top
to bottom by nbclient in a fresh ``python3`` kernel (ipykernel is a test dependency), with the working
directory and ``NOTEBOOK_OUTPUT_DIR`` set to a temporary folder, so nothing is written into the checkout.
The notebooks enable float64 themselves and download nothing. A notebook passes when no cell raises and
it saved at least one PNG figure.

They are marked ``slow`` (NUTS fits and JAX compilation take tens of seconds each); CI runs them anyway
(``python -m pytest -q`` runs every test).
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.py"))
#: Per-cell time limit (seconds); each notebook is designed to finish in well under 90 s on 2 cores.
CELL_TIMEOUT = 600


def test_notebooks_are_found():
    assert [p.name for p in NOTEBOOKS], f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    notebook = jupytext.read(path)
    # The kernel process inherits this process's environment.
    monkeypatch.setenv("NOTEBOOK_OUTPUT_DIR", str(tmp_path))
    # A smoke test: the notebooks' NUTS runs take at most 50 warm-up and 50 kept iterations per chain.
    monkeypatch.setenv("NOTEBOOK_SMOKE_TEST", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # Share the test process's persistent JAX compilation cache (conftest), if any, so a second run on the
    # same machine skips recompiling the NUTS programs; a clean checkout runs cold.
    cache = jax.config.jax_compilation_cache_dir
    if cache:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(cache))
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises nbclient.exceptions.CellExecutionError with the traceback on failure
    figures = sorted(p.name for p in tmp_path.glob("*.png"))
    assert figures, f"{path.name} saved no figure to NOTEBOOK_OUTPUT_DIR"
