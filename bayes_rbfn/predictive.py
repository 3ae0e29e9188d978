"""Posterior predictive from per-draw analytic moments: batching, mixtures and draws.

Given a posterior (one hyperparameter set per draw) every model gives the latent f* at new inputs in closed
form for each draw: mean m_s and variance v_s. The posterior predictive is the equal-weight mixture over
draws, whose moments follow from the law of total variance:

    E[f*] = mean_s m_s,     Var[f*] = mean_s v_s + var_s m_s,

and for an observation y* the noise variance σ_s² is added inside the first term. Both the per-draw
moments and the mixture are computed in batches of test points, so memory stays bounded (draws ×
batch × M) for 100k test points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Predictive", "mixture_moments", "per_draw_moments", "predict", "sample_predictive"]

#: Test points per batch when evaluating per-draw moments.
DEFAULT_BATCH = 2048


@dataclass(frozen=True)
class Predictive:
    """Posterior predictive summary at S test points.

    Attributes:
        f_mean, f_var: per-draw latent moments, (chains, draws, S).
        mean: mixture mean (S,). var: mixture variance of the latent f* (S,).
        var_y: mixture variance of a new observation y* (f* plus noise) (S,).
    """

    f_mean: np.ndarray
    f_var: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    var_y: np.ndarray | None


def per_draw_moments(
    predict_fn: Any,
    params: Mapping[str, Any],
    X_test: Any,
    *,
    batch_size: int = DEFAULT_BATCH,
    extra: tuple = (),
    draw_batch: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Evaluate ``predict_fn(draw_params, X_batch, *extra_batch) → (mean, var)`` for every draw.

    Args:
        predict_fn: per-draw traceable function.
        params: dict of arrays with leading (chains, draws) axes.
        X_test: (S, D) test inputs. extra: arrays with leading S axis batched alongside X_test.
        batch_size: test points per batch. draw_batch: draws per batch (``None``: all at once).

    Returns:
        (f_mean, f_var), each (chains, draws, S) as NumPy arrays.
    """
    leaves = jax.tree_util.tree_leaves(params)
    chains, draws = leaves[0].shape[:2]
    flat = jax.tree_util.tree_map(lambda a: jnp.reshape(a, (chains * draws, *a.shape[2:])), params)
    total = chains * draws
    draw_batch = total if draw_batch is None else max(1, min(draw_batch, total))
    fn = _compiled(predict_fn)
    S = X_test.shape[0]
    means = np.empty((total, S))
    vars_ = np.empty((total, S))
    for start in range(0, S, batch_size):
        stop = min(start + batch_size, S)
        Xb = X_test[start:stop]
        eb = tuple(e[start:stop] for e in extra)
        for d0 in range(0, total, draw_batch):
            d1 = min(d0 + draw_batch, total)
            pb = jax.tree_util.tree_map(lambda a, d0=d0, d1=d1: a[d0:d1], flat)
            m, v = fn(pb, Xb, *eb)
            means[d0:d1, start:stop] = np.asarray(m)
            vars_[d0:d1, start:stop] = np.asarray(v)
    return means.reshape(chains, draws, S), vars_.reshape(chains, draws, S)


def _compiled(predict_fn: Any) -> Any:
    """Jitted, draw-vmapped ``predict_fn``; test inputs and extras are shared by all draws."""

    def over_draws(p, Xb, *eb):
        return jax.vmap(lambda q: predict_fn(q, Xb, *eb))(p)

    return jax.jit(over_draws)


def mixture_moments(
    f_mean: Any, f_var: Any, noise: Any | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Mixture moments over draws by the law of total variance.

    Args:
        f_mean, f_var: per-draw latent moments with draws on the leading axes (…, S).
        noise: per-draw σ with the same leading axes (or None).

    Returns:
        (mean (S,), var of f* (S,), var of y* (S,) or None).
    """
    f_mean = np.asarray(f_mean, dtype=float)
    f_var = np.asarray(f_var, dtype=float)
    S = f_mean.shape[-1]
    m = f_mean.reshape(-1, S)
    v = f_var.reshape(-1, S)
    mean = m.mean(axis=0)
    var_of_means = m.var(axis=0)
    var_f = v.mean(axis=0) + var_of_means
    var_y = None
    if noise is not None:
        n2 = np.asarray(noise, dtype=float).reshape(-1) ** 2
        n2 = np.broadcast_to(n2[:, None] if n2.size == m.shape[0] else n2.reshape(-1, 1), m.shape)
        var_y = (v + n2).mean(axis=0) + var_of_means
    return mean, var_f, var_y


def predict(idata: Any, X_test: Any, *, group: Any = None, batch_size: int = DEFAULT_BATCH) -> Predictive:
    """Posterior predictive at new inputs from a fit's InferenceData.

    Rebuilds the model and data from ``idata`` (its ``constant_data`` and the ``bayes_rbfn_*``
    attributes written by :func:`bayes_rbfn.fit`), evaluates the per-draw analytic moments in batches and
    combines them by the law of total variance.

    Args:
        idata: InferenceData from :func:`bayes_rbfn.fit` (or loaded from ``inference.nc``).
        X_test: (S, D) or (S,) inputs. group: (S,) group codes for grouped models.
    """
    from bayes_rbfn.inference import rebuild

    spec, config, data, params = rebuild(idata)
    from bayes_rbfn._validation import check_X

    X_test = check_X(X_test, "X_test", dim=data["X"].shape[-1])
    extra: tuple = ()
    if spec.grouped:
        if group is None:
            raise ValueError("group: the grouped model needs the group code of every test point")
        extra = (jnp.asarray(np.asarray(group, dtype=np.int32)),)

    def predict_fn(p, Xb, *eb):
        return spec.predict(p, data, config, Xb, *eb)

    from bayes_rbfn.runtime import single_threaded_blas

    with single_threaded_blas():
        f_mean, f_var = per_draw_moments(predict_fn, params, X_test, batch_size=batch_size, extra=extra)
    noise = params.get("noise")
    noise_draws = None
    if noise is not None and not spec.grouped:
        noise_draws = np.broadcast_to(np.asarray(noise), f_mean.shape[:2])
    elif noise is not None and spec.grouped:
        g = np.asarray(group)
        noise_draws = np.asarray(noise)[..., g].reshape(-1, len(g))
    mean, var, var_y = _mixture_with_noise(f_mean, f_var, noise_draws)
    return Predictive(f_mean=f_mean, f_var=f_var, mean=mean, var=var, var_y=var_y)


def _mixture_with_noise(f_mean, f_var, noise_draws):
    if noise_draws is None:
        return mixture_moments(f_mean, f_var)
    noise_draws = np.asarray(noise_draws)
    S = f_mean.shape[-1]
    m = f_mean.reshape(-1, S)
    v = f_var.reshape(-1, S)
    n2 = noise_draws.reshape(m.shape[0], -1) ** 2
    mean, var_f, _ = mixture_moments(m, v)
    var_y = (v + n2).mean(axis=0) + m.var(axis=0)
    return mean, var_f, var_y


def sample_predictive(
    pred: Predictive, noise: Any | None = None, *, num_samples: int | None = None, seed: int = 0
) -> np.ndarray:
    """Draws from the predictive: one Gaussian draw per posterior draw (marginal, per test point).

    With ``noise`` (per-draw σ, shape (chains, draws)) the draws are of y*, else of the latent f*.
    Returns (num_samples, S); by default one per posterior draw.
    """
    rng = np.random.default_rng(seed)
    S = pred.f_mean.shape[-1]
    m = pred.f_mean.reshape(-1, S)
    v = pred.f_var.reshape(-1, S)
    if noise is not None:
        v = v + np.asarray(noise, dtype=float).reshape(-1, 1) ** 2
    idx = np.arange(m.shape[0]) if num_samples is None else rng.integers(0, m.shape[0], size=num_samples)
    return m[idx] + np.sqrt(np.maximum(v[idx], 0.0)) * rng.standard_normal((idx.size, S))
