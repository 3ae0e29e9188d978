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
A D^-½ y (A = L_uu⁻¹ K_uf D^-½) need a pass over the data; they are plain sums over data points, so the
path is trivially data-parallel (the sums shard over devices). Two ways to take them:

* :func:`whitened_stats` (default) solves L_uu A = K_uf D^-½ against all N columns first, so rounding
  grows only with √cond(K_uu): the identities of DESIGN §3 hold to ~1e-12 even for close inducing inputs;
* :func:`fast_stats` forms K_uf D⁻¹ K_fu with one GEMM and whitens the M×M result: no N-column
  triangular solve (the floor of any exact SoR likelihood), but rounding grows with cond(K_uu).

:mod:`bayes_rbfn.gp.parallel` takes the same sums without forming K_uf — streamed over cache-sized chunks,
whitened by a product with L_uu⁻¹, with a hand-written reverse pass, sharded over devices — and passes them
here through ``stats=``; the ``sor`` model uses it.

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
    "Woodbury",
    "cho_solve",
    "cholesky",
    "default_jitter",
    "fast_stats",
    "finite_or_neg_inf",
    "gaussian_logpdf_from_chol",
    "logdet_from_chol",
    "solve_lower",
    "solve_upper",
    "whitened_stats",
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
    Luu: jax.Array,
    Kuf: jax.Array,
    y: jax.Array,
    d: jax.Array,
    *,
    fast: bool = False,
    n: Any = None,
    stats: tuple | None = None,
) -> Woodbury:
    """Factorise C = K_fu K_uu⁻¹ K_uf + diag(d) for the data vector y, in O(NM² + M³).

    Args:
        Luu: (M, M) Cholesky factor of K_uu (see :func:`cholesky`).
        Kuf: (M, N) cross-covariance k(Z, X).
        y: (N,) data (already centred if the model has a mean).
        d: (N,) or scalar, the diagonal part (σ² for SoR/DTC; σ² + K_ff − Q_ff for FITC).
        fast: take the data sums with :func:`fast_stats` (one GEMM pass) instead of
            :func:`whitened_stats` (a triangular solve first; better conditioned). See the module docstring.
        n: the number of data points counted in the 2π term (default N; masked layouts pass fewer).
        stats: precomputed whitened sums (AAᵀ, A D^-½ y, yᵀD⁻¹y, Σ log d), e.g. reduced across devices;
            when given, Kuf and y are not read.

    Returns:
        A :class:`Woodbury` from which the log marginal likelihood, LOO conditionals, weight
        posterior and predictive moments follow.
    """
    if stats is None:
        stats = (fast_stats if fast else whitened_stats)(Luu, Kuf, y, d)
    AAt, Ay, yDy, logdet_d = stats
    n = Kuf.shape[-1] if n is None else n
    B = AAt + jnp.eye(Luu.shape[0], dtype=AAt.dtype)
    LB = jnp.linalg.cholesky(B)
    c = solve_lower(LB, Ay)
    logdet = logdet_d + logdet_from_chol(LB)
    quad = yDy - jnp.sum(c * c)
    return Woodbury(Luu=Luu, LB=LB, c=c, logdet=logdet, quad=quad, n=n)


def _diag_like(Kuf: jax.Array, d: jax.Array) -> jax.Array:
    # d takes the data's dtype: a weakly typed σ² (a Python float) must not turn Σ log d into float64
    # for float32 data (jnp.sum drops weak typing).
    return jnp.broadcast_to(jnp.asarray(d, dtype=jnp.result_type(Kuf, d)), (Kuf.shape[-1],))


def whitened_stats(Luu: jax.Array, Kuf: jax.Array, y: jax.Array, d: jax.Array) -> tuple:
    """Data sums of :func:`woodbury` through A = L_uu⁻¹ K_uf D^-½ (M, N): (AAᵀ, A D^-½ y, yᵀD⁻¹y, Σ log d).

    The triangular solve against all N columns comes first, so rounding grows with √cond(K_uu)
    (GPflow's SGPR and Titsias (2009) do the same). Every term is a sum over data points.
    """
    d = _diag_like(Kuf, d)
    root_d = jnp.sqrt(d)
    A = solve_lower(Luu, Kuf) / root_d
    return A @ A.T, A @ (y / root_d), jnp.sum(y * y / d), jnp.sum(jnp.log(d))


def fast_stats(Luu: jax.Array, Kuf: jax.Array, y: jax.Array, d: jax.Array) -> tuple:
    """Data sums of :func:`woodbury` from one GEMM pass: K_uf D⁻¹ K_fu and K_uf D⁻¹ y, whitened afterwards
    on M×M matrices. Fastest (no N-column triangular solve), but rounding grows with cond(K_uu)."""
    d = _diag_like(Kuf, d)
    KufD = Kuf / d
    AAt = solve_lower(Luu, solve_lower(Luu, KufD @ Kuf.T).T).T
    return 0.5 * (AAt + AAt.T), solve_lower(Luu, KufD @ y), jnp.sum(y * y / d), jnp.sum(jnp.log(d))
