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
# # Five formulations, one mean (docs/mathematics.md#five-formulations-one-mean)
#
# An RBF network `f(x) = k(x, Z) α` with the prior `α ~ N(0, K_uu⁻¹)` is the Subset-of-Regressors (SoR)
# Gaussian process. This notebook computes its predictive mean five ways on real data (Snelson's 1-D
# benchmark) and prints how far apart they are:
#
# 1. Nyström kernel ridge regression `K_*u K_uu⁻¹ K_uf (Q_ff + σ²I)⁻¹ y` (eq. (2) of the derivation);
# 2. RBF ridge regression `K_*u (K_uf K_fu + σ² K_uu)⁻¹ K_uf y` (eq. (3));
# 3. the Bayesian RBFN MAP, `K_*u α_MAP` with `α_MAP` the mode of `p(α | y)`;
# 4. the SoR GP predictive mean `Q_*f (Q_ff + σ²I)⁻¹ y` (computed in weight space);
# 5. the fully Bayesian RBFN predictive mean: NUTS samples the weights α (hyperparameters fixed) and the
#    mean of `K_*u α` over the draws is reported with its Monte-Carlo standard error.
#
# The first four are deterministic (three closed forms and a numerical optimisation) and agree to
# rounding; the fifth is a Monte-Carlo estimate and agrees within its MC error.

# %%
import os
import tempfile
import time
from pathlib import Path

import numpyro

numpyro.set_host_device_count(2)  # two CPU devices: the NUTS chains run in parallel
numpyro.enable_x64()

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import scipy.optimize

import bayes_rbfn as br
from bayes_rbfn.gp import conditional, linalg
from bayes_rbfn.gp.inducing import select_inducing
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.infer.diagnostics import check_convergence
from bayes_rbfn.io.datasets import load_dataset

OUT = Path(os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="bayes_rbfn_nb01_"))
OUT.mkdir(parents=True, exist_ok=True)
START = time.perf_counter()


# The test suite runs every notebook with NOTEBOOK_SMOKE_TEST=1: the same code, with at most 50 NUTS
# warm-up and 50 kept iterations per chain (a smoke test, not a result).
SMOKE_TEST = bool(os.environ.get("NOTEBOOK_SMOKE_TEST"))


def iterations(n: int) -> int:
    return min(n, 50) if SMOKE_TEST else n


# %% [markdown]
# ## Data and fixed hyperparameters
#
# Snelson's data (200 points on [0, 6]) with the test grid of the data set, which reaches far outside the
# training inputs. The targets are centred (`c` = their mean), which is the models' constant prior mean.
# The SE hyperparameters are fixed at the maximum of the *exact* GP's log marginal likelihood (a few
# L-BFGS steps on the log parameters), and the M = 15 centres Z are k-means centres of the inputs.

# %%
ds = load_dataset("snelson")
X, y, X_test = ds.X, ds.y, ds.X_test
c = float(np.mean(y))
t = y - c


@jax.jit
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
lengthscale, variance, noise = np.exp(result.x)
kernel = SquaredExponential(lengthscale=lengthscale, variance=variance)
print(f"exact-GP type-II ML: lengthscale {lengthscale:.4f}, variance {variance:.4f}, noise {noise:.4f}")
print(f"log marginal likelihood {-result.fun:.3f} after {result.nit} L-BFGS iterations")

M = 15
Z = select_inducing(X, M, seed=0)

# %% [markdown]
# ## Nyström KRR, RBF ridge and the SoR mean (closed forms)

# %%
means = {
    "Nyström KRR": conditional.nystrom_krr(kernel, X, t, Z, noise, X_test) + c,
    "RBF ridge": conditional.rbf_ridge(kernel, X, t, Z, noise, X_test) + c,
}
Ksu = kernel(X_test, Z)
means["SoR GP mean"] = conditional.sor(kernel, X, t, Z, noise, X_test, full_cov=False).mean + c

# %% [markdown]
# The MAP is found as a MAP should be, by maximising the log posterior of the weights
# `log p(α | y) = −‖y − K_fu α‖²/(2σ²) − αᵀ K_uu α / 2 + const` numerically (SciPy's trust-region
# Newton method with JAX's exact gradient and Hessian), not from the closed form. The prior precision
# is K_uu with the library's float64 jitter (1e-8 × mean diagonal), as in the closed forms.

# %%
Kfu = kernel(X, Z)
Kuu = kernel(Z, Z)
Kuu = Kuu + linalg.default_jitter(Kuu.dtype) * jnp.mean(jnp.diag(Kuu)) * jnp.eye(M)


@jax.jit
def neg_log_posterior(a):
    r = t - Kfu @ a
    return 0.5 * r @ r / noise**2 + 0.5 * a @ Kuu @ a


grad, hess = jax.jit(jax.grad(neg_log_posterior)), jax.jit(jax.hessian(neg_log_posterior))
opt = scipy.optimize.minimize(
    lambda a: float(neg_log_posterior(a)),
    x0=np.zeros(M),
    jac=lambda a: np.asarray(grad(a)),
    hess=lambda a: np.asarray(hess(a)),
    method="trust-exact",
    options={"gtol": 1e-10},
)
alpha_map = opt.x
print(f"trust-exact: {opt.nit} iterations, max |∇ log p(α | y)| at the MAP {np.max(np.abs(opt.jac)):.2e}")
means["Bayesian RBFN MAP"] = Ksu @ alpha_map + c
means = {
    name: np.asarray(means[name]) for name in ["Nyström KRR", "RBF ridge", "Bayesian RBFN MAP", "SoR GP mean"]
}

# %% [markdown]
# ## The fully Bayesian RBFN: NUTS on the weights
#
# `fit("rbfn", ...)` with a fixed kernel object and a fixed noise samples only the M whitened weights
# (with a dense mass matrix, since their posterior is a correlated Gaussian).
# Its stored per-draw predictive is `c + K_*u α` (the `f_mean` of each draw); the Bayesian predictive mean
# is the average over draws.

# %%
idata = br.fit(
    "rbfn",
    X,
    y,
    Z=Z,
    kernel=kernel,
    noise=float(noise),
    mean=c,
    X_pred=X_test,
    chains=2,
    warmup=iterations(300),
    draws=iterations(300),
    seed=1,
    dense_mass=True,  # the weight posterior is a correlated Gaussian: adapt a dense mass matrix
    progress=False,
)
f_draws = idata.predictions["f_mean"]
means["fully Bayesian RBFN"] = f_draws.mean(("chain", "draw")).values
mcse = az.mcse(f_draws.to_dataset(name="f"), method="mean")["f"].values
print(check_convergence(idata).verdict())

# %% [markdown]
# ## How far apart are they?
#
# Differences are against the SoR GP mean, relative to the spread of the data. The Monte-Carlo estimate is
# judged in units of its own MC standard error (where the prior has any weight: far from Z every draw
# predicts `c` exactly and the MC error is 0).

# %%
reference = means["SoR GP mean"]
scale = float(np.max(np.abs(t)))
deterministic = ["Nyström KRR", "RBF ridge", "Bayesian RBFN MAP", "SoR GP mean"]
print(f"{'formulation':<22} {'max |Δ| vs SoR':>16} {'relative':>10}")
for name, m in means.items():
    diff = float(np.max(np.abs(m - reference)))
    print(f"{name:<22} {diff:16.3e} {diff / scale:10.2e}")

pairwise = max(float(np.max(np.abs(means[a] - means[b]))) for a in deterministic for b in deterministic)
print(
    f"\nmaximum pairwise disagreement among the four deterministic formulations: {pairwise:.3e} ({pairwise / scale:.2e} relative)"
)

active = mcse > 1e-12 * scale
z = np.abs(means["fully Bayesian RBFN"] - reference)[active] / mcse[active]
print(
    f"fully Bayesian RBFN: max |Δ| {np.max(np.abs(means['fully Bayesian RBFN'] - reference)):.3e}, "
    f"MC standard error up to {mcse.max():.3e}; |Δ|/MCSE max {z.max():.2f}, mean {z.mean():.2f} "
    f"over {active.sum()} test points"
)

# %%
fig, (ax_mean, ax_diff) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
ax_mean.plot(X[:, 0], y, "k.", ms=3, alpha=0.5, label="Snelson data")
styles = ["-", "--", ":", "-.", "-"]
for (name, m), ls in zip(means.items(), styles, strict=True):
    ax_mean.plot(X_test[:, 0], m, ls, lw=1.5 if name != "fully Bayesian RBFN" else 3, alpha=0.8, label=name)
ax_mean.plot(Z[:, 0], np.full(M, y.min() - 0.3), "r^", label="centres Z")
ax_mean.set_ylabel("predictive mean")
ax_mean.legend(fontsize=8, ncol=2)
ax_mean.set_title("Five formulations of the RBFN / SoR predictive mean on Snelson's data")

floor = 1e-18
for name in ["Nyström KRR", "RBF ridge", "Bayesian RBFN MAP"]:
    ax_diff.semilogy(X_test[:, 0], np.abs(means[name] - reference) + floor, label=f"|{name} − SoR|")
ax_diff.semilogy(
    X_test[:, 0], np.abs(means["fully Bayesian RBFN"] - reference) + floor, label="|fully Bayesian − SoR|"
)
ax_diff.semilogy(X_test[:, 0], mcse + floor, "k--", label="MC standard error")
ax_diff.set_xlabel("x")
ax_diff.set_ylabel("absolute difference")
ax_diff.legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "01_equivalences.png", dpi=110)

# %%
print(f"figures in {OUT}; notebook ran in {time.perf_counter() - START:.1f} s")
