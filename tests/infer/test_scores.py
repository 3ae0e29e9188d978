"""Backtest scores (:mod:`bayes_rbfn.infer.scores`) against direct NumPy/SciPy computations on small mixtures:
coverage, the interval score (Gneiting & Raftery 2007 eq. (43)), the CRPS of a Gaussian mixture against
numerical integration of ∫ (F(x) − 1{x ≥ y})² dx, and the log predictive density."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.stats
from conftest import assert_close

from bayes_rbfn.infer import scores

RNG = np.random.default_rng(7)
T, S = 6, 5
MEANS = RNG.normal(size=(T, S))
SDS = RNG.uniform(0.3, 1.5, size=(T, S))
Y = RNG.normal(scale=1.5, size=S)


def _cdf(x, j):
    return np.mean(scipy.stats.norm.cdf(x, MEANS[:, j], SDS[:, j]))


def test_crps_of_a_gaussian_mixture_equals_numerical_integration():
    expected = []
    for j in range(S):
        lo, hi = MEANS[:, j].min() - 12 * SDS[:, j].max(), MEANS[:, j].max() + 12 * SDS[:, j].max()
        left = scipy.integrate.quad(lambda x, j=j: _cdf(x, j) ** 2, lo, Y[j], limit=200)[0]
        right = scipy.integrate.quad(lambda x, j=j: (1 - _cdf(x, j)) ** 2, Y[j], hi, limit=200)[0]
        expected.append(left + right)
    assert_close(scores.crps_mixture(MEANS, SDS, Y), np.array(expected), rtol=1e-7, atol=1e-9)


def test_log_predictive_density_is_the_log_of_the_mixture_density():
    direct = [np.log(np.mean(scipy.stats.norm.pdf(Y[j], MEANS[:, j], SDS[:, j]))) for j in range(S)]
    assert_close(scores.log_predictive_density(MEANS, SDS, Y), np.array(direct))


def test_interval_score_and_coverage():
    lower, upper = np.array([0.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0])
    y = np.array([0.5, -0.5, 3.0])
    # inside: width 1; below by 0.5: 1 + (2/0.1)·0.5; above by 2: 1 + (2/0.1)·2
    assert_close(scores.interval_score(lower, upper, y, 0.1), np.array([1.0, 11.0, 41.0]))
    assert scores.coverage(lower, upper, y) == pytest.approx(1 / 3)


def test_score_forecast_bands_are_the_mixture_quantiles():
    """The band of level c is [F⁻¹((1−c)/2), F⁻¹((1+c)/2)] of the mixture (root-finding in SciPy)."""
    out = scores.score_forecast(MEANS, SDS, Y, levels=(0.8,))
    lower = [scipy.optimize.brentq(lambda x, j=j: _cdf(x, j) - 0.1, -30, 30, xtol=1e-13) for j in range(S)]
    upper = [scipy.optimize.brentq(lambda x, j=j: _cdf(x, j) - 0.9, -30, 30, xtol=1e-13) for j in range(S)]
    inside = np.mean((np.array(lower) <= Y) & (Y <= np.array(upper)))
    assert out["coverage_80"] == pytest.approx(inside)
    expected_is = np.mean(scores.interval_score(np.array(lower), np.array(upper), Y, 0.2))
    assert out["interval_score_80"] == pytest.approx(expected_is, rel=1e-6)
    assert out["mae"] == pytest.approx(np.mean(np.abs(MEANS.mean(axis=0) - Y)))
    assert out["rmse"] == pytest.approx(np.sqrt(np.mean((MEANS.mean(axis=0) - Y) ** 2)))
    assert out["n"] == S
