"""ESS per second: ``bayes_rbfn.fit("sor")`` against the SoR model a NumPyro user writes by hand.

For each N in ``--sizes`` and D in ``--dims`` (synthetic smooth function of D inputs plus noise, fixed seed;
M = 32 inducing inputs at N ≤ 1,000, else 64; Z = ``select_inducing(X, M, seed=0)`` for every sampler,
which is also what fit would choose itself), one chain of ``--warmup`` + ``--draws`` iterations each of

* ``bayes_rbfn``: ``fit("sor", X, y, Z=Z, chains=1, draws=…, warmup=…, seed=r, progress=False)`` — fit at
  its defaults, so its wall time also holds what fit does after sampling (per-draw predictive moments at X,
  LOO log-likelihood, posterior-predictive replicates, diagnostics; ``--lean-fit`` turns those off);
* ``reference``: ``NUTS(sor_model)`` of ``benchmarks/reference_sor.py`` (same priors, mean, kernel and
  jitter; NumPyro's default NUTS settings; ``MCMC.run``);
* ``pymc``: at N in ``--pymc-sizes`` (default 1,000), ``pm.gp.MarginalApprox(approx="DTC")`` on the same
  data, Z and priors, when ``import pymc`` works (PyMC is not installed by this script).

The samplers run interleaved, ``--repeats`` times (the first sampler alternating between repeats). Each
run is timed wall-clock from the call to the returned draws, compilation included. In one process
(the default) a repeat after the first may reuse compiled programs JAX keeps in memory — fit compiles
its sampler once per shape, a new ``MCMC`` object retraces — and the "XLA compile s" column (XLA's
compile durations during the run; tracing and lowering are in the JSON) shows how much each run
compiled. ``--fresh-process`` runs every sampler and repeat in its own Python process (this script with
the hidden ``--one`` flag, which prints one JSON line; the time is taken inside it, so importing JAX is
not counted), so every run pays its compile. JAX's persistent compilation cache is off in both modes,
unless ``--cache DIR`` turns it on in that folder for every run (both samplers): with ``--fresh-process``
that is each user's second run of a script, whose programs a new process finds there.

Reported per row (medians over the repeats): wall s, XLA compile s, minimum bulk ESS over the hyperparameters
(every lengthscale, variance, noise), ESS/s, gradient evaluations in the kept draws (the sum of NUTS's
``num_steps``: one gradient per leapfrog step; warm-up not counted), ESS per 1,000 of them, and ESS/s and
ESS per gradient relative to the reference. Writes ``<out>/ess_vs_numpyro.md`` and ``.json`` (default
``benchmarks/results/ess_vs_numpyro/``) and prints the table.

    python benchmarks/ess_vs_numpyro.py [--sizes 1000,10000,100000] [--dims 1,3] [--repeats 3]
        [--first-repeat 0] [--draws 500] [--warmup 500] [--device cpu|gpu] [--fresh-process] [--lean-fit]
        [--cache DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np

HERE = Path(__file__).resolve().parent
SAMPLERS = ("bayes_rbfn", "reference", "pymc")
LABELS = {
    "bayes_rbfn": 'bayes_rbfn `fit("sor")`',
    "reference": "NumPyro reference (`reference_sor.py`)",
    "pymc": 'PyMC `MarginalApprox(approx="DTC")`',
}
HYPERPARAMETERS = ("lengthscale", "variance", "noise")
PLATFORMS = {"cpu": "cpu", "gpu": "cuda"}


def default_M(N: int) -> int:
    """Inducing inputs of the benchmark: 32 at N ≤ 1,000, else 64."""
    return 32 if N <= 1000 else 64


def make_data(N: int, D: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """X ~ U[0, 10]^D and y = f(X) + N(0, 0.2²), f smooth in every input; the same for every sampler."""
    gen = np.random.default_rng([seed, N, D])
    X = gen.uniform(0.0, 10.0, size=(N, D))
    f = np.sin(X[:, 0]) + 0.3 * np.cos(3.0 * X[:, 0])
    for d in range(1, D):
        f = f + 0.5 * np.sin(0.5 * X[:, d] + d)
    return X, f + 0.2 * gen.standard_normal(N)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(float(v)) for v in s.split(",") if v.strip()]  # noqa: E731  ("1e5" accepted)
    ap.add_argument("--sizes", type=ints, default=[1000, 10000, 100000], help="N values, comma-separated")
    ap.add_argument("--dims", type=ints, default=[1, 3], help="input dimensions D, comma-separated")
    ap.add_argument("--M", type=int, default=None, help="inducing inputs for every N (default 32/64/64)")
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--first-repeat",
        type=int,
        default=0,
        help="number of the first repeat (its seed, and which sampler goes first): continues a stopped run",
    )
    ap.add_argument("--pymc-sizes", type=ints, default=[1000], help="N values with a PyMC row")
    ap.add_argument("--device", choices=sorted(PLATFORMS), default="cpu", help="JAX_PLATFORMS: cpu or cuda")
    ap.add_argument("--fresh-process", action="store_true", help="every run in its own Python process")
    ap.add_argument(
        "--lean-fit",
        action="store_true",
        help="fit without its post-sampling outputs (log_likelihood, posterior_predictive, predictions at X)",
    )
    ap.add_argument(
        "--cache", default=None, help="JAX's persistent compilation cache in this folder (default: off)"
    )
    ap.add_argument("--out", default=str(HERE / "results" / "ess_vs_numpyro"))
    # One run, JSON on the last line of stdout: what --fresh-process starts.
    ap.add_argument("--one", choices=SAMPLERS, help=argparse.SUPPRESS)
    ap.add_argument("--N", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--D", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def start_jax(device: str, cache: str | None = None):
    """Select the platform before JAX starts, fail clearly when it is not there, then float64 and the BLAS
    limit (the latter on the CPU only); the persistent compilation cache is turned off, or on in ``cache``."""
    os.environ["JAX_PLATFORMS"] = PLATFORMS[device]
    import jax

    try:
        devices = jax.devices()
    except Exception as err:  # RuntimeError, or (JAX 0.9, no CUDA plugin installed) a bare AssertionError
        raise SystemExit(
            f"--device {device}: JAX cannot start the {PLATFORMS[device]!r} platform "
            f"({type(err).__name__}: {str(err) or 'no backend'}). "
            + (
                "Install JAX's CUDA wheel (pip install -U 'jax[cuda12]') on a machine with an NVIDIA GPU."
                if device == "gpu"
                else ""
            )
        ) from None
    want = "gpu" if device == "gpu" else "cpu"
    if not devices or devices[0].platform != want:
        raise SystemExit(f"--device {device}: JAX's devices are {devices}, not {want}")
    from bayes_rbfn import runtime

    if cache:
        runtime.enable_compilation_cache(cache)
    else:
        jax.config.update("jax_enable_compilation_cache", False)

    runtime.enable_x64()
    runtime.limit_blas_threads()
    return jax


class CompileClock:
    """Seconds JAX has spent tracing, lowering and compiling with XLA (its monitoring events), by stage.

    XLA compilations do not nest, so ``xla`` is a clean sum; traces do (a jitted function traced inside
    another is reported by both), so ``trace`` can exceed the wall time it happened in.
    """

    EVENTS: ClassVar[dict[str, str]] = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "xla",
    }

    def __init__(self, jax):
        self.seconds = dict.fromkeys(self.EVENTS.values(), 0.0)

        def on_duration(event, duration, **_):
            if event in self.EVENTS:
                self.seconds[self.EVENTS[event]] += duration

        jax.monitoring.register_event_duration_secs_listener(on_duration)


def min_bulk_ess(posterior: dict) -> float:
    """Smallest bulk ESS over every hyperparameter component; ``posterior``: name → (chain, draw, …)."""
    import arviz as az

    ess = az.ess(az.convert_to_dataset({k: np.asarray(posterior[k]) for k in HYPERPARAMETERS}), method="bulk")
    return float(min(np.min(ess[k].values) for k in HYPERPARAMETERS))


def run_bayes_rbfn(X, y, Z, priors, args, seed):
    import bayes_rbfn as br

    options = {}
    if args.lean_fit:
        options = dict(log_likelihood=False, posterior_predictive=0, X_pred=X[:1], check_diagnostics=False)
    t0 = time.perf_counter()
    idata = br.fit(
        "sor", X, y, Z=Z, chains=1, draws=args.draws, warmup=args.warmup, seed=seed, progress=False, **options
    )
    wall = time.perf_counter() - t0
    posterior = {k: idata.posterior[k].values for k in HYPERPARAMETERS}
    stats = idata.sample_stats
    return wall, posterior, int(stats["n_steps"].values.sum()), int(stats["diverging"].values.sum())


def run_reference(X, y, Z, priors, args, seed):
    import jax
    import reference_sor

    t0 = time.perf_counter()
    mcmc = reference_sor.run(X, y, Z, priors, warmup=args.warmup, draws=args.draws, seed=seed)
    samples = jax.block_until_ready(mcmc.get_samples())
    wall = time.perf_counter() - t0
    extra = mcmc.get_extra_fields()
    posterior = {k: np.asarray(samples[k])[None] for k in HYPERPARAMETERS}
    return wall, posterior, int(np.sum(extra["num_steps"])), int(np.sum(extra["diverging"]))


def run_pymc(X, y, Z, priors, args, seed):
    """PyMC's DTC marginal (its training marginal is SoR's) with the same data, Z, priors and constant mean.

    As far as PyMC allows: its K_uu jitter is absolute (``jitter=1e-6``, its default) rather than 1e-8 · s²,
    and it runs its own NUTS defaults (``init="jitter+adapt_diag"``).
    """
    import pymc as pm

    D = X.shape[1]

    def lognormal(name, **shape):
        prior = priors[name]
        prior = getattr(prior, "base_dist", prior)  # the ARD lengthscale prior is .to_event(1)
        return pm.LogNormal(name, mu=np.asarray(prior.loc), sigma=float(np.asarray(prior.scale)), **shape)

    with pm.Model():
        ell = lognormal("lengthscale", **({"shape": D} if D > 1 else {}))
        variance, noise = lognormal("variance"), lognormal("noise")
        gp = pm.gp.MarginalApprox(
            mean_func=pm.gp.mean.Constant(float(np.mean(y))),
            cov_func=variance * pm.gp.cov.ExpQuad(D, ls=ell),
            approx="DTC",
        )
        gp.marginal_likelihood("y", X=X, Xu=Z, y=y, sigma=noise)
        t0 = time.perf_counter()
        idata = pm.sample(
            draws=args.draws,
            tune=args.warmup,
            chains=1,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        wall = time.perf_counter() - t0
    posterior = {k: idata.posterior[k].values for k in HYPERPARAMETERS}
    stats = idata.sample_stats
    return wall, posterior, int(stats["n_steps"].values.sum()), int(stats["diverging"].values.sum())


RUNNERS = {"bayes_rbfn": run_bayes_rbfn, "reference": run_reference, "pymc": run_pymc}


def run_one(name: str, N: int, D: int, M: int, seed: int, args, clock) -> dict:
    """One timed run of one sampler; a dict of its figures, or of ``skipped`` / ``error``."""
    if name == "pymc":
        try:
            import pymc  # noqa: F401
        except ImportError:
            return {"skipped": "PyMC not installed"}
    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.models.families import data_scales, get_family

    X, y = make_data(N, D)
    Z = np.asarray(select_inducing(X, M, seed=0))
    priors = get_family("se").default_priors(data_scales(X, y))
    compiled_before = dict(clock.seconds)
    load = os.getloadavg()[0]
    caught = []

    def show(message, category, filename, lineno, file=None, line=None):
        """Keep the warning for the record and print it now: a run that never ends (a fallback to the
        median start at 10⁵ points) still says why."""
        caught.append(warnings.WarningMessage(message, category, filename, lineno))
        print(f"N={N:,} D={D} {name}: {category.__name__}: {str(message)[:300]}", file=sys.stderr, flush=True)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            wall, posterior, gradients, divergences = RUNNERS[name](X, y, Z, priors, args, seed)
    except Exception as err:  # a failed run (memory, a backend error) is reported, the benchmark goes on
        return {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=5)}
    ess = min_bulk_ess(posterior)
    return {
        "wall_s": wall,
        "compile_s": clock.seconds["xla"] - compiled_before["xla"],
        "trace_s": clock.seconds["trace"] - compiled_before["trace"],
        "lower_s": clock.seconds["lower"] - compiled_before["lower"],
        "ess_bulk_min": ess,
        "ess_per_s": ess / wall,
        "gradients": gradients,
        "ess_per_1000_gradients": 1000.0 * ess / gradients if gradients else float("nan"),
        "divergences": divergences,
        "load_1min_before": load,
        "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught}),
    }


def spawn_one(name: str, N: int, D: int, M: int, seed: int, args) -> dict:
    """``run_one`` in a new Python process (this script with ``--one``), so its compile is always paid."""
    command = [sys.executable, str(Path(__file__).resolve()), "--one", name, "--N", str(N), "--D", str(D)]
    command += ["--M", str(M), "--seed", str(seed), "--draws", str(args.draws), "--warmup", str(args.warmup)]
    command += ["--device", args.device] + (["--lean-fit"] if args.lean_fit else [])
    command += ["--cache", args.cache] if args.cache else []
    done = subprocess.run(command, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"subprocess exited {done.returncode}", "stderr_tail": done.stderr[-2000:]}
    return json.loads(lines[-1])


def summarise(runs: list[dict]) -> dict:
    ok = [r for r in runs if "wall_s" in r]
    if not ok:
        first = runs[0] if runs else {"error": "no runs"}
        return {"skipped": first["skipped"]} if "skipped" in first else {"error": first.get("error", "")}
    keys = ("wall_s", "compile_s", "ess_bulk_min", "ess_per_s", "gradients", "ess_per_1000_gradients")
    summary = {f"{k}_median": statistics.median(r[k] for r in ok) for k in keys}
    summary["divergences_median"] = statistics.median(r["divergences"] for r in ok)
    summary["runs_ok"] = len(ok)
    summary["runs_failed"] = len(runs) - len(ok)
    return summary


def _fmt(value: float, digits: int = 3) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def table(results: list[dict]) -> list[str]:
    lines = [
        "| N | D | M | sampler | wall s (incl. compile) | XLA compile s | min bulk ESS | ESS/s | gradients "
        "(kept draws) | ESS per 1,000 gradients | ESS/s ÷ reference | ESS per gradient ÷ reference |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        ref = row["samplers"].get("reference", {})
        for name, s in row["samplers"].items():
            head = f"| {row['N']:,} | {row['D']} | {row['M']} | {LABELS[name]} |"
            if "skipped" in s or "error" in s:
                why = f"skipped ({s['skipped']})" if "skipped" in s else f"failed: {s['error'][:120]}"
                lines.append(f"{head} {why} | | | | | | | |")
                continue
            if "ess_per_s_median" in ref:
                speed = _fmt(s["ess_per_s_median"] / ref["ess_per_s_median"])
                per_grad = _fmt(s["ess_per_1000_gradients_median"] / ref["ess_per_1000_gradients_median"])
            else:
                speed = per_grad = "n/a"
            lines.append(
                f"{head} {_fmt(s['wall_s_median'])} | {_fmt(s['compile_s_median'])} | "
                f"{_fmt(s['ess_bulk_min_median'])} | {_fmt(s['ess_per_s_median'])} | "
                f"{s['gradients_median']:,.0f} | {_fmt(s['ess_per_1000_gradients_median'])} | "
                f"{speed} | {per_grad} |"
            )
    return lines


def notes(args, meta: dict) -> list[str]:
    mode = (
        "each run in its own Python process (`--fresh-process`)"
        + ("" if args.cache else ": every run pays its compile")
        if args.fresh_process
        else "all runs in one process: a repeat after the first may reuse programs JAX compiled earlier in "
        "the process (fit compiles its sampler once per shape; a new NumPyro `MCMC` retraces) — the XLA "
        "compile column shows what each run compiled (tracing and lowering, also paid, are in the JSON); "
        "`--fresh-process` makes every run pay its compile"
    )
    fit_outputs = (
        "fit ran with `--lean-fit` (no log_likelihood, posterior_predictive or predictions at X)"
        if args.lean_fit
        else "fit ran at its defaults, so its wall time also holds its post-sampling outputs (predictive "
        "moments at X, LOO log-likelihood, posterior-predictive replicates, diagnostics), which the "
        "reference does not compute"
    )
    return [
        f"- One chain of {args.warmup} warm-up + {args.draws} draws per run; medians over {args.repeats} "
        f"interleaved repeat{'s' if args.repeats != 1 else ''} (the first sampler alternating); ratios are "
        "of the medians.",
        f"- Wall time from the call to the returned draws, compilation included; {mode}. JAX's persistent "
        + (
            "compilation cache is on (`--cache`), shared by every run and filled before them: a run "
            "compiles only what it does not find there."
            if args.cache
            else "compilation cache is off."
        ),
        f"- {fit_outputs}.",
        "- Gradients: NUTS leapfrog steps (`num_steps` / `n_steps`) summed over the kept draws; warm-up "
        "gradients are not counted. Min bulk ESS: over every lengthscale component, the variance and the "
        "noise.",
        '- Starts: fit from its default (`init="auto"`: the prior median below 10⁴ data points, the '
        "posterior mode with a Laplace mass matrix from 10⁴ on); the reference with NumPyro's "
        "default `init_to_uniform`; fit with its default mass matrix (`dense_mass=None`: dense for these "
        "3–5 sampled values), the reference with NumPyro's (diagonal); both target acceptance 0.8, tree "
        "depth 10.",
        "- PyMC (where it ran): its K_uu jitter is absolute (1e-6) rather than 1e-8 · s², its own NUTS "
        "initialisation (`jitter+adapt_diag`).",
        f"- Devices: {', '.join(meta['devices'])}; 1-minute load average {meta['load_1min_start']:.2f} at "
        f"the start, {meta['load_1min_end']:.2f} at the end (other work on the machine slows every absolute "
        "time).",
    ]


def main(argv=None) -> None:
    args = parse_args(argv)
    jax = start_jax(args.device, args.cache)
    clock = CompileClock(jax)
    sys.path.insert(0, str(HERE))  # reference_sor, beside this script

    if args.one:  # a child of --fresh-process
        M = args.M or default_M(args.N)
        print(json.dumps(run_one(args.one, args.N, args.D, M, args.seed, args, clock)), flush=True)
        return

    import numpyro

    meta = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "devices": [f"{d} ({d.device_kind})" for d in jax.devices()],
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "load_1min_start": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
    }
    settings = {
        k: getattr(args, k)
        for k in ("sizes", "dims", "M", "draws", "warmup", "repeats", "first_repeat", "pymc_sizes")
    }
    settings.update(
        device=args.device, fresh_process=args.fresh_process, lean_fit=args.lean_fit, cache=bool(args.cache)
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(results: list[dict], complete: bool) -> list[str]:
        """Both files, after every run: a long run that stops keeps what it measured."""
        meta["load_1min_end"] = os.getloadavg()[0]
        title = '# `fit("sor")` against a hand-written NumPyro SoR model: ESS per second'
        status = [] if complete else ["*Incomplete: the run is still going or stopped early.*", ""]
        lines = [title, "", *status, *table(results), "", *notes(args, meta)]
        record = {
            "settings": settings,
            "machine": meta,
            "complete": complete,
            "results": results,
            "notes": notes(args, meta),
        }
        (out / "ess_vs_numpyro.json").write_text(json.dumps(record, indent=1, default=float))
        (out / "ess_vs_numpyro.md").write_text("\n".join(lines) + "\n")
        return lines

    results = []
    for D in args.dims:
        for N in args.sizes:
            M = args.M or default_M(N)
            names = ["bayes_rbfn", "reference"] + (["pymc"] if N in args.pymc_sizes else [])
            runs = {name: [] for name in names}
            for r in range(args.first_repeat, args.first_repeat + args.repeats):
                order = names if r % 2 == 0 else [names[1], names[0], *names[2:]]
                for name in order:
                    if runs[name] and "skipped" in runs[name][0]:
                        continue
                    if args.fresh_process:
                        record = spawn_one(name, N, D, M, r, args)
                    else:
                        record = run_one(name, N, D, M, r, args, clock)
                    record["repeat"] = r
                    runs[name].append(record)
                    shown = {
                        k: record[k]
                        for k in ("wall_s", "compile_s", "ess_bulk_min", "gradients")
                        if k in record
                    }
                    status = record.get("skipped") or record.get("error") or shown
                    print(f"N={N:,} D={D} M={M} {name} repeat {r}: {status}", file=sys.stderr, flush=True)
                    # after every run: a stopped call (a device's time limit) keeps the runs it finished
                    summary = {name: summarise(runs[name]) for name in names if runs[name]}
                    write([*results, {"N": N, "D": D, "M": M, "samplers": summary, "runs": runs}], False)
            summary = {name: summarise(runs[name]) for name in names}
            results.append({"N": N, "D": D, "M": M, "samplers": summary, "runs": runs})
    lines = write(results, complete=True)
    with contextlib.suppress(BrokenPipeError):
        print("\n".join(lines))


if __name__ == "__main__":
    main()
