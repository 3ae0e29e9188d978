"""``bayes-rbfn fit --dataset birthdays``: the Birthdays case study's model fitted to US births per day.

The fit is :func:`bayes_rbfn.workflows.birthdays.fit_birthdays`'s, written to the usual output folder.

The model is the collection's own (:mod:`bayes_rbfn.models.birthdays`), so the options that choose a model
for other data (``--model``, ``--kernel``, ``--likelihood``, ``--mean``, ``--num-inducing``, the backtest
and ``--test``) do not apply and are refused. The folder holds ``inference.nc`` (:func:`fit_birthdays`'s
groups), ``summary.csv``, ``trace.png``, ``rank.png``, ``birthdays.png`` (the case study's figure),
``predictions.csv`` (each component's posterior mean per day, in relative births) and ``report.txt``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayes_rbfn.cli.common import UserError, duration, summary_table
from bayes_rbfn.cli.options import slug
from bayes_rbfn.io.datasets import BIRTHDAYS

__all__ = ["NAME", "BirthdaysPlan", "plan", "sample", "summarise", "wanted", "write"]

#: The data set's name for ``--dataset`` (its description and defaults: :mod:`bayes_rbfn.io.datasets`).
NAME = BIRTHDAYS

#: Options of ``fit`` that choose a model or its data for other data sets: (attribute, flag).
_NOT_APPLICABLE = (
    ("model", "--model"),
    ("kernel", "--kernel"),
    ("likelihood", "--likelihood"),
    ("mean", "--mean"),
    ("num_inducing", "--num-inducing"),
    ("holdout_after", "--holdout-after"),
    ("holdout", "--holdout"),
    ("test", "--test"),
    ("max_groups", "--max-groups"),
)

#: Options of ``fit`` that name columns of a CSV file: (attribute, flag).
_COLUMNS = (("x", "--x"), ("y", "--y"), ("group", "--group"))


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command asks for the Birthdays fit."""
    return args.data is None and args.dataset == NAME


@dataclass
class BirthdaysPlan:
    """A checked Birthdays fit: the sampler's settings, the years fitted, the output folder."""

    sampler: Any  # SamplerSettings
    years: int | None
    out: Path
    source: str


def plan(args: argparse.Namespace) -> BirthdaysPlan:
    """Check the options and the output folder, so that no user error can surface after sampling starts."""
    from bayes_rbfn.cli.resume import partial_dir
    from bayes_rbfn.infer.sampler import SamplerSettings
    from bayes_rbfn.io.output import default_output_dir, prepare_output_dir
    from bayes_rbfn.models.birthdays import load_birthdays
    from bayes_rbfn.workflows.birthdays import DEFAULT_SETTINGS

    columns = [flag for name, flag in _COLUMNS if getattr(args, name, None) is not None]
    if columns:
        raise UserError(
            f"{', '.join(columns)}: the {NAME} data set has its own inputs and target; these options name "
            "columns of a CSV file: drop them"
        )
    given = [flag for name, flag in _NOT_APPLICABLE if getattr(args, name, None) is not None]
    if given:
        raise UserError(
            f"{', '.join(given)}: --dataset {NAME} fits its own model (bayes_rbfn.models.birthdays); "
            "drop the option"
        )
    out = Path(args.out) if args.out is not None else default_output_dir(prefix=f"bayes_rbfn_{slug(NAME)}")
    prepare_output_dir(out, args.overwrite, protect=[])
    try:
        sampler = SamplerSettings(
            chains=args.chains,
            draws=args.draws,
            warmup=args.warmup,
            seed=args.seed,
            target_accept=args.target_accept or DEFAULT_SETTINGS.target_accept,
            dense_mass=DEFAULT_SETTINGS.dense_mass if args.dense_mass is None else args.dense_mass,
            max_tree_depth=args.max_tree_depth or DEFAULT_SETTINGS.max_tree_depth,
            init=args.init,
            progress=not args.quiet,
            checkpoint=partial_dir(out) / "sampler",
            checkpoint_every=args.checkpoint_every,
        )
    except ValueError as err:
        raise UserError(str(err)) from None
    years = args.years
    try:
        load_birthdays(years)
    except ValueError as err:
        raise UserError("--" + str(err)) from None
    source = f"packaged data set {NAME!r}" + ("" if years is None else f", the last {years} year(s)")
    return BirthdaysPlan(sampler=sampler, years=years, out=out, source=source)


def sample(plan: BirthdaysPlan) -> Any:
    """The fit's InferenceData."""
    from bayes_rbfn.workflows.birthdays import fit_birthdays

    return fit_birthdays(plan.sampler, years=plan.years)


@dataclass
class BirthdaysResults:
    """What the report, the CSV files and the plots show."""

    summary: Any  # pandas DataFrame
    convergence: Any  # diagnostics.ConvergenceReport
    loo: Any | None
    loo_note: str
    loo_r2: float


def summarise(plan: BirthdaysPlan, idata: Any) -> BirthdaysResults:
    """The report's contents: the summary, the convergence check, PSIS-LOO and LOO-R²."""
    from bayes_rbfn.infer.diagnostics import check_convergence, posterior_summary, psis_loo
    from bayes_rbfn.models.birthdays import HYPERPARAMETERS

    del plan
    names = list(HYPERPARAMETERS)
    loo, loo_note = psis_loo(idata)
    return BirthdaysResults(
        summary=posterior_summary(idata, names),
        convergence=check_convergence(idata, var_names=names),
        loo=loo,
        loo_note=loo_note,
        loo_r2=float(idata.log_likelihood.attrs["loo_r2"]),
    )


def predictions_frame(idata: Any) -> Any:
    """Per day: the date, births, and the posterior means of the fit and its components.

    The means are in relative births (1 = the average day; the effects as departures from it).
    """
    import numpy as np
    import pandas as pd

    attrs = idata.constant_data.attrs
    y_sd, y_mean = attrs["bayes_rbfn_y_sd"], attrs["bayes_rbfn_y_mean"]
    X = idata.constant_data["X"].values
    pred = idata.predictions
    mean = pred.mean(dim=("chain", "draw"))
    dow, doy = X[:, 1].astype(int), X[:, 2].astype(int)
    week = np.mean(np.exp(pred["week_trend"].values) * pred["weekday_effect"].values[..., dow], axis=(0, 1))
    day = mean["day_of_year_effect"].values[doy] + X[:, 3:6] @ mean["holiday_effect"].values
    trend, year = mean["trend"].values, mean["year"].values
    return pd.DataFrame(
        {
            "date": pd.to_datetime(idata.constant_data["date"].values).strftime("%Y-%m-%d"),
            "births": idata.constant_data["births"].values.round().astype(int),
            "relative": idata.observed_data["y"].values * y_sd + y_mean,
            "fit": (trend + year + week + day) * y_sd + y_mean,
            "trend": trend * y_sd + y_mean,
            "year": year * y_sd,
            "day_of_week": week * y_sd,
            "day_of_year": day * y_sd,
        }
    )


def write(
    plan: BirthdaysPlan,
    args: argparse.Namespace,
    idata: Any,
    results: BirthdaysResults,
    console: Any,
    start: float,
    sampling_seconds: float,
) -> None:
    """Write the output folder atomically (inference.nc, CSV files, plots, report) and print the report."""
    from bayes_rbfn import plots
    from bayes_rbfn.io.netcdf import write_inference_data
    from bayes_rbfn.io.output import atomic_output_dir
    from bayes_rbfn.models.birthdays import HYPERPARAMETERS

    console.say(f"Writing {plan.out} ...")
    with atomic_output_dir(plan.out, args.overwrite, protect=[]) as tmp:
        write_inference_data(idata, tmp / "inference.nc")
        results.summary.to_csv(tmp / "summary.csv", index_label="parameter")
        predictions_frame(idata).to_csv(tmp / "predictions.csv", index=False)
        files = ["inference.nc", "summary.csv"]
        if not args.no_plots:
            plots.plot_trace(idata, HYPERPARAMETERS, tmp / "trace.png")
            plots.plot_rank(idata, HYPERPARAMETERS, tmp / "rank.png")
            plots.plot_birthdays(idata, tmp / "birthdays.png")
            files += ["trace.png", "rank.png", "birthdays.png"]
        files += ["predictions.csv", "report.txt"]
        report = _report(plan, idata, results, files, time.perf_counter() - start, sampling_seconds)
        (tmp / "report.txt").write_text(report + "\n", encoding="utf-8")
    console.result(report)


def _report(
    plan: BirthdaysPlan,
    idata: Any,
    results: BirthdaysResults,
    files: list[str],
    total_seconds: float,
    sampling_seconds: float,
) -> str:
    import numpy as np

    s = plan.sampler
    n_days = idata.observed_data.sizes["day"]
    divergences = int(np.sum(idata.sample_stats["diverging"].values))
    saturated = int(np.sum(idata.sample_stats["n_steps"].values >= 2**s.max_tree_depth - 1))
    lines = [
        "bayes-rbfn fit: the Birthdays model (trend + year + day of week × exp(week trend) + day of year "
        "+ floating holidays)",
        f"Data: {plan.source} — {n_days:,} days; y = births relative to their mean, standardised",
        f"NUTS: {s.chains} chain(s) × {s.draws} draws after {s.warmup} warm-up, seed {s.seed}, start "
        f"{s.init}; sampling, LOO and components took {duration(sampling_seconds)}, total "
        f"{duration(total_seconds)}.",
        "",
        "Hyperparameters (posterior; standardised t and y):",
    ]
    table, _ = summary_table(results.summary)
    lines += ["  " + row for row in table.splitlines()]
    lines += ["", "Diagnostics: " + results.convergence.verdict()]
    lines.append(f"Divergent transitions: {divergences}; draws at the maximum tree depth: {saturated}.")
    if results.loo is not None:
        loo = results.loo
        k_high = int(np.sum(np.asarray(loo.pareto_k) > 0.7))
        lines.append(
            f"PSIS-LOO: elpd_loo = {loo.elpd:.1f} (se {loo.se:.1f}), "
            f"p_loo = {loo.p:.1f}; Pareto k̂ > 0.7 at {k_high} of {n_days} days. "
            f"LOO-R² = {results.loo_r2:.3f}."
        )
    if results.loo_note:
        lines.append(results.loo_note)
    descriptions = {
        "inference.nc": "ArviZ InferenceData (posterior, log_likelihood, predictions: the components, …)",
        "summary.csv": "hyperparameter summary (mean, sd, HDI, ESS, r_hat)",
        "trace.png": "MCMC trace plots",
        "rank.png": "rank plots (chain mixing)",
        "birthdays.png": "the case study's figure: day-of-year effects, trend, year, day of week",
        "predictions.csv": "per day: births, the fit and each component (relative births)",
        "report.txt": "this report",
    }
    lines += ["", f"Results in {plan.out}{os.sep}:"]
    lines += [f"  {name:<16} {descriptions[name]}" for name in files]
    return "\n".join(lines)
