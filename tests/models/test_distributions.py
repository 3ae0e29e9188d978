"""``SparseGP`` and ``ExactGP`` as NumPyro distributions, against dense SciPy references.

* ``log_prob`` of every ``approx`` and of ``ExactGP`` against SciPy's dense multivariate normal of the
  model's N×N covariance; VFE against Titsias's bound written densely (tests/sparse_reference.py);
* the sample mean and covariance against the dense ones, within 5 Monte-Carlo standard errors;
* ``.condition`` against conditioning the dense joint prior of (y, f*);
* ``.loo_log_prob`` against N brute-force dense refits, and :func:`loo_log_likelihood` on an InferenceData;
* ``Predictive`` shapes inside a user's model; a failed factorisation gives -inf; bad arguments.
"""

from __future__ import annotations

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import sparse_reference as ref
import stochastic
from conftest import assert_close
from numpyro.infer import Predictive

from bayes_rbfn import ExactGP, SparseGP
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.models.distributions import loo_log_likelihood

JITTER = 1e-8  # the float64 jitter policy (bayes_rbfn.gp.linalg.JITTER)
APPROX = ("sor", "dtc", "fitc", "vfe")
#: The dense covariance each approximation puts on y (VFE: DTC's, see the module under test).
DENSE = {"sor": "sor", "dtc": "dtc", "fitc": "fitc", "vfe": "dtc", "exact": "exact"}

_gen = np.random.default_rng(20261123)  # a fixed, well-conditioned problem (not a stochastic check)
X = np.sort(_gen.uniform(0.0, 3.0, 9))[:, None]
Z = np.linspace(0.2, 2.8, 4)[:, None]
Y = np.sin(2.0 * X[:, 0]) + 0.1 * _gen.standard_normal(9)
X_TEST = np.array([[-0.5], [1.3], [4.0]])
NOISE = 0.3
KERNEL = SquaredExponential(lengthscale=0.7, variance=1.3)

MEANS = {
    "zero": (0.0, lambda A: np.zeros(len(A))),
    "number": (0.4, lambda A: np.full(len(A), 0.4)),
    "callable": (lambda A: 0.5 * A[:, 0] - 0.2, lambda A: 0.5 * np.asarray(A)[:, 0] - 0.2),
}


def _distribution(name: str, mean=0.0):
    if name == "exact":
        return ExactGP(KERNEL, X, NOISE, mean=mean)
    return SparseGP(KERNEL, X, Z, NOISE, approx=name, mean=mean)


def _dense_cov(name: str) -> np.ndarray:
    return ref.prior_cov(DENSE[name], KERNEL, X, Z, NOISE, JITTER)


@pytest.mark.parametrize("mean", MEANS, ids=list(MEANS))
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_log_prob_equals_dense_reference(name, mean):
    """log N(y | m, C) with the model's dense C by SciPy; VFE: minus the dense trace term."""
    spec, dense_mean = MEANS[mean]
    value = float(_distribution(name, spec).log_prob(jnp.asarray(Y)))
    method = "vfe" if name == "vfe" else DENSE[name]
    expected = ref.log_marginal(method, KERNEL, X, Y - dense_mean(X), Z, NOISE, JITTER)
    assert_close(value, expected)


def test_log_prob_with_an_array_mean():
    m = np.linspace(-0.3, 0.3, len(Y))
    value = float(SparseGP(KERNEL, X, Z, NOISE, approx="fitc", mean=m).log_prob(jnp.asarray(Y)))
    assert_close(value, ref.log_marginal("fitc", KERNEL, X, Y - m, Z, NOISE, JITTER))


def test_vfe_is_below_the_exact_marginal():
    """Titsias's bound is a lower bound on the exact log marginal likelihood for any Z."""
    vfe = float(_distribution("vfe").log_prob(jnp.asarray(Y)))
    exact = float(_distribution("exact").log_prob(jnp.asarray(Y)))
    assert vfe < exact


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_log_prob_is_minus_inf_not_nan_where_the_factorisation_fails(name):
    """Coincident inputs, variance 1 and σ = 1e-9: the 2×2 block [[1, 1], [1, 1]] of K_ff (or, for the
    sparse models, coincident inducing inputs with no jitter) has a zero pivot in float64."""
    kernel = SquaredExponential(lengthscale=0.5, variance=1.0)
    Xc = np.array([[0.0], [0.0], [1.0]])
    if name == "exact":
        d = ExactGP(kernel, Xc, 1e-9)
    else:
        d = SparseGP(kernel, Xc, np.array([[0.0], [0.0]]), 0.1, approx=name, jitter=1e-300)
    value = float(jax.jit(d.log_prob)(jnp.array([0.1, 0.1, 0.5])))
    assert value == -np.inf


@pytest.mark.stochastic
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_sample_moments_equal_the_dense_covariance(name):
    """20,000 draws: every mean and covariance entry within 5 standard errors of the dense value (54
    checks: false alarm 54 · 5.7e-7), with SE² = C_ii/S for means, (C_ii C_jj + C_ij²)/S for products."""
    mean_spec, dense_mean = MEANS["callable"]
    S = 20_000
    draws = np.asarray(_distribution(name, mean_spec).sample(jax.random.PRNGKey(stochastic.seed(5)), (S,)))
    assert draws.shape == (S, len(Y))
    C = _dense_cov(name)
    m = dense_mean(X)
    se_mean = np.sqrt(np.diag(C) / S)
    assert np.all(np.abs(draws.mean(0) - m) < 5 * se_mean)
    centred = draws - m
    empirical = centred.T @ centred / S
    se_cov = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / S)
    assert np.all(np.abs(empirical - C) < 5 * se_cov)


@pytest.mark.stochastic
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_replicate_moments_equal_the_dense_conditional(name):
    """``sample_replicates``: 20,000 draws of y_rep | y; every mean and covariance entry within 5 standard
    errors of the dense conditional's (sparse_reference.replicate_moments; 54 checks: false alarm
    54 · 5.7e-7), SE² = C_ii/S for means, (C_ii C_jj + C_ij²)/S for products."""
    mean_spec, dense_mean = MEANS["callable"]
    S = 20_000
    key = jax.random.PRNGKey(stochastic.seed(6))
    draws = np.asarray(_distribution(name, mean_spec).sample_replicates(key, jnp.asarray(Y), (S,)))
    assert draws.shape == (S, len(Y))
    m = dense_mean(X)
    mean, C = ref.replicate_moments(name, KERNEL, X, Y - m, Z, NOISE, JITTER)
    se_mean = np.sqrt(np.diag(C) / S)
    assert np.all(np.abs(draws.mean(0) - m - mean) < 5 * se_mean)
    centred = draws - m - mean
    empirical = centred.T @ centred / S
    se_cov = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / S)
    assert np.all(np.abs(empirical - C) < 5 * se_cov)


def test_replicates_are_narrower_than_the_marginal():
    """The fixed problem of this module: p(y_rep | y) has sd 0.32–0.39 where the marginal ``sample`` has
    1.1–1.2, so a posterior predictive check from ``sample`` compares the data with the prior."""
    _, C = ref.replicate_moments("sor", KERNEL, X, Y, Z, NOISE, JITTER)
    marginal = _dense_cov("sor")
    draws = np.asarray(_distribution("sor").sample_replicates(jax.random.PRNGKey(0), jnp.asarray(Y), (4000,)))
    sd = draws.std(0)
    # 4,000 draws: the sd estimate is within 5 % of the truth at every point (SE ≈ 1.1 %).
    np.testing.assert_allclose(sd, np.sqrt(np.diag(C)), rtol=0.05)
    assert np.all(np.sqrt(np.diag(marginal)) > 2 * sd)


@pytest.mark.parametrize("full_cov", [False, True], ids=["marginal", "full_cov"])
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_condition_equals_dense_conditioning(name, full_cov):
    """The latent predictive at X_TEST from the dense joint prior of (y, f*), plus the mean function."""
    spec, dense_mean = MEANS["callable"]
    predictive = _distribution(name, spec).condition(jnp.asarray(Y), X_TEST, full_cov=full_cov)
    expected_mean, expected_cov = ref.predict(
        "sor" if name == "sor" else DENSE[name], KERNEL, X, Y - dense_mean(X), Z, NOISE, X_TEST, JITTER
    )
    expected_mean = expected_mean + dense_mean(X_TEST)
    assert predictive.event_shape == (len(X_TEST),)
    assert_close(predictive.mean, expected_mean)
    if full_cov:
        assert isinstance(predictive, dist.MultivariateNormal)
        # the package's jitter policy on the Cholesky of the (for SoR, rank ≤ M) covariance: 1e-8 relative
        scale = float(np.max(np.diag(expected_cov)))
        assert_close(predictive.covariance_matrix, expected_cov, rtol=0, atol=1e-7, scale=scale)
    else:
        assert_close(predictive.variance, np.diag(expected_cov), rtol=1e-7)


def test_condition_with_an_array_mean_needs_mean_test():
    m = np.full(len(Y), 0.2)
    d = SparseGP(KERNEL, X, Z, NOISE, mean=m)
    with pytest.raises(ValueError, match="mean_test"):
        d.condition(Y, X_TEST)
    given = d.condition(Y, X_TEST, mean_test=np.full(len(X_TEST), 0.2))
    expected_mean, _ = ref.predict("sor", KERNEL, X, Y - m, Z, NOISE, X_TEST, JITTER)
    assert_close(given.mean, expected_mean + 0.2)


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_loo_log_prob_equals_brute_force_refits(name):
    """log p(y_i | y_−i) by conditioning the dense N×N covariance on the other N − 1 targets."""
    spec, dense_mean = MEANS["number"]
    loo = _distribution(name, spec).loo_log_prob(jnp.asarray(Y))
    assert_close(loo, ref.loo_brute_force(_dense_cov(name), Y - dense_mean(X)), rtol=1e-7)


def _user_model(X, Z, y=None):
    """A model a user writes: their own priors, the SparseGP as the observed site."""
    ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 0.5))
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 0.5))
    noise = numpyro.sample("noise", dist.LogNormal(np.log(0.3), 0.3))
    kernel = SquaredExponential(lengthscale=ell, variance=s2)
    numpyro.sample("y", SparseGP(kernel, X, Z, noise, approx="fitc"), obs=y)


def test_loo_log_likelihood_fills_the_log_likelihood_group():
    """For fake posterior draws: log_likelihood["y"] holds each draw's LOO conditionals (against dense
    refits at two draws), and az.loo sees N observations."""
    gen = np.random.default_rng(3)
    chains, draws = 2, 6
    posterior = {
        "lengthscale": np.exp(gen.normal(np.log(0.7), 0.2, (chains, draws))),
        "variance": np.exp(gen.normal(0.0, 0.2, (chains, draws))),
        "noise": np.exp(gen.normal(np.log(0.3), 0.1, (chains, draws))),
    }
    idata = az.from_dict(posterior=posterior)
    loo_log_likelihood(idata, _user_model, jnp.asarray(X), jnp.asarray(Z), y=jnp.asarray(Y), batch_size=5)
    values = idata.log_likelihood["y"].values
    assert values.shape == (chains, draws, len(Y))
    for c, d in [(0, 0), (1, 4)]:
        kernel = SquaredExponential(
            lengthscale=posterior["lengthscale"][c, d], variance=posterior["variance"][c, d]
        )
        C = ref.prior_cov("fitc", kernel, X, Z, posterior["noise"][c, d], JITTER)
        assert_close(values[c, d], ref.loo_brute_force(C, Y), rtol=1e-7)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # 12 draws: ArviZ may warn about the Pareto shape; the count is the point
        assert az.loo(idata, pointwise=True).loo_i.shape == (len(Y),)


def test_loo_log_likelihood_refuses_a_factorised_site():
    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, 1.0).expand([3]).to_event(1), obs=y)

    idata = az.from_dict(posterior={"mu": np.zeros((1, 2))})
    with pytest.raises(ValueError, match="site: 'y' is a"):
        loo_log_likelihood(idata, model, y=jnp.zeros(3))


def test_predictive_simulates_y_from_prior_and_posterior():
    """Predictive on the user's model: prior draws of y (N,) per sample; and with posterior samples."""
    prior = Predictive(_user_model, num_samples=7)(jax.random.PRNGKey(0), jnp.asarray(X), jnp.asarray(Z))
    assert prior["y"].shape == (7, len(Y)) and np.all(np.isfinite(prior["y"]))
    samples = {k: prior[k] for k in ("lengthscale", "variance", "noise")}
    post = Predictive(_user_model, posterior_samples=samples)(
        jax.random.PRNGKey(1), jnp.asarray(X), jnp.asarray(Z)
    )
    assert post["y"].shape == (7, len(Y))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        pytest.param(lambda: SparseGP(KERNEL, X, Z, NOISE, approx="nystrom"), "approx:", id="approx"),
        pytest.param(lambda: SparseGP(KERNEL, X, Z, np.ones(3)), "noise:", id="noise-not-scalar"),
        pytest.param(lambda: SparseGP(KERNEL, X, np.ones((4, 2)), NOISE), "Z:", id="Z-dimensions"),
        pytest.param(lambda: SparseGP(KERNEL, X, Z, NOISE, mean=np.ones(4)), "mean:", id="mean-shape"),
        pytest.param(lambda: SparseGP(KERNEL, X, Z, NOISE, jitter=-1e-6), "jitter:", id="jitter"),
        pytest.param(lambda: SparseGP("se", X, Z, NOISE), "kernel:", id="kernel"),
        pytest.param(lambda: ExactGP(KERNEL, np.ones((2, 2, 2)), NOISE), "X:", id="X-shape"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()
