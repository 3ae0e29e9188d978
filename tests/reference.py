"""Independent dense NumPy/SciPy references for the core library (docs/mathematics.md).

Nothing here imports :mod:`bayes_rbfn`: every quantity is written from the formulas of docs/mathematics.md
with
plain NumPy, dense N×N matrices and ``numpy.linalg.solve`` (never the library's Cholesky/Woodbury path),
so the tests compare the fast code with a second, naive derivation of the same mathematics.

Kernels are described by plain dicts, e.g. ``{"kind": "se", "lengthscale": 0.3, "variance": 1.5}`` or
``{"kind": "sum", "parts": [spec1, spec2]}``; :func:`gram` evaluates them.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

# --------------------------------------------------------------------------------------------------
# Kernels, written from their textbook formulas (Rasmussen & Williams ch. 4)


def _2d(X):
    X = np.asarray(X, dtype=np.float64)
    return X[:, None] if X.ndim == 1 else X


def scaled_distance(X1, X2, lengthscale):
    """r_ij = sqrt(Σ_d (x_id − x'_jd)² / ℓ_d²) by explicit differences (double loop over d)."""
    X1, X2 = _2d(X1), _2d(X2)
    ell = np.broadcast_to(np.asarray(lengthscale, dtype=np.float64), (X1.shape[1],))
    r2 = np.zeros((X1.shape[0], X2.shape[0]))
    for d in range(X1.shape[1]):
        r2 += np.subtract.outer(X1[:, d], X2[:, d]) ** 2 / ell[d] ** 2
    return np.sqrt(r2)


def gram(spec, X1, X2=None):
    """Dense Gram matrix k(X1, X2) for a kernel described by ``spec`` (see the module docstring)."""
    X2 = X1 if X2 is None else X2
    kind = spec["kind"]
    if kind == "sum":
        return sum(gram(part, X1, X2) for part in spec["parts"])
    if kind == "product":
        return np.prod([gram(part, X1, X2) for part in spec["parts"]], axis=0)
    s2 = float(spec["variance"])
    if kind == "periodic":
        X1, X2 = _2d(X1), _2d(X2)
        D = X1.shape[1]
        ell = np.broadcast_to(np.asarray(spec["lengthscale"], dtype=np.float64), (D,))
        period = np.broadcast_to(np.asarray(spec["period"], dtype=np.float64), (D,))
        total = np.zeros((X1.shape[0], X2.shape[0]))
        for d in range(D):
            dist = np.abs(np.subtract.outer(X1[:, d], X2[:, d]))
            total += np.sin(np.pi * dist / period[d]) ** 2 / ell[d] ** 2
        return s2 * np.exp(-2.0 * total)
    r = scaled_distance(X1, X2, spec["lengthscale"])
    if kind == "se":
        return s2 * np.exp(-0.5 * r**2)
    if kind == "exponential":
        return s2 * np.exp(-r)
    if kind == "matern32":
        return s2 * (1.0 + np.sqrt(3.0) * r) * np.exp(-np.sqrt(3.0) * r)
    if kind == "matern52":
        return s2 * (1.0 + np.sqrt(5.0) * r + 5.0 * r**2 / 3.0) * np.exp(-np.sqrt(5.0) * r)
    if kind == "imq":
        return s2 / np.sqrt(1.0 + r**2)
    raise ValueError(f"unknown kernel kind {kind!r}")


# --------------------------------------------------------------------------------------------------
# Gaussian algebra


def jittered(Kuu, jitter):
    """K_uu + jitter · mean(diag K_uu) · I: the library's documented jitter policy, applied explicitly."""
    Kuu = np.asarray(Kuu, dtype=np.float64)
    return Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(Kuu.shape[0])


def nystrom(Kau, Kuu, Kbu):
    """Q_ab = K_au K_uu⁻¹ K_ub by a dense solve."""
    return Kau @ np.linalg.solve(Kuu, Kbu.T)


def condition(S_aa, S_ab, S_bb, a, mean_a=0.0, mean_b=0.0):
    """b | a for a joint Gaussian: (m_b + S_ba S_aa⁻¹ (a − m_a), S_bb − S_ba S_aa⁻¹ S_ab), dense solves."""
    mean = mean_b + S_ab.T @ np.linalg.solve(S_aa, a - mean_a)
    cov = S_bb - S_ab.T @ np.linalg.solve(S_aa, S_ab)
    return mean, 0.5 * (cov + cov.T)


def logpdf(y, C):
    """log N(y | 0, C) by SciPy."""
    return float(scipy.stats.multivariate_normal(mean=np.zeros(len(y)), cov=C).logpdf(y))


def loo_refit(C, y):
    """log p(y_i | y_−i) for y ~ N(0, C): for each i, refit on the other N−1 points and predict y_i."""
    n = len(y)
    out = np.empty(n)
    for i in range(n):
        rest = np.delete(np.arange(n), i)
        mean, var = condition(C[np.ix_(rest, rest)], C[rest, i : i + 1], C[i : i + 1, i : i + 1], y[rest])
        out[i] = scipy.stats.norm.logpdf(y[i], loc=mean[0], scale=np.sqrt(var[0, 0]))
    return out


# --------------------------------------------------------------------------------------------------
# The models of docs/mathematics.md, each from its own formula


def exact_predict(Kff, Kfs, Kss, y, noise):
    """Exact GP latent predictive: condition (y, f*) ~ N(0, [[K_ff + σ²I, K_f*], [K_*f, K_**]]) on y."""
    return condition(Kff + noise**2 * np.eye(len(y)), Kfs, Kss, y)


def sor_function_space(Kfu, Kuu, Ksu, y, noise):
    """SoR latent predictive from the joint prior (y, f*) ~ N(0, [[Q_ff + σ²I, Q_f*], [Q_*f, Q_**]]), §3.2."""
    Qff = nystrom(Kfu, Kuu, Kfu)
    Qfs = nystrom(Kfu, Kuu, Ksu)
    Qss = nystrom(Ksu, Kuu, Ksu)
    return condition(Qff + noise**2 * np.eye(len(y)), Qfs, Qss, y)


def stored_sor_predictive(idata, chain, draw, Xs, jitter):
    """The SoR latent predictive (mean, variance) at Xs for one stored draw of a squared-exponential fit.

    Condition (y − c, f* − c) ~ N(0, [[Q_ff + σ²I, Q_f*], [Q_*f, Q_**]]) on y, c the stored ``y_offset``,
    from the stored inputs, inducing inputs and hyperparameters (read as plain arrays).
    """
    post, cd = idata.posterior, idata.constant_data
    X, Z = cd["X"].values, cd["Z"].values
    c = cd["y_offset"].values.item()  # stored as a length-1 array
    spec = {
        "kind": "se",
        "lengthscale": post["lengthscale"].values[chain, draw],
        "variance": float(post["variance"].values[chain, draw]),
    }
    noise = float(post["noise"].values[chain, draw])
    Kuu = jittered(gram(spec, Z), jitter)
    y = idata.observed_data["y"].values - c
    mean, cov = sor_function_space(gram(spec, X, Z), Kuu, gram(spec, Xs, Z), y, noise)
    return mean + c, np.diag(cov)


def sor_covariance(Kfu, Kuu, noise):
    """The SoR marginal covariance of y, Q_ff + σ²I, dense."""
    return nystrom(Kfu, Kuu, Kfu) + noise**2 * np.eye(Kfu.shape[0])


def weight_posterior(Kfu, Kuu, y, noise):
    """α | y ~ N(Σ K_uf y / σ², Σ), Σ = (K_uf K_fu / σ² + K_uu)⁻¹ (§3.2), by a dense inverse."""
    Sigma = np.linalg.inv(Kfu.T @ Kfu / noise**2 + Kuu)
    return Sigma @ Kfu.T @ y / noise**2, 0.5 * (Sigma + Sigma.T)


def nystrom_krr_mean(Kfu, Kuu, Ksu, y, noise):
    """K_*u K_uu⁻¹ K_uf (Q_ff + σ²I)⁻¹ y (eq. (2) of the derivation), dense."""
    v = np.linalg.solve(nystrom(Kfu, Kuu, Kfu) + noise**2 * np.eye(len(y)), y)
    return Ksu @ np.linalg.solve(Kuu, Kfu.T @ v)


def rbf_ridge_mean(Kfu, Kuu, Ksu, y, noise):
    """K_*u (K_uf K_fu + σ² K_uu)⁻¹ K_uf y (eq. (3) of the derivation), dense."""
    return Ksu @ np.linalg.solve(Kfu.T @ Kfu + noise**2 * Kuu, Kfu.T @ y)


def power_function_sq(Kss, KsX, KXX):
    """P_X(x*)² as a matrix: K_** − K_*X K_XX⁻¹ K_X* (§3.3, §3.7)."""
    return Kss - KsX @ np.linalg.solve(KXX, KsX.T)


# --------------------------------------------------------------------------------------------------
# The Birthdays model's marginal, written out


def birthdays_blocks(values, X, Z, period):
    """The dense parts of the Birthdays model's marginal at one draw ``values`` (hyperparameters and the
    week trend's values at its centres ``week_rbfn_u``), for inputs X with the columns t, day of week,
    day of year and three holiday indicators and centres Z = {"trend", "year", "week"}.

    Returns a dict: ``Q`` {component: its Nyström block K_fu (K_uu + jitter I)⁻¹ K_uf} in the model's
    order, ``jitter`` (1e-8 × the mean diagonal of the block-diagonal K_uu), ``W`` {"week", "holiday":
    the design columns of the linear components, whose K_uu = I}, ``g`` the week trend K_fu K_uu⁻¹ u less
    its mean over the days, and ``H`` the one-hot (N, 366) day-of-year matrix.
    """
    v = values
    t = X[:, 0]
    week = {"kind": "se", "lengthscale": v["week_lengthscale"], "variance": v["week_amplitude"] ** 2}
    Kuu_week = jittered(gram(week, Z["week"]), 1e-8)
    network = gram(week, t, Z["week"]) @ np.linalg.solve(Kuu_week, v["week_rbfn_u"])
    g = network - network.mean()
    se = {"kind": "se", "lengthscale": v["trend_lengthscale"], "variance": v["trend_amplitude"] ** 2}
    per = {
        "kind": "periodic",
        "lengthscale": v["year_lengthscale"],
        "variance": v["year_amplitude"] ** 2,
        "period": period,
    }
    blocks = {
        "intercept": (np.ones((len(t), 1)), np.ones((1, 1))),
        "trend": (gram(se, t, Z["trend"]), gram(se, Z["trend"])),
        "year": (gram(per, t, Z["year"]), gram(per, Z["year"])),
        "week": (np.exp(g)[:, None] * (X[:, 1:2] == np.arange(7.0)), np.eye(7)),
        "holiday": (X[:, 3:6], np.eye(3)),
    }
    sizes = [len(Kuu) for _, Kuu in blocks.values()]
    jitter = 1e-8 * sum(np.trace(Kuu) for _, Kuu in blocks.values()) / sum(sizes)
    Q = {name: nystrom(Kfu, Kuu + jitter * np.eye(len(Kuu)), Kfu) for name, (Kfu, Kuu) in blocks.items()}
    H = (X[:, 2][:, None] == np.arange(366.0)[None, :]).astype(float)
    W = {"week": blocks["week"][0], "holiday": blocks["holiday"][0]}
    return {"Q": Q, "jitter": jitter, "W": W, "g": g, "H": H}


# --------------------------------------------------------------------------------------------------
# Scores of a Gaussian-mixture predictive (the equal-weight mixture over posterior draws)


def mixture_scores(means, sds, y):
    """The scores of Σ_s N(means[s], sds[s]²)/T against y, averaged over the S points, computed directly:
    RMSE of the mixture mean; the log mixture density (logsumexp over draws of the normal log densities
    minus log T); the CRPS in closed form, E|X − y| − ½ E|X − X'| with E|N(μ, v)| = 2√v φ(μ/√v) +
    μ (2Φ(μ/√v) − 1) (Grimit et al. 2006, eq. (5)); and the coverage of the central 50/80/95% bands, a
    point being inside the band of level c when the mixture CDF at it lies in [(1 − c)/2, (1 + c)/2].

    Args:
        means, sds: (T, S) component means and standard deviations. y: (S,) observations.
    """
    import scipy.special

    means, sds, y = (np.asarray(a, dtype=np.float64) for a in (means, sds, y))
    T = means.shape[0]
    out = {"rmse": float(np.sqrt(np.mean((means.mean(axis=0) - y) ** 2)))}
    log_pdf = scipy.stats.norm.logpdf(y, means, sds)
    out["lpd"] = float(np.mean(scipy.special.logsumexp(log_pdf, axis=0) - np.log(T)))

    def abs_mean(mu, var):
        s = np.sqrt(var)
        return 2.0 * s * scipy.stats.norm.pdf(mu / s) + mu * (2.0 * scipy.stats.norm.cdf(mu / s) - 1.0)

    to_y = abs_mean(y - means, sds**2).mean(axis=0)
    between = abs_mean(means[:, None] - means[None], sds[:, None] ** 2 + sds[None] ** 2).mean(axis=(0, 1))
    out["crps"] = float(np.mean(to_y - 0.5 * between))
    cdf = scipy.stats.norm.cdf((y - means) / sds).mean(axis=0)
    for c in (0.5, 0.8, 0.95):
        out[f"coverage_{round(100 * c)}"] = float(np.mean(((1 - c) / 2 <= cdf) & (cdf <= (1 + c) / 2)))
    return out
