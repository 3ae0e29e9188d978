"""The Poisson RBFN on the coal-mining disaster counts: wall time of ``fit`` at 4 chains × (1,000 + 1,000).

The target: under a minute on 2 cores. Runs the fit twice in one process: the first run includes
compiling (the figure a user sees on a cold start without the persistent cache), the second reuses the
compiled sampler. Reports both, with the minimum bulk ESS over the hyperparameters and the divergences.
Writes ``benchmarks/results/coal/coal.md`` and ``.json``.

    python benchmarks/coal.py [--num-inducing 20]   (the CLI's default M for coal; 64 is fit()'s default)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # the CLI's default for this data set (bayes_rbfn.io.datasets.dataset_defaults); the library's is 64
    ap.add_argument("--num-inducing", type=int, default=20)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "coal"))
    args = ap.parse_args(argv)

    from bayes_rbfn import runtime

    runtime.enable_x64()
    runtime.limit_blas_threads()
    import os

    import arviz as az

    import bayes_rbfn as br
    from bayes_rbfn.io.datasets import load_dataset

    coal = load_dataset("coal")
    rows = []
    for run in ("cold (compiles)", "warm (compiled)"):
        start = time.perf_counter()
        idata = br.fit(
            "rbfn",
            coal.X,
            coal.y,
            likelihood="poisson",
            num_inducing=args.num_inducing,
            chains=args.chains,
            draws=args.draws,
            warmup=args.warmup,
            progress=False,
            check_diagnostics=False,
        )
        seconds = time.perf_counter() - start
        ess = az.ess(idata, var_names=["lengthscale", "variance"], method="bulk")
        rows.append(
            {
                "run": run,
                "seconds": round(seconds, 1),
                "min_bulk_ess": round(float(min(ess[v].values.min() for v in ess.data_vars)), 0),
                "divergences": int(idata.sample_stats["diverging"].values.sum()),
                "M": int(idata.constant_data["Z"].shape[0]),
            }
        )
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"chains": args.chains, "draws": args.draws, "warmup": args.warmup, "load": os.getloadavg()[0]}
    (out / "coal.json").write_text(json.dumps({"settings": meta, "rows": rows}, indent=1))
    lines = [
        f"Poisson RBFN on the coal counts (N = {coal.X.shape[0]}), {args.chains} chains × "
        f"({args.warmup} + {args.draws}), 1-minute load {meta['load']:.2f}",
        "",
        "| run | wall time (s) | min bulk ESS (ℓ, s²) | divergences | M |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['run']} | {r['seconds']} | {r['min_bulk_ess']:.0f} | {r['divergences']} | {r['M']} |"
        for r in rows
    ]
    (out / "coal.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
