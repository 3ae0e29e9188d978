"""The conditional replicates of the two models with a marginal of their own (``blr``, ``grouped``) against
dense NumPy conditionals, within Monte-Carlo error.

* ``blr``: t_rep | t ~ N(c + Φ m_N, Φ S_N Φᵀ + I/β), with m_N = β S_N Φᵀ (t − c) and S_N⁻¹ = αI + βΦᵀΦ
  (Bishop (3.53)–(3.54)) written densely here; Φ is the model's own design matrix (tested in
  test_blr_model.py).
* ``grouped``: each group's dense SoR conditional (tests/sparse_reference.py) under its own
  hyperparameters and inducing inputs, zeros at the padding.

20,000 draws; every mean and covariance entry within 5 standard errors (false alarm < 1e-4 per test).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sparse_reference as ref
import stochastic

from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.models import blr, grouped
from bayes_rbfn.models.families import get_family
from bayes_rbfn.models.spec import ModelConfig

pytestmark = pytest.mark.stochastic

JITTER = 1e-8  # the float64 jitter policy (bayes_rbfn.gp.linalg.JITTER)
S = 20_000


def _assert_moments(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> None:
    se_mean = np.sqrt(np.diag(cov) / S)
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se_mean)
    centred = draws - mean
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / S)
    assert np.all(np.abs(centred.T @ centred / S - cov) < 5 * se_cov)


def test_blr_replicates_equal_the_dense_weight_posterior():
    gen = np.random.default_rng(11)
    X = np.sort(gen.uniform(0.0, 3.0, 10))[:, None]
    Z = np.linspace(0.0, 3.0, 4)[:, None]
    t = np.sin(2.0 * X[:, 0]) + 0.1 * gen.standard_normal(10)
    weight_precision, noise_precision, c = 2.0, 25.0, 0.3
    data = {"X": jnp.asarray(X), "Z": jnp.asarray(Z), "y": jnp.asarray(t), "y_offset": jnp.asarray(c)}
    params = {
        "weight_precision": jnp.asarray(weight_precision),
        "noise_precision": jnp.asarray(noise_precision),
    }
    key = jax.random.PRNGKey(stochastic.seed(21))
    draws = np.asarray(blr.replicate(key, (S,), params, data, None))
    Phi = np.asarray(blr.design_matrix(jnp.asarray(X), jnp.asarray(Z)))
    S_N = np.linalg.inv(weight_precision * np.eye(4) + noise_precision * Phi.T @ Phi)
    m_N = noise_precision * S_N @ Phi.T @ (t - c)
    _assert_moments(draws, c + Phi @ m_N, Phi @ S_N @ Phi.T + np.eye(10) / noise_precision)


def test_grouped_replicates_equal_each_groups_dense_conditional():
    gen = np.random.default_rng(12)
    X = np.sort(gen.uniform(0.0, 3.0, 13))[:, None]
    group = np.array([0, 1] * 6 + [0])
    y = np.sin(2.0 * X[:, 0]) + 0.1 * gen.standard_normal(13)
    Z = np.linspace(0.2, 2.8, 4)[:, None]
    data, layout = grouped.prepare(X, y, Z, "mean", group, group, X)
    params = {
        "lengthscale": jnp.array([0.6, 0.9]),
        "variance": jnp.array([1.2, 0.8]),
        "noise": jnp.array([0.2, 0.35]),
    }
    config = ModelConfig(family=get_family("se"), priors={})
    key = jax.random.PRNGKey(stochastic.seed(22))
    padded = np.asarray(grouped.replicate(key, (S,), params, data, config))
    assert np.all(padded[:, ~np.asarray(data["mask"])] == 0.0)
    draws = layout.to_observations(padded, batch_ndim=1)
    for g in (0, 1):
        rows = group == g
        kernel = SquaredExponential(lengthscale=params["lengthscale"][g], variance=params["variance"][g])
        offset = y[rows].mean()
        noise = float(params["noise"][g])
        mean, cov = ref.replicate_moments("sor", kernel, X[rows], y[rows] - offset, Z, noise, JITTER)
        _assert_moments(draws[:, rows], offset + mean, cov)
