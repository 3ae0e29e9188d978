"""The Birthdays model (``bayes_rbfn.models.birthdays``): its data and its log density, against the
calendar and a dense SciPy Gaussian.

* the floating holidays of 1988 fall on the dates of the calendar (Memorial Day 30 May, Labor Day
  5 September, Thanksgiving 24 November, each with the day after), twice a year for every year;
* the inputs: the weekday of 1 January 1969 (a Wednesday), day-of-year codes, standardised t and y;
* the week trend g from its values at the centres, K_fu K_uu⁻¹ u;
* the observed site's log density for given values of every sampled site equals SciPy's multivariate
  normal with the dense covariance of the components (Nyström blocks of the trend and the year, the
  weekday and holiday designs, the intercept), the day-of-year effects' τ² H Hᵀ and σ²I.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import reference as ref
import scipy.stats
from conftest import assert_close
from numpyro import handlers

from bayes_rbfn.models import birthdays as B

CSV = B.DATA


@pytest.fixture(scope="module")
def frame():
    return pd.read_csv(CSV)


def test_holidays_fall_on_the_calendar_dates(frame):
    data = B.birthdays_inputs(frame)
    dates = pd.to_datetime(data["dates"])
    X = data["X"]
    in_1988 = dates.year == 1988
    want = {
        "memorial": ["1988-05-30", "1988-05-31"],
        "labour": ["1988-09-05", "1988-09-06"],
        "thanksgiving": ["1988-11-24", "1988-11-25"],
    }
    for j, name in enumerate(B.HOLIDAYS):
        column = X[:, 3 + j]
        marked = dates[in_1988 & (column == 1.0)].strftime("%Y-%m-%d").tolist()
        assert marked == want[name], name
        assert column.sum() == 2 * 20, name  # two days in each of the 20 years


def test_inputs_codes_and_scales(frame):
    data = B.birthdays_inputs(frame)
    X, y = data["X"], data["y"]
    assert X.shape == (7305, len(B.COLUMNS))
    assert X[0, 1] == 2.0  # 1969-01-01 was a Wednesday (0 = Monday)
    assert set(np.unique(X[:, 1])) == set(range(7))
    assert X[:, 2].min() == 0.0 and X[:, 2].max() == 365.0
    assert_close([X[:, 0].mean(), X[:, 0].std(), y.mean(), y.std()], [0.0, 1.0, 0.0, 1.0], atol=1e-12)
    relative = frame["births"].to_numpy() / frame["births"].mean()
    assert_close(y * data["y_sd"] + data["y_mean"], relative, rtol=1e-13)


def test_log_density_matches_dense_gaussian(frame):
    data = B.birthdays_inputs(frame.iloc[:60])
    X, y = data["X"], data["y"]
    period = B.YEAR / data["t_sd"]
    Z = B.centres(X, data["t_sd"], num_trend=6, num_year=5, num_week=4)
    rng = np.random.default_rng(0)
    values = {
        "trend_lengthscale": 0.7,
        "trend_amplitude": 0.9,
        "year_lengthscale": 0.6,
        "year_amplitude": 0.4,
        "week_lengthscale": 0.8,
        "week_amplitude": 0.3,
        "doy_scale": 0.2,
        "noise": 0.5,
        "week_rbfn_u": 0.3 * rng.normal(size=4),
    }
    trace = handlers.trace(handlers.substitute(B.birthdays_model, data=values)).get_trace(X, Z, period, y)
    got = trace["y"]["fn"].log_prob(jnp.asarray(y))

    dense = ref.birthdays_blocks(values, X, Z, period)
    assert_close(trace["week_trend"]["value"], dense["g"], rtol=1e-9)
    H = dense["H"]
    C = sum(dense["Q"].values()) + 0.2**2 * H @ H.T + 0.25 * np.eye(len(y))
    want = scipy.stats.multivariate_normal(np.zeros(len(y)), C).logpdf(y)
    assert_close(got, want, rtol=1e-9)


def test_week_lengthscale_bound_keeps_the_centred_prior_well_conditioned(frame):
    # Up to the bound the week trend's K_uu (NumPy, at its packaged centres) keeps its smallest eigenvalue
    # above 10⁻³ of its diagonal; at twice the bound it has fallen below 10⁻⁴ (the wall the bound avoids).
    data = B.birthdays_inputs(frame)
    Z = B.centres(data["X"], data["t_sd"])["week"]

    def smallest_eigenvalue(lengthscale):
        K = np.exp(-0.5 * (Z[:, None] - Z[None, :]) ** 2 / lengthscale**2)
        return np.linalg.eigvalsh(K)[0]

    bound = B.WEEK_LENGTHSCALE_MAX
    assert smallest_eigenvalue(bound) > 1e-3
    assert smallest_eigenvalue(2 * bound) < 1e-4
    prior = B.PRIORS["week_lengthscale"]
    assert prior.support.upper_bound == bound
    removed = scipy.stats.invgamma(10.0, scale=2.0).sf(bound)  # the case study's InverseGamma(10, 2)
    assert removed < 1e-4
