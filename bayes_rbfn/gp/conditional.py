"""Analytic conditional-Gaussian formulas: exact GP, SoR / Bayesian RBFN, and their equivalences.

Two layers:

* the public, validated functions (:func:`exact_gp`, :func:`sor`, :func:`rbfn_weights`,
  :func:`nystrom_krr`, :func:`rbf_ridge`, :func:`log_marginal_likelihood`,
  :func:`loo_log_density`, :func:`condition_gaussian`) accept NumPy or JAX arrays, check them and raise
  ``ValueError`` with the argument's name on bad input or a failed factorisation;
* the traceable building blocks (``*_factor``, ``*_predict``, ``*_loo``) take validated (N, D) arrays and
  are what the model layer calls inside ``jit``/NUTS; they never raise.

Notation follows DESIGN §2: ``Kfu = k(X, Z)``, ``Kuu = k(Z, Z)``, ``Ksu = k(X_test, Z)``, ``noise`` = σ.

References
----------
[1] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press.
    Eqs. (2.22)–(2.24) (predictive), (2.30) (marginal likelihood), (5.10)–(5.12) (LOO).
[2] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6. Section 4 (SoR), eqs. (14)–(16).
[3] The project's Nyström/RBFN derivation (DESIGN §3.1): eq. (2) Nyström KRR, eq. (3) RBF ridge.
[4] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import linalg
from bayes_rbfn.gp.kernels import Kernel, check_positive_parameter
from bayes_rbfn.gp.validation import check_positive, check_X, check_y, check_Z

__all__ = [
    "Gaussian",
    "check_kernel",
    "check_regression_inputs",
    "condition_gaussian",
    "exact_factor",
    "exact_gp",
    "exact_loo",
    "exact_predict",
    "log_marginal_likelihood",
    "loo_from_precision",
    "loo_log_density",
    "nystrom_krr",
    "raise_if_not_finite",
    "rbf_ridge",
    "rbfn_weights",
    "sor",
    "sor_factor",
    "sor_predict",
    "woodbury_loo",
]

_LOG_2PI = float(np.log(2.0 * np.pi))


@partial(jax.tree_util.register_dataclass, data_fields=["mean", "var", "cov"], meta_fields=[])
@dataclass(frozen=True)
class Gaussian:
    """Moments of a Gaussian: ``mean`` (S,), ``cov`` (S, S) or None, ``var`` (S,) always."""

    mean: jax.Array
    var: jax.Array
    cov: jax.Array | None = None


def raise_if_not_finite(result: Any, what: str) -> None:
    leaves = [x for x in jax.tree_util.tree_leaves(result) if not isinstance(x, jax.core.Tracer)]
    for leaf in leaves:
        if not np.all(np.isfinite(np.asarray(leaf))):
            raise linalg.FactorisationError(
                f"{what}: a kernel matrix could not be factorised (not positive definite to working "
                "precision); check the hyperparameters, the inducing inputs or increase the jitter"
            )


# --------------------------------------------------------------------------------------------------
# General conditioning step


def condition_gaussian(
    S_aa: Any, S_ab: Any, S_bb: Any, a: Any, mean_a: Any = 0.0, mean_b: Any = 0.0, full_cov: bool = True
) -> Gaussian:
    """Condition a joint Gaussian on its first block: b | a.

    For ``(a, b) ~ N([m_a, m_b], [[S_aa, S_ab], [S_ba, S_bb]])`` returns
    ``N(m_b + S_ba S_aa⁻¹ (a − m_a), S_bb − S_ba S_aa⁻¹ S_ab)`` (eq. (A.6) of [1]), using a Cholesky
    factor of ``S_aa`` and triangular solves. Every formula in this module is an instance of it.

    Args:
        S_aa: (N, N) covariance of the observed block. S_ab: (N, S). S_bb: (S, S), or (S,) its diagonal
            when ``full_cov`` is False.
        a: (N,) observed values. mean_a, mean_b: prior means (scalars or arrays).
    """
    S_aa, S_ab, S_bb, a = (jnp.asarray(v) for v in (S_aa, S_ab, S_bb, a))
    L = linalg.cholesky(S_aa, jitter=0.0)
    W = linalg.solve_lower(L, S_ab)
    mean = mean_b + W.T @ linalg.solve_lower(L, a - mean_a)
    if full_cov:
        cov = S_bb - W.T @ W
        result = Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)
    else:
        prior_var = jnp.diagonal(S_bb) if S_bb.ndim == 2 else S_bb
        result = Gaussian(mean=mean, var=prior_var - jnp.sum(W * W, axis=0))
    raise_if_not_finite(result, "condition_gaussian")
    return result


# --------------------------------------------------------------------------------------------------
# Exact GP (traceable blocks)


def exact_factor(kernel: Kernel, X: jax.Array, noise: jax.Array) -> jax.Array:
    """Cholesky factor of K_ff + σ²I, shape (N, N). No jitter: σ² > 0 regularises it."""
    K = kernel(X, X)
    return jnp.linalg.cholesky(K + noise**2 * jnp.eye(K.shape[0], dtype=K.dtype))


def exact_log_marginal(kernel: Kernel, X: jax.Array, y: jax.Array, noise: jax.Array) -> jax.Array:
    """log N(y | 0, K_ff + σ²I), eq. (2.30) of [1]."""
    return linalg.gaussian_logpdf_from_chol(exact_factor(kernel, X, noise), y)


def exact_predict(
    kernel: Kernel, X: jax.Array, y: jax.Array, noise: jax.Array, X_test: jax.Array, full_cov: bool = True
) -> Gaussian:
    """Latent f* | y for the exact GP, eqs. (2.23)–(2.24) of [1]."""
    L = exact_factor(kernel, X, noise)
    Kfs = kernel(X, X_test)
    W = linalg.solve_lower(L, Kfs)
    mean = W.T @ linalg.solve_lower(L, y)
    if full_cov:
        cov = kernel(X_test, X_test) - W.T @ W
        return Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)
    return Gaussian(mean=mean, var=kernel.diag(X_test) - jnp.sum(W * W, axis=0))


def loo_from_precision(precision_diag: jax.Array, precision_y: jax.Array) -> jax.Array:
    """log p(y_i | y_−i) for y ~ N(0, C) from diag(C⁻¹) and C⁻¹y.

    The conditional is N(y_i − [C⁻¹y]_i / [C⁻¹]_ii, 1 / [C⁻¹]_ii) (eqs. (5.10)–(5.12) of [1]; [4]).
    """
    return 0.5 * (jnp.log(precision_diag) - _LOG_2PI) - 0.5 * precision_y**2 / precision_diag


def exact_loo(kernel: Kernel, X: jax.Array, y: jax.Array, noise: jax.Array) -> jax.Array:
    """LOO conditional log densities of the exact GP, shape (N,), in O(N³).

    diag(C⁻¹) is itself the quantity wanted, so the triangular factor is inverted here (an O(N³)
    triangular solve against I); this is the exact reference model, not a sparse path.
    """
    L = exact_factor(kernel, X, noise)
    Linv = linalg.solve_lower(L, jnp.eye(L.shape[0], dtype=L.dtype))
    return loo_from_precision(jnp.sum(Linv * Linv, axis=0), Linv.T @ (Linv @ y))


# --------------------------------------------------------------------------------------------------
# SoR / Bayesian RBFN (traceable blocks, all through linalg.woodbury)


def sor_factor(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
) -> tuple[linalg.Woodbury, jax.Array]:
    """The Woodbury factorisation of Q_ff + σ²I for data y, and K_uf (M, N).

    Also the factorisation of the RBFN weight posterior α | y ~ N(Σ K_uf y/σ², Σ),
    Σ = (K_uf K_fu/σ² + K_uu)⁻¹ (DESIGN §3.2), since K_uu + K_uf K_fu/σ² = L_uu L_B L_Bᵀ L_uuᵀ.
    """
    Luu = linalg.cholesky(kernel(Z, Z), jitter)
    Kuf = kernel(Z, X)
    return linalg.woodbury(Luu, Kuf, y, noise**2), Kuf


def sor_predict(
    factor: linalg.Woodbury, kernel: Kernel, Z: jax.Array, X_test: jax.Array, full_cov: bool = True
) -> Gaussian:
    """Latent f* | y under SoR: f* = K_*u α with α | y Gaussian (DESIGN §3.2; eq. (16) of [2]).

    mean = K_*u Σ K_uf D⁻¹ y, cov = K_*u Σ K_u* = WᵀW with W = L_B⁻¹ L_uu⁻¹ K_u*.
    """
    Kus = kernel(Z, X_test)
    _, W = factor.project(Kus)
    mean = Kus.T @ factor.weight_mean()
    if full_cov:
        cov = W.T @ W
        return Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)
    return Gaussian(mean=mean, var=jnp.sum(W * W, axis=0))


def woodbury_loo(factor: linalg.Woodbury, Kuf: jax.Array, y: jax.Array, d: jax.Array) -> jax.Array:
    """LOO conditionals for C = Q_ff + diag(d) in O(NM²).

    C⁻¹ = D⁻¹ − VᵀV with V = L_B⁻¹ L_uu⁻¹ K_uf D⁻¹, so diag(C⁻¹) = 1/d − ‖V_:i‖² and
    C⁻¹y = y/d − Vᵀc (Woodbury identity).
    """
    d = jnp.broadcast_to(d, y.shape)
    V = factor.weight_cov_factor() @ (Kuf / d)
    return loo_from_precision(1.0 / d - jnp.sum(V * V, axis=0), y / d - V.T @ factor.c)


# --------------------------------------------------------------------------------------------------
# Public, validated entry points


def check_regression_inputs(X: Any, y: Any, noise: Any, Z: Any = None, X_test: Any = None):
    X = check_X(X, "X")
    y = check_y(y, X.shape[0])
    noise = check_positive(noise, "noise")
    Z = None if Z is None else check_Z(Z, X)
    X_test = None if X_test is None else check_X(X_test, "X_test", dim=X.shape[1])
    return X, y, noise, Z, X_test


def check_kernel(kernel: Any, dim: int) -> None:
    """A Kernel whose concrete hyperparameters are positive and sized for ``dim`` input dimensions.

    The constructors already check positivity, but a kernel rebuilt as a pytree (``tree_map``,
    ``tree_unflatten``) bypasses them; a negative variance would otherwise surface as an anonymous
    factorisation error and a mis-sized ARD lengthscale as a broadcasting ``TypeError``.
    """
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel: expected a bayes_rbfn.gp.kernels.Kernel, got {type(kernel).__name__}")
    for name in kernel.params:
        value = getattr(kernel, name)
        if isinstance(value, Kernel):
            check_kernel(value, dim)
            continue
        if isinstance(value, jax.core.Tracer):
            continue
        if name in kernel.positive:
            check_positive_parameter(type(kernel).__name__, name, value)
        if name in ("lengthscale", "period"):
            shape = np.shape(value)
            if len(shape) > 1 or (len(shape) == 1 and shape[0] not in (1, dim)):
                raise ValueError(
                    f"{type(kernel).__name__}: {name} has shape {shape}; expected a scalar or one value "
                    f"per input dimension ({dim})"
                )


def exact_gp(kernel: Kernel, X: Any, y: Any, noise: Any, X_test: Any, full_cov: bool = True) -> Gaussian:
    """Exact GP predictive of the latent f* (noise excluded), eqs. (2.23)–(2.24) of [1].

    Args:
        kernel: covariance function. X: (N, D) or (N,). y: (N,). noise: σ > 0. X_test: (S, D) or (S,).
        full_cov: return the (S, S) covariance as well as the variances.

    Returns:
        :class:`Gaussian` with ``mean`` (S,), ``var`` (S,) and ``cov`` (S, S) when ``full_cov``.
    """
    X, y, noise, _, X_test = check_regression_inputs(X, y, noise, X_test=X_test)
    check_kernel(kernel, X.shape[1])
    result = exact_predict(kernel, X, y, noise, X_test, full_cov)
    raise_if_not_finite(result, "exact_gp")
    return result


def sor(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    X_test: Any,
    full_cov: bool = True,
    jitter: float | None = None,
) -> Gaussian:
    """SoR (= Bayesian RBFN) predictive of the latent f*, DESIGN §3.2.

    Function space: ``N(Q_*f (Q_ff+σ²I)⁻¹ y, Q_** − Q_*f (Q_ff+σ²I)⁻¹ Q_f*)``; computed in weight space
    as f* = K_*u α, α | y ~ N(Σ K_uf y/σ², Σ), Σ = (K_uf K_fu/σ² + K_uu)⁻¹, in O(NM² + SM²) without any
    N×N matrix. Equation (16) of [2].

    Args:
        kernel: covariance function. X: (N, D) or (N,). y: (N,). Z: (M, D) distinct inducing inputs.
        noise: σ > 0. X_test: (S, D) or (S,). full_cov: also return the (S, S) covariance.
        jitter: relative jitter on K_uu (``None``: the policy of :mod:`bayes_rbfn.gp.linalg`).
    """
    X, y, noise, Z, X_test = check_regression_inputs(X, y, noise, Z, X_test)
    check_kernel(kernel, X.shape[1])
    factor, _ = sor_factor(kernel, X, y, Z, noise, jitter)
    result = sor_predict(factor, kernel, Z, X_test, full_cov)
    raise_if_not_finite(result, "sor")
    return result


def rbfn_weights(kernel: Kernel, X: Any, y: Any, Z: Any, noise: Any, jitter: float | None = None) -> Gaussian:
    """Posterior of the RBFN weights α | y ~ N(Σ K_uf y/σ², Σ), Σ = (K_uf K_fu/σ² + K_uu)⁻¹ (DESIGN §3.2).

    The prior is α ~ N(0, K_uu⁻¹) and the likelihood y ~ N(K_fu α, σ²I). Returns ``mean`` (M,),
    ``cov`` (M, M) and ``var`` (M,).
    """
    X, y, noise, Z, _ = check_regression_inputs(X, y, noise, Z)
    check_kernel(kernel, X.shape[1])
    factor, _ = sor_factor(kernel, X, y, Z, noise, jitter)
    R = factor.weight_cov_factor()
    cov = R.T @ R
    result = Gaussian(mean=factor.weight_mean(), var=jnp.diagonal(cov), cov=cov)
    raise_if_not_finite(result, "rbfn_weights")
    return result


def nystrom_krr(
    kernel: Kernel, X: Any, y: Any, Z: Any, noise: Any, X_test: Any, jitter: float | None = None
) -> jax.Array:
    """Nyström kernel ridge regression mean ``K_*u K_uu⁻¹ K_uf (Q_ff + σ²I)⁻¹ y``, eq. (2) of [3].

    Evaluated through the push-through identity K_uu⁻¹ K_uf (K_fu K_uu⁻¹ K_uf + σ²I)⁻¹
    = (K_uu + K_uf K_fu / σ²)⁻¹ K_uf / σ², whose right-hand side the Woodbury factor holds in
    whitened form. Right to left as written, (Q_ff + σ²I)⁻¹ y = y/σ² − (…)/σ² cancels catastrophically
    as σ → 0 (relative error ~ ε s²/σ²); this form does not. Returns the mean, shape (S,).
    """
    X, y, noise, Z, X_test = check_regression_inputs(X, y, noise, Z, X_test)
    check_kernel(kernel, X.shape[1])
    factor, _ = sor_factor(kernel, X, y, Z, noise, jitter)
    mean = kernel(X_test, Z) @ factor.weight_mean()
    raise_if_not_finite(mean, "nystrom_krr")
    return mean


def rbf_ridge(
    kernel: Kernel, X: Any, y: Any, Z: Any, noise: Any, X_test: Any, jitter: float | None = None
) -> jax.Array:
    """RBF-network ridge regression mean ``K_*u (K_uf K_fu + σ² K_uu)⁻¹ K_uf y``, eq. (3) of [3].

    The regularised normal equations of an RBF network with centres Z and penalty σ² αᵀK_uuα, solved
    as written with a Cholesky factor of the M×M system (K_uu carries the jitter of the policy).
    Returns the mean, shape (S,).
    """
    X, y, noise, Z, X_test = check_regression_inputs(X, y, noise, Z, X_test)
    check_kernel(kernel, X.shape[1])
    Kuu = kernel(Z, Z)
    jit_rel = linalg.default_jitter(Kuu.dtype) if jitter is None else jitter
    Kuu = Kuu + jit_rel * jnp.mean(jnp.diagonal(Kuu)) * jnp.eye(Kuu.shape[0], dtype=Kuu.dtype)
    Kuf = kernel(Z, X)
    L = linalg.cholesky(Kuf @ Kuf.T + noise**2 * Kuu, jitter=0.0)
    mean = kernel(X_test, Z) @ linalg.cho_solve(L, Kuf @ y)
    raise_if_not_finite(mean, "rbf_ridge")
    return mean


def log_marginal_likelihood(
    kernel: Kernel, X: Any, y: Any, noise: Any, Z: Any = None, jitter: float | None = None
) -> jax.Array:
    """log p(y): exact GP ``log N(y | 0, K_ff + σ²I)`` when Z is None (eq. (2.30) of [1]), else SoR's
    ``log N(y | 0, Q_ff + σ²I)`` in O(NM²) (eq. (17) of [2] with Λ = 0)."""
    X, y, noise, Z, _ = check_regression_inputs(X, y, noise, Z)
    check_kernel(kernel, X.shape[1])
    if Z is None:
        value = exact_log_marginal(kernel, X, y, noise)
    else:
        value = sor_factor(kernel, X, y, Z, noise, jitter)[0].log_marginal_likelihood()
    raise_if_not_finite(value, "log_marginal_likelihood")
    return value


def loo_log_density(
    kernel: Kernel, X: Any, y: Any, noise: Any, Z: Any = None, jitter: float | None = None
) -> jax.Array:
    """Leave-one-out conditionals log p(y_i | y_−i), shape (N,): exact GP when Z is None, else SoR in O(NM²).

    These are what the models store as ``log_likelihood`` for PSIS-LOO (DESIGN §6; [4]).
    """
    X, y, noise, Z, _ = check_regression_inputs(X, y, noise, Z)
    check_kernel(kernel, X.shape[1])
    if Z is None:
        value = exact_loo(kernel, X, y, noise)
    else:
        factor, Kuf = sor_factor(kernel, X, y, Z, noise, jitter)
        value = woodbury_loo(factor, Kuf, y, noise**2)
    raise_if_not_finite(value, "loo_log_density")
    return value
