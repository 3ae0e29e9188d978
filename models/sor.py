"""``sor`` — the explicit SoR GP prior on the outputs, y ~ N(c, Q_ff + σ²I), in O(NM²).

The latent weights are marginalised analytically: NUTS samples only the hyperparameters. The log density
is the SoR marginal likelihood through the one Woodbury path (no N×N matrix), guarded so a failed
factorisation is -inf. The per-draw predictive is the SoR conditional of
docs/mathematics.md#function-space-and-weight-space-agree.

Everything goes through the distribution :func:`marginal` (a
:class:`~bayes_rbfn.models.distributions.SparseGP`), whose O(NM²) sums over the data (log density, its
gradient, the LOO conditionals and the predictive) are taken by the streamed passes of
:mod:`bayes_rbfn.gp.woodbury_sums`, :mod:`bayes_rbfn.gp.block_loo` and :mod:`bayes_rbfn.gp.moments`:
streamed in cache-sized chunks without ever forming K_uf, whitened before summing, with a hand-written
reverse pass, and sharded over devices when ``config.mesh`` is set. The DTC, FITC and VFE models
(:mod:`bayes_rbfn.models.sparse_models`) are the same functions with another ``approx``.
"""

from __future__ import annotations

from functools import partial

import jax

from bayes_rbfn.models.common import observe, prior_mean, sample_parameters
from bayes_rbfn.models.distributions import SparseGP
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = ["SPEC", "kernel_and_noise", "log_density", "log_likelihood", "marginal", "model", "predict"]


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: hyperparameters ~ priors; y ~ SparseGP(approx="sor"), i.e. N(m, Q_ff + σ²I).

    ``data``: ``X`` (N, D), ``Z`` (M, D), ``y`` (N,) or None (then y is simulated), ``y_offset`` (the
    constant prior mean), ``x_centre`` (D,) for a linear mean.
    """
    values = sample_parameters(config)
    observe(marginal(values, data, config), data)


def marginal(params: dict, data: dict, config: ModelConfig, approx: str = "sor") -> SparseGP:
    """The distribution of y given one set of parameters: the sparse GP marginal, streamed."""
    kernel, noise = kernel_and_noise(params, config)
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
        precision=config.precision,
    )


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig):
    """log N(y − m | 0, Q_ff + σ²I) in O(NM²); -inf when a factorisation fails."""
    return marginal(params, data, config).log_prob(data["y"])


def kernel_and_noise(params: dict, config: ModelConfig):
    """(the kernel, σ) of one draw ``params``: the family's kernel built from its hyperparameters."""
    return config.family.build(params), params["noise"]


def predict(params: dict, data: dict, config: ModelConfig, X_test, approx: str = "sor"):
    """Per-draw moments of the latent f* at X_test: (mean (S,), var (S,)) (SoR's, or ``approx``'s).

    Streams over chunks of test points, so its memory does not grow with S (the driver may pass every
    test point at once and the factor is then computed once per draw).
    """
    moments = marginal(params, data, config, approx).moments(data["y"], X_test)
    return moments.mean + prior_mean(params, data, config, X_test), moments.var


def log_likelihood(params: dict, data: dict, config: ModelConfig, approx: str = "sor"):
    """LOO conditionals log p(y_i | y_−i, θ) under the SoR marginal (or ``approx``'s), O(NM²).

    Their CDFs at y_i with ``config.loo_statistic = "pit"``.
    """
    distribution = marginal(params, data, config, approx)
    if config.loo_statistic == "pit":
        return distribution.loo_pit(data["y"], exact=config.loo_exact)
    return distribution.loo_log_prob(data["y"], exact=config.loo_exact)


SPEC = ModelSpec(
    name="sor",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    predict_streams=True,
    variance_collapses=True,
    shards_data=True,
    takes_precision=True,
    description="SoR (Nyström) GP: y ~ N(c, Q_ff + σ²I), weights marginalised, O(NM²)",
    rank=1,
)
