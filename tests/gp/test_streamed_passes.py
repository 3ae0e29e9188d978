"""The streamed O(NM²) passes of the SoR family against dense references: the Woodbury sums and their
reverse pass (:mod:`bayes_rbfn.gp.woodbury_sums`), the LOO conditionals (:mod:`bayes_rbfn.gp.block_loo`) and
the predictive moments and Nyström residual (:mod:`bayes_rbfn.gp.moments`).

* the streamed sums equal the dense sums (:func:`_whitened_stats` / :func:`_fast_stats` below, the
  reference written with K_uf formed and autodiff for the gradient) in value and, through the
  hand-written reverse pass, in gradient with respect to every input — for any chunk length, per-point
  or scalar d, with or without a mask of padded points, and for an additive network (block-diagonal K_uu);
* whitening before summing is accurate where summing first is not (a long-double reference);
* the sor model's log density, LOO conditionals and predictive equal dense references;
* called eagerly again with the same shapes, the passes trace and compile nothing.

Sharded over devices: tests/gp/test_streaming.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from conftest import assert_close, compile_events

from bayes_rbfn.gp import block_loo, kernels, linalg, moments, woodbury_sums
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
        return (_fast_stats if fast else _whitened_stats)(Luu, kernel.inducing_cross(Z, X), y, d)

    return stats


def _streamed(fast, chunk):
    def stats(kernel, Z, X, y, d, Luu):
        return woodbury_sums.woodbury_stats(kernel, Z, X, y, d, Luu, fast=fast, chunk_size=chunk)

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


@pytest.mark.parametrize("chunk", [None, 64], ids=["whole", "many-chunks"])
def test_formed_cross_sums_and_gradients_equal_dense(chunk):
    """K_uf formed by the caller and streamed as the pass's data (``Kuf=``, as the group effects do): value
    and gradient in lengthscale, variance, Z, X, y and d = autodiff of the dense sums, the cotangent of K_uf
    going back through the caller's evaluation of the kernel."""
    X, y, Z, d = _problem()

    def formed(kernel, Z, X, y, d, Luu):
        Kuf = kernel.inducing_cross(Z, X)
        return woodbury_sums.woodbury_stats(None, Z, None, y, d, Luu, Kuf=Kuf, chunk_size=chunk)

    args = (jnp.asarray([0.9, 1.4]), jnp.asarray(1.3), Z, X, y, d)
    argnums = tuple(range(6))
    expected = jax.value_and_grad(lambda *a: _lml(_dense(False), *a), argnums=argnums)(*args)
    actual = jax.jit(jax.value_and_grad(lambda *a: _lml(formed, *a), argnums=argnums))(*args)
    rtol = RTOL[np.dtype(X.dtype)]
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected), strict=True):
        assert_close(a, e, rtol=rtol, atol=rtol)


def _additive_lml(stats_fn, trend, period, X, y, d):
    """The SoR log density of an additive network (two components on one column each and a linear one,
    K_uu block-diagonal with blocks of 5, 4 and 2) through ``stats_fn``."""
    kernel, Z = kernels.additive(
        {
            "smooth": (kernels.SquaredExponential(trend[0], trend[1]).on_dims(0), jnp.linspace(0.0, 4.0, 5)),
            "cycle": (kernels.Periodic(period[0], period[1], 2.0).on_dims(1), jnp.linspace(0.0, 1.5, 4)),
            "linear": (kernels.Linear(0.7), jnp.eye(2)),
        },
        n_inputs=2,
    )
    Luu = linalg.cholesky(kernel.inducing_gram(Z))
    stats = stats_fn(kernel, Z, X, y, d, Luu)
    return linalg.woodbury(Luu, stats, n=X.shape[0]).log_marginal_likelihood()


@pytest.mark.parametrize("chunk", [64, 333], ids=["many-chunks", "ragged"])
def test_additive_network_sums_equal_dense(chunk):
    """An additive network (block-diagonal K_uu, components on their own columns) through the streamed
    pass: value and gradient in every component's hyperparameters, X, y and d = autodiff of the dense sums,
    whitened by a triangular solve with the whole L_uu."""
    X, y, _, d = _problem()
    args = (jnp.asarray([0.8, 1.3]), jnp.asarray([0.6, 0.5]), X, y, d)
    argnums = tuple(range(5))
    expected = jax.value_and_grad(lambda *a: _additive_lml(_dense(False), *a), argnums=argnums)(*args)
    streamed = _streamed(False, chunk)
    actual = jax.jit(jax.value_and_grad(lambda *a: _additive_lml(streamed, *a), argnums=argnums))(*args)
    rtol = RTOL[np.dtype(X.dtype)]
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected), strict=True):
        assert_close(a, e, rtol=rtol, atol=rtol)


def _dense_residual_lml(lengthscale, variance, Z, X, y, d):
    """Dense reference of :func:`woodbury_sums.woodbury_factor`'s log density: the quadratic form from the
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
        factor = woodbury_sums.woodbury_factor(kernel, Z, X, y, d, Luu, fast=fast, chunk_size=chunk)
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
    stats = woodbury_sums.woodbury_stats(k32, Z, X, y, np.float32(0.1), Luu, chunk_size=128)
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
        factor = woodbury_sums.sor_factor(kernel, Xj, yj, Zj, noise, fast=fast, chunk_size=512)
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
    trace, lower and compile nothing: each pass is one program kept by its settings (until
    27 Nov 2026 every eager call traced and lowered its scans anew, ~0.4 s a call). The second call's
    values are those of the dense formulas."""
    data, _ = _model_problem(N=300, M=12)
    X, Z = data["X"], data["Z"]
    X_test = jnp.linspace(-1.0, 6.0, 150)[:, None]

    def passes(lengthscale, y, noise):
        kernel = kernels.SquaredExponential(lengthscale, 1.2)
        factor = woodbury_sums.sor_factor(kernel, X, y, Z, noise, chunk_size=64)
        # Z's own points interpolated at small noise: 1 − h_i falls below the floor there, so the
        # leave-block-out pass runs too.
        tight = woodbury_sums.sor_factor(kernel, Z, Z[:, 0], Z, 1e-7, chunk_size=8)
        return (
            factor,
            block_loo.sor_loo(factor, kernel, Z, X, y, noise**2, chunk_size=64),
            block_loo.sor_loo(tight, kernel, Z, Z, Z[:, 0], 1e-14, chunk_size=8),
            moments.sor_moments(factor, kernel, Z, X_test, chunk_size=64),
            moments.nystrom_residual(kernel, Z, factor.Luu, X_test, chunk_size=64),
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
    tight = woodbury_sums.sor_factor(kernel, Z, Z[:, 0], Z, 1e-7, chunk_size=8)
    woodbury_only = block_loo.sor_loo(tight, kernel, Z, Z, Z[:, 0], 1e-14, chunk_size=8, exact=False)
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
        factor = woodbury_sums.woodbury_factor(kernel, Z, X, y * mask, d, Luu, mask=mask, chunk_size=64)
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
    factor = woodbury_sums.woodbury_factor(kernel, Z, X, y * mask, d, Luu, mask=mask, chunk_size=64)
    loo = block_loo.sor_loo(factor, kernel, Z, X, y * mask, d, mask=mask, chunk_size=64)
    d_real = jnp.broadcast_to(d, mask.shape)[keep]
    dense_factor = _dense_factor(kernel, X, y, Z, d, mask)
    expected_loo = _dense_loo(dense_factor, kernel(Z, X[keep]), y[keep], d_real)
    assert_close(np.asarray(loo)[keep], expected_loo)
    assert np.all(np.asarray(loo)[~keep] == 0.0)
