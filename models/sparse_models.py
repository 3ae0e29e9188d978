"""``dtc``, ``fitc``, ``vfe`` and ``asor`` — the sparse GPs that repair SoR's collapsing predictive variance.

SoR (:mod:`bayes_rbfn.models.sor`, the Bayesian RBFN) puts the Nyström covariance Q everywhere, at test
points too, so its predictive variance vanishes away from the inducing inputs Z
(docs/mathematics.md#the-sor-family-and-its-variance-collapse). The models
here keep SoR's O(NM²) cost and its one Woodbury path (:func:`bayes_rbfn.gp.linalg.woodbury`, reached through
:mod:`bayes_rbfn.gp.sparse`), and differ in what they condition on and how they predict:

* ``dtc`` — log density log N(y | 0, Q_ff + σ²I), SoR's ([1] eq. (20)); predictive
  N(K_*u Σ K_uf y/σ², K_** − Q_** + K_*u Σ K_u*) ([1] eq. (21));
* ``fitc`` — log N(y | 0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I ([1] eq. (24)); predictive of the same form
  with Λ in place of σ²I, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹ ([1] eq. (25));
* ``vfe`` — Titsias's bound log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²) ([2] eq. (9)); DTC's
  predictive, which is that of Titsias's optimal q(u) ([2] §3);
* ``asor`` — trained as SoR; at prediction each test input x* is added to Z ([3]);

with y centred at its prior mean c and Σ = (K_uu + K_uf K_fu/σ²)⁻¹ unless stated. Like every model of the
collection, each samples only the kernel hyperparameters and the noise σ; the inducing values u (the RBFN
weights) are marginalised analytically.

**DTC** has exactly SoR's posterior over the hyperparameters (same marginal likelihood), and SoR's
predictive mean; only the predictive variance changes, by the prior variance K_** − Q_** that the Nyström
prior drops at the test points (≥ 0, so DTC's variance is never below SoR's, and tends to the prior
variance far from Z where SoR's tends to 0).

**FITC** changes the training prior too: the variance the Nyström covariance drops at each training input
comes back as heteroscedastic noise, so its posterior, mean and LOO values all differ from SoR's.

**VFE: NUTS samples a pseudo-posterior.** The bound F(θ) = log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²)
is not the log density of any model for y: exp F integrates over y to exp(−tr(K_ff − Q_ff)/(2σ²)) ≤ 1, not
to 1. What NUTS samples is the generalised ("Gibbs") posterior p̃(θ | y) ∝ p(θ) exp F(θ). Because
F(θ) = log p(y | θ) − KL(q_θ(f, u) ‖ p(f, u | y, θ)) ([2] §3), this is the *exact* GP posterior reweighted
by exp(−KL_θ): hyperparameters at which the M inducing inputs describe the GP badly (short lengthscales,
small noise) are down-weighted, hyperparameters at which they describe it well keep their exact-posterior
weight, and when Z = X (KL = 0) it *is* the exact GP posterior. So (i) its spread is not the posterior
uncertainty of any generative model — it mixes uncertainty about θ with a preference for θ that the
approximation can handle; (ii) it is biased, typically towards longer lengthscales and larger noise, when M
is too small; (iii) it is most useful as a check: when the VFE and exact posteriors agree, M is large
enough. For the stored LOO values, the trace term depends on the inputs only, never on y, so it acts as an
X-dependent factor of the prior; given it, the targets have DTC's likelihood N(y | 0, Q_ff + σ²I), whose
leave-one-out conditionals are stored (:func:`bayes_rbfn.gp.sparse.loo_log_density` with ``"vfe"``). PSIS-LOO
then estimates the predictive density of a left-out *target* (its input x_i stays in the trace), a proper
density.

**asor** is the augmentation of Rasmussen & Quiñonero-Candela [3] ("healing the RVM") applied to SoR:
training is SoR's, and at prediction each test input x* joins the inducing inputs, under the Nyström prior
of Z ∪ {x*} (the new basis function's weight is correlated with the others through K_u'u'⁻¹, rather than
independent as in their RVM*). Then Q'_*f = K_*f and Q'_** = K_** exactly, so the variance cannot collapse
away from Z. Adding one inducing input borders the Woodbury factor by one row
(:func:`augmented_sor_predict`): O(NM) per test point, and the predictive variance is SoR's plus a
non-negative term. Caveat: the added basis function k(·, x*) also absorbs training residuals near x*, so
just outside the data, where SoR with few inducing inputs underfits, the augmented mean can overshoot.

The stored ``log_likelihood`` of every model is its LOO conditional log p(y_i | y_−i, θ) under the density
NUTS sampled (the condition for PSIS-LOO to be valid, [4]): dtc, vfe and asor store SoR's; fitc its own.
So SoR, DTC and ASoR tie under PSIS-LOO (same posterior, same conditionals) and are told apart by
held-out data (:func:`bayes_rbfn.workflows.compare.compare_models` with ``X_test``/``y_test``).

References
----------
[1] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959. §5 (DTC) eqs. (19)–(21); §6 (FITC) eqs. (23)–(25).
[2] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
    Eq. (9) (the collapsed bound); §3 (the bound as log p(y) − KL, the optimal q(u), its predictive).
[3] Rasmussen, C. E. & Quiñonero-Candela, J. (2005). Healing the relevance vector machine through
    augmentation. ICML (the augmented predictive, RVM*).
[4] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp

from bayes_rbfn.gp import conditional, linalg, sparse
from bayes_rbfn.models import sor
from bayes_rbfn.models.common import centred_y, observe, prior_mean, sample_parameters
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = [
    "SPECS",
    "asor_predict",
    "augmented_sor_predict",
    "dtc_log_density",
    "dtc_log_likelihood",
    "dtc_model",
    "dtc_predict",
    "fitc_log_density",
    "fitc_log_likelihood",
    "fitc_model",
    "fitc_predict",
    "vfe_log_density",
    "vfe_log_likelihood",
    "vfe_model",
    "vfe_predict",
]

#: Test points per step of the augmented predictive (its memory is draws × this × N).
ASOR_POINT_BATCH = 32


def _numpyro_model(approx: str, doc: str) -> Callable[[dict, ModelConfig], None]:
    """A NumPyro model: hyperparameters ~ priors (or pinned), then y ~ ``SparseGP(approx=approx)``."""

    def model(data: dict, config: ModelConfig) -> None:
        values = sample_parameters(config)
        observe(sor.marginal(values, data, config, approx), data)

    model.__doc__ = doc
    return model


def _predict(approx: str, doc: str) -> Callable:
    """The per-draw predictive of ``approx``: :func:`bayes_rbfn.models.sor.predict` with that ``approx``."""

    def predict(params: dict, data: dict, config: ModelConfig, X_test: jax.Array):
        return sor.predict(params, data, config, X_test, approx)

    predict.__doc__ = doc
    return predict


def _log_likelihood(approx: str, doc: str) -> Callable:
    """The stored LOO conditionals of ``approx``: :func:`bayes_rbfn.models.sor.log_likelihood` with it."""

    def log_likelihood(params: dict, data: dict, config: ModelConfig) -> jax.Array:
        return sor.log_likelihood(params, data, config, approx)

    log_likelihood.__doc__ = doc
    return log_likelihood


@partial(jax.jit, static_argnames=("approx", "config"))
def _log_density(approx: str, params: dict, data: dict, config: ModelConfig) -> jax.Array:
    return sor.marginal(params, data, config, approx).log_prob(data["y"])


# --------------------------------------------------------------------------------------------------
# DTC


def dtc_log_density(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """log N(y − m | 0, Q_ff + σ²I) in O(NM²), [1] eq. (20) (SoR's); -inf when a factorisation fails."""
    return _log_density("dtc", params, data, config)


dtc_predict = _predict(
    "dtc",
    """Per-draw DTC moments of the latent f* at X_test (S, D), [1] eq. (21): (mean (S,), var (S,)).

    mean = c + K_*u Σ K_uf (y − c)/σ² (SoR's), var = K_** − Q_** + K_*u Σ K_u* (SoR's plus the prior
    variance the Nyström prior drops at X_test).
    """,
)

dtc_log_likelihood = _log_likelihood(
    "dtc", "LOO conditionals log p(y_i | y_−i, θ) under N(c, Q_ff + σ²I), shape (N,), O(NM²) ([4])."
)

dtc_model = _numpyro_model("dtc", "NumPyro model: hyperparameters ~ priors; y ~ N(m, Q_ff + σ²I) (DTC).")


# --------------------------------------------------------------------------------------------------
# FITC


def fitc_log_density(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """log N(y − m | 0, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I, in O(NM²), [1] eq. (24); -inf on failure."""
    return _log_density("fitc", params, data, config)


fitc_predict = _predict(
    "fitc",
    """Per-draw FITC moments of the latent f* at X_test (S, D), [1] eq. (25): (mean (S,), var (S,)).

    mean = c + K_*u Σ K_uf Λ⁻¹ (y − c), var = K_** − Q_** + K_*u Σ K_u*, Σ = (K_uu + K_uf Λ⁻¹ K_fu)⁻¹.
    """,
)

fitc_log_likelihood = _log_likelihood(
    "fitc", "LOO conditionals log p(y_i | y_−i, θ) under FITC's N(c, Q_ff + Λ), shape (N,), O(NM²) ([4])."
)

fitc_model = _numpyro_model(
    "fitc", "NumPyro model: hyperparameters ~ priors; y ~ N(m, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I (FITC)."
)


# --------------------------------------------------------------------------------------------------
# VFE


def vfe_log_density(params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """Titsias's bound log N(y − m | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), [2] eq. (9); -inf on failure.

    Used as the log likelihood, so NUTS samples the pseudo-posterior p(θ) exp F(θ) (module docstring).
    """
    return _log_density("vfe", params, data, config)


vfe_predict = _predict(
    "vfe", "Per-draw moments of the latent f* under Titsias's optimal q(u) ([2] §3), equal to DTC's."
)

vfe_log_likelihood = _log_likelihood(
    "vfe", "LOO conditionals for the VFE pseudo-posterior: DTC's (the trace term does not depend on y), (N,)."
)

vfe_model = _numpyro_model(
    "vfe",
    "NumPyro model: hyperparameters ~ priors; y observed under Titsias's bound (VFE): a pseudo-likelihood, "
    "see the module docstring; simulated y are drawn from DTC's marginal.",
)


# --------------------------------------------------------------------------------------------------
# Augmented SoR


@linalg.full_precision
def augmented_sor_predict(
    factor: linalg.Woodbury,
    kernel,
    X: jax.Array,
    y: jax.Array,
    Z: jax.Array,
    noise: jax.Array,
    X_test: jax.Array,
    point_batch: int = ASOR_POINT_BATCH,
) -> conditional.Gaussian:
    """Latent f* under SoR with inducing inputs Z ∪ {x*}, one test point x* at a time ([3]).

    ``factor`` is SoR's Woodbury factorisation of Q_ff + σ²I for the centred y
    (:func:`bayes_rbfn.gp.woodbury_sums.sor_factor`): L_uu, L_B with B = I + A Aᵀ/σ², A = L_uu⁻¹ K_uf, and
    c = L_B⁻¹ A y/σ². Adding x* to Z borders L_uu by the row (a*ᵀ, √γ), a* = L_uu⁻¹ k_u*,
    γ = k** − ‖a*‖² (the squared power function of Z at x*); that adds the row wᵀ = (k_*f − a*ᵀA)/√γ to A
    and borders L_B by the row (lᵀ, δ),

        l = L_B⁻¹ A w/σ²,     δ² = 1 + ‖w‖²/σ² − ‖l‖² = 1 + wᵀ(Q_ff + σ²I)⁻¹w ≥ 1.

    With b = L_B⁻¹ a* and e = (√γ − lᵀb)/δ, SoR's whitened formulas on the bordered factor give

        mean = bᵀc + e (wᵀy/σ² − lᵀc)/δ,       var = ‖b‖² + e²,

    i.e. SoR's moments at x* (:func:`bayes_rbfn.gp.moments.weight_space_moments`: bᵀc and ‖b‖²) plus a
    correction; the variance correction e² is non-negative, and tends to k** far from Z and from the
    data. O(NM) per test point; points are processed ``point_batch`` at a time (``jax.lax.map``), so the
    memory is O(point_batch · N) per draw rather than O(S · N).

    The jitter of the policy is on the K_uu block only: x* itself is added without jitter, so the
    augmented Nyström covariance reproduces k(x*, x*) and k(x*, X) exactly.

    Args:
        factor: SoR's :class:`~bayes_rbfn.gp.linalg.Woodbury` for y.
        kernel: covariance function.
        X: (N, D) training inputs.
        y: (N,) the centred targets ``factor`` was built for.
        Z: (M, D) inducing inputs.
        noise: σ.
        X_test: (S, D) test inputs.
        point_batch: test points per vectorised step.

    Returns:
        :class:`~bayes_rbfn.gp.conditional.Gaussian` with ``mean`` (S,) and ``var`` (S,); no ``cov``: each
        test
        point has its own augmented model, so there is no joint predictive.
    """
    sigma2 = noise**2
    A = linalg.solve_lower(factor.Luu, kernel.inducing_cross(Z, X))  # (M, N); Q_ff = AᵀA
    eps = jnp.finfo(A.dtype).eps

    def one_point(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = x[None, :]
        kfs = kernel(X, x)[:, 0]
        a = linalg.solve_lower(factor.Luu, kernel.inducing_cross(Z, x)[:, 0])
        kss = kernel.diag(x)[0]
        # γ ≥ 0 in exact arithmetic; at an inducing input γ and k_f* − Aᵀa* vanish together, and the
        # floor keeps w = (k_f* − Aᵀa*)/√γ finite (its size is bounded by the power function at X).
        gamma = jnp.maximum(kss - a @ a, eps * kss)
        root_gamma = jnp.sqrt(gamma)
        w = (kfs - A.T @ a) / root_gamma
        l = linalg.solve_lower(factor.LB, A @ w) / sigma2
        delta = jnp.sqrt(jnp.maximum(1.0 + w @ w / sigma2 - l @ l, 1.0))
        b = linalg.solve_lower(factor.LB, a)
        e = (root_gamma - l @ b) / delta
        mean = b @ factor.c + e * (w @ y / sigma2 - l @ factor.c) / delta
        return mean, b @ b + e * e

    mean, var = jax.lax.map(one_point, X_test, batch_size=point_batch)
    return conditional.Gaussian(mean=mean, var=var)


def asor_predict(params: dict, data: dict, config: ModelConfig, X_test: jax.Array):
    """Per-draw augmented-SoR moments of the latent f* at X_test (S, D) ([3]): (mean (S,), var (S,)).

    See :func:`augmented_sor_predict`: SoR's posterior, with each test input added to the inducing inputs.
    """
    kernel, noise = sor.kernel_and_noise(params, config)
    y = centred_y(params, data, config)
    factor, _ = sparse.training_factor(
        "sor",
        kernel,
        data["X"],
        y,
        data["Z"],
        noise,
        config.jitter,
        fast=config.fast,
        chunk_size=config.chunk_size,
        mesh=config.mesh,
        precision=config.precision,
    )
    moments = augmented_sor_predict(factor, kernel, data["X"], y, data["Z"], noise, X_test)
    return moments.mean + prior_mean(params, data, config, X_test), moments.var


# --------------------------------------------------------------------------------------------------
# The collection's entries

SPECS = (
    ModelSpec(
        name="dtc",
        model=dtc_model,
        predict=dtc_predict,
        log_likelihood=dtc_log_likelihood,
        uses_inducing=True,
        takes_precision=True,
        description="DTC: SoR's likelihood, predictive with the exact K_** (no variance collapse), O(NM²)",
        rank=10,
    ),
    ModelSpec(
        name="fitc",
        model=fitc_model,
        predict=fitc_predict,
        log_likelihood=fitc_log_likelihood,
        uses_inducing=True,
        takes_precision=True,
        description="FITC: y ~ N(c, Q_ff + diag(K_ff − Q_ff) + σ²I) and its predictive, O(NM²)",
        rank=11,
    ),
    ModelSpec(
        name="vfe",
        model=vfe_model,
        predict=vfe_predict,
        log_likelihood=vfe_log_likelihood,
        uses_inducing=True,
        takes_precision=True,
        description="VFE: Titsias's bound as log likelihood (a pseudo-posterior), DTC's predictive, O(NM²)",
        generative=False,
        rank=12,
    ),
    ModelSpec(
        name="asor",
        model=sor.model,
        predict=asor_predict,
        log_likelihood=sor.log_likelihood,
        uses_inducing=True,
        takes_precision=True,
        description="augmented SoR: trained as SoR, each test input added to Z to predict, O(NM) per point",
        rank=13,
    ),
)
