"""Inputs and prior means as the distributions and the layer take them: one home for both checks."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["as_inputs", "mean_vector"]


def as_inputs(X: Any, name: str) -> jax.Array:
    """X as a 2-D array (N, D); a 1-D X is N points of one input."""
    X = jnp.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name}: expected shape (N,) or (N, D), got {X.shape}")
    return X


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
