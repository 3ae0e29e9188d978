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
# # A Bayesian workflow: NUTS on the SoR model, diagnostics, predictive; a hierarchical panel model
#
# The kernel hyperparameters are not fixed here: NUTS samples lengthscale, variance and noise of the SoR
# GP `y ~ N(c, Q_ff + σ²I)` (its weights marginalised analytically, docs/mathematics.md#function-space-and-weight-space-agree) on Snelson's data. ArviZ
# checks the chains (r_hat, effective sample sizes; trace and rank plots drawn by `bayes_rbfn.plots`) and
# estimates the out-of-sample predictive accuracy with PSIS-LOO from the stored leave-one-out conditionals
# `log p(y_i | y_−i, θ)` (Bürkner, Gabry & Vehtari 2020). `fit` returns an ArviZ InferenceData on ArviZ 0.x
# and an xarray DataTree on ArviZ 1.x, with the same groups; ArviZ's statistics are called through
# `bayes_rbfn.io.arviz_compat` and `bayes_rbfn.infer.diagnostics`, which give the same tables under both, so
# the notebook runs under either line. The posterior predictive is the mixture over draws of the analytic
# per-draw SoR predictive (law of total variance). The second half fits the hierarchical (grouped) SoR
# model to a six-country panel of fertility rates, with per-country hyperparameters partially pooled,
# and draws each country's predictive curve.

# %%
import os
import tempfile
import time
from pathlib import Path

import numpyro

numpyro.set_host_device_count(2)  # two CPU devices: the two NUTS chains run in parallel
numpyro.enable_x64()

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

import bayes_rbfn as br
from bayes_rbfn import plots
from bayes_rbfn.infer.diagnostics import check_convergence, posterior_summary
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.datasets import load_dataset

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb05_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()


# The test suite runs every notebook with NOTEBOOK_SMOKE_TEST=1: the same code, with at most 50 NUTS
# warm-up and 50 kept iterations per chain (a smoke test, not a result).
SMOKE_TEST = bool(os.environ.get("NOTEBOOK_SMOKE_TEST"))


def iterations(n: int) -> int:
    return min(n, 50) if SMOKE_TEST else n


# %% [markdown]
# ## NUTS on the SoR model (Snelson)
#
# M = 15 k-means inducing inputs; default weakly-informative priors scaled to the data
# (`bayes_rbfn.models.families`); two chains of 300 warm-up and 300 kept draws — short, to keep the notebook fast;
# the diagnostics below say whether that was enough.

# %%
ds = load_dataset("snelson")
X, y, X_test = ds.X, ds.y, ds.X_test
idata = br.fit(
    "sor",
    X,
    y,
    num_inducing=15,
    chains=2,
    warmup=iterations(300),
    draws=iterations(300),
    X_pred=X_test,
    seed=0,
    progress=False,
    check_diagnostics=False,  # the verdict is printed below
)
print(idata)

# %%
hyper = ["lengthscale", "variance", "noise"]
summary = posterior_summary(idata, hyper)  # az.summary's table: mean, sd, 94% HDI, MCSE, ESS, r_hat
print(summary.round(3))
print()
print(check_convergence(idata).verdict())

# %%
plots.plot_trace(idata, hyper, OUT / "05_sor_trace.png")
plots.plot_rank(idata, hyper, OUT / "05_sor_rank.png")
display(Image(OUT / "05_sor_trace.png"), Image(OUT / "05_sor_rank.png"))

# %% [markdown]
# ### PSIS-LOO
#
# The stored `log_likelihood` holds one LOO conditional per observation and draw; `az.loo` importance-
# samples over the hyperparameter draws (`arviz_compat.loo` calls it and returns the same fields under both
# ArviZ lines). Pareto k values below 0.7 mean the estimate is reliable.

# %%
loo = arviz_compat.loo(idata)
print(f"elpd_loo = {loo.elpd:.1f} ± {loo.se:.1f} (p_loo = {loo.p:.1f}) over {loo.elpd_i.size} observations")
print(f"largest Pareto k: {float(loo.pareto_k.max()):.3f}")

# %% [markdown]
# ### Posterior predictive
#
# `br.predict` rebuilds the model from the InferenceData and mixes the per-draw analytic moments:
# `var(f*) = mean_s v_s + var_s m_s`, plus σ_s² for an observation y*. Outside the training inputs the band
# of y* shrinks to the noise level — SoR's variance collapse (notebook 04), now averaged over the
# hyperparameter posterior.

# %%
pred = br.predict(idata, X_test)
xs = X_test[:, 0]
fig, ax = plt.subplots(figsize=(10, 4.5))
ax.plot(X[:, 0], y, "k.", ms=3, alpha=0.4, label="data")
for s in range(0, pred.f_mean.shape[1], 30):
    ax.plot(xs, pred.f_mean[0, s], color="C0", lw=0.5, alpha=0.4)
ax.plot(xs, pred.mean, "C0", lw=2, label="posterior predictive mean")
ax.fill_between(
    xs,
    pred.mean - 2 * np.sqrt(pred.var),
    pred.mean + 2 * np.sqrt(pred.var),
    color="C0",
    alpha=0.3,
    label="±2 sd of f*",
)
ax.fill_between(
    xs,
    pred.mean - 2 * np.sqrt(pred.var_y),
    pred.mean + 2 * np.sqrt(pred.var_y),
    color="C0",
    alpha=0.12,
    label="±2 sd of y*",
)
Z = idata.constant_data["Z"].values[:, 0]
ax.plot(Z, np.full(Z.shape, y.min() - 0.4), "k^", label="Z")
ax.set_xlabel("x")
ax.set_title("SoR posterior predictive (thin lines: per-draw means)")
ax.legend(fontsize=8, ncol=2)
fig.tight_layout()
fig.savefig(OUT / "05_sor_predictive.png", dpi=110)
inside = (xs >= X.min()) & (xs <= X.max())
print(
    f"sd of y*: {np.sqrt(pred.var_y[inside]).min():.3f}–{np.sqrt(pred.var_y[inside]).max():.3f} inside the data, "
    f"{np.sqrt(pred.var_y[~inside]).min():.3f}–{np.sqrt(pred.var_y[~inside]).max():.3f} outside; "
    f"posterior mean noise σ {float(idata.posterior['noise'].mean()):.3f}"
)

# %% [markdown]
# ### Posterior predictive check and LOO-PIT
#
# `fit` stores replicates y_rep ~ p(y_rep | y, θ) in `posterior_predictive`: at each draw f is drawn from its
# conditional given the data (in weight space for SoR), then the noise is added — so the check below (the
# density of the data against those of 50 replicates, what `az.plot_ppc` draws, here in a few lines of
# matplotlib) compares the data with what the fitted model predicts, not with the prior.
#
# LOO-PIT asks whether each observation looks like a draw from its own leave-one-out predictive:
# `br.loo_pit` averages the exact LOO conditionals' CDFs Φ((y_i − μ_−i)/σ_−i) over the draws with PSIS
# weights. The values are uniform for a calibrated model: their ECDF minus the uniform CDF stays inside a
# simultaneous 95% band (here the Dvoretzky–Kiefer–Wolfowitz band ±√(log(2/0.05)/(2N)), a little wider
# than ArviZ's simulated one). (ArviZ's `loo_pit` weights the replicates instead; for a GP marginal those
# have seen y_i through f, so it is not the LOO predictive.) A fit with the noise pinned ten times too small
# shows what a misfit looks like: its predictive bands are far too narrow and the PIT values pile up at 0
# and 1.

# %%
from scipy import stats


def plot_ppc(ax, y, y_rep, num=50, seed=0):
    """The density of the data (black) over those of `num` replicates (rows of y_rep) and their mean."""
    rows = np.random.default_rng(seed).choice(len(y_rep), size=min(num, len(y_rep)), replace=False)
    grid = np.linspace(min(y.min(), y_rep[rows].min()), max(y.max(), y_rep[rows].max()), 200)
    densities = np.stack([stats.gaussian_kde(y_rep[r])(grid) for r in rows])
    ax.plot(grid, densities.T, color="C0", lw=0.5, alpha=0.3)
    ax.plot(grid, densities.mean(axis=0), "C1--", lw=1.2, label="mean of the replicates")
    ax.plot(grid, stats.gaussian_kde(y)(grid), "k", lw=1.5, label="data")
    ax.plot([], [], color="C0", lw=0.5, label=f"{len(rows)} replicates y_rep")
    ax.set_xlabel("y")
    ax.legend(fontsize=7)


def plot_pit_ecdf(ax, pit, prob=0.95):
    """ECDF of the PIT values minus the uniform CDF, in the simultaneous DKW band of probability `prob`."""
    u = np.linspace(0.0, 1.0, 501)
    half_width = np.sqrt(np.log(2.0 / (1.0 - prob)) / (2.0 * pit.size))
    ax.fill_between(u, -half_width, half_width, color="C0", alpha=0.2, lw=0, label=f"{prob:.0%} band")
    ax.plot(u, np.searchsorted(np.sort(pit), u, side="right") / pit.size - u, "C0", lw=1.2)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("PIT value")
    ax.set_ylabel("ECDF − uniform CDF")


pit = br.loo_pit(idata)
idata_narrow = br.fit(
    "sor",
    X,
    y,
    num_inducing=15,
    fixed={"noise": float(idata.posterior["noise"].mean()) / 10},
    chains=2,
    warmup=iterations(300),
    draws=iterations(300),
    seed=0,
    progress=False,
    check_diagnostics=False,
)
pit_narrow = br.loo_pit(idata_narrow)
fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
y_rep = idata.posterior_predictive["y"].values  # (chain, draw, obs)
plot_ppc(axes[0], idata.observed_data["y"].values, y_rep.reshape(-1, y_rep.shape[-1]))
axes[0].set_title("posterior predictive check")
for ax, values, title in ((axes[1], pit, "LOO-PIT, sampled noise"), (axes[2], pit_narrow, "LOO-PIT, σ/10")):
    plot_pit_ecdf(ax, values)
    ax.set_title(title)
fig.tight_layout()
fig.savefig(OUT / "05_sor_ppc_loo_pit.png", dpi=100)
for name, values in (("sampled noise", pit), ("noise pinned at σ/10", pit_narrow)):
    outside = np.mean((values < 0.025) | (values > 0.975))
    print(f"{name}: KS p = {stats.kstest(values, 'uniform').pvalue:.3g}, {outside:.0%} outside the 95% band")

# %% [markdown]
# ## Hierarchical model: fertility rates of six countries
#
# The World Bank panel packaged with the library, cut to six countries that went through the demographic
# transition (Bangladesh, Egypt, Indonesia, India, Peru, Turkey), with X = year and y = births per woman.
# The `grouped` model gives each country its own SoR GP (lengthscale, variance, noise), drawn from a
# population distribution whose location and spread are sampled too (non-centred), so countries borrow
# strength from each other. Ten shared inducing years.
#
# These series are very smooth (the World Bank interpolates between censuses), so the noise is tiny
# (~0.005 births/woman) and the posterior is sharp and correlated: NUTS gets a dense mass matrix, a higher
# target acceptance (0.95) and a longer warm-up (500) than the Snelson fit; with the defaults (diagonal
# mass, 0.8, 300) the chains of this model did not mix in our trials.
#
# Even so, two chains of 400 draws are a short run for a hierarchical model: the population parameters
# mix slowest, the spreads τ (how much the countries differ) in particular, since six groups say little
# about them and their posterior reaches towards 0.
# The verdict below applies the library's thresholds (r_hat < 1.01, ESS ≥ 100 per chain, no divergences)
# and the table lists the three parameters with the smallest effective sample size. If the verdict is
# "do not trust", run longer (e.g. 4 chains × 1000 draws) before drawing conclusions about the
# population; the per-country curves depend mostly on the per-country parameters.

# %%
panel = load_dataset("fertility", countries=["BGD", "EGY", "IDN", "IND", "PER", "TUR"])
print(panel)
Xp, yp, group = panel.X, panel.y, panel.group
idata_g = br.fit(
    "grouped",
    Xp,
    yp,
    group=group,
    num_inducing=10,
    chains=2,
    warmup=iterations(500),
    draws=iterations(400),
    target_accept=0.95,
    dense_mass=True,
    seed=0,
    progress=False,
    check_diagnostics=False,  # the verdict is printed below
)
print(check_convergence(idata_g).verdict())
names_g = [name for name in idata_g.posterior.data_vars if "_z" not in name]  # all but the raw z's
summary_g = posterior_summary(idata_g, names_g)
columns = ["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]
print("\npopulation parameters:")
print(summary_g.loc[[i for i in summary_g.index if i.endswith(("_mu", "_tau"))], columns])
print("\nsmallest effective sample sizes:")
print(
    summary_g.assign(ess=summary_g[["ess_bulk", "ess_tail"]].min(axis=1)).sort_values("ess").head(3)[columns]
)

# %%
post = idata_g.posterior
for g, name in enumerate(panel.group_names):
    print(
        f"{name}: lengthscale {float(post['lengthscale'][..., g].mean()):5.1f} years, "
        f"sd {float(np.sqrt(post['variance'][..., g]).mean()):.2f}, noise {float(post['noise'][..., g].mean()):.3f} births/woman"
    )

# %%
years = np.linspace(Xp.min(), Xp.max() + 5, 80)
G = panel.num_groups
X_grid = np.tile(years, G)[:, None]
g_grid = np.repeat(np.arange(G), years.size)
pred_g = br.predict(idata_g, X_grid, group=g_grid)

fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharex=True)
for g, ax in enumerate(axes.ravel()):
    rows = g_grid == g
    mean, sd_y = pred_g.mean[rows], np.sqrt(pred_g.var_y[rows])
    obs = group == g
    ax.plot(Xp[obs, 0], yp[obs], "k.", ms=3)
    ax.plot(years, mean, "C2")
    ax.fill_between(years, mean - 2 * sd_y, mean + 2 * sd_y, color="C2", alpha=0.25)
    ax.set_title(panel.group_names[g])
    ax.set_ylabel(panel.y_name if g % 3 == 0 else "")
for ax in axes[1]:
    ax.set_xlabel("year")
fig.suptitle("Hierarchical SoR GP: per-country posterior predictive (±2 sd of y*), 5 years beyond the data")
fig.tight_layout()
fig.savefig(OUT / "05_fertility_predictive.png", dpi=110)

# %%
print(f"figures in {OUT}; notebook ran in {time.perf_counter() - START:.1f} s")
