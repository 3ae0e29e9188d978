"""Mixed precision of the streamed O(NM²) pass: error and speed against float64.

``precision="mixed"`` (:mod:`bayes_rbfn.gp.woodbury_sums`, *Mixed precision*) forms each chunk's kernel
block and its products in float32 and adds them to float64 sums; the factorisations stay float64. For the
SoR log marginal likelihood (``bayes_rbfn.models.sor.log_density``) at M = 64 this measures, for each N:

* the error of the mixed log density against float64, relative and in nats (what NUTS's acceptance sees:
  its trajectories stay exact, volume-preserving and reversible, with any deterministic gradient, so the
  gradient's error costs efficiency while the value's biases the target), and of its gradient in
  (log ℓ, log s², log σ) (the norm of the difference over the norm, and the worst component, which can be
  a small difference of terms of size ~N);
* the warm time of one jitted value + gradient of each (median of interleaved repeats, data as
  arguments) and the speed-up.

Two problems: ``1-D`` is benchmarks/run.py's (64 inducing inputs at the quantiles of x ∈ [0, 10], ℓ = 1:
dense, cond(K_uu) ~ 1e9 at the jitter floor, the ill-conditioned case); ``3-D`` has x ∈ [0, 10]³ and the 64
inducing inputs on a 4×4×4 grid (2.5 lengthscales apart: cond(K_uu) ≈ 1). A sweep over the lengthscale at
N = 10⁴ then relates the error to cond(K_uu) in both layouts (where mixed precision stops being accurate).

    python benchmarks/mixed_precision.py                 # N = 10³ … 10⁵, CPU
    python benchmarks/mixed_precision.py --million       # and N = 10⁶
    python benchmarks/mixed_precision.py --device gpu --million

Writes ``--out``/mixed_precision_<device>.json and .md (default benchmarks/results/mixed_precision/) and
prints the table.
Other work on the machine slows every time down; the 1-minute load average is recorded with each row, and
the speed-ups (ratios of interleaved calls) are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NS = (1_000, 10_000, 100_000)
MILLION = 1_000_000
M = 64
REPEATS = 7
#: Lengthscales of the conditioning sweep (at N = 10⁴), per layout.
SWEEP = {"1-D": (0.05, 0.1, 0.2, 0.3, 0.5, 1.0), "3-D": (0.5, 1.0, 2.0, 3.0, 5.0, 8.0)}
SWEEP_N = 10_000


def _problem(N: int, D: int):
    """benchmarks/run.py's data (a smooth function of x₀ on [0, 10]ᴰ, σ = 0.3) with 64 inducing inputs:
    at the quantiles of x in 1-D (run.py's), on a 4×4×4 grid in 3-D."""
    import jax.numpy as jnp
    import numpy as np
    from run import _data

    X, y, _ = _data(N, 0, D)
    if D == 1:
        Z = np.quantile(X[:, 0], (np.arange(M) + 0.5) / M)[:, None]
    else:
        side = (np.arange(4) + 0.5) * 2.5
        Z = np.stack(np.meshgrid(side, side, side), -1).reshape(-1, 3)
    return {
        "X": jnp.asarray(X),
        "y": jnp.asarray(y),
        "Z": jnp.asarray(Z),
        "y_offset": jnp.asarray(float(y.mean())),
    }


def _params(lengthscale: float = 1.0):
    import jax.numpy as jnp

    return {"lengthscale": jnp.asarray(lengthscale), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}


def _cond_Kuu(Z, lengthscale: float) -> float:
    import numpy as np

    from bayes_rbfn.gp import kernels, linalg

    Kuu = np.asarray(linalg.add_jitter(kernels.SquaredExponential(lengthscale, 1.0)(Z, Z)))
    return float(np.linalg.cond(Kuu))


def errors_against_float64(f64, mixed, params) -> dict:
    """Relative errors of mixed against float64: value, gradient in the log-hyperparameters (norm, worst
    component)."""
    import numpy as np

    (v64, g64), (vm, gm) = f64, mixed
    names = sorted(g64)
    # ∂/∂log θ = θ ∂/∂θ
    a = np.array([float(g64[k]) * float(params[k]) for k in names])
    b = np.array([float(gm[k]) * float(params[k]) for k in names])
    return {
        "value": float(v64),
        "value_rel_error": abs(float(vm) - float(v64)) / abs(float(v64)),
        "value_abs_error": abs(float(vm) - float(v64)),
        "grad_log": dict(zip(names, a.tolist(), strict=True)),
        "grad_rel_error": float(np.linalg.norm(b - a) / np.linalg.norm(a)),
        "grad_abs_error": float(np.linalg.norm(b - a)),
        "grad_worst_component_rel_error": float(np.max(np.abs(b - a) / np.abs(a))),
        "finite": bool(np.isfinite(float(vm)) and np.all(np.isfinite(b))),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--million", action="store_true", help="also N = 10⁶")
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--no-sweep", action="store_true", help="skip the lengthscale (conditioning) sweep")
    ap.add_argument("--out", default=str(HERE / "results" / "mixed_precision"))
    args = ap.parse_args(argv)
    os.environ["JAX_PLATFORMS"] = "cuda" if args.device == "gpu" else "cpu"
    from run import _config, _grad_fn, _interleaved, _setup

    _setup(None)
    import jax

    from bayes_rbfn.models import sor

    try:
        devices = jax.devices()
    except RuntimeError as err:
        sys.exit(f"--device {args.device}: JAX finds no such device ({err})")
    grads = {p: _grad_fn(sor, _config(precision=p)) for p in ("float64", "mixed")}
    results = {
        "device": ", ".join(str(d) for d in devices),
        "jax": jax.__version__,
        "M": M,
        "repeats": args.repeats,
        "rows": [],
        "sweep": [],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"mixed_precision_{args.device}"

    def save():
        (out / f"{stem}.json").write_text(json.dumps(results, indent=1))
        (out / f"{stem}.md").write_text(_table(results) + "\n")

    params = _params()
    for N in (*NS, MILLION) if args.million else NS:
        for D in (1, 3):
            data = _problem(N, D)
            load0 = os.getloadavg()[0]
            t = _interleaved({p: (lambda g=g, d=data: g(params, d)) for p, g in grads.items()}, args.repeats)
            row = {
                "N": N,
                "layout": f"{D}-D",
                "cond_Kuu": _cond_Kuu(data["Z"], 1.0),
                **errors_against_float64(
                    grads["float64"](params, data), grads["mixed"](params, data), params
                ),
                "float64_median_s": t["float64"]["median"],
                "mixed_median_s": t["mixed"]["median"],
                "float64_min_s": t["float64"]["min"],
                "mixed_min_s": t["mixed"]["min"],
                "speedup_median": t["float64"]["median"] / t["mixed"]["median"],
                "load": [load0, os.getloadavg()[0]],
            }
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            save()
    if not args.no_sweep:
        for D in (1, 3):
            data = _problem(SWEEP_N, D)
            for ell in SWEEP[f"{D}-D"]:
                p = _params(ell)
                row = {
                    "N": SWEEP_N,
                    "layout": f"{D}-D",
                    "lengthscale": ell,
                    "cond_Kuu": _cond_Kuu(data["Z"], ell),
                    **errors_against_float64(grads["float64"](p, data), grads["mixed"](p, data), p),
                }
                results["sweep"].append(row)
                print(json.dumps(row), flush=True)
                save()
    save()
    print(_table(results))


def _table(results: dict) -> str:
    lines = [
        f"device: {results['device']}; JAX {results['jax']}; M = {results['M']}; SoR log marginal "
        f"likelihood, value + gradient in (ℓ, s², σ), jitted, warm; median of {results['repeats']} "
        "interleaved repeats. Errors: mixed against float64, relative (gradient in the log-hyperparameters: "
        "norm of the difference / norm, and the worst component). Times are indicative where other work "
        "shared the machine (load: the 1-minute load average); the speed-ups compare interleaved calls.",
        "",
        "| N | inputs | cond(K_uu) | value error | (nats) | gradient error (norm) | worst component "
        "| float64 | mixed | speed-up | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['N']:,} | {r['layout']} | {r['cond_Kuu']:.1e} | {r['value_rel_error']:.1e} | "
            f"{r['value_abs_error']:.1e} | {r['grad_rel_error']:.1e} | "
            f"{r['grad_worst_component_rel_error']:.1e} | {r['float64_median_s'] * 1e3:.1f} ms | "
            f"{r['mixed_median_s'] * 1e3:.1f} ms | "
            f"{r['speedup_median']:.2f}× | {r['load'][0]:.1f} |"
        )
    if results["sweep"]:
        lines += [
            "",
            f"Conditioning sweep at N = {results['sweep'][0]['N']:,} (same data and inducing inputs; the "
            "lengthscale sets cond(K_uu)):",
            "",
            "| inputs | ℓ | cond(K_uu) | value error | (nats) | gradient error (norm) | worst component |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results["sweep"]:
            lines.append(
                f"| {r['layout']} | {r['lengthscale']} | {r['cond_Kuu']:.1e} | {r['value_rel_error']:.1e} | "
                f"{r['value_abs_error']:.1e} | {r['grad_rel_error']:.1e} | "
                f"{r['grad_worst_component_rel_error']:.1e} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
