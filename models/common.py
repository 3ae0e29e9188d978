"""Pieces shared by the model functions: their parameters, the prior mean, and the observed site.

This is the only place (with the model functions themselves) where ``numpyro.sample`` appears for
hyperparameters. Options:

* ``fixed={name: value}`` pins any hyperparameter (e.g. ``{"noise": 0.1}``) instead of sampling it;
* ``hyperprior=True`` puts a hyperprior on the lengthscale prior: ``log ℓ_d = μ + τ z_d`` with
  ``μ ~ N(log ℓ̂, 1)`` (ℓ̂ the default prior's median, pooled across input dimensions),
  ``τ ~ HalfNormal(0.5)`` and ``z_d ~ N(0, 1)`` (non-centred), so the D lengthscales of an ARD kernel
  borrow strength from each other;
* ``config.mean == "linear"``: the prior mean m(x) = ``mean_intercept`` + (x − x̄)·``mean_slope``, both
  sampled (priors in ``config.priors``; x̄ = ``data["x_centre"]``, the mean of the training inputs, so the
  intercept is the mean level of f over the data rather than its value at x = 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from bayes_rbfn.gp import linalg
from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.models.families import KernelFamily

__all__ = [
    "LINEAR_MEAN_PARAMS",
    "ModelMarginal",
    "centred_y",
    "observe",
    "prior_mean",
    "sample_hyperparameters",
    "sample_or_pin",
    "sample_parameters",
]


#: The sampled parameters of the linear mean.
LINEAR_MEAN_PARAMS = ("mean_intercept", "mean_slope")


def _median(d: dist.Distribution) -> jnp.ndarray:
    base = d.base_dist if isinstance(d, dist.Independent) else d
    if isinstance(base, dist.LogNormal):
        return jnp.exp(base.loc) * jnp.ones(d.event_shape)
    return jnp.ones(d.event_shape)


def sample_or_pin(name: str, priors: Mapping[str, dist.Distribution], fixed: Mapping[str, Any]) -> Any:
    """The site ``name``: its pinned value from ``fixed`` where there is one, else sampled from its prior.

    The prior is the one in ``priors``.
    """
    if name in fixed:
        return jnp.asarray(fixed[name])
    return numpyro.sample(name, priors[name])


def sample_hyperparameters(
    family: KernelFamily,
    priors: Mapping[str, dist.Distribution],
    fixed: Mapping[str, Any] | None = None,
    hyperprior: bool = False,
    extra: tuple[str, ...] = ("noise",),
) -> tuple[Kernel, Any, dict[str, Any]]:
    """Sample (or pin) the kernel hyperparameters and the likelihood's parameters ``extra``.

    Returns:
        (kernel, noise, values) with ``values`` the dict of values by name (noise None if not in ``extra``).
    """
    fixed = dict(fixed or {})
    values: dict[str, Any] = {}
    for name in (*family.params, *extra):
        if name == "lengthscale" and hyperprior and name not in fixed:
            prior = priors[name]
            shape = prior.event_shape
            mu = numpyro.sample("lengthscale_mu", dist.Normal(jnp.log(jnp.mean(_median(prior))), 1.0))
            tau = numpyro.sample("lengthscale_tau", dist.HalfNormal(0.5))
            z = numpyro.sample("lengthscale_z", dist.Normal(jnp.zeros(shape), 1.0).to_event(len(shape)))
            values[name] = numpyro.deterministic(name, jnp.exp(mu + tau * z))
        else:
            values[name] = sample_or_pin(name, priors, fixed)
    return family.build(values), values.get("noise"), values


def sample_parameters(config: Any) -> dict[str, Any]:
    """Every parameter of a (non-grouped) model: kernel hyperparameters, likelihood parameters, mean."""
    _, _, values = sample_hyperparameters(
        config.family, config.priors, config.fixed, config.hyperprior, config.likelihood.params
    )
    if config.mean == "linear":
        for name in LINEAR_MEAN_PARAMS:
            values[name] = sample_or_pin(name, config.priors, config.fixed)
    return values


@linalg.full_precision
def prior_mean(params: Mapping[str, Any], data: Mapping[str, Any], config: Any, X: jax.Array) -> jax.Array:
    """The prior mean m at the rows of X, shape (N,) (see the module docstring and ``ModelConfig.mean``)."""
    if config.mean == "linear":
        return params["mean_intercept"] + (X - data["x_centre"]) @ params["mean_slope"]
    base = jnp.broadcast_to(data["y_offset"], X.shape[:1])
    if callable(config.mean):
        return base + jnp.asarray(config.mean(X), dtype=X.dtype).reshape(X.shape[:1])
    return base


def centred_y(params: Mapping[str, Any], data: Mapping[str, Any], config: Any) -> jax.Array:
    """y − m(X): the targets less their prior mean, what every Gaussian marginal conditions on."""
    return data["y"] - prior_mean(params, data, config, data["X"])


def observe(distribution: dist.Distribution, data: Mapping[str, Any]) -> Any:
    """The observed site ``y`` of every model: ``y`` observed, or simulated when ``data["y"]`` is None."""
    return numpyro.sample("y", distribution, obs=data.get("y"))


class SortedPytreeFields:
    """A NumPyro distribution whose pytree fields flatten in one order in every process.

    NumPyro gathers a distribution's ``pytree_data_fields`` and ``pytree_aux_fields`` through a ``set``
    (numpyro 0.22 ``Distribution.gather_pytree_data_fields``), whose order of strings changes with the
    process's hash seed. A distribution passed through ``jax.jit`` then gives its arrays to the program in
    another order in each process: the same computation lowers to another text, and JAX's persistent
    compilation cache, keyed by that text, missed every NUTS program of a fresh process (a CLI fit
    compiled its NUTS loop anew each run). Sorted, the order is fixed. Mix in before
    ``dist.Distribution``.
    """

    @classmethod
    def gather_pytree_data_fields(cls) -> tuple[str, ...]:
        return tuple(sorted(super().gather_pytree_data_fields()))  # type: ignore[misc]

    @classmethod
    def gather_pytree_aux_fields(cls) -> tuple[str, ...]:
        return tuple(sorted(super().gather_pytree_aux_fields()))  # type: ignore[misc]


class ModelMarginal(SortedPytreeFields, dist.Distribution):
    """The observed y of a model with its own marginal likelihood (``blr``, ``grouped``) as a distribution.

    ``log_prob(y)`` is the model's ``log_density(params, data with y, config)``; ``sample`` its simulator
    ``simulate(key, sample_shape, params, data, config)``; ``sample_replicates(key, y)`` draws
    y_rep ~ p(y_rep | y) through ``replicate(key, sample_shape, params, data with y, config)``. The GP
    models use :class:`~bayes_rbfn.models.distributions.SparseGP` and
    :class:`~bayes_rbfn.models.distributions.ExactGP` directly; this wrapper gives the two models whose
    marginal is not one of those the same observed site.
    """

    support = constraints.real_vector
    pytree_data_fields = ("params", "data")
    pytree_aux_fields = ("log_density", "simulate", "replicate", "config")

    def __init__(
        self,
        log_density,
        simulate,
        params,
        data,
        config,
        event_shape,
        replicate=None,
        batch_shape=(),
        validate_args=None,
    ):
        """The observed y of a model given its hooks and one draw's parameters.

        Args:
            log_density: ``log_density(params, data with y, config)``, the log marginal likelihood.
            simulate: ``simulate(key, sample_shape, params, data, config)``, draws of y.
            params: the draw's parameters, {name: value}.
            data: the model's data; its ``"y"`` (if any) is left out, ``log_prob`` supplies its value.
            config: the model's configuration, passed on to every hook.
            event_shape: the shape of one y.
            replicate: ``replicate(key, sample_shape, params, data with y, config)``, draws of y_rep given y,
                or None (then :meth:`sample_replicates` raises ``NotImplementedError``).
            batch_shape: the batch shape (e.g. (G,), one member per group).
            validate_args: NumPyro's ``validate_args``.
        """
        self.log_density, self.simulate, self.replicate = log_density, simulate, replicate
        self.params, self.data, self.config = (
            dict(params),
            {k: v for k, v in data.items() if k != "y"},
            config,
        )
        super().__init__(
            batch_shape=tuple(batch_shape), event_shape=tuple(event_shape), validate_args=validate_args
        )

    def log_prob(self, value):
        """The model's log marginal likelihood of y = ``value``, by its ``log_density`` hook.

        Args:
            value: the observations y, of shape ``batch_shape + event_shape``.

        Returns:
            log p(y), shape ``batch_shape``.
        """
        return self.log_density(self.params, {**self.data, "y": value}, self.config)

    def sample(self, key, sample_shape=()):
        """Draws of y from the model's marginal, by its ``simulate`` hook.

        Args:
            key: a JAX PRNG key.
            sample_shape: the leading shape of the draws.

        Returns:
            y, shape ``sample_shape + batch_shape + event_shape``.
        """
        return self.simulate(key, tuple(sample_shape), self.params, self.data, self.config)

    def sample_replicates(self, key, y, sample_shape=()):
        """Posterior predictive replicates y_rep ~ p(y_rep | y), by the model's ``replicate`` hook.

        The hook is called as ``replicate(key, sample_shape, params, data with y, config)``.
        """
        if self.replicate is None:
            raise NotImplementedError("this marginal has no conditional replicates")
        return self.replicate(key, tuple(sample_shape), self.params, {**self.data, "y": y}, self.config)
