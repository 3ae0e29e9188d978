"""``blr`` — Bishop's Bayesian linear regression with Gaussian basis functions, evidence marginalised.

The model of Bishop (2006) §3.3 and §3.5 with the centres of its Gaussian basis functions at the inducing
inputs Z that :func:`bayes_rbfn.fit` chooses (``num_inducing=M``):

    φ_j(x) = exp(−½ Σ_d (x_d − z_jd)² / s_d²)                  (Bishop (3.4)), j = 1..M
    w ~ N(0, α⁻¹ I),   t = y − c ~ N(Φ w, β⁻¹ I)                 (Bishop (3.52), (3.10))

NUTS samples only the weight precision α and the noise precision β; the weights are marginalised
analytically, so the log density is the evidence ``ln p(t | α, β) = ln N(t | 0, ΦΦᵀ/α + I/β)`` (Bishop
(3.86), O(NM² + M³)). Its one covariance is factorised once (see ``log_likelihood`` below), and the
evidence, the predictive, the replicates and the LOO conditionals all come from that factor. Per draw:

* predictive (``predict``): Bishop (3.58)–(3.59) for the latent y(x, w) = wᵀφ(x), i.e. mean
  ``m_Nᵀ φ(x) + c`` and variance ``φ(x)ᵀ S_N φ(x)`` *without* the 1/β term (docs/output.md stores the latent
  f);
* log-likelihood (``log_likelihood``): the leave-one-out conditionals ``ln p(t_i | t_−i, α, β)`` of
  ``t ~ N(0, ΦΦᵀ/α + I/β)`` (Bürkner et al. 2020). That covariance is ``Q + D`` with the low-rank part
  ``Q = Φ (αI)⁻¹ Φᵀ`` — the Nyström form ``K_fu K_uu⁻¹ K_uf`` with ``K_fu = Φ`` and ``K_uu = αI``
  (``L_uu = √α I``) — and ``D = I/β``, so it goes through the project's one streamed Woodbury pass
  (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor`, :func:`bayes_rbfn.gp.block_loo.sor_loo`) in
  O(NM²), with no N×N matrix. Φ is the Gram matrix of a unit-variance SE kernel of lengthscales s_d
  (:func:`basis_kernel`), which is what the pass evaluates chunk by chunk.

Posterior variables: ``weight_precision`` (Bishop's α), ``noise_precision`` (Bishop's β) and the
deterministic ``noise`` = 1/√β, the noise standard deviation of docs/mathematics.md#notation, so the
generic predictive (y* bands) and diagnostics find it under its usual name.

Choices:

* **Basis width — fixed, not sampled.** ``s_d = WIDTH_FACTOR × Δ_d`` with ``Δ_d`` the spacing of a regular
  grid of M points spanning the centres' bounding box in dimension d, ``Δ_d = range_d(Z) / (M^{1/D} − 1)``
  (in 1-D the mean gap between sorted centres), and ``WIDTH_FACTOR = 1``. The basis is then fixed by Z, as
  in Bishop, where only α and β are hyperparameters; with one bump per spacing the sum of neighbouring
  bumps is smooth (no ripples between centres) and neighbouring weights are not confounded. The width is
  recomputed from Z wherever the model is evaluated, so a fit rebuilt from ``inference.nc`` gives the same
  basis. The smoothness of the fit is set by M: more centres mean narrower bumps (compare M by their
  evidence or with ``az.loo``).
* **Priors (weakly informative, adapted to the data scale).** In the interior of a regular grid of
  Gaussian bumps with ``s = f Δ``, ``Σ_j φ_j(x)² ≈ (f √π)^D =: κ`` (a Riemann sum for
  ``∫ exp(−u²/s²) du / Δ``), so the prior signal variance of f(x) is ``κ/α``. The prior on α makes that
  signal variance LogNormal(log var(y), 1), the ``variance`` prior of the kernel families:
  ``α ~ LogNormal(log κ − 2 log sd(y), 1)``. The prior on β makes the noise σ = β^{-1/2}
  LogNormal(log(0.2 sd(y)), 1), the ``noise`` prior of every other model: ``β ~ LogNormal(−2 log(0.2
  sd(y)), 2)``. Both can be replaced with
  ``priors={"weight_precision": ..., "noise_precision": ...}`` and pinned with
  ``fixed={"weight_precision": ..., "noise_precision": ...}``.

The hyperparameters are not a kernel family, so the model carries its own
:class:`~bayes_rbfn.models.families.KernelFamily` (:data:`FAMILY`,
``params = ("weight_precision", "noise_precision")``), which :func:`bayes_rbfn.fit` uses instead of
``kernel=``.

References
----------
[1] Bishop, C. M. (2006). *Pattern Recognition and Machine Learning*. Springer. §3.1 (eq. (3.4)), §3.3
    (eqs. (3.52)–(3.59)), §3.5 (eq. (3.86)).
[2] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from bayes_rbfn.gp import block_loo, conditional, linalg, sparse, woodbury_sums
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.models.common import ModelMarginal, observe, sample_or_pin
from bayes_rbfn.models.families import DataScales, KernelFamily
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = ["FAMILY", "SPEC", "WIDTH_FACTOR", "basis_kernel", "basis_width", "design_matrix"]

#: Width of every Gaussian basis function in units of the centre spacing (see the module docstring).
WIDTH_FACTOR = 1.0

_PARAMS = ("weight_precision", "noise_precision")


# --------------------------------------------------------------------------------------------------
# Basis


def basis_width(Z: jax.Array) -> jax.Array:
    """Per-dimension width ``s_d = WIDTH_FACTOR · range_d(Z) / (M^{1/D} − 1)``, shape (D,).

    A dimension in which all centres coincide (or M = 1) falls back to its full range (or 1), so the
    width is always positive. Traceable.
    """
    M, D = Z.shape
    per_axis = max(M ** (1.0 / D) - 1.0, 1.0)
    extent = jnp.max(Z, axis=0) - jnp.min(Z, axis=0)
    spacing = jnp.where(extent > 0, extent / per_axis, 1.0)
    return WIDTH_FACTOR * spacing


def basis_kernel(Z: jax.Array) -> SquaredExponential:
    """The kernel whose Gram matrix k(X, Z) is Φ: a unit-variance SE of lengthscales :func:`basis_width`.

    φ_j(x) = exp(−½ Σ_d (x_d − z_jd)² / s_d²) is exactly k(x, z_j) for this kernel, so the streamed pass of
    :mod:`bayes_rbfn.gp.woodbury_sums` evaluates Φ chunk by chunk as it does K_fu.
    """
    return SquaredExponential(lengthscale=basis_width(Z), variance=1.0)


def design_matrix(X: jax.Array, Z: jax.Array) -> jax.Array:
    """Φ (N, M): Gaussian basis functions centred at Z with :func:`basis_width`, Bishop (3.4), no bias.

    Evaluated as the Gram matrix k(X, Z) of :func:`basis_kernel` (per-dimension widths as ARD lengthscales).
    """
    return basis_kernel(Z)(X, Z)


# --------------------------------------------------------------------------------------------------
# Hyperparameters: the model's own "family" (fit() uses it instead of a kernel family)


def _priors(s: DataScales) -> dict[str, dist.Distribution]:
    kappa = (WIDTH_FACTOR * np.sqrt(np.pi)) ** s.input_dim
    return {
        "weight_precision": dist.LogNormal(float(np.log(kappa) - 2.0 * np.log(s.y_sd)), 1.0),
        "noise_precision": dist.LogNormal(float(-2.0 * np.log(0.2 * s.y_sd)), 2.0),
    }


def _no_kernel(params):
    raise ValueError("the blr model has Gaussian basis functions centred at Z, not a kernel")


@dataclass(frozen=True)
class _BLRFamily(KernelFamily):
    """α and β with their data-scaled priors; unlike a kernel family, no separate ``noise`` prior."""

    def default_priors(self, scales: DataScales) -> dict[str, dist.Distribution]:
        return self.priors(scales)


#: The hyperparameters of the blr model (used by :func:`bayes_rbfn.fit` in place of ``kernel=``).
FAMILY = _BLRFamily(
    name="blr",
    params=_PARAMS,
    build=_no_kernel,
    priors=_priors,
    description="Bishop BLR: Gaussian basis functions at Z, weight precision α and noise precision β",
)


def _hyperparameters(config: ModelConfig) -> dict[str, jax.Array]:
    return {name: sample_or_pin(name, config.priors, config.fixed) for name in _PARAMS}


# --------------------------------------------------------------------------------------------------
# Model, log density, predictive, LOO


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: α, β ~ priors; noise = 1/√β (deterministic); y ~ the evidence, Bishop (3.86)."""
    if config.hyperprior:
        raise ValueError("hyperprior: the blr model has no lengthscale to put a hyperprior on")
    values = _hyperparameters(config)
    numpyro.deterministic("noise", 1.0 / jnp.sqrt(values["noise_precision"]))
    observe(ModelMarginal(log_density, simulate, values, data, config, data["X"].shape[:1], replicate), data)


@linalg.full_precision
def simulate(key: jax.Array, sample_shape: tuple, params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """Draws of y = c + Φ w + β^-½ ε with w ~ N(0, α⁻¹I), Bishop (3.52), (3.10): O(NM) each."""
    Phi = design_matrix(data["X"], data["Z"])
    k_w, k_eps = jax.random.split(key)
    w = jax.random.normal(k_w, (*sample_shape, Phi.shape[1]), Phi.dtype) / jnp.sqrt(
        params["weight_precision"]
    )
    eps = jax.random.normal(k_eps, (*sample_shape, Phi.shape[0]), Phi.dtype)
    return data["y_offset"] + w @ Phi.T + eps / jnp.sqrt(params["noise_precision"])


def _woodbury(params: dict, data: dict):
    """The evidence's covariance ΦΦᵀ/α + I/β as the Woodbury factor of K_fu K_uu⁻¹ K_uf + I/β.

    With K_fu = Φ (:func:`basis_kernel`) and L_uu = √α I, for the centred targets t.

    Returns (factor, kernel, t).
    """
    X, Z = data["X"], data["Z"]
    kernel = basis_kernel(Z)
    t = data["y"] - data["y_offset"]
    Luu = jnp.sqrt(params["weight_precision"]) * jnp.eye(Z.shape[0], dtype=X.dtype)
    return woodbury_sums.woodbury_factor(kernel, Z, X, t, 1.0 / params["noise_precision"], Luu), kernel, t


def replicate(
    key: jax.Array, sample_shape: tuple, params: dict, data: dict, config: ModelConfig
) -> jax.Array:
    """Posterior predictive replicates y_rep = c + Φw + β^-½ ε with w | t ~ N(m_N, S_N).

    Bishop (3.53)–(3.54), drawn through the weight space of :func:`bayes_rbfn.gp.sparse.replicates`
    (K_fu = Φ, K_uu = αI).
    """
    factor, kernel, t = _woodbury(params, data)
    noise = 1.0 / jnp.sqrt(params["noise_precision"])
    draws = sparse.replicates("sor", factor, kernel, data["X"], t, data["Z"], noise, key, sample_shape)
    return data["y_offset"] + draws


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """The evidence ``ln N(y − c | 0, ΦΦᵀ/α + I/β)``, Bishop (3.86), O(NM² + M³); -inf on failure.

    The log density of the factor of :func:`_woodbury`.
    """
    return linalg.finite_or_neg_inf(_woodbury(params, data)[0].log_marginal_likelihood())


def predict(params: dict, data: dict, config: ModelConfig, X_test):
    """Per-draw moments of the latent y(x, w) at X_test, Bishop (3.58)–(3.59) without 1/β: ((S,), (S,)).

    SoR's predictive of the factor of :func:`_woodbury`: with K_*u = φ(x*)ᵀ and K_uu = αI, its weight
    covariance (K_uu + K_uf K_fu β)⁻¹ is Bishop's S_N (3.54) and its mean Bishop's m_Nᵀφ(x*) (3.53).
    """
    factor, kernel, _ = _woodbury(params, data)
    moments = conditional.sor_predict(factor, kernel, data["Z"], X_test, full_cov=False)
    return moments.mean + data["y_offset"], moments.var


def log_likelihood(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """LOO conditionals ``ln p(t_i | t_−i, α, β)`` of t ~ N(0, ΦΦᵀ/α + I/β), shape (N,), in O(NM²).

    ``ΦΦᵀ/α = K_fu K_uu⁻¹ K_uf`` with ``K_fu = Φ`` (:func:`basis_kernel`), ``L_uu = √α I``, so the
    covariance is factorised by :func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor` with ``d = 1/β`` and its
    conditionals are :func:`bayes_rbfn.gp.block_loo.sor_loo` (see the module docstring).
    """
    factor, kernel, t = _woodbury(params, data)
    d = 1.0 / params["noise_precision"]
    return block_loo.sor_loo(
        factor, kernel, data["Z"], data["X"], t, d, exact=config.loo_exact, statistic=config.loo_statistic
    )


SPEC = ModelSpec(
    name="blr",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    description="Bishop BLR: Gaussian basis functions at Z, α and β sampled, weights marginalised (evidence)",
    family=FAMILY,
    rank=20,
)
