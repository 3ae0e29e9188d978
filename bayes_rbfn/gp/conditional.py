"""Analytic conditional-Gaussian formulas: exact GP, SoR / Bayesian RBFN, and their equivalences.

Two layers:

* the public, validated functions (:func:`exact_gp`, :func:`sor`, :func:`rbfn_weights`,
  :func:`nystrom_krr`, :func:`rbf_ridge`, :func:`log_marginal_likelihood`,
  :func:`loo_log_density`, :func:`condition_gaussian`) accept NumPy or JAX arrays, check them and raise
  ``ValueError`` with the argument's name on bad input or a failed factorisation. Their shared arguments
  come in one order, ``(kernel, X, y, Z, noise, X_test)`` without the ones a function does not take (the
  exact GP takes no Z), the options (``full_cov``, ``jitter``) keyword-only, as in
  :mod:`bayes_rbfn.gp.sparse` and the distributions (:class:`bayes_rbfn.models.distributions.SparseGP`);
  the exact GP's log marginal likelihood and LOO conditionals are here, the SoR family's in
  :mod:`bayes_rbfn.gp.sparse`;
* the traceable building blocks (``exact_*``, :func:`sor_predict`) take validated (N, D) arrays and
  are what the model layer calls inside ``jit``/NUTS; they never raise.

The SoR formulas that touch the data (the Woodbury factor, the LOO conditionals, the predictive moments)
each live once, in the streamed passes of :mod:`bayes_rbfn.gp.woodbury_sums`, :mod:`bayes_rbfn.gp.block_loo`
and :mod:`bayes_rbfn.gp.moments`; the public SoR functions here validate their input and call them (a dense
problem is one chunk of those passes).

Notation follows docs/mathematics.md#notation: ``Kfu = k(X, Z)``, ``Kuu = k(Z, Z)``, ``Ksu = k(X_test, Z)``,
``noise`` = σ.

References
----------
[1] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press.
    Eqs. (2.22)–(2.24) (predictive), (2.30) (marginal likelihood), (5.10)–(5.12) (LOO).
[2] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6. Section 4 (SoR), eqs. (14)–(16).
[3] The project's Nyström/RBFN derivation (docs/mathematics.md#five-formulations-one-mean): eq. (2) Nyström
KRR, eq. (3) RBF ridge.
[4] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
[5] Wilson, J. T., Borovitskiy, V., Terenin, A., Mostowsky, P. & Deisenroth, M. P. (2020). Efficiently
    sampling functions from Gaussian process posteriors. ICML. Eq. (1) (Matheron's rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp import linalg, moments, woodbury_sums
from bayes_rbfn.gp.kernels import (
    ActiveDims,
    Additive,
    Kernel,
    check_nonnegative_parameter,
    check_positive_parameter,
)
from bayes_rbfn.gp.validation import check_positive, check_X, check_y, check_Z

__all__ = [
    "Gaussian",
    "check_jitter",
    "check_kernel",
    "check_parameter_shape",
    "check_regression_inputs",
    "component_predict",
    "condition_gaussian",
    "exact_covariance",
    "exact_factor",
    "exact_gp",
    "exact_log_marginal",
    "exact_loo",
    "exact_predict",
    "exact_replicates",
    "log_marginal_likelihood",
    "loo_log_density",
    "nystrom_krr",
    "raise_if_not_finite",
    "rbf_ridge",
    "rbfn_weights",
    "sor",
    "sor_predict",
]


@partial(jax.tree_util.register_dataclass, data_fields=["mean", "var", "cov"], meta_fields=[])
@dataclass(frozen=True)
class Gaussian:
    """Moments of a Gaussian: ``mean`` (S,), ``cov`` (S, S) or None, ``var`` (S,) always."""

    mean: jax.Array
    var: jax.Array
    cov: jax.Array | None = None


#: What :func:`raise_if_not_finite` says by default.
_NOT_FACTORISED = (
    "a kernel matrix could not be factorised (not positive definite to working precision); check the "
    "hyperparameters, the inducing inputs or increase the jitter"
)


def raise_if_not_finite(result: Any, what: str, hint: str = _NOT_FACTORISED) -> None:
    """Raise :class:`~bayes_rbfn.gp.linalg.FactorisationError` when a concrete leaf of ``result`` is NaN/inf.

    The message is ``"{what}: {hint}"``; ``result`` is a pytree. Outside traced code a failed factorisation
    is an error (docs/mathematics.md#numerics). Traced leaves are skipped (inside NUTS the log densities are
    guarded with -inf instead).
    """
    leaves = [x for x in jax.tree_util.tree_leaves(result) if not isinstance(x, jax.core.Tracer)]
    for leaf in leaves:
        if not np.all(np.isfinite(np.asarray(leaf))):
            raise linalg.FactorisationError(f"{what}: {hint}")


# --------------------------------------------------------------------------------------------------
# General conditioning step


@linalg.full_precision
def condition_gaussian(
    S_aa: Any, S_ab: Any, S_bb: Any, a: Any, mean_a: Any = 0.0, mean_b: Any = 0.0, *, full_cov: bool = True
) -> Gaussian:
    """Condition a joint Gaussian on its first block: b | a.

    For ``(a, b) ~ N([m_a, m_b], [[S_aa, S_ab], [S_ba, S_bb]])`` returns
    ``N(m_b + S_ba S_aa⁻¹ (a − m_a), S_bb − S_ba S_aa⁻¹ S_ab)`` (eq. (A.6) of [1]), using a Cholesky
    factor of ``S_aa`` and triangular solves. Every formula in this module is an instance of it.

    Args:
        S_aa: (N, N) covariance of the observed block.
        S_ab: (N, S) cross-covariance of the observed and the conditioned block.
        S_bb: (S, S) covariance of the conditioned block, or (S,) its diagonal when ``full_cov`` is False.
        a: (N,) observed values.
        mean_a: prior mean of a, a scalar or (N,).
        mean_b: prior mean of b, a scalar or (S,).
        full_cov: also return the (S, S) covariance (else only the variances).
    """
    S_aa, S_ab, S_bb, a = (jnp.asarray(v) for v in (S_aa, S_ab, S_bb, a))
    L = linalg.cholesky(S_aa, jitter=0.0)
    W = linalg.solve_lower(L, S_ab)
    mean = mean_b + W.T @ linalg.solve_lower(L, a - mean_a)
    if full_cov:
        cov = S_bb - W.T @ W
        result = Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)
    else:
        prior_var = jnp.diagonal(S_bb) if S_bb.ndim == 2 else S_bb
        result = Gaussian(mean=mean, var=prior_var - jnp.sum(W * W, axis=0))
    raise_if_not_finite(result, "condition_gaussian")
    return result


# --------------------------------------------------------------------------------------------------
# Exact GP (traceable blocks)


def exact_factor(kernel: Kernel, X: jax.Array, noise: jax.Array) -> jax.Array:
    """Cholesky factor of K_ff + σ²I, shape (N, N). No jitter: σ² > 0 regularises it.

    ``noise`` may also be (N,), one σ_i per point: σ² · I is then diag(σ²) (the product broadcasts over
    the columns of I), and so in every ``exact_*`` block below.
    """
    return jnp.linalg.cholesky(exact_covariance(kernel, X, noise))


def exact_covariance(kernel: Kernel, X: jax.Array, noise: jax.Array) -> jax.Array:
    """K_ff + σ²I, shape (N, N) (σ² · I is diag(σ²) for one σ_i per point)."""
    K = kernel(X, X)
    return K + noise**2 * jnp.eye(K.shape[0], dtype=K.dtype)


def exact_log_marginal(kernel: Kernel, X: jax.Array, y: jax.Array, noise: jax.Array) -> jax.Array:
    """log N(y | 0, K_ff + σ²I), eq. (2.30) of [1], with the closed-form gradient of eq. (5.9) of [1]."""
    return linalg.dense_gaussian_logpdf(exact_covariance(kernel, X, noise), y)


@linalg.full_precision
def exact_predict(
    kernel: Kernel, X: jax.Array, y: jax.Array, noise: jax.Array, X_test: jax.Array, full_cov: bool = True
) -> Gaussian:
    """Latent f* | y for the exact GP, eqs. (2.23)–(2.24) of [1]."""
    L = exact_factor(kernel, X, noise)
    Kfs = kernel(X, X_test)
    W = linalg.solve_lower(L, Kfs)
    mean = W.T @ linalg.solve_lower(L, y)
    if full_cov:
        cov = kernel(X_test, X_test) - W.T @ W
        return Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)
    return Gaussian(mean=mean, var=kernel.diag(X_test) - jnp.sum(W * W, axis=0))


@linalg.full_precision
def exact_replicates(
    kernel: Kernel,
    X: jax.Array,
    y: jax.Array,
    noise: jax.Array,
    key: jax.Array,
    sample_shape: tuple[int, ...] = (),
) -> jax.Array:
    """Draws of y_rep ~ p(y_rep | y) at the training inputs under the exact GP (prior mean 0).

    y_rep = f + σε' with f | y ~ N(K C⁻¹ y, K − K C⁻¹ K), C = K_ff + σ²I (eqs. (2.23)–(2.24) of [1] at
    X* = X), drawn by Matheron's rule: with a joint prior draw (f₀, y₀ = f₀ + σε) the value
    f₀ + K C⁻¹ (y − y₀) has exactly that law [5], so no factor of the ill-conditioned posterior covariance
    is needed, only C's and the jittered K's (:func:`bayes_rbfn.gp.linalg.cholesky`).

    Args:
        kernel: covariance function.
        X: (N, D) inputs.
        y: (N,) centred targets.
        noise: σ, the noise standard deviation.
        key: PRNG key.
        sample_shape: leading shape of the draws.

    Returns:
        (*sample_shape, N) draws of y_rep − m.
    """
    K = kernel(X, X)
    L = exact_factor(kernel, X, noise)
    L_prior = linalg.cholesky(K)
    k_prior, k_noise, k_rep = jax.random.split(key, 3)
    N = X.shape[0]
    eps = [jax.random.normal(k, (*sample_shape, N), dtype=K.dtype) for k in (k_prior, k_noise, k_rep)]
    f_prior = eps[0] @ L_prior.T
    residual = (y - f_prior - noise * eps[1]).reshape(-1, N)
    f = f_prior + (K @ linalg.cho_solve(L, residual.T)).T.reshape(f_prior.shape)
    return f + noise * eps[2]


def exact_loo(
    kernel: Kernel, X: jax.Array, y: jax.Array, noise: jax.Array, statistic: str = "log_density"
) -> jax.Array:
    """LOO conditional log densities of the exact GP, shape (N,), in O(N³).

    diag(C⁻¹) is itself the quantity wanted, so the triangular factor is inverted
    (:func:`bayes_rbfn.gp.linalg.loo_from_chol`: an O(N³) triangular solve against I); this is the exact
    reference model, not a sparse path. ``statistic="pit"``: the conditionals' CDFs at y_i instead.
    """
    return linalg.loo_from_chol(exact_factor(kernel, X, noise), y, statistic)


# --------------------------------------------------------------------------------------------------
# SoR / Bayesian RBFN (traceable; the data passes are bayes_rbfn.gp.woodbury_sums' and gp.moments')


@linalg.full_precision
def component_predict(
    factor: linalg.Woodbury,
    kernel: Additive,
    Z: jax.Array,
    X_test: jax.Array,
    name: str,
    full_cov: bool = False,
) -> Gaussian:
    """One component of an additive RBF network at X_test, given y: f*_c = K_{*,u_c} α_c.

    The weights' posterior α | y ~ N(m, RᵀR) of the whole network (``factor`` of its Woodbury pass, every
    component at once) restricted to component c's block: mean = K_{*u_c} m_c, cov = K_{*u_c} Σ_cc K_{u_c*}
    with Σ_cc = R_{:,c}ᵀ R_{:,c} (:func:`bayes_rbfn.gp.moments.weight_space_moments`). The components'
    predictive means add up to :func:`sor_predict`'s; their covariances do not, the components being
    correlated a posteriori.

    Args:
        factor: the :class:`~bayes_rbfn.gp.linalg.Woodbury` of the additive network for y.
        kernel: the :class:`~bayes_rbfn.gp.kernels.Additive` kernel.
        Z: (M, D) its stacked inducing inputs.
        X_test: (S, D) test inputs.
        name: the component.
        full_cov: also return the (S, S) covariance.
    """
    if not isinstance(kernel, Additive):
        raise ValueError(
            f"kernel: expected an Additive kernel (one with components), got {type(kernel).__name__}"
        )
    block = kernel.block(name)
    Kus = kernel.component(name)(Z[block], X_test)
    R = factor.weight_cov_factor()[:, block]
    mean, var, cov = moments.weight_space_moments(R, factor.weight_mean()[block], Kus, full_cov=full_cov)
    return Gaussian(mean=mean, var=var, cov=cov)


@linalg.full_precision
def sor_predict(
    factor: linalg.Woodbury,
    kernel: Kernel,
    Z: jax.Array,
    X_test: jax.Array,
    full_cov: bool = True,
    *,
    exact_test_prior: bool = False,
    chunk_size: int | None = None,
    mesh: Any = None,
    precision: str = "float64",
) -> Gaussian:
    """Latent f* | y under SoR: f* = K_*u α with α | y Gaussian.

    See docs/mathematics.md#function-space-and-weight-space-agree; eq. (16) of [2].

    mean = K_*u Σ K_uf D⁻¹ y, cov = K_*u Σ K_u* (:func:`bayes_rbfn.gp.moments.weight_space_moments`),
    Σ = (K_uu + K_uf D⁻¹ K_fu)⁻¹; without ``full_cov`` streamed over chunks of test points
    (:func:`bayes_rbfn.gp.moments.sor_moments`).

    SoR puts the Nyström covariance Q_** on the test points, so its variance collapses far from Z
    (docs/mathematics.md#the-sor-family-and-its-variance-collapse). With ``exact_test_prior`` the exact K_**
    is put there instead, which adds the prior
    variance K_** − Q_** the Nyström prior drops (its diagonal:
    :func:`bayes_rbfn.gp.moments.nystrom_residual`): ``N(K_*u Σ K_uf D⁻¹ y, K_** − Q_** + K_*u Σ K_u*)``,
    the predictive of DTC and VFE (D = σ²I) and of FITC (D = Λ) — eqs. (20)–(21) and (24)–(25) of
    Quiñonero-Candela & Rasmussen (2005) [2], and Titsias's optimal q(u) for VFE. FITC's test conditional is
    exact (FITC proper, not FIC), so its full covariance carries K_** − Q_** off the diagonal too.

    Args:
        factor: the :class:`~bayes_rbfn.gp.linalg.Woodbury` of Q_ff + diag(d) for y
            (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_factor`).
        kernel: covariance function.
        Z: (M, D) inducing inputs.
        X_test: (S, D) test inputs.
        full_cov: also return the (S, S) covariance.
        exact_test_prior: K_** instead of Q_** at the test points (DTC, FITC, VFE).
        chunk_size: test points per chunk of the streamed pass
            (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`).
        mesh: the device mesh of the streamed pass (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`).
        precision: ``"mixed"``: SoR's streamed moments (not ``full_cov``) in float32 chunks
            (:func:`bayes_rbfn.gp.moments.sor_moments`); the prior variance K_** − Q_** stays float64.

    Returns:
        :class:`Gaussian` with ``mean`` (S,), ``var`` (S,) and ``cov`` (S, S) when ``full_cov``.
    """
    if not full_cov:
        mean, var = moments.sor_moments(
            factor, kernel, Z, X_test, chunk_size=chunk_size, mesh=mesh, precision=precision
        )
        if exact_test_prior:
            var = var + moments.nystrom_residual(
                kernel, Z, factor.Luu, X_test, chunk_size=chunk_size, mesh=mesh
            )
        return Gaussian(mean=mean, var=var)
    Kus = kernel.inducing_cross(Z, X_test)
    mean, _, cov = moments.weight_space_moments(
        factor.weight_cov_factor(), factor.weight_mean(), Kus, full_cov=True
    )
    if exact_test_prior:
        A = linalg.solve_lower(factor.Luu, Kus)  # Q_** = AᵀA
        cov = kernel(X_test, X_test) - A.T @ A + cov
    return Gaussian(mean=mean, var=jnp.diagonal(cov), cov=cov)


# --------------------------------------------------------------------------------------------------
# Public, validated entry points


def check_jitter(jitter: Any) -> float | None:
    """``None`` (the policy of :mod:`bayes_rbfn.gp.linalg`) or a finite non-negative relative jitter."""
    if jitter is None:
        return None
    try:
        value = float(jitter)
    except (TypeError, ValueError) as err:
        raise ValueError(f"jitter: expected None or a non-negative number, got {jitter!r}") from err
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"jitter: expected None or a finite non-negative number, got {jitter!r}")
    return value


def check_regression_inputs(
    X: Any, y: Any, noise: Any, Z: Any = None, X_test: Any = None, *, kernel: Any = None, jitter: Any = None
) -> tuple:
    """The checked inputs of a public regression function: ``(X, y, noise, Z, X_test, jitter)``.

    X (N, D), y (N,), σ > 0, distinct Z (M, D) with M ≤ the distinct rows of X, X_test (S, D), the jitter
    (:func:`check_jitter`) and, when given, the kernel (:func:`check_kernel`). Raises ``ValueError``
    naming the argument.
    """
    jitter = check_jitter(jitter)
    X = check_X(X, "X")
    y = check_y(y, X.shape[0])
    noise = check_positive(noise, "noise")
    Z = None if Z is None else check_Z(Z, X)
    X_test = None if X_test is None else check_X(X_test, "X_test", dim=X.shape[1])
    if kernel is not None:
        check_kernel(kernel, X.shape[1])
    return X, y, noise, Z, X_test, jitter


def check_kernel(kernel: Any, dim: int) -> None:
    """A Kernel whose concrete hyperparameters are positive and sized for ``dim`` input dimensions.

    The constructors already check positivity, but a kernel rebuilt as a pytree (``tree_map``,
    ``tree_unflatten``) bypasses them; a negative variance would otherwise surface as an anonymous
    factorisation error and a mis-sized ARD lengthscale as a broadcasting ``TypeError``.
    """
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel: expected a bayes_rbfn.gp.kernels.Kernel, got {type(kernel).__name__}")
    if isinstance(kernel, ActiveDims):  # the inner kernel sees only the chosen columns
        kernel.check_input_dim(dim)
        check_kernel(kernel.kernel, len(kernel.dims))
        return
    for name in kernel.params:
        value = getattr(kernel, name)
        if isinstance(value, Kernel):
            check_kernel(value, dim)
            continue
        if isinstance(value, jax.core.Tracer):
            continue
        if name in kernel.positive:
            check_positive_parameter(type(kernel).__name__, name, value)
        if name in kernel.nonnegative:
            check_nonnegative_parameter(type(kernel).__name__, name, value)
        check_parameter_shape(kernel, name, np.shape(value), dim)


def check_parameter_shape(
    kernel: Kernel, name: str, shape: tuple[int, ...], dim: int, hint: str = ""
) -> None:
    """A lengthscale or period must be a scalar or one value per input dimension (``dim``).

    Otherwise a ValueError naming the kernel, the hyperparameter and its shape (``hint`` appended).
    """
    if name in ("lengthscale", "period") and (
        len(shape) > 1 or (len(shape) == 1 and shape[0] not in (1, dim))
    ):
        raise ValueError(
            f"{type(kernel).__name__}: {name} has shape {shape}; expected a scalar or one value per input "
            f"dimension ({dim}){hint}"
        )


def exact_gp(kernel: Kernel, X: Any, y: Any, noise: Any, X_test: Any, *, full_cov: bool = True) -> Gaussian:
    """Exact GP predictive of the latent f* (noise excluded), eqs. (2.23)–(2.24) of [1].

    Args:
        kernel: covariance function.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        noise: σ > 0.
        X_test: (S, D) or (S,) test inputs.
        full_cov: return the (S, S) covariance as well as the variances.

    Returns:
        :class:`Gaussian` with ``mean`` (S,), ``var`` (S,) and ``cov`` (S, S) when ``full_cov``.
    """
    X, y, noise, _, X_test, _ = check_regression_inputs(X, y, noise, X_test=X_test, kernel=kernel)
    result = exact_predict(kernel, X, y, noise, X_test, full_cov)
    raise_if_not_finite(result, "exact_gp")
    return result


def sor(
    kernel: Kernel,
    X: Any,
    y: Any,
    Z: Any,
    noise: Any,
    X_test: Any,
    *,
    full_cov: bool = True,
    jitter: float | None = None,
) -> Gaussian:
    """SoR (= Bayesian RBFN) predictive of the latent f*.

    See docs/mathematics.md#function-space-and-weight-space-agree.

    Function space: ``N(Q_*f (Q_ff+σ²I)⁻¹ y, Q_** − Q_*f (Q_ff+σ²I)⁻¹ Q_f*)``; computed in weight space
    as f* = K_*u α, α | y ~ N(Σ K_uf y/σ², Σ), Σ = (K_uf K_fu/σ² + K_uu)⁻¹, in O(NM² + SM²) without any
    N×N matrix (:func:`bayes_rbfn.gp.woodbury_sums.sor_factor`, :func:`sor_predict`). Equation (16) of [2].

    Args:
        kernel: covariance function.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        Z: (M, D) distinct inducing inputs.
        noise: σ > 0.
        X_test: (S, D) or (S,) test inputs.
        full_cov: also return the (S, S) covariance.
        jitter: relative jitter on K_uu (``None``: the policy of :mod:`bayes_rbfn.gp.linalg`).
    """
    X, y, noise, Z, X_test, jitter = check_regression_inputs(
        X, y, noise, Z, X_test, kernel=kernel, jitter=jitter
    )
    factor = woodbury_sums.sor_factor(kernel, X, y, Z, noise, jitter)
    result = sor_predict(factor, kernel, Z, X_test, full_cov)
    raise_if_not_finite(result, "sor")
    return result


@linalg.full_precision
def rbfn_weights(
    kernel: Kernel, X: Any, y: Any, Z: Any, noise: Any, *, jitter: float | None = None
) -> Gaussian:
    """Posterior of the RBFN weights α | y ~ N(Σ K_uf y/σ², Σ), Σ = (K_uf K_fu/σ² + K_uu)⁻¹.

    See docs/mathematics.md#function-space-and-weight-space-agree.

    The prior is α ~ N(0, K_uu⁻¹) and the likelihood y ~ N(K_fu α, σ²I); Σ = RᵀR from the SoR factor
    (:func:`bayes_rbfn.gp.woodbury_sums.sor_factor`). Returns ``mean`` (M,), ``cov`` (M, M) and ``var`` (M,).
    """
    X, y, noise, Z, _, jitter = check_regression_inputs(X, y, noise, Z, kernel=kernel, jitter=jitter)
    factor = woodbury_sums.sor_factor(kernel, X, y, Z, noise, jitter)
    R = factor.weight_cov_factor()
    cov = R.T @ R
    result = Gaussian(mean=factor.weight_mean(), var=jnp.diagonal(cov), cov=cov)
    raise_if_not_finite(result, "rbfn_weights")
    return result


def nystrom_krr(
    kernel: Kernel, X: Any, y: Any, Z: Any, noise: Any, X_test: Any, *, jitter: float | None = None
) -> jax.Array:
    """Nyström kernel ridge regression mean ``K_*u K_uu⁻¹ K_uf (Q_ff + σ²I)⁻¹ y``, eq. (2) of [3].

    Evaluated through the push-through identity K_uu⁻¹ K_uf (K_fu K_uu⁻¹ K_uf + σ²I)⁻¹
    = (K_uu + K_uf K_fu / σ²)⁻¹ K_uf / σ², whose right-hand side the Woodbury factor holds in
    whitened form: it is the SoR predictive mean (:func:`sor_predict`). Right to left as written,
    (Q_ff + σ²I)⁻¹ y = y/σ² − (…)/σ² cancels catastrophically as σ → 0 (relative error ~ ε s²/σ²); this
    form does not. Returns the mean, shape (S,).
    """
    X, y, noise, Z, X_test, jitter = check_regression_inputs(
        X, y, noise, Z, X_test, kernel=kernel, jitter=jitter
    )
    factor = woodbury_sums.sor_factor(kernel, X, y, Z, noise, jitter)
    mean = sor_predict(factor, kernel, Z, X_test, full_cov=False).mean
    raise_if_not_finite(mean, "nystrom_krr")
    return mean


@linalg.full_precision
def rbf_ridge(
    kernel: Kernel, X: Any, y: Any, Z: Any, noise: Any, X_test: Any, *, jitter: float | None = None
) -> jax.Array:
    """RBF-network ridge regression mean ``K_*u (K_uf K_fu + σ² K_uu)⁻¹ K_uf y``, eq. (3) of [3].

    The regularised normal equations of an RBF network with centres Z and penalty σ² αᵀK_uuα, solved
    as written with a Cholesky factor of the M×M system (K_uu carries the jitter of the policy,
    :func:`bayes_rbfn.gp.linalg.add_jitter`). Returns the mean, shape (S,).
    """
    X, y, noise, Z, X_test, jitter = check_regression_inputs(
        X, y, noise, Z, X_test, kernel=kernel, jitter=jitter
    )
    Kuu = linalg.add_jitter(kernel.inducing_gram(Z), jitter)
    Kuf = kernel.inducing_cross(Z, X)
    L = linalg.cholesky(Kuf @ Kuf.T + noise**2 * Kuu, jitter=0.0)
    mean = kernel.inducing_cross(Z, X_test).T @ linalg.cho_solve(L, Kuf @ y)
    raise_if_not_finite(mean, "rbf_ridge")
    return mean


def log_marginal_likelihood(kernel: Kernel, X: Any, y: Any, noise: Any) -> jax.Array:
    """The exact GP's log marginal likelihood log N(y | 0, K_ff + σ²I), eq. (2.30) of [1], in O(N³).

    The SoR family's (SoR, DTC, FITC, the VFE bound) is :func:`bayes_rbfn.gp.sparse.log_marginal_likelihood`,
    whose arguments are these with Z before ``noise``, as in :func:`exact_gp` and :func:`sor`.

    Args:
        kernel: covariance function.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        noise: σ > 0.

    Returns:
        A scalar.
    """
    X, y, noise, _, _, _ = check_regression_inputs(X, y, noise, kernel=kernel)
    value = exact_log_marginal(kernel, X, y, noise)
    raise_if_not_finite(value, "log_marginal_likelihood")
    return value


def loo_log_density(kernel: Kernel, X: Any, y: Any, noise: Any) -> jax.Array:
    """The exact GP's leave-one-out conditionals log p(y_i | y_−i), shape (N,), eqs. (5.10)–(5.12) of [1].

    In O(N³). These are what the exact model stores as ``log_likelihood`` for PSIS-LOO (docs/output.md;
    [4]). The SoR family's are :func:`bayes_rbfn.gp.sparse.loo_log_density` (Z before ``noise``, as in
    :func:`sor`).

    Args:
        kernel: covariance function.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        noise: σ > 0.

    Returns:
        (N,) log densities.
    """
    X, y, noise, _, _, _ = check_regression_inputs(X, y, noise, kernel=kernel)
    value = exact_loo(kernel, X, y, noise)
    raise_if_not_finite(value, "loo_log_density")
    return value
