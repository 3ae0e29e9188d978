"""Bayesian linear regression with fixed basis functions (Bishop, PRML §3.3 and §3.5).

The model is ``t = Φ w + ε`` with the isotropic prior ``w ~ N(0, α⁻¹ I)`` (Bishop (3.52)) and
``ε ~ N(0, β⁻¹ I)``; α is the weight precision and β the noise precision, in Bishop's notation (so
β = 1/σ² with σ the ``noise`` standard deviation of docs/mathematics.md#notation). Everything is closed form:

* posterior ``w | t ~ N(m_N, S_N)``, ``S_N⁻¹ = αI + βΦᵀΦ``, ``m_N = β S_N Φᵀ t`` (3.53)–(3.54);
* predictive ``N(m_Nᵀ φ(x), σ_N²(x))``, ``σ_N²(x) = 1/β + φ(x)ᵀ S_N φ(x)`` (3.58)–(3.59);
* equivalent kernel ``k(x, x') = β φ(x)ᵀ S_N φ(x')`` (3.61)–(3.62), so that the predictive mean is
  ``Σ_n k(x, x_n) t_n`` and ``cov[y(x), y(x')] = φ(x)ᵀ S_N φ(x') = k(x, x')/β`` (3.63);
* log evidence ``ln p(t | α, β)`` (3.86).

Numerics: the posterior precision ``A = S_N⁻¹ = αI + βΦᵀΦ`` (M×M, basis-sized) is factorised once,
``A = L Lᵀ``, by :func:`bayes_rbfn.gp.linalg.cholesky` with no jitter: every eigenvalue of A is at least
α > 0, so the factorisation cannot fail and needs no regularisation. ``S_N`` itself is never needed;
``φᵀ S_N φ' = (L⁻¹φ)ᵀ (L⁻¹φ')`` by triangular solves, and :attr:`BLRPosterior.cov` forms ``S_N`` only
on request, by solving against the identity. The cost is O(NM² + M³).

The public functions accept NumPy or JAX arrays and raise ``ValueError`` naming the argument on bad
concrete input; inside ``jit``/``vmap`` the checks step aside for traced arguments and the functions
stay traceable. The checks run under ``jax.ensure_compile_time_eval`` so that concrete arguments
closed over inside a ``jit`` (a Python ``weight_precision=1.0``, say) stay concrete and are still
checked. Each function validates and then calls a jitted core (``posterior_unchecked``,
``predictive_unchecked``, …), so an eager call compiles one XLA program per input shape rather than
dispatching every primitive on its own.

References
----------
[1] Bishop, C. M. (2006). *Pattern Recognition and Machine Learning*. Springer. §3.1 (basis functions,
    eq. (3.4)), §3.3 (eqs. (3.52)–(3.63)), §3.5 (evidence, eqs. (3.77)–(3.86)).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import linalg
from bayes_rbfn.gp.conditional import Gaussian
from bayes_rbfn.gp.kernels import scaled_sqdist
from bayes_rbfn.gp.validation import check_positive, check_X, check_y

__all__ = [
    "BLRPosterior",
    "check_design",
    "equivalent_kernel",
    "gaussian_basis",
    "log_evidence",
    "posterior",
    "posterior_unchecked",
    "predictive",
    "predictive_unchecked",
]

_LOG_2PI = float(np.log(2.0 * np.pi))


@partial(jax.tree_util.register_dataclass, data_fields=["mean", "chol_precision"], meta_fields=[])
@dataclass(frozen=True)
class BLRPosterior:
    """The weight posterior ``w | t ~ N(m_N, S_N)`` of Bishop (3.49)–(3.54).

    Attributes:
        mean: m_N, shape (M,).
        chol_precision: L, shape (M, M), lower Cholesky factor of ``S_N⁻¹ = αI + βΦᵀΦ``.
    """

    mean: jax.Array
    chol_precision: jax.Array

    def whiten(self, Phi: jax.Array) -> jax.Array:
        """``W = L⁻¹ Φᵀ``, shape (M, S) for Φ of shape (S, M), so that ``Φ S_N Φ'ᵀ = Wᵀ W'``."""
        return linalg.solve_lower(self.chol_precision, Phi.T)

    @property
    def cov(self) -> jax.Array:
        """``S_N = L⁻ᵀ L⁻¹``, shape (M, M), from the triangular inverse (never ``inv``)."""
        return _inverse_from_chol(self.chol_precision)


_inverse_from_chol = jax.jit(linalg.inverse_from_chol)


# --------------------------------------------------------------------------------------------------
# Validation helpers


def check_design(Phi: Any, name: str, num_basis: int | None = None) -> jax.Array:
    """A design matrix (N, M): finite, two-dimensional, M matching ``num_basis``."""
    Phi_arr = Phi if isinstance(Phi, jax.core.Tracer) else np.asarray(Phi)
    if getattr(Phi_arr, "ndim", None) != 2:
        raise ValueError(f"{name}: expected a design matrix of shape (N, M), got shape {np.shape(Phi)}")
    Phi = check_X(Phi, name)
    if num_basis is not None and Phi.shape[1] != num_basis:
        raise ValueError(
            f"{name}: has {Phi.shape[1]} basis function(s) (columns) but the posterior has {num_basis}"
        )
    return Phi


def _check_model(Phi: Any, t: Any, weight_precision: Any, noise_precision: Any) -> tuple[jax.Array, ...]:
    """The checked (Φ (N, M), t (N,), α > 0, β > 0) of :func:`posterior` and :func:`log_evidence`."""
    with jax.ensure_compile_time_eval():
        Phi = check_design(Phi, "Phi")
        t = check_y(t, Phi.shape[0], "t")
        return (
            Phi,
            t,
            check_positive(weight_precision, "weight_precision"),
            check_positive(noise_precision, "noise_precision"),
        )


def _check_posterior(post: Any, name: str = "posterior") -> BLRPosterior:
    if not isinstance(post, BLRPosterior):
        raise ValueError(
            f"{name}: expected a BLRPosterior from bayes_rbfn.gp.blr.posterior, got {type(post).__name__}"
        )
    return post


# --------------------------------------------------------------------------------------------------
# Basis functions


def gaussian_basis(X: Any, centres: Any, width: Any, *, bias: bool = False) -> jax.Array:
    """Design matrix of Gaussian basis functions ``φ_j(x) = exp(−‖x − μ_j‖² / (2s²))``, Bishop (3.4).

    Args:
        X: inputs, shape (N, D) or (N,).
        centres: the μ_j, shape (M, D) or (M,).
        width: the spatial scale s > 0 (a scalar, shared by every basis function and dimension).
        bias: prepend the constant basis function φ_0(x) = 1 (Bishop's bias parameter w_0).

    Returns:
        Φ, shape (N, M), or (N, M + 1) with the bias column first.
    """
    with jax.ensure_compile_time_eval():
        X = check_X(X, "X")
        centres = check_X(centres, "centres", dim=X.shape[1])
        width = check_positive(width, "width")
    return _gaussian_basis(X, centres, width, bias)


@partial(jax.jit, static_argnames=("bias",))
def _gaussian_basis(X: jax.Array, centres: jax.Array, width: jax.Array, bias: bool) -> jax.Array:
    Phi = jnp.exp(-0.5 * scaled_sqdist(X, centres, width))
    if bias:
        Phi = jnp.concatenate([jnp.ones((Phi.shape[0], 1), dtype=Phi.dtype), Phi], axis=1)
    return Phi


# --------------------------------------------------------------------------------------------------
# Posterior, predictive, equivalent kernel, evidence


@jax.jit
@linalg.full_precision
def posterior_unchecked(
    Phi: jax.Array, t: jax.Array, weight_precision: jax.Array, noise_precision: jax.Array
) -> BLRPosterior:
    """:func:`posterior` without the input checks (traceable): S_N⁻¹ = αI + βΦᵀΦ, m_N = β S_N Φᵀ t."""
    A = weight_precision * jnp.eye(Phi.shape[1], dtype=Phi.dtype) + noise_precision * (Phi.T @ Phi)
    # A ⪰ αI: no jitter needed (see the module docstring).
    L = linalg.cholesky(A, jitter=0.0)
    mean = noise_precision * linalg.cho_solve(L, Phi.T @ t)
    return BLRPosterior(mean=mean, chol_precision=L)


def posterior(Phi: Any, t: Any, weight_precision: Any, noise_precision: Any) -> BLRPosterior:
    """Weight posterior ``N(m_N, S_N)`` under the prior ``w ~ N(0, α⁻¹I)``, Bishop (3.53)–(3.54).

    ``S_N⁻¹ = αI + βΦᵀΦ`` and ``m_N = β S_N Φᵀ t``, computed from one Cholesky factor of ``S_N⁻¹``.

    Args:
        Phi: design matrix Φ, shape (N, M).
        t: targets, shape (N,).
        weight_precision: prior precision α > 0 of the weights.
        noise_precision: noise precision β > 0 (β = 1/σ²).

    Returns:
        :class:`BLRPosterior` with ``mean`` m_N (M,) and ``chol_precision`` (M, M); ``.cov`` gives S_N.
    """
    return posterior_unchecked(*_check_model(Phi, t, weight_precision, noise_precision))


def predictive(
    Phi_test: Any,
    posterior: BLRPosterior,
    noise_precision: Any,
    *,
    full_cov: bool = False,
    include_noise: bool = True,
) -> Gaussian:
    """Predictive distribution at new inputs, Bishop (3.58)–(3.59).

    mean ``m_Nᵀ φ(x)``; variance ``σ_N²(x) = 1/β + φ(x)ᵀ S_N φ(x)``. With ``include_noise=False`` the
    1/β term is dropped, giving the posterior of the noise-free function y(x, w) = wᵀφ(x).

    Args:
        Phi_test: basis functions at the S test inputs, shape (S, M).
        posterior: from :func:`posterior`.
        noise_precision: noise precision β > 0 (only used when ``include_noise``).
        full_cov: also return the (S, S) covariance ``Φ_* S_N Φ_*ᵀ [+ I/β]``.
        include_noise: add the noise variance 1/β (Bishop's σ_N²) or not (latent function).

    Returns:
        :class:`bayes_rbfn.gp.conditional.Gaussian` with ``mean`` (S,), ``var`` (S,), ``cov`` (S, S) or None.
    """
    with jax.ensure_compile_time_eval():
        posterior = _check_posterior(posterior)
        Phi_test = check_design(Phi_test, "Phi_test", num_basis=posterior.mean.shape[0])
        noise_precision = check_positive(noise_precision, "noise_precision")
    return predictive_unchecked(Phi_test, posterior, noise_precision, full_cov, include_noise)


@partial(jax.jit, static_argnames=("full_cov", "include_noise"))
@linalg.full_precision
def predictive_unchecked(
    Phi_test: jax.Array, post: BLRPosterior, noise_precision: jax.Array, full_cov: bool, include_noise: bool
) -> Gaussian:
    """The predictive of :func:`predictive` without the input checks (traceable)."""
    mean = Phi_test @ post.mean
    W = post.whiten(Phi_test)
    noise_var = 1.0 / noise_precision if include_noise else 0.0
    var = jnp.sum(W * W, axis=0) + noise_var
    cov = None
    if full_cov:
        cov = W.T @ W + noise_var * jnp.eye(W.shape[1], dtype=W.dtype)
    return Gaussian(mean=mean, var=var, cov=cov)


def equivalent_kernel(Phi1: Any, Phi2: Any, posterior: BLRPosterior, noise_precision: Any) -> jax.Array:
    """Equivalent (smoother) kernel ``k(x, x') = β φ(x)ᵀ S_N φ(x')``, Bishop (3.61)–(3.62).

    With ``Phi2`` the training design matrix, the predictive mean is ``k(X_*, X) t`` (Bishop (3.61)), and
    for any inputs ``cov[y(x), y(x')] = φ(x)ᵀ S_N φ(x') = k(x, x')/β`` (Bishop (3.63)).

    Args:
        Phi1: basis functions at the first inputs, shape (S1, M).
        Phi2: basis functions at the second inputs, shape (S2, M).
        posterior: from :func:`posterior` (supplies S_N through its Cholesky factor).
        noise_precision: noise precision β > 0.

    Returns:
        The kernel matrix, shape (S1, S2).
    """
    with jax.ensure_compile_time_eval():
        posterior = _check_posterior(posterior)
        M = posterior.mean.shape[0]
        Phi1 = check_design(Phi1, "Phi1", num_basis=M)
        Phi2 = check_design(Phi2, "Phi2", num_basis=M)
        noise_precision = check_positive(noise_precision, "noise_precision")
    return _equivalent_kernel(Phi1, Phi2, posterior, noise_precision)


@jax.jit
@linalg.full_precision
def _equivalent_kernel(
    Phi1: jax.Array, Phi2: jax.Array, post: BLRPosterior, noise_precision: jax.Array
) -> jax.Array:
    return noise_precision * (post.whiten(Phi1).T @ post.whiten(Phi2))


def log_evidence(Phi: Any, t: Any, weight_precision: Any, noise_precision: Any) -> jax.Array:
    """Log marginal likelihood ``ln p(t | α, β)``, Bishop (3.86).

    ``ln p(t | α, β) = (M/2) ln α + (N/2) ln β − E(m_N) − ½ ln|A| − (N/2) ln 2π`` with
    ``A = αI + βΦᵀΦ`` (3.81) and ``E(m_N) = (β/2)‖t − Φ m_N‖² + (α/2) m_Nᵀ m_N`` (3.82). This is the
    density of ``t ~ N(0, ΦΦᵀ/α + I/β)`` evaluated in O(NM² + M³) without any N×N matrix; E(m_N) is
    taken from the residual rather than as a difference of quadratic forms, which would cancel.

    Args:
        Phi: design matrix Φ, shape (N, M).
        t: targets, shape (N,).
        weight_precision: prior precision α > 0.
        noise_precision: noise precision β > 0.

    Returns:
        The log evidence, a scalar.
    """
    return _log_evidence(*_check_model(Phi, t, weight_precision, noise_precision))


@jax.jit
@linalg.full_precision
def _log_evidence(
    Phi: jax.Array, t: jax.Array, weight_precision: jax.Array, noise_precision: jax.Array
) -> jax.Array:
    N, M = Phi.shape
    post = posterior_unchecked(Phi, t, weight_precision, noise_precision)
    residual = t - Phi @ post.mean
    E = 0.5 * noise_precision * jnp.sum(residual * residual) + 0.5 * weight_precision * jnp.sum(
        post.mean * post.mean
    )
    return (
        0.5 * M * jnp.log(weight_precision)
        + 0.5 * N * jnp.log(noise_precision)
        - E
        - 0.5 * linalg.logdet_from_chol(post.chol_precision)
        - 0.5 * N * _LOG_2PI
    )
