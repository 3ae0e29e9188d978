"""The truncated inverse-gamma prior (``bayes_rbfn.models.priors.TruncatedInverseGamma``) against SciPy's
inverse gamma: its density renormalised over (0, high], its draws by a Kolmogorov–Smirnov test against the
truncated CDF, and the support NUTS maps onto."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from conftest import assert_close
from numpyro.distributions.transforms import biject_to
from stochastic import seed

from bayes_rbfn.models.priors import TruncatedInverseGamma

CASES = [(10.0, 2.0, 1.0), (3.0, 0.5, 0.4), (2.0, 1.0, 20.0)]
IDS = ["birthdays-week", "bound-in-the-bulk", "bound-far-in-the-tail"]


@pytest.mark.parametrize(("a", "b", "high"), CASES, ids=IDS)
def test_density_is_scipys_renormalised_below_the_bound(a, b, high):
    x = np.linspace(0.02, high, 25)
    reference = scipy.stats.invgamma(a, scale=b)
    want = reference.logpdf(x) - reference.logcdf(high)
    got = TruncatedInverseGamma(a, b, high).log_prob(jnp.asarray(x))
    assert_close(got, want)


@pytest.mark.parametrize(("a", "b", "high"), CASES, ids=IDS)
def test_draws_follow_the_truncated_cdf(a, b, high):
    draws = np.asarray(TruncatedInverseGamma(a, b, high).sample(jax.random.PRNGKey(seed(3)), (4000,)))
    assert draws.max() <= high and draws.min() > 0
    reference = scipy.stats.invgamma(a, scale=b)
    result = scipy.stats.kstest(draws, lambda x: reference.cdf(np.minimum(x, high)) / reference.cdf(high))
    assert result.pvalue > 1e-3, result


def test_nuts_samples_it_on_the_interval_below_the_bound():
    prior = TruncatedInverseGamma(10.0, 2.0, 1.0)
    to_support = biject_to(prior.support)
    values = np.asarray(to_support(jnp.asarray([-30.0, -1.0, 0.0, 1.0, 30.0])))
    assert np.all(values > 0) and np.all(values <= 1.0)
    assert np.all(np.diff(values) > 0)
    rebuilt = jax.tree.map(lambda leaf: leaf, prior)  # a pytree round trip keeps the bound
    assert rebuilt.high == 1.0 and rebuilt.support.upper_bound == 1.0


@pytest.mark.parametrize("high", [0.0, -1.0], ids=["zero", "negative"])
def test_a_bound_that_is_not_positive_is_refused(high):
    with pytest.raises(ValueError, match="high: expected a positive bound"):
        TruncatedInverseGamma(10.0, 2.0, high)
