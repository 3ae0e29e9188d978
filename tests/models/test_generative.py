"""Every model of the collection is generative: Predictive simulates y from its prior and posterior.

What is proved here:

* shapes — ``numpyro.infer.Predictive`` on :func:`bayes_rbfn.build_model`'s model returns y (and every
  parameter) for the prior and for given posterior draws, for every model and every likelihood;
* the likelihoods — the prior predictive moments of y under the RBFN layer with pinned hyperparameters
  equal their closed forms (f ~ N(c, Q_ff) exactly, so E[exp f] is log-normal), within 4 Monte-Carlo
  standard errors of independent draws; Bernoulli's E[logistic f] by Gauss–Hermite quadrature in NumPy;
* :func:`bayes_rbfn.prior_predictive` returns the groups ArviZ's prior predictive check plot needs
  (``az.plot_ppc(group="prior")`` on ArviZ 0.x, ``az.plot_ppc_dist(group="prior_predictive")`` on 1.x);
* the pointwise log-likelihood of a factorised likelihood is the plain log density (SciPy) at each draw.
"""

from __future__ import annotations

import warnings

import arviz as az
import jax
import matplotlib
import numpy as np
import pytest
import reference as ref
import scipy.stats
from conftest import assert_close
from numpyro.infer import Predictive
from stochastic import K_MCSE, record, seed

import bayes_rbfn as br
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.models.likelihoods import LIKELIHOODS

matplotlib.use("Agg")

JITTER = 1e-8  # the float64 jitter policy, applied explicitly in the references
N, M = 12, 5
X = np.linspace(0.0, 1.0, N)
Z = np.linspace(0.05, 0.95, M)
Y = np.sin(5 * X) + 0.1 * np.cos(17 * X)
COUNTS = np.array([0, 1, 3, 2, 0, 5, 4, 1, 0, 2, 6, 3], dtype=float)
LABELS = (COUNTS > 1.5).astype(float)
#: Data of each likelihood's kind, by its link.
DATA_BY_LINK = {"identity": Y, "log": COUNTS, "logit": LABELS}
DATA = {name: DATA_BY_LINK[lik.link] for name, lik in LIKELIHOODS.items()}
CASES = [(m, "gaussian") for m in br.models.available_models()] + [
    ("rbfn", lik) for lik in LIKELIHOODS if lik != "gaussian"
]


def _options(model: str) -> dict:
    if model == "grouped":
        return {"group": np.arange(N) % 2, "Z": Z}
    return {} if model == "exact" else {"Z": Z}


@pytest.mark.parametrize("model, likelihood", CASES, ids=[f"{m}-{lik}" for m, lik in CASES])
def test_predictive_simulates_y_from_prior_and_posterior(model, likelihood):
    """Prior: every parameter and y, (draws, N); posterior: y at given draws of the parameters."""
    gm = br.build_model(model, X, DATA[likelihood], likelihood=likelihood, **_options(model))
    key = jax.random.PRNGKey(seed(0))
    prior = Predictive(gm.model, num_samples=6)(key, *gm.prior_args)
    y_shape = np.shape(gm.data["y"])
    assert prior["y"].shape == (6, *y_shape)
    assert np.all(np.isfinite(prior["y"]))
    if likelihood in ("poisson", "negative_binomial"):
        assert np.all(prior["y"] >= 0) and np.all(prior["y"] == np.round(prior["y"]))
    if likelihood == "bernoulli":
        assert set(np.unique(prior["y"])) <= {0, 1}
    latent = {k: v for k, v in prior.items() if k != "y"}
    assert latent, "the model has parameters to sample"
    posterior = Predictive(gm.model, posterior_samples=latent, return_sites=["y"])(key, *gm.prior_args)
    assert posterior["y"].shape == (6, *y_shape)


# --------------------------------------------------------------------------------------------------
# Prior predictive moments of the RBFN layer under each likelihood, against closed forms

KERNEL = {"kind": "se", "lengthscale": 0.3, "variance": 0.5}
OFFSET = 0.7
DRAWS = 20_000


def _prior_moments_case(likelihood: str, extra: dict) -> tuple[np.ndarray, np.ndarray]:
    """(draws of y (DRAWS, N), diag Q_ff) with every hyperparameter pinned."""
    fixed = {"lengthscale": KERNEL["lengthscale"], "variance": KERNEL["variance"], **extra}
    gm = br.build_model(
        "rbfn", X, DATA[likelihood], likelihood=likelihood, Z=Z, fixed=fixed, mean=OFFSET, jitter=JITTER
    )
    y = np.asarray(Predictive(gm.model, num_samples=DRAWS)(jax.random.PRNGKey(seed(1)), *gm.prior_args)["y"])
    Kfu, Kuu = ref.gram(KERNEL, X, Z), ref.jittered(ref.gram(KERNEL, Z), JITTER)
    return y, np.diag(ref.nystrom(Kfu, Kuu, Kfu))


def _gauss_hermite_logistic(mean: np.ndarray, var: np.ndarray, n: int = 80) -> np.ndarray:
    """E[logistic(f)] for f ~ N(mean, var), by Gauss–Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(n)
    f = mean[:, None] + np.sqrt(var)[:, None] * nodes[None, :]
    return (1.0 / (1.0 + np.exp(-f))) @ weights / np.sqrt(2.0 * np.pi)


PRIOR_CASES = {
    # likelihood: (pinned extra parameters, E[y] and Var[y] from diag Q)
    "gaussian": ({"noise": 0.3}, lambda q: (OFFSET + 0 * q, q + 0.09)),
    "student_t": ({"noise": 0.3, "df": 5.0}, lambda q: (OFFSET + 0 * q, q + 0.09 * 5.0 / 3.0)),
    "laplace": ({"noise": 0.3}, lambda q: (OFFSET + 0 * q, q + 2 * 0.09)),
    "poisson": (
        {},
        lambda q: (np.exp(OFFSET + q / 2), np.exp(OFFSET + q / 2) + np.expm1(q) * np.exp(2 * OFFSET + q)),
    ),
    "negative_binomial": (
        {"concentration": 4.0},
        lambda q: (
            np.exp(OFFSET + q / 2),
            np.exp(OFFSET + q / 2) + np.exp(2 * OFFSET + 2 * q) * (1 + 1 / 4.0) - np.exp(2 * OFFSET + q),
        ),
    ),
    "bernoulli": ({}, None),
}


@pytest.mark.stochastic
@pytest.mark.parametrize("likelihood", list(PRIOR_CASES))
def test_prior_predictive_moments_match_closed_forms(likelihood):
    """With f = c + K_fu α, α ~ N(0, K_uu⁻¹): f_i ~ N(c, Q_ii), so E[y_i] and Var[y_i] are known in closed
    form (log-normal moments for the log link; quadrature for Bernoulli). Each of the N means within 4
    MCSE of independent draws (sd/√n)."""
    extra, moments = PRIOR_CASES[likelihood]
    y, q = _prior_moments_case(likelihood, extra)
    if moments is None:
        mean = _gauss_hermite_logistic(OFFSET + 0 * q, q)
        var = mean * (1 - mean)
    else:
        mean, var = moments(q)
    se = np.sqrt(var / DRAWS)
    z = np.abs(y.mean(axis=0) - mean) / se
    record("mcse", what=f"prior predictive mean, {likelihood}", z=float(z.max()))
    assert np.all(z <= K_MCSE), f"{likelihood}: prior predictive means off by up to {z.max():.2f} MCSE"
    if likelihood != "student_t":  # ν = 5: the sample variance has a heavy-tailed law of its own
        # The variance: the sample variance's SE from the fourth central moment of the draws.
        centred = y - y.mean(axis=0)
        se_var = np.sqrt(np.maximum(np.mean(centred**4, axis=0) - y.var(axis=0) ** 2, 0) / DRAWS)
        z_var = np.abs(y.var(axis=0) - var) / se_var
        assert np.all(z_var <= K_MCSE), f"{likelihood}: prior predictive variances off by {z_var.max():.2f}"


def _plot_prior_ppc(idata, num_samples):
    """ArviZ's prior predictive check plot of this line: ``plot_ppc`` (0.x) or ``plot_ppc_dist`` (1.x)."""
    if arviz_compat.ARVIZ_1:
        az.plot_ppc_dist(idata, group="prior_predictive", num_samples=num_samples)
    else:
        az.plot_ppc(idata, group="prior", num_pp_samples=num_samples)


def test_prior_predictive_returns_what_plot_ppc_needs():
    idata = br.prior_predictive("sor", X, Y, Z=Z, num_samples=50)
    assert {"prior", "prior_predictive", "observed_data"} <= set(arviz_compat.groups(idata))
    assert idata.prior_predictive["y"].shape == (1, 50, N)
    assert {"lengthscale", "variance", "noise"} <= set(idata.prior.data_vars)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _plot_prior_ppc(idata, num_samples=20)
    matplotlib.pyplot.close("all")


# --------------------------------------------------------------------------------------------------
# A factorised likelihood's stored log-likelihood


@pytest.fixture(scope="module")
def poisson_fit():
    return br.fit(
        "rbfn",
        X,
        COUNTS,
        likelihood="poisson",
        Z=Z,
        chains=1,
        draws=60,
        warmup=150,
        seed=seed(2),
        progress=False,
        check_diagnostics=False,
        coords={"input_dim": ["x"]},
    )


def test_factorised_log_likelihood_is_the_pointwise_log_density(poisson_fit):
    """log_likelihood[y] = log Poisson(y_i | exp f_i) with f = c + K_fu α rebuilt in NumPy from each draw."""
    post = poisson_fit.posterior
    c = poisson_fit.constant_data["y_offset"].values.item()
    loglik = poisson_fit.log_likelihood["y"].values
    for draw in (0, 29, 59):
        spec = {
            "kind": "se",
            "lengthscale": float(post["lengthscale"].values[0, draw]),
            "variance": float(post["variance"].values[0, draw]),
        }
        f = c + ref.gram(spec, X, Z) @ post["f_alpha"].values[0, draw]
        assert_close(loglik[0, draw], scipy.stats.poisson.logpmf(COUNTS, np.exp(f)), scale=1.0)


def test_fit_of_counts_has_replicates_coords_and_link_scale_predictions(poisson_fit):
    pp = poisson_fit.posterior_predictive["y"]
    assert pp.dims == ("chain", "draw", "obs") and pp.shape == (1, 60, N)
    assert np.all(pp.values >= 0) and np.all(pp.values == np.round(pp.values))
    assert list(poisson_fit.constant_data["X"].coords["input_dim"].values) == ["x"]
    assert poisson_fit.posterior.attrs["bayes_rbfn_likelihood"] == "poisson"
    assert "f" not in poisson_fit.posterior  # the N-sized latent is recomputable; f_alpha is stored
    assert poisson_fit.posterior["f_alpha"].dims == ("chain", "draw", "inducing")
    # the predictions are the latent f (log-rate), from the same α: f* at X_pred = X equals the rebuilt f
    post = poisson_fit.posterior
    spec = {
        "kind": "se",
        "lengthscale": float(post["lengthscale"][0, 5]),
        "variance": float(post["variance"][0, 5]),
    }
    f = (
        poisson_fit.constant_data["y_offset"].values.item()
        + ref.gram(spec, X, Z) @ post["f_alpha"].values[0, 5]
    )
    assert_close(poisson_fit.predictions["f_mean"].values[0, 5], f, scale=1.0)


# --------------------------------------------------------------------------------------------------
# mean=: the observed site's density has the prior mean it was given

SPEC = {"kind": "se", "lengthscale": 0.3, "variance": 0.5}
PINNED = {"lengthscale": 0.3, "variance": 0.5, "noise": 0.2}
MEANS = {
    "constant": (lambda p: np.full(N, Y.mean()), {}),
    "zero": (lambda p: np.zeros(N), {}),
    "number": (lambda p: np.full(N, -1.25), {}),
    "linear": (
        lambda p: p["mean_intercept"] + (X - X.mean()) * p["mean_slope"][0],
        {"mean_intercept": 0.4, "mean_slope": np.array([2.0])},
    ),
    "callable": (lambda p: 3.0 * X**2, {}),
}
MEAN_ARGS = {"constant": "constant", "zero": "zero", "number": -1.25, "linear": "linear", "callable": None}


@pytest.mark.parametrize("kind", list(MEANS))
def test_mean_enters_the_observed_density(kind):
    """fit(mean=...): the exact model's observed site is N(m(X), K_ff + σ²I) with m the constant (the mean
    of y), zero, a number, the linear mean at given coefficients, or a callable — SciPy's dense logpdf."""
    from numpyro import handlers

    mean_fn, values = MEANS[kind]
    mean = MEAN_ARGS[kind] if kind != "callable" else (lambda Xa: 3.0 * Xa[:, 0] ** 2)
    gm = br.build_model("exact", X, Y, mean=mean, fixed=PINNED)
    model = handlers.substitute(handlers.seed(gm.model, 0), data=values)
    site = handlers.trace(model).get_trace(*gm.args)["y"]
    C = ref.gram(SPEC, X) + 0.04 * np.eye(N)
    expected = scipy.stats.multivariate_normal(mean_fn(values), C).logpdf(Y)
    assert_close(site["fn"].log_prob(site["value"]), expected, scale=abs(expected))
