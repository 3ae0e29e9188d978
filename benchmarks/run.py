"""Benchmarks of the SoR fast path (issue 7) and the sor/exact timing table (issue 3).

One command (from the repository root):

    python benchmarks/run.py            # full scale, ~1.5 h on 2 CPU cores (N = 10⁶ chain: 15 min budget)
    python benchmarks/run.py --quick    # several minutes (mostly compiling): same sections, small sizes

It writes ``results.md`` (the tables of benchmarks/README.md), ``results.csv`` (every figure),
``results.json`` and ``scaling.png`` (log-log time per gradient against N with the linear reference) into
``--out`` (default ``benchmarks/results`` or ``benchmarks/results-quick``). ``--sections a,b`` runs some.

Each section runs in its own Python process, so each has a clean memory high-water mark, its own device
count (the sharded section asks XLA for two CPU devices) and a fresh view of the machine's load, which
is recorded with every section (other work on the machine slows everything down: compare ratios
measured in the same section, not absolute times across runs). Timings of compiled functions are the
minimum over interleaved repeats; NUTS rows separate compile time (tracing, lowering and XLA compilation,
from JAX's monitoring events) from sampling time.

The floor (issue 7): one exact SoR likelihood cannot avoid forming K_fu and the M×M product K_uf K_fu.
Both are timed on arrays of the same shape in the same process, materialised (XLA's own evaluation of
``k(X, Z).T @ k(X, Z)``) and streamed in the same chunks as the library; the faster of the two is the floor.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECTIONS = (
    "floor",
    "accuracy",
    "scaling",
    "sharded",
    "issue3",
    "exact",
    "predict",
    "predict_devices",
    "predict_mixed",
    "compile",
    "memory",
    "million",
)

# --------------------------------------------------------------------------------------------------
# Sizes

FULL = {
    "floor": {"N": 100_000, "M": 128, "repeats": 5},
    "accuracy": {"N": 20_000, "M": 128, "noises": [0.1, 0.01]},
    "scaling": {"Ns": [10_000, 30_000, 100_000, 300_000, 1_000_000], "M": 64, "repeats": 3},
    "sharded": {"N": 1_000_000, "M": 64, "repeats": 3, "devices": 2},
    "issue3": {
        "sor": [1_000, 10_000, 100_000],
        "exact": [1_000, 10_000],
        "exact_nuts_max": 1_000,
        "M": 64,
        "warmup": 60,
        "draws": 60,
        "exact_warmup": 30,
        "exact_draws": 30,
    },
    "exact": {"N": 2_000, "M": 64, "warmup": 30, "draws": 30, "test": 1_000},
    "predict": {"N": 2_000, "M": 64, "draws": 4_000, "points": 10_000},
    "predict_devices": {"N": 2_000, "M": 64, "draws": 4_000, "points": 10_000, "devices": 2},
    "predict_mixed": {"N": 2_000, "grid": 4, "draws": 4_000, "points": 10_000},
    "compile": {"N": 10_000, "M": 64, "warmup": 50, "draws": 50},
    # The target schedule is 500 + 500; MILLION_WARMUP / MILLION_DRAWS override it (a shorter run is
    # reported with its measured cost per iteration and the extrapolation to 500 + 500).
    "million": {
        "N": 1_000_000,
        "M": 64,
        "warmup": int(os.environ.get("MILLION_WARMUP", 500)),
        "draws": int(os.environ.get("MILLION_DRAWS", 500)),
        "budget_min": float(os.environ.get("MILLION_BUDGET_MIN", 15)),
        "chunk": 5,
        "init": os.environ.get("MILLION_INIT", "map"),
    },
    "memory": {"N": 1_000_000, "M": 64, "warmup": 10, "draws": 10, "max_tree_depth": 3, "test": 100_000},
}
QUICK = {
    "floor": {"N": 20_000, "M": 128, "repeats": 5},
    "accuracy": {"N": 3_000, "M": 64, "noises": [0.1, 0.01]},
    "scaling": {"Ns": [1_000, 10_000, 100_000], "M": 64, "repeats": 3},
    "sharded": {"N": 100_000, "M": 64, "repeats": 3, "devices": 2},
    "issue3": {
        "sor": [1_000, 10_000],
        "exact": [1_000],
        "exact_nuts_max": 0,
        "M": 64,
        "warmup": 60,
        "draws": 60,
    },
    "exact": {"N": 300, "M": 32, "warmup": 60, "draws": 60, "test": 300},
    "predict": {"N": 1_000, "M": 64, "draws": 400, "points": 2_000},
    "predict_devices": {"N": 1_000, "M": 64, "draws": 400, "points": 2_000, "devices": 2},
    "predict_mixed": {"N": 1_000, "grid": 4, "draws": 400, "points": 2_000},
    "compile": {"N": 2_000, "M": 32, "warmup": 20, "draws": 20},
    "million": {"N": 10_000, "M": 64, "warmup": 40, "draws": 40, "budget_min": 2, "chunk": 10},
    "memory": {"N": 100_000, "M": 64, "warmup": 5, "draws": 5, "max_tree_depth": 3, "test": 10_000},
}

TARGETS = {
    "floor_ratio": 3.0,
    "scaling_exponent": 1.1,
    "million_minutes": 15.0,
    "ess_ratio": 20.0,
    "predict_seconds": 10.0,
    "memory_gib": 4.0,
}


# --------------------------------------------------------------------------------------------------
# Worker side: one section per process


def _setup(cache_dir: str | None):
    os.environ.setdefault("MPLBACKEND", "Agg")
    from bayes_rbfn import runtime

    runtime.enable_x64()
    # JAX's CPU LAPACK kernels (Cholesky, triangular solves on M×M factors) run in SciPy's OpenBLAS, whose
    # threads otherwise fight XLA's for the cores: ~20 ms per small solve instead of ~0.1 ms on 2 cores.
    # fit() does the same while it samples (bayes_rbfn.runtime.single_threaded_blas).
    runtime.limit_blas_threads()
    if cache_dir:
        runtime.enable_compilation_cache(cache_dir)


class CompileClock:
    """Sums JAX's tracing, lowering and XLA compile durations (monitoring events) while ``active``."""

    EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def __init__(self):
        import jax

        self.total = 0.0
        self.by_event = dict.fromkeys(("trace", "lower", "xla"), 0.0)
        self.hits = 0
        self.misses = 0

        def on_duration(event, duration, **_):
            if event in self.EVENTS:
                self.total += duration
                self.by_event[("trace", "lower", "xla")[self.EVENTS.index(event)]] += duration

        def on_event(event, **_):
            if event == "/jax/compilation_cache/cache_hits":
                self.hits += 1
            elif event == "/jax/compilation_cache/cache_misses":
                self.misses += 1

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        jax.monitoring.register_event_listener(on_event)


def _data(N: int, seed: int = 0, D: int = 1):
    """A smooth function on [0, 10] with noise σ = 0.3."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (N, D))
    f = np.sin(1.3 * X[:, 0]) + 0.5 * np.cos(0.45 * X[:, 0]) + 0.2 * X[:, 0]
    return X, f + 0.3 * rng.standard_normal(N), f


def _interleaved(fns: dict, repeats: int) -> dict:
    """Min and median wall time per call of each zero-argument function, calls interleaved."""
    import jax
    import numpy as np

    for fn in fns.values():
        jax.block_until_ready(fn())
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - t0)
    return {k: {"min": float(np.min(v)), "median": float(np.median(v))} for k, v in times.items()}


def _params(D: int = 1):
    import jax.numpy as jnp

    return {"lengthscale": jnp.asarray(1.0), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}


def _model_problem(N: int, M: int, seed: int = 0):
    import jax.numpy as jnp
    import numpy as np

    X, y, _ = _data(N, seed)
    Z = np.quantile(X[:, 0], (np.arange(M) + 0.5) / M)[:, None]
    return {
        "X": jnp.asarray(X),
        "y": jnp.asarray(y),
        "Z": jnp.asarray(Z),
        "y_offset": jnp.asarray(float(y.mean())),
    }


def _grad_fn(module, config):
    """Jitted value-and-gradient of a model's log density in the hyperparameters, data as arguments."""
    import jax

    return jax.jit(jax.value_and_grad(lambda p, d: module.log_density(p, d, config)))


def _config(**kw):
    from bayes_rbfn.models import ModelConfig
    from bayes_rbfn.models.families import FAMILIES

    return ModelConfig(family=FAMILIES["se"], priors={}, **kw)


def _floor_fns(data, M, chunk):
    """Forming K_fu and K_uf K_fu: materialised, and streamed in the library's chunks."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from bayes_rbfn.gp import kernels

    def materialised(p, X, Z):
        Kfu = kernels.SquaredExponential(p["lengthscale"], p["variance"])(X, Z)
        return Kfu.T @ Kfu

    def streamed(p, X, Z):
        k = kernels.SquaredExponential(p["lengthscale"], p["variance"])
        n = X.shape[0] // chunk

        def body(S, x):
            K = k(Z, x)
            return S + K @ K.T, None

        S = jnp.zeros((M, M), X.dtype)
        if n:
            S = lax.scan(body, S, X[: n * chunk].reshape(n, chunk, -1))[0]
        if X.shape[0] % chunk:
            K = k(Z, X[n * chunk :])
            S = S + K @ K.T
        return S

    return jax.jit(materialised), jax.jit(streamed)


def _trsm_sor_factor(kernel, X, y, Z, noise):
    """The implementation before the streamed pass (kept here as the benchmark's point of comparison): K_uf
    formed, whitened by a triangular solve against all N columns, autodiff for the gradient."""
    import jax.numpy as jnp

    from bayes_rbfn.gp import linalg

    Luu = linalg.cholesky(kernel(Z, Z))
    A = linalg.solve_lower(Luu, kernel(Z, X)) / noise
    stats = (A @ A.T, A @ (y / noise), jnp.sum(y * y) / noise**2, y.shape[0] * jnp.log(noise**2))
    return linalg.woodbury(Luu, stats, n=X.shape[0])


def section_floor(cfg):
    import jax

    from bayes_rbfn.gp import linalg, parallel
    from bayes_rbfn.models import sor

    N, M = cfg["N"], cfg["M"]
    data = _model_problem(N, M)
    p = _params()
    chunk = parallel.chunk_size_for(M)
    mat, streamed = _floor_fns(data, M, chunk)
    default = _grad_fn(sor, _config())
    fast = _grad_fn(sor, _config(fast=True))

    def previous(p, d):
        kernel = _family_kernel(p)
        factor = _trsm_sor_factor(kernel, d["X"], d["y"] - d["y_offset"], d["Z"], p["noise"])
        return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())

    previous = jax.jit(jax.value_and_grad(previous))
    t = _interleaved(
        {
            "floor_materialised": lambda: mat(p, data["X"], data["Z"]),
            "floor_streamed": lambda: streamed(p, data["X"], data["Z"]),
            "sor": lambda: default(p, data),
            "sor_fast": lambda: fast(p, data),
            "sor_previous": lambda: previous(p, data),
        },
        cfg["repeats"],
    )
    floor = min(t["floor_materialised"]["min"], t["floor_streamed"]["min"])
    return {
        "N": N,
        "M": M,
        "chunk": chunk,
        "times": t,
        "floor": floor,
        "ratio": t["sor"]["min"] / floor,
        "ratio_fast": t["sor_fast"]["min"] / floor,
        "ratio_previous": t["sor_previous"]["min"] / floor,
    }


def _family_kernel(p):
    from bayes_rbfn.gp import kernels

    return kernels.SquaredExponential(p["lengthscale"], p["variance"])


def section_accuracy(cfg):
    """|log p − long-double log p| of the streamed whitened path, the fast path and the TRSM path."""
    import jax.numpy as jnp
    import numpy as np

    from bayes_rbfn.gp import kernels, linalg, parallel

    ld = np.longdouble

    def chol(A):
        L = np.zeros_like(A)
        for j in range(A.shape[0]):
            L[j, j] = np.sqrt(A[j, j] - L[j, :j] @ L[j, :j])
            L[j + 1 :, j] = (A[j + 1 :, j] - L[j + 1 :, :j] @ L[j, :j]) / L[j, j]
        return L

    def solve(L, B):
        Xs = np.zeros_like(B)
        for i in range(L.shape[0]):
            Xs[i] = (B[i] - L[i, :i] @ Xs[:i]) / L[i, i]
        return Xs

    N, M = cfg["N"], cfg["M"]
    rows = []
    for noise in cfg["noises"]:
        rng = np.random.default_rng(1)
        X = np.sort(rng.uniform(0.0, 10.0, N))
        y = np.sin(X) + noise * rng.standard_normal(N)
        Z = np.linspace(0.0, 10.0, M)
        kernel = kernels.SquaredExponential(2.0, 1.0)
        Kuu, Kuf = np.asarray(kernel(Z, Z)), np.asarray(kernel(Z, X))
        jit_ = linalg.default_jitter(np.float64) * np.mean(np.diag(Kuu))
        A = solve(chol(Kuu.astype(ld) + ld(jit_) * np.eye(M, dtype=ld)), Kuf.astype(ld))
        s2 = ld(noise) ** 2
        LB = chol(np.eye(M, dtype=ld) + A @ A.T / s2)
        c = solve(LB, (A @ y.astype(ld))[:, None] / s2)[:, 0]
        yl = y.astype(ld)
        ref = -0.5 * (
            yl @ yl / s2
            - c @ c
            + N * np.log(s2)
            + 2 * np.sum(np.log(np.diag(LB)))
            + N * np.log(2 * np.pi * ld(1))
        )
        Xj, yj, Zj = jnp.asarray(X)[:, None], jnp.asarray(y), jnp.asarray(Z)[:, None]
        errs = {}
        for name, fast in (("streamed_whitened", False), ("streamed_fast", True)):
            value = parallel.sor_factor(kernel, Xj, yj, Zj, noise, fast=fast).log_marginal_likelihood()
            errs[name] = abs(float(value) - float(ref))
        value = _trsm_sor_factor(kernel, Xj, yj, Zj, noise).log_marginal_likelihood()
        errs["trsm_whitened"] = abs(float(value) - float(ref))
        cond = float(np.linalg.cond(Kuu + jit_ * np.eye(M)))
        rows.append(
            {
                "N": N,
                "M": M,
                "noise": noise,
                "lengthscale": 2.0,
                "cond_Kuu": cond,
                "log_p": float(ref),
                **errs,
            }
        )
    return {"rows": rows}


def section_scaling(cfg):
    import numpy as np

    from bayes_rbfn.gp import parallel
    from bayes_rbfn.models import sor

    M = cfg["M"]
    rows = []
    grad = _grad_fn(sor, _config())
    p = _params()
    for N in cfg["Ns"]:
        data = _model_problem(N, M)
        mat, streamed = _floor_fns(data, M, parallel.chunk_size_for(M))
        fns = {
            "sor": lambda d=data: grad(p, d),
            "floor_streamed": lambda d=data, f=streamed: f(p, d["X"], d["Z"]),
        }
        if N <= 300_000:
            fns["floor_materialised"] = lambda d=data, f=mat: f(p, d["X"], d["Z"])
        t = _interleaved(fns, cfg["repeats"])
        floor = min(v["min"] for k, v in t.items() if k.startswith("floor"))
        rows.append({"N": N, "M": M, "sor": t["sor"]["min"], "floor": floor, "times": t})
    logN = np.log([r["N"] for r in rows])
    exponent = float(np.polyfit(logN, np.log([r["sor"] for r in rows]), 1)[0])
    floor_exponent = float(np.polyfit(logN, np.log([r["floor"] for r in rows]), 1)[0])
    return {"rows": rows, "exponent": exponent, "floor_exponent": floor_exponent}


def section_sharded(cfg):
    import jax
    import numpy as np

    from bayes_rbfn.gp import parallel
    from bayes_rbfn.models import sor

    N, M = cfg["N"], cfg["M"]
    mesh = parallel.data_mesh()
    data = _model_problem(N, M)
    placed = parallel.shard_data(data, mesh)
    p = _params()
    single, sharded = _grad_fn(sor, _config()), _grad_fn(sor, _config(mesh=mesh))
    t = _interleaved(
        {"single": lambda: single(p, data), "sharded": lambda: sharded(p, placed)}, cfg["repeats"]
    )
    a, b = single(p, data), sharded(p, placed)
    other_chunk = _grad_fn(sor, _config(chunk_size=parallel.chunk_size_for(M) // 2))(p, data)

    def rel(u, v):
        u, v = np.asarray(u), np.asarray(v)
        return float(np.max(np.abs(u - v)) / np.max(np.abs(u)))

    value_rel = rel(a[0], b[0])
    grad_rel = {k: rel(a[1][k], b[1][k]) for k in a[1]}
    chunk_rel = {k: rel(a[1][k], other_chunk[1][k]) for k in a[1]}
    worst = max(value_rel, *grad_rel.values())
    return {
        "N": N,
        "M": M,
        "devices": jax.device_count(),
        "times": t,
        "max_rel_diff": worst,
        "value_rel_diff": value_rel,
        "grad_rel_diff": grad_rel,
        "grad_rel_diff_other_chunk_size": chunk_rel,
        "speedup": t["single"]["min"] / t["sharded"]["min"],
    }


def _nuts(model, X, y, clock, **kw):
    """fit() with its NUTS loop (``sampler.run_chains``, as fit calls it) timed; returns idata and the
    timing breakdown."""
    import jax

    from bayes_rbfn import fit
    from bayes_rbfn.infer import fitting

    phases = {}
    original = fitting.run_chains

    def timed_run(*args, **kwargs):
        c0, t0, e0 = clock.total, time.perf_counter(), dict(clock.by_event)
        out = jax.block_until_ready(original(*args, **kwargs))
        phases["mcmc_wall"] = time.perf_counter() - t0
        phases["compile"] = clock.total - c0
        for k, v in clock.by_event.items():
            phases[f"compile_{k}"] = v - e0.get(k, 0.0)
        return out

    fitting.run_chains = timed_run
    try:
        c0, t0 = clock.total, time.perf_counter()
        idata = fit(model, X, y, progress=False, check_diagnostics=False, **kw)
        phases["fit_wall"] = time.perf_counter() - t0
        phases["fit_compile"] = clock.total - c0
    finally:
        fitting.run_chains = original
    phases["sampling"] = phases["mcmc_wall"] - phases["compile"]
    return idata, phases


def _diagnostics(idata, names=("lengthscale", "variance", "noise")):
    import arviz as az
    import numpy as np

    names = [n for n in names if n in idata.posterior]
    ess = az.ess(idata, var_names=names, method="bulk")
    per = {n: float(np.min(ess[n].values)) for n in names}
    steps = idata.sample_stats["n_steps"].values
    rhat = {}
    for n in names:
        v = np.asarray(idata.posterior[n].values)
        v = v.reshape(v.shape[0], v.shape[1], -1)
        if v.shape[0] == 1:  # one chain: R-hat of its two halves (ArviZ gives NaN for a single chain)
            half = v.shape[1] // 2
            v = np.concatenate([v[:, :half], v[:, half : 2 * half]], axis=0)
        rhat[n] = max(float(az.rhat(v[..., j])) for j in range(v.shape[-1]))
    return {
        "ess_bulk_min": min(per.values()),
        "ess_bulk": per,
        "rhat_max": max(rhat.values()),
        "divergences": int(idata.sample_stats["diverging"].values.sum()),
        "mean_steps": float(np.mean(steps)),
    }


def _heldout_lpd(idata, y_test):
    """Mean over test points of log mean_s N(y* | f_mean_s, f_var_s + σ_s²)."""
    import numpy as np
    from scipy.special import logsumexp

    m = idata.predictions["f_mean"].values.reshape(-1, len(y_test))
    v = idata.predictions["f_var"].values.reshape(-1, len(y_test))
    s2 = (idata.posterior["noise"].values.reshape(-1, 1)) ** 2
    var = v + s2
    logp = -0.5 * (np.log(2 * np.pi * var) + (y_test[None] - m) ** 2 / var)
    return float(np.mean(logsumexp(logp, axis=0) - np.log(m.shape[0])))


def _sgrad(module, N, M, repeats=3):
    grad = _grad_fn(module, _config())
    data = _model_problem(N, M)
    if module.__name__.endswith("exact"):
        data = {k: v for k, v in data.items() if k != "Z"}
    p = _params()
    return _interleaved({"g": lambda: grad(p, data)}, repeats)["g"]["min"]


def section_issue3(cfg, clock):
    from bayes_rbfn.models import exact, sor

    rows = []
    M = cfg["M"]
    for N in cfg["sor"]:
        X, y, _ = _data(N, 3)
        idata, ph = _nuts(
            "sor",
            X,
            y,
            clock,
            num_inducing=M,
            chains=1,
            warmup=cfg["warmup"],
            draws=cfg["draws"],
            X_pred=X[:10],
            log_likelihood=False,
        )
        d = _diagnostics(idata)
        rows.append(
            {
                "model": "sor",
                "N": N,
                "M": M,
                "s_per_grad": _sgrad(sor, N, M),
                **d,
                **ph,
                "ess_per_s": d["ess_bulk_min"] / ph["sampling"],
            }
        )
    for N in cfg["exact"]:
        row = {"model": "exact", "N": N, "s_per_grad": _sgrad(exact, N, M, repeats=1 if N > 2000 else 3)}
        if N <= cfg["exact_nuts_max"]:
            X, y, _ = _data(N, 3)
            idata, ph = _nuts(
                "exact",
                X,
                y,
                clock,
                chains=1,
                warmup=cfg.get("exact_warmup", cfg["warmup"]),
                draws=cfg.get("exact_draws", cfg["draws"]),
                X_pred=X[:10],
                log_likelihood=False,
            )
            d = _diagnostics(idata)
            row.update(d, **ph, ess_per_s=d["ess_bulk_min"] / ph["sampling"])
        rows.append(row)
    return {"rows": rows}


def section_exact(cfg, clock):
    import numpy as np

    N, M = cfg["N"], cfg["M"]
    X, y, _ = _data(N, 5)
    X_test, _, f_test = _data(cfg["test"], 6)
    y_test = f_test + 0.3 * np.random.default_rng(7).standard_normal(cfg["test"])
    out = {"N": N, "M": M}
    for model in ("sor", "exact"):
        kw = {"num_inducing": M} if model == "sor" else {}
        idata, ph = _nuts(
            model,
            X,
            y,
            clock,
            chains=1,
            warmup=cfg["warmup"],
            draws=cfg["draws"],
            X_pred=X_test,
            log_likelihood=False,
            **kw,
        )
        d = _diagnostics(idata)
        out[model] = {
            **d,
            **ph,
            "ess_per_s": d["ess_bulk_min"] / ph["sampling"],
            "lpd": _heldout_lpd(idata, y_test),
        }
    out["ess_ratio"] = out["sor"]["ess_per_s"] / out["exact"]["ess_per_s"]
    out["pymc"] = _pymc_dtc(X, y, X_test, y_test, M, cfg)
    return out


def _pymc_dtc(X, y, X_test, y_test, M, cfg):
    """PyMC's gp.MarginalApprox(approx="DTC") on the same data, Z and default priors, if PyMC is installed."""
    try:
        import pymc as pm
    except ImportError:
        return {"skipped": "PyMC is not installed"}
    import arviz as az
    import numpy as np

    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.models.families import data_scales, get_family

    family = get_family("se")
    priors = family.default_priors(data_scales(X, y))
    Z = np.asarray(select_inducing(X, M, method="kmeans", seed=0))
    offset = float(np.mean(y))

    def lognormal(name):
        d = priors[name]
        return pm.LogNormal(name, mu=float(d.loc), sigma=float(d.scale))

    with pm.Model():
        ell, var, noise = lognormal("lengthscale"), lognormal("variance"), lognormal("noise")
        gp = pm.gp.MarginalApprox(cov_func=var * pm.gp.cov.ExpQuad(1, ls=ell), approx="DTC")
        gp.marginal_likelihood("y", X=X, Xu=Z, y=y - offset, sigma=noise)
        t0 = time.perf_counter()
        idata = pm.sample(
            draws=cfg["draws"],
            tune=cfg["warmup"],
            chains=1,
            cores=1,
            random_seed=0,
            progressbar=False,
            compute_convergence_checks=False,
        )
        wall = time.perf_counter() - t0
    ess = az.ess(idata, var_names=["lengthscale", "variance", "noise"], method="bulk")
    ess_min = float(min(np.min(ess[n].values) for n in ("lengthscale", "variance", "noise")))
    return {"wall_incl_compile": wall, "ess_bulk_min": ess_min, "ess_per_s": ess_min / wall}


def _many_draws(idata, draws: int, seed: int = 0):
    """``idata`` with its posterior resampled (with replacement) to ``draws`` draws in 4 chains (1 if
    ``draws`` is not a multiple of 4), for timing a predictive over many draws without a long chain."""
    import arviz as az
    import numpy as np

    n = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"]
    pick = np.random.default_rng(seed).integers(0, n, draws)
    chains = 4 if draws % 4 == 0 else 1
    post = {
        k: idata.posterior[k]
        .values.reshape(-1, *idata.posterior[k].shape[2:])[pick]
        .reshape(chains, -1, *idata.posterior[k].shape[2:])
        for k in idata.posterior.data_vars
    }
    big = az.from_dict(
        posterior=post,
        observed_data={"y": idata.observed_data["y"].values},
        constant_data={k: idata.constant_data[k].values for k in idata.constant_data.data_vars},
    )
    big.posterior.attrs.update(idata.posterior.attrs)
    return big


def section_predict(cfg, clock):
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


def section_predict_mixed(cfg, clock):
    """Issue 20 target 4 with ``precision="mixed"`` where it is accurate: 3-D inputs on [0, 10]³ with a
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


def section_predict_devices(cfg, clock):
    """The prediction of :func:`section_predict` with the host's cores as ``cfg["devices"]`` JAX devices
    (``--xla_force_host_platform_device_count``): the draw batches are spread round-robin over them."""
    import jax

    from bayes_rbfn.infer import predictive

    assert jax.device_count() == cfg["devices"], jax.devices()
    assert len(predictive.draw_devices(_config()) or ()) == cfg["devices"]
    return section_predict(cfg, clock)


def section_compile(cfg, clock, cache_dir):
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


def section_million(cfg, clock):
    """One chain of warm-up + draws at N = 10⁶ within a wall-clock budget (default: the target's 15 min).

    The fit runs with a checkpoint every few iterations in a background thread; the main thread records
    how many iterations are done as time passes. A chain that finishes in the budget is diagnosed
    (r_hat of its two halves, bulk ESS); one that does not is reported as the iterations it reached.
    """
    import threading

    import numpy as np

    from bayes_rbfn.infer.checkpoint import read_checkpoint

    N, M = cfg["N"], cfg["M"]
    X, y, _ = _data(N, 11)
    folder = Path(tempfile.mkdtemp(prefix="million-")) / "ckpt"
    box = {}

    def run():
        try:
            from bayes_rbfn import fit

            box["idata"] = fit(
                "sor",
                X,
                y,
                num_inducing=M,
                chains=1,
                warmup=cfg["warmup"],
                draws=cfg["draws"],
                X_pred=np.linspace(0, 10, 200)[:, None],
                log_likelihood=False,
                progress=False,
                check_diagnostics=False,
                checkpoint=folder,
                chunk_size=cfg["chunk"],
                init=cfg.get("init", "median"),
                dense_mass=True,
            )
        except BaseException as err:  # reported, not raised: the budget loop must still write its result
            box["error"] = repr(err)

    t0 = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    progress = [(0.0, 0, 0.0)]  # (seconds since start, iterations done, compile seconds so far)
    while thread.is_alive() and time.perf_counter() - t0 < cfg["budget_min"] * 60:
        thread.join(2.0)
        try:
            done = read_checkpoint(folder).iterations_done
        except Exception:
            continue
        if done != progress[-1][1]:
            progress.append((time.perf_counter() - t0, done, clock.total))
    elapsed = time.perf_counter() - t0
    out = {
        "N": N,
        "M": M,
        "warmup": cfg["warmup"],
        "draws": cfg["draws"],
        "budget_min": cfg["budget_min"],
        "elapsed": elapsed,
        "finished": "idata" in box,
        "error": box.get("error"),
        "progress": progress,
        "iterations_done": progress[-1][1],
        "compile": clock.total,
        "init": cfg.get("init", "median"),
    }
    if "idata" in box:
        idata = box["idata"]
        d = _diagnostics(idata)
        out.update(d, fit_wall=elapsed, ess_per_s=d["ess_bulk_min"] / elapsed)
        out["mean_steps_per_draw"] = float(idata.sample_stats["num_steps"].mean())
        out["posterior_mean"] = {
            k: float(idata.posterior[k].mean()) for k in ("lengthscale", "variance", "noise")
        }
    elif len(progress) > 2:
        # Rate over the iterations after the first checkpoint (which includes compiling).
        (t1, d1, _), (t2, d2, _) = progress[1], progress[-1]
        out["s_per_iteration_recent"] = (t2 - t1) / max(d2 - d1, 1)
    return out


def section_memory(cfg, clock):
    """Issue 8: peak RSS of fitting N = 10⁶ points (M = 64) and predicting 10⁵ test points from the fit.

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


def worker(section: str, scale: str, out: str, cache_dir: str | None) -> None:
    _setup(cache_dir)
    import jax

    cfg = (QUICK if scale == "quick" else FULL)[section]
    clock = CompileClock()
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    if section in ("floor", "accuracy", "scaling", "sharded"):
        result = globals()[f"section_{section}"](cfg)
    elif section == "compile":
        result = section_compile(cfg, clock, cache_dir)
    else:
        result = globals()[f"section_{section}"](cfg, clock)
    result["_section_wall"] = time.perf_counter() - t0
    result["_load"] = [load0, os.getloadavg()[0]]
    result["_devices"] = jax.device_count()
    result["_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps(result, indent=1, default=float))
    if section == "million":
        os._exit(0)  # a chain still sampling in its thread (budget exhausted) is abandoned, not awaited


# --------------------------------------------------------------------------------------------------
# Driver side: run the sections, then write the tables and the plot


def _run_section(section, scale, workdir, cache_dir, env_extra=None, tag=None):
    out = Path(workdir) / f"{tag or section}.json"
    env = dict(os.environ)
    env.update(env_extra or {})
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        section,
        "--scale",
        scale,
        "--json",
        str(out),
    ]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"_error": proc.stderr[-3000:], "_section_wall": time.perf_counter() - t0}
    return json.loads(out.read_text())


def _fmt(x, digits=3):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    if abs(x) >= 1000 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def _met(ok):
    return "**met**" if ok else "**missed**"


def write_report(results: dict, outdir: Path, scale: str) -> None:
    rows = []  # (target, measured, met, notes) for the summary table
    csv_rows = []

    def add_csv(section, name, value, unit=""):
        csv_rows.append({"section": section, "name": name, "value": value, "unit": unit})

    lines = [f"# Benchmark results ({scale} scale)", ""]
    import platform

    lines.append(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()}; float64 throughout. Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."  # noqa: E501
    )
    loads = [r["_load"] for r in results.values() if isinstance(r, dict) and "_load" in r]
    if loads:
        lo = min(min(l) for l in loads)
        hi = max(max(l) for l in loads)
        lines.append(
            f"1-minute load average during the sections: {lo:.1f}–{hi:.1f} on {os.cpu_count()} cores "
            "(other work was running; absolute times are inflated by it, ratios measured within one "
            "section much less so)."
        )
    lines.append("")

    r = results.get("floor")
    if r and "_error" not in r:
        t = r["times"]
        rows.append(
            (
                "Near the floor: sor log density + gradient ≤ 3× forming K_fu and K_uf K_fu "
                f"(N = {r['N']:,}, M = {r['M']})",
                f"{r['ratio']:.2f}× ({_fmt(t['sor']['min'])} s vs floor {_fmt(r['floor'])} s)",
                _met(r["ratio"] <= TARGETS["floor_ratio"]),
                f"fast path (sum before whitening): {r['ratio_fast']:.2f}×; previous implementation: "
                f"{r['ratio_previous']:.2f}×",
            )
        )
        for k, v in t.items():
            add_csv("floor", k, v["min"], "s")
        for k in ("floor", "ratio", "ratio_fast", "ratio_previous"):
            add_csv("floor", k, r[k], "s" if k == "floor" else "x")
    r = results.get("scaling")
    if r and "_error" not in r:
        Ns = [row["N"] for row in r["rows"]]
        rows.append(
            (
                f"Linear in N: exponent of time per gradient, N = {Ns[0]:,}…{Ns[-1]:,}, M = {r['rows'][0]['M']} ≤ 1.1",  # noqa: E501
                f"{r['exponent']:.3f}",
                _met(r["exponent"] <= TARGETS["scaling_exponent"]),
                f"floor's own exponent {r['floor_exponent']:.3f}",
            )
        )
        for row in r["rows"]:
            add_csv("scaling", f"sor_N{row['N']}", row["sor"], "s")
            add_csv("scaling", f"floor_N{row['N']}", row["floor"], "s")
        add_csv("scaling", "exponent", r["exponent"])
        _plot(r, outdir / "scaling.png")
    r = results.get("million")
    if r and "_error" not in r and "budget_min" in r:
        target = f"A million points: N = {r['N']:,}, M = {r['M']}, 1 chain 500+500 ≤ 15 min (2 cores)"
        if r["finished"]:
            minutes = r["elapsed"] / 60
            rows.append(
                (
                    target,
                    f"{minutes:.1f} min for {r['warmup']}+{r['draws']} (compile {r['compile']:.0f} s)",
                    _met(minutes <= TARGETS["million_minutes"] and r["warmup"] + r["draws"] >= 1000),
                    f"r_hat (two halves of the chain) {r['rhat_max']:.3f}, "
                    f"bulk ESS ≥ {r['ess_bulk_min']:.0f} "
                    f"(of {r['draws']} draws), {r['mean_steps']:.1f} gradients/draw",
                )
            )
        else:
            rate = r.get("s_per_iteration_recent")
            rows.append(
                (
                    target,
                    f"not finished: {r['iterations_done']} of {r['warmup'] + r['draws']} iterations "
                    f"in {r['elapsed'] / 60:.1f} min (compile {r['compile']:.0f} s)",
                    "**missed**",
                    "no r_hat/ESS: the chain did not reach its draws in the budget; "
                    + (f"recent warm-up pace {rate:.0f} s/iteration; " if rate else "")
                    + "see the text for the arithmetic",
                )
            )
        for k in (
            "elapsed",
            "iterations_done",
            "compile",
            "rhat_max",
            "ess_bulk_min",
            "s_per_iteration_recent",
        ):
            if r.get(k) is not None:
                add_csv("million", k, r[k])
    r = results.get("memory")
    if r and "_error" not in r:
        if "peak_rss_mb" in r:
            rows.append(
                (
                    f"Memory (issue 8): fit N = {r['N']:,} (M = {r['M']}) and predict "
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
                add_csv("memory", k, r[k])
    r = results.get("exact")
    if r and "_error" not in r:
        s, e = r["sor"], r["exact"]
        rows.append(
            (
                f"Against the exact GP: ESS/s of the hyperparameters at N = {r['N']:,} ≥ 20× exact's",
                f"{r['ess_ratio']:.0f}× ({s['ess_per_s']:.3g} vs {e['ess_per_s']:.3g} ESS/s)",
                _met(r["ess_ratio"] >= TARGETS["ess_ratio"]),
                f"held-out log predictive density per point: sor {s['lpd']:.4f}, exact {e['lpd']:.4f}",
            )
        )
        for m in ("sor", "exact"):
            for k in ("ess_per_s", "ess_bulk_min", "sampling", "compile", "lpd", "rhat_max"):
                add_csv("exact", f"{m}_{k}", r[m][k])
        pm_ = r.get("pymc", {})
        if "skipped" in pm_:
            rows.append(
                ("PyMC gp.MarginalApprox(approx='DTC'), same data and priors", "skipped", "—", pm_["skipped"])
            )
        elif pm_:
            rows.append(
                (
                    "PyMC gp.MarginalApprox(approx='DTC'), same data and priors",
                    f"sor/PyMC ESS/s ratio {s['ess_per_s'] / pm_['ess_per_s']:.1f}×",
                    "—",
                    f"PyMC {pm_['ess_per_s']:.3g} ESS/s (wall incl. compile {pm_['wall_incl_compile']:.0f} s)",  # noqa: E501
                )
            )
    r = results.get("predict")
    if r and "_error" not in r:
        rows.append(
            (
                f"Prediction: per-draw moments, {r['draws']:,} draws × {r['points']:,} test points ≤ 10 s",
                f"{r['warm_call']:.1f} s ({r['first_call']:.1f} s on the first call, "
                f"{r['first_call_compile']:.1f} s of it compiling)",
                _met(r["warm_call"] <= TARGETS["predict_seconds"]),
                f"peak RSS {r['peak_rss_mb']:.0f} MB (outputs {r['outputs_mb']:.0f} MB; {r['draws_per_call']} "  # noqa: E501
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
            add_csv("predict", k, r[k])
    r = results.get("predict_devices")
    if r and "_error" not in r:
        rows.append(
            (
                f"Prediction as above, the 2 cores as {r.get('_devices', 2)} JAX devices (draw batches "
                "spread over them)",
                f"{r['warm_call']:.1f} s ({r['first_call']:.1f} s on the first call)",
                _met(r["warm_call"] <= TARGETS["predict_seconds"]),
                f"peak RSS {r['peak_rss_mb']:.0f} MB; XLA_FLAGS=--xla_force_host_platform_device_count=2",
            )
        )
        for k in ("warm_call", "first_call", "peak_rss_mb"):
            add_csv("predict_devices", k, r[k])
    r = results.get("predict_mixed")
    if r and "_error" not in r:
        rows.append(
            (
                f"Prediction, {r['draws']:,} draws × {r['points']:,} test points, 3-D inputs, M = {r['M']} "
                f"on a grid (cond(K_uu) {r['cond_Kuu_range'][0]:.1e}–{r['cond_Kuu_range'][1]:.1e} over "
                "the draws), "
                '`precision="mixed"` against float64 (warm, median of 3 interleaved)',
                f"{r['warm_median_mixed']:.1f} s mixed, {r['warm_median_float64']:.1f} s float64",
                _met(r["warm_median_mixed"] <= TARGETS["predict_seconds"]) + " (mixed)",
                f"mixed against float64: f_var within {r['var_rel_error_max']:.1e} relative, f_mean within "
                f"{r['mean_error_in_sd_max']:.1e} of √f_var; N = {r['N']:,}",
            )
        )
        for k in ("warm_median_mixed", "warm_median_float64", "var_rel_error_max", "mean_error_in_sd_max"):
            add_csv("predict_mixed", k, r[k])
    r = results.get("compile")
    if r and "_error" not in r:
        a, b = r["runs"][0], r["runs"][1]
        c = results.get("compile_new_process", {}).get("runs", [{}])[0]
        rows.append(
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
        for run in r["runs"] + ([c] if c else []):
            add_csv(
                "compile",
                f"process{run.get('process', 2)}_seed{run.get('seed')}_compile",
                run.get("fit_compile"),
                "s",
            )
    r = results.get("sharded")
    if r and "_error" not in r:
        rows.append(
            (
                f"Sharded over {r['devices']} simulated CPU devices (N = {r['N']:,}, M = {r['M']}): "
                "equals single-device to 1e-10 (tests/gp/test_parallel.py: N = 4,000, 4,001, 200,001)",
                f"log density {r['value_rel_diff']:.1e} relative; gradient "
                f"{max(r['grad_rel_diff'].values()):.1e}",
                _met(r["max_rel_diff"] <= 1e-10),
                f"sums added in a fixed block order on any device count; for comparison, another chunk "
                f"length on one device (another summation order) moves the gradient by "
                f"{max(r['grad_rel_diff_other_chunk_size'].values()):.1e}: the gradient is ill-conditioned. "
                f"Time per gradient {_fmt(r['times']['sharded']['min'])} s sharded vs "
                f"{_fmt(r['times']['single']['min'])} s on one device ({r['speedup']:.2f}×)",
            )
        )
        add_csv("sharded", "speedup", r["speedup"], "x")
        add_csv("sharded", "max_rel_diff", r["max_rel_diff"])

    lines += ["## Issue 7 targets", "", "| target | measured | | notes |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    lines.append("")

    r = results.get("issue3")
    if r and "_error" not in r:
        lines += [
            "## sor and exact: time per gradient and ESS/s (issue 3)",
            "",
            "1-D, M = 64, one chain; ESS/s = smallest bulk ESS of lengthscale, variance, noise over "
            "the sampling time (warm-up + draws, compile excluded).",
            "",
            "| model | N | s / (log density + gradient) | ESS/s | bulk ESS | r_hat | compile s | sampling s |",  # noqa: E501
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in r["rows"]:
            lines.append(
                f"| {row['model']} | {row['N']:,} | {_fmt(row['s_per_grad'])} | "
                f"{_fmt(row.get('ess_per_s'))} | {_fmt(row.get('ess_bulk_min'))} | {_fmt(row.get('rhat_max'))} | "  # noqa: E501
                f"{_fmt(row.get('compile'))} | {_fmt(row.get('sampling'))} |"
            )
            add_csv("issue3", f"{row['model']}_N{row['N']}_s_per_grad", row["s_per_grad"], "s")
            if "ess_per_s" in row:
                add_csv("issue3", f"{row['model']}_N{row['N']}_ess_per_s", row["ess_per_s"], "1/s")
        lines.append("| exact | 100,000 | n/a: K_ff alone is 80 GB | | | | | |")
        lines.append("")
    r = results.get("floor")
    if r and "_error" not in r:
        lines += [
            f"## Near the floor: N = {r['N']:,}, M = {r['M']} (seconds, min over interleaved repeats)",
            "",
            "| what | s | × floor |",
            "|---|---|---|",
        ]
        names = {
            "floor_materialised": "floor: K_fu and K_uf K_fu, materialised",
            "floor_streamed": f"floor: the same, streamed in chunks of {r['chunk']}",
            "sor": "sor log density + gradient (streamed, whitened: the default)",
            "sor_fast": "the same, summed before whitening (`ModelConfig(fast=True)`)",
            "sor_previous": "before this work: triangular solve on all N columns, autodiff",
        }
        for k, v in r["times"].items():
            lines.append(f"| {names[k]} | {_fmt(v['min'])} | {v['min'] / r['floor']:.2f} |")
        lines.append("")
    r = results.get("accuracy")
    if r and "_error" not in r:
        lines += [
            "## Why whitened: |log p − long-double log p|",
            "",
            "| N | M | σ | cond(K_uu + jitter) | log p | whitened, streamed (default) | triangular solve | summed before whitening |",  # noqa: E501
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in r["rows"]:
            lines.append(
                f"| {row['N']:,} | {row['M']} | {row['noise']} | {row['cond_Kuu']:.1e} | {row['log_p']:.1f} | "  # noqa: E501
                f"{_fmt(row['streamed_whitened'])} | {_fmt(row['trsm_whitened'])} | {_fmt(row['streamed_fast'])} |"  # noqa: E501
            )
            add_csv("accuracy", f"whitened_sigma{row['noise']}", row["streamed_whitened"])
            add_csv("accuracy", f"fast_sigma{row['noise']}", row["streamed_fast"])
        lines.append("")
    r = results.get("scaling")
    if r and "_error" not in r:
        lines += [
            f"## Scaling in N (M = {r['rows'][0]['M']}); fitted exponent {r['exponent']:.3f}",
            "",
            "| N | s / gradient | floor s | × floor |",
            "|---|---|---|---|",
        ]
        for row in r["rows"]:
            lines.append(
                f"| {row['N']:,} | {_fmt(row['sor'])} | {_fmt(row['floor'])} | {row['sor'] / row['floor']:.2f} |"  # noqa: E501
            )
        lines += ["", "![scaling](scaling.png)", ""]
    errors = {k: v["_error"] for k, v in results.items() if isinstance(v, dict) and "_error" in v}
    if errors:
        lines += ["## Sections that failed", ""]
        lines += [
            f"- {k}: `{v.strip().splitlines()[-1] if v.strip() else 'error'}`" for k, v in errors.items()
        ]
    (outdir / "results.md").write_text("\n".join(lines) + "\n")
    with open(outdir / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["section", "name", "value", "unit"])
        w.writeheader()
        w.writerows(csv_rows)


def _plot(r, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    N = np.array([row["N"] for row in r["rows"]], dtype=float)
    t = np.array([row["sor"] for row in r["rows"]])
    f = np.array([row["floor"] for row in r["rows"]])
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(N, t, "o-", label=f"sor log density + gradient (slope {r['exponent']:.2f})")
    ax.loglog(N, f, "s--", label=f"floor: K_fu and K_uf K_fu (slope {r['floor_exponent']:.2f})")
    ax.loglog(N, t[0] * N / N[0], "k:", label="linear reference (slope 1)")
    ax.set_xlabel("N (data points)")
    ax.set_ylabel("seconds per evaluation")
    ax.set_title(f"SoR, M = {r['rows'][0]['M']}, 1-D, float64")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: several minutes, mostly compiling")
    ap.add_argument("--out", default=None, help="output folder (default benchmarks/results[-quick])")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--scale", default="full", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument(
        "--cache-dir", default=None, help="persistent compilation cache (default: a fresh temporary one)"
    )
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.scale, args.json, args.cache_dir)
    scale = "quick" if args.quick else "full"
    outdir = Path(args.out or HERE / ("results-quick" if args.quick else "results"))
    outdir.mkdir(parents=True, exist_ok=True)
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    results = {}
    previous = outdir / "results.json"
    if previous.exists() and set(sections) != set(SECTIONS):
        results = json.loads(previous.read_text())  # update some sections, keep the others
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or str(Path(tmp) / "jax-cache")
        for section in sections:
            t0 = time.perf_counter()
            env = {}
            if section in ("sharded", "predict_devices"):
                cfg = (QUICK if args.quick else FULL)[section]
                env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={cfg['devices']}"}
            if section == "compile":
                ccache = str(Path(tmp) / "compile-cache")
                results[section] = _run_section(section, scale, tmp, ccache)
                results["compile_new_process"] = _run_section(section, scale, tmp, ccache, tag="compile2")
                for run in results["compile_new_process"].get("runs", []):
                    run["process"] = 2
            else:
                results[section] = _run_section(section, scale, tmp, cache, env)
            status = "failed" if "_error" in results[section] else "done"
            print(
                f"[{time.strftime('%H:%M:%S')}] {section}: {status} in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            previous.write_text(json.dumps(results, indent=1, default=float))
            write_report(results, outdir, scale)
    print(f"wrote {outdir / 'results.md'}, results.csv, scaling.png")


if __name__ == "__main__":
    main()
