"""sor against exact: seconds per log density + gradient, and ESS/s of the hyperparameters.

For each N, the ``sor`` model (M = 64) is fit with one chain of NUTS on 1-D data and its seconds per log
density + gradient timed apart; the ``exact`` GP's gradient is timed at the smaller N, and it is sampled up
to ``exact_nuts_max`` (its O(N³) factorisation makes a chain at N = 10⁴ impractical; at N = 10⁵ K_ff alone
is 80 GB). ESS/s is the smallest bulk ESS of lengthscale, variance and noise over the sampling time
(warm-up + draws, compile excluded). The section's name, ``issue3``, is kept on the command line and as the
key of its results (``results.json``, the ``section`` column of ``results.csv``).
"""

from __future__ import annotations

from .common import _config, _data, _diagnostics, _fmt, _grad_fn, _interleaved, _model_problem, _nuts, _params

NAME = "issue3"
FULL = {
    "sor": [1_000, 10_000, 100_000],
    "exact": [1_000, 10_000],
    "exact_nuts_max": 1_000,
    "M": 64,
    "warmup": 60,
    "draws": 60,
    "exact_warmup": 30,
    "exact_draws": 30,
}
QUICK = {
    "sor": [1_000, 10_000],
    "exact": [1_000],
    "exact_nuts_max": 0,
    "M": 64,
    "warmup": 60,
    "draws": 60,
}


def _sgrad(module, N, M, repeats=3):
    grad = _grad_fn(module, _config())
    data = _model_problem(N, M)
    if module.__name__.endswith("exact"):
        data = {k: v for k, v in data.items() if k != "Z"}
    p = _params()
    return _interleaved({"g": lambda: grad(p, data)}, repeats)["g"]["min"]


def run(cfg, clock):
    from bayes_rbfn.models import exact, sor

    rows = []
    M = cfg["M"]
    for N in cfg["sor"]:
        X, y, _ = _data(N, 3)
        idata, ph = _nuts(
            "sor",
            X,
            y,
            clock,
            num_inducing=M,
            chains=1,
            warmup=cfg["warmup"],
            draws=cfg["draws"],
            X_pred=X[:10],
            log_likelihood=False,
        )
        d = _diagnostics(idata)
        rows.append(
            {
                "model": "sor",
                "N": N,
                "M": M,
                "s_per_grad": _sgrad(sor, N, M),
                **d,
                **ph,
                "ess_per_s": d["ess_bulk_min"] / ph["sampling"],
            }
        )
    for N in cfg["exact"]:
        row = {"model": "exact", "N": N, "s_per_grad": _sgrad(exact, N, M, repeats=1 if N > 2000 else 3)}
        if N <= cfg["exact_nuts_max"]:
            X, y, _ = _data(N, 3)
            idata, ph = _nuts(
                "exact",
                X,
                y,
                clock,
                chains=1,
                warmup=cfg.get("exact_warmup", cfg["warmup"]),
                draws=cfg.get("exact_draws", cfg["draws"]),
                X_pred=X[:10],
                log_likelihood=False,
            )
            d = _diagnostics(idata)
            row.update(d, **ph, ess_per_s=d["ess_bulk_min"] / ph["sampling"])
        rows.append(row)
    return {"rows": rows}


def tables(r, report):
    lines = [
        "## sor and exact: time per gradient and ESS/s",
        "",
        "1-D, M = 64, one chain; ESS/s = smallest bulk ESS of lengthscale, variance, noise over "
        "the sampling time (warm-up + draws, compile excluded).",
        "",
        "| model | N | s / (log density + gradient) | ESS/s | bulk ESS | r_hat | compile s | sampling s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['model']} | {row['N']:,} | {_fmt(row['s_per_grad'])} | "
            f"{_fmt(row.get('ess_per_s'))} | {_fmt(row.get('ess_bulk_min'))} | {_fmt(row.get('rhat_max'))} | "
            f"{_fmt(row.get('compile'))} | {_fmt(row.get('sampling'))} |"
        )
        report.add_csv("issue3", f"{row['model']}_N{row['N']}_s_per_grad", row["s_per_grad"], "s")
        if "ess_per_s" in row:
            report.add_csv("issue3", f"{row['model']}_N{row['N']}_ess_per_s", row["ess_per_s"], "1/s")
    lines.append("| exact | 100,000 | n/a: K_ff alone is 80 GB | | | | | |")
    lines.append("")
    return lines
