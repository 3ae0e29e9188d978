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
# A per-checkout persistent compilation cache: NUTS programs repeat across tests (same shapes), and a
# second CI run on the same machine reuses them.
runtime.enable_compilation_cache(
    os.environ.get("BAYES_RBFN_TEST_CACHE", Path(__file__).parent / ".jax_cache")
)

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
