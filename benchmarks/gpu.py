"""The GPU measurements, on whatever device ``--device`` names.

1. ``grad``: value + gradient of the SoR log marginal likelihood in (ℓ, s², σ) at N = 10⁶, M = 256,
   float64 and ``precision="mixed"`` (jitted, data as arguments; the minimum and median of interleaved
   repeats after a warm call; mixed's error against float64).
2. ``chain``: one NUTS chain of 500 warm-up + 500 draws at N = 10⁶, M = 64 through ``bayes_rbfn.fit`` at
   its defaults, once per start in ``--inits`` (default ``auto``, fit's own default, which starts at the
   mode from 10⁴ points; ``median`` adds the prior-median start); wall time with compilation included,
   the minimum bulk ESS over the hyperparameters and r_hat of the chain's two halves.
3. ``predict``: ``bayes_rbfn.predict`` of 4,000 posterior draws at 10,000 test points (N = 2,000, M = 64,
   as the CPU target of benchmarks/run.py's ``predict`` section): first call (compiling) and a warm call.

    python benchmarks/gpu.py --device gpu                  # everything, on the GPU
    python benchmarks/gpu.py --device cpu --quick          # small sizes, to check it runs
    python benchmarks/gpu.py --device gpu --sections grad,predict
    python benchmarks/gpu.py --device gpu --sections chain --inits auto,median

Writes ``--out``/gpu.json and gpu.md (default benchmarks/results/gpu/) and prints the table. Nothing here is
CPU-specific: the same code runs on either device; only JAX_PLATFORMS differs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

SECTIONS = ("grad", "predict", "chain")
#: The precisions of the streamed pass the ``grad`` section compares (``ModelConfig.precision``).
PRECISIONS = ("float64", "mixed")
FULL = {
    "grad": {"N": 1_000_000, "M": 256, "repeats": 7},
    "chain": {"N": 1_000_000, "M": 64, "warmup": 500, "draws": 500},
    "predict": {"N": 2_000, "M": 64, "draws": 4_000, "points": 10_000},
}
QUICK = {
    "grad": {"N": 20_000, "M": 64, "repeats": 3},
    "chain": {"N": 5_000, "M": 32, "warmup": 50, "draws": 50},
    "predict": {"N": 500, "M": 32, "draws": 400, "points": 1_000},
}


def _data(N: int, D: int = 1, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (N, D))
    f = np.sin(1.3 * X[:, 0]) + 0.5 * np.cos(0.45 * X[:, 0]) + 0.2 * X[:, 0]
    return X, f + 0.3 * rng.standard_normal(N)


def section_grad(cfg: dict) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bayes_rbfn.models import ModelConfig
    from bayes_rbfn.models import sor as sor_model
    from bayes_rbfn.models.families import FAMILIES

    N, M = cfg["N"], cfg["M"]
    X, y = _data(N)
    Z = np.quantile(X[:, 0], (np.arange(M) + 0.5) / M)[:, None]
    data = {"X": jnp.asarray(X), "y": jnp.asarray(y), "Z": jnp.asarray(Z), "y_offset": jnp.asarray(y.mean())}
    params = {"lengthscale": jnp.asarray(1.0), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}
    grads, first, values = {}, {}, {}
    for precision in PRECISIONS:
        config = ModelConfig(family=FAMILIES["se"], priors={}, precision=precision)
        grads[precision] = jax.jit(
            jax.value_and_grad(lambda p, d, config=config: sor_model.log_density(p, d, config))
        )
        t0 = time.perf_counter()
        values[precision] = jax.block_until_ready(grads[precision](params, data))
        first[precision] = time.perf_counter() - t0
    times = {precision: [] for precision in PRECISIONS}
    for _ in range(cfg["repeats"]):  # interleaved, so that both see the same state of the device
        for precision in PRECISIONS:
            t0 = time.perf_counter()
            jax.block_until_ready(grads[precision](params, data))
            times[precision].append(time.perf_counter() - t0)
    # The errors mixed_precision.py reports, measured the same way.
    from mixed_precision import errors_against_float64

    out = {"N": N, "M": M, "dtype": str(data["X"].dtype)}
    for precision in PRECISIONS:
        errors = errors_against_float64(values["float64"], values[precision], params)
        out[precision] = {
            "first_call_s": first[precision],
            "min_s": min(times[precision]),
            "median_s": statistics.median(times[precision]),
            "value": float(values[precision][0]),
            "value_rel_error": errors["value_rel_error"],
            # of the gradient in the log-hyperparameters, relative to its norm (as mixed_precision.py)
            "grad_rel_error": errors["grad_rel_error"],
            "grad_worst_component_rel_error": errors["grad_worst_component_rel_error"],
            "finite": errors["finite"],
        }
    return out


def _diagnostics(idata) -> dict:
    import arviz as az
    import numpy as np

    names = [n for n in ("lengthscale", "variance", "noise") if n in idata.posterior]
    ess = az.ess(idata, var_names=names, method="bulk")
    rhat = []
    for n in names:
        v = np.asarray(idata.posterior[n].values).reshape(1, idata.posterior.sizes["draw"], -1)
        half = v.shape[1] // 2
        halves = np.concatenate([v[:, :half], v[:, half : 2 * half]], axis=0)
        rhat += [float(az.rhat(halves[..., j])) for j in range(halves.shape[-1])]
    return {
        "ess_bulk_min": float(min(np.min(ess[n].values) for n in names)),
        "rhat_halves_max": max(rhat),
        "divergences": int(idata.sample_stats["diverging"].values.sum()),
        "mean_steps": float(idata.sample_stats["n_steps"].values.mean()),
        "posterior_mean": {n: float(idata.posterior[n].mean()) for n in names},
    }


def section_chain(cfg: dict) -> dict:
    import numpy as np

    from bayes_rbfn import fit

    X, y = _data(cfg["N"], seed=11)
    rows = {}
    for init in cfg["inits"]:
        t0 = time.perf_counter()
        idata = fit(
            "sor",
            X,
            y,
            num_inducing=cfg["M"],
            chains=1,
            warmup=cfg["warmup"],
            draws=cfg["draws"],
            init=init,
            X_pred=np.linspace(0.0, 10.0, 200)[:, None],
            progress=False,
            check_diagnostics=False,
        )
        wall = time.perf_counter() - t0
        d = _diagnostics(idata)
        rows[init] = {"wall_s": wall, **d, "ess_per_s": d["ess_bulk_min"] / wall}
    return {k: cfg[k] for k in ("N", "M", "warmup", "draws")} | {"runs": rows}


def section_predict(cfg: dict) -> dict:
    import arviz as az
    import numpy as np

    from bayes_rbfn import fit, predict

    X, y = _data(cfg["N"], seed=8)
    idata = fit(
        "sor",
        X,
        y,
        num_inducing=cfg["M"],
        chains=1,
        warmup=200,
        draws=200,
        progress=False,
        check_diagnostics=False,
        X_pred=X[:10],
        log_likelihood=False,
    )
    pick = np.random.default_rng(0).integers(0, 200, cfg["draws"])
    post = {
        k: idata.posterior[k].values.reshape(-1, *idata.posterior[k].shape[2:])[pick][None]
        for k in idata.posterior.data_vars
    }
    big = az.from_dict(
        posterior=post,
        observed_data={"y": y},
        constant_data={k: idata.constant_data[k].values for k in idata.constant_data.data_vars},
    )
    big.posterior.attrs.update(idata.posterior.attrs)
    X_test = np.linspace(-1.0, 11.0, cfg["points"])[:, None]
    t0 = time.perf_counter()
    first = predict(big, X_test)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    predict(big, X_test)
    warm_s = time.perf_counter() - t0
    return {
        **cfg,
        "first_call_s": first_s,
        "warm_call_s": warm_s,
        "finite": bool(np.all(np.isfinite(first.mean))),
    }


def _table(results: dict) -> str:
    lines = [f"device: {results['device']}; JAX {results['jax']}; float64 unless stated", ""]
    lines += ["| measurement | setting | time | notes |", "|---|---|---|---|"]
    if "grad" in results:
        g = results["grad"]
        for precision in PRECISIONS:
            r = g[precision]
            lines.append(
                f"| value + gradient, SoR log marginal | N = {g['N']:,}, M = {g['M']}, {precision} | "
                f"{r['min_s'] * 1e3:.2f} ms (median {r['median_s'] * 1e3:.2f}) | "
                f"first call {r['first_call_s']:.1f} s; against float64: value {r['value_rel_error']:.1e}, "
                f"gradient {r['grad_rel_error']:.1e} (relative) |"
            )
    if "chain" in results:
        c = results["chain"]
        for init, r in c["runs"].items():
            lines.append(
                f"| one chain, fit('sor'), init={init} | N = {c['N']:,}, M = {c['M']}, {c['warmup']} + "
                f"{c['draws']} | {r['wall_s']:.1f} s (compile included) | "
                f"bulk ESS ≥ {r['ess_bulk_min']:.0f}, "
                f"r_hat(halves) ≤ {r['rhat_halves_max']:.3f}, {r['divergences']} divergent, "
                f"{r['mean_steps']:.1f} steps/draw, {r['ess_per_s']:.2f} ESS/s |"
            )
    if "predict" in results:
        p = results["predict"]
        lines.append(
            f"| predict | {p['draws']:,} draws × {p['points']:,} points (N = {p['N']:,}, M = {p['M']}) | "
            f"{p['warm_call_s']:.2f} s warm | first call {p['first_call_s']:.1f} s (compiling) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="small sizes (a check that it runs)")
    ap.add_argument(
        "--inits", default="auto", help="the chain section's starts, comma-separated (fit's init values)"
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "gpu"))
    args = ap.parse_args(argv)
    os.environ["JAX_PLATFORMS"] = "cuda" if args.device == "gpu" else "cpu"
    import jax

    from bayes_rbfn import runtime

    runtime.enable_x64()
    try:
        devices = jax.devices()
    except RuntimeError as err:
        sys.exit(f"--device {args.device}: JAX finds no such device ({err})")
    runtime.limit_blas_threads()  # a no-op off the CPU
    sizes = dict(QUICK if args.quick else FULL)  # a copy: the module's tables stay as written
    sizes["chain"] = {**sizes["chain"], "inits": [i for i in args.inits.split(",") if i]}
    results = {"device": ", ".join(str(d) for d in devices), "jax": jax.__version__, "quick": args.quick}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for section in [s for s in args.sections.split(",") if s]:
        print(f"[{section}] ...", flush=True)
        results[section] = globals()[f"section_{section}"](sizes[section])
        print(json.dumps(results[section], indent=1), flush=True)
        (out / "gpu.json").write_text(json.dumps(results, indent=1))  # kept section by section
        (out / "gpu.md").write_text(_table(results) + "\n")
    print(_table(results))


if __name__ == "__main__":
    main()
