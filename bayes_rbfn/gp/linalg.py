"""The one place for factorisations: the jitter policy, Cholesky solves and the Woodbury path.

Every formula of the SoR family (SoR, RBFN weights, DTC, FITC, VFE, their LOO conditionals and
predictives) conditions on a covariance of the form

    C = Q_ff + diag(d),    Q_ff = K_fu K_uu⁻¹ K_uf,    d > 0 (N,)

and goes through :func:`woodbury`. It never forms an N×N matrix. It works in the whitened form of
Titsias (2009) / GPflow's SGPR: with L_uu L_uuᵀ = K_uu,

    B = I_M + L_uu⁻¹ (K_uf D⁻¹ K_fu) L_uu⁻ᵀ,      L_B L_Bᵀ = B,

so that (matrix determinant lemma and Woodbury identity)

    log|C| = Σ log d + 2 Σ log diag L_B,
    yᵀ C⁻¹ y = yᵀ D⁻¹ y − ‖c‖²,   c = L_B⁻¹ L_uu⁻¹ K_uf D⁻¹ y.

B has every eigenvalue ≥ 1, so its Cholesky factor cannot fail however small the noise (the argument
numpyro's ``LowRankMultivariateNormal`` makes for its capacitance matrix). Only the M×M sums AAᵀ and
A D^-½ y (A = L_uu⁻¹ K_uf D^-½), yᵀD⁻¹y and Σ log d need a pass over the data: plain sums over data
points, which :func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats` takes in the package's one streamed (and
shardable) pass and hands to :func:`woodbury`. A problem small enough to form K_uf is one chunk of that
pass; the dense forms of the sums live on only as test references (tests/reference.py).

The quadratic form as written above subtracts two numbers of size ‖y‖²/σ² when d = σ² is small and y is
nearly explained by the network: at σ/s = 1e-6 it keeps as few as 4 digits, at 1e-8 none. The same number is
a sum of squares in weight space. With r = y − K_fu m the residuals of the weight mean m = Σ K_uf D⁻¹ y and
v = L_uuᵀ m = L_B⁻ᵀ c its whitened form, yᵀC⁻¹y is the minimum over v of
‖y − K_fu L_uu⁻ᵀ v‖²_{D⁻¹} + ‖v‖² (the RBFN's negative log posterior, twice), attained at v:

    yᵀ C⁻¹ y = rᵀ D⁻¹ r + ‖v‖²,    C⁻¹ y = D⁻¹ r,

two non-negative terms, each residual a difference taken before it is squared, and, v being a minimiser,
first-order insensitive to the rounding of v. The residuals need m, which needs every sum, so they take a
second sweep over the data (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor`, which hands them to
:meth:`Woodbury.with_residuals`); :func:`woodbury` alone, given only the sums, keeps the difference form.

Jitter policy (docs/mathematics.md#numerics): a failed or ill-conditioned Cholesky of a kernel matrix is
prevented by
adding ``jitter · mean(diag K)`` to its diagonal (:func:`add_jitter`), with ``jitter`` set by the dtype
(:data:`JITTER`). Pass ``jitter=0.0`` to factorise the matrix as it is.

Inside traced code a failed factorisation shows up as NaN; :func:`finite_or_neg_inf` turns a log
density into -inf in that case so NUTS rejects the step. Outside traced code the public entry points
raise :class:`FactorisationError`.

References
----------
[1] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[2] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959.
[3] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press.
    Eqs. (5.10)–(5.12) (LOO).
[4] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
[5] Gelman, A., Carlin, J. B., Stern, H. S., Dunson, D. B., Vehtari, A. & Rubin, D. B. (2013). *Bayesian
    Data Analysis*, 3rd ed. CRC Press.
[6] Higham, N. J. (2002). *Accuracy and Stability of Numerical Algorithms*, 2nd ed. SIAM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import jax.scipy.special
import numpy as np

__all__ = [
    "JITTER",
    "LOO_STATISTICS",
    "FactorisationError",
    "Woodbury",
    "add_jitter",
    "cho_solve",
    "cholesky",
    "default_jitter",
    "dense_gaussian_logpdf",
    "finite_or_neg_inf",
    "full_precision",
    "gaussian_logpdf_from_chol",
    "inverse_from_chol",
    "logdet_from_chol",
    "loo_from_chol",
    "loo_from_precision",
    "solve_lower",
    "solve_upper",
    "triangular_inverse",
    "woodbury",
]

#: Relative jitter, multiplied by the mean diagonal of the matrix being factorised.
JITTER: dict[Any, float] = {jnp.dtype("float64"): 1e-8, jnp.dtype("float32"): 1e-4}

_LOG_2PI = float(np.log(2.0 * np.pi))


class FactorisationError(ValueError):
    """A kernel matrix could not be factorised (not positive definite to working precision)."""


def full_precision(fn: Callable) -> Callable:
    """``fn`` with its matrix products traced at full precision, whatever the dtype.

    The package's one precision policy, on every function that forms products of data-sized or M×M matrices.

    JAX's default lets a GPU round the inputs of float32 products to TF32 (a 10-bit mantissa); a CPU is not
    affected. With TF32 products the mixed SoR log density is off by far more than float32 rounding with
    well-separated inducing inputs and by O(1) with dense ones, and the plain float32 pass's sums lose
    digits against full float32 ones. Float64 products
    are exact in either setting, so only float32 work changes, and only off the CPU.
    """

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return traced


def default_jitter(dtype: Any) -> float:
    """The relative jitter of the policy for ``dtype`` (float64: 1e-8, float32: 1e-4)."""
    return JITTER.get(jnp.dtype(dtype), JITTER[jnp.dtype("float32")])


def add_jitter(K: jax.Array, jitter: float | None = None) -> jax.Array:
    """``K + jitter · mean(diag K) · I``: the jitter policy, the only place it is written.

    Args:
        K: symmetric matrix, shape (M, M).
        jitter: relative jitter; ``None`` applies the policy for ``K.dtype`` (:func:`default_jitter`),
            ``0.0`` none (K is returned as it is).

    Returns:
        The jittered matrix, shape (M, M).
    """
    jitter = default_jitter(K.dtype) if jitter is None else jitter
    if not jitter:
        return K
    scale = jnp.mean(jnp.diagonal(K))
    return K + (jitter * scale) * jnp.eye(K.shape[-1], dtype=K.dtype)


def cholesky(K: jax.Array, jitter: float | None = None) -> jax.Array:
    """Lower Cholesky factor of ``K + jitter · mean(diag K) · I`` (:func:`add_jitter`).

    Args:
        K: symmetric positive (semi-)definite matrix, shape (M, M).
        jitter: relative jitter; ``None`` applies the policy for ``K.dtype``, ``0.0`` none.

    Returns:
        L, shape (M, M), lower triangular; NaN-filled when the factorisation fails.
    """
    return jnp.linalg.cholesky(add_jitter(K, jitter))


def solve_lower(L: jax.Array, B: jax.Array) -> jax.Array:
    """L⁻¹ B for lower-triangular L."""
    return jsl.solve_triangular(L, B, lower=True)


def solve_upper(L: jax.Array, B: jax.Array) -> jax.Array:
    """L⁻ᵀ B for lower-triangular L."""
    return jsl.solve_triangular(L, B, lower=True, trans="T")


#: Order at and below which :func:`triangular_inverse` solves against I instead of splitting further.
TRIANGULAR_INVERSE_LEAF = 32


@full_precision
def triangular_inverse(L: jax.Array) -> jax.Array:
    """L⁻¹ for lower-triangular L (..., n, n), by 2×2 blocks: the recursive method of §14.2.2 of [6].

    With L = [[A, 0], [C, D]], L⁻¹ = [[A⁻¹, 0], [−D⁻¹ C A⁻¹, D⁻¹]]: the two diagonal blocks recursively,
    the off-diagonal block by two matrix products, and a triangular solve against I only for blocks of
    order ≤ :data:`TRIANGULAR_INVERSE_LEAF`. The same forward error as a solve against I (~ε·cond(L),
    [6] §8.2 and §14.2), with the work in matrix products, which XLA's CPU runtime runs several times
    faster per flop than a triangular solve whose right-hand side is the identity.

    Args:
        L: (..., n, n) lower-triangular, non-singular.

    Returns:
        (..., n, n) lower-triangular L⁻¹.
    """
    n = L.shape[-1]
    if n <= TRIANGULAR_INVERSE_LEAF:
        return solve_lower(L, jnp.broadcast_to(jnp.eye(n, dtype=L.dtype), L.shape))
    h = n // 2
    A_inv = triangular_inverse(L[..., :h, :h])
    D_inv = triangular_inverse(L[..., h:, h:])
    lower_left = -D_inv @ (L[..., h:, :h] @ A_inv)
    zeros = jnp.zeros((*L.shape[:-2], h, n - h), dtype=L.dtype)
    return jnp.concatenate(
        [jnp.concatenate([A_inv, zeros], axis=-1), jnp.concatenate([lower_left, D_inv], axis=-1)], axis=-2
    )


@full_precision
def inverse_from_chol(L: jax.Array) -> jax.Array:
    """(L Lᵀ)⁻¹ = L⁻ᵀ L⁻¹ from a lower-triangular factor (n, n), as LAPACK's ``potri``."""
    Linv = triangular_inverse(L)
    return Linv.T @ Linv


def cho_solve(L: jax.Array, B: jax.Array) -> jax.Array:
    """(L Lᵀ)⁻¹ B."""
    return solve_upper(L, solve_lower(L, B))


def logdet_from_chol(L: jax.Array) -> jax.Array:
    """log|L Lᵀ| = 2 Σ log diag L."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)


def finite_or_neg_inf(logp: jax.Array) -> jax.Array:
    """Map a NaN/±inf log density (a failed factorisation) to -inf, so NUTS rejects the step."""
    return jnp.where(jnp.isfinite(logp), logp, -jnp.inf)


#: What a LOO pass returns per point: ``"log_density"`` log p(y_i | y_−i), ``"pit"`` P(y_i' ≤ y_i | y_−i),
#: ``"residual"`` y_i − E[y_i | y_−i].
LOO_STATISTICS: tuple[str, ...] = ("log_density", "pit", "residual")


def loo_from_precision(
    precision_diag: jax.Array, precision_y: jax.Array, statistic: str = "log_density"
) -> jax.Array:
    """log p(y_i | y_−i) for y ~ N(0, C) from diag(C⁻¹) and C⁻¹y, shape (N,); or its CDF at y_i.

    The conditional is N(y_i − [C⁻¹y]_i / [C⁻¹]_ii, 1 / [C⁻¹]_ii) (eqs. (5.10)–(5.12) of [3]; [4]). Every
    LOO conditional of the package (exact GP, and the SoR family's through
    :func:`bayes_rbfn.gp.block_loo.sor_loo`) is this formula.

    Args:
        precision_diag: diag(C⁻¹), shape (N,).
        precision_y: C⁻¹y, shape (N,).
        statistic: ``"log_density"``, or ``"pit"``: the probability integral transform Φ(z_i) of y_i under
            its conditional, z_i = (y_i − μ_−i)/σ_−i = [C⁻¹y]_i / √[C⁻¹]_ii (LOO-PIT, [5] §6.3); or
            ``"residual"``: y_i − μ_−i = [C⁻¹y]_i / [C⁻¹]_ii, the LOO residual (for LOO-R²).
    """
    if statistic == "residual":
        return precision_y / precision_diag
    if statistic == "pit":
        return jax.scipy.special.ndtr(precision_y * jax.lax.rsqrt(precision_diag))
    return 0.5 * (jnp.log(precision_diag) - _LOG_2PI) - 0.5 * precision_y**2 / precision_diag


@full_precision
def loo_from_chol(L: jax.Array, y: jax.Array, statistic: str = "log_density") -> jax.Array:
    """log p(y_i | y_−i) for y ~ N(0, L Lᵀ) from a lower-triangular factor L (n, n), shape (n,), in O(n³).

    diag(C⁻¹) is the column sums of (L⁻¹)² and C⁻¹y = L⁻ᵀ L⁻¹ y, both sums of products with no
    subtraction of large numbers; then :func:`loo_from_precision`. The signs of diag L do not matter (a
    factor from a QR decomposition will do).
    """
    Linv = triangular_inverse(L)
    return loo_from_precision(jnp.sum(Linv * Linv, axis=0), Linv.T @ (Linv @ y), statistic)


def gaussian_logpdf_from_chol(L: jax.Array, r: jax.Array) -> jax.Array:
    """log N(r | 0, L Lᵀ) for a dense factor L (the exact GP path)."""
    w = solve_lower(L, r)
    n = r.shape[-1]
    return -0.5 * (jnp.sum(w * w) + logdet_from_chol(L) + n * _LOG_2PI)


@jax.custom_vjp
def dense_gaussian_logpdf(C: jax.Array, r: jax.Array) -> jax.Array:
    """log N(r | 0, C) for a dense (n, n) covariance C, through its Cholesky factor, with a written gradient.

    The value is :func:`gaussian_logpdf_from_chol` of chol(C) (eq. (2.30) of [3]). The gradient is the
    closed form ∂/∂C = ½(ααᵀ − C⁻¹), ∂/∂r = −α with α = C⁻¹r (eq. (5.9) of [3]), C⁻¹ from
    :func:`inverse_from_chol`, where differentiating through the
    factorisation and its solves takes several triangular solves of that size. A failed factorisation
    gives NaN (callers map it to -inf with :func:`finite_or_neg_inf`).

    Args:
        C: (n, n) symmetric positive definite covariance.
        r: (n,) residual.

    Returns:
        The scalar log density.
    """
    return _dense_gaussian_logpdf_fwd(C, r)[0]


@full_precision
def _dense_gaussian_logpdf_fwd(C: jax.Array, r: jax.Array) -> tuple[jax.Array, tuple]:
    L = jnp.linalg.cholesky(C)
    return gaussian_logpdf_from_chol(L, r), (L, r)


@full_precision
def _dense_gaussian_logpdf_bwd(residuals: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    L, r = residuals
    C_inv = inverse_from_chol(L)
    alpha = C_inv @ r
    return 0.5 * g * (jnp.outer(alpha, alpha) - C_inv), -g * alpha


dense_gaussian_logpdf.defvjp(_dense_gaussian_logpdf_fwd, _dense_gaussian_logpdf_bwd)


class Woodbury(NamedTuple):
    """Factorisation of C = K_fu K_uu⁻¹ K_uf + diag(d) in whitened form; see the module docstring.

    Attributes:
        Luu: (M, M) Cholesky factor of K_uu (with jitter).
        LB: (M, M) Cholesky factor of B = I + L_uu⁻¹ K_uf D⁻¹ K_fu L_uu⁻ᵀ.
        c: (M,) L_B⁻¹ L_uu⁻¹ K_uf D⁻¹ y.
        logdet: log|C|.
        quad: yᵀ C⁻¹ y: rᵀD⁻¹r + ‖L_B⁻ᵀ c‖² from the streamed factor (:meth:`with_residuals`), the
            difference yᵀD⁻¹y − ‖c‖² (which cancels for small noise) from :func:`woodbury` alone.
        n: number of data points N.
    """

    Luu: jax.Array
    LB: jax.Array
    c: jax.Array
    logdet: jax.Array
    quad: jax.Array
    n: int

    def log_marginal_likelihood(self) -> jax.Array:
        """log N(y | 0, C) = −½ (yᵀC⁻¹y + log|C| + N log 2π)."""
        return -0.5 * (self.quad + self.logdet + self.n * _LOG_2PI)

    def weight_mean(self) -> jax.Array:
        """Posterior mean of the RBFN weights, Σ K_uf D⁻¹ y = L_uu⁻ᵀ L_B⁻ᵀ c, shape (M,)."""
        return solve_upper(self.Luu, solve_upper(self.LB, self.c))

    def with_residuals(self, residual_sq: jax.Array) -> Woodbury:
        """The same factorisation with yᵀC⁻¹y = rᵀD⁻¹r + ‖v‖², given ``residual_sq`` = rᵀD⁻¹r.

        r = y − K_fu m are the residuals of the weight mean m (:meth:`weight_mean`) and v = L_uuᵀ m =
        L_B⁻ᵀ c its whitened form: both terms are sums of squares, with no cancellation (see the module
        docstring); ``residual_sq`` comes from the second sweep of
        :func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor`.
        """
        v = solve_upper(self.LB, self.c)
        return self._replace(quad=residual_sq + jnp.sum(v * v))

    def weight_cov_factor(self) -> jax.Array:
        """R = L_B⁻¹ L_uu⁻¹ (M, M), so that the weights' posterior covariance is Σ = Rᵀ R."""
        return solve_lower(self.LB, solve_lower(self.Luu, jnp.eye(self.Luu.shape[0], dtype=self.Luu.dtype)))


def woodbury(Luu: jax.Array, stats: tuple, n: Any) -> Woodbury:
    """Factorise C = K_fu K_uu⁻¹ K_uf + diag(d) from its data sums, in O(M³).

    Args:
        Luu: (M, M) Cholesky factor of K_uu (see :func:`cholesky`).
        stats: the whitened sums (AAᵀ (M, M), A D^-½ y (M,), yᵀD⁻¹y, Σ log d) with A = L_uu⁻¹ K_uf D^-½,
            from the streamed pass :func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats` (reduced across devices
            when sharded).
        n: the number of data points counted in the 2π term (N; masked layouts count fewer).

    Returns:
        A :class:`Woodbury` from which the log marginal likelihood, LOO conditionals, weight
        posterior and predictive moments follow. Its ``quad`` is the difference yᵀD⁻¹y − ‖c‖², exact
        in exact arithmetic but cancelling when d is small (see the module docstring):
        :func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor` replaces it by the residual form.
    """
    AAt, Ay, yDy, logdet_d = stats
    B = AAt + jnp.eye(Luu.shape[0], dtype=AAt.dtype)
    LB = jnp.linalg.cholesky(B)
    c = solve_lower(LB, Ay)
    logdet = logdet_d + logdet_from_chol(LB)
    quad = yDy - jnp.sum(c * c)
    return Woodbury(Luu=Luu, LB=LB, c=c, logdet=logdet, quad=quad, n=n)
