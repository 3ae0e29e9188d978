"""Several chains on one CPU device: vectorised (batched in one program) or one after the other.

``fit`` runs its chains in parallel when there is a device per chain. With fewer devices it chose
``"vectorized"`` until 26 Nov 2026. This script measures that choice against ``"sequential"`` on the shipped
models, so that the default is the faster one.

Every run is a fresh Python process (the hidden ``--one`` flag; the time is taken inside it, after JAX is
imported), so every run pays its tracing and compilation as a first fit does. JAX's persistent compilation
cache is off. The two methods alternate within each repeat, and the method that goes first alternates
between repeats.

Each run is ``fit(model, X, y, chains=--chains, warmup=--warmup, draws=--draws, seed=repeat,
chain_method=method, progress=False)`` at the fit's other defaults, so its wall time also holds what fit does
after sampling (LOO, posterior predictive, diagnostics). Cases:

* ``sor-1d``, ``sor-3d``, ``fitc-1d``: N = 1,000 points of ``ess_vs_numpyro.make_data`` (M = 32);
* ``exact-snelson``: the exact GP on the 200 points of the Snelson data;
* ``rbfn-coal``: the Poisson RBF network on the coal-mining disaster counts (its CLI default);
* ``grouped``: the grouped model on 4 countries of the fertility data.

Reported per case (medians over the repeats): wall s, XLA compile s, the minimum bulk ESS over the
hyperparameters and ESS/s, and the ratio of the vectorised wall time to the sequential. Writes
``<out>/chain_method.md`` and ``.json`` (default ``benchmarks/results/chain_method/``).

    python benchmarks/chain_method.py [--cases sor-1d,exact-snelson,...] [--chains 4] [--warmup 500]
        [--draws 500] [--repeats 3] [--out DIR] [--resume]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
METHODS = ("vectorized", "sequential")
CASES = ("sor-1d", "sor-3d", "fitc-1d", "exact-snelson", "rbfn-coal", "grouped")


def case_data(case: str) -> tuple[str, np.ndarray, np.ndarray, dict]:
    """(model, X, y, fit options) of a case."""
    sys.path.insert(0, str(HERE))
    from ess_vs_numpyro import make_data

    from bayes_rbfn.io.datasets import load_dataset

    if case in ("sor-1d", "sor-3d", "fitc-1d"):
        X, y = make_data(1000, 3 if case == "sor-3d" else 1)
        return case.split("-")[0], X, y, {"num_inducing": 32}
    if case == "exact-snelson":
        data = load_dataset("snelson")
        return "exact", data.X, data.y, {}
    if case == "rbfn-coal":
        data = load_dataset("coal")
        return "rbfn", data.X, data.y, {"likelihood": data.likelihood}
    if case == "grouped":
        data = load_dataset("fertility", max_groups=4)
        return "grouped", data.X, data.y, {"group": data.group}
    raise SystemExit(f"--cases: unknown case {case!r}; expected some of {', '.join(CASES)}")


def one(args: argparse.Namespace) -> dict:
    """One fit in this process; its figures as a dict."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import arviz as az

    import bayes_rbfn as br
    from bayes_rbfn import runtime

    runtime.enable_x64()
    runtime.limit_blas_threads()
    compile_s = [0.0]

    def on_duration(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compile_s[0] += duration

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    model, X, y, options = case_data(args.case)
    t0 = time.perf_counter()
    idata = br.fit(
        model,
        X,
        y,
        chains=args.chains,
        warmup=args.warmup,
        draws=args.draws,
        seed=args.seed,
        chain_method=args.one,
        progress=False,
        check_diagnostics=False,
        **options,
    )
    wall = time.perf_counter() - t0
    names = [
        v
        for v in idata.posterior.data_vars
        if v.startswith(("lengthscale", "variance", "noise", "amplitude", "period"))
    ]
    ess = az.ess(idata.posterior[names], method="bulk")
    min_ess = float(min(np.min(ess[v].values) for v in names))
    return {
        "case": args.case,
        "method": args.one,
        "seed": args.seed,
        "wall_s": wall,
        "xla_compile_s": compile_s[0],
        "min_bulk_ess": min_ess,
        "hyperparameters": names,
        "gradients": int(idata.sample_stats["n_steps"].values.sum()),
    }


def run_one(args: argparse.Namespace, case: str, method: str, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--one", method, "--case", case, "--seed", str(seed)]
    cmd += ["--chains", str(args.chains), "--warmup", str(args.warmup), "--draws", str(args.draws)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{case} {method} seed {seed} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"# Chains on one CPU device: vectorised against sequential ({args.chains} chains × "
        f"({args.warmup} + {args.draws}), fresh process per run, medians of {args.repeats})",
        "",
        f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| case | method | wall s | XLA compile s | min bulk ESS | ESS/s | vectorised / sequential wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in args.cases:
        med = {}
        for method in METHODS:
            runs = [r for r in rows if r["case"] == case and r["method"] == method]
            if not runs:
                continue
            med[method] = {
                k: statistics.median(r[k] for r in runs) for k in ("wall_s", "xla_compile_s", "min_bulk_ess")
            }
            med[method]["ess_s"] = statistics.median(r["min_bulk_ess"] / r["wall_s"] for r in runs)
        for method, m in med.items():
            ratio = ""
            if method == "sequential" and len(med) == 2:
                ratio = f"{med['vectorized']['wall_s'] / m['wall_s']:.2f}"
            lines.append(
                f"| {case} | {method} | {m['wall_s']:.1f} | {m['xla_compile_s']:.1f} | "
                f"{m['min_bulk_ess']:.0f} | {m['ess_s']:.1f} | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=lambda s: [c for c in s.split(",") if c], default=list(CASES))
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "chain_method"))
    ap.add_argument(
        "--resume", action="store_true", help="keep the runs of <out>/chain_method.json and run the others"
    )
    ap.add_argument("--one", choices=METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)))
        return
    rows: list[dict] = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.resume and (out / "chain_method.json").exists():
        rows = json.loads((out / "chain_method.json").read_text())["rows"]
    for repeat in range(args.repeats):
        for case in args.cases:
            order = METHODS if repeat % 2 == 0 else METHODS[::-1]
            for method in order:
                if any(r["case"] == case and r["method"] == method and r["seed"] == repeat for r in rows):
                    continue
                row = run_one(args, case, method, repeat)
                rows.append(row)
                print(
                    f"{case:14s} {method:10s} seed {repeat}: {row['wall_s']:6.1f} s "
                    f"(XLA {row['xla_compile_s']:.1f} s), min bulk ESS {row['min_bulk_ess']:.0f}",
                    flush=True,
                )
                (out / "chain_method.json").write_text(
                    json.dumps({"args": vars(args), "rows": rows}, indent=1)
                )
                (out / "chain_method.md").write_text(table(rows, args))
    print(table(rows, args))


if __name__ == "__main__":
    main()
