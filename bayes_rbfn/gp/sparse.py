"""Sparse approximations beyond SoR: DTC, FITC and the VFE bound, and a diagnostic of SoR's variance collapse.

SoR (= the Bayesian RBFN, :mod:`bayes_rbfn.gp.conditional`) replaces the GP prior covariance by the Nyström
covariance Q everywhere, so its predictive variance ``K_*u Σ K_u*`` vanishes far from the inducing inputs Z
(docs/mathematics.md#the-sor-family-and-its-variance-collapse). Quiñonero-Candela & Rasmussen [1] and Titsias
[2] give three repairs, all of the form
"condition on C = Q_ff + diag(d)", so all go through the one Woodbury path
:func:`bayes_rbfn.gp.linalg.woodbury`:

* DTC ([1] §5): prior y ~ N(0, Q_ff + σ²I) (SoR's); predictive mean as SoR, covariance
  K_** − Q_** + K_*u Σ K_u*;
* FITC ([1] §6): prior y ~ N(0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I; predictive mean
  K_*u Σ K_uf Λ⁻¹ y, covariance K_** − Q_** + K_*u Σ K_u*;
* VFE ([2]): objective log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), a lower bound on the exact
  log marginal likelihood; predictive as DTC (Titsias's optimal q(u));

with Σ = (K_uu + K_uf D⁻¹ K_fu)⁻¹ for the model's diagonal D (σ²I, or Λ for FITC). The Woodbury object
holds Σ in factored form, Σ = Rᵀ R with R = L_B⁻¹ L_uu⁻¹
(:meth:`~bayes_rbfn.gp.linalg.Woodbury.weight_cov_factor`), so ``K_*u Σ K_u* = WᵀW`` with ``W = R K_u*``
and Q_** = AᵀA with ``A = L_uu⁻¹ K_u*``. No N×N matrix is formed; the cost is O(NM² + SM²) (O(S²M) more
for a full covariance).

As predictives, DTC and VFE share SoR's weight posterior and differ from SoR only in restoring the
prior variance K_** − Q_** that the Nyström prior drops at test points, which is exactly what SoR is
missing when Z = X (docs/mathematics.md#inducing-inputs-at-the-data). FITC changes the prior of the training
data too, adding
the dropped variance as heteroscedastic noise. With Z = X (and no jitter) all three are the exact GP.

Every data pass (the factor, the Nyström residual diag(K − Q), the LOO conditionals, the predictive
moments) is one of the streamed passes of :mod:`bayes_rbfn.gp.woodbury_sums`, :mod:`bayes_rbfn.gp.moments`
and :mod:`bayes_rbfn.gp.block_loo`. Two layers, as in
:mod:`bayes_rbfn.gp.conditional`:

* traceable building blocks, each parameterised by the approximation (``"sor"``, ``"dtc"``, ``"fitc"``,
  ``"vfe"``): :func:`training_factor` and :func:`log_marginal`, with :func:`prior_variance_lost`; the
  predictive is :func:`bayes_rbfn.gp.conditional.sor_predict` (``exact_test_prior=True`` for DTC, FITC and
  VFE). They take validated (N, D) arrays, are pure ``jnp`` and never raise; the model layer
  (:class:`bayes_rbfn.models.distributions.SparseGP`) calls them inside NUTS and guards log densities
  with :func:`bayes_rbfn.gp.linalg.finite_or_neg_inf`;
* public, validated functions (:func:`dtc`, :func:`fitc`, :func:`vfe`, :func:`log_marginal_likelihood`,
  :func:`loo_log_density`, :func:`variance_lost`, :func:`collapse_warning`)
  accept NumPy or JAX arrays and raise ``ValueError`` naming the argument on bad input, or
  :class:`bayes_rbfn.gp.linalg.FactorisationError` on a failed factorisation. They take the shared
  arguments in :mod:`bayes_rbfn.gp.conditional`'s order, ``(kernel, X, y, Z, noise, X_test)``, with the
  options (``method``, ``full_cov``, ``jitter``, ``threshold``) keyword-only. The variance collapse has one
  formula, :func:`prior_variance_lost`; :func:`variance_lost` validates its input, :func:`warn_if_collapsed`
  is the one warning on it and :func:`collapse_warning` the two together.

Jitter: every K_uu is factorised by :func:`bayes_rbfn.gp.linalg.cholesky` with its policy (``jitter=None``);
Q is then the Nyström covariance of the jittered K_uu, consistently across prior, bound and predictive,
which keeps K_ff − Q_ff ≥ 0 up to rounding. The per-point residual diag(K_ff − Q_ff)
(:func:`bayes_rbfn.gp.moments.nystrom_residual`) is clamped at 0, so a rounding-level negative value
cannot shrink FITC's noise below σ², and the VFE trace is clamped at 0 likewise.

References
----------
[1] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959. Section 5 (DTC), eqs. (20)–(21); Section 6 (FITC), eqs. (24)–(25).
[2] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
    Eq. (9) (the collapsed bound); Section 3 (the optimal q(u) and its predictive).
[3] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import block_loo, linalg, moments, woodbury_sums
from bayes_rbfn.gp.conditional import (
    Gaussian,
    check_jitter,
    check_kernel,
    check_regression_inputs,
    raise_if_not_finite,
    sor_predict,
)
from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.gp.validation import check_X, check_Z

__all__ = [
    "APPROXIMATIONS",
    "COLLAPSE_THRESHOLD",
    "METHODS",
    "VarianceCollapseWarning",
    "collapse_warning",
    "dtc",
    "fitc",
    "log_marginal",
    "log_marginal_likelihood",
    "loo_log_density",
    "prior_variance_lost",
    "replicates",
    "training_factor",
    "variance_lost",
    "vfe",
    "warn_if_collapsed",
]

#: Every approximation of the SoR family the traceable blocks take: SoR itself and its three repairs.
APPROXIMATIONS: tuple[str, ...] = ("sor", "dtc", "fitc", "vfe")

#: The sparse approximations this module's public predictives implement, by the name they accept (the
#: marginal likelihood and LOO conditionals take ``"sor"`` too, :data:`APPROXIMATIONS`).
METHODS: tuple[str, ...] = ("dtc", "fitc", "vfe")


#: Share of the prior variance lost (1 − Q_**/K_**) above which a test point counts as collapsed.
COLLAPSE_THRESHOLD = 0.5


class VarianceCollapseWarning(UserWarning):
    """SoR's predictive variance collapses at some test points (they are far from the inducing inputs)."""


# --------------------------------------------------------------------------------------------------
# Traceable building blocks


def training_factor(
    approx: str,
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
    *,
    fast: bool = False,
    chunk_size: int | None = None,
    mesh: Any = None,
    precision: str = "float64",
) -> tuple[linalg.Woodbury, jax.Array]:
    """The Woodbury factorisation of the approximation's training prior C = Q_ff + diag(d) for y.

    * ``"sor"``, ``"dtc"``, ``"vfe"``: d = σ², SoR's prior ([1] §5; the Gaussian part of the VFE bound),
      Σ = (K_uu + K_uf K_fu/σ²)⁻¹;
    * ``"fitc"``: d = Λ = σ² + diag(K_ff − Q_ff) ([1] §6): the fully independent training conditional
      puts the variance the Nyström prior drops back as heteroscedastic noise, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹.

    With one σ_i per point, σ² is the (N,) array of their squares throughout (D = diag(σ²)).

    Args:
        approx: one of :data:`APPROXIMATIONS`.
        kernel: covariance function.
        X: (N, D) inputs.
        y: (N,) targets (centred).
        Z: (M, D) inducing inputs.
        noise: σ, a scalar or (N,).
        jitter: relative jitter on K_uu (``None``: the policy).
        fast: take the products before whitening, a setting of the streamed pass
            (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`).
        chunk_size: data points per chunk of the streamed pass (``woodbury_stats``).
        mesh: the device mesh of the streamed pass (``woodbury_stats``).
        precision: ``"float64"`` or ``"mixed"``, the streamed pass's precision (``woodbury_stats``). FITC's
            diagonal (its own pass) stays float64.

    Returns:
        (factor, d): the :class:`~bayes_rbfn.gp.linalg.Woodbury` and the diagonal d (scalar σ² or (N,) Λ).
    """
    settings = {"fast": fast, "chunk_size": chunk_size, "mesh": mesh, "precision": precision}
    if approx != "fitc":
        return woodbury_sums.sor_factor(kernel, X, y, Z, noise, jitter, **settings), noise**2
    Luu = linalg.cholesky(kernel.inducing_gram(Z), jitter)
    d = noise**2 + moments.nystrom_residual(kernel, Z, Luu, X, chunk_size=chunk_size, mesh=mesh)
    return woodbury_sums.woodbury_factor(kernel, Z, X, y, d, Luu, **settings), d


def log_marginal(
    approx: str, factor: linalg.Woodbury, kernel: Kernel, X: jax.Array, noise: jax.Array
) -> jax.Array:
    """log N(y | 0, C) for a factor of :func:`training_factor`; for ``"vfe"`` Titsias's bound ([2] eq. (9)).

    SoR and DTC: log N(y | 0, Q_ff + σ²I); FITC: log N(y | 0, Q_ff + Λ); VFE:
    log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), a lower bound on the exact GP's log marginal
    likelihood for any Z (the trace penalises inducing inputs that explain the prior poorly and vanishes
    when Z = X); an objective for (θ, Z), not a normalised density over y. With one σ_i per point
    (D = diag(σ²)) the bound is log N(y | 0, Q_ff + D) − ½ tr(D⁻¹(K_ff − Q_ff)) = … − ½ Σ_i (K_ii − Q_ii)/σ_i²
    ([2]'s derivation with the Gaussian likelihood N(y | f, D)).

    The trace needs no second pass over the data: tr(D⁻¹Q_ff) = tr(AAᵀ) = ‖L_B‖²_F − M (A = L_uu⁻¹ K_uf
    D^-½), as B = I + AAᵀ = L_B L_Bᵀ; for a scalar σ this is tr(Q_ff)/σ². The difference from tr(D⁻¹K_ff)
    is clamped at 0 like the per-point residual.

    Args:
        approx: one of :data:`APPROXIMATIONS`.
        factor: from :func:`training_factor` for the same approximation.
        kernel: covariance function.
        X: (N, D) inputs.
        noise: σ, a scalar or (N,) per point.
    """
    value = factor.log_marginal_likelihood()
    if approx != "vfe":
        return value
    if jnp.ndim(noise) == 0:
        trace_Q = noise**2 * (jnp.sum(factor.LB**2) - factor.LB.shape[0])
        trace = jnp.maximum(jnp.sum(kernel.diag(X)) - trace_Q, 0.0)
        return value - 0.5 * trace / noise**2
    weighted_trace_Q = jnp.sum(factor.LB**2) - factor.LB.shape[0]
    weighted_trace = jnp.maximum(jnp.sum(kernel.diag(X) / noise**2) - weighted_trace_Q, 0.0)
    return value - 0.5 * weighted_trace


@linalg.full_precision
def replicates(
    approx: str,
    factor: linalg.Woodbury,
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    key: jax.Array,
    sample_shape: tuple[int, ...] = (),
    *,
    residual: jax.Array | None = None,
    chunk_size: int | None = None,
    mesh: Any = None,
) -> jax.Array:
    """Draws of y_rep ~ p(y_rep | y) at the training inputs, the conditional each approximation implies.

    In weight space, O(NM) per draw after the factor: the RBFN weights α | y ~ N(m, Σ), Σ = RᵀR, are drawn
    as α = m + Rᵀz (:meth:`~bayes_rbfn.gp.linalg.Woodbury.weight_mean`, ``weight_cov_factor``), so
    that K_fu α is the Nyström part of f at X; then each approximation's training conditional q(f | u)
    ([1] §§4–6; [2] §3), with λ = diag(K_ff − Q_ff)
    (:func:`bayes_rbfn.gp.moments.nystrom_residual`):

    * ``"sor"``, ``"dtc"``: deterministic, f = K_fu α ([1] §§4, 5);
    * ``"fitc"``: independent f_i | u ~ N(k_iᵀα, λ_i), and each f_i also sees its own y_i, so
      f_i | α, y_i ~ N(k_iᵀα + g_i (y_i − k_iᵀα), g_i σ_i²) with g_i = λ_i / (λ_i + σ_i²) ([1] §6);
      α | y is FITC's, from the factor of Q_ff + Λ;
    * ``"vfe"``: Titsias's q(f) = ∫ p(f | u) q(u) du with the exact p(f | u): f_i = k_iᵀα + √λ_i ε_i,
      independently in i, so every point's marginal is exact and the correlations K_ff − Q_ff puts
      between points are dropped (no N×N matrix).

    y_rep = f + σε'. The law of f | y is then N(Q_ff C⁻¹ y, Q_ff − Q_ff C⁻¹ Q_ff) for SoR and DTC
    (C = Q_ff + σ²I), and the exact GP's formulas with K replaced by Q_ff + diag(λ) for FITC. With one σ_i
    per point every σ² above is σ_i², point by point (C = Q_ff + diag(σ²)).

    Args:
        approx: one of :data:`APPROXIMATIONS`.
        factor: :func:`training_factor`'s for the same ``approx`` and y.
        kernel: covariance function.
        X: (N, D) inputs.
        y: (N,) centred targets.
        Z: (M, D) inducing inputs.
        noise: σ, a scalar or (N,).
        key: PRNG key.
        sample_shape: leading shape of the draws.
        residual: λ (N,) for FITC and VFE when the caller has it (FITC's :func:`training_factor` returns
            d = σ² + λ); else computed here (:func:`bayes_rbfn.gp.moments.nystrom_residual`).
        chunk_size: data points per chunk of the streamed pass (λ's pass, for FITC and VFE).
        mesh: the device mesh of the streamed pass (λ's pass, for FITC and VFE).

    Returns:
        (*sample_shape, N) draws of y_rep − m.
    """
    k_weights, k_latent, k_noise = jax.random.split(key, 3)
    M, N = Z.shape[0], X.shape[0]
    dtype = factor.Luu.dtype
    z = jax.random.normal(k_weights, (M, math.prod(sample_shape)), dtype=dtype)
    # Rᵀz = L_uu⁻ᵀ L_B⁻ᵀ z: two triangular solves, R itself is not formed.
    weights = factor.weight_mean()[:, None] + linalg.solve_upper(factor.Luu, linalg.solve_upper(factor.LB, z))
    f = (kernel.inducing_cross(Z, X).T @ weights).T.reshape(*sample_shape, N)
    if approx in ("fitc", "vfe"):
        lam = residual
        if lam is None:
            lam = moments.nystrom_residual(kernel, Z, factor.Luu, X, chunk_size=chunk_size, mesh=mesh)
        eps = jax.random.normal(k_latent, (*sample_shape, N), dtype=dtype)
        if approx == "fitc":
            gain = lam / (lam + noise**2)
            f = f + gain * (y - f) + jnp.sqrt(gain * noise**2) * eps
        else:
            f = f + jnp.sqrt(lam) * eps
    return f + noise * jax.random.normal(k_noise, (*sample_shape, N), dtype=dtype)


def prior_variance_lost(
    kernel: Kernel, Z: jax.Array, X_test: jax.Array, jitter: float | None = None
) -> jax.Array:
    """Share of the prior variance the Nyström (SoR) prior drops at each test point: 1 − Q_**/K_**.

    diag(K_** − Q_**) (:func:`bayes_rbfn.gp.moments.nystrom_residual`) over diag(K_**), in [0, 1], shape
    (S,). 0 at the inducing inputs (up to jitter); → 1 far from them, where SoR's predictive variance
    collapses to 0 (to σ² for y*) and DTC/FITC/VFE keep the prior K_**
    (docs/mathematics.md#the-sor-family-and-its-variance-collapse).
    """
    Luu = linalg.cholesky(kernel.inducing_gram(Z), jitter)
    return jnp.minimum(moments.nystrom_residual(kernel, Z, Luu, X_test) / kernel.diag(X_test), 1.0)


# --------------------------------------------------------------------------------------------------
# Public, validated entry points


def _check_method(method: Any, allowed: tuple[str, ...] = METHODS) -> str:
    if not isinstance(method, str) or method.lower() not in allowed:
        raise ValueError(f"method: expected one of {', '.join(map(repr, allowed))}, got {method!r}")
    return method.lower()


def _predictive(method: str, doc: str) -> Callable[..., Gaussian]:
    """The public, validated predictive of ``method``.

    Checks, :func:`training_factor`, then :func:`~bayes_rbfn.gp.conditional.sor_predict` with the exact K_**
    at the test points.
    """

    def predictive(
        kernel: Kernel,
        X: Any,
        y: Any,
        Z: Any,
        noise: Any,
        X_test: Any,
        *,
        full_cov: bool = True,
        jitter: float | None = None,
    ) -> Gaussian:
        X, y, noise, Z, X_test, jitter = check_regression_inputs(
            X, y, noise, Z, X_test, kernel=kernel, jitter=jitter
        )
        factor = training_factor(method, kernel, X, y, Z, noise, jitter)[0]
        result = sor_predict(factor, kernel, Z, X_test, full_cov, exact_test_prior=True)
        raise_if_not_finite(result, method)
        return result

    predictive.__name__ = predictive.__qualname__ = method
    predictive.__doc__ = doc
    return predictive


dtc = _predictive(
    "dtc",
    """DTC predictive of the latent f* (noise excluded), eqs. (20)–(21) of [1].

    ``N(σ⁻² K_*u Σ K_uf y, K_** − Q_** + K_*u Σ K_u*)``, Σ = (K_uu + K_uf K_fu/σ²)⁻¹: SoR's mean, with
    the prior variance SoR drops away from Z restored. O(NM² + SM²), no N×N matrix.

    Args:
        kernel: covariance function. X: (N, D) or (N,). y: (N,). Z: (M, D) distinct inducing inputs.
        noise: σ > 0. X_test: (S, D) or (S,). full_cov: also return the (S, S) covariance.
        jitter: relative jitter on K_uu (``None``: the policy of :mod:`bayes_rbfn.gp.linalg`; ``0.0``: none).

    Returns:
        :class:`~bayes_rbfn.gp.conditional.Gaussian` with ``mean`` (S,), ``var`` (S,), ``cov`` (S, S) or None.
    """,
)

fitc = _predictive(
    "fitc",
    """FITC predictive of the latent f* (noise excluded), eqs. (24)–(25) of [1].

    ``N(K_*u Σ K_uf Λ⁻¹ y, K_** − Q_** + K_*u Σ K_u*)``, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹,
    Λ = diag(K_ff − Q_ff) + σ²I. Arguments and return value as :func:`dtc`.
    """,
)

vfe = _predictive(
    "vfe",
    """VFE predictive of the latent f* under Titsias's optimal q(u) ([2] §3); equal to :func:`dtc`'s.

    VFE and DTC differ in the objective for the hyperparameters and Z (:func:`log_marginal_likelihood`
    with ``method="vfe"``), not in the predictive at given ones. Arguments and return value as :func:`dtc`.
    """,
)


def log_marginal_likelihood(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    *,
    method: str = "dtc",
    jitter: float | None = None,
) -> jax.Array:
    """The log marginal likelihood (or, for VFE, its lower bound) of a sparse approximation, in O(NM²).

    The exact GP's is :func:`bayes_rbfn.gp.conditional.log_marginal_likelihood`, whose arguments are these
    without Z; ``method`` is :class:`~bayes_rbfn.models.distributions.SparseGP`'s ``approx``.

    * ``"sor"`` and ``"dtc"``: log N(y | 0, Q_ff + σ²I), the marginal SoR and DTC share ([1] §§4–5);
    * ``"fitc"``: log N(y | 0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I ([1] §6);
    * ``"vfe"``: log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), eq. (9) of [2]; a lower bound on the
      exact GP's log marginal likelihood, not itself a density over y.

    Args:
        kernel: covariance function.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        Z: (M, D) distinct inducing inputs.
        noise: σ > 0.
        method: ``"sor"``, ``"dtc"``, ``"fitc"`` or ``"vfe"``.
        jitter: relative jitter on K_uu.

    Returns:
        A scalar.
    """
    method = _check_method(method, APPROXIMATIONS)
    X, y, noise, Z, _, jitter = check_regression_inputs(X, y, noise, Z, kernel=kernel, jitter=jitter)
    value = log_marginal(method, training_factor(method, kernel, X, y, Z, noise, jitter)[0], kernel, X, noise)
    raise_if_not_finite(value, "log_marginal_likelihood")
    return value


def loo_log_density(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    *,
    method: str = "dtc",
    jitter: float | None = None,
) -> jax.Array:
    """Leave-one-out conditionals log p(y_i | y_−i), shape (N,), under a sparse model's marginal ([3]).

    ``"sor"``, ``"dtc"`` and ``"vfe"`` use y ~ N(0, Q_ff + σ²I) (SoR's marginal; the VFE bound is not a
    density over y: as a function of y it is log N(y | 0, Q_ff + σ²I) minus a term that does not depend on
    y, so normalising it over y gives DTC/SoR's marginal); ``"fitc"`` uses y ~ N(0, Q_ff + Λ). O(NM²)
    through the Woodbury identity (:func:`bayes_rbfn.gp.block_loo.sor_loo`). These are what the models
    store as ``log_likelihood`` for PSIS-LOO (docs/output.md). Arguments as :func:`log_marginal_likelihood`;
    the exact GP's are :func:`bayes_rbfn.gp.conditional.loo_log_density`.
    """
    method = _check_method(method, APPROXIMATIONS)
    X, y, noise, Z, _, jitter = check_regression_inputs(X, y, noise, Z, kernel=kernel, jitter=jitter)
    factor, d = training_factor(method, kernel, X, y, Z, noise, jitter)
    value = block_loo.sor_loo(factor, kernel, Z, X, y, d)
    raise_if_not_finite(value, "loo_log_density")
    return value


def _prepare_diagnostic(kernel: Any, Z: Any, X_test: Any, jitter: Any) -> tuple[jax.Array, jax.Array, Any]:
    jitter = check_jitter(jitter)
    Z = check_X(Z, "Z")
    Z = check_Z(Z, Z)  # distinct rows; there is no X to compare M with here
    X_test = check_X(X_test, "X_test", dim=Z.shape[1])
    check_kernel(kernel, Z.shape[1])
    return Z, X_test, jitter


def variance_lost(kernel: Kernel, Z: Any, X_test: Any, *, jitter: float | None = None) -> jax.Array:
    """Fraction of the prior variance SoR loses at each test point, 1 − Q_**/K_**, in [0, 1], shape (S,).

    Near 0 at and between well-placed inducing inputs; near 1 far from them, where SoR's predictive
    variance collapses (docs/mathematics.md#the-sor-family-and-its-variance-collapse) and DTC, FITC or VFE
    should be preferred (the fraction SoR keeps, Q_**/K_**, is one minus this). It depends only on the
    kernel, Z and X_test, not on the data. The validated form of :func:`prior_variance_lost`.

    Args:
        kernel: covariance function.
        Z: (M, D) or (M,) distinct inducing inputs.
        X_test: (S, D) or (S,) test inputs.
        jitter: relative jitter on K_uu (``None``: the policy of :mod:`bayes_rbfn.gp.linalg`).

    Returns:
        (S,) the fraction lost per test point.
    """
    Z, X_test, jitter = _prepare_diagnostic(kernel, Z, X_test, jitter)
    value = prior_variance_lost(kernel, Z, X_test, jitter)
    raise_if_not_finite(value, "variance_lost")
    return value


def warn_if_collapsed(
    lost: Any, *, threshold: float = COLLAPSE_THRESHOLD, model: str = "SoR", points: str = "test point"
) -> int:
    """Issue a :class:`VarianceCollapseWarning` when ``lost`` passes ``threshold`` at some points.

    The one check behind :func:`collapse_warning` and :func:`bayes_rbfn.infer.collapse.collapse_check`:
    the warning names ``model``, says at how many of the S ``points`` 1 − Q_**/K_** > ``threshold`` and
    suggests DTC, FITC or VFE (or more inducing inputs there); silent otherwise.

    Args:
        lost: (S,) the fraction of the prior variance lost per point (:func:`variance_lost`).
        threshold: the fraction lost that warns, in [0, 1).
        model: the name the warning starts with.
        points: what the S points are, for the message.

    Returns:
        The number of points past the threshold.
    """
    try:
        threshold_value = float(threshold)
    except (TypeError, ValueError) as err:
        raise ValueError(f"threshold: expected a number in [0, 1), got {threshold!r}") from err
    if not 0.0 <= threshold_value < 1.0:
        raise ValueError(f"threshold: expected a number in [0, 1), got {threshold!r}")
    lost = np.asarray(lost)
    n_bad = int(np.sum(lost > threshold_value))
    if n_bad:
        n = int(lost.size)
        warnings.warn(
            f"{model}: the predictive variance has collapsed at {n_bad} of {n} {points}(s) "
            f"({n_bad / n:.0%}): there the Nyström prior keeps less than {1 - threshold_value:.0%} of the "
            "prior variance (Q_**/K_**), so the latent variance is near 0 and y*'s near σ² — overconfident "
            "far from the inducing inputs Z. Use DTC, FITC or VFE (the models dtc, fitc, vfe or asor; "
            "bayes_rbfn.gp.sparse.dtc / fitc / vfe), which keep the prior variance there, or add inducing "
            "inputs near those points.",
            VarianceCollapseWarning,
            stacklevel=3,
        )
    return n_bad


def collapse_warning(
    kernel: Kernel,
    Z: Any,
    X_test: Any,
    *,
    threshold: float = COLLAPSE_THRESHOLD,
    jitter: float | None = None,
) -> jax.Array:
    """:func:`variance_lost`, and a :class:`VarianceCollapseWarning` where it passes ``threshold``.

    :func:`warn_if_collapsed` on :func:`variance_lost`: SoR's check at given hyperparameters (a fit's,
    averaged over its posterior draws, is :func:`bayes_rbfn.infer.collapse.variance_collapse`).

    Args:
        kernel: covariance function, as :func:`variance_lost`.
        Z: (M, D) or (M,) distinct inducing inputs, as :func:`variance_lost`.
        X_test: (S, D) or (S,) test inputs, as :func:`variance_lost`.
        threshold: the fraction of the prior variance lost that warns, in [0, 1).
        jitter: relative jitter on K_uu, as :func:`variance_lost`.

    Returns:
        The fraction lost per test point, :func:`variance_lost`, shape (S,).
    """
    lost = variance_lost(kernel, Z, X_test, jitter=jitter)
    warn_if_collapsed(lost, threshold=threshold)
    return lost
