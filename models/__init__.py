"""The model collection: NumPyro model functions, each paired with its analytic per-draw predictive.

Installed as ``bayes_rbfn.models``. Every model is a :class:`ModelSpec` bundling

* ``model(data, config)`` — the NumPyro model (the only place ``numpyro.sample`` appears),
* ``predict(params, data, config, X_test)`` — per-draw analytic moments (f_mean, f_var) of the latent f*
  at ``X_test`` (noise excluded), traceable so the driver can ``vmap`` it over draws,
* ``log_likelihood(params, data, config)`` — per-observation values for PSIS-LOO: the leave-one-out
  conditionals log p(y_i | y_−i, θ) (a GP's likelihood does not factorise; Bürkner et al. 2020).

``params`` is one posterior draw as a dict {site name: value}, merged with any pinned hyperparameters.
``data`` is a dict of arrays (``X`` (N, D), ``y`` (N,), ``Z`` (M, D) when the model has inducing inputs,
``y_offset`` the constant part of the prior mean, ``x_centre`` (D,) the input mean for a linear mean).
``config`` is a :class:`ModelConfig`.

Every model is generative: it ends in the observed site ``numpyro.sample("y", <distribution>, obs=y)``
(the GP marginal as :class:`~bayes_rbfn.models.distributions.SparseGP` or
:class:`~bayes_rbfn.models.distributions.ExactGP`, or a plate of a factorised likelihood), so with
``data["y"] = None`` NumPyro's ``Predictive`` simulates y from the prior or the posterior.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from bayes_rbfn.models.spec import ModelConfig, ModelSpec


@functools.cache
def model_specs() -> dict[str, ModelSpec]:
    """Every model of the collection, name → spec, in the order of their ``rank``.

    A model is registered by being in the collection: every module of this package that defines ``SPEC``
    (one :class:`ModelSpec`) or ``SPECS`` (several) contributes them. A module that fails to import raises.
    """
    specs: list[ModelSpec] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found = getattr(module, "SPECS", None)
        if found is None and isinstance(getattr(module, "SPEC", None), ModelSpec):
            found = (module.SPEC,)
        specs.extend(found or ())
    return {s.name: s for s in sorted(specs, key=lambda s: (s.rank, s.name))}


def get_model(model: str | ModelSpec) -> ModelSpec:
    """Resolve a model name or spec; unknown names raise ``ValueError`` listing the valid ones."""
    if isinstance(model, ModelSpec):
        return model
    registry = model_specs()
    if isinstance(model, str) and model in registry:
        return registry[model]
    raise ValueError(f"model: unknown model {model!r}; choose one of {', '.join(registry)}")


def available_models() -> dict[str, str]:
    """Model name → one-line description."""
    return {name: spec.description for name, spec in model_specs().items()}


__all__ = ["ModelConfig", "ModelSpec", "available_models", "get_model", "model_specs"]
