"""Reading a fit back: the model, its configuration, data and posterior draws from an InferenceData.

:func:`rebuild` inverts what :func:`bayes_rbfn.fit` writes (DESIGN §6), so that :func:`bayes_rbfn.predict`,
the comparison workflow and the tests can recompute the analytic predictive from a stored fit
(in memory, or read from ``inference.nc``) without refitting. It sits below both the driver and the
predictive, so neither imports the other to read a fit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from bayes_rbfn.models import ModelConfig, ModelSpec, get_model
from bayes_rbfn.models.families import FAMILIES
from bayes_rbfn.models.likelihoods import get_likelihood

__all__ = ["hyperparameter_names", "posterior_params", "rebuild"]


def posterior_params(idata_or_samples: Any, fixed: Mapping[str, Any] | None = None) -> dict[str, jax.Array]:
    """Draws as a dict {name: (chains, draws, ...)} merged with the pinned values (broadcast)."""
    if hasattr(idata_or_samples, "posterior"):
        post = idata_or_samples.posterior
        samples = {k: jnp.asarray(post[k].values) for k in post.data_vars}
    else:
        samples = {k: jnp.asarray(v) for k, v in idata_or_samples.items()}
    lead = next(iter(samples.values())).shape[:2] if samples else (1, 1)
    for name, value in (fixed or {}).items():
        if name not in samples:
            value = jnp.asarray(value)
            samples[name] = jnp.broadcast_to(value, (*lead, *value.shape))
    return samples


def rebuild(idata: Any) -> tuple[ModelSpec, ModelConfig, dict, dict]:
    """(spec, config, data, params) of a fit, from its InferenceData (in memory or from inference.nc)."""
    if not hasattr(idata, "posterior"):
        raise ValueError(
            "idata: expected the InferenceData of bayes_rbfn.fit (or arviz.from_netcdf of its "
            f"inference.nc), got {type(idata).__name__}"
        )
    attrs = idata.posterior.attrs
    if "bayes_rbfn_model" not in attrs:
        raise ValueError("idata: not written by bayes_rbfn.fit (no bayes_rbfn_model attribute)")
    spec = get_model(str(attrs["bayes_rbfn_model"]))
    kernel_name = str(attrs["bayes_rbfn_kernel"])
    if spec.family is None and kernel_name not in FAMILIES:
        raise ValueError(
            f"idata: the kernel {kernel_name!r} was a fixed kernel object; it cannot be rebuilt from the file"
        )
    family = spec.family if spec.family is not None else FAMILIES[kernel_name]
    fixed = {k: jnp.asarray(v) for k, v in json.loads(str(attrs.get("bayes_rbfn_fixed", "{}"))).items()}
    jitter_attr = attrs.get("bayes_rbfn_jitter", "")
    jitter = None if jitter_attr in ("", None) else float(jitter_attr)
    mean = str(attrs.get("bayes_rbfn_mean", "constant"))
    if mean == "callable":
        raise ValueError(
            "idata: the fit's prior mean was a Python callable; it cannot be rebuilt from the file"
        )
    config = ModelConfig(
        family=family,
        priors={},
        fixed=fixed,
        hyperprior=bool(attrs.get("bayes_rbfn_hyperprior", 0)),
        jitter=jitter,
        likelihood=get_likelihood(str(attrs.get("bayes_rbfn_likelihood", "gaussian"))),
        mean=mean,
        precision=str(attrs.get("bayes_rbfn_precision", "float64")),
    )
    cd = idata.constant_data
    pcd = idata.predictions_constant_data if "predictions_constant_data" in idata.groups() else cd
    X = jnp.asarray(cd["X"].values)
    y = jnp.asarray(idata.observed_data["y"].values)
    Z = jnp.asarray(cd["Z"].values) if "Z" in cd else None
    grouped = "obs_group" in cd
    data, _ = spec.prepare(
        X,
        y,
        Z,
        y_offset=cd["y_offset"].values,
        constant_mean=False,
        group=cd["obs_group"].values if grouped else None,
        group_pred=pcd["pred_group"].values if grouped else None,
        X_pred=pcd["X_pred"].values if "X_pred" in pcd else None,
    )
    return spec, config, data, posterior_params(idata, fixed)


def hyperparameter_names(idata: Any) -> list[str]:
    """Posterior variables that are hyperparameters, as the fit's model tells them
    (``ModelSpec.is_hyperparameter``: not RBF weights, not the raw variables of a non-centred
    parameterisation)."""
    spec = get_model(str(idata.posterior.attrs["bayes_rbfn_model"]))
    post = idata.posterior
    return [str(name) for name in post.data_vars if spec.is_hyperparameter(str(name), post[name].dims)]
