"""The inducing inputs of a fit: k-means, a pivoted Cholesky, or learned on the VFE bound.

:func:`inducing_inputs` is what :func:`bayes_rbfn.fit` calls when no ``Z`` is given, and what a command
line or a user's own model calls to get the same inducing inputs before fitting: the k-means centres
(:func:`~bayes_rbfn.gp.inducing.select_inducing`), or, for ``"optimised"`` and ``"greedy"``, a search on
Titsias's collapsed bound from them (:mod:`bayes_rbfn.gp.inducing_search`), started at the prior median
of the kernel family's hyperparameters and of the noise under the default priors of the data's scales.
The hyperparameters reached there are the search's only; NUTS samples them afresh with Z held fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bayes_rbfn.gp import inducing_search
from bayes_rbfn.gp.inducing import select_inducing
from bayes_rbfn.models.families import KernelFamily, data_scales, get_family

__all__ = ["INDUCING_METHODS", "LEARNED_METHODS", "inducing_inputs", "prior_median"]

#: The ways :func:`inducing_inputs` chooses Z: chosen from the inputs alone, or learned on the VFE bound.
INDUCING_METHODS = ("kmeans", "pivoted_cholesky", "greedy", "optimised")

#: The methods that search the VFE bound (a Gaussian likelihood's).
LEARNED_METHODS = ("greedy", "optimised")

#: Prior draws whose median starts the search (for a prior without a closed-form median).
_MEDIAN_DRAWS = 1001


def prior_median(prior: dist.Distribution, seed: int = 0) -> np.ndarray:
    """The median of a numpyro prior, elementwise: exp(μ) for a LogNormal, else that of 1,001 draws."""
    if isinstance(prior, dist.LogNormal):
        return np.exp(np.asarray(prior.loc))
    draws = prior.sample(jax.random.PRNGKey(seed), (_MEDIAN_DRAWS,))
    return np.median(np.asarray(draws), axis=0)


def _centred(X: np.ndarray, y: np.ndarray, mean: str) -> np.ndarray:
    """y less the prior mean's least-squares fit: its mean, or a plane in X for ``mean="linear"``."""
    if mean == "zero":
        return y
    design = np.ones((X.shape[0], 1)) if mean != "linear" else np.column_stack([np.ones(X.shape[0]), X])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    return y - design @ coef


def inducing_inputs(
    X: Any,
    y: Any,
    num_inducing: int,
    *,
    method: str = "kmeans",
    kernel: str | KernelFamily = "se",
    mean: str = "constant",
    priors: Mapping[str, dist.Distribution] | None = None,
    fixed: Mapping[str, Any] | None = None,
    jitter: float | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, inducing_search.BoundOptimum | None]:
    """M inducing inputs for a Gaussian-likelihood fit of ``kernel`` to (X, y), by ``method``.

    * ``"kmeans"``: k-means centres of the inputs (the default);
    * ``"pivoted_cholesky"``: a pivoted Cholesky of K_ff under a kernel with nothing sampled;
    * ``"greedy"``: the hyperparameters at their type-II values on the VFE bound with Z at the k-means
      centres, then a pivoted Cholesky under them (Burt, Rasmussen & van der Wilk 2020);
    * ``"optimised"``: Z, the hyperparameters and σ maximised jointly on the VFE bound from the k-means
      centres (Titsias 2009), by SciPy's L-BFGS-B.

    Args:
        X: (N, D) inputs.
        y: (N,) targets.
        num_inducing: M.
        method: one of :data:`INDUCING_METHODS`.
        kernel: a kernel family's name or a :class:`~bayes_rbfn.models.families.KernelFamily`.
        mean: the prior mean the search takes off y: ``"constant"`` (the data's mean), ``"zero"`` or
            ``"linear"`` (a least-squares plane).
        priors: priors that replace the family's defaults where named: the search starts at their medians.
        fixed: hyperparameters held at these values ({name: value}; ``"noise"`` too).
        jitter: relative jitter on K_uu (None: the policy).
        seed: k-means' seed.

    Returns:
        (Z (M, D), the search's :class:`~bayes_rbfn.gp.inducing_search.BoundOptimum`, or None for the
        methods that search nothing).

    Raises:
        ValueError: naming the argument at fault (an unknown method, M beyond the distinct inputs, a
            family with nothing to sample for a learned method).
    """
    if method not in INDUCING_METHODS:
        raise ValueError(f"inducing_method: expected one of {', '.join(INDUCING_METHODS)}, got {method!r}")
    family = get_family(kernel)
    base = "kmeans" if method in LEARNED_METHODS else method
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    Z0 = np.asarray(select_inducing(X, num_inducing, method=base, seed=seed, kernel=family.fixed_kernel))
    if method not in LEARNED_METHODS:
        return Z0, None
    if family.fixed_kernel is not None:
        raise ValueError(f"inducing_method: {method!r} searches hyperparameters; the kernel has none")
    y = np.asarray(y, dtype=float)
    resolved = {**family.default_priors(data_scales(X, y)), **(priors or {})}
    fixed = {k: np.asarray(v, dtype=float) for k, v in (fixed or {}).items()}
    start = {k: prior_median(resolved[k], seed) for k in family.params if k not in fixed}
    noise = float(fixed["noise"]) if "noise" in fixed else float(prior_median(resolved["noise"], seed))

    def build(values: Mapping[str, Any]) -> Any:
        return family.build({**{k: jnp.asarray(v) for k, v in fixed.items() if k != "noise"}, **values})

    search = inducing_search.optimise_bound if method == "optimised" else inducing_search.greedy_inducing
    found = search(
        build, start, X, _centred(X, y, mean), Z0, noise, learn_noise="noise" not in fixed, jitter=jitter
    )
    return found.Z, found
