"""Checks on concrete user input at the public entry points: clear errors, never NaN.

See docs/mathematics.md#numerics.

Inside traced code (jit, vmap, NUTS) the values are tracers and these checks step aside; the log
densities are then guarded with -inf instead (see :mod:`bayes_rbfn.gp.linalg`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "INPUT_RELATIVE_SPREAD",
    "INPUT_SCALES",
    "TARGET_SCALES",
    "as_float_array",
    "check_X",
    "check_Z",
    "check_positive",
    "check_positive_int",
    "check_scale",
    "check_y",
    "count_distinct_rows",
    "is_concrete",
]


def is_concrete(*values: Any) -> bool:
    """True when every value's contents can be read and checked now.

    Not for a JAX tracer (inside ``jit``/``grad``), nor for a global array whose shards live in several
    processes (its other processes' rows are not here).
    """
    return not any(
        isinstance(v, jax.core.Tracer)
        or (isinstance(v, jax.Array) and not (v.is_fully_addressable or v.is_fully_replicated))
        for v in values
    )


def check_positive_int(value: Any, name: str) -> int:
    """A whole number ≥ 1 (``bool`` is refused); ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    return int(value)


def as_float_array(value: Any, name: str) -> jax.Array:
    """A floating JAX array; float32/float64 inputs keep their dtype, others take JAX's default float."""
    if not is_concrete(value):
        return value
    try:
        arr = np.asarray(value)
    except Exception as err:  # pragma: no cover - exotic objects
        raise ValueError(f"{name}: could not convert to an array ({err})") from err
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name}: expected numbers, got an array of dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise ValueError(f"{name}: complex values are not supported")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(jnp.zeros((), dtype=float).dtype)
    # Concrete input stays concrete even when a public function is called inside jit (JAX otherwise
    # stages constants), so the checks below still run on it.
    with jax.ensure_compile_time_eval():
        return jnp.asarray(arr)


def _check_finite(arr: Any, name: str) -> None:
    if is_concrete(arr):
        bad = ~np.isfinite(np.asarray(arr))
        if bad.any():
            raise ValueError(f"{name}: contains {int(bad.sum())} NaN or infinite value(s)")


def check_X(X: Any, name: str = "X", dim: int | None = None) -> jax.Array:
    """Inputs as (N, D): a 1-D array is one input dimension. Finite, N ≥ 1, D matching ``dim``."""
    X = as_float_array(X, name)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name}: expected shape (N,) or (N, D), got {tuple(X.shape)}")
    if X.shape[0] < 1:
        raise ValueError(f"{name}: needs at least one row, got shape {tuple(X.shape)}")
    if dim is not None and X.shape[1] != dim:
        raise ValueError(f"{name}: has {X.shape[1]} input dimension(s) but X has {dim}")
    _check_finite(X, name)
    return X


def check_y(y: Any, n: int, name: str = "y") -> jax.Array:
    """Targets as (N,), finite, matching the N rows of X."""
    y = as_float_array(y, name)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{name}: expected shape (N,), got {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"{name}: has {y.shape[0]} values but X has {n} rows")
    _check_finite(y, name)
    return y


#: The spans and magnitudes of an input column that float64 holds through the kernel's squared distances
#: (measured: fits to x × 1e±150 agree with x's; at 1e-160 the squares are subnormal and NUTS cannot start).
INPUT_SCALES = (1e-140, 1e140)

#: The same for the targets, whose squares meet the noise and kernel variances in products (measured: y ×
#: 1e±60 agree with y's; y × 1e-80 leaves no finite starting point, y × 1e±100 gave wrong answers).
TARGET_SCALES = (1e-60, 1e60)

#: The smallest spread of a training input column relative to its largest magnitude. The kernels take
#: differences about a common point (:func:`bayes_rbfn.gp.kernels.common_origin`), so only the rounding of
#: the inputs themselves is left: at this ratio an input is held to 2.2e-16 / 1e-10 ≈ 2e-6 of its spread
#: (a time in milliseconds since 1970 over 1 s: 6e-10, fits as it does about 0).
INPUT_RELATIVE_SPREAD = 1e-10


def check_scale(values: Any, name: str, scales: tuple[float, float], *, relative_spread: float = 0.0) -> None:
    """Refuse a concrete column whose spread or magnitude float64 arithmetic cannot carry.

    Args:
        values: (N,) finite values of one input column or of the targets.
        name: how the message names them (``"X[:, 0]"``, ``"column 'time'"``).
        scales: (smallest spread, largest magnitude) accepted: :data:`INPUT_SCALES` or :data:`TARGET_SCALES`.
        relative_spread: the smallest spread accepted relative to the largest magnitude
            (:data:`INPUT_RELATIVE_SPREAD` for training inputs; 0: none).

    Raises:
        ValueError: the values spread over less than ``scales[0]`` or ``relative_spread`` × their largest
            magnitude (but are not all equal), or reach a magnitude above ``scales[1]``; the message gives
            their range and says to rescale.
    """
    if not is_concrete(values):
        return
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return
    lo, hi = float(arr.min()), float(arr.max())
    spread, largest = hi - lo, max(abs(lo), abs(hi))
    smallest_spread = max(scales[0], relative_spread * largest)
    if largest > scales[1] or 0 < spread < smallest_spread or not np.isfinite(spread):
        raise ValueError(
            f"{name}: its values run from {lo:.10g} to {hi:.10g}, a scale float64 arithmetic cannot carry "
            f"through the model (spreads of at least {scales[0]:g} and {relative_spread:g} of the "
            f"magnitude, magnitudes up to {scales[1]:g} are safe); rescale it (units where the values are "
            "of order 1 are best) and undo the scale on the results"
        )


def count_distinct_rows(X: Any) -> int:
    """Number of distinct rows of a concrete (N, D) array."""
    return int(np.unique(np.asarray(X), axis=0).shape[0])


def check_Z(Z: Any, X: jax.Array, name: str = "Z") -> jax.Array:
    """Inducing inputs (M, D): finite, no duplicate rows, and M ≤ the number of distinct rows of X."""
    Z = check_X(Z, name, dim=X.shape[1])
    if is_concrete(Z):
        m = Z.shape[0]
        distinct = count_distinct_rows(Z)
        if distinct < m:
            raise ValueError(
                f"{name}: has {m - distinct} duplicate inducing point(s); inducing inputs must be distinct"
            )
        if is_concrete(X):
            n_distinct = count_distinct_rows(X)
            if m > n_distinct:
                raise ValueError(
                    f"{name}: {m} inducing points is more than the {n_distinct} distinct input(s) in X"
                )
    return Z


def check_positive(value: Any, name: str) -> jax.Array:
    """A finite, strictly positive scalar (e.g. the noise standard deviation)."""
    if not is_concrete(value):
        return value
    arr = as_float_array(value, name)
    if arr.ndim != 0:
        raise ValueError(f"{name}: expected a scalar, got shape {tuple(arr.shape)}")
    v = float(np.asarray(arr))
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: must be a finite positive number, got {v!r}")
    if type(value) in (int, float):
        # A Python number stays weakly typed, as JAX itself treats it, so that ``noise=0.1`` does not
        # promote float32 data to float64 when x64 is enabled.
        with jax.ensure_compile_time_eval():
            return jnp.asarray(v)
    return arr
