"""Scores of a predictive against held-out observations: the backtest of a forecast.

The predictive of a new observation y* at each held-out input is the equal-weight mixture over posterior
draws s = 1..T of N(m_s, v_s + σ_s²) (per-draw analytic moments, DESIGN §3; f_var = 0 for the weight-space
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
* **MAE** of the mixture mean.

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

__all__ = [
    "BACKTEST_LEVELS",
    "CRPS_COMPONENTS",
    "coverage",
    "crps_mixture",
    "interval_score",
    "log_predictive_density",
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
        means, sds: (T, S) component means and standard deviations (> 0). y: (S,) observations.
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
        means, sds: (T, S) per-draw moments of y* (the noise included in ``sds``). y: (S,) held-out values.
        levels: the central bands to score.

    Returns:
        {``n``, ``mae``, ``crps``, ``lpd`` (mean log predictive density per point), and per level L (in
        percent) ``coverage_L`` and ``interval_score_L``}.
    """
    from bayes_rbfn.infer.predictive import mixture_quantiles

    means, sds = np.asarray(means, dtype=float), np.asarray(sds, dtype=float)
    y = np.asarray(y, dtype=float)
    probs = sorted({p for c in levels for p in ((1 - c) / 2, (1 + c) / 2)})
    q = mixture_quantiles(means, sds**2, probs)
    out: dict[str, float] = {
        "n": float(y.size),
        "mae": float(np.mean(np.abs(means.mean(axis=0) - y))),
        "crps": float(np.mean(crps_mixture(means, sds, y))),
        "lpd": float(np.mean(log_predictive_density(means, sds, y))),
    }
    for c in levels:
        lower, upper = q[probs.index((1 - c) / 2)], q[probs.index((1 + c) / 2)]
        tag = f"{round(100 * c)}"
        out[f"coverage_{tag}"] = coverage(lower, upper, y)
        out[f"interval_score_{tag}"] = float(np.mean(interval_score(lower, upper, y, 1 - c)))
    return out
