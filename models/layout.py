"""How a model lays out its data, and how its posterior sites are labelled: the defaults of
:class:`~bayes_rbfn.models.ModelSpec`'s ``prepare``, ``site_dims`` and ``is_hyperparameter``.

A model whose data or sites differ (the grouped model's padded (G, N_max) layout) passes its own functions
on its spec; the drivers (:func:`bayes_rbfn.fit`, :func:`bayes_rbfn.infer.schema.rebuild`, SBC) only call
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

__all__ = ["flat_layout", "is_hyperparameter", "site_dims"]

#: Sites sampled per input dimension (ARD lengthscales, the co2 kernel's seasonal ones, the linear mean's
#: slopes), by name prefix.
_PER_INPUT_PREFIXES = ("lengthscale", "seasonal", "mean_slope")
#: Sites with one value per inducing input: the RBF network's whitened weights v and weights α.
_PER_INDUCING_SUFFIXES = ("_v", "_alpha")
#: Raw variables of a non-centred parameterisation, not hyperparameters themselves.
_RAW_SUFFIXES = ("_raw", "_z")


def flat_layout(
    X: Any,
    y: Any,
    Z: Any,
    *,
    y_offset: Any,
    constant_mean: bool,
    group: Any = None,
    group_pred: Any = None,
    X_pred: Any = None,
) -> tuple[dict, dict]:
    """The model's data dict {X (N, D), y (N,), y_offset, x_centre (D,), Z (M, D)} and no extras.

    Args:
        X, y, Z: checked inputs, targets and inducing inputs (Z None for a model without them).
        y_offset: the constant part of the prior mean (a number). constant_mean: unused here (a grouped
            layout takes each group's own mean then).
        group, group_pred, X_pred: must be None/unused: this layout has no groups.
    """
    del constant_mean, group_pred, X_pred
    if group is not None:
        raise ValueError("group: the model is not grouped; use model='grouped'")
    data = {
        "X": X,
        "y": y,
        "y_offset": jnp.asarray(y_offset, dtype=X.dtype).reshape(()),
        "x_centre": jnp.mean(X, axis=0),
    }
    if Z is not None:
        data["Z"] = Z
    return data, {}


def site_dims(name: str, shape: tuple[int, ...], sizes: Mapping[str, int]) -> list[str] | None:
    """ArviZ dims of a posterior site's per-draw ``shape``, or None (ArviZ's default names).

    Args:
        name: the site. shape: its shape per draw. sizes: the fit's dimension sizes, from ``input_dim``
            (D), ``inducing`` (M) and, for a grouped model, ``group`` (G).
    """
    if not shape:
        return None
    if "inducing" in sizes and shape[-1] == sizes["inducing"] and name.endswith(_PER_INDUCING_SUFFIXES):
        return ["inducing"]
    if "group" in sizes and shape[0] == sizes["group"]:
        return ["group"] + (["input_dim"] if len(shape) == 2 else [])
    if shape[-1] == sizes["input_dim"] and name.startswith(_PER_INPUT_PREFIXES):
        return ["input_dim"]
    return None


def is_hyperparameter(name: str, dims: tuple[str, ...]) -> bool:
    """Whether a posterior variable is a hyperparameter: not a weight (a variable along ``inducing``) nor the
    raw variable of a non-centred parameterisation.
    """
    return not (name.endswith(_RAW_SUFFIXES) or "inducing" in dims)
