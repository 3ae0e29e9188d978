"""The machinery of the SoR family's O(NM²) passes: chunks, sums in a fixed order, devices.

Every pass of the family over the data or the test inputs, the Woodbury sums with their reverse pass
(:mod:`~bayes_rbfn.gp.woodbury_sums`), the LOO conditionals (:mod:`~bayes_rbfn.gp.block_loo`), the
predictive moments and the Nyström residual (:mod:`~bayes_rbfn.gp.moments`), runs on what this module
holds: the chunks (:func:`stream`; :func:`scan_blocks` by blocks), the sums over the data in a fixed
block order, sharded over devices (:func:`summed_over_data`; :func:`over_data` for the per-point passes
over test inputs), the default chunk length (:func:`chunk_size_for`), the mesh and the placement of the
data (:func:`data_mesh`, :func:`shard_data`), and the casts of the ``precision`` setting
(:data:`PRECISIONS`):

* **Streamed.** The data are cut into chunks of C points (C·M·8 bytes ≈ 1 MiB, cache-sized); K_uc (M×C)
  is formed, used and dropped chunk by chunk inside a ``lax.scan``, so memory is O(MC + M²) whatever N,
  nothing of size N×M is materialised beyond two chunks' worth (data that small have K_uf formed once:
  :func:`~bayes_rbfn.gp.woodbury_sums.forms_cross`), and the cost is linear in N down to small N.
* **Summed in a fixed order.** The chunks form blocks of equal length (the data padded with weight-zero
  points): as many blocks as whole chunks fit in N, rounded down to a power of two, at most
  :data:`SUM_BLOCKS` (:func:`block_count`). Each block is summed chunk by chunk and the block sums are
  added in block order. Every addition is then fixed by N and the chunk length, not by the device count
  (any count dividing the blocks), so sharded and single-device results are the same numbers. They must
  be: the lengthscale gradient is ill-conditioned for dense inducing inputs (cond(K_uu) ~ 1e10), and at
  N = 10⁶ another summation order alone (e.g. another chunk length) moves it by ~1e-6 relative, while the
  log density moves by ~1e-15. Below 16 chunks the blocks are fewer rather than shorter: a block shorter
  than a chunk holds too little work to pay for its dispatch.
* **Sharded.** With a :class:`jax.sharding.Mesh`, the pass runs under :func:`jax.shard_map`: each device
  streams over its own whole blocks and the per-block M×M sums are ``psum``-reduced, each placed at its
  block index in an otherwise zero array (x + 0 = x exactly), then added in block order like on one
  device: the only communication, at most SUM_BLOCKS·(M² + M) numbers per evaluation whatever N. The same code
  runs on several CPU devices, GPUs or hosts.
* **Mixed precision** (``precision="mixed"``, off by default). A chunk's inputs are shifted by the mean of
  Z (:func:`input_centre`, :func:`shifted`) and its work is cast to float32 (:func:`in_low_precision`);
  what that costs and where it is accurate: :mod:`~bayes_rbfn.gp.woodbury_sums`, *Mixed precision*.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bayes_rbfn.gp import kernels, linalg
from bayes_rbfn.gp.kernels import Kernel

__all__ = [
    "DATA_AXIS",
    "PRECISIONS",
    "SUM_BLOCKS",
    "block_count",
    "block_layout",
    "check_precision",
    "chunk_size_for",
    "data_mesh",
    "in_low_precision",
    "input_centre",
    "over_data",
    "process_rows",
    "replicated",
    "scan_blocks",
    "shard_data",
    "shifted",
    "stream",
    "summed_over_data",
    "to_host",
    "varying_like",
    "zero_padded",
]

#: Name of the mesh axis along which data points are sharded.
DATA_AXIS = "data"

#: Bytes of one K_uc chunk (M×C) the default chunk size aims at: cache-resident on current CPUs.
_CHUNK_BYTES = 1 << 20

#: The same on a GPU, where a chunk must fill the device rather than a cache: the CPU's 1 MiB chunks leave
#: it underused, and chunks larger than this gain nothing.
_ACCELERATOR_CHUNK_BYTES = 128 << 20


def chunk_size_for(M: int, dtype: Any = jnp.float64) -> int:
    """Default chunk length C for M inducing inputs, a power of two.

    C·M·itemsize ≈ 1 MiB within [256, 16384] where JAX computes on the CPU, ≈ 128 MiB within [4096, 2²⁰] on
    an accelerator.
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


def varying_like(tree: Any, ref: jax.Array) -> Any:
    """``tree`` marked as varying over the shard_map axes ``ref`` varies over; unchanged outside shard_map.

    A scan's carry must have the type of what the chunks add to it.
    """
    axes = _varying_axes(ref)
    if not axes:
        return tree

    def one(a):
        missing = tuple(sorted(axes - _varying_axes(a)))
        return lax.pcast(a, missing, to="varying") if missing else a

    return jax.tree_util.tree_map(one, tree)


def _varying_axes(a: Any) -> set[str]:
    """The shard_map axes ``a`` varies over: ``vma`` of its type (jax 0.9) or ``manual_axis_type.varying``."""
    aval = jax.typeof(a)
    axes = getattr(aval, "vma", None)
    if axes is None:
        axes = getattr(getattr(aval, "manual_axis_type", None), "varying", ())
    return set(axes or ())


def stream(body: Callable, carry: Any, C: int, *arrays: Any) -> tuple[Any, Any]:
    """Run ``body(carry, *chunk) → (carry, per_point)`` over chunks of C rows of ``arrays``.

    A ``lax.scan`` over the whole chunks, then the remaining rows; returns the final carry and the
    per-point outputs (N rows, or None).
    """
    N = arrays[0].shape[0]
    carry = varying_like(carry, arrays[0])
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


def over_data(fn: Callable, mesh: Mesh | None) -> Callable:
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

#: The most blocks the data sums are cut into (:func:`block_count`). Each block, of equal length (the data
#: padded with masked points), is summed chunk by chunk, and the block sums are added in block order.
#: Every floating-point addition is then fixed by N and the chunk length alone, not by how many devices
#: share the work (any device count dividing the number of blocks): sharded and single-device sums are the
#: same numbers, not merely close. That matters because the sums feed an ill-conditioned reverse pass: at
#: N = 10⁶ two orders of summation (e.g. two chunk lengths) move the lengthscale gradient by ~3e-6
#: relative.
SUM_BLOCKS = 16


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def block_count(mesh: Mesh | None, N: int, C: int) -> tuple[int, int]:
    """(devices, blocks) for N points in chunks of at most C.

    As many blocks as whole chunks fit in N, rounded down to a power of two, between 1 and
    :data:`SUM_BLOCKS`; rounded up to a multiple of the mesh's device count (then sharded sums are added
    in another order than one device's).

    A block never holds less than a chunk unless N does: 16 blocks of a few dozen points cost more than
    fewer blocks of whole chunks, the per-chunk work being too small to amortise its dispatch.
    """
    n_dev = 1 if mesh is None else mesh.shape[DATA_AXIS]
    blocks = min(SUM_BLOCKS, 1 << max((N // C).bit_length() - 1, 0))
    return n_dev, blocks if blocks % n_dev == 0 else _round_up(blocks, n_dev)


def block_layout(N: int, C: int, n_blocks: int) -> tuple[int, int, int]:
    """(chunk length, chunks per block, padded N) for N points in ``n_blocks`` blocks of chunks ≤ C long.

    The chunk length is shrunk (to a multiple of 8) so that padding stays below n_blocks·(chunks per
    block)·8 points: 0.4 % at N = 10⁶, C = 2048.
    """
    per_block = max(1, -(-N // (n_blocks * C)))
    C_eff = min(C, _round_up(max(1, -(-N // (n_blocks * per_block))), 8))
    return C_eff, per_block, n_blocks * per_block * C_eff


def scan_blocks(body: Callable, zero: Any, n_blocks: int, per_block: int, C: int, *arrays: Any):
    """Per-block sums of ``body(carry, *chunk) → (carry, per_point)``, and the per-point outputs (or None).

    The sums have the leading axis ``n_blocks``, over ``n_blocks·per_block`` chunks of C rows.
    """
    zero = varying_like(zero, arrays[0])
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


def zero_padded(a: jax.Array | None, rows: int) -> jax.Array | None:
    """``a`` with zero rows appended up to ``rows`` (the layout of :func:`block_layout`); None stays None."""
    if a is None or a.shape[0] == rows:
        return a
    return jnp.concatenate([a, jnp.zeros((rows - a.shape[0], *a.shape[1:]), a.dtype)])


def summed_over_data(fn: Callable, mesh: Mesh | None, N: int, C: int) -> Callable:
    """``run(shared, X, y, w) → (sums, per_point)`` over N points, in the fixed order of the blocks.

    The blocks are :func:`block_count`'s.

    ``fn(shared, X, y, w, n_blocks, per_block, C)`` returns per-block sums (leading axis n_blocks) and
    per-point outputs on its rows. The data are padded to the block layout; padded points get weight
    ω = 0 (``w`` is then never None inside), so they add exact zeros. With a mesh each device takes
    n_blocks / devices whole blocks; the block sums are placed at their block index in a zero array and
    ``psum``-reduced (x + 0 = x exactly), then folded in block order like the single-device sums. Its
    products are traced at full precision (:func:`~bayes_rbfn.gp.linalg.full_precision`).
    """
    n_dev, n_blocks = block_count(mesh, N, C)
    C_eff, per_block, N_pad = block_layout(N, C, n_blocks)

    @linalg.full_precision
    def run(shared, X, y, w):
        if N_pad > N and w is None:
            w = jnp.ones(y.shape, y.dtype)
        X, y, w = (zero_padded(a, N_pad) for a in (X, y, w))
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
# Mixed precision: the casts of a chunk's work

#: The values of the streamed pass's ``precision`` setting
#: (:func:`~bayes_rbfn.gp.woodbury_sums.woodbury_stats`): ``"float64"`` computes in the inputs' dtype;
#: ``"mixed"`` forms the kernel blocks and their products in float32 and adds them to float64 sums
#: (:mod:`~bayes_rbfn.gp.woodbury_sums`, *Mixed precision*).
PRECISIONS: tuple[str, ...] = ("float64", "mixed")


def check_precision(precision: Any) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a ValueError naming the setting."""
    if not (isinstance(precision, str) and precision in PRECISIONS):
        raise ValueError(f"precision: expected one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    return precision


def in_low_precision(tree: Any, precision: str) -> Any:
    """``tree`` with its float64 leaves cast to float32 when ``precision`` is ``"mixed"``.

    Float32 leaves, and everything under ``"float64"``, are unchanged.
    """
    if precision != "mixed":
        return tree

    def one(a):
        return a.astype(jnp.float32) if getattr(a, "dtype", None) == jnp.float64 else a

    return jax.tree_util.tree_map(one, tree)


def _translation_invariant(kernel: Kernel) -> bool:
    """Whether k(x + c, x' + c) = k(x, x') for every c, known from the kernel's type.

    True for the stationary, the periodic and the constant kernels, a positive multiple or a column subset
    of one, and sums and products of them (not the white-noise kernel: a shift, rounded, can make two
    inputs equal).
    """
    if isinstance(kernel, kernels.Stationary | kernels.Periodic | kernels.Constant):
        return True
    if isinstance(kernel, kernels.Scaled | kernels.ActiveDims):
        return _translation_invariant(kernel.kernel)
    if isinstance(kernel, kernels.Sum | kernels.Product):
        return _translation_invariant(kernel.k1) and _translation_invariant(kernel.k2)
    return False


def input_centre(kernel: Kernel, Z: jax.Array, precision: str) -> jax.Array | None:
    """The point (D,) the inputs are shifted by, in float64, before they are cast to float32 under "mixed".

    The mean of Z, for a translation-invariant kernel with float64 inputs (the rounding of an input is then
    relative to the spread of the inputs, not to their distance from the origin: years, say); else None.
    """
    if precision != "mixed" or Z.dtype != jnp.float64 or not _translation_invariant(kernel):
        return None
    return jnp.mean(Z, axis=0)


def shifted(a: jax.Array, centre: jax.Array | None) -> jax.Array:
    """``a`` − ``centre`` (the inputs shifted by :func:`input_centre`); ``a`` itself when it is None."""
    return a if centre is None else a - centre


# --------------------------------------------------------------------------------------------------
# Meshes and data placement


def data_mesh(devices: Any = None) -> Mesh:
    """A 1-D mesh with axis ``"data"`` over ``devices`` (default: every device JAX sees, all hosts)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def process_rows(local: Any, mesh: Mesh) -> jax.Array:
    """The global array whose rows are every process's ``local`` rows, in process order.

    Split along the mesh's data axis (:func:`jax.make_array_from_process_local_data`).

    Every process must hold the same number of rows, a multiple of its number of devices in the mesh.

    Args:
        local: (n, …) this process's rows.
        mesh: a mesh with a ``"data"`` axis over the devices of every process (:func:`data_mesh`).

    Returns:
        The (n · processes, …) global array, each device holding its own processes' rows.
    """
    local = np.asarray(local)
    spec = P(DATA_AXIS, *([None] * (local.ndim - 1)))
    return jax.make_array_from_process_local_data(NamedSharding(mesh, spec), local)


def replicated(value: Any, mesh: Mesh) -> jax.Array:
    """``value`` (the same in every process) placed whole on every device of the mesh.

    Args:
        value: an array, equal in every process.
        mesh: the mesh.

    Returns:
        A global array replicated over the mesh.
    """
    value = np.asarray(value)
    sharding = NamedSharding(mesh, P())
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def to_host(value: Any) -> np.ndarray:
    """A NumPy copy of ``value`` in this process: the whole array, even where it spans several processes.

    A replicated array is copied from this process's copy, a sharded one gathered from every process.

    Args:
        value: a jax.Array (or anything :func:`numpy.asarray` takes).

    Returns:
        The array's value, whole.
    """
    if not isinstance(value, jax.Array) or value.is_fully_addressable or value.is_fully_replicated:
        return np.asarray(value)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


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
