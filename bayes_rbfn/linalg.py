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
numpyro's ``LowRankMultivariateNormal`` makes for its capacitance matrix). Only the M×M statistics
K_uf D⁻¹ K_fu and K_uf D⁻¹ y need a pass over the data; they are plain sums over data points, which is
what makes the path fast (one GEMM instead of a triangular solve against all N columns) and trivially
data-parallel (the sums shard over devices). The price is that L_uu⁻¹ is applied to an M×M product,
so rounding grows with cond(K_uu) rather than its square root; the jitter below bounds cond(K_uu).

Jitter policy (DESIGN §5): a failed or ill-conditioned Cholesky of a kernel matrix is prevented by
adding ``jitter · mean(diag K)`` to its diagonal, with ``jitter`` set by the dtype
(:data:`JITTER`). Pass ``jitter=0.0`` to factorise the matrix as it is.

Inside traced code a failed factorisation shows up as NaN; :func:`finite_or_neg_inf` turns a log
density into -inf in that case so NUTS rejects the step. Outside traced code the public entry points
raise :class:`FactorisationError`.

References
----------
[1] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[2] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

__all__ = [
    "JITTER",
    "FactorisationError",
    "default_jitter",
    "cholesky",
    "solve_lower",
    "solve_upper",
    "cho_solve",
    "logdet_from_chol",
    "finite_or_neg_inf",
    "Woodbury",
    "woodbury",
]

#: Relative jitter, multiplied by the mean diagonal of the matrix being factorised.
JITTER: dict[Any, float] = {jnp.dtype("float64"): 1e-8, jnp.dtype("float32"): 1e-4}

_LOG_2PI = float(np.log(2.0 * np.pi))


class FactorisationError(ValueError):
    """A kernel matrix could not be factorised (not positive definite to working precision)."""


def default_jitter(dtype: Any) -> float:
    """The relative jitter of the policy for ``dtype`` (float64: 1e-8, float32: 1e-4)."""
    return JITTER.get(jnp.dtype(dtype), JITTER[jnp.dtype("float32")])


def cholesky(K: jax.Array, jitter: float | None = None) -> jax.Array:
    """Lower Cholesky factor of ``K + jitter · mean(diag K) · I``.

    Args:
        K: symmetric positive (semi-)definite matrix, shape (M, M).
        jitter: relative jitter; ``None`` applies the policy for ``K.dtype``, ``0.0`` none.

    Returns:
        L, shape (M, M), lower triangular; NaN-filled when the factorisation fails.
    """
    jitter = default_jitter(K.dtype) if jitter is None else jitter
    if jitter:
        scale = jnp.mean(jnp.diagonal(K))
        K = K + (jitter * scale) * jnp.eye(K.shape[-1], dtype=K.dtype)
    return jnp.linalg.cholesky(K)


def solve_lower(L: jax.Array, B: jax.Array) -> jax.Array:
    """L⁻¹ B for lower-triangular L."""
    return jsl.solve_triangular(L, B, lower=True)


def solve_upper(L: jax.Array, B: jax.Array) -> jax.Array:
    """L⁻ᵀ B for lower-triangular L."""
    return jsl.solve_triangular(L, B, lower=True, trans="T")


def cho_solve(L: jax.Array, B: jax.Array) -> jax.Array:
    """(L Lᵀ)⁻¹ B."""
    return solve_upper(L, solve_lower(L, B))


def logdet_from_chol(L: jax.Array) -> jax.Array:
    """log|L Lᵀ| = 2 Σ log diag L."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)


def finite_or_neg_inf(logp: jax.Array) -> jax.Array:
    """Map a NaN/±inf log density (a failed factorisation) to -inf, so NUTS rejects the step."""
    return jnp.where(jnp.isfinite(logp), logp, -jnp.inf)


def gaussian_logpdf_from_chol(L: jax.Array, r: jax.Array) -> jax.Array:
    """log N(r | 0, L Lᵀ) for a dense factor L (the exact GP path)."""
    w = solve_lower(L, r)
    n = r.shape[-1]
    return -0.5 * (jnp.sum(w * w) + logdet_from_chol(L) + n * _LOG_2PI)


class Woodbury(NamedTuple):
    """Factorisation of C = K_fu K_uu⁻¹ K_uf + diag(d) in whitened form; see the module docstring.

    Attributes:
        Luu: (M, M) Cholesky factor of K_uu (with jitter).
        LB: (M, M) Cholesky factor of B = I + L_uu⁻¹ K_uf D⁻¹ K_fu L_uu⁻ᵀ.
        c: (M,) L_B⁻¹ L_uu⁻¹ K_uf D⁻¹ y.
        logdet: log|C|.
        quad: yᵀ C⁻¹ y.
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

    def project(self, Kuv: jax.Array) -> tuple[jax.Array, jax.Array]:
        """For cross-covariances K_uv (M, S): (L_uu⁻¹ K_uv, L_B⁻¹ L_uu⁻¹ K_uv), both (M, S).

        ‖first‖² per column is Q_vv's diagonal; ‖second‖² per column is the posterior variance
        K_vu Σ K_uv of the RBFN weights' image, Σ = (K_uu + K_uf D⁻¹ K_fu)⁻¹.
        """
        whitened = solve_lower(self.Luu, Kuv)
        return whitened, solve_lower(self.LB, whitened)

    def weight_mean(self) -> jax.Array:
        """Posterior mean of the RBFN weights, Σ K_uf D⁻¹ y = L_uu⁻ᵀ L_B⁻ᵀ c, shape (M,)."""
        return solve_upper(self.Luu, solve_upper(self.LB, self.c))

    def weight_cov_factor(self) -> jax.Array:
        """R = L_B⁻¹ L_uu⁻¹ (M, M), so that the weights' posterior covariance is Σ = Rᵀ R."""
        return solve_lower(self.LB, solve_lower(self.Luu, jnp.eye(self.Luu.shape[0], dtype=self.Luu.dtype)))


def woodbury(
    Luu: jax.Array, Kuf: jax.Array, y: jax.Array, d: jax.Array, *, stats: tuple | None = None
) -> Woodbury:
    """Factorise C = K_fu K_uu⁻¹ K_uf + diag(d) for the data vector y, in O(NM² + M³).

    Args:
        Luu: (M, M) Cholesky factor of K_uu (see :func:`cholesky`).
        Kuf: (M, N) cross-covariance k(Z, X).
        y: (N,) data (already centred if the model has a mean).
        d: (N,) or scalar, the diagonal part (σ² for SoR/DTC; σ² + K_ff − Q_ff for FITC).
        stats: optionally the precomputed sums (K_uf D⁻¹ K_fu, K_uf D⁻¹ y, yᵀ D⁻¹ y, Σ log d), e.g.
            reduced across devices; when given, Kuf and y are not read.

    Returns:
        A :class:`Woodbury` from which the log marginal likelihood, LOO conditionals, weight
        posterior and predictive moments follow.
    """
    if stats is None:
        stats = woodbury_stats(Kuf, y, d)
    KufDKfu, KufDy, yDy, logdet_d, n = stats
    whitened_y = solve_lower(Luu, KufDy)
    # L_uu⁻¹ (K_uf D⁻¹ K_fu) L_uu⁻ᵀ by two triangular solves on an M×M matrix.
    AAt = solve_lower(Luu, solve_lower(Luu, KufDKfu).T).T
    AAt = 0.5 * (AAt + AAt.T)
    B = AAt + jnp.eye(Luu.shape[0], dtype=AAt.dtype)
    LB = jnp.linalg.cholesky(B)
    c = solve_lower(LB, whitened_y)
    logdet = logdet_d + logdet_from_chol(LB)
    quad = yDy - jnp.sum(c * c)
    return Woodbury(Luu=Luu, LB=LB, c=c, logdet=logdet, quad=quad, n=n)


def woodbury_stats(Kuf: jax.Array, y: jax.Array, d: jax.Array) -> tuple:
    """The data sums of :func:`woodbury`: (K_uf D⁻¹ K_fu, K_uf D⁻¹ y, yᵀ D⁻¹ y, Σ log d, N).

    These are the only O(NM²) work; every term is a sum over data points.
    """
    n = Kuf.shape[-1]
    d = jnp.broadcast_to(d, (n,))
    KufD = Kuf / d
    return KufD @ Kuf.T, KufD @ y, jnp.sum(y * y / d), jnp.sum(jnp.log(d)), n
