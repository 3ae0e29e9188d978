"""Prediction in mixed precision (``precision="mixed"`` where it is accurate).

3-D inputs with inducing inputs on a grid (K_uu well conditioned), fit with mixed precision; the same
posterior is then predicted in mixed precision and in float64, interleaved, and the per-draw moments
compared. Mixed precision is the default nowhere (its error grows with cond(K_uu)), so this section reports
both its time and its error where it is meant to be used.
"""

from __future__ import annotations

import time

from . import predict
from .common import _many_draws, _met, _nuts

NAME = "predict_mixed"
FULL = {"N": 2_000, "grid": 4, "draws": 4_000, "points": 10_000}
QUICK = {"N": 1_000, "grid": 4, "draws": 400, "points": 2_000}


def run(cfg, clock):
    """The prediction target with ``precision="mixed"`` where it is accurate: 3-D inputs on [0, 10]³ with a
    target that varies along every input, M = grid³ inducing inputs on a grid (2.5 apart for grid 4, about
    two lengthscales: K_uu well conditioned), fit with mixed precision; then the same 4,000-draw posterior
    predicted in mixed precision and in float64, interleaved (warm calls, 3 each), and the per-draw moments
    compared: the largest relative error of f_var, and of f_mean in units of √f_var."""
    import numpy as np

    from bayes_rbfn.gp import kernels
    from bayes_rbfn.infer import predictive

    N, g = cfg["N"], cfg["grid"]
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 10.0, (N, 3))
    f = np.sin(1.3 * X[:, 0]) + np.cos(0.9 * X[:, 1]) + 0.5 * np.sin(0.7 * X[:, 2])
    y = f + 0.3 * rng.standard_normal(N)
    axis = np.linspace(1.25, 8.75, g)
    Z = np.stack(np.meshgrid(axis, axis, axis), -1).reshape(-1, 3)
    idata, _ = _nuts(
        "sor",
        X,
        y,
        clock,
        Z=Z,
        chains=1,
        warmup=200,
        draws=200,
        X_pred=X[:10],
        log_likelihood=False,
        precision="mixed",
    )
    big = {"mixed": _many_draws(idata, cfg["draws"])}
    big["float64"] = big["mixed"].copy()
    big["float64"].posterior.attrs["bayes_rbfn_precision"] = "float64"
    X_test = rng.uniform(-0.5, 10.5, (cfg["points"], 3))
    out, preds = {"N": N, "M": len(Z), "D": 3, "draws": cfg["draws"], "points": cfg["points"]}, {}
    for precision in ("mixed", "float64"):
        c0, t0 = clock.total, time.perf_counter()
        preds[precision] = predictive.predict(big[precision], X_test)
        out[f"first_call_{precision}"] = time.perf_counter() - t0
        out[f"first_call_compile_{precision}"] = clock.total - c0
    walls = {"mixed": [], "float64": []}
    for _ in range(3):
        for precision in ("mixed", "float64"):
            t0 = time.perf_counter()
            predictive.predict(big[precision], X_test)
            walls[precision].append(time.perf_counter() - t0)
    for precision, w in walls.items():
        out[f"warm_min_{precision}"], out[f"warm_median_{precision}"] = min(w), float(np.median(w))
    exact, mixed = preds["float64"], preds["mixed"]
    out["var_rel_error_max"] = float(np.max(np.abs(mixed.f_var - exact.f_var) / exact.f_var))
    out["mean_error_in_sd_max"] = float(np.max(np.abs(mixed.f_mean - exact.f_mean) / np.sqrt(exact.f_var)))
    out["mixture_var_rel_error_max"] = float(np.max(np.abs(mixed.var - exact.var) / exact.var))
    ells = idata.posterior["lengthscale"].values.reshape(-1, 3)
    conds = [
        np.linalg.cond(np.asarray(kernels.SquaredExponential(lengthscale=ell, variance=1.0)(Z, Z)))
        for ell in ells[:: max(1, len(ells) // 20)]
    ]
    out["cond_Kuu_range"] = [float(min(conds)), float(max(conds))]
    out["lengthscale_median"] = np.median(ells, axis=0).tolist()
    return out


def targets(r, report):
    report.rows.append(
        (
            f"Prediction, {r['draws']:,} draws × {r['points']:,} test points, 3-D inputs, M = {r['M']} "
            f"on a grid (cond(K_uu) {r['cond_Kuu_range'][0]:.1e}–{r['cond_Kuu_range'][1]:.1e} over "
            "the draws), "
            '`precision="mixed"` against float64 (warm, median of 3 interleaved)',
            f"{r['warm_median_mixed']:.1f} s mixed, {r['warm_median_float64']:.1f} s float64",
            _met(r["warm_median_mixed"] <= predict.TARGETS["predict_seconds"]) + " (mixed)",
            f"mixed against float64: f_var within {r['var_rel_error_max']:.1e} relative, f_mean within "
            f"{r['mean_error_in_sd_max']:.1e} of √f_var; N = {r['N']:,}",
        )
    )
    for k in ("warm_median_mixed", "warm_median_float64", "var_rel_error_max", "mean_error_in_sd_max"):
        report.add_csv("predict_mixed", k, r[k])
