"""``SparseGP`` and ``ExactGP`` as NumPyro distributions, against dense SciPy references.

* ``log_prob`` of every ``approx`` and of ``ExactGP`` against SciPy's dense multivariate normal of the
  model's N×N covariance; VFE against Titsias's bound written densely (tests/sparse_reference.py);
* the sample mean and covariance against the dense ones, within 5 Monte-Carlo standard errors;
* ``.condition`` against conditioning the dense joint prior of (y, f*);
* ``.loo_log_prob`` against N brute-force dense refits, and :func:`loo_log_likelihood` on an InferenceData;
* ``Predictive`` shapes inside a user's model; a failed factorisation gives -inf; bad arguments;
* batches (a batched kernel, inputs of their own, a batch of values) against the dense reference per member,
  ``numpyro.plate`` over series (shared and per-series hyperparameters), ``expand`` and NumPyro's
  ``ExpandedDistribution``; per-point noise σ (N,) in ``log_prob``, ``sample``, ``sample_replicates``,
  ``condition`` and the LOO values against the dense covariance with diag(σ²); bad noise refused.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import sparse_reference as ref
import stochastic
from conftest import assert_close
from numpyro import handlers
from numpyro.infer import Predictive

from bayes_rbfn import ExactGP, SparseGP
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.infer.loo import loo_log_likelihood
from bayes_rbfn.io import arviz_compat

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
    """The fixed problem of this module: p(y_rep | y) has sd 0.34–0.40 where the marginal ``sample`` has
    1.15–1.18, so a posterior predictive check from ``sample`` compares the data with the prior."""
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
    refits at two draws), and ArviZ's PSIS-LOO sees N observations."""
    gen = np.random.default_rng(3)
    # 30 draws: ArviZ 1.x's PSIS refuses fewer than 5 tail draws (min(S/5, 3√(S/r_eff)): S ≥ 25)
    chains, draws = 2, 15
    posterior = {
        "lengthscale": np.exp(gen.normal(np.log(0.7), 0.2, (chains, draws))),
        "variance": np.exp(gen.normal(0.0, 0.2, (chains, draws))),
        "noise": np.exp(gen.normal(np.log(0.3), 0.1, (chains, draws))),
    }
    idata = arviz_compat.from_groups({"posterior": posterior})
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
        # 30 draws: ArviZ may warn about the Pareto shape; the count is the point
        warnings.simplefilter("ignore")
        assert arviz_compat.loo(idata).elpd_i.shape == (len(Y),)


def test_loo_log_likelihood_refuses_a_factorised_site():
    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, 1.0).expand([3]).to_event(1), obs=y)

    idata = arviz_compat.from_groups({"posterior": {"mu": np.zeros((1, 2))}})
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
        pytest.param(lambda: SparseGP(KERNEL, X, Z, np.ones(3)), "noise:", id="noise-wrong-length"),
        pytest.param(lambda: SparseGP(KERNEL, X, np.ones((4, 2)), NOISE), "Z:", id="Z-dimensions"),
        pytest.param(lambda: SparseGP(KERNEL, X, Z, NOISE, mean=np.ones(4)), "mean:", id="mean-shape"),
        pytest.param(lambda: SparseGP(KERNEL, X, Z, NOISE, jitter=-1e-6), "jitter:", id="jitter"),
        pytest.param(lambda: SparseGP("se", X, Z, NOISE), "kernel:", id="kernel"),
        pytest.param(lambda: ExactGP(KERNEL, np.ones((2, 0, 1)), NOISE), "X:", id="X-no-rows"),
        pytest.param(lambda: ExactGP(KERNEL, np.full((9, 1), np.nan), NOISE), "X:", id="X-nan"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# --------------------------------------------------------------------------------------------------
# Batches, plates and per-point (heteroscedastic) noise

#: One standard deviation per training point: the noise grows along the inputs.
SIGMA = np.linspace(0.15, 0.5, len(Y))
#: Three members with their own lengthscale (a batched kernel; the variance is shared) and noise.
LENGTHSCALES = np.array([0.5, 0.7, 1.0])
NOISES = np.array([0.2, 0.3, 0.4])
#: A second set of inputs, for members with inputs of their own.
X_OTHER = np.sort(np.random.default_rng(7).uniform(0.0, 3.0, len(Y)))[:, None]


def _batch_member(name: str, kernel, X_, noise, mean=0.0, Z_=Z, **kwargs):
    if name == "exact":
        return ExactGP(kernel, X_, noise, mean=mean, **kwargs)
    return SparseGP(kernel, X_, Z_, noise, approx=name, mean=mean, **kwargs)


def _dense_log_prob(name, kernel, X_, y, noise, Z_=Z):
    return ref.log_marginal(name if name == "vfe" else DENSE[name], kernel, X_, y, Z_, noise, JITTER)


#: Other inducing inputs, for members with inducing inputs of their own.
Z_OTHER = np.linspace(0.5, 2.5, len(Z))[:, None]

#: Batched arguments → (the distribution's batch shape, per member: (kernel, X, σ, Z) as NumPy).
BATCHES = {
    # kernel_batch_shape (3,): lengthscale (3,), variance shared; σ (3, 1): one per member
    "hyperparameters": (
        dict(
            kernel=SquaredExponential(lengthscale=LENGTHSCALES, variance=1.3),
            X_=X,
            noise=NOISES[:, None],
            kernel_batch_shape=(3,),
        ),
        (3,),
        lambda i: (SquaredExponential(LENGTHSCALES[i], 1.3), X, NOISES[i], Z),
    ),
    # inputs (2, N, 1) and per-point σ (2, N): several series with inputs and noise of their own
    "inputs-and-per-point-noise": (
        dict(kernel=KERNEL, X_=np.stack([X, X_OTHER]), noise=np.stack([SIGMA, SIGMA[::-1]])),
        (2,),
        lambda i: (KERNEL, [X, X_OTHER][i], [SIGMA, SIGMA[::-1]][i], Z),
    ),
    # inducing inputs (2, M, 1): the same data under two sets of centres (ExactGP: no Z, no batch)
    "inducing-inputs": (
        dict(kernel=KERNEL, X_=X, noise=NOISE, Z_=np.stack([Z, Z_OTHER])),
        (2,),
        lambda i: (KERNEL, X, NOISE, [Z, Z_OTHER][i]),
    ),
    # nothing batched: the batch comes from the value alone
    "value-only": (dict(kernel=KERNEL, X_=X, noise=SIGMA), (), lambda i: (KERNEL, X, SIGMA, Z)),
}


@pytest.mark.parametrize(
    ("name", "batch"),
    [
        pytest.param(name, batch, id=f"{name}-{batch}")
        for batch in BATCHES
        for name in [*APPROX, "exact"]
        if not (name == "exact" and "Z_" in BATCHES[batch][0])  # ExactGP has no inducing inputs
    ],
)
def test_batched_log_prob_equals_dense_reference_per_member(name, batch):
    """value (4, B, N) against a batch (B,) (or none): shape broadcast(batch_shape, (4, B)), every entry
    SciPy's dense log density of its member (VFE: Titsias's bound with Σ_i (K_ii − Q_ii)/σ_i²)."""
    kwargs, batch_shape, member = BATCHES[batch]
    d = _batch_member(name, **kwargs)
    assert d.batch_shape == batch_shape and d.event_shape == (len(Y),)
    B = batch_shape[0] if batch_shape else 3
    gen = np.random.default_rng(11)
    values = Y + 0.5 * gen.standard_normal((4, B, len(Y)))
    logp = np.asarray(d.log_prob(jnp.asarray(values)))
    assert logp.shape == (4, B)
    expected = np.array(
        [
            [_dense_log_prob(name, *member(b)[:2], values[r, b], *member(b)[2:]) for b in range(B)]
            for r in range(4)
        ]
    )
    assert_close(logp, expected)
    if batch_shape:  # one value per member
        assert_close(d.log_prob(jnp.asarray(values[0])), expected[0])


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_per_point_noise_log_prob_equals_dense_reference(name):
    """σ (N,), one per point: log N(y | m, C) with σ²I replaced by diag(σ²) (VFE: minus
    ½ Σ_i (K_ii − Q_ii)/σ_i²)."""
    spec, dense_mean = MEANS["callable"]
    value = float(_batch_member(name, KERNEL, X, SIGMA, mean=spec).log_prob(jnp.asarray(Y)))
    assert_close(value, _dense_log_prob(name, KERNEL, X, Y - dense_mean(X), SIGMA))


def test_per_point_noise_of_equal_values_is_the_scalar_noise():
    for name in APPROX:
        scalar = SparseGP(KERNEL, X, Z, NOISE, approx=name).log_prob(jnp.asarray(Y))
        per_point = SparseGP(KERNEL, X, Z, np.full(len(Y), NOISE), approx=name).log_prob(jnp.asarray(Y))
        assert_close(per_point, scalar)


@pytest.mark.parametrize("full_cov", [False, True], ids=["marginal", "full_cov"])
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_per_point_noise_condition_equals_dense_conditioning(name, full_cov):
    spec, dense_mean = MEANS["callable"]
    predictive = _batch_member(name, KERNEL, X, SIGMA, mean=spec).condition(
        jnp.asarray(Y), X_TEST, full_cov=full_cov
    )
    expected_mean, expected_cov = ref.predict(
        "sor" if name == "sor" else DENSE[name], KERNEL, X, Y - dense_mean(X), Z, SIGMA, X_TEST, JITTER
    )
    assert_close(predictive.mean, expected_mean + dense_mean(X_TEST))
    if full_cov:
        scale = float(np.max(np.diag(expected_cov)))
        assert_close(predictive.covariance_matrix, expected_cov, rtol=0, atol=1e-7, scale=scale)
    else:
        assert_close(predictive.variance, np.diag(expected_cov), rtol=1e-7)


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_per_point_noise_loo_equals_brute_force_refits(name):
    """log p(y_i | y_−i) and its CDF at y_i by conditioning the dense covariance with diag(σ²)."""
    d = _batch_member(name, KERNEL, X, SIGMA, mean=0.4)
    C = ref.prior_cov(DENSE[name], KERNEL, X, Z, SIGMA, JITTER)
    assert_close(d.loo_log_prob(jnp.asarray(Y)), ref.loo_brute_force(C, Y - 0.4), rtol=1e-7)
    assert_close(d.loo_pit(jnp.asarray(Y)), ref.loo_pit_brute_force(C, Y - 0.4), rtol=1e-7)


def _assert_moments(draws, mean, C):
    """Every mean and covariance entry within 5 standard errors: SE² = C_ii/S for means,
    (C_ii C_jj + C_ij²)/S for products."""
    S = draws.shape[0]
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(np.diag(C) / S))
    centred = draws - mean
    se_cov = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / S)
    assert np.all(np.abs(centred.T @ centred / S - C) < 5 * se_cov)


@pytest.mark.stochastic
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_batched_sample_moments_equal_the_dense_covariance_per_member(name):
    """A batch of three members (own lengthscale, own per-point σ): 20,000 draws of shape (S, 3, N); each
    member's mean and covariance within 5 standard errors of its dense values (162 checks: false alarm
    162 · 5.7e-7), and the members' draws uncorrelated."""
    noise = np.stack([SIGMA, SIGMA[::-1], np.full(len(Y), 0.3)])
    kernel = SquaredExponential(lengthscale=LENGTHSCALES, variance=1.3)
    d = _batch_member(name, kernel, X, noise, kernel_batch_shape=(3,))
    S = 20_000
    draws = np.asarray(d.sample(jax.random.PRNGKey(stochastic.seed(7)), (S,)))
    assert draws.shape == (S, 3, len(Y))
    for b in range(3):
        member = SquaredExponential(LENGTHSCALES[b], 1.3)
        _assert_moments(draws[:, b], 0.0, ref.prior_cov(DENSE[name], member, X, Z, noise[b], JITTER))
    # independent members: the correlation of two members' first coordinates has SE 1/√S
    assert abs(np.corrcoef(draws[:, 0, 0], draws[:, 1, 0])[0, 1]) < 5 / np.sqrt(S)


@pytest.mark.stochastic
@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_per_point_noise_replicate_moments_equal_the_dense_conditional(name):
    """``sample_replicates`` with σ (N,) and two rows of y: 20,000 draws of shape (S, 2, N); each row's
    mean and covariance within 5 standard errors of the dense conditional with diag(σ²) (108 checks)."""
    ys = np.stack([Y, Y[::-1]])
    S = 20_000
    d = _batch_member(name, KERNEL, X, SIGMA)
    draws = np.asarray(d.sample_replicates(jax.random.PRNGKey(stochastic.seed(8)), jnp.asarray(ys), (S,)))
    assert draws.shape == (S, 2, len(Y))
    for b in range(2):
        mean, C = ref.replicate_moments(name, KERNEL, X, ys[b], Z, SIGMA, JITTER)
        _assert_moments(draws[:, b], mean, C)


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_batched_condition_and_loo_equal_each_member_alone(name):
    """A batch (own lengthscale, own σ) with one row of y per member: moments, condition and the LOO
    values equal those of each member built on its own."""
    kernel = SquaredExponential(lengthscale=LENGTHSCALES, variance=1.3)
    d = _batch_member(name, kernel, X, NOISES[:, None], mean=0.2, kernel_batch_shape=(3,))
    ys = np.stack([Y, Y[::-1], 0.5 * Y])
    batched = d.condition(jnp.asarray(ys), X_TEST, full_cov=True)
    assert batched.batch_shape == (3,) and batched.event_shape == (len(X_TEST),)
    loo, pit = d.loo_log_prob(jnp.asarray(ys)), d.loo_pit(jnp.asarray(ys))
    assert loo.shape == pit.shape == (3, len(Y))
    for b in range(3):
        alone = _batch_member(name, SquaredExponential(LENGTHSCALES[b], 1.3), X, NOISES[b], mean=0.2)
        single = alone.condition(jnp.asarray(ys[b]), X_TEST, full_cov=True)
        assert_close(batched.mean[b], single.mean)
        assert_close(batched.covariance_matrix[b], single.covariance_matrix)
        assert_close(loo[b], alone.loo_log_prob(jnp.asarray(ys[b])))
        assert_close(pit[b], alone.loo_pit(jnp.asarray(ys[b])))


def _series_model(X, Z, Y=None, approx="fitc"):
    """Several series sharing the hyperparameters (and the inputs), one row of Y each, under a plate."""
    ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 0.5))
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 0.5))
    noise = numpyro.sample("noise", dist.LogNormal(np.log(0.3), 0.3))
    kernel = SquaredExponential(lengthscale=ell, variance=s2)
    with numpyro.plate("series", 3):
        numpyro.sample("y", SparseGP(kernel, X, Z, noise, approx=approx), obs=Y)


def _hierarchical_model(X, Z, Y=None):
    """Each series with its own lengthscale and noise (sampled under the plate): a batched kernel."""
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 0.5))
    with numpyro.plate("series", 3):
        ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 0.5))
        noise = numpyro.sample("noise", dist.LogNormal(np.log(0.3), 0.3))
        kernel = SquaredExponential(lengthscale=ell, variance=s2)
        numpyro.sample("y", SparseGP(kernel, X, Z, noise[:, None], kernel_batch_shape=(3,)), obs=Y)


@pytest.mark.parametrize("model", [_series_model, _hierarchical_model], ids=["shared", "per-series"])
def test_a_plate_over_series_scores_each_series(model):
    """Traced with Y (3, N): the site's distribution has the plate's batch shape (3,), its log_prob is
    (3,) with each series' dense log density, and the model's log joint sums them; ``Predictive`` draws
    (draws, 3, N), and the replicates and LOO values of the site come per series."""
    from numpyro.infer.util import log_density

    Ys = np.stack([Y, Y[::-1], 0.5 * Y])
    trace = handlers.trace(handlers.seed(model, 0)).get_trace(jnp.asarray(X), jnp.asarray(Z), jnp.asarray(Ys))
    site = trace["y"]
    assert site["fn"].batch_shape == (3,)
    logp = np.asarray(site["fn"].log_prob(site["value"]))
    assert logp.shape == (3,)
    ell, noise = (
        np.broadcast_to(trace["lengthscale"]["value"], 3),
        np.broadcast_to(trace["noise"]["value"], 3),
    )
    s2 = trace["variance"]["value"]
    method = "fitc" if model is _series_model else "sor"
    expected = [
        ref.log_marginal(method, SquaredExponential(ell[b], s2), X, Ys[b], Z, noise[b], JITTER)
        for b in range(3)
    ]
    assert_close(logp, expected)
    params = {k: trace[k]["value"] for k in ("lengthscale", "variance", "noise")}
    joint, _ = log_density(model, (jnp.asarray(X), jnp.asarray(Z), jnp.asarray(Ys)), {}, params)
    priors = sum(float(jnp.sum(trace[k]["fn"].log_prob(params[k]))) for k in params)
    assert_close(float(joint), priors + sum(expected))
    draws = Predictive(model, num_samples=5)(jax.random.PRNGKey(0), jnp.asarray(X), jnp.asarray(Z))["y"]
    assert draws.shape == (5, 3, len(Y))
    key = jax.random.PRNGKey(1)
    assert site["fn"].sample_replicates(key, site["value"], (4,)).shape == (4, 3, len(Y))
    assert site["fn"].loo_log_prob(site["value"]).shape == (3, len(Y))


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_expanded_distribution_samples_and_scores_each_member(name):
    """NumPyro's ``ExpandedDistribution`` over a single member and the distribution's own ``expand``: the
    same log densities per row, draws of shape (S, 2, 3, N), independent between members."""
    d = _batch_member(name, KERNEL, X, SIGMA)
    rows = Y + 0.3 * np.random.default_rng(2).standard_normal((2, 3, len(Y)))
    expected = np.array([[float(d.log_prob(jnp.asarray(r))) for r in row] for row in rows])
    for expanded in (dist.ExpandedDistribution(d, (2, 3)), d.expand((2, 3)), d.expand((3,)).expand((2, 3))):
        assert expanded.batch_shape == (2, 3)
        assert_close(expanded.log_prob(jnp.asarray(rows)), expected)
        draws = np.asarray(expanded.sample(jax.random.PRNGKey(3), (5,)))
        assert draws.shape == (5, 2, 3, len(Y)) and np.all(np.isfinite(draws))
        assert len(np.unique(draws[0, :, :, 0])) == 6  # every member draws its own
    with pytest.raises(ValueError):
        d.expand((2,)).expand((3,))


BAD_NOISE = {
    "negative": -1.0,
    "zero": 0.0,
    "nan": np.nan,
    "inf": np.inf,
    "string": "0.3",
    "one-bad-point": np.where(np.arange(len(Y)) == 4, -0.1, 0.3),
    "bool": True,
}


@pytest.mark.parametrize("noise", BAD_NOISE.values(), ids=list(BAD_NOISE))
@pytest.mark.parametrize("name", ["sor", "exact"])
def test_bad_noise_raises_value_error_naming_noise(name, noise):
    """σ must be a finite number > 0 (a negative σ would otherwise score as |σ|)."""
    with pytest.raises(ValueError, match=r"^noise:"):
        _batch_member(name, KERNEL, X, noise)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        pytest.param(
            lambda: SparseGP(SquaredExponential(np.array([0.5, 0.7]), 1.0), X, Z, NOISE),
            "kernel_batch_shape",
            id="batched-lengthscale-undeclared",
        ),
        pytest.param(
            lambda: SparseGP(SquaredExponential(0.7, np.ones(4)), X, Z, NOISE),
            "kernel:",
            id="batched-variance-undeclared",
        ),
        pytest.param(
            lambda: SparseGP(SquaredExponential(np.ones(2), 1.0), X, Z, NOISE, kernel_batch_shape=(3,)),
            "kernel_batch_shape:",
            id="wrong-kernel-batch",
        ),
        pytest.param(
            lambda: SparseGP(KERNEL, X, Z, np.ones((2, 1)), mean=np.zeros((3, len(Y)))),
            "batch shapes do not broadcast",
            id="batches-disagree",
        ),
        pytest.param(lambda: SparseGP(KERNEL, X, Z, NOISE).log_prob(jnp.zeros((2, 4))), "value:", id="value"),
    ],
)
def test_bad_batches_raise_value_error_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("name", [*APPROX, "exact"])
def test_gradient_over_a_batch_of_values_is_the_sum_of_the_members_gradients(name):
    """∂/∂θ Σ_s log p(y_s | θ) for three rows of y sharing the kernel, the inputs and σ (what a plate over
    series computes) against the sum of the single-member gradients: the streamed pass's hand-written
    reverse pass, mapped over y alone, once gave the kernel's gradient 3 times too large."""
    Ys = jnp.asarray(np.stack([Y, Y[::-1], 0.5 * Y]))

    def batched(theta):
        kernel = SquaredExponential(lengthscale=theta[0], variance=theta[1])
        return jnp.sum(_batch_member(name, kernel, X, theta[2]).expand((3,)).log_prob(Ys))

    def summed(theta):
        d = _batch_member(name, SquaredExponential(lengthscale=theta[0], variance=theta[1]), X, theta[2])
        return sum(d.log_prob(Ys[s]) for s in range(3))

    theta = jnp.array([0.7, 1.3, NOISE])
    assert_close(jax.grad(batched)(theta), jax.grad(summed)(theta), rtol=1e-7)
    assert_close(jax.jit(jax.grad(batched))(theta), jax.grad(summed)(theta), rtol=1e-7)


# --------------------------------------------------------------------------------------------------
# Wrong shapes of the data and the test inputs; float32 inputs under x64

#: (what is called with a wrong shape, the argument the message must name, and the shapes it must give).
WRONG_SHAPES = {
    "log_prob-value-too-long": (lambda d: d.log_prob(jnp.zeros(len(Y) + 1)), r"value: .*\(9,\).*\(10,\)"),
    "log_prob-value-too-short": (lambda d: d.log_prob(jnp.zeros(3)), r"value: .*\(9,\).*\(3,\)"),
    "log_prob-batch-of-wrong-length": (lambda d: d.log_prob(jnp.zeros((2, 4))), r"value: .*\(2, 4\)"),
    "condition-y-wrong-length": (lambda d: d.condition(Y[:5], X_TEST), r"y: .*\(9,\).*\(5,\)"),
    "condition-X_test-wrong-columns": (
        lambda d: d.condition(Y, np.ones((3, 2))),
        r"X_test: has 2 input dimension\(s\) but X has 1",
    ),
    "moments-y-wrong-length": (lambda d: d.moments(np.append(Y, 0.0), X_TEST), r"y: .*\(10,\)"),
    "sample_replicates-y-wrong-length": (
        lambda d: d.sample_replicates(jax.random.PRNGKey(0), Y[:4]),
        r"y: .*\(4,\)",
    ),
    "loo_log_prob-y-wrong-length": (lambda d: d.loo_log_prob(Y[:8]), r"y: .*\(8,\)"),
}


@pytest.mark.parametrize("case", WRONG_SHAPES, ids=list(WRONG_SHAPES))
@pytest.mark.parametrize("name", ["sor", "exact"])
def test_wrong_shapes_of_data_raise_value_error_naming_them(name, case):
    """A value, y or X_test that does not fit the N rows (or the D columns) of X: a ValueError naming the
    argument and giving the shapes, before any JAX broadcasting."""
    call, match = WRONG_SHAPES[case]
    with pytest.raises(ValueError, match=match):
        call(_distribution(name))


@pytest.mark.parametrize("approx", ["sor", "fitc"])
def test_float32_inputs_with_python_float_hyperparameters_under_x64(approx):
    """float32 X and Z, float64 y, and a kernel of Python floats (float64 under x64), or of float64
    values: the mix conditional.sor and ExactGP accept. The log density, its gradient and the predictive
    agree with those of float64 inputs to float32's tolerance."""
    X32, Z32 = X.astype(np.float32), Z.astype(np.float32)

    def log_prob(ell, X_, Z_):
        return SparseGP(SquaredExponential(ell, 1.3), X_, Z_, NOISE, approx=approx).log_prob(Y)

    for ell in (0.7, np.float64(0.7)):
        assert_close(float(log_prob(ell, X32, Z32)), float(log_prob(ell, X, Z)), np.float32)
    assert_close(jax.grad(log_prob)(0.7, X32, Z32), jax.grad(log_prob)(0.7, X, Z), np.float32)
    m32 = SparseGP(KERNEL, X32, Z32, NOISE, approx=approx).moments(Y, X_TEST)
    assert_close(m32.mean, _distribution(approx).moments(Y, X_TEST).mean, np.float32)
