"""Sparse approximations beyond SoR: DTC, FITC and the VFE bound, and a diagnostic of SoR's variance collapse.

SoR (= the Bayesian RBFN, :mod:`bayes_rbfn.gp.conditional`) replaces the GP prior covariance by the Nyström
covariance Q everywhere, so its predictive variance ``K_*u Σ K_u*`` vanishes far from the inducing inputs Z
(DESIGN §3.4). Quiñonero-Candela & Rasmussen [1] and Titsias [2] give three repairs, all of the form
"condition on C = Q_ff + diag(d)", so all go through the one Woodbury path
:func:`bayes_rbfn.gp.linalg.woodbury`:

* DTC ([1] §5): prior y ~ N(0, Q_ff + σ²I) (SoR's); predictive mean as SoR, covariance
  K_** − Q_** + K_*u Σ K_u*;
* FITC ([1] §6): prior y ~ N(0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I; predictive mean
  K_*u Σ K_uf Λ⁻¹ y, covariance K_** − Q_** + K_*u Σ K_u*;
* VFE ([2]): objective log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), a lower bound on the exact
  log marginal likelihood; predictive as DTC (Titsias's optimal q(u));

with Σ = (K_uu + K_uf D⁻¹ K_fu)⁻¹ for the model's diagonal D (σ²I, or Λ for FITC). The Woodbury object
holds Σ in factored form, Σ = Rᵀ R with R = L_B⁻¹ L_uu⁻¹, so ``K_*u Σ K_u* = WᵀW`` with
``W = L_B⁻¹ L_uu⁻¹ K_u*`` (:meth:`~bayes_rbfn.gp.linalg.Woodbury.project`) and Q_** = AᵀA with
``A = L_uu⁻¹ K_u*``. No N×N matrix is formed; the cost is O(NM² + SM²) (O(S²M) more for a full covariance).

As predictives, DTC and VFE share SoR's weight posterior and differ from SoR only in restoring the
prior variance K_** − Q_** that the Nyström prior drops at test points, which is exactly what SoR is
missing when Z = X (DESIGN §3.3). FITC changes the prior of the training data too, adding
the dropped variance as heteroscedastic noise. With Z = X (and no jitter) all three are the exact GP.

Two layers, as in :mod:`bayes_rbfn.gp.conditional`:

* traceable building blocks (``nystrom_residual``, ``*_factor``, ``*_log_marginal``, ``vfe_bound``,
  ``*_predict``, ``*_loo``, ``prior_variance_lost``) take validated (N, D) arrays, are pure ``jnp`` and
  never raise; the model layer calls them inside NUTS and guards log densities with
  :func:`bayes_rbfn.gp.linalg.finite_or_neg_inf`;
* public, validated functions (:func:`dtc`, :func:`fitc`, :func:`vfe`, :func:`log_marginal_likelihood`,
  :func:`loo_log_density`, :func:`variance_lost`, :func:`variance_retained`, :func:`collapse_warning`)
  accept NumPy or JAX arrays and raise ``ValueError`` naming the argument on bad input, or
  :class:`bayes_rbfn.gp.linalg.FactorisationError` on a failed factorisation.

Jitter: every K_uu is factorised by :func:`bayes_rbfn.gp.linalg.cholesky` with its policy (``jitter=None``);
Q is then the Nyström covariance of the jittered K_uu, consistently across prior, bound and predictive,
which keeps K_ff − Q_ff ≥ 0 up to rounding. The per-point residual diag(K_ff − Q_ff) is clamped at 0, so
a rounding-level negative value can neither shrink FITC's noise below σ² nor raise the VFE bound.

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

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import linalg
from bayes_rbfn.gp.conditional import (
    Gaussian,
    check_kernel,
    check_regression_inputs,
    raise_if_not_finite,
    sor_factor,
    woodbury_loo,
)
from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.gp.validation import check_X, check_Z

__all__ = [
    "METHODS",
    "VarianceCollapseWarning",
    "collapse_warning",
    "dtc",
    "dtc_factor",
    "dtc_log_marginal",
    "dtc_loo",
    "dtc_predict",
    "fitc",
    "fitc_factor",
    "fitc_log_marginal",
    "fitc_loo",
    "fitc_predict",
    "log_marginal_likelihood",
    "loo_log_density",
    "nystrom_residual",
    "prior_variance_lost",
    "variance_lost",
    "variance_retained",
    "vfe",
    "vfe_bound",
    "vfe_loo",
    "vfe_predict",
]

#: The sparse approximations this module implements, by the name the public functions accept.
METHODS: tuple[str, ...] = ("dtc", "fitc", "vfe")


class VarianceCollapseWarning(UserWarning):
    """SoR's predictive variance collapses at some test points (they are far from the inducing inputs)."""


# --------------------------------------------------------------------------------------------------
# Traceable building blocks


def nystrom_residual(kernel: Kernel, X: jax.Array, Luu: jax.Array, Kuf: jax.Array) -> jax.Array:
    """diag(K_ff − Q_ff), shape (N,): the prior variance the Nyström covariance drops at each input.

    ‖L_uu⁻¹ K_uf‖² per column is diag(Q_ff). The result is clamped at 0: in exact arithmetic it is the
    conditional variance Var[f(x_i) | u] ≥ 0, and a rounding-level negative value must not reach FITC's
    noise diagonal or the VFE trace.

    Args:
        kernel: covariance function. X: (N, D). Luu: (M, M) Cholesky factor of K_uu (with jitter).
        Kuf: (M, N) cross-covariance k(Z, X).
    """
    A = linalg.solve_lower(Luu, Kuf)
    return jnp.maximum(kernel.diag(X) - jnp.sum(A * A, axis=0), 0.0)


def dtc_factor(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
) -> tuple[linalg.Woodbury, jax.Array]:
    """Woodbury factorisation of DTC's prior covariance Q_ff + σ²I for y, and K_uf (M, N).

    DTC's training prior is SoR's ([1] §5), so this is :func:`bayes_rbfn.gp.conditional.sor_factor`; it is
    also the factor of the Gaussian part of the VFE bound. Σ = (K_uu + K_uf K_fu/σ²)⁻¹.
    """
    return sor_factor(kernel, X, y, Z, noise, jitter)


def fitc_factor(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
) -> tuple[linalg.Woodbury, jax.Array, jax.Array]:
    """Woodbury factorisation of FITC's prior covariance Q_ff + Λ for y ([1] §6).

    Λ = diag(K_ff − Q_ff) + σ²I, i.e. ``d = σ² + max(k(x_i, x_i) − ‖L_uu⁻¹ K_uf‖²_i, 0)``: the fully
    independent training conditional puts the variance the Nyström prior drops back as
    heteroscedastic noise. Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹.

    Returns:
        (factor, Kuf, d): the :class:`~bayes_rbfn.gp.linalg.Woodbury`, K_uf (M, N) and the diagonal d (N,).
    """
    Luu = linalg.cholesky(kernel(Z, Z), jitter)
    Kuf = kernel(Z, X)
    d = noise**2 + nystrom_residual(kernel, X, Luu, Kuf)
    return linalg.woodbury(Luu, Kuf, y, d), Kuf, d


def dtc_log_marginal(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
) -> jax.Array:
    """log N(y | 0, Q_ff + σ²I): DTC's marginal likelihood, identical to SoR's ([1] §5)."""
    return dtc_factor(kernel, X, y, Z, noise, jitter)[0].log_marginal_likelihood()


def fitc_log_marginal(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
) -> jax.Array:
    """log N(y | 0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I: FITC's marginal likelihood ([1] §6)."""
    return fitc_factor(kernel, X, y, Z, noise, jitter)[0].log_marginal_likelihood()


def vfe_bound(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
) -> jax.Array:
    """Titsias's collapsed bound ``log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff) / (2σ²)``, eq. (9) of [2].

    A lower bound on the exact GP's log marginal likelihood log N(y | 0, K_ff + σ²I) for any Z; the
    trace term penalises inducing inputs that explain the prior poorly, and vanishes when Z = X.
    It is an objective for (θ, Z), not a normalised density over y.
    """
    factor, Kuf = dtc_factor(kernel, X, y, Z, noise, jitter)
    trace = jnp.sum(nystrom_residual(kernel, X, factor.Luu, Kuf))
    return factor.log_marginal_likelihood() - 0.5 * trace / noise**2


def dtc_predict(
    factor: linalg.Woodbury, kernel: Kernel, Z: jax.Array, X_test: jax.Array, full_cov: bool = True
) -> Gaussian:
    """Latent f* | y for DTC, eqs. (20)–(21) of [1]:

    ``N(K_*u Σ K_uf D⁻¹ y, K_** − Q_** + K_*u Σ K_u*)``, Σ = (K_uu + K_uf D⁻¹ K_fu)⁻¹,

    i.e. SoR's moments plus the prior variance K_** − Q_** that the Nyström prior drops at X_test.
    The formula holds for any diagonal D: with :func:`dtc_factor` (D = σ²I) it is DTC and VFE's
    predictive, with :func:`fitc_factor` (D = Λ) it is FITC's.

    Args:
        factor: a :class:`~bayes_rbfn.gp.linalg.Woodbury` from :func:`dtc_factor` or :func:`fitc_factor`.
        kernel: covariance function. Z: (M, D). X_test: (S, D). full_cov: also return the (S, S) cov.

    Returns:
        :class:`~bayes_rbfn.gp.conditional.Gaussian` with ``mean`` (S,), ``var`` (S,), ``cov`` (S, S) or None.
    """
    Kus = kernel(Z, X_test)
    A, W = factor.project(Kus)  # Q_** = AᵀA, K_*u Σ K_u* = WᵀW
    mean = Kus.T @ factor.weight_mean()
    if full_cov:
        cov = kernel(X_test, X_test) - A.T @ A + W.T @ W
        return Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)
    return Gaussian(mean=mean, var=kernel.diag(X_test) - jnp.sum(A * A, axis=0) + jnp.sum(W * W, axis=0))


def fitc_predict(
    factor: linalg.Woodbury, kernel: Kernel, Z: jax.Array, X_test: jax.Array, full_cov: bool = True
) -> Gaussian:
    """Latent f* | y for FITC, eqs. (24)–(25) of [1]:

    ``N(K_*u Σ K_uf Λ⁻¹ y, K_** − Q_** + K_*u Σ K_u*)``, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹,

    with ``factor`` from :func:`fitc_factor`. The test conditional is exact (FITC proper, not FIC), so
    the full covariance carries K_** − Q_** off the diagonal too. Same shapes as :func:`dtc_predict`.
    """
    return dtc_predict(factor, kernel, Z, X_test, full_cov)


def vfe_predict(
    factor: linalg.Woodbury, kernel: Kernel, Z: jax.Array, X_test: jax.Array, full_cov: bool = True
) -> Gaussian:
    """Latent f* under Titsias's optimal q(u) = N(σ⁻² K_uu Σ K_uf y, K_uu Σ K_uu) ([2] §3).

    Its predictive ∫ p(f* | u) q(u) du equals DTC's (:func:`dtc_predict`); ``factor`` from
    :func:`dtc_factor`.
    """
    return dtc_predict(factor, kernel, Z, X_test, full_cov)


def dtc_loo(factor: linalg.Woodbury, Kuf: jax.Array, y: jax.Array, noise: jax.Array) -> jax.Array:
    """log p(y_i | y_−i) under y ~ N(0, Q_ff + σ²I), shape (N,), in O(NM²) ([3]; SoR's LOO)."""
    return woodbury_loo(factor, Kuf, y, noise**2)


def fitc_loo(factor: linalg.Woodbury, Kuf: jax.Array, y: jax.Array, d: jax.Array) -> jax.Array:
    """log p(y_i | y_−i) under FITC's y ~ N(0, Q_ff + Λ), shape (N,), in O(NM²) ([3]).

    ``factor, Kuf, d`` as returned by :func:`fitc_factor`.
    """
    return woodbury_loo(factor, Kuf, y, d)


def vfe_loo(factor: linalg.Woodbury, Kuf: jax.Array, y: jax.Array, noise: jax.Array) -> jax.Array:
    """LOO conditionals for a model fitted with the VFE bound: those of y ~ N(0, Q_ff + σ²I).

    The bound of eq. (9) of [2] is not a density over y: it is log N(y | 0, Q_ff + σ²I) minus a trace
    term that does not depend on y. As a function of y it is therefore proportional to that Gaussian,
    and normalising it over y gives DTC/SoR's marginal, whose conditionals are returned here.
    """
    return dtc_loo(factor, Kuf, y, noise)


def prior_variance_lost(
    kernel: Kernel, Z: jax.Array, X_test: jax.Array, jitter: float | None = None
) -> jax.Array:
    """Fraction of the prior variance the Nyström (SoR) prior drops at each test point: 1 − Q_**/K_**.

    In [0, 1], shape (S,). 0 at the inducing inputs (up to jitter); → 1 far from them, where SoR's
    predictive variance collapses to 0 (to σ² for y*) and DTC/FITC/VFE keep the prior K_** (DESIGN §3.4).
    """
    Luu = linalg.cholesky(kernel(Z, Z), jitter)
    A = linalg.solve_lower(Luu, kernel(Z, X_test))
    return jnp.clip(1.0 - jnp.sum(A * A, axis=0) / kernel.diag(X_test), 0.0, 1.0)


# --------------------------------------------------------------------------------------------------
# Public, validated entry points


def _check_method(method: Any) -> str:
    if not isinstance(method, str) or method.lower() not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return method.lower()


def _check_jitter(jitter: Any) -> float | None:
    if jitter is None:
        return None
    try:
        value = float(jitter)
    except (TypeError, ValueError) as err:
        raise ValueError(f"jitter: expected None or a non-negative number, got {jitter!r}") from err
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"jitter: expected None or a finite non-negative number, got {jitter!r}")
    return value


def _predict(
    method: str, kernel: Any, X: Any, y: Any, Z: Any, noise: Any, X_test: Any, full_cov: bool, jitter: Any
) -> Gaussian:
    jitter = _check_jitter(jitter)
    X, y, noise, Z, X_test = check_regression_inputs(X, y, noise, Z, X_test)
    check_kernel(kernel, X.shape[1])
    if method == "fitc":
        result = fitc_predict(fitc_factor(kernel, X, y, Z, noise, jitter)[0], kernel, Z, X_test, full_cov)
    else:
        predict = vfe_predict if method == "vfe" else dtc_predict
        result = predict(dtc_factor(kernel, X, y, Z, noise, jitter)[0], kernel, Z, X_test, full_cov)
    raise_if_not_finite(result, method)
    return result


def dtc(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    X_test: Any,
    full_cov: bool = True,
    jitter: float | None = None,
) -> Gaussian:
    """DTC predictive of the latent f* (noise excluded), eqs. (20)–(21) of [1].

    ``N(σ⁻² K_*u Σ K_uf y, K_** − Q_** + K_*u Σ K_u*)``, Σ = (K_uu + K_uf K_fu/σ²)⁻¹: SoR's mean, with
    the prior variance SoR drops away from Z restored. O(NM² + SM²), no N×N matrix.

    Args:
        kernel: covariance function. X: (N, D) or (N,). y: (N,). Z: (M, D) distinct inducing inputs.
        noise: σ > 0. X_test: (S, D) or (S,). full_cov: also return the (S, S) covariance.
        jitter: relative jitter on K_uu (``None``: the policy of :mod:`bayes_rbfn.gp.linalg`; ``0.0``: none).

    Returns:
        :class:`~bayes_rbfn.gp.conditional.Gaussian` with ``mean`` (S,), ``var`` (S,), ``cov`` (S, S) or None.
    """
    return _predict("dtc", kernel, X, y, Z, noise, X_test, full_cov, jitter)


def fitc(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    X_test: Any,
    full_cov: bool = True,
    jitter: float | None = None,
) -> Gaussian:
    """FITC predictive of the latent f* (noise excluded), eqs. (24)–(25) of [1].

    ``N(K_*u Σ K_uf Λ⁻¹ y, K_** − Q_** + K_*u Σ K_u*)``, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹,
    Λ = diag(K_ff − Q_ff) + σ²I. Arguments and return value as :func:`dtc`.
    """
    return _predict("fitc", kernel, X, y, Z, noise, X_test, full_cov, jitter)


def vfe(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    X_test: Any,
    full_cov: bool = True,
    jitter: float | None = None,
) -> Gaussian:
    """VFE predictive of the latent f* under Titsias's optimal q(u) ([2] §3); equal to :func:`dtc`'s.

    VFE and DTC differ in the objective for the hyperparameters and Z (:func:`log_marginal_likelihood`
    with ``method="vfe"``), not in the predictive at given ones. Arguments and return value as :func:`dtc`.
    """
    return _predict("vfe", kernel, X, y, Z, noise, X_test, full_cov, jitter)


def log_marginal_likelihood(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    method: str = "dtc",
    jitter: float | None = None,
) -> jax.Array:
    """The log marginal likelihood (or, for VFE, its lower bound) of a sparse approximation, in O(NM²).

    * ``"dtc"``: log N(y | 0, Q_ff + σ²I), SoR's ([1] §5);
    * ``"fitc"``: log N(y | 0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I ([1] §6);
    * ``"vfe"``: log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), eq. (9) of [2]; a lower bound on the
      exact GP's log marginal likelihood, not itself a density over y.

    Args:
        kernel: covariance function. X: (N, D) or (N,). y: (N,). Z: (M, D) distinct inducing inputs.
        noise: σ > 0. method: ``"dtc"``, ``"fitc"`` or ``"vfe"``. jitter: relative jitter on K_uu.

    Returns:
        A scalar.
    """
    method = _check_method(method)
    jitter = _check_jitter(jitter)
    X, y, noise, Z, _ = check_regression_inputs(X, y, noise, Z)
    check_kernel(kernel, X.shape[1])
    block = {"dtc": dtc_log_marginal, "fitc": fitc_log_marginal, "vfe": vfe_bound}[method]
    value = block(kernel, X, y, Z, noise, jitter)
    raise_if_not_finite(value, "log_marginal_likelihood")
    return value


def loo_log_density(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    method: str = "dtc",
    jitter: float | None = None,
) -> jax.Array:
    """Leave-one-out conditionals log p(y_i | y_−i), shape (N,), under a sparse model's marginal ([3]).

    ``"dtc"`` and ``"vfe"`` use y ~ N(0, Q_ff + σ²I) (SoR's marginal; the VFE bound is not a density over
    y, see :func:`vfe_loo`); ``"fitc"`` uses y ~ N(0, Q_ff + Λ). O(NM²) through the Woodbury identity
    (:func:`bayes_rbfn.gp.conditional.woodbury_loo`). These are what the models store as ``log_likelihood``
    for PSIS-LOO (DESIGN §6). Arguments as :func:`log_marginal_likelihood`.
    """
    method = _check_method(method)
    jitter = _check_jitter(jitter)
    X, y, noise, Z, _ = check_regression_inputs(X, y, noise, Z)
    check_kernel(kernel, X.shape[1])
    if method == "fitc":
        factor, Kuf, d = fitc_factor(kernel, X, y, Z, noise, jitter)
        value = fitc_loo(factor, Kuf, y, d)
    else:
        factor, Kuf = dtc_factor(kernel, X, y, Z, noise, jitter)
        value = dtc_loo(factor, Kuf, y, noise)
    raise_if_not_finite(value, "loo_log_density")
    return value


def _prepare_diagnostic(kernel: Any, Z: Any, X_test: Any, jitter: Any) -> tuple[jax.Array, jax.Array, Any]:
    jitter = _check_jitter(jitter)
    Z = check_X(Z, "Z")
    Z = check_Z(Z, Z)  # distinct rows; there is no X to compare M with here
    X_test = check_X(X_test, "X_test", dim=Z.shape[1])
    check_kernel(kernel, Z.shape[1])
    return Z, X_test, jitter


def variance_lost(kernel: Kernel, Z: Any, X_test: Any, jitter: float | None = None) -> jax.Array:
    """Fraction of the prior variance SoR loses at each test point, 1 − Q_**/K_**, in [0, 1], shape (S,).

    Near 0 at and between well-placed inducing inputs; near 1 far from them, where SoR's predictive
    variance collapses (DESIGN §3.4) and DTC, FITC or VFE should be preferred. It depends only on the
    kernel, Z and X_test, not on the data.

    Args:
        kernel: covariance function. Z: (M, D) or (M,) distinct inducing inputs. X_test: (S, D) or (S,).
        jitter: relative jitter on K_uu (``None``: the policy of :mod:`bayes_rbfn.gp.linalg`).
    """
    Z, X_test, jitter = _prepare_diagnostic(kernel, Z, X_test, jitter)
    value = prior_variance_lost(kernel, Z, X_test, jitter)
    raise_if_not_finite(value, "variance_lost")
    return value


def variance_retained(kernel: Kernel, Z: Any, X_test: Any, jitter: float | None = None) -> jax.Array:
    """Fraction of the prior variance SoR keeps at each test point, Q_**/K_** = 1 − :func:`variance_lost`."""
    return 1.0 - variance_lost(kernel, Z, X_test, jitter)


def collapse_warning(
    kernel: Kernel, Z: Any, X_test: Any, threshold: float = 0.5, jitter: float | None = None
) -> jax.Array:
    """Warn when SoR loses more than ``threshold`` of the prior variance at some test points.

    Issues a :class:`VarianceCollapseWarning` that says at how many of the S test points
    1 − Q_**/K_** > ``threshold`` and suggests DTC, FITC or VFE (or more inducing inputs there);
    stays silent otherwise.

    Args:
        kernel, Z, X_test, jitter: as :func:`variance_lost`. threshold: in [0, 1).

    Returns:
        The fraction lost per test point, :func:`variance_lost`, shape (S,).
    """
    try:
        threshold_value = float(threshold)
    except (TypeError, ValueError) as err:
        raise ValueError(f"threshold: expected a number in [0, 1), got {threshold!r}") from err
    if not 0.0 <= threshold_value < 1.0:
        raise ValueError(f"threshold: expected a number in [0, 1), got {threshold!r}")
    lost = variance_lost(kernel, Z, X_test, jitter)
    n_bad = int(np.sum(np.asarray(lost) > threshold_value))
    if n_bad:
        n = int(lost.shape[0])
        warnings.warn(
            f"SoR loses more than {threshold_value:.0%} of the prior variance at {n_bad} of {n} test "
            f"point(s) ({n_bad / n:.0%}): they are far from the inducing inputs Z, where SoR's predictive "
            "variance collapses towards 0 (σ² for y*). Consider DTC, FITC or VFE "
            "(bayes_rbfn.gp.sparse.dtc / fitc / vfe), which keep the prior variance there, or add inducing "
            "inputs near those points.",
            VarianceCollapseWarning,
            stacklevel=2,
        )
    return lost
