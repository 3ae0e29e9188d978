"""``rbfn_iid`` — the RBF network with independent weights: the classic prior the package's own replaces.

The network f(x) = Σ_j w_j k(x, z_j) with unit-variance basis functions k (the kernel family's, variance
set to 1) at the inducing inputs Z, and independent weights w ~ N(0, s² I) (MacKay 1992 [1]; Bishop 2006
§3.3 [2], here with the width sampled):

    y ~ N(m, s² K_fu K_uf + σ² I),

its weights marginalised. Against the collection's ``sor`` (w ~ N(0, K_uu⁻¹), whose prior covariance is
the Nyström K_fu K_uu⁻¹ K_uf, a GP's), this prior's covariance s² K_fu K_uf depends on where the centres
are: its variance s² Σ_j k(x, z_j)² is larger where centres crowd and falls to 0 away from them, the
nonstationarity the K_uu⁻¹ prior removes (docs/mathematics.md#function-space-and-weight-space-agree). It
is SoR with K_uu replaced by I/s², so every SoR formula applies with L_uu = I/s: the log density, the
predictive moments and the LOO conditionals go through the package's one Woodbury pass
(:func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor`, :func:`bayes_rbfn.gp.moments.sor_moments`,
:func:`bayes_rbfn.gp.block_loo.sor_loo`) in O(NM²).

Hyperparameters: the kernel family's (its ``variance`` is the weights' variance s², with the family's
prior) and the noise σ. The prior signal variance is s² Σ_j k(x, z_j)², of order s² where the lengthscale
is comparable to the centres' spacing.

References
----------
[1] MacKay, D. J. C. (1992). Bayesian interpolation. Neural Computation 4, 415–447.
[2] Bishop, C. M. (2006). *Pattern Recognition and Machine Learning*. Springer. §3.3.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from bayes_rbfn.gp import block_loo, linalg, moments, sparse, woodbury_sums
from bayes_rbfn.models.common import ModelMarginal, centred_y, observe, prior_mean, sample_parameters
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = ["SPEC", "log_density", "log_likelihood", "model", "predict", "simulate"]


def _basis_and_scale(params: dict, config: ModelConfig):
    """(the unit-variance basis kernel, s): the family's kernel at variance 1, and the weights' sd."""
    if "variance" not in config.family.params:
        raise ValueError(
            f"kernel: the rbfn_iid model needs a family with a 'variance' (the weights' variance); "
            f"{config.family.name!r} has {', '.join(config.family.params) or 'none'}"
        )
    return config.family.build({**params, "variance": 1.0}), jnp.sqrt(params["variance"])


def _factor(params: dict, data: dict, config: ModelConfig):
    """The Woodbury factor of s² K_fu K_uf + σ² I (L_uu = I/s) for y − m; (factor, kernel, y − m)."""
    kernel, scale = _basis_and_scale(params, config)
    X, Z = data["X"], data["Z"]
    t = centred_y(params, data, config)
    Luu = jnp.eye(Z.shape[0], dtype=X.dtype) / scale
    factor = woodbury_sums.woodbury_factor(kernel, Z, X, t, params["noise"] ** 2, Luu)
    return factor, kernel, t


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """log N(y | m, s² K_fu K_uf + σ² I) in O(NM²); -inf when a factorisation fails.

    Args:
        params: one draw's hyperparameters (the family's and ``noise``).
        data: the model's data (X (N, D), y (N,), Z (M, D), y_offset).
        config: the model's settings.

    Returns:
        The log density, a scalar.
    """
    factor, _, _ = _factor(params, data, config)
    return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())


@linalg.full_precision
def simulate(key: jax.Array, sample_shape: tuple, params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """Draws of y = m + K_fu w + σ ε, w ~ N(0, s² I): O(NM) each.

    Args:
        key: a PRNG key.
        sample_shape: the leading shape of the draws.
        params: one draw's hyperparameters.
        data: the model's data (X, Z, y_offset).
        config: the model's settings.

    Returns:
        (*sample_shape, N) draws of y.
    """
    kernel, scale = _basis_and_scale(params, config)
    Kfu = kernel.inducing_cross(data["Z"], data["X"]).T
    k_w, k_eps = jax.random.split(key)
    w = scale * jax.random.normal(k_w, (*sample_shape, Kfu.shape[1]), Kfu.dtype)
    eps = jax.random.normal(k_eps, (*sample_shape, Kfu.shape[0]), Kfu.dtype)
    return prior_mean(params, data, config, data["X"]) + w @ Kfu.T + params["noise"] * eps


def replicate(
    key: jax.Array, sample_shape: tuple, params: dict, data: dict, config: ModelConfig
) -> jax.Array:
    """Posterior predictive replicates y_rep ~ p(y_rep | y): the weights' posterior, then new noise.

    Args:
        key: a PRNG key.
        sample_shape: the leading shape of the draws.
        params: one draw's hyperparameters.
        data: the model's data with y.
        config: the model's settings.

    Returns:
        (*sample_shape, N) replicates.
    """
    factor, kernel, t = _factor(params, data, config)
    draws = sparse.replicates(
        "sor", factor, kernel, data["X"], t, data["Z"], params["noise"], key, sample_shape
    )
    return prior_mean(params, data, config, data["X"]) + draws


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: the family's hyperparameters and σ ~ priors; y ~ N(m, s² K_fu K_uf + σ² I).

    Args:
        data: the model's data (y None to simulate).
        config: the model's settings.
    """
    values = sample_parameters(config)
    observe(ModelMarginal(log_density, simulate, values, data, config, data["X"].shape[:1], replicate), data)


def predict(params: dict, data: dict, config: ModelConfig, X_test: jax.Array):
    """Per-draw moments of the latent f* = K_*u w at X_test given y: ((S,), (S,)).

    Args:
        params: one draw's hyperparameters.
        data: the model's data with y.
        config: the model's settings.
        X_test: (S, D) test inputs.

    Returns:
        (mean (S,), var (S,)) of f*, the prior mean included.
    """
    factor, kernel, _ = _factor(params, data, config)
    mean, var = moments.sor_moments(factor, kernel, data["Z"], X_test)
    return mean + prior_mean(params, data, config, X_test), var


def log_likelihood(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """LOO conditionals log p(y_i | y_−i, θ) under N(m, s² K_fu K_uf + σ² I), shape (N,), O(NM²).

    Args:
        params: one draw's hyperparameters.
        data: the model's data with y.
        config: the model's settings (``loo_exact``, ``loo_statistic``).

    Returns:
        (N,) the conditionals (or their CDFs at y_i for ``loo_statistic="pit"``).
    """
    factor, kernel, t = _factor(params, data, config)
    return block_loo.sor_loo(
        factor,
        kernel,
        data["Z"],
        data["X"],
        t,
        params["noise"] ** 2,
        exact=config.loo_exact,
        statistic=config.loo_statistic,
    )


SPEC = ModelSpec(
    name="rbfn_iid",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    description="RBF network with independent weights w ~ N(0, s²I): y ~ N(m, s² K_fu K_uf + σ²I), O(NM²)",
    rank=30,
)
