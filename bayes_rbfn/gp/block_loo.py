"""The LOO conditionals of the SoR family in O(NM²), leaving out blocks where leverages reach 1.

:func:`sor_loo` gives log p(y_i | y_−i) (or the LOO-PIT value, or the LOO residual) for every point of
y ~ N(0, C), C = Q_ff + diag(d), from the factor of :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_factor`,
in passes over the data that stream, block and shard like the sums (:mod:`~bayes_rbfn.gp.streaming`):

* **The Woodbury pass.** diag(C⁻¹) = 1/d − ‖V_:i‖² with V = R K_uf D⁻¹, R = L_B⁻¹ L_uu⁻¹, and C⁻¹y from
  the residuals of the weight mean: one kernel block and one product per chunk, in the block layout of
  the sums so that every point sits in the same chunk on one device and on several.
* **Leave-block-out LOO where leverages reach 1.** The Woodbury pass takes diag(C⁻¹) = 1/d − ‖V_:i‖²
  from the sums, which cancels at points the model interpolates (1 − h_i ~ σ²/s²). :func:`sor_loo` flags
  the points whose 1 − h_i falls below :data:`LOO_LEVERAGE_FLOOR` and takes theirs from a second pass
  that subtracts nothing: for each leaf block B of ~M points, the weights' posterior given the other
  points, A_out = I + Σ_{j∉B} ω_j a_j a_jᵀ, as a QR square root assembled from exclusive prefixes and
  suffixes over blocks, chunks and leaves (per-chunk R factors, (M+1)² numbers each; sharded, one
  all-gather of the per-block ones), then the exact |B|-variate LOO of y_B | y_−B ~ N(F_B μ_out,
  F_B A_out⁻¹ F_Bᵀ + D_B). Memory O(CM + M² · chunks); chunks without a flagged point are skipped.

References
----------
[1] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
[2] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press.
    Eqs. (5.10)–(5.12) (LOO from the inverse covariance).
[3] Cox, A. J. & Higham, N. J. (1998). Stability of Householder QR factorization for weighted least squares
    problems. In *Numerical Analysis 1997*, Pitman Research Notes in Mathematics 380, 57–73 (row-wise
    backward stability with column pivoting and row sorting); see also [4] ch. 19.
[4] Higham, N. J. (2002). *Accuracy and Stability of Numerical Algorithms*, 2nd ed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from bayes_rbfn.gp import linalg, streaming, woodbury_sums
from bayes_rbfn.gp.kernels import Kernel

__all__ = ["LOO_LEVERAGE_FLOOR", "sor_loo"]

#: :func:`sor_loo` takes a point's conditional from the leave-block-out pass (:func:`_leave_block_out_loo`)
#: where its 1 − h_i = d_i [C⁻¹]_ii from the Woodbury pass is below this (or not a number): about ε^¼,
#: chosen from measurements against 60 digits (tests/gp/test_small_noise.py's problems, σ/s from 1e-2 to
#: 1e-8). There the Woodbury values were within 4e-12 for 1e-4 ≤ 1 − h_i < 1e-3 (and at the problems'
#: own floor, ≤ 7e-9, for 1 − h_i > 0.1), but off by up to 7e-8 at 1 − h_i = 5e-5, 3e-6 below 1e-6,
#: 9e-4 below 1e-10, and NaN; the leave-block-out values were within 3e-9 (the same floor) everywhere.
#: Data with σ²/Var(f_i | y_−i) above the floor (σ/s ≳ 0.01 in float64) never take the second pass.
LOO_LEVERAGE_FLOOR: dict[Any, float] = {jnp.dtype("float64"): 1e-4, jnp.dtype("float32"): 1e-2}


@jax.custom_batching.custom_vmap
def _any_over_batch(flag: jax.Array) -> jax.Array:
    """``jnp.any(flag)``; under ``vmap`` the any over the whole batch, an unbatched bool.

    Unbatched so that a ``lax.cond`` on it stays a branch (taken by every member) instead of a select that
    runs both branches for every member. The argument must carry no gradient (``lax.stop_gradient``).
    """
    return jnp.any(flag)


@_any_over_batch.def_vmap
def _any_over_batch_rule(axis_size: int, in_batched: list, flag: jax.Array) -> tuple[jax.Array, bool]:
    return _any_over_batch(flag), False


def _r_factor(G: jax.Array) -> jax.Array:
    """The (n, n) upper-triangular R of a Householder QR of G (k, n), zero rows appended when k < n.

    RᵀR = GᵀG, a square root of the information in G's rows, formed without forming GᵀG.
    """
    n = G.shape[-1]
    R = jnp.linalg.qr(G, mode="r")
    if R.shape[-2] < n:
        R = jnp.concatenate([R, jnp.zeros((n - R.shape[-2], n), R.dtype)])
    return R


def _stacked_r(*Rs: jax.Array) -> jax.Array:
    """R of the rows of all ``Rs`` stacked: (Σ_k R_kᵀR_k)^½ in triangular form, by orthogonal rotations."""
    return _r_factor(jnp.concatenate(Rs, axis=-2))


def _exclusive_r(Rs: jax.Array, reverse: bool = False) -> tuple[jax.Array, jax.Array]:
    """(R of all of ``Rs`` (K, n, n), and for each k the R of those before k, or after k if ``reverse``)."""
    zero = streaming.varying_like(jnp.zeros(Rs.shape[1:], Rs.dtype), Rs)
    return lax.scan(lambda carry, R: (_stacked_r(carry, R), carry), zero, Rs, reverse=reverse)


def _leaf_size(M: int, C: int) -> int:
    """Points per leaf block of the leave-block-out pass: ~M (its O(M³) per leaf against O(b³) within)."""
    return int(min(C, max(8, M)))


def _leaf_loo(
    R_pre: jax.Array,
    R_suf: jax.Array,
    F_B: jax.Array,
    y_B: jax.Array,
    w_B: jax.Array,
    statistic: str = "log_density",
) -> jax.Array:
    """LOO conditionals of the b points of one leaf block B given all others, from square-root information.

    ``R_pre``, ``R_suf`` (M+1, M+1) hold, in the row space of the augmented data rows
    √ω_j [a_jᵀ, y_j], the points before and after B (whatever of the data is not in B). F_B (b, M) are
    the whitened rows a_jᵀ of B, y_B and w_B = ω_B (b,) their targets and weights (0: padding).
    """
    M = F_B.shape[1]
    prior = jnp.concatenate([jnp.eye(M, dtype=F_B.dtype), jnp.zeros((M, 1), F_B.dtype)], axis=1)
    G = jnp.concatenate([R_pre, R_suf, prior])
    # A_out = I + Σ_{j∉B} ω_j a_j a_jᵀ = G_aᵀ G_a (G_a: G's first M columns); b_out = G_aᵀ g (g: its last).
    # Rows sorted by size and columns pivoted make the Householder QR row-wise backward stable [3], so
    # the prior's rows keep their digits next to rows of size 1/σ: the "I +" that a formed A_out loses.
    G = G[jnp.argsort(-jnp.max(jnp.abs(G[:, :M]), axis=1), stable=True)]
    Q, L_out_t, piv = jsl.qr(G[:, :M], mode="economic", pivoting=True)  # G_a[:, piv] = Q L_outᵀ
    F_p = F_B[:, piv]
    mu_out = jsl.solve_triangular(L_out_t, Q.T @ G[:, M])  # μ_out = A_out⁻¹ b_out (pivoted order)
    H_t = jsl.solve_triangular(L_out_t, F_p.T, trans="T")  # (M, b): (F_B L_out⁻ᵀ)ᵀ
    real = w_B > 0
    d_half = jnp.where(real, lax.rsqrt(jnp.where(real, w_B, 1.0)), 1.0)
    # S_B = F_B A_out⁻¹ F_Bᵀ + D_B = R_SᵀR_S from the rows [H; D_B^½], not formed either; a padded point is
    # made independent of the rest (its row of H zero, d = 1) so that it conditions nothing.
    R_S = _r_factor(jnp.concatenate([jnp.where(real[None, :], H_t, 0.0), jnp.diag(d_half)]))
    return linalg.loo_from_chol(R_S.T, jnp.where(real, y_B - F_p @ mu_out, 0.0), statistic)


def _leave_block_out_local(
    shared: tuple,
    X: jax.Array,
    y: jax.Array,
    w: jax.Array,
    flag: jax.Array,
    *,
    layout: tuple,
    gather,
    first,
    statistic: str = "log_density",
) -> jax.Array:
    """One device's share of :func:`_leave_block_out_loo`: the LOO conditionals of its points, (rows,).

    Zero in chunks without a flagged point. ``layout`` = (blocks here, chunks per block, chunk length);
    ``gather`` puts the per-block R of every device's blocks together in block order; ``first`` is the
    index of this device's first block.
    """
    kernel, Z, W = shared
    n_blocks, per_block, C = layout
    M = W.shape[0]
    b = _leaf_size(M, C)
    n_leaves = -(-C // b)

    def rows(x, yc, wc):
        """(C, M+1) augmented rows √ω [aᵀ, y] and the (C, M) whitened rows aᵀ, a = L_uu⁻¹ k_u(x)."""
        F = (W @ kernel.inducing_cross(Z, x)).T
        s = jnp.where(wc > 0, jnp.sqrt(jnp.where(wc > 0, wc, 1.0)), 0.0)
        return jnp.concatenate([F, yc[:, None]], axis=1) * s[:, None], F

    chunks = tuple(a.reshape(n_blocks * per_block, C, *a.shape[1:]) for a in (X, y, w, flag))
    # R of every chunk, then per block: the chunks before / after each chunk, and the block's whole R.
    R_chunk = lax.map(lambda c: _r_factor(rows(*c[:3])[0]), chunks).reshape(n_blocks, per_block, M + 1, M + 1)
    R_block, R_before = jax.vmap(_exclusive_r)(R_chunk)
    R_after = jax.vmap(functools.partial(_exclusive_r, reverse=True))(R_chunk)[1]
    # The blocks of every device, in block order (the same numbers on one device and on several).
    R_all = gather(R_block)
    R_other_blocks = jax.vmap(_stacked_r)(
        lax.dynamic_slice_in_dim(_exclusive_r(R_all)[1], first, n_blocks),
        lax.dynamic_slice_in_dim(_exclusive_r(R_all, reverse=True)[1], first, n_blocks),
    )
    # R of everything outside each chunk: (n_blocks·per_block, M+1, M+1).
    R_out = jax.vmap(jax.vmap(_stacked_r, in_axes=(None, 0, 0)))(R_other_blocks, R_before, R_after)
    R_out = R_out.reshape(-1, M + 1, M + 1)

    def chunk(args):
        x, yc, wc, fc, R_out_c = args

        def exact():
            G, F = rows(x, yc, wc)
            pad = n_leaves * b - C
            leaves = tuple(
                jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1)).reshape(n_leaves, b, *a.shape[1:])
                for a in (G, F, yc, wc, fc)
            )

            def step(carry, G_leaf):
                return _stacked_r(carry, G_leaf), carry

            _, R_pre = lax.scan(step, R_out_c, leaves[0])  # outside the chunk and the leaves before
            zero = jnp.zeros_like(R_out_c)
            _, R_suf = lax.scan(step, zero, leaves[0], reverse=True)  # the leaves after

            def leaf(args):
                *args, f_B = args
                skip = streaming.varying_like(jnp.zeros((b,), W.dtype), args[0])
                return lax.cond(_any_over_batch(f_B), lambda: _leaf_loo(*args, statistic), lambda: skip)

            return lax.map(leaf, (R_pre, R_suf, *leaves[1:])).reshape(-1)[:C]

        skip = streaming.varying_like(jnp.zeros((C,), W.dtype), x)
        return lax.cond(_any_over_batch(fc), exact, lambda: skip)

    return lax.map(chunk, (*chunks, R_out)).reshape(-1)


@functools.partial(jax.jit, static_argnums=(7, 8, 9))
def _leave_block_out_loo(
    kernel: Kernel,
    Z: jax.Array,
    W: jax.Array,
    X: jax.Array,
    y: jax.Array,
    w: jax.Array,
    flag: jax.Array,
    C: int,
    mesh: Mesh | None,
    statistic: str = "log_density",
) -> jax.Array:
    """LOO conditionals of y ~ N(0, Q_ff + diag(1/w)) by leaving out leaf blocks, at the flagged points (N,).

    With whitened weights (a_j = W k_u(x_j), W = L_uu⁻¹, α ~ N(0, I), y_j = a_jᵀα + e_j), for a leaf block
    B of b points the data outside it give α | y_out ~ N(μ_out, A_out⁻¹) with

        A_out = I + Σ_{j∉B} ω_j a_j a_jᵀ,   b_out = Σ_{j∉B} ω_j y_j a_j,   μ_out = A_out⁻¹ b_out,

    so y_B | y_out ~ N(F_B μ_out, S_B), S_B = F_B A_out⁻¹ F_Bᵀ + D_B, and the conditionals of B's points
    given all others are those of this b-variate Gaussian (:func:`bayes_rbfn.gp.linalg.loo_from_chol`).
    Nothing is subtracted: A_out is a sum over the points outside B, kept as a square root R_outᵀR_out
    by QR of stacked rows (the sums of the Woodbury pass, formed as matrices, would lose the prior's I next
    to terms of size 1/σ²). The R of every chunk is taken once; exclusive prefixes and suffixes over the
    blocks (across devices: one all-gather of (M+1)² numbers per block), over the chunks of a block and
    over the leaves of a chunk then give, for every leaf, R_out by O(M³) rotations, with no N×M array.
    Chunks without a flagged point are skipped (zeros there).

    Cost: one tall-skinny QR per chunk, in chunks holding a flagged point two (M+1+b)×(M+1) QRs per leaf of
    b ≈ M points (its prefix and suffix), and in leaves holding one a pivoted (3M+2)×M QR and an (M+b)×b
    one: several times the Woodbury pass's cost with one point flagged and tens of times with every chunk
    flagged, more with OpenBLAS's default threads than with one (the QRs are small).
    """
    N = X.shape[0]
    n_dev, n_blocks = streaming.block_count(mesh, N, C)
    C_eff, per_block, N_pad = streaming.block_layout(N, C, n_blocks)

    arrays = tuple(streaming.zero_padded(a, N_pad) for a in (X, y, w, flag))
    shared = (kernel, Z, W)
    if mesh is None:
        out = _leave_block_out_local(
            shared,
            *arrays,
            layout=(n_blocks, per_block, C_eff),
            gather=lambda a: a,
            first=0,
            statistic=statistic,
        )
    else:
        local_blocks = n_blocks // n_dev

        def local(shared, *arrays):
            return _leave_block_out_local(
                shared,
                *arrays,
                layout=(local_blocks, per_block, C_eff),
                gather=lambda a: lax.all_gather(a, streaming.DATA_AXIS, tiled=True),
                first=lax.axis_index(streaming.DATA_AXIS) * local_blocks,
                statistic=statistic,
            )

        data = P(streaming.DATA_AXIS)
        out = jax.shard_map(local, mesh=mesh, in_specs=(P(), data, data, data, data), out_specs=data)(
            shared, *arrays
        )
    return out[:N]


def _woodbury_loo_local(shared, X, y, w, n_blocks, per_block, C_eff, statistic="log_density"):
    """:func:`sor_loo`'s Woodbury pass on one device's rows: per point (log p(y_i | y_−i), 1 − h_i)."""
    kernel, Z, R, m = shared

    def body(carry, x, yc, wc):
        K = kernel.inducing_cross(Z, x)
        V = (R @ K) * wc
        precision = wc - jnp.sum(V * V, axis=0)
        loo = linalg.loo_from_precision(precision, wc * (yc - m @ K), statistic)
        return carry, (loo, precision / wc)

    # The block layout of the sums (nothing is summed here: a zero per block), so that every point
    # sits in the same chunk on one device and on several: the precision wc − ‖v‖² cancels, and
    # other chunk shapes alone would move it at the 1e-10 level for large N.
    return streaming.scan_blocks(body, jnp.zeros((), R.dtype), n_blocks, per_block, C_eff, X, y, w)


@functools.cache
def _woodbury_loo_pass(mesh: Mesh | None, C: int, statistic: str = "log_density") -> Callable:
    """``run(shared, X, y, w)`` of :func:`_woodbury_loo_local` over all of X's points.

    Compiled once per setting and shape (an eager :func:`sor_loo` then traces and compiles nothing the
    second time).
    """

    def run(shared, X, y, w):
        local = functools.partial(_woodbury_loo_local, statistic=statistic)
        return streaming.summed_over_data(local, mesh, X.shape[0], C)(shared, X, y, w)

    return jax.jit(run)


def _check_loo_options(exact: bool | str | None, statistic: str) -> None:
    """Checks :func:`sor_loo`'s ``exact`` and ``statistic`` against the values it knows.

    Args:
        exact: :func:`sor_loo`'s ``exact``: ``None``, ``True``, ``False`` or ``"defer"``.
        statistic: :func:`sor_loo`'s ``statistic``: one of :data:`bayes_rbfn.gp.linalg.LOO_STATISTICS`.

    Raises:
        ValueError: for any other ``exact`` or ``statistic``.
    """
    if exact not in (None, True, False, "defer"):
        raise ValueError(f"exact: expected None, True, False or 'defer', got {exact!r}")
    if statistic not in linalg.LOO_STATISTICS:
        raise ValueError(f"statistic: expected one of {linalg.LOO_STATISTICS}, got {statistic!r}")


def _woodbury_loo_and_flag(
    factor: linalg.Woodbury,
    kernel: Kernel,
    Z: jax.Array,
    X: jax.Array,
    y: jax.Array,
    d: Any,
    mask: jax.Array | None,
    C: int,
    mesh: Mesh | None,
    statistic: str,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`sor_loo`'s Woodbury pass, and the points whose value it leaves to the leave-block-out pass.

    Args:
        factor: the :class:`~bayes_rbfn.gp.linalg.Woodbury` of C for y, as :func:`sor_loo`'s.
        kernel: the covariance function, as :func:`sor_loo`'s.
        Z: (M, D) inducing inputs.
        X: (N, D) inputs.
        y: (N,) targets.
        d: the diagonal part of C, a scalar or (N,).
        mask: (N,) booleans, False at padded points, or ``None``.
        C: data points per chunk (static).
        mesh: the device mesh of the streamed pass, or ``None`` (static).
        statistic: what each value is, as :func:`sor_loo`'s ``statistic`` (static).

    Returns:
        (loo, flag, w): the Woodbury pass's values (N,); the (N,) booleans, without a gradient, of the
        points whose 1 − h_i is below :data:`LOO_LEVERAGE_FLOOR` or not a number, False everywhere where
        the factorisation itself failed and at padded points; the point weights ω = 1/d (N,), 0 at padded
        points.
    """
    R = factor.weight_cov_factor()
    w, _ = woodbury_sums.point_weights(d, y, mask, R.dtype)

    # Padded points have ω = 0 (their values, cut off or masked, are not finite).
    shared = (kernel, Z, R, factor.weight_mean())
    loo, one_minus_h = _woodbury_loo_pass(mesh, C, statistic)(shared, X, y, w)[1]
    floor = LOO_LEVERAGE_FLOOR.get(jnp.dtype(R.dtype), LOO_LEVERAGE_FLOOR[jnp.dtype("float32")])
    # Below the floor or not a number; not where the factorisation itself failed (all NaN, as before).
    factorised = jnp.all(jnp.isfinite(factor.Luu)) & jnp.all(jnp.isfinite(factor.LB))
    flag = ~(lax.stop_gradient(one_minus_h) >= floor) & lax.stop_gradient(factorised)
    if mask is not None:
        flag = flag & mask
    return loo, flag, w


def _leave_block_out_where_flagged(
    loo: jax.Array,
    flag: jax.Array,
    factor: linalg.Woodbury,
    kernel: Kernel,
    Z: jax.Array,
    X: jax.Array,
    y: jax.Array,
    w: jax.Array,
    C: int,
    mesh: Mesh | None,
    exact: bool | str | None,
    statistic: str,
) -> jax.Array:
    """``loo`` with the flagged points' values from the leave-block-out pass, as ``exact`` asks.

    Eagerly the pass runs only when a point is flagged; under ``jit`` it is a ``lax.cond`` on
    :func:`_any_over_batch` (``exact=True``), NaN at the flagged points (``"defer"``) or nothing.

    Args:
        loo: (N,) values of the Woodbury pass.
        flag: (N,) booleans, without a gradient: the points to take from the leave-block-out pass.
        factor: the :class:`~bayes_rbfn.gp.linalg.Woodbury` of C for y, as :func:`sor_loo`'s.
        kernel: the covariance function, as :func:`sor_loo`'s.
        Z: (M, D) inducing inputs.
        X: (N, D) inputs.
        y: (N,) targets.
        w: (N,) point weights ω = 1/d, 0 at padded points.
        C: data points per chunk (static).
        mesh: the device mesh of the streamed pass, or ``None`` (static).
        exact: :func:`sor_loo`'s ``exact``.
        statistic: what each value is, as :func:`sor_loo`'s ``statistic`` (static).

    Returns:
        (N,) values: ``loo`` where ``flag`` is False, the leave-block-out pass's values (or NaN, or ``loo``,
        as ``exact`` asks) where it is True.
    """

    def second_pass():
        # Without a reverse pass (pivoted QR has none in JAX): the LOO values are evaluated, not optimised.
        args = lax.stop_gradient((kernel, Z, woodbury_sums.whitening_matrix(factor.Luu), X, y, w))
        return jnp.where(flag, _leave_block_out_loo(*args, flag, C, mesh, statistic), loo)

    any_flagged = _any_over_batch(flag)
    if isinstance(any_flagged, jax.core.Tracer):
        if exact == "defer":
            loo = jnp.where(flag, jnp.nan, loo)
        elif exact:
            loo = lax.cond(any_flagged, second_pass, lambda: loo)
    elif exact is not False and bool(any_flagged):
        loo = second_pass()
    return loo


def sor_loo(
    factor: linalg.Woodbury,
    kernel: Kernel,
    Z: jax.Array,
    X: jax.Array,
    y: jax.Array,
    d: Any,
    *,
    mask: jax.Array | None = None,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    exact: bool | str | None = None,
    statistic: str = "log_density",
) -> jax.Array:
    """LOO conditionals log p(y_i | y_−i) for y ~ N(0, C), C = Q_ff + diag(d), shape (N,), in O(NM²) ([1]).

    C⁻¹ = D⁻¹ − VᵀV with V = R K_uf D⁻¹ and R = L_B⁻¹ L_uu⁻¹ (Woodbury identity), so
    diag(C⁻¹) = 1/d − ‖V_:i‖²; C⁻¹y = D⁻¹ r from the residuals r = y − K_fu m of the weight mean m (those
    of :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_factor`'s quadratic form); then
    :func:`bayes_rbfn.gp.linalg.loo_from_precision`. Streamed over chunks of X like the sums.

    Accuracy: d_i [C⁻¹]_ii = 1 − h_i, with h_i the leverage of point i (the share of y_i its own fit
    takes), and r_i = (1 − h_i)(y_i − E[y_i | y_−i]). The M×M sums hold 1 − h_i, and the residual r_i, only
    to ~ε (× |y_i|) absolutely, so such a conditional has a relative error of ~ε/(1 − h_i) or worse:
    negligible while leverages stay away from 1, as they do with several points per inducing input, but
    1 − h_i ~ σ²/s² at a point the model interpolates (Z = X, or a point alone near its inducing input),
    where digits go as ε s²/σ² (≈ 1e-4 relative at σ/s = 1e-6, none at 1e-8, where a precision can come out
    ≤ 0 and the value NaN). Wherever 1 − h_i comes out below :data:`LOO_LEVERAGE_FLOOR` (1e-4 in float64)
    or not finite, the point's conditional is taken instead from a second, leave-block-out pass
    (:func:`_leave_block_out_loo`) that subtracts nothing. For the leaf block B (~M points) that holds the
    point, the others alone give, with a_j = L_uu⁻¹ k_u(x_j), ω_j = 1/d_j and F_B the rows a_jᵀ of B,

        α | y_−B ~ N(μ_out, A_out⁻¹),  A_out = I + Σ_{j∉B} ω_j a_j a_jᵀ,  μ_out = A_out⁻¹ Σ_{j∉B} ω_j y_j a_j,
        y_B | y_−B ~ N(F_B μ_out, S_B),  S_B = F_B A_out⁻¹ F_Bᵀ + diag(d_B),

    and the point's conditional is that of the |B|-variate Gaussian y_B | y_−B ([2] eqs. (5.10)–(5.12) on
    S_B, :func:`~bayes_rbfn.gp.linalg.loo_from_chol`). A_out is a sum over the other points only, held as
    a square root R_outᵀR_out by QR of stacked rows: exclusive prefixes and suffixes of the per-chunk R
    over blocks, chunks and leaves, and a row-sorted, column-pivoted QR for the prior's I [3]; a formed
    A_out would lose that I next to terms of size 1/σ². Against a 60-digit reference
    (tests/gp/test_small_noise.py) the interpolated points are then within 2e-14 relative where every point
    is interpolated (Z = X, σ = 1e-6 and 1e-8; the Woodbury values: 2e-3 and NaN) and within 3e-9 among
    ordinary points at σ = 1e-8 (Woodbury: 9e-4), the problem's own sensitivity to ε-changes of y there.

    Cost: the leave-block-out pass (its QRs: :func:`_leave_block_out_loo`) takes several times the Woodbury
    pass's cost with one point flagged and tens of times with every chunk flagged; it is skipped wholly
    when no point is flagged. Under ``vmap`` (one evaluation per posterior draw) it runs for the whole batch
    when any member has a flagged point and for none otherwise (:func:`_any_over_batch`: never a select that
    runs it for every evaluation). The flagged values carry no gradient (``stop_gradient``; LOO values are
    evaluated, not optimised).

    Args:
        factor: the :class:`~bayes_rbfn.gp.linalg.Woodbury` of C for y
            (:func:`~bayes_rbfn.gp.woodbury_sums.woodbury_factor`).
        kernel: the covariance function, as given to :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_factor`.
        Z: (M, D) inducing inputs, as given to ``woodbury_factor``.
        X: (N, D) inputs, as given to ``woodbury_factor``.
        y: (N,) targets, as given to ``woodbury_factor``.
        d: the diagonal part of C, a scalar or (N,), as given to ``woodbury_factor``.
        mask: (N,) booleans, False at padded points, which get the value 0 (as given to
            ``woodbury_factor``).
        chunk_size: data points per chunk, as :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_stats`.
        mesh: the device mesh of the streamed pass, as :func:`~bayes_rbfn.gp.woodbury_sums.woodbury_stats`.
        exact: whether flagged points take the leave-block-out pass. ``None`` (default): yes when called
            eagerly (the decision is then a concrete value, and the pass is compiled only when a point needs
            it); under ``jit`` (a traced decision) only with ``exact=True``, as a ``lax.cond`` compiles both
            branches and the pass's compilation would come with every compiled LOO, e.g. every fit's per-draw
            log-likelihood, whose interpolated points then keep their Woodbury values. ``False``: never.
            ``"defer"``: as ``None``, but under ``jit`` a flagged point's value is NaN ("not computed here"),
            so that a caller evaluating many draws compiles and runs the pass only for the draws that need it
            (:func:`bayes_rbfn.infer.fitting.pointwise_loo`, with ``exact=True`` for those).
        statistic: ``"log_density"`` (default), ``"pit"``: each conditional's CDF at y_i, for LOO-PIT, or
            ``"residual"``: y_i − E[y_i | y_−i] (:func:`bayes_rbfn.gp.linalg.loo_from_precision`), from the
            same passes.
    """
    _check_loo_options(exact, statistic)
    C = chunk_size or streaming.chunk_size_for(Z.shape[0], factor.Luu.dtype)
    loo, flag, w = _woodbury_loo_and_flag(factor, kernel, Z, X, y, d, mask, C, mesh, statistic)
    loo = _leave_block_out_where_flagged(loo, flag, factor, kernel, Z, X, y, w, C, mesh, exact, statistic)
    return loo if mask is None else jnp.where(mask, loo, 0.0)
