"""The ``blr`` model of the collection: Bishop's BLR with Gaussian basis functions at Z.

Each piece of the model against a reference that does not share its code path:

* the log density against SciPy's ``multivariate_normal.logpdf`` of t ~ N(0, ΦΦᵀ/α + I/β), with Φ built
  by hand in NumPy (Bishop (3.4) with the documented width rule);
* the per-draw predictive against :func:`bayes_rbfn.gp.blr.predictive` (Bishop (3.58)–(3.59), latent);
  ``predict`` of a fit and the fit's stored predictions, at a few draws, against the function-space
  conditional of the joint prior of (t, f*) by dense solves;
* the stored LOO conditionals against dense leave-one-out refits (tests/reference.py);
* a short NUTS fit on Snelson's data: r_hat, and the posterior mean of β against the posterior mean from
  2-D quadrature over (log α, log β) (in MCSE) and against the evidence-maximising β of Bishop's
  re-estimation equations (3.92), (3.95) (loosely: the posterior mean is not the maximiser).

Tolerances: conftest's float64 RTOL/ATOL for closed forms; for NUTS, tests/stochastic.py's ``K_MCSE``
Monte-Carlo standard errors and convergence bounds (the sampler's seed shifts with ``BAYES_RBFN_TEST_SEED``).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference as ref
import scipy.stats
from conftest import assert_close
from numpyro.infer.util import log_density as numpyro_log_density
from stochastic import K_MCSE, assert_converged, seed

import bayes_rbfn as br
from bayes_rbfn.gp import blr
from bayes_rbfn.gp.inducing import select_inducing
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.datasets import load_dataset
from bayes_rbfn.models import ModelConfig, get_model
from bayes_rbfn.models import blr as blr_model
from bayes_rbfn.models.families import data_scales


def _snelson(m=12):
    ds = load_dataset("snelson")
    return ds.X, ds.y, select_inducing(ds.X, m), ds.X_test[::10]


def _synthetic_2d(n=60, m=9, seed=11):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, size=(n, 2)) * np.array([1.0, 10.0])  # different scales per dimension
    y = np.sin(4.0 * X[:, 0]) + np.cos(0.5 * X[:, 1]) + 0.2 * rng.standard_normal(n)
    X_test = rng.uniform(-0.2, 1.2, size=(7, 2)) * np.array([1.0, 10.0])
    return X, y, select_inducing(X, m), X_test


CASES = {"snelson-1d": _snelson, "synthetic-2d-anisotropic": _synthetic_2d}
#: (α, β) at which closed forms are compared: around and far from the evidence maximum.
PARAMS = [(2.5, 12.0), (0.01, 1.0), (50.0, 400.0)]


@pytest.fixture(params=list(CASES), scope="module")
def problem(request):
    X, y, Z, X_test = CASES[request.param]()
    data = {
        "X": jnp.asarray(X),
        "y": jnp.asarray(y),
        "Z": jnp.asarray(Z),
        "y_offset": jnp.asarray(float(np.mean(y))),
    }
    config = ModelConfig(
        family=blr_model.FAMILY, priors=blr_model.FAMILY.default_priors(data_scales(X, y)), fixed={}
    )
    return X, y, Z, X_test, data, config


def dense_design(X, Z):
    """Φ_nj = exp(−½ Σ_d (x_nd − z_jd)² / s_d²), s_d = range_d(Z) / (M^{1/D} − 1), written out in NumPy."""
    X, Z = np.atleast_2d(X), np.atleast_2d(Z)
    M, D = Z.shape
    width = np.ptp(Z, axis=0) / (M ** (1.0 / D) - 1.0) * blr_model.WIDTH_FACTOR
    diff = (X[:, None, :] - Z[None, :, :]) / width
    return np.exp(-0.5 * np.sum(diff**2, axis=-1))


def dense_covariance(Phi, weight_precision, noise_precision):
    return Phi @ Phi.T / weight_precision + np.eye(Phi.shape[0]) / noise_precision


# --------------------------------------------------------------------------------------------------
# Closed forms


def test_design_matrix_is_bishop_gaussian_basis(problem):
    X, _, Z, _, _, _ = problem
    assert_close(blr_model.design_matrix(jnp.asarray(X), jnp.asarray(Z)), dense_design(X, Z))


@pytest.mark.parametrize(
    "weight_precision, noise_precision",
    PARAMS,
    ids=[f"weight_precision{a}-noise_precision{b}" for a, b in PARAMS],
)
def test_log_density_is_scipy_mvn_logpdf(problem, weight_precision, noise_precision):
    """log_density = ln N(t | 0, ΦΦᵀ/α + I/β); the whole NumPyro model adds exactly the two log priors."""
    X, y, Z, _, data, config = problem
    t = y - np.mean(y)
    expected = ref.logpdf(t, dense_covariance(dense_design(X, Z), weight_precision, noise_precision))
    params = {
        "weight_precision": jnp.asarray(weight_precision),
        "noise_precision": jnp.asarray(noise_precision),
    }
    assert_close(blr_model.log_density(params, data, config), expected, scale=abs(expected))

    joint, _ = numpyro_log_density(blr_model.model, (data, config), {}, params)
    priors = sum(float(config.priors[k].log_prob(params[k])) for k in ("weight_precision", "noise_precision"))
    assert_close(joint, expected + priors, scale=abs(expected))


@pytest.mark.parametrize(
    "weight_precision, noise_precision",
    PARAMS,
    ids=[f"weight_precision{a}-noise_precision{b}" for a, b in PARAMS],
)
def test_predict_is_bishop_predictive_without_noise(problem, weight_precision, noise_precision):
    X, y, Z, X_test, data, config = problem
    params = {
        "weight_precision": jnp.asarray(weight_precision),
        "noise_precision": jnp.asarray(noise_precision),
    }
    mean, var = jax.jit(blr_model.predict, static_argnames="config")(
        params, data, config, jnp.asarray(X_test)
    )

    Phi, Phi_test = dense_design(X, Z), dense_design(X_test, Z)
    post = blr.posterior(Phi, y - np.mean(y), weight_precision, noise_precision)
    expected = blr.predictive(Phi_test, post, noise_precision, include_noise=False)
    assert_close(mean, np.asarray(expected.mean) + np.mean(y))
    assert_close(var, expected.var)
    # and Bishop (3.59) written out densely, S_N = (αI + βΦᵀΦ)⁻¹, 1/β term dropped
    S_N = np.linalg.inv(weight_precision * np.eye(Phi.shape[1]) + noise_precision * Phi.T @ Phi)
    assert_close(var, np.einsum("sm,mk,sk->s", Phi_test, S_N, Phi_test))


@pytest.mark.parametrize(
    "weight_precision, noise_precision",
    PARAMS,
    ids=[f"weight_precision{a}-noise_precision{b}" for a, b in PARAMS],
)
def test_log_likelihood_is_dense_leave_one_out(problem, weight_precision, noise_precision):
    X, y, Z, _, data, config = problem
    params = {
        "weight_precision": jnp.asarray(weight_precision),
        "noise_precision": jnp.asarray(noise_precision),
    }
    loo = jax.jit(blr_model.log_likelihood, static_argnames="config")(params, data, config)
    C, t = dense_covariance(dense_design(X, Z), weight_precision, noise_precision), y - np.mean(y)
    assert loo.shape == (len(y),)
    # Refit without point i and predict it, for every 7th point (dense solves; all N would be slow).
    for i in range(0, len(y), 7):
        rest = np.delete(np.arange(len(y)), i)
        mean, var = ref.condition(C[np.ix_(rest, rest)], C[rest, i : i + 1], C[i : i + 1, i : i + 1], t[rest])
        expected = scipy.stats.norm.logpdf(t[i], loc=mean[0], scale=np.sqrt(var[0, 0]))
        assert_close(loo[i], expected, scale=abs(expected), rtol=1e-7)


def test_log_density_is_neg_inf_not_nan_on_failure(problem):
    _, _, _, _, data, config = problem
    params = {"weight_precision": jnp.asarray(jnp.nan), "noise_precision": jnp.asarray(1.0)}
    assert float(blr_model.log_density(params, data, config)) == -np.inf


def test_registered_with_its_own_hyperparameters():
    spec = get_model("blr")
    assert spec.uses_inducing and spec.family is blr_model.FAMILY
    assert set(spec.family.default_priors(data_scales(np.arange(5.0)[:, None], np.arange(5.0)))) == {
        "weight_precision",
        "noise_precision",
    }


def test_fit_rejects_options_that_do_not_apply():
    X, y = np.linspace(0, 1, 20), np.sin(np.linspace(0, 3, 20))
    with pytest.raises(ValueError, match="no kernel"):
        br.fit("blr", X, y, kernel="matern52", num_inducing=5)
    with pytest.raises(ValueError, match="noise"):
        br.fit("blr", X, y, noise=0.1, num_inducing=5)
    with pytest.raises(ValueError, match="hyperprior"):
        br.fit("blr", X, y, hyperprior=True, num_inducing=5, chains=1, draws=5, warmup=5, progress=False)


# --------------------------------------------------------------------------------------------------
# NUTS


def evidence_maximiser(Phi, t, weight_precision=1.0, noise_precision=1.0, iterations=500):
    """Bishop's re-estimation of α and β, eqs. (3.87)–(3.95), iterated to convergence (dense NumPy)."""
    N = len(t)
    eig = np.linalg.eigvalsh(Phi.T @ Phi)
    for _ in range(iterations):
        A = weight_precision * np.eye(Phi.shape[1]) + noise_precision * Phi.T @ Phi
        m_N = noise_precision * np.linalg.solve(A, Phi.T @ t)
        gamma = np.sum(noise_precision * eig / (weight_precision + noise_precision * eig))
        alpha_new = gamma / (m_N @ m_N)
        beta_new = (N - gamma) / np.sum((t - Phi @ m_N) ** 2)
        converged = (
            abs(alpha_new - weight_precision) < 1e-12 * weight_precision
            and abs(beta_new - noise_precision) < 1e-12 * noise_precision
        )
        weight_precision, noise_precision = alpha_new, beta_new
        if converged:
            break
    return weight_precision, noise_precision


def quadrature_posterior_mean_beta(Phi, t, priors, centre, half_width=6.0, n=241):
    """E[β | t] by the trapezoid rule on a grid over (log α, log β) (the priors are log-normal)."""
    u = np.linspace(np.log(centre[0]) - half_width, np.log(centre[0]) + half_width, n)
    v = np.linspace(np.log(centre[1]) - half_width / 3, np.log(centre[1]) + half_width / 3, n)
    U, V = np.meshgrid(u, v, indexing="ij")
    evidence = jax.jit(jax.vmap(lambda a, b: blr.log_evidence(Phi, t, a, b)))
    log_post = np.array(evidence(jnp.exp(U.ravel()), jnp.exp(V.ravel()))).reshape(U.shape)
    # log-normal prior on α ⇔ normal prior on log α (the Jacobian of the log map is included)
    for grid, prior in ((U, priors["weight_precision"]), (V, priors["noise_precision"])):
        log_post += -0.5 * ((grid - float(prior.loc)) / float(prior.scale)) ** 2
    weights = np.exp(log_post - log_post.max())
    # the grid must hold the whole posterior: negligible mass on its edges
    edge = max(weights[0].max(), weights[-1].max(), weights[:, 0].max(), weights[:, -1].max())
    assert edge < 1e-10, "quadrature grid too small"
    return float(
        np.trapezoid(np.trapezoid(weights * np.exp(V), v, axis=1), u)
        / np.trapezoid(np.trapezoid(weights, v, axis=1), u)
    )


@pytest.fixture(scope="module")
def snelson_fit():
    X, y, Z, X_test = _snelson(m=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", br.ConvergenceWarning)
        idata = br.fit(
            "blr", X, y, Z=Z, chains=4, warmup=500, draws=1000, seed=seed(7), X_pred=X_test, progress=False
        )
    return X, y, Z, X_test, idata


@pytest.mark.stochastic
def test_nuts_fit_converges_and_records_noise(snelson_fit):
    """Converged by tests/stochastic.py's bounds (bulk and folded ESS ≥ 800 of 4,000 draws)."""
    *_, idata = snelson_fit
    assert_converged(idata, ["weight_precision", "noise_precision"], min_ess=800)
    post = idata.posterior
    np.testing.assert_allclose(
        post["noise"].values, 1.0 / np.sqrt(post["noise_precision"].values), rtol=1e-12
    )
    assert idata.log_likelihood["y"].shape[-1] == len(idata.observed_data["y"])
    assert np.all(np.isfinite(arviz_compat.loo(idata).elpd_i))


@pytest.mark.stochastic
def test_posterior_mean_of_beta_matches_quadrature_and_evidence_maximum(snelson_fit):
    X, y, Z, _, idata = snelson_fit
    Phi, t = dense_design(X, Z), y - np.mean(y)
    beta_draws = idata.posterior["noise_precision"].values
    estimate = float(beta_draws.mean())
    mcse = arviz_compat.mcse_mean(beta_draws)
    sd = float(beta_draws.std())

    alpha_hat, beta_hat = evidence_maximiser(Phi, t)
    priors = blr_model.FAMILY.default_priors(data_scales(X, y))
    exact = quadrature_posterior_mean_beta(Phi, t, priors, centre=(alpha_hat, beta_hat))
    assert abs(estimate - exact) <= K_MCSE * mcse, (
        f"E[β] by NUTS {estimate:.5g} vs quadrature {exact:.5g}: {abs(estimate - exact) / mcse:.2f} MCSE"
    )
    # The evidence maximiser is the posterior mode under flat priors on log α, log β, not the mean: with
    # N = 200 the two differ by a fraction of a posterior standard deviation.
    assert abs(estimate - beta_hat) <= 0.5 * sd + K_MCSE * mcse, (
        f"E[β] {estimate:.5g} vs evidence maximiser {beta_hat:.5g} (posterior sd {sd:.3g})"
    )


def dense_latent_predictive(X, y, Z, X_test, weight_precision, noise_precision):
    """f* | t for the joint prior of (t, f*), t = y − ȳ: Cov t = ΦΦᵀ/α + I/β, Cov(t, f*) = ΦΦ*ᵀ/α, Cov f* =
    Φ*Φ*ᵀ/α (w ~ N(0, I/α)), conditioned by dense solves (tests/reference.py); ȳ added back to the mean.
    Function space, where the model's predictive works in weight space (Bishop (3.53)–(3.54))."""
    Phi, Phi_test = dense_design(X, Z), dense_design(X_test, Z)
    offset = float(np.mean(y))
    mean, cov = ref.condition(
        dense_covariance(Phi, weight_precision, noise_precision),
        Phi @ Phi_test.T / weight_precision,
        Phi_test @ Phi_test.T / weight_precision,
        y - offset,
    )
    return mean + offset, np.diag(cov)


@pytest.mark.parametrize("draw", [(0, 0), (2, 517), (3, 999)], ids=["c0d0", "c2d517", "c3d999"])
def test_predict_and_stored_predictions_are_the_dense_conditional(snelson_fit, draw):
    """At a few posterior draws, both ``predict(idata)`` and the predictions ``fit`` stored equal the
    latent predictive conditioned densely in function space (:func:`dense_latent_predictive`)."""
    X, y, Z, X_test, idata = snelson_fit
    c, d = draw
    weight_precision, noise_precision = (
        float(idata.posterior[name].values[c, d]) for name in ("weight_precision", "noise_precision")
    )
    mean, var = dense_latent_predictive(X, y, Z, X_test, weight_precision, noise_precision)
    pred = br.predict(idata, X_test)
    for f_mean, f_var in (
        (pred.f_mean[c, d], pred.f_var[c, d]),
        (idata.predictions["f_mean"].values[c, d], idata.predictions["f_var"].values[c, d]),
    ):
        assert_close(f_mean, mean, scale=np.max(np.abs(mean)))
        assert_close(f_var, var, scale=np.max(var))
