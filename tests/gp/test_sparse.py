"""DTC, FITC and VFE (bayes_rbfn.gp.sparse) against dense references, the exact GP and the theory's orderings.

Each quantity the O(NM²) Woodbury path computes is compared with the same quantity built from the dense
N×N covariance in tests/sparse_reference.py (Quiñonero-Candela & Rasmussen 2005 §4–6; Titsias 2009
eq. (9)). Tolerances are those of conftest (float64: 1e-8 relative) unless stated next to the test.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sparse_reference as ref
from conftest import assert_close

from bayes_rbfn.gp import block_loo, conditional, linalg, moments, sparse
from bayes_rbfn.gp.kernels import Kernel, Matern32, Matern52, SquaredExponential

#: Relative jitter used in the comparisons with dense references (the library's float64 default).
JITTER = 1e-8
METHODS = ("dtc", "fitc", "vfe")


@dataclass(frozen=True)
class Problem:
    kernel: Kernel
    X: np.ndarray
    y: np.ndarray
    Z: np.ndarray
    noise: float
    X_test: np.ndarray


def _problem(name: str) -> Problem:
    """N = 40 data, M = 8 inducing inputs and S = 12 test inputs in every problem, so that JAX's
    per-shape compilation caches are shared across the parametrisation."""
    rng = np.random.default_rng(sum(map(ord, name)))
    n, m, s = 40, 8, 12
    if name == "1d-se-scalar":
        X = np.sort(rng.uniform(-3.0, 3.0, n))[:, None]
        y = np.sin(2.0 * X[:, 0]) + 0.2 * rng.standard_normal(n)
        Z = np.linspace(-2.8, 2.8, m)[:, None]
        kernel = SquaredExponential(lengthscale=0.8, variance=1.3)
        noise = 0.2
        X_test = np.linspace(-4.0, 4.0, s)[:, None]
    elif name == "2d-se-ard":
        X = rng.uniform(-2.0, 2.0, (n, 2))
        y = np.sin(X[:, 0]) * np.cos(0.5 * X[:, 1]) + 0.3 * rng.standard_normal(n)
        Z = X[rng.choice(n, m, replace=False)]
        kernel = SquaredExponential(lengthscale=np.array([0.7, 1.5]), variance=0.9)
        noise = 0.3
        X_test = rng.uniform(-2.5, 2.5, (s, 2))
    elif name == "1d-matern52":
        X = rng.uniform(0.0, 6.0, n)[:, None]
        y = np.exp(-0.3 * X[:, 0]) * np.sin(3.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
        # Inducing inputs: the data points nearest to an even grid (a random subset can put two of them
        # 1e-4 apart; see test_near_duplicate_inducing_inputs).
        Z = X[np.argmin(np.abs(X - np.linspace(0.3, 5.7, m)), axis=0)]
        kernel = Matern52(lengthscale=1.0, variance=2.0)
        noise = 0.15
        X_test = np.linspace(-1.0, 7.0, s)[:, None]
    elif name == "2d-matern32-ard-plus-se":
        X = rng.uniform(-1.0, 1.0, (n, 2))
        y = X[:, 0] ** 2 - X[:, 1] + 0.25 * rng.standard_normal(n)
        Z = X[rng.choice(n, m, replace=False)]
        kernel = Matern32(lengthscale=np.array([0.6, 1.1]), variance=0.7) + SquaredExponential(
            lengthscale=2.0, variance=0.4
        )
        noise = 0.25
        X_test = rng.uniform(-1.5, 1.5, (s, 2))
    else:  # pragma: no cover
        raise KeyError(name)
    return Problem(kernel, X, y, Z, noise, X_test)


PROBLEMS = ("1d-se-scalar", "2d-se-ard", "1d-matern52", "2d-matern32-ard-plus-se")


@pytest.fixture(params=PROBLEMS)
def problem(request) -> Problem:
    return _problem(request.param)


def _args(p: Problem):
    return p.kernel, p.X, p.y, p.Z, p.noise


# --------------------------------------------------------------------------------------------------
# Marginal likelihoods against dense Gaussians


def test_dtc_marginal_equals_sor_and_dense(problem):
    """DTC's marginal likelihood is SoR's, log N(y | 0, Q_ff + σ²I) (QC&R §5)."""
    value = sparse.log_marginal_likelihood(*_args(problem), method="dtc", jitter=JITTER)
    sor = sparse.log_marginal_likelihood(*_args(problem), method="sor", jitter=JITTER)
    dense = ref.log_marginal("dtc", *_args(problem), JITTER)
    assert_close(value, sor)
    assert_close(value, dense)


def test_fitc_marginal_equals_dense(problem):
    """FITC's marginal likelihood is log N(y | 0, Q_ff + diag(K_ff − Q_ff) + σ²I) (QC&R §6)."""
    value = sparse.log_marginal_likelihood(*_args(problem), method="fitc", jitter=JITTER)
    assert_close(value, ref.log_marginal("fitc", *_args(problem), JITTER))


def test_nystrom_residual_equals_dense(problem):
    """nystrom_residual is diag(K_ff − Q_ff) ≥ 0 (FITC's extra noise, VFE's trace), and ~0 at inputs in Z."""
    X = np.concatenate([problem.X, problem.Z])
    Kuu = problem.kernel(problem.Z, problem.Z)
    Luu = linalg.cholesky(Kuu, JITTER)
    value = moments.nystrom_residual(problem.kernel, jnp.asarray(problem.Z), Luu, jnp.asarray(X))
    expected = np.diag(ref.gram(problem.kernel, X) - ref.nystrom(problem.kernel, problem.Z, X, X, JITTER))
    prior = float(np.max(np.diag(ref.gram(problem.kernel, X))))
    assert np.all(np.asarray(value) >= 0)
    assert_close(value, np.maximum(expected, 0.0), scale=prior)
    assert np.max(np.asarray(value)[-problem.Z.shape[0] :]) < 1e-6 * prior


def test_vfe_bound_is_dtc_minus_trace(problem):
    """Titsias's bound lies below the DTC/SoR marginal by exactly tr(K_ff − Q_ff)/(2σ²) (eq. (9))."""
    bound = sparse.log_marginal_likelihood(*_args(problem), method="vfe", jitter=JITTER)
    dtc = sparse.log_marginal_likelihood(*_args(problem), method="dtc", jitter=JITTER)
    trace = ref.vfe_trace(problem.kernel, problem.X, problem.Z, JITTER)
    assert trace > 0
    assert_close(dtc - bound, trace / (2.0 * problem.noise**2), scale=abs(float(dtc)))
    assert_close(bound, ref.log_marginal("vfe", *_args(problem), JITTER))


@pytest.mark.parametrize("num_inducing", [3, 8], ids=lambda m: f"M={m}")
@pytest.mark.parametrize("name", PROBLEMS)
def test_vfe_bound_below_exact(name, num_inducing):
    """The collapsed bound never exceeds the exact GP's log marginal likelihood, for any Z.

    Z is a random subset of X, kept well-conditioned (cond K_uu < 1e6): the Woodbury path's rounding
    grows with cond(K_uu) (linalg module docstring) and could otherwise exceed a small true gap.
    """
    p = _problem(name)
    rng = np.random.default_rng(num_inducing)
    for _ in range(100):
        Z = p.X[rng.choice(p.X.shape[0], num_inducing, replace=False)]
        if np.linalg.cond(ref.gram(p.kernel, Z)) < 1e6:
            break
    else:  # pragma: no cover
        pytest.fail("no well-conditioned Z drawn")
    bound = sparse.log_marginal_likelihood(p.kernel, p.X, p.y, Z, p.noise, method="vfe")
    exact = conditional.log_marginal_likelihood(p.kernel, p.X, p.y, p.noise)
    assert float(bound) <= float(exact)


@pytest.mark.parametrize("method", METHODS)
def test_near_duplicate_inducing_inputs(method):
    """Two inducing inputs 1e-4 lengthscales apart (cond K_uu ≈ 1e8 after jitter): still the dense value.

    The default (whitened) Woodbury path whitens K_uf before forming AAᵀ; the M×M-first variant
    (``fast=True`` of :func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`) was off by 7e-7 relative here.
    """
    p = _problem("1d-matern52")
    Z = np.concatenate([p.Z[:-1], p.Z[:1] + 1e-4])
    value = sparse.log_marginal_likelihood(p.kernel, p.X, p.y, Z, p.noise, method=method, jitter=JITTER)
    assert_close(value, ref.log_marginal(method, p.kernel, p.X, p.y, Z, p.noise, JITTER))


# --------------------------------------------------------------------------------------------------
# Predictive moments against dense conditioning


@pytest.mark.parametrize("method", METHODS)
def test_predictive_equals_dense(problem, method):
    """f* | y equals the dense joint prior conditioned on y (QC&R eqs. (20)–(21), (24)–(25))."""
    result = getattr(sparse, method)(*_args(problem), problem.X_test, jitter=JITTER)
    # VFE's predictive is DTC's (Titsias's optimal q(u)).
    mean, cov = ref.predict("dtc" if method == "vfe" else method, *_args(problem), problem.X_test, JITTER)
    scale = float(np.max(np.diag(ref.gram(problem.kernel, problem.X_test))))
    assert_close(result.mean, mean, scale=scale)
    assert_close(result.cov, cov, scale=scale)
    assert_close(result.var, np.diag(cov), scale=scale)


@pytest.mark.parametrize("method", METHODS)
def test_diagonal_predictive_matches_full(problem, method):
    """``full_cov=False`` gives the same mean and the diagonal of the full covariance, without it."""
    full = getattr(sparse, method)(*_args(problem), problem.X_test)
    diag = getattr(sparse, method)(*_args(problem), problem.X_test, full_cov=False)
    assert diag.cov is None
    assert_close(diag.mean, full.mean)
    assert_close(diag.var, full.var)


def test_dtc_variance_is_sor_plus_nystrom_residual(problem):
    """DTC's variance exceeds SoR's by exactly K_** − Q_** ≥ 0 (same mean), so SoR ≤ DTC pointwise."""
    sor = conditional.sor(*_args(problem), problem.X_test, jitter=JITTER)
    dtc = sparse.dtc(*_args(problem), problem.X_test, jitter=JITTER)
    residual = np.diag(ref.gram(problem.kernel, problem.X_test)) - np.diag(
        ref.nystrom(problem.kernel, problem.Z, problem.X_test, problem.X_test, JITTER)
    )
    assert_close(dtc.mean, sor.mean)
    assert_close(dtc.var - sor.var, residual, scale=float(np.max(dtc.var)))
    assert np.all(np.asarray(sor.var) <= np.asarray(dtc.var) + 1e-12)


@pytest.mark.parametrize("method", ["sor", *METHODS])
def test_far_from_inducing_points(problem, method):
    """Far from Z, DTC/FITC/VFE revert to the prior (mean 0, variance K_**); SoR's variance collapses to 0."""
    distance = 40.0 * float(np.max(np.atleast_1d(np.asarray(_lengthscales(problem.kernel)))))
    X_far = problem.Z[:3] + distance
    module = conditional if method == "sor" else sparse
    result = getattr(module, method)(*_args(problem), X_far)
    prior = np.diag(ref.gram(problem.kernel, X_far))
    assert_close(result.mean, np.zeros(3), scale=float(np.max(prior)))
    expected = np.zeros(3) if method == "sor" else prior
    assert_close(result.var, expected, scale=float(np.max(prior)))


def _lengthscales(kernel):
    if hasattr(kernel, "k1"):
        return np.concatenate(
            [np.atleast_1d(_lengthscales(kernel.k1)), np.atleast_1d(_lengthscales(kernel.k2))]
        )
    return np.asarray(kernel.lengthscale)


# --------------------------------------------------------------------------------------------------
# Z = X recovers the exact GP


def _grid_problem(dim: int) -> Problem:
    """A well-conditioned problem (inputs ~1.5 lengthscales apart) on which K_ff can be factorised bare."""
    rng = np.random.default_rng(7 + dim)
    if dim == 1:
        X = np.linspace(-4.0, 4.0, 9)[:, None]
        X_test = np.linspace(-5.0, 5.0, 13)[:, None]
    else:
        g = np.linspace(-1.2, 1.2, 3)
        X = np.stack(np.meshgrid(g, g), axis=-1).reshape(-1, 2)
        X_test = rng.uniform(-2.0, 2.0, (8, 2))
    y = np.sin(X.sum(axis=1)) + 0.1 * rng.standard_normal(X.shape[0])
    kernel = SquaredExponential(lengthscale=0.7 if dim == 1 else 0.8, variance=1.5)
    return Problem(kernel, X, y, X, 0.3, X_test)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dim", [1, 2], ids=["1d-grid", "2d-grid"])
def test_z_equals_x_recovers_exact_gp(method, dim):
    """With Z = X and no jitter, Q_ff = K_ff and Q_*f = K_*f: DTC, FITC and VFE are the exact GP."""
    p = _grid_problem(dim)
    kernel, X, y, noise = p.kernel, p.X, p.y, p.noise
    assert np.linalg.cond(ref.gram(kernel, X)) < 1e3
    lml = sparse.log_marginal_likelihood(kernel, X, y, X, noise, method=method, jitter=0.0)
    pred = getattr(sparse, method)(kernel, X, y, X, noise, p.X_test, jitter=0.0)
    mean, cov = ref.predict("exact", kernel, X, y, None, noise, p.X_test, 0.0)
    assert_close(lml, ref.log_marginal("exact", kernel, X, y, None, noise, 0.0))
    assert_close(lml, conditional.log_marginal_likelihood(kernel, X, y, noise))
    assert_close(pred.mean, mean)
    assert_close(pred.var, np.diag(cov), scale=1.5)
    assert_close(pred.cov, cov, scale=1.5)


def test_z_equals_x_sor_lacks_power_function():
    """docs/mathematics.md#inducing-inputs-at-the-data: with Z = X, SoR's variance falls short of the exact
    GP's by K_** − K_*X K_XX⁻¹ K_X*."""
    p = _grid_problem(1)
    kernel, X, y, noise = p.kernel, p.X, p.y, p.noise
    sor = conditional.sor(kernel, X, y, X, noise, p.X_test, jitter=0.0)
    _, cov = ref.predict("exact", kernel, X, y, None, noise, p.X_test, 0.0)
    power2 = np.diag(ref.gram(kernel, p.X_test) - ref.nystrom(kernel, X, p.X_test, p.X_test, 0.0))
    assert np.max(power2) > 0.1
    assert_close(np.diag(cov) - sor.var, power2, scale=1.5)


# --------------------------------------------------------------------------------------------------
# Leave-one-out conditionals


@pytest.mark.parametrize("method", METHODS)
def test_loo_equals_brute_force(problem, method):
    """log p(y_i | y_−i) under each model's marginal equals N dense conditionals (VFE: DTC/SoR's marginal)."""
    value = sparse.loo_log_density(*_args(problem), method=method, jitter=JITTER)
    model = "dtc" if method == "vfe" else method
    C = ref.prior_cov(model, problem.kernel, problem.X, problem.Z, problem.noise, JITTER)
    expected = ref.loo_brute_force(C, problem.y)
    assert value.shape == (problem.X.shape[0],)
    assert_close(value, expected, scale=float(np.max(np.abs(expected))))


def test_dtc_loo_is_sor_loo(problem):
    """DTC's LOO conditionals are SoR's (same marginal over y)."""
    value = sparse.loo_log_density(*_args(problem), method="dtc")
    sor = sparse.loo_log_density(*_args(problem), method="sor")
    assert_close(value, sor)


# --------------------------------------------------------------------------------------------------
# Variance-collapse diagnostic


def test_variance_lost_equals_dense(problem):
    """variance_lost is 1 − Q_**/K_** from dense matrices, in [0, 1]."""
    far = problem.Z[:2] + 50.0
    X_test = np.concatenate([problem.X_test, problem.Z, far])
    lost = sparse.variance_lost(problem.kernel, problem.Z, X_test, jitter=JITTER)
    expected = ref.variance_lost(problem.kernel, problem.Z, X_test, JITTER)
    assert_close(lost, np.clip(expected, 0.0, 1.0), scale=1.0)
    assert np.all((np.asarray(lost) >= 0) & (np.asarray(lost) <= 1))
    n_test, m = problem.X_test.shape[0], problem.Z.shape[0]
    assert np.max(np.asarray(lost)[n_test : n_test + m]) < 1e-6  # at Z nothing is lost
    assert_close(np.asarray(lost)[-2:], 1.0, scale=1.0)  # far away everything is


def test_collapse_warning_far_points(problem):
    """Far test points trigger a VarianceCollapseWarning that counts them and points to DTC/FITC/VFE."""
    X_test = np.concatenate([problem.Z[:4], problem.Z[:3] + 50.0])
    with pytest.warns(sparse.VarianceCollapseWarning, match=r"3 of 7 test point.*DTC, FITC or VFE") as record:
        lost = sparse.collapse_warning(problem.kernel, problem.Z, X_test)
    assert len(record) == 1
    assert issubclass(sparse.VarianceCollapseWarning, UserWarning)
    assert_close(lost, sparse.variance_lost(problem.kernel, problem.Z, X_test))


def test_warn_if_collapsed_counts_the_points_past_the_threshold():
    """The warning of both collapse checks counts the points past the threshold, names model and points."""
    lost = np.array([0.0, 0.3, 0.61, 0.9, 1.0])
    with pytest.warns(sparse.VarianceCollapseWarning, match=r"^rbfn: .* at 2 of 5 grid point\(s\) \(40%\)"):
        assert sparse.warn_if_collapsed(lost, threshold=0.7, model="rbfn", points="grid point") == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sparse.warn_if_collapsed(lost[:3], threshold=0.7) == 0


def test_collapse_warning_silent_at_inducing_points(problem):
    """At the inducing inputs SoR keeps the prior variance: no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lost = sparse.collapse_warning(problem.kernel, problem.Z, problem.Z, threshold=0.1)
    assert np.max(np.asarray(lost)) < 1e-6


# --------------------------------------------------------------------------------------------------
# Traceable blocks: jit, grad, float32


@pytest.mark.parametrize("name", ["1d-se-scalar", "2d-matern32-ard-plus-se"])
def test_blocks_trace_under_jit_and_grad(name):
    """The blocks run under jit, agree with the public functions, and give finite hyperparameter gradients."""
    problem = _problem(name)
    X, y, Z, X_test = (jnp.asarray(a) for a in (problem.X, problem.y, problem.Z, problem.X_test))

    @jax.jit
    def blocks(kernel, noise):
        fitc_factor, d = sparse.training_factor("fitc", kernel, X, y, Z, noise)
        dtc_factor, _ = sparse.training_factor("dtc", kernel, X, y, Z, noise)
        return (
            sparse.log_marginal("dtc", dtc_factor, kernel, X, noise),
            sparse.log_marginal("fitc", fitc_factor, kernel, X, noise),
            sparse.log_marginal("vfe", dtc_factor, kernel, X, noise),
            block_loo.sor_loo(fitc_factor, kernel, Z, X, y, d),
            conditional.sor_predict(dtc_factor, kernel, Z, X_test, False, exact_test_prior=True).var,
            conditional.sor_predict(fitc_factor, kernel, Z, X_test, False, exact_test_prior=True).var,
        )

    noise = jnp.asarray(problem.noise)
    dtc, fitc, vfe, loo, dtc_var, fitc_var = blocks(problem.kernel, noise)
    args = _args(problem)
    assert_close(dtc, sparse.log_marginal_likelihood(*args, method="dtc"))
    assert_close(fitc, sparse.log_marginal_likelihood(*args, method="fitc"))
    assert_close(vfe, sparse.log_marginal_likelihood(*args, method="vfe"))
    assert_close(loo, sparse.loo_log_density(*args, method="fitc"))
    assert_close(dtc_var, sparse.dtc(*args, problem.X_test).var)
    assert_close(fitc_var, sparse.fitc(*args, problem.X_test).var)

    def objective(approx, kernel, noise):
        factor, _ = sparse.training_factor(approx, kernel, X, y, Z, noise)
        return sparse.log_marginal(approx, factor, kernel, X, noise)

    # One compiled gradient per objective (a sum could hide an inf − inf).
    @jax.jit
    def grads(kernel, noise):
        return [
            jax.grad(lambda k, s, approx=approx: objective(approx, k, s), argnums=(0, 1))(kernel, noise)
            for approx in METHODS
        ]

    leaves = jax.tree_util.tree_leaves(grads(problem.kernel, noise))
    assert leaves and all(np.all(np.isfinite(np.asarray(g))) for g in leaves)


@pytest.mark.parametrize("method", METHODS)
def test_float32_runs(method):
    """float32 inputs stay float32 and agree with float64 at the same jitter (the float32 policy, 1e-4)
    to the float32 tolerance of conftest."""
    p = _problem("1d-se-scalar")
    jitter = 1e-4
    k32 = SquaredExponential(lengthscale=np.float32(0.8), variance=np.float32(1.3))
    args32 = (
        k32,
        p.X.astype(np.float32),
        p.y.astype(np.float32),
        p.Z.astype(np.float32),
        np.float32(p.noise),
    )
    lml = sparse.log_marginal_likelihood(*args32, method=method)
    pred = getattr(sparse, method)(*args32, p.X_test.astype(np.float32), full_cov=False)
    assert lml.dtype == jnp.float32 and pred.mean.dtype == jnp.float32
    lml64 = sparse.log_marginal_likelihood(*_args(p), method=method, jitter=jitter)
    pred64 = getattr(sparse, method)(*_args(p), p.X_test, full_cov=False, jitter=jitter)
    assert_close(lml, lml64, dtype=np.float32)
    assert_close(pred.mean, pred64.mean, dtype=np.float32, scale=1.3)
    assert_close(pred.var, pred64.var, dtype=np.float32, scale=1.3)


# --------------------------------------------------------------------------------------------------
# Bad input


def _bad_calls():
    p = _problem("1d-se-scalar")
    k, X, y, Z, s, Xs = p.kernel, p.X, p.y, p.Z, p.noise, p.X_test
    lml = sparse.log_marginal_likelihood
    loo = sparse.loo_log_density
    return [
        ("method", "unknown-method", lambda: lml(k, X, y, Z, s, method="pitc")),
        ("method", "method-not-a-string", lambda: loo(k, X, y, Z, s, method=None)),
        ("y", "y-wrong-length", lambda: lml(k, X, y[:-1], Z, s)),
        ("Z", "Z-wrong-dimension", lambda: sparse.fitc(k, X, y, np.hstack([Z, Z]), s, Xs)),
        ("Z", "Z-duplicate-rows", lambda: sparse.dtc(k, X, y, np.vstack([Z, Z[:1]]), s, Xs)),
        ("Z", "Z-more-than-distinct-X", lambda: lml(k, X[:3], y[:3], Z, s, method="fitc")),
        ("X_test", "X_test-wrong-dimension", lambda: sparse.vfe(k, X, y, Z, s, np.hstack([Xs, Xs]))),
        ("noise", "noise-zero", lambda: lml(k, X, y, Z, 0.0, method="vfe")),
        ("noise", "noise-negative", lambda: sparse.fitc(k, X, y, Z, -0.1, Xs)),
        ("noise", "noise-nan", lambda: loo(k, X, y, Z, np.nan, method="fitc")),
        ("jitter", "jitter-negative", lambda: lml(k, X, y, Z, s, jitter=-1e-6)),
        ("kernel", "kernel-not-a-kernel", lambda: sparse.dtc("se", X, y, Z, s, Xs)),
        ("threshold", "threshold-above-one", lambda: sparse.collapse_warning(k, Z, Xs, threshold=1.5)),
        ("X_test", "diagnostic-X_test-dimension", lambda: sparse.variance_lost(k, Z, np.ones((3, 2)))),
    ]


@pytest.mark.parametrize(
    ("name", "call"), [(n, c) for n, _, c in _bad_calls()], ids=[i for _, i, _ in _bad_calls()]
)
def test_bad_input_names_argument(name, call):
    """Bad input raises ValueError whose message starts with the offending argument's name."""
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
