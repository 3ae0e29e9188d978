"""Every likelihood of the collection against SciPy: the observation model's log density of y given the
latent f and its parameters (:data:`bayes_rbfn.models.likelihoods.LIKELIHOODS`), at data of its kind.

A likelihood added to the collection without its SciPy counterpart here fails
``test_every_likelihood_has_a_scipy_reference``.
"""

import numpy as np
import pytest
import scipy.special
import scipy.stats
from conftest import assert_close

from bayes_rbfn.models.likelihoods import LIKELIHOODS

F = np.linspace(-1.5, 2.0, 9)
Y = {"identity": F + np.array([0.3, -0.8, 0.1, 2.5, -0.2, 0.0, 0.7, -3.0, 0.4])}
Y["log"] = np.array([0, 1, 3, 2, 0, 5, 4, 1, 12], dtype=float)
Y["logit"] = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1], dtype=float)

#: likelihood: (parameter values, SciPy's log density of y given f and them).
SCIPY = {
    "gaussian": ({"noise": 0.7}, lambda y, f, p: scipy.stats.norm.logpdf(y, f, p["noise"])),
    "student_t": (
        {"noise": 0.7, "df": 3.5},
        lambda y, f, p: scipy.stats.t.logpdf(y, p["df"], f, p["noise"]),
    ),
    "laplace": ({"noise": 0.7}, lambda y, f, p: scipy.stats.laplace.logpdf(y, f, p["noise"])),
    "poisson": ({}, lambda y, f, p: scipy.stats.poisson.logpmf(y, np.exp(f))),
    "negative_binomial": (
        {"concentration": 2.5},
        # SciPy's nbinom(n, p): mean n(1 − p)/p; mean μ and concentration φ give n = φ, p = φ/(φ + μ).
        lambda y, f, p: scipy.stats.nbinom.logpmf(
            y, p["concentration"], p["concentration"] / (p["concentration"] + np.exp(f))
        ),
    ),
    "bernoulli": ({}, lambda y, f, p: scipy.stats.bernoulli.logpmf(y, scipy.special.expit(f))),
}


def test_every_likelihood_has_a_scipy_reference():
    assert set(SCIPY) == set(LIKELIHOODS)


@pytest.mark.parametrize("name", list(LIKELIHOODS))
def test_log_density_equals_scipy(name):
    lik = LIKELIHOODS[name]
    params, reference = SCIPY[name]
    assert set(params) == set(lik.params) == set(lik.simulation_priors)
    y = Y[lik.link]
    # NumPyro's GammaPoisson takes log B(φ, y + 1) from jax.scipy.special.betaln, whose series is good to
    # ~1e-7 relative (2.8e-7 nats at y = 12); every other density to the float64 tolerance.
    rtol = 1e-6 if name == "negative_binomial" else None
    assert_close(lik.observe(F, params).log_prob(y), reference(y, F, params), rtol=rtol)
    assert_close(
        lik.inverse_link(F), {"identity": F, "log": np.exp(F), "logit": scipy.special.expit(F)}[lik.link]
    )
