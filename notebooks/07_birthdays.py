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
# `SparseGP.group_moments`). The command line fits the same: `bayes-rbfn fit --dataset birthdays`.

# %%
import os
import tempfile
import time
from pathlib import Path

import numpyro

numpyro.set_host_device_count(2)  # two CPU devices: the two NUTS chains run in parallel
numpyro.enable_x64()

from IPython.display import Image, display

from bayes_rbfn import plots
from bayes_rbfn.infer.diagnostics import posterior_summary
from bayes_rbfn.infer.sampler import SamplerSettings
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.models import birthdays as B
from bayes_rbfn.workflows.birthdays import DEFAULT_SETTINGS, fit_birthdays

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb07_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()

# The test suite runs every notebook with NOTEBOOK_SMOKE_TEST=1: the same code on the last year (1988)
# with 10 warm-up and 13 kept iterations per chain from the prior median (a smoke test, not a result; 26
# draws in all, as ArviZ 1.x's Pareto smoothing needs at least 25).
SMOKE_TEST = bool(os.environ.get("NOTEBOOK_SMOKE_TEST"))
data = B.load_birthdays(1 if SMOKE_TEST else None)
print(f"{len(data['y'])} days; centres: " + ", ".join(f"{k} {len(v)}" for k, v in data["Z"].items()))

# %% [markdown]
# ## The fit
#
# `fit_birthdays` runs two chains of NUTS through the package's sampler, from the posterior mode with the
# Laplace mass matrix (its defaults: 500 warm-up and 500 kept iterations per chain, tree depth 8). It
# also computes what follows: the LOO conditionals and each component's posterior, draw by draw.

# %%
if SMOKE_TEST:
    settings = SamplerSettings(chains=2, warmup=10, draws=13, init="median", max_tree_depth=5, progress=False)
else:
    settings = DEFAULT_SETTINGS
idata = fit_birthdays(settings, years=1 if SMOKE_TEST else None)
hyper = list(B.HYPERPARAMETERS)
print(posterior_summary(idata, hyper).round(3))  # ArviZ's summary, the same table on ArviZ 0.x and 1.x
print("divergences:", int(idata.sample_stats["diverging"].sum()))

# %% [markdown]
# ## PSIS-LOO and LOO-R²
#
# The marginal does not factorise over days, so the pointwise values for PSIS-LOO are its leave-one-out
# conditionals log p(y_i | y_−i, θ) (Bürkner, Gabry & Vehtari 2020), from the same O(NM²) pass; their
# residuals give the LOO predictive means and LOO-R² (stored with them). `arviz_compat.loo` runs `az.loo`
# and returns the same fields under ArviZ 0.x and 1.x.

# %%
loo = arviz_compat.loo(idata)
print(f"elpd_loo = {loo.elpd:.1f} ± {loo.se:.1f} (p_loo = {loo.p:.1f}) over {loo.elpd_i.size} days")
print(f"largest Pareto k: {loo.pareto_k.max():.2f} ({(loo.pareto_k > 0.7).sum()} days above 0.7)")
print(f"LOO-R² = {idata.log_likelihood.attrs['loo_r2']:.3f}")

# %% [markdown]
# ## The components, and the case study's figure
#
# At a thinned set of draws the model is replayed, and the observed site's `SparseGP` gives each
# component's analytic posterior mean (`component_moments`, `group_moments`): the trend, the year, each
# weekday's effect β_w (multiplied by exp(g(t))), the holidays and the day-of-year effects. The figure:
# the day-of-year effects of the last year (plus the floating holidays) with the special days labelled;
# the data with the trend; the yearly cycle; each weekday's effect over the years.

# %%
print(idata.predictions)
plots.plot_birthdays(idata, OUT / "birthdays.png")
display(Image(OUT / "birthdays.png"))
print(f"saved {OUT / 'birthdays.png'}; notebook time {time.perf_counter() - START:.0f} s")
