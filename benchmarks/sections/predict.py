"""Prediction: per-draw predictive moments for 4,000 draws × 10,000 test points.

A short ``sor`` chain (200 + 200) is resampled with replacement to ``draws`` draws (the cost of predicting
does not depend on how the draws were obtained), then ``predictive.predict`` is timed on a first call
(compile included, and separated by the compile clock) and on a warm call; the target: ≤ 10 s warm. The
peak resident memory shows that the working memory is bounded by batching (the draws per call within
``predictive.STREAM_BUDGET``), beyond the outputs themselves.
"""

from __future__ import annotations

import resource
import time

from .common import _data, _many_draws, _met, _nuts

NAME = "predict"
FULL = {"N": 2_000, "M": 64, "draws": 4_000, "points": 10_000}
QUICK = {"N": 1_000, "M": 64, "draws": 400, "points": 2_000}
TARGETS = {"predict_seconds": 10.0}


def run(cfg, clock):
    import numpy as np

    from bayes_rbfn.infer import predictive

    N, M = cfg["N"], cfg["M"]
    X, y, _ = _data(N, 8)
    idata, _ = _nuts(
        "sor",
        X,
        y,
        clock,
        num_inducing=M,
        chains=1,
        warmup=200,
        draws=200,
        X_pred=X[:10],
        log_likelihood=False,
    )
    big = _many_draws(idata, cfg["draws"])
    X_test = np.linspace(-1.0, 11.0, cfg["points"])[:, None]
    import gc

    gc.collect()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    c0, t0 = clock.total, time.perf_counter()
    pred = predictive.predict(big, X_test)
    first = time.perf_counter() - t0
    first_compile = clock.total - c0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    predictive.predict(big, X_test)
    warm = time.perf_counter() - t0
    S = cfg["points"]
    test_batch, draw_batch = predictive.streamed_batches(S, M)
    return {
        "N": N,
        "M": M,
        "draws": cfg["draws"],
        "points": S,
        "first_call": first,
        "first_call_compile": first_compile,
        "warm_call": warm,
        "peak_rss_mb": rss1,
        "rss_before_mb": rss0,
        "outputs_mb": 2 * cfg["draws"] * S * 8 / 2**20,
        "draws_per_call": draw_batch,
        "test_points_per_call": test_batch,
        "budget_mb": predictive.STREAM_BUDGET / 2**20,
        "finite": bool(np.all(np.isfinite(pred.mean))),
    }


def targets(r, report):
    report.rows.append(
        (
            f"Prediction: per-draw moments, {r['draws']:,} draws × {r['points']:,} test points ≤ 10 s",
            f"{r['warm_call']:.1f} s ({r['first_call']:.1f} s on the first call, "
            f"{r['first_call_compile']:.1f} s of it compiling)",
            _met(r["warm_call"] <= TARGETS["predict_seconds"]),
            f"peak RSS {r['peak_rss_mb']:.0f} MB (outputs {r['outputs_mb']:.0f} MB; {r['draws_per_call']} "
            f"draws per call within a {r['budget_mb']:.0f} MB working budget); N = {r['N']:,}",
        )
    )
    for k in (
        "warm_call",
        "first_call",
        "first_call_compile",
        "peak_rss_mb",
        "outputs_mb",
        "draws_per_call",
    ):
        report.add_csv("predict", k, r[k])
