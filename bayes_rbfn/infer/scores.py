"""Scores of a predictive against held-out observations: the backtest of a forecast.

The predictive of a new observation y* at each held-out input is the equal-weight mixture over posterior
draws s = 1..T of N(m_s, v_s + σ_s²) (per-draw analytic moments, docs/mathematics.md; f_var = 0 for the
weight-space
network). Every score here is computed for that mixture, per held-out point, then averaged:

* **coverage** of the central ``level`` band: the share of held-out points inside the mixture's
  (1 − level)/2 and (1 + level)/2 quantiles (:func:`bayes_rbfn.infer.predictive.mixture_quantiles`);
* **interval score** of that band, Gneiting & Raftery (2007) eq. (43) with α = 1 − level:
  (u − l) + (2/α)(l − y)·1{y < l} + (2/α)(y − u)·1{y > u} — width plus a penalty for misses (lower is
  better; a calibrated band is not enough, it must also be sharp);
* **CRPS**, exact for the Gaussian mixture (Grimit et al. 2006), by ``scoringrules.crps_mixnorm``; its
  cost grows as the square of the number of components, so at most :data:`CRPS_COMPONENTS` evenly
  thinned draws enter it;
* **log predictive density** log p(y* | data) = log mean_s N(y* | m_s, v_s + σ_s²) (logsumexp);
* **RMSE** and **MAE** of the mixture mean.

:func:`score` applies them to a fit: the predictive of :func:`bayes_rbfn.predict` at held-out inputs,
scored against the values observed there (the backtest of ``fit(holdout=...)`` and ``bayes-rbfn fit
--test`` both go through it).

References
----------
[1] Gneiting, T. & Raftery, A. E. (2007). Strictly proper scoring rules, prediction, and estimation.
    JASA 102, 359–378. Eq. (43) (the interval score), §4.2 (CRPS).
[2] Grimit, E. P., Gneiting, T., Berrocal, V. J. & Johnson, N. A. (2006). The continuous ranked
    probability score for circular variables and its application to mesoscale forecast ensemble
    verification. Q. J. R. Meteorol. Soc. 132, 2925–2942.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import logsumexp

from bayes_rbfn.io.arviz_compat import groups

__all__ = [
    "BACKTEST_LEVELS",
    "CRPS_COMPONENTS",
    "coverage",
    "crps_mixture",
    "interval_score",
    "log_predictive_density",
    "score",
    "score_forecast",
]

#: The central bands a backtest scores.
BACKTEST_LEVELS = (0.5, 0.8, 0.95)
#: At most this many (evenly thinned) mixture components enter the exact CRPS (its cost is quadratic).
CRPS_COMPONENTS = 400


def coverage(lower: Any, upper: Any, y: Any) -> float:
    """Share of the points with lower ≤ y ≤ upper."""
    y = np.asarray(y, dtype=float)
    return float(np.mean((np.asarray(lower) <= y) & (y <= np.asarray(upper))))


def interval_score(lower: Any, upper: Any, y: Any, alpha: float) -> np.ndarray:
    """The interval score of the central (1 − α) band [lower, upper] at each point, [1] eq. (43)."""
    lower, upper, y = (np.asarray(a, dtype=float) for a in (lower, upper, y))
    below = (2.0 / alpha) * (lower - y) * (y < lower)
    above = (2.0 / alpha) * (y - upper) * (y > upper)
    return (upper - lower) + below + above


def _thin(a: np.ndarray, most: int) -> np.ndarray:
    step = max(1, -(-a.shape[0] // most))
    return a[::step]


def crps_mixture(means: Any, sds: Any, y: Any) -> np.ndarray:
    """Exact CRPS of the equal-weight Gaussian mixture Σ_s N(means[s], sds[s]²)/T at each of S points.

    Args:
        means: (T, S) component means.
        sds: (T, S) component standard deviations (> 0).
        y: (S,) observations.
    """
    import scoringrules

    means = _thin(np.asarray(means, dtype=float), CRPS_COMPONENTS)
    sds = _thin(np.asarray(sds, dtype=float), CRPS_COMPONENTS)
    return np.asarray(scoringrules.crps_mixnorm(np.asarray(y, dtype=float), means.T, sds.T, backend="numpy"))


def log_predictive_density(means: Any, sds: Any, y: Any) -> np.ndarray:
    """log (1/T) Σ_s N(y | means[s], sds[s]²) at each point, (S,)."""
    means, sds = np.asarray(means, dtype=float), np.asarray(sds, dtype=float)
    z = (np.asarray(y, dtype=float)[None, :] - means) / sds
    log_normal = -0.5 * z**2 - np.log(sds) - 0.5 * np.log(2.0 * np.pi)
    return logsumexp(log_normal, axis=0) - np.log(means.shape[0])


def score_forecast(
    means: Any, sds: Any, y: Any, levels: Sequence[float] = BACKTEST_LEVELS
) -> dict[str, float]:
    """Every score of the mixture predictive Σ_s N(means[s], sds[s]²)/T against held-out y, averaged.

    Args:
        means: (T, S) per-draw means of y*.
        sds: (T, S) per-draw standard deviations of y* (the noise included).
        y: (S,) held-out values.
        levels: the central bands to score.

    Returns:
        {``n``, ``rmse``, ``mae``, ``crps``, ``lpd`` (mean log predictive density per point), and per level
        L (in percent) ``coverage_L`` and ``interval_score_L``}.
    """
    from bayes_rbfn.infer.predictive import mixture_quantiles

    means, sds = np.asarray(means, dtype=float), np.asarray(sds, dtype=float)
    y = np.asarray(y, dtype=float)
    probs = sorted({p for c in levels for p in ((1 - c) / 2, (1 + c) / 2)})
    q = mixture_quantiles(means, sds**2, probs)
    error = means.mean(axis=0) - y
    out: dict[str, float] = {
        "n": float(y.size),
        "rmse": float(np.sqrt(np.mean(error**2))),
        "mae": float(np.mean(np.abs(error))),
        "crps": float(np.mean(crps_mixture(means, sds, y))),
        "lpd": float(np.mean(log_predictive_density(means, sds, y))),
    }
    for c in levels:
        lower, upper = q[probs.index((1 - c) / 2)], q[probs.index((1 + c) / 2)]
        tag = f"{round(100 * c)}"
        out[f"coverage_{tag}"] = coverage(lower, upper, y)
        out[f"interval_score_{tag}"] = float(np.mean(interval_score(lower, upper, y, 1 - c)))
    return out


def score(
    idata: Any,
    X_test: Any,
    y_test: Any,
    *,
    group: Any = None,
    levels: Sequence[float] = BACKTEST_LEVELS,
    kernel: Any = None,
    mean: Any = None,
) -> dict[str, float]:
    """Score a fit's predictive of new observations at held-out inputs against the values observed there.

    The predictive of y* at each test input is the mixture over posterior draws of N(m_s, v_s + σ_s²),
    with the per-draw analytic moments and noise σ_s of :func:`bayes_rbfn.predict`; the scores are those of
    :func:`score_forecast` (RMSE and MAE of the mixture mean, CRPS, mean log predictive density, coverage
    and interval score of the central bands), in the units of the data. When ``X_test`` is the fit's own
    ``X_pred`` (``fit(..., X_pred=X_test)``), its stored ``predictions`` are scored instead of being
    computed again.

    Args:
        idata: InferenceData of :func:`bayes_rbfn.fit` (or read from its ``inference.nc``), Gaussian
            likelihood.
        X_test: (S, D) or (S,) held-out inputs.
        y_test: (S,) the values observed at them.
        group: (S,) group codes of the test points, for the grouped model.
        levels: the central bands to score (default 50%, 80%, 95%).
        kernel: the ``kernel`` the fit was given, as :func:`bayes_rbfn.predict`, for a fit whose file cannot
            rebuild it.
        mean: the callable ``mean`` the fit was given, as :func:`bayes_rbfn.predict`, for a fit whose file
            cannot rebuild it.

    Returns:
        {``n``, ``rmse``, ``mae``, ``crps``, ``lpd``, ``coverage_L``, ``interval_score_L``} as
        :func:`score_forecast` (L the levels in percent: ``coverage_95``).

    Raises:
        ValueError: a fit without a Gaussian likelihood, or test data of the wrong shape or not finite.
    """
    from bayes_rbfn.infer.predictive import noise_draws, predict
    from bayes_rbfn.infer.schema import rebuild

    likelihood = str(idata.posterior.attrs.get("bayes_rbfn_likelihood", "gaussian"))
    if likelihood != "gaussian":
        raise ValueError(
            f"idata: the scores are of a Gaussian predictive of y*; this fit has the {likelihood!r} "
            "likelihood"
        )
    X = np.asarray(X_test, dtype=float)
    X = X[:, None] if X.ndim == 1 else X
    y = np.asarray(y_test, dtype=float)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y_test: expected shape ({X.shape[0]},) to match X_test, got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"y_test: {int(np.sum(~np.isfinite(y)))} value(s) are NaN or infinite")
    if _is_x_pred(idata, X, group, kernel, mean):
        _, _, _, params = rebuild(idata, kernel=kernel, mean=mean)
        f_mean = np.asarray(idata.predictions["f_mean"].values, dtype=float)
        f_var = np.asarray(idata.predictions["f_var"].values, dtype=float)
        noise = noise_draws(params, f_mean.shape[:2], group=group)
    else:
        pred = predict(idata, X, group=group, kernel=kernel, mean=mean)
        f_mean, f_var, noise = pred.f_mean, pred.f_var, pred.noise
    if noise is None:
        raise ValueError("idata: this fit has no noise σ, so it has no predictive of y* to score")
    S = X.shape[0]
    means = f_mean.reshape(-1, S)
    variances = f_var.reshape(-1, S) + np.reshape(noise, (means.shape[0], -1)) ** 2
    return score_forecast(means, np.sqrt(variances), y, levels)


def _is_x_pred(idata: Any, X: np.ndarray, group: Any, kernel: Any, mean: Any) -> bool:
    """Whether (X, group) are exactly the inputs (and group codes) of the fit's stored ``predictions``."""
    if not {"predictions", "predictions_constant_data"} <= set(groups(idata)):
        return False
    pcd = idata.predictions_constant_data
    X_pred = np.asarray(pcd["X_pred"].values)
    if X_pred.shape != X.shape or not np.array_equal(X_pred, X):
        return False
    from bayes_rbfn.infer.schema import rebuild_with_layout

    spec, _, _, layout, _ = rebuild_with_layout(idata, kernel=kernel, mean=mean)
    stored = dict(zip(spec.predictive_inputs, layout.predictive_args, strict=True)).get("group")
    if stored is None or group is None:
        return stored is None and group is None
    return bool(np.array_equal(np.asarray(stored), np.asarray(group)))
