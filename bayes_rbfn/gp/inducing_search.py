"""Inducing inputs learned on the collapsed VFE bound, and greedy selection at its hyperparameters.

Titsias's collapsed bound ([1] eq. (9)),

    F(Z, θ, σ) = log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff) / (2σ²)  ≤  log p(y | θ, σ),

is a lower bound on the exact GP's log marginal likelihood for every Z, so the inducing inputs Z are
variational parameters of VFE: maximising F over Z, jointly with the kernel hyperparameters θ and the noise
σ, brings the approximate posterior closest (in KL) to the exact one, and F approaches log p(y | θ, σ) as
Z covers the data. :func:`optimise_bound` does that with SciPy's L-BFGS-B on the gradient of
:func:`vfe_bound` (one compiled value and gradient, evaluated on the host), from a start that the caller
gives (k-means centres, a prior median). :func:`greedy_inducing` is the cheaper option of Burt, Rasmussen &
van der Wilk ([2] §4): θ and σ at their type-II values on F with Z held at its start, then M points chosen
greedily by the largest conditional variance (:func:`~bayes_rbfn.gp.inducing.pivoted_cholesky_points`,
a pivoted Cholesky of K_ff) under those hyperparameters.

For SoR, DTC and FITC, Z is part of the model (their priors are Q_ff + σ²I or Q_ff + Λ, each a different
prior for each Z), not a variational parameter: Z optimised on F is then a well-placed design of the
model's basis functions, and the hyperparameters NUTS samples afterwards are those of that model with Z
held fixed, as Lalchand et al. ([3]) do for every sparse model they compare.

Everything here is in the units of the data. Positive hyperparameters are searched on the log scale,
each inducing input relative to its column's standard deviation (so that one step size suits all
columns), and the objective is −F/N, of order one whatever N.

References
----------
[1] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[2] Burt, D. R., Rasmussen, C. E. & van der Wilk, M. (2020). Convergence of sparse variational inference
    in Gaussian processes regression. JMLR 21(131).
[3] Lalchand, V., Bruinsma, W., Burt, D. & Rasmussen, C. E. (2022). Sparse Gaussian process
    hyperparameters: optimize or integrate? NeurIPS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from bayes_rbfn.gp import linalg
from bayes_rbfn.gp.inducing import pivoted_cholesky_points
from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.gp.sparse import log_marginal, training_factor

__all__ = ["BoundOptimum", "greedy_inducing", "optimise_bound", "vfe_bound"]

#: Iterations of L-BFGS-B at most (each one or a few evaluations of the bound and its gradient).
MAX_ITERATIONS = 1000


class BoundOptimum(NamedTuple):
    """The end of a search on the VFE bound.

    Attributes:
        Z: (M, D) inducing inputs.
        params: the kernel hyperparameters at the end, {name: value}.
        noise: σ at the end.
        bound: F at the end.
        start_bound: F at the start.
        evaluations: evaluations of F and its gradient.
        message: the optimiser's word on how it stopped.
    """

    Z: np.ndarray
    params: dict[str, np.ndarray]
    noise: float
    bound: float
    start_bound: float
    evaluations: int
    message: str


def vfe_bound(
    kernel: Kernel, X: jax.Array, y: jax.Array, Z: jax.Array, noise: jax.Array, jitter: float | None = None
) -> jax.Array:
    """F = log N(y | 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²), [1] eq. (9); −∞ where K_uu fails to factorise.

    Traceable, and differentiable in the kernel's hyperparameters, Z and σ (the package's one Woodbury
    factor, :func:`~bayes_rbfn.gp.sparse.training_factor`).

    Args:
        kernel: covariance function.
        X: (N, D) inputs.
        y: (N,) targets, centred (their prior mean taken off).
        Z: (M, D) inducing inputs.
        noise: σ > 0.
        jitter: relative jitter on K_uu (None: the policy).

    Returns:
        A scalar.
    """
    factor, _ = training_factor("vfe", kernel, X, y, Z, noise, jitter)
    return linalg.finite_or_neg_inf(log_marginal("vfe", factor, kernel, X, noise))


def _packing(
    params: Mapping[str, Any], noise: Any, Z: np.ndarray, scale: np.ndarray, learn_Z: bool, learn_noise: bool
) -> tuple[np.ndarray, Callable]:
    """(the start as one vector, vector → (params, σ, Z)): logs of the positive values, Z / scale."""
    names = list(params)
    shapes = [np.shape(params[k]) for k in names]
    sizes = [int(np.prod(s)) for s in shapes]
    logs = [np.log(np.asarray(params[k], dtype=float)).ravel() for k in names]
    noise_log = [np.log(float(noise))] if learn_noise else []
    start = np.concatenate([*logs, noise_log, (Z / scale).ravel() if learn_Z else []])
    Z_fixed = jnp.asarray(Z)

    def unpack(v: jax.Array) -> tuple[dict, jax.Array, jax.Array]:
        out, at = {}, 0
        for name, shape, size in zip(names, shapes, sizes, strict=True):
            out[name] = jnp.exp(v[at : at + size]).reshape(shape)
            at += size
        noise_v = jnp.exp(v[at]) if learn_noise else jnp.asarray(noise, v.dtype)
        at += int(learn_noise)
        Z_v = (v[at:].reshape(Z.shape) * scale) if learn_Z else Z_fixed
        return out, noise_v, Z_v

    return start, unpack


def _check_start(params: Mapping[str, Any], noise: Any) -> None:
    for name, value in {**params, "noise": noise}.items():
        value = np.asarray(value, dtype=float)
        if not (np.all(np.isfinite(value)) and np.all(value > 0)):
            raise ValueError(
                f"params: the start of {name!r} must be finite and > 0 (searched on the log scale)"
            )


def optimise_bound(
    build: Callable[[Mapping[str, Any]], Kernel],
    params: Mapping[str, Any],
    X: Any,
    y: Any,
    Z: Any,
    noise: float,
    *,
    learn_Z: bool = True,
    learn_noise: bool = True,
    jitter: float | None = None,
    maxiter: int = MAX_ITERATIONS,
) -> BoundOptimum:
    """Maximise the VFE bound F over Z (with ``learn_Z``), the kernel hyperparameters and σ, by L-BFGS-B.

    Args:
        build: the kernel of a dict of hyperparameters (a :class:`~bayes_rbfn.models.families.KernelFamily`'s
            ``build``); traceable.
        params: the start of each hyperparameter, {name: value > 0}.
        X: (N, D) inputs.
        y: (N,) targets, centred.
        Z: (M, D) the start of the inducing inputs (k-means centres, say); held fixed without ``learn_Z``.
        noise: the start of σ > 0.
        learn_Z: search over Z too (else θ and σ alone: their type-II values on F at this Z).
        learn_noise: search over σ too (else σ is held at ``noise``).
        jitter: relative jitter on K_uu (None: the policy).
        maxiter: L-BFGS-B's iterations at most.

    Returns:
        A :class:`BoundOptimum`; its ``bound`` is never below ``start_bound`` (the start is returned when
        the search ends lower).

    Raises:
        ValueError: a start that is not finite and positive, or a bound that is not finite at the start.
    """
    _check_start(params, noise)
    X = jnp.asarray(X, dtype=jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    y = jnp.asarray(y, dtype=X.dtype)
    Z = np.asarray(Z, dtype=float)
    scale = np.std(np.asarray(X), axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    start, unpack = _packing(params, noise, Z, scale, learn_Z, learn_noise)
    N = X.shape[0]

    @jax.jit
    def objective(v: jax.Array) -> tuple[jax.Array, jax.Array]:
        def negative_bound(v):
            p, s, Zv = unpack(v)
            return -vfe_bound(build(p), X, y, Zv, s, jitter) / N

        return jax.value_and_grad(negative_bound)(v)

    def host(v: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = objective(jnp.asarray(v, dtype=X.dtype))
        value, grad = float(value), np.asarray(grad, dtype=float)
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            return np.inf, np.zeros_like(grad)
        return value, grad

    first, _ = host(start)
    if not np.isfinite(first):
        raise ValueError("params: the VFE bound is not finite at the start; start from other values")
    result = scipy.optimize.minimize(host, start, jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
    end = result.x if np.isfinite(result.fun) and result.fun <= first else start
    p, s, Zv = unpack(jnp.asarray(end, dtype=X.dtype))
    return BoundOptimum(
        Z=np.asarray(Zv),
        params={k: np.asarray(v) for k, v in p.items()},
        noise=float(s),
        bound=-min(float(result.fun), first) * N,
        start_bound=-first * N,
        evaluations=int(result.nfev) + 1,
        message=str(result.message),
    )


def greedy_inducing(
    build: Callable[[Mapping[str, Any]], Kernel],
    params: Mapping[str, Any],
    X: Any,
    y: Any,
    Z: Any,
    noise: float,
    *,
    learn_noise: bool = True,
    jitter: float | None = None,
    maxiter: int = MAX_ITERATIONS,
) -> BoundOptimum:
    """Greedy conditional-variance inducing inputs ([2] §4) at the type-II hyperparameters on F.

    θ and σ are maximised on F with Z held at its start (:func:`optimise_bound` without ``learn_Z``); then
    as many points as Z has rows are chosen from X by a pivoted Cholesky of K_ff under those
    hyperparameters (each the point of largest variance conditional on those before it).

    Args:
        build: the kernel of a dict of hyperparameters; traceable.
        params: the start of each hyperparameter, {name: value > 0}.
        X: (N, D) inputs.
        y: (N,) targets, centred.
        Z: (M, D) the inducing inputs the hyperparameters are first fitted at (k-means centres, say).
        noise: the start of σ > 0.
        learn_noise: search over σ too (else σ is held at ``noise``).
        jitter: relative jitter on K_uu (None: the policy).
        maxiter: L-BFGS-B's iterations at most.

    Returns:
        A :class:`BoundOptimum` with the chosen Z, the type-II hyperparameters and F there (``start_bound``:
        F at the start).
    """
    fitted = optimise_bound(
        build, params, X, y, Z, noise, learn_Z=False, learn_noise=learn_noise, jitter=jitter, maxiter=maxiter
    )
    kernel = build({k: jnp.asarray(v) for k, v in fitted.params.items()})
    Z_greedy = pivoted_cholesky_points(kernel, np.asarray(X, dtype=float), int(np.shape(Z)[0]))
    X_j = jnp.asarray(X)
    bound = float(
        vfe_bound(kernel, X_j, jnp.asarray(y, X_j.dtype), jnp.asarray(Z_greedy), fitted.noise, jitter)
    )
    return fitted._replace(Z=Z_greedy, bound=bound)
