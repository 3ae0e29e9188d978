"""Helpers shared by the benchmark sections: setup of a worker process, the test problem, timing, NUTS runs
and their diagnostics, and the pieces of the report (number formatting, the ``Report`` collector).

Timings of compiled functions (:func:`_interleaved`) are the minimum over interleaved repeats, so that a
burst of other work on the machine slows every variant alike; NUTS runs (:func:`_nuts`) separate compile
time (tracing, lowering and XLA compilation, from JAX's monitoring events: :class:`CompileClock`) from
sampling time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


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


# --------------------------------------------------------------------------------------------------
# Report


class Report:
    """What the sections' report functions add to: the rows of the targets table of ``results.md``
    (``(target, measured, met, notes)``) and the rows of ``results.csv``; ``results`` (every section's
    result, by name) and ``outdir`` (where the files go) for the sections that need them."""

    def __init__(self, results: dict, outdir: Path):
        self.results = results
        self.outdir = outdir
        self.rows = []  # (target, measured, met, notes) for the summary table
        self.csv_rows = []

    def add_csv(self, section, name, value, unit=""):
        self.csv_rows.append({"section": section, "name": name, "value": value, "unit": unit})


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
