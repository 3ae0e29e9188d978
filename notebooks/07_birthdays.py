# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Birthdays: an additive RBF network for US births per day, 1969–1988
#
# The case study of Gelman et al. (*Bayesian Data Analysis*, 3rd ed., the cover) and Vehtari's
# "Bayesian workflow book – Birthdays": the relative number of births on each of 7,305 days is a slow
# trend, plus a yearly cycle, plus a day-of-week pattern whose size drifts over the years, plus effects of
# the day of the year and of the floating holidays. `bayes_rbfn.models.birthdays` writes it as one
# additive RBF network (`bayes_rbfn.gp.kernels.additive`): every part that enters linearly under a
# Gaussian prior — the intercept, the trend's and the year's weights, the weekday and holiday effects —
# is a component whose weights `SparseGP` integrates out in one Woodbury pass, with the 366 day-of-year
# effects as group effects (`groups=`, integrated out by their Schur complement). NUTS samples only the
# eight hyperparameters and the week trend g (whose exp multiplies the weekday effects). Each part's
# posterior then comes back analytically, draw by draw (`SparseGP.component_moments` and
# `SparseGP.group_moments`).

# %%
import os
import tempfile
import time
from pathlib import Path

import numpyro

numpyro.set_host_device_count(2)  # two CPU devices: the two NUTS chains run in parallel
numpyro.enable_x64()

import arviz as az
import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from numpyro import handlers
from numpyro.infer import MCMC, NUTS, init_to_median

import bayes_rbfn as br
from bayes_rbfn.infer.loo import replayed_loo
from bayes_rbfn.models import birthdays as B

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb07_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()

# The test suite runs every notebook with NOTEBOOK_SMOKE_TEST=1: the same code on the last year (1988)
# with 10 warm-up and 10 kept iterations per chain (a smoke test, not a result).
SMOKE_TEST = bool(os.environ.get("NOTEBOOK_SMOKE_TEST"))


def iterations(n: int) -> int:
    return min(n, 10) if SMOKE_TEST else n


frame = pd.read_csv(B.DATA)
if SMOKE_TEST:
    frame = frame[frame["year"] == 1988].reset_index(drop=True)
data = B.birthdays_inputs(frame)
X, y = data["X"], data["y"]
dates = pd.to_datetime(data["dates"])
period = B.YEAR / data["t_sd"]
Z = B.centres(X, data["t_sd"])
print(
    f"{len(y)} days, {dates[0]:%Y-%m-%d} to {dates[-1]:%Y-%m-%d}; centres: "
    + ", ".join(f"{k} {len(v)}" for k, v in Z.items())
)

# %% [markdown]
# ## The fit
#
# Two chains of NUTS (NumPyro's own), started at the prior median.

# %%
mcmc = MCMC(
    NUTS(B.birthdays_model, init_strategy=init_to_median()),
    num_warmup=iterations(500),
    num_samples=iterations(500),
    num_chains=2,
    progress_bar=False,
)
mcmc.run(jax.random.PRNGKey(0), X, Z, period, y, extra_fields=("diverging",))
samples = mcmc.get_samples(group_by_chain=True)
hyper = list(B.HYPERPARAMETERS)
idata = az.from_dict(posterior={k: np.asarray(v) for k, v in samples.items()})
print(az.summary(idata, var_names=hyper, round_to=3))
print("divergences:", int(np.sum(mcmc.get_extra_fields()["diverging"])))

# %% [markdown]
# ## PSIS-LOO and LOO-R²
#
# The marginal does not factorise over days, so the pointwise values for PSIS-LOO are its leave-one-out
# conditionals log p(y_i | y_−i, θ) (Bürkner, Gabry & Vehtari 2020), from the same O(NM²) pass; their
# residuals give the LOO predictive means and LOO-R².

# %%
args = (X, Z, period, y)
loo_values = replayed_loo(idata, B.birthdays_model, args, {}, batch_size=16)
residuals = replayed_loo(idata, B.birthdays_model, args, {}, batch_size=16, statistic="residual")
idata.add_groups(log_likelihood={"y": loo_values})
loo = az.loo(idata)
print(loo)
print(f"LOO-R² = {br.loo_r2(idata, y, loo_values, residuals):.3f}")

# %% [markdown]
# ## The components, draw by draw
#
# At every kept draw the model is replayed, and the observed site's `SparseGP` gives each component's
# analytic posterior mean at the inputs we ask for: the trend over the days, the year over one year,
# each weekday's effect exp(g(t)) β_w over the years, the holidays, and the day-of-year effects.

# %%
flat = {k: np.asarray(v).reshape(-1, *np.shape(v)[2:]) for k, v in samples.items()}
draws = np.linspace(0, len(flat["noise"]) - 1, 2 if SMOKE_TEST else 40).astype(int)
t = X[:, 0]
year_days = np.arange(366.0)
t_year = t[0] + year_days / data["t_sd"]  # one year of days from the first
grid = np.zeros((len(t), 11))
grid[:, 0] = t
year_grid = np.zeros((366, 11))
year_grid[:, 0] = t_year


holiday_rows = np.zeros((3, 11))
holiday_rows[np.arange(3), 8 + np.arange(3)] = 1.0


def component_means(i):
    """Each component's posterior mean at draw i, from one factorisation of the draw's marginal."""
    values = {k: v[i] for k, v in flat.items()}
    trace = handlers.trace(handlers.substitute(B.birthdays_model, data=values)).get_trace(*args)
    g = np.asarray(trace["week_trend"]["value"])
    week_rows = np.tile(grid, (7, 1))  # weekday w's rows carry exp(g(t)) in its column
    for w in range(7):
        week_rows[w * len(t) : (w + 1) * len(t), 1 + w] = np.exp(g)
    marginal = trace["y"]["fn"]
    moments = marginal.component_moments(
        y,
        {"intercept": grid, "trend": grid, "year": year_grid, "week": week_rows, "holiday": holiday_rows},
    )
    return {
        "trend": moments["trend"].mean + moments["intercept"].mean,
        "year": moments["year"].mean,
        "doy": np.asarray(marginal.group_moments(y).mean),
        "week": np.asarray(moments["week"].mean).reshape(7, len(t)),
        "holiday": np.asarray(moments["holiday"].mean),
    }


parts = [component_means(i) for i in draws]
mean = {k: np.mean([np.asarray(p[k]) for p in parts], axis=0) for k in parts[0]}


def to_relative(f):
    """Standardised units back to relative births (1 = the average day)."""
    return np.asarray(f) * data["y_sd"] + data["y_mean"]


# %% [markdown]
# ## The case study's figure
#
# The data with the trend; the yearly cycle; each weekday's effect over the years; and the day-of-year
# effects of 1988 (plus the floating holidays), with the special days labelled.

# %%
relative = to_relative(y)
fig = plt.figure(figsize=(14, 9))
grid_spec = fig.add_gridspec(2, 3, hspace=0.3, wspace=0.25)
ax = fig.add_subplot(grid_spec[0, :])
in_1988 = dates.year == 1988
doy_1988 = X[in_1988, 2].astype(int)
holidays_1988 = X[in_1988, 3:6] @ mean["holiday"]
effect = (mean["doy"][doy_1988] + holidays_1988) * data["y_sd"] + 1.0
ax.plot(dates[in_1988], effect, color="k", lw=1.5)
special = {
    "New year": "1988-01-01",
    "Valentine's": "1988-02-14",
    "Leap day": "1988-02-29",
    "April 1st": "1988-04-01",
    "Memorial day": "1988-05-30",
    "Independence day": "1988-07-04",
    "Labor day": "1988-09-05",
    "Halloween": "1988-10-31",
    "Thanksgiving": "1988-11-24",
    "Christmas": "1988-12-25",
}
for label, day in special.items():
    when = pd.Timestamp(day)
    value = effect[np.flatnonzero(dates[in_1988] == when)[0]]
    ax.annotate(
        label,
        (when, value),
        textcoords="offset points",
        xytext=(0, -14 if value < 1 else 6),
        ha="center",
        fontsize=8,
    )
ax.set_title("Day-of-year and floating-holiday effects, 1988 (relative births)")
ax.axhline(1.0, color="gray", ls="--", lw=1)

ax = fig.add_subplot(grid_spec[1, 0])
ax.plot(dates, relative, ".", color="lightgray", ms=2)
ax.plot(dates, to_relative(mean["trend"]), color="k", lw=2)
ax.set_title("Data and the slow trend")

ax = fig.add_subplot(grid_spec[1, 1])
ax.plot(year_days + 1, 1.0 + mean["year"] * data["y_sd"], color="k", lw=2)
ax.set_title("Yearly cycle")
ax.set_xlabel("day of year")

ax = fig.add_subplot(grid_spec[1, 2])
for w, name in enumerate(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]):
    line = 1.0 + mean["week"][w] * data["y_sd"]
    ax.plot(dates, line, lw=1.5)
    ax.annotate(name, (dates[-1], line[-1]), fontsize=8)
ax.set_title("Day-of-week effects over the years")
fig.savefig(OUT / "birthdays.png", dpi=100, bbox_inches="tight")
print(f"saved {OUT / 'birthdays.png'}; notebook time {time.perf_counter() - START:.0f} s")
