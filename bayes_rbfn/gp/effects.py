"""Group effects integrated out of the SoR family's marginal, in O(NM² + GM²).

A group effect adds one value per group to every point of the group: with g(i) ∈ {0, …, G−1} the group
of point i and H (N, G) the one-hot matrix of the codes,

    y = f + H β + ε,   f ~ the sparse GP (Q_ff = K_fu K_uu⁻¹ K_uf),   β_g ~ N(0, τ²),   ε ~ N(0, D),

with D = diag(d) (d = σ² or one σ_i² per point). Integrating β out gives y ~ N(0, Q_ff + E) with
E = D + τ² H Hᵀ, block-diagonal (one block per group) with a closed-form inverse and determinant, by the
matrix inversion lemma ([1] eq. (A.9)) on the G columns of H, whose weighted Gram Hᵀ D⁻¹ H = diag(s) is
diagonal:

    E⁻¹ = Ω − Ω H K Hᵀ Ω,   Ω = D⁻¹ = diag(ω),   K = diag(κ),   κ_g = τ² / (1 + τ² s_g),   s_g = Σ_{i∈g} ω_i,
    log|E| = Σ_i log d_i + Σ_g log(1 + τ² s_g).

The Woodbury factor of Q_ff + E (:class:`~bayes_rbfn.gp.linalg.Woodbury`) needs only the whitened sums of
the package's one streamed pass with weights ω (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`, A =
L_uu⁻¹ K_uf D^-½) less a rank-G correction from the group sums P = L_uu⁻¹ K_uf Ω H (M, G) and
h = Hᵀ Ω y (G,):

    L_uu⁻¹ K_uf E⁻¹ K_fu L_uu⁻ᵀ = AAᵀ − P K Pᵀ,   L_uu⁻¹ K_uf E⁻¹ y = A D^-½ y − P K h,
    yᵀ E⁻¹ y = yᵀ Ω y − hᵀ K h,

after which the M×M algebra of :func:`bayes_rbfn.gp.linalg.woodbury` is unchanged. This is the Schur
complement, on the diagonal block of the group columns, of the Woodbury matrix of the feature matrix
[K_fu L_uu⁻ᵀ, τH]: the effects are G extra columns of the network's design, integrated out at the cost of
M + 1 segment sums over the data instead of a factorisation of size M + G. K_uf (M, N) is formed once, for
the group sums and for the streamed pass, which reads it instead of evaluating the kernel again (its reverse
pass hands the cotangent of K_uf back to that one evaluation); nothing of size N × N or (M + G)².

The posterior of the effects, and posterior predictive replicates, follow from the same factor:
β | y ~ N(τ² Hᵀ C⁻¹ y, τ² I − τ⁴ Hᵀ C⁻¹ H) ([1] eq. (A.6) on the joint Gaussian of β and y), C = Q_ff + E.

References
----------
[1] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press,
    appendix A.3.
[2] Gelman, A. & Hill, J. (2007). *Data Analysis Using Regression and Multilevel/Hierarchical Models*,
    ch. 12 (varying intercepts).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import linalg, woodbury_sums
from bayes_rbfn.gp.conditional import Gaussian
from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.gp.validation import check_positive_int, is_concrete

__all__ = ["GroupTerms", "check_groups", "effect_moments", "factor", "group_terms", "loo", "replicates"]


class GroupTerms(NamedTuple):
    """What every formula of the module shares, for one set of hyperparameters.

    Attributes:
        omega: (N,) ω = 1/d. Kuf: (M, N) K_uf. s: (G,) s_g = Σ_{i∈g} ω_i.
        kappa: (G,) κ_g = τ²/(1 + τ² s_g). Q: (M, G) K_uf Ω H, the weighted group sums of K_uf's columns.
    """

    omega: jax.Array
    Kuf: jax.Array
    s: jax.Array
    kappa: jax.Array
    Q: jax.Array


def check_groups(
    codes: Any, n: int, name: str = "groups", num_groups: int | None = None
) -> tuple[jax.Array, int]:
    """(codes as int32, G) for integer codes 0 … G−1 of shape (n,), else a ``ValueError``.

    Concrete codes are checked and G is their largest value plus one, or ``num_groups`` where given (at
    least that). Traced codes (under ``jit``) need ``num_groups``: their values cannot be checked, and a
    code outside 0 … G−1 is dropped from the group sums.
    """
    if num_groups is not None:
        num_groups = check_positive_int(num_groups, "num_groups")
    if not is_concrete(codes):
        if num_groups is None:
            kind = type(codes).__name__
            raise ValueError(
                f"{name}: traced group codes ({kind}) need num_groups= (their number cannot be read)"
            )
        if jnp.shape(codes) != (n,):
            raise ValueError(f"{name}: expected shape ({n},), one code per row of X, got {jnp.shape(codes)}")
        return jnp.asarray(codes).astype(jnp.int32), num_groups
    values = np.asarray(codes)
    if values.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},), one code per row of X, got {values.shape}")
    if values.dtype.kind == "f" and np.all(np.isfinite(values)) and np.all(values == np.round(values)):
        values = values.astype(np.int64)
    if values.dtype.kind not in "iu" or (n and values.min() < 0):
        raise ValueError(f"{name}: expected integer codes ≥ 0 (0 … G−1), got dtype {values.dtype}")
    count = int(values.max()) + 1 if n else 0
    if num_groups is not None:
        if count > num_groups:
            raise ValueError(f"{name}: code {count - 1} is out of range for num_groups={num_groups}")
        count = num_groups
    return jnp.asarray(values, dtype=jnp.int32), count


def _group_sum(values: jax.Array, codes: jax.Array, num_groups: int) -> jax.Array:
    """Σ over the points of each group along the last axis: (..., N) → (..., G)."""
    summed = jax.ops.segment_sum(jnp.moveaxis(values, -1, 0), codes, num_groups)
    return jnp.moveaxis(summed, 0, -1)


@linalg.full_precision
def group_terms(
    kernel: Kernel, Z: jax.Array, X: jax.Array, d: Any, codes: jax.Array, num_groups: int, scale: Any
) -> GroupTerms:
    """The shared terms ω, K_uf, s, κ and K_uf Ω H (:class:`GroupTerms`) for d (scalar or (N,)) and τ."""
    Kuf = kernel.inducing_cross(Z, X)
    omega = jnp.broadcast_to(1.0 / jnp.asarray(d, dtype=Kuf.dtype), (X.shape[0],))
    s = _group_sum(omega, codes, num_groups)
    tau2 = jnp.asarray(scale, dtype=Kuf.dtype) ** 2
    kappa = tau2 / (1.0 + tau2 * s)
    return GroupTerms(omega, Kuf, s, kappa, _group_sum(Kuf * omega, codes, num_groups))


def _precision_times(terms: GroupTerms, r: jax.Array, codes: jax.Array, num_groups: int) -> jax.Array:
    """E⁻¹ r = Ω r − Ω H K Hᵀ Ω r, shape (N,)."""
    wr = terms.omega * r
    return wr - terms.omega * (terms.kappa * _group_sum(wr, codes, num_groups))[codes]


def _precision_residual(terms: GroupTerms, u: jax.Array, m: jax.Array, codes: jax.Array, G: int) -> jax.Array:
    """C⁻¹u = E⁻¹(u − K_fu m) for m the weight mean of data u (Woodbury), shape (N,)."""
    return _precision_times(terms, u - terms.Kuf.T @ m, codes, G)


@linalg.full_precision
def factor(
    kernel: Kernel,
    Z: jax.Array,
    X: jax.Array,
    y: jax.Array,
    d: Any,
    Luu: jax.Array,
    codes: jax.Array,
    num_groups: int,
    scale: Any,
    **settings: Any,
) -> tuple[linalg.Woodbury, GroupTerms]:
    """The Woodbury factor of C = Q_ff + D + τ² H Hᵀ for the centred y (the module docstring).

    Args:
        kernel: covariance function.
        Z: (M, D) inducing inputs.
        X: (N, D) inputs.
        y: (N,) centred data.
        d: the noise variance, scalar or (N,).
        Luu: (M, M) Cholesky factor of K_uu.
        codes: (N,) int group codes 0 … G−1.
        num_groups: G.
        scale: τ, the effects' standard deviation.
        settings: the streamed pass's settings (``fast``, ``chunk_size``, ``mesh``, ``precision`` of
            :func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`).

    Returns:
        (the :class:`~bayes_rbfn.gp.linalg.Woodbury` of C, its quadratic form in the residual form
        rᵀE⁻¹r + ‖L_B⁻ᵀc‖² (r = y − K_fu m, m the weight mean), as the streamed factor's; the
        :class:`GroupTerms` it was computed from, which :func:`loo`, :func:`effect_moments` and
        :func:`replicates` take).
    """
    terms = group_terms(kernel, Z, X, d, codes, num_groups, scale)
    AAt, Ay, yDy, logdet_d = woodbury_sums.woodbury_stats(kernel, Z, X, y, d, Luu, Kuf=terms.Kuf, **settings)
    P = linalg.solve_lower(Luu, terms.Q)
    h = _group_sum(terms.omega * y, codes, num_groups)
    stats = (
        AAt - (P * terms.kappa) @ P.T,
        Ay - P @ (terms.kappa * h),
        yDy - jnp.sum(terms.kappa * h * h),
        logdet_d + jnp.sum(jnp.log1p(jnp.asarray(scale, dtype=y.dtype) ** 2 * terms.s)),
    )
    wood = linalg.woodbury(Luu, stats, n=y.shape[0])
    r = y - terms.Kuf.T @ wood.weight_mean()
    wood = wood.with_residuals(jnp.sum(r * _precision_times(terms, r, codes, num_groups)))
    return wood, terms


@linalg.full_precision
def loo(
    wood: linalg.Woodbury,
    terms: GroupTerms,
    y: jax.Array,
    codes: jax.Array,
    num_groups: int,
    statistic: str = "log_density",
) -> jax.Array:
    """The N leave-one-out conditionals of y ~ N(0, Q_ff + E) (or their PIT or residuals), shape (N,).

    C⁻¹ = E⁻¹ − E⁻¹ K_fu Rᵀ R K_uf E⁻¹ with R = L_B⁻¹ L_uu⁻¹ (Woodbury), so diag(C⁻¹)_i = ω_i − ω_i² κ_{g(i)}
    − ‖V_:i‖², V = R K_uf E⁻¹, and C⁻¹y = E⁻¹ r for the residuals r = y − K_fu m of the weight mean; then
    :func:`bayes_rbfn.gp.linalg.loo_from_precision`.

    Args:
        wood: the :class:`~bayes_rbfn.gp.linalg.Woodbury` :func:`factor` returned for y.
        terms: the :class:`GroupTerms` :func:`factor` returned for y.
        y: (N,) the centred data.
        codes: (N,) int group codes 0 … G−1, as :func:`factor`.
        num_groups: G, as :func:`factor`.
        statistic: one of :data:`bayes_rbfn.gp.linalg.LOO_STATISTICS`.
    """
    if statistic not in linalg.LOO_STATISTICS:
        raise ValueError(f"statistic: expected one of {linalg.LOO_STATISTICS}, got {statistic!r}")
    kappa_i = terms.kappa[codes]
    KufE = (terms.Kuf - terms.Q[:, codes] * kappa_i) * terms.omega
    V = linalg.solve_lower(wood.LB, linalg.solve_lower(wood.Luu, KufE))
    precision_diag = terms.omega - terms.omega**2 * kappa_i - jnp.sum(V * V, axis=0)
    precision_y = _precision_residual(terms, y, wood.weight_mean(), codes, num_groups)
    return linalg.loo_from_precision(precision_diag, precision_y, statistic)


@linalg.full_precision
def effect_moments(
    wood: linalg.Woodbury, terms: GroupTerms, y: jax.Array, codes: jax.Array, num_groups: int, scale: Any
) -> Gaussian:
    """The posterior of the effects β | y: mean τ² Hᵀ C⁻¹ y and variance τ² − τ⁴ [Hᵀ C⁻¹ H]_gg, (G,) each.

    With K_uf E⁻¹ H = Q diag(1/(1 + τ² s)) and Hᵀ E⁻¹ H = diag(s/(1 + τ² s)), the variance is
    κ_g + τ⁴ ‖R Q_g‖²/(1 + τ² s_g)² (R = L_B⁻¹ L_uu⁻¹): each group's shrunk prior variance plus what the
    uncertainty of the GP part adds. Arguments as :func:`loo`; ``scale`` τ.
    """
    tau2 = jnp.asarray(scale, dtype=y.dtype) ** 2
    precision_y = _precision_residual(terms, y, wood.weight_mean(), codes, num_groups)
    mean = tau2 * _group_sum(precision_y, codes, num_groups)
    VH = linalg.solve_lower(wood.LB, linalg.solve_lower(wood.Luu, terms.Q)) / (1.0 + tau2 * terms.s)
    return Gaussian(mean=mean, var=terms.kappa + tau2**2 * jnp.sum(VH * VH, axis=0))


@linalg.full_precision
def replicates(
    wood: linalg.Woodbury,
    terms: GroupTerms,
    y: jax.Array,
    codes: jax.Array,
    num_groups: int,
    scale: Any,
    key: jax.Array,
    sample_shape: tuple[int, ...] = (),
) -> jax.Array:
    """Posterior predictive replicates y_rep = f + Hβ + ε' at X given y, shape sample_shape + (N,).

    g = f + Hβ given y by conditioning a prior draw on the data ([1] eq. (A.6) applied to a draw: Matheron's
    rule): with (g̃, ỹ = g̃ + ε̃) from the prior, g = g̃ + (C − D) C⁻¹ (y − ỹ) has the posterior of g exactly,
    C⁻¹u = E⁻¹(u − K_fu m(u)) from the factor (m(u) the weight mean for data u); then ε' ~ N(0, D).
    O(NM) per draw after the factor. Arguments as :func:`effect_moments`; ``key`` a PRNG key.
    """
    k_weights, k_groups, k_noise, k_new = jax.random.split(key, 4)
    dtype = y.dtype
    M, N = terms.Kuf.shape
    v = jax.random.normal(k_weights, (*sample_shape, M), dtype=dtype)
    factor_f = linalg.solve_lower(wood.Luu, terms.Kuf)  # (M, N): rows of K_fu L_uu⁻ᵀ as columns
    z = jax.random.normal(k_groups, (*sample_shape, num_groups), dtype=dtype)
    g_prior = v @ factor_f + jnp.asarray(scale, dtype=dtype) * z[..., codes]
    sd = jnp.sqrt(1.0 / terms.omega)
    u = y - g_prior - sd * jax.random.normal(k_noise, (*sample_shape, N), dtype=dtype)

    def precision_times(u_one: jax.Array) -> jax.Array:
        """C⁻¹ u for one (N,) vector."""
        b = linalg.solve_lower(wood.Luu, terms.Kuf @ _precision_times(terms, u_one, codes, num_groups))
        m = linalg.solve_upper(wood.Luu, linalg.cho_solve(wood.LB, b))
        return _precision_residual(terms, u_one, m, codes, num_groups)

    Cinv_u = jax.vmap(precision_times)(u.reshape(-1, N)).reshape(u.shape)
    g = g_prior + u - Cinv_u / terms.omega
    return g + sd * jax.random.normal(k_new, g.shape, dtype=dtype)
