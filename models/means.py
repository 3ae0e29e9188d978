"""The prior mean as the distributions and the layer take it: a number, an (N,) array or a callable of X."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["mean_vector"]


def mean_vector(mean: Any, X: jax.Array, name: str = "mean") -> jax.Array:
    """The prior mean m at X, shape (N,), from a number, an (N,) array or a callable of X."""
    N = X.shape[0]
    value = jnp.asarray(mean(X) if callable(mean) else mean, dtype=X.dtype)
    if value.ndim == 0:
        return jnp.broadcast_to(value, (N,))
    if value.shape != (N,):
        raise ValueError(
            f"{name}: expected a number, an array of shape ({N},) or a callable of X, got shape {value.shape}"
        )
    return value
