"""k-means inducing inputs with several inputs: the same centres whatever the columns' units, and centres
that spread over every input, not only over the one with the largest numbers."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_rbfn.gp.inducing import select_inducing


def _inputs(seed: int = 0, n: int = 400) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(0.0, 1.0, n), rng.uniform(0.0, 1.0, n), rng.normal(size=n)])


@pytest.mark.parametrize("units", [(1.0, 1e3, 1.0), (1e-4, 1.0, 250.0)], ids=["thousands", "mixed"])
def test_kmeans_centres_follow_the_columns_units(units):
    X = _inputs()
    scale = np.asarray(units)
    np.testing.assert_allclose(select_inducing(X * scale, 20, seed=1), select_inducing(X, 20, seed=1) * scale)


def test_kmeans_centres_spread_over_a_column_with_small_numbers():
    # Column 0 in [0, 1], column 1 in [0, 1000]: unscaled distances would place the centres by column 1
    # alone and leave them bunched at column 0's mean; scaled, they cover [0, 1] as they cover [0, 1000].
    X = _inputs()[:, :2] * np.array([1.0, 1e3])
    Z = select_inducing(X, 16, seed=0)
    assert np.ptp(Z[:, 0]) > 0.6
    assert np.ptp(Z[:, 1]) > 600.0


def test_one_input_centres_are_unchanged_by_a_scale():
    x = np.random.default_rng(2).uniform(0.0, 10.0, (300, 1))
    np.testing.assert_allclose(select_inducing(x * 1e3, 12), select_inducing(x, 12) * 1e3)
