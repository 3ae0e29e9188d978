"""Pieces shared by the model functions: sampling the hyperparameters of a kernel family.

This is the only place (with the model functions themselves) where ``numpyro.sample`` appears for
hyperparameters. Two hierarchical options:

* ``fixed={name: value}`` pins any hyperparameter (e.g. ``{"noise": 0.1}``) instead of sampling it;
* ``hyperprior=True`` puts a hyperprior on the lengthscale prior: ``log ℓ_d = μ + τ z_d`` with
  ``μ ~ N(log ℓ̂, 1)`` (ℓ̂ the default prior's median, pooled across input dimensions),
  ``τ ~ HalfNormal(0.5)`` and ``z_d ~ N(0, 1)`` (non-centred), so the D lengthscales of an ARD kernel
  borrow strength from each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from bayes_rbfn.families import KernelFamily
from bayes_rbfn.kernels import Kernel


def _median(d: dist.Distribution) -> jnp.ndarray:
    base = d.base_dist if isinstance(d, dist.Independent) else d
    if isinstance(base, dist.LogNormal):
        return jnp.exp(base.loc) * jnp.ones(d.event_shape)
    return jnp.ones(d.event_shape)


def sample_hyperparameters(
    family: KernelFamily,
    priors: Mapping[str, dist.Distribution],
    fixed: Mapping[str, Any] | None = None,
    hyperprior: bool = False,
) -> tuple[Kernel, jnp.ndarray, dict[str, Any]]:
    """Sample (or pin) the kernel hyperparameters and the noise σ.

    Returns:
        (kernel, noise, values) with ``values`` the dict of hyperparameter values by name.
    """
    fixed = dict(fixed or {})
    values: dict[str, Any] = {}
    for name in (*family.params, "noise"):
        if name in fixed:
            values[name] = jnp.asarray(fixed[name])
        elif name == "lengthscale" and hyperprior:
            prior = priors[name]
            shape = prior.event_shape
            mu = numpyro.sample("lengthscale_mu", dist.Normal(jnp.log(jnp.mean(_median(prior))), 1.0))
            tau = numpyro.sample("lengthscale_tau", dist.HalfNormal(0.5))
            z = numpyro.sample("lengthscale_z", dist.Normal(jnp.zeros(shape), 1.0).to_event(len(shape)))
            values[name] = numpyro.deterministic(name, jnp.exp(mu + tau * z))
        else:
            values[name] = numpyro.sample(name, priors[name])
    return family.build(values), values["noise"], values
