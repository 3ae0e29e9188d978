"""The UCI regression benchmark: ``bayes-rbfn fit`` at its defaults on the standard splits, side by side
with the published Bayesian-network figures and a type-II maximum-likelihood exact GP.

For every split k of concrete, energy, kin8nm, power-plant and yacht (the 90 %/10 % splits of
Hernández-Lobato & Adams 2015, in ``benchmarks/data/uci/``), the script writes the training and test
rows to two CSV files and runs, in a fresh process,

    bayes-rbfn fit train.csv --x x1 ... xD --y y --test test.csv --no-plots --quiet

exactly as a user would (the CLI's defaults: the same code path), timing the whole process: Python's
start, JAX's compilation (the persistent compilation cache of the CLI is pointed at a fresh folder per
run of this script, so the first split of each set pays it), sampling, LOO and the written files. Test
RMSE and the mean test log predictive density come from the fit's ``test_scores.csv``.

The baseline is scikit-learn's ``GaussianProcessRegressor``: an exact GP with ARD squared-exponential
kernel times a constant plus white noise, its hyperparameters at the type-II maximum likelihood (L-BFGS-B
from the unit start, and 2 random restarts up to 2,000 training rows: past them each evaluation is an
O(N³) Cholesky of seconds), on inputs and targets standardised with the training rows' mean and sd; its
Gaussian predictive is scored in the data's units. Install it with
``pip install -e ".[benchmarks]"``; without scikit-learn that column is skipped.

::

    python benchmarks/uci.py --quick      # 3 splits per set
    python benchmarks/uci.py              # all 20 splits
    python benchmarks/uci.py --sets yacht energy --splits 5

Results accumulate in ``--out`` (default ``benchmarks/results/uci/``): ``splits.csv`` has one row per
(set, split, method) and a rerun skips the rows it already holds (``--fresh`` starts over);
``uci.md`` is the table of ``benchmarks/README.md``. Running anything else on the machine at the same
time makes the wall times meaningless.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

DATA = Path(__file__).resolve().parent / "data" / "uci"
SETS = ("concrete", "energy", "kin8nm", "power-plant", "yacht")
SPLITS = 20
QUICK_SPLITS = 3

#: Published test RMSE and test log-likelihood (means over the 20 splits, units of the data).
#: MC dropout: Gal & Ghahramani (2016), the authors' grid-search rerun of 2018 (README of
#: github.com/yaringal/DropoutUncertaintyExps). Deep ensembles: Lakshminarayanan, Pritzel & Blundell
#: (2017), Table 1 (5 networks, adversarial training; NLL there, negated here). PBP: Hernández-Lobato &
#: Adams (2015), Tables 1–2.
PUBLISHED = {
    "MC dropout": {
        "concrete": (4.82, -2.93),
        "energy": (0.54, -1.21),
        "kin8nm": (0.08, 1.14),
        "power-plant": (4.01, -2.80),
        "yacht": (0.67, -1.25),
    },
    "Deep ensembles": {
        "concrete": (6.03, -3.06),
        "energy": (2.09, -1.38),
        "kin8nm": (0.09, 1.20),
        "power-plant": (4.11, -2.79),
        "yacht": (1.58, -1.18),
    },
    "PBP": {
        "concrete": (5.667, -3.161),
        "energy": (1.804, -2.042),
        "kin8nm": (0.098, 0.896),
        "power-plant": (4.124, -2.837),
        "yacht": (1.015, -1.634),
    },
}

CITATIONS = (
    "MC dropout: Y. Gal & Z. Ghahramani (2016), Dropout as a Bayesian approximation, ICML; figures of the "
    "authors' 2018 grid-search rerun (github.com/yaringal/DropoutUncertaintyExps). Deep ensembles: "
    "B. Lakshminarayanan, A. Pritzel & C. Blundell (2017), Simple and scalable predictive uncertainty "
    "estimation using deep ensembles, NeurIPS, Table 1. PBP: J. M. Hernández-Lobato & R. P. Adams (2015), "
    "Probabilistic backpropagation for scalable learning of Bayesian neural networks, ICML, Tables 1–2."
)

COLUMNS = ("set", "split", "method", "n_train", "n_test", "dims", "rmse", "lpd", "seconds", "detail")


def load_split(name: str, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test, y_test) of split k; the training rows are all rows not in the test file."""
    folder = DATA / name
    data = np.loadtxt(folder / "data.txt")
    features = np.atleast_1d(np.loadtxt(folder / "index_features.txt").astype(int))
    target = int(np.loadtxt(folder / "index_target.txt"))
    test = np.atleast_1d(np.loadtxt(folder / f"index_test_{k}.txt").astype(int))
    train = np.setdiff1d(np.arange(data.shape[0]), test)
    X, y = data[:, features], data[:, target]
    return X[train], y[train], X[test], y[test]


def _frame(X: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(X.shape[1])])
    frame["y"] = y
    return frame


def run_cli(name: str, k: int, work: Path, cache: Path, extra: list[str]) -> dict:
    """``bayes-rbfn fit`` of split k at its defaults, in a fresh process; its test scores and wall time."""
    X, y, X_test, y_test = load_split(name, k)
    folder = work / f"{name}_{k}"
    folder.mkdir(parents=True, exist_ok=True)
    _frame(X, y).to_csv(folder / "train.csv", index=False)
    _frame(X_test, y_test).to_csv(folder / "test.csv", index=False)
    inputs = [f"x{j + 1}" for j in range(X.shape[1])]
    argv = [sys.executable, "-m", "bayes_rbfn", "fit", str(folder / "train.csv"), "--x", *inputs, "--y", "y"]
    argv += [
        "--test",
        str(folder / "test.csv"),
        "--out",
        str(folder / "fit"),
        "--no-plots",
        "--quiet",
        *extra,
    ]
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{name} split {k}: bayes-rbfn fit exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
    scores = pd.read_csv(folder / "fit" / "test_scores.csv").iloc[0]
    # The report's first line: "bayes-rbfn fit: vfe model, se kernel, M = 128 inducing inputs".
    report = (folder / "fit" / "report.txt").read_text().splitlines()
    model = report[0].split(":", 1)[1].strip() if report else ""
    return {
        "n_train": X.shape[0],
        "n_test": X_test.shape[0],
        "dims": X.shape[1],
        "rmse": float(scores["rmse"]),
        "lpd": float(scores["lpd"]),
        "seconds": seconds,
        "detail": model,
    }


#: Random restarts of the type-II optimiser, and the training rows up to which they are made.
GP_RESTARTS, GP_RESTARTS_MAX_ROWS = 2, 2000


def run_type2_gp(name: str, k: int) -> dict:
    """scikit-learn's exact GP, ARD SE × constant + white noise, at the type-II maximum likelihood."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    X, y, X_test, y_test = load_split(name, k)
    restarts = GP_RESTARTS if X.shape[0] <= GP_RESTARTS_MAX_ROWS else 0
    x_mean, x_sd = X.mean(0), np.where(X.std(0) > 0, X.std(0), 1.0)
    y_mean, y_sd = y.mean(), y.std()
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(X.shape[1]), (1e-2, 1e4)) + WhiteKernel(
        0.1, (1e-8, 10.0)
    )
    start = time.perf_counter()
    gp = GaussianProcessRegressor(kernel, n_restarts_optimizer=restarts, random_state=k)
    gp.fit((X - x_mean) / x_sd, (y - y_mean) / y_sd)
    mean, sd = gp.predict((X_test - x_mean) / x_sd, return_std=True)
    seconds = time.perf_counter() - start
    mean, sd = mean * y_sd + y_mean, sd * y_sd
    return {
        "n_train": X.shape[0],
        "n_test": X_test.shape[0],
        "dims": X.shape[1],
        "rmse": float(np.sqrt(np.mean((mean - y_test) ** 2))),
        "lpd": float(np.mean(norm.logpdf(y_test, mean, sd))),
        "seconds": seconds,
        "detail": str(gp.kernel_),
    }


def _mean_se(values: pd.Series, digits: int) -> str:
    n = values.size
    se = values.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
    return f"{values.mean():.{digits}f} ± {se:.{digits}f}" if n > 1 else f"{values.mean():.{digits}f}"


def table(results: pd.DataFrame) -> str:
    """The markdown table: per set, mean ± SE over the splits of RMSE and LL, wall time, published figures."""
    digits = {"kin8nm": 3}
    lines = [
        "| set | N | D | splits | bayes-rbfn RMSE | bayes-rbfn LL | s / split (max) | GP type-II RMSE | "
        "GP type-II LL | MC dropout | deep ensembles | PBP |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in SETS:
        ours = results[(results.set == name) & (results.method == "bayes-rbfn")]
        if ours.empty:
            continue
        gp = results[(results.set == name) & (results.method == "gp-type2")]
        d = digits.get(name, 2)
        published = [
            f"{PUBLISHED[m][name][0]:.{d}f} / {PUBLISHED[m][name][1]:.2f}"
            for m in ("MC dropout", "Deep ensembles", "PBP")
        ]
        gp_cells = [_mean_se(gp.rmse, d), _mean_se(gp.lpd, 2)] if not gp.empty else ["—", "—"]
        if 0 < len(gp) < len(ours):
            gp_cells[1] += f" ({len(gp)} of {len(ours)} splits)"
        n = int(ours.n_train.iloc[0] + ours.n_test.iloc[0])
        lines.append(
            f"| {name} | {n:,} | {int(ours.dims.iloc[0])} | {len(ours)} | {_mean_se(ours.rmse, d)} | "
            f"{_mean_se(ours.lpd, 2)} | {ours.seconds.mean():.0f} ({ours.seconds.max():.0f}) | "
            + " | ".join(gp_cells + published)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SPLITS} splits per set")
    parser.add_argument("--splits", type=int, default=None, help=f"splits per set (default {SPLITS})")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "uci")
    parser.add_argument("--no-gp", action="store_true", help="skip the scikit-learn type-II GP")
    parser.add_argument("--fresh", action="store_true", help="discard the results already in --out")
    parser.add_argument(
        "--cli-args", nargs=argparse.REMAINDER, default=[], help="extra bayes-rbfn fit options"
    )
    args = parser.parse_args(argv)
    splits = args.splits or (QUICK_SPLITS if args.quick else SPLITS)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "splits.csv"
    if path.exists() and not args.fresh:
        results = pd.read_csv(path)
    else:
        results = pd.DataFrame(columns=COLUMNS)
    try:
        import sklearn  # noqa: F401

        have_sklearn = not args.no_gp
    except ImportError:
        have_sklearn = False
        print("scikit-learn is not installed: the type-II GP is skipped (pip install -e '.[benchmarks]')")
    with tempfile.TemporaryDirectory(prefix="uci_") as tmp:
        work, cache = Path(tmp) / "work", Path(tmp) / "jax_cache"
        for name in args.sets:
            for k in range(splits):
                methods = ["bayes-rbfn", "gp-type2"] if have_sklearn else ["bayes-rbfn"]
                for method in methods:
                    done = (results.set == name) & (results.split == k) & (results.method == method)
                    if done.any():
                        continue
                    if method == "bayes-rbfn":
                        measured = run_cli(name, k, work, cache, args.cli_args)
                    else:
                        measured = run_type2_gp(name, k)
                    row = {"set": name, "split": k, "method": method, **measured}
                    print(
                        f"{name:12s} split {k:2d} {method:10s} RMSE {row['rmse']:.4f}  LL {row['lpd']:.3f}  "
                        f"{row['seconds']:.0f} s",
                        flush=True,
                    )
                    results = pd.concat([results, pd.DataFrame([row])], ignore_index=True)
                    results.to_csv(path, index=False)
    stamp = datetime.date.today().isoformat()
    header = (
        f"UCI regression benchmark, {stamp}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; `python benchmarks/uci.py{' --quick' if args.quick else ''}`. "
        "Mean ± standard error over the splits; LL is the mean test log predictive density (higher is "
        "better). Published columns: RMSE / LL.\n\n"
    )
    (args.out / "uci.md").write_text(header + table(results) + "\n\n" + CITATIONS + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
