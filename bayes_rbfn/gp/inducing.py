"""Choosing the inducing inputs Z (the RBF centres) when the user gives only their number M.

Two methods, both deterministic for a given seed and returning M distinct rows:

* ``"kmeans"`` (default) — k-means centres, as the RBF-network literature does (Moody & Darken 1989):
  k-means++ seeding, then Lloyd iterations; an emptied cluster is re-seeded at the point farthest from
  its centre. Centres summarise where the data are, so Q_ff is accurate where it matters. With several
  inputs the distances are taken between columns divided by their standard deviations, so that every
  input spreads the centres whatever its units (a column in thousands would otherwise decide them alone);
  the centres are returned in the data's units.
* ``"pivoted_cholesky"`` — greedy pivoted Cholesky of K_ff (Fine & Scheinberg 2001; Burt et al. 2020):
  repeatedly pick the data point with the largest remaining conditional variance K_ii − Q_ii. Needs a
  kernel; Z ⊂ X.

References
----------
[1] Moody, J. & Darken, C. (1989). Fast learning in networks of locally-tuned processing units.
[2] Arthur, D. & Vassilvitskii, S. (2007). k-means++: the advantages of careful seeding.
[3] Burt, D., Rasmussen, C. E. & van der Wilk, M. (2020). Convergence of sparse variational inference
    in Gaussian processes regression. JMLR 21.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.gp.validation import check_X, count_distinct_rows

__all__ = ["kmeans_centres", "periodic_centres", "pivoted_cholesky_points", "select_inducing"]


#: k-means runs on at most this many (randomly chosen, distinct) points.
_KMEANS_MAX_POINTS = 20_000


def _distinct(X: np.ndarray) -> np.ndarray:
    return np.unique(X, axis=0)


def periodic_centres(M: int, period: float, start: float = 0.0) -> np.ndarray:
    """M centres evenly spread over one period, [start, start + period), shape (M,).

    A kernel periodic in x with period p has k(x + p, x') = k(x, x'), so a centre at z + p spans the same
    basis function k(·, z) as one at z: centres beyond one period add nothing to the network, and over
    one period an even grid covers every phase alike.
    """
    if isinstance(M, bool) or not isinstance(M, int | np.integer) or M < 1:
        raise ValueError(f"M: expected a positive number of centres, got {M!r}")
    if not (np.isfinite(period) and period > 0):
        raise ValueError(f"period: expected a finite number > 0, got {period!r}")
    if not np.isfinite(start):
        raise ValueError(f"start: expected a finite number, got {start!r}")
    return float(start) + float(period) * np.arange(int(M)) / int(M)


def kmeans_centres(X: np.ndarray, M: int, seed: int = 0, iterations: int = 50) -> np.ndarray:
    """k-means centres of the distinct rows of X (N, D); returns (M, D), distinct rows, in X's units.

    The columns are taken about their means, and scaled by their standard deviations when D > 1: the
    iterations' convergence test is relative to the points' magnitude, which an input far from 0 (a time
    since 1970) would otherwise make so loose that they stop at the seeding.
    """
    points = _distinct(X)
    if M == points.shape[0]:
        return points
    centre = points.mean(axis=0)
    if points.shape[1] == 1:
        return _lloyd(points - centre, M, seed, iterations) + centre
    spread = points.std(axis=0)
    spread = np.where(spread > 0, spread, 1.0)
    return _lloyd((points - centre) / spread, M, seed, iterations) * spread + centre


def _lloyd(points: np.ndarray, M: int, seed: int, iterations: int) -> np.ndarray:
    """k-means++ seeding and Lloyd iterations on distinct ``points`` (n, D) → (M, D) distinct centres."""
    rng = np.random.default_rng(seed)
    if points.shape[0] > _KMEANS_MAX_POINTS:
        # Centres of a large random subset are as good for placing M ≪ N centres and keep the cost bounded.
        points = points[np.sort(rng.choice(points.shape[0], _KMEANS_MAX_POINTS, replace=False))]
    # k-means++ seeding
    centres = np.empty((M, points.shape[1]))
    centres[0] = points[rng.integers(points.shape[0])]
    d2 = np.sum((points - centres[0]) ** 2, axis=1)
    for j in range(1, M):
        total = d2.sum()
        idx = rng.choice(points.shape[0], p=d2 / total) if total > 0 else int(np.argmax(d2))
        centres[j] = points[idx]
        d2 = np.minimum(d2, np.sum((points - centres[j]) ** 2, axis=1))
    for _ in range(iterations):
        dist2 = np.sum((points[:, None, :] - centres[None, :, :]) ** 2, axis=-1)
        labels = np.argmin(dist2, axis=1)
        new = centres.copy()
        for j in range(M):
            members = points[labels == j]
            if members.shape[0]:
                new[j] = members.mean(axis=0)
            else:
                new[j] = points[int(np.argmax(dist2[np.arange(points.shape[0]), labels]))]
        if np.allclose(new, centres):
            centres = new
            break
        centres = new
    # k-means centres are distinct unless two clusters collapse; replace any duplicate with a data point.
    _, first = np.unique(centres, axis=0, return_index=True)
    if first.size < M:
        keep = np.sort(first)
        used = {tuple(c) for c in centres[keep]}
        extra = [p for p in points[rng.permutation(points.shape[0])] if tuple(p) not in used]
        centres = np.vstack([centres[keep], np.asarray(extra[: M - keep.size])])
    return centres


def pivoted_cholesky_points(kernel: Kernel, X: np.ndarray, M: int) -> np.ndarray:
    """Greedy pivoted-Cholesky selection of M distinct rows of X (N, D) under ``kernel``.

    Each point is the one of largest variance conditional on those chosen before it (the largest diagonal
    of K_ff − Q_ff); ties go to the first of the distinct rows in sorted order.
    """
    points = _distinct(X)
    n = points.shape[0]
    residual = np.asarray(kernel.diag(points), dtype=float).copy()
    factor = np.zeros((M, n))
    chosen: list[int] = []
    for j in range(M):
        i = int(np.argmax(residual))
        chosen.append(i)
        column = np.asarray(kernel(points, points[i : i + 1]), dtype=float)[:, 0]
        factor[j] = (column - factor[:j].T @ factor[:j, i]) / np.sqrt(max(residual[i], 1e-300))
        residual = residual - factor[j] ** 2
        residual[chosen] = -np.inf
    return points[np.asarray(chosen)]


def select_inducing(
    X: Any, num_inducing: int, *, method: str = "kmeans", seed: int = 0, kernel: Kernel | None = None
) -> np.ndarray:
    """Choose M = ``num_inducing`` distinct inducing inputs from data X (N, D) or (N,).

    Raises:
        ValueError: when ``num_inducing`` is not a positive integer, exceeds the number of distinct
            inputs, or the method is unknown.
    """
    X = np.asarray(check_X(X, "X"), dtype=float)
    if not isinstance(num_inducing, int | np.integer) or isinstance(num_inducing, bool) or num_inducing < 1:
        raise ValueError(f"num_inducing: must be a positive integer, got {num_inducing!r}")
    distinct = count_distinct_rows(X)
    if num_inducing > distinct:
        raise ValueError(
            f"num_inducing: {num_inducing} inducing points is more than the {distinct} distinct input(s) in X"
        )
    if method == "kmeans":
        return kmeans_centres(X, int(num_inducing), seed=seed)
    if method == "pivoted_cholesky":
        if kernel is None:
            raise ValueError("kernel: the pivoted_cholesky method needs a kernel")
        return pivoted_cholesky_points(kernel, X, int(num_inducing))
    raise ValueError(
        f"method: unknown inducing-point method {method!r}; choose 'kmeans' or 'pivoted_cholesky'"
    )
