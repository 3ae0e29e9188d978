"""The main job's backtests on the packaged CO2 record: does its forecast band cover what happened?

For each window, the record is cut at the window's end (a CSV in a temporary folder),
``bayes-rbfn fit`` runs with the main job's settings (``--model dtc --mean linear --kernel co2``, tree depth
5, 2 chains × 500 + 500, seed 0) and ``--holdout-after`` the window's start, and the scores it writes to
``backtest.csv`` are collected: coverage of the 50/80/95% bands of y*, MAE, CRPS, interval score and log
predictive density per point. The first two windows chose the drift prior of the ``co2`` kernel; the third
is kept back to check that choice. About 3 minutes a window on 2 cores.

    python benchmarks/co2_backtest.py [--model dtc] [--mean linear] [--windows 1997,1992,1987]
    python benchmarks/co2_backtest.py --drift matern32,5,0.08   # another drift: kernel, ℓ, s / sd(y)

``--reference`` scores, instead of the fits, a simple forecaster that knows nothing of this package: a
random walk with drift for the level (its step mean and sd from the annual means' year-on-year growth over
the 20 complete years before the cut), the level and the seasonal cycle (three harmonics) fitted by least
squares to the last 3 years, and their residual sd as the weekly noise; its band at horizon h has variance
sd_growth² h + sd_noise². Seconds, not minutes.

    python benchmarks/co2_backtest.py --reference

``--drift`` replaces the ``co2`` family's drift term for this run only (a Matérn 5/2, 3/2 or 1/2 kernel,
with ℓ_drift ~ LogNormal(log ℓ, 0.15) and s_drift ~ LogNormal(log(frac · sd(y)), 0.25)); the results then
go to ``co2_backtest_<drift>.md`` and ``.json``.

Writes ``benchmarks/results/co2_backtest/co2_backtest.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

#: First held-out year of each window; each window is HORIZON years long.
WINDOWS = (1997, 1992, 1987)
HORIZON = 5.0


def run_window(start: float, length: float, model: str, mean: str, workdir: Path) -> dict:
    import pandas as pd

    from bayes_rbfn import cli
    from bayes_rbfn.io.datasets import load_dataset

    co2 = load_dataset("co2")
    table = pd.DataFrame({"year": co2.X[:, 0], "co2": co2.y})
    csv = workdir / f"co2_to_{start + length:g}.csv"
    table[table["year"] < start + length].to_csv(csv, index=False)
    out = workdir / f"fit_{start:g}"
    argv = [str(csv), "--x", "year", "--y", "co2", "--kernel", "co2", "--max-tree-depth", "5"]
    argv += ["--model", model, "--mean", mean, "--holdout-after", str(start), "--no-plots", "--quiet"]
    status = cli.main(["fit", *argv, "--out", str(out)])
    if status != 0:
        raise SystemExit(f"bayes-rbfn fit exited {status} for the window starting {start}")
    scores = pd.read_csv(out / "backtest.csv")
    row = {"window": f"{start - 1:g} → {start:g}–{start + length - 1:g}", "model": model, "mean": mean}
    row.update({str(k): float(v) for k, v in scores.iloc[0].items() if k != "n"})
    return row


def random_walk_window(start: float, length: float) -> dict:
    """The module docstring's random-walk reference scored on one window: coverage of its bands, MAE."""
    import numpy as np
    import pandas as pd
    from scipy.stats import norm

    from bayes_rbfn.io.datasets import load_dataset

    co2 = load_dataset("co2")
    t, y = co2.X[:, 0], co2.y
    before, window = t < start, (t >= start) & (t < start + length)

    def design(times):
        harmonics = [f(2 * np.pi * k * times) for k in (1, 2, 3) for f in (np.cos, np.sin)]
        return np.column_stack([np.ones_like(times), times - start, *harmonics])

    last = before & (t >= start - 3)
    coef, *_ = np.linalg.lstsq(design(t[last]), y[last], rcond=None)
    noise_sd = np.std(y[last] - design(t[last]) @ coef)
    years = pd.Series(y[before]).groupby(np.floor(t[before]).astype(int)).agg(["mean", "count"])
    growth = years["mean"].diff()[(years["count"] >= 48) & (years["count"].shift() >= 48)].dropna()
    growth = growth[growth.index >= start - 20]
    horizon = t[window] - start
    mean = coef[0] + growth.mean() * horizon + design(t[window])[:, 2:] @ coef[2:]
    z = (y[window] - mean) / np.sqrt(growth.var() * horizon + noise_sd**2)
    row = {"window": f"{start - 1:g} → {start:g}–{start + length - 1:g}", "model": "random walk"}
    for level in (50, 80, 95):
        row[f"coverage_{level}"] = float(np.mean(np.abs(z) < norm.ppf(0.5 + level / 200)))
    row["mae"] = float(np.mean(np.abs(y[window] - mean)))
    row["growth_mean"], row["growth_sd"] = float(growth.mean()), float(growth.std())
    return row


def use_drift(spec: str) -> str:
    """Register the ``co2`` family with the drift term ``kernel,ℓ,frac`` for this run; returns a file tag."""
    from bayes_rbfn.gp import kernels as K
    from bayes_rbfn.models import families

    kind, ell, frac = spec.split(",")
    drift_kernel = {"matern52": K.Matern52, "matern32": K.Matern32, "matern12": K.Exponential}[kind]
    families.FAMILIES["co2"] = families.co2_family(drift_kernel, float(ell), float(frac))
    return f"{kind}_{float(ell):g}_{float(frac):g}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="dtc")
    ap.add_argument("--mean", default="linear")
    ap.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "co2_backtest"))
    instead = ap.add_mutually_exclusive_group()
    instead.add_argument("--drift", default=None, help="kernel,ℓ,frac: another drift term (matern52/32/12)")
    instead.add_argument("--reference", action="store_true", help="score the random-walk reference instead")
    args = ap.parse_args(argv)
    if args.reference:
        tag = "_random_walk"
    elif args.drift is not None:
        tag = "_" + use_drift(args.drift)
    else:
        tag = ""

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for start in (float(w) for w in args.windows.split(",")):
            if args.reference:
                rows.append(random_walk_window(start, HORIZON))
            else:
                rows.append(run_window(start, HORIZON, args.model, args.mean, Path(tmp)))
            if args.drift is not None:
                rows[-1]["drift"] = args.drift
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"co2_backtest{tag}.json").write_text(json.dumps(rows, indent=2))
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = (f"{v:.3g}" if isinstance(v, float) else str(v) for v in row.values())
        lines.append("| " + " | ".join(cells) + " |")
    (out / f"co2_backtest{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
