"""How a model lays out its data, and how its posterior sites are labelled.

The defaults of :class:`~bayes_rbfn.models.ModelSpec`'s ``prepare``, ``read_layout``, ``site_dims`` and
``is_hyperparameter``, and :class:`Layout`, what the drivers may know of a layout.

A model whose data or sites differ (the grouped model's padded (G, N_max) layout) passes its own functions
on its spec; the drivers (:func:`bayes_rbfn.fit`, :func:`bayes_rbfn.infer.schema.rebuild`, SBC) only call
them and read a :class:`Layout`, never a key of the model's data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = [
    "FLAT",
    "Layout",
    "flat_layout",
    "is_hyperparameter",
    "is_hyperparameter_site",
    "no_layout",
    "site_dims",
]


@dataclass(frozen=True, eq=False)
class Layout:
    """What the drivers need of a model's data layout, returned by its spec's ``prepare`` with the data.

    Attributes:
        observation_index: (N,) where each observation sits in the model's flattened layout of y (the
            grouped model's (G, N_max) padding), or None where y is laid out in the order of the
            observations.
        predictive_args: arrays the spec's ``predict`` takes after X_test, one entry per test point (the
            grouped model's group code of each), in the order of ``ModelSpec.predictive_inputs``.
        sizes: named dimensions of the fit besides ``input_dim`` and ``inducing`` ({"group": G}).
        constant_data, predictions_constant_data: arrays the fit stores to be read back by the spec's
            ``read_layout`` (the group codes of the observations and of the prediction inputs).
        dims: ArviZ dims of those arrays and of the data entries the layout shapes (``y_offset``, ``Z``).
    """

    observation_index: np.ndarray | None = None
    predictive_args: tuple = ()
    sizes: Mapping[str, int] = field(default_factory=dict)
    constant_data: Mapping[str, np.ndarray] = field(default_factory=dict)
    predictions_constant_data: Mapping[str, np.ndarray] = field(default_factory=dict)
    dims: Mapping[str, list[str]] = field(default_factory=dict)

    @property
    def flat(self) -> bool:
        """Whether y is laid out in the order of the observations (so it can be cut by rows)."""
        return self.observation_index is None

    def to_observations(self, values: Any, batch_ndim: int) -> np.ndarray:
        """``values`` laid out as the model's y, in the order of the observations.

        Args:
            values: an array whose leading ``batch_ndim`` axes are batch axes (chains, draws) and whose
                trailing axes hold one value per entry of the model's y layout.
            batch_ndim: the number of leading batch axes.

        Returns:
            The same values with shape (*batch, N).
        """
        values = np.asarray(values)
        if self.observation_index is None:
            return values
        return values.reshape(*values.shape[:batch_ndim], -1)[..., self.observation_index]


#: The layout of a model whose y is in the order of the observations.
FLAT = Layout()

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
    """The model's data dict {X (N, D), y (N,), y_offset, x_centre (D,), Z (M, D)} and :data:`FLAT`.

    Args:
        X: (N, D) checked inputs.
        y: (N,) checked targets.
        Z: (M, D) checked inducing inputs, or None for a model without them.
        y_offset: the constant part of the prior mean (a number).
        constant_mean: unused here (a grouped layout takes each group's own mean then).
        group: must be None: this layout has no groups.
        group_pred: unused: this layout has no groups.
        X_pred: unused: this layout has no groups.

    Returns:
        (data, :data:`FLAT`).
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
    return data, FLAT


def no_layout(constant_data: Mapping[str, Any], predictions_constant_data: Mapping[str, Any]) -> dict:
    """The arguments of ``prepare`` a fit's stored data give besides X, y and Z: none for a flat layout.

    Args:
        constant_data: the fit's group of that name (unused).
        predictions_constant_data: the fit's group of that name (unused).

    Returns:
        {} (a grouped layout returns its group codes).
    """
    del constant_data, predictions_constant_data
    return {}


def site_dims(name: str, shape: tuple[int, ...], sizes: Mapping[str, int]) -> list[str] | None:
    """ArviZ dims of a posterior site's per-draw ``shape``, or None (ArviZ's default names).

    Args:
        name: the site.
        shape: its shape per draw.
        sizes: the fit's dimension sizes, from ``input_dim`` (D), ``inducing`` (M) and, for a grouped model,
            ``group`` (G).
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


def is_hyperparameter_site(name: str) -> bool:
    """Whether a sample site is a hyperparameter by its name alone: not a weight nor a raw variable.

    The names of the collection's models and layers: weights end in ``_v`` or ``_alpha``, the raw
    variables of a non-centred parameterisation in ``_raw`` or ``_z``.
    """
    return not name.endswith(_PER_INDUCING_SUFFIXES + _RAW_SUFFIXES)


def is_hyperparameter(name: str, dims: tuple[str, ...]) -> bool:
    """Whether a posterior variable is a hyperparameter: not a weight nor a non-centred raw variable.

    A weight is a variable along ``inducing``; a raw variable that of a non-centred parameterisation.
    """
    return not (name.endswith(_RAW_SUFFIXES) or "inducing" in dims)
