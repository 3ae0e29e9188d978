"""Weakly-informative default priors on the data's scale, as NumPyro distributions (nothing is sampled here).

A kernel family gives its hyperparameters' default priors from the data's :class:`DataScales`
(:data:`bayes_rbfn.models.families.CLASS_FAMILIES`), so that the same model fits inputs in seconds or
in years and outputs in ppm or in births per woman. All are log-normal, so NUTS works on the log scale:

* ``lengthscale`` (one per input dimension, ARD, when D > 1): LogNormal(log(√D · range_d / 5), 1), where
  range_d is the spread of the inputs in dimension d: for one input most mass between ~1/35 and ~1.5
  ranges, which keeps the lengthscale away from both the spacing of a few points and functions flat over
  the data. With D inputs the median grows as √D (Hvarfner et al. 2024 [1]): the scaled distance between
  two points, (Σ_d (Δx_d / ℓ_d)²)^½, then stays what it is for one input, where lengthscales of a fifth
  of the range in every one of D directions would make the prior's functions vary over ~5^D regions of
  the data's box.
* ``variance`` s²: LogNormal(log var(y), 1).

Beside them, :class:`TruncatedInverseGamma`: an inverse-gamma prior cut off above, for a lengthscale whose
network's centres cannot carry it beyond some length (``bayes_rbfn.models.birthdays``).

References
----------
[1] Hvarfner, C., Hellsten, E. O. & Nardi, L. (2024). Vanilla Bayesian optimization performs great in
    high dimensions. ICML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.transforms import PowerTransform

__all__ = [
    "DataScales",
    "TruncatedInverseGamma",
    "data_scales",
    "lengthscale_prior",
    "scales_from",
    "variance_prior",
]


@dataclass(frozen=True)
class DataScales:
    """Summary scales of the training data used by the default priors.

    Attributes:
        input_range: (D,) the spread (max − min) of each input column, 1 where it is 0.
        y_sd: the standard deviation of the targets, 1 where it is 0.
        input_dim: D.
    """

    input_range: np.ndarray
    y_sd: float
    input_dim: int


def data_scales(X: Any, y: Any) -> DataScales:
    """Scales of concrete (N, D) inputs and (N,) targets (:func:`scales_from`)."""
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    return scales_from(np.ptp(X, axis=0), float(np.std(y)) if y.size > 1 else 1.0)


def scales_from(input_range: Any, y_sd: float) -> DataScales:
    """:class:`DataScales` from each input column's spread and the targets' sd; a spread of 0 falls back to 1.

    Args:
        input_range: (D,) the spread (max − min) of each input column.
        y_sd: the standard deviation of the targets.

    Returns:
        The scales the default priors follow.
    """
    input_range = np.asarray(input_range, dtype=float)
    return DataScales(
        input_range=np.where(input_range > 0, input_range, 1.0),
        y_sd=y_sd if y_sd > 0 else 1.0,
        input_dim=input_range.size,
    )


def lengthscale_prior(
    scales: DataScales, fraction: float = 0.2, sd: float = 1.0, dims: Sequence[int] | None = None
) -> dist.Distribution:
    """LogNormal(log(fraction · √D · range_d), sd) for a lengthscale over the D input columns ``dims``.

    Args:
        scales: the data's scales (:func:`data_scales`).
        fraction: the prior median as a fraction of each column's range for one column (the default
            kernels: 0.2); with D columns the median is √D times longer (see the module docstring).
        sd: the log-scale standard deviation.
        dims: the input columns the lengthscale acts on (a kernel's ``on_dims``); None for all of them.

    Returns:
        A scalar distribution for one column, else one with event shape (len(dims),) (ARD).
    """
    input_range = scales.input_range if dims is None else scales.input_range[np.asarray(dims)]
    loc = np.log(fraction * np.sqrt(input_range.size) * input_range)
    if loc.size == 1:
        return dist.LogNormal(float(loc[0]), sd)
    return dist.LogNormal(jnp.asarray(loc), sd).to_event(1)


def variance_prior(scales: DataScales, fraction: float = 1.0, sd: float = 1.0) -> dist.Distribution:
    """LogNormal(log((fraction · sd(y))²), sd) for a kernel variance s² (a component's share of the spread).

    Args:
        scales: the data's scales (:func:`data_scales`).
        fraction: the prior median of s as a fraction of sd(y) (the default kernels: 1).
        sd: the log-scale standard deviation.

    Returns:
        A scalar distribution.
    """
    return dist.LogNormal(float(np.log((fraction * scales.y_sd) ** 2)), sd)


class TruncatedInverseGamma(dist.TransformedDistribution):
    """InverseGamma(concentration, rate) truncated to (0, high]: density ∝ x^(−concentration−1) e^(−rate/x).

    Built as 1/g with g ~ Gamma(concentration, rate) truncated below at 1/high (NumPyro's
    ``TruncatedGamma`` gives the normaliser and the draws). Its support is the interval (0, high], so NUTS
    samples it through a logistic map onto that interval and never proposes a value above ``high``.
    """

    pytree_aux_fields = ("high",)

    def __init__(self, concentration: float, rate: float, high: float, *, validate_args: bool | None = None):
        """The truncated inverse gamma; ``ValueError`` for a bound that is not positive.

        Args:
            concentration: the shape α > 0.
            rate: the scale β > 0 of the inverse gamma (the rate of the gamma of 1/x).
            high: the upper bound, > 0.
            validate_args: NumPyro's argument checks.
        """
        if not high > 0:
            raise ValueError(f"high: expected a positive bound, got {high!r}")
        self.high = high
        truncated = dist.TruncatedGamma(concentration, rate, low=1.0 / high)
        super().__init__(truncated, PowerTransform(-1.0), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        """The interval (0, high]."""
        return constraints.interval(0.0, self.high)
