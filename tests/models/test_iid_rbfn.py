"""The RBF network with independent weights (``rbfn_iid``) against dense NumPy/SciPy.

With Φ = K_fu(ℓ) the unit-variance SE Gram matrix at the centres Z (tests/reference.py's formula) and
C = s² ΦΦᵀ + σ² I: the log density is SciPy's N(y | m, C) (and the NumPyro model adds the priors), the
predictive of f* = Φ* w is the dense Gaussian conditional, the stored LOO values are dense refits, and a
failed factorisation gives -inf.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference as ref
import scipy.stats
from conftest import assert_close
from numpyro.infer.util import log_density as numpyro_log_density

import bayes_rbfn as br
from bayes_rbfn.gp.kernels import Linear, SquaredExponential
from bayes_rbfn.models import get_model, iid_rbfn

PARAMS = [(0.7, 1.5, 0.2), (2.0, 0.3, 0.05)]
IDS = [f"l{a}-s2{b}-sigma{c}" for a, b, c in PARAMS]


@pytest.fixture(scope="module")
def problem():
    gen = np.random.default_rng(5)
    X = np.sort(gen.uniform(0.0, 6.0, 45))[:, None]
    y = np.cos(X[:, 0]) + 0.2 * gen.standard_normal(45)
    Z = np.linspace(0.3, 5.7, 9)[:, None]
    X_test = np.append(np.linspace(-2.0, 8.0, 13), 40.0)[:, None]  # the last far from every centre
    gm = br.build_model("rbfn_iid", X, y, Z=Z)
    return X, y, Z, X_test, gm.data, gm.config


def _dense(X, Z, lengthscale):
    return ref.gram({"kind": "se", "lengthscale": lengthscale, "variance": 1.0}, X, Z)


def _params(lengthscale, variance, noise):
    return {
        k: jnp.asarray(v)
        for k, v in zip(("lengthscale", "variance", "noise"), (lengthscale, variance, noise), strict=True)
    }


@pytest.mark.parametrize(("lengthscale", "variance", "noise"), PARAMS, ids=IDS)
def test_log_density_is_scipy_mvn_logpdf(problem, lengthscale, variance, noise):
    X, y, Z, _, data, config = problem
    Phi = _dense(X, Z, lengthscale)
    C = variance * Phi @ Phi.T + noise**2 * np.eye(len(y))
    expected = ref.logpdf(y - np.mean(y), C)
    params = _params(lengthscale, variance, noise)
    assert_close(iid_rbfn.log_density(params, data, config), expected, scale=abs(expected))
    joint, _ = numpyro_log_density(iid_rbfn.model, (data, config), {}, params)
    priors = sum(float(config.priors[k].log_prob(params[k])) for k in params)
    assert_close(joint, expected + priors, scale=abs(expected))


@pytest.mark.parametrize(("lengthscale", "variance", "noise"), PARAMS, ids=IDS)
def test_predict_is_the_dense_conditional(problem, lengthscale, variance, noise):
    X, y, Z, X_test, data, config = problem
    Phi, Phi_test = _dense(X, Z, lengthscale), _dense(X_test, Z, lengthscale)
    C = variance * Phi @ Phi.T + noise**2 * np.eye(len(y))
    mean, cov = ref.condition(
        C, variance * Phi @ Phi_test.T, variance * Phi_test @ Phi_test.T, y - np.mean(y)
    )
    got_mean, got_var = jax.jit(iid_rbfn.predict, static_argnames="config")(
        _params(lengthscale, variance, noise), data, config, jnp.asarray(X_test)
    )
    assert_close(got_mean, mean + np.mean(y), scale=np.sqrt(variance))
    assert_close(got_var, np.diag(cov), scale=variance)
    # far from every centre the prior variance s² Σ_j φ_j(x)² itself vanishes: no GP's stationarity
    assert float(got_var[-1]) < 1e-6 * variance


@pytest.mark.parametrize(("lengthscale", "variance", "noise"), PARAMS, ids=IDS)
def test_log_likelihood_is_dense_leave_one_out(problem, lengthscale, variance, noise):
    X, y, Z, _, data, config = problem
    Phi = _dense(X, Z, lengthscale)
    C = variance * Phi @ Phi.T + noise**2 * np.eye(len(y))
    loo = jax.jit(iid_rbfn.log_likelihood, static_argnames="config")(
        _params(lengthscale, variance, noise), data, config
    )
    t = y - np.mean(y)
    for i in range(0, len(y), 6):
        rest = np.delete(np.arange(len(y)), i)
        m, v = ref.condition(C[np.ix_(rest, rest)], C[rest, i : i + 1], C[i : i + 1, i : i + 1], t[rest])
        expected = scipy.stats.norm.logpdf(t[i], loc=m[0], scale=np.sqrt(v[0, 0]))
        assert_close(loo[i], expected, scale=abs(expected), rtol=1e-7)


def test_log_density_is_neg_inf_not_nan_on_failure(problem):
    _, _, _, _, data, config = problem
    assert float(iid_rbfn.log_density(_params(1.0, jnp.nan, 0.1), data, config)) == -np.inf


def test_registered_by_its_module():
    spec = get_model("rbfn_iid")
    assert spec.uses_inducing and spec.family is None and spec.generative
    X = np.linspace(0.0, 1.0, 10)
    gm = br.build_model(
        "rbfn_iid", X, np.sin(X), kernel=Linear(0.5) + SquaredExponential(0.3), num_inducing=4
    )
    with pytest.raises(ValueError, match="'variance'"):
        iid_rbfn.log_density({"noise": jnp.asarray(0.1)}, gm.data, gm.config)
