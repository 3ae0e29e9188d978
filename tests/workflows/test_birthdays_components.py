"""The Birthdays components (``workflows.birthdays.components``) against dense Gaussian conditioning.

At two given draws of the sampled sites, on the first 60 days, each component's posterior mean given the
draw is E[f_c | y] = Cov(f_c, y) C⁻¹ y with C the dense covariance of the model's marginal (written in
NumPy, as in ``tests/models/test_birthdays.py``): Q_c C⁻¹ y for the trend (with the intercept) and the
year at the days, W_cᵀ C⁻¹ y for the weekday and holiday effects (their design columns W_c under
N(0, I) priors), τ² Hᵀ C⁻¹ y for the day-of-year effects, and g = K_fu K_uu⁻¹ u for the week trend.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import reference as ref
from conftest import assert_close

from bayes_rbfn.models import birthdays as B
from bayes_rbfn.workflows.birthdays import components

N_DAYS = 60
DRAWS = [
    {
        "trend_lengthscale": 0.7,
        "trend_amplitude": 0.9,
        "year_lengthscale": 0.6,
        "year_amplitude": 0.4,
        "week_lengthscale": 0.8,
        "week_amplitude": 0.3,
        "doy_scale": 0.2,
        "noise": 0.5,
    },
    {
        "trend_lengthscale": 0.4,
        "trend_amplitude": 0.5,
        "year_lengthscale": 0.9,
        "year_amplitude": 0.7,
        "week_lengthscale": 0.5,
        "week_amplitude": 0.2,
        "doy_scale": 0.3,
        "noise": 0.3,
    },
]


def _data():
    data = B.birthdays_inputs(pd.read_csv(B.DATA).iloc[:N_DAYS])
    data["period"] = B.YEAR / data["t_sd"]
    data["Z"] = B.centres(data["X"], data["t_sd"], num_trend=6, num_year=5, num_week=4)
    return data


def _dense_means(values, data):
    """Every component's E[· | y, θ] from the dense covariance of the marginal."""
    X, y = data["X"], data["y"]
    dense = ref.birthdays_blocks(values, X, data["Z"], data["period"])
    Q, W, H = dense["Q"], dense["W"], dense["H"]
    tau2 = values["doy_scale"] ** 2
    C = sum(Q.values()) + tau2 * H @ H.T + values["noise"] ** 2 * np.eye(len(y))
    Cinv_y = np.linalg.solve(C, y)
    # The linear components' weights β (K_uu = I, jittered): E[β | y] = (1 + jitter)⁻¹ Wᵀ C⁻¹ y.
    return {
        "trend": (Q["intercept"] + Q["trend"]) @ Cinv_y,
        "year": Q["year"] @ Cinv_y,
        "week_trend": dense["g"],
        "weekday_effect": W["week"].T @ Cinv_y / (1.0 + dense["jitter"]),
        "holiday_effect": W["holiday"].T @ Cinv_y / (1.0 + dense["jitter"]),
        "day_of_year_effect": tau2 * H.T @ Cinv_y,
    }


def test_components_equal_dense_conditioning():
    data = _data()
    rng = np.random.default_rng(1)
    draws = [{**d, "week_rbfn_u": 0.3 * rng.normal(size=4)} for d in DRAWS]
    samples = {k: np.array([d[k] for d in draws]) for k in draws[0]}
    got = components(samples, data)
    for i, values in enumerate(draws):
        want = _dense_means(values, data)
        for name, expected in want.items():
            assert got[name].shape[1:] == expected.shape, name
            assert_close(got[name][i], expected, rtol=1e-8, atol=1e-10), name
