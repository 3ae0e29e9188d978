"""Inducing inputs learned on the VFE bound: against a dense NumPy bound and the exact marginal likelihood.

The references form Q_ff = K_fu K_uu⁻¹ K_uf and the N×N covariance with NumPy (``numpy.linalg``), from
the SE kernel written out by hand (tests/reference.py), and take Titsias's bound (2009, eq. (9)) and the
exact GP's log marginal likelihood from them; none of it uses the library's factorisations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import bayes_rbfn as br
from bayes_rbfn.gp import inducing_search
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.gp.linalg import default_jitter
from bayes_rbfn.infer.inducing import inducing_inputs
from tests.reference import gram

JITTER = default_jitter(np.float64)


def se(params):
    return SquaredExponential(params["lengthscale"], params["variance"])


def dense_bound(Z, lengthscale, variance, noise, X, y, method="vfe"):
    """F (or the exact log marginal likelihood for ``method="exact"``) from dense NumPy matrices."""
    spec = {"kind": "se", "lengthscale": lengthscale, "variance": variance}
    N = X.shape[0]
    Kff = gram(spec, X)
    if method == "exact":
        C = Kff + noise**2 * np.eye(N)
        trace = 0.0
    else:
        Kuu = gram(spec, Z)
        Kuu = Kuu + JITTER * np.mean(np.diag(Kuu)) * np.eye(Z.shape[0])
        Kfu = gram(spec, X, Z)
        Qff = Kfu @ np.linalg.solve(Kuu, Kfu.T)
        C = Qff + noise**2 * np.eye(N)
        trace = np.trace(Kff - Qff) / (2 * noise**2)
    sign, logdet = np.linalg.slogdet(C)
    assert sign > 0
    return -0.5 * (y @ np.linalg.solve(C, y) + logdet + N * np.log(2 * np.pi)) - trace


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    X = rng.uniform(-3.0, 3.0, (60, 2))
    y = np.sin(X[:, 0]) * np.cos(0.7 * X[:, 1]) + 0.1 * rng.normal(size=60)
    return X, y - y.mean()


START = {"lengthscale": np.array([1.5, 1.5]), "variance": np.array(0.8)}


def test_optimised_bound_is_at_least_the_start_and_is_the_dense_bound_there(problem):
    X, y = problem
    Z0 = X[:8].copy()
    found = inducing_search.optimise_bound(se, START, X, y, Z0, 0.3)
    start = dense_bound(Z0, START["lengthscale"], START["variance"], 0.3, X, y)
    end = dense_bound(found.Z, found.params["lengthscale"], found.params["variance"], found.noise, X, y)
    assert found.start_bound == pytest.approx(start, rel=1e-9)
    assert found.bound == pytest.approx(end, rel=1e-9)
    assert end > start + 1.0  # the search moved far from a poor start
    assert not np.allclose(found.Z, Z0)  # Z itself moved
    # Holding Z at its start, the same search is lower: learning Z is worth something here.
    fixed = inducing_search.optimise_bound(se, START, X, y, Z0, 0.3, learn_Z=False)
    np.testing.assert_array_equal(fixed.Z, Z0)
    assert start <= fixed.bound < found.bound


@pytest.mark.parametrize("param", ["Z", "lengthscale", "noise"])
def test_gradient_of_the_bound_matches_finite_differences_of_the_dense_bound(problem, param):
    X, y = problem
    Z = X[:6] + 0.1
    ell, s2, noise = np.array([1.1, 0.7]), 0.9, 0.25

    def library(Z, ell, noise):
        return inducing_search.vfe_bound(
            SquaredExponential(ell, s2), jnp.asarray(X), jnp.asarray(y), Z, noise
        )

    grads = jax.grad(library, argnums=(0, 1, 2))(jnp.asarray(Z), jnp.asarray(ell), jnp.asarray(noise))
    index = {"Z": 0, "lengthscale": 1, "noise": 2}[param]
    analytic = np.asarray(grads[index]).ravel()
    point = [Z, ell, np.asarray(noise)][index].astype(float)
    fd = np.zeros(point.size)
    h = 1e-5
    for i in range(point.size):
        step = np.zeros(point.size)
        step[i] = h
        args_plus = [Z, ell, noise]
        args_minus = [Z, ell, noise]
        args_plus[index] = (point.ravel() + step).reshape(point.shape)
        args_minus[index] = (point.ravel() - step).reshape(point.shape)
        fd[i] = (
            dense_bound(args_plus[0], args_plus[1], s2, float(args_plus[2]), X, y)
            - dense_bound(args_minus[0], args_minus[1], s2, float(args_minus[2]), X, y)
        ) / (2 * h)
    np.testing.assert_allclose(analytic, fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))


def test_bound_at_its_optimum_approaches_the_exact_marginal_likelihood_as_M_grows(problem):
    X, y = problem

    def exact_negative(v):
        return -dense_bound(None, np.exp(v[:2]), np.exp(v[2]), np.exp(v[3]), X, y, method="exact")

    start = np.log([1.5, 1.5, 0.8, 0.3])
    exact = -scipy.optimize.minimize(
        exact_negative, start, method="Nelder-Mead", options={"maxiter": 4000}
    ).fun
    gaps = []
    for M in (3, 6, 12, 24, 60):
        Z0 = inducing_inputs(X, y, M, method="kmeans", seed=0)[0]
        found = inducing_search.optimise_bound(se, START, X, y, Z0, 0.3)
        at_optimum = dense_bound(
            found.Z, found.params["lengthscale"], found.params["variance"], found.noise, X, y
        )
        # a lower bound on the exact evidence at the same hyperparameters, and so on its maximum
        evidence = dense_bound(
            None, found.params["lengthscale"], found.params["variance"], found.noise, X, y, "exact"
        )
        assert at_optimum <= evidence + 1e-6
        gaps.append(exact - at_optimum)
    assert all(g >= -1e-4 for g in gaps)
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3] > gaps[4], gaps
    assert gaps[-1] < 1e-3, gaps  # M = N: Z can cover the data, where the bound is the evidence


def test_greedy_points_are_the_conditional_variance_pivots_at_the_type_ii_hyperparameters(problem):
    X, y = problem
    Z0 = X[:8].copy()
    found = inducing_search.greedy_inducing(se, START, X, y, Z0, 0.3)
    spec = {"kind": "se", "lengthscale": found.params["lengthscale"], "variance": found.params["variance"]}
    # Independent greedy selection: each point the largest diagonal of K_ff − Q_ff given those before it,
    # ties (the first pick: a stationary kernel's diagonal is constant) to the first distinct row in
    # sorted order.
    rows = np.unique(X, axis=0)
    K = gram(spec, rows)
    chosen = []
    for _ in range(8):
        if chosen:
            Kc = K[np.ix_(chosen, chosen)]
            residual = np.diag(K) - np.einsum("ij,ji->i", K[:, chosen], np.linalg.solve(Kc, K[chosen, :]))
        else:
            residual = np.diag(K).copy()
        residual[chosen] = -np.inf
        chosen.append(int(np.argmax(residual)))
    np.testing.assert_allclose(found.Z, rows[chosen], rtol=0, atol=0)

    # the type-II hyperparameters are a stationary point of F at Z0 (their gradient vanishes)
    def negative(v):
        return -dense_bound(Z0, np.exp(v[:2]), np.exp(v[2]), np.exp(v[3]), X, y)

    v = np.log([*found.params["lengthscale"], found.params["variance"], found.noise])
    grad = scipy.optimize.approx_fprime(v, negative, 1e-6)
    assert np.max(np.abs(grad)) < 0.05, grad


@pytest.mark.slow
def test_a_fit_with_learned_inducing_inputs_reproduces_from_its_seed(problem):
    X, y = problem
    runs = [
        br.fit(
            "vfe",
            X,
            y,
            inducing_method="optimised",
            num_inducing=6,
            chains=1,
            draws=60,
            warmup=60,
            seed=4,
            progress=False,
            check_diagnostics=False,
            posterior_predictive=0,
        )
        for _ in range(2)
    ]
    Z = [np.asarray(r.constant_data["Z"].values) for r in runs]
    np.testing.assert_array_equal(Z[0], Z[1])
    assert not np.allclose(Z[0], inducing_inputs(X, y, 6, seed=4)[0])  # learned, not the k-means start
    for name in runs[0].posterior.data_vars:
        np.testing.assert_array_equal(runs[0].posterior[name].values, runs[1].posterior[name].values)
    assert all(r.posterior.attrs["bayes_rbfn_inducing"] == "optimised" for r in runs)


def test_learned_methods_refuse_a_likelihood_without_the_bound():
    X = np.linspace(0, 1, 20)[:, None]
    y = (np.sin(6 * X[:, 0]) > 0).astype(float)
    with pytest.raises(ValueError, match=r"^inducing_method: 'optimised' searches the VFE bound"):
        br.build_model("rbfn", X, y, likelihood="bernoulli", inducing_method="optimised", num_inducing=4)
    with pytest.raises(ValueError, match=r"^inducing_method: expected one of"):
        br.build_model("sor", X, y, inducing_method="random", num_inducing=4)
