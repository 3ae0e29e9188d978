"""``exact`` — the full GP, y ~ N(c, K_ff + σ²I): the O(N³) reference for small N."""

from __future__ import annotations

from functools import partial

import jax

from bayes_rbfn.gp import conditional
from bayes_rbfn.models.common import centred_y, observe, prior_mean, sample_parameters
from bayes_rbfn.models.distributions import ExactGP
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = ["SPEC", "log_density", "log_likelihood", "marginal", "model", "predict"]


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: hyperparameters ~ priors; y ~ ExactGP, i.e. N(m, K_ff + σ²I).

    ``data``: ``X`` (N, D), ``y`` (N,) or None (then y is simulated), ``y_offset``, ``x_centre``.
    """
    observe(marginal(sample_parameters(config), data, config), data)


def marginal(params: dict, data: dict, config: ModelConfig) -> ExactGP:
    """The distribution of y given one set of parameters: N(m, K_ff + σ²I)."""
    kernel = config.family.build(params)
    return ExactGP(kernel, data["X"], params["noise"], mean=prior_mean(params, data, config, data["X"]))


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig):
    """log N(y | m, K_ff + σ²I); -inf when the Cholesky factorisation fails."""
    return marginal(params, data, config).log_prob(data["y"])


def predict(params: dict, data: dict, config: ModelConfig, X_test):
    """Per-draw exact GP moments of the latent f* at X_test."""
    kernel = config.family.build(params)
    moments = conditional.exact_predict(
        kernel, data["X"], centred_y(params, data, config), params["noise"], X_test, full_cov=False
    )
    return moments.mean + prior_mean(params, data, config, X_test), moments.var


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """Exact LOO conditionals log p(y_i | y_−i, θ) (their CDFs at y_i with ``config.loo_statistic``)."""
    kernel = config.family.build(params)
    r = centred_y(params, data, config)
    return conditional.exact_loo(kernel, data["X"], r, params["noise"], config.loo_statistic)


SPEC = ModelSpec(
    name="exact",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=False,
    description="exact GP: y ~ N(c, K_ff + σ²I), O(N³); the reference for small N",
    rank=3,
)
