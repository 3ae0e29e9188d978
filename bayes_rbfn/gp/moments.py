"""The SoR predictive moments and the prior variance the Nyström covariance drops, streamed over inputs.

Given the Woodbury factor of the data (:func:`~bayes_rbfn.gp.woodbury_sums.woodbury_factor`), SoR's
predictive of the latent f* is that of f* = K_*u α under the RBFN weight posterior α | y ~ N(m, RᵀR)
(:func:`weight_space_moments`; eq. (16) of [1]), streamed over chunks of test inputs by
:func:`sor_moments`: memory O(MC) per draw whatever the number of test points, in float32 chunks under
``precision="mixed"`` as the sums (:mod:`~bayes_rbfn.gp.woodbury_sums`, *Mixed precision*). The prior
variance the Nyström covariance drops, diag(K_ff − Q_ff) (:func:`nystrom_residual`: FITC's extra noise,
DTC's restored test variance), is streamed likewise. Both passes run on the chunks of
:mod:`~bayes_rbfn.gp.streaming`, sharded over the devices of a mesh when one is given, and each is
compiled once per setting.

References
----------
[1] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959. Eq. (16) (SoR predictive).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from bayes_rbfn.gp import linalg, streaming, woodbury_sums
from bayes_rbfn.gp.kernels import Kernel

__all__ = ["nystrom_residual", "sor_moments", "weight_space_moments"]


@linalg.full_precision
def weight_space_moments(
    R: jax.Array, weights: jax.Array, Kus: jax.Array, full_cov: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """Moments of f* = K_*u α under the RBFN weight posterior α | y ~ N(weights, RᵀR): SoR's predictive.

    mean = K_*u m, cov = (R K_u*)ᵀ (R K_u*) = K_*u Σ K_u* with m = Σ K_uf D⁻¹ y and Σ = RᵀR
    (docs/mathematics.md#function-space-and-weight-space-agree; eq. (16) of [1]); equal to the function-space
    form Q_*f (Q_ff + σ²I)⁻¹ y,
    Q_** − Q_*f (Q_ff + σ²I)⁻¹ Q_f*.

    Args:
        R: (M, M) factor of the weights' posterior covariance
            (:meth:`~bayes_rbfn.gp.linalg.Woodbury.weight_cov_factor`).
        weights: m, the weights' posterior mean, shape (M,).
        Kus: (M, S) cross-covariances k(Z, X_test).
        full_cov: also return the (S, S) covariance.

    Returns:
        (mean (S,), var (S,), cov (S, S) or None).
    """
    V = R @ Kus
    mean = Kus.T @ weights
    if full_cov:
        cov = V.T @ V
        return mean, jnp.diagonal(cov), cov
    return mean, jnp.sum(V * V, axis=0), None


def sor_moments(
    factor: linalg.Woodbury,
    kernel: Kernel,
    Z: jax.Array,
    X_test: jax.Array,
    *,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    precision: str = "float64",
) -> tuple[jax.Array, jax.Array]:
    """SoR predictive moments of the latent f* (:func:`weight_space_moments`), streamed over test points.

    mean = K_*u m, var = ‖R k_u(x*)‖², with m and R = L_B⁻¹ L_uu⁻¹ from ``factor``: memory O(M·C) per
    draw whatever the number of test points. Returns (mean (S,), var (S,)) in the factor's dtype.

    With ``precision="mixed"`` each chunk's kernel block and its two products are taken in float32 (the
    inputs shifted by Z's mean first, as in :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_stats`); R and m
    come from the float64 factor and are rounded once. The rounding of k_u(x*) comes out of R and m
    amplified: accurate only while K_uu is well conditioned (:mod:`~bayes_rbfn.gp.woodbury_sums`, *Mixed
    precision*).
    """
    precision = streaming.check_precision(precision)
    C = chunk_size or streaming.chunk_size_for(Z.shape[0], factor.Luu.dtype)
    centre = streaming.input_centre(kernel, Z, precision)
    shared = streaming.in_low_precision(
        (kernel, streaming.shifted(Z, centre), factor.weight_cov_factor(), factor.weight_mean()), precision
    )
    placeholder = jnp.zeros(X_test.shape[:1], X_test.dtype)
    run = _moments_pass(mesh, C, precision, jnp.dtype(factor.Luu.dtype))
    return run((*shared, centre), X_test, placeholder, None)[1]


@functools.cache
def _moments_pass(mesh: Mesh | None, C: int, precision: str, dtype: Any) -> Callable:
    """``run(shared, X, y, w)`` of :func:`sor_moments` (``shared`` = kernel, Z, R, m, centre).

    Compiled once per setting (an eager :func:`sor_moments` then traces and compiles nothing the second
    time).
    """

    def local(shared, X, y, w):
        kernel, Z, R, mean, centre = shared

        def body(carry, x):
            x = streaming.in_low_precision(streaming.shifted(x, centre), precision)
            mean_c, var_c = weight_space_moments(R, mean, kernel.inducing_cross(Z, x))[:2]
            return carry, (mean_c.astype(dtype), var_c.astype(dtype))

        return None, streaming.stream(body, None, C, X)[1]

    return jax.jit(streaming.over_data(local, mesh))


def nystrom_residual(
    kernel: Kernel,
    Z: jax.Array,
    Luu: jax.Array,
    X: jax.Array,
    *,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
) -> jax.Array:
    """diag(K_ff − Q_ff) = k(x_n, x_n) − ‖L_uu⁻¹ k_u(x_n)‖², clamped at 0, shape (N,), streamed over X.

    The prior variance the Nyström (SoR) covariance drops at each input, i.e. Var[f(x) | u] — FITC's extra
    noise, DTC's restored test variance K_** − Q_** ([1] §5–6), the numerator of the share of prior
    variance lost (:func:`bayes_rbfn.gp.sparse.prior_variance_lost`) and, with Z = X, the squared power
    function (docs/mathematics.md#inducing-inputs-at-the-data, §3.7). Clamped at 0: in exact arithmetic it is
    a variance, and a
    rounding-level negative value must not reach FITC's noise diagonal. Memory O(MC).

    Args:
        kernel: covariance function.
        Z: (M, D) inducing inputs.
        Luu: (M, M) Cholesky factor of K_uu.
        X: (N, D) inputs.
        chunk_size: data points per chunk, as :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_stats`.
        mesh: the device mesh of the streamed pass, as :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_stats`.
    """
    C = chunk_size or streaming.chunk_size_for(Z.shape[0], Luu.dtype)
    W = woodbury_sums.whitening_matrix(Luu)
    placeholder = jnp.zeros(X.shape[:1], X.dtype)
    return jnp.maximum(_residual_pass(mesh, C)((kernel, Z, W), X, placeholder, None)[1], 0.0)


@functools.cache
def _residual_pass(mesh: Mesh | None, C: int) -> Callable:
    """``run(shared, X, y, w)`` of :func:`nystrom_residual` (``shared`` = kernel, Z, L_uu⁻¹).

    Compiled once per setting.
    """

    def local(shared, X, y, w):
        kernel, Z, W = shared

        def body(carry, x):
            A = W @ kernel.inducing_cross(Z, x)
            return carry, kernel.diag(x) - jnp.sum(A * A, axis=0)

        return None, streaming.stream(body, None, C, X)[1]

    return jax.jit(streaming.over_data(local, mesh))
