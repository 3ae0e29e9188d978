"""``rbfn`` — the Bayesian RBF network in weight space, under any likelihood of the collection.

    α = L_uu⁻ᵀ v,  v ~ N(0, I_M)   ⇔   α ~ N(0, K_uu⁻¹)   (non-centred through the Cholesky factor)
    f = m + K_fu α,   y_i ~ p(y_i | f_i)   (:mod:`bayes_rbfn.models.likelihoods`)

With the Gaussian likelihood, marginalising α gives exactly the SoR model
(docs/mathematics.md#the-central-fact); here NUTS samples
α explicitly, together with the hyperparameters, which is what lets the same network carry a Student-t,
Poisson, negative-binomial or Bernoulli likelihood. The model is a composition of the public pieces: the
network is the layer :func:`bayes_rbfn.models.layers.rbfn` named ``"f"`` (sites ``f_v``, the whitened
weights NUTS moves; ``f_alpha``, the weights α; ``f``, the latent at X), and the data are one plate of
the likelihood's observed site ``y``.

Choices:

* the per-draw predictive is f* = m(x*) + K_*u α from the sampled weights, with ``f_var = 0``: given
  (θ, α) the latent is known, and the mixture over draws (law of total variance) carries all the
  uncertainty. That is what makes this model the weight-space check of the SoR formulas.
* the pointwise log-likelihood stored for LOO: with the Gaussian likelihood it is α-marginalised, the SoR
  conditional log p(y_i | y_−i, θ) — the conditionals given α factorise but PSIS importance weights over
  M extra dimensions are unstable, and α-marginalised values make ``rbfn`` and ``sor`` directly comparable
  with ``az.compare``. With any other likelihood, where nothing can be marginalised, it is the plain
  pointwise log density log p(y_i | f_i).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpyro

from bayes_rbfn.gp import linalg
from bayes_rbfn.models import sor
from bayes_rbfn.models.common import observe, prior_mean, sample_parameters
from bayes_rbfn.models.layers import rbfn
from bayes_rbfn.models.likelihoods import LIKELIHOODS
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = ["LAYER", "SPEC", "log_likelihood", "model", "predict"]


#: The name of the layer: its sites are ``f_v``, ``f_alpha`` and ``f``.
LAYER = "f"


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: hyperparameters, the RBFN layer f = m + K_fu L_uu⁻ᵀ v, then y_i ~ p(y_i | f_i).

    ``data``: ``X`` (N, D), ``Z`` (M, D), ``y`` (N,) or None (then y is simulated), ``y_offset``,
    ``x_centre`` as for every model (:mod:`bayes_rbfn.models`).
    """
    values = sample_parameters(config)
    kernel = config.family.build(values)
    f = rbfn(
        LAYER,
        kernel,
        data["X"],
        data["Z"],
        mean=prior_mean(values, data, config, data["X"]),
        jitter=config.jitter,
    )
    with numpyro.plate("obs", data["X"].shape[0]):
        observe(config.likelihood.observe(f, values), data)


@linalg.full_precision
def predict(params: dict, data: dict, config: ModelConfig, X_test):
    """f* = m(x*) + K_*u α for this draw's weights (the latent, on the link scale); f_var = 0."""
    kernel = config.family.build(params)
    mean = kernel(X_test, data["Z"]) @ params[f"{LAYER}_alpha"] + prior_mean(params, data, config, X_test)
    return mean, jnp.zeros_like(mean)


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """Gaussian: the SoR LOO conditionals (α marginalised); otherwise the pointwise log p(y_i | f_i).

    With ``config.loo_statistic = "pit"`` their CDFs at y_i instead: the conditional's, or the
    likelihood's P(y_i' ≤ y_i | f_i) for a continuous likelihood (ValueError for a discrete one, whose PIT
    is not uniform under a calibrated model without randomisation).
    """
    if config.likelihood.marginalisable:
        return sor.log_likelihood(params, data, config)
    f, _ = predict(params, data, config, data["X"])
    observation = config.likelihood.observe(f, params)
    if config.loo_statistic == "pit":
        if not observation.support.is_discrete:
            return observation.cdf(data["y"])
        raise ValueError(
            f"loo_pit: the {config.likelihood.name} likelihood is discrete; its PIT values are not uniform "
            "for a calibrated model (use a randomised PIT, or a rootogram)"
        )
    return observation.log_prob(data["y"])


SPEC = ModelSpec(
    name="rbfn",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    description="Bayesian RBF network: α ~ N(0, K_uu⁻¹) sampled explicitly, f = m + K_fu α, any likelihood",
    likelihoods=tuple(LIKELIHOODS),
    unstored_sites=(LAYER,),
    variance_collapses=True,
    samples_weights=True,
    rank=2,
)
