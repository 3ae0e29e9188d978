"""The streamed, sharded O(NM²) pass of the SoR family (:mod:`bayes_rbfn.gp.parallel`).

* the streamed sums equal the dense sums (:func:`_whitened_stats` / :func:`_fast_stats` below, the
  reference written with K_uf formed and autodiff for the gradient) in value and, through the
  hand-written reverse pass, in gradient with respect to every input — for any chunk length, per-point
  or scalar d, with or without a mask of padded points;
* whitening before summing is accurate where summing first is not (a long-double reference);
* the sor model's log density, LOO conditionals and predictive equal dense references;
* sharded over two simulated CPU devices (a subprocess with ``--xla_force_host_platform_device_count=2``),
  the log density, its gradient, the LOO values and the predictive moments equal the single-device ones
  to 1e-10 — also for a large, ill-conditioned problem where merely reordering the sums changes the
  gradient by more than that, because the sums are added in the same fixed block order on any number of
  devices — and ``fit(shard=True)`` runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from conftest import assert_close, compile_events

from bayes_rbfn.gp import kernels, linalg, parallel
from bayes_rbfn.models import ModelConfig, sor
from bayes_rbfn.models.families import FAMILIES

#: Tolerance of the streamed sums against the dense reference (same operations, other summation order).
RTOL = {np.dtype("float64"): 1e-10, np.dtype("float32"): 2e-3}


def _problem(N=700, M=11, D=2, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.uniform(0.0, 4.0, (N, D)), dtype)
    y = jnp.asarray(np.sin(np.asarray(X).sum(axis=1)) + 0.2 * rng.standard_normal(N), dtype)
    Z = jnp.asarray(rng.uniform(0.0, 4.0, (M, D)), dtype)
    d = jnp.asarray(rng.uniform(0.05, 0.3, N), dtype)
    return X, y, Z, d


def _whitened_stats(Luu, Kuf, y, d):
    """Dense reference of the sums through A = L_uu⁻¹ K_uf D^-½ (a triangular solve against all N columns):
    (AAᵀ, A D^-½ y, yᵀD⁻¹y, Σ log d)."""
    d = jnp.broadcast_to(jnp.asarray(d, dtype=Kuf.dtype), (Kuf.shape[-1],))
    A = jsl.solve_triangular(Luu, Kuf, lower=True) / jnp.sqrt(d)
    return A @ A.T, A @ (y / jnp.sqrt(d)), jnp.sum(y * y / d), jnp.sum(jnp.log(d))


def _fast_stats(Luu, Kuf, y, d):
    """Dense reference of the sums formed before whitening: K_uf D⁻¹ K_fu and K_uf D⁻¹ y, whitened after."""
    d = jnp.broadcast_to(jnp.asarray(d, dtype=Kuf.dtype), (Kuf.shape[-1],))
    KufD = Kuf / d
    AAt = jsl.solve_triangular(Luu, jsl.solve_triangular(Luu, KufD @ Kuf.T, lower=True).T, lower=True).T
    Ay = jsl.solve_triangular(Luu, KufD @ y, lower=True)
    return 0.5 * (AAt + AAt.T), Ay, jnp.sum(y * y / d), jnp.sum(jnp.log(d))


def _lml(stats_fn, lengthscale, variance, Z, X, y, d):
    kernel = kernels.Matern52(lengthscale, variance)
    Luu = linalg.cholesky(kernel(Z, Z))
    stats = stats_fn(kernel, Z, X, y, d, Luu)
    return linalg.woodbury(Luu, stats, n=X.shape[0]).log_marginal_likelihood()


def _dense(fast):
    def stats(kernel, Z, X, y, d, Luu):
        return (_fast_stats if fast else _whitened_stats)(Luu, kernel(Z, X), y, d)

    return stats


def _streamed(fast, chunk):
    def stats(kernel, Z, X, y, d, Luu):
        return parallel.woodbury_stats(kernel, Z, X, y, d, Luu, fast=fast, chunk_size=chunk)

    return stats


@pytest.mark.parametrize("fast", [False, True], ids=["whitened", "fast"])
@pytest.mark.parametrize("per_point", [False, True], ids=["scalar-d", "per-point-d"])
@pytest.mark.parametrize(
    "chunk", [64, 700, 4096, 333], ids=["many-chunks", "one-chunk", "tail-only", "ragged"]
)
def test_streamed_sums_and_gradients_equal_dense(fast, per_point, chunk):
    """Value and gradient in lengthscale (ARD), variance, Z, X, y and d = autodiff of the dense sums."""
    X, y, Z, d = _problem()
    d = d if per_point else jnp.asarray(0.1)
    args = (jnp.asarray([0.9, 1.4]), jnp.asarray(1.3), Z, X, y, d)
    argnums = tuple(range(6))
    expected = jax.value_and_grad(lambda *a: _lml(_dense(fast), *a), argnums=argnums)(*args)
    actual = jax.jit(jax.value_and_grad(lambda *a: _lml(_streamed(fast, chunk), *a), argnums=argnums))(*args)
    # fast rounds with cond(K_uu) (~1e5 here) in both implementations, whitened with its square root.
    rtol = 1e-8 if fast else 1e-10
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected), strict=True):
        assert_close(a, e, rtol=rtol, atol=rtol)


def _dense_residual_lml(lengthscale, variance, Z, X, y, d):
    """Dense reference of :func:`parallel.woodbury_factor`'s log density: the quadratic form from the
    residuals of the weight mean, rᵀD⁻¹r + ‖L_B⁻ᵀ c‖², with K_uf formed and plain autodiff for gradients."""
    kernel = kernels.Matern52(lengthscale, variance)
    Luu = linalg.cholesky(kernel(Z, Z))
    factor = linalg.woodbury(Luu, _whitened_stats(Luu, kernel(Z, X), y, d), n=X.shape[0])
    r = y - kernel(X, Z) @ factor.weight_mean()
    return factor.with_residuals(jnp.sum(r * r / d)).log_marginal_likelihood()


@pytest.mark.parametrize("fast", [False, True], ids=["whitened", "fast"])
@pytest.mark.parametrize(
    "d", ["per-point", 0.1, 1e-12], ids=["per-point-d", "scalar-d", "scalar-d-sigma=1e-6"]
)
@pytest.mark.parametrize("chunk", [64, 333], ids=["many-chunks", "ragged"])
def test_factor_residual_form_and_gradients_equal_dense(fast, d, chunk):
    """The factor's log density (quadratic form from the residual sweep) and its gradient in lengthscale
    (ARD), variance, Z, X, y and d = autodiff of the dense residual form: the residual sweep's reverse pass,
    folded into the sums' one backward sweep, is the derivative of the value it computes. At σ = 1e-6 the
    data are what such a noise fits (y = K_fu w + σε): with residuals of 0.2 the log density would be
    −1e10 and its variance gradient, O(1) against a lengthscale gradient of 1e9, at its rounding floor."""
    X, y, Z, d_points = _problem()
    d = d_points if d == "per-point" else jnp.asarray(d)
    if d.ndim == 0 and float(d) < 1e-6:
        w = np.random.default_rng(3).standard_normal(Z.shape[0])
        y = 0.3 * kernels.Matern52(jnp.asarray([0.9, 1.4]), 1.3)(X, Z) @ w
        y = y + jnp.sqrt(d) * jnp.asarray(np.random.default_rng(4).standard_normal(X.shape[0]))

    def streamed(lengthscale, variance, Z, X, y, d):
        kernel = kernels.Matern52(lengthscale, variance)
        Luu = linalg.cholesky(kernel(Z, Z))
        factor = parallel.woodbury_factor(kernel, Z, X, y, d, Luu, fast=fast, chunk_size=chunk)
        return factor.log_marginal_likelihood()

    args = (jnp.asarray([0.9, 1.4]), jnp.asarray(1.3), Z, X, y, d)
    argnums = tuple(range(6))
    expected = jax.value_and_grad(_dense_residual_lml, argnums=argnums)(*args)
    actual = jax.jit(jax.value_and_grad(streamed, argnums=argnums))(*args)
    small_noise = d.ndim == 0 and float(d) < 1e-6
    # At σ = 1e-6 the two summation orders (streamed, dense) leave ~1e-8 between the gradients (measured).
    rtol = 1e-7 if small_noise else 1e-8 if fast else 1e-10
    leaves, leaves_e = (jax.tree_util.tree_leaves(v) for v in (actual, expected))
    for i, (a, e) in enumerate(zip(leaves, leaves_e, strict=True)):
        if small_noise and i == 2:
            # The variance gradient (3.2 here, against 4e6 for a lengthscale) is a difference of terms of
            # order 1/σ²: it holds ~ε/σ² = 2e-4 absolutely whatever computes it. Dense and streamed
            # differed by 6e-9 under XLA's default code and by 2e-4 at its optimisation level 0.
            assert_close(a, e, rtol=rtol, atol=10 * np.finfo(np.float64).eps / float(d), scale=1.0)
        else:
            assert_close(a, e, rtol=rtol, atol=rtol)


def test_only_hyperparameters_are_differentiated():
    """Gradients w.r.t. the hyperparameters alone (NUTS's case: the data are constants) are the same."""
    X, y, Z, _ = _problem()
    d = jnp.asarray(0.1)
    grad = jax.grad(lambda ls, v: _lml(_dense(False), ls, v, Z, X, y, d), argnums=(0, 1))
    grad_streamed = jax.jit(
        jax.grad(lambda ls, v: _lml(_streamed(False, 128), ls, v, Z, X, y, d), argnums=(0, 1))
    )
    for a, e in zip(
        grad_streamed(jnp.asarray([0.9, 1.4]), 1.3), grad(jnp.asarray([0.9, 1.4]), 1.3), strict=True
    ):
        assert_close(a, e, rtol=1e-10)


def test_float32_runs():
    """float32 data give float32 sums within the float32 tolerance of the float64 ones."""
    X, y, Z, _ = _problem(dtype=np.float32)
    k32 = kernels.SquaredExponential(np.float32(1.5), np.float32(1.0))
    Luu = linalg.cholesky(k32(Z, Z))
    stats = parallel.woodbury_stats(k32, Z, X, y, np.float32(0.1), Luu, chunk_size=128)
    assert all(s.dtype == jnp.float32 for s in stats)
    X64, y64, Z64 = (jnp.asarray(a, jnp.float64) for a in (X, y, Z))
    k64 = kernels.SquaredExponential(1.5, 1.0)
    L64 = linalg.cholesky(k64(Z64, Z64), jitter=linalg.default_jitter(jnp.float32))
    expected = _whitened_stats(L64, k64(Z64, X64), y64, 0.1)
    for a, e in zip(stats, expected, strict=True):
        assert_close(a, e, dtype=np.float32, rtol=5e-3, atol=5e-3)


# --------------------------------------------------------------------------------------------------
# Why whitened: accuracy against a long-double reference


def _chol_ld(A):
    n = A.shape[0]
    L = np.zeros_like(A)
    for j in range(n):
        L[j, j] = np.sqrt(A[j, j] - L[j, :j] @ L[j, :j])
        L[j + 1 :, j] = (A[j + 1 :, j] - L[j + 1 :, :j] @ L[j, :j]) / L[j, j]
    return L


def _solve_ld(L, B):
    X = np.zeros_like(B)
    for i in range(L.shape[0]):
        X[i] = (B[i] - L[i, :i] @ X[:i]) / L[i, i]
    return X


def test_whitened_is_accurate_where_fast_is_not():
    """Dense inducing inputs (cond(K_uu) ~ 1e9 after jitter), small noise: the streamed whitened log
    marginal is within 1e-6 of a long-double evaluation; summing before whitening is not."""
    N, M, noise = 4000, 48, 0.02
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(0.0, 10.0, N))
    y = np.sin(X) + noise * rng.standard_normal(N)
    Z = np.linspace(0.0, 10.0, M)
    kernel = kernels.SquaredExponential(2.0, 1.0)
    Kuu, Kuf = np.asarray(kernel(Z, Z)), np.asarray(kernel(Z, X))
    ld = np.longdouble
    Kuu_ld = Kuu.astype(ld) + ld(linalg.default_jitter(np.float64)) * np.mean(np.diag(Kuu)) * np.eye(
        M, dtype=ld
    )
    A = _solve_ld(_chol_ld(Kuu_ld), Kuf.astype(ld))
    s2 = ld(noise) ** 2
    LB = _chol_ld(np.eye(M, dtype=ld) + A @ A.T / s2)
    c = _solve_ld(LB, (A @ y.astype(ld))[:, None] / s2)[:, 0]
    reference = -0.5 * (
        y.astype(ld) @ y.astype(ld) / s2
        - c @ c
        + N * np.log(s2)
        + 2 * np.sum(np.log(np.diag(LB)))
        + N * np.log(2 * np.pi * ld(1))
    )
    Xj, yj, Zj = jnp.asarray(X)[:, None], jnp.asarray(y), jnp.asarray(Z)[:, None]
    errors = {}
    for fast in (False, True):
        factor = parallel.sor_factor(kernel, Xj, yj, Zj, noise, fast=fast, chunk_size=512)
        errors[fast] = abs(float(factor.log_marginal_likelihood()) - float(reference))
    assert errors[False] < 1e-6
    assert not errors[True] < 1e-3  # NaN or a visible error


# --------------------------------------------------------------------------------------------------
# The sor model on the streamed path


def _model_problem(N=500, M=20, seed=1):
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.uniform(0.0, 5.0, (N, 1)))
    y = jnp.asarray(np.sin(2 * np.asarray(X)[:, 0]) + 0.1 * rng.standard_normal(N) + 3.0)
    Z = jnp.linspace(0.0, 5.0, M)[:, None]
    data = {"X": X, "y": y, "Z": Z, "y_offset": jnp.asarray(3.0)}
    params = {"lengthscale": jnp.asarray(0.7), "variance": jnp.asarray(1.2), "noise": jnp.asarray(0.15)}
    return data, params


def _dense_factor(kernel, X, y, Z, d, mask=None):
    """The Woodbury factor of Q_ff + diag(d) from the dense sums (K_uf formed), over the real points only."""
    if mask is not None:
        keep = np.asarray(mask)
        X, y, d = X[keep], y[keep], jnp.broadcast_to(d, mask.shape)[keep]
    Luu = linalg.cholesky(kernel(Z, Z))
    return linalg.woodbury(Luu, _whitened_stats(Luu, kernel(Z, X), y, d), n=X.shape[0])


def _dense_loo(factor, Kuf, y, d):
    """Dense reference of the LOO conditionals: C⁻¹ = D⁻¹ − VᵀV, V = L_B⁻¹ L_uu⁻¹ K_uf D⁻¹ (Woodbury)."""
    d = jnp.broadcast_to(d, y.shape)
    V = factor.weight_cov_factor() @ (Kuf / d)
    return linalg.loo_from_precision(1.0 / d - jnp.sum(V * V, axis=0), y / d - V.T @ factor.c)


def _dense_moments(factor, kernel, Z, X_test):
    """Dense reference of SoR's predictive moments: K_*u m and ‖L_B⁻¹ L_uu⁻¹ K_u*‖² by triangular solves."""
    Kus = kernel(Z, X_test)
    W = linalg.solve_lower(factor.LB, linalg.solve_lower(factor.Luu, Kus))
    return Kus.T @ factor.weight_mean(), jnp.sum(W * W, axis=0)


@pytest.mark.parametrize("chunk", [None, 64], ids=["default-chunk", "small-chunks"])
def test_sor_model_matches_dense_formulas(chunk):
    """log density, LOO conditionals and predictive moments of the sor model = the dense formulas."""
    data, params = _model_problem()
    config = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk)
    kernel = kernels.SquaredExponential(params["lengthscale"], params["variance"])
    y = data["y"] - data["y_offset"]
    noise2 = params["noise"] ** 2
    factor = _dense_factor(kernel, data["X"], y, data["Z"], noise2)
    assert_close(sor.log_density(params, data, config), factor.log_marginal_likelihood(), rtol=1e-12)
    assert_close(
        sor.log_likelihood(params, data, config), _dense_loo(factor, kernel(data["Z"], data["X"]), y, noise2)
    )
    X_test = jnp.linspace(-1.0, 6.0, 300)[:, None]
    mean, var = sor.predict(params, data, config, X_test)
    expected_mean, expected_var = _dense_moments(factor, kernel, data["Z"], X_test)
    assert_close(mean, expected_mean + data["y_offset"])
    assert_close(var, expected_var, scale=float(params["variance"]))


def test_eager_passes_compile_once():
    """Called eagerly again with new values of the same shapes, the streamed passes (the factor, the LOO
    conditionals with and without the leave-block-out pass, the predictive moments, the Nyström residual)
    trace, lower and compile nothing: each pass is one program kept by its settings (issue 20: until
    27 Nov 2026 every eager call traced and lowered its scans anew, ~0.4 s a call). The second call's
    values are those of the dense formulas."""
    data, _ = _model_problem(N=300, M=12)
    X, Z = data["X"], data["Z"]
    X_test = jnp.linspace(-1.0, 6.0, 150)[:, None]

    def passes(lengthscale, y, noise):
        kernel = kernels.SquaredExponential(lengthscale, 1.2)
        factor = parallel.sor_factor(kernel, X, y, Z, noise, chunk_size=64)
        # Z's own points interpolated at small noise: 1 − h_i falls below the floor there, so the
        # leave-block-out pass runs too.
        tight = parallel.sor_factor(kernel, Z, Z[:, 0], Z, 1e-7, chunk_size=8)
        return (
            factor,
            parallel.sor_loo(factor, kernel, Z, X, y, noise**2, chunk_size=64),
            parallel.sor_loo(tight, kernel, Z, Z, Z[:, 0], 1e-14, chunk_size=8),
            parallel.sor_moments(factor, kernel, Z, X_test, chunk_size=64),
            parallel.nystrom_residual(kernel, Z, factor.Luu, X_test, chunk_size=64),
        )

    y = data["y"] - data["y_offset"]
    y2 = 2.0 * y
    jax.block_until_ready(passes(jnp.asarray(0.7), y, jnp.asarray(0.15)))
    with compile_events() as events:
        factor, loo, loo_tight, (mean, var), residual = jax.block_until_ready(
            passes(jnp.asarray(0.9), y2, jnp.asarray(0.2))
        )
    assert events == []
    kernel = kernels.SquaredExponential(jnp.asarray(0.9), 1.2)
    dense = _dense_factor(kernel, X, y2, Z, 0.04)
    assert_close(factor.log_marginal_likelihood(), dense.log_marginal_likelihood(), rtol=1e-12)
    assert_close(loo, _dense_loo(dense, kernel(Z, X), y2, 0.04))
    # The leave-block-out pass did run in the measured call (its values against 60 digits:
    # test_small_noise.py): the Woodbury values alone are other numbers at these interpolated points.
    tight = parallel.sor_factor(kernel, Z, Z[:, 0], Z, 1e-7, chunk_size=8)
    woodbury_only = parallel.sor_loo(tight, kernel, Z, Z, Z[:, 0], 1e-14, chunk_size=8, exact=False)
    assert np.all(np.isfinite(np.asarray(loo_tight)))
    assert not np.allclose(np.asarray(loo_tight), np.asarray(woodbury_only), rtol=1e-3)
    expected_mean, expected_var = _dense_moments(dense, kernel, Z, X_test)
    assert_close(mean, expected_mean)
    assert_close(var, expected_var, scale=1.2)
    Kus = kernel(Z, X_test)
    A = linalg.solve_lower(dense.Luu, Kus)
    assert_close(residual, jnp.maximum(1.2 - jnp.sum(A * A, axis=0), 0.0), scale=1.2)


@pytest.mark.parametrize("per_point", [False, True], ids=["scalar-d", "per-point-d"])
def test_masked_pass_equals_dense_over_real_points(per_point):
    """With a mask, padded points add nothing: the factor's log density and gradient (hyperparameters, y)
    equal the dense ones over the real points alone, and the LOO conditionals of the real points are theirs
    (padded points get 0)."""
    X, y, Z, d = _problem(N=300)
    d = d if per_point else jnp.asarray(0.1)
    mask = jnp.asarray(np.random.default_rng(5).uniform(size=300) < 0.7)
    keep = np.asarray(mask)

    def streamed(ls, v, y):
        kernel = kernels.Matern52(ls, v)
        Luu = linalg.cholesky(kernel(Z, Z))
        factor = parallel.woodbury_factor(kernel, Z, X, y * mask, d, Luu, mask=mask, chunk_size=64)
        return factor.log_marginal_likelihood()

    def dense(ls, v, y):
        kernel = kernels.Matern52(ls, v)
        return _dense_factor(kernel, X, y, Z, d, mask).log_marginal_likelihood()

    args = (jnp.asarray([0.9, 1.4]), jnp.asarray(1.3), y)
    actual = jax.jit(jax.value_and_grad(streamed, argnums=(0, 1, 2)))(*args)
    expected = jax.value_and_grad(dense, argnums=(0, 1, 2))(*args)
    value, (g_ls, g_v, g_y) = actual
    assert_close(value, expected[0], rtol=1e-10)
    assert_close(g_ls, expected[1][0], rtol=1e-10, atol=1e-10)
    assert_close(g_v, expected[1][1], rtol=1e-10, atol=1e-10)
    assert_close(g_y[keep], expected[1][2][keep], rtol=1e-10, atol=1e-10)
    assert np.all(np.asarray(g_y)[~keep] == 0.0)

    kernel = kernels.Matern52(jnp.asarray([0.9, 1.4]), 1.3)
    Luu = linalg.cholesky(kernel(Z, Z))
    factor = parallel.woodbury_factor(kernel, Z, X, y * mask, d, Luu, mask=mask, chunk_size=64)
    loo = parallel.sor_loo(factor, kernel, Z, X, y * mask, d, mask=mask, chunk_size=64)
    d_real = jnp.broadcast_to(d, mask.shape)[keep]
    dense_factor = _dense_factor(kernel, X, y, Z, d, mask)
    expected_loo = _dense_loo(dense_factor, kernel(Z, X[keep]), y[keep], d_real)
    assert_close(np.asarray(loo)[keep], expected_loo)
    assert np.all(np.asarray(loo)[~keep] == 0.0)


@pytest.mark.parametrize(
    ("N", "C", "devices", "blocks"),
    [
        (1000, 4096, 1, 1),  # fewer points than a chunk: one block, not 16 of 63 points
        (8192, 4096, 1, 2),
        (16383, 4096, 1, 2),
        (16384, 4096, 1, 4),
        (65535, 4096, 1, 8),
        (65536, 4096, 1, 16),
        (10**6, 2048, 1, 16),  # never more than SUM_BLOCKS
        (1000, 4096, 2, 2),  # rounded up to the device count
        (10**6, 2048, 3, 18),
    ],
    ids=["N<C", "2C", "4C-1", "4C", "16C-1", "16C", "million", "2-devices-small", "3-devices"],
)
def test_blocks_are_whole_chunks(N, C, devices, blocks):
    """The block count: whole chunks per block, a power of two up to SUM_BLOCKS, a multiple of the devices."""
    mesh = types.SimpleNamespace(shape={parallel.DATA_AXIS: devices}) if devices > 1 else None  # its size
    assert parallel._block_count(mesh, N, C) == (devices, blocks)
    C_eff, per_block, N_pad = parallel._layout(N, C, blocks)
    assert C_eff <= C and N <= N_pad < N + blocks * per_block * 8


def test_chunk_size_for():
    assert parallel.chunk_size_for(64) == 2048
    assert parallel.chunk_size_for(128) == 1024
    assert parallel.chunk_size_for(1) == 16384
    assert parallel.chunk_size_for(100_000) == 256


# --------------------------------------------------------------------------------------------------
# Sharded over two simulated devices (a subprocess: the device count is fixed when JAX starts)

_SHARDED_SCRIPT = textwrap.dedent(
    """
    import json, numpy as np, jax, jax.numpy as jnp
    from functools import partial
    jax.config.update("jax_enable_x64", True)
    from bayes_rbfn.gp import parallel
    from bayes_rbfn import fit
    from bayes_rbfn.models.families import FAMILIES
    from bayes_rbfn.models import ModelConfig, sor

    assert jax.device_count() == 2, jax.devices()
    mesh = parallel.data_mesh()
    rng = np.random.default_rng(0)
    out = {}
    problems = []
    for N in (4001,):   # odd: the leftover point is handled outside shard_map (even: N = 2,000 below)
        X = jnp.asarray(rng.uniform(0, 5, (N, 2)))
        y = jnp.asarray(np.sin(np.asarray(X).sum(1)) + 0.1 * rng.standard_normal(N))
        data = {"X": X, "y": y, "Z": jnp.asarray(rng.uniform(0, 5, (30, 2))), "y_offset": jnp.asarray(0.1)}
        params = {"lengthscale": jnp.asarray([0.8, 1.1]), "variance": jnp.asarray(1.3),
                  "noise": jnp.asarray(0.2)}
        problems.append((str(N), data, params, jnp.asarray(rng.uniform(-1, 6, (1001, 2))), 512))
    # Large and ill-conditioned (64 dense inducing inputs, cond(K_uu) ~ 1e10 at the jitter floor): here a
    # mere change of summation order moves the gradient by ~8e-8 ("reordered" below), so agreement to
    # 1e-10 holds only because the sums are added in the same order on one device and on two (and the
    # LOO values, whose precision wc − ‖v‖² cancels, see each point in the same chunk shape).
    N = 200_001
    X = rng.uniform(0, 10, (N, 1))
    y = np.sin(1.3 * X[:, 0]) + 0.2 * X[:, 0] + 0.3 * rng.standard_normal(N)
    data = {"X": jnp.asarray(X), "y": jnp.asarray(y), "Z": jnp.linspace(0.0, 10.0, 64)[:, None],
            "y_offset": jnp.asarray(float(y.mean()))}
    params = {"lengthscale": jnp.asarray(1.0), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}
    problems.append(("200001", data, params, jnp.asarray(rng.uniform(-1, 11, (3000, 1))), None))
    for key, data, params, X_test, chunk in problems:
        single = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk)
        sharded = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk, mesh=mesh)
        placed = parallel.shard_data(data, mesh)
        # One program per configuration (four would compile four times as long): value and gradient,
        # pointwise LOO, predictive moments.
        @partial(jax.jit, static_argnums=2)
        def evaluate(p, d, c):
            value, gradient = jax.value_and_grad(sor.log_density)(p, d, c)
            return {"log_density": value, "gradient": gradient, "loo": sor.log_likelihood(p, d, c),
                    "predict": sor.predict(p, d, c, X_test)}
        a, b = evaluate(params, data, single), evaluate(params, placed, sharded)
        rel = {
            name: max(
                float(np.max(np.abs(np.asarray(u) - np.asarray(v)))
                      / max(np.max(np.abs(np.asarray(u))), 1e-300))
                for u, v in zip(jax.tree_util.tree_leaves(a[name]), jax.tree_util.tree_leaves(b[name]))
            )
            for name in a
        }
        out[key] = rel
    # LOO at interpolated points (alone at their inducing inputs, σ = 1e-8, one in each device's half):
    # sor_loo's leave-block-out pass, whose per-block R factors are all-gathered across devices, = one
    # device's; with the floor at -inf (no such pass) their values differ (the pass was taken).
    from bayes_rbfn.gp import kernels
    Xi = rng.uniform(0, 5, (2000, 1))
    Xi[[500, 1500, 1999]] = [[7.0], [9.0], [11.0]]
    Zi = jnp.asarray(np.concatenate([np.linspace(0, 5, 20)[:, None], Xi[[500, 1500, 1999]]]))
    Xi = jnp.asarray(Xi)
    yi = jnp.sin(2 * Xi[:, 0])
    kern = kernels.SquaredExponential(0.7, 1.3)
    out["interpolated"], out["interpolated_changed"] = {}, []
    for chunk in (64, 512):  # 16 and 2 blocks: each device gets whole blocks (parallel._block_count)
        def loo_i(m):  # compiled as in a fit (8 s in all, against 62 s op by op), so exact=True
            @jax.jit
            def loo(Xi, yi, Zi):
                f = parallel.sor_factor(kern, Xi, yi, Zi, 1e-8, chunk_size=chunk, mesh=m)
                return parallel.sor_loo(f, kern, Zi, Xi, yi, 1e-16, chunk_size=chunk, mesh=m, exact=True)
            return np.asarray(loo(Xi, yi, Zi))
        a, b = loo_i(None), loo_i(mesh)
        out["interpolated"][str(chunk)] = float(np.max(np.abs(a - b) / np.abs(a)))
        if chunk == 64:  # (one chunk length suffices to show that the pass is taken)
            floor = parallel.LOO_LEVERAGE_FLOOR[jnp.dtype("float64")]
            parallel.LOO_LEVERAGE_FLOOR[jnp.dtype("float64")] = -np.inf
            out["interpolated_changed"].append(np.flatnonzero(loo_i(None) != a).tolist())
            parallel.LOO_LEVERAGE_FLOOR[jnp.dtype("float64")] = floor
    # The predictive's draws spread round-robin over both devices = all on one device.
    from bayes_rbfn.infer import predictive
    _, data4, params4, X_test4, chunk4 = problems[0]
    config = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk4)
    draws = {k: jnp.asarray(np.asarray(v) * np.exp(rng.normal(0, 0.1, (2, 7) + np.shape(v))))
             for k, v in params4.items()}
    spread = predictive.draw_devices(config)
    out["draw_devices"] = len(spread)
    out["draw_devices_with_mesh"] = predictive.draw_devices(
        ModelConfig(family=FAMILIES["se"], priors={}, mesh=mesh))
    predict_fn = lambda p, Xb, data: sor.predict(p, data, config, Xb)
    one = predictive.per_draw_moments(predict_fn, draws, X_test4, batch_size=None, draw_batch=3, data=data4)
    used, real_compiled = set(), predictive.compiled_predict
    def spying_compiled(*args, **kwargs):  # the devices the batches' outputs were computed on
        fn = real_compiled(*args, **kwargs)
        def run(*inputs):
            result = fn(*inputs)
            used.update(str(d) for d in result[0].devices())
            return result
        return run
    predictive.compiled_predict = spying_compiled
    two = predictive.per_draw_moments(predict_fn, draws, X_test4, batch_size=None, draw_batch=3, data=data4,
                                      devices=spread)
    predictive.compiled_predict = real_compiled
    out["draw_devices_used"] = len(used)
    out["draws_over_devices"] = max(
        float(np.max(np.abs(u - v)) / np.max(np.abs(u))) for u, v in zip(one, two))
    # Control (reported, not asserted): one device, another chunk length = another summation order.
    grad = jax.jit(jax.grad(lambda p, d, c: sor.log_density(p, d, c)), static_argnums=2)
    a = grad(params, data, single)
    b = grad(params, data, ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=256))
    out["reordered"] = max(abs(float(a[k]) - float(b[k])) / abs(float(a[k])) for k in a)
    Xf = rng.uniform(0, 5, (600, 1))
    yf = np.sin(2 * Xf[:, 0]) + 0.1 * rng.standard_normal(600)
    idata = fit("sor", Xf, yf, num_inducing=16, chains=1, warmup=30, draws=20, progress=False,
                shard=True, check_diagnostics=False)
    out["fit_draws"] = int(idata.posterior.sizes["draw"])
    out["fit_finite"] = bool(np.all(np.isfinite(idata.predictions["f_mean"].values)))
    print("RESULT" + json.dumps(out))
    """
)


def test_sharded_equals_single_device():
    """2 simulated CPU devices: sharded log density, gradient, LOO, predictive = one device's to 1e-10,
    also the LOO values of interpolated points (sor_loo's leave-block-out pass), and so are the
    predictive's draws spread over both devices;
    also at N = 200,001 with cond(K_uu) ~ 1e10, where another summation order alone differs by more
    (the sums are added in a fixed block order whatever the device count: parallel.SUM_BLOCKS)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    env["JAX_PLATFORMS"] = "cpu"
    # A guard against a hang, not a time limit: the script took 161 s in the full suite on a 2-core AMD EPYC
    # before its evaluations were compiled together (98 s alone after).
    proc = subprocess.run(
        [sys.executable, "-c", _SHARDED_SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))
    result = json.loads(line[len("RESULT") :])
    for N in ("4001", "200001", "interpolated"):
        for name, rel in result[N].items():
            assert rel < 1e-10, (N, name, rel, "reordered sums alone differ by", result["reordered"])
    assert result["interpolated_changed"] == [[500, 1500, 1999]]
    assert result["fit_draws"] == 20 and result["fit_finite"]
    # Draw batches spread over both devices (7 batches of 3 draws, the last padded) = one device's.
    assert result["draw_devices"] == 2 and result["draw_devices_with_mesh"] is None
    assert result["draw_devices_used"] == 2
    assert result["draws_over_devices"] < 1e-10, result["draws_over_devices"]
