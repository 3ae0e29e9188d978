"""LOO-PIT from the exact leave-one-out conditionals (bayes_rbfn.loo_pit).

* per draw, ``SparseGP.loo_pit`` / ``ExactGP.loo_pit`` against the CDFs of N brute-force dense refits,
  also where the leave-block-out pass takes interpolated points (Z = X, small noise);
* a model of one's own: ``loo_pit(idata, model, ...)`` equals the PSIS-weighted (ArviZ's ``psislw``) average
  of the dense per-draw CDFs;
* fits: on data simulated from the model the values are uniform (KS p > 1e-3, a 1e-3 false alarm); with
  the noise pinned 10× too small most points fall outside the 95 % band and the KS test rejects.
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import sparse_reference as ref
from conftest import assert_close
from scipy import stats
from stochastic import rng, seed

import bayes_rbfn as br
from bayes_rbfn import ExactGP, SparseGP
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.io import arviz_compat

JITTER = 1e-8  # the float64 jitter policy (bayes_rbfn.gp.linalg.JITTER)
_gen = np.random.default_rng(20261127)  # a fixed, well-conditioned problem (not a stochastic check)
X = np.sort(_gen.uniform(0.0, 3.0, 12))[:, None]
Z = np.linspace(0.2, 2.8, 5)[:, None]
Y = np.sin(2.0 * X[:, 0]) + 0.1 * _gen.standard_normal(12)
NOISE = 0.3
KERNEL = SquaredExponential(lengthscale=0.7, variance=1.3)


@pytest.mark.parametrize("name", ["sor", "dtc", "fitc", "vfe", "exact"])
def test_per_draw_pit_equals_brute_force_refits(name):
    """Φ((y_i − μ_−i)/σ_−i) of each model's marginal (VFE: DTC's) against N dense refits."""
    if name == "exact":
        d, C = ExactGP(KERNEL, X, NOISE, mean=0.2), ref.prior_cov("exact", KERNEL, X, Z, NOISE, JITTER)
    else:
        d = SparseGP(KERNEL, X, Z, NOISE, approx=name, mean=0.2)
        C = ref.prior_cov("dtc" if name == "vfe" else name, KERNEL, X, Z, NOISE, JITTER)
    assert_close(d.loo_pit(jnp.asarray(Y)), ref.loo_pit_brute_force(C, Y - 0.2), rtol=1e-7)


def test_interpolated_points_take_the_leave_block_out_pass():
    """Z = X at σ = 1e-6: every leverage is ~1 − 1e-12, below the floor, so the values come from the
    leave-block-out pass (within 1e-9 of dense refits; the Woodbury values alone are ~1e-4 off)."""
    kernel = SquaredExponential(lengthscale=0.9, variance=1.0)
    X6 = np.linspace(0.0, 3.0, 6)[:, None]
    y6 = np.sin(2.0 * X6[:, 0])
    d = SparseGP(kernel, X6, X6, 1e-6, jitter=0.0)
    expected = ref.loo_pit_brute_force(ref.prior_cov("sor", kernel, X6, X6, 1e-6, 0.0), y6)
    np.testing.assert_allclose(np.asarray(d.loo_pit(jnp.asarray(y6), exact=True)), expected, atol=1e-9)
    woodbury = np.asarray(d.loo_pit(jnp.asarray(y6), exact=False))
    assert np.max(np.abs(woodbury - expected)) > 1e-6


def _user_model(X, Z, y=None):
    ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 0.5))
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 0.5))
    noise = numpyro.sample("noise", dist.LogNormal(np.log(0.3), 0.3))
    kernel = SquaredExponential(lengthscale=ell, variance=s2)
    numpyro.sample("y", SparseGP(kernel, X, Z, noise, approx="fitc"), obs=y)


def test_user_model_pit_is_the_psis_weighted_dense_cdf():
    """For fake posterior draws of a user's FITC model: the dense per-draw LOO conditionals give both the
    PSIS weights (ArviZ's psislw of −log p(y_i | y_−i, θ_s)) and the CDFs; their weighted sums agree."""
    gen = np.random.default_rng(4)
    chains, draws = 2, 40
    posterior = {
        "lengthscale": np.exp(gen.normal(np.log(0.7), 0.2, (chains, draws))),
        "variance": np.exp(gen.normal(0.0, 0.2, (chains, draws))),
        "noise": np.exp(gen.normal(np.log(0.3), 0.1, (chains, draws))),
    }
    idata = arviz_compat.from_groups({"posterior": posterior})
    pit = br.loo_pit(idata, _user_model, jnp.asarray(X), jnp.asarray(Z), y=jnp.asarray(Y), batch_size=16)
    log_lik = np.empty((chains * draws, len(Y)))
    cdf = np.empty_like(log_lik)
    for s, (c, d) in enumerate(np.ndindex(chains, draws)):
        kernel = SquaredExponential(
            lengthscale=posterior["lengthscale"][c, d], variance=posterior["variance"][c, d]
        )
        C = ref.prior_cov("fitc", kernel, X, Z, posterior["noise"][c, d], JITTER)
        log_lik[s] = ref.loo_brute_force(C, Y)
        cdf[s] = ref.loo_pit_brute_force(C, Y)
    ess = arviz_compat.ess(arviz_compat.group_dataset(idata, "posterior"), method="mean")
    reff = np.mean([ess[v].values for v in ess.data_vars]) / (chains * draws)
    log_weights = arviz_compat.psis_log_weights(-log_lik, reff)  # (S, N), each column sums to 1
    expected = np.sum(np.exp(log_weights) * cdf, axis=0)
    assert_close(pit, expected, rtol=1e-7)


def _simulated(n=120, base=40):
    """Data drawn from the sor model itself: f ~ N(0, Q_ff) at SE(ℓ = 1.5, s² = 1), σ = 0.3."""
    gen = rng(base)
    X1 = np.sort(gen.uniform(0.0, 10.0, n))
    Z1 = np.linspace(0.0, 10.0, 15)
    kernel = SquaredExponential(lengthscale=1.5, variance=1.0)
    Q = ref.nystrom(kernel, Z1[:, None], X1[:, None], X1[:, None], JITTER)
    f = np.linalg.cholesky(Q + 1e-10 * np.eye(n)) @ gen.standard_normal(n)
    return X1, f + 0.3 * gen.standard_normal(n), Z1


def _fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return br.fit(*args, progress=False, chains=2, draws=300, warmup=300, **kwargs)


@pytest.mark.stochastic
def test_fit_pit_is_uniform_when_well_specified_and_departs_when_the_noise_is_pinned_too_small():
    """Well specified: KS p > 1e-3. Noise pinned at σ/10: the LOO predictive is ~10× too narrow, so most
    points fall outside its 95 % band (expected share ~ 90 %; > 50 % asserted) and KS p < 1e-6."""
    X1, y1, Z1 = _simulated()
    good = br.loo_pit(_fit("sor", X1, y1, Z=Z1, seed=seed(1)))
    assert good.shape == (len(y1),)
    assert stats.kstest(good, "uniform").pvalue > 1e-3
    pinned = br.loo_pit(_fit("sor", X1, y1, Z=Z1, seed=seed(2), fixed={"noise": 0.03}))
    assert np.mean((pinned < 0.025) | (pinned > 0.975)) > 0.5
    assert stats.kstest(pinned, "uniform").pvalue < 1e-6


def test_loo_pit_refuses_other_input():
    with pytest.raises(ValueError, match="idata: expected an InferenceData"):
        br.loo_pit({"y": 1})
    with pytest.raises(ValueError, match=r"model: this InferenceData was not written by bayes_rbfn\.fit"):
        br.loo_pit(arviz_compat.from_groups({"posterior": {"mu": np.zeros((1, 2))}}))


def test_a_fit_with_a_kernel_object_takes_it_again_and_gives_the_dense_pit():
    """A fit given a kernel object (no file can hold one) is refused without ``kernel=``, naming it; with
    it, loo_pit is the PSIS-weighted average of the dense per-draw SoR CDFs (weights as in the test of a
    model of one's own), from the data and inducing inputs the fit stored."""
    idata = _fit("sor", X[:, 0], Y, Z=Z[:, 0], kernel=KERNEL, seed=seed(3))
    with pytest.raises(ValueError, match=r"kernel 'SquaredExponential' was a kernel object"):
        br.loo_pit(idata)
    with pytest.raises(ValueError, match=r"model: arguments 'Z' are for a model of one's own"):
        br.loo_pit(idata, kernel=KERNEL, Z=Z)
    pit = br.loo_pit(idata, kernel=KERNEL)
    cd, noise = idata.constant_data, idata.posterior["noise"].values
    A, B = cd["X"].values.reshape(len(Y), -1), cd["Z"].values.reshape(len(Z), -1)
    t = idata.observed_data["y"].values - cd["y_offset"].values.item()
    chains, draws = noise.shape
    log_lik = np.empty((chains * draws, len(Y)))
    cdf = np.empty_like(log_lik)
    for s, (c, d) in enumerate(np.ndindex(chains, draws)):
        C = ref.prior_cov("sor", KERNEL, A, B, noise[c, d], JITTER)
        log_lik[s], cdf[s] = ref.loo_brute_force(C, t), ref.loo_pit_brute_force(C, t)
    ess = arviz_compat.ess(arviz_compat.group_dataset(idata, "posterior"), method="mean")
    reff = np.mean([ess[v].values for v in ess.data_vars]) / (chains * draws)
    expected = np.sum(np.exp(arviz_compat.psis_log_weights(-log_lik, reff)) * cdf, axis=0)
    assert_close(pit, expected, rtol=1e-7)
