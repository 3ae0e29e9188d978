"""Kernel interpolation, polyharmonic splines and the power function.

After Bindel; see docs/mathematics.md#kernels-and-interpolation.

Given data ``f_i = f(x_i)`` at distinct points X, the kernel interpolant is
``f̂(y) = Σ_i c_i k(y, x_i) [+ p(y)]``:

* for a **positive-definite** kernel (SE, exponential, Matérn) ``K_XX c = f``, solved with a Cholesky
  factor of K_XX; f̂ is then the minimum-norm interpolant in the kernel's native space (RKHS) H and equals
  the noise-free GP posterior mean;
* for a **conditionally positive-definite** kernel of order m — the polyharmonic splines, cubic
  ``φ(r) = r³`` and thin-plate ``φ(r) = r² log r`` (both m = 2) — a polynomial tail p of degree ≥ m − 1
  is added and the moment conditions ``Pᵀ c = 0`` fix the extra freedom, giving the saddle-point system
  ``[Φ P; Pᵀ 0] [c; d] = [f; 0]`` (block rows separated by semicolons).

  Φ is positive definite only on {c : Pᵀc = 0}, so the block matrix is symmetric indefinite. It is small
  and dense here, and is solved by LU with partial pivoting (``jnp.linalg.solve``), which is backward
  stable for it; the system is nonsingular exactly when the points are *unisolvent* for the tail (only
  the zero polynomial of that degree vanishes on X, i.e. P has full column rank), which is checked first.
  The tail's monomials are evaluated in coordinates centred and scaled to the data, which does not change
  the interpolant but keeps P well conditioned.

The **power function** ``P_X(y) = sqrt(k(y, y) − k_yX K_XX⁻¹ k_Xy)`` (the noise-free GP posterior standard
deviation) bounds the interpolation error of every f in H:

    |f(y) − f̂(y)| ≤ P_X(y) · sqrt(‖f‖²_H − ‖f̂‖²_H),        ‖f̂‖²_H = cᵀ K_XX c,

because f̂ is the H-orthogonal projection of f onto span{k(·, x_i)}.

By default the positive-definite path factorises K_XX without jitter (``jitter=0.0``), since
interpolation means reproducing the data exactly; pass ``jitter=None`` to apply the policy of
:mod:`bayes_rbfn.gp.linalg` (the result is then a kernel ridge regression with a tiny ridge). A failed
factorisation raises :class:`bayes_rbfn.gp.linalg.FactorisationError`. Validation and jitted cores follow
:mod:`bayes_rbfn.gp.blr` (checks under ``jax.ensure_compile_time_eval``, one compiled program per shape).

References
----------
[1] Bindel, D. (2019). Notes on kernels, interpolation and the power function (CS 6241, Cornell).
[2] Wendland, H. (2005). *Scattered Data Approximation*. Cambridge University Press. Ch. 8 (conditionally
    positive-definite functions, polyharmonic splines), ch. 11 (power function and the error bound).
[3] Fasshauer, G. E. (2007). *Meshfree Approximation Methods with MATLAB*. World Scientific. Ch. 6–8, 14.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import linalg, moments
from bayes_rbfn.gp.conditional import check_kernel, raise_if_not_finite
from bayes_rbfn.gp.kernels import Kernel, as_2d, safe_sqrt, scaled_sqdist
from bayes_rbfn.gp.validation import check_X, check_y, count_distinct_rows, is_concrete

__all__ = [
    "Cubic",
    "Interpolant",
    "Polyharmonic",
    "ThinPlate",
    "interpolate",
    "native_norm",
    "polynomial_basis",
    "power_function",
]


# --------------------------------------------------------------------------------------------------
# Conditionally positive-definite (polyharmonic) kernels


class Polyharmonic(Kernel):
    """A polyharmonic spline φ(‖x − x'‖), conditionally positive definite of order ``order``.

    Such a kernel is not a covariance function: its Gram matrix is positive definite only on vectors c
    with ``Σ_i c_i p(x_i) = 0`` for every polynomial p of degree < ``order``, so it interpolates only
    together with a polynomial tail of degree ≥ ``order − 1`` (:func:`interpolate`). It has no
    hyperparameters (a scale on r only rescales φ or, for r² log r, adds a quadratic that the moment
    conditions annihilate).
    """

    params = ()
    order: ClassVar[int] = 2

    def __init__(self) -> None:
        """A polyharmonic kernel; it has no hyperparameters to set."""
        pass

    def radial(self, r2: jax.Array) -> jax.Array:
        """φ as a function of the squared distance r²."""
        raise NotImplementedError

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """The matrix φ(‖x − x'‖) between the rows of X1 and X2, shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        X2 = X1 if X2 is None else X2
        return self.radial(scaled_sqdist(X1, X2, 1.0))

    def diag(self, X: Any) -> jax.Array:
        """φ(0) = 0 at every row of X, shape (N,): the diagonal of the Gram matrix.

        Args:
            X: (N, D) or (N,) inputs.
        """
        X = as_2d(X)
        return jnp.zeros(X.shape[:1], dtype=jnp.result_type(X, float))


class Cubic(Polyharmonic):
    """Cubic spline φ(r) = r³, conditionally positive definite of order 2 in every dimension ([2] ch. 8)."""

    def radial(self, r2: jax.Array) -> jax.Array:
        """φ = r³, computed as r² √r² (a zero gradient at r² = 0).

        Args:
            r2: squared distances r², any shape (the result has the same).
        """
        return r2 * safe_sqrt(r2)


class ThinPlate(Polyharmonic):
    """Thin-plate spline φ(r) = r² log r, with its limit φ(0) = 0; order 2 in every dimension ([2] ch. 8).

    Evaluated as ½ r² log r² with a double ``where`` so that value and gradient at r = 0 are 0, not NaN.
    """

    def radial(self, r2: jax.Array) -> jax.Array:
        """φ = r² log r, computed as ½ r² log r², and 0 at r² = 0 (value and gradient).

        Args:
            r2: squared distances r², any shape (the result has the same).
        """
        positive = r2 > 0
        return jnp.where(positive, 0.5 * r2 * jnp.log(jnp.where(positive, r2, 1.0)), 0.0)


# --------------------------------------------------------------------------------------------------
# Polynomial tail


def _exponents(dim: int, degree: int) -> np.ndarray:
    """Exponent vectors of the monomials of total degree ≤ ``degree`` in ``dim`` variables, (Q, D)."""
    exps = [e for e in itertools.product(range(degree + 1), repeat=dim) if sum(e) <= degree]
    exps.sort(key=lambda e: (sum(e), tuple(-k for k in e)))
    return np.asarray(exps, dtype=int).reshape(len(exps), dim)


def polynomial_basis(X: Any, degree: int, shift: Any = 0.0, scale: Any = 1.0) -> jax.Array:
    """Monomials of total degree ≤ ``degree`` in the coordinates ``(x − shift)/scale``.

    Args:
        X: points, shape (N, D) or (N,).
        degree: the polynomial degree (≥ 0).
        shift: the coordinates' origin, a scalar or (D,).
        scale: the coordinates' unit, a scalar or (D,).

    Returns:
        P, shape (N, Q) with Q = C(D + degree, degree) columns, the constant first.
    """
    X = as_2d(X)
    U = (X - shift) / scale
    exps = _exponents(X.shape[1], degree)
    return jnp.prod(U[:, None, :] ** exps[None, :, :], axis=-1)


# --------------------------------------------------------------------------------------------------
# Interpolant


@partial(
    jax.tree_util.register_dataclass,
    data_fields=["kernel", "X", "coef", "tail", "shift", "scale"],
    meta_fields=["degree"],
)
@dataclass(frozen=True)
class Interpolant:
    """A kernel interpolant ``f̂(y) = Σ_i c_i k(y, x_i) + Σ_q d_q p_q(y)``; call it on new points.

    Attributes:
        kernel: the kernel k. X: the nodes, shape (N, D). coef: c, shape (N,).
        tail: d, shape (Q,) (empty when there is no polynomial tail).
        shift, scale: the coordinates ``(x − shift)/scale`` of the tail's monomials, shape (D,).
        degree: the tail's degree, or ``None`` for no tail.
    """

    kernel: Kernel
    X: jax.Array
    coef: jax.Array
    tail: jax.Array
    shift: jax.Array
    scale: jax.Array
    degree: int | None = None

    def __call__(self, Y: Any) -> jax.Array:
        """f̂ at the points Y, shape (S, D) or (S,); returns shape (S,)."""
        with jax.ensure_compile_time_eval():
            Y = check_X(Y, "Y", dim=self.X.shape[1])
        return _evaluate(self, Y)


@jax.jit
@linalg.full_precision
def _evaluate(interp: Interpolant, Y: jax.Array) -> jax.Array:
    value = interp.kernel(Y, interp.X) @ interp.coef
    if interp.degree is not None:
        value = value + polynomial_basis(Y, interp.degree, interp.shift, interp.scale) @ interp.tail
    return value


def _check_distinct(X: jax.Array) -> None:
    if is_concrete(X):
        distinct = count_distinct_rows(X)
        if distinct < X.shape[0]:
            raise ValueError(
                f"X: has {X.shape[0] - distinct} duplicate point(s); interpolation nodes must be distinct"
            )


def interpolate(
    kernel: Kernel, X: Any, f: Any, degree: int | None = None, jitter: float | None = 0.0
) -> Interpolant:
    """The kernel interpolant of the data ``f`` at the distinct nodes ``X``.

    * Positive-definite kernel, no tail: solves ``K_XX c = f`` by Cholesky ([1]).
    * With a polynomial tail of degree q (always for :class:`Polyharmonic` kernels, whose minimum is
      ``order − 1``): solves the saddle-point system ``[[K, P], [Pᵀ, 0]] [c; d] = [f; 0]`` by LU
      (``jnp.linalg.solve``; see the module docstring), so that f̂ reproduces every polynomial of
      degree ≤ q exactly ([2] ch. 8).

    Args:
        kernel: a :class:`bayes_rbfn.gp.kernels.Kernel` (positive definite) or a :class:`Polyharmonic`.
        X: distinct nodes, shape (N, D) or (N,).
        f: data values, shape (N,).
        degree: polynomial tail degree; ``None`` means none for positive-definite kernels and
            ``order − 1`` (= 1, linear) for polyharmonic ones.
        jitter: relative jitter on K_XX on the Cholesky path (positive-definite kernel, no tail);
            ``0.0`` (default) interpolates exactly, ``None`` applies the policy of
            :mod:`bayes_rbfn.gp.linalg`. Not used with a tail: the saddle-point system is solved as is.

    Returns:
        An :class:`Interpolant`; ``interpolant(Y)`` evaluates f̂.

    Raises:
        ValueError: duplicate nodes, a tail degree below the kernel's minimum, or nodes that are not
            unisolvent for the tail (P without full column rank, e.g. collinear points in 2-D for a
            linear tail). :class:`bayes_rbfn.gp.linalg.FactorisationError` if K_XX cannot be factorised.
    """
    with jax.ensure_compile_time_eval():
        X = check_X(X, "X")
        f = check_y(f, X.shape[0], "f")
        _check_distinct(X)
    check_kernel(kernel, X.shape[1])
    N, D = X.shape
    polyharmonic = isinstance(kernel, Polyharmonic)
    if degree is None and polyharmonic:
        degree = kernel.order - 1
    if degree is not None:
        if not isinstance(degree, int | np.integer) or degree < 0:
            raise ValueError(f"degree: expected a non-negative integer or None, got {degree!r}")
        if polyharmonic and degree < kernel.order - 1:
            raise ValueError(
                f"degree: {type(kernel).__name__} is conditionally positive definite of order "
                f"{kernel.order} and needs a polynomial tail of degree ≥ {kernel.order - 1}, got {degree}"
            )
        degree = int(degree)

    if degree is None:
        interp = _interpolate_pd(kernel, X, f, jitter)
        raise_if_not_finite(
            interp.coef,
            "interpolate",
            "K_XX could not be factorised (not positive definite to working precision); the nodes may "
            "be too close for this kernel and lengthscale, or the kernel is not positive definite; pass "
            "jitter=None to regularise",
        )
        return interp

    interp, P = _interpolate_tail(kernel, X, f, degree)
    if is_concrete(P):
        Q = P.shape[1]
        rank = int(np.linalg.matrix_rank(np.asarray(P)))
        if rank < Q:
            raise ValueError(
                f"X: the {N} node(s) are not unisolvent for polynomials of degree {degree} in {D} "
                f"dimension(s): the tail matrix P ({N}×{Q}) has rank {rank} < {Q} (e.g. collinear "
                "points in 2-D for a linear tail); add nodes in general position or lower the degree"
            )
    raise_if_not_finite(
        jnp.concatenate([interp.coef, interp.tail]),
        "interpolate",
        "the saddle-point system is singular to working precision; check for nearly coincident "
        "nodes or nodes nearly on a lower-dimensional surface",
    )
    return interp


def _tail_coordinates(X: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Centre and half-range of the nodes per dimension: the tail's monomials live in [−1, 1]."""
    shift = jnp.mean(X, axis=0)
    spread = jnp.max(jnp.abs(X - shift), axis=0)
    return shift, jnp.where(spread > 0, spread, 1.0)


@partial(jax.jit, static_argnames=("jitter",))
def _interpolate_pd(kernel: Kernel, X: jax.Array, f: jax.Array, jitter: float | None) -> Interpolant:
    K = kernel(X, X)
    L = linalg.cholesky(K, jitter=jitter)
    coef = linalg.cho_solve(L, f)
    shift, scale = _tail_coordinates(X)
    tail = jnp.zeros((0,), dtype=coef.dtype)
    return Interpolant(kernel=kernel, X=X, coef=coef, tail=tail, shift=shift, scale=scale, degree=None)


@partial(jax.jit, static_argnames=("degree",))
def _interpolate_tail(
    kernel: Kernel, X: jax.Array, f: jax.Array, degree: int
) -> tuple[Interpolant, jax.Array]:
    N = X.shape[0]
    K = kernel(X, X)
    shift, scale = _tail_coordinates(X)
    P = polynomial_basis(X, degree, shift, scale)
    Q = P.shape[1]
    # Symmetric indefinite: LU with partial pivoting (see the module docstring).
    A = jnp.block([[K, P], [P.T, jnp.zeros((Q, Q), dtype=K.dtype)]])
    rhs = jnp.concatenate([f, jnp.zeros((Q,), dtype=f.dtype)])
    sol = jnp.linalg.solve(A, rhs)
    interp = Interpolant(
        kernel=kernel, X=X, coef=sol[:N], tail=sol[N:], shift=shift, scale=scale, degree=degree
    )
    return interp, P


def power_function(kernel: Kernel, X: Any, Y: Any, jitter: float | None = 0.0) -> jax.Array:
    """Power function ``P_X(y) = sqrt(k(y, y) − k_yX K_XX⁻¹ k_Xy)`` at the points Y ([1]; [2] ch. 11).

    It is the noise-free GP posterior standard deviation at y given exact values at X, and bounds the
    interpolation error: ``|f(y) − f̂(y)| ≤ P_X(y) sqrt(‖f‖²_H − ‖f̂‖²_H)``. Computed as
    ``k(y, y) − ‖L⁻¹ k_Xy‖²`` with ``L Lᵀ = K_XX``: the Nyström residual diag(K_** − Q_**) with the nodes
    as inducing inputs (:func:`bayes_rbfn.gp.moments.nystrom_residual`;
    docs/mathematics.md#inducing-inputs-at-the-data), whose clamp at 0
    keeps rounding near the nodes from making it negative before the square root.

    Args:
        kernel: a positive-definite kernel (not :class:`Polyharmonic`).
        X: distinct nodes, shape (N, D) or (N,).
        Y: evaluation points, shape (S, D) or (S,).
        jitter: relative jitter on K_XX as in :func:`interpolate` (``0.0`` exact, ``None`` the policy).

    Returns:
        P_X(Y), shape (S,).
    """
    if isinstance(kernel, Polyharmonic):
        raise ValueError(
            "kernel: the power function here is for positive-definite kernels; "
            f"{type(kernel).__name__} is only conditionally positive definite"
        )
    with jax.ensure_compile_time_eval():
        X = check_X(X, "X")
        Y = check_X(Y, "Y", dim=X.shape[1])
        _check_distinct(X)
    check_kernel(kernel, X.shape[1])
    p2 = _power_function_squared(kernel, X, Y, jitter)
    raise_if_not_finite(
        p2, "power_function", "K_XX could not be factorised (not positive definite to working precision)"
    )
    return jnp.sqrt(p2)


@partial(jax.jit, static_argnames=("jitter",))
def _power_function_squared(kernel: Kernel, X: jax.Array, Y: jax.Array, jitter: float | None) -> jax.Array:
    # P_X(y)² is the Nyström residual of the nodes X: k(y, y) − ‖L⁻¹ k_Xy‖² with L Lᵀ = K_XX, clamped at 0.
    return moments.nystrom_residual(kernel, X, linalg.cholesky(kernel(X, X), jitter=jitter), Y)


def native_norm(interpolant: Interpolant) -> jax.Array:
    """Native-space norm ``‖f̂‖_H = sqrt(cᵀ K_XX c)`` of an interpolant ([1]; [2] ch. 10).

    For a polyharmonic interpolant this is the native-space semi-norm (the polynomial tail has norm
    zero; cᵀ K c ≥ 0 because Pᵀc = 0). Clamped at 0 before the square root against rounding.

    Args:
        interpolant: from :func:`interpolate`.

    Returns:
        The norm, a scalar.
    """
    if not isinstance(interpolant, Interpolant):
        raise ValueError(f"interpolant: expected an Interpolant, got {type(interpolant).__name__}")
    return _native_norm(interpolant)


@jax.jit
@linalg.full_precision
def _native_norm(interpolant: Interpolant) -> jax.Array:
    c = interpolant.coef
    K = interpolant.kernel(interpolant.X, interpolant.X)
    return jnp.sqrt(jnp.maximum(c @ (K @ c), 0.0))
