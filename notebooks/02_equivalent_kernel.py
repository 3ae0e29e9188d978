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
# # The equivalent kernel of Bayesian linear regression (Bishop §3.3.3, docs/mathematics.md#bayesian-linear-regression-and-the-equivalent-kernel)
#
# For Bayesian linear regression with fixed basis functions φ, the predictive mean is a linear smoother
# of the targets, `y(x) = Σ_n k(x, x_n) t_n`, with the *equivalent kernel*
# `k(x, x') = β φ(x)ᵀ S_N φ(x')` (Bishop (3.61)–(3.62)), `S_N⁻¹ = αI + βΦᵀΦ`. This notebook reproduces
# Bishop's Figure 3.10 — the equivalent kernel of Gaussian basis functions on 200 equally spaced inputs in
# (−1, 1), as an image over (x, x') and as three slices — and checks numerically that the predictive mean
# `m_Nᵀφ(x)` equals `Σ_n k(x, x_n) t_n` and that `cov[y(x), y(x')] = k(x, x')/β` (Bishop (3.63)).

# %%
import os
import tempfile
import time
from pathlib import Path

import numpyro

numpyro.enable_x64()

import matplotlib.pyplot as plt
import numpy as np

from bayes_rbfn.gp import blr

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb02_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()

# %% [markdown]
# ## Setting
#
# As in Bishop's Figure 3.10: N = 200 inputs equally spaced over (−1, 1). The basis is a bias φ₀ = 1 plus
# 9 Gaussian basis functions (Bishop (3.4)) with centres equally spaced over [−1, 1] and width s = 0.2.
# Bishop does not state α and β for this figure; we take his values from §3.3.1, α = 2 and β = 25
# (noise σ = 0.2). The equivalent kernel depends only on the inputs, α and β — not on the targets — so the
# targets below (a sine plus noise, from a seeded generator) serve only to check the smoother identity.

# %%
N = 200
x = np.linspace(-1.0, 1.0, N)
centres = np.linspace(-1.0, 1.0, 9)
width = 0.2
alpha, beta = 2.0, 25.0

Phi = blr.gaussian_basis(x, centres, width, bias=True)
rng = np.random.default_rng(0)
t = np.sin(np.pi * x) + rng.normal(scale=1.0 / np.sqrt(beta), size=N)
post = blr.posterior(Phi, t, alpha, beta)
K_eq = np.asarray(blr.equivalent_kernel(Phi, Phi, post, beta))  # k(x_m, x_n) on the 200 × 200 grid
print(f"design matrix Φ: {Phi.shape}; equivalent kernel matrix: {K_eq.shape}")

# %% [markdown]
# ## Figure 3.10

# %%
slices = [-0.8, 0.0, 0.5]
fig, (ax_img, ax_cut) = plt.subplots(1, 2, figsize=(11, 4.5))
im = ax_img.imshow(K_eq, extent=(-1, 1, 1, -1), cmap="viridis")
ax_img.set_xlabel("x'")
ax_img.set_ylabel("x")
ax_img.set_title("equivalent kernel k(x, x')")
fig.colorbar(im, ax=ax_img, fraction=0.046)
for x0 in slices:
    i = int(np.argmin(np.abs(x - x0)))
    ax_cut.plot(x, K_eq[i], label=f"x = {x[i]:.2f}")
    ax_cut.axvline(x[i], color="grey", lw=0.5, ls=":")
ax_cut.axhline(0.0, color="k", lw=0.5)
ax_cut.set_xlabel("x'")
ax_cut.set_ylabel("k(x, x')")
ax_cut.set_title("slices through k for three values of x")
ax_cut.legend()
fig.suptitle("Bishop Fig. 3.10: Gaussian basis functions, N = 200 inputs on (−1, 1), α = 2, β = 25")
fig.tight_layout()
fig.savefig(OUT / "02_equivalent_kernel_fig3_10.png", dpi=110)

for x0 in slices:
    i = int(np.argmin(np.abs(x - x0)))
    neg = K_eq[i][K_eq[i] < 0]
    print(
        f"x = {x[i]:+.2f}: peak at x' = {x[np.argmax(K_eq[i])]:+.2f}, k max {K_eq[i].max():.4f}, "
        f"most negative side lobe {neg.min() if neg.size else 0.0:.4f}"
    )

# %% [markdown]
# ## The predictive mean is a linear smoother
#
# `m_Nᵀ φ(x)` (from the weight posterior) against `Σ_n k(x, x_n) t_n` (the equivalent kernel applied to the
# targets), at 400 test inputs that also lie outside the data, and the covariance identity of (3.63) at the
# same inputs (the predictive of the noise-free y(x), without the 1/β term).

# %%
x_test = np.linspace(-1.3, 1.3, 400)
Phi_test = blr.gaussian_basis(x_test, centres, width, bias=True)
pred = blr.predictive(Phi_test, post, beta, full_cov=True, include_noise=False)
smoother = np.asarray(blr.equivalent_kernel(Phi_test, Phi, post, beta))  # (400, 200)
mean_smoother = smoother @ t
diff_mean = float(np.max(np.abs(np.asarray(pred.mean) - mean_smoother)))
print(
    f"max |m_Nᵀφ(x) − Σ_n k(x, x_n) t_n| = {diff_mean:.3e} (predictive mean up to {np.max(np.abs(pred.mean)):.3f})"
)

k_test = np.asarray(blr.equivalent_kernel(Phi_test, Phi_test, post, beta))
diff_cov = float(np.max(np.abs(np.asarray(pred.cov) - k_test / beta)))
print(
    f"max |cov[y(x), y(x')] − k(x, x')/β| = {diff_cov:.3e} (covariances up to {np.max(np.abs(pred.cov)):.3e})"
)

# Bishop notes that the equivalent kernel sums (approximately) to one over the data (3.64): the smoother
# reproduces a constant. With a finite α it does so only approximately; the row sums show how closely.
row_sums = smoother.sum(axis=1)
inside = np.abs(x_test) <= 1.0
print(
    f"Σ_n k(x, x_n): from {row_sums[inside].min():.4f} to {row_sums[inside].max():.4f} inside the data, "
    f"{row_sums[~inside].min():.4f} to {row_sums[~inside].max():.4f} outside"
)

# %%
fig, (ax_fit, ax_sum) = plt.subplots(1, 2, figsize=(11, 4))
ax_fit.plot(x, t, "k.", ms=3, alpha=0.4, label="targets t_n")
ax_fit.plot(x_test, pred.mean, lw=3, alpha=0.6, label="m_Nᵀ φ(x)")
ax_fit.plot(x_test, mean_smoother, "r--", label="Σ_n k(x, x_n) t_n")
sd = np.sqrt(np.asarray(pred.var))
ax_fit.fill_between(x_test, pred.mean - 2 * sd, pred.mean + 2 * sd, alpha=0.2, label="±2 sd of y(x)")
ax_fit.set_xlabel("x")
ax_fit.legend(fontsize=8)
ax_fit.set_title(f"predictive mean two ways (max difference {diff_mean:.1e})")
ax_sum.plot(x_test, row_sums)
ax_sum.axhline(1.0, color="k", lw=0.5)
ax_sum.axvspan(-1, 1, color="grey", alpha=0.1, label="data")
ax_sum.set_xlabel("x")
ax_sum.set_ylabel("Σ_n k(x, x_n)")
ax_sum.set_title("row sums of the equivalent kernel")
ax_sum.legend()
fig.tight_layout()
fig.savefig(OUT / "02_linear_smoother.png", dpi=110)

# %%
print(f"figures in {OUT}; notebook ran in {time.perf_counter() - START:.1f} s")
