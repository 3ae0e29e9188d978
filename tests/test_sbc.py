"""Simulation-based calibration of the SoR model (issue 8 part 2; :mod:`bayes_rbfn.sbc`).

Both tests share one compiled program (same shapes; ``noise_scale`` is traced): R = 100 replications,
n = 20, M = 5, 100 warmup + 100 draws of one NUTS chain each, thinned by 5 → L = 20 draws, ranks in
{0, …, 20}, χ² on 10 bins (≥ 10 expected counts per bin, 9 degrees of freedom). Fixed seed, so the outcome is
deterministic on a given platform. ~70 s on 2 cores (compilation ~45 s, each run ~12 s).
"""

import numpy as np
import pytest

from bayes_rbfn.sbc import PARAMS, chi2_uniformity, plot_ecdf, run_sbc

SETTINGS = dict(model="sor", reps=100, n=20, num_inducing=5, draws=100, warmup=100, thin=5, seed=0)


@pytest.fixture(scope="module")
def calibrated():
    return run_sbc(**SETTINGS)


def test_sbc_sor_accepts(calibrated, tmp_path):
    """Well-specified SoR: ranks of every true hyperparameter are uniform — p > 0.001 for each of
    log ℓ, log s², log σ (a 0.1% test per parameter; with 3 parameters the family-wise false-alarm rate of
    a correct sampler is < 0.3%). Also: ranks lie in {0, …, L}, and the ECDF plot is written."""
    r = calibrated
    assert r.ranks.shape == (SETTINGS["reps"], len(PARAMS))
    assert r.ranks.min() >= 0 and r.ranks.max() <= SETTINGS["draws"] // SETTINGS["thin"]
    for p in PARAMS:
        assert r.pvalues[p] > 1e-3, (p, r.pvalues, r.chi2)
    path = tmp_path / "sbc.png"
    plot_ecdf(r, path)
    assert path.stat().st_size > 0


def test_sbc_detects_doubled_noise():
    """Misspecified fit (fitted noise = 2 × simulator noise): the posterior of log σ shifts by −log 2, the
    true value ranks near the top, and the χ² test rejects — p < 0.001 for log_noise."""
    r = run_sbc(**SETTINGS, noise_scale=2.0)
    assert r.pvalues["log_noise"] < 1e-3, r.pvalues
    assert np.mean(r.ranks[:, PARAMS.index("log_noise")]) > 0.75 * (r.num_ranks - 1)


def test_chi2_uniformity_exact_expectations():
    """The χ² helper: perfectly uniform ranks give statistic 0 / p = 1, all-equal ranks p ≈ 0, and
    unequal bins (21 rank values into 4 bins) use exact expected counts."""
    ranks = np.repeat(np.arange(21), 10)
    stat, p = chi2_uniformity(ranks, 21, 4)
    assert stat == pytest.approx(0.0, abs=1e-12) and p == pytest.approx(1.0)
    stat, p = chi2_uniformity(np.zeros(210, int), 21, 7)
    assert p < 1e-30


def test_run_sbc_rejects_bad_arguments():
    """Argument errors name the argument."""
    with pytest.raises(ValueError, match="model"):
        run_sbc(model="nope")
    with pytest.raises(ValueError, match="thin"):
        run_sbc(draws=4, thin=5)
    with pytest.raises(ValueError, match="noise_scale"):
        run_sbc(noise_scale=0.0)
    with pytest.raises(ValueError, match="num_inducing"):
        run_sbc(n=3, num_inducing=5)
