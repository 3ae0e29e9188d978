"""``bayes-rbfn compare``: fit several models to the same data and compare them.

The comparison (PSIS-LOO, held-out density, predictive bands) is
:func:`bayes_rbfn.workflows.compare.compare_models`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bayes_rbfn.cli.common import (
    PROG,
    Console,
    UserError,
    command,
    command_line,
    configure_jax,
    duration,
    quiet_libraries,
)
from bayes_rbfn.cli.options import (
    data_arguments,
    fraction,
    kernel_arguments,
    load_data,
    model_names,
    one_of,
    option_error,
    output_arguments,
    sampler_arguments,
    sampler_settings,
    slug,
)
from bayes_rbfn.io.datasets import Dataset, default_dataset
from bayes_rbfn.workflows import planning
from bayes_rbfn.workflows.planning import DEFAULT_KERNEL

__all__ = ["ComparePlan", "convergence_lines", "plan_compare"]


#: ``bayes-rbfn compare`` defaults: the data set marked for it in :mod:`bayes_rbfn.io.datasets`.
DEFAULT_COMPARE_DATASET = default_dataset("compare")


DEFAULT_COMPARE_MODELS = ("exact", "sor", "dtc", "fitc", "vfe")


DEFAULT_COMPARE_INDUCING = 15


DEFAULT_TEST_FRACTION = 0.25


def _test_fraction(text: str) -> float:
    value = fraction(text)
    if not value < 1.0:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {value:g}")
    return value


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    from bayes_rbfn.models import available_models, get_model

    models = {name: text for name, text in available_models().items() if not get_model(name).grouped}
    width = max(map(len, models))
    parser.epilog = (
        "models (--models; grouped models cannot be compared here):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in models.items())
        + "\n\noutput folder (--out):\n"
        "  comparison.csv         ArviZ's compare table (PSIS-LOO) + held-out elpd, r_hat, divergences and\n"
        "                         the share of prediction points where the variance collapsed\n"
        "  comparison.png         the comparison plot, held-out elpd and each model's predictive band\n"
        "  inference_<model>.nc   each model's InferenceData (as written by 'bayes-rbfn fit')\n"
        "  report.txt             the printed report\n"
        "\nexit status: 0 done, 2 bad input (nothing written), 130 interrupted (nothing written)."
    )
    data_arguments(parser, DEFAULT_COMPARE_DATASET, grouped=False)
    model = parser.add_argument_group("models")
    model.add_argument(
        "--models",
        nargs="+",
        metavar="NAME",
        type=one_of("model", model_names),
        default=list(DEFAULT_COMPARE_MODELS),
        help=f"two or more models to fit and compare (default: {' '.join(DEFAULT_COMPARE_MODELS)})",
    )
    kernel_arguments(model, DEFAULT_KERNEL, f"min({DEFAULT_COMPARE_INDUCING}, distinct inputs)")
    model.add_argument(
        "--test-fraction",
        type=_test_fraction,
        default=DEFAULT_TEST_FRACTION,
        metavar="F",
        help="hold out this share of the rows for the held-out log predictive density; 0 for none "
        f"(default {DEFAULT_TEST_FRACTION})",
    )
    model.add_argument(
        "--split",
        choices=("random", "time"),
        default="random",
        help="which rows --test-fraction holds out: random (chosen with --seed; the default) or time (the "
        "last ones by the single input, to rank the models on forecasting)",
    )
    model.add_argument(
        "--ic",
        choices=("loo", "waic"),
        default="loo",
        help="information criterion of the table (default loo: PSIS-LOO; waic needs ArviZ 0.x)",
    )
    sampler_arguments(parser)
    output_arguments(parser)


@dataclass
class ComparePlan:
    """A checked ``bayes-rbfn compare`` run: data, split, models, shared inducing inputs, output."""

    data: Dataset
    source: str
    models: list[str]
    kernel: str
    Z: np.ndarray | None
    train: np.ndarray
    test: np.ndarray | None
    X_pred: np.ndarray
    out: Path
    notes: list[str] = field(default_factory=list)


def plan_compare(args: argparse.Namespace) -> ComparePlan:
    """Load and check everything before the first fit (no user error after sampling has started)."""
    from bayes_rbfn.io.arviz_compat import WAIC_AVAILABLE
    from bayes_rbfn.io.output import default_output_dir, prepare_output_dir
    from bayes_rbfn.models import get_model

    if args.ic == "waic" and not WAIC_AVAILABLE:
        raise UserError("--ic: WAIC is gone from ArviZ 1.x, which this environment has; use --ic loo")
    data, source = load_data(args, DEFAULT_COMPARE_DATASET)
    try:
        planning.check_data_scales(data)
    except ValueError as err:
        raise UserError(f"{source}: {err}") from None
    notes = [data.notes] if data.notes else []
    models = list(dict.fromkeys(args.models))
    if len(models) < 2:
        raise UserError(f"--models: give at least two different models to compare, got {' '.join(models)}")
    grouped = [m for m in models if get_model(m).grouped]
    if grouped:
        raise UserError(
            f"--models: grouped models cannot be compared ({', '.join(grouped)}); use '{PROG} fit'"
        )
    if data.group is not None:
        notes.append("The data are grouped; every model pools the groups into one fit.")
    try:
        train, test = planning.train_test_split(data.X, args.test_fraction, split=args.split, seed=args.seed)
    except ValueError as err:
        raise option_error(err) from None
    X_train = data.X[train]
    if "exact" in models and X_train.shape[0] > 3000:
        notes.append(
            f"The exact GP costs O(N³) per NUTS step; with N = {X_train.shape[0]:,} expect a long run."
        )
    Z = None
    if any(get_model(m).uses_inducing for m in models):
        try:
            Z = planning.choose_inducing(X_train, args.num_inducing, DEFAULT_COMPARE_INDUCING, args.seed)
        except ValueError as err:
            raise option_error(err) from None

    if data.X.shape[1] == 1:
        X_pred = data.X_test if data.X_test is not None else planning.prediction_inputs(data, 0.1)[0]
        if test is not None:  # held-out inputs among X_pred: elpd_test reuses the stored predictions
            X_pred = np.unique(np.concatenate([X_pred, data.X[test]]), axis=0)
    else:
        X_pred = data.X if test is None else data.X[test]
    out = (
        args.out
        if args.out is not None
        else default_output_dir(prefix=f"bayes_rbfn_compare_{slug(data.name)}")
    )
    prepare_output_dir(out, args.overwrite, protect=[args.data] if args.data else [])
    return ComparePlan(
        data=data,
        source=source,
        models=models,
        kernel=args.kernel or DEFAULT_KERNEL,
        Z=Z,
        train=train,
        test=test,
        X_pred=np.asarray(X_pred, dtype=np.float64),
        out=Path(out),
        notes=notes,
    )


@command(
    "compare",
    help="fit several models to the same data and compare them (PSIS-LOO, held-out density)",
    arguments=_compare_arguments,
    description=(
        "Fit several models of the collection to the same data (same inducing inputs, seed and priors)\n"
        "and compare them: ArviZ's compare table over the stored leave-one-out conditionals (PSIS-LOO),\n"
        "the held-out log predictive density on a random test split, and each model's predictive band.\n\n"
        "  bayes-rbfn compare                                 exact, sor, dtc, fitc, vfe on Snelson\n"
        "  bayes-rbfn compare --models sor fitc --num-inducing 8   fewer models and inducing inputs\n"
        "  bayes-rbfn compare DATA.csv --x t --y v --test-fraction 0.2"
    ),
)
def _run_compare(args: argparse.Namespace, console: Console) -> int:
    from bayes_rbfn.gp.sparse import VarianceCollapseWarning
    from bayes_rbfn.io.netcdf import write_inference_data
    from bayes_rbfn.io.output import atomic_output_dir, output_lock, remove_leftovers
    from bayes_rbfn.workflows.compare import compare_models

    start = time.perf_counter()
    configure_jax()
    with quiet_libraries(), contextlib.ExitStack() as stack:
        plan = plan_compare(args)
        stack.enter_context(output_lock(plan.out))
        remove_leftovers(plan.out)
        d = plan.data
        console.say(
            f"Data: {plan.source} — {len(plan.train):,} training rows"
            + ("" if plan.test is None else f", {len(plan.test):,} held out (--test-fraction)")
        )
        for note in plan.notes:
            console.say(f"  note: {note}")
        m = "" if plan.Z is None else f", M = {plan.Z.shape[0]} shared inducing inputs (k-means)"
        console.say(f"Models: {', '.join(plan.models)}; kernel {plan.kernel}{m}")

        def announce(name: str, index: int, total: int) -> None:
            console.say(
                f"[{index + 1}/{total}] fitting {name}: {args.chains} chain(s) × "
                f"({args.warmup} warm-up + {args.draws} draws) ..."
            )

        held_out = {} if plan.test is None else {"X_test": d.X[plan.test], "y_test": d.y[plan.test]}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            comparison = compare_models(
                plan.models,
                d.X[plan.train],
                d.y[plan.train],
                X_pred=plan.X_pred,
                Z=plan.Z,
                ic=args.ic,
                on_fit=announce,
                kernel=plan.kernel,
                check_diagnostics=False,
                sampler=sampler_settings(
                    args, max_tree_depth=planning.DEFAULT_MAX_TREE_DEPTH, progress=not console.quiet
                ),
                **held_out,
            )
        collapse = sorted({str(w.message) for w in caught if issubclass(w.category, VarianceCollapseWarning)})
        report = _compare_report(plan, args, comparison, collapse, time.perf_counter() - start)
        console.say(f"Writing {plan.out} ...")
        with atomic_output_dir(plan.out, args.overwrite, protect=[args.data] if args.data else []) as tmp:
            comparison.table.to_csv(tmp / "comparison.csv", index_label="model")
            comparison.plot(tmp / "comparison.png")
            for name, idata in comparison.idatas.items():
                idata.posterior.attrs["bayes_rbfn_command"] = command_line(args)
                idata.posterior.attrs["bayes_rbfn_data"] = plan.source
                write_inference_data(idata, tmp / f"inference_{name}.nc")
            (tmp / "report.txt").write_text(report + "\n", encoding="utf-8")
    console.result(report)
    return 0


def _compare_report(
    plan: ComparePlan, args: argparse.Namespace, comparison: Any, collapse: list[str], seconds: float
) -> str:
    d = plan.data
    table = comparison.table
    ic = comparison.ic
    columns = [
        c
        for c in (
            "rank",
            f"elpd_{ic}",
            "se",
            "elpd_diff",
            "dse",
            f"p_{ic}",
            "weight",
            "elpd_test",
            "elpd_test_se",
            "r_hat",
            "divergences",
            "collapsed_points",
        )
        if c in table and not (c.startswith("elpd_test") and plan.test is None)
    ]
    lines = [
        f"bayes-rbfn compare: {', '.join(plan.models)}; {plan.kernel} kernel"
        + ("" if plan.Z is None else f", M = {plan.Z.shape[0]} shared inducing inputs"),
        f"Data: {plan.source} — {d.description}",
        f"      {len(plan.train):,} training rows"
        + (
            ""
            if plan.test is None
            else f", {len(plan.test):,} held out (--test-fraction {args.test_fraction:g}, "
            + (f"seed {args.seed})" if args.split == "random" else "the last by input: --split time)")
        ),
    ]
    lines += [f"      note: {note}" for note in plan.notes]
    lines += [
        f"NUTS: {args.chains} chain(s) × {args.draws} draws after {args.warmup} warm-up per model; "
        f"total {duration(seconds)}.",
        "",
        f"Ranked by PSIS-{ic.upper()} (elpd: expected log predictive density, higher is better):",
    ]
    text = table[columns].to_string(float_format=lambda v: f"{v:.4g}")
    lines += ["  " + row for row in text.splitlines()]
    lines += [
        "",
        f"How to read it: elpd_{ic} scores each model's fit to the training data (models with the same "
        "marginal likelihood — sor, dtc, asor — tie); elpd_test scores the predictive on held-out rows, "
        "which is where the approximations differ. collapsed_points is the share of prediction inputs "
        "where the model's predictive variance has lost most of the prior variance (SoR and the RBFN far "
        "from Z).",
    ]
    lines += convergence_lines(table)
    lines += [f"Warning: {message}" for message in collapse]
    lines += ["", f"Results in {plan.out}{os.sep}:"]
    lines += [
        "  comparison.csv   the table above (all of ArviZ's columns)",
        "  comparison.png   comparison plot, held-out elpd and each model's predictive band",
    ]
    lines += [f"  inference_{n}.nc  InferenceData of the {n} fit" for n in plan.models]
    lines.append("  report.txt       this report")
    return "\n".join(lines)


def convergence_lines(table: Any) -> list[str]:
    """The report's lines on convergence, from a comparison table's ``r_hat`` and ``divergences`` columns.

    Names the fits with r_hat above :data:`~bayes_rbfn.infer.diagnostics.RHAT_MAX` or any divergence, and
    those whose r_hat is NaN (unknown: one chain gives none) as unchecked; says "every fit has r_hat ≤ …"
    only when every r_hat is known and below the bound.

    Args:
        table: the :class:`~bayes_rbfn.workflows.compare.Comparison` table (index: model names).

    Returns:
        One or two lines, each starting with "Convergence:".
    """
    from bayes_rbfn.infer.diagnostics import RHAT_MAX

    rhat = {n: float(table.loc[n, "r_hat"]) for n in table.index}
    diverged = {n: table.loc[n, "divergences"] > 0 for n in table.index}
    bad = [n for n in table.index if rhat[n] > RHAT_MAX or diverged[n]]
    unknown = [n for n in table.index if np.isnan(rhat[n])]
    lines = []
    if bad:
        lines.append(
            f"Convergence: check {', '.join(bad)} (r_hat > {RHAT_MAX} or divergences); raise "
            "--draws/--warmup or --target-accept and run again before trusting the ranking."
        )
    if unknown:
        lines.append(
            f"Convergence: r_hat unknown for {', '.join(unknown)} (it needs two or more chains): whether "
            "the chains agree is not checked; run --chains 2 or more to check it."
        )
    known = [n for n in table.index if n not in unknown]
    if not bad and not unknown:
        lines.append(f"Convergence: every fit has r_hat ≤ {RHAT_MAX} and no divergences.")
    elif not bad:
        checked = f"; r_hat ≤ {RHAT_MAX} for {', '.join(known)}" if known else ""
        lines.append(f"Convergence: no divergences{checked}.")
    return lines
