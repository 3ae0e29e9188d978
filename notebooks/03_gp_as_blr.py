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
# # A Gaussian process as Bayesian linear regression (Mason; docs/mathematics.md#a-gp-as-bayesian-linear-regression)
#
# A BLR `f(x) = φ(x)ᵀ w` with `w ~ N(0, I)` is the GP with covariance `φ(x)ᵀ φ(x')`. Two ways to choose φ
# for a given SE kernel of lengthscale ℓ and variance s²:
#
# * **manual SE basis functions**: SE bumps of lengthscale ℓ/√2 on a regular grid of centres with spacing
#   Δ, scaled by `a = sqrt(s² Δ / (ℓ √(π/2)))`. The grid sum `Σ_c φ_c(x) φ_c(x')` is a Riemann sum for
#   `s² exp(−(x − x')²/(2ℓ²))`, so as the centres fill the line the BLR *is* the SE-kernel GP;
# * **the eigenbasis** `φ(x) = Λ^{-1/2} Uᵀ k(C, x)` of `K_CC = U Λ Uᵀ` at centres C, which gives
#   `φ(x)ᵀ φ(x') = Q(x, x')` exactly (the SoR GP with Z = C) and can be truncated to its leading terms.
#
# The notebook draws both bases (Mason's figure) and then shows on Snelson's data that the BLR predictive
# (Bishop (3.58)–(3.59) with α = 1, β = 1/σ²) converges to the exact GP predictive as centres are added,
# plotting the error against the number of centres.

# %%
import os
import tempfile
import time
from pathlib import Path

import numpyro

numpyro.enable_x64()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import scipy.optimize

from bayes_rbfn.gp import basis, conditional
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.io.datasets import load_dataset

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb03_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()

# %% [markdown]
# ## Mason's figure: manual SE basis functions and the eigenbasis
#
# For the SE kernel with ℓ = 1 and s² = 1 on [−4, 4]: 17 manual basis functions (spacing Δ = 0.5 = ℓ/2),
# the kernel they reproduce, `Σ_c φ_c(x) φ_c(0)` against `k(x, 0)`, and the six leading functions of the
# eigenbasis at the same centres.

# %%
demo_kernel = SquaredExponential(lengthscale=1.0, variance=1.0)
x = np.linspace(-4.0, 4.0, 401)
centres = basis.regular_grid(-4.0, 4.0, 17)
Phi_se = np.asarray(basis.se_basis(x, centres, lengthscale=1.0, variance=1.0))
Phi_se0 = np.asarray(basis.se_basis(np.zeros(1), centres, lengthscale=1.0, variance=1.0))
Phi_eig = np.asarray(basis.eigen_basis(demo_kernel, centres, x, num=6))

k_grid = Phi_se @ Phi_se0[0]
k_true = np.asarray(demo_kernel(x[:, None], np.zeros((1, 1))))[:, 0]
inner = np.abs(x) <= 1.0  # the grid extends ≥ 3ℓ beyond these points
print(
    f"max |Σ_c φ_c(x) φ_c(0) − k(x, 0)|: {np.max(np.abs(k_grid - k_true)[inner]):.2e} for |x| ≤ 1, "
    f"{np.max(np.abs(k_grid - k_true)):.2e} over [−4, 4] (the grid ends at ±4)"
)

fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
axes[0].plot(x, Phi_se, lw=1)
axes[0].set_title("manual SE basis: 17 bumps of lengthscale ℓ/√2")
axes[1].plot(x, k_true, lw=3, alpha=0.5, label="k(x, 0), SE ℓ = 1")
axes[1].plot(x, k_grid, "r--", label="Σ_c φ_c(x) φ_c(0)")
axes[1].legend(fontsize=8)
axes[1].set_title("the kernel the basis reproduces")
axes[2].plot(x, Phi_eig, lw=1.2)
axes[2].set_title("eigenbasis Λ^{-1/2} Uᵀ k(C, x): 6 leading functions")
for ax in axes:
    ax.set_xlabel("x")
fig.tight_layout()
fig.savefig(OUT / "03_bases.png", dpi=110)

# %% [markdown]
# ## Snelson's data: the exact GP
#
# SE hyperparameters fixed at the maximum of the exact GP's log marginal likelihood; targets centred.
# The test grid of the data set spans [−3, 10], well beyond the training inputs on [0, 6].

# %%
ds = load_dataset("snelson")
X, y, X_test = ds.X, ds.y, ds.X_test
c = float(np.mean(y))
t = y - c


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
print(f"lengthscale {ell:.4f}, variance {s2:.4f}, noise {noise:.4f}")
exact = conditional.exact_gp(kernel, X, t, noise, X_test, full_cov=False)
exact_mean, exact_var = np.asarray(exact.mean), np.asarray(exact.var)

# %% [markdown]
# ## The manual SE basis converges to the GP as centres are added
#
# Regular grids of M centres over [−3 − 3ℓ, 10 + 3ℓ] (the test grid plus a margin of 3ℓ). The error of
# the BLR predictive (mean and variance of the latent f) against the exact GP is the maximum over the 301
# test points. The theory (module docstring of `bayes_rbfn.gp.basis`) predicts a decay like
# `exp(−π² ℓ² / (2 Δ²))` in the spacing Δ, down to the rounding floor.

# %%
lo, hi = X_test.min() - 3 * ell, X_test.max() + 3 * ell
num_centres = [8, 12, 16, 20, 25, 30, 40, 50, 60, 80, 100, 130]
rows = []
fits = {}
for M in num_centres:
    C = basis.regular_grid(lo, hi, M)
    Phi = basis.se_basis(X, C, lengthscale=ell, variance=s2)
    Phi_test = basis.se_basis(X_test, C, lengthscale=ell, variance=s2)
    pred = basis.blr_gp_predict(Phi, t, Phi_test, noise)
    mean, var = np.asarray(pred.mean), np.asarray(pred.var)
    fits[M] = (mean, var)
    spacing = (hi - lo) / (M - 1)
    rows.append(
        (
            M,
            spacing,
            np.max(np.abs(mean - exact_mean)),
            np.max(np.abs(var - exact_var)),
            np.exp(-(np.pi**2) * ell**2 / (2 * spacing**2)),
        )
    )

print(f"{'M':>4} {'Δ/ℓ':>6} {'max |Δmean|':>12} {'max |Δvar|':>12} {'exp(−π²ℓ²/2Δ²)':>16}")
for M, spacing, dm, dv, rate in rows:
    print(f"{M:4d} {spacing / ell:6.3f} {dm:12.3e} {dv:12.3e} {rate:16.3e}")

# %%
rows_arr = np.array(rows)
fig, (ax_err, ax_fit) = plt.subplots(1, 2, figsize=(12, 4.2))
ax_err.semilogy(rows_arr[:, 0], rows_arr[:, 2], "o-", label="max |mean − GP mean|")
ax_err.semilogy(rows_arr[:, 0], rows_arr[:, 3], "s-", label="max |var − GP var|")
ax_err.semilogy(rows_arr[:, 0], rows_arr[:, 4], "k--", lw=1, label="exp(−π²ℓ²/(2Δ²)) (rate)")
ax_err.set_ylim(1e-17, 1e2)
ax_err.set_xlabel("number of centres M")
ax_err.set_ylabel("error against the exact GP")
ax_err.set_title("SE-basis BLR → GP on Snelson's test grid")
ax_err.legend(fontsize=8)

ax_fit.plot(X[:, 0], y, "k.", ms=3, alpha=0.4, label="data")
ax_fit.plot(X_test[:, 0], exact_mean + c, "k", lw=3, alpha=0.4, label="exact GP")
for M in (12, 25, 40):
    ax_fit.plot(X_test[:, 0], fits[M][0] + c, lw=1, label=f"SE-basis BLR, M = {M}")
ax_fit.set_xlabel("x")
ax_fit.set_title("predictive means")
ax_fit.legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "03_convergence_se_basis.png", dpi=110)

# %% [markdown]
# ## The eigenbasis, truncated
#
# With centres at the 200 training inputs, the full eigenbasis is the SoR GP with Z = X, whose predictive
# mean is the exact GP's (docs/mathematics.md#inducing-inputs-at-the-data) — up to the jitter that `eigen_basis` adds to K_XX (1e-8 × its mean
# diagonal, the library's float64 policy), which matters here because 200 points at this lengthscale make
# K_XX numerically singular (see the eigenvalues below). Keeping only the r leading eigenpairs gives a BLR
# with r weights; its predictive mean converges as r grows, at a rate set by the eigenvalue decay.

# %%
ranks = [2, 4, 6, 8, 10, 12, 15, 20, 30, 50]
Phi_all = basis.eigen_basis(kernel, X, np.concatenate([X, X_test]))
lam = np.linalg.eigvalsh(np.asarray(kernel(X, X)))[::-1]
eig_errors = []
for r in ranks:
    Phi_r = Phi_all[:, :r]
    pred = basis.blr_gp_predict(Phi_r[: len(X)], t, Phi_r[len(X) :], noise)
    eig_errors.append(np.max(np.abs(np.asarray(pred.mean) - exact_mean)))
full = basis.blr_gp_predict(Phi_all[: len(X)], t, Phi_all[len(X) :], noise)
full_error = np.max(np.abs(np.asarray(full.mean) - exact_mean))
print(f"full eigenbasis ({Phi_all.shape[1]} functions): max |mean − GP mean| = {full_error:.2e}")
for r, e in zip(ranks, eig_errors, strict=True):
    print(f"r = {r:3d}: max |mean − GP mean| = {e:.2e}, λ_r / λ_1 = {lam[r - 1] / lam[0]:.1e}")

fig, (ax_r, ax_lam) = plt.subplots(1, 2, figsize=(11, 3.8))
ax_r.semilogy(ranks, eig_errors, "o-")
ax_r.axhline(full_error, color="k", ls=":", label="all eigenpairs")
ax_r.set_xlabel("eigenpairs kept r")
ax_r.set_ylabel("max |mean − GP mean|")
ax_r.set_title("truncated eigenbasis BLR → GP mean")
ax_r.legend(fontsize=8)
ax_lam.semilogy(np.arange(1, 61), np.maximum(lam[:60] / lam[0], 1e-18), ".")
ax_lam.set_xlabel("index")
ax_lam.set_ylabel("λ_i / λ_1")
ax_lam.set_title("eigenvalues of K_XX (Snelson inputs)")
fig.tight_layout()
fig.savefig(OUT / "03_convergence_eigenbasis.png", dpi=110)

# %%
print(f"figures in {OUT}; notebook ran in {time.perf_counter() - START:.1f} s")
