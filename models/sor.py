"""``sor`` — the explicit SoR GP prior on the outputs, y ~ N(c, Q_ff + σ²I), in O(NM²).

The latent weights are marginalised analytically: NUTS samples only the hyperparameters. The log density
is the SoR marginal likelihood through the one Woodbury path (no N×N matrix), guarded so a failed
factorisation is -inf. The per-draw predictive is the SoR conditional of DESIGN §3.2.

The O(NM²) sums over the data (log density, its gradient, the LOO conditionals and the predictive) are
taken by :mod:`bayes_rbfn.parallel`: streamed in cache-sized chunks without ever forming K_uf, whitened
before summing, with a hand-written reverse pass, and sharded over devices when ``config.mesh`` is set.
"""

from __future__ import annotations

from functools import partial

import jax
import numpyro

from bayes_rbfn import linalg, parallel
from bayes_rbfn.models import ModelConfig, ModelSpec
from bayes_rbfn.models._common import sample_hyperparameters


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
    factor = _factor(kernel, noise, data["y"] - data["y_offset"], data, config)
    return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())


def _kernel(params: dict, config: ModelConfig):
    return config.family.build(params), params["noise"]


def _factor(kernel, noise, y, data: dict, config: ModelConfig) -> linalg.Woodbury:
    """The Woodbury factor of Q_ff + σ²I from one streamed (and, with ``config.mesh``, sharded) pass."""
    return parallel.sor_factor(
        kernel,
        data["X"],
        y,
        data["Z"],
        noise,
        config.jitter,
        fast=config.fast,
        chunk_size=config.chunk_size,
        mesh=config.mesh,
    )


def predict(params: dict, data: dict, config: ModelConfig, X_test):
    """Per-draw SoR moments of the latent f* at X_test: (mean (S,), var (S,)).

    Streams over chunks of test points, so its memory does not grow with S (the driver may pass every
    test point at once and the factor is then computed once per draw).
    """
    kernel, noise = _kernel(params, config)
    factor = _factor(kernel, noise, data["y"] - data["y_offset"], data, config)
    mean, var = parallel.sor_moments(
        factor, kernel, data["Z"], X_test, chunk_size=config.chunk_size, mesh=config.mesh
    )
    return mean + data["y_offset"], var


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """LOO conditionals log p(y_i | y_−i, θ) under the SoR marginal, O(NM²)."""
    kernel, noise = _kernel(params, config)
    y = data["y"] - data["y_offset"]
    factor = _factor(kernel, noise, y, data, config)
    return parallel.sor_loo(
        factor, kernel, data["Z"], data["X"], y, noise**2, chunk_size=config.chunk_size, mesh=config.mesh
    )


SPEC = ModelSpec(
    name="sor",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    predict_streams=True,
    description="SoR (Nyström) GP: y ~ N(c, Q_ff + σ²I), weights marginalised, O(NM²)",
)
