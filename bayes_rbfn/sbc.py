"""Simulation-based calibration (SBC) of the package's models: ``sor``, ``rbfn``, ``grouped`` and ``blr``.

For r = 1..R: draw the parameters θ_r from the prior, simulate data y_r (and the latent f at a few fixed
inputs, jointly with y_r) from the model, fit the model to y_r with NUTS, and record the rank of every true
quantity among the L thinned posterior draws of that quantity. If the sampler and the likelihood are right,
every rank is uniform on {0, …, L} (Talts et al. 2018, Theorem 1). Uniformity is checked by a Pearson χ²
test on binned ranks (:func:`chi2_uniformity`) and graphically by the ECDF-difference plot with
simultaneous 95% bands of Säilynoja, Bürkner & Vehtari (2022) (:func:`plot_ecdf`).

The models, each with its simulator, fitted log density and ranked quantities (:func:`quantity_names`):

``sor``
    θ = (ℓ, s², σ); α = L_uu⁻ᵀ v, v ~ N(0, I_M) (so α ~ N(0, K_uu⁻¹)); f = K_fu α, f* = K_*u α,
    y = f + σ ε. Fitted with α marginalised: the SoR likelihood N(y | 0, Q_ff + σ²I) through the one
    Woodbury path (:func:`bayes_rbfn.conditional.sor_factor`). Posterior draws of f* come from its analytic
    conditional given each draw of θ (:func:`_sor_latent_draw`, DESIGN §3.2).
``rbfn``
    The same simulator; fitted in weight space, the Bayesian RBF network: NUTS samples the whitened
    weights v ~ N(0, I_M) jointly with log θ, α = L_uu⁻ᵀ v, y ~ N(K_fu α, σ²I); f* = K_*u α per draw.
``grouped``
    G groups with their own (ℓ_g, s²_g, σ_g), non-centred as in ``bayes_rbfn.models.grouped``:
    log θ_g = μ_θ + τ_θ z_{θ,g}, z ~ N(0, 1), μ_θ ~ N(m_θ, s_θ), τ_θ ~ HalfNormal(TAU_SCALE); each group
    is an SoR GP on the same inputs X with shared inducing inputs Z. Ranked: μ_θ, τ_θ, every θ_g and the
    latent f* of every group.
``blr``
    Bishop's Bayesian linear regression with the Gaussian basis of ``bayes_rbfn.models.blr`` centred at
    Z: w ~ N(0, α⁻¹I), y = Φ w + β^-½ ε, f* = Φ_* w. Fitted with w marginalised (the evidence,
    :func:`bayes_rbfn.blr.log_evidence`); f* drawn from the weight posterior per draw of (α, β).

Parameters are sampled on the log scale (τ too); ranks are invariant under monotone maps, so they are the
ranks of ℓ, s², σ, τ, α, β themselves. The priors are fixed (:data:`LOG_PRIORS`, :data:`BLR_LOG_PRIORS`) —
SBC needs a prior that does not look at the data, unlike the package's data-scaled default priors.

``noise_scale`` ≠ 1 misspecifies the fit on purpose: the fitted likelihood uses σ·noise_scale (for ``blr``
β/noise_scale²) while the simulator uses σ, so the posterior of the noise is shifted and SBC must reject.

All R fits run at once: NumPyro's functional HMC API (``numpyro.infer.hmc.hmc`` with a ``potential_fn_gen``
taking the data) is ``jax.vmap``-ed over replications inside one ``jit`` — no Python loop of MCMC runs.
Under ``vmap`` every NUTS step costs as much as the longest trajectory among the replications.

References
----------
[1] Talts, S., Betancourt, M., Simpson, D., Vehtari, A. & Gelman, A. (2018). Validating Bayesian inference
    algorithms with simulation-based calibration. arXiv:1804.06788.
[2] Säilynoja, T., Bürkner, P.-C. & Vehtari, A. (2022). Graphical test for discrete uniformity and its
    applications in goodness-of-fit evaluation and multiple sample comparison. Statistics and Computing
    32, 32.
[3] Bishop, C. M. (2006). *Pattern Recognition and Machine Learning*. Springer. §3.3, §3.5.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from bayes_rbfn import blr, linalg
from bayes_rbfn.conditional import sor_factor, sor_predict
from bayes_rbfn.kernels import SquaredExponential

__all__ = [
    "BLR_LOG_PRIORS",
    "HYPERS",
    "LATENT_INPUTS",
    "LOG_PRIORS",
    "MODELS",
    "SBCResult",
    "chi2_uniformity",
    "plot_ecdf",
    "quantity_names",
    "run_sbc",
    "statistics",
    "write_sbc",
]

#: Kernel hyperparameters of the GP-family models, in the order of the sampled log vector.
HYPERS = ("lengthscale", "variance", "noise")
#: Normal(loc, scale) priors of log ℓ, log s², log σ (inputs on [0, 1], signal of unit scale). For the
#: grouped model these are the priors of the population locations μ_θ.
LOG_PRIORS: dict[str, tuple[float, float]] = {
    "lengthscale": (math.log(0.3), 0.4),
    "variance": (0.0, 0.5),
    "noise": (math.log(0.3), 0.4),
}
#: Normal(loc, scale) priors of log α and log β for ``blr``: the priors of ``bayes_rbfn.models.blr`` for
#: data of unit standard deviation, log α ~ N(log κ, 1) with κ = √π (one input dimension, unit width
#: factor; prior signal variance ≈ 1) and log β ~ N(−2 log 0.2, 2) (noise σ ≈ 0.2).
BLR_LOG_PRIORS: dict[str, tuple[float, float]] = {
    "alpha": (0.5 * math.log(math.pi), 1.0),
    "beta": (-2.0 * math.log(0.2), 2.0),
}
#: The fixed inputs at which the latent f is ranked (interior of [0, 1], where the data are).
LATENT_INPUTS = (0.3, 0.75)
#: The models SBC knows.
MODELS = ("sor", "rbfn", "grouped", "blr")


# --------------------------------------------------------------------------------------------------
# Result and the χ² test


@dataclass(frozen=True)
class SBCResult:
    """The outcome of :func:`run_sbc`.

    Attributes:
        ranks: (R, Q) integer ranks in {0, …, num_ranks − 1}, one column per quantity.
        params: the Q quantity names (:func:`quantity_names`), in column order.
        num_ranks: L + 1, with L the number of thinned posterior draws per replication.
        chi2, pvalues: χ² statistic and p-value per quantity name (:func:`chi2_uniformity`).
        bins: number of χ² bins (``bins − 1`` degrees of freedom).
        divergences: total number of divergent NUTS transitions after warmup, over all replications.
        model: the model name. noise_scale: the fitted/simulated noise ratio (1: well specified).
        settings: every argument of :func:`run_sbc` (JSON-serialisable).
        seconds: wall time of the vectorised fit, compilation included.
    """

    ranks: np.ndarray
    params: tuple[str, ...]
    num_ranks: int
    chi2: dict[str, float]
    pvalues: dict[str, float]
    bins: int
    divergences: int
    model: str
    noise_scale: float
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = float("nan")

    @property
    def min_pvalue(self) -> float:
        """The smallest p-value over the quantities."""
        return min(self.pvalues.values())


def chi2_uniformity(ranks: np.ndarray, num_ranks: int, bins: int) -> tuple[float, float]:
    """Pearson χ² test of ranks uniform on {0, …, num_ranks−1}, pooled into ``bins`` contiguous bins.

    Bin expectations are exact for the discrete uniform (unequal bins when ``bins`` ∤ ``num_ranks``).

    Args:
        ranks: (R,) integer ranks. num_ranks: number of possible rank values. bins: number of bins.

    Returns:
        (statistic, p-value) with ``bins − 1`` degrees of freedom.
    """
    ranks = np.asarray(ranks)
    edges = np.linspace(0, num_ranks, bins + 1).round().astype(int)
    pairs = itertools.pairwise(edges)
    counts = np.array([np.sum((ranks >= a) & (ranks < b)) for a, b in pairs])
    expected = len(ranks) * np.diff(edges) / num_ranks
    stat = float(np.sum((counts - expected) ** 2 / expected))
    return stat, float(scipy.stats.chi2.sf(stat, bins - 1))


# --------------------------------------------------------------------------------------------------
# Shared pieces: the fixed design, priors, the SoR simulator and latent draws


class _Design(NamedTuple):
    """Fixed inputs shared by every replication (a pytree, traced by ``jit``).

    X (N, 1) training inputs; Z (M, 1) inducing inputs / basis centres; X_test (S, 1) the latent inputs;
    Phi (N, M), Phi_test (S, M) the ``blr`` design matrices at X and X_test (None for other models).
    """

    X: jax.Array
    Z: jax.Array
    X_test: jax.Array
    Phi: jax.Array | None = None
    Phi_test: jax.Array | None = None


def _normal_logpdf(x: jax.Array, loc: Any, scale: Any) -> jax.Array:
    return jnp.sum(jax.scipy.stats.norm.logpdf(x, loc, scale))


def _prior_arrays(priors: dict[str, tuple[float, float]], dtype: Any) -> tuple[jax.Array, jax.Array]:
    loc = jnp.array([v[0] for v in priors.values()], dtype=dtype)
    scale = jnp.array([v[1] for v in priors.values()], dtype=dtype)
    return loc, scale


def _kernel_noise(log_theta: jax.Array) -> tuple[SquaredExponential, jax.Array]:
    """(SE kernel, σ) from log (ℓ, s², σ), shape (3,)."""
    kernel = SquaredExponential(lengthscale=jnp.exp(log_theta[0]), variance=jnp.exp(log_theta[1]))
    return kernel, jnp.exp(log_theta[2])


def _whitened_weights(kernel: SquaredExponential, Z: jax.Array, v: jax.Array) -> jax.Array:
    """α = L_uu⁻ᵀ v (M,): v ~ N(0, I) gives α ~ N(0, K_uu⁻¹) (K_uu with the library's jitter policy)."""
    return linalg.solve_upper(linalg.cholesky(kernel(Z, Z)), v)


def _simulate_given_weights(
    key: jax.Array, log_theta: jax.Array, v: jax.Array, d: _Design
) -> tuple[jax.Array, jax.Array]:
    """One SoR / RBFN data set given log θ and the whitened weights v: (y (N,), f* (S,)).

    α = L_uu⁻ᵀ v, f = K_fu α, f* = K_*u α (the same α, so f* is drawn jointly with y), y = f + σ ε.
    """
    kernel, noise = _kernel_noise(log_theta)
    alpha = _whitened_weights(kernel, d.Z, v)
    y = kernel(d.X, d.Z) @ alpha + noise * jax.random.normal(key, (d.X.shape[0],), dtype=d.X.dtype)
    return y, kernel(d.X_test, d.Z) @ alpha


def _simulate_sor(key: jax.Array, log_theta: jax.Array, d: _Design) -> tuple[jax.Array, jax.Array]:
    """One SoR data set given log θ, with v ~ N(0, I_M) drawn here: (y (N,), f* (S,))."""
    k_v, k_eps = jax.random.split(key)
    v = jax.random.normal(k_v, (d.Z.shape[0],), dtype=d.X.dtype)
    return _simulate_given_weights(k_eps, log_theta, v, d)


def _sor_log_lik(log_theta: jax.Array, y: jax.Array, d: _Design, noise_scale: jax.Array) -> jax.Array:
    """log N(y | 0, Q_ff + (σ·noise_scale)² I), the Woodbury path; -inf on a failed factorisation."""
    kernel, noise = _kernel_noise(log_theta)
    factor, _ = sor_factor(kernel, d.X, y, d.Z, noise * noise_scale)
    return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())


def _sor_latent_draw(
    key: jax.Array, log_theta: jax.Array, y: jax.Array, d: _Design, noise_scale: jax.Array
) -> jax.Array:
    """One draw of f* | y, θ under SoR (S,), DESIGN §3.2.

    f* = K_*u α with α | y ~ N(Σ K_uf y/σ², Σ); the mean is :func:`bayes_rbfn.conditional.sor_predict`'s
    and, with W = L_B⁻¹ L_uu⁻¹ K_u* (``Woodbury.project``) so that cov(f*) = WᵀW, f* = mean + Wᵀ e,
    e ~ N(0, I_M), has exactly that covariance without factorising the (possibly singular) S×S matrix.
    """
    kernel, noise = _kernel_noise(log_theta)
    factor, _ = sor_factor(kernel, d.X, y, d.Z, noise * noise_scale)
    mean = sor_predict(factor, kernel, d.Z, d.X_test, full_cov=False).mean
    _, W = factor.project(kernel(d.Z, d.X_test))
    return mean + W.T @ jax.random.normal(key, (W.shape[0],), dtype=W.dtype)


# --------------------------------------------------------------------------------------------------
# The models. Each is a handful of pure functions of a flat parameter vector on the unconstrained scale:
#   prior_draw(key, d) -> params;  simulate(key, params, d) -> (y, f*);  log_density(params, y, d, scale);
#   hyper(params) -> ranked parameter quantities;  latent(key, params, y, d, scale) -> one posterior f*;
#   init(key, d) -> NUTS starting point.


class _Model(NamedTuple):
    prior_draw: Callable
    simulate: Callable
    log_density: Callable
    hyper: Callable
    latent: Callable
    init: Callable


def _hyper_prior_draw(key: jax.Array, d: _Design) -> jax.Array:
    loc, scale = _prior_arrays(LOG_PRIORS, d.X.dtype)
    return loc + scale * jax.random.normal(key, loc.shape, dtype=loc.dtype)


def _hyper_init(key: jax.Array, d: _Design) -> jax.Array:
    loc, _ = _prior_arrays(LOG_PRIORS, d.X.dtype)
    return loc + 0.1 * jax.random.normal(key, loc.shape, dtype=loc.dtype)


def _hyper_log_prior(log_theta: jax.Array) -> jax.Array:
    loc, scale = _prior_arrays(LOG_PRIORS, log_theta.dtype)
    return _normal_logpdf(log_theta, loc, scale)


# sor: params = log (ℓ, s², σ), weights marginalised.


def _sor_log_density(params, y, d, noise_scale):
    return _hyper_log_prior(params) + _sor_log_lik(params, y, d, noise_scale)


_SOR = _Model(
    prior_draw=_hyper_prior_draw,
    simulate=_simulate_sor,
    log_density=_sor_log_density,
    hyper=lambda params: params,
    latent=_sor_latent_draw,
    init=_hyper_init,
)

# rbfn: params = (log ℓ, log s², log σ, v_1..v_M), α = L_uu⁻ᵀ v sampled explicitly.


def _rbfn_prior_draw(key, d):
    k_theta, k_v = jax.random.split(key)
    v = jax.random.normal(k_v, (d.Z.shape[0],), dtype=d.X.dtype)
    return jnp.concatenate([_hyper_prior_draw(k_theta, d), v])


def _rbfn_simulate(key, params, d):
    """The SoR simulator with the weights taken from ``params`` (so they are part of the truth)."""
    return _simulate_given_weights(key, params[:3], params[3:], d)


def _rbfn_log_density(params, y, d, noise_scale):
    """log p(log θ) + log N(v | 0, I) + Σ_i log N(y_i | [K_fu α]_i, (σ·noise_scale)²), α = L_uu⁻ᵀ v."""
    kernel, noise = _kernel_noise(params[:3])
    v = params[3:]
    f = kernel(d.X, d.Z) @ _whitened_weights(kernel, d.Z, v)
    log_lik = _normal_logpdf(y, f, noise * noise_scale)
    return _hyper_log_prior(params[:3]) + _normal_logpdf(v, 0.0, 1.0) + linalg.finite_or_neg_inf(log_lik)


def _rbfn_latent(key, params, y, d, noise_scale):
    """f* = K_*u α for this draw's weights (given θ and α the latent is known)."""
    kernel, _ = _kernel_noise(params[:3])
    return kernel(d.X_test, d.Z) @ _whitened_weights(kernel, d.Z, params[3:])


def _rbfn_init(key, d):
    return jnp.concatenate([_hyper_init(key, d), jnp.zeros(d.Z.shape[0], dtype=d.X.dtype)])


_RBFN = _Model(
    prior_draw=_rbfn_prior_draw,
    simulate=_rbfn_simulate,
    log_density=_rbfn_log_density,
    hyper=lambda params: params[:3],
    latent=_rbfn_latent,
    init=_rbfn_init,
)


# grouped: params = (μ (3), log τ (3), z (G·3)), log θ_g = μ + τ z_g; see the module docstring.


def _tau_scale() -> float:
    from bayes_rbfn.models.grouped import TAU_SCALE

    return float(TAU_SCALE)


def _grouped_unpack(params: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(μ (3,), log τ (3,), z (G, 3)) from the flat vector."""
    return params[:3], params[3:6], params[6:].reshape(-1, 3)


def _grouped_log_theta(params: jax.Array) -> jax.Array:
    """Per-group log θ_g = μ + τ z_g, shape (G, 3) (non-centred, as in ``bayes_rbfn.models.grouped``)."""
    mu, log_tau, z = _grouped_unpack(params)
    return mu + jnp.exp(log_tau) * z


def _grouped_prior_draw(key, d, num_groups):
    k_mu, k_tau, k_z = jax.random.split(key, 3)
    tau = _tau_scale() * jnp.abs(jax.random.normal(k_tau, (3,), dtype=d.X.dtype))
    z = jax.random.normal(k_z, (num_groups * 3,), dtype=d.X.dtype)
    return jnp.concatenate([_hyper_prior_draw(k_mu, d), jnp.log(tau), z])


def _grouped_simulate(key, params, d):
    """Every group an SoR data set with its own θ_g: y (G, N), f* (G·S,)."""
    log_theta = _grouped_log_theta(params)
    keys = jax.random.split(key, log_theta.shape[0])
    y, f_test = jax.vmap(_simulate_sor, in_axes=(0, 0, None))(keys, log_theta, d)
    return y, f_test.reshape(-1)


def _grouped_log_density(params, y, d, noise_scale):
    """log p(μ) + log p(log τ) + log N(z | 0, I) + Σ_g log N(y_g | 0, Q_ff^(g) + (σ_g·noise_scale)² I)."""
    mu, log_tau, z = _grouped_unpack(params)
    # τ ~ HalfNormal(TAU_SCALE) sampled as log τ: the density of log τ is p(τ) · τ.
    log_p_tau = jnp.sum(jax.scipy.stats.norm.logpdf(jnp.exp(log_tau), 0.0, _tau_scale()) + math.log(2.0))
    log_prior = _hyper_log_prior(mu) + log_p_tau + jnp.sum(log_tau) + _normal_logpdf(z, 0.0, 1.0)
    log_lik = jax.vmap(_sor_log_lik, in_axes=(0, 0, None, None))(
        _grouped_log_theta(params), y, d, noise_scale
    )
    return log_prior + jnp.sum(log_lik)


def _grouped_hyper(params):
    mu, log_tau, _ = _grouped_unpack(params)
    return jnp.concatenate([mu, log_tau, _grouped_log_theta(params).reshape(-1)])


def _grouped_latent(key, params, y, d, noise_scale):
    log_theta = _grouped_log_theta(params)
    keys = jax.random.split(key, log_theta.shape[0])
    draws = jax.vmap(_sor_latent_draw, in_axes=(0, 0, 0, None, None))(keys, log_theta, y, d, noise_scale)
    return draws.reshape(-1)


def _grouped_init(key, d, num_groups):
    tau0 = jnp.full((3,), math.log(0.5 * _tau_scale()), dtype=d.X.dtype)
    return jnp.concatenate([_hyper_init(key, d), tau0, jnp.zeros(num_groups * 3, dtype=d.X.dtype)])


def _grouped(num_groups: int) -> _Model:
    return _Model(
        prior_draw=partial(_grouped_prior_draw, num_groups=num_groups),
        simulate=_grouped_simulate,
        log_density=_grouped_log_density,
        hyper=_grouped_hyper,
        latent=_grouped_latent,
        init=partial(_grouped_init, num_groups=num_groups),
    )


# blr: params = (log α, log β); w ~ N(0, α⁻¹I) marginalised (Bishop (3.86)).


def _blr_prior_draw(key, d):
    loc, scale = _prior_arrays(BLR_LOG_PRIORS, d.X.dtype)
    return loc + scale * jax.random.normal(key, loc.shape, dtype=loc.dtype)


def _blr_simulate(key, params, d):
    """w ~ N(0, α⁻¹ I), y = Φ w + β^-½ ε, f* = Φ_* w (Bishop (3.52), (3.10))."""
    k_w, k_eps = jax.random.split(key)
    alpha, beta = jnp.exp(params[0]), jnp.exp(params[1])
    w = jax.random.normal(k_w, (d.Phi.shape[1],), dtype=d.X.dtype) / jnp.sqrt(alpha)
    eps = jax.random.normal(k_eps, (d.Phi.shape[0],), dtype=d.X.dtype)
    return d.Phi @ w + eps / jnp.sqrt(beta), d.Phi_test @ w


def _blr_fitted_precisions(params, noise_scale):
    """(α, β/noise_scale²): the fitted noise standard deviation is β^-½ · noise_scale."""
    return jnp.exp(params[0]), jnp.exp(params[1]) / noise_scale**2


def _blr_log_density(params, y, d, noise_scale):
    loc, scale = _prior_arrays(BLR_LOG_PRIORS, params.dtype)
    alpha, beta = _blr_fitted_precisions(params, noise_scale)
    log_lik = linalg.finite_or_neg_inf(blr.log_evidence(d.Phi, y, alpha, beta))
    return _normal_logpdf(params, loc, scale) + log_lik


def _blr_latent(key, params, y, d, noise_scale):
    """f* = Φ_* w, w ~ N(m_N, S_N) (Bishop (3.53)–(3.54)): m_N + L⁻ᵀ e with L Lᵀ = S_N⁻¹, so
    Φ_* w = Φ_* m_N + (L⁻¹ Φ_*ᵀ)ᵀ e."""
    alpha, beta = _blr_fitted_precisions(params, noise_scale)
    post = blr.posterior(d.Phi, y, alpha, beta)
    W = post.whiten(d.Phi_test)
    return d.Phi_test @ post.mean + W.T @ jax.random.normal(key, (W.shape[0],), dtype=W.dtype)


def _blr_init(key, d):
    loc, _ = _prior_arrays(BLR_LOG_PRIORS, d.X.dtype)
    return loc + 0.1 * jax.random.normal(key, loc.shape, dtype=loc.dtype)


_BLR = _Model(
    prior_draw=_blr_prior_draw,
    simulate=_blr_simulate,
    log_density=_blr_log_density,
    hyper=lambda params: params,
    latent=_blr_latent,
    init=_blr_init,
)


def _get_model(model: str, num_groups: int) -> _Model:
    if model == "grouped":
        return _grouped(num_groups)
    return {"sor": _SOR, "rbfn": _RBFN, "blr": _BLR}[model]


def quantity_names(model: str, num_groups: int = 3, num_latent: int = len(LATENT_INPUTS)) -> tuple[str, ...]:
    """Names of the ranked quantities of ``model``, in the column order of :attr:`SBCResult.ranks`.

    ``sor``/``rbfn``: ``lengthscale``, ``variance``, ``noise``, ``f[0]``, …; ``grouped``: ``<θ>_mu``,
    ``<θ>_tau``, ``<θ>[g]`` for every group g, then ``f[g,s]``; ``blr``: ``alpha``, ``beta``, ``f[s]``.
    ``f[s]`` is the latent function at ``LATENT_INPUTS[s]``.
    """
    _check_model(model)
    latent = tuple(f"f[{s}]" for s in range(num_latent))
    if model in ("sor", "rbfn"):
        return (*HYPERS, *latent)
    if model == "blr":
        return ("alpha", "beta", *latent)
    groups = range(num_groups)
    return (
        *(f"{h}_mu" for h in HYPERS),
        *(f"{h}_tau" for h in HYPERS),
        *(f"{h}[{g}]" for g in groups for h in HYPERS),
        *(f"f[{g},{s}]" for g in groups for s in range(num_latent)),
    )


# --------------------------------------------------------------------------------------------------
# The vectorised run


@partial(
    jax.jit,
    static_argnames=("model", "num_groups", "warmup", "draws", "thin", "target_accept", "max_tree_depth"),
)
def _run(
    keys: jax.Array,
    d: _Design,
    noise_scale: jax.Array,
    model: str,
    num_groups: int,
    warmup: int,
    draws: int,
    thin: int,
    target_accept: float,
    max_tree_depth: int,
) -> tuple[jax.Array, jax.Array]:
    """All replications in one program: ranks (R, Q) and divergences (R,)."""
    from numpyro.infer.hmc import hmc

    m = _get_model(model, num_groups)

    def potential_fn_gen(y):
        return lambda params: -m.log_density(params, y, d, noise_scale)

    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn_gen, algo="NUTS")

    def one(key):
        k_prior, k_sim, k_init, k_mcmc, k_latent = jax.random.split(key, 5)
        truth = m.prior_draw(k_prior, d)
        y, f_true = m.simulate(k_sim, truth, d)
        state = init_kernel(
            m.init(k_init, d),
            num_warmup=warmup,
            target_accept_prob=target_accept,
            max_tree_depth=max_tree_depth,
            model_args=(y,),
            rng_key=k_mcmc,
        )

        def step(state, _):
            state = sample_kernel(state, model_args=(y,))
            return state, (state.z, state.diverging)

        state, _ = jax.lax.scan(step, state, None, length=warmup)
        _, (zs, div) = jax.lax.scan(step, state, None, length=draws)
        kept = zs[thin - 1 :: thin]
        latent_keys = jax.random.split(k_latent, kept.shape[0])

        def quantities(k, params):
            return jnp.concatenate([m.hyper(params), m.latent(k, params, y, d, noise_scale)])

        posterior = jax.vmap(quantities)(latent_keys, kept)
        true_q = jnp.concatenate([m.hyper(truth), f_true])
        return jnp.sum(posterior < true_q[None, :], axis=0), jnp.sum(div)

    return jax.vmap(one)(keys)


def _check_model(model: Any) -> None:
    if model not in MODELS:
        raise ValueError(f"model: expected one of {', '.join(MODELS)}; got {model!r}")


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    return int(value)


def _design(model: str, n: int, num_inducing: int, dtype: Any) -> _Design:
    X = jnp.linspace(0.0, 1.0, n, dtype=dtype)[:, None]
    Z = jnp.linspace(0.05, 0.95, num_inducing, dtype=dtype)[:, None]
    X_test = jnp.asarray(LATENT_INPUTS, dtype=dtype)[:, None]
    Phi = Phi_test = None
    if model == "blr":
        from bayes_rbfn.models.blr import design_matrix

        Phi, Phi_test = design_matrix(X, Z), design_matrix(X_test, Z)
    return _Design(X=X, Z=Z, X_test=X_test, Phi=Phi, Phi_test=Phi_test)


def run_sbc(
    model: str = "sor",
    reps: int = 200,
    n: int = 20,
    num_inducing: int = 5,
    draws: int = 500,
    warmup: int = 300,
    thin: int = 5,
    seed: int = 0,
    noise_scale: float = 1.0,
    bins: int | None = None,
    *,
    num_groups: int = 3,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
) -> SBCResult:
    """Run SBC of ``model`` with ``reps`` replications, all fitted at once (vmapped NUTS, one chain each).

    Args:
        model: one of :data:`MODELS` (``"sor"``, ``"rbfn"``, ``"grouped"``, ``"blr"``; module docstring).
        reps: number of simulated data sets R.
        n: data points per set (per group for ``grouped``), X a grid on [0, 1].
        num_inducing: M inducing inputs / basis centres, a grid on [0.05, 0.95]; at most n.
        draws, warmup: NUTS iterations after / for adaptation; ``thin`` keeps every thin-th draw, so
            L = draws // thin posterior draws are ranked against each truth and ranks lie in {0, …, L}.
            The defaults (R = 200, L = 100) are a full-size run; the tests use reduced settings.
        seed: PRNG seed (everything — priors, data, NUTS — follows from it).
        noise_scale: the fitted model's noise is σ·noise_scale (1: well specified; 2: the "doubled
            noise" wrong variant that SBC must reject).
        bins: χ² bins (default min(L + 1, reps // 10, 10), at least 2: ≥ 10 expected counts per bin).
        num_groups: G for ``grouped`` (ignored otherwise).
        target_accept, max_tree_depth: NUTS settings.

    Returns:
        :class:`SBCResult` with ranks (R, Q) of the quantities :func:`quantity_names`.

    Raises:
        ValueError: an unknown model or an invalid argument (the message names it).

    References:
        Talts et al. (2018), Algorithm 1 (see the module docstring).
    """
    _check_model(model)
    ints = {
        "reps": reps,
        "n": n,
        "num_inducing": num_inducing,
        "draws": draws,
        "warmup": warmup,
        "thin": thin,
        "num_groups": num_groups,
        "max_tree_depth": max_tree_depth,
    }
    ints = {name: _check_positive_int(name, value) for name, value in ints.items()}
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: must be a non-negative integer, got {seed!r}")
    if ints["num_inducing"] > ints["n"]:
        raise ValueError(f"num_inducing: {num_inducing} is more than n = {n}")
    if ints["thin"] > ints["draws"]:
        raise ValueError(f"thin: {thin} is more than draws = {draws}")
    if isinstance(noise_scale, bool) or not (
        isinstance(noise_scale, (int, float, np.floating)) and np.isfinite(noise_scale) and noise_scale > 0
    ):
        raise ValueError(f"noise_scale: must be a finite positive number, got {noise_scale!r}")
    if not (isinstance(target_accept, (float, np.floating)) and 0 < target_accept < 1):
        raise ValueError(f"target_accept: must be a number in (0, 1), got {target_accept!r}")
    num_ranks = ints["draws"] // ints["thin"] + 1
    if bins is None:
        bins = max(2, min(num_ranks, ints["reps"] // 10, 10))
    elif _check_positive_int("bins", bins) < 2 or bins > num_ranks:
        raise ValueError(
            f"bins: must be an integer in [2, {num_ranks}] (the number of rank values), got {bins!r}"
        )

    dtype = jnp.zeros(()).dtype
    design = _design(model, ints["n"], ints["num_inducing"], dtype)
    keys = jax.random.split(jax.random.PRNGKey(int(seed)), ints["reps"])
    start = time.perf_counter()
    ranks, div = _run(
        keys,
        design,
        jnp.asarray(noise_scale, dtype),
        model,
        ints["num_groups"] if model == "grouped" else 1,
        ints["warmup"],
        ints["draws"],
        ints["thin"],
        float(target_accept),
        ints["max_tree_depth"],
    )
    ranks = np.asarray(jax.block_until_ready(ranks)).astype(np.int64)
    seconds = time.perf_counter() - start
    names = quantity_names(model, ints["num_groups"])
    chi2, pvalues = {}, {}
    for j, name in enumerate(names):
        chi2[name], pvalues[name] = chi2_uniformity(ranks[:, j], num_ranks, int(bins))
    settings = {
        "model": model,
        **ints,
        "seed": int(seed),
        "noise_scale": float(noise_scale),
        "target_accept": float(target_accept),
        "latent_inputs": list(LATENT_INPUTS),
        "dtype": str(dtype),
    }
    if model != "grouped":
        settings.pop("num_groups")
    return SBCResult(
        ranks=ranks,
        params=names,
        num_ranks=num_ranks,
        chi2=chi2,
        pvalues=pvalues,
        bins=int(bins),
        divergences=int(np.sum(div)),
        model=model,
        noise_scale=float(noise_scale),
        settings=settings,
        seconds=seconds,
    )


# --------------------------------------------------------------------------------------------------
# ECDF plot and output folder


def plot_ecdf(result: SBCResult, path: str | os.PathLike[str] | None = None, ci_prob: float = 0.95):
    """ECDF-difference plot of the ranks of every quantity, with simultaneous ``ci_prob`` bands.

    The ranks r ∈ {0, …, L} are mapped to u = (r + 1)/(L + 1) and their ECDF is evaluated at the L fixed
    points z_i = i/(L + 1), i = 1..L, where a discrete-uniform rank has exactly the Uniform(0, 1) CDF
    (no jittering). ``arviz.plot_ecdf(..., cdf=uniform.cdf, difference=True,
    confidence_bands="optimized", eval_points=z)`` then draws ECDF − CDF with the simultaneous band of
    Säilynoja et al. (2022) (their optimisation method), calibrated because the evaluation points do not
    depend on the ranks.

    Args:
        result: from :func:`run_sbc`. path: PNG file to write (None: do not write).
        ci_prob: joint probability of the bands.

    Returns:
        A matplotlib Figure (not registered with pyplot, so nothing needs closing).

    References:
        Säilynoja, Bürkner & Vehtari (2022), §2–3 (see the module docstring).
    """
    import arviz as az
    from matplotlib.figure import Figure

    Q = len(result.params)
    ncols = min(Q, 5)
    nrows = math.ceil(Q / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    L = result.num_ranks - 1
    eval_points = np.arange(1, L + 1) / (L + 1)
    cdf = scipy.stats.uniform(0, 1).cdf
    for j, name in enumerate(result.params):
        ax = axes.flat[j]
        az.plot_ecdf(
            (result.ranks[:, j] + 1) / (L + 1),
            eval_points=eval_points,
            cdf=cdf,
            difference=True,
            confidence_bands="optimized",
            ci_prob=ci_prob,
            ax=ax,
        )
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_title(f"{name}  p={result.pvalues[name]:.2g}", fontsize=9)
        ax.set_xlabel("fractional rank", fontsize=8)
    for ax in axes.flat[Q:]:
        ax.set_visible(False)
    fig.suptitle(
        f"SBC {result.model}: ECDF − uniform CDF, {ci_prob:.0%} simultaneous bands "
        f"(R={len(result.ranks)}, L={L}, noise_scale={result.noise_scale:g})",
        fontsize=10,
    )
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def statistics(result: SBCResult) -> dict[str, Any]:
    """The test statistics of ``result`` as a JSON-serialisable dict (written to ``statistics.json``).

    Keys: ``model``, ``settings``, ``num_ranks``, ``bins``, ``dof``, ``divergences``, ``seconds``,
    ``min_pvalue`` and ``quantities`` = {name: {"chi2", "dof", "pvalue", "mean_rank"}}.
    """
    dof = result.bins - 1
    quantities = {
        name: {
            "chi2": result.chi2[name],
            "dof": dof,
            "pvalue": result.pvalues[name],
            "mean_rank": float(np.mean(result.ranks[:, j])),
        }
        for j, name in enumerate(result.params)
    }
    return {
        "model": result.model,
        "settings": result.settings,
        "num_ranks": result.num_ranks,
        "bins": result.bins,
        "dof": dof,
        "divergences": result.divergences,
        "seconds": result.seconds,
        "min_pvalue": result.min_pvalue,
        "quantities": quantities,
    }


def _csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_sbc(result: SBCResult, out_dir: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``ranks.csv``, ``statistics.csv``, ``statistics.json`` and ``ecdf.png`` into ``out_dir``.

    * ``ranks.csv``: header of quantity names, one row per replication, integer ranks in {0, …, L};
    * ``statistics.csv``: one row per quantity — ``quantity, chi2, dof, pvalue, mean_rank``;
    * ``statistics.json``: :func:`statistics` (also divergences, settings and wall time);
    * ``ecdf.png``: :func:`plot_ecdf`.

    Written atomically through :func:`bayes_rbfn.output.atomic_output_dir`: everything goes into a hidden
    sibling folder that replaces ``out_dir`` only when complete.

    Returns:
        The output folder.

    Raises:
        bayes_rbfn.io.InputError: ``out_dir`` exists and is not empty (and not ``overwrite``), or is a file.
    """
    from bayes_rbfn.output import atomic_output_dir

    out = Path(out_dir)
    stats = statistics(result)
    ranks_csv = _csv_text(list(result.params), result.ranks.tolist())
    stats_rows = [
        [name, q["chi2"], q["dof"], q["pvalue"], q["mean_rank"]] for name, q in stats["quantities"].items()
    ]
    stats_csv = _csv_text(["quantity", "chi2", "dof", "pvalue", "mean_rank"], stats_rows)
    with atomic_output_dir(out, overwrite) as tmp:
        (tmp / "ranks.csv").write_text(ranks_csv, encoding="utf-8")
        (tmp / "statistics.csv").write_text(stats_csv, encoding="utf-8")
        (tmp / "statistics.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
        plot_ecdf(result, tmp / "ecdf.png")
    return out
