"""The data sums of the SoR family in one streamed pass, with a hand-written reverse pass, and its factor.

Every SoR-family formula needs the data only through the sums of :func:`bayes_rbfn.gp.linalg.woodbury`
(its ``stats``): with a_n = L_uu⁻¹ k_u(x_n) and ω_n = 1/d_n,

    AAᵀ = Σ_n ω_n a_n a_nᵀ (M×M),   A D^-½ y = Σ_n ω_n y_n a_n (M),   yᵀD⁻¹y,   Σ_n log d_n.

This module is the one pass over the data that takes them (:func:`woodbury_stats`), and the one home of
the factor they give, the Woodbury factor of C = Q_ff + diag(d) (:func:`woodbury_factor`, which adds a
residual sweep for the quadratic form; SoR's :func:`sor_factor`). The factor's LOO conditionals are
:func:`bayes_rbfn.gp.block_loo.sor_loo`, its predictive moments :mod:`~bayes_rbfn.gp.moments`. A problem
small enough to form K_uf is one chunk of the same pass, and a caller that has formed it for sums of its own
(the group effects of :mod:`~bayes_rbfn.gp.effects`) hands it to the pass (``Kuf=``), which then streams
its columns instead of evaluating the kernel again; :mod:`~bayes_rbfn.gp.conditional` and
:mod:`~bayes_rbfn.gp.sparse` call these functions, and the models call them through those modules. The
pass streams over chunks of the data, adds them in a fixed block order and shards over devices
(:mod:`~bayes_rbfn.gp.streaming`); it takes the sums as close to the machine's floor as the whitened form
allows:

* **Whitened by GEMM.** a_c = W K_uc with W = L_uu⁻¹ (M×M, once per evaluation, O(M³), by
  :func:`~bayes_rbfn.gp.linalg.triangular_inverse`, itself mostly matrix products). The
  N-column triangular solve L_uu A = K_uf becomes a matrix product, which XLA's CPU runtime runs several
  times faster per flop than a triangular solve, with the same forward error (~ε·cond(L_uu)) [2];
  tests/gp/test_streamed_passes.py checks it against the triangular-solve path (its dense reference) and a
  long-double reference. Whitening *before* the sum is what keeps the result accurate: forming
  K_uf D⁻¹ K_fu first (``fast=True``) saves one of the two products but loses digits in
  proportion to cond(K_uu), which the jitter floor puts at ~1e10 for the usual dense inducing inputs:
  errors of O(1) in the log density at N = 20,000, NaN for small noise.
* **Masked layouts.** A ``mask`` (N,) of real points gives padded points weight ω = 0 and no share of
  Σ log d or of the 2π term, so batched groups of unequal size (the ``grouped`` model) share the pass.
* **A hand-written reverse pass.** The backward pass recomputes K_uc chunk by chunk instead of storing
  it, and needs two products per chunk, from ∂f/∂K_uc = ω · Wᵀ (G_s W K_uc + g yᵀ) with G_s = G + Gᵀ
  (G, g the cotangents of AAᵀ and A D^-½ y); the cotangent of L_uu follows from M×M quantities alone,
  ∂f/∂L_uu = −Wᵀ (G_s AAᵀ + g (A D^-½ y)ᵀ) (using W K_uf D⁻¹ K_fu = AAᵀ L_uuᵀ), so the backward pass
  never needs a second sweep for it. Forming Wᵀ G_s W first would save one product but amplifies
  rounding by cond(K_uu) again (gradients off by up to 60 % in the same tests).
* **Residuals, not differences.** yᵀC⁻¹y = yᵀD⁻¹y − ‖c‖² loses every digit by σ/s ≈ 1e-8 when y is
  nearly explained by the network; :func:`woodbury_factor` takes it as rᵀD⁻¹r + ‖L_uuᵀ m‖² from the
  residuals r = y − K_fu m of the weight mean m (:meth:`~bayes_rbfn.gp.linalg.Woodbury.with_residuals`).
  m needs every sum, so the residuals are a second sweep (one kernel evaluation and two matrix-vector
  products per chunk, also summing K_uf D⁻¹ r); its reverse pass rides on the sums' one backward sweep:
  −2s m (ω r)ᵀ more in each chunk's cotangent of K_uc, and −2s K_uf D⁻¹ r, the cotangent of m, taken
  back through the M×M algebra of m onto the cotangents of the sums. The gradient is then the derivative
  of the residual form as computed, and keeps its digits too (tests/gp/test_small_noise.py: against 60
  significant digits at σ = 1e-6 and 1e-8).
* **Mixed precision** (``precision="mixed"``, off by default). Each chunk's kernel block K_uc, its
  whitening W K_uc and its products (in the reverse pass also the kernel's pullback and its two products)
  are taken in float32, and each chunk's result is added to float64 sums; W, every factorisation and the
  Woodbury algebra stay float64, and so does the residual sweep (in float32 its differences y − K m
  measured 1e-9–6e-8 relative in the log density against 5e-11–1e-9, to save one kernel block per
  chunk). For a translation-invariant kernel the inputs are shifted by the mean of Z, in float64, before
  they are cast, so that their rounding is relative to their spread, not to their distance from the
  origin (inputs near 2000: gradient 4e-6 → 7e-9). It is accurate only while K_uu is well conditioned: a
  float32 rounding of K_uc (relative ε₃₂ ≈ 6e-8) comes out of the whitening amplified by up to
  ‖L_uu⁻¹‖ ~ cond(K_uu)^½. Against float64 at M = 64, N = 10³–10⁶: with the inducing inputs 2.5 lengthscales
  apart (3-D, cond(K_uu) ≈ 1.5) the log density is within 1e-9 relative (≤ 1e-5 nats) and the gradient within
  2e-8 of its norm; with 64 dense inducing inputs on 1-D data (cond(K_uu) ~ 1e9, the jitter floor) the log
  density is off by ~4e-5 relative (0.9 nats at N = 10⁵, 11 at 10⁶) and the gradient by 1e-2 to 3 of its norm:
  there it must not be used. In between the error grows with cond(K_uu) (below 1e-6 relative up to cond ~1e3
  on 1-D data, ~1e8 on the 3-D grid), and cond(K_uu) moves with the lengthscales a sampler visits, so it is
  the default nowhere. A small gradient component that is the difference of terms of size ~N (that of log s²)
  keeps ~ε₃₂·N of float32 rounding from the reverse pass, where most of the work saved is. On float32 inputs
  it is plain float32.

Per evaluation of the log density and its gradient this is four M×M×C products per chunk (two forward,
two backward) against the one product of the floor (forming K_fu and K_uf K_fu), plus the residual
sweep's second kernel evaluation.

References
----------
[1] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[2] Higham, N. J. (2002). *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §8 (triangular
    systems: the forward error of a triangular solve and of multiplication by a computed inverse).
[3] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959. Eq. (16) (SoR predictive).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from bayes_rbfn.gp import linalg, streaming
from bayes_rbfn.gp.kernels import Kernel

__all__ = [
    "forms_cross",
    "point_weights",
    "sor_factor",
    "whitening_matrix",
    "woodbury_factor",
    "woodbury_stats",
]

# --------------------------------------------------------------------------------------------------
# The streamed data sums with their reverse pass


def whitening_matrix(Luu: jax.Array) -> jax.Array:
    """W = L_uu⁻¹ (M×M) (:func:`~bayes_rbfn.gp.linalg.triangular_inverse`): the whitening a_n = W k_u(x_n)."""
    return linalg.triangular_inverse(Luu)


def _weight_mean(AAt: jax.Array, Ay: jax.Array, Luu: jax.Array) -> jax.Array:
    """The RBFN weight mean m = L_uu⁻ᵀ L_B⁻ᵀ c from the whitened sums, by the one Woodbury path."""
    zero = jnp.zeros((), Ay.dtype)
    return linalg.woodbury(Luu, (AAt, Ay, zero, zero), n=0).weight_mean()


def _batched_like(a: jax.Array, ref: jax.Array) -> jax.Array:
    """``a`` itself, but mapped wherever ``ref`` is mapped under ``jax.vmap``.

    A select on a constant ``True``, which XLA folds away.

    The sums AAᵀ do not depend on y. Under a ``vmap`` over y alone (a batch of series sharing the kernel
    and the inputs) the custom VJP below would then have one unmapped and one mapped output, and JAX
    (0.9) hands each mapped member's reverse pass the cotangent of the unmapped output summed over the
    whole batch: the kernel's gradient would be the batch size times too large. Tied to y, every output
    is mapped and each member's reverse pass gets its own cotangents.
    """
    return jnp.where(True, a, jnp.sum(ref).astype(a.dtype))


def _local_sums(fast, precision, shared, X, y, w, n_blocks, per_block, C_eff):
    """One device's block sums of :func:`_streamed`'s forward sweep: (AAᵀ, A D^-½ y) per block."""
    # The dtype of each chunk's work: float32 under "mixed" (float64 inputs), else the inputs' own.
    low = functools.partial(streaming.in_low_precision, precision=precision)
    kernel, Z, W = shared
    M = Z.shape[0]
    acc = W.dtype
    centre = streaming.input_centre(kernel, Z, precision)
    kernel_c, Z_c, W_c = low((kernel, streaming.shifted(Z, centre), W))

    def body(carry, x, yc, *wc):
        S, r = carry
        x, yc, wc = low((streaming.shifted(x, centre), yc, wc))
        K = kernel_c.inducing_cross(Z_c, x)
        A = K if fast else W_c @ K
        Aw = A * wc[0] if wc else A
        return (S + (Aw @ A.T).astype(acc), r + (Aw @ yc).astype(acc)), None

    zeros = (jnp.zeros((M, M), W.dtype), jnp.zeros((M,), W.dtype))
    rest = [] if w is None else [w]
    return streaming.scan_blocks(body, zeros, n_blocks, per_block, C_eff, X, y, *rest)[0], None


def _local_residuals(shared, X, y, w, n_blocks, per_block, C_eff):
    """One device's block sums of the residual sweep: (Σ ω r², K_uf ω r) per block."""
    kernel, Z, m = shared
    # In the inputs' dtype whatever the precision: under "mixed", float32 here measured 1e-9–6e-8
    # relative error in the log density against 5e-11–1e-9 (see the module docstring), to save one
    # kernel block and two matrix-vector products per chunk.

    def body(carry, x, yc, *wc):
        rss, u = carry
        K = kernel.inducing_cross(Z, x)
        r = yc - m @ K  # each residual is a difference taken before it is squared
        rw = r * wc[0] if wc else r
        return (rss + rw @ r, u + K @ rw), None

    zeros = (jnp.zeros((), m.dtype), jnp.zeros_like(m))
    rest = [] if w is None else [w]
    return streaming.scan_blocks(body, zeros, n_blocks, per_block, C_eff, X, y, *rest)[0], None


def _local_grads(fast, precision, residuals, want_w, shared, X, y, w, n_blocks, per_block, C_eff):
    """One device's share of the reverse sweep: the kernel's and Z's cotangents, and X's, y's, w's."""
    low = functools.partial(streaming.in_low_precision, precision=precision)
    kernel, Z, W, left, h, m, s = shared
    # As varying (per-device) values, the pullback gives each device's own share of their cotangents,
    # reduced once at the end, instead of a psum per chunk inserted by autodiff.
    kernel, Z = streaming.varying_like((kernel, Z), X)
    # "mixed": the pullback and the products in float32; the cotangent sums stay float64, the per-point
    # cotangents come back in the dtype of X, y and w.
    # (A constant shift of every input leaves the kernel's cotangents as they are.)
    centre = streaming.input_centre(kernel, Z, precision)
    kernel_c, Z_c, W, left, h, m, s = low((kernel, streaming.shifted(Z, centre), W, left, h, m, s))
    X_dtype, y_dtype = X.dtype, y.dtype

    def body(carry, x, yc, *wc):
        dk, dz = carry
        x, yc, wc = low((streaming.shifted(x, centre), yc, wc))
        K, pullback = jax.vjp(lambda k, z, xx: k.inducing_cross(z, xx), kernel_c, Z_c, x)
        # ∂f/∂K_c = ω (U + h yᵀ), U = Wᵀ G_s W K_c: whitened as Wᵀ ((G_s W) K_c), two products.
        U = left @ K if fast else W.T @ (left @ K)
        T = U + jnp.outer(h, yc)
        hK = h @ K
        if residuals:
            # the residual sum Σ ω r², r = y − K_cᵀ m: ∂/∂K_c = −2ω m rᵀ, ∂/∂y = 2ω r, ∂/∂ω = r².
            r = yc - m @ K
            T = T - jnp.outer(2.0 * s * m, r)
            hK = hK + 2.0 * s * r
        dk_c, dz_c, dx = pullback(T * wc[0] if wc else T)
        out = {"X": dx.astype(X_dtype), "y": (hK * wc[0] if wc else hK).astype(y_dtype)}
        if want_w:
            out["w"] = jnp.sum(K * (0.5 * U + jnp.outer(h, yc)), axis=0)
            if residuals:
                out["w"] = out["w"] + s * r * r
            out["w"] = out["w"].astype(w.dtype)
        dk = jax.tree_util.tree_map(lambda a, b: a + b.astype(a.dtype), dk, dk_c)
        return (dk, dz + dz_c.astype(dz.dtype)), out

    carry0 = (jax.tree_util.tree_map(jnp.zeros_like, kernel), jnp.zeros_like(Z))
    rest = [] if w is None else [w]
    return streaming.scan_blocks(body, carry0, n_blocks, per_block, C_eff, X, y, *rest)


@linalg.full_precision
def _backward(fast, precision, residuals, mesh, C, kernel, Z, X, y, w, W, AAt, Ay, G, g, m, s):
    """Cotangents of (kernel, Z, L_uu, X, y, w) from those of the sums (and of the residual sum)."""
    # Every cotangent is formed; XLA drops those nobody uses (the data's, inside NUTS).
    Gs = G + G.T
    h = W.T @ g
    # ∂f/∂W = (G_s AAᵀ + g (A D^-½ y)ᵀ) L_uuᵀ, as W K_uf D⁻¹ K_fu = AAᵀ L_uuᵀ: no pass over the data.
    # With W = L_uu⁻¹, ∂f/∂L_uu = −Wᵀ (∂f/∂W) Wᵀ; L_uu is lower triangular.
    dLuu = -jnp.tril(W.T @ (Gs @ AAt + jnp.outer(g, Ay)))
    # fast: the products were taken before whitening, so their cotangent is Wᵀ G_s W K, rounded with
    # cond(K_uu) like the forward sums; whitened: Wᵀ ((G_s W) K), accurate like the forward pass.
    left = W.T @ Gs @ W if fast else Gs @ W
    grads = functools.partial(_local_grads, fast, precision, residuals, w is not None)
    shared = (kernel, Z, W, left, h, m, s)
    (dk, dz), per_point = streaming.summed_over_data(grads, mesh, X.shape[0], C)(shared, X, y, w)
    return dk, dz, dLuu, per_point["X"], per_point["y"], per_point.get("w")


@functools.cache
def _streamed(
    fast: bool, C: int, mesh: Mesh | None, residuals: bool = False, precision: str = "float64"
) -> Callable:
    """The custom-VJP function (kernel, Z, Luu, X, y, w) → (AAᵀ, A D^-½ y) with ω = w (None: ω = 1).

    With ``residuals`` it is (kernel, Z, Luu, X, y, w, d0) → (AAᵀ, A D^-½ y, Σ_n ω_n r_n²), the sums over ω
    and the residuals r = y − K_fu m of the weight mean m of the sums divided by d0 (the scalar d taken out
    of ω, or 1): a second sweep, since m needs every sum. Its reverse pass stays one sweep: the residual
    sum's cotangent s adds −2s m (ω r)ᵀ to each chunk's ∂f/∂K_uc and, through m, the M×M cotangent of
    −2s K_uf D⁻¹ r (summed in the forward sweep) to those of the sums.

    The reverse pass is written for the whole (sharded) pass, so autodiff never enters shard_map: the
    cotangents of the replicated inputs are reduced like the forward sums, those of X, y, w stay split.

    With ``precision="mixed"`` each chunk's kernel block, its whitening and its products (and in the
    reverse pass the kernel's pullback and its two products) are taken in float32
    (:func:`~bayes_rbfn.gp.streaming.in_low_precision` of the chunk and of kernel, Z, W; the inputs shifted
    by :func:`~bayes_rbfn.gp.streaming.input_centre` first), and each chunk's result is cast to float64
    before it is added to the float64 sums and cotangents; the residual sweep stays in float64 (see the
    module docstring).

    The function is jitted (and cached with its settings): called eagerly, a second call of the same
    shapes traces and compiles nothing; inside a caller's ``jit`` it is inlined as any nested program.
    """
    local_sums = functools.partial(_local_sums, fast, precision)
    backward = functools.partial(_backward, fast, precision, residuals, mesh, C)

    @linalg.full_precision
    def sums(kernel, Z, Luu, X, y, w):
        W = whitening_matrix(Luu)
        S, r = streaming.summed_over_data(local_sums, mesh, X.shape[0], C)((kernel, Z, W), X, y, w)[0]
        if fast:
            S, r = W @ S @ W.T, W @ r
        return _batched_like(0.5 * (S + S.T), y), r, W

    if not residuals:

        @jax.custom_vjp
        def f(kernel, Z, Luu, X, y, w):
            return sums(kernel, Z, Luu, X, y, w)[:2]

        def fwd(kernel, Z, Luu, X, y, w):
            AAt, Ay, W = sums(kernel, Z, Luu, X, y, w)
            return (AAt, Ay), (kernel, Z, X, y, w, W, AAt, Ay)

        def bwd(res, ct):
            kernel, Z, X, y, w, W, AAt, Ay = res
            return backward(kernel, Z, X, y, w, W, AAt, Ay, *ct, None, None)

        f.defvjp(fwd, bwd)
        return jax.jit(f)

    @linalg.full_precision
    def forward(kernel, Z, Luu, X, y, w, d0):
        AAt, Ay, W = sums(kernel, Z, Luu, X, y, w)
        m = _weight_mean(AAt / d0, Ay / d0, Luu)
        rss, u = streaming.summed_over_data(_local_residuals, mesh, X.shape[0], C)((kernel, Z, m), X, y, w)[0]
        return (AAt, Ay, rss), (kernel, Z, Luu, X, y, w, d0, W, AAt, Ay, m, u)

    @jax.custom_vjp
    def f_res(kernel, Z, Luu, X, y, w, d0):
        return forward(kernel, Z, Luu, X, y, w, d0)[0]

    @linalg.full_precision
    def bwd_res(res, ct):
        kernel, Z, Luu, X, y, w, d0, W, AAt, Ay, m, u = res
        G, g, s = ct
        # m depends on the sums (and L_uu, d0): ∂(Σ ω r²)/∂m = −2 K_uf D⁻¹ r = −2u, taken back through the
        # M×M algebra of the weight mean onto the sums' cotangents, which the one sweep then carries.
        _, pull = jax.vjp(lambda S, b, L, d: _weight_mean(S / d, b / d, L), AAt, Ay, Luu, d0)
        dS, dAy, dLuu_m, dd0 = pull(-2.0 * s * u)
        dk, dz, dLuu, dX, dy, dw = backward(kernel, Z, X, y, w, W, AAt, Ay, G + dS, g + dAy, m, s)
        return dk, dz, dLuu + dLuu_m, dX, dy, dw, dd0

    f_res.defvjp(forward, bwd_res)
    return jax.jit(f_res)


class _FormedCross(Kernel):
    """K_uf formed already, as the pass's data: its "inputs" are the rows of K_fu (N, M), read as they are.

    A caller that holds K_uf (the group effects form it for their sums) streams it instead of the kernel's
    inputs: each chunk's block is its rows transposed, and the reverse pass hands the cotangent of K_fu back
    as that of the inputs, for the caller's one pullback through the kernel.
    """

    def inducing_cross(self, Z: Any, X: Any) -> jax.Array:
        """The chunk's block of K_uf, (M, C): its rows of K_fu (C, M) transposed."""
        return jnp.asarray(X).T


def point_weights(d: Any, y: jax.Array, mask: jax.Array | None, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """(ω = 1/d per point, zero where ``mask`` is False; Σ log d over the real points)."""
    d = jnp.broadcast_to(jnp.asarray(d, dtype=dtype), y.shape)
    if mask is None:
        return 1.0 / d, jnp.sum(jnp.log(d))
    return jnp.where(mask, 1.0 / d, 0.0), jnp.sum(jnp.where(mask, jnp.log(d), 0.0))


def forms_cross(
    M: int,
    N: int,
    dtype: Any,
    *,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    precision: str = "float64",
) -> bool:
    """Whether :func:`woodbury_factor` forms K_uf (M, N) once rather than streaming the kernel.

    For data that fit in at most two default chunks (:func:`~bayes_rbfn.gp.streaming.chunk_size_for`) on one
    device at full precision, with no chunk length asked for: K_uf is then no larger than two of the
    streamed pass's blocks, and evaluating the kernel once, where the streamed pass evaluates it in both
    sweeps and again in the reverse pass, is the cheaper evaluation.

    Args:
        M: inducing inputs.
        N: data points.
        dtype: the computation's dtype.
        chunk_size: the chunk length asked for (None: the default).
        mesh: the device mesh of a sharded pass (None: one device).
        precision: the pass's precision setting.
    """
    if chunk_size is not None or mesh is not None or precision != "float64":
        return False
    return N <= 2 * streaming.chunk_size_for(M, dtype)


def _data_sums(
    kernel, Z, X, y, d, Luu, mask, fast, chunk_size, mesh, residuals, precision="float64", Kuf=None
):
    """``(stats, rᵀD⁻¹r or None)`` for :func:`woodbury_stats` and :func:`woodbury_factor`."""
    if Kuf is not None:
        kernel, X = _FormedCross(), jnp.asarray(Kuf).T
        default = max(X.shape[0], 1)  # held whole already: one chunk, unless the caller asks for smaller ones
    else:
        default = streaming.chunk_size_for(Z.shape[0], Luu.dtype)
    C = int(chunk_size or default)
    d = jnp.asarray(d, dtype=jnp.result_type(Luu, d))
    streamed = _streamed(bool(fast), C, mesh, residuals, streaming.check_precision(precision))
    if d.ndim == 0 and mask is None:
        # One weight for every point: the sums are taken unweighted and divided once.
        out = streamed(kernel, Z, Luu, X, y, None, d) if residuals else streamed(kernel, Z, Luu, X, y, None)
        stats = (out[0] / d, out[1] / d, jnp.sum(y * y) / d, y.shape[0] * jnp.log(d))
        return stats, out[2] / d if residuals else None
    w, logdet_d = point_weights(d, y, mask, d.dtype)
    one = jnp.ones((), d.dtype)
    out = streamed(kernel, Z, Luu, X, y, w, one) if residuals else streamed(kernel, Z, Luu, X, y, w)
    return (out[0], out[1], jnp.sum(y * y * w), logdet_d), out[2] if residuals else None


def woodbury_stats(
    kernel: Kernel,
    Z: jax.Array,
    X: jax.Array,
    y: jax.Array,
    d: Any,
    Luu: jax.Array,
    *,
    mask: jax.Array | None = None,
    fast: bool = False,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    precision: str = "float64",
    Kuf: jax.Array | None = None,
) -> tuple:
    """The data sums of :func:`bayes_rbfn.gp.linalg.woodbury` for C = Q_ff + diag(d), in one streamed pass.

    Returns ``(AAᵀ, A D^-½ y, yᵀD⁻¹y, Σ log d)`` with A = L_uu⁻¹ K_uf D^-½, ready for
    ``linalg.woodbury(Luu, stats, n=N)``, without forming K_uf. Differentiable (a hand-written reverse
    pass; see the module docstring) in the kernel hyperparameters, Z, L_uu, X, y and d.
    :func:`woodbury_factor` adds the residual sweep that the quadratic form needs at small noise.
    A caller that has formed K_uf for sums of its own passes it as ``Kuf``: the pass then streams its
    columns instead of evaluating the kernel (``kernel`` and ``X`` unused), and the cotangent of K_uf goes
    back through the caller's one evaluation of the kernel.

    Args:
        kernel: covariance function.
        Z: (M, D) inducing inputs.
        X: (N, D) inputs.
        y: (N,) targets.
        d: scalar (σ² for SoR/DTC) or (N,) diagonal part (FITC).
        Luu: (M, M) Cholesky factor of K_uu (see :func:`bayes_rbfn.gp.linalg.cholesky`).
        mask: (N,) booleans, False at padded points, which then add nothing to any sum.
        fast: take the products before whitening (one product per chunk fewer; ill-conditioned).
        chunk_size: data points per chunk (default :func:`~bayes_rbfn.gp.streaming.chunk_size_for`).
        mesh: shard the pass over the ``"data"`` axis of this mesh (see
            :func:`~bayes_rbfn.gp.streaming.data_mesh`).
        precision: ``"float64"`` (default) or ``"mixed"``: each chunk's kernel block and products in
            float32, added to float64 sums; the M×M algebra stays float64. Accurate (~1e-9 relative in
            the log density) only while K_uu is well conditioned, wrong by ~1e-5 relative for the
            cond(K_uu) ~ 1e9 of dense inducing inputs (see the module docstring, *Mixed precision*); no
            effect on float32 inputs.
        Kuf: (M, N) K_uf formed already, or None (default) to evaluate it chunk by chunk.
    """
    return _data_sums(kernel, Z, X, y, d, Luu, mask, fast, chunk_size, mesh, False, precision, Kuf)[0]


def woodbury_factor(
    kernel: Kernel,
    Z: jax.Array,
    X: jax.Array,
    y: jax.Array,
    d: Any,
    Luu: jax.Array,
    *,
    mask: jax.Array | None = None,
    fast: bool = False,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    precision: str = "float64",
) -> linalg.Woodbury:
    """The Woodbury factorisation of C = Q_ff + diag(d) for data y: the one factor of the SoR family.

    ``d`` is σ² (SoR, DTC, VFE: :func:`sor_factor`), FITC's (N,) Λ = σ² + diag(K_ff − Q_ff), or any
    positive diagonal (the BLR evidence's 1/β with L_uu = √α I). Also the factorisation of the RBFN weight
    posterior α | y ~ N(Σ K_uf D⁻¹ y, Σ), Σ = (K_uf D⁻¹ K_fu + K_uu)⁻¹
    (docs/mathematics.md#function-space-and-weight-space-agree), since
    K_uu + K_uf D⁻¹ K_fu = L_uu L_B L_Bᵀ L_uuᵀ. The data sums come from one streamed pass
    (:func:`woodbury_stats`, arguments as there); K_uf is formed only for small data (below). With
    ``mask`` the 2π term counts only the real points.

    The quadratic form yᵀC⁻¹y is taken from the residuals r = y − K_fu m of the weight mean m, as
    rᵀD⁻¹r + ‖L_uuᵀ m‖² (:meth:`~bayes_rbfn.gp.linalg.Woodbury.with_residuals`), not as the difference
    yᵀD⁻¹y − ‖c‖², which cancels when the noise is small. The residuals need m, and m needs every sum, so
    they take a second sweep over the data (one kernel evaluation and two matrix-vector products per
    chunk); the reverse pass stays one sweep. Data that fit in two default chunks (:func:`forms_cross`)
    form K_uf once instead, and both sweeps and the reverse pass read it: one kernel evaluation and one
    pullback through the kernel per value and gradient, instead of three evaluations and one pullback.
    """
    Kuf = None
    if forms_cross(Z.shape[0], X.shape[0], Luu.dtype, chunk_size=chunk_size, mesh=mesh, precision=precision):
        Kuf = kernel.inducing_cross(Z, X)
    stats, residual_sq = _data_sums(
        kernel, Z, X, y, d, Luu, mask, fast, chunk_size, mesh, True, precision, Kuf
    )
    n = X.shape[0] if mask is None else jnp.sum(mask)
    return linalg.woodbury(Luu, stats, n=n).with_residuals(residual_sq)


def sor_factor(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    jitter: float | None = None,
    *,
    mask: jax.Array | None = None,
    fast: bool = False,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    precision: str = "float64",
) -> linalg.Woodbury:
    """The Woodbury factorisation of SoR's Q_ff + σ²I for y (:func:`woodbury_factor` with d = σ²).

    K_uu is factorised with the jitter policy of :func:`bayes_rbfn.gp.linalg.cholesky` (``jitter``:
    relative jitter, ``None`` the policy). DTC's and VFE's training prior is SoR's, so this is their
    factor too ([3] §5).
    """
    Luu = linalg.cholesky(kernel.inducing_gram(Z), jitter)
    return woodbury_factor(
        kernel,
        Z,
        X,
        y,
        noise**2,
        Luu,
        mask=mask,
        fast=fast,
        chunk_size=chunk_size,
        mesh=mesh,
        precision=precision,
    )
