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
# # SoR's variance collapse, and DTC, FITC and VFE (docs/mathematics.md#the-sor-family-and-its-variance-collapse)
#
# SoR (= the Bayesian RBFN) replaces the GP prior covariance by the Nyström covariance
# `Q(x, x') = k(x, Z) K_uu⁻¹ k(Z, x')` everywhere. Far from the inducing inputs Z, `Q_** → 0`, so the
# predictive variance of the latent f* collapses to 0 and that of an observation y* to σ² — exactly where
# the exact GP returns to its prior, `s² + σ²`. This notebook shows that on Snelson's test grid, which
# reaches far beyond the training inputs, and then compares the predictive bands of the corrections of
# Quiñonero-Candela & Rasmussen (2005) — DTC (exact `K_**` in the predictive, their eqs. (20)–(21)) and
# FITC (a diagonal correction in the prior, eqs. (24)–(25)) — and of Titsias's (2009) VFE, all at the same
# fixed hyperparameters and inducing inputs.

# %%
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpyro

numpyro.enable_x64()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import scipy.optimize

from bayes_rbfn.gp import conditional, sparse
from bayes_rbfn.gp.inducing import select_inducing
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.io.datasets import load_dataset

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb04_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()

# %% [markdown]
# ## Data, hyperparameters, inducing inputs
#
# Snelson's data (200 points on [0, 6]; test grid [−3, 10]), targets centred. SE hyperparameters at the
# maximum of the exact GP's log marginal likelihood (L-BFGS on the log parameters); M = 8 k-means
# inducing inputs — few enough that the collapse is visible between them too, not only beyond the data.

# %%
ds = load_dataset("snelson")
X, y, X_test = ds.X, ds.y, ds.X_test
c = float(np.mean(y))
t = y - c
xs = X_test[:, 0]


def neg_log_marginal(log_params):
    lengthscale, variance, noise = jnp.exp(log_params)
    kernel = SquaredExponential(lengthscale=lengthscale, variance=variance)
    return -conditional.log_marginal_likelihood(kernel, X, t, noise)


value_and_grad = jax.jit(jax.value_and_grad(neg_log_marginal))
result = scipy.optimize.minimize(
    lambda p: tuple(np.asarray(v, dtype=float) for v in value_and_grad(jnp.asarray(p))),
    x0=np.log([1.0, 1.0, 0.3]),
    jac=True,
    method="L-BFGS-B",
)
ell, s2, noise = np.exp(result.x)
kernel = SquaredExponential(lengthscale=ell, variance=s2)
print(f"lengthscale {ell:.4f}, variance s² {s2:.4f}, noise σ {noise:.4f} (σ² = {noise**2:.4f})")

M = 8
Z = select_inducing(X, M, seed=0)
print("inducing inputs Z:", np.round(np.sort(Z[:, 0]), 2))

# %% [markdown]
# ## SoR against the exact GP
#
# Latent variances (noise excluded) from `conditional.sor` and `conditional.exact_gp`; an observation's
# variance adds σ². `sparse.collapse_warning` is the library's diagnostic: it warns when SoR keeps less
# than half the prior variance at some test points.

# %%
exact = conditional.exact_gp(kernel, X, t, noise, X_test, full_cov=False)
sor = conditional.sor(kernel, X, t, Z, noise, X_test, full_cov=False)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lost = np.asarray(sparse.collapse_warning(kernel, Z, X_test))
for w in caught:
    print(f"{w.category.__name__}: {w.message}")

var_y = {"exact GP": np.asarray(exact.var) + noise**2, "SoR": np.asarray(sor.var) + noise**2}
for x0 in (-3.0, 3.0, 10.0):
    i = int(np.argmin(np.abs(xs - x0)))
    print(
        f"x = {xs[i]:+5.1f}: var(y*) exact {var_y['exact GP'][i]:.4f}, SoR {var_y['SoR'][i]:.4f}; "
        f"σ² = {noise**2:.4f}, s² + σ² = {s2 + noise**2:.4f}; SoR keeps {1 - lost[i]:.1%} of the prior variance"
    )
far = (xs < X.min() - 3 * ell) | (xs > X.max() + 3 * ell)
print(
    f"more than 3ℓ beyond the data ({far.sum()} test points): SoR var(y*) − σ² ≤ "
    f"{np.max(var_y['SoR'][far] - noise**2):.2e}; exact var(y*) ≥ {np.min(var_y['exact GP'][far]):.4f}"
)

# %%
fig, (ax_band, ax_var) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
ax_band.plot(X[:, 0], y, "k.", ms=3, alpha=0.4, label="data")
for name, moments, color in (("exact GP", exact, "C0"), ("SoR", sor, "C3")):
    mean = np.asarray(moments.mean) + c
    sd = np.sqrt(np.asarray(moments.var) + noise**2)
    ax_band.plot(xs, mean, color=color, label=f"{name} mean")
    ax_band.fill_between(
        xs, mean - 2 * sd, mean + 2 * sd, color=color, alpha=0.2, label=f"{name} ±2 sd of y*"
    )
ax_band.plot(Z[:, 0], np.full(M, y.min() - 0.5), "k^", label="Z")
ax_band.legend(fontsize=8, ncol=3, loc="upper left")
ax_band.set_title("Snelson: SoR's predictive band collapses away from Z")
ax_var.plot(xs, var_y["exact GP"], "C0", label="exact GP var(y*)")
ax_var.plot(xs, var_y["SoR"], "C3", label="SoR var(y*)")
ax_var.axhline(noise**2, color="k", ls="--", lw=1, label="σ²")
ax_var.axhline(s2 + noise**2, color="k", ls=":", lw=1, label="s² + σ² (prior)")
ax_var.axvspan(X.min(), X.max(), color="grey", alpha=0.1, label="training inputs")
ax_var.set_xlabel("x")
ax_var.set_ylabel("predictive variance of y*")
ax_var.legend(fontsize=8, ncol=3)
fig.tight_layout()
fig.savefig(OUT / "04_sor_variance_collapse.png", dpi=110)

# %% [markdown]
# ## SoR, DTC, FITC and VFE side by side
#
# Same kernel, noise and Z. DTC and VFE share SoR's mean and restore the prior variance `K_** − Q_**`
# that the Nyström prior drops; FITC also changes the training prior (heteroscedastic noise
# `diag(K_ff − Q_ff) + σ²`), so its mean differs too. At fixed hyperparameters VFE's predictive *is*
# DTC's: the two differ in the objective used to fit hyperparameters and Z (VFE's bound is DTC's log
# marginal likelihood minus `tr(K_ff − Q_ff)/(2σ²)`). Printed: each method's log marginal likelihood (for
# VFE the lower bound on the exact one), and how far each band is from the exact GP's.

# %%
methods = {
    "SoR": sor,
    "DTC": sparse.dtc(kernel, X, t, Z, noise, X_test, full_cov=False),
    "FITC": sparse.fitc(kernel, X, t, Z, noise, X_test, full_cov=False),
    "VFE": sparse.vfe(kernel, X, t, Z, noise, X_test, full_cov=False),
}
objective = {
    "SoR": sparse.log_marginal_likelihood(kernel, X, t, Z, noise, method="sor"),
    "DTC": sparse.log_marginal_likelihood(kernel, X, t, Z, noise, method="dtc"),
    "FITC": sparse.log_marginal_likelihood(kernel, X, t, Z, noise, method="fitc"),
    "VFE": sparse.log_marginal_likelihood(kernel, X, t, Z, noise, method="vfe"),
}
exact_lml = float(conditional.log_marginal_likelihood(kernel, X, t, noise))
exact_sd = np.sqrt(np.asarray(exact.var) + noise**2)
print(f"exact GP log marginal likelihood: {exact_lml:.3f}")
print(
    f"{'method':<6} {'log p(y) / bound':>17} {'max |Δmean|':>12} {'max |Δsd(y*)|':>14} {'min sd(y*)/exact':>17}"
)
for name, moments in methods.items():
    sd = np.sqrt(np.asarray(moments.var) + noise**2)
    print(
        f"{name:<6} {float(objective[name]):17.3f} {np.max(np.abs(np.asarray(moments.mean) - np.asarray(exact.mean))):12.3e} "
        f"{np.max(np.abs(sd - exact_sd)):14.3e} {np.min(sd / exact_sd):17.3f}"
    )

# %%
fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True, sharey=True)
exact_mean = np.asarray(exact.mean) + c
for ax, (name, moments) in zip(axes.ravel(), methods.items(), strict=True):
    mean = np.asarray(moments.mean) + c
    sd = np.sqrt(np.asarray(moments.var) + noise**2)
    ax.plot(X[:, 0], y, "k.", ms=2, alpha=0.3)
    ax.fill_between(xs, mean - 2 * sd, mean + 2 * sd, color="C1", alpha=0.3, label=f"{name} ±2 sd of y*")
    ax.plot(xs, mean, "C1", label=f"{name} mean")
    ax.plot(xs, exact_mean, "C0", lw=1)
    ax.plot(xs, exact_mean - 2 * exact_sd, "C0--", lw=1, label="exact GP ±2 sd")
    ax.plot(xs, exact_mean + 2 * exact_sd, "C0--", lw=1)
    ax.plot(Z[:, 0], np.full(M, -3.2), "k^", ms=5)
    ax.set_title(name)
    ax.legend(fontsize=7, loc="upper right")
for ax in axes[1]:
    ax.set_xlabel("x")
fig.suptitle(f"Predictive bands on Snelson's test grid, M = {M} inducing inputs, fixed hyperparameters")
fig.tight_layout()
fig.savefig(OUT / "04_sparse_bands.png", dpi=110)

# %%
print(f"figures in {OUT}; notebook ran in {time.perf_counter() - START:.1f} s")
