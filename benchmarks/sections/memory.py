"""Memory: peak resident memory of fitting N = 10⁶ points (M = 64) and predicting 10⁵ test points.

The target is a stated bound (4 GiB) on a 24 GiB machine. The section runs in a fresh process, so the peak
RSS (``ru_maxrss``) is this work's alone; it is recorded before the fit, after the fit and after the
prediction.
"""

from __future__ import annotations

import resource
import time

from .common import _data, _met, _nuts

NAME = "memory"
FULL = {"N": 1_000_000, "M": 64, "warmup": 10, "draws": 10, "max_tree_depth": 3, "test": 100_000}
QUICK = {"N": 100_000, "M": 64, "warmup": 5, "draws": 5, "max_tree_depth": 3, "test": 10_000}
TARGETS = {"memory_gib": 4.0}


def run(cfg, clock):
    """Peak RSS of fitting N = 10⁶ points (M = 64) and predicting 10⁵ test points from the fit.

    Memory does not depend on how long NUTS runs (the draws are M-independent scalars), so the fit is
    short and its trees capped (``max_tree_depth``) to bound the time; the prediction then covers every
    draw at every test point.
    """
    import numpy as np

    from bayes_rbfn.infer import predictive

    N, M = cfg["N"], cfg["M"]
    X, y, _ = _data(N, 12)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    idata, ph = _nuts(
        "sor",
        X,
        y,
        clock,
        num_inducing=M,
        chains=1,
        warmup=cfg["warmup"],
        draws=cfg["draws"],
        max_tree_depth=cfg["max_tree_depth"],
        X_pred=np.linspace(0, 10, 200)[:, None],
        log_likelihood=False,
    )
    rss_fit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    X_test = np.linspace(-0.5, 10.5, cfg["test"])[:, None]
    t1 = time.perf_counter()
    pred = predictive.predict(idata, X_test)
    predict_wall = time.perf_counter() - t1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    draw_batch = predictive.streamed_batches(cfg["test"], M)[1]
    return {
        "N": N,
        "M": M,
        "draws": cfg["draws"],
        "test_points": cfg["test"],
        "fit_wall": ph["fit_wall"],
        "predict_wall": predict_wall,
        "predict_finite": bool(np.all(np.isfinite(pred.mean)) and np.all(np.isfinite(pred.var))),
        "rss_before_mb": rss0,
        "peak_rss_fit_mb": rss_fit,
        "peak_rss_mb": rss,
        "data_mb": N * 2 * 8 / 2**20,
        "outputs_mb": 2 * cfg["draws"] * cfg["test"] * 8 / 2**20,
        "outputs_mb_per_draw": 2 * cfg["test"] * 8 / 2**20,
        "draws_per_call": draw_batch,
    }


def targets(r, report):
    if "peak_rss_mb" in r:
        report.rows.append(
            (
                f"Memory: fit N = {r['N']:,} (M = {r['M']}) and predict "
                f"{r['test_points']:,} test points within a stated bound on a 24 GiB machine",
                f"peak RSS {r['peak_rss_mb'] / 1024:.2f} GiB "
                f"(fit alone {r['peak_rss_fit_mb'] / 1024:.2f} GiB)",
                _met(r["peak_rss_mb"] <= TARGETS["memory_gib"] * 1024),
                f"stated bound {TARGETS['memory_gib']:.0f} GiB; data {r['data_mb']:.0f} MB, "
                "per-draw outputs "
                f"{r['outputs_mb']:.0f} MB ({r['draws']} draws × {r['test_points']:,} points × 2); "
                f"predict took {r['predict_wall']:.0f} s; fit {r['fit_wall']:.0f} s (a short fit: "
                "memory does not grow with the number of iterations)",
            )
        )
        for k in ("peak_rss_fit_mb", "peak_rss_mb", "predict_wall"):
            report.add_csv("memory", k, r[k])
