"""Variance collapse: the share of the prior variance a Nyström (SoR/RBFN) predictive loses, and its warning.

Far from the inducing inputs the SoR prior at a test point is Q_** → 0, so the latent variance vanishes
and y*'s tends to σ² (docs/mathematics.md#the-sor-family-and-its-variance-collapse). :func:`collapse_check`
averages 1 − Q_**/K_**
(:func:`bayes_rbfn.gp.sparse.prior_variance_lost`, the one formula) over posterior draws and warns where it
passes a threshold (:func:`bayes_rbfn.gp.sparse.warn_if_collapsed`, the one warning);
:func:`variance_collapse` does the same for a stored fit. At given hyperparameters the same check is
:func:`bayes_rbfn.gp.sparse.collapse_warning`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import sparse
from bayes_rbfn.gp.validation import check_X
from bayes_rbfn.infer.predictive import DEFAULT_BATCH
from bayes_rbfn.infer.programs import by_program
from bayes_rbfn.infer.schema import rebuild
from bayes_rbfn.models import ModelConfig, model_specs

__all__ = ["COLLAPSE_THRESHOLD", "VARIANCE_COLLAPSE_MODELS", "collapse_check", "variance_collapse"]

#: Models whose predictive variance collapses away from the inducing inputs (their test-point prior is Q_**).
VARIANCE_COLLAPSE_MODELS: tuple[str, ...] = tuple(
    name for name, spec in model_specs().items() if spec.variance_collapses
)

#: Share of the prior variance lost (1 − Q_**/K_**) above which a prediction point counts as collapsed
#: (:data:`bayes_rbfn.gp.sparse.COLLAPSE_THRESHOLD`).
COLLAPSE_THRESHOLD = sparse.COLLAPSE_THRESHOLD

#: Draws evaluated together by :func:`collapse_check` (memory: this × test batch × M).
_DRAW_BATCH = 64


def collapse_check(
    config: ModelConfig,
    Z: Any,
    params: Mapping[str, Any],
    X_eval: Any,
    *,
    model: str = "sor",
    threshold: float = COLLAPSE_THRESHOLD,
    warn: bool = True,
) -> np.ndarray:
    """Posterior-mean share of the prior variance the Nyström prior loses at X_eval, and a warning.

    Computes mean_s [1 − Q_**/K_**](θ_s) over the posterior draws θ_s (:func:`bayes_rbfn.gp.sparse.
    prior_variance_lost`, docs/mathematics.md#the-sor-family-and-its-variance-collapse) and, when ``warn``
    and some point exceeds ``threshold``, issues a
    :class:`~bayes_rbfn.gp.sparse.VarianceCollapseWarning` naming ``model``
    (:func:`bayes_rbfn.gp.sparse.warn_if_collapsed`). This is the hook for a driver
    that holds the model's pieces: :func:`bayes_rbfn.fit` calls it after sampling for every model in
    :data:`VARIANCE_COLLAPSE_MODELS`, and :func:`variance_collapse` on a stored
    fit.

    Args:
        config: the model's :class:`~bayes_rbfn.models.ModelConfig` (its family builds the kernel).
        Z: (M, D) inducing inputs.
        params: draws {name: (chains, draws, ...)}, pinned values merged.
        X_eval: (S, D) prediction inputs.
        model: name used in the warning.
        threshold: share above which a point counts as collapsed, in [0, 1).
        warn: issue the warning (otherwise only compute).

    Returns:
        (S,) the share lost per point, in [0, 1].
    """
    Z = jnp.asarray(Z)
    if Z.ndim != 2:
        raise ValueError(f"Z: expected (M, D) inducing inputs, got shape {tuple(Z.shape)}")
    X_eval = check_X(X_eval, "X_eval", dim=Z.shape[1])
    leaves = jax.tree_util.tree_leaves(params)
    total = int(np.prod(leaves[0].shape[:2]))
    flat = {k: jnp.reshape(jnp.asarray(v), (total, *np.shape(v)[2:])) for k, v in params.items()}

    def mean_lost(p, Xb, Z):
        def one(q):
            return sparse.prior_variance_lost(config.family.build(q), Z, Xb, config.jitter)

        return jnp.mean(jax.lax.map(one, p, batch_size=min(_DRAW_BATCH, total)), axis=0)

    mean_lost = by_program(mean_lost)
    lost = np.concatenate(
        [
            np.asarray(mean_lost(flat, X_eval[s : s + DEFAULT_BATCH], Z))
            for s in range(0, X_eval.shape[0], DEFAULT_BATCH)
        ]
    )
    if warn:
        sparse.warn_if_collapsed(lost, threshold=threshold, model=model, points="prediction point")
    return lost


def variance_collapse(
    idata: Any,
    X_test: Any = None,
    *,
    threshold: float = COLLAPSE_THRESHOLD,
    warn: bool | None = None,
    kernel: Any = None,
    mean: Any = None,
) -> np.ndarray:
    """Share of the prior variance lost, 1 − Q_**/K_**, at X_test, averaged over a fit's posterior draws.

    Args:
        idata: InferenceData from :func:`bayes_rbfn.fit` of a (non-grouped) model with inducing inputs.
        X_test: (S, D) inputs (default: the fit's ``X_pred``).
        threshold: share above which a point counts as collapsed.
        warn: issue a :class:`~bayes_rbfn.gp.sparse.VarianceCollapseWarning` for collapsed points (default:
            when the model is in :data:`VARIANCE_COLLAPSE_MODELS`, i.e. its predictive does collapse there).
        kernel: the ``kernel`` the fit was given, as :func:`bayes_rbfn.predict`, for a kernel object or a
            family of one's own.
        mean: the callable ``mean`` the fit was given, as :func:`bayes_rbfn.predict`.

    Returns:
        (S,) the share lost per point, in [0, 1]. Large values are harmless for dtc, fitc, vfe and asor,
        whose predictive restores the lost variance; for sor and rbfn they mark overconfident predictions.
    """
    spec, config, data, params = rebuild(idata, kernel=kernel, mean=mean)
    if spec.grouped or "Z" not in data:
        raise ValueError(f"idata: the {spec.name!r} model has no (shared) inducing inputs to check")
    X_eval = idata.predictions_constant_data["X_pred"].values if X_test is None else X_test
    warn = spec.variance_collapses if warn is None else warn
    return collapse_check(
        config, data["Z"], params, X_eval, model=spec.name, threshold=threshold, warn=bool(warn)
    )
