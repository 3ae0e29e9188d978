"""``sor`` — the explicit SoR GP prior on the outputs, y ~ N(c, Q_ff + σ²I), in O(NM²).

The latent weights are marginalised analytically: NUTS samples only the hyperparameters. The log density
is the SoR marginal likelihood through the one Woodbury path (no N×N matrix), guarded so a failed
factorisation is -inf. The per-draw predictive is the SoR conditional of DESIGN §3.2.
"""

from __future__ import annotations

from functools import partial

import jax
import numpyro
from bayes_rbfn.models import ModelConfig, ModelSpec
from bayes_rbfn.models._common import sample_hyperparameters

from bayes_rbfn import conditional, linalg


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: hyperparameters ~ priors; factor log N(y − c | 0, Q_ff + σ²I)."""
    _, _, values = sample_hyperparameters(config.family, config.priors, config.fixed, config.hyperprior)
    if data.get("y") is None:
        return
    numpyro.factor("y", log_density(values, data, config))


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig):
    """log N(y − c | 0, Q_ff + σ²I) in O(NM²); -inf when a factorisation fails."""
    kernel, noise = _kernel(params, config)
    factor, _ = conditional.sor_factor(
        kernel, data["X"], data["y"] - data["y_offset"], data["Z"], noise, config.jitter
    )
    return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())


def _kernel(params: dict, config: ModelConfig):
    return config.family.build(params), params["noise"]


def predict(params: dict, data: dict, config: ModelConfig, X_test):
    """Per-draw SoR moments of the latent f* at X_test: (mean (S,), var (S,))."""
    kernel, noise = _kernel(params, config)
    factor, _ = conditional.sor_factor(
        kernel, data["X"], data["y"] - data["y_offset"], data["Z"], noise, config.jitter
    )
    moments = conditional.sor_predict(factor, kernel, data["Z"], X_test, full_cov=False)
    return moments.mean + data["y_offset"], moments.var


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """LOO conditionals log p(y_i | y_−i, θ) under the SoR marginal, O(NM²)."""
    kernel, noise = _kernel(params, config)
    y = data["y"] - data["y_offset"]
    factor, Kuf = conditional.sor_factor(kernel, data["X"], y, data["Z"], noise, config.jitter)
    return conditional.woodbury_loo(factor, Kuf, y, noise**2)


SPEC = ModelSpec(
    name="sor",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    description="SoR (Nyström) GP: y ~ N(c, Q_ff + σ²I), weights marginalised, O(NM²)",
)
