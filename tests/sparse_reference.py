"""Dense NumPy/SciPy references for the sparse approximations (DTC, FITC, VFE), written from the formulas.

Everything here forms the N×N covariance the approximation puts on the training targets and conditions
on it with ``numpy.linalg.solve`` and ``scipy.stats``; none of it uses the Woodbury identity or the
library's factorisations. Kernel matrices come from the library's kernels (tested on their own); the
jittered K_uu follows the documented policy, ``K_uu + jitter · mean(diag K_uu) · I``.

``noise`` is σ, a scalar or one standard deviation per training point (N,) (heteroscedastic noise: σ²I
becomes diag(σ²) everywhere, and VFE's trace term Σ_i (K_ii − Q_ii)/σ_i²).

References: Quiñonero-Candela & Rasmussen (2005), §4–6; Titsias (2009), eq. (9).
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def gram(kernel, A, B=None) -> np.ndarray:
    """k(A, B) as a float64 NumPy array."""
    return np.asarray(kernel(A, A if B is None else B), dtype=np.float64)


def nystrom(kernel, Z, A, B, jitter: float) -> np.ndarray:
    """Q_AB = K_Au (K_uu + jitter·mean(diag K_uu)·I)⁻¹ K_uB."""
    Kuu = gram(kernel, Z)
    Kuu = Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(Kuu.shape[0])
    return gram(kernel, A, Z) @ np.linalg.solve(Kuu, gram(kernel, Z, B))


def noise_cov(noise, n: int) -> np.ndarray:
    """diag(σ²) (N×N) for a scalar σ or per-point σ (N,)."""
    return np.diag(np.broadcast_to(np.asarray(noise, dtype=np.float64) ** 2, (n,)))


def prior_cov(method: str, kernel, X, Z, noise, jitter: float) -> np.ndarray:
    """The dense N×N covariance of y under a model: "exact", "sor"/"dtc"/"vfe" (Q_ff + diag(σ²)) or "fitc"."""
    n = np.asarray(X).shape[0]
    if method == "exact":
        return gram(kernel, X) + noise_cov(noise, n)
    Qff = nystrom(kernel, Z, X, X, jitter)
    C = Qff + noise_cov(noise, n)
    if method == "fitc":
        C = C + np.diag(np.diag(gram(kernel, X) - Qff))
    return C


def log_marginal(method: str, kernel, X, y, Z, noise, jitter: float) -> float:
    """log N(y | 0, C) for the model's dense C; for "vfe" Titsias's bound with a dense trace,
    − ½ Σ_i (K_ii − Q_ii)/σ_i² (− tr(K_ff − Q_ff)/(2σ²) for a scalar σ)."""
    C = prior_cov(method, kernel, X, Z, noise, jitter)
    value = stats.multivariate_normal(mean=np.zeros(len(y)), cov=C).logpdf(np.asarray(y))
    if method == "vfe":
        residual = np.diag(gram(kernel, X) - nystrom(kernel, Z, X, X, jitter))
        value -= 0.5 * np.sum(residual / np.broadcast_to(np.asarray(noise) ** 2, residual.shape))
    return float(value)


def vfe_trace(kernel, X, Z, jitter: float) -> float:
    """tr(K_ff − Q_ff) from dense matrices."""
    return float(np.trace(gram(kernel, X) - nystrom(kernel, Z, X, X, jitter)))


def predict(method: str, kernel, X, y, Z, noise, X_test, jitter: float):
    """Latent f* | y by conditioning the dense joint prior of (y, f*) (eq. (A.6) of Rasmussen & Williams).

    Joint priors (QC&R 2005): exact GP [[K_ff + σ²I, K_f*], [K_*f, K_**]]; SoR [[Q_ff + σ²I, Q_f*],
    [Q_*f, Q_**]]; DTC and VFE [[Q_ff + σ²I, Q_f*], [Q_*f, K_**]]; FITC [[Q_ff + Λ, Q_f*], [Q_*f, K_**]].
    Returns (mean (S,), cov (S, S)).
    """
    C = prior_cov(method, kernel, X, Z, noise, jitter)
    if method == "exact":
        Kfs = gram(kernel, X, X_test)
    else:
        Kfs = nystrom(kernel, Z, X, X_test, jitter)
    Kss = nystrom(kernel, Z, X_test, X_test, jitter) if method == "sor" else gram(kernel, X_test)
    mean = Kfs.T @ np.linalg.solve(C, np.asarray(y))
    cov = Kss - Kfs.T @ np.linalg.solve(C, Kfs)
    return mean, cov


def replicate_moments(method: str, kernel, X, y, Z, noise, jitter: float):
    """Mean and covariance of y_rep − m given y at the training inputs, by dense conditioning.

    f's prior covariance K_f under each model's training conditional (QC&R 2005 §§4–6): exact K_ff; SoR and
    DTC Q_ff (deterministic given u); FITC Q_ff + diag(K_ff − Q_ff). Then f | y ~ N(K_f C⁻¹ y,
    K_f − K_f C⁻¹ K_f), C = K_f + diag(σ²), and y_rep = f + σε'. VFE (Titsias's q(f) with the exact p(f | u),
    points independent given u): SoR's moments plus diag(K_ff − Q_ff).
    Returns (mean (N,), cov (N, N)).
    """
    n = np.asarray(X).shape[0]
    if method == "exact":
        K_f = gram(kernel, X)
    else:
        K_f = nystrom(kernel, Z, X, X, jitter)
        if method == "fitc":
            K_f = K_f + np.diag(np.diag(gram(kernel, X) - K_f))
    C = K_f + noise_cov(noise, n)
    gain = np.linalg.solve(C, K_f).T
    mean = gain @ np.asarray(y)
    cov = K_f - gain @ K_f + noise_cov(noise, n)
    if method == "vfe":
        cov = cov + np.diag(np.diag(gram(kernel, X) - nystrom(kernel, Z, X, X, jitter)))
    return mean, cov


def loo_conditionals(C: np.ndarray, y):
    """The N leave-one-out conditionals y_i | y_−i of y ~ N(0, C) as ``scipy.stats.norm`` objects, by
    conditioning on the other N − 1 values one i at a time."""
    y = np.asarray(y, dtype=np.float64)
    out = []
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        c = C[i, rest]
        mean = c @ np.linalg.solve(C[np.ix_(rest, rest)], y[rest])
        var = C[i, i] - c @ np.linalg.solve(C[np.ix_(rest, rest)], c)
        out.append(stats.norm(loc=mean, scale=np.sqrt(var)))
    return out


def loo_brute_force(C: np.ndarray, y) -> np.ndarray:
    """log p(y_i | y_−i) for y ~ N(0, C), from :func:`loo_conditionals`."""
    return np.array([d.logpdf(v) for d, v in zip(loo_conditionals(C, y), np.asarray(y), strict=True)])


def loo_pit_brute_force(C: np.ndarray, y) -> np.ndarray:
    """P(y_i' ≤ y_i | y_−i) for y ~ N(0, C): each leave-one-out conditional's CDF at y_i."""
    return np.array([d.cdf(v) for d, v in zip(loo_conditionals(C, y), np.asarray(y), strict=True)])


def variance_lost(kernel, Z, X_test, jitter: float) -> np.ndarray:
    """1 − diag(Q_**) / diag(K_**) from dense matrices."""
    return 1.0 - np.diag(nystrom(kernel, Z, X_test, X_test, jitter)) / np.diag(gram(kernel, X_test))
