"""The reference for ``benchmarks/ess_vs_numpyro.py``: the SoR GP as a NumPyro user writes it by hand.

It samples the same posterior as ``bayes_rbfn.fit("sor", X, y, Z=Z)`` at fit's defaults:

* priors: ``get_family("se").default_priors(data_scales(X, y))`` — LogNormal on the lengthscale (one
  per input dimension, ARD, when D > 1), the variance s² and the noise σ;
* constant prior mean ȳ = mean(y), not sampled;
* squared-exponential kernel k(x, x') = s² exp(−½ Σ_d (x_d − x'_d)² / ℓ_d²);
* K_uu + 1e-8 · s² · I before its Cholesky factor: ``bayes_rbfn.gp.linalg``'s jitter policy for float64
  (1e-8 × the mean diagonal of K_uu, which is s² for this kernel);
* y ~ N(ȳ, Q_ff + σ²I) with Q_ff = K_fu K_uu⁻¹ K_uf = W Wᵀ, W = K_fu L_uu⁻ᵀ, as NumPyro's
  ``LowRankMultivariateNormal`` (its log density goes through the M×M capacitance matrix: O(NM²)).

NumPyro's defaults otherwise: ``NUTS(sor_model)`` with no options, one chain (the progress bar off, as
fit's ``progress=False``). Needs float64 (``numpyro.enable_x64()``) like fit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.linalg import solve_triangular
from numpyro.infer import MCMC, NUTS

#: Jitter on K_uu relative to s² (its mean diagonal): ``bayes_rbfn.gp.linalg.JITTER`` for float64.
JITTER = 1e-8


def se_kernel(A, B, lengthscale, variance):
    """s² exp(−½ Σ_d (a_d − b_d)² / ℓ_d²) for A (n, D), B (m, D); ℓ a scalar or (D,). Shape (n, m)."""
    diff = (A[:, None, :] - B[None, :, :]) / lengthscale
    return variance * jnp.exp(-0.5 * jnp.sum(diff**2, axis=-1))


def sor_model(X, Z, priors, y_mean, y=None):
    """y ~ N(ȳ, K_fu K_uu⁻¹ K_uf + σ²I): X (N, D), Z (M, D), priors {lengthscale, variance, noise}."""
    lengthscale = numpyro.sample("lengthscale", priors["lengthscale"])
    variance = numpyro.sample("variance", priors["variance"])
    noise = numpyro.sample("noise", priors["noise"])
    Kuu = se_kernel(Z, Z, lengthscale, variance) + JITTER * variance * jnp.eye(Z.shape[0])
    Luu = jnp.linalg.cholesky(Kuu)
    Kfu = se_kernel(X, Z, lengthscale, variance)
    W = solve_triangular(Luu, Kfu.T, lower=True).T  # K_fu L_uu⁻ᵀ, so that Q_ff = W Wᵀ
    N = X.shape[0]
    loc, cov_diag = jnp.full(N, y_mean), jnp.full(N, noise**2)
    numpyro.sample("y", dist.LowRankMultivariateNormal(loc, W, cov_diag), obs=y)


def run(X, y, Z, priors, *, warmup=500, draws=500, seed=0):
    """One chain of ``NUTS(sor_model)`` (NumPyro's default settings); returns the finished ``MCMC``.

    ``priors``: fit's defaults, ``get_family("se").default_priors(data_scales(X, y))``.
    """
    mcmc = MCMC(NUTS(sor_model), num_warmup=warmup, num_samples=draws, num_chains=1, progress_bar=False)
    mcmc.run(
        jax.random.PRNGKey(seed),
        jnp.asarray(X),
        jnp.asarray(Z),
        priors,
        float(np.mean(y)),
        y=jnp.asarray(y),
        extra_fields=("num_steps", "diverging"),
    )
    return mcmc
