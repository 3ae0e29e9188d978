"""Simulation-based calibration of the ``grouped`` and ``blr`` models (issue 8; :mod:`bayes_rbfn.sbc`).

Same accept rule as ``tests/test_sbc.py``: every quantity's χ² p-value > ``ACCEPT_FAMILY / Q`` with
``ACCEPT_FAMILY = 1e-3`` (Bonferroni; a correct sampler fails with probability ≤ 0.1%), ranks on 10 bins;
the seed shifts with ``BAYES_RBFN_TEST_SEED`` (tests/stochastic.py).

* ``blr``: R = 100, n = 20, M = 5 basis functions, 100 warmup + 100 draws thinned by 5 (L = 20); both
  the accept test and the doubled-noise reject (p(β) < 1e-6; the truth β ranks near the bottom because
  the fitted precision is β/4) — the fit has two parameters and runs in ~1 s after compilation.
* ``grouped``: G = 3 groups of n = 8 points, M = 4 shared inducing inputs, R = 100, 100 + 100 draws
  thinned by 5; 21 ranked quantities (μ, τ and the three per-group values of ℓ, s², σ, and f at two
  inputs per group), so the accept threshold is p > 1e-3 / 21 ≈ 4.8e-5. Accept only: a reject run would
  cost another ~25 s; the wrong variant was checked by hand (p(noise_mu) ≈ 1e-30, p(noise[g]) < 1e-40).

Observed on the development machine (seed 0): ``blr`` min p = 0.013 (f[1]), reject p(β) ≈ 1e-189;
``grouped`` min p = 0.05.
"""

import functools

import numpy as np
import pytest
from stochastic import record, seed

from bayes_rbfn.sbc import LATENT_INPUTS, quantity_names, run_sbc

ACCEPT_FAMILY = 1e-3
REJECT_P = 1e-6
MAX_DIVERGENT = 0.01
COMMON = dict(reps=100, draws=100, warmup=100, thin=5, seed=seed(0))
SETTINGS = {
    "blr": dict(n=20, num_inducing=5, **COMMON),
    "grouped": dict(n=8, num_inducing=4, num_groups=3, **COMMON),
}


@functools.cache
def sbc(model: str, noise_scale: float = 1.0):
    return run_sbc(model=model, noise_scale=noise_scale, **SETTINGS[model])


def _check_calibrated(r, model):
    Q = len(r.params)
    record("sbc", model=model, min_p=r.min_pvalue, divergences=r.divergences)
    assert r.params == quantity_names(model, SETTINGS[model].get("num_groups", 3))
    assert r.ranks.shape == (COMMON["reps"], Q)
    assert r.ranks.min() >= 0 and r.ranks.max() <= COMMON["draws"] // COMMON["thin"]
    assert all(np.isfinite(list(r.chi2.values())))
    assert r.min_pvalue > ACCEPT_FAMILY / Q, (r.pvalues, r.chi2)
    assert r.divergences < MAX_DIVERGENT * COMMON["reps"] * COMMON["draws"], r.divergences


@pytest.mark.stochastic
def test_sbc_blr_accepts():
    """Bishop BLR with α, β sampled (weights marginalised): α, β, f(0.3), f(0.75) uniform, every
    p > 1e-3 / 4; fewer than 1% divergent transitions."""
    _check_calibrated(sbc("blr"), "blr")


@pytest.mark.stochastic
def test_sbc_blr_detects_doubled_noise():
    """Fitted noise = 2 × simulated noise (fitted precision β/4): the posterior of β shifts up by log 4,
    the true β ranks near the bottom (mean fractional rank < 0.25) and p(β) < 1e-6."""
    r = sbc("blr", 2.0)
    assert r.pvalues["beta"] < REJECT_P, r.pvalues
    assert np.mean(r.ranks[:, r.params.index("beta")]) < 0.25 * (r.num_ranks - 1)


@pytest.mark.stochastic
def test_sbc_grouped_accepts():
    """Hierarchical SoR, G = 3, non-centred: population μ and τ, per-group ℓ, s², σ and the latent f of each
    group at two inputs are uniform — every p > 1e-3 / 21; fewer than 1% divergent transitions."""
    r = sbc("grouped")
    _check_calibrated(r, "grouped")
    assert len(r.params) == 6 + 3 * 3 + 3 * len(LATENT_INPUTS)
