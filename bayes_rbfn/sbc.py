"""Simulation-based calibration (SBC; Talts, Betancourt, Simpson, Vehtari & Gelman 2018) for the SoR model.

For r = 1..R: draw θ_r = (log ℓ, log s², log σ) from the prior, simulate y_r ~ N(0, Q_ff + σ²I) through the
low-rank factor (f = K_fu L_uu⁻ᵀ e, e ~ N(0, I_M), y = f + σ ε — no N×N matrix), fit with NUTS and record
the rank of each true θ_r,k among the L thinned posterior draws. If the sampler and the likelihood are right,
each rank is uniform on {0, …, L}; a χ² test on binned ranks checks that.

All R fits run at once: NumPyro's functional HMC API (``numpyro.infer.hmc.hmc`` with a ``potential_fn_gen``
taking the data) is ``jax.vmap``-ed over replications inside one ``jit`` — no Python loop of MCMC runs.

The fitted model is the library's SoR marginal likelihood (:func:`bayes_rbfn.conditional.sor_factor`, the one
Woodbury path with the default jitter policy, guarded by :func:`bayes_rbfn.linalg.finite_or_neg_inf`).
``noise_scale`` ≠ 1 misspecifies it on purpose: the fitted likelihood uses σ·noise_scale while the simulator
uses σ, so the posterior of log σ is shifted by −log(noise_scale) and SBC must reject.

Parameters are sampled on the log scale with Normal priors (:data:`PRIORS`); ranks are invariant under the
monotone map, so they are the ranks of ℓ, s² and σ themselves.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from bayes_rbfn import linalg
from bayes_rbfn.conditional import sor_factor
from bayes_rbfn.kernels import SquaredExponential

__all__ = ["PARAMS", "PRIORS", "SBCResult", "chi2_uniformity", "plot_ecdf", "run_sbc"]

#: Sampled parameters, on the log scale.
PARAMS = ("log_lengthscale", "log_variance", "log_noise")
#: Normal(loc, scale) priors of :data:`PARAMS` (inputs on [0, 1]).
PRIORS = {"log_lengthscale": (np.log(0.3), 0.4), "log_variance": (0.0, 0.5), "log_noise": (np.log(0.3), 0.4)}


@dataclass(frozen=True)
class SBCResult:
    """Ranks (R, P) in {0, …, num_ranks−1}, χ² statistics and p-values per parameter (dicts by name)."""

    ranks: np.ndarray
    params: tuple[str, ...]
    num_ranks: int
    chi2: dict
    pvalues: dict
    bins: int
    divergences: int
    model: str
    noise_scale: float


def chi2_uniformity(ranks: np.ndarray, num_ranks: int, bins: int) -> tuple[float, float]:
    """Pearson χ² test of ranks uniform on {0, …, num_ranks−1}, pooled into ``bins`` contiguous bins.

    Bin expectations are exact for the discrete uniform (unequal bins when ``bins`` ∤ ``num_ranks``).
    Returns (statistic, p-value) with ``bins − 1`` degrees of freedom.
    """
    ranks = np.asarray(ranks)
    edges = np.linspace(0, num_ranks, bins + 1).round().astype(int)
    pairs = itertools.pairwise(edges)
    counts = np.array([np.sum((ranks >= a) & (ranks < b)) for a, b in pairs])
    expected = len(ranks) * np.diff(edges) / num_ranks
    stat = float(np.sum((counts - expected) ** 2 / expected))
    return stat, float(scipy.stats.chi2.sf(stat, bins - 1))


def _kernel(theta):
    return SquaredExponential(lengthscale=jnp.exp(theta[0]), variance=jnp.exp(theta[1]))


def _log_prior(theta):
    loc = jnp.array([PRIORS[p][0] for p in PARAMS])
    scale = jnp.array([PRIORS[p][1] for p in PARAMS])
    return jnp.sum(jax.scipy.stats.norm.logpdf(theta, loc, scale))


def _sor_log_lik(theta, X, y, Z, noise_scale):
    factor, _ = sor_factor(_kernel(theta), X, y, Z, jnp.exp(theta[2]) * noise_scale)
    return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())


def _rbfn_log_lik(theta, X, y, Z, noise_scale):
    # Weight space: y | α ~ N(K_fu α, σ²I), α ~ N(0, K_uu⁻¹) marginalised — the same N(0, Q_ff + σ²I),
    # evaluated through the same Woodbury factor (the RBFN model of the collection samples α instead).
    return _sor_log_lik(theta, X, y, Z, noise_scale)


_LOG_LIK = {"sor": _sor_log_lik, "rbfn": _rbfn_log_lik}


def _simulate(key, X, Z):
    """θ ~ prior; y ~ N(0, Q_ff + σ²I) via f = K_fu L_uu⁻ᵀ e (Q_ff with the library's jitter policy)."""
    k_theta, k_e, k_eps = jax.random.split(key, 3)
    loc = jnp.array([PRIORS[p][0] for p in PARAMS])
    scale = jnp.array([PRIORS[p][1] for p in PARAMS])
    theta = loc + scale * jax.random.normal(k_theta, (len(PARAMS),), dtype=X.dtype)
    kernel = _kernel(theta)
    Luu = linalg.cholesky(kernel(Z, Z))
    e = jax.random.normal(k_e, (Z.shape[0],), dtype=X.dtype)
    f = kernel(X, Z) @ linalg.solve_upper(Luu, e)
    y = f + jnp.exp(theta[2]) * jax.random.normal(k_eps, (X.shape[0],), dtype=X.dtype)
    return theta, y


@partial(jax.jit, static_argnames=("model", "warmup", "draws", "thin"))
def _run(keys, X, Z, noise_scale, model, warmup, draws, thin):
    from numpyro.infer.hmc import hmc

    log_lik = _LOG_LIK[model]

    def potential_fn_gen(y):
        return lambda theta: -(_log_prior(theta) + log_lik(theta, X, y, Z, noise_scale))

    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn_gen, algo="NUTS")

    def one(key):
        k_sim, k_init, k_mcmc = jax.random.split(key, 3)
        theta, y = _simulate(k_sim, X, Z)
        loc = jnp.array([PRIORS[p][0] for p in PARAMS], dtype=X.dtype)
        init = loc + 0.1 * jax.random.normal(k_init, loc.shape, dtype=X.dtype)
        state = init_kernel(init, num_warmup=warmup, model_args=(y,), rng_key=k_mcmc)

        def step(state, _):
            state = sample_kernel(state, model_args=(y,))
            return state, (state.z, state.diverging)

        state, _ = jax.lax.scan(step, state, None, length=warmup)
        _, (zs, div) = jax.lax.scan(step, state, None, length=draws)
        kept = zs[thin - 1 :: thin]
        ranks = jnp.sum(kept < theta[None, :], axis=0)
        return ranks, jnp.sum(div)

    return jax.vmap(one)(keys)


def run_sbc(
    model: str = "sor",
    reps: int = 100,
    n: int = 20,
    num_inducing: int = 5,
    draws: int = 100,
    warmup: int = 100,
    thin: int = 5,
    seed: int = 0,
    noise_scale: float = 1.0,
    bins: int | None = None,
) -> SBCResult:
    """Run SBC with ``reps`` replications, all fitted at once (vmapped NUTS, one chain each).

    Args:
        model: ``"sor"`` (marginal SoR likelihood) or ``"rbfn"`` (same marginal, weight-space reading).
        reps: number of simulated data sets R. n: data points per set (X fixed on a grid in [0, 1]).
        num_inducing: M inducing inputs (a grid in [0, 1]).
        draws, warmup: NUTS iterations; ``thin`` keeps every thin-th draw, L = draws // thin draws rank.
        seed: PRNG seed. noise_scale: the fitted model uses σ·noise_scale (1: well specified).
        bins: χ² bins (default min(L + 1, reps // 10, 10) — ≥ 10 expected counts per bin).

    Returns:
        :class:`SBCResult`.
    """
    if model not in _LOG_LIK:
        raise ValueError(f"model: expected one of {sorted(_LOG_LIK)}, got {model!r}")
    for name, v in (
        ("reps", reps),
        ("n", n),
        ("num_inducing", num_inducing),
        ("draws", draws),
        ("warmup", warmup),
        ("thin", thin),
    ):
        if int(v) != v or v < 1:
            raise ValueError(f"{name}: must be a positive integer, got {v!r}")
    if num_inducing > n:
        raise ValueError(f"num_inducing: {num_inducing} is more than n = {n}")
    if thin > draws:
        raise ValueError(f"thin: {thin} is more than draws = {draws}")
    if not (np.isfinite(noise_scale) and noise_scale > 0):
        raise ValueError(f"noise_scale: must be a finite positive number, got {noise_scale!r}")
    dtype = jnp.zeros(()).dtype
    X = jnp.linspace(0.0, 1.0, n, dtype=dtype)[:, None]
    Z = jnp.linspace(0.05, 0.95, num_inducing, dtype=dtype)[:, None]
    keys = jax.random.split(jax.random.PRNGKey(seed), reps)
    ranks, div = _run(keys, X, Z, jnp.asarray(noise_scale, dtype), model, int(warmup), int(draws), int(thin))
    ranks = np.asarray(ranks)
    num_ranks = draws // thin + 1
    bins = int(bins or max(2, min(num_ranks, reps // 10, 10)))
    chi2, pvalues = {}, {}
    for j, p in enumerate(PARAMS):
        chi2[p], pvalues[p] = chi2_uniformity(ranks[:, j], num_ranks, bins)
    return SBCResult(
        ranks, PARAMS, num_ranks, chi2, pvalues, bins, int(np.sum(div)), model, float(noise_scale)
    )


def plot_ecdf(result: SBCResult, path) -> None:
    """ECDF-difference plot of the fractional ranks per parameter, with 95% simultaneous bands.

    Uses ``arviz.plot_ecdf(..., difference=True, confidence_bands=True)`` (simulated simultaneous bands
    for a Uniform(0, 1) reference); falls back to a hand-made plot with the 95% Kolmogorov–Smirnov band
    (± 1.358/√R) if that call is unavailable.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    P = len(result.params)
    fig, axes = plt.subplots(1, P, figsize=(4 * P, 3), squeeze=False)
    # Fractional ranks, jittered within their rank cell so the continuous-uniform reference applies.
    rng = np.random.default_rng(0)
    frac = (result.ranks + rng.uniform(size=result.ranks.shape)) / result.num_ranks
    for j, name in enumerate(result.params):
        ax = axes[0, j]
        try:
            import warnings

            import arviz as az

            warnings.filterwarnings("ignore", message=".*eval_points.*")
            az.plot_ecdf(
                frac[:, j],
                cdf=scipy.stats.uniform(0, 1).cdf,
                difference=True,
                confidence_bands=True,
                ax=ax,
            )
        except Exception:  # pragma: no cover - depends on the ArviZ version
            x = np.sort(frac[:, j])
            R = len(x)
            ax.step(x, np.arange(1, R + 1) / R - x, where="post")
            band = 1.358 / np.sqrt(R)
            ax.axhline(band, ls="--", c="k")
            ax.axhline(-band, ls="--", c="k")
        ax.set_title(f"{name}  p={result.pvalues[name]:.3g}")
    fig.suptitle(f"SBC ({result.model}, noise_scale={result.noise_scale:g}, R={len(result.ranks)})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
