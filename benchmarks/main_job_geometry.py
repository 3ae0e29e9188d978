"""Where the main job's posterior stops being Gaussian: the curvature of −log p along lines through its bulk.

Reads a main-job fit (``bayes-rbfn fit --out DIR``: ``DIR/inference.nc``), rebuilds its model, whitens the
unconstrained draws by their mean and covariance, and along random unit directions d evaluates the
potential energy U(μ + L·t·d) for t in −4 … 4 (L: the draws' Cholesky factor). A Gaussian posterior has
U'' = 1 along every such line; NUTS's step size is tuned to the bulk, and a leapfrog step ε is stable only
where U'' < (2/ε)². Reported: the largest second difference per line, where it sits, and the constrained
values there. Writes ``<out>/geometry.json`` (default ``benchmarks/results/main_job/``).

    python benchmarks/main_job_geometry.py DIR [--lines 200] [--out FOLDER]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from numpyro.infer.util import constrain_fn, potential_energy, unconstrain_fn  # noqa: E402

from bayes_rbfn.infer.fitting import build_model  # noqa: E402
from bayes_rbfn.io.arviz_compat import read_netcdf  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fit", type=Path, help="the output folder of a main-job fit")
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "main_job")
    args = parser.parse_args(argv)
    idata = read_netcdf(args.fit / "inference.nc")
    const, post = idata.constant_data, idata.posterior
    X, Z, y = const["X"].values, const["Z"].values, idata.observed_data["y"].values
    problem = build_model("dtc", X, y, Z=Z, kernel="co2", mean="linear")
    model, model_args = problem.model, problem.args
    names = [v for v in post.data_vars if v not in ("f_mean", "f_var")]
    draws = [
        {v: np.asarray(post[v].values[c, i]) for v in names}
        for c in range(post.sizes["chain"])
        for i in range(0, post.sizes["draw"], 5)
    ]
    unconstrained = [unconstrain_fn(model, model_args, {}, d) for d in draws]
    keys = sorted(unconstrained[0])
    shapes = [np.shape(unconstrained[0][k]) for k in keys]
    flat = np.array([np.concatenate([np.ravel(u[k]) for k in keys]) for u in unconstrained])
    mu, L = flat.mean(0), np.linalg.cholesky(np.cov(flat.T))

    def unflat(f: np.ndarray) -> dict:
        out, j = {}, 0
        for k, shape in zip(keys, shapes, strict=True):
            n = int(np.prod(shape))
            out[k] = f[j : j + n].reshape(shape)
            j += n
        return out

    U = jax.jit(lambda u: potential_energy(model, model_args, {}, u))
    ts = np.linspace(-4.0, 4.0, 81)
    h = ts[1] - ts[0]
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(args.lines):
        d = rng.standard_normal(len(mu))
        d /= np.linalg.norm(d)
        values = np.array([float(U(unflat(mu + L @ (t * d)))) for t in ts])
        curvature = np.diff(values, 2) / h**2
        j = int(np.argmax(curvature))
        at = constrain_fn(model, model_args, {}, unflat(mu + L @ (ts[j + 1] * d)))
        rows.append(
            {
                "finite": bool(np.all(np.isfinite(values))),
                "max_curvature": float(curvature[j]),
                "at_t": float(ts[j + 1]),
                "at": {k: np.round(np.asarray(v), 4).tolist() for k, v in at.items()},
            }
        )
    worst = sorted(rows, key=lambda r: -r["max_curvature"])
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "fit": str(args.fit),
        "lines": args.lines,
        "non_finite_lines": sum(not r["finite"] for r in rows),
        "median_max_curvature": float(np.median([r["max_curvature"] for r in rows])),
        "worst": worst[:8],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geometry.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "worst"}))
    for r in worst[:5]:
        print(f"U'' = {r['max_curvature']:.1f} at t = {r['at_t']:+.1f}: {r['at']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
