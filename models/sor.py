"""``sor`` — the explicit SoR GP prior on the outputs, y ~ N(c, Q_ff + σ²I), in O(NM²).

The latent weights are marginalised analytically: NUTS samples only the hyperparameters. The log density
is the SoR marginal likelihood through the one Woodbury path (no N×N matrix), guarded so a failed
factorisation is -inf. The per-draw predictive is the SoR conditional of DESIGN §3.2.

The O(NM²) sums over the data (log density, its gradient, the LOO conditionals and the predictive) are
taken by :mod:`bayes_rbfn.gp.parallel`: streamed in cache-sized chunks without ever forming K_uf, whitened
before summing, with a hand-written reverse pass, and sharded over devices when ``config.mesh`` is set.
"""

from __future__ import annotations

from functools import partial

import jax

from bayes_rbfn.gp import linalg, parallel
from bayes_rbfn.models.common import centred_y, observe, prior_mean, sample_parameters
from bayes_rbfn.models.distributions import SparseGP
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = ["SPEC", "log_density", "log_likelihood", "marginal", "model", "predict"]


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: hyperparameters ~ priors; y ~ SparseGP(approx="sor"), i.e. N(m, Q_ff + σ²I).

    ``data``: ``X`` (N, D), ``Z`` (M, D), ``y`` (N,) or None (then y is simulated), ``y_offset`` (the
    constant prior mean), ``x_centre`` (D,) for a linear mean.
    """
    values = sample_parameters(config)
    observe(marginal(values, data, config), data)


def marginal(params: dict, data: dict, config: ModelConfig, approx: str = "sor") -> SparseGP:
    """The distribution of y given one set of parameters: the sparse GP marginal, streamed."""
    kernel, noise = _kernel(params, config)
    return SparseGP(
        kernel,
        data["X"],
        data["Z"],
        noise,
        approx=approx,
        mean=prior_mean(params, data, config, data["X"]),
        jitter=config.jitter,
        fast=config.fast,
        chunk_size=config.chunk_size,
        mesh=config.mesh,
    )


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig):
    """log N(y − m | 0, Q_ff + σ²I) in O(NM²); -inf when a factorisation fails."""
    return marginal(params, data, config).log_prob(data["y"])


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
    factor = _factor(kernel, noise, centred_y(params, data, config), data, config)
    mean, var = parallel.sor_moments(
        factor, kernel, data["Z"], X_test, chunk_size=config.chunk_size, mesh=config.mesh
    )
    return mean + prior_mean(params, data, config, X_test), var


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """LOO conditionals log p(y_i | y_−i, θ) under the SoR marginal, O(NM²)."""
    kernel, noise = _kernel(params, config)
    y = centred_y(params, data, config)
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
    variance_collapses=True,
    shards_data=True,
    description="SoR (Nyström) GP: y ~ N(c, Q_ff + σ²I), weights marginalised, O(NM²)",
)
