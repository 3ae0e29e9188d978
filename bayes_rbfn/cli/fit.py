"""``bayes-rbfn fit``: fit a model of the collection to a CSV file or a packaged data set, write the results.

The results go to one output folder.

With no arguments it fits the main job's model (the DTC GP with a sampled linear mean and the trend + drift +
medium-term + seasonal ``co2`` kernel, calibrated by backtest) to the packaged Mauna Loa CO2 record and
writes ``inference.nc``, ``summary.csv``, trace and rank plots, the posterior predictive plot (reaching past
the end of the data), ``predictions.csv`` and ``report.txt``; with ``--test TEST.csv`` the predictions are
at the test rows and ``test_scores.csv`` holds their scores (:func:`bayes_rbfn.score`). The plan comes from
:mod:`bayes_rbfn.workflows.planning`, the fit from :func:`bayes_rbfn.fit`, the summaries from
:mod:`bayes_rbfn.infer`; this module parses, reports and draws.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bayes_rbfn.cli import distributed
from bayes_rbfn.cli.common import (
    PROG,
    Console,
    UserError,
    check_finite_scores,
    command,
    command_line,
    configure_jax,
    duration,
    quiet_libraries,
    summary_table,
)
from bayes_rbfn.cli.options import (
    DEFAULT_CHECKPOINT_EVERY,
    data_arguments,
    dataset_descriptions,
    fraction,
    iterations,
    kernel_arguments,
    likelihood_names,
    load_checked_data,
    mean_option,
    model_names,
    one_of,
    option_error,
    output_arguments,
    positive_int,
    sampler_arguments,
    sampler_settings,
    slug,
)
from bayes_rbfn.cli.resume import (
    check_resumable,
    failed,
    interrupted,
    partial_dir,
    resume_args,
    save_inducing,
    saved_inducing,
    saved_progress,
    start_partial,
)
from bayes_rbfn.defaults import (
    ACCELERATOR_INDUCING_WORK,
    ACCELERATOR_MAX_NUM_INDUCING,
    DEFAULT_NUM_INDUCING,
    DENSE_MASS_MAX_HYPERPARAMETERS,
    DENSE_MASS_MAX_PARAMS,
    EXACT_MAX_POINTS,
    INDUCING_WORK,
    MAX_NUM_INDUCING,
    SEVERAL_INPUTS_MODEL,
)
from bayes_rbfn.io.datasets import Dataset, dataset_defaults, default_dataset
from bayes_rbfn.io.reader import InputError
from bayes_rbfn.workflows import planning
from bayes_rbfn.workflows.planning import (
    DEFAULT_EXTEND,
    DEFAULT_GROUPED_MODEL,
    DEFAULT_KERNEL,
    DEFAULT_MODEL,
)

if TYPE_CHECKING:
    from bayes_rbfn.infer.sampler import SamplerSettings

__all__ = ["FitPlan", "FitResults", "plan_fit"]

#: Groups drawn in the predictive plot of grouped data.
MAX_GROUP_PANELS = 6


def _own(field: str) -> str:
    """``"dtc for --dataset co2; "``: the packaged data sets' own ``field`` of their defaults, for help."""
    own = {name: getattr(dataset_defaults(name), field) for name in dataset_descriptions()}
    return "".join(f"{value} for --dataset {name}; " for name, value in own.items() if value is not None)


def _fit_epilog() -> str:
    """The help's epilog: the models, kernels, likelihoods, data sets, output folder and exit status."""
    from bayes_rbfn.models import available_models
    from bayes_rbfn.models.families import FAMILIES
    from bayes_rbfn.models.likelihoods import LIKELIHOODS

    models = available_models()
    width = max(map(len, [*models, *FAMILIES, *LIKELIHOODS]))
    return (
        "models (--model):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in models.items())
        + "\n\nkernels (--kernel):\n"
        + "\n".join(f"  {name:<{width}}  {fam.description}" for name, fam in FAMILIES.items())
        + "\n\nlikelihoods (--likelihood; all but gaussian take --model rbfn only):\n"
        + "\n".join(f"  {name:<{width}}  {lik.description}" for name, lik in LIKELIHOODS.items())
        + "\n\ndata sets (--dataset):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in dataset_descriptions().items())
        + "\n\noutput folder (--out):\n"
        "  inference.nc     ArviZ's netCDF layout (either ArviZ line reads it): posterior,\n"
        "                   posterior_predictive (replicates of y), sample_stats, observed_data,\n"
        "                   constant_data, log_likelihood (LOO conditionals, or pointwise for a\n"
        "                   factorised likelihood), predictions (f_mean, f_var),\n"
        "                   predictions_constant_data (X_pred)\n"
        "  summary.csv      hyperparameter summary (mean, sd, HDI, ESS, r_hat)\n"
        "  trace.png        trace plots; rank.png  rank plots (chain mixing)\n"
        "  predictive.png   posterior predictive mean, 50% and 95% intervals of y* (of the rate or the\n"
        "                   probability for counts and labels), inducing inputs\n"
        "  predictions.csv  the predictive at the prediction inputs; report.txt  the printed report\n"
        "  test_scores.csv  with --test: RMSE, MAE, CRPS, log predictive density and coverage of the\n"
        "                   50/80/95% bands of y* on the test rows\n"
        "\nexit status: 0 done, 2 bad input (nothing written), 74 a file could not be written, 130\n"
        "interrupted, 143 terminated (SIGTERM); after 74, 130 and 143 the sampling is kept for --resume."
    )


def _fit_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``fit``'s options to ``parser``, in the order its help lists them, and its epilog."""
    parser.epilog = _fit_epilog()
    data_arguments(parser, default_dataset(), grouped=True)
    parser.add_argument(
        "--years",
        type=positive_int,
        metavar="N",
        help="--dataset birthdays: fit the last N years of the record only (default: all 20)",
    )
    _model_arguments(parser)
    sampler_arguments(parser)
    _output_arguments(parser)
    _backtest_arguments(parser)
    _test_arguments(parser)
    _resume_arguments(parser)


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``model`` group: the model, likelihood, mean, kernel, inducing inputs and their choice."""
    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        metavar="NAME",
        type=one_of("model", model_names),
        help=f"model (default {DEFAULT_MODEL}; {_own('model')}{DEFAULT_GROUPED_MODEL} for grouped "
        f"data; rbfn for a non-Gaussian --likelihood; for a CSV file with several --x columns exact up to "
        f"{EXACT_MAX_POINTS} rows, else {SEVERAL_INPUTS_MODEL}); listed below",
    )
    model.add_argument(
        "--likelihood",
        metavar="NAME",
        type=one_of("likelihood", likelihood_names),
        help="observation model (default: the data set's own — poisson for coal, bernoulli for "
        "breast_cancer — else gaussian); listed below",
    )
    model.add_argument(
        "--mean",
        metavar="MEAN",
        type=mean_option,
        default=None,
        help=f"prior mean of the latent f (default {_own('mean')}else constant): constant (the data's mean, "
        "not sampled), zero, linear (intercept and slopes sampled), or a number",
    )
    kernel_arguments(
        model,
        f"{_own('kernel')}else {DEFAULT_KERNEL}",
        _own("num_inducing")
        + f"min({DEFAULT_NUM_INDUCING}, distinct inputs) for one input or the rbfn model; with several "
        f"inputs the largest multiple of 32 up to {MAX_NUM_INDUCING} with N·M² ≤ {INDUCING_WORK:,}, at least "
        f"{DEFAULT_NUM_INDUCING} (on a GPU up to {ACCELERATOR_MAX_NUM_INDUCING} with N·M² ≤ "
        f"{ACCELERATOR_INDUCING_WORK:,})",
    )
    model.add_argument(
        "--inducing",
        choices=("kmeans", "greedy", "optimised"),
        default=None,
        help="how the inducing inputs are chosen: kmeans (the default), greedy (the hyperparameters at "
        "their type-II values on the VFE bound, then the points of largest conditional variance) or "
        "optimised (Z learned jointly with them on the VFE bound, by L-BFGS-B); held fixed while NUTS "
        "samples; gaussian likelihood, ungrouped models",
    )


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the output options (the shared ones, the prediction range, the plots) and the distributed ones."""
    output = output_arguments(parser)
    output.add_argument(
        "--x-pred-extend",
        type=fraction,
        default=DEFAULT_EXTEND,
        metavar="FRACTION",
        help="one input: predict this fraction of the input range past the end of the data "
        f"(default {DEFAULT_EXTEND})",
    )
    output.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")
    distributed.add_arguments(parser)


def _backtest_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``backtest`` group: ``--holdout-after`` or ``--holdout``, one of them."""
    backtest = parser.add_argument_group("backtest (one input column)")
    split = backtest.add_mutually_exclusive_group()
    split.add_argument(
        "--holdout-after",
        type=float,
        metavar="X",
        help="fit the data up to input X and score the forecast of the rest (backtest.csv)",
    )
    split.add_argument(
        "--holdout",
        type=fraction,
        metavar="FRACTION",
        help="fit all but the last FRACTION of the data by input and score the forecast of it",
    )


def _test_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``held-out test data`` group: ``--test``."""
    test = parser.add_argument_group("held-out test data")
    test.add_argument(
        "--test",
        metavar="TEST.csv",
        help="a CSV file with the same input and target columns (others are ignored), read as the data "
        "are (--strict, missing values): predict at its rows, in their order, instead of --x-pred-extend's "
        "grid, and score the predictive of y* there (test_scores.csv); gaussian likelihood, not with "
        "--holdout/--holdout-after or grouped data",
    )


def _resume_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``interrupted runs`` group: ``--checkpoint-every`` and ``--resume``."""
    resume = parser.add_argument_group("interrupted runs")
    resume.add_argument(
        "--checkpoint-every",
        type=iterations,
        default=DEFAULT_CHECKPOINT_EVERY,
        metavar="N",
        help="save the sampler's state and draws every N iterations into DIR.partial next to the output "
        f"folder, removed when the run completes (default {DEFAULT_CHECKPOINT_EVERY})",
    )
    resume.add_argument(
        "--resume",
        metavar="DIR",
        type=Path,
        help="continue an interrupted fit whose output folder was DIR (or give DIR.partial itself); "
        "takes no other option but --quiet: the run's own options are saved with it",
    )


@dataclass
class FitPlan:
    """Everything a fit needs, checked: the data, model, inducing and prediction inputs, sampler, output."""

    data: Dataset
    source: str
    model: str
    grouped: bool
    kernel: str
    Z: np.ndarray | None
    X_pred: np.ndarray
    group_pred: np.ndarray | None
    #: NUTS settings, the checkpoint folder (``OUT.partial/sampler``) among them.
    sampler: SamplerSettings
    out: Path
    notes: list[str] = field(default_factory=list)
    likelihood: str = "gaussian"
    mean: str | float = "constant"
    holdout_after: float | None = None
    holdout: float | None = None
    #: The backtest's held-out (x, y), or None.
    held_out: tuple[np.ndarray, np.ndarray] | None = None
    #: The test data of ``--test`` (the prediction inputs are its X), or None, and the file's name.
    test: Dataset | None = None
    test_source: str = ""
    #: How Z was chosen (``--inducing``); "" without inducing inputs.
    inducing: str = ""


def _model_for(args: argparse.Namespace, data: Dataset, notes: list[str]) -> tuple[Any, Any, str, Dataset]:
    """(likelihood, spec, mean, data) of a fit: the options' or the data set's defaults, checked together.

    Grouped data that an ungrouped model fits are pooled (with a note).
    """
    from bayes_rbfn.models import get_model
    from bayes_rbfn.models.likelihoods import get_likelihood

    likelihood = get_likelihood(args.likelihood or (data.likelihood if args.data is None else "gaussian"))
    packaged = data.name if args.data is None else ""
    model = args.model or planning.default_model(
        packaged,
        marginalisable=likelihood.marginalisable,
        grouped=data.group is not None,
        n_points=data.X.shape[0],
        n_inputs=data.X.shape[1],
    )
    spec = get_model(model)
    mean = args.mean or planning.default_mean(packaged, takes_linear_mean=spec.takes_linear_mean)
    try:
        spec.check_likelihood(likelihood.name)
    except ValueError as err:
        raise option_error(err) from None
    try:
        likelihood.check(data.y)
    except ValueError as err:
        raise UserError("--" + str(err)) from None
    if mean == "linear" and not spec.takes_linear_mean:
        raise UserError(f"--mean linear: the {model!r} model takes a constant mean only")
    if spec.grouped and data.group is None:
        raise UserError(
            f"--model {model} needs grouped data: give --group COL with a CSV file, or a grouped data set "
            "such as --dataset fertility"
        )
    if not spec.grouped and data.group is not None:
        if args.group is not None:
            raise UserError(
                f"--group needs a grouped model (--model {DEFAULT_GROUPED_MODEL}), not --model {model}"
            )
        notes.append(f"The data are grouped, but the {model!r} model pools every group into one fit.")
        data = planning.pool_groups(data)
    return likelihood, spec, mean, data


def _backtest_split(
    args: argparse.Namespace, data: Dataset, likelihood: Any
) -> tuple[np.ndarray, np.ndarray, Any]:
    """(the inputs and targets fitted, the held-out (x, y) or None) of ``--holdout-after`` / ``--holdout``."""
    from bayes_rbfn.infer.fitting import holdout_split

    if args.holdout_after is None and args.holdout is None:
        return data.X, data.y, None
    flag = "--holdout-after" if args.holdout_after is not None else "--holdout"
    if data.group is not None:
        raise UserError(f"{flag}: a backtest of grouped data is not supported; fit one group's CSV")
    if not likelihood.marginalisable:
        raise UserError(f"{flag}: the backtest scores need the gaussian likelihood")
    try:
        X_fit, y_fit, X_test, y_test = holdout_split(
            data.X, data.y, holdout_after=args.holdout_after, holdout=args.holdout
        )
    except ValueError as err:
        raise UserError(f"{flag}: " + str(err).split(": ", 1)[1]) from None
    return X_fit, y_fit, (X_test, y_test)


def plan_fit(args: argparse.Namespace, console: Console, kept_Z: np.ndarray | None = None) -> FitPlan:
    """Load and check everything, so that no user error can surface after sampling has started.

    ``kept_Z``: the learned inducing inputs a resumed run kept (:func:`saved_inducing`), taken instead of
    searching again.
    """
    del console
    if args.years is not None:
        raise UserError("--years: only --dataset birthdays takes it")
    data, source = load_checked_data(args)
    notes = [data.notes] if data.notes else []
    likelihood, spec, mean, data = _model_for(args, data, notes)
    model, packaged = spec.name, data.name if args.data is None else ""
    X_fit, y_fit, held_out = _backtest_split(args, data, likelihood)
    test = _load_test(args, data, likelihood, notes)
    kernel = args.kernel or planning.default_kernel(packaged)
    inducing = args.inducing or "kmeans"
    Z = _inducing_inputs(args, spec, likelihood, packaged, X_fit, y_fit, kernel, mean, kept_Z, notes)
    if not spec.uses_inducing and data.X.shape[0] > 3000:
        notes.append(
            f"The {model!r} model costs O(N³) per NUTS step; with N = {data.X.shape[0]:,} expect a long run."
        )
    X_pred, group_pred = _prediction_inputs(args, data, test)
    out = _prepare_output(args, data)
    _check_result_size(args, data, Z, X_pred, Path(out))
    return FitPlan(
        data=data,
        source=source,
        model=model,
        grouped=spec.grouped,
        kernel=kernel,
        Z=Z,
        inducing=inducing if Z is not None else "",
        X_pred=X_pred,
        group_pred=group_pred,
        sampler=_sampler_settings(args, packaged, Path(out)),
        out=Path(out),
        notes=notes,
        likelihood=likelihood.name,
        mean=mean,
        holdout_after=args.holdout_after,
        holdout=args.holdout,
        held_out=held_out,
        test=test,
        test_source="" if test is None else str(args.test),
    )


def _inducing_inputs(
    args: argparse.Namespace,
    spec: Any,
    likelihood: Any,
    packaged: str,
    X_fit: np.ndarray,
    y_fit: np.ndarray,
    kernel: str,
    mean: str | float,
    kept_Z: np.ndarray | None,
    notes: list[str],
) -> np.ndarray | None:
    """The plan's inducing inputs: the kept ones, else chosen from the fitted rows; None without any."""
    model, inducing = spec.name, args.inducing or "kmeans"
    Z = None
    if spec.uses_inducing and kept_Z is not None:
        if kept_Z.shape[1] != X_fit.shape[1]:
            raise UserError(
                f"--resume: the kept inducing inputs have {kept_Z.shape[1]} columns, not {X_fit.shape[1]}"
            )
        Z = kept_Z
    elif spec.uses_inducing:
        if inducing != "kmeans" and (not likelihood.marginalisable or spec.grouped):
            raise UserError(
                f"--inducing {inducing}: searches the VFE bound of a Gaussian GP; not for the {model!r} "
                f"model with the {likelihood.name!r} likelihood (use kmeans)"
            )
        default_M = planning.packaged_defaults(packaged).num_inducing
        try:  # a backtest chooses Z from the fitted rows
            Z = planning.choose_inducing(
                X_fit,
                args.num_inducing,
                default_M,
                args.seed,
                samples_weights=spec.samples_weights,
                method=inducing,
                y=y_fit,
                kernel=kernel,
                mean=mean if isinstance(mean, str) else "constant",
            )
        except ValueError as err:
            raise option_error(err) from None
    else:
        if args.num_inducing is not None:
            notes.append(f"The {model!r} model has no inducing inputs; --num-inducing is ignored.")
        if args.inducing is not None:
            notes.append(f"The {model!r} model has no inducing inputs; --inducing is ignored.")
    return Z


def _prediction_inputs(
    args: argparse.Namespace, data: Dataset, test: Dataset | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(X_pred, group_pred): the test rows of ``--test``, else the grid of ``--x-pred-extend``."""
    try:
        return (
            (test.X.copy(), None)
            if test is not None
            else planning.prediction_inputs(data, args.x_pred_extend)
        )
    except ValueError as err:
        raise option_error(err) from None


def _prepare_output(args: argparse.Namespace, data: Dataset) -> str | Path:
    """The output folder, checked writable; a refusal names an earlier run's kept sampling, if any."""
    from bayes_rbfn.io.output import default_output_dir, prepare_output_dir

    out = args.out if args.out is not None else default_output_dir(prefix=f"bayes_rbfn_{slug(data.name)}")
    try:
        prepare_output_dir(out, args.overwrite, protect=_inputs(args))
    except InputError as err:
        if saved_progress(partial_dir(Path(out))) is None:
            raise
        raise UserError(
            f"{err}. The sampling of an earlier run is kept in {partial_dir(Path(out))}: once the folder is "
            f"free, continue it with '{PROG} fit --resume {out}'"
        ) from None
    return out


def _sampler_settings(args: argparse.Namespace, packaged: str, out: Path) -> SamplerSettings:
    """The NUTS settings of the options, checkpointed into ``OUT.partial/sampler``."""
    return sampler_settings(
        args,
        max_tree_depth=planning.default_max_tree_depth(packaged),
        progress=not args.quiet,
        checkpoint=partial_dir(out) / "sampler",
        checkpoint_every=args.checkpoint_every,
    )


def _load_test(args: argparse.Namespace, data: Dataset, likelihood: Any, notes: list[str]) -> Dataset | None:
    """The held-out data of ``--test``, read and checked as the data are, or None without ``--test``.

    Read with the same columns and ``--strict``; rows with missing values are dropped and counted in
    ``notes``. Its input and target columns must lie within the scales float64 carries through the model,
    as the data's (:func:`bayes_rbfn.workflows.planning.check_data_scales`).

    Args:
        args: the parsed options of ``fit``.
        data: the data fitted.
        likelihood: the fit's likelihood.
        notes: the report's notes, appended to.

    Returns:
        The test data, or None.

    Raises:
        UserError: ``--test`` with options or data it does not go with, or a test file refused by the
            reader or the scale checks (the message starts with ``--test`` and the file's name).
    """
    from bayes_rbfn.io.reader import read_xy_csv

    if args.test is None:
        return None
    if args.holdout_after is not None or args.holdout is not None:
        flag = "--holdout-after" if args.holdout_after is not None else "--holdout"
        raise UserError(f"--test and {flag}: score either a test file or a backtest split, not both")
    if data.group is not None:
        raise UserError("--test: scoring grouped data on a test file is not supported; fit one group's CSV")
    if likelihood.name != "gaussian":
        raise UserError(f"--test: the test scores need the gaussian likelihood, not {likelihood.name}")
    try:
        test = read_xy_csv(
            args.test,
            data.x_names,
            data.y_name,
            strict=args.strict,
            min_rows=1,
            on_wait=Console().say,
            training=False,
        )
        planning.check_data_scales(test)
    except InputError as err:  # its message starts with the file's name
        raise UserError(f"--test {err}") from None
    except ValueError as err:
        raise UserError(f"--test {args.test}: {err}") from None
    if test.notes:
        notes.append(f"Test file: {test.notes}")
    if args.x_pred_extend != DEFAULT_EXTEND:
        notes.append("--x-pred-extend is ignored: the predictions are at the test inputs.")
    return test


@command(
    "fit",
    help="fit a model with NUTS and write the results folder",
    arguments=_fit_arguments,
    description=(
        "Fit a model of the collection with NUTS over its kernel hyperparameters, compute the analytic\n"
        "posterior predictive for every draw, and write the results folder.\n\n"
        "  bayes-rbfn fit                                  the packaged CO2 record (the default)\n"
        "  bayes-rbfn fit --dataset snelson                another packaged data set\n"
        "  bayes-rbfn fit DATA.csv --x t --y co2           your CSV file (one or more --x columns)\n"
        "  bayes-rbfn fit DATA.csv --x a b --y y --test TEST.csv   predict and score held-out rows\n"
        "  bayes-rbfn fit DATA.csv --x year --y rate --group country   hierarchical (grouped) model\n"
        "  bayes-rbfn fit part-{process}.csv --x a --y y --model sor --out run --coordinator host0:1234 \\\n"
        "      --num-processes 2 --process-id 0          one of several processes, each with its part"
    ),
)
def _run_fit(args: argparse.Namespace, console: Console) -> int:
    from bayes_rbfn.cli import birthdays
    from bayes_rbfn.io.output import output_lock, remove_leftovers

    if distributed.wanted(args):
        checks = distributed.SingleProcessChecks(_load_test, _inputs, _check_result_size)
        return distributed.run(args, console, checks)

    start = time.perf_counter()
    resuming = args.resume is not None
    if resuming:
        folder = args.resume
        partial, args = resume_args(args)
    configure_jax()
    job = birthdays if birthdays.wanted(args) else None
    with quiet_libraries():
        kept_Z = saved_inducing(partial) if resuming else None
        plan = plan_fit(args, console, kept_Z) if job is None else job.plan(args)
        # Held for the whole run: a second run on the same --out is refused at once, whatever it asks for.
        with output_lock(plan.out):
            if resuming:
                check_resumable(partial, folder, plan.out, args.overwrite)
            for path in remove_leftovers(plan.out, partial_dir(plan.out)):
                console.say(f"  note: removed {path}, left by a run that was killed")
            if not resuming:
                partial = partial_dir(plan.out)
                for note in start_partial(partial, args, plan.out):
                    console.say(f"  note: {note}")
                if getattr(plan, "inducing", "") in ("greedy", "optimised"):  # a learned Z (not Birthdays')
                    save_inducing(partial, plan.Z)
            try:
                if job is None:
                    _announce(plan, console)
                else:
                    console.say(f"Fitting the Birthdays model to the {plan.source} with NUTS ...")
                if resuming:
                    console.say(f"Resuming from {partial} ...")
                t_sample = time.perf_counter()
                idata = _sample(plan) if job is None else job.sample(plan)
                sampling_seconds = time.perf_counter() - t_sample
                console.say("Summarising: diagnostics, PSIS-LOO, predictive intervals ...")
                results = _summarise(plan, idata) if job is None else job.summarise(plan, idata)
                idata.posterior.attrs["bayes_rbfn_command"] = command_line(args)
                idata.posterior.attrs["bayes_rbfn_data"] = plan.source
                if getattr(plan, "inducing", ""):
                    idata.posterior.attrs["bayes_rbfn_inducing"] = plan.inducing
                if job is not None:
                    job.write(plan, args, idata, results, console, start, sampling_seconds)
                else:
                    if plan.test is not None:  # beside X_pred, so the scores can be recomputed from the file
                        import xarray as xr

                        idata.predictions_constant_data["y_test"] = xr.DataArray(plan.test.y, dims=("point",))
                    _write_outputs(plan, args, idata, results, console, start, sampling_seconds)
            except KeyboardInterrupt:
                raise interrupted(partial, plan.out, resuming) from None
            except BaseException as err:
                replacement = failed(partial, plan.out, resuming, err)
                if replacement is None:
                    raise
                raise replacement from err
            shutil.rmtree(partial, ignore_errors=True)
    return 0


def _check_result_size(
    args: argparse.Namespace, data: Dataset, Z: Any, X_pred: np.ndarray, out: Path
) -> None:
    """Refuse --draws/--chains whose draws cannot fit in memory or on the disk of --out.

    An estimate; on the disk, the results and the checkpoint in OUT.partial, which is removed only after
    them, less what an earlier run already saved there.
    """
    from bayes_rbfn.infer.checkpoint import checkpoint_bytes
    from bayes_rbfn.infer.failures import check_result_size, estimated_params, result_bytes
    from bayes_rbfn.infer.fitting import DEFAULT_PREDICTIVE_DRAWS
    from bayes_rbfn.io.output import free_space
    from bayes_rbfn.runtime import available_memory

    params = estimated_params(Z, data.X.shape[1])
    need = result_bytes(
        chains=args.chains,
        draws=args.draws,
        params=params,
        N=data.X.shape[0],
        S=X_pred.shape[0],
        replicates_per_chain=DEFAULT_PREDICTIVE_DRAWS,
    )
    checkpoint = checkpoint_bytes(
        chains=args.chains,
        draws=args.draws,
        warmup=args.warmup,
        params=params,
        checkpoint_every=args.checkpoint_every,
    )
    try:
        checkpoint -= sum(p.stat().st_size for p in partial_dir(out).rglob("*") if p.is_file())
    except OSError:  # unreadable: counted as empty
        pass
    free, where = free_space(out)
    try:
        check_result_size(need, available_memory())
        check_result_size(
            need + max(checkpoint, 0), free, what="disk space", where=f" in {where} (with the checkpoint)"
        )
    except ValueError as err:
        raise option_error(err) from None


def _inputs(args: argparse.Namespace) -> list[str]:
    """The user's files that an output folder must never replace."""
    return [path for path in (getattr(args, "data", None), getattr(args, "test", None)) if path]


def _mass_matrix(dense_mass: bool | None) -> str:
    if dense_mass is None:
        return (
            f"dense mass matrix up to {DENSE_MASS_MAX_PARAMS} sampled values "
            f"({DENSE_MASS_MAX_HYPERPARAMETERS} hyperparameters alone), else diagonal"
        )
    return "dense mass matrix" if dense_mass else "diagonal mass matrix"


def _announce(plan: FitPlan, console: Console) -> None:
    d = plan.data
    N = d.X.shape[0]
    console.say(
        f"Data: {plan.source} — {N:,} observations of {d.y_name} against {', '.join(d.x_names)}"
        + (f", {d.num_groups} groups" if d.group is not None else "")
    )
    for note in plan.notes:
        console.say(f"  note: {note}")
    how = {"kmeans": "k-means", "greedy": "greedy, at the type-II hyperparameters", "optimised": "optimised"}
    m = "" if plan.Z is None else f", M = {plan.Z.shape[0]} inducing inputs ({how[plan.inducing]})"
    lik = "" if plan.likelihood == "gaussian" else f", {plan.likelihood} likelihood"
    console.say(f"Model: {plan.model}, kernel {plan.kernel}{m}{lik}")
    from bayes_rbfn.infer.sampler import resolve_chain_method

    s = plan.sampler
    how = {"parallel": "in parallel", "vectorized": "vectorised", "sequential": "one after the other"}
    how = how[resolve_chain_method(s.chains, s.chain_method)] if s.chains > 1 else ""
    console.say(
        f"Sampling: {s.chains} chain(s) {how} × ({s.warmup} warm-up + {s.draws} draws), NUTS "
        f"target_accept {s.target_accept:g}, max tree depth {s.max_tree_depth}, "
        f"{_mass_matrix(s.dense_mass)}. "
        "Compiling first (faster on later runs: the compilation cache) ..."
    )


def _sample(plan: FitPlan) -> Any:
    from bayes_rbfn.infer.failures import DegenerateModelError, NonFiniteResultError
    from bayes_rbfn.infer.fitting import fit

    try:
        return _fit(fit, plan)
    except (DegenerateModelError, NonFiniteResultError) as err:
        raise UserError(str(err)) from None


def _fit(fit: Callable[..., Any], plan: FitPlan) -> Any:
    d = plan.data
    return fit(
        plan.model,
        d.X,
        d.y,
        Z=plan.Z,
        X_pred=plan.X_pred,
        kernel=plan.kernel,
        group=d.group,
        group_pred=plan.group_pred,
        likelihood=plan.likelihood,
        mean=plan.mean,
        check_diagnostics=False,
        coords={"input_dim": list(d.x_names)},
        holdout_after=plan.holdout_after,
        holdout=plan.holdout,
        sampler=plan.sampler,
    )


@dataclass
class FitResults:
    """What the report, the CSV files and the plots show."""

    hyperparameters: list[str]
    summary: Any  # pandas DataFrame
    convergence: Any  # diagnostics.ConvergenceReport
    loo: Any | None
    loo_note: str
    band: Any  # infer.predictive.Band
    saturated: int = 0
    collapsed: int = 0
    #: The backtest's scores (:func:`bayes_rbfn.infer.fitting.backtest_scores`), or None.
    backtest: dict | None = None
    #: The scores on the test data of ``--test`` (:func:`bayes_rbfn.infer.scores.score`), or None.
    test: dict | None = None


def _summarise(plan: FitPlan, idata: Any) -> FitResults:
    from bayes_rbfn.infer.diagnostics import check_convergence, posterior_summary, psis_loo
    from bayes_rbfn.infer.fitting import backtest_scores
    from bayes_rbfn.infer.predictive import band_of_the_mean, band_of_y
    from bayes_rbfn.infer.schema import hyperparameter_names
    from bayes_rbfn.infer.scores import score

    names = hyperparameter_names(idata)
    loo, loo_note = psis_loo(idata)
    band = band_of_y if plan.likelihood == "gaussian" else band_of_the_mean
    return FitResults(
        collapsed=_collapsed_points(plan, idata),
        saturated=_saturated(plan, idata),
        hyperparameters=names,
        summary=posterior_summary(idata, names),
        convergence=check_convergence(idata, var_names=names),
        loo=loo,
        loo_note=loo_note,
        band=band(idata, planning.INTERVALS),
        backtest=None if plan.held_out is None else backtest_scores(idata),
        test=None if plan.test is None else score(idata, plan.test.X, plan.test.y),
    )


def _saturated(plan: FitPlan, idata: Any) -> int:
    """Transitions that hit the maximum tree depth."""
    n_steps = np.asarray(idata.sample_stats["n_steps"].values) if "n_steps" in idata.sample_stats else None
    return 0 if n_steps is None else int(np.sum(n_steps >= 2**plan.sampler.max_tree_depth - 1))


def _collapsed_points(plan: FitPlan, idata: Any) -> int:
    """Prediction inputs where SoR/RBFN keep less than half the prior variance.

    The variance is the posterior mean over at most 200 draws; 0 for models whose predictive cannot
    collapse.
    """
    from bayes_rbfn.infer.collapse import COLLAPSE_THRESHOLD, variance_collapse
    from bayes_rbfn.models import get_model

    if not get_model(plan.model).variance_collapses or plan.Z is None or plan.Z.ndim != 2:
        return 0
    step = max(1, plan.sampler.chains * plan.sampler.draws // 200)
    lost = variance_collapse(idata.isel(draw=slice(None, None, step)), warn=False)
    return int(np.sum(lost > COLLAPSE_THRESHOLD))


def _predictions_frame(plan: FitPlan, results: FitResults) -> Any:
    import pandas as pd

    d = plan.data
    columns: dict[str, Any] = {name: plan.X_pred[:, j] for j, name in enumerate(d.x_names)}
    if plan.group_pred is not None and d.group_names is not None:
        columns["group"] = [d.group_names[g] for g in plan.group_pred]
    if plan.test is not None:
        columns["observed"] = plan.test.y
    columns["mean"] = results.band.mean
    columns["sd_f"] = results.band.sd_f
    columns["sd_y"] = results.band.sd_y
    for c in sorted(planning.INTERVALS, reverse=True):
        columns[f"lower{c:.0%}".replace("%", "")] = results.band.intervals[c][0]
    for c in sorted(planning.INTERVALS):
        columns[f"upper{c:.0%}".replace("%", "")] = results.band.intervals[c][1]
    if d.X.shape[1] == 1:
        if d.group is None:
            columns["beyond_data"] = plan.X_pred[:, 0] > d.X[:, 0].max()
        else:
            ends = np.array([d.X[d.group == g, 0].max() for g in range(d.num_groups)])
            assert plan.group_pred is not None
            columns["beyond_data"] = plan.X_pred[:, 0] > ends[plan.group_pred]
    return pd.DataFrame(columns)


def _draw_plots(folder: Path, plan: FitPlan, idata: Any, results: FitResults) -> list[str]:
    from bayes_rbfn import plots
    from bayes_rbfn.infer.predictive import Band

    d = plan.data
    written = []
    names = results.hyperparameters
    plots.plot_trace(idata, names, folder / "trace.png")
    written.append("trace.png")
    scalars = [n for n in names if idata.posterior[n].ndim == 2][:12]
    if scalars and idata.posterior.sizes["chain"] > 1:
        plots.plot_rank(idata, scalars, folder / "rank.png")
        written.append("rank.png")
    title = f"{d.name}: {plan.model} model, {plan.kernel} kernel — posterior predictive of {d.y_name}"
    y_label = d.y_name
    if d.X.shape[1] == 1 and d.group is None:
        fitted = (
            np.ones(d.y.size, bool) if plan.held_out is None else ~np.isin(d.X[:, 0], plan.held_out[0][:, 0])
        )
        plots.plot_predictive_1d(
            folder / "predictive.png",
            X=d.X[fitted],
            y=d.y[fitted],
            X_pred=plan.X_pred,
            band=results.band,
            Z=plan.Z,
            x_label=d.x_names[0],
            y_label=y_label,
            title=title,
            held_out=plan.held_out if plan.test is None else (plan.test.X, plan.test.y),
        )
    elif d.X.shape[1] == 1:
        assert d.group is not None and plan.group_pred is not None and d.group_names is not None
        shown = np.unique(np.round(np.linspace(0, d.num_groups - 1, min(MAX_GROUP_PANELS, d.num_groups))))
        panels = []
        for g in shown.astype(int):
            obs, pred = d.group == g, plan.group_pred == g
            band = Band(
                mean=results.band.mean[pred],
                intervals={c: (lo[pred], hi[pred]) for c, (lo, hi) in results.band.intervals.items()},
                quantity=results.band.quantity,
            )
            Zg = None if plan.Z is None else (plan.Z[g] if plan.Z.ndim == 3 else plan.Z)
            panels.append((d.group_names[g], d.X[obs], d.y[obs], plan.X_pred[pred], band, Zg))
        extra = f" ({len(panels)} of {d.num_groups} groups)" if len(panels) < d.num_groups else ""
        plots.plot_predictive_groups(
            folder / "predictive.png",
            panels=panels,
            x_label=d.x_names[0],
            y_label=y_label,
            title=title + extra,
        )
    else:
        shown = d if plan.test is None else plan.test
        plots.plot_predicted_vs_observed(
            folder / "predictive.png",
            X=shown.X,
            y=shown.y,
            band=results.band,
            Z=plan.Z,
            x_names=d.x_names,
            y_label=y_label,
            title=title,
            data_label="data" if plan.test is None else "test data",
        )
    written.append("predictive.png")
    return written


def _report(
    plan: FitPlan,
    results: FitResults,
    files: list[str],
    total_seconds: float,
    sampling_seconds: float,
) -> str:
    """The printed report of a fit: the run, the hyperparameters, the diagnostics, the scores, the files."""
    lines = _report_run(plan, total_seconds, sampling_seconds)
    lines += _report_posterior(plan, results)
    lines += _report_warnings(plan, results)
    lines += _report_scores(plan, results)
    lines += _report_files(plan, results, files)
    return "\n".join(lines)


def _report_run(plan: FitPlan, total_seconds: float, sampling_seconds: float) -> list[str]:
    """The report's opening lines: the model, the data and their notes, the sampler and the durations."""
    d = plan.data
    N, D = d.X.shape
    lines = [
        f"bayes-rbfn fit: {plan.model} model, {plan.kernel} kernel"
        + ("" if plan.Z is None else f", M = {plan.Z.shape[0]} inducing inputs")
        + ("" if plan.likelihood == "gaussian" else f", {plan.likelihood} likelihood")
        + ("" if plan.mean == "constant" else f", mean {plan.mean}"),
        f"Data: {plan.source} — {d.description}",
        f"      N = {N:,} observations, {D} input(s) ({', '.join(d.x_names)}), target {d.y_name}"
        + (f", {d.num_groups} groups" if d.group is not None else ""),
    ]
    lines += [f"      note: {note}" for note in plan.notes]
    lines += [
        f"NUTS: {plan.sampler.chains} chain(s) × {plan.sampler.draws} draws after {plan.sampler.warmup} "
        f"warm-up, seed {plan.sampler.seed}; "
        f"sampling and per-draw predictive took {duration(sampling_seconds)}, "
        f"total {duration(total_seconds)}.",
    ]
    return lines


def _report_posterior(plan: FitPlan, results: FitResults) -> list[str]:
    """The report's hyperparameter table and diagnostics, with the draws that hit the maximum tree depth."""
    lines = ["", "Hyperparameters (posterior; units of the data):"]
    table, hidden = summary_table(results.summary)
    lines += ["  " + row for row in table.splitlines()]
    if hidden:
        lines.append(f"  ... and {hidden} per-group rows: see summary.csv")
    lines += ["", "Diagnostics: " + results.convergence.verdict()]
    if results.saturated:
        total, depth = plan.sampler.chains * plan.sampler.draws, plan.sampler.max_tree_depth
        lines.append(
            f"{results.saturated} of {total} draws stopped at the maximum tree depth "
            f"{depth} (2^{depth} − 1 steps): the sampler explored less per draw "
            "than it wanted; raise --max-tree-depth if the ESS is low."
        )
    return lines


def _report_warnings(plan: FitPlan, results: FitResults) -> list[str]:
    """The report's warnings: a forecast past the last inducing input, a collapsed predictive variance."""
    from bayes_rbfn.models import get_model

    d, lines = plan.data, []
    one_input = plan.Z is not None and plan.Z.ndim == 2 and plan.Z.shape[1] == 1
    if one_input and get_model(plan.model).variance_collapses:
        last_z, last_x = float(plan.Z[:, 0].max()), float(plan.X_pred[:, 0].max())
        if last_x > last_z:
            lines.append(
                f"Forecast warning: the predictions reach {d.x_names[0]} = {last_x:g}, past the last "
                f"inducing input at {last_z:g}. The {plan.model} model loses prior variance there, so its "
                "band beyond it is too narrow to trust as a forecast (backtest it with --holdout-after)."
            )
    if results.collapsed:
        S = plan.X_pred.shape[0]
        lines.append(
            f"Variance collapse: at {results.collapsed} of {S} prediction inputs the {plan.model} predictive "
            "keeps less than half of the prior variance (they are far from the inducing inputs), so its "
            "bands there are too narrow; "
            + (
                "--model dtc or fitc keeps the prior variance."
                if plan.likelihood == "gaussian"
                else "add inducing inputs there (--num-inducing): only rbfn takes this likelihood."
            )
        )
    return lines


def _report_scores(plan: FitPlan, results: FitResults) -> list[str]:
    """The report's scores: PSIS-LOO and its note, the backtest's and the test data's."""
    d, lines = plan.data, []
    if results.loo is not None:
        loo = results.loo
        lines.append(f"PSIS-LOO: elpd_loo = {loo.elpd:.1f} (se {loo.se:.1f}), p_loo = {loo.p:.1f}.")
    if results.loo_note:
        lines.append(results.loo_note)
    if plan.held_out is not None:
        sc = results.backtest
        lines += [
            "",
            f"Backtest: fitted to {d.x_names[0]} ≤ {sc['holdout_after']:g}, scored on the {int(sc['n'])} "
            "held-out points after it (backtest.csv):",
            f"  95% band covers {sc['coverage_95']:.0%}, 80% band {sc['coverage_80']:.0%}, 50% band "
            f"{sc['coverage_50']:.0%} of them (a calibrated forecast: about 95%, 80%, 50%)",
            f"  MAE {sc['mae']:.4g}, CRPS {sc['crps']:.4g}, interval score (95%) "
            f"{sc['interval_score_95']:.4g}, log predictive density {sc['lpd']:.4g} per point",
        ]
    if plan.test is not None:
        sc = results.test
        lines += [
            "",
            f"Test data: file {plan.test_source}, {int(sc['n'])} rows scored (test_scores.csv; units of "
            "the data):",
            f"  RMSE {sc['rmse']:.4g}, MAE {sc['mae']:.4g}, CRPS {sc['crps']:.4g}, log predictive density "
            f"{sc['lpd']:.4g} per point",
            f"  95% band of y* covers {sc['coverage_95']:.0%}, 80% band {sc['coverage_80']:.0%}, 50% band "
            f"{sc['coverage_50']:.0%} of them (calibrated: about 95%, 80%, 50%)",
        ]
    return lines


def _report_files(plan: FitPlan, results: FitResults, files: list[str]) -> list[str]:
    """The report's closing lines: what the bands are of, and the files written with what each holds."""
    band, lines = results.band.quantity, []
    if band != "y*":
        lines.append(
            f"The bands in predictive.png and predictions.csv are of {band} of {plan.data.y_name} given the "
            "latent f (lower/upper, mean, sd_f); sd_y is the sd of a new observation. Posterior predictive "
            "replicates of y are in inference.nc (posterior_predictive)."
        )
    lines += ["", f"Results in {plan.out}{os.sep}:"]
    descriptions = {
        "inference.nc": "ArviZ InferenceData (posterior, posterior_predictive, log_likelihood, …)",
        "summary.csv": "hyperparameter summary (mean, sd, HDI, ESS, r_hat)",
        "trace.png": "MCMC trace plots",
        "rank.png": "rank plots (chain mixing)",
        "predictive.png": f"posterior predictive: mean, 50% and 95% intervals of {band}, inducing inputs",
        "predictions.csv": "the predictive at the prediction inputs (mean, sd, interval bounds)",
        "report.txt": "this report",
        "backtest.csv": "the backtest's scores on the held-out points",
        "test_scores.csv": "the scores on the test data (RMSE, MAE, CRPS, log density, coverage)",
    }
    lines += [f"  {name:<16} {descriptions.get(name, '')}" for name in files]
    return lines


def _write_outputs(
    plan: FitPlan,
    args: argparse.Namespace,
    idata: Any,
    results: FitResults,
    console: Console,
    start: float,
    sampling_seconds: float,
) -> None:
    from bayes_rbfn.io.netcdf import write_inference_data
    from bayes_rbfn.io.output import atomic_output_dir

    backtest = "--holdout-after" if plan.holdout_after is not None else "--holdout"
    check_finite_scores(results.backtest, f"{backtest}: the backtest's")
    check_finite_scores(results.test, f"--test {plan.test_source}: the")
    console.say(f"Writing {plan.out} ...")
    with atomic_output_dir(plan.out, args.overwrite, protect=_inputs(args)) as tmp:
        write_inference_data(idata, tmp / "inference.nc")
        results.summary.to_csv(tmp / "summary.csv", index_label="parameter")
        _predictions_frame(plan, results).to_csv(tmp / "predictions.csv", index=False)
        files = ["inference.nc", "summary.csv"]
        if plan.held_out is not None:
            import pandas as pd

            pd.DataFrame([results.backtest]).to_csv(tmp / "backtest.csv", index=False)
            files.append("backtest.csv")
        if plan.test is not None:
            import pandas as pd

            pd.DataFrame([results.test]).to_csv(tmp / "test_scores.csv", index=False)
            files.append("test_scores.csv")
        if not args.no_plots:
            files += _draw_plots(tmp, plan, idata, results)
        files += ["predictions.csv", "report.txt"]
        report = _report(plan, results, files, time.perf_counter() - start, sampling_seconds)
        (tmp / "report.txt").write_text(report + "\n", encoding="utf-8")
    console.result(report)
