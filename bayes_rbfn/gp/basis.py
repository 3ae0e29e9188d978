"""From a Gaussian process to an equivalent Bayesian linear regression.

See docs/mathematics.md#a-gp-as-bayesian-linear-regression.

A BLR ``f(x) = φ(x)ᵀ w`` with ``w ~ N(0, I)`` is the GP with covariance ``φ(x)ᵀ φ(x')``. Two ways to
choose φ so that this covariance is (or approximates) a given kernel:

* :func:`se_basis` — Mason's recipe. SE basis functions of lengthscale ℓ/√2 on a regular grid of
  centres c with spacing Δ. Completing the square,

      ∫ exp(−(x − c)²/ℓ²) exp(−(x' − c)²/ℓ²) dc = ℓ √(π/2) exp(−(x − x')²/(2ℓ²)),

  so with the weight scale ``a = sqrt(s² Δ / (ℓ √(π/2)))`` the grid sum
  ``Σ_c a² exp(−(x − c)²/ℓ²) exp(−(x' − c)²/ℓ²)`` is a Riemann (trapezoid) sum for
  ``s² exp(−(x − x')²/(2ℓ²))``, the SE kernel of lengthscale ℓ and variance s². In D dimensions with
  ARD lengthscales the integral factorises: Δ becomes the cell volume Π_d Δ_d and ℓ√(π/2) becomes
  Π_d ℓ_d √(π/2). The integrand is a Gaussian in c of standard deviation ℓ/2, so the sum converges
  like ``exp(−π² ℓ² / (2 Δ²))`` in the spacing (Poisson summation) and like ``erfc(√2 a / ℓ)`` in
  the margin a by which the grid extends beyond the inputs: Δ ≤ ℓ/2 and a ≥ 3ℓ give float64-level
  agreement.
* :func:`eigen_basis` — the Nyström eigenbasis. With ``K_cc = U Λ Uᵀ`` at centres C,
  ``φ(x) = Λ^{-1/2} Uᵀ k(C, x)`` gives ``φ(x)ᵀ φ(x') = k(x, C) K_cc⁻¹ k(C, x') = Q(x, x')``: the BLR is
  exactly the SoR GP / Bayesian RBFN with centres C (docs/mathematics.md#the-central-fact), now with
  independent weights.
  Dropping small eigenvalues gives a shorter basis with nearly the same covariance.

:func:`blr_gp_predict` runs the BLR of :mod:`bayes_rbfn.gp.blr` with α = 1 (weights N(0, I)) and
β = 1/σ² and returns the GP-regression predictive of the latent function.

Validation and jitted cores follow :mod:`bayes_rbfn.gp.blr` (checks under ``jax.ensure_compile_time_eval``,
one compiled program per shape).

References
----------
[1] Mason, the project's GP ↔ BLR notes (docs/mathematics.md#a-gp-as-bayesian-linear-regression): a GP as the
limit of a BLR with dense basis
    functions, and the eigenbasis construction.
[2] Bishop, C. M. (2006). *Pattern Recognition and Machine Learning*. §3.3, §6.4.
[3] Williams, C. K. I. & Seeger, M. (2001). Using the Nyström method to speed up kernel machines. NIPS.
[4] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6. Section 4 (SoR).
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import blr, linalg
from bayes_rbfn.gp.conditional import Gaussian
from bayes_rbfn.gp.kernels import Kernel, scaled_sqdist
from bayes_rbfn.gp.validation import (
    as_float_array,
    check_positive,
    check_X,
    check_y,
    count_distinct_rows,
    is_concrete,
)

__all__ = ["blr_gp_predict", "eigen_basis", "grid_spacing", "regular_grid", "se_basis"]

_SQRT_HALF_PI = float(np.sqrt(0.5 * np.pi))


def _check_scales(value: Any, name: str, dim: int) -> jax.Array:
    """A positive, finite scalar or one value per input dimension (shape (D,))."""
    if not is_concrete(value):
        return value
    arr = as_float_array(value, name)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] not in (1, dim)):
        raise ValueError(f"{name}: expected a scalar or {dim} value(s), got shape {tuple(arr.shape)}")
    a = np.asarray(arr)
    if not np.all(np.isfinite(a)) or not np.all(a > 0):
        raise ValueError(f"{name}: must be finite and positive, got {a.tolist()!r}")
    return arr


def regular_grid(lower: Any, upper: Any, num: int | tuple[int, ...]) -> jax.Array:
    """Centres on a regular Cartesian grid covering [lower, upper] (end points included).

    Args:
        lower: the box's lower corner, a scalar (1-D) or one value per dimension, shape (D,).
        upper: the box's upper corner, a scalar (1-D) or one value per dimension, shape (D,).
        num: points per dimension, an int or one per dimension (each ≥ 2).

    Returns:
        The centres, shape (Π num_d, D), the first dimension varying slowest.
    """
    lower = np.atleast_1d(np.asarray(lower, dtype=float))
    upper = np.atleast_1d(np.asarray(upper, dtype=float))
    D = max(lower.size, upper.size)
    lower, upper = np.broadcast_to(lower, (D,)), np.broadcast_to(upper, (D,))
    num = np.broadcast_to(np.atleast_1d(np.asarray(num)), (D,))
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(upper > lower)):
        raise ValueError(f"lower, upper: need finite bounds with upper > lower, got {lower} and {upper}")
    if not np.all(num >= 2):
        raise ValueError(f"num: need at least 2 points per dimension, got {num.tolist()}")
    axes = [np.linspace(lo, hi, int(n)) for lo, hi, n in zip(lower, upper, num, strict=True)]
    return jnp.asarray(np.array(list(itertools.product(*axes))))


def grid_spacing(centres: Any, rtol: float = 1e-6) -> np.ndarray:
    """The per-dimension spacings (Δ_1, …, Δ_D) of a regular Cartesian grid of centres.

    Raises ``ValueError`` unless the rows of ``centres`` are exactly the Cartesian product of D
    equally spaced axes (to relative tolerance ``rtol``), each with at least two points.
    """
    C = np.asarray(check_X(centres, "centres"))
    spacings = []
    for d in range(C.shape[1]):
        axis = np.unique(C[:, d])
        if axis.size < 2:
            raise ValueError(f"centres: dimension {d} has a single value; pass spacing= explicitly")
        steps = np.diff(axis)
        if not np.allclose(steps, steps.mean(), rtol=rtol, atol=0.0):
            raise ValueError(
                f"centres: dimension {d} is not equally spaced (steps from {steps.min():.3g} to "
                f"{steps.max():.3g}); use regular_grid() or pass spacing= explicitly"
            )
        spacings.append(steps.mean())
    cells = int(np.prod([np.unique(C[:, d]).size for d in range(C.shape[1])]))
    if np.unique(C, axis=0).shape[0] != C.shape[0] or C.shape[0] != cells:
        raise ValueError(
            f"centres: {C.shape[0]} rows do not form a full Cartesian grid of {cells} distinct points; "
            "use regular_grid() or pass spacing= explicitly"
        )
    return np.asarray(spacings)


def se_basis(X: Any, centres: Any, lengthscale: Any, variance: Any = 1.0, spacing: Any = None) -> jax.Array:
    """Mason's SE basis: ``φ_c(x) = a exp(−Σ_d (x_d − c_d)²/ℓ_d²)`` on a regular grid of centres.

    The basis functions are SE bumps of lengthscale ℓ/√2 and the weight scale is
    ``a = sqrt(s² Δ / Π_d (ℓ_d √(π/2)))``, Δ the grid's cell volume, so that with weights ``w ~ N(0, I)``
    ``φ(x)ᵀ φ(x') → s² exp(−½ Σ_d (x_d − x'_d)²/ℓ_d²)`` as the grid fills space (see the module docstring
    for the derivation and the convergence rates). The grid should extend about 3ℓ beyond every input
    at which the basis is used, with spacing Δ_d ≲ ℓ_d/2.

    Args:
        X: inputs, shape (N, D) or (N,).
        centres: a regular Cartesian grid, shape (M, D) or (M,) (e.g. from :func:`regular_grid`).
        lengthscale: ℓ of the target SE kernel, scalar or (D,) (ARD).
        variance: s² of the target SE kernel.
        spacing: the grid spacing, a scalar (1-D) or one per dimension; ``None`` infers it from
            ``centres`` with :func:`grid_spacing` (which requires concrete, not traced, centres).

    Returns:
        Φ, shape (N, M).
    """
    with jax.ensure_compile_time_eval():
        X = check_X(X, "X")
        D = X.shape[1]
        centres = check_X(centres, "centres", dim=D)
        lengthscale = _check_scales(lengthscale, "lengthscale", D)
        variance = check_positive(variance, "variance")
        if spacing is None:
            if not is_concrete(centres):
                raise ValueError("spacing: cannot be inferred from traced centres; pass it explicitly")
            spacing = grid_spacing(centres)
        spacing = _check_scales(spacing, "spacing", D)
    return _se_basis(X, centres, jnp.asarray(lengthscale), variance, jnp.asarray(spacing))


@jax.jit
def _se_basis(
    X: jax.Array, centres: jax.Array, lengthscale: jax.Array, variance: jax.Array, spacing: jax.Array
) -> jax.Array:
    D = X.shape[1]
    cell = jnp.prod(jnp.broadcast_to(spacing, (D,)))
    norm = jnp.prod(jnp.broadcast_to(lengthscale, (D,)) * _SQRT_HALF_PI)
    scale = jnp.sqrt(variance * cell / norm)
    # exp(−Σ (x − c)²/ℓ²) is the SE bump of lengthscale ℓ/√2: exp(−½ r²) with r scaled by ℓ/√2.
    return scale * jnp.exp(-0.5 * scaled_sqdist(X, centres, lengthscale / np.sqrt(2.0)))


def eigen_basis(
    kernel: Kernel,
    centres: Any,
    X: Any,
    num: int | None = None,
    tol: float | None = None,
    jitter: float | None = None,
) -> jax.Array:
    """Nyström eigenbasis ``Φ = k(X, C) U Λ^{-1/2}`` from ``K_cc = U Λ Uᵀ``, so that ``ΦΦᵀ = Q_XX``.

    With all eigenpairs kept the BLR with weights ``w ~ N(0, I)`` is exactly the SoR GP / Bayesian RBFN
    with centres C (its weights are ``α = U Λ^{-1/2} w ~ N(0, K_cc⁻¹)``), so :func:`blr_gp_predict`
    reproduces :func:`bayes_rbfn.gp.conditional.sor`. Keeping the leading eigenpairs drops from Q the
    directions the centres barely resolve; the kept eigenvalues are listed in descending order.

    K_cc carries the jitter of :mod:`bayes_rbfn.gp.linalg` (``jitter · mean(diag K_cc)`` on the diagonal,
    ``None``: the dtype's policy), the same regularisation :func:`bayes_rbfn.gp.conditional.sor` applies,
    which also keeps every eigenvalue positive. Each eigenvector's sign is fixed (largest-magnitude entry
    positive), so calls with the same kernel and centres at training and test inputs give the same
    basis; stacking the inputs into one call and splitting the rows is equivalent and compiles once.

    Args:
        kernel: a positive-definite covariance function.
        centres: C, shape (M, D) or (M,), distinct.
        X: inputs at which to evaluate the basis, shape (N, D) or (N,).
        num: keep at most the ``num`` largest eigenvalues.
        tol: keep only the eigenvalues above ``tol · λ_max``. For concrete inputs the dropped columns
            are removed; under tracing (where shapes cannot depend on values) they are set to zero
            instead, which gives the same covariance and the same BLR predictive.
        jitter: relative jitter on K_cc.

    Returns:
        Φ, shape (N, r) with r = M, ``num`` or the number of eigenvalues above the threshold.
    """
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel: expected a bayes_rbfn.gp.kernels.Kernel, got {type(kernel).__name__}")
    with jax.ensure_compile_time_eval():
        X = check_X(X, "X")
        centres = check_X(centres, "centres", dim=X.shape[1])
    M = centres.shape[0]
    if is_concrete(centres) and count_distinct_rows(centres) < M:
        raise ValueError(
            f"centres: has {M - count_distinct_rows(centres)} duplicate row(s); centres must be distinct"
        )
    if num is not None and not (isinstance(num, int | np.integer) and 1 <= num <= M):
        raise ValueError(f"num: expected an integer between 1 and the {M} centres, got {num!r}")
    if tol is not None and not (np.isfinite(tol) and 0 <= tol < 1):
        raise ValueError(f"tol: expected a relative threshold in [0, 1), got {tol!r}")
    if jitter is None:
        jitter = linalg.default_jitter(jnp.result_type(centres.dtype, float))
    num = M if num is None else num
    Phi, keep = _eigen_basis(kernel, centres, X, num, 0.0 if tol is None else tol, jitter)
    if is_concrete(Phi, keep):
        # Remove the dropped columns on the host: one compiled program serves every num and tol.
        Phi = jnp.asarray(np.asarray(Phi)[:, np.asarray(keep)])
    return Phi


@partial(jax.jit, static_argnames=("jitter",))
@linalg.full_precision
def _eigen_basis(
    kernel: Kernel, centres: jax.Array, X: jax.Array, num: int, tol: float, jitter: float
) -> tuple[jax.Array, jax.Array]:
    # The jitter of linalg.cholesky, so that the full basis reproduces conditional.sor exactly.
    Kcc = linalg.add_jitter(kernel(centres, centres), jitter)
    M = Kcc.shape[0]
    lam, U = jnp.linalg.eigh(Kcc)
    lam, U = lam[::-1], U[:, ::-1]
    # Fix each eigenvector's sign (largest-magnitude entry positive), so separate calls agree even if
    # the eigensolver's sign choice were to differ between compiled programs.
    pivot = jnp.take_along_axis(U, jnp.argmax(jnp.abs(U), axis=0)[None, :], axis=0)
    U = U * jnp.where(pivot < 0, -1.0, 1.0)
    keep = (jnp.arange(M) < num) & (lam > 0) & (lam > tol * lam[0])
    inv_sqrt = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, lam, 1.0)), 0.0)
    return kernel(X, centres) @ (U * inv_sqrt), keep


def blr_gp_predict(Phi: Any, t: Any, Phi_test: Any, noise: Any, full_cov: bool = False) -> Gaussian:
    """GP regression through its weight-space form: BLR with weights ``w ~ N(0, I)`` and noise σ.

    Calls :func:`bayes_rbfn.gp.blr.posterior` with α = 1 and β = 1/σ², then
    :func:`bayes_rbfn.gp.blr.predictive` without the noise term, so the result is the predictive of the
    latent ``f(x) = φ(x)ᵀ w`` — the GP predictive for the covariance ``φ(x)ᵀ φ(x')``: mean
    ``Φ_* S_N Φᵀ t / σ²``, variance ``φ_*ᵀ S_N φ_*`` with ``S_N = (I + ΦᵀΦ/σ²)⁻¹`` (Bishop (3.53)–(3.59)).

    Args:
        Phi: basis at the training inputs, shape (N, M) (from :func:`se_basis` or :func:`eigen_basis`).
        t: targets, shape (N,).
        Phi_test: the same basis at the test inputs, shape (S, M).
        noise: observation noise standard deviation σ > 0.
        full_cov: also return the (S, S) covariance.

    Returns:
        :class:`bayes_rbfn.gp.conditional.Gaussian` of the latent f at the test inputs.
    """
    with jax.ensure_compile_time_eval():
        noise = check_positive(noise, "noise")
        Phi = blr.check_design(Phi, "Phi")
        t = check_y(t, Phi.shape[0], "t")
        Phi_test = blr.check_design(Phi_test, "Phi_test", num_basis=Phi.shape[1])
    return _blr_gp_predict(Phi, t, Phi_test, noise, full_cov)


@partial(jax.jit, static_argnames=("full_cov",))
def _blr_gp_predict(
    Phi: jax.Array, t: jax.Array, Phi_test: jax.Array, noise: jax.Array, full_cov: bool
) -> Gaussian:
    # The jitted cores of blr.posterior and blr.predictive, fused into one compiled program.
    noise_precision = 1.0 / noise**2
    post = blr.posterior_unchecked(Phi, t, jnp.ones((), dtype=Phi.dtype), noise_precision)
    return blr.predictive_unchecked(Phi_test, post, noise_precision, full_cov, False)
