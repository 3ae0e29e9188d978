"""``exact`` — the full GP, y ~ N(c, K_ff + σ²I): the O(N³) reference for small N."""

from __future__ import annotations

from functools import partial

import jax
import numpyro

from bayes_rbfn import conditional, linalg
from bayes_rbfn.models import ModelConfig, ModelSpec
from bayes_rbfn.models._common import sample_hyperparameters


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: hyperparameters ~ priors; factor log N(y − c | 0, K_ff + σ²I)."""
    _, _, values = sample_hyperparameters(config.family, config.priors, config.fixed, config.hyperprior)
    if data.get("y") is None:
        return
    numpyro.factor("y", log_density(values, data, config))


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig):
    """log N(y − c | 0, K_ff + σ²I); -inf when the Cholesky factorisation fails."""
    kernel = config.family.build(params)
    logp = conditional.exact_log_marginal(kernel, data["X"], data["y"] - data["y_offset"], params["noise"])
    return linalg.finite_or_neg_inf(logp)


def predict(params: dict, data: dict, config: ModelConfig, X_test):
    """Per-draw exact GP moments of the latent f* at X_test."""
    kernel = config.family.build(params)
    moments = conditional.exact_predict(
        kernel, data["X"], data["y"] - data["y_offset"], params["noise"], X_test, full_cov=False
    )
    return moments.mean + data["y_offset"], moments.var


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """Exact LOO conditionals log p(y_i | y_−i, θ)."""
    kernel = config.family.build(params)
    return conditional.exact_loo(kernel, data["X"], data["y"] - data["y_offset"], params["noise"])


SPEC = ModelSpec(
    name="exact",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=False,
    description="exact GP: y ~ N(c, K_ff + σ²I), O(N³); the reference for small N",
)
