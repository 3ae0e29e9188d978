"""Compile time apart from sampling, and no recompiling (section ``compile``).

Two fits of the same shapes (different data) in one process, then (``run.py`` runs the section a second
time, as ``compile_new_process``) one in a new process sharing the first's persistent compilation cache.
Each fit's compile time (tracing, lowering, XLA compilation) is separated from its sampling time, and the
compilation cache's hits and misses counted: the target is no XLA compilation on the refit nor in the new
process (what remains is tracing).
"""

from __future__ import annotations

from .common import _data, _fmt, _met, _nuts

NAME = "compile"
FULL = {"N": 10_000, "M": 64, "warmup": 50, "draws": 50}
QUICK = {"N": 2_000, "M": 32, "warmup": 20, "draws": 20}


def run(cfg, clock, cache_dir):
    """Two fits of the same shapes in one process, then one in a new process sharing the disk cache."""
    N, M = cfg["N"], cfg["M"]
    runs = []
    for seed in (0, 1):
        X, y, _ = _data(N, seed)
        h0, m0 = clock.hits, clock.misses
        _, ph = _nuts(
            "sor",
            X,
            y,
            clock,
            num_inducing=M,
            chains=1,
            warmup=cfg["warmup"],
            draws=cfg["draws"],
            X_pred=X[:10],
            seed=seed,
        )
        runs.append(
            {
                "process": 1,
                "seed": seed,
                **ph,
                "cache_hits": clock.hits - h0,
                "cache_misses": clock.misses - m0,
            }
        )
    return {"N": N, "M": M, "runs": runs, "cache_dir": cache_dir}


def targets(r, report):
    a, b = r["runs"][0], r["runs"][1]
    c = report.results.get("compile_new_process", {}).get("runs", [{}])[0]
    report.rows.append(
        (
            "Compile time separate from sampling; repeated fits of the same shapes do not recompile",
            f"first fit {a['fit_compile']:.1f} s compile / {a['sampling']:.1f} s sampling; "
            f"refit {b['fit_compile']:.1f} s; new process {_fmt(c.get('fit_compile'))} s",
            _met(b["cache_misses"] == 0 and c.get("cache_misses", 1) == 0),
            f"XLA compilations on refit: {b['cache_misses']} (cache hits {b['cache_hits']}); "
            f"new process: {c.get('cache_misses', 'n/a')} (hits {c.get('cache_hits', 'n/a')}); "
            "what remains is tracing",
        )
    )
    for fit in r["runs"] + ([c] if c else []):
        report.add_csv(
            "compile",
            f"process{fit.get('process', 2)}_seed{fit.get('seed')}_compile",
            fit.get("fit_compile"),
            "s",
        )
