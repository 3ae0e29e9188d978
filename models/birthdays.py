"""The Birthdays model: US births per day 1969–1988 as an additive RBF network ([1], [2]).

The relative number of births y (births over their mean, standardised) on day t is

    y = μ + f_trend(t) + f_year(t) + exp(g(t)) · β_dow[w(t)] + β_doy[d(t)] + Σ_h γ_h 1_h(t) + ε,

a slow trend, a yearly cycle, a day-of-week effect whose size drifts slowly (g is a smooth trend with
mean zero over the days), the day-of-year effects, the floating holidays (Memorial Day, Labor Day,
Thanksgiving, each with the day after) and ε ~ N(0, σ²), as in the case study's model 8 [1] and numpyro's
``examples/hsgp.py``.

Every part that enters linearly under a Gaussian prior is one component of an
:class:`~bayes_rbfn.gp.kernels.Additive` kernel, and :class:`~bayes_rbfn.models.distributions.SparseGP`
integrates all their weights out at once in its one Woodbury pass:

================  ==============================================  =========================================
component         kernel                                          inducing inputs (centres)
================  ==============================================  =========================================
``intercept``     ``Constant(1)``: μ ~ N(0, 1)                    one
``trend``         ``SquaredExponential(ℓ₁, s₁²)`` on t            ``M_trend`` evenly over the days
``year``          ``Periodic(ℓ₂, s₂², one year)`` on t            ``M_year`` over one year only
``week``          ``Linear(1)`` on exp(g(t)) · onehot(w(t))       the 7 unit vectors: β_dow ~ N(0, 1)
``holiday``       ``Linear(1)`` on the 3 holiday indicators        the 3 unit vectors: γ_h ~ N(0, 1)
================  ==============================================  =========================================

The day-of-year effects β_doy ~ N(0, τ²), one per day of the year, are the same kind of part, 366
one-hot columns under one Gaussian prior; as columns of the Woodbury pass they would cost (M + 366)² per
data point, so ``SparseGP`` takes them as group effects (``groups=`` the day of the year,
:mod:`bayes_rbfn.gp.effects`) and integrates them out by their Schur complement at O(NM + 366 M²).

What NUTS samples is what enters non-linearly: the eight hyperparameters and the week trend g (an RBF
network in weight space, :func:`~bayes_rbfn.models.layers.rbfn`, whose exp multiplies the weekday
columns). Thousands of days pin g down, so the layer is centred: NUTS samples the network's values at its
centres (whitened weights would have to move with the week trend's amplitude and lengthscale). g is the
network less its mean over the days: a constant added to g is undone by scaling the weekday effects β_dow,
so without it g's level would be pinned down by β_dow's prior alone, a ridge the sampler would have to
travel.

References
----------
[1] Gelman, A., Vehtari, A., Simpson, D. et al. (2020). Bayesian workflow book – Birthdays.
    https://avehtari.github.io/casestudies/Birthdays/birthdays.html
[2] Gelman, A. et al. (2013). *Bayesian Data Analysis*, 3rd ed., ch. 21 and the cover.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd

from bayes_rbfn.gp.inducing import periodic_centres
from bayes_rbfn.gp.kernels import Constant, Linear, Periodic, SquaredExponential, additive
from bayes_rbfn.models.distributions import SparseGP
from bayes_rbfn.models.layers import rbfn
from bayes_rbfn.models.priors import TruncatedInverseGamma

__all__ = [
    "COLUMNS",
    "DATA",
    "HOLIDAYS",
    "HYPERPARAMETERS",
    "PRIORS",
    "WEEK_LENGTHSCALE_MAX",
    "birthdays_inputs",
    "birthdays_model",
    "centres",
    "holiday_indicators",
    "load_birthdays",
    "sample_hyperparameters",
]

#: The floating holidays, each marking the day itself and the day after.
HOLIDAYS = ("memorial", "labour", "thanksgiving")

#: The columns of the model's inputs X.
COLUMNS = ("t", "day_of_week", "day_of_year", *HOLIDAYS)

#: The packaged data (``bayes_rbfn/data/birthdays``, its provenance in the README there).
DATA = importlib.resources.files("bayes_rbfn.data") / "birthdays" / "births_usa_1969.csv"

#: Days per year, the period of the yearly component.
YEAR = 365.25

#: The day-of-year effects: one per day of a leap year.
DAYS_OF_YEAR = 366


def holiday_indicators(dates: pd.Series) -> dict[str, np.ndarray]:
    """0/1 indicators of the floating holidays and the day after each.

    Memorial Day (last Monday of May), Labor Day (first Monday of September), Thanksgiving (fourth Thursday
    of November).
    """
    dates = pd.Series(pd.to_datetime(dates)).reset_index(drop=True)
    month, weekday, day = dates.dt.month, dates.dt.day_of_week, dates.dt.day
    days = {
        "memorial": (month == 5) & (weekday == 0) & (day >= 25),
        "labour": (month == 9) & (weekday == 0) & (day <= 7),
        "thanksgiving": (month == 11) & (weekday == 3) & (day >= 22) & (day <= 28),
    }
    out = {}
    for name, is_day in days.items():
        after = is_day.shift(1, fill_value=False)
        out[name] = (is_day | after).to_numpy(dtype=np.float64)
    return out


def birthdays_inputs(frame: pd.DataFrame) -> dict[str, Any]:
    """The model's data from the case study's table.

    The table's columns are year, month, day, births, day_of_year, day_of_week, id.

    Returns a dict: ``X`` (N, 6) with the columns of :data:`COLUMNS` (t standardised; day of week 0 =
    Monday … 6; day of year 0 … 365, Feb 29 = 59 and Mar 1 = 60 in every year; the holiday indicators),
    ``y`` (N,) the standardised relative births, ``dates``, and the scales to undo them: ``t_mean``,
    ``t_sd`` (days), ``y_mean``, ``y_sd`` (relative births), ``births_mean``.
    """
    t = frame["id"].to_numpy(dtype=np.float64)
    dates = pd.to_datetime(dict(year=frame["year"], month=frame["month"], day=frame["day"]))
    relative = frame["births"].to_numpy(dtype=np.float64) / frame["births"].mean()
    t_mean, t_sd = t.mean(), t.std()
    y_mean, y_sd = relative.mean(), relative.std()
    holidays = holiday_indicators(dates)
    X = np.column_stack(
        [
            (t - t_mean) / t_sd,
            frame["day_of_week"].to_numpy(dtype=np.float64) - 1.0,
            frame["day_of_year"].to_numpy(dtype=np.float64) - 1.0,
            *(holidays[h] for h in HOLIDAYS),
        ]
    )
    return {
        "X": X,
        "y": (relative - y_mean) / y_sd,
        "dates": dates.to_numpy(),
        "t_mean": t_mean,
        "t_sd": t_sd,
        "y_mean": y_mean,
        "y_sd": y_sd,
        "births_mean": float(frame["births"].mean()),
    }


#: The week trend's largest lengthscale, in standardised t: about 1.4 times the spacing of its 6 centres.
#: Above ~2 spacings the centred network's prior N(0, s² K_uu) is nearly singular (K_uu's smallest
#: eigenvalue is 10⁻³ of its diagonal at ℓ = 1.2, 10⁻⁵ at ℓ = 2), so its density falls off a wall there
#: and NUTS trajectories that reach it diverge. The cut removes 5·10⁻⁵ of the case study's prior mass.
WEEK_LENGTHSCALE_MAX = 1.0

#: The hyperparameters' priors, for standardised t and y; the case study's where numpyro's version of
#: it states them ([1]; ``examples/hsgp.py``), the week trend's lengthscale cut off at
#: :data:`WEEK_LENGTHSCALE_MAX`. Amplitudes s are standard deviations (variance s²).
PRIORS = {
    "trend_lengthscale": dist.InverseGamma(10.0, 2.0),
    "trend_amplitude": dist.HalfNormal(1.0),
    "year_lengthscale": dist.HalfNormal(0.2),
    "year_amplitude": dist.HalfNormal(1.0),
    "week_lengthscale": TruncatedInverseGamma(10.0, 2.0, WEEK_LENGTHSCALE_MAX),
    "week_amplitude": dist.HalfNormal(1.0),
    "doy_scale": dist.HalfNormal(0.2),
    "noise": dist.HalfNormal(0.5),
}

#: The names of the hyperparameters, the sites whose convergence a fit is judged by.
HYPERPARAMETERS = tuple(PRIORS)


def sample_hyperparameters() -> dict[str, Any]:
    """Sample sites of :data:`PRIORS`, in their order; {name: value}."""
    return {name: numpyro.sample(name, prior) for name, prior in PRIORS.items()}


def centres(X: Any, t_sd: float, *, num_trend: int = 20, num_year: int = 30, num_week: int = 6) -> dict:
    """The centres of the smooth parts, in standardised t.

    The trend's and the week trend's evenly over the days, the year's over one year (a periodic kernel
    needs no more). The week trend's 6 centres (four years apart over the whole record) resolve about
    what the case study's 8 Hilbert-space basis functions on [−1.5 max|t|, 1.5 max|t|] do [1].
    """
    t = np.asarray(X)[:, 0]
    return {
        "trend": np.linspace(t.min(), t.max(), num_trend),
        "year": periodic_centres(num_year, YEAR / t_sd, start=float(t.min())),
        "week": np.linspace(t.min(), t.max(), num_week),
    }


def load_birthdays(years: int | None = None) -> dict[str, Any]:
    """The packaged data as the model takes them; ``model_args`` is ``(X, Z, period, y)``.

    :func:`birthdays_inputs` of the whole record, or of its last ``years`` years, with the centres ``Z``
    (:func:`centres`) and ``period`` (one year in standardised t).
    """
    frame = pd.read_csv(DATA)
    if years is not None:
        last = int(frame["year"].max())
        if not 1 <= years <= last - int(frame["year"].min()) + 1:
            raise ValueError(f"years: expected 1 … {last - int(frame['year'].min()) + 1}, got {years!r}")
        frame = frame[frame["year"] > last - years].reset_index(drop=True)
    data = birthdays_inputs(frame)
    data["period"] = YEAR / data["t_sd"]
    data["Z"] = centres(data["X"], data["t_sd"])
    data["model_args"] = (data["X"], data["Z"], data["period"], data["y"])
    return data


def birthdays_model(X: Any, Z: dict, period: float, y: Any = None) -> None:
    """The Birthdays model (module docstring) as a NumPyro model.

    Args:
        X: (N, 6) inputs with the columns of :data:`COLUMNS` (:func:`birthdays_inputs`).
        Z: the centres of :func:`centres`.
        period: one year in standardised t.
        y: (N,) standardised relative births, or None to simulate.

    Sites: the hyperparameters (``trend_lengthscale``, ``trend_amplitude``, ``year_lengthscale``,
    ``year_amplitude``, ``week_lengthscale``, ``week_amplitude``, ``doy_scale``, ``noise``), the week
    trend's network (``rbfn`` layer ``week_rbfn``: its values at its centres ``week_rbfn_u`` and at the
    days ``week_rbfn``), g at the days ``week_trend`` (the network less its mean over them), and ``y``, whose
    ``SparseGP`` integrates out the day-of-year effects with the components (their posterior:
    ``group_moments``). X may be traced (the model runs under ``jit`` with the data as arguments).
    """
    X = jnp.asarray(X)
    day_of_year = X[:, 2].astype(jnp.int32)
    t = X[:, :1]
    h = sample_hyperparameters()
    week = SquaredExponential(h["week_lengthscale"], h["week_amplitude"] ** 2)
    network = rbfn("week_rbfn", week, t, jnp.asarray(Z["week"])[:, None], centred=True)
    g = numpyro.deterministic("week_trend", network - jnp.mean(network))
    weekday = jnp.exp(g)[:, None] * (X[:, 1:2] == jnp.arange(7.0)[None, :])

    inputs = jnp.concatenate([t, weekday, X[:, 3:6]], axis=1)  # t | 7 weekday columns | 3 holidays
    trend = SquaredExponential(h["trend_lengthscale"], h["trend_amplitude"] ** 2)
    year = Periodic(h["year_lengthscale"], h["year_amplitude"] ** 2, period)
    kernel, Z_all = additive(
        {
            "intercept": (Constant(1.0), jnp.zeros((1, 11))),
            "trend": (trend.on_dims(0), Z["trend"]),
            "year": (year.on_dims(0), Z["year"]),
            "week": (Linear(1.0).on_dims(list(range(1, 8))), jnp.eye(7)),
            "holiday": (Linear(1.0).on_dims([8, 9, 10]), jnp.eye(3)),
        },
        n_inputs=11,
    )
    doy = SparseGP(
        kernel,
        inputs,
        Z_all,
        h["noise"],
        groups=day_of_year,
        group_scale=h["doy_scale"],
        num_groups=DAYS_OF_YEAR,
    )
    numpyro.sample("y", doy, obs=y)
