"""Additive RBF networks (``gp.kernels.Additive``): both forms against dense NumPy/SciPy and each other.

* the marginal form (:class:`bayes_rbfn.SparseGP` with an ``Additive`` kernel): its log density is SciPy's
  Gaussian with the dense covariance Σ_c K_{f,u_c} K_{u_c u_c}⁻¹ K_{u_c,f} + σ²I (and FITC's and VFE's
  corrections), written per component in NumPy with the one-hot and design matrices spelled out;
* the weight-space form (:func:`bayes_rbfn.rbfn` with that kernel): f and each component's site for given
  whitened weights, written densely per block;
* the marginal log density against the weight-space likelihood with the weights integrated out by
  Gauss–Hermite quadrature;
* each component's analytic predictive (:meth:`SparseGP.component_moments`) against NUTS on the weight
  space, within 4 MCSE (``stochastic.K_MCSE``), and their sum against the whole network's predictive;
* centres over one period suffice for a periodic component; bad arguments name themselves.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import reference as ref
import scipy.stats
import stochastic
from conftest import assert_close
from numpyro import handlers
from numpyro.infer import MCMC, NUTS

import bayes_rbfn as br
from bayes_rbfn.gp import kernels as K
from bayes_rbfn.gp.conditional import component_predict, sor_predict
from bayes_rbfn.gp.inducing import periodic_centres
from bayes_rbfn.gp.woodbury_sums import sor_factor

PERIOD = 2.0
NOISE = 0.3
TREND = {"kind": "se", "lengthscale": 2.5, "variance": 0.8}
SEASON = {"kind": "periodic", "lengthscale": 0.9, "variance": 0.5, "period": PERIOD}
DOW_VARIANCE = 0.4
SLOPE_VARIANCE = 0.6


def _data(n: int = 24, seed: int = 0):
    """Columns: time, a category code in 0..4, a dense design column."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, 8.0, n))
    code = rng.integers(0, 5, n).astype(float)
    h = rng.normal(size=n)
    X = np.c_[t, code, h]
    y = np.sin(t) + 0.2 * code - 0.4 * h + NOISE * rng.normal(size=n)
    return X, y


def _parts(trend=TREND, season=SEASON):
    """{name: (kernel, Z_c)}: SE trend and periodic season on t, category effects, a design column."""
    return {
        "trend": (
            K.SquaredExponential(trend["lengthscale"], trend["variance"]).on_dims(0),
            np.linspace(0, 8, 5),
        ),
        "season": (
            K.Periodic(season["lengthscale"], season["variance"], season["period"]).on_dims(0),
            periodic_centres(4, PERIOD),
        ),
        "code": (K.Categorical(DOW_VARIANCE).on_dims(1), np.arange(5.0)),
        "slope": (K.Linear(SLOPE_VARIANCE).on_dims(2), np.ones(1)),
    }


def _dense_blocks(X, parts):
    """{name: (K_fu (N, M_c), K_uu (M_c, M_c))} from the reference formulas and explicit designs."""
    t, code, h = X[:, 0], X[:, 1], X[:, 2]
    blocks = {}
    Zt = np.asarray(parts["trend"][1])
    blocks["trend"] = (ref.gram(TREND, t, Zt), ref.gram(TREND, Zt))
    Zs = np.asarray(parts["season"][1])
    blocks["season"] = (ref.gram(SEASON, t, Zs), ref.gram(SEASON, Zs))
    onehot = (code[:, None] == np.arange(5.0)[None, :]).astype(float)
    blocks["code"] = (DOW_VARIANCE * onehot, DOW_VARIANCE * np.eye(5))
    blocks["slope"] = (SLOPE_VARIANCE * h[:, None], SLOPE_VARIANCE * np.eye(1))
    return blocks


def _dense_prior(X, parts):
    """(Q_ff, K_ff) of the additive network: Σ_c Nyström blocks, and the summed kernel's Gram matrix."""
    blocks = _dense_blocks(X, parts)
    Q = sum(Kfu @ np.linalg.solve(Kuu, Kfu.T) for Kfu, Kuu in blocks.values())
    t, code, h = X[:, 0], X[:, 1], X[:, 2]
    Kff = (
        ref.gram(TREND, t)
        + ref.gram(SEASON, t)
        + DOW_VARIANCE * (code[:, None] == code[None, :])
        + SLOPE_VARIANCE * np.outer(h, h)
    )
    return Q, Kff


# --------------------------------------------------------------------------------------------------
# The marginal form


@pytest.mark.parametrize("approx", ["sor", "fitc", "vfe"])
def test_marginal_log_density_matches_dense_gaussian(approx):
    X, y = _data()
    kernel, Z = K.additive(_parts(), 3)
    assert kernel.sizes == (5, 4, 5, 1) and Z.shape == (15, 3)
    got = br.SparseGP(kernel, X, Z, NOISE, approx=approx, mean=0.1, jitter=0.0).log_prob(jnp.asarray(y))
    Q, Kff = _dense_prior(X, _parts())
    C = Q + NOISE**2 * np.eye(len(y))
    if approx == "fitc":
        C = C + np.diag(np.diag(Kff - Q))
    want = scipy.stats.multivariate_normal(0.1 * np.ones(len(y)), C).logpdf(y)
    if approx == "vfe":
        want -= 0.5 * np.trace(Kff - Q) / NOISE**2
    assert_close(got, want, rtol=1e-9)


def test_inducing_blocks_are_block_diagonal_and_stacked():
    X, _ = _data()
    kernel, Z = K.additive(_parts(), 3)
    blocks = _dense_blocks(X, _parts())
    Kuu = np.asarray(kernel.inducing_gram(Z))
    Kuf = np.asarray(kernel.inducing_cross(Z, X))
    start = 0
    for name, (Kfu_c, Kuu_c) in blocks.items():
        rows = kernel.block(name)
        assert rows == slice(start, start + Kuu_c.shape[0])
        assert_close(Kuu[rows, rows], Kuu_c, rtol=1e-12)
        assert_close(Kuf[rows], Kfu_c.T, rtol=1e-12)
        assert np.all(Kuu[rows, :start] == 0.0) and np.all(Kuu[rows, rows.stop :] == 0.0)
        start = rows.stop
    # The kernel of the data is the sum of the components'.
    assert_close(kernel(X, X), _dense_prior(X, _parts())[1], rtol=1e-12)
    assert_close(kernel.diag(X), np.diag(_dense_prior(X, _parts())[1]), rtol=1e-12)


# --------------------------------------------------------------------------------------------------
# The weight-space form


def test_weight_space_layer_matches_dense_blocks():
    X, _ = _data()
    kernel, Z = K.additive(_parts(), 3)
    v = np.random.default_rng(3).normal(size=15)
    trace = handlers.trace(
        handlers.substitute(lambda: br.rbfn("f", kernel, X, Z, mean=0.2, jitter=0.0), data={"f_v": v})
    ).get_trace()
    total = 0.2 * np.ones(X.shape[0])
    start = 0
    for name, (Kfu_c, Kuu_c) in _dense_blocks(X, _parts()).items():
        v_c = v[start : start + Kuu_c.shape[0]]
        start += Kuu_c.shape[0]
        alpha_c = np.linalg.solve(np.linalg.cholesky(Kuu_c).T, v_c)  # α_c = L_c⁻ᵀ v_c
        part = Kfu_c @ alpha_c
        assert_close(trace[f"f_{name}"]["value"], part, rtol=1e-10, atol=1e-12)
        total = total + part
    assert_close(trace["f"]["value"], total, rtol=1e-10)


def test_marginal_equals_weight_space_with_weights_integrated_by_quadrature():
    """log ∫ N(y | f(v), σ²I) N(v | 0, I) dv over 3 whitened weights (one centre per component),
    by a 40³-node Gauss–Hermite rule on the layer's f(v), against SparseGP's log density."""
    X, y = _data(n=6, seed=1)
    parts = {
        "trend": (K.SquaredExponential(2.0, 0.7).on_dims(0), np.array([4.0])),
        "season": (K.Periodic(0.9, 0.5, PERIOD).on_dims(0), np.array([0.5])),
        "slope": (K.Linear(0.6).on_dims(2), np.ones(1)),
    }
    kernel, Z = K.additive(parts, 3)
    noise = 0.8
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)  # ∫ g(v) e^{−v²/2} dv
    weights = weights / np.sqrt(2.0 * np.pi)

    def f_of(v):
        return handlers.substitute(lambda: br.rbfn("f", kernel, X, Z, jitter=0.0), data={"f_v": v})()

    grid = jnp.asarray(list(itertools.product(nodes, repeat=3)))
    w = np.prod(list(itertools.product(weights, repeat=3)), axis=1)
    f = np.asarray(jax.vmap(f_of)(grid))
    loglik = scipy.stats.norm.logpdf(y[None, :], f, noise).sum(axis=1)
    integrated = scipy.special.logsumexp(loglik, b=w)
    marginal = br.SparseGP(kernel, X, Z, noise, jitter=0.0).log_prob(jnp.asarray(y))
    assert_close(marginal, integrated, rtol=1e-10)


# --------------------------------------------------------------------------------------------------
# Each component's analytic predictive


def test_component_means_add_up_to_the_network_predictive():
    X, y = _data()
    kernel, Z = K.additive(_parts(), 3)
    X_test = _data(n=9, seed=5)[0]
    factor = sor_factor(kernel, X, jnp.asarray(y), Z, NOISE, 0.0)
    whole = sor_predict(factor, kernel, Z, X_test, full_cov=False)
    means = [component_predict(factor, kernel, Z, X_test, name).mean for name in kernel.names]
    assert_close(sum(means), whole.mean, rtol=1e-10)
    # Each component's moments against the dense weight posterior of its block.
    blocks = _dense_blocks(X, _parts())
    Kfu = np.concatenate([b[0] for b in blocks.values()], axis=1)
    Kuu = np.zeros((15, 15))
    for name, (_, Kuu_c) in blocks.items():
        Kuu[kernel.block(name), kernel.block(name)] = Kuu_c
    mean_w, cov_w = ref.weight_posterior(Kfu, Kuu, y, NOISE)
    tests = _dense_blocks(X_test, _parts())
    for name in kernel.names:
        rows = kernel.block(name)
        Ksu = tests[name][0]
        got = component_predict(factor, kernel, Z, X_test, name, full_cov=True)
        assert_close(got.mean, Ksu @ mean_w[rows], rtol=1e-9)
        assert_close(got.cov, Ksu @ cov_w[rows, rows] @ Ksu.T, rtol=1e-8)


def _weight_space_model(X, Z, kernel, y=None):
    f = br.rbfn("f", kernel, X, Z, mean=0.0)
    numpyro.sample("y", dist.Normal(f, NOISE), obs=y)


def test_component_predictive_matches_weight_space_mcmc():
    """NUTS on the whitened weights (hyperparameters fixed); each component's draws at test inputs agree
    with the marginal form's analytic mean and variance within 4 MCSE."""
    X, y = _data(n=30, seed=2)
    kernel, Z = K.additive(_parts(), 3)
    X_test = np.array([[1.0, 0.0, 0.5], [3.3, 2.0, -1.0], [6.1, 4.0, 0.2]])
    mcmc = MCMC(
        NUTS(_weight_space_model),
        num_warmup=500,
        num_samples=1000,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(stochastic.seed(11)), X, Z, kernel, y=jnp.asarray(y))
    alpha = np.asarray(mcmc.get_samples(group_by_chain=True)["f_alpha"])  # (2, 1000, 15)
    moments = br.SparseGP(kernel, X, Z, NOISE).component_moments(
        jnp.asarray(y), dict.fromkeys(kernel.names, X_test)
    )
    for name in kernel.names:
        rows = kernel.block(name)
        Ksu = np.asarray(kernel.component(name)(Z[rows], X_test)).T
        draws = alpha[..., rows] @ Ksu.T  # (2, 1000, 3)
        analytic = moments[name]
        for j in range(X_test.shape[0]):
            stochastic.assert_within_mcse(draws[..., j], float(analytic.mean[j]), f"{name} mean at x*_{j}")
            centred = (draws[..., j] - float(analytic.mean[j])) ** 2
            stochastic.assert_within_mcse(centred, float(analytic.var[j]), f"{name} variance at x*_{j}")


# --------------------------------------------------------------------------------------------------
# Periodic components and bad input


def test_centres_over_one_period_span_every_shifted_centre():
    """k(x, z + p) = k(x, z) for a periodic kernel, so centres shifted by whole periods give the same
    network: the same log density."""
    X, y = _data()
    shifted = dict(_parts())
    kern_s, Z_s = shifted["season"]
    shifted["season"] = (kern_s, Z_s + np.array([0.0, 1.0, 3.0, 2.0]) * PERIOD)
    (kernel_a, Z_a), (kernel_b, Z_b) = K.additive(_parts(), 3), K.additive(shifted, 3)
    assert not np.allclose(Z_a, Z_b)
    a = br.SparseGP(kernel_a, X, Z_a, NOISE).log_prob(jnp.asarray(y))
    b = br.SparseGP(kernel_b, X, Z_b, NOISE).log_prob(jnp.asarray(y))
    assert_close(a, b, rtol=1e-10)
    assert_close(periodic_centres(4, PERIOD, start=1.0), [1.0, 1.5, 2.0, 2.5], rtol=1e-15)


def test_bad_arguments_name_themselves():
    kernel, Z = K.additive(_parts(), 3)
    with pytest.raises(ValueError, match="Z: has 14 rows"):
        kernel.inducing_gram(Z[:-1])
    with pytest.raises(TypeError, match="Additive kernel"):
        kernel + K.SquaredExponential()
    with pytest.raises(ValueError, match="no component 'week'"):
        kernel.block("week")
    with pytest.raises(ValueError, match=r"parts\['trend'\]: Z must have shape \(M, 1\)"):
        K.additive({"trend": (K.SquaredExponential().on_dims(0), np.zeros((3, 2)))}, 3)
    with pytest.raises(ValueError, match="sizes"):
        K.Additive({"a": K.SquaredExponential()}, [0])
    with pytest.raises(ValueError, match="M: expected a positive number"):
        periodic_centres(0, 1.0)
    with pytest.raises(ValueError, match="period"):
        periodic_centres(3, -1.0)
    with pytest.raises(ValueError, match="Additive kernel"):
        component_predict(None, K.SquaredExponential(), Z, Z, "trend")
    X, y = _data()
    with pytest.raises(ValueError, match="X_test: expected a non-empty dict"):
        br.SparseGP(kernel, X, Z, NOISE).component_moments(y, X)
