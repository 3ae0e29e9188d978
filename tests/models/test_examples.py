"""The example models of ``bayes_rbfn.models.examples`` under a short NUTS run on small simulated data.

* ``several_series``: four series of 40 points drawn from the model's own marginal at known
  hyperparameters, shared under a ``numpyro.plate``; the posterior recovers the noise and the lengthscale.
* ``heteroscedastic``: motorcycle-like data whose noise sd rises from 2 g to ~27 g after the impact; the
  posterior mean noise, from the RBF network on log σ, is several times larger where the simulated noise is.

One chain of 300 warm-up and 300 kept iterations each: a check that the examples run and learn what they
are built to learn, with bounds wide against the posterior spread of these data (stated per test), not a
calibration of the sampler (tests/infer does that).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stochastic
from numpyro.infer import MCMC, NUTS

from bayes_rbfn.models import examples

pytestmark = pytest.mark.stochastic


def _run(model, seed, *args, **kwargs):
    mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=300, num_chains=1, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(stochastic.seed(seed)), *args, extra_fields=("diverging",), **kwargs)
    assert int(np.sum(mcmc.get_extra_fields()["diverging"])) <= 0.05 * 300
    return {k: np.asarray(v) for k, v in mcmc.get_samples().items()}


def test_several_series_under_a_plate_recover_the_shared_hyperparameters():
    """Four series, 160 points: the noise's posterior sd is ~6 % and the lengthscale's ~10 % of their
    values, so the posterior means fall within 25 % and 50 % of the truth by a wide margin."""
    X = np.linspace(0.0, 1.0, 40)[:, None]
    Z = np.linspace(0.0, 1.0, 8)[:, None]
    key = jax.random.PRNGKey(stochastic.seed(31))
    Y = examples.simulate_series(key, X, Z, 4, lengthscale=0.2, variance=1.0, noise=0.2)
    assert Y.shape == (4, 40)
    samples = _run(examples.several_series, 32, X, Z, Y)
    assert abs(samples["noise"].mean() / 0.2 - 1.0) < 0.25
    assert abs(samples["lengthscale"].mean() / 0.2 - 1.0) < 0.5


def test_heteroscedastic_noise_is_larger_where_the_simulated_noise_is():
    """Motorcycle-like data (100 points; inputs scaled to ms/60, targets to unit sd): the posterior mean
    σ(t) averages ~2 g before the impact and ~26 g from 18 to 40 ms, as simulated; it must be at least
    3 times larger there, and within a factor 2 of the simulated noise."""
    data = examples.motorcycle_like(100, seed=stochastic.seed(33))
    scale = data["y"].std()
    X = (data["t"] / 60.0)[:, None]
    Z = np.linspace(0.04, 0.96, 15)[:, None]
    samples = _run(examples.heteroscedastic, 34, X, Z, y=jnp.asarray(data["y"] / scale))
    assert samples["log_sigma"].shape == (300, 100)
    sigma = np.exp(samples["log_sigma"]).mean(axis=0) * scale
    quiet, loud = data["t"] < 12.0, (data["t"] > 18.0) & (data["t"] < 40.0)
    assert sigma[loud].mean() > 3.0 * sigma[quiet].mean()
    assert 0.5 < sigma[loud].mean() / data["noise"][loud].mean() < 2.0
