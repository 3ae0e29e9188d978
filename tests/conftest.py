"""Shared test configuration: float64 everywhere (DESIGN §5), tolerances stated once, keyed by dtype."""

import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
# XLA logs an ERROR line for every persistent-cache hit ("AOT result ... +prefer-no-gather"): tuning flags,
# not missing CPU features. Keep test output readable; real failures still raise in Python.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

from bayes_rbfn import runtime

runtime.enable_x64()
runtime.limit_blas_threads()
# JAX's persistent compilation cache is off in the tests unless BAYES_RBFN_TEST_CACHE names a folder: in the
# suite's long-lived processes, XLA's CPU executable serialisation (the cache write) segfaulted a CI run
# (jaxlib 0.9.2, `put_executable_and_time`). The suite runs in two processes instead (README: pytest -n 2).
os.environ.setdefault("BAYES_RBFN_NO_CACHE", "" if os.environ.get("BAYES_RBFN_TEST_CACHE") else "1")
if os.environ.get("BAYES_RBFN_TEST_CACHE"):
    runtime.enable_compilation_cache(Path(os.environ["BAYES_RBFN_TEST_CACHE"]))

#: Relative tolerances for identities that mathematics fixes exactly, keyed by dtype.
RTOL = {np.dtype("float64"): 1e-8, np.dtype("float32"): 2e-3}
#: Absolute floor, relative to the scale of the compared quantity.
ATOL = {np.dtype("float64"): 1e-10, np.dtype("float32"): 1e-4}


def assert_close(actual, expected, dtype=np.float64, scale=None, rtol=None, atol=None):
    """Assert ``actual ≈ expected`` with the dtype's tolerances; ``scale`` sets the absolute floor's unit."""
    dtype = np.dtype(dtype)
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    scale = np.max(np.abs(expected)) if scale is None else scale
    np.testing.assert_allclose(
        actual,
        expected,
        rtol=RTOL[dtype] if rtol is None else rtol,
        atol=(ATOL[dtype] if atol is None else atol) * max(float(scale), 1.0),
    )


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


#: Seconds each of the heaviest test files took in a cold run of the suite (24 Nov 2026, 2 cores, both
#: busy). Files start heaviest first, so that ``-n 2 --dist loadfile`` hands the long ones out early and
#: its two processes finish together (longest-processing-time-first scheduling); the order within a file
#: is kept. Files not listed follow in their collection order.
FILE_SECONDS = {
    "infer/test_resume.py": 300,
    "infer/test_mcmc.py": 285,
    "workflows/test_sbc_models.py": 238,
    "gp/test_adversarial.py": 170,
    "cli/test_cli.py": 151,
    "test_notebooks.py": 144,
    "workflows/test_sbc.py": 117,
    "gp/test_parallel.py": 108,
    "cli/test_cli_lock.py": 55,
    "workflows/test_compare.py": 71,
    "gp/test_sparse.py": 70,
    "models/test_sparse_models.py": 68,
    "models/test_generative.py": 62,
}


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent

    def seconds(item) -> int:
        try:
            return FILE_SECONDS.get(Path(item.fspath).relative_to(tests).as_posix(), 0)
        except ValueError:
            return 0

    items.sort(key=seconds, reverse=True)  # stable: the order within a file is kept
