"""Reading a fit back: the model, its configuration, data and posterior draws from an InferenceData.

:func:`rebuild` inverts what :func:`bayes_rbfn.fit` writes (docs/output.md), so that
:func:`bayes_rbfn.predict`,
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

from bayes_rbfn.io.arviz_compat import groups
from bayes_rbfn.models import ModelConfig, ModelSpec, get_model
from bayes_rbfn.models.families import FAMILIES, get_family
from bayes_rbfn.models.layout import Layout
from bayes_rbfn.models.likelihoods import get_likelihood

__all__ = [
    "hyperparameter_names",
    "kernel_kind",
    "posterior_params",
    "rebuild",
    "rebuild_inputs",
    "rebuild_with_layout",
]


def kernel_kind(family: Any) -> str:
    """How a fit's kernel was given, stored as the attribute ``bayes_rbfn_kernel_kind``.

    ``"registered"`` (a name of :data:`FAMILIES`, rebuilt from the file), ``"kernel"`` (a kernel object,
    fixed) or ``"family"`` (a :class:`KernelFamily` of one's own).
    """
    if FAMILIES.get(family.name) is family:
        return "registered"
    return "kernel" if family.fixed_kernel is not None else "family"


def rebuild_inputs(spec: ModelSpec, config: ModelConfig) -> dict[str, Any]:
    """What :func:`rebuild` needs given again to rebuild a fit of ``spec`` and ``config``: {kernel, mean}.

    The kernel family when it is a kernel object or a family of one's own (a registered family and the
    model's own are rebuilt from the file), the prior mean when it is a callable; empty when the file
    holds everything.
    """
    given: dict[str, Any] = {}
    if spec.family is None and kernel_kind(config.family) != "registered":
        given["kernel"] = config.family
    if not isinstance(config.mean, str):
        given["mean"] = config.mean
    return given


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


def rebuild(idata: Any, *, kernel: Any = None, mean: Any = None) -> tuple[ModelSpec, ModelConfig, dict, dict]:
    """(spec, config, data, params) of a fit, from its InferenceData (in memory or from inference.nc).

    Everything comes from the InferenceData's groups and attributes, so a fit in memory and the same fit
    read back from its file rebuild alike. A registered kernel family and a named prior mean are rebuilt
    from their stored names; what no file can hold comes from ``kernel`` and ``mean``, what the fit was
    given: a kernel object or a :class:`KernelFamily` of one's own (or a family name), and a callable prior
    mean of X. Without them such a fit is refused with a message naming the keyword to pass.
    """
    spec, config, data, _, params = rebuild_with_layout(idata, kernel=kernel, mean=mean)
    return spec, config, data, params


def rebuild_with_layout(
    idata: Any, *, kernel: Any = None, mean: Any = None
) -> tuple[ModelSpec, ModelConfig, dict, Layout, dict]:
    """(spec, config, data, layout, params) of a fit: :func:`rebuild` and the data's layout.

    The :class:`~bayes_rbfn.models.layout.Layout` puts the model's per-observation values in the order of
    the observations.
    """
    if not hasattr(idata, "posterior"):
        raise ValueError(
            "idata: expected the InferenceData of bayes_rbfn.fit (or arviz.from_netcdf of its "
            f"inference.nc), got {type(idata).__name__}"
        )
    attrs = idata.posterior.attrs
    if "bayes_rbfn_model" not in attrs:
        raise ValueError(
            "idata: not written by bayes_rbfn.fit (no bayes_rbfn_model attribute); for posterior samples "
            "of a NumPyro model of your own use bayes_rbfn.predict_model(model, samples, X_test, *args)"
        )
    spec = get_model(str(attrs["bayes_rbfn_model"]))
    family = _family(spec, attrs, kernel)
    fixed = {k: jnp.asarray(v) for k, v in json.loads(str(attrs.get("bayes_rbfn_fixed", "{}"))).items()}
    jitter_attr = attrs.get("bayes_rbfn_jitter", "")
    jitter = None if jitter_attr in ("", None) else float(jitter_attr)
    mean = _mean(attrs, mean)
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
    pcd = idata.predictions_constant_data if "predictions_constant_data" in groups(idata) else cd
    X = jnp.asarray(cd["X"].values)
    y = jnp.asarray(idata.observed_data["y"].values)
    Z = jnp.asarray(cd["Z"].values) if "Z" in cd else None
    data, layout = spec.prepare(
        X,
        y,
        Z,
        y_offset=cd["y_offset"].values,
        constant_mean=False,
        X_pred=pcd["X_pred"].values if "X_pred" in pcd else None,
        **spec.read_layout(cd, pcd),
    )
    return spec, config, data, layout, posterior_params(idata, fixed)


def _family(spec: ModelSpec, attrs: Mapping[str, Any], kernel: Any) -> Any:
    """The fit's kernel family: ``kernel`` if given (checked against the stored name), else the fit's own.

    The fit's own: the model's own, or the registered family of the stored name.
    """
    name = str(attrs["bayes_rbfn_kernel"])
    if kernel is not None:
        if spec.family is not None:
            raise ValueError(f"kernel: the {spec.name!r} model has no kernel to choose (got {kernel!r})")
        family = get_family(kernel)
        if family.name != name:
            raise ValueError(f"kernel: the fit's kernel was {name!r}, got {family.name!r}")
        return family
    if spec.family is not None:
        return spec.family
    if name in FAMILIES:
        return FAMILIES[name]
    what = {"kernel": "a kernel object", "family": "a KernelFamily of one's own"}.get(
        str(attrs.get("bayes_rbfn_kernel_kind")), "a kernel object or a KernelFamily of one's own"
    )
    raise ValueError(
        f"idata: the fit's kernel {name!r} was {what}, which the file cannot hold; pass it again, as in "
        "bayes_rbfn.predict(idata, X_test, kernel=...)"
    )


def _mean(attrs: Mapping[str, Any], mean: Any) -> Any:
    """The fit's prior mean: its name from the file, or for a callable one ``mean``."""
    stored = str(attrs.get("bayes_rbfn_mean", "constant"))
    if mean is not None:
        if stored != "callable" or not callable(mean):
            raise ValueError(
                f"mean: only a fit with a callable prior mean takes one (this fit's mean: {stored!r}), and "
                f"it must be that callable of X; got {mean!r}"
            )
        return mean
    if stored != "callable":
        return stored
    raise ValueError(
        "idata: the fit's prior mean was a Python callable, which the file cannot hold; pass it again, as "
        "in bayes_rbfn.predict(idata, X_test, mean=...)"
    )


def hyperparameter_names(idata: Any) -> list[str]:
    """Posterior variables that are hyperparameters, as the fit's model tells them.

    ``ModelSpec.is_hyperparameter``: not RBF weights, not the raw variables of a non-centred
    parameterisation.
    """
    spec = get_model(str(idata.posterior.attrs["bayes_rbfn_model"]))
    post = idata.posterior
    return [str(name) for name in post.data_vars if spec.is_hyperparameter(str(name), post[name].dims)]
