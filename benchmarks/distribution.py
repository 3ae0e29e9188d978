"""ESS per second: a user's NumPyro model with ``bayes_rbfn.SparseGP`` against ``fit("sor")``, same data.

Both sample the same posterior (the SparseGP model uses fit's default priors and constant mean; see
tests/infer/test_mcmc.py). Each is run ``--repeats`` times, interleaved, in one process after one warm-up run
each (so compilation is excluded from both); reported: wall time of the sampling call, minimum bulk ESS over
(ℓ, s², σ), ESS/s, ESS per gradient evaluation. Writes
``benchmarks/results/distribution/distribution.md`` and ``.json``.

    python benchmarks/distribution.py [--N 2000] [--M 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--N", type=int, default=2000)
    ap.add_argument("--M", type=int, default=64)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "distribution"))
    args = ap.parse_args(argv)

    from bayes_rbfn import runtime

    runtime.enable_x64()
    runtime.limit_blas_threads()
    import arviz as az
    import jax
    import numpyro
    from numpyro.infer import MCMC, NUTS

    import bayes_rbfn as br
    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.gp.kernels import SquaredExponential
    from bayes_rbfn.models.families import data_scales, get_family

    gen = np.random.default_rng(0)
    X = np.sort(gen.uniform(0.0, 10.0, args.N))[:, None]
    y = np.sin(X[:, 0]) + 0.3 * np.cos(3.0 * X[:, 0]) + 0.2 * gen.standard_normal(args.N)
    Z = np.asarray(select_inducing(X, args.M, seed=0))
    priors = get_family("se").default_priors(data_scales(X, y))
    offset = float(np.mean(y))
    names = ["lengthscale", "variance", "noise"]

    def model(X, Z, y=None):
        ell = numpyro.sample("lengthscale", priors["lengthscale"])
        s2 = numpyro.sample("variance", priors["variance"])
        noise = numpyro.sample("noise", priors["noise"])
        numpyro.sample(
            "y",
            br.SparseGP(SquaredExponential(lengthscale=ell, variance=s2), X, Z, noise, mean=offset),
            obs=y,
        )

    def run_user(seed):
        mcmc = MCMC(
            NUTS(model),
            num_warmup=args.warmup,
            num_samples=args.draws,
            num_chains=args.chains,
            chain_method="vectorized",
            progress_bar=False,
        )
        t0 = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), X, Z, y=y, extra_fields=("num_steps",))
        jax.block_until_ready(mcmc.get_samples())
        wall = time.perf_counter() - t0
        idata = az.from_numpyro(mcmc)
        steps = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
        return idata, wall, steps

    def run_fit(seed):
        t0 = time.perf_counter()
        idata = br.fit(
            "sor",
            X,
            y,
            Z=Z,
            chains=args.chains,
            draws=args.draws,
            warmup=args.warmup,
            seed=seed,
            progress=False,
            check_diagnostics=False,
            log_likelihood=False,
            X_pred=X[:1],
            chain_method="vectorized",
        )
        wall = time.perf_counter() - t0
        steps = int(np.sum(idata.sample_stats["n_steps"].values))
        return idata, wall, steps

    runners = {"SparseGP (user model, MCMC.run)": run_user, 'fit("sor")': run_fit}
    for run in runners.values():  # compile once each
        run(100)
    rows = {name: [] for name in runners}
    for r in range(args.repeats):
        for name, run in runners.items():
            idata, wall, steps = run(r)
            ess = float(min(float(az.ess(idata, var_names=[n], method="bulk")[n]) for n in names))
            rows[name].append({"wall": wall, "ess": ess, "ess_per_s": ess / wall, "steps": steps})

    summary = {}
    for name, runs in rows.items():
        summary[name] = {
            "wall_median_s": statistics.median(r["wall"] for r in runs),
            "ess_median": statistics.median(r["ess"] for r in runs),
            "ess_per_s_median": statistics.median(r["ess_per_s"] for r in runs),
            "ess_per_1000_gradients_median": statistics.median(1000 * r["ess"] / r["steps"] for r in runs),
            "runs": runs,
        }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {k: getattr(args, k) for k in ("N", "M", "chains", "draws", "warmup", "repeats")}
    (out / "distribution.json").write_text(json.dumps({"settings": meta, "results": summary}, indent=1))
    lines = [
        f'# SparseGP in a user\'s model vs fit("sor") — N = {args.N}, M = {args.M}, '
        f"{args.chains} chains × ({args.warmup} + {args.draws}), median of {args.repeats} interleaved runs",
        "",
        "| sampler | wall (s) | min bulk ESS | ESS/s | ESS per 1,000 gradients |",
        "|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['wall_median_s']:.1f} | {s['ess_median']:.0f} | {s['ess_per_s_median']:.1f} | "
            f"{s['ess_per_1000_gradients_median']:.1f} |"
        )
    (out / "distribution.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
