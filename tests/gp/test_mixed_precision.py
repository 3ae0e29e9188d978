"""``precision="mixed"`` of the streamed O(NM²) pass (:mod:`bayes_rbfn.gp.woodbury_sums`).

Mixed precision forms each chunk's kernel block and its products in float32 and adds them to float64 sums;
every factorisation stays float64. Here it is compared with the float64 pass and with an independent dense
NumPy float64 reference (log N(y | 0, Q_ff + D) by a Cholesky of the N×N matrix; its gradient by central
differences) in the log density and in its gradient in the log-hyperparameters (log ℓ, log s², log σ):

* where K_uu is well conditioned (inducing inputs ≳ a lengthscale apart: cond(K_uu) ≲ 10), within
  :data:`VALUE_RTOL` and :data:`GRAD_RTOL` (the largest errors measured here, ×10), for the SE and Matérn
  kernels, 1-D and 3-D inputs, several N (none a multiple of the chunk of 8, so many chunks and a ragged
  tail), the per-point d (FITC) with a mask of padded points, and inputs far from the origin;
* where it is not (64 dense inducing inputs, cond(K_uu) ~ 1e9 at the jitter floor) it is *not* accurate:
  the test asserts that its error is at least ten times those tolerances there (float64 stays accurate);
* the SoR predictive moments (:func:`moments.sor_moments`, what ``predict`` streams) against a dense NumPy
  float64 predictive: within :data:`PRED_VAR_RTOL` / :data:`PRED_MEAN_RTOL` where K_uu is well
  conditioned, and far outside them where it is not;
* on float32 inputs it is plain float32 (the same numbers);
* the models take it (``fit``/``build_model``'s ``precision``, ``ModelConfig.precision``), and a bad value
  is an error naming ``precision``.

Compiled functions are shared between the tests (data as arguments) to keep the file fast.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla

from bayes_rbfn.gp import kernels, linalg, woodbury_sums
from bayes_rbfn.models.distributions import SparseGP

#: Relative error of the mixed log density against float64 and the dense reference where K_uu is well
#: conditioned: measured ≤ 1.4e-9 on these problems (three seeds each; 1.1e-8 at N = 37), ×10, rounded up.
VALUE_RTOL = 2e-8
#: The same for the gradient, relative to the gradient's norm: measured ≤ 5.8e-6 (1-D, N = 403: the log s²
#: component, ~1, is a difference of streamed and M×M terms of size ~N, and keeps ~ε₃₂·N ≈ 2e-4 of the
#: float32 reverse pass; ≤ 2.2e-7 in 3-D at N = 1,001), ×10, rounded up. (A float64 reverse pass measured
#: ≤ 1.3e-8, but left a speed-up of only 1.06–1.12× at N = 10⁵.)
GRAD_RTOL = 6e-5
#: What the mixed pass misses by at least for an ill-conditioned K_uu (measured 6e-5 in the value, 1.8e-3
#: in the gradient): ten times the tolerances above.
ILL_VALUE_ERROR, ILL_GRAD_ERROR = 10 * VALUE_RTOL, 10 * GRAD_RTOL
#: The mixed SoR predictive against a dense float64 one where K_uu is well conditioned: the largest relative
#: error of the variance over the test points, and the largest error of the mean in units of the predictive
#: sd. Measured 1.7e-6 and 1.3e-5 here, ×10, rounded up (on the 3-D benchmark problem, N = 2,000: 1.2e-6
#: and 5.5e-5 at σ = 0.1, 1.2e-6 and 4.9e-4 at σ = 0.01). The rounding of k_u(x*) (ε₃₂ ≈ 6e-8) comes out
#: of the weight posterior's factor amplified, by up to its condition number, even where K_uu's is ~1.
PRED_VAR_RTOL, PRED_MEAN_RTOL = 2e-5, 2e-4

#: The dense reference's central differences: step in the log-hyperparameters, and their own accuracy.
FD_STEP, FD_RTOL = 1e-5, 1e-6

LOG_THETA = np.log([1.0, 1.0, 0.3])

KERNELS = {"se": kernels.SquaredExponential, "matern32": kernels.Matern32, "matern52": kernels.Matern52}


def _np_kernel(name, ell, s2, A, B):
    """The kernels' formulas in NumPy (the reference shares no code with the library's)."""
    r2 = np.sum((A[:, None, :] - B[None, :, :]) ** 2, axis=-1) / ell**2
    r = np.sqrt(r2)
    if name == "se":
        return s2 * np.exp(-0.5 * r2)
    if name == "matern32":
        return s2 * (1.0 + math.sqrt(3.0) * r) * np.exp(-math.sqrt(3.0) * r)
    return s2 * (1.0 + math.sqrt(5.0) * r + 5.0 / 3.0 * r2) * np.exp(-math.sqrt(5.0) * r)


def _dense_lml(name, log_theta, X, y, Z, extra_d=None, mask=None, fitc=False):
    """log N(y | 0, Q_ff + diag(d)) with every matrix formed (N×N Cholesky, NumPy float64): d = σ²
    (+ ``extra_d``, + diag(K_ff − Q_ff) with ``fitc``), the jitter of the package's policy on K_uu, over
    the real points of ``mask``."""
    ell, s2, sigma = np.exp(log_theta)
    X, y, Z = np.asarray(X), np.asarray(y), np.asarray(Z)
    d = np.full(y.shape, sigma**2) + (0.0 if extra_d is None else np.asarray(extra_d))
    if mask is not None:
        keep = np.asarray(mask)
        X, y, d = X[keep], y[keep], d[keep]
    Kuu = _np_kernel(name, ell, s2, Z, Z)
    Kuu = Kuu + linalg.default_jitter(np.float64) * np.mean(np.diag(Kuu)) * np.eye(Z.shape[0])
    Luu = np.linalg.cholesky(Kuu)
    A = sla.solve_triangular(Luu, _np_kernel(name, ell, s2, Z, X), lower=True)
    if fitc:
        d = d + np.maximum(s2 - np.sum(A * A, axis=0), 0.0)
    L = np.linalg.cholesky(A.T @ A + np.diag(d))
    a = sla.solve_triangular(L, y, lower=True)
    return -0.5 * a @ a - np.sum(np.log(np.diag(L))) - 0.5 * y.shape[0] * np.log(2 * np.pi)


def _dense_value_and_grad(name, *args, **kw):
    value = _dense_lml(name, LOG_THETA, *args, **kw)
    grad = np.zeros(3)
    for i in range(3):
        step = FD_STEP * np.eye(3)[i]
        grad[i] = (
            _dense_lml(name, LOG_THETA + step, *args, **kw) - _dense_lml(name, LOG_THETA - step, *args, **kw)
        ) / (2 * FD_STEP)
    return value, grad


@functools.cache
def _streamed(name, precision, chunk=8):
    """Jitted value and gradient in the log-hyperparameters of log N(y | 0, Q_ff + diag(d)) by the streamed
    pass (:func:`woodbury_sums.woodbury_factor`); the data are arguments, so the program is shared."""

    def lml(log_theta, X, y, Z, extra_d, mask):
        ell, s2, sigma = jnp.exp(log_theta)
        kernel = KERNELS[name](ell, s2)
        Luu = linalg.cholesky(kernel(Z, Z))
        d = sigma**2 + (0.0 if extra_d is None else extra_d)
        factor = woodbury_sums.woodbury_factor(
            kernel, Z, X, y, d, Luu, mask=mask, chunk_size=chunk, precision=precision
        )
        return factor.log_marginal_likelihood()

    return jax.jit(jax.value_and_grad(lml))


def _run(name, precision, X, y, Z, extra_d=None, mask=None, chunk=8):
    value, grad = _streamed(name, precision, chunk)(jnp.asarray(LOG_THETA), X, y, Z, extra_d, mask)
    return float(value), np.asarray(grad)


def _problem(N, D, M, seed=0, spread=True):
    """Inputs on [0, 10]ᴰ, a smooth target with noise 0.3 (centred), and M inducing inputs: spread out (a
    lengthscale or more apart at ℓ = 1) or, with ``spread=False``, at the quantiles of 1-D inputs (dense)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (N, D))
    y = np.sin(1.3 * X[:, 0]) + 0.5 * np.cos(0.45 * X.sum(axis=1)) + 0.3 * rng.standard_normal(N)
    if not spread:
        Z = np.quantile(X[:, 0], (np.arange(M) + 0.5) / M)[:, None]
    elif D == 1:
        Z = np.linspace(0.5, 9.5, M)[:, None]
    else:
        Z = np.stack(np.meshgrid(*[np.linspace(1.5, 8.5, round(M ** (1 / D)))] * D), -1).reshape(-1, D)
    return jnp.asarray(X), jnp.asarray(y - y.mean()), jnp.asarray(Z)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _cond_Kuu(name, Z):
    Kuu = _np_kernel(name, 1.0, 1.0, np.asarray(Z), np.asarray(Z))
    return float(np.linalg.cond(Kuu + linalg.default_jitter(np.float64) * np.eye(Kuu.shape[0])))


def _check(name, X, y, Z, **kw):
    """Mixed against float64 and against the dense reference; float64 against the dense reference."""
    v_ref, g_ref = _dense_value_and_grad(name, X, y, Z, **kw)
    v64, g64 = _run(name, "float64", X, y, Z, **kw)
    vm, gm = _run(name, "mixed", X, y, Z, **kw)
    assert _rel(v64, v_ref) < 1e-11 and _rel(g64, g_ref) < FD_RTOL, (_rel(v64, v_ref), _rel(g64, g_ref))
    errors = {
        "value_vs_float64": _rel(vm, v64),
        "value_vs_dense": _rel(vm, v_ref),
        "grad_vs_float64": _rel(gm, g64),
        "grad_vs_dense": _rel(gm, g_ref),
    }
    assert errors["value_vs_float64"] < VALUE_RTOL and errors["value_vs_dense"] < VALUE_RTOL, errors
    assert errors["grad_vs_float64"] < GRAD_RTOL and errors["grad_vs_dense"] < GRAD_RTOL + FD_RTOL, errors
    return errors


def _weights(N, seed=4):
    """A FITC-like per-point addition to d and a mask that pads out every 7th point."""
    extra = jnp.asarray(np.random.default_rng(seed).uniform(0.0, 0.2, N))
    return {"extra_d": extra, "mask": jnp.asarray(np.arange(N) % 7 != 3)}


@pytest.mark.parametrize(
    ("kernel", "N", "D", "M", "weighted"),
    [("se", 403, 1, 8, False), ("matern52", 1001, 3, 27, True)],
    ids=["se-1d-403-scalar-d", "matern52-3d-1001-per-point-d-masked"],
)
def test_mixed_matches_float64_and_dense(kernel, N, D, M, weighted):
    """Well-conditioned K_uu: mixed within VALUE_RTOL / GRAD_RTOL of float64 and of the dense reference in
    the value and the gradient; N not a multiple of the chunk of 8. The scalar-d path sums unweighted; the
    weighted one (a per-point d, as FITC's, and padded points masked out) over the real points only."""
    X, y, Z = _problem(N, D, M)
    assert _cond_Kuu(kernel, Z) < 10
    errors = _check(kernel, X, y, Z, **(_weights(N) if weighted else {}))
    # Not merely float64 again: the float32 work shows in the last digits.
    assert errors["value_vs_float64"] > 0.0 or errors["grad_vs_float64"] > 0.0


def test_mixed_centres_inputs_far_from_the_origin():
    """Inputs near 2000 (years, say): their float32 rounding (~1e-4) would be a large share of a lengthscale;
    for a translation-invariant kernel the pass shifts them by a float64 centre before casting, so the
    error is that of inputs near 0 (same shapes as the 3-D case above: the same compiled programs)."""
    X, y, Z = _problem(1001, 3, 27, seed=5)
    w = _weights(1001, seed=6)
    near = _run("matern52", "mixed", X, y, Z, **w)
    v64, g64 = _run("matern52", "float64", X + 2000.0, y, Z + 2000.0, **w)
    vm, gm = _run("matern52", "mixed", X + 2000.0, y, Z + 2000.0, **w)
    assert _rel(vm, v64) < VALUE_RTOL and _rel(gm, g64) < GRAD_RTOL, (_rel(vm, v64), _rel(gm, g64))
    assert _rel(vm, near[0]) < VALUE_RTOL and _rel(gm, near[1]) < GRAD_RTOL


def test_mixed_fails_for_ill_conditioned_Kuu():
    """Where mixed precision must not be used: 64 inducing inputs at the quantiles of 1-D data (~0.16
    lengthscales apart, cond(K_uu) ~ 1e9 at the jitter floor). A float32 rounding of K_uc comes out of the
    whitening amplified by ‖L_uu⁻¹‖ ~ cond(K_uu)^½, so the error is far above the tolerances of the
    well-conditioned case, in the value and more in the gradient, while float64 stays accurate."""
    X, y, Z = _problem(1003, 1, 64, spread=False)
    assert _cond_Kuu("se", Z) > 1e8
    v_ref = _dense_lml("se", LOG_THETA, X, y, Z)
    v64, g64 = _run("se", "float64", X, y, Z)
    vm, gm = _run("se", "mixed", X, y, Z)
    assert _rel(v64, v_ref) < 1e-9, _rel(v64, v_ref)
    assert _rel(vm, v64) > ILL_VALUE_ERROR, _rel(vm, v64)
    assert _rel(gm, g64) > ILL_GRAD_ERROR, _rel(gm, g64)


def _dense_sor_predictive(X, y, Z, X_test, sigma):
    """SoR's predictive of f* at the SE kernel (ℓ = s² = 1), every matrix formed (NumPy float64): mean
    K_*u Σ K_uf y / σ², variance diag(K_*u Σ K_u*), Σ = (K_uu + K_uf K_fu / σ²)⁻¹ with the policy's jitter
    on K_uu, by a Cholesky of Σ⁻¹."""
    X, y, Z, X_test = (np.asarray(a) for a in (X, y, Z, X_test))
    Kuu = _np_kernel("se", 1.0, 1.0, Z, Z)
    Kuu = Kuu + linalg.default_jitter(np.float64) * np.mean(np.diag(Kuu)) * np.eye(Z.shape[0])
    Kuf, Kus = _np_kernel("se", 1.0, 1.0, Z, X), _np_kernel("se", 1.0, 1.0, Z, X_test)
    L = np.linalg.cholesky(Kuu + Kuf @ Kuf.T / sigma**2)
    V = sla.solve_triangular(L, Kus, lower=True)
    mean = Kus.T @ sla.cho_solve((L, True), Kuf @ y / sigma**2)
    return mean, np.sum(V * V, axis=0)


@functools.cache
def _moments(precision):
    def moments(X, y, Z, X_test):
        gp = SparseGP(kernels.SquaredExponential(1.0, 1.0), X, Z, 0.3, chunk_size=8, precision=precision)
        result = gp.moments(y, X_test)
        return result.mean, result.var

    return jax.jit(moments)


def _predictive_errors(X, y, Z, X_test, against_dense=True):
    """(variance, mean) errors of the mixed moments: relative, and in units of the predictive sd; against the
    dense reference (float64 is checked against it first), or with ``against_dense=False`` against float64
    (where K_uu's conditioning leaves the dense reference itself a few digits short)."""
    mean64, var64 = (np.asarray(a) for a in _moments("float64")(X, y, Z, X_test))
    if against_dense:
        mean_ref, var_ref = _dense_sor_predictive(X, y, Z, X_test, 0.3)
        np.testing.assert_allclose(var64, var_ref, rtol=1e-9)
        assert np.max(np.abs(mean64 - mean_ref) / np.sqrt(var_ref)) < 1e-8
    else:
        mean_ref, var_ref = mean64, var64
    mean, var = _moments("mixed")(X, y, Z, X_test)
    assert mean.dtype == var.dtype == jnp.float64
    mean, var = np.asarray(mean), np.asarray(var)
    return np.max(np.abs(var - var_ref) / var_ref), np.max(np.abs(mean - mean_ref) / np.sqrt(var_ref))


def test_mixed_predictive_moments_well_conditioned():
    """SoR's streamed predictive (``SparseGP.moments``, which ``predict`` evaluates per draw) under "mixed"
    against the dense float64 one: 3-D data, a 3×3×3 grid of inducing inputs (cond(K_uu) < 10), test points
    inside and outside the data in 38 chunks of 8 and a ragged tail, inputs far from the origin."""
    X, y, Z = _problem(1001, 3, 27)
    X_test = jnp.asarray(np.random.default_rng(8).uniform(-1.0, 11.0, (307, 3)))
    assert _cond_Kuu("se", Z) < 10
    var_error, mean_error = _predictive_errors(X, y, Z, X_test)
    assert var_error < PRED_VAR_RTOL and mean_error < PRED_MEAN_RTOL, (var_error, mean_error)
    assert var_error > 0.0  # float32 work, not float64 again
    far = _predictive_errors(X + 1000.0, y, Z + 1000.0, X_test + 1000.0)
    assert far[0] < PRED_VAR_RTOL and far[1] < PRED_MEAN_RTOL, far


def test_mixed_predictive_moments_fail_for_ill_conditioned_Kuu():
    """With 64 inducing inputs at the quantiles of 1-D data (cond(K_uu) ~ 1e9) the mixed predictive is far
    outside the tolerances of the well-conditioned case (compared with float64)."""
    X, y, Z = _problem(1003, 1, 64, spread=False)
    X_test = jnp.asarray(np.linspace(-1.0, 11.0, 301)[:, None])
    assert _cond_Kuu("se", Z) > 1e8
    var_error, mean_error = _predictive_errors(X, y, Z, X_test, against_dense=False)
    assert var_error > 10 * PRED_VAR_RTOL, (var_error, mean_error)


def test_float32_inputs_mixed_is_float32():
    """On float32 inputs "mixed" changes nothing: the same sums as the float32 pass."""
    X, y, Z = (a.astype(jnp.float32) for a in _problem(101, 2, 9))
    kernel = kernels.SquaredExponential(jnp.float32(1.0), jnp.float32(1.0))
    Luu = linalg.cholesky(kernel(Z, Z))
    a, b = (
        woodbury_sums.woodbury_stats(
            kernel, Z, X, y, jnp.float32(0.09), Luu, chunk_size=8, precision=precision
        )
        for precision in ("float64", "mixed")
    )
    for u, v in zip(a, b, strict=True):
        assert u.dtype == v.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_model_log_density_mixed():
    """The fitc model's log density (``numpyro.infer.util.log_density`` of the model
    :func:`bayes_rbfn.build_model` binds: priors, SparseGP(approx="fitc") and FITC's own float64 pass for
    diag(K_ff − Q_ff)) with ``precision="mixed"`` agrees with float64, and the likelihood with the dense
    FITC reference."""
    from numpyro.infer.util import log_density

    import bayes_rbfn

    X, y, Z = _problem(301, 3, 27, seed=7)
    params = {"lengthscale": jnp.asarray(1.0), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}
    values = {}
    for precision in ("float64", "mixed"):
        gm = bayes_rbfn.build_model(
            "fitc", np.asarray(X), np.asarray(y), Z=np.asarray(Z), precision=precision
        )
        assert gm.config.precision == precision
        values[precision] = float(log_density(gm.model, gm.args, {}, params)[0])
    assert _rel(values["mixed"], values["float64"]) < VALUE_RTOL, values
    # The likelihood alone, against the dense reference (y less the constant mean the model takes off).
    y_c = y - float(np.mean(np.asarray(y)))
    marginal = SparseGP(kernels.SquaredExponential(1.0, 1.0), X, Z, 0.3, approx="fitc", precision="mixed")
    reference = _dense_lml("se", LOG_THETA, X, y_c, Z, fitc=True)
    assert _rel(float(marginal.log_prob(y_c)), reference) < VALUE_RTOL


def test_bad_precision_is_an_error_naming_it():
    import bayes_rbfn

    X, y, Z = _problem(20, 1, 4)
    kernel = kernels.SquaredExponential(1.0, 1.0)
    Luu = linalg.cholesky(kernel(Z, Z))
    with pytest.raises(ValueError, match="precision"):
        woodbury_sums.woodbury_stats(kernel, Z, X, y, 0.1, Luu, precision="float32")
    with pytest.raises(ValueError, match="precision"):
        woodbury_sums.sor_factor(kernel, X, y, Z, 0.3, precision="half")
    with pytest.raises(ValueError, match="precision"):
        SparseGP(kernel, X, Z, 0.3, precision="bf16")
    Xn, yn = np.asarray(X), np.asarray(y)
    with pytest.raises(ValueError, match="precision"):
        bayes_rbfn.build_model("sor", Xn, yn, Z=np.asarray(Z), precision="single")
    # A model without the streamed pass says so instead of ignoring the setting.
    with pytest.raises(ValueError, match="precision: the 'exact' model"):
        bayes_rbfn.build_model("exact", Xn, yn, precision="mixed")
    # Recorded with a checkpoint only when set (earlier float64 records stay as they were).
    assert (
        bayes_rbfn.build_model("sor", Xn, yn, Z=np.asarray(Z), precision="mixed").record()["precision"]
        == "mixed"
    )
    assert "precision" not in bayes_rbfn.build_model("sor", Xn, yn, Z=np.asarray(Z)).record()
