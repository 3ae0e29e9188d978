"""The O(NM²) pass of the SoR family: streamed over chunks of the data, sharded over devices.

Every SoR-family formula needs the data only through the sums of :func:`bayes_rbfn.gp.linalg.woodbury`
(its ``stats``): with a_n = L_uu⁻¹ k_u(x_n) and ω_n = 1/d_n,

    AAᵀ = Σ_n ω_n a_n a_nᵀ (M×M),   A D^-½ y = Σ_n ω_n y_n a_n (M),   yᵀD⁻¹y,   Σ_n log d_n.

This module is the one pass over the data (or the test inputs) for every formula of the family, and
the one home of each: the Woodbury factor of C = Q_ff + diag(d) (:func:`woodbury_factor`, which adds a
residual sweep for the quadratic form; SoR's :func:`sor_factor`), the LOO conditionals (:func:`sor_loo`),
the SoR predictive moments
(:func:`weight_space_moments`, streamed by :func:`sor_moments`) and the prior variance the Nyström
covariance drops, diag(K_ff − Q_ff) (:func:`nystrom_residual`). A problem small enough to form K_uf is
one chunk of the same pass; :mod:`~bayes_rbfn.gp.conditional` and :mod:`~bayes_rbfn.gp.sparse` call these
functions, and the models call them through those modules. It takes the sums as close to the machine's
floor as the whitened form allows:

* **Streamed.** The data are cut into chunks of C points (C·M·8 bytes ≈ 1 MiB, cache-sized); K_uc (M×C)
  is formed, used and dropped chunk by chunk inside a ``lax.scan``, so memory is O(MC + M²) whatever N,
  nothing of size N×M is ever materialised, and the cost is linear in N down to small N.
* **Whitened by GEMM.** a_c = W K_uc with W = L_uu⁻¹ (M×M, a triangular solve against I once per
  evaluation, O(M³), as :meth:`~bayes_rbfn.gp.linalg.Woodbury.weight_cov_factor` already does). The
  N-column triangular solve L_uu A = K_uf becomes a matrix product, which XLA's CPU runtime runs several
  times faster per flop than a triangular solve, with the same forward error (~ε·cond(L_uu));
  tests/gp/test_parallel.py checks it against the triangular-solve path (its dense reference) and a
  long-double reference. Whitening *before* the sum is what keeps the result accurate: forming
  K_uf D⁻¹ K_fu first (``fast=True``) saves one of the two products but loses digits in
  proportion to cond(K_uu), which the jitter floor puts at ~1e10 for the usual dense inducing inputs:
  errors of O(1) in the log density at N = 20,000, NaN for small noise (benchmarks/README.md).
* **Masked layouts.** A ``mask`` (N,) of real points gives padded points weight ω = 0 and no share of
  Σ log d or of the 2π term, so batched groups of unequal size (the ``grouped`` model) share the pass.
* **A hand-written reverse pass.** The backward pass recomputes K_uc chunk by chunk instead of storing
  it, and needs two products per chunk, from ∂f/∂K_uc = ω · Wᵀ (G_s W K_uc + g yᵀ) with G_s = G + Gᵀ
  (G, g the cotangents of AAᵀ and A D^-½ y); the cotangent of L_uu follows from M×M quantities alone,
  ∂f/∂L_uu = −Wᵀ (G_s AAᵀ + g (A D^-½ y)ᵀ) (using W K_uf D⁻¹ K_fu = AAᵀ L_uuᵀ), so the backward pass
  never needs a second sweep for it. Forming Wᵀ G_s W first would save one product but amplifies
  rounding by cond(K_uu) again (gradients off by up to 60 % in the same tests).
* **Summed in a fixed order.** The chunks form blocks of equal length (the data padded with weight-zero
  points): as many blocks as whole chunks fit in N, rounded down to a power of two, at most
  :data:`SUM_BLOCKS` (:func:`_block_count`). Each block is summed chunk by chunk and the block sums are
  added in block order. Every addition is then fixed by N and the chunk length, not by the device count
  (any count dividing the blocks), so sharded and single-device results are the same numbers. They must
  be: the lengthscale gradient is ill-conditioned for dense inducing inputs (cond(K_uu) ~ 1e10), and at
  N = 10⁶ another summation order alone (e.g. another chunk length) moves it by ~1e-6 relative, while the
  log density moves by ~1e-15. Below 16 chunks the blocks are fewer rather than shorter (measured there).
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
  ‖L_uu⁻¹‖ ~ cond(K_uu)^½. Against float64 at M = 64, N = 10³–10⁶ (benchmarks/mixed_precision.py,
  benchmarks/results/mixed_precision_cpu.md): with the inducing inputs 2.5 lengthscales apart (3-D,
  cond(K_uu) ≈ 1.5) the log density is within 1e-9 relative (≤ 1e-5 nats) and the gradient within 2e-8 of
  its norm; with 64 dense inducing inputs on 1-D data (cond(K_uu) ~ 1e9, the jitter floor) the log
  density is off by ~4e-5 relative (0.9 nats at N = 10⁵, 11 at 10⁶) and the gradient by 1e-2 to 3 of
  its norm: there it must not be used. In between the error grows with cond(K_uu) (below 1e-6 relative up
  to cond ~1e3 on 1-D data, ~1e8 on the 3-D grid), and cond(K_uu) moves with the lengthscales a sampler
  visits, so it is the default nowhere. A small gradient component that is the difference of terms of
  size ~N (that of log s²) keeps ~ε₃₂·N of float32 rounding from the reverse pass, where most of the
  speed-up is (a float64 reverse pass kept ~1.1× of it): value + gradient is 1.2–1.9× faster on 2 CPU
  cores (1.7–1.9× at N = 10⁵, 1.7× at 10⁶). On float32 inputs it is plain float32.
* **Leave-block-out LOO where leverages reach 1.** The LOO conditionals take diag(C⁻¹) = 1/d − ‖V_:i‖²
  from the sums, which cancels at points the model interpolates (1 − h_i ~ σ²/s²). :func:`sor_loo` flags
  the points whose 1 − h_i falls below :data:`LOO_LEVERAGE_FLOOR` and takes theirs from a second pass
  that subtracts nothing: for each leaf block B of ~M points, the weights' posterior given the other
  points, A_out = I + Σ_{j∉B} ω_j a_j a_jᵀ, as a QR square root assembled from exclusive prefixes and
  suffixes over blocks, chunks and leaves (per-chunk R factors, (M+1)² numbers each; sharded, one
  all-gather of the per-block ones), then the exact |B|-variate LOO of y_B | y_−B ~ N(F_B μ_out,
  F_B A_out⁻¹ F_Bᵀ + D_B). Memory O(CM + M² · chunks); chunks without a flagged point are skipped.
* **Sharded.** With a :class:`jax.sharding.Mesh`, the pass runs under :func:`jax.shard_map`: each device
  streams over its own whole blocks and the per-block M×M sums are ``psum``-reduced, each placed at its
  block index in an otherwise zero array (x + 0 = x exactly), then added in block order like on one
  device: the only communication, at most SUM_BLOCKS·(M² + M) numbers per evaluation whatever N. The same code
  runs on several CPU devices, GPUs or hosts.

Per evaluation of the log density and its gradient this is four M×M×C products per chunk (two forward,
two backward) against the one product of the floor (forming K_fu and K_uf K_fu), plus the residual
sweep's second kernel evaluation; see benchmarks/ for the measured ratio.

References
----------
[1] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[2] Higham, N. J. (2002). *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §8 (triangular
    systems: the forward error of a triangular solve and of multiplication by a computed inverse).
[3] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959. Eq. (16) (SoR predictive).
[4] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
[5] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press.
    Eqs. (5.10)–(5.12) (LOO from the inverse covariance).
[6] Cox, A. J. & Higham, N. J. (1998). Stability of Householder QR factorization for weighted least squares
    problems. In *Numerical Analysis 1997*, Pitman Research Notes in Mathematics 380, 57–73 (row-wise
    backward stability with column pivoting and row sorting); see also [2] ch. 19.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bayes_rbfn.gp import kernels, linalg
from bayes_rbfn.gp.kernels import Kernel

__all__ = [
    "DATA_AXIS",
    "LOO_LEVERAGE_FLOOR",
    "PRECISIONS",
    "check_precision",
    "chunk_size_for",
    "data_mesh",
    "nystrom_residual",
    "shard_data",
    "sor_factor",
    "sor_loo",
    "sor_moments",
    "weight_space_moments",
    "woodbury_factor",
    "woodbury_stats",
]

#: Name of the mesh axis along which data points are sharded.
DATA_AXIS = "data"

#: Bytes of one K_uc chunk (M×C) the default chunk size aims at: cache-resident on current CPUs.
_CHUNK_BYTES = 1 << 20

#: The same on a GPU, where a chunk must fill the device rather than a cache. Measured on an H100 (float64,
#: N = 10⁶, benchmarks/gpu_chunk_sweep.py): value + gradient 25 → 6.3 ms at M = 64 and 113 → 22 ms at
#: M = 256 against the CPU's 1 MiB chunks; no gain past ~64 MiB.
_ACCELERATOR_CHUNK_BYTES = 128 << 20


def chunk_size_for(M: int, dtype: Any = jnp.float64) -> int:
    """Default chunk length C for M inducing inputs, a power of two: C·M·itemsize ≈ 1 MiB within [256,
    16384] where JAX computes on the CPU, ≈ 128 MiB within [4096, 2²⁰] on an accelerator.
    """
    cpu = jax.default_backend() == "cpu"
    budget, lo, hi = (_CHUNK_BYTES, 256, 16384) if cpu else (_ACCELERATOR_CHUNK_BYTES, 4096, 1 << 20)
    target = budget // (max(int(M), 1) * jnp.dtype(dtype).itemsize)
    return int(min(hi, max(lo, 1 << max(int(target).bit_length() - 1, 0))))


# --------------------------------------------------------------------------------------------------
# Chunks on one device, slices over devices


def _split(a: jax.Array | None, C: int) -> tuple[Any, Any]:
    """(the first ⌊N/C⌋·C rows as (⌊N/C⌋, C, …), the remaining rows); static shapes."""
    if a is None:
        return None, None
    n = a.shape[0] // C
    return a[: n * C].reshape(n, C, *a.shape[1:]), a[n * C :]


def _varying_like(tree: Any, ref: jax.Array) -> Any:
    """``tree`` marked as varying over the shard_map axes ``ref`` varies over (a scan's carry must have the
    type of what the chunks add to it); unchanged outside shard_map.
    """
    axes = set(getattr(jax.typeof(ref), "vma", ()) or ())
    if not axes:
        return tree

    def one(a):
        missing = tuple(sorted(axes - set(getattr(jax.typeof(a), "vma", ()) or ())))
        return lax.pcast(a, missing, to="varying") if missing else a

    return jax.tree_util.tree_map(one, tree)


def _stream(body: Callable, carry: Any, C: int, *arrays: Any) -> tuple[Any, Any]:
    """Run ``body(carry, *chunk) → (carry, per_point)`` over chunks of C rows of ``arrays`` (a ``lax.scan``)
    and then over the remaining rows; returns the final carry and the per-point outputs (N rows, or None).
    """
    N = arrays[0].shape[0]
    carry = _varying_like(carry, arrays[0])
    main, tail = zip(*(_split(a, C) for a in arrays), strict=True)
    outs = []
    if N // C:
        carry, out = lax.scan(lambda c, xs: body(c, *xs), carry, main)
        if out is not None:
            outs.append(jax.tree_util.tree_map(lambda o: o.reshape(-1, *o.shape[2:]), out))
    if N % C:
        carry, out = body(carry, *tail)
        if out is not None:
            outs.append(out)
    if not outs:
        return carry, None
    return carry, jax.tree_util.tree_map(lambda *o: jnp.concatenate(o), *outs)


def _over_data(fn: Callable, mesh: Mesh | None) -> Callable:
    """``fn(shared, X, y, w) → (sums, per_point)`` over all N points, sharded over ``mesh`` when given.

    ``shared`` is replicated; X, y, w (w may be None) are split along the mesh's data axis. Each device
    runs ``fn`` on its slice; ``sums`` (a pytree of arrays added over points) are ``psum``-reduced, and
    ``per_point`` outputs stay split like the data. The N mod (devices) points an even split leaves over are
    handled by ``fn`` on the whole mesh, so any N works (N divisible by the device count avoids it).
    Its products are traced at full precision (:func:`~bayes_rbfn.gp.linalg.full_precision`).
    """
    if mesh is None:
        return linalg.full_precision(fn)

    @linalg.full_precision
    def run(shared, X, y, w):
        N = X.shape[0]
        n_main = (N // mesh.shape[DATA_AXIS]) * mesh.shape[DATA_AXIS]
        data = P(DATA_AXIS)

        def local(shared, X, y, w):
            sums, per_point = fn(shared, X, y, w)
            return jax.tree_util.tree_map(lambda a: lax.psum(a, DATA_AXIS), sums), per_point

        def cut(a, lo, hi):
            return None if a is None else a[lo:hi]

        sums, per_point = jax.shard_map(
            local, mesh=mesh, in_specs=(P(), data, data, data), out_specs=(P(), data)
        )(shared, cut(X, 0, n_main), cut(y, 0, n_main), cut(w, 0, n_main))
        if n_main < N:
            rest_sums, rest_points = fn(shared, cut(X, n_main, N), cut(y, n_main, N), cut(w, n_main, N))
            sums = jax.tree_util.tree_map(jnp.add, sums, rest_sums)
            per_point = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), per_point, rest_points)
        return sums, per_point

    return run


# --------------------------------------------------------------------------------------------------
# Sums over the data in a fixed order, whatever the number of devices

#: The most blocks the data sums are cut into (:func:`_block_count`). Each block, of equal length (the data
#: padded with masked points), is summed chunk by chunk, and the block sums are added in block order.
#: Every floating-point addition is then fixed by N and the chunk length alone, not by how many devices
#: share the work (any device count dividing the number of blocks): sharded and single-device sums are the
#: same numbers, not merely close. That matters because the sums feed an ill-conditioned reverse pass: at
#: N = 10⁶ two orders of summation (e.g. two chunk lengths) move the lengthscale gradient by ~3e-6
#: relative (benchmarks/README.md).
SUM_BLOCKS = 16


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _block_count(mesh: Mesh | None, N: int, C: int) -> tuple[int, int]:
    """(devices, blocks) for N points in chunks of at most C: as many blocks as whole chunks fit in N,
    rounded down to a power of two, between 1 and :data:`SUM_BLOCKS`; rounded up to a multiple of the
    mesh's device count (then sharded sums are added in another order than one device's).

    A block never holds less than a chunk unless N does: 16 blocks of 63 points cost 1.4× the value and
    gradient of one block of 1,000 (M = 32; 1.6× at N = 4,000, 1.35× at 10⁴), the per-chunk work being too
    small to amortise its dispatch.
    """
    n_dev = 1 if mesh is None else mesh.shape[DATA_AXIS]
    blocks = min(SUM_BLOCKS, 1 << max((N // C).bit_length() - 1, 0))
    return n_dev, blocks if blocks % n_dev == 0 else _round_up(blocks, n_dev)


def _layout(N: int, C: int, n_blocks: int) -> tuple[int, int, int]:
    """(chunk length, chunks per block, padded N) for N points in ``n_blocks`` blocks of chunks ≤ C long.

    The chunk length is shrunk (to a multiple of 8) so that padding stays below n_blocks·(chunks per
    block)·8 points: 0.4 % at N = 10⁶, C = 2048.
    """
    per_block = max(1, -(-N // (n_blocks * C)))
    C_eff = min(C, _round_up(max(1, -(-N // (n_blocks * per_block))), 8))
    return C_eff, per_block, n_blocks * per_block * C_eff


def _blocked(body: Callable, zero: Any, n_blocks: int, per_block: int, C: int, *arrays: Any):
    """Per-block sums of ``body(carry, *chunk) → (carry, per_point)`` (leading axis ``n_blocks``) over
    ``n_blocks·per_block`` chunks of C rows, and the per-point outputs (or None).
    """
    zero = _varying_like(zero, arrays[0])
    shaped = tuple(a.reshape(n_blocks, per_block, C, *a.shape[1:]) for a in arrays)

    def block(_, xs):
        return None, lax.scan(lambda c, ys: body(c, *ys), zero, xs)

    _, (sums, out) = lax.scan(block, None, shaped)
    if out is not None:
        out = jax.tree_util.tree_map(lambda o: o.reshape(-1, *o.shape[3:]), out)
    return sums, out


def _fold(sums: Any) -> Any:
    """Σ over the leading (block) axis, added strictly in block order."""
    n = jax.tree_util.tree_leaves(sums)[0].shape[0]
    total = jax.tree_util.tree_map(lambda a: a[0], sums)
    for i in range(1, n):
        total = jax.tree_util.tree_map(lambda t, a, i=i: t + a[i], total, sums)
    return total


def _zero_padded(a: jax.Array | None, rows: int) -> jax.Array | None:
    """``a`` with zero rows appended up to ``rows`` (the block layout of :func:`_layout`); None stays None."""
    if a is None or a.shape[0] == rows:
        return a
    return jnp.concatenate([a, jnp.zeros((rows - a.shape[0], *a.shape[1:]), a.dtype)])


def _summed_over_data(fn: Callable, mesh: Mesh | None, N: int, C: int) -> Callable:
    """``run(shared, X, y, w) → (sums, per_point)`` over N points, in the fixed order of the blocks of
    :func:`_block_count`.

    ``fn(shared, X, y, w, n_blocks, per_block, C)`` returns per-block sums (leading axis n_blocks) and
    per-point outputs on its rows. The data are padded to the block layout; padded points get weight
    ω = 0 (``w`` is then never None inside), so they add exact zeros. With a mesh each device takes
    n_blocks / devices whole blocks; the block sums are placed at their block index in a zero array and
    ``psum``-reduced (x + 0 = x exactly), then folded in block order like the single-device sums. Its
    products are traced at full precision (:func:`~bayes_rbfn.gp.linalg.full_precision`).
    """
    n_dev, n_blocks = _block_count(mesh, N, C)
    C_eff, per_block, N_pad = _layout(N, C, n_blocks)

    @linalg.full_precision
    def run(shared, X, y, w):
        if N_pad > N and w is None:
            w = jnp.ones(y.shape, y.dtype)
        X, y, w = (_zero_padded(a, N_pad) for a in (X, y, w))
        if mesh is None:
            sums, per_point = fn(shared, X, y, w, n_blocks, per_block, C_eff)
        else:
            local_blocks = n_blocks // n_dev

            def local(shared, X, y, w):
                sums, per_point = fn(shared, X, y, w, local_blocks, per_block, C_eff)
                offset = lax.axis_index(DATA_AXIS) * local_blocks

                def place(a):
                    full = jnp.zeros((n_blocks, *a.shape[1:]), a.dtype)
                    return lax.psum(lax.dynamic_update_slice_in_dim(full, a, offset, 0), DATA_AXIS)

                return jax.tree_util.tree_map(place, sums), per_point

            data = P(DATA_AXIS)
            sums, per_point = jax.shard_map(
                local, mesh=mesh, in_specs=(P(), data, data, data), out_specs=(P(), data)
            )(shared, X, y, w)
        if per_point is not None and N_pad > N:
            per_point = jax.tree_util.tree_map(lambda a: a[:N], per_point)
        return _fold(sums), per_point

    return run


# --------------------------------------------------------------------------------------------------
# The streamed data sums with their reverse pass


def _identity_like(L: jax.Array) -> jax.Array:
    return jnp.eye(L.shape[-1], dtype=L.dtype)


def _weight_mean(AAt: jax.Array, Ay: jax.Array, Luu: jax.Array) -> jax.Array:
    """The RBFN weight mean m = L_uu⁻ᵀ L_B⁻ᵀ c from the whitened sums, by the one Woodbury path."""
    zero = jnp.zeros((), Ay.dtype)
    return linalg.woodbury(Luu, (AAt, Ay, zero, zero), n=0).weight_mean()


#: The values of the streamed pass's ``precision`` setting (:func:`woodbury_stats`): ``"float64"`` computes
#: in the inputs' dtype; ``"mixed"`` forms the kernel blocks and their products in float32 and adds them to
#: float64 sums (see the module docstring, *Mixed precision*).
PRECISIONS: tuple[str, ...] = ("float64", "mixed")


def check_precision(precision: Any) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a ValueError naming the setting."""
    if not (isinstance(precision, str) and precision in PRECISIONS):
        raise ValueError(f"precision: expected one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    return precision


def _low(tree: Any, precision: str) -> Any:
    """``tree`` with its float64 leaves cast to float32 when ``precision`` is ``"mixed"`` (float32 leaves,
    and everything under ``"float64"``, unchanged).
    """
    if precision != "mixed":
        return tree

    def one(a):
        return a.astype(jnp.float32) if getattr(a, "dtype", None) == jnp.float64 else a

    return jax.tree_util.tree_map(one, tree)


def _translation_invariant(kernel: Kernel) -> bool:
    """Whether k(x + c, x' + c) = k(x, x') for every c, known from the kernel's type: the stationary, the
    periodic and the constant kernels, a positive multiple or a column subset of one, and sums and products
    of them (not the white-noise kernel: a shift, rounded, can make two inputs equal).
    """
    if isinstance(kernel, kernels.Stationary | kernels.Periodic | kernels.Constant):
        return True
    if isinstance(kernel, kernels.Scaled | kernels.ActiveDims):
        return _translation_invariant(kernel.kernel)
    if isinstance(kernel, kernels.Sum | kernels.Product):
        return _translation_invariant(kernel.k1) and _translation_invariant(kernel.k2)
    return False


def _centre(kernel: Kernel, Z: jax.Array, precision: str) -> jax.Array | None:
    """The point (D,) the inputs are shifted by, in float64, before they are cast to float32 under "mixed":
    the mean of Z, for a translation-invariant kernel with float64 inputs (the rounding of an input is then
    relative to the spread of the inputs, not to their distance from the origin: years, say); else None.
    """
    if precision != "mixed" or Z.dtype != jnp.float64 or not _translation_invariant(kernel):
        return None
    return jnp.mean(Z, axis=0)


def _shift(a: jax.Array, centre: jax.Array | None) -> jax.Array:
    return a if centre is None else a - centre


def _batched_like(a: jax.Array, ref: jax.Array) -> jax.Array:
    """``a`` itself, but mapped wherever ``ref`` is mapped under ``jax.vmap`` (a select on a constant
    ``True``, which XLA folds away).

    The sums AAᵀ do not depend on y. Under a ``vmap`` over y alone (a batch of series sharing the kernel
    and the inputs) the custom VJP below would then have one unmapped and one mapped output, and JAX
    (0.9) hands each mapped member's reverse pass the cotangent of the unmapped output summed over the
    whole batch: the kernel's gradient would be the batch size times too large. Tied to y, every output
    is mapped and each member's reverse pass gets its own cotangents.
    """
    return jnp.where(True, a, jnp.sum(ref).astype(a.dtype))


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
    reverse pass the kernel's pullback and its two products) are taken in float32 (:func:`_low` of the
    chunk and of kernel, Z, W; the inputs shifted by :func:`_centre` first), and each chunk's result is
    cast to float64 before it is added to the float64 sums and cotangents; the residual sweep stays in
    float64 (see the module docstring).

    The function is jitted (and cached with its settings): called eagerly, a second call of the same
    shapes traces and compiles nothing; inside a caller's ``jit`` it is inlined as any nested program.
    """
    # The dtype of each chunk's work: float32 under "mixed" (float64 inputs), else the inputs' own.
    low = functools.partial(_low, precision=precision)

    def local_sums(shared, X, y, w, n_blocks, per_block, C_eff):
        kernel, Z, W = shared
        M = Z.shape[0]
        acc = W.dtype
        centre = _centre(kernel, Z, precision)
        kernel_c, Z_c, W_c = low((kernel, _shift(Z, centre), W))

        def body(carry, x, yc, *wc):
            S, r = carry
            x, yc, wc = low((_shift(x, centre), yc, wc))
            K = kernel_c.inducing_cross(Z_c, x)
            A = K if fast else W_c @ K
            Aw = A * wc[0] if wc else A
            return (S + (Aw @ A.T).astype(acc), r + (Aw @ yc).astype(acc)), None

        zeros = (jnp.zeros((M, M), W.dtype), jnp.zeros((M,), W.dtype))
        rest = [] if w is None else [w]
        return _blocked(body, zeros, n_blocks, per_block, C_eff, X, y, *rest)[0], None

    def local_residuals(shared, X, y, w, n_blocks, per_block, C_eff):
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
        return _blocked(body, zeros, n_blocks, per_block, C_eff, X, y, *rest)[0], None

    def local_grads(want_w, shared, X, y, w, n_blocks, per_block, C_eff):
        kernel, Z, W, left, h, m, s = shared
        # As varying (per-device) values, the pullback gives each device's own share of their cotangents,
        # reduced once at the end, instead of a psum per chunk inserted by autodiff.
        kernel, Z = _varying_like((kernel, Z), X)
        # "mixed": the pullback and the products in float32; the cotangent sums stay float64, the per-point
        # cotangents come back in the dtype of X, y and w.
        # (A constant shift of every input leaves the kernel's cotangents as they are.)
        centre = _centre(kernel, Z, precision)
        kernel_c, Z_c, W, left, h, m, s = low((kernel, _shift(Z, centre), W, left, h, m, s))
        X_dtype, y_dtype = X.dtype, y.dtype

        def body(carry, x, yc, *wc):
            dk, dz = carry
            x, yc, wc = low((_shift(x, centre), yc, wc))
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
        return _blocked(body, carry0, n_blocks, per_block, C_eff, X, y, *rest)

    @linalg.full_precision
    def sums(kernel, Z, Luu, X, y, w):
        W = linalg.solve_lower(Luu, _identity_like(Luu))
        S, r = _summed_over_data(local_sums, mesh, X.shape[0], C)((kernel, Z, W), X, y, w)[0]
        if fast:
            S, r = W @ S @ W.T, W @ r
        return _batched_like(0.5 * (S + S.T), y), r, W

    @linalg.full_precision
    def backward(kernel, Z, X, y, w, W, AAt, Ay, G, g, m, s):
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
        grads = functools.partial(local_grads, w is not None)
        shared = (kernel, Z, W, left, h, m, s)
        (dk, dz), per_point = _summed_over_data(grads, mesh, X.shape[0], C)(shared, X, y, w)
        return dk, dz, dLuu, per_point["X"], per_point["y"], per_point.get("w")

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
        rss, u = _summed_over_data(local_residuals, mesh, X.shape[0], C)((kernel, Z, m), X, y, w)[0]
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


def _weights(d: Any, y: jax.Array, mask: jax.Array | None, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """(ω = 1/d per point, zero where ``mask`` is False; Σ log d over the real points)."""
    d = jnp.broadcast_to(jnp.asarray(d, dtype=dtype), y.shape)
    if mask is None:
        return 1.0 / d, jnp.sum(jnp.log(d))
    return jnp.where(mask, 1.0 / d, 0.0), jnp.sum(jnp.where(mask, jnp.log(d), 0.0))


def _data_sums(kernel, Z, X, y, d, Luu, mask, fast, chunk_size, mesh, residuals, precision="float64"):
    """``(stats, rᵀD⁻¹r or None)`` for :func:`woodbury_stats` and :func:`woodbury_factor`."""
    C = int(chunk_size or chunk_size_for(Z.shape[0], Luu.dtype))
    d = jnp.asarray(d, dtype=jnp.result_type(Luu, d))
    streamed = _streamed(bool(fast), C, mesh, residuals, check_precision(precision))
    if d.ndim == 0 and mask is None:
        # One weight for every point: the sums are taken unweighted and divided once.
        out = streamed(kernel, Z, Luu, X, y, None, d) if residuals else streamed(kernel, Z, Luu, X, y, None)
        stats = (out[0] / d, out[1] / d, jnp.sum(y * y) / d, y.shape[0] * jnp.log(d))
        return stats, out[2] / d if residuals else None
    w, logdet_d = _weights(d, y, mask, d.dtype)
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
) -> tuple:
    """The data sums of :func:`bayes_rbfn.gp.linalg.woodbury` for C = Q_ff + diag(d), in one streamed pass.

    Returns ``(AAᵀ, A D^-½ y, yᵀD⁻¹y, Σ log d)`` with A = L_uu⁻¹ K_uf D^-½, ready for
    ``linalg.woodbury(Luu, stats, n=N)``, without forming K_uf. Differentiable (a hand-written reverse
    pass; see the module docstring) in the kernel hyperparameters, Z, L_uu, X, y and d.
    :func:`woodbury_factor` adds the residual sweep that the quadratic form needs at small noise.

    Args:
        kernel: covariance function. Z: (M, D) inducing inputs. X: (N, D) inputs. y: (N,) targets.
        d: scalar (σ² for SoR/DTC) or (N,) diagonal part (FITC).
        Luu: (M, M) Cholesky factor of K_uu (see :func:`bayes_rbfn.gp.linalg.cholesky`).
        mask: (N,) booleans, False at padded points, which then add nothing to any sum.
        fast: take the products before whitening (one product per chunk fewer; ill-conditioned).
        chunk_size: data points per chunk (default :func:`chunk_size_for`).
        mesh: shard the pass over the ``"data"`` axis of this mesh (see :func:`data_mesh`).
        precision: ``"float64"`` (default) or ``"mixed"``: each chunk's kernel block and products in
            float32, added to float64 sums; the M×M algebra stays float64. Accurate (~1e-9 relative in
            the log density) only while K_uu is well conditioned, wrong by ~1e-5 relative for the
            cond(K_uu) ~ 1e9 of dense inducing inputs (see the module docstring, *Mixed precision*); no
            effect on float32 inputs.
    """
    return _data_sums(kernel, Z, X, y, d, Luu, mask, fast, chunk_size, mesh, False, precision)[0]


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
    (:func:`woodbury_stats`, arguments as there); K_uf is never formed. With ``mask`` the 2π term counts
    only the real points.

    The quadratic form yᵀC⁻¹y is taken from the residuals r = y − K_fu m of the weight mean m, as
    rᵀD⁻¹r + ‖L_uuᵀ m‖² (:meth:`~bayes_rbfn.gp.linalg.Woodbury.with_residuals`), not as the difference
    yᵀD⁻¹y − ‖c‖², which cancels when the noise is small. The residuals need m, and m needs every sum, so
    they take a second sweep over the data (one kernel evaluation and two matrix-vector products per
    chunk); the reverse pass stays one sweep.
    """
    stats, residual_sq = _data_sums(kernel, Z, X, y, d, Luu, mask, fast, chunk_size, mesh, True, precision)
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


# --------------------------------------------------------------------------------------------------
# Per-point outputs: LOO conditionals, predictive moments and the Nyström residual, streamed and sharded


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
    """``jnp.any(flag)``; under ``vmap`` the any over the whole batch, an unbatched bool, so that a
    ``lax.cond`` on it stays a branch (taken by every member) instead of a select that runs both branches
    for every member. The argument must carry no gradient (``lax.stop_gradient``).
    """
    return jnp.any(flag)


@_any_over_batch.def_vmap
def _any_over_batch_rule(axis_size: int, in_batched: list, flag: jax.Array) -> tuple[jax.Array, bool]:
    return _any_over_batch(flag), False


def _r_factor(G: jax.Array) -> jax.Array:
    """The (n, n) upper-triangular R of a Householder QR of G (k, n), zero rows appended when k < n:
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
    zero = _varying_like(jnp.zeros(Rs.shape[1:], Rs.dtype), Rs)
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
    """LOO conditionals of the b points of one leaf block B given all others, from their square-root
    information: ``R_pre``, ``R_suf`` (M+1, M+1) hold, in the row space of the augmented data rows
    √ω_j [a_jᵀ, y_j], the points before and after B (whatever of the data is not in B). F_B (b, M) are
    the whitened rows a_jᵀ of B, y_B and w_B = ω_B (b,) their targets and weights (0: padding).
    """
    M = F_B.shape[1]
    prior = jnp.concatenate([jnp.eye(M, dtype=F_B.dtype), jnp.zeros((M, 1), F_B.dtype)], axis=1)
    G = jnp.concatenate([R_pre, R_suf, prior])
    # A_out = I + Σ_{j∉B} ω_j a_j a_jᵀ = G_aᵀ G_a (G_a: G's first M columns); b_out = G_aᵀ g (g: its last).
    # Rows sorted by size and columns pivoted make the Householder QR row-wise backward stable [6], so
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
    """One device's share of :func:`_leave_block_out_loo`: the LOO conditionals of its points, (rows,),
    zero in chunks without a flagged point. ``layout`` = (blocks here, chunks per block, chunk length);
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
                skip = _varying_like(jnp.zeros((b,), W.dtype), args[0])
                return lax.cond(_any_over_batch(f_B), lambda: _leaf_loo(*args, statistic), lambda: skip)

            return lax.map(leaf, (R_pre, R_suf, *leaves[1:])).reshape(-1)[:C]

        skip = _varying_like(jnp.zeros((C,), W.dtype), x)
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
    """
    N = X.shape[0]
    n_dev, n_blocks = _block_count(mesh, N, C)
    C_eff, per_block, N_pad = _layout(N, C, n_blocks)

    arrays = tuple(_zero_padded(a, N_pad) for a in (X, y, w, flag))
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
                gather=lambda a: lax.all_gather(a, DATA_AXIS, tiled=True),
                first=lax.axis_index(DATA_AXIS) * local_blocks,
                statistic=statistic,
            )

        data = P(DATA_AXIS)
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
    return _blocked(body, jnp.zeros((), R.dtype), n_blocks, per_block, C_eff, X, y, w)


@functools.cache
def _woodbury_loo_pass(mesh: Mesh | None, C: int, statistic: str = "log_density") -> Callable:
    """``run(shared, X, y, w)`` of :func:`_woodbury_loo_local` over all of X's points, compiled once per
    setting and shape (an eager :func:`sor_loo` then traces and compiles nothing the second time).
    """

    def run(shared, X, y, w):
        local = functools.partial(_woodbury_loo_local, statistic=statistic)
        return _summed_over_data(local, mesh, X.shape[0], C)(shared, X, y, w)

    return jax.jit(run)


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
    """LOO conditionals log p(y_i | y_−i) for y ~ N(0, C), C = Q_ff + diag(d), shape (N,), in O(NM²) ([4]).

    C⁻¹ = D⁻¹ − VᵀV with V = R K_uf D⁻¹ and R = L_B⁻¹ L_uu⁻¹ (Woodbury identity), so
    diag(C⁻¹) = 1/d − ‖V_:i‖²; C⁻¹y = D⁻¹ r from the residuals r = y − K_fu m of the weight mean m (those
    of :func:`woodbury_factor`'s quadratic form); then :func:`bayes_rbfn.gp.linalg.loo_from_precision`.
    Streamed over chunks of X like the sums.

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

    and the point's conditional is that of the |B|-variate Gaussian y_B | y_−B ([5] eqs. (5.10)–(5.12) on
    S_B, :func:`~bayes_rbfn.gp.linalg.loo_from_chol`). A_out is a sum over the other points only, held as
    a square root R_outᵀR_out by QR of stacked rows: exclusive prefixes and suffixes of the per-chunk R
    over blocks, chunks and leaves, and a row-sorted, column-pivoted QR for the prior's I [6]; a formed
    A_out would lose that I next to terms of size 1/σ². Against a 60-digit reference
    (tests/gp/test_small_noise.py) the interpolated points are then within 2e-14 relative where every point
    is interpolated (Z = X, σ = 1e-6 and 1e-8; the Woodbury values: 2e-3 and NaN) and within 3e-9 among
    ordinary points at σ = 1e-8 (Woodbury: 9e-4), the problem's own sensitivity to ε-changes of y there.

    Cost: the leave-block-out pass is one tall-skinny QR per chunk, in chunks holding a flagged point two
    (M+1+b)×(M+1) QRs per leaf of b ≈ M points (its prefix and suffix), and in leaves holding one a pivoted
    (3M+2)×M QR and an (M+b)×b one. Measured at N = 10⁴ and 10⁵, M = 64 (2 CPU cores, float64), against
    the Woodbury pass alone (3.4 and 23 ms, unchanged by the flagging): ~6 times more with one point
    flagged and 37–50 times with every chunk flagged with OpenBLAS on one thread, ~10 and 50–60 times with
    its default threads (small QRs).
    It is skipped wholly when no point is flagged. Under ``vmap`` (one evaluation per posterior draw) it runs
    for the whole batch when any member has a flagged point and for none otherwise
    (:func:`_any_over_batch`: never a select that runs it for every evaluation). The flagged values carry no
    gradient (``stop_gradient``; LOO values are evaluated, not optimised).

    Args:
        factor: the :class:`~bayes_rbfn.gp.linalg.Woodbury` of C for y (:func:`woodbury_factor`).
        kernel, Z, X, y, d, mask: as given to :func:`woodbury_factor`. Padded points (``mask`` False)
            get the value 0.
        chunk_size, mesh: as :func:`woodbury_stats`.
        exact: whether flagged points take the leave-block-out pass. ``None`` (default): yes when called
            eagerly (the decision is then a concrete value, and the pass is compiled only when a point
            needs it); under ``jit`` (a traced decision) only with ``exact=True``, as a ``lax.cond``
            compiles both branches and the pass's compile (2–5 s) would come with every compiled LOO,
            e.g. every fit's per-draw log-likelihood, whose interpolated points then keep their Woodbury
            values. ``False``: never. ``"defer"``: as ``None``, but under ``jit`` a flagged point's value
            is NaN ("not computed here"), so that a caller evaluating many draws compiles and runs the pass
            only for the draws that need it (:func:`bayes_rbfn.infer.fitting.pointwise_loo`, with
            ``exact=True`` for those).
        statistic: ``"log_density"`` (default), ``"pit"``: each conditional's CDF at y_i, for LOO-PIT, or
            ``"residual"``: y_i − E[y_i | y_−i] (:func:`bayes_rbfn.gp.linalg.loo_from_precision`), from the
            same passes.
    """
    if exact not in (None, True, False, "defer"):
        raise ValueError(f"exact: expected None, True, False or 'defer', got {exact!r}")
    if statistic not in linalg.LOO_STATISTICS:
        raise ValueError(f"statistic: expected one of {linalg.LOO_STATISTICS}, got {statistic!r}")
    C = chunk_size or chunk_size_for(Z.shape[0], factor.Luu.dtype)
    R = factor.weight_cov_factor()
    w, _ = _weights(d, y, mask, R.dtype)

    # Padded points have ω = 0 (their values, cut off or masked, are not finite).
    shared = (kernel, Z, R, factor.weight_mean())
    loo, one_minus_h = _woodbury_loo_pass(mesh, C, statistic)(shared, X, y, w)[1]
    floor = LOO_LEVERAGE_FLOOR.get(jnp.dtype(R.dtype), LOO_LEVERAGE_FLOOR[jnp.dtype("float32")])
    # Below the floor or not a number; not where the factorisation itself failed (all NaN, as before).
    factorised = jnp.all(jnp.isfinite(factor.Luu)) & jnp.all(jnp.isfinite(factor.LB))
    flag = ~(lax.stop_gradient(one_minus_h) >= floor) & lax.stop_gradient(factorised)
    if mask is not None:
        flag = flag & mask

    def second_pass():
        # Without a reverse pass (pivoted QR has none in JAX): the LOO values are evaluated, not optimised.
        args = lax.stop_gradient(
            (kernel, Z, linalg.solve_lower(factor.Luu, _identity_like(factor.Luu)), X, y, w)
        )
        return jnp.where(flag, _leave_block_out_loo(*args, flag, C, mesh, statistic), loo)

    any_flagged = _any_over_batch(flag)
    if isinstance(any_flagged, jax.core.Tracer):
        if exact == "defer":
            loo = jnp.where(flag, jnp.nan, loo)
        elif exact:
            loo = lax.cond(any_flagged, second_pass, lambda: loo)
    elif exact is not False and bool(any_flagged):
        loo = second_pass()
    return loo if mask is None else jnp.where(mask, loo, 0.0)


@linalg.full_precision
def weight_space_moments(
    R: jax.Array, weights: jax.Array, Kus: jax.Array, full_cov: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """Moments of f* = K_*u α under the RBFN weight posterior α | y ~ N(weights, RᵀR): SoR's predictive.

    mean = K_*u m, cov = (R K_u*)ᵀ (R K_u*) = K_*u Σ K_u* with m = Σ K_uf D⁻¹ y and Σ = RᵀR
    (docs/mathematics.md#function-space-and-weight-space-agree; eq. (16) of [3]); equal to the function-space
    form Q_*f (Q_ff + σ²I)⁻¹ y,
    Q_** − Q_*f (Q_ff + σ²I)⁻¹ Q_f*.

    Args:
        R: (M, M) factor of the weights' posterior covariance
            (:meth:`~bayes_rbfn.gp.linalg.Woodbury.weight_cov_factor`). weights: m, shape (M,).
        Kus: (M, S) cross-covariances k(Z, X_test). full_cov: also return the (S, S) covariance.

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
    inputs shifted by Z's mean first, as in :func:`woodbury_stats`); R and m come from the float64 factor
    and are rounded once. The rounding of k_u(x*) comes out of R and m amplified: accurate only while
    K_uu is well conditioned (see the module docstring, *Mixed precision*).
    """
    precision = check_precision(precision)
    C = chunk_size or chunk_size_for(Z.shape[0], factor.Luu.dtype)
    centre = _centre(kernel, Z, precision)
    shared = _low((kernel, _shift(Z, centre), factor.weight_cov_factor(), factor.weight_mean()), precision)
    placeholder = jnp.zeros(X_test.shape[:1], X_test.dtype)
    run = _moments_pass(mesh, C, precision, jnp.dtype(factor.Luu.dtype))
    return run((*shared, centre), X_test, placeholder, None)[1]


@functools.cache
def _moments_pass(mesh: Mesh | None, C: int, precision: str, dtype: Any) -> Callable:
    """``run(shared, X, y, w)`` of :func:`sor_moments` (``shared`` = kernel, Z, R, m, centre), compiled once
    per setting (an eager :func:`sor_moments` then traces and compiles nothing the second time).
    """

    def local(shared, X, y, w):
        kernel, Z, R, mean, centre = shared

        def body(carry, x):
            x = _low(_shift(x, centre), precision)
            mean_c, var_c = weight_space_moments(R, mean, kernel.inducing_cross(Z, x))[:2]
            return carry, (mean_c.astype(dtype), var_c.astype(dtype))

        return None, _stream(body, None, C, X)[1]

    return jax.jit(_over_data(local, mesh))


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
    noise, DTC's restored test variance K_** − Q_** ([3] §5–6), the numerator of the share of prior
    variance lost (:func:`bayes_rbfn.gp.sparse.prior_variance_lost`) and, with Z = X, the squared power
    function (docs/mathematics.md#inducing-inputs-at-the-data, §3.7). Clamped at 0: in exact arithmetic it is
    a variance, and a
    rounding-level negative value must not reach FITC's noise diagonal. Memory O(MC).

    Args:
        kernel: covariance function. Z: (M, D) inducing inputs. Luu: (M, M) Cholesky factor of K_uu.
        X: (N, D) inputs. chunk_size, mesh: as :func:`woodbury_stats`.
    """
    C = chunk_size or chunk_size_for(Z.shape[0], Luu.dtype)
    W = linalg.solve_lower(Luu, _identity_like(Luu))
    placeholder = jnp.zeros(X.shape[:1], X.dtype)
    return jnp.maximum(_residual_pass(mesh, C)((kernel, Z, W), X, placeholder, None)[1], 0.0)


@functools.cache
def _residual_pass(mesh: Mesh | None, C: int) -> Callable:
    """``run(shared, X, y, w)`` of :func:`nystrom_residual` (``shared`` = kernel, Z, L_uu⁻¹), compiled once
    per setting.
    """

    def local(shared, X, y, w):
        kernel, Z, W = shared

        def body(carry, x):
            A = W @ kernel.inducing_cross(Z, x)
            return carry, kernel.diag(x) - jnp.sum(A * A, axis=0)

        return None, _stream(body, None, C, X)[1]

    return jax.jit(_over_data(local, mesh))


# --------------------------------------------------------------------------------------------------
# Meshes and data placement


def data_mesh(devices: Any = None) -> Mesh:
    """A 1-D mesh with axis ``"data"`` over ``devices`` (default: every device JAX sees, all hosts)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def shard_data(data: dict, mesh: Mesh, keys: tuple[str, ...] = ("X", "y")) -> dict:
    """Place the per-point arrays of a model's data dict along the mesh's data axis, the rest replicated.

    Arrays whose length is not a multiple of the device count are left replicated (the sharded pass
    then slices them itself); pass N divisible by the device count to avoid that copy.
    """
    n_dev = mesh.shape[DATA_AXIS]
    out = {}
    for name, value in data.items():
        if value is None or not hasattr(value, "shape"):
            out[name] = value
            continue
        split = name in keys and value.ndim >= 1 and value.shape[0] % n_dev == 0
        spec = P(DATA_AXIS) if split else P()
        out[name] = jax.device_put(value, NamedSharding(mesh, spec))
    return out
